"""The network-wide transaction of one commit: one leg, or one per intermediate plan, and a repair's nudge.

:func:`transact` holds the southbound lock and runs the transaction
(:func:`southbound.transaction.commit_plan`) in the stages of the review's
schedule, saving the progress in the background as results arrive; a commit
whose schedule goes through intermediate plans runs one transaction per leg
(:func:`run_legs`, DESIGN.md Transitions); a repair first nudges the devices
whose kernel routes were changed by hand (:func:`nudge`). The caller (the commit
use case, :mod:`controller.workflow.commit`) reads the plans and records the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from controller.model import Intent
from controller.model.documents import JsonObject, ProgressDocument
from controller.model.plan import DevicePlan, NextHop, Plan
from controller.store import workflow_repo as wrepo
from controller.workflow import changes
from controller.workflow.progress import PushProgress, reset_ports
from controller.workflow.review import CommitLeg, expected_hashes, leg_transaction
from controller.workflow.runtime import Runtime
from southbound.driver import DeviceDriver
from southbound.render import bridged, device_configs
from southbound.state import DeviceState
from southbound.transaction import TransactionResult, commit, commit_plan
from southbound.wcmp import compare

__all__ = ["nudge", "run_legs", "transact"]

log = logging.getLogger("loom.workflow")


async def transact(rt: Runtime, ch: wrepo.Change, intent: Intent, plan: Plan, names: list[str],
                   tracker: PushProgress, epoch: int, legs: list[CommitLeg]) -> TransactionResult:
    """The network-wide transaction (after a repair's :func:`nudge`), or one per leg through the schedule's
    intermediate plans (:func:`run_legs`), holding the southbound lock, with the progress saved in the
    background as results arrive."""
    assert ch.transaction is not None

    async def save(doc: ProgressDocument) -> None:
        await rt.in_session(lambda s: changes.save_progress(ch.id, doc, session=s, runner=epoch))

    flusher = asyncio.get_running_loop().create_task(tracker.flush(save))
    try:
        async with rt.southbound:
            if ch.kind == "repair":
                await nudge(rt, intent, plan, ch.transaction, names, epoch)
            if len(legs) > 1:
                return await run_legs(rt, ch, intent, plan, legs, tracker, epoch)
            return await commit_plan(rt.fenced(epoch), intent, plan, change=ch.transaction, only=names,
                                     confirm_within=rt.settings.confirm_within,
                                     verify_timeout=rt.settings.verify_timeout, progress=tracker.on_step,
                                     stages=legs[0].stages, on_stage=tracker.on_stage,
                                     sessions=reset_ports(ch.review), abandon=rt.failure_watch(intent))
    finally:
        flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flusher


Push = Callable[[Intent, Plan, str, list[list[str]], int | None], Awaitable[TransactionResult]]


def _pusher(rt: Runtime, agents: DeviceDriver, tracker: PushProgress, review: JsonObject | None) -> Push:
    """One leg's transaction: to ``plan`` as ``txn`` in ``stages``, reporting its stages from ``offset`` on
    (None: an undo, whose stages the progress document does not list)."""
    sessions = reset_ports(review)

    async def push(leg_intent: Intent, leg_plan: Plan, txn: str, stages: list[list[str]],
                   offset: int | None) -> TransactionResult:
        on_stage = None if offset is None else (lambda i, status: tracker.on_stage(offset + i, status))
        return await commit_plan(agents, leg_intent, leg_plan, change=txn, only=[d for st in stages for d in st],
                                 confirm_within=rt.settings.confirm_within,
                                 verify_timeout=rt.settings.verify_timeout, progress=tracker.on_step,
                                 stages=stages, on_stage=on_stage, sessions=sessions,
                                 abandon=rt.failure_watch(leg_intent))
    return push


async def run_legs(rt: Runtime, ch: wrepo.Change, intent: Intent, plan: Plan, legs: list[CommitLeg],
                   tracker: PushProgress, epoch: int) -> TransactionResult:
    """Commit through the schedule's intermediate plans (DESIGN.md Transitions): one transaction per leg,
    each confirmed before the next (``TRANSACTION.pJ`` to intermediate plan J, the change's own
    transaction to the proposed plan), every leg in its stages. A leg that fails rolls itself back;
    the legs confirmed before it are then undone (:func:`_undo_legs`). The result is the failed leg's,
    with ``legs_done`` and ``note`` saying what was undone; devices an undo could not move are left to
    settling (the caller compares them with the active revision)."""
    assert ch.transaction is not None and ch.previous_active is not None
    sched = (ch.review or {}).get("schedule") or {}
    mids = [Plan.from_document(d) for d in sched.get("intermediate") or []]
    before = await rt.plan(ch.previous_active)
    mid_intent = {"active": before[0], "bridge": bridged(before[0], intent)}.get(
        str(sched.get("intermediate_intent")), intent)
    push = _pusher(rt, rt.fenced(epoch), tracker, ch.review)
    reached = [before]  # the (intent, plan) each confirmed leg left the fabric on, the active one first
    offset = 0
    for n, leg in enumerate(legs):
        target = (intent, plan) if leg.target == 0 else (mid_intent, mids[leg.target - 1])
        log.info("change %s: leg %d/%d to %s", ch.id, n + 1, len(legs),
                 "the proposed plan" if leg.target == 0 else f"intermediate plan {leg.target}")
        result = await push(target[0], target[1], leg_transaction(ch.transaction, leg.target), leg.stages, offset)
        result.legs_done = n
        if result.ok:
            reached.append(target)
            offset += len(leg.stages)
            continue
        result.note = await _undo_legs(ch, push, legs[:n], reached, result)
        return result
    return result


async def _undo_legs(ch: wrepo.Change, push: Push, done: list[CommitLeg], reached: list[tuple[Intent, Plan]],
                     failed: TransactionResult) -> str:
    """Undo the legs ``done`` before the one that ``failed``, the last first, each by a transaction back to the
    plan before it in its stages reversed (the same states, visited the other way); returns what was undone."""
    undone = 0
    for m in range(len(done) - 1, -1, -1):
        back = await push(reached[m][0], reached[m][1], f"{ch.transaction}.u{done[m].target}",
                          list(reversed(done[m].stages)), None)
        if not back.ok:
            log.error("change %s: undoing leg %d failed: %s", ch.id, m + 1, back.error)
            return (f"undoing leg {m + 1} failed ({back.stage}: {back.error}); "
                    f"{undone} leg(s) undone, the devices left off are settled")
        undone += 1
    n = len(done)
    return (f"the {n} leg(s) before it were undone" if n else
            "the devices were rolled back" if failed.stage != "prepare" else
            "Prepare failed: nothing was applied")


def _skewed(intent: Intent, dp: DevicePlan, st: DeviceState, fabric: list[str],
            originated: tuple[str, ...]) -> tuple[DevicePlan, int]:
    """``dp`` with the weights of the groups whose kernel routes differ from it skewed, and how many."""
    bad = {msg.split(":", 1)[0] for msg in compare(
        dp, st, realization=intent.wcmp_realization.value, wcmp=True, fabric_prefixes=fabric,
        originated=originated)}
    groups, routes = dict(dp.groups), dict(dp.routes)
    nudged = 0
    for prefix in sorted(bad & set(dp.routes)):
        hops = dp.groups[dp.routes[prefix]]
        if len(hops) < 2:
            continue
        gid = f"nudge-{prefix}"
        groups[gid] = (NextHop(hops[0].port, hops[0].neighbor, hops[0].weight * 3 + 1), *hops[1:])
        routes[prefix] = gid
        nudged += 1
    return DevicePlan(groups, routes), nudged


async def nudge(rt: Runtime, intent: Intent, plan: Plan, txn: str, names: list[str], epoch: int) -> None:
    """Before a repair re-push: where a device runs the right config but its kernel does not
    hold the plan's weights (changed by hand), FRR has nothing to re-apply, so first push the
    plan with those groups' weights skewed (their next hops re-advertise, the kernel routes are
    rewritten), then the repair itself pushes the plan again."""
    if not intent.wcmp_enabled:
        return
    want = expected_hashes(intent, plan)
    states = await rt.states(names, rt.fenced(epoch))
    fabric = sorted({p for dp in plan.devices.values() for p in dp.routes})
    configs = device_configs(intent, plan)
    devices = dict(plan.devices)
    nudged = 0
    for d in names:
        st, dp = states[d], plan.devices.get(d)
        if isinstance(st, BaseException) or dp is None or not st.observed or st.running_hash != want[d]:
            continue
        devices[d], n = _skewed(intent, dp, st, fabric, configs[d].originated)
        nudged += n
    if not nudged:
        return
    log.info("repair: %d route(s) differ from a correct config: re-advertising them first", nudged)
    skewed = Plan(plan.fabric, plan.summary, devices, plan.links)
    push = {d: c for d, c in device_configs(intent, skewed).items() if d in set(names)}
    result = await commit(rt.fenced(epoch), push, None, change=f"{txn}-nudge",
                          confirm_within=rt.settings.confirm_within, verify_timeout=rt.settings.verify_timeout)
    if result.ok:
        await asyncio.sleep(1.0)  # let BGP carry the re-advertisements into the kernels
