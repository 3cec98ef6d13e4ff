"""Failure reaction: the leader re-plans around failed parts by itself, and brings the full plan back.

DESIGN.md, "Operational state and failure reaction". Policy
``{kind: failure_reaction, enabled, detect_s, hold_down_s, max_per_hour}`` (in
force with its defaults when absent). Each tick, on the operational view:

* the **desired overlay** (:class:`Damping`) holds every link down, and every
  device failed, for ``detect_s`` or more, and every part of the overlay in
  force that has not yet been healthy for its hold-down: ``hold_down_s``,
  doubled for each time it went down in the last hour beyond the first (a
  part that flaps is held down longer each time), at most an hour;
* when it differs from the overlay in force and no commit is running (a commit
  in progress finishes or rolls back first), the active revision is planned
  without the desired overlay's parts (:mod:`controller.workflow.plans`),
  and :func:`judge` replays both that plan on the degraded fabric and the plan in
  force under the same failure. The reaction is committed when it is safe, or
  no worse than leaving the plan in force (less traffic lost, no more loops, no
  higher utilization): a change of kind ``reaction`` by ``failover`` that
  carries the overlay and a trigger, through the normal transaction; the intent
  and its revisions are untouched. The verdict is recorded either way (an
  event, the audit log); at most ``max_per_hour`` reactions an hour.

A leader killed mid-reaction leaves a committing change like any other, which
the next leader recovers with the change's overlay.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from controller.model import FailureReactionPolicy, Intent
from controller.model.documents import JsonObject
from controller.model.plan import Plan
from controller.operations.overlay import Overlay, normal
from controller.operations.view import OperationalView
from controller.store.workflow_repo import CommitBusy
from safety.direct import replay_scenario
from safety.replay import Replayer
from safety.report import StageResult
from safety.scenarios import Scenario

__all__ = ["DEFAULT_POLICY", "REPLAYERS", "Damping", "FailureReaction", "Judgement", "Reactor", "ReplayerCache", "Seen",
           "judge", "plan_fingerprint", "replay_key"]

log = logging.getLogger("loom.operations.reaction")
DEFAULT_POLICY = FailureReactionPolicy.model_validate({"kind": "failure_reaction"})
HOUR_S = 3600.0
RETRY_S, RETRY_MAX_S = 2.0, 300.0
AUTHOR = "failover"


# -- damping (pure) -------------------------------------------------------------------------------------
@dataclass
class Damping:
    """Per part (a link id, or ``device:NAME``): when it went down in the last hour, and since when it is
    healthy again; decides the overlay a fabric should run with (see the module docstring)."""

    downs: dict[str, deque[float]] = field(default_factory=dict)
    healthy_since: dict[str, float] = field(default_factory=dict)
    _down_now: set[str] = field(default_factory=set)

    def observe(self, failed: Mapping[str, float], watched: frozenset[str], healthy: Callable[[str], bool],
                now: float) -> None:
        """``failed``: every part failed now, with the time it went down; ``watched``: the parts of the overlay
        in force, whose health (``healthy(part)``: up, not merely not down) starts their hold-down."""
        for part, since in failed.items():
            if part not in self._down_now:
                self.downs.setdefault(part, deque()).append(since)
        self._down_now = set(failed)
        for part in set(self.healthy_since) | watched:
            if part in failed or not healthy(part):
                self.healthy_since.pop(part, None)
            elif part in watched:
                self.healthy_since.setdefault(part, now)
            else:
                self.healthy_since.pop(part, None)
        for q in self.downs.values():
            while q and now - q[0] > HOUR_S:
                q.popleft()

    def hold_s(self, part: str, hold_down_s: float) -> float:
        """The part's hold-down: doubled for each down in the last hour beyond the first, at most an hour."""
        n = len(self.downs.get(part, ()))
        return float(min(HOUR_S, hold_down_s * 2 ** max(0, n - 1)))

    def desired(self, failed: Mapping[str, float], in_force: frozenset[str], policy: FailureReactionPolicy,
                now: float) -> frozenset[str]:
        """The parts to leave out: failed for ``detect_s``, or in force and not yet healthy for their hold-down."""
        out = {p for p, since in failed.items() if now - since >= policy.detect_s}
        for p in in_force:
            since = self.healthy_since.get(p)
            if p in failed or since is None or now - since < self.hold_s(p, policy.hold_down_s):
                out.add(p)
        return frozenset(out)


def parts_of(overlay: Overlay) -> frozenset[str]:
    return frozenset(overlay.links) | frozenset(f"device:{d}" for d in overlay.devices)


