"""Settling: a change is final only when the fabric is.

A transaction ends ``committed``, ``failed`` or ``rolled_back``, but a device
whose agent was down when it should have been rolled back (or whose rollback
failed) can come back still on the change's config, awaiting a confirmation
that will never come, or confirmed on it. This module owns what the leader
does about it, as values and one async step per device:
:func:`pending_after` names the devices a transaction's end left off the
revision its outcome names; :func:`settle_device` moves one such device one
step towards it (Confirm or Rollback what it holds pending, undo the change's
transaction, or push the target revision's config to it as a one-device
transaction) and says why it is not there yet, if it is not.
:func:`settle_doc` is what a commit or a recovery records as left to settle (a
:class:`~controller.model.documents.SettleDocument`);
:class:`Settler` is the leader's loop: it runs :func:`settle_change` on every
unsettled change while no transaction holds the devices, stores what is left on
the change (``settled``, ``settle``) and keeps at it every ``settle_interval``
seconds, with every agent call fenced by its epoch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.documents import ChangeState, SettleDocument, UnsettledDocument
from controller.model.plan import Plan
from controller.service import Actor, WriteContext
from controller.store import workflow_repo as wrepo
from controller.workflow import changes
from controller.workflow.review import expected_hashes
from controller.workflow.runtime import Runtime
from southbound.config import DeviceConfig
from southbound.driver import DeviceDriver, error_text
from southbound.render import config_hash, device_configs
from southbound.state import DeviceState
from southbound.transaction import TransactionResult, commit

__all__ = ["Settler", "left_off", "off_target", "pending_after", "settle_change", "settle_device", "settle_doc",
           "unsettled_note"]

log = logging.getLogger("loom.workflow")
#: how a revision's intent and plan are got (:meth:`controller.workflow.runtime.Runtime.plan`)
PlanOf = Callable[[int], Awaitable[tuple[Intent, Plan]]]
#: each device's state, or the exception its read raised (:meth:`controller.workflow.runtime.Runtime.states`)
States = Mapping[str, DeviceState | BaseException]
SETTLE_CTX = WriteContext(actor=Actor("loom-controller (settle)", "admin"), method="SYSTEM", path="settle")


def pending_after(result: TransactionResult) -> dict[str, str]:
    """Device -> why, for the devices a transaction's end (a :class:`~southbound.transaction.TransactionResult`)
    did not bring onto the revision its outcome names: a confirmed change reached every device; a
    rolled-back one did not reach those whose Rollback failed (unreachable, say); a change that failed at
    Prepare applied nothing anywhere."""
    if result.ok or result.stage == "prepare":
        return {}
    return {d: f"rollback failed: {r.error}" for d, r in sorted(result.steps.get("rollback", {}).items())
            if r.failed}


async def left_off(ch: wrepo.Change, outcome: ChangeState, result: TransactionResult, plan_of: PlanOf,
                   states: Callable[[], Awaitable[States]]) -> dict[str, str]:
    """The devices a transaction's end left off the revision ``outcome`` names: those it could not roll
    back (:func:`pending_after`) and, after a rollback, any whose state (``states()``, read now) is not the
    revision active before (a repair's rollback returns its devices to the nudge it pushed first; a device
    may have drifted before the change)."""
    left = pending_after(result)
    prev = ch.previous_active
    if outcome != ChangeState.ROLLED_BACK or prev is None:
        return left
    try:
        intent, plan = await plan_of(prev)
        want = await asyncio.to_thread(expected_hashes, intent, plan)
        return {**off_target(await states(), want), **left}
    except Exception:  # the outcome is recorded all the same; what failed to roll back is still known
        log.exception("change %s: reading the devices after its rollback failed", ch.id)
        return left


def off_target(states: States, want: dict[str, str]) -> dict[str, str]:
    """Device -> why, for the devices whose state (a :class:`~southbound.state.DeviceState`, or the exception
    its read raised) is not the config hash ``want`` names with nothing pending."""
    out: dict[str, str] = {}
    for d, st in sorted(states.items()):
        if isinstance(st, BaseException):
            out[d] = f"unreachable: {error_text(st)}"
        elif st.pending_change:
            out[d] = f"change {st.pending_change} awaits confirmation"
        elif d in want and st.running_hash != want[d]:
            out[d] = f"runs {st.running_hash[:12]}, not {want[d][:12]}"
    return out


def unsettled_note(left: list[UnsettledDocument], from_agents: bool) -> str:
    """What a review says of the changes ``left`` unsettled (:func:`~controller.workflow.changes.unsettled`);
    ``from_agents``: its config diff came from the agents' Prepare (against what they run)."""
    devices = sorted({d for u in left for d in u.devices})
    return (f"not every device runs the revision of the last change yet: {', '.join(devices)} (change(s) "
            f"{', '.join(str(u.change) for u in left)}, being settled); " + (
                "their config diff is against what they really run (their agents' Prepare)" if from_agents
                else "their config diff was rendered against the active revision, not what they run"))


