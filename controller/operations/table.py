"""The reaction table: each failure's reaction plan, made before the failure happens.

DESIGN.md, "Operational state and failure reaction"; issue 30's fast path. After
every commit the leader plans, in the background, the active revision around each
scenario of its failure-tolerance scope (the declared failure domains, and every
single link and device under ``all_single``: :func:`safety.scenarios.scenarios`)
and judges each reaction plan against the plan in force under the same failure
(:func:`controller.operations.reaction.judge`). A reaction then looks its plan
and verdict up instead of solving them; the plan a reaction change commits, its
drift checks and its reviews are read from the same table
(:func:`controller.workflow.changes.plan_for`).

Entries are keyed by what a revision plans as (its content and address pins,
:func:`controller.store.repo.revision_identity`, not its number) and by the
overlay (:meth:`Overlay.key`), in the overlay's normal form: a failed device's
links are implied by the device (:func:`normal`), as in a scenario. The table
holds the precomputed entries of one revision (the newest precomputation) and a
few solved on demand; it is per process (a new leader precomputes again).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controller.model import Intent
from controller.model.plan import Plan
from controller.operations.overlay import Overlay
from controller.operations.reaction import Judgement

__all__ = ["TABLE", "Reaction", "ReactionTable", "normal"]


def normal(overlay: Overlay, ends: Iterable[tuple[str, str, str]]) -> Overlay:
    """``overlay`` without the links of its own devices (``ends``: each link's id and its two devices)."""
    if not overlay.devices or not overlay.links:
        return overlay
    implied = {lid for lid, a, b in ends if lid in overlay.links and (a in overlay.devices or b in overlay.devices)}
    return Overlay(overlay.links - implied, overlay.devices) if implied else overlay


@dataclass(frozen=True)
class Reaction:
    """A reaction plan: the intent without the overlay's parts and its plan; ``judgement`` against the full
    plan under the same failure (precomputed entries), ``seconds`` it took to make."""

    intent: Intent
    plan: Plan
    judgement: Judgement | None = None
    seconds: float = 0.0


class ReactionTable:
    """Thread-safe: the background precomputation writes it, reactions and commits read it."""

    def __init__(self, extra: int = 64):
        self._lock = threading.Lock()
        self._identity: str | None = None  # the revision whose precomputed entries are held
        self._fixed: dict[str, Reaction] = {}
        self._extra: OrderedDict[tuple[str, str], Reaction] = OrderedDict()  # solved on demand, newest last
        self._extra_max = extra
        self._status: dict[str, Any] = {"state": "idle"}

    def get(self, identity: str, overlay: Overlay) -> Reaction | None:
        key = overlay.key()
        with self._lock:
            if identity == self._identity and key in self._fixed:
                return self._fixed[key]
            got = self._extra.get((identity, key))
            if got is not None:
                self._extra.move_to_end((identity, key))
            return got

    def put(self, identity: str, overlay: Overlay, reaction: Reaction, *, precomputed: bool = False) -> None:
        with self._lock:
            if precomputed:
                if identity != self._identity:
                    return  # a newer precomputation took the table over
                self._fixed[overlay.key()] = reaction
                self._status["ready"] = len(self._fixed)
                self._status["seconds"] = round(time.monotonic() - self._status["_t0"], 3)
                return
            self._extra[(identity, overlay.key())] = reaction
            while len(self._extra) > self._extra_max:
                self._extra.popitem(last=False)

    def begin(self, identity: str, revision: int, scenarios: int) -> None:
        """A precomputation of the scope's ``scenarios`` starts for ``revision``."""
        with self._lock:
            self._identity, self._fixed = identity, {}
            self._status = {"state": "building", "revision": revision, "scenarios": scenarios, "ready": 0,
                            "failed": 0, "seconds": 0.0, "_t0": time.monotonic()}

    def failed(self, identity: str) -> None:
        """One scenario could not be planned around (its reaction is solved, and refused, when it happens)."""
        with self._lock:
            if identity == self._identity:
                self._status["failed"] += 1

    def finish(self, identity: str, state: str = "ready") -> None:
        with self._lock:
            if identity == self._identity:
                self._status["state"] = state
                self._status["seconds"] = round(time.monotonic() - self._status["_t0"], 3)

    def clear(self) -> None:
        with self._lock:
            self._identity, self._fixed, self._status = None, {}, {"state": "idle"}
            self._extra.clear()

    @property
    def identity(self) -> str | None:
        return self._identity

    def status(self) -> dict[str, Any]:
        """``{"state": "idle" | "building" | "ready" | "partial" | "stopped", "revision", "scenarios", "ready",
        "failed", "seconds"}`` (:class:`controller.model.documents.ReactionTableDocument`)."""
        with self._lock:
            return {k: v for k, v in self._status.items() if not k.startswith("_")}


#: this process's table
TABLE = ReactionTable()