def implied_links_out(parts: frozenset[str], view: OperationalView) -> frozenset[str]:
    """``parts`` without the links of its failed devices: a failed device implies its links (as in a
    scenario, :func:`controller.operations.overlay.normal`), so that a device's failure is one overlay whether
    or not its links were seen down too."""
    def ends_of(lid: str) -> tuple[str, str] | None:
        link = view.links.get(lid)
        return (link.a, link.b) if link is not None else None
    return parts_of(normal(overlay_of(parts), ends_of))


def overlay_of(parts: frozenset[str]) -> Overlay:
    return Overlay(frozenset(p for p in parts if not p.startswith("device:")),
                   frozenset(p.removeprefix("device:") for p in parts if p.startswith("device:")))


# -- judging (pure) -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Judgement:
    verdict: str  # safe | no_worse | worse
    current: dict[str, float]
    reaction: dict[str, float]

    @property
    def commit(self) -> bool:
        return self.verdict in ("safe", "no_worse")


def _figures(stage: StageResult) -> dict[str, float]:
    return {"dropped_gbps": round(stage.dropped_gbps, 6), "loops": float(len(stage.loops)),
            "max_utilization": round(stage.max_utilization, 6)}


def plan_fingerprint(plan: Plan) -> tuple[object, ...]:
    """What tells two plans of one revision apart, cheaply: its summary's figures and sizes (a key's second
    half beside the revision's identity, so that a plan compiled again differently is never taken for the
    one replayed before)."""
    s = plan.summary
    return (plan.fabric, s.max_utilization, s.lp_bound, s.ecmp_max_utilization, s.solve_seconds, s.groups, s.routes,
            len(plan.devices), len(plan.links))


def replay_key(identity: str, in_force: Overlay = Overlay()) -> str:
    """The key of the plan revision ``identity`` runs with ``in_force``'s parts left out (none: its full plan)."""
    return f"{identity}|{in_force.key()}" if in_force else identity


class ReplayerCache:
    """The plans in force compiled for replay (:class:`safety.replay.Replayer`), the newest few, keyed by
    :func:`replay_key` and the plan's :func:`plan_fingerprint`: a reaction judges its plan against the plan
    in force, which is the same plan for every failure of a revision (2 s of the 4 a judgement took on
    Clos L was building it again). Thread-safe; each caller gets its own :meth:`Replayer.fork` (the
    compiled fabric shared, scratch arrays its own). Two by default: the active plan and one other (a
    review's proposed plan, or the plan in force around an overlay); an entry holds the plan's whole
    flow (473 MB on Clos L: 754,000 states, 7.3 million transitions)."""

    def __init__(self, size: int = 2):
        self._lock = threading.Lock()
        self._size = size
        self._entries: OrderedDict[tuple[str, tuple[object, ...]], Replayer] = OrderedDict()
        self.built = 0  # how many were built (the tests count them)

    def get(self, key: str, intent: Intent, plan: Plan) -> Replayer:
        """The replayer of ``plan`` (that of ``intent``, as ``key`` names them), built on the first ask."""
        k = (key, plan_fingerprint(plan))
        with self._lock:
            hit = self._entries.get(k)
            if hit is not None:
                self._entries.move_to_end(k)
                return hit.fork()
        built = Replayer(intent, plan)  # outside the lock: seconds on a large fabric
        with self._lock:
            self.built += 1
            self._entries[k] = built
            self._entries.move_to_end(k)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return built.fork()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


#: this process's replayers of plans in force
REPLAYERS = ReplayerCache()


def judge(current: tuple[Intent, Plan], failed: Overlay, reaction: tuple[Intent, Plan], *,
          key: str | None = None) -> Judgement:
    """The plan in force (``current``: its intent and plan) and the ``reaction`` (planned with the failed
    parts drained), both replayed with ``failed`` removed: ``safe`` when the reaction passes, ``no_worse``
    when it loses no more traffic, loops no more and runs no hotter than the plan in force would, else
    ``worse``. The reconverged stage is what each leaves the fabric with (the static kernel repair
    under ``fib``). ``key`` (:func:`replay_key`) names the plan in force, whose replayer is then kept
    (:data:`REPLAYERS`); the reaction is replayed on the same topology (drains do not change it), pushed
    directly where it routes nothing over the failed parts (:func:`safety.direct.replay_scenario`)."""
    intent = current[0]
    keeps = REPLAYERS.get(key, *current) if key is not None else Replayer(*current)
    sc = Scenario("failure", "reaction", devices=frozenset(d for d in failed.devices if d in keeps.topo.index),
                  links=frozenset(ln for ln in failed.links if ln in keeps.topo.link_index))
    same = reaction[0].links is intent.links and reaction[0].devices is intent.devices  # an overlay's copy
    keep = keeps.run(sc).reconverged
    new = (replay_scenario(*reaction, sc, topo=keeps.topo, like=(keeps.plan, keeps.table)) if same
           else replay_scenario(*reaction, sc)).reconverged
    cur, rea = _figures(keep), _figures(new)
    if new.ok:
        verdict = "safe"
    elif (rea["dropped_gbps"] <= cur["dropped_gbps"] + 1e-6 and rea["loops"] <= cur["loops"]
          and rea["max_utilization"] <= cur["max_utilization"] + 1e-9):
        verdict = "no_worse"
    else:
        verdict = "worse"
    return Judgement(verdict, cur, rea)