async def settle_device(driver: DeviceDriver, device: str, *, transaction: str, undo: bool, want: str | None,
                        config: DeviceConfig | None, attempt: int, confirm_within: float,
                        verify_timeout: float) -> str | None:
    """One step of ``device`` towards the config hash ``want`` (None: no revision was active before the
    change, so undoing ``transaction`` is the target); ``undo``: the change's transaction is undone there
    (rolled back, failed), else it is confirmed. Returns None once the device is there, else why not."""
    try:
        st = await driver.state(device)
        if st.pending_change:
            mine = not undo and st.pending_change == transaction and want is not None and st.running_hash == want
            r = await (driver.confirm(device, transaction) if mine else driver.rollback(device, st.pending_change))
            if r.failed:
                return f"{r.step} of pending change {st.pending_change} failed: {r.error}"
            st = await driver.state(device)
            if st.pending_change:
                return f"change {st.pending_change} still awaits confirmation"
        if want is not None and st.running_hash == want:
            return None
        if undo:
            r = await driver.rollback(device, transaction)
            if r.failed:
                return f"rollback of {transaction} failed: {r.error}"
            if want is None:
                return None  # no revision to return to: the change undone is the target
            st = await driver.state(device)
            if st.running_hash == want:
                return None
    except Exception as exc:  # a read that raised: the agent is not (yet) back
        return f"unreachable: {error_text(exc)}"
    if config is None:
        return f"runs {st.running_hash[:12]}, not the target, and the target has no config for it"
    res = await commit(driver, {device: config}, None, change=f"{transaction}-settle{attempt}",
                       confirm_within=confirm_within, verify_timeout=verify_timeout)
    return None if res.ok else f"runs {st.running_hash[:12]}; pushing the target failed: {res.error}"


async def settle_change(agents: DeviceDriver, ch: wrepo.Change, plan_of: PlanOf, *, confirm_within: float,
                        verify_timeout: float) -> SettleDocument:
    """One step of every device ``ch`` left to settle, all at once, through ``agents`` (fenced by the
    leader's epoch); ``plan_of(revision)`` gets a revision's intent and plan. Returns the new settle
    document (:func:`~controller.workflow.changes.settle_document`), not yet stored."""
    prior = ch.settle or {}
    target, txn, undo = prior.get("target_revision"), str(prior.get("transaction") or ""), bool(prior.get("undo"))
    configs: dict[str, DeviceConfig] = {}
    if target is not None:
        intent, plan = await plan_of(int(target))
        configs = await asyncio.to_thread(device_configs, intent, plan)
    names = sorted(d for d in prior.get("pending", {}) if d in set(agents.devices))
    attempt = int(prior.get("attempts", 0)) + 1
    got = await asyncio.gather(*(settle_device(
        agents, d, transaction=txn, undo=undo, want=config_hash(configs[d]) if d in configs else None,
        config=configs.get(d), attempt=attempt, confirm_within=confirm_within, verify_timeout=verify_timeout)
        for d in names))
    pending = {d: why for d, why in zip(names, got, strict=True) if why is not None}
    if pending != prior.get("pending"):
        log.log(logging.WARNING if pending else logging.INFO, "change %s: %s", ch.id,
                "still unsettled: " + "; ".join(f"{d}: {why}" for d, why in sorted(pending.items())) if pending
                else f"settled: every device runs revision {target}" if target is not None
                else f"settled: transaction {txn} undone on every device",
                extra={"change": ch.id, "unsettled": sorted(pending), "attempt": attempt})
    return changes.settle_document(target_revision=target, transaction=txn, undo=undo, pending=pending,
                                   attempts=attempt)


def settle_doc(ch: wrepo.Change, outcome: ChangeState, pending: dict[str, str]) -> SettleDocument:
    """What a final change leaves to settle: ``pending`` devices onto the revision ``outcome`` names."""
    committed = outcome == ChangeState.COMMITTED
    doc = changes.settle_document(target_revision=ch.proposed_revision if committed else ch.previous_active,
                                  transaction=ch.transaction or "", undo=not committed, pending=pending)
    if pending:
        log.warning("change %s is %s but not settled: %s", ch.id, outcome, "; ".join(
            f"{d}: {why}" for d, why in sorted(pending.items())),
            extra={"change": ch.id, "outcome": outcome, "unsettled": sorted(pending)})
    return doc


class Settler:
    """The leader's settling: one step of every unsettled change's devices every ``settle_interval``."""

    def __init__(self, rt: Runtime):
        self.rt = rt

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.rt.settings.settle_interval)
            if not self.rt.is_leader():
                continue  # only the leader drives agents
            try:
                await self.settle()
            except Exception:
                log.exception("settling failed")

    async def settle(self) -> list[SettleDocument]:
        """As the leader, while no change commits: one step of every device that a final change left off the
        revision its state names; returns the settle documents recorded."""
        rt = self.rt
        if rt.driver is None or not rt.is_leader() or rt.southbound_busy:
            return []

        def read(s: Session) -> list[wrepo.Change]:
            return [] if wrepo.committing_change(session=s) is not None else wrepo.unsettled_changes(session=s)
        out: list[SettleDocument] = []
        for ch in await rt.in_session(read):
            if rt.southbound_busy:
                break  # a commit was taken up meanwhile: it goes first
            async with rt.southbound:
                doc = await self._settle_change(ch, rt.epoch)
            if doc is not None:
                out.append(doc)
        return out

    async def _settle_change(self, ch: wrepo.Change, epoch: int) -> SettleDocument | None:
        rt = self.rt
        doc = await settle_change(rt.fenced(epoch), ch, rt.plan, confirm_within=rt.settings.confirm_within,
                                  verify_timeout=rt.settings.verify_timeout)
        if not rt.is_leader() or rt.epoch != epoch:
            return None  # deposed meanwhile: the new leader keeps settling
        await rt.in_session(lambda s: changes.record_settle(ch.id, doc, session=s, ctx=SETTLE_CTX))
        return doc
