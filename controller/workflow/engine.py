"""The controller's change engine: the use cases of the change workflow, wired together.

:class:`Workflow` is the one place that calls southbound. It lives in the
server process (``api.create_app`` starts it at startup and stops it at
shutdown) and is handed the driver to the device agents (``controller.workflow.agents``
makes the gRPC one from the settings). It holds no logic of its own: it makes
the shared :class:`~controller.workflow.runtime.Runtime` (the store, the agents,
leadership, the metrics), hands it to each use case, connects them, runs the
leader's loops, and answers the API and the CLI through thin methods.

- **Review** (:mod:`controller.workflow.reviewer`): solve and replay in a worker
  thread with no store session open, then the per-device config diff from the
  agents' ``Prepare`` (aborted at once) or, with no agents, rendered locally.
- **Commit** (:mod:`controller.workflow.commit`): the change is durably marked
  ``committing`` before any device hears of it; the leader takes it up (at once,
  else within ``commit_poll_interval``), marking it with its epoch (the agents'
  fence), and runs the network-wide transaction in the stages of the review's
  schedule (:mod:`controller.workflow.push`), recording per-device progress and
  the outcome: ``committed``, ``failed`` (Prepare refused, nothing applied) or
  ``rolled_back``. With no agents a commit only records the revision as active.
- **Leadership** (:mod:`controller.workflow.cluster`): only the leader pushes,
  recovers, settles and checks drift.
- **Recovery** (:mod:`controller.workflow.recovery`): a change left
  ``committing`` under another epoch or by a process that died is finished or
  undone by what the devices report.
- **Settling** (:mod:`controller.workflow.settle`): a final change whose
  transaction left devices off the revision its state names is stored
  ``settled: false``; the leader drives them every ``settle_interval`` seconds.
- **Drift** (:mod:`controller.workflow.drift`): every ``drift_interval`` seconds
  and after each commit, every device is held against the active revision; with
  ``drift_repair`` the active revision is pushed again.
- **Baselines and anomalies** (:mod:`controller.workflow.insight`): the leader's
  insight loop, every telemetry interval.
- **Stored telemetry** (:mod:`controller.workflow.telemetry_archive`): the
  leader stores the collector's new rates every ``telemetry_archive_s``; each
  replica reads them back when it starts.
- **Automatic re-tuning** (:mod:`controller.workflow.autote`) and the
  **operational view and failure reaction** (:mod:`controller.operations.service`)
  commit through this engine's one commit path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from controller.model.documents import (
    ChangeState,
    DeviceStateDocument,
    DriftReportDocument,
    RepairDocument,
    ReviewDocument,
    SettleDocument,
)
from controller.operations.service import Operations
from controller.service import Actor, WriteContext
from controller.settings import Settings
from controller.store import workflow_repo as wrepo
from controller.store.db import Database
from controller.telemetry import Telemetry
from controller.workflow import changes
from controller.workflow.autote import AutoTe
from controller.workflow.cluster import Cluster
from controller.workflow.commit import Commits
from controller.workflow.drift import Drift
from controller.workflow.insight import Insight
from controller.workflow.recovery import Recovered, Recovery
from controller.workflow.reviewer import Reviewer
from controller.workflow.runtime import Runtime
from controller.workflow.settle import Settler
from controller.workflow.telemetry_archive import Archive
from southbound.driver import DeviceDriver

__all__ = ["SYSTEM", "Workflow"]

log = logging.getLogger("loom.workflow")
SYSTEM = WriteContext(actor=Actor("loom-controller", "admin"), method="SYSTEM", path="workflow")


class Workflow:
    """The change engine of one controller process: its use cases, wired (see the module docstring)."""

    def __init__(self, settings: Settings, database: Database, *, driver: DeviceDriver | None = None,
                 metrics: Any = None, telemetry: Telemetry | None = None, cluster: Cluster | None = None):
        """``driver`` talks to the device agents (``None``: no devices attached); the composition
        root (``loom serve``, or :func:`api.app.create_app` from the settings) makes it. ``cluster``
        holds the leader lease (None: this process is the only one and always leads, epoch 0)."""
        self.runtime = rt = Runtime(settings, database, driver=driver, metrics=metrics, telemetry=telemetry,
                                    cluster=cluster)
        self.reviewer = Reviewer(rt)
        self.recovery = Recovery(rt)
        self.commits = Commits(rt, recover=self.recovery.recover_change, after_commit=self._after_commit)
        self.settler = Settler(rt)
        self.operations = Operations(rt, commit=self.commit)
        rt.failure_watch = self.operations.failure_watch
        self.drift = Drift(rt, operational=self.operations.drift, commit=self.commit)
        self.auto_te = AutoTe(rt, self)
        self.insight = Insight(rt)
        self.archive = Archive(rt)
        self._loops: list[asyncio.Task[None]] = []

    # -- what the use cases share ------------------------------------------------------
    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def db(self) -> Database:
        return self.runtime.db

    @property
    def metrics(self) -> Any:
        return self.runtime.metrics

    @property
    def driver(self) -> DeviceDriver | None:
        return self.runtime.driver

    @property
    def telemetry(self) -> Telemetry | None:
        return self.runtime.telemetry

    @property
    def cluster(self) -> Cluster | None:
        return self.runtime.cluster

    def is_leader(self) -> bool:
        """Whether this process leads: a process without a cluster does; replicas elect one through the store."""
        return self.runtime.is_leader()

    @property
    def devices(self) -> tuple[str, ...]:
        return self.runtime.devices

    @property
    def epoch(self) -> int:
        """The epoch this replica leads (or last led) with; 0 without a cluster."""
        return self.runtime.epoch

    @property
    def southbound_busy(self) -> bool:
        """A transaction (or a review's Prepare) holds the devices now."""
        return self.runtime.southbound_busy

    @property
    def reviews_in_flight(self) -> int:
        """Reviews of this replica running now (automatic re-tuning waits for them)."""
        return self.reviewer.in_flight

    @property
    def recovered(self) -> Recovered | None:
        """The last recovery's document (change, outcome, what was done to each device)."""
        return self.recovery.recovered

    # -- life cycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """As the leader, finish or undo a change left committing before serving (recovery), then
        keep taking up the commits any replica queues; the drift loop and auto-te (leader work)."""
        try:
            await self.archive.restore()  # before the telemetry stream starts: the windows reach back
        except Exception:  # the store cannot answer (or a segment is unreadable): the windows start empty
            log.exception("telemetry: the stored rates could not be restored")
        try:
            if self.is_leader():
                await self.take_up()
                await self.wait_idle()
            active = await self.runtime.in_session(lambda s: changes.active_revision(session=s))
        except Exception:  # the store cannot answer: the server still starts; /readyz tells
            log.exception("recovery at startup failed; a change left committing keeps the commit slot")
            active = None
        if self.metrics is not None and active is not None:
            self.metrics.active_revision.set(active)
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self.commits.queue_loop())]
        if self.driver is not None and self.settings.drift_interval > 0:
            self._loops.append(loop.create_task(self.drift.loop()))
        if self.driver is not None:
            self._loops.append(loop.create_task(self.settler.loop()))
        self.auto_te.start()
        self.insight.start()
        self.archive.start()
        await self.operations.start()

    async def stop(self) -> None:
        await self.operations.stop()
        await self.auto_te.stop()
        await self.insight.stop()
        await self.archive.stop()
        for task in self._loops:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.commits.stop()
        self.runtime.cancel_tasks()
        if self.driver is not None:
            await self.driver.close()

    def _after_commit(self, outcome: ChangeState) -> None:
        """After a commit's outcome is stored: a drift check of a committed revision."""
        if outcome == ChangeState.COMMITTED and self.driver is not None:
            self.runtime.spawn(self.drift.check_drift(repair=False))

    # -- the use cases, as the API and the CLI call them ---------------------------------
    async def review(self, change_id: int, ctx: WriteContext) -> ReviewDocument:
        return await self.reviewer.review(change_id, ctx)

    async def commit(self, change_id: int, ctx: WriteContext, *, force: bool = False, reason: str | None = None,
                     skip_gate: bool = False) -> wrepo.Change:
        """Gate and mark the change committing (durably), then push it in the background."""
        return await self.commits.commit(change_id, ctx, force=force, reason=reason, skip_gate=skip_gate)

    async def wait_idle(self) -> None:
        await self.commits.wait_idle()

    async def take_up(self) -> int | None:
        """As the leader: start (or recover) the change committing in the store; returns it, if any."""
        return await self.commits.take_up()

    async def recover(self) -> Recovered | None:
        """Finish or undo a change a previous controller process (or leader) left ``committing``
        (as :meth:`take_up` does, waiting for the outcome)."""
        if await self.take_up() is None:
            return None
        await self.wait_idle()
        return self.recovered

    async def settle(self) -> list[SettleDocument]:
        return await self.settler.settle()

    async def device_state(self, name: str) -> DeviceStateDocument:
        return await self.drift.device_state(name)

    async def check_drift(self, *, repair: bool = False) -> DriftReportDocument:
        return await self.drift.check_drift(repair=repair)

    async def repair(self, devices: list[str] | None = None, ctx: WriteContext | None = None) -> RepairDocument:
        return await self.drift.repair(devices, ctx)
