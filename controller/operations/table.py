"""The reaction table: each failure's reaction plan, made before the failure happens.

DESIGN.md, "Operational state and failure reaction"; issue 30's fast path. After
every commit the leader plans, in the background, the active revision around each
scenario of its failure-tolerance scope (the declared failure domains, and every
single link and device under ``all_single``: :func:`safety.scenarios.scenarios`)
and judges each reaction plan against the plan in force under the same failure
(:func:`controller.operations.reaction.judge`). A reaction then looks its plan
and verdict up instead of solving them; the plan a reaction change commits, its
drift checks and its reviews are read from the same table
(:mod:`controller.workflow.plans`).

Entries are keyed by what a revision plans as (its content and address pins,
:func:`controller.store.repo.revision_identity`, not its number) and by the
overlay (:meth:`Overlay.key`), in the overlay's normal form: a failed device's
links are implied by the device (:func:`controller.operations.overlay.normal`), as in a scenario. The table
holds the precomputed entries of one revision (the newest precomputation) and a
few solved on demand; it is per process (a new leader precomputes again).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from controller.model import Intent
from controller.model.documents import ReactionTableDocument
from controller.model.plan import Plan
from controller.operations.overlay import Overlay
from controller.operations.reaction import Judgement

__all__ = ["TABLE", "Reaction", "ReactionTable"]

TableState = Literal["idle", "building", "ready", "partial", "stopped"]


@dataclass
class _Status:
    """One revision's precomputation, as it goes (``t0``: when it began, monotonic)."""

    state: TableState
    revision: int
    scenarios: int
    t0: float
    ready: int = 0
    failed: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Reaction:
    """A reaction plan: the intent without the overlay's parts and its plan; ``judgement`` against the full
    plan under the same failure (precomputed entries), ``seconds`` it took to make."""

    intent: Intent
    plan: Plan
    judgement: Judgement | None = None
    seconds: float = 0.0


class ReactionTable:
    """Thread-safe: the background precomputation writes it, reactions and commits read it. The
    precomputed entries and the status are kept per revision identity (the newest few: a process that
    serves several stores, as tests do, keeps each one's)."""

    def __init__(self, extra: int = 64, revisions: int = 4):
        self._lock = threading.Lock()
        self._fixed: OrderedDict[str, dict[str, Reaction]] = OrderedDict()  # identity -> overlay key -> entry
        self._status: dict[str, _Status] = {}
        self._run: dict[str, int] = {}  # identity -> the precomputation allowed to write its entries
        self._runs = 0
        self._revisions = revisions
        self._extra: OrderedDict[tuple[str, str], Reaction] = OrderedDict()  # solved on demand, newest last
        self._extra_max = extra

    def get(self, identity: str, overlay: Overlay) -> Reaction | None:
        key = overlay.key()
        with self._lock:
            got = self._fixed.get(identity, {}).get(key)
            if got is not None:
                return got
            got = self._extra.get((identity, key))
            if got is not None:
                self._extra.move_to_end((identity, key))
            return got

    def put(self, identity: str, overlay: Overlay, reaction: Reaction, *, run: int | None = None) -> None:
        """An entry solved on demand, or (``run``: :meth:`begin`'s number) precomputed by that run."""
        with self._lock:
            if run is None:
                self._extra[(identity, overlay.key())] = reaction
                while len(self._extra) > self._extra_max:
                    self._extra.popitem(last=False)
            elif self._run.get(identity) == run:  # else a newer run of this revision took over
                fixed = self._fixed[identity]
                fixed[overlay.key()] = reaction
                st = self._status[identity]
                st.ready = len(fixed)
                st.seconds = round(time.monotonic() - st.t0, 3)

    def begin(self, identity: str, revision: int, scenarios: int) -> int:
        """A precomputation of the scope's ``scenarios`` starts for ``revision``; its run number."""
        with self._lock:
            self._runs += 1
            self._run[identity] = self._runs
            self._fixed[identity] = {}
            self._fixed.move_to_end(identity)
            self._status[identity] = _Status("building", revision, scenarios, time.monotonic())
            while len(self._fixed) > self._revisions:
                old, _ = self._fixed.popitem(last=False)
                self._status.pop(old, None)
                self._run.pop(old, None)
            return self._runs

    def failed(self, identity: str, run: int) -> None:
        """One scenario could not be planned around (its reaction is solved, and refused, when it happens)."""
        with self._lock:
            if self._run.get(identity) == run:
                self._status[identity].failed += 1

    def finish(self, identity: str, run: int, state: TableState = "ready") -> None:
        with self._lock:
            if self._run.get(identity) == run:
                st = self._status[identity]
                st.state = state
                st.seconds = round(time.monotonic() - st.t0, 3)

    def forget(self, identity: str) -> None:
        """No table for this revision (its failure reaction is off)."""
        with self._lock:
            self._fixed.pop(identity, None)
            self._status.pop(identity, None)
            self._run.pop(identity, None)

    def status(self, identity: str | None, revision: int | None = None) -> ReactionTableDocument:
        """The precomputation of the revision ``identity`` names (idle when none was precomputed)."""
        with self._lock:
            st = self._status.get(identity or "")
            if st is None:
                return ReactionTableDocument(state="idle", revision=revision)
            return ReactionTableDocument(state=st.state, revision=st.revision, scenarios=st.scenarios,
                                         ready=st.ready, failed=st.failed, seconds=st.seconds)


#: this process's table
TABLE = ReactionTable()
