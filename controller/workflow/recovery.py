"""Recovery: finishing or undoing a change a previous leader (or this process before a restart) left committing.

When a replica leads (at startup included), a change left ``committing`` under
another epoch or by a process that died is finished or undone by what the
devices report: every reachable device runs the target config and none is
unreachable -> Confirm where pending, ``committed``; otherwise Rollback and
Abort the transaction everywhere (every leg's, for a commit through intermediate
plans), ``rolled_back`` (``failed`` when it never reached a device). Agents'
confirm timers are the safety net for devices that cannot be reached, and what
is left off the final revision is recorded for settling. Every agent call
carries the new leader's epoch, so the old leader can no longer touch them.
What was done is recorded in the transition and audit log.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field

from controller.model.documents import ChangeState
from controller.model.errors import Deposed
from controller.service import Actor, WriteContext
from controller.store import workflow_repo as wrepo
from controller.workflow import changes
from controller.workflow.review import commit_legs, expected_hashes, leg_transaction
from controller.workflow.runtime import Runtime
from controller.workflow.settle import off_target, settle_doc
from southbound.driver import DeviceDriver
from southbound.state import DeviceState, StepResult

__all__ = ["Recovered", "Recovery"]

log = logging.getLogger("loom.workflow")
CTX = WriteContext(actor=Actor("loom-controller (recovery)", "admin"), method="SYSTEM", path="recovery")
_REASONS = {ChangeState.COMMITTED: "every device runs the target; confirmed",
            ChangeState.ROLLED_BACK: "the devices were rolled back",
            ChangeState.FAILED: "the change never reached the devices"}


@dataclass(frozen=True)
class Recovered:
    """A recovery's outcome: the change, the state it ended in, what was done to each device."""

    change: int
    outcome: ChangeState
    devices: dict[str, str]


@dataclass
class _Seen:
    """What the new leader found of a change's devices (``states``: each state, or what its read raised),
    and what it did to each (``report``)."""

    agents: DeviceDriver
    txn: str
    names: list[str]
    states: dict[str, DeviceState | BaseException]
    report: dict[str, str] = field(default_factory=dict)

    def reached(self, d: str) -> DeviceState:
        """The state device ``d`` reported (one that :attr:`unreachable` does not list)."""
        st = self.states[d]
        assert isinstance(st, DeviceState), st
        return st

    @property
    def unreachable(self) -> list[str]:
        return [d for d in self.names if isinstance(self.states[d], BaseException)]


