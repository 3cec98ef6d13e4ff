"""Replicas and the leader lease (DESIGN.md, High availability).

Several ``loom serve`` processes may share one PostgreSQL store; one of them,
the **leader**, holds a lease in the store (``leader_lease``: holder, epoch,
expiry in the database's clock) and alone does the work that must happen once:
running commits, recovering a change a dead leader left committing, drift
checks and repair, automatic re-tuning (:class:`controller.workflow.engine.Workflow`
asks :meth:`Cluster.is_leader`). Every replica serves reads, writes and
reviews and queues commits in the store.

:class:`Cluster` tries every ``lease_renew_interval`` (a third of the TTL by
default) to renew the lease it holds or, when it holds none, to acquire one
that lapsed (a new epoch, one higher). Each attempt is one conditional
``UPDATE`` (:mod:`controller.store.lease_repo`), so at most one replica comes
out holding the lease. A replica believes it leads until ``t0 + ttl`` on its
own monotonic clock, ``t0`` being taken *before* its last successful attempt
was sent: the store's expiry was set later than that, from the same TTL, so
the belief always ends before the lease can pass to another replica, however
slow the store or the renewal. A replica frozen past its lease (SIGSTOP, a VM
pause) stops believing the moment it wakes; what it was already sending to the
switches is stopped by the agents' fence (the epoch travels with every call).

SQLite allows one replica: :class:`SingleReplicaLock` takes an exclusive lock
on ``FILE.lock`` beside the database for the life of the process, a second
process on the same file is refused with :class:`SingleReplicaStore`, and the
one process takes the lease at once at start (no wait for a predecessor's
lease to lapse: no other process can hold it).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.engine import make_url

from controller.model.documents import ClusterDocument, LeaseDocument, ReplicaDocument
from controller.model.errors import SingleReplicaStore
from controller.settings import Settings
from controller.store import lease_repo
from controller.store.db import Database, write_transaction

__all__ = ["Cluster", "SingleReplicaLock", "sqlite_lock_path"]

log = logging.getLogger("loom.cluster")


def sqlite_lock_path(db: Database) -> Path | None:
    """``FILE.lock`` beside a SQLite store's file (None for PostgreSQL or an in-memory SQLite)."""
    if not db.is_sqlite:
        return None
    name = make_url(db.url).database
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name).resolve().with_name(Path(name).name + ".lock")


