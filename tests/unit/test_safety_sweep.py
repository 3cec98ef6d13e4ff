"""Pairs of single failures: every pair the sweep skips is replayed by brute force and
must come out exactly as the single failure that implies it; the sweep's verdict,
failing list and counts equal a brute-force replay of every pair; the chunked sweep
of the intent's own scopes equals ``replay``'s report."""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from controller.model import Intent
from controller.model.intent import validate_intent
from safety.replay import Replayer, failures, replay
from safety.scenarios import pair, singles
from safety.sweep import LocalExecutor, SweepPolicy, check, executor_from, inert, sweep
from tests.unit.test_safety_replay import clos_doc, routed_plan

# tor-2-* send and receive nothing: their links carry nothing in any scenario, so a
# pair with one of them is implied by the other part; leaf-0-1 lacks one spine link
DEMANDS = [{"from": f"tor-{p}-{t}", "to": f"10.{q}.{u}.0/24", "gbps": g}
           for (p, t, q, u, g) in [(0, 0, 1, 0, 40.0), (0, 1, 1, 1, 30.0), (1, 0, 0, 1, 25.0),
                                   (1, 1, 0, 0, 35.0), (0, 0, 0, 1, 20.0)]]


def fabric(limit: float) -> Intent:
    doc = clos_doc(3, 2, 2, 2, demands=DEMANDS, missing=("leaf-0-1:eth4",),
                   policies=[{"kind": "failure_tolerance", "scope": "all_single", "max_utilization": limit}])
    return validate_intent(doc)


def stages(res: Any) -> tuple[Any, Any]:
    return res.immediate.to_document(), res.reconverged.to_document()


@pytest.mark.parametrize("limit", [1.0, 0.45])
def test_every_skipped_pair_equals_the_single_that_implies_it(limit: float) -> None:
    intent = fabric(limit)
    plan = routed_plan(intent, seed=3)
    rp = Replayer(intent, plan)
    single = list(singles(intent))
    implied = inert(rp, single)
    brute = Replayer(intent, plan)  # a fresh replayer: nothing cached from the pruning pass
    skipped = 0
    for i, j in combinations(range(len(single)), 2):
        by = i if implied[i, j] else j if implied[j, i] else None
        if by is None:
            continue
        skipped += 1
        got = brute.run(pair(single[i], single[j]))
        assert stages(got) == stages(brute.run(single[by])), (single[i].name, single[j].name)
    # the pruning is not only a device and its own links: quiet links of other devices too
    ends = {link.key: {link.a, link.b} for link in intent.links}
    subsumed = sum(1 for a, b in combinations(single, 2)
                   if any(d in ends[k] for d in a.devices | b.devices for k in a.links | b.links))
    assert skipped > subsumed > 0


@pytest.mark.parametrize("limit", [1.0, 0.45])
def test_pair_sweep_equals_brute_force(limit: float) -> None:
    intent = fabric(limit)
    plan = routed_plan(intent, seed=3)
    rep = sweep(intent, plan, scope="single_pairs", chunk=37)
    brute = Replayer(intent, plan)
    single = list(singles(intent))
    base = replay(intent, plan, scope="all_single")
    every = [brute.run(pair(a, b)) for a, b in combinations(single, 2)]
    failing_pairs = [r for r in every if not r.ok]
    assert [s.to_document() for s in rep.scenarios] == (
        [s.to_document() for s in base.scenarios] + [r.to_document() for r in failing_pairs])
    want = [f for r in [*base.scenarios, *every] for f in failures(r)]
    assert rep.failing == tuple(want)
    assert rep.verdict == ("unsafe" if want else "safe")
    n = len(single) * (len(single) - 1) // 2
    assert rep.counts["pair"] == n == rep.counts["pairs_replayed"] + rep.counts["pairs_implied"]
    assert rep.counts["scenarios"] == len(base.scenarios) + n
    assert rep.counts["transient_black_holes"] == base.counts["transient_black_holes"] + sum(
        1 for r in every if r.immediate.dropped)
    assert rep.counts["failing_scenarios"] == base.counts["failing_scenarios"] + len(failing_pairs)
    if limit < 1.0:
        assert failing_pairs and not rep.safe


