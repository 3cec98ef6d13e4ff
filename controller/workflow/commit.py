"""Committing a change: the durable mark, the leader's take-up and the push.

:meth:`Commits.commit` gates the change and durably marks it ``committing``
(:func:`controller.workflow.changes.begin_commit`, its transaction id and the
previous active revision recorded before any device hears of it), then asks the
leader to take it up. Only the leader pushes: a commit asked of any replica is
queued in the store (``runner_epoch`` NULL) and :meth:`Commits.take_up` (at once
on the leader, else within ``commit_poll_interval``; on a store only this process may open, SQLite,
within :data:`EXCLUSIVE_POLL_S`: no other replica queues anything there) marks it with the leader's
epoch and pushes it, or hands a change an older leader left ``committing`` to
recovery (:mod:`controller.workflow.recovery`). The push reads the plan (no
session open through a solve), runs the network-wide transaction
(:mod:`controller.workflow.push`) with per-device progress, and stores the
outcome with what is left to settle; a deposed leader's outcome is not recorded
(:class:`~controller.model.errors.Deposed`). With no agents a commit only
records the revision as active.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from controller.model import Intent
from controller.model.documents import ChangeState, ProgressDocument
from controller.model.errors import Deposed, StoreUnavailable
from controller.service import Actor, WriteContext
from controller.store import workflow_repo as wrepo
from controller.telemetry.drains import check_drains
from controller.workflow import changes
from controller.workflow.progress import PushProgress, outcome
from controller.workflow.push import transact
from controller.workflow.review import CommitLeg, commit_legs
from controller.workflow.runtime import Runtime
from controller.workflow.settle import left_off, settle_doc
from southbound.transaction import TransactionResult, new_change_id

__all__ = ["EXCLUSIVE_POLL_S", "Commits"]

log = logging.getLogger("loom.workflow")
DRAIN_CTX = WriteContext(actor=Actor("loom-controller (drain check)", "admin"), method="SYSTEM", path="drain-check")


def _queued_ctx(ch: wrepo.Change) -> WriteContext:
    """Who a commit queued by another replica is recorded for: the actor of its ``committing`` transition."""
    asked = next((t.actor for t in reversed(ch.transitions) if t.state == ChangeState.COMMITTING), "")
    return WriteContext(actor=Actor(asked or "loom-controller", "operator"), method="SYSTEM", path="commit-queue")


def _leg_outcome(result: TransactionResult, names: list[str], legs: list[CommitLeg]) -> tuple[ChangeState, str]:
    """The final state and reason of a transaction's end (through ``legs``: what the failed leg undid)."""
    state, reason = outcome(result, len(names))
    if len(legs) > 1 and not result.ok:
        applied = result.legs_done > 0 or result.stage != "prepare"
        state = ChangeState.ROLLED_BACK if applied else ChangeState.FAILED
        reason = f"leg {result.legs_done + 1} of {len(legs)} failed at {result.stage}: {result.note}"
    return state, reason


#: the queue loop's interval where this process alone opens the store (:meth:`Commits.poll_interval`)
EXCLUSIVE_POLL_S = 5.0