class Recovery:
    """The recovery use case of one controller process; ``recovered`` is the last recovery's document."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.recovered: Recovered | None = None

    async def recover_change(self, ch: wrepo.Change, epoch: int) -> Recovered | None:
        """Finish or undo ``ch``, which the leader of an older epoch (or this process before a restart)
        left committing; every agent call carries ``epoch``, so the old leader can no longer touch them."""
        try:
            async with self.rt.southbound:
                return await self._recover(ch, epoch)
        except Deposed as exc:
            log.warning("recovery of change %s: %s", ch.id, exc)
            return None
        except Exception:
            log.exception("recovery of change %s failed; it stays committing (retried by the leader)", ch.id)
            return None

    async def _recover(self, ch: wrepo.Change, epoch: int) -> Recovered | None:
        rt = self.rt
        # the same epoch: this leader's own commit, whose end the store refused to record (a failover)
        why = ("its end could not be recorded (the store failed)" if ch.runner_epoch == epoch
               else "its controller stopped")
        log.warning("change %s was committing when %s (epoch %s): recovering with epoch %d",
                    ch.id, why, ch.runner_epoch, epoch)
        assert ch.proposed_revision is not None
        if rt.driver is None:
            return await self._record_without_devices(ch, epoch)
        intent, plan = await rt.plan(ch.proposed_revision, ch.overlay)
        want = expected_hashes(intent, plan)
        agents = rt.fenced(epoch)
        names = sorted(set(want) & set(agents.devices))
        # the read carries the new epoch: from here the old leader is fenced
        seen = _Seen(agents, ch.transaction or "", names, await rt.states(names, agents))
        state = ChangeState.ROLLED_BACK
        if not seen.unreachable and all(seen.reached(d).running_hash == want[d] for d in names):
            state = await self._confirm(seen)
        # a commit through intermediate plans: the legs' own transactions, the first last (an undo's are not
        # rolled back: that would redo a leg)
        leg_txns = [leg_transaction(seen.txn, leg.target) for leg in reversed(commit_legs(ch.review, names))
                    if leg.target]
        if state != ChangeState.COMMITTED:
            state = await self._undo(seen, leg_txns)
        return await self._record(ch, epoch, state, seen, bool(leg_txns))

    async def _record_without_devices(self, ch: wrepo.Change, epoch: int) -> Recovered:
        done = await self.rt.in_session(lambda s: changes.finish_commit(
            ch.id, ChangeState.COMMITTED, session=s, ctx=CTX, action="change.recover", runner=epoch,
            reason="recovered after a controller restart: no devices attached, the revision is recorded"))
        self.recovered = Recovered(ch.id, done.state, {})
        return self.recovered

    async def _confirm(self, seen: _Seen) -> ChangeState:
        """Every device runs the target: Confirm where the transaction is pending."""
        confirms = await asyncio.gather(*(seen.agents.confirm(d, seen.txn) for d in seen.names
                                          if seen.reached(d).pending_change == seen.txn))
        for r in confirms:
            seen.report[r.device] = "confirm failed: " + r.error if r.failed else "confirmed"
        for d in seen.names:
            seen.report.setdefault(d, "already at the target")
        return ChangeState.ROLLED_BACK if any(r.failed for r in confirms) else ChangeState.COMMITTED

    async def _undo_device(self, seen: _Seen, d: str, leg_txns: list[str]) -> tuple[StepResult, StepResult]:
        """Roll ``d`` back and abort the transaction there; returns the rollback that tells (a failed one
        first, else one that changed something) and the abort."""
        agents, txn = seen.agents, seen.txn
        if not leg_txns:
            return await agents.rollback(d, txn), await agents.abort(d, txn)
        # whatever leg is pending first, then each leg's change where the device still runs it: every
        # rollback returns to the config before that leg, so the device ends on the active revision's
        st = seen.reached(d)
        first = [await agents.rollback(d, st.pending_change)] if st.pending_change else []
        rbs = [*first, *[await agents.rollback(d, t) for t in (txn, *leg_txns)]]
        bad = [r for r in rbs if r.failed]
        rb = bad[0] if bad else next((r for r in rbs if r.changed), rbs[0])
        return rb, await agents.abort(d, "")

    async def _undo(self, seen: _Seen, leg_txns: list[str]) -> ChangeState:
        """Roll back and abort the transaction on every reachable device: ``rolled_back``, or ``failed`` when
        no device had it."""
        unreachable = set(seen.unreachable)
        reachable = [d for d in seen.names if d not in unreachable]
        undone = dict(zip(reachable, await asyncio.gather(*(self._undo_device(seen, d, leg_txns)
                                                            for d in reachable)), strict=True))
        touched = 0
        for d in seen.names:
            if d in unreachable:
                seen.report[d] = f"unreachable ({seen.states[d]}): its confirm timer rolls it back"
                continue
            rb, ab = undone[d]
            touched += int(rb.changed)
            seen.report[d] = ("rolled back" if rb.changed else "unchanged") + (
                f" (rollback error: {rb.error})" if rb.failed else "") + (" (prepared change aborted)"
                                                                           if ab.changed else "")
        pending = [d for d in reachable if seen.reached(d).pending_change == seen.txn]
        return ChangeState.FAILED if not touched and not pending else ChangeState.ROLLED_BACK

    async def _record(self, ch: wrepo.Change, epoch: int, state: ChangeState, seen: _Seen,
                      legs: bool) -> Recovered:
        """Store the outcome, with what is left to settle (``legs``: a leg's rollback may have left a device
        on an intermediate plan: every device is compared with the revision active before)."""
        rt, report = self.rt, seen.report
        reason = "recovered after a controller restart: " + _REASONS[state]
        detail = json.dumps(report, sort_keys=True)
        unreachable = set(seen.unreachable)
        left = {} if state == ChangeState.COMMITTED else {
            d: report[d] for d in seen.names if d in unreachable or "rollback error" in report.get(d, "")}
        if legs and state == ChangeState.ROLLED_BACK and ch.previous_active is not None:
            was = await rt.plan(ch.previous_active)  # a device a leg's rollback left elsewhere
            left = {**off_target(await rt.states(seen.names, seen.agents), expected_hashes(*was)), **left}
        settle = settle_doc(ch, state, left)
        done = await rt.in_session(lambda s: changes.finish_commit(
            ch.id, state, session=s, ctx=CTX, action="change.recover", reason=f"{reason}: {detail}"[:3900],
            error=None if state == ChangeState.COMMITTED else "controller restarted during the commit",
            runner=epoch, settle=settle))
        self.recovered = Recovered(ch.id, done.state, dict(report))
        log.warning("recovered change %s: %s", ch.id, done.state)
        if rt.metrics is not None:
            rt.metrics.commits.labels(outcome=state.value).inc()
        return self.recovered