@pytest.mark.parametrize("limit", [1.0, 0.45, 0.3])
def test_the_verdict_of_every_pair_is_its_full_results(limit: float) -> None:
    """What a pair sweep asks of a passing pair, ``verdict``, is ``run``'s ok and transient black
    hole, for every pair and single of a fabric, failing (utilization, black holes) or not."""
    intent = fabric(limit)
    rp = Replayer(intent, routed_plan(intent, seed=3))
    single = list(singles(intent))
    seen: dict[tuple[bool, bool], int] = {}
    for a, b in [*((s, None) for s in single), *combinations(single, 2)]:
        sc = a if b is None else pair(a, b)
        res = rp.run(sc)
        got = rp.verdict(sc)
        assert got == (res.ok, bool(res.immediate.dropped)), sc.name
        seen[got] = seen.get(got, 0) + 1
    assert len(seen) >= 3 and (limit == 1.0 or len(seen) == 4), seen  # failing, passing, with and without


@pytest.mark.parametrize(("scope", "workers", "fork", "mode"), [
    (None, 1, True, "inline"), ("domains", 3, True, "inline"), ("all_single", 1, True, "inline"),
    ("all_single", 3, False, "threads")])
def test_chunked_sweep_equals_replay(scope: str | None, workers: int, fork: bool, mode: str) -> None:
    """Chunks in this thread or on threads (each worker with its own scratch) give replay's
    report. A single chunk (the domains) stays in this thread. Forked workers: below."""
    intent = fabric(0.45)
    plan = routed_plan(intent, seed=5)
    want = replay(intent, plan, scope=scope).to_document()
    ex = LocalExecutor(workers, fork=fork)
    got = sweep(intent, plan, scope=scope, executor=ex, chunk=7).to_document()
    assert ex.mode == mode
    want.pop("seconds"), got.pop("seconds")
    assert got == want


class Counting(Replayer):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.runs: list[str] = []

    def run(self, sc: Any) -> Any:
        self.runs.append(sc.name)
        return super().run(sc)


@pytest.mark.parametrize("workers", [1, 2])
def test_scenarios_that_fail_the_same_parts_replay_once(workers: int) -> None:
    """A domain that fails exactly one device (or one link) is that device's (link's) single
    failure under another name: the sweep replays it once and reports both, as replay does.
    Chunks are balanced by cost, sent costliest first, and come back in order."""
    domains = [{"name": "spine-0-1-power", "kind": "power", "devices": ["spine-0-1"]},
               {"name": "one-fibre", "kind": "srlg", "links": ["leaf-1-1:eth1"]},
               {"name": "plane-1", "kind": "power", "devices": ["spine-1-0", "spine-1-1"]}]
    doc = clos_doc(3, 2, 2, 2, demands=DEMANDS, missing=("leaf-0-1:eth4",), domains=domains,
                   policies=[{"kind": "failure_tolerance", "scope": "all_single", "max_utilization": 0.45}])
    intent = validate_intent(doc)
    plan = routed_plan(intent, seed=5)
    want = replay(intent, plan).to_document()
    rp = Counting(intent, plan)
    seen: list[tuple[int, int]] = []
    got = sweep(intent, plan, executor=LocalExecutor(workers, fork=False), chunk=5, rp=rp,
                progress=lambda done, total: seen.append((done, total))).to_document()
    want.pop("seconds"), got.pop("seconds")
    assert got == want
    names = [s["name"] for s in got["scenarios"]]
    assert "spine-0-1-power" in names and "device:spine-0-1" in names and "link:leaf-1-1:eth1" in names
    if workers == 1:  # this thread's replayer: every scenario once, but the two repeats not at all
        assert sorted(rp.runs) == sorted(set(names) - {"device:spine-0-1", "link:leaf-1-1:eth1"})
    assert seen[-1] == (len(names), len(names))


FORKED = """
from tests.unit.test_safety_replay import routed_plan
from tests.unit.test_safety_sweep import fabric
from safety.replay import replay
from safety.sweep import LocalExecutor, sweep
intent = fabric(0.45)
plan = routed_plan(intent, seed=5)
want = replay(intent, plan, scope="all_single").to_document()
ex = LocalExecutor(3)
got = sweep(intent, plan, scope="all_single", executor=ex, chunk=7).to_document()
want.pop("seconds"), got.pop("seconds")
assert got == want, "the forked sweep's report differs from replay's"
print(ex.mode)
"""


