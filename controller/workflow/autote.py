"""Automatic re-tuning (DESIGN.md, Closed loop): the leader re-plans on the measured demand and
commits the result, as a change by ``auto-te``, when it is safe and worth it.

Every ``interval_s`` of the active revision's ``auto_te`` policy, :meth:`AutoTe.tick`:

1. **Guard rails first**, each a skip with a stable reason: the kill switch
   (``paused``: ``POST /v1/auto-te/pause``, held in the store so that it survives
   a restart), edits an operator made to the intent and has not committed
   (``pending_edits``: re-tuning would commit them unreviewed, or revert them),
   another change being reviewed or committed (``busy``), the back-off after a
   refused or failed attempt (``backoff``: 2, 4, 8 ... intervals up to
   ``auto_te_backoff_max``), at most one commit per interval (``rate_limit``),
   and telemetry that cannot stand for the fabric's demand (``no_telemetry``,
   ``incomplete_telemetry`` when an edge device's counters are stale: its
   traffic would read as zero; ``no_demand``).
2. **Evaluate** (:func:`evaluate`): the measured matrix (``stat`` over
   ``window_s``) times ``headroom`` becomes the candidate intent's demands, less
   what the intent's jobs already add (a running job's traffic is in the
   measurement, and ``Intent.effective_demands`` adds the job again: the jobs'
   share is subtracted so it counts once, and a job not yet running keeps its
   reservation). The candidate is compiled the way the review compiles it, and
   both plans are replayed under the candidate's effective demand: the gain is
   the active plan's maximum utilization minus the candidate's.
3. **Hysteresis**: a gain under ``min_gain`` is a dead band (the streak
   restarts); a commit needs ``auto_te_confirm`` consecutive evaluations over it
   (2 by default), and a commit restarts the count. Noise around a demand the
   active plan was made for gains next to nothing (the plan is already near the
   optimum for it), so it does not flap the weights.
4. **Propose, review, commit**: a change by ``auto-te`` with the measured
   figures as its ``trigger``, reviewed with the safety checks; an unsafe
   verdict is refused (never forced) and backs off; a safe one is committed
   through the workflow's one transaction path and its outcome awaited.

Every decision is kept (the last 50 in memory for ``GET /v1/auto-te``), written
to the audit log (action ``auto_te.<decision>``, actor ``auto-te``) and counted in
``loom_auto_te_decisions_total{decision,reason}``. A policy that is absent or
``enabled: false`` makes no decisions. Only the leader runs the loop: a single
``loom serve`` is its own leader; replicas elect one (the HA issue) through
``Workflow.is_leader``. The loop reaches the engine through :class:`Engine` (what it calls
of :class:`controller.workflow.engine.Workflow`: review, commit, wait) and the shared
:class:`~controller.workflow.runtime.Runtime`; its store reads close before any solve.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import numpy as np
from sqlalchemy.orm import Session

from controller.aio import cancel_and_wait, repeat
from controller.jobplan import job_time_rows, job_times, worst_slowdown
from controller.model import AutoTePolicy, Intent
from controller.model.documents import (
    AutoTeDecisionDocument,
    AutoTeStatusDocument,
    AutoTeTrigger,
    ChangeState,
    JobTimeDocument,
    ReviewDocument,
)
from controller.model.errors import Conflict, InvalidIntent, LoomError, SafetyViolation
from controller.model.jobs import job_demands, originated_prefixes
from controller.model.plan import Plan
from controller.planning import compile_plan
from controller.service import NO_STATUS, Actor, WriteContext
from controller.store import events_repo, repo
from controller.store import workflow_repo as wrepo
from controller.store.db import write_transaction
from controller.workflow import changes
from controller.workflow.plans import PlanSource, plan_source
from controller.workflow.runtime import Runtime
from controller.workflow.telemetry import active_intent, cached_context
from safety.estimate import link_loads

__all__ = ["AUTHOR", "AutoTe", "Evaluation", "Rails", "evaluate", "max_utilization"]

log = logging.getLogger("loom.auto_te")
AUTHOR = "auto-te"
#: How often the loop looks for a policy when the active revision has none (or it is disabled).
IDLE_S = 5.0
Doc = dict[str, Any]


def _ctx(action: str) -> WriteContext:
    return WriteContext(actor=Actor(AUTHOR, "operator"), method="SYSTEM", path=f"auto-te/{action}")


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat()


# -- the pure part -------------------------------------------------------------------
@dataclass
class Rails:
    """The guard rails' memory: consecutive gains, the back-off and the last commit (seconds)."""

    confirm: int = 2
    backoff_max: int = 32
    streak: int = 0
    failures: int = 0
    backoff_until: float = float("-inf")
    last_commit: float = float("-inf")

    def blocked(self, now: float, interval_s: float) -> tuple[str, str] | None:
        """Why no attempt may start now (``(reason, detail)``), or ``None``."""
        if now < self.backoff_until:
            return "backoff", (f"backing off after {self.failures} refused or failed attempt(s) "
                               f"until {_iso(self.backoff_until)}")
        if now - self.last_commit < interval_s:
            return "rate_limit", f"committed {now - self.last_commit:.1f} s ago: at most one commit per interval"
        return None

    def observe(self, gain: float, min_gain: float) -> bool:
        """Count one evaluation; True when the gain has held for ``confirm`` evaluations in a row."""
        if gain < min_gain:
            self.streak = 0
            return False
        self.streak += 1
        return self.streak >= self.confirm

    def committed(self, now: float) -> None:
        self.streak, self.failures = 0, 0
        self.backoff_until, self.last_commit = float("-inf"), now

    def failed(self, now: float, interval_s: float) -> None:
        self.streak = 0
        self.failures += 1
        self.backoff_until = now + interval_s * min(2 ** self.failures, self.backoff_max)