class Commits:
    """The commit use case of one controller process. ``recover(change, epoch)`` finishes or undoes a change
    an older leader left committing; ``after_commit(outcome)`` runs once an outcome is stored."""

    def __init__(self, rt: Runtime, *, recover: Callable[[wrepo.Change, int], Coroutine[Any, Any, Any]],
                 after_commit: Callable[[ChangeState], None]):
        self.rt = rt
        self._recover = recover
        self._after_commit = after_commit
        self.task: asyncio.Task[Any] | None = None  # the last commit or recovery taken up
        self._running: set[int] = set()  # committing changes this process pushes or recovers
        self._requested: dict[int, WriteContext] = {}  # who asked this replica to commit them
        # take-ups of this process, one at a time: a take-up in flight is not yet in ``_running``, and a second
        # one reading the store meanwhile would find the change under this epoch and "recover" it (issue 31.0)
        self._take_up_lock = asyncio.Lock()

    async def commit(self, change_id: int, ctx: WriteContext, *, force: bool = False, reason: str | None = None,
                     skip_gate: bool = False) -> wrepo.Change:
        """Gate and mark the change committing (durably), then push it in the background."""
        txn = new_change_id()
        ch = await self.rt.in_session(lambda s: changes.begin_commit(
            change_id, session=s, ctx=ctx, transaction=txn, force=force, reason=reason, skip_gate=skip_gate))
        self._requested[ch.id] = ctx
        await self.take_up()  # the leader runs it now; on a follower it waits in the store for the leader
        return ch

    async def wait_idle(self) -> None:
        if self.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.task)

    async def stop(self) -> None:
        """Let a commit in flight finish (30 s at most)."""
        if self.task is not None and not self.task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self.task), timeout=30)

    # -- the commit queue (leader) ------------------------------------------------
    def poll_interval(self) -> float:
        """How long the queue loop sleeps between looks at the store: ``commit_poll_interval``, or at least
        :data:`EXCLUSIVE_POLL_S` where this process alone opens the store (every commit then comes through
        :meth:`commit`, which takes it up at once; the look is a safety net, for a commit asked while the lease
        had lapsed). A look costs little, but a process woken after half a second of sleep touches memory the
        machine has let go cold: on the CI machine each look cost about 50 ms of CPU, a tenth of a core."""
        every = self.rt.settings.commit_poll_interval
        cluster = self.rt.cluster
        return max(every, EXCLUSIVE_POLL_S) if cluster is not None and cluster.exclusive else every

    async def queue_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval())
            try:
                await self.take_up()
            except Exception:
                log.exception("taking up a queued commit failed")

    async def take_up(self) -> int | None:
        """As the leader: start the committing change waiting in the store (queued by any replica), or
        recover one a previous leader (an older epoch, or this process before a restart) left
        committing. Returns the change taken up, if any."""
        if not self.rt.is_leader():
            return None
        async with self._take_up_lock:
            return await self._take_up()

    async def _take_up(self) -> int | None:
        """:meth:`take_up`, under the take-up lock: a change this process runs is in ``_running`` before the
        lock is released, so it is never mistaken for one a previous leader left."""
        rt = self.rt
        epoch = rt.epoch
        ch = await rt.in_session(lambda s: wrepo.committing_change(session=s))
        if ch is None or ch.id in self._running:
            return None
        replica = rt.cluster.replica if rt.cluster is not None else None
        previous = ch.runner_epoch
        if not await rt.in_session(lambda s: changes.take_up(ch.id, epoch, previous=previous, replica=replica,
                                                             session=s)):
            return None  # another leader took it meanwhile, or the lease passed on
        self._running.add(ch.id)
        if previous is None:
            ctx = self._requested.pop(ch.id, None) or _queued_ctx(ch)
            task = rt.spawn(self._run_commit(ch, ctx, epoch))
        else:
            task = rt.spawn(self._recover(ch, epoch))
        task.add_done_callback(lambda _t: self._running.discard(ch.id))
        self.task = task
        return ch.id

    # -- the push -------------------------------------------------------------------
    async def _run_commit(self, ch: wrepo.Change, ctx: WriteContext, epoch: int) -> None:
        try:
            await self._push(ch, ctx, epoch)
        except Deposed as exc:
            log.warning("change %s: %s", ch.id, exc)
        except StoreUnavailable as exc:
            # The store did not answer (a failover of its primary) while the push was read or recorded: what
            # the devices run is not known here, so the change is not marked failed. It stays committing, and
            # the leader's commit queue (this process, or the next leader) recovers it from the devices.
            log.warning("change %s: the store did not answer during the commit (%s); it stays committing, and "
                        "recovery settles it from what the devices run", ch.id, exc)
        except Exception as exc:  # the change must not stay committing in a live process
            log.exception("commit of change %s failed unexpectedly", ch.id)
            error = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                await self.rt.in_session(lambda s: changes.finish_commit(
                    ch.id, ChangeState.FAILED, session=s, ctx=ctx, reason="the controller failed during the commit",
                    error=error, runner=epoch))
            if self.rt.metrics is not None:
                self.rt.metrics.commits.labels(outcome=ChangeState.FAILED.value).inc()

    async def _push(self, ch: wrepo.Change, ctx: WriteContext, epoch: int) -> None:
        """Push a committing change: its plan, the transaction with progress, the outcome recorded."""
        rt = self.rt
        assert ch.proposed_revision is not None and ch.transaction is not None
        rev = ch.proposed_revision
        intent, plan = await rt.plan(rev, ch.overlay, observe=True)
        if rt.driver is None:
            await self._record_without_devices(ch, ctx, epoch)
            return
        failed = set((ch.overlay or {}).get("devices") or ())  # a failed device's agent is gone: it is left out
        names = sorted((set(intent.device_map) & set(rt.driver.devices)) - failed)
        legs = commit_legs(ch.review, names)
        stages = [st for leg in legs for st in leg.stages]
        tracker = PushProgress(ch.id, names, rt.metrics, stages, [u for leg in legs for u in leg.worst],
                               [leg.target for leg in legs for _ in leg.stages] if len(legs) > 1 else None)
        await rt.in_session(lambda s: changes.save_progress(ch.id, tracker.doc, session=s, runner=epoch))
        log.info("change %s: pushing revision r%s to %d device(s) in %d stage(s)%s (epoch %d)", ch.id, rev,
                 len(names), len(stages), f" through {len(legs) - 1} intermediate plan(s)" if len(legs) > 1 else "",
                 epoch, extra={"change": ch.id, "revision": rev, "transaction": ch.transaction, "epoch": epoch})
        result = await transact(rt, ch, intent, plan, names, tracker, epoch, legs)
        tracker.doc.step = "done" if result.ok else result.stage
        state, reason = _leg_outcome(result, names, legs)
        log.info("change %s: %s (%s)", ch.id, state, reason, extra={"change": ch.id, "outcome": state})
        settle = settle_doc(ch, state, await left_off(ch, state, result, rt.plan, lambda: rt.states(
            names, rt.fenced(epoch))))
        self._count_outcome(rev if result.ok else None, state)
        await rt.in_session(lambda s: changes.finish_commit(ch.id, state, session=s, ctx=ctx, reason=reason,
                                                            error=result.error or None, progress=tracker.doc,
                                                            runner=epoch, settle=settle))
        self._after_commit(state)
        if state == ChangeState.COMMITTED:
            rt.spawn(self._verify_drains(ch, intent))

    async def _record_without_devices(self, ch: wrepo.Change, ctx: WriteContext, epoch: int) -> None:
        """With no agents attached a commit only records the revision as active."""
        rev = ch.proposed_revision
        log.info("change %s: no devices attached, recording revision r%s as active", ch.id, rev,
                 extra={"change": ch.id, "revision": rev})
        recorded = ProgressDocument(step="done", devices={}, note="no devices attached: the revision is only recorded")
        self._count_outcome(rev, ChangeState.COMMITTED)
        await self.rt.in_session(lambda s: changes.finish_commit(
            ch.id, ChangeState.COMMITTED, session=s, ctx=ctx, progress=recorded,
            reason="no devices attached: the revision was recorded as active", runner=epoch))
        self._after_commit(ChangeState.COMMITTED)

    async def _verify_drains(self, ch: wrepo.Change, intent: Intent) -> None:
        """After a committed change that drains something: once the counters have had time to show
        traffic after the commit, record whether the drained targets still carry any (DESIGN.md: a
        drained device or link carries no transit traffic)."""
        rt = self.rt
        if rt.telemetry is None or rt.settings.telemetry_interval_s <= 0:
            return
        targets = await rt.in_session(lambda s: changes.drains_added(ch, intent, session=s))
        if not targets:
            return
        window = max(3 * rt.settings.telemetry_interval_s, 3.0)
        await asyncio.sleep(window + rt.settings.telemetry_interval_s)
        check = check_drains(rt.telemetry, intent, targets, time.time(), window)
        doc = check.to_model(datetime.now(UTC).isoformat())
        log.info("change %s: drains %s", ch.id, check.status, extra={"change": ch.id, "drain_check": check.status})
        await rt.in_session(lambda s: changes.record_drain_check(ch.id, doc, session=s, ctx=DRAIN_CTX))

    def _count_outcome(self, active: int | None, state: ChangeState) -> None:
        """The commit counter and the active-revision gauge, moved before the outcome is stored, so that
        whoever sees the change final also sees it counted."""
        metrics = self.rt.metrics
        if metrics is not None:
            metrics.commits.labels(outcome=state.value).inc()
            if active is not None:
                metrics.active_revision.set(active)
