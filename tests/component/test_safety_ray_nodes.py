"""The Ray executor on a two-node Ray cluster (a head and a worker node, each a ``ray start``
process of its own, one CPU each, loopback only: :class:`tests.raycluster.RayNodes`). The
worker node is killed in the middle of a sweep: its chunks run again on the head, and the
report is the local executor's. A review's sweep (:func:`safety.sweep.check`) goes to the
configured cluster above its threshold, and stays in this process below it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from safety.replay import Replayer, replay
from safety.scenarios import singles
from safety.sweep import LocalExecutor, RayExecutor, SweepPolicy, check, loopback_ray, sweep
from tests.raycluster import RayNodes
from tests.unit.test_safety_replay import routed_plan
from tests.unit.test_safety_sweep import fabric

# Ray 2.60 turns token authentication on for a cluster that ray.init starts, and a driver that has started one
# cannot then use a cluster without it (its actors die at once): the clusters of these tests (loopback only, the
# nodes' of tests.raycluster started with it off) all run without it, whichever module a worker runs first.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
loopback_ray()  # before ray is imported: this process's driver talks to 127.0.0.1 only
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def nodes() -> Iterator[RayNodes]:
    """Both nodes up and this process a driver of their cluster (two CPUs seen)."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = RayNodes()
    try:
        cluster.start()
        ray.init(address=f"127.0.0.1:{cluster.gcs}", log_to_driver=False)
        end = time.monotonic() + 60
        while ray.cluster_resources().get("CPU", 0) < 2:
            assert time.monotonic() < end, f"the worker node never joined: {cluster.log('worker')[-2000:]}"
            time.sleep(0.2)
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()


def doc_of(rep: Any) -> dict[str, Any]:
    d = rep.to_document()
    d.pop("seconds")
    return dict(d)


def test_worker_node_killed_mid_sweep(nodes: RayNodes) -> None:
    """The sweep's first chunk back kills the worker node (its raylet and its worker, SIGKILL):
    the chunks it held run again on the head's worker, a replacement is asked for (and never
    placed: the head's one CPU is taken), and the report of every pair of single failures is
    the local executor's, to the byte."""
    intent = fabric(0.45)
    plan = routed_plan(intent, seed=3)
    local = sweep(intent, plan, scope="single_pairs", executor=LocalExecutor(), chunk=2)
    rp = Replayer(intent, plan)
    ex = RayExecutor(f"127.0.0.1:{nodes.gcs}")
    ex.start(rp, list(singles(intent)))  # both workers warm: one on each node
    assert ex.workers() == 2 and len(ex.started_s) == 2
    killed: list[int] = []

    def progress(done: int, _total: int) -> None:
        if not killed:
            killed.append(done)
            nodes.kill_worker()

    remote = sweep(intent, plan, scope="single_pairs", executor=ex, chunk=2, rp=rp, progress=progress)
    assert killed and nodes.worker is not None and nodes.worker.poll() is not None
    assert ex.replaced == 1  # the worker node's actor was lost once, its chunks re-run
    assert doc_of(remote) == doc_of(local)
    assert not local.safe and local.counts["pairs_replayed"] > 100


def test_review_sweep_goes_to_the_cluster_above_the_threshold(nodes: RayNodes,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`check` with ``LOOM_EXECUTOR=ray`` (the cluster ``RAY_ADDRESS`` names): a scope of at
    least the threshold streams its chunks from the cluster, a smaller one never asks it; both
    reports are replay's."""
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{nodes.gcs}")
    streamed: list[int] = []
    real = RayExecutor.stream

    def counting(self: RayExecutor, *args: Any) -> Any:
        streamed.append(len(args[2]))
        return real(self, *args)

    monkeypatch.setattr(RayExecutor, "stream", counting)
    intent = fabric(0.45)
    plan = routed_plan(intent, seed=3)
    want = doc_of(replay(intent, plan, scope="all_single"))
    n = len(intent.links) + len(intent.devices) + 1 + len(intent.failure_domains)
    assert doc_of(check(intent, plan, SweepPolicy("ray", threshold=n + 1), scope="all_single")) == want
    assert not streamed
    assert doc_of(check(intent, plan, SweepPolicy("ray", threshold=n), scope="all_single")) == want
    assert streamed and ray.is_initialized()  # the driver's session, not the executor's, stays open
