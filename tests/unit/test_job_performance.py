"""A job's performance from counters alone (:mod:`controller.telemetry.period`,
:mod:`controller.telemetry.jobperf`, :mod:`controller.telemetry.discovery`): the iteration period
of rate series whose true period is known (between whole intervals, with noise), what the
telemetry interval hides, the communication-time model on figures worked by hand, a job's
performance on a small fabric fed counters, and the member order of a discovered group."""

from __future__ import annotations

import time

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model.collectives_builtin import BUILTINS
from controller.model.intent import validate_intent
from controller.model.jobs import job_demands, originated_prefixes
from controller.planning import compile_plan
from controller.telemetry import Telemetry
from controller.telemetry.discovery import member_order
from controller.telemetry.jobperf import comm_time, job_performance
from controller.telemetry.patterns import periodicity
from controller.telemetry.period import recover_period
from controller.telemetry.signatures import template_matrix
from tests.telemetry_synth import Fabric


def on_off(period_s: float, interval_s: float, n: int, *, duty: float = 0.5, noise: float = 0.15, seed: int = 0,
           gbps: float = 10.0) -> np.ndarray:
    """The mean rate per interval of a job busy ``duty`` of every ``period_s`` (a random phase), each
    interval's rate times ``1 + noise x N(0, 1)``: what its counters read every ``interval_s``."""
    rng = np.random.default_rng(seed)
    fine = 400
    t = (np.arange(n * fine) + 0.5) * interval_s / fine + rng.uniform(0, period_s)
    busy = ((t % period_s) < duty * period_s).astype(float).reshape(n, fine).mean(axis=1)
    return gbps * busy * np.clip(1.0 + noise * rng.standard_normal(n), 0.0, None)


@pytest.mark.parametrize("period_s", [23.0, 37.0, 47.5, 64.0, 91.0])
@pytest.mark.parametrize("duty", [0.3, 0.5, 0.7])
def test_the_period_is_recovered_between_whole_intervals_within_5_percent(period_s: float, duty: float) -> None:
    for seed in range(3):
        fit = recover_period(on_off(period_s, 10.0, 36, duty=duty, seed=seed), 10.0)
        assert fit.period_s is not None, fit.reason
        assert fit.period_s == pytest.approx(period_s, rel=0.05), (seed, fit)
        assert 0.5 <= fit.strength <= 1.0 and fit.reason is None


def test_whole_interval_autocorrelation_would_miss_what_folding_finds() -> None:
    """37 s read every 10 s: the classifier's autocorrelation answers a whole number of intervals, 8% off."""
    rate = on_off(37.0, 10.0, 36, noise=0.05, seed=1)
    _peak, whole = periodicity(rate, 10.0)
    assert whole is not None and abs(whole - 37.0) / 37.0 > 0.05
    fit = recover_period(rate, 10.0)
    assert fit.period_s == pytest.approx(37.0, rel=0.02)


@pytest.mark.parametrize("quiet", [(2, 3), (4, 2), (3, 6)])
def test_the_quiet_before_a_job_starts_and_after_it_stops_is_not_part_of_its_period(quiet: tuple[int, int]) -> None:
    """Five 3.5 s periods read every second inside a window with quiet intervals at both ends (the lab's
    ring): the step of the job's start and stop is variance no period explains, and once it diluted the fit
    under the strength threshold for some phases."""
    before, after = quiet
    for seed in range(12):
        busy = on_off(3.5, 1.0, 18, noise=0.1, seed=seed)
        rate = np.concatenate([np.zeros(before), busy, np.zeros(after)])
        fit = recover_period(rate, 1.0)
        assert fit.period_s == pytest.approx(3.5, rel=0.05), (seed, fit)


def test_what_the_telemetry_interval_hides_is_no_period_with_the_reason() -> None:
    # a 1 s iteration under a 10 s interval: every interval holds whole iterations, the rate reads steady
    steady = recover_period(on_off(1.0, 10.0, 36, noise=0.0), 10.0)
    assert steady.period_s is None and "10 s telemetry interval" in (steady.reason or "")
    # 3.3 s: the intervals hold three iterations and a fraction; what is left is noise, not a period
    fast = recover_period(on_off(3.3, 10.0, 36, noise=0.1, seed=2), 10.0)
    assert fast.period_s is None and "averaged out" in (fast.reason or "")
    short = recover_period(on_off(40.0, 10.0, 5), 10.0)
    assert short.period_s is None and "at least 8" in (short.reason or "")
    nan = on_off(40.0, 10.0, 36, seed=3)
    nan[::5] = np.nan  # intervals without a sample are left out, the rest still fold
    assert recover_period(nan, 10.0).period_s == pytest.approx(40.0, rel=0.05)


def test_noise_alone_has_no_period() -> None:
    found = [recover_period(np.random.default_rng(s).normal(10.0, 1.0, 36), 10.0).period_s for s in range(50)]
    assert sum(p is not None for p in found) <= 3


