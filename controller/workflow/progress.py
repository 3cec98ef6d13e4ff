"""A commit's progress, as the transaction's callbacks report it, and how its end reads.

:class:`PushProgress` keeps the :class:`~controller.model.documents.ProgressDocument` of one commit: the transaction
(:func:`southbound.transaction.commit_plan`) calls :meth:`PushProgress.on_step` and
:meth:`PushProgress.on_stage` as devices and stages move, and :meth:`PushProgress.flush`
saves a snapshot at most every 0.2 s while it changes. :func:`outcome` names the
change's final state from the transaction's result; :func:`reset_ports` reads the
BGP sessions a review says the change resets (the transaction waits for them
between stages).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, cast

from controller.model.documents import (
    ChangeState,
    DeviceProgress,
    JsonObject,
    ProgressDocument,
    StageProgressDocument,
)
from controller.model.errors import StoreUnavailable

__all__ = ["PushProgress", "outcome", "reset_ports"]

log = logging.getLogger("loom.workflow")
StageStatus = Literal["pending", "commit", "verify", "done", "failed"]


def reset_ports(review: JsonObject | None) -> dict[str, list[str]]:
    """Device -> the ports whose BGP session the reviewed change resets (the review's
    ``bgp_sessions_reset``): the transaction waits for them between stages."""
    resets = (review or {}).get("bgp_sessions_reset")
    rows = (resets.get("sessions") if isinstance(resets, dict) else None) or []
    out: dict[str, list[str]] = {}
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, dict) and r.get("device") and r.get("port"):
            out.setdefault(str(r["device"]), []).append(str(r["port"]))
    return out


def outcome(result: Any, devices: int) -> tuple[ChangeState, str]:
    """How a transaction ended, as the change's final state and the reason recorded with it."""
    if result.ok:
        return ChangeState.COMMITTED, f"transaction {result.change} confirmed on {devices} device(s)"
    if result.stage == "prepare":
        return ChangeState.FAILED, "Prepare failed: nothing was applied"
    return ChangeState.ROLLED_BACK, f"{result.stage} failed: the devices were rolled back"


def _stage(devices: list[str], worst: float | None, plan: int | None) -> StageProgressDocument:
    """A pending stage, with its worst utilization and its plan when the schedule gives them."""
    row = StageProgressDocument(devices=list(devices), status="pending")
    if worst is not None:
        row.worst_utilization = worst
    if plan is not None:
        row.plan = plan
    return row


class PushProgress:
    """A commit's progress (:attr:`doc`), updated by the transaction's step callback (:meth:`on_step`)
    and saved by :meth:`flush` at most every 0.2 s while it changes; it also logs each device's steps
    and times them for the metrics."""

    def __init__(self, change: int, names: list[str], metrics: Any, stages: list[list[str]] | None = None,
                 worst: list[float | None] | None = None, plans: list[int] | None = None):
        self.change, self.metrics = change, metrics
        self.doc = ProgressDocument(step="prepare", devices={
            d: DeviceProgress(step="prepare", status="pending", changed=False, error=None) for d in names})
        if stages is not None:
            worst_of, plan_of = list(worst or []), list(plans or [])
            self.doc.stages = [_stage(st, worst_of[i] if i < len(worst_of) else None,
                                      plan_of[i] if i < len(plan_of) else None) for i, st in enumerate(stages)]
        self._started: dict[tuple[str, str], float] = {}
        self._dirty = asyncio.Event()

    def on_stage(self, index: int, status: str) -> None:
        """Stage ``index`` of the commit order is now ``status`` (commit, verify, done, failed)."""
        stages = self.doc.stages
        if not stages or index >= len(stages):
            return
        stages[index].status = cast(StageStatus, status)
        self.doc.stage = index
        devices = stages[index].devices
        log.info("change %s: stage %d/%d (%s): %s", self.change, index + 1, len(stages),
                 ", ".join(devices[:6]) + ("..." if len(devices) > 6 else ""),
                 status, extra={"change": self.change, "stage": index, "status": status})
        self._dirty.set()

    def on_step(self, step: str, device: str, result: Any) -> None:
        """``result`` is ``None`` when ``device`` starts ``step``, else its StepResult."""
        self.doc.step = step
        row = self.doc.devices.get(device)
        if row is None:
            row = self.doc.devices[device] = DeviceProgress(step=step, status="pending", changed=False, error=None)
        row.step = step
        if result is None:
            row.status = "pending"
            self._started[step, device] = time.perf_counter()
            return
        row.status = "failed" if result.failed else "ok"
        if row.steps is None:
            row.steps = {}
        row.steps[step] = row.status
        row.changed = bool(row.changed or result.changed)
        row.error = result.error or None
        log.log(logging.WARNING if result.failed else logging.INFO, "change %s: %s %s on %s", self.change, step,
                row.status, device, extra={"change": self.change, "device": device, "step": step,
                                           "status": row.status, "changed": row.changed, "error": row.error})
        if self.metrics is not None and (step, device) in self._started:
            self.metrics.device_push_seconds.labels(device=device, step=step).observe(
                time.perf_counter() - self._started.pop((step, device)))
        self._dirty.set()

    async def flush(self, save: Callable[[ProgressDocument], Awaitable[None]]) -> None:
        """Save a snapshot whenever the document changed, until cancelled. A snapshot the store does not
        take (a failover of the store, say) is tried again a moment later: the progress shown is a view of
        the push, never a reason to stop it, and the commit's outcome is recorded after it anyway."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await save(self.doc.model_copy(deep=True))
            except StoreUnavailable as exc:
                log.warning("change %s: the store did not take the progress (%s); trying again", self.change, exc)
                self._dirty.set()
                await asyncio.sleep(min(float(exc.retry_after), 1.0))
            await asyncio.sleep(0.2)