class SingleReplicaLock:
    """An exclusive ``flock`` on ``path`` (which records the holder's pid and address) while held."""

    def __init__(self, path: Path, *, holder: str = ""):
        self.path = path
        self.holder = holder or f"pid {os.getpid()}"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, store: str = "") -> None:
        """Take the lock or raise :class:`SingleReplicaStore` naming the process that has it."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = ""
            with contextlib.suppress(OSError):
                other = os.pread(fd, 512, 0).decode(errors="replace").strip()
            os.close(fd)
            raise SingleReplicaStore(
                f"another loom serve ({other or 'unknown process'}) is running on the SQLite store {store or ''} "
                f"(lock {self.path}): SQLite allows one replica; stop it first, or run replicas on PostgreSQL"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.holder.encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


class Cluster:
    """This replica's view of the cluster: the lease loop, its role and epoch, its heartbeat."""

    def __init__(self, settings: Settings, database: Database, *, metrics: Any = None,
                 lock: SingleReplicaLock | None = None, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.db = database
        self.metrics = metrics
        self.clock = clock
        self.replica = settings.replica_id or f"{socket.gethostname()}:{settings.port}:{os.getpid()}"
        self.url = f"http://{settings.host}:{settings.port}"
        self.ttl = settings.lease_ttl
        self.renew_every = settings.lease_renew_interval
        self.epoch = 0  # of this replica's current (or last) leadership; 0: never led
        # The lease's attempts run on their own thread and, on PostgreSQL, their own connections: a
        # replica busy with requests, a recovery or a settle (whose store calls share the default
        # executor and the pool) must not let its renewals wait past the TTL. Found by the twenty-kill
        # test, where a replica taking over under load reported no leader for a minute.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loom-lease")
        self._lease_db = database if database.is_sqlite else Database(
            database.url, lock_timeout_s=max(0.2, self.ttl / 2), pool_timeout_s=max(0.2, self.ttl / 2),
            ack_standbys=database.ack_standbys, ack_timeout_s=min(database.ack_timeout_s, self.ttl / 4))
        self._valid_until = -math.inf
        self._held = False  # the last attempt left this replica holding the lease
        self._started_at = time.time()
        self._task: asyncio.Task[None] | None = None
        path = sqlite_lock_path(database)
        self.lock = lock if lock is not None else (
            SingleReplicaLock(path, holder=f"pid {os.getpid()} on {self.url}") if path is not None else None)
        #: the store can only be opened by this process (SQLite): take the lease over at once
        self.exclusive = False
        self.last_error: str | None = None

    # -- role -------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """Whether this replica may do leader work now (its belief ends before the lease can pass on)."""
        return self.clock() < self._valid_until

    @property
    def role(self) -> Literal["leader", "follower"]:
        return "leader" if self.is_leader() else "follower"

    # -- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        """Refuse a second process on SQLite, make one attempt at the lease (a single replica leads
        before it serves), then keep renewing or trying in the background."""
        if self.lock is not None:
            self.lock.acquire(self.db.display_url)
            self.exclusive = True
        await self.tick()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop renewing; give the lease up (a follower takes over at its next attempt) and the heartbeat."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        leading, self._valid_until = self.is_leader(), -math.inf
        self._gauge()

        def leave() -> None:
            with self._lease_db.session() as s, write_transaction(s):
                if leading:
                    lease_repo.release(session=s, replica=self.replica, epoch=self.epoch)
                lease_repo.forget(session=s, replica=self.replica)
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, leave)
        except Exception as exc:  # noqa: BLE001 - the lease lapses by itself
            log.warning("could not release the lease at shutdown (%s): it lapses after %g s", exc, self.ttl)
        self._executor.shutdown(wait=False)
        if self._lease_db is not self.db:
            self._lease_db.engine.dispose()
        if self.lock is not None:
            self.lock.release()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.renew_every)
            await self.tick()

    # -- one attempt ------------------------------------------------------------------
    def _attempt(self) -> tuple[int | None, bool]:
        """Renew or acquire in one write transaction; (epoch held, whether it was a renewal)."""
        with self._lease_db.session() as s, write_transaction(s):
            lease_repo.heartbeat(session=s, replica=self.replica, url=self.url, started_at=self._started_at)
            if self.epoch and lease_repo.renew(session=s, replica=self.replica, epoch=self.epoch, ttl=self.ttl):
                return self.epoch, True
            return lease_repo.acquire(session=s, replica=self.replica, ttl=self.ttl, takeover=self.exclusive), False

    async def tick(self) -> None:
        """One renewal or acquisition attempt; moves this replica's role accordingly."""
        was = self._held
        t0 = self.clock()
        try:
            epoch, renewed = await asyncio.get_running_loop().run_in_executor(self._executor, self._attempt)
        except Exception as exc:  # noqa: BLE001 - the store is away: the belief runs out by itself
            if self.last_error is None:
                log.warning("lease: the store did not answer (%s: %s); leading until the lease runs out"
                            if was else "lease: the store did not answer (%s: %s)", type(exc).__name__, exc)
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._gauge()
            return
        self.last_error = None
        if epoch is None:
            self._valid_until = -math.inf
            if self._held:  # also when its belief had run out already (a replica frozen past its lease)
                log.warning("lease lost: replica %s is no longer the leader (epoch %d)", self.replica, self.epoch,
                            extra={"epoch": self.epoch, "replica": self.replica})
            self._held = False
        else:
            self._valid_until = t0 + self.ttl
            if renewed:
                if self.metrics is not None:
                    self.metrics.lease_renewals.inc()
            else:
                log.info("lease acquired: replica %s leads with epoch %d", self.replica, epoch,
                         extra={"epoch": epoch, "replica": self.replica})
            self.epoch = epoch
            self._held = True
        self._gauge()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.leader.set(1 if self.is_leader() else 0)
            self.metrics.lease_epoch.set(self.epoch)

    # -- reading ----------------------------------------------------------------------
    async def document(self) -> ClusterDocument:
        """``GET /v1/cluster``: this replica, its role, the leader and epoch in the store, the replicas."""
        def read() -> tuple[lease_repo.LeaseView, list[dict[str, Any]]]:
            with self.db.session() as s:
                return (lease_repo.read_lease(session=s),
                        lease_repo.replicas(session=s, within=3 * self.ttl))
        lease, seen = await asyncio.to_thread(read)
        leader = lease.holder if lease.live else None
        return ClusterDocument(
            replica=self.replica, role=self.role, leader=leader, epoch=lease.epoch,
            replicas=[ReplicaDocument(id=r["id"], url=r["url"], role="leader" if r["id"] == leader else "follower",
                                      seen_s_ago=round(max(0.0, lease.now - float(r["seen_at"])), 3))
                      for r in seen],
            lease=LeaseDocument(ttl_s=self.ttl, renew_s=self.renew_every,
                                expires_in_s=round(lease.expires_at - lease.now, 3) if lease.live else None))