def max_utilization(intent: Intent, loads: np.ndarray) -> float:
    """The busiest link's utilization (either direction) of directed edge ``loads`` (2 per link)."""
    best = 0.0
    for i, lk in enumerate(intent.links):
        if lk.capacity_gbps > 0:
            best = max(best, float(max(loads[2 * i], loads[2 * i + 1])) / lk.capacity_gbps)
    return best


@dataclass(frozen=True)
class Evaluation:
    """A candidate re-tuning: its intent document and plan, and both plans' predictions."""

    document: Doc
    intent: Intent
    plan: Plan
    demands: dict[tuple[str, str], float]  # the candidate's declared demands (measured x headroom - jobs)
    active_predicted: float
    candidate_predicted: float
    objective: Literal["mlu", "jobs"] = "mlu"  # what the predictions measure (the policy's objective)
    jobs: list[JobTimeDocument] = field(default_factory=list)  # objective jobs: each job before and after

    @property
    def gain(self) -> float:
        return self.active_predicted - self.candidate_predicted


def candidate_demands(intent: Intent, measured: Mapping[tuple[str, str], float],
                      headroom: float) -> dict[tuple[str, str], float]:
    """``measured`` x ``headroom`` on the pairs ``intent`` knows, less the jobs' share (floored at zero),
    rounded as a capture rounds (6 decimals, zeros dropped)."""
    known = {p.prefix for p in intent.prefixes}
    origins = originated_prefixes(intent)
    jobs: dict[tuple[str, str], float] = {}
    for job in intent.jobs:
        for key, g in job_demands(job, origins).items():
            jobs[key] = jobs.get(key, 0.0) + g
    out: dict[tuple[str, str], float] = {}
    for (src, prefix), g in sorted(measured.items()):
        if src in intent.device_map and prefix in known:
            v = round(max(0.0, g * headroom - jobs.get((src, prefix), 0.0)), 6)
            if v > 0:
                out[(src, prefix)] = v
    return out