@pytest.mark.component
def test_forked_workers_give_replays_report() -> None:
    """In a process running one thread, as ``loom check`` does, the local executor forks its
    workers, and their report is replay's. (A fresh interpreter: this one may run threads
    of other tests, and then the executor rightly uses threads.)"""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "tests"), str(root)])}
    out = subprocess.run([sys.executable, "-c", FORKED], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "processes"


def test_results_pickle_as_they_were() -> None:
    """Results cross between processes as their constructors' arguments, and come back equal."""
    import pickle

    intent = fabric(0.45)
    rep = replay(intent, routed_plan(intent, seed=5), scope="all_single")
    assert any(r.immediate.hottest and r.immediate.dropped for r in rep.scenarios)
    assert pickle.loads(pickle.dumps(rep.scenarios)) == rep.scenarios
    assert pickle.loads(pickle.dumps(rep.failing)) == rep.failing


def test_executor_names() -> None:
    assert executor_from(None).name == executor_from("local").name == "local"
    assert executor_from("ray").name == executor_from("ray://10.0.0.1:10001").name == "ray"
    for bad in ("ray://", "dask", "ray:10001"):
        with pytest.raises(ValueError, match="unknown executor"):
            executor_from(bad)
    with pytest.raises(ValueError, match="unknown scope"):
        sweep(fabric(1.0), routed_plan(fabric(1.0)), scope="pairs")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("spec", ["ray", "ray://127.0.0.1:{port}"])
def test_check_falls_back_to_this_machine_when_the_cluster_is_unreachable(
        spec: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A review's sweep whose Ray cluster does not answer (``RAY_ADDRESS`` or ``ray://``, a closed
    port) runs here instead, at once (not after Ray's own half-minute of retries), with a warning
    naming the address, and gives replay's report; below the threshold Ray is never asked."""
    import logging
    import time

    port = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    intent = fabric(0.45)
    plan = routed_plan(intent, seed=5)
    want = replay(intent, plan, scope="all_single").to_document()
    want.pop("seconds")
    for threshold, warned in ((10_000, False), (1, True)):
        caplog.clear()
        t0 = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger="safety.sweep"):
            got = check(intent, plan, SweepPolicy(spec.format(port=port), threshold), scope="all_single")
        assert time.perf_counter() - t0 < 20
        got_doc = got.to_document()
        got_doc.pop("seconds")
        assert got_doc == want
        assert (f"127.0.0.1:{port}" in caplog.text and "unavailable" in caplog.text) == warned, caplog.text


def test_the_executor_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """``LOOM_EXECUTOR`` takes what ``loom check --executor`` takes, and names the bad value otherwise."""
    from pydantic import ValidationError

    from controller.settings import Settings

    assert Settings().executor == "local" and Settings().executor_threshold >= 1
    for good in ("local", "ray", "ray://10.0.0.1:10001"):
        monkeypatch.setenv("LOOM_EXECUTOR", good)
        assert Settings().executor == good
        executor_from(good)
    monkeypatch.setenv("LOOM_EXECUTOR", "dask")
    with pytest.raises(ValidationError, match="executor"):
        Settings()


def test_a_review_sweeps_with_the_configured_policy(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The review (whose verdict the commit gate reads) runs its safety sweep through
    :func:`safety.sweep.check` with the policy it is given: an unreachable cluster above the
    threshold is tried (the warning says so) and the review's safety report stays the default's."""
    import logging
    from types import SimpleNamespace

    from controller.workflow.changes import ReviewInputs
    from controller.workflow.review import build_review

    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    intent = fabric(0.45)
    plan = routed_plan(intent, seed=5)
    inp = ReviewInputs(SimpleNamespace(proposed_revision=2), intent, plan, 1, intent, plan)  # type: ignore[arg-type]
    want = build_review(inp, {})
    assert not caplog.text
    with caplog.at_level(logging.WARNING, logger="safety.sweep"):
        got = build_review(inp, {}, sweep_policy=SweepPolicy("ray", threshold=1))
    assert "unavailable" in caplog.text
    for doc in (want, got):
        doc["safety"].pop("seconds")
    assert got["verdict"] == want["verdict"] and got["safety"] == want["safety"]  # (the reactions are timed)
