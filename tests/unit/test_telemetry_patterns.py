"""Traffic pattern classification (:mod:`controller.telemetry.patterns`): synthetic series of each
collective with noise and periodic on/off rates, several jobs at once over background traffic, the
ToR mapping of measured AFT demands, the collector's per-interval series, and
``GET /v1/telemetry/patterns`` through a real app fed synthetic counters."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model.collectives import Registry
from controller.model.collectives_builtin import BUILTINS
from controller.model.intent import validate_intent
from controller.telemetry import Sample, Telemetry, aft_path
from controller.telemetry.patterns import Series, classify, matrix_series, periodicity, tor_series
from southbound.device.dry import DryDriver
from tests.apps import Api, running_api
from tests.pattern_synth import Job, background, edges, synth

with warnings.catch_warnings():
    warnings.simplefilter("ignore")

DOC = clos_document(pods=2, tors=6, planes=2, spines=2, scale_to_ecmp=False)
INTENT = validate_intent(DOC)
TORS = sorted(d.name for d in INTENT.devices if d.role == "tor")
PREFIX = {p.origins[0]: p.prefix for p in INTENT.prefixes}


def groups_by_members(series: Series) -> dict[frozenset[str], str]:
    return {frozenset(g.members): g.pattern for g in classify(series)}


@pytest.mark.parametrize("pattern", ["ring_allreduce", "all_to_all", "pipeline", "incast"])
@pytest.mark.parametrize("size", [3, 5, 8])
@pytest.mark.parametrize("noise", [0.1, 0.2])
def test_each_pattern_alone_is_recognized_over_background(pattern: str, size: int, noise: float) -> None:
    rng = np.random.default_rng(size)
    n = 12
    members = tuple(int(x) for x in rng.permutation(n)[:size])
    job = Job(pattern, members, gbps=10.0, period=0 if pattern == "incast" else 4)
    series = synth(n, [job], noise=noise, bg=background(rng, n, 0.05 * 10.0 * n), seed=size)
    found = classify(series)
    group = next(g for g in found if g.pattern != "background")
    assert set(group.members) == {series.tors[i] for i in members}
    assert group.pattern == pattern and 0.5 < group.confidence <= 1.0
    assert group.gbps == pytest.approx(series.mean()[np.ix_(members, members)].sum())
    assert all(g.pattern == "background" for g in found if g is not group)
    if pattern != "incast":  # on two intervals in four
        assert group.period_s == pytest.approx(40.0) and group.periodicity > 0.5
    assert 0.8 < group.fit <= 1.0 and group.internal > 0.8


def test_overlapping_jobs_on_disjoint_tors_come_out_as_separate_groups() -> None:
    rng = np.random.default_rng(7)
    n = 20
    perm = [int(x) for x in rng.permutation(n)]
    jobs = [Job("ring_allreduce", tuple(perm[0:4]), 10.0, period=4),
            Job("all_to_all", tuple(perm[4:7]), 6.0, period=5, phase=2),
            Job("pipeline", tuple(perm[7:11]), 12.0, period=6, duty=0.5, phase=1),
            Job("incast", tuple(perm[11:16]), 4.0, period=0)]
    series = synth(n, jobs, noise=0.2, bg=background(rng, n, 10.0), seed=3)
    found = classify(series)
    got = {frozenset(g.members): g for g in found}
    for job in jobs:
        g = got[frozenset(series.tors[i] for i in job.members)]
        assert g.pattern == job.pattern, (job, g)
    periods = {g.pattern: g.period_s for g in found}
    assert periods["ring_allreduce"] == 40.0 and periods["all_to_all"] == 50.0 and periods["pipeline"] == 60.0
    rest = [g for g in found if g.pattern == "background"]
    assert len(rest) == 1 and set(rest[0].members) == {series.tors[i] for i in perm[16:]}
    assert [g.pattern for g in found][-1] == "background"  # the busiest first, background last


def test_gravity_traffic_is_background() -> None:
    for seed in range(5):
        rng = np.random.default_rng(seed)
        series = synth(10, [], noise=0.15, bg=background(rng, 10, 100.0), seed=seed)
        found = classify(series)
        assert [g.pattern for g in found] == ["background"] and len(found[0].members) == 10


def test_a_single_matrix_classifies_without_periodicity() -> None:
    series = synth(8, [Job("ring_allreduce", (0, 2, 4, 6), 10.0, period=0)], intervals=1, noise=0.1)
    (ring, *rest) = classify(series)
    assert ring.pattern == "ring_allreduce" and ring.members == ("tor-00", "tor-02", "tor-04", "tor-06")
    assert ring.period_s is None and ring.periodicity == 0.0 and not rest


def test_periodicity_finds_the_period_and_nothing_in_noise() -> None:
    peak, period = periodicity(np.tile([3.0, 3.0, 3.0, 0.0, 0.0, 0.0], 5), 10.0)
    assert period == 60.0 and peak > 0.7
    assert periodicity(np.random.default_rng(0).normal(10.0, 1.0, 30), 10.0)[1] is None
    assert periodicity(np.ones(30), 10.0) == (0.0, None)
    assert periodicity(np.array([1.0, 0.0, 1.0]), 10.0) == (0.0, None)


def test_tor_series_splits_an_anycast_prefix_over_its_origins() -> None:
    doc = clos_document(pods=1, tors=3, planes=1, spines=1, scale_to_ecmp=False)
    doc["prefixes"].append({"prefix": "10.200.0.0/24", "origins": ["tor-0-1", "tor-0-2"]})
    intent = validate_intent(doc)
    keys = [("tor-0-0", "10.200.0.0/24"), ("tor-0-1", intent.prefixes[0].prefix)]
    s = tor_series(intent, keys, np.array([[8.0, 3.0], [np.nan, 1.0]]), 10.0)
    assert s.tors == ("tor-0-0", "tor-0-1", "tor-0-2")
    assert s.rates[0].tolist() == [[0, 4, 4], [3, 0, 0], [0, 0, 0]]
    assert s.rates[1, 0].tolist() == [0, 0, 0] and s.rates[1, 1, 0] == 1.0


def _feed(tel: Telemetry, jobs: list[Job], *, now: float, intervals: int = 30, seed: int = 0,
          registry: Registry = BUILTINS) -> None:
    """AFT counters of every ToR for ``jobs`` (indices into :data:`TORS`), one sample per 10 s."""
    series = synth(len(TORS), jobs, intervals=intervals, noise=0.1, seed=seed, tors=TORS, registry=registry)
    octets = {(s, PREFIX[d]): 0.0 for s in TORS for d in TORS if s != d}
    for t in range(intervals + 1):
        when = now - 10.0 * (intervals - t)
        if t:
            for (src, prefix), v in octets.items():
                i, j = TORS.index(src), TORS.index(next(o for o, p in PREFIX.items() if p == prefix))
                octets[(src, prefix)] = v + series.rates[t - 1, i, j] * 1e9 / 8 * 10.0
        tel.ingest([Sample(s, aft_path(p), int(v), int(when * 1e9)) for (s, p), v in octets.items()], now=when)


def test_the_collector_series_follows_the_counters_interval_by_interval() -> None:
    tel = Telemetry()
    now = 1_700_000_000.0
    _feed(tel, [Job("pipeline", (0, 1, 2), 10.0, period=2, duty=0.5)], now=now, intervals=12)
    keys, rates, step = tel.demand_series(INTENT, now, 120.0)
    assert step == 10.0 and rates.shape == (12, len(keys))
    col = keys.index((TORS[0], PREFIX[TORS[1]]))
    on = rates[:, col]
    assert (on[::2] > 8).all() and (on[1::2] < 1e-6).all()  # on, off, on, ... within the noise
    method, groups = tel.patterns(INTENT, None, now, 120.0)
    assert method == "aft" and groups[0].pattern == "pipeline" and groups[0].period_s == 20.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Api, Telemetry]]:
    tel = Telemetry()
    driver = DryDriver([d.name for d in INTENT.devices], tmp_path / "dry")
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=DOC, driver=driver, telemetry=tel,
                     drift_interval=0, verify_timeout=5) as api:
        yield api, tel


def test_patterns_endpoint_names_the_running_collectives(served: tuple[Api, Telemetry]) -> None:
    api, tel = served
    assert api("GET", "/v1/telemetry/patterns", role="viewer").status_code == 404  # nothing active yet
    assert api.initial()["state"] == "committed"
    jobs = [Job("ring_allreduce", (0, 3, 6, 9), 10.0, period=4), Job("all_to_all", (1, 4, 7), 5.0, period=3)]
    _feed(tel, jobs, now=time.time())
    r = api("GET", "/v1/telemetry/patterns?window_s=300", role="viewer")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["window_s"] == 300 and body["method"] == "aft"
    got = {frozenset(g["members"]): g for g in body["groups"]}
    for job in jobs:
        g = got[frozenset(TORS[i] for i in job.members)]
        assert g["pattern"] == job.pattern and 0.5 < g["confidence"] <= 1
        assert g["gbps"] == pytest.approx(job.gbps * len(edges(job.pattern, job.members)) * (
            1 / 2 if job.period == 4 else 2 / 3), rel=0.1)
        assert {"members", "pattern", "confidence", "gbps", "fit", "uniformity", "periodicity", "period_s"} <= set(g)
    assert got[frozenset(TORS[i] for i in (0, 3, 6, 9))]["period_s"] == 40.0
    for query in ("window_s=0", "window_s=abc", "window_s=100000"):
        bad = api("GET", f"/v1/telemetry/patterns?{query}", role="viewer")
        assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
        assert "window_s" in bad.text
    assert api.client.get("/v1/telemetry/patterns").status_code == 401


#: a collective only the intent below defines: workers push to member 0, which pushes back
STAR = {"phases": [{"from": "range(1, n)", "to": 0, "bytes": "B"}, {"from": 0, "to": "range(1, n)", "bytes": "B"}]}
#: the star's members; a job of the intent runs on all but the last of them
STAR_MEMBERS = (2, 5, 8, 11, 1)
STAR_JOB = {"name": "star-1", "tors": [TORS[i] for i in STAR_MEMBERS[:-1]], "collective": "star",
            "bytes_per_iter": 1e6, "iter_s": 4.0}


@pytest.fixture
def served_star(tmp_path: Path) -> Iterator[tuple[Api, Telemetry]]:
    tel = Telemetry()
    driver = DryDriver([d.name for d in INTENT.devices], tmp_path / "dry")
    intent = {**DOC, "collectives": {"star": STAR}, "jobs": [STAR_JOB]}
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=intent, driver=driver, telemetry=tel,
                     drift_interval=0, verify_timeout=5) as api:
        yield api, tel


def test_patterns_endpoint_recognizes_a_collective_only_the_intent_defines(
        served_star: tuple[Api, Telemetry]) -> None:
    api, tel = served_star
    assert api.initial()["state"] == "committed"
    members = STAR_MEMBERS
    _feed(tel, [Job("star", members, 10.0, period=4), Job("ring_allreduce", (0, 3, 6, 9), 10.0, period=4)],
          now=time.time(), registry=BUILTINS.extended({"star": STAR}))
    r = api("GET", "/v1/telemetry/patterns?window_s=300", role="viewer")
    assert r.status_code == 200, r.text
    got = {frozenset(g["members"]): g for g in r.json()["groups"]}
    star = got[frozenset(TORS[i] for i in members)]
    assert star["collective"] == "star" and star["collective_confidence"] >= 0.5
    ring = got[frozenset(TORS[i] for i in (0, 3, 6, 9))]
    assert ring["pattern"] == "ring_allreduce" and ring["collective"] == "ring_allreduce"
    assert set(ring["alternatives"]) == {"reduce_scatter", "all_gather"}
    # each group is tied to the declared job it overlaps by half or more (4 of the star's 5 ToRs), or to none
    assert star["jobs"] == ["star-1"] and ring["jobs"] == []
    # the same counters read against an intent without the template: no group is called 'star'
    method, groups = tel.patterns(INTENT, None, time.time(), 300.0)
    assert all(g.collective != "star" for g in groups)


def test_nothing_measured_is_no_group() -> None:
    """No demand measured (a fresh collector, or a window with no counters): no group, no error."""
    assert classify(matrix_series(INTENT, {}, 10.0)) == []
    assert classify(tor_series(INTENT, [], np.zeros((5, 0)), 10.0)) == []
