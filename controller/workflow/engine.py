"""The controller's change engine: review, background commit, crash recovery and drift.

:class:`Workflow` is the one place that calls southbound. It lives in the
server process (``api.create_app`` starts it at startup and stops it at
shutdown) and is handed the driver to the device agents (``controller.workflow.agents``
makes the gRPC one from the settings).

- **Review**: solve and replay in a worker thread, then the per-device config
  diff from the agents' ``Prepare`` (aborted at once) or, with no agents,
  rendered locally.
- **Commit**: :func:`controller.workflow.changes.begin_commit` durably marks the
  change ``committing`` with its transaction id and the previous active
  revision before any device hears of it; then an asyncio task runs the
  network-wide transaction (:func:`southbound.transaction.commit_plan`),
  recording per-device progress as results arrive, and stores the outcome:
  ``committed`` (the revision becomes active), ``failed`` (Prepare refused,
  nothing applied) or ``rolled_back``. With no agents a commit only records the
  revision as active.
- **Leadership** (:mod:`controller.workflow.cluster`): only the leader pushes,
  recovers and checks drift. A commit asked of any replica is queued in the
  store (``committing``, ``runner_epoch`` NULL); the leader takes it up
  (:meth:`Workflow.take_up`, at once on the leader, else within
  ``commit_poll_interval``), marking it with its epoch, and every agent call of
  the transaction carries that epoch (the agents' fence). A deposed leader's
  outcome and progress are not recorded (:class:`~controller.model.errors.Deposed`).
- **Recovery** (when a replica leads, at startup included): a change left
  ``committing`` under another epoch or by a process that died is finished or
  undone by what the devices report: every reachable device
  runs the target config and none is unreachable -> Confirm where pending,
  ``committed``; otherwise Rollback and Abort the transaction everywhere,
  ``rolled_back``. Agents' confirm timers are the safety net for devices that
  cannot be reached. What was done is recorded in the transition and audit log.
- **Stages**: the transaction commits in the order of the review's schedule
  (``review["schedule"]["stages"]``, DESIGN.md Transitions; one stage without
  one), and the progress document shows each stage's status.
- **Settling** (:mod:`controller.workflow.settle`): a final change whose
  transaction left devices off the revision its state names (an agent down
  when it should have been rolled back) is stored ``settled: false`` with
  those devices; the leader drives them every ``settle_interval`` seconds
  until they run it, and a review names them meanwhile.
- **Drift**: every ``drift_interval`` seconds and after each commit, every
  device's ``GetState`` is held against the active revision (config hash, and
  kernel routes against the plan where the agent observes them); the report is
  stored and, with ``drift_repair``, the active revision is pushed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.documents import ChangeState
from controller.model.errors import Deposed, NotFound, Unreachable
from controller.service import Actor, WriteContext
from controller.settings import Settings
from controller.store import workflow_repo as wrepo
from controller.store.db import Database, write_transaction
from controller.telemetry import Telemetry
from controller.workflow import changes
from controller.workflow.cluster import Cluster
from controller.workflow.review import (
    CommitLeg,
    build_review,
    commit_legs,
    expected_hashes,
    leg_transaction,
    local_config_diff,
)
from southbound.driver import DeviceDriver

__all__ = ["SYSTEM", "Workflow"]

log = logging.getLogger("loom.workflow")
T = TypeVar("T")
SYSTEM = WriteContext(actor=Actor("loom-controller", "admin"), method="SYSTEM", path="workflow")
Doc = dict[str, Any]


def _now() -> datetime:
    return datetime.now(UTC)


def _reset_ports(review: Doc | None) -> dict[str, list[str]]:
    """Device -> the ports whose BGP session the reviewed change resets (the review's
    ``bgp_sessions_reset``): the transaction waits for them between stages."""
    rows = ((review or {}).get("bgp_sessions_reset") or {}).get("sessions") or []
    out: dict[str, list[str]] = {}
    for r in rows:
        if isinstance(r, dict) and r.get("device") and r.get("port"):
            out.setdefault(str(r["device"]), []).append(str(r["port"]))
    return out


def _outcome(result: Any, devices: int) -> tuple[ChangeState, str]:
    """How a transaction ended, as the change's final state and the reason recorded with it."""
    if result.ok:
        return ChangeState.COMMITTED, f"transaction {result.change} confirmed on {devices} device(s)"
    if result.stage == "prepare":
        return ChangeState.FAILED, "Prepare failed: nothing was applied"
    return ChangeState.ROLLED_BACK, f"{result.stage} failed: the devices were rolled back"