# -- the reactor (leader) ---------------------------------------------------------------------------------
class Reactor(Protocol):
    """What the reactor looks at and acts through (:class:`controller.operations.service.Operations`): the
    operational view, a decision that commits nothing recorded, a reaction planned, judged and committed."""

    view: OperationalView

    async def record_decision(self, kind: str, data: JsonObject) -> None: ...

    async def react(self, desired: Overlay, seen: Seen) -> bool: ...


@dataclass(frozen=True)
class Seen:
    """What the reactor saw: parts failed (or healthy again after their hold-down), and when the first of
    them was seen so: the start of a reaction's trigger (:class:`~controller.model.documents.ReactionTrigger`)."""

    event: Literal["failure", "recovery"]
    links: list[str]
    devices: list[str]
    detected_at: str | None

    def to_json(self) -> JsonObject:
        """As a refusal's event names it (beside its reason and overlay)."""
        return {"event": self.event, "links": list(self.links), "devices": list(self.devices),
                "detected_at": self.detected_at}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


class FailureReaction:
    """The leader's reactor over ``ops.view`` (see the module docstring)."""

    def __init__(self, ops: Reactor):
        self.ops = ops
        self.damping = Damping()
        self.recent: deque[float] = deque()  # when reactions were committed, within the hour
        self.last: dict[str, Any] | None = None  # the last decision, for the status and the tests
        self._refused: tuple[frozenset[str], frozenset[str]] | None = None  # (in force, desired) last refused
        # a reaction committed but not in force (its transaction failed: a device it needed did not answer)
        # is tried again after RETRY_S, doubling up to RETRY_MAX_S, not at the next tick
        self._tried: tuple[frozenset[str], frozenset[str]] | None = None
        self._tries = 0
        self._retry_at = 0.0

    def failed(self, view: OperationalView, now: float) -> dict[str, float]:
        out = dict(view.down_links(now))
        out.update({f"device:{d}": t for d, t in view.failed_devices(now).items()})
        return out

    async def tick(self, policy: FailureReactionPolicy, in_force: Overlay, busy: bool, now: float) -> None:
        """One look at the view: observe, and react when the desired overlay is not the one in force."""
        view = self.ops.view
        failed = self.failed(view, now)
        current = parts_of(in_force)
        self.damping.observe(failed, current, lambda p: view.healthy(p), now)
        if not policy.enabled or busy:
            return
        desired = implied_links_out(self.damping.desired(failed, current, policy, now), view)
        if desired == current:
            self._tried, self._tries = None, 0
            return
        if self._refused == (current, desired) or (self._tried == (current, desired) and now < self._retry_at):
            return
        while self.recent and now - self.recent[0] > HOUR_S:
            self.recent.popleft()
        if len(self.recent) >= policy.max_per_hour:
            if self._refused != (current, desired):
                self._refused = (current, desired)
                await self.ops.record_decision("reaction.refused", {
                    "reason": f"{len(self.recent)} reactions in the last hour (max_per_hour {policy.max_per_hour})",
                    "overlay": overlay_of(desired).to_document()})
            return
        since = [failed[p] for p in desired - current if p in failed] or [
            self.damping.healthy_since.get(p, now) for p in current - desired]
        event: Literal["failure", "recovery"] = "failure" if desired - current else "recovery"
        changed = (desired - current) | (current - desired)
        seen = Seen(event, sorted(p for p in changed if not p.startswith("device:")),
                    sorted(p.removeprefix("device:") for p in changed if p.startswith("device:")),
                    _iso(min(since)) if since else None)
        try:
            done = await self.ops.react(overlay_of(desired), seen)
        except CommitBusy:  # another change took the commit between the look and the reaction's: next tick
            return
        if done:
            self.recent.append(now)
            self._refused = None
            self._tries = self._tries + 1 if self._tried == (current, desired) else 1
            self._tried = (current, desired)
            self._retry_at = now + min(RETRY_MAX_S, RETRY_S * 2 ** (self._tries - 1))
        else:
            self._refused = (current, desired)


def plan_seconds(t0: float) -> float:
    return round(time.perf_counter() - t0, 4)


async def run_judge(current: tuple[Intent, Plan], failed: Overlay, reaction: tuple[Intent, Plan], *,
                    key: str | None = None) -> Judgement:
    return await asyncio.to_thread(lambda: judge(current, failed, reaction, key=key))
