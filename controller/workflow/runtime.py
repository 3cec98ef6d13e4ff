"""What every use case of the change engine shares: the store, the agents, leadership and the metrics.

:class:`Runtime` is made once per controller process by the engine
(:class:`controller.workflow.engine.Workflow`) and handed to each use case
(review, commit, recovery, settling, drift, auto-te, failure reaction). It
owns no decision: it runs a function in a short store session off the event
loop (:meth:`Runtime.in_session`), gets a revision's plan without holding a
session through the solve (:meth:`Runtime.plan`: read, close, solve, then a
short write), reaches the agents (fenced by the leader's epoch), holds the
southbound lock a transaction takes, and keeps the background tasks it spawns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.documents import JsonObject
from controller.model.errors import NotFound
from controller.model.plan import Plan
from controller.service import WriteContext
from controller.settings import Settings
from controller.store.db import Database
from controller.store.workflow_repo import Change, CommitBusy
from controller.telemetry import Telemetry
from controller.workflow.changes import withdraw
from controller.workflow.cluster import Cluster
from controller.workflow.plans import PlanSource, keep, plan_source, solve
from southbound.driver import DeviceDriver
from southbound.state import DeviceState

__all__ = ["Commit", "Runtime", "commit_at_once"]

T = TypeVar("T")


class Commit(Protocol):
    """The engine's one commit path (:meth:`controller.workflow.engine.Workflow.commit`), as it is handed to
    the use cases that commit on their own: a drift repair, a failure reaction."""

    async def __call__(self, change_id: int, ctx: WriteContext, *, skip_gate: bool = False) -> Change: ...


async def commit_at_once(rt: Runtime, commit: Commit, change_id: int, ctx: WriteContext, *, then: str) -> Change:
    """Commit a change Loom made to commit at once (a drift repair, a failure reaction). When another change
    took the one commit slot since the look (:class:`CommitBusy`), the change is failed saying why and
    ``then`` (what tries again), not left waiting for a commit nobody will ask, and the error raised."""
    try:
        return await commit(change_id, ctx, skip_gate=True)
    except CommitBusy as exc:
        why = f"not committed: {exc}; {then}"
        await rt.in_session(lambda s: withdraw(change_id, session=s, ctx=ctx, reason=why))
        raise


class Runtime:
    """The shared plumbing of one controller process's change engine (see the module docstring)."""

    def __init__(self, settings: Settings, database: Database, *, driver: DeviceDriver | None = None,
                 metrics: Any = None, telemetry: Telemetry | None = None, cluster: Cluster | None = None):
        self.settings = settings
        self.db = database
        self.metrics = metrics
        self.driver = driver
        self.telemetry = telemetry  # the collector, when the server streams counters
        self.cluster = cluster
        #: Whether this process leads: a process without a cluster does; replicas elect one through the store.
        self.is_leader: Callable[[], bool] = cluster.is_leader if cluster is not None else (lambda: True)
        self.southbound = asyncio.Lock()  # a transaction (push or recovery) of this process holds it
        self._tasks: set[asyncio.Task[Any]] = set()
        #: a watch of the fabric for the read-back of a commit of an intent: asked, what has failed that the intent
        #: routes over (``None``: nothing). The engine's operational view sets it (:meth:`Operations.failure_watch`).
        self.failure_watch: Callable[[Intent], Callable[[], str | None]] = lambda _intent: (lambda: None)

    # -- the store ---------------------------------------------------------------------
    async def in_session(self, fn: Callable[[Session], T]) -> T:
        """``fn(session)`` in a session of its own, in a worker thread; the session is closed on return."""
        def run() -> T:
            with self.db.session() as session:
                return fn(session)
        return await asyncio.to_thread(run)

    async def solve(self, src: PlanSource, *, observe: bool = False) -> tuple[Intent, Plan]:
        """The intent and plan ``src`` (read by :func:`~controller.workflow.plans.plan_source`) stands for,
        solved in a worker thread with no session open; a plan compiled now is then kept in a short write
        transaction. ``observe``: the solve's time goes to the metrics."""
        got = await asyncio.to_thread(solve, src, self.observe_solve if observe else None)
        if got.fresh:
            await self.in_session(lambda s: keep(src.revision, got.plan, session=s))
        return got.intent, got.plan

    async def plan(self, revision: int, overlay: JsonObject | None = None, *,
                   observe: bool = False) -> tuple[Intent, Plan]:
        """``revision``'s intent and plan (around ``overlay``'s failed parts): read, then :meth:`solve`."""
        src = await self.in_session(lambda s: plan_source(revision, session=s, overlay=overlay))
        return await self.solve(src, observe=observe)

    # -- metrics -----------------------------------------------------------------------
    def observe_solve(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.solve_seconds.observe(seconds)

    def observe_safety(self, seconds: float, scenarios: int) -> None:
        if self.metrics is not None:
            self.metrics.safety_seconds.observe(seconds)
            self.metrics.scenarios_checked.inc(scenarios)

    # -- the agents --------------------------------------------------------------------
    @property
    def agents(self) -> DeviceDriver:
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

    def fenced(self, epoch: int) -> DeviceDriver:
        """The driver whose every call carries ``epoch`` (agents refuse older epochs); 0: unfenced."""
        if not epoch:
            return self.agents
        return self.agents.fenced(epoch, self.cluster.replica if self.cluster is not None else "")

    async def states(self, names: list[str], agents: DeviceDriver | None = None
                     ) -> dict[str, DeviceState | BaseException]:
        """Each device's state (or the exception its read raised), read at once."""
        agents = agents or self.agents
        got = await asyncio.gather(*(agents.state(d) for d in names), return_exceptions=True)
        return dict(zip(names, got, strict=True))

    @property
    def southbound_busy(self) -> bool:
        """A transaction (or a review's Prepare) holds the devices now."""
        return self.southbound.locked()

    # -- background tasks ----------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_tasks(self) -> None:
        for t in list(self._tasks):
            t.cancel()