def test_comm_time_adds_the_phases_each_as_long_as_its_slowest_link() -> None:
    cap = np.array([100.0, 100.0, 40.0])
    bits = [np.array([6.0, 3.0, 0.0]), np.array([0.0, 6.0, 2.0])]  # gigabits per phase per edge
    idle = comm_time(bits, cap)
    assert idle.phases == pytest.approx((0.06, 0.06)) and idle.seconds == pytest.approx(0.12)
    # 50 gbps of other traffic on edge 0 halves what phase 0 has there; 30 on edge 2 leaves 10 for phase 1
    busy = comm_time(bits, cap, np.array([50.0, 0.0, 30.0]))
    assert busy.phases == pytest.approx((0.12, 0.2)) and busy.seconds == pytest.approx(0.32)
    assert busy.per_edge == pytest.approx([0.12, 0.09, 0.2])
    # a link full of others' traffic is capped at 99%: a hundred times slower, never infinite
    assert comm_time(bits, cap, np.array([500.0, 0.0, 0.0])).phases[0] == pytest.approx(6.0)


def small_fabric() -> tuple[dict, list[str]]:
    doc = clos_document(pods=1, tors=4, planes=1, spines=1, scale_to_ecmp=False)
    doc["demands"] = []
    tors = sorted(d["name"] for d in doc["devices"] if d["role"] == "tor")
    doc["jobs"] = [{"name": "llm", "tors": tors, "collective": "ring_allreduce", "bytes_per_iter": 1e9,
                    "iter_s": 1.0}]
    return doc, tors


def test_a_job_is_slowed_by_the_load_on_the_links_its_ring_crosses() -> None:
    """Four ToRs under one leaf (100 gbps links): a ring all-reduce of 1 GB moves 0.75 GB from each member to
    the next in each of its two phases: 6 Gb / 100 gbps = 0.06 s a phase, 0.12 s idle. 50 gbps from tor 0 to
    tor 2 shares tor 0's uplink (phase edges 0 -> 1) and tor 2's downlink (1 -> 2): half the capacity left
    there, each phase twice as long."""
    doc, tors = small_fabric()
    intent = validate_intent(doc)
    plan = compile_plan(intent)
    job = intent.jobs[0]
    tel = Telemetry()
    now = time.time()
    before = job_performance(tel, intent, plan, job, now, 300.0)
    assert before.comm_s_idle == pytest.approx(0.12) and before.expected_gbps == pytest.approx(48.0)
    assert before.measured_gbps is None and before.comm_s is None and before.slowdown is None
    assert before.period_s is None and {"measured_gbps", "comm_s", "slowdown", "period_s"} <= set(before.reasons)
    ring = job_demands(job, originated_prefixes(intent), intent.registry)
    bg_key = (tors[0], originated_prefixes(intent)[tors[2]][0])
    counters = validate_intent({**doc, "jobs": []})  # the links carry what hosts send: no job counted twice
    fabric = Fabric(counters, compile_plan(counters), {**ring, bg_key: 50.0}, t0=now - 400)
    for t in range(300, -1, -10):
        tel.ingest(fabric.samples(now - t), now=now - t)
    perf = job_performance(tel, intent, plan, job, now, 300.0)
    assert perf.method == "aft" and perf.measured_gbps == pytest.approx(48.0, rel=1e-3)
    assert perf.comm_s == pytest.approx(0.24, rel=1e-3) and perf.slowdown == pytest.approx(2.0, rel=1e-3)
    assert perf.comm_s_idle == pytest.approx(0.12)
    assert perf.period_s is None and "steady rate" in perf.reasons["period_s"]
    up0 = next(lk.key for lk in intent.links if tors[0] in (lk.a, lk.b))
    down2 = next(lk.key for lk in intent.links if tors[2] in (lk.a, lk.b))
    worst = {b.link: b for b in perf.bottlenecks[:2]}
    assert set(worst) == {up0, down2}
    for b in worst.values():
        assert b.utilization == pytest.approx(0.62, rel=1e-3) and b.job_share == pytest.approx(12 / 62, rel=1e-3)
    assert perf.bottlenecks[2].utilization == pytest.approx(0.12, rel=1e-3)
    assert perf.bottlenecks[2].job_share == pytest.approx(1.0)


def test_a_discovered_group_is_ordered_as_its_template_numbers_members() -> None:
    rng = np.random.default_rng(4)
    for name, k in (("ring_allreduce", 5), ("pipeline", 4), ("tree_allreduce", 6), ("ring_allreduce", 9)):
        template = template_matrix(BUILTINS.get(name), k)
        assert template is not None
        perm = rng.permutation(k)  # measured member perm[i] plays the template's member i
        measured = np.zeros((k, k))
        measured[np.ix_(perm, perm)] = template * 7.0 * np.clip(1 + 0.1 * rng.standard_normal((k, k)), 0, None)
        order = member_order(measured, template)
        rebuilt = measured[np.ix_(order, order)]
        assert np.array_equal(rebuilt > 0, template > 0), (name, order, perm)