def evaluate(intent: Intent, plan: Plan, measured: Mapping[tuple[str, str], float], headroom: float
             ) -> Evaluation:
    """Compile the candidate of the measured demand and predict both plans under it.

    Raises :class:`InvalidIntent` when the candidate document is not a valid intent and what
    :func:`compile_plan` raises (``Infeasible``)."""
    demands = candidate_demands(intent, measured, headroom)
    document = intent.to_document()
    document["demands"] = [{"from": f, "to": p, "gbps": g} for (f, p), g in demands.items()]
    candidate = changes.validated(document)
    cplan = compile_plan(candidate)
    te = candidate.policy("auto_te")
    if te is not None and te.objective == "jobs" and candidate.jobs:  # the worst weighted job slowdown
        before, after = job_times(candidate, plan), job_times(candidate, cplan)
        return Evaluation(document, candidate, cplan, demands, worst_slowdown(before), worst_slowdown(after),
                          "jobs", job_time_rows(before, after))
    active = max_utilization(candidate, link_loads(intent, plan, demands))
    cand = max_utilization(candidate, link_loads(candidate, cplan))
    return Evaluation(document, candidate, cplan, demands, active, cand)


# -- the loop -------------------------------------------------------------------------
class Engine(Protocol):
    """What the loop calls of the change engine (:class:`controller.workflow.engine.Workflow`)."""

    @property
    def reviews_in_flight(self) -> int: ...

    async def review(self, change_id: int, ctx: WriteContext) -> ReviewDocument: ...

    async def commit(self, change_id: int, ctx: WriteContext) -> wrepo.Change: ...

    async def wait_idle(self) -> None: ...


@dataclass
class _Read:
    """What one tick reads from the store in one session: the active revision's intent and plan as the
    telemetry caches them, else what they are made from (solved once the session is closed)."""

    active: int
    head: int
    head_author: str
    paused: wrepo.AutoTeStateRow | None
    committing: int | None
    cached: tuple[int, Intent, Plan] | None
    source: PlanSource | None


@dataclass
class _State:
    """What one tick knows: the store's answers and the active revision's intent and plan."""

    active: int
    intent: Intent
    plan: Plan
    head: int
    head_author: str
    paused: wrepo.AutoTeStateRow | None
    committing: int | None


DecisionKind = Literal["skipped", "committed", "refused", "failed"]


@dataclass
class Decision:
    at: float
    decision: DecisionKind
    reason: str
    detail: str
    change: int | None = None
    trigger: AutoTeTrigger | None = None
    revision: int | None = None

    def document(self) -> AutoTeDecisionDocument:
        return AutoTeDecisionDocument(at=datetime.fromtimestamp(self.at, UTC).isoformat(), decision=self.decision,
                                      reason=self.reason, detail=self.detail, change=self.change, trigger=self.trigger)


_OUTCOME = {"skipped": "skipped", "committed": "accepted", "refused": "rejected", "failed": "failed"}