class _PushProgress:
    """A commit's progress document (``ProgressDocument``), updated by the transaction's step
    callback (:meth:`on_step`) and saved by :meth:`flush` at most every 0.2 s while it changes;
    it also logs each device's steps and times them for the metrics."""

    def __init__(self, change: int, names: list[str], metrics: Any, stages: list[list[str]] | None = None,
                 worst: list[float | None] | None = None, plans: list[int] | None = None):
        self.change, self.metrics = change, metrics
        self.doc: Doc = {"step": "prepare", "devices": {
            d: {"step": "prepare", "status": "pending", "changed": False, "error": None} for d in names}}
        if stages is not None:
            self.doc["stages"] = [{"devices": list(st), "status": "pending"} for st in stages]
            for row, u in zip(self.doc["stages"], worst or [], strict=False):
                if u is not None:
                    row["worst_utilization"] = u
            for row, target in zip(self.doc["stages"], plans or [], strict=False):
                row["plan"] = target
        self._started: dict[tuple[str, str], float] = {}
        self._dirty = asyncio.Event()

    def on_stage(self, index: int, status: str) -> None:
        """Stage ``index`` of the commit order is now ``status`` (commit, verify, done, failed)."""
        stages = self.doc.get("stages")
        if not stages or index >= len(stages):
            return
        stages[index]["status"] = status
        self.doc["stage"] = index
        log.info("change %s: stage %d/%d (%s): %s", self.change, index + 1, len(stages),
                 ", ".join(stages[index]["devices"][:6]) + ("..." if len(stages[index]["devices"]) > 6 else ""),
                 status, extra={"change": self.change, "stage": index, "status": status})
        self._dirty.set()

    def on_step(self, step: str, device: str, result: Any) -> None:
        """``result`` is ``None`` when ``device`` starts ``step``, else its StepResult."""
        self.doc["step"] = step
        row = self.doc["devices"].setdefault(device, {"changed": False, "error": None})
        row["step"] = step
        if result is None:
            row["status"] = "pending"
            self._started[step, device] = time.perf_counter()
            return
        row["status"] = "failed" if result.failed else "ok"
        row.setdefault("steps", {})[step] = row["status"]
        row["changed"] = bool(row.get("changed") or result.changed)
        row["error"] = result.error or None
        log.log(logging.WARNING if result.failed else logging.INFO, "change %s: %s %s on %s", self.change, step,
                row["status"], device, extra={"change": self.change, "device": device, "step": step,
                                              "status": row["status"], "changed": row["changed"],
                                              "error": row["error"]})
        if self.metrics is not None and (step, device) in self._started:
            self.metrics.device_push_seconds.labels(device=device, step=step).observe(
                time.perf_counter() - self._started.pop((step, device)))
        self._dirty.set()

    async def flush(self, save: Callable[[Doc], Awaitable[None]]) -> None:
        """Save a snapshot whenever the document changed, until cancelled."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await save(json.loads(json.dumps(self.doc)))
            await asyncio.sleep(0.2)


def _queued_ctx(ch: wrepo.Change) -> WriteContext:
    """Who a commit queued by another replica is recorded for: the actor of its ``committing`` transition."""
    asked = next((t.actor for t in reversed(ch.transitions) if t.state == ChangeState.COMMITTING), "")
    return WriteContext(actor=Actor(asked or "loom-controller", "operator"), method="SYSTEM", path="commit-queue")


class Workflow:
    """The change engine of one controller process."""

    def __init__(self, settings: Settings, database: Database, *, driver: DeviceDriver | None = None,
                 metrics: Any = None, telemetry: Telemetry | None = None, cluster: Cluster | None = None):
        """``driver`` talks to the device agents (``None``: no devices attached); the composition
        root (``loom serve``, or :func:`api.app.create_app` from the settings) makes it. ``cluster``
        holds the leader lease (None: this process is the only one and always leads, epoch 0)."""
        self.settings = settings
        self.db = database
        self.metrics = metrics
        self.driver = driver
        self.telemetry = telemetry  # the collector, when the server streams counters: drains are verified on it
        self._tasks: set[asyncio.Task[Any]] = set()
        self._commit_task: asyncio.Task[Any] | None = None
        self._drift_task: asyncio.Task[Any] | None = None
        self._queue_task: asyncio.Task[Any] | None = None
        self._settle_task: asyncio.Task[Any] | None = None
        self._running: set[int] = set()  # committing changes this process pushes or recovers
        self._requested: dict[int, WriteContext] = {}  # who asked this replica to commit them
        self._drift_lock = asyncio.Lock()
        self._southbound = asyncio.Lock()  # a transaction (push or recovery) of this process holds it
        # take-ups of this process, one at a time: a take-up in flight is not yet in ``_running``, and a second
        # one reading the store meanwhile would find the change under this epoch and "recover" it (issue 31.0)
        self._take_up_lock = asyncio.Lock()
        self.recovered: Doc | None = None
        self.reviews_in_flight = 0  # automatic re-tuning waits while any review of this replica runs
        self.cluster = cluster
        #: Whether this process leads: a process without a cluster does; replicas elect one through the store.
        self.is_leader: Callable[[], bool] = cluster.is_leader if cluster is not None else (lambda: True)
        from controller.operations.service import Operations  # it reaches back into this engine
        from controller.workflow.autote import AutoTe

        self.auto_te = AutoTe(self)
        self.operations = Operations(self)

    # -- plumbing -----------------------------------------------------------------
    async def _db(self, fn: Callable[[Session], T]) -> T:
        def run() -> T:
            with self.db.session() as session:
                return fn(session)
        return await asyncio.to_thread(run)

    def _observe_solve(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.solve_seconds.observe(seconds)

    def _observe_safety(self, seconds: float, scenarios: int) -> None:
        if self.metrics is not None:
            self.metrics.safety_seconds.observe(seconds)
            self.metrics.scenarios_checked.inc(scenarios)

    @property
    def _agents(self) -> DeviceDriver:
        """The driver, where the caller has already checked that devices are attached."""
        if self.driver is None:
            raise NotFound("no device agents are attached to this controller")
        return self.driver

    @property
    def devices(self) -> tuple[str, ...]:
        return self.driver.devices if self.driver is not None else ()

    @property
    def epoch(self) -> int:
        """The epoch this replica leads (or last led) with; 0 without a cluster."""
        return self.cluster.epoch if self.cluster is not None else 0

    def _fenced(self, epoch: int) -> DeviceDriver:
        """The driver whose every call carries ``epoch`` (agents refuse older epochs); 0: unfenced."""
        if not epoch:
            return self._agents
        return self._agents.fenced(epoch, self.cluster.replica if self.cluster is not None else "")

    async def start(self) -> None:
        """As the leader, finish or undo a change left committing before serving (recovery), then
        keep taking up the commits any replica queues; the drift loop and auto-te (leader work)."""
        try:
            if self.is_leader():
                await self.take_up()
                await self.wait_idle()
            active = await self._db(lambda s: changes.active_revision(session=s))
        except Exception:  # the store cannot answer: the server still starts; /readyz tells
            log.exception("recovery at startup failed; a change left committing keeps the commit slot")
            active = None
        if self.metrics is not None and active is not None:
            self.metrics.active_revision.set(active)
        self._queue_task = asyncio.get_running_loop().create_task(self._queue_loop())
        if self.driver is not None and self.settings.drift_interval > 0:
            self._drift_task = asyncio.get_running_loop().create_task(self._drift_loop())
        if self.driver is not None:
            self._settle_task = asyncio.get_running_loop().create_task(self._settle_loop())
        self.auto_te.start()
        await self.operations.start()

    async def stop(self) -> None:
        await self.operations.stop()
        await self.auto_te.stop()
        for task in (self._drift_task, self._queue_task, self._settle_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._commit_task is not None and not self._commit_task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._commit_task), timeout=30)
        for t in list(self._tasks):
            t.cancel()
        if self.driver is not None:
            await self.driver.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- review -------------------------------------------------------------------
    @property
    def southbound_busy(self) -> bool:
        """A transaction (or a review's Prepare) holds the devices now."""
        return self._southbound.locked()

    async def review(self, change_id: int, ctx: WriteContext) -> Doc:
        self.reviews_in_flight += 1
        try:
            return await self._review(change_id, ctx)
        finally:
            self.reviews_in_flight -= 1

    async def _review(self, change_id: int, ctx: WriteContext) -> Doc:
        inp = await self._db(lambda s: changes.review_inputs(change_id, session=s, observe=self._observe_solve))
        busy = self._southbound.locked() or await self._db(lambda s: wrepo.committing_change(session=s) is not None)
        config_diff: dict[str, str] | None = None
        if self.driver is not None and not busy:
            config_diff = await self._agent_diff(inp)
        if config_diff is None:
            config_diff = await asyncio.to_thread(local_config_diff, inp)
        doc = await asyncio.to_thread(build_review, inp, config_diff, observe_safety=self._observe_safety)
        from controller.workflow.settle import unsettled_note

        left = await self._db(lambda s: changes.unsettled(session=s))
        if left:
            doc["unsettled"], doc["unsettled_note"] = left, unsettled_note(left, self.driver is not None and not busy)
        if self.driver is None:
            doc["devices_attached"] = False
        elif busy:
            doc["config_diff_note"] = "a change is committing: the config diff was rendered locally, not by Prepare"
        await self._db(lambda s: changes.record_review(change_id, doc, session=s, ctx=ctx))
        return doc

    async def _agent_diff(self, inp: changes.ReviewInputs) -> dict[str, str]:
        """Every device's diff from its agent's Prepare in preview: the agent stores nothing, so a review
        on any replica never disturbs a transaction the leader runs (no lock needed between them)."""
        from southbound.render import device_configs
        from southbound.transaction import new_change_id

        configs = {d: c for d, c in device_configs(inp.intent, inp.plan).items() if d in set(self._agents.devices)}
        change = f"review-{new_change_id()}"
        got = await asyncio.gather(*(self._agents.preview(d, change, c) for d, c in configs.items()))
        out: dict[str, str] = {}
        for d, r in sorted(zip(configs, got, strict=True)):
            if r.failed:
                out[d] = f"# Prepare failed: {r.error}"
            elif r.changed:
                out[d] = r.diff
        return out

    # -- commit -------------------------------------------------------------------
    async def commit(self, change_id: int, ctx: WriteContext, *, force: bool = False, reason: str | None = None,
                     skip_gate: bool = False) -> wrepo.Change:
        """Gate and mark the change committing (durably), then push it in the background."""
        from southbound.transaction import new_change_id

        txn = new_change_id()
        ch = await self._db(lambda s: changes.begin_commit(change_id, session=s, ctx=ctx, transaction=txn,
                                                           force=force, reason=reason, skip_gate=skip_gate))
        self._requested[ch.id] = ctx
        await self.take_up()  # the leader runs it now; on a follower it waits in the store for the leader
        return ch

    async def wait_idle(self) -> None:
        if self._commit_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._commit_task)

    # -- the commit queue (leader) ------------------------------------------------
    async def _queue_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_poll_interval)
            try:
                await self.take_up()
            except Exception:
                log.exception("taking up a queued commit failed")

    async def take_up(self) -> int | None:
        """As the leader: start the committing change waiting in the store (queued by any replica), or
        recover one a previous leader (an older epoch, or this process before a restart) left
        committing. Returns the change taken up, if any."""
        if not self.is_leader():
            return None
        async with self._take_up_lock:
            return await self._take_up()

    async def _take_up(self) -> int | None:
        """:meth:`take_up`, under the take-up lock: a change this process runs is in ``_running`` before the
        lock is released, so it is never mistaken for one a previous leader left."""
        epoch = self.epoch
        ch = await self._db(lambda s: wrepo.committing_change(session=s))
        if ch is None or ch.id in self._running:
            return None
        replica = self.cluster.replica if self.cluster is not None else None
        previous = ch.runner_epoch
        if not await self._db(lambda s: changes.take_up(ch.id, epoch, previous=previous, replica=replica,
                                                        session=s)):
            return None  # another leader took it meanwhile, or the lease passed on
        self._running.add(ch.id)
        if previous is None:
            ctx = self._requested.pop(ch.id, None) or _queued_ctx(ch)
            task = self._spawn(self._run_commit(ch, ctx, epoch))
        else:
            task = self._spawn(self._recover_change(ch, epoch))
        task.add_done_callback(lambda _t: self._running.discard(ch.id))
        self._commit_task = task
        return ch.id

    async def _run_commit(self, ch: wrepo.Change, ctx: WriteContext, epoch: int) -> None:
        try:
            await self._push(ch, ctx, epoch)
        except Deposed as exc:
            log.warning("change %s: %s", ch.id, exc)
        except Exception as exc:  # the change must not stay committing in a live process
            log.exception("commit of change %s failed unexpectedly", ch.id)
            error = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                await self._db(lambda s: changes.finish_commit(
                    ch.id, ChangeState.FAILED, session=s, ctx=ctx, reason="the controller failed during the commit",
                    error=error, runner=epoch))
            if self.metrics is not None:
                self.metrics.commits.labels(outcome=ChangeState.FAILED.value).inc()

    async def _push(self, ch: wrepo.Change, ctx: WriteContext, epoch: int) -> None:
        """Push a committing change: compile, run the transaction with progress, record the outcome."""
        assert ch.proposed_revision is not None and ch.transaction is not None
        rev = ch.proposed_revision
        intent, plan = await self._db(lambda s: changes.plan_for(rev, session=s, observe=self._observe_solve,
                                                                 overlay=ch.overlay))
        if self.driver is None:
            await self._record_without_devices(ch, ctx, epoch)
            return
        failed = set((ch.overlay or {}).get("devices") or ())  # a failed device's agent is gone: it is left out
        names = sorted((set(intent.device_map) & set(self.driver.devices)) - failed)
        legs = commit_legs(ch.review, names)
        stages = [st for leg in legs for st in leg.stages]
        tracker = _PushProgress(ch.id, names, self.metrics, stages, [u for leg in legs for u in leg.worst],
                                [leg.target for leg in legs for _ in leg.stages] if len(legs) > 1 else None)
        await self._db(lambda s: changes.save_progress(ch.id, tracker.doc, session=s, runner=epoch))
        log.info("change %s: pushing revision r%s to %d device(s) in %d stage(s)%s (epoch %d)", ch.id, rev,
                 len(names), len(stages), f" through {len(legs) - 1} intermediate plan(s)" if len(legs) > 1 else "",
                 epoch, extra={"change": ch.id, "revision": rev, "transaction": ch.transaction, "epoch": epoch})
        result = await self._transact(ch, intent, plan, names, tracker, epoch, legs)
        tracker.doc["step"] = "done" if result.ok else result.stage
        outcome, reason = _outcome(result, len(names))
        if len(legs) > 1 and not result.ok:
            applied = result.legs_done > 0 or result.stage != "prepare"
            outcome = ChangeState.ROLLED_BACK if applied else ChangeState.FAILED
            reason = f"leg {result.legs_done + 1} of {len(legs)} failed at {result.stage}: {result.note}"
        log.info("change %s: %s (%s)", ch.id, outcome, reason, extra={"change": ch.id, "outcome": outcome})
        from controller.workflow.settle import left_off

        settle = self._settle_doc(ch, outcome, await left_off(ch, outcome, result, self._db, lambda: self._states(
            names, self._fenced(epoch))))
        self._count_outcome(rev if result.ok else None, outcome)
        await self._db(lambda s: changes.finish_commit(ch.id, outcome, session=s, ctx=ctx, reason=reason,
                                                       error=result.error or None, progress=tracker.doc,
                                                       runner=epoch, settle=settle))
        self._after_commit(outcome)
        if outcome == ChangeState.COMMITTED:
            self._spawn(self._verify_drains(ch, intent))

    async def _record_without_devices(self, ch: wrepo.Change, ctx: WriteContext, epoch: int) -> None:
        """With no agents attached a commit only records the revision as active."""
        rev = ch.proposed_revision
        log.info("change %s: no devices attached, recording revision r%s as active", ch.id, rev,
                 extra={"change": ch.id, "revision": rev})
        recorded: Doc = {"step": "done", "devices": {}, "note": "no devices attached: the revision is only recorded"}
        self._count_outcome(rev, ChangeState.COMMITTED)
        await self._db(lambda s: changes.finish_commit(
            ch.id, ChangeState.COMMITTED, session=s, ctx=ctx, progress=recorded,
            reason="no devices attached: the revision was recorded as active", runner=epoch))
        self._after_commit(ChangeState.COMMITTED)

    async def _transact(self, ch: wrepo.Change, intent: Any, plan: Any, names: list[str],
                        tracker: _PushProgress, epoch: int, legs: list[CommitLeg]) -> Any:
        """The network-wide transaction (after a repair's nudge), or one per leg through the schedule's
        intermediate plans (:meth:`_legs`), holding the southbound lock, with the progress saved in the
        background as results arrive."""
        from southbound.transaction import commit_plan

        assert ch.transaction is not None

        def save(s: Session, doc: Doc) -> None:
            changes.save_progress(ch.id, doc, session=s, runner=epoch)

        flusher = asyncio.get_running_loop().create_task(tracker.flush(lambda doc: self._db(lambda s: save(s, doc))))
        try:
            async with self._southbound:
                if ch.kind == "repair":
                    await self._nudge(intent, plan, ch.transaction, names, epoch)
                if len(legs) > 1:
                    return await self._legs(ch, intent, plan, legs, tracker, epoch)
                return await commit_plan(self._fenced(epoch), intent, plan, change=ch.transaction, only=names,
                                         confirm_within=self.settings.confirm_within,
                                         verify_timeout=self.settings.verify_timeout, progress=tracker.on_step,
                                         stages=legs[0].stages, on_stage=tracker.on_stage,
                                         sessions=_reset_ports(ch.review))
        finally:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher

    async def _legs(self, ch: wrepo.Change, intent: Any, plan: Any, legs: list[CommitLeg], tracker: _PushProgress,
                    epoch: int) -> Any:
        """Commit through the schedule's intermediate plans (DESIGN.md Transitions): one transaction per leg,
        each confirmed before the next (``TRANSACTION.pJ`` to intermediate plan J, the change's own
        transaction to the proposed plan), every leg in its stages. A leg that fails rolls itself back;
        the legs confirmed before it are then undone, the last first, each by a transaction back to the
        plan before it in its stages reversed (the same states, visited the other way). The result is the
        failed leg's, with ``legs_done`` and ``note`` saying what was undone; devices an undo could
        not move are left to settling (the caller compares them with the active revision)."""
        from controller.model.plan import Plan
        from southbound.transaction import commit_plan

        assert ch.transaction is not None and ch.previous_active is not None
        sched = (ch.review or {}).get("schedule") or {}
        mids = [Plan.from_document(d) for d in sched.get("intermediate") or []]
        before = await self._db(lambda s: changes.plan_for(ch.previous_active, session=s))  # type: ignore[arg-type]
        mid_intent = before[0] if sched.get("intermediate_intent") == "active" else intent
        agents = self._fenced(epoch)
        sessions = _reset_ports(ch.review)

        async def push(leg_intent: Any, leg_plan: Any, txn: str, stages: list[list[str]], offset: int | None) -> Any:
            on_stage = None if offset is None else (lambda i, status: tracker.on_stage(offset + i, status))
            return await commit_plan(agents, leg_intent, leg_plan, change=txn, only=[d for st in stages for d in st],
                                     confirm_within=self.settings.confirm_within,
                                     verify_timeout=self.settings.verify_timeout, progress=tracker.on_step,
                                     stages=stages, on_stage=on_stage, sessions=sessions)

        reached = [before]  # the (intent, plan) each confirmed leg left the fabric on, the active one first
        offset = 0
        for n, leg in enumerate(legs):
            target = (intent, plan) if leg.target == 0 else (mid_intent, mids[leg.target - 1])
            log.info("change %s: leg %d/%d to %s", ch.id, n + 1, len(legs),
                     "the proposed plan" if leg.target == 0 else f"intermediate plan {leg.target}")
            result = await push(target[0], target[1], leg_transaction(ch.transaction, leg.target), leg.stages,
                                offset)
            result.legs_done = n
            if result.ok:
                reached.append(target)
                offset += len(leg.stages)
                continue
            undone = 0
            for m in range(n - 1, -1, -1):  # undo the confirmed legs, the last first
                back = await push(reached[m][0], reached[m][1], f"{ch.transaction}.u{legs[m].target}",
                                  list(reversed(legs[m].stages)), None)
                if not back.ok:
                    log.error("change %s: undoing leg %d failed: %s", ch.id, m + 1, back.error)
                    result.note = (f"undoing leg {m + 1} failed ({back.stage}: {back.error}); "
                                   f"{undone} leg(s) undone, the devices left off are settled")
                    break
                undone += 1
            else:
                result.note = (f"the {n} leg(s) before it were undone" if n else
                               "the devices were rolled back" if result.stage != "prepare" else
                               "Prepare failed: nothing was applied")
            return result
        return result

    async def _nudge(self, intent: Any, plan: Any, txn: str, names: list[str], epoch: int) -> None:
        """Before a repair re-push: where a device runs the right config but its kernel does not
        hold the plan's weights (changed by hand), FRR has nothing to re-apply, so first push the
        plan with those groups' weights skewed (their next hops re-advertise, the kernel routes are
        rewritten), then the repair itself pushes the plan again."""
        from controller.model.plan import DevicePlan, NextHop, Plan
        from southbound.render import device_configs
        from southbound.transaction import commit
        from southbound.wcmp import compare

        if not intent.wcmp_enabled:
            return
        want = expected_hashes(intent, plan)
        states = await self._states(names, self._fenced(epoch))
        fabric = sorted({p for dp in plan.devices.values() for p in dp.routes})
        configs = device_configs(intent, plan)
        devices = dict(plan.devices)
        nudged = 0
        for d in names:
            st, dp = states[d], plan.devices.get(d)
            if isinstance(st, BaseException) or dp is None or not st.observed or st.running_hash != want[d]:
                continue
            bad = {msg.split(":", 1)[0] for msg in compare(
                dp, st, realization=intent.wcmp_realization.value, wcmp=True, fabric_prefixes=fabric,
                originated=configs[d].originated)}
            groups, routes = dict(dp.groups), dict(dp.routes)
            for prefix in sorted(bad & set(dp.routes)):
                hops = dp.groups[dp.routes[prefix]]
                if len(hops) < 2:
                    continue
                gid = f"nudge-{prefix}"
                groups[gid] = (NextHop(hops[0].port, hops[0].neighbor, hops[0].weight * 3 + 1), *hops[1:])
                routes[prefix] = gid
                nudged += 1
            devices[d] = DevicePlan(groups, routes)
        if not nudged:
            return
        log.info("repair: %d route(s) differ from a correct config: re-advertising them first", nudged)
        skewed = Plan(plan.fabric, plan.summary, devices, plan.links)
        push = {d: c for d, c in device_configs(intent, skewed).items() if d in set(names)}
        result = await commit(self._fenced(epoch), push, None, change=f"{txn}-nudge",
                              confirm_within=self.settings.confirm_within, verify_timeout=self.settings.verify_timeout)
        if result.ok:
            await asyncio.sleep(1.0)  # let BGP carry the re-advertisements into the kernels

    async def _verify_drains(self, ch: wrepo.Change, intent: Intent) -> None:
        """After a committed change that drains something: once the counters have had time to show
        traffic after the commit, record whether the drained targets still carry any (DESIGN.md: a
        drained device or link carries no transit traffic)."""
        if self.telemetry is None or self.settings.telemetry_interval_s <= 0:
            return
        targets = await self._db(lambda s: changes.drains_added(ch, intent, session=s))
        if not targets:
            return
        window = max(3 * self.settings.telemetry_interval_s, 3.0)
        await asyncio.sleep(window + self.settings.telemetry_interval_s)
        from controller.telemetry.drains import check_drains

        check = check_drains(self.telemetry, intent, targets, time.time(), window)
        doc = check.to_document(_now().isoformat())
        log.info("change %s: drains %s", ch.id, check.status, extra={"change": ch.id, "drain_check": check.status})
        ctx = WriteContext(actor=Actor("loom-controller (drain check)", "admin"), method="SYSTEM", path="drain-check")
        await self._db(lambda s: changes.record_drain_check(ch.id, doc, session=s, ctx=ctx))

    def _count_outcome(self, active: int | None, outcome: ChangeState) -> None:
        """The commit counter and the active-revision gauge, moved before the outcome is stored, so that
        whoever sees the change final also sees it counted."""
        if self.metrics is not None:
            self.metrics.commits.labels(outcome=outcome.value).inc()
            if active is not None:
                self.metrics.active_revision.set(active)

    def _after_commit(self, outcome: ChangeState) -> None:
        """After the outcome is stored: a drift check of a committed revision."""
        if outcome == ChangeState.COMMITTED and self.driver is not None:
            self._spawn(self.check_drift(repair=False))

    # -- recovery -----------------------------------------------------------------
    async def recover(self) -> Doc | None:
        """Finish or undo a change a previous controller process (or leader) left ``committing``
        (as :meth:`take_up` does, waiting for the outcome)."""
        if await self.take_up() is None:
            return None
        await self.wait_idle()
        return self.recovered

    async def _recover_change(self, ch: wrepo.Change, epoch: int) -> Doc | None:
        """Finish or undo ``ch``, which the leader of an older epoch (or this process before a restart)
        left committing; every agent call carries ``epoch``, so the old leader can no longer touch them."""
        try:
            async with self._southbound:
                return await self._recover(ch, epoch)
        except Deposed as exc:
            log.warning("recovery of change %s: %s", ch.id, exc)
            return None
        except Exception:
            log.exception("recovery of change %s failed; it stays committing (retried by the leader)", ch.id)
            return None

    async def _recover(self, ch: wrepo.Change, epoch: int) -> Doc | None:
        log.warning("change %s was committing when its controller stopped (epoch %s): recovering with epoch %d",
                    ch.id, ch.runner_epoch, epoch)
        ctx = WriteContext(actor=Actor("loom-controller (recovery)", "admin"), method="SYSTEM", path="recovery")
        assert ch.proposed_revision is not None
        rev = ch.proposed_revision
        if self.driver is None:
            done = await self._db(lambda s: changes.finish_commit(
                ch.id, ChangeState.COMMITTED, session=s, ctx=ctx, action="change.recover", runner=epoch,
                reason="recovered after a controller restart: no devices attached, the revision is recorded"))
            self.recovered = {"change": ch.id, "outcome": done.state, "devices": {}}
            return self.recovered
        intent, plan = await self._db(lambda s: changes.plan_for(rev, session=s, overlay=ch.overlay))
        want = expected_hashes(intent, plan)
        agents = self._fenced(epoch)
        names = sorted(set(want) & set(agents.devices))
        txn = ch.transaction or ""
        states = await self._states(names, agents)  # carries the new epoch: from here the old leader is fenced
        report: dict[str, str] = {}
        unreachable = [d for d in names if isinstance(states[d], BaseException)]
        at_target = [d for d in names if not isinstance(states[d], BaseException)
                     and states[d].running_hash == want[d]]
        outcome = ChangeState.ROLLED_BACK
        if not unreachable and len(at_target) == len(names):
            confirms = await asyncio.gather(*(agents.confirm(d, txn) for d in names
                                              if states[d].pending_change == txn))
            bad = [r for r in confirms if r.failed]
            for r in confirms:
                report[r.device] = "confirm failed: " + r.error if r.failed else "confirmed"
            for d in names:
                report.setdefault(d, "already at the target")
            if not bad:
                outcome = ChangeState.COMMITTED
        # a commit through intermediate plans: the legs' own transactions, the first last (an undo's are not
        # rolled back: that would redo a leg)
        leg_txns = [leg_transaction(txn, leg.target) for leg in reversed(commit_legs(ch.review, names)) if leg.target]
        if outcome != ChangeState.COMMITTED:
            async def undo(d: str) -> tuple[Any, Any]:
                if not leg_txns:
                    return await agents.rollback(d, txn), await agents.abort(d, txn)
                # whatever leg is pending first, then each leg's change where the device still runs it: every
                # rollback returns to the config before that leg, so the device ends on the active revision's
                st = states[d]
                first = [await agents.rollback(d, st.pending_change)] if st.pending_change else []
                rbs = [*first, *[await agents.rollback(d, t) for t in (txn, *leg_txns)]]
                bad = [r for r in rbs if r.failed]
                rb = bad[0] if bad else next((r for r in rbs if r.changed), rbs[0])
                return rb, await agents.abort(d, "")

            reachable = [d for d in names if d not in unreachable]
            undone = dict(zip(reachable, await asyncio.gather(*(undo(d) for d in reachable)), strict=True))
            touched = 0
            for d in names:
                if d in unreachable:
                    report[d] = f"unreachable ({states[d]}): its confirm timer rolls it back"
                    continue
                rb, ab = undone[d]
                touched += int(rb.changed)
                report[d] = ("rolled back" if rb.changed else "unchanged") + (
                    f" (rollback error: {rb.error})" if rb.failed else "") + (" (prepared change aborted)"
                                                                               if ab.changed else "")
            pending = [d for d in names if d not in unreachable and states[d].pending_change == txn]
            if not touched and not pending:
                outcome = ChangeState.FAILED
        reason = "recovered after a controller restart: " + {
            ChangeState.COMMITTED: "every device runs the target; confirmed",
            ChangeState.ROLLED_BACK: "the devices were rolled back",
            ChangeState.FAILED: "the change never reached the devices"}[outcome]
        detail = json.dumps(report, sort_keys=True)
        left = {} if outcome == ChangeState.COMMITTED else {
            d: report[d] for d in names if d in unreachable or "rollback error" in report.get(d, "")}
        if leg_txns and outcome == ChangeState.ROLLED_BACK and ch.previous_active is not None:
            from controller.workflow.settle import off_target  # a device a leg's rollback left elsewhere

            prev = ch.previous_active
            was = await self._db(lambda s: changes.plan_for(prev, session=s))
            left = {**off_target(await self._states(names, agents), expected_hashes(*was)), **left}
        settle = self._settle_doc(ch, outcome, left)
        done = await self._db(lambda s: changes.finish_commit(
            ch.id, outcome, session=s, ctx=ctx, action="change.recover", reason=f"{reason}: {detail}"[:3900],
            error=None if outcome == ChangeState.COMMITTED else "controller restarted during the commit",
            runner=epoch, settle=settle))
        self.recovered = {"change": ch.id, "outcome": done.state, "devices": report}
        log.warning("recovered change %s: %s", ch.id, done.state)
        if self.metrics is not None:
            self.metrics.commits.labels(outcome=outcome.value).inc()
        return self.recovered

    async def _states(self, names: list[str], agents: DeviceDriver | None = None) -> dict[str, Any]:
        agents = agents or self._agents
        got = await asyncio.gather(*(agents.state(d) for d in names), return_exceptions=True)
        return dict(zip(names, got, strict=True))

    # -- settling (leader) -------------------------------------------------------------
    def _settle_doc(self, ch: wrepo.Change, outcome: ChangeState, pending: dict[str, str]) -> Doc:
        """What a final change leaves to settle: ``pending`` devices onto the revision ``outcome`` names."""
        committed = outcome == ChangeState.COMMITTED
        doc = changes.settle_document(target_revision=ch.proposed_revision if committed else ch.previous_active,
                                      transaction=ch.transaction or "", undo=not committed, pending=pending)
        if pending:
            log.warning("change %s is %s but not settled: %s", ch.id, outcome, "; ".join(
                f"{d}: {why}" for d, why in sorted(pending.items())),
                extra={"change": ch.id, "outcome": outcome, "unsettled": sorted(pending)})
        return doc

    async def _settle_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.settle_interval)
            if not self.is_leader():
                continue  # only the leader drives agents
            try:
                await self.settle()
            except Exception:
                log.exception("settling failed")

    async def settle(self) -> list[Doc]:
        """As the leader, while no change commits: one step of every device that a final change left off the
        revision its state names; returns the settle documents recorded."""
        if self.driver is None or not self.is_leader() or self._southbound.locked():
            return []

        def read(s: Session) -> list[wrepo.Change]:
            return [] if wrepo.committing_change(session=s) is not None else wrepo.unsettled_changes(session=s)
        out: list[Doc] = []
        for ch in await self._db(read):
            if self._southbound.locked():
                break  # a commit was taken up meanwhile: it goes first
            async with self._southbound:
                doc = await self._settle_change(ch, self.epoch)
            if doc is not None:
                out.append(doc)
        return out

    async def _settle_change(self, ch: wrepo.Change, epoch: int) -> Doc | None:
        from controller.workflow.settle import settle_change

        doc = await settle_change(self._fenced(epoch), ch, lambda fn: self._db(fn),
                                  confirm_within=self.settings.confirm_within,
                                  verify_timeout=self.settings.verify_timeout)
        if not self.is_leader() or self.epoch != epoch:
            return None  # deposed meanwhile: the new leader keeps settling
        ctx = WriteContext(actor=Actor("loom-controller (settle)", "admin"), method="SYSTEM", path="settle")
        await self._db(lambda s: changes.record_settle(ch.id, doc, session=s, ctx=ctx))
        return doc

    # -- device state and drift ------------------------------------------------------
    async def device_state(self, name: str) -> Doc:
        if self.driver is None or name not in self.driver.devices:
            raise NotFound(f"device {name!r} has no agent attached to this controller")
        try:
            st = await self.driver.state(name)
        except Exception as exc:
            from southbound.driver import error_text

            raise Unreachable(name, error_text(exc)) from exc
        doc: Doc = st.to_document()
        doc["endpoint"] = self.driver.endpoint(name)
        return doc

    async def _drift_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.drift_interval)
            if not self.is_leader():
                continue  # the leader checks (and repairs) drift; followers only serve its reports
            try:
                await self.check_drift(repair=self.settings.drift_repair)
            except Exception:
                log.exception("drift check failed")

    async def check_drift(self, *, repair: bool = False) -> Doc:
        """Hold every device against the active revision; store and return the report."""
        from southbound.wcmp import compare

        async with self._drift_lock:
            def read(s: Session) -> tuple[int | None, bool]:
                return changes.active_revision(session=s), wrepo.committing_change(session=s) is not None
            active, busy = await self._db(read)
            doc: Doc = {"checked_at": _now().isoformat(), "active_revision": active, "devices": {}}
            if busy:
                last = await self._db(lambda s: wrepo.latest_drift(session=s))
                return last or {**doc, "note": "a change is committing: not checked"}
            if active is None or self.driver is None:
                doc["note"] = "no devices attached" if self.driver is None else "no revision is active yet"
                await self._save_drift(doc, active)
                return doc
            overlay = await self._db(lambda s: wrepo.active_overlay(session=s))
            intent, plan = await self._db(lambda s: changes.plan_for(active, session=s, overlay=overlay))
            want = await asyncio.to_thread(expected_hashes, intent, plan)
            from southbound.render import device_configs

            configs = device_configs(intent, plan)
            operational = self.operations.drift(overlay, {  # links and sessions down that the plan expects up
                d: {n.key: n.port for n in c.neighbors} for d, c in configs.items()})
            names = sorted(set(want) & set(self.driver.devices))
            fabric = sorted({p for dp in plan.devices.values() for p in dp.routes})
            # the leader's reads carry its epoch too (they raise the agents' fence); a follower's do not
            states = await self._states(names, self._fenced(self.epoch) if self.is_leader() else None)
            for d in names:
                st = states[d]
                if isinstance(st, BaseException):
                    from southbound.driver import error_text

                    doc["devices"][d] = {"status": "unreachable", "details": [error_text(st)]}
                    continue
                details: list[str] = []
                if st.running_hash != want[d]:
                    details.append(f"running config {st.running_hash[:12]} is not the active revision's "
                                   f"{want[d][:12]}")
                if st.pending_change:
                    details.append(f"change {st.pending_change} awaits confirmation on the device")
                dp = plan.devices.get(d)
                if st.observed and dp is not None:
                    details += compare(dp, st, realization=intent.wcmp_realization.value, wcmp=intent.wcmp_enabled,
                                       fabric_prefixes=fabric, originated=configs[d].originated)
                details += operational.get(d, [])
                doc["devices"][d] = {"status": "drift" if details else "ok", "details": details}
            await self._save_drift(doc, active)
            drifted = [d for d, r in doc["devices"].items() if r["status"] == "drift"]
        if repair and drifted:
            left = await self._db(lambda s: changes.unsettled(session=s))
            if left:  # settling drives those devices first; a repair now would find them busy
                doc["repair_note"] = f"not repaired: change(s) {', '.join(str(u['change']) for u in left)} settle"
            else:
                doc["repair"] = await self.repair(drifted)
        return doc

    async def _save_drift(self, doc: Doc, active: int | None) -> None:
        def save(s: Session) -> None:
            with write_transaction(s):
                wrepo.add_drift(doc, session=s, now=_now(), active=active)
        await self._db(save)
        if self.metrics is not None:
            self.metrics.drift_devices.set(sum(1 for r in doc["devices"].values() if r["status"] != "ok"))

    async def repair(self, devices: list[str] | None = None, ctx: WriteContext | None = None) -> Doc:
        """Push the active revision again, as a ``repair`` change (same gate-free commit path)."""
        ctx = ctx or WriteContext(actor=Actor("loom-controller (drift repair)", "admin"), method="SYSTEM",
                                  path="drift")
        active = await self._db(lambda s: changes.active_revision(session=s))
        if active is None:
            raise NotFound("no revision is active: nothing to repair")
        why = f"drift repair: re-push active revision {active}" + (f" ({', '.join(devices)})" if devices else "")

        def make(s: Session) -> int:
            with write_transaction(s):
                ch = wrepo.add_change(session=s, kind="repair", base_revision=active, proposed_revision=active,
                                      message=why, author=ctx.actor.name, now=_now())
            return ch.id
        change_id = await self._db(make)
        ch = await self.commit(change_id, ctx, skip_gate=True)
        return {"change": ch.id, "revision": active}
