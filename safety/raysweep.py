"""The Ray executor of a sweep: chunks over a Ray cluster, streamed back, re-run where a worker dies.

This module owns :class:`RayExecutor` (:mod:`safety.sweep` owns the sweep and the local
executor). How a sweep uses a cluster, and why:

* **The compiled fabric once per worker.** The :class:`~safety.replay.Replayer` is put in
  Ray's object store once per executor; each worker (a :class:`SweepWorker` actor, one per
  CPU of the cluster) reads it once, when it starts, and keeps it for every chunk of every
  sweep of that replayer. A chunk carries only its scenarios or its index pairs.
* **Kernels warm before the first chunk.** A worker replays one link failure when it
  starts, so the replay's compiled kernels are loaded (or, on a machine that has not cached
  them, compiled: numba keeps them in the installed package's ``__pycache__``, shared by every
  worker of that machine) before any chunk; :meth:`RayExecutor.start` waits for that, and a
  bench times it apart from the sweep. The fabric's arrays arrive read-only from the object
  store, which numba compiles for once more than the local executor's (about 15 s per worker,
  once per machine). ``private=True`` copies the fabric into the worker's own memory instead
  (writable, the local executor's kernels). In the bench (``python -m tests.bench executors``:
  Clos L, 100,000 pairs, executors taking turns on a shared machine) the copy replayed at
  0.83x and 1.10x of the local executor's rate per worker in two runs, the shared mapping at
  0.80x and 0.92x: a small gain at best, against 5 to 13 s more to start and a copy of the
  fabric per worker (560 MB on Clos L, so 36 GB on a 64-CPU node). The shared mapping is the
  default.
* **Streamed, reduced on the way.** Each worker has at most :data:`IN_FLIGHT` chunks queued
  (one running, one waiting, so it never idles on a round trip); :meth:`RayExecutor.stream`
  answers each ``(index, Done)`` as ``ray.wait`` returns it, and the caller reduces it by
  index (:mod:`safety.sweep`), so the report is the same whatever the order of completion.
* **A worker that dies** (its process, or its whole node) loses only its chunks in flight:
  they go back to the queue and run on the workers left, and a replacement worker is asked
  for, which joins once Ray has placed it and it is warm. With no worker left and none
  placed within ``lost_s``, the sweep raises :class:`ExecutorUnavailable`, as it does when
  the cluster cannot be reached at all. A worker that dies while it starts is asked for
  again (up to :data:`RESTARTS_PER_WORKER` times per worker of the pool), with a warning.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from safety.chunks import Done, Progress, Sweeper, Work, in_order
from safety.replay import Replayer
from safety.scenarios import Scenario

__all__ = ["IN_FLIGHT", "ExecutorUnavailable", "RayExecutor", "SweepWorker", "loopback_ray"]

IN_FLIGHT = 2  # chunks queued per worker: one running, one waiting
RESTARTS_PER_WORKER = 2  # a pool asks again this many times per worker for workers that die starting

log = logging.getLogger("loom.safety.ray")
_LOCK = threading.Lock()  # one Ray session per process: sweeps from several threads take turns


class ExecutorUnavailable(RuntimeError):
    """The Ray cluster cannot be reached, or lost every worker and placed no other in time."""


def loopback_ray() -> None:
    """Make a local Ray cluster started by this process bind 127.0.0.1 only: Ray resolves
    "localhost" to the machine's routable address unless it runs as a single-machine
    cluster (its ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), read when ``ray`` is first
    imported. A local cluster serves nobody else, so it listens on loopback. Ray's usage
    statistics (which it would send to Ray's servers) are off: a controller talks to its
    network and its cluster only."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


class SweepWorker:
    """A Ray worker's state (made an actor by :class:`RayExecutor`): the replayer, read from the
    object store (copied into this process's memory with ``private``), and its kernels warmed."""

    def __init__(self, rp: Replayer, single: Sequence[Scenario], private: bool = False):
        t0 = time.perf_counter()
        if private:
            rp = copy.deepcopy(rp)  # out of the read-only shared mapping (see the module's docstring)
        keys = rp.topo.link_keys
        if keys:  # the kernels load (or compile) now, not in the first chunk
            rp.verdict(Scenario("warm-up", "link", frozenset(), frozenset({keys[0]})))
        self.sweeper = Sweeper(rp, single)
        self.started_s = time.perf_counter() - t0

    def ready(self) -> tuple[int, float]:
        """This worker's process id and the seconds its start took (copy and warm-up)."""
        return os.getpid(), self.started_s

    def run(self, work: Work) -> Done:
        return self.sweeper.run(work)


def _reachable(address: str | None, timeout: float) -> None:
    """Raise :class:`ExecutorUnavailable` unless the cluster's ``HOST:PORT`` (``ray://`` or not)
    accepts a TCP connection within ``timeout`` seconds: Ray's own connect retries for half a
    minute (Ray Client) to over a minute (a driver) before it gives up."""
    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        raise ExecutorUnavailable(f"cannot reach the Ray cluster at {address}: {exc}") from exc


def _lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's exceptions for a result lost with its worker (not an error of the replay itself)."""
    from ray import exceptions as rx  # lazy: Ray is optional; only this executor needs it

    return (rx.RayActorError, rx.WorkerCrashedError, rx.ObjectLostError, rx.NodeDiedError)


class RayExecutor:
    """Chunks over a Ray cluster: ``address`` ``None`` starts a local one (``num_cpus``
    CPUs, default all, on loopback) and :meth:`close` stops it, unless ``RAY_ADDRESS``
    names a cluster (Ray's own setting: ``HOST:PORT`` of its head, joined as a driver from
    a machine of the cluster); ``ray://HOST:PORT`` joins a running cluster through Ray
    Client (``HOST:PORT``, as a driver). Its workers must have Loom installed. A Ray session
    already open in this process is used as it is and left open. The workers (an
    actor per CPU, each holding the replayer read once from the object store) serve
    every :meth:`map` of the same replayer until :meth:`close`. ``private``: see
    :class:`SweepWorker`; ``lost_s``: how long a sweep that lost every worker waits
    for a replacement; ``connect_s``: how long the cluster's address may take to accept
    a connection before the cluster counts as unreachable; ``workers``: at most this many
    workers (default: one per CPU of the cluster)."""

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, private: bool = False,
                 lost_s: float = 60.0, connect_s: float = 5.0, workers: int | None = None):
        self.address = address
        self.num_cpus = num_cpus
        self.private = private
        self.lost_s = lost_s
        self.connect_s = connect_s
        self.max_workers = workers
        self.replaced = 0  # workers lost and asked for again, over this executor's life
        self.restarted = 0  # workers that died starting (before their first chunk) and were asked for again
        self.started_s: list[float] = []  # each ready worker's start (copy and warm-up), seconds
        self._workers = 0
        self._started = False
        self._actors: list[Any] = []
        self._starting: dict[Any, Any] = {}  # ready() reference -> actor not yet placed or warm
        self._ref: Any = None
        self._single: list[Scenario] = []
        self._for: Replayer | None = None

    def workers(self) -> int:
        return self._workers

    def _connect(self) -> Any:
        if self.address is None and not os.environ.get("RAY_ADDRESS"):
            loopback_ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
            _reachable(self.address or os.environ.get("RAY_ADDRESS"), self.connect_s)
        import ray  # lazy: Ray is optional and takes seconds to import; only this executor needs it

        if not ray.is_initialized():
            try:
                if self.address:
                    ray.init(address=self.address, log_to_driver=False)
                else:
                    ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
            except Exception as exc:  # Ray raises ConnectionError, TimeoutError, RuntimeError, gRPC's own...
                raise ExecutorUnavailable(
                    f"cannot reach the Ray cluster at {self.address or 'a new local cluster'}: {exc}") from exc
            self._started = True
        return ray

    def _spawn(self, ray: Any) -> None:
        """Ask Ray for one more worker; it joins the pool once ready."""
        actor = ray.remote(num_cpus=1, max_restarts=0)(SweepWorker).remote(self._ref, self._single, self.private)
        self._starting[actor.ready.remote()] = actor

    def start(self, rp: Replayer, single: Sequence[Scenario]) -> float:
        """Start (or keep) the workers for ``rp`` and wait until each is warm; the seconds it took."""
        t0 = time.perf_counter()
        ray = self._pool(rp, single)
        while self._starting:
            self._admit(ray, timeout=self.lost_s, needed=True)
        return time.perf_counter() - t0

    def _pool(self, rp: Replayer, single: Sequence[Scenario]) -> Any:
        ray = self._connect()
        if self._for is not rp or self._single != list(single):
            self._kill()
            n = max(1, int(ray.cluster_resources().get("CPU", 1)))
            n = min(n, self.max_workers) if self.max_workers else n
            self._ref = ray.put(rp)  # the compiled fabric, once, in the object store
            self._single, self._for = list(single), rp
            for _ in range(n):
                self._spawn(ray)
            self._workers = n
        return ray

    def _admit(self, ray: Any, *, timeout: float, needed: bool) -> None:
        """Workers whose start completed join the pool (one that died starting is dropped)."""
        if not self._starting:
            if needed:
                raise ExecutorUnavailable("no Ray worker left, and none starting")
            return
        ready, _ = ray.wait(list(self._starting), num_returns=1, timeout=timeout)
        if not ready:
            if needed:
                raise ExecutorUnavailable(f"no Ray worker left, and none placed within {timeout:g} s")
            return
        for ref in ready:
            actor = self._starting.pop(ref)
            try:
                self.started_s.append(ray.get(ref)[1])
            except _lost_errors() as exc:
                # a worker that died starting (its process or node lost, or Ray gave up placing it under load):
                # asked for again, a bounded number of times, so a pool does not start short
                log.warning("a Ray worker died starting: %s", str(exc).splitlines()[0] if str(exc) else exc)
                if self.restarted < RESTARTS_PER_WORKER * max(1, self._workers):
                    self.restarted += 1
                    self._spawn(ray)
                continue
            self._actors.append(actor)

    def stream(self, rp: Replayer, single: Sequence[Scenario], works: Sequence[Work]) -> Iterator[tuple[int, Done]]:
        """Every chunk's ``(index, Done)``, as they complete (see the module's docstring)."""
        with _LOCK:
            ray = self._pool(rp, single)
            yield from self._stream(ray, works)

    def _stream(self, ray: Any, works: Sequence[Work]) -> Iterator[tuple[int, Done]]:
        todo = deque(range(len(works)))
        flying: dict[Any, tuple[int, Any]] = {}  # result reference -> (chunk, actor)
        lost = _lost_errors()
        while todo or flying:
            load = {id(a): 0 for a in self._actors}
            for _k, a in flying.values():
                load[id(a)] = load.get(id(a), 0) + 1
            for a in self._actors:
                while todo and load[id(a)] < IN_FLIGHT:
                    k = todo.popleft()
                    flying[a.run.remote(works[k])] = (k, a)
                    load[id(a)] += 1
            if not flying:  # every worker lost: wait for a replacement
                self._admit(ray, timeout=self.lost_s, needed=True)
                continue
            ready, _ = ray.wait([*flying, *self._starting], num_returns=1)
            for ref in ready:
                if ref in self._starting:
                    self._admit(ray, timeout=0, needed=False)
                    continue
                k, actor = flying.pop(ref)
                try:
                    d = ray.get(ref)
                except lost:
                    todo.appendleft(k)
                    if any(a is actor for a in self._actors):
                        self._actors = [a for a in self._actors if a is not actor]
                        self.replaced += 1
                        self._spawn(ray)
                    continue
                yield k, d

    def map(self, rp: Replayer, single: Sequence[Scenario], works: Sequence[Work],
            progress: Progress | None = None) -> list[Done]:
        return in_order(self.stream(rp, single, works), len(works), sum(len(w) for w in works), progress)

    def _kill(self) -> None:
        import ray  # lazy: Ray is optional; only this executor needs it

        for a in [*self._actors, *self._starting.values()]:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - an actor whose node is gone is already dead
                pass
        self._actors, self._starting, self._for, self._ref = [], {}, None, None  # workers() keeps the count

    def close(self) -> None:
        """Stop the workers, and the Ray session when this executor opened it."""
        if "ray" not in sys.modules:
            return
        import ray  # lazy: Ray is optional (and already imported here: see the check above)

        if ray.is_initialized():
            self._kill()
            if self._started:
                ray.shutdown()
        self._started = False