@dataclass
class AutoTe:
    """The re-tuning loop of one controller process (see the module's docstring)."""

    runtime: Runtime
    engine: Engine
    clock: Callable[[], float] = time.time
    rails: Rails = field(default_factory=Rails)
    decisions: deque[Decision] = field(default_factory=lambda: deque(maxlen=50))
    next_run: float | None = None
    _task: asyncio.Task[Any] | None = None

    def __post_init__(self) -> None:
        s = self.runtime.settings
        self.rails.confirm, self.rails.backoff_max = s.auto_te_confirm, s.auto_te_backoff_max

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Run the loop where the process reads telemetry (a collector is attached)."""
        if self.runtime.telemetry is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None

    async def _loop(self) -> None:
        await repeat(self.tick, what="automatic re-tuning", log=log, idle_s=IDLE_S, before_sleep=self._next)

    def _next(self, delay: float) -> None:
        self.next_run = self.clock() + delay

    # -- one evaluation --------------------------------------------------------------
    def _read(self, session: Session) -> _Read | None:
        active = changes.active_revision(session=session)
        if active is None:
            return None
        head = repo.head_revision(session=session)
        assert head is not None
        busy = wrepo.committing_change(session=session)
        tel = self.runtime.telemetry
        cached = cached_context(tel, active) if tel is not None else None
        return _Read(active, head.id, head.author, wrepo.auto_te_paused(session=session), busy.id if busy else None,
                     cached, None if cached is not None else plan_source(active, session=session))

    async def _state(self) -> _State | None:
        """:meth:`_read` in a session, then the active plan solved (and cached) after it closed."""
        got = await self.runtime.in_session(self._read)
        if got is None:
            return None
        if got.cached is not None:
            _, intent, plan = got.cached
        else:
            assert got.source is not None
            intent, plan = await self.runtime.solve(got.source)
            if self.runtime.telemetry is not None:
                self.runtime.telemetry.context = (got.active, intent, plan)
        return _State(got.active, intent, plan, got.head, got.head_author, got.paused, got.committing)

    def _busy(self, st: _State) -> str | None:
        if st.committing is not None:
            return f"change {st.committing} is committing"
        if self.engine.reviews_in_flight:
            return f"{self.engine.reviews_in_flight} review(s) in progress"
        if self.runtime.southbound_busy:
            return "a transaction holds the devices"
        return None

    async def tick(self) -> float:
        """One evaluation; returns the seconds until the next one."""
        rt = self.runtime
        if not rt.is_leader():
            return IDLE_S
        st = await self._state()
        policy: AutoTePolicy | None = st.intent.policy("auto_te") if st is not None else None
        if st is None or policy is None or not policy.enabled:
            self.rails.streak = 0
            return IDLE_S
        interval = policy.interval_s
        now = self.clock()
        if rt.metrics is not None:
            rt.metrics.auto_te_paused.set(1 if st.paused is not None and st.paused.paused else 0)
        skip = self._guard(st, now, interval)
        if skip is not None:
            await self._decide(Decision(now, "skipped", *skip))
            return interval
        tel = rt.telemetry
        assert tel is not None  # the loop runs where a collector is attached
        too_long = tel.window_problem(policy.window_s)
        if too_long is not None:  # never a window silently cut to what the collector has
            await self._decide(Decision(now, "skipped", "window_too_long", f"window_s {policy.window_s:g}: {too_long}"))
            return interval
        silent = tel.silent_edges(st.intent, now, policy.window_s)
        if silent:
            reason = "no_telemetry" if tel.counts()["devices"] == 0 else "incomplete_telemetry"
            shown = ", ".join(silent[:8]) + (" ..." if len(silent) > 8 else "")
            await self._decide(Decision(now, "skipped", reason,
                                        f"{len(silent)} edge device(s) report no fresh counters in the last "
                                        f"{policy.window_s:g} s ({shown}): their demand would read as zero"))
            return interval
        view = tel.demand(st.intent, st.plan, now, policy.window_s, policy.stat)
        if not view.demands:
            await self._decide(Decision(now, "skipped", "no_demand", "no demand measured in the window"))
            return interval
        try:
            ev = await asyncio.to_thread(evaluate, st.intent, st.plan, view.demands, policy.headroom)
        except LoomError as exc:
            self.rails.streak = 0
            await self._decide(Decision(now, "skipped", "invalid_candidate",
                                        f"the measured demand gives no plan: {exc}"))
            return interval
        observed = [v.utilization for v in tel.links(st.intent, now, policy.window_s, policy.stat)
                    if v.fresh and v.utilization is not None]
        trigger = AutoTeTrigger(
            window_s=policy.window_s, stat=policy.stat, headroom=policy.headroom, method=view.method,
            demands=len(view.demands), measured_gbps=round(sum(view.demands.values()), 6), active_revision=st.active,
            active_predicted=round(ev.active_predicted, 6), candidate_predicted=round(ev.candidate_predicted, 6),
            gain=round(ev.gain, 6), min_gain=policy.min_gain, observed=round(max(observed), 6) if observed else None,
            objective=ev.objective, jobs=ev.jobs)
        if rt.metrics is not None:
            rt.metrics.auto_te_gain.set(ev.gain)
            rt.metrics.auto_te_predicted.labels(plan="active").set(ev.active_predicted)
            rt.metrics.auto_te_predicted.labels(plan="candidate").set(ev.candidate_predicted)
        figures = (f"active plan {ev.active_predicted:.4f}, re-tuned {ev.candidate_predicted:.4f} "
                   f"(gain {ev.gain:+.4f}, min_gain {policy.min_gain:g})")
        if not self.rails.observe(ev.gain, policy.min_gain):
            if ev.gain < policy.min_gain:
                await self._decide(Decision(now, "skipped", "below_min_gain", figures, trigger=trigger))
            else:
                await self._decide(Decision(now, "skipped", "confirming",
                                            f"{figures}: {self.rails.streak}/{self.rails.confirm} evaluations",
                                            trigger=trigger))
            return interval
        await self._propose(st, ev, trigger, figures, interval)
        return interval

    def _guard(self, st: _State, now: float, interval: float) -> tuple[str, str] | None:
        if st.paused is not None and st.paused.paused:
            self.rails.streak = 0
            return "paused", (f"paused by {st.paused.actor} at {st.paused.at.isoformat()}"
                              + (f": {st.paused.reason}" if st.paused.reason else ""))
        if st.head != st.active and st.head_author != AUTHOR:
            self.rails.streak = 0
            return "pending_edits", (f"the intent has edits not yet committed (head revision {st.head}, active "
                                     f"{st.active}): re-tuning waits for them")
        busy = self._busy(st)
        if busy is not None:
            return "busy", busy
        return self.rails.blocked(now, interval)

    async def _propose(self, st: _State, ev: Evaluation, trigger: AutoTeTrigger, figures: str,
                       interval: float) -> None:
        rt, engine = self.runtime, self.engine
        now = self.clock()
        again = await self._state()
        skip = self._guard(again, now, interval) if again is not None and again.active == st.active else (
            "busy", "the active revision changed during the evaluation")
        if skip is not None:
            await self._decide(Decision(now, "skipped", *skip, trigger=trigger))
            return
        message = f"auto-te: re-tuned for the measured demand: {figures}"

        def create(s: Session) -> wrepo.Change:
            ch = changes.create_change(session=s, ctx=_ctx("propose"), base_revision=st.active, patch=None,
                                       intent=ev.document, message=message, trigger=trigger)
            assert ch.proposed_revision is not None
            if wrepo.get_plan(ch.proposed_revision, session=s) is None:  # the review reads it, not compiles it
                with write_transaction(s):
                    wrepo.put_plan(ch.proposed_revision, ev.plan.to_document(), session=s,
                                   now=datetime.now(UTC))
            return ch

        ch = await rt.in_session(create)
        try:
            review = await engine.review(ch.id, _ctx("review"))
        except LoomError as exc:
            self.rails.failed(now, interval)
            await self._decide(Decision(now, "refused", "conflict", f"change {ch.id}: the review failed: {exc}",
                                        ch.id, trigger, ch.proposed_revision))
            return
        if review.verdict != "safe":
            failing = review.safety.failing
            shown = "; ".join(f"{f.scenario}: " for f in failing[:3])  # a failure names no invariants list
            self.rails.failed(now, interval)
            await self._decide(Decision(now, "refused", "unsafe",
                                        f"change {ch.id} is unsafe ({len(failing)} failing scenario(s): {shown}); "
                                        f"never forced: {figures}", ch.id, trigger, ch.proposed_revision))
            return
        try:
            await engine.commit(ch.id, _ctx("commit"))
        except (Conflict, SafetyViolation, InvalidIntent) as exc:
            self.rails.failed(now, interval)
            await self._decide(Decision(now, "refused", "conflict", f"change {ch.id}: {exc}", ch.id, trigger,
                                        ch.proposed_revision))
            return
        await engine.wait_idle()
        done = await rt.in_session(lambda s: changes.get_change(ch.id, session=s))
        if done.state == ChangeState.COMMITTED:
            self.rails.committed(self.clock())
            await self._decide(Decision(now, "committed", "committed", f"change {ch.id} committed: {figures}",
                                        ch.id, trigger, ch.proposed_revision))
        else:
            self.rails.failed(self.clock(), interval)
            reason = "rolled_back" if done.state == ChangeState.ROLLED_BACK else "failed"
            await self._decide(Decision(now, "failed", reason, f"change {ch.id} {done.state}: {done.error or ''}",
                                        ch.id, trigger, ch.proposed_revision))

    async def _decide(self, d: Decision) -> None:
        """Keep, log, count and audit one decision."""
        self.decisions.appendleft(d)
        log.log(logging.INFO if d.decision in ("skipped", "committed") else logging.WARNING,
                "auto-te %s (%s): %s", d.decision, d.reason, d.detail,
                extra={"decision": d.decision, "reason": d.reason, "change": d.change})
        metrics = self.runtime.metrics
        if metrics is not None:
            metrics.auto_te_decisions.labels(decision=d.decision, reason=d.reason).inc()
        ctx = _ctx("evaluate")

        def audit(s: Session) -> None:
            with write_transaction(s):
                repo.add_audit(session=s, now=datetime.fromtimestamp(d.at, UTC), actor=AUTHOR, token_id=None,
                               request_id=None, method=ctx.method, path=ctx.path, action=f"auto_te.{d.decision}",
                               outcome=_OUTCOME[d.decision], status=NO_STATUS, revision=d.revision,
                               detail=f"{d.reason}: {d.detail}"[:4000])
                events_repo.add_event("auto_te.decision", d.document().model_dump(mode="json"), session=s,
                                      now=datetime.fromtimestamp(d.at, UTC))

        try:
            await self.runtime.in_session(audit)
        except Exception:  # the store is down: the decision is still logged and counted
            log.exception("auto-te: could not audit a decision")

    # -- the API's view ---------------------------------------------------------------
    def status(self, session: Session) -> AutoTeStatusDocument:
        """``GET /v1/auto-te``."""
        policy = None
        active = changes.active_revision(session=session)
        if active is not None and self.runtime.telemetry is not None:
            p = active_intent(self.runtime.telemetry, session=session).policy("auto_te")
            policy = p.model_dump(mode="json") if p is not None else None
        paused = wrepo.auto_te_paused(session=session)
        on = paused is not None and paused.paused
        r = self.rails
        return AutoTeStatusDocument(
            policy=policy, enabled=bool(policy and policy["enabled"]), paused=on,
            paused_by=paused.actor if on and paused is not None else None,
            paused_at=paused.at.isoformat() if on and paused is not None else None,
            pause_reason=paused.reason if on and paused is not None else None,
            leader=self.runtime.is_leader(), running=self.running, streak=r.streak, confirm=r.confirm,
            backoff_until=_iso(r.backoff_until) if r.backoff_until > float("-inf") else None,
            failures=r.failures, last_commit_at=_iso(r.last_commit) if r.last_commit > float("-inf") else None,
            next_run_at=_iso(self.next_run), decisions=[d.document() for d in self.decisions])


def set_paused(paused: bool, *, session: Session, ctx: WriteContext, reason: str) -> None:
    """The kill switch: pause or resume (audited as ``auto_te.pause`` / ``auto_te.resume``)."""
    now = datetime.now(UTC)
    with write_transaction(session):
        wrepo.set_auto_te_paused(paused, session=session, actor=ctx.actor.name, now=now, reason=reason)
        action = "auto_te.pause" if paused else "auto_te.resume"
        repo.add_audit(session=session, now=now, actor=ctx.actor.name, token_id=ctx.actor.token_id,
                       request_id=ctx.request_id, method=ctx.method, path=ctx.path, action=action,
                       outcome="accepted", status=ctx.status, detail=reason[:4000])
