"""The collector's pure core: counter windows and rates (resets, wraps, late,
missing and stale samples, devices that come and go), the link and demand
views and the plan's fidelity, on synthetic counters of a generated Clos whose
link loads come from safety's propagation (the oracle)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from controller.model.plan import Plan
from controller.planning import compile_plan
from controller.telemetry import CounterStore, Options, Sample, Telemetry, interface_path
from safety.estimate import link_loader, link_loads, routing_matrix, routing_operator, tomogravity, with_demands
from tests.telemetry_synth import Fabric

P = interface_path("eth1", "out-octets")
S = 1_000_000_000  # ns per second
T0 = 1_700_000_000


def feed(store: CounterStore, points: list[tuple[float, int]], device: str = "d") -> None:
    for t, v in points:
        store.ingest([Sample(device, P, v, int((T0 + t) * S))], now=T0 + t)


def rates(store: CounterStore, now: float, window: float = 1000.0) -> np.ndarray:
    r = store.rows[("d", P)]
    k = store.options.max_rates
    inside = (store.ring_t[r] > T0 + now - window) & (store.ring_t[r] <= T0 + now)
    order = np.argsort(store.ring_t[r][inside])
    del k
    return np.asarray(store.ring_rate[r][inside][order], dtype=np.float64)


def test_rates_are_deltas_over_time_and_the_stats_cover_the_window() -> None:
    store = CounterStore()
    feed(store, [(0, 0), (10, 1000), (20, 3000), (30, 6000)])
    assert list(rates(store, 30)) == [100, 200, 300]
    st = store.stats([store.rows[("d", P)]], T0 + 30, 15)  # intervals ending at 20 and 30 (10 is out)
    assert st.mean[0] == pytest.approx(250) and st.max[0] == 300 and 200 < st.p95[0] <= 300
    assert not st.stale[0] and st.age_s[0] == 0


def test_a_64_bit_wrap_is_a_normal_interval() -> None:
    store = CounterStore()
    feed(store, [(0, 2**64 - 500), (10, 500)])
    assert list(rates(store, 10)) == [100] and store.wraps == 1 and store.resets == 0


def test_a_reset_never_makes_a_spike_or_a_negative_rate() -> None:
    store = CounterStore()
    feed(store, [(0, 10**12), (10, 10**12 + 1000), (20, 10**12 + 2000), (30, 800), (40, 1800)])
    got = rates(store, 40)
    assert (got >= 0).all() and got.max() <= 100 and store.resets == 1
    assert list(got) == [100, 100, 80, 100]  # 800 in 10 s after the restart: plausible (<= the previous rate)
    store2 = CounterStore()
    feed(store2, [(0, 10**12), (10, 10**12 + 1000), (20, 5000), (30, 6000)])
    assert list(rates(store2, 30)) == [100, 100]  # 5000 / 10 s would be a spike: the interval is skipped


def test_late_and_duplicate_samples_are_dropped_and_an_implausible_jump_is_skipped() -> None:
    store = CounterStore(Options(max_rate=1e6))
    feed(store, [(0, 0), (10, 1000), (5, 400), (10, 1000), (20, 2000), (30, 2000 + 10**9)])
    assert list(rates(store, 30)) == [100, 100] and store.late == 2 and store.spikes == 1


def test_samples_of_one_batch_in_any_order_are_replayed_in_time_order() -> None:
    store = CounterStore()
    batch = [Sample("d", P, v, (T0 + t) * S) for t, v in [(20, 3000), (0, 0), (10, 1000)]]
    store.ingest(batch, now=T0 + 20)
    assert list(rates(store, 20)) == [100, 200] and store.late == 0


def test_the_collector_takes_any_sample_shaped_object_and_plain_tuples() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class AdapterSample:  # what southbound.gnmi yields: the same four fields, a type of its own
        device: str
        path: str
        value: int
        timestamp_ns: int

    tel = Telemetry()
    assert tel.ingest([AdapterSample("d", P, 0, T0 * S), ("d", P, 1000, (T0 + 10) * S)], now=T0 + 10) == 2
    assert tel.store.stats([tel.store.rows[("d", P)]], T0 + 10, 60).mean[0] == 100


def test_missing_samples_make_a_counter_stale_never_zero() -> None:
    store = CounterStore(Options(interval_s=10))
    feed(store, [(0, 0), (10, 1000), (20, 2000)])
    r = [store.rows[("d", P)], -1]
    fresh = store.stats(r, T0 + 45, 60)
    assert not fresh.stale[0] and fresh.mean[0] == 100 and fresh.age_s[0] == 25
    late = store.stats(r, T0 + 51, 60)  # more than 3 intervals without a sample
    assert late.stale[0] and late.mean[0] == 100 and late.age_s[0] == 31
    gone = store.stats(r, T0 + 200, 60)  # no interval left in the window: unknown, not 0
    assert gone.stale[0] and np.isnan(gone.mean[0])
    assert fresh.stale[1] and np.isnan(fresh.mean[1]) and np.isnan(fresh.age_s[1])  # never seen


def test_a_disconnected_device_is_stale_until_it_samples_again_and_silent_devices_are_forgotten() -> None:
    store = CounterStore(Options(forget_after_s=100))
    feed(store, [(0, 0), (10, 1000)])
    feed(store, [(0, 0), (10, 1000)], device="e")
    store.mark_disconnected("d")
    assert store.stats([store.rows[("d", P)]], T0 + 10, 60).stale[0]
    feed(store, [(20, 2000)])
    assert not store.stats([store.rows[("d", P)]], T0 + 20, 60).stale[0]
    assert store.expire(T0 + 115) == ["e"] and ("e", P) not in store.rows and len(store) == 1
    feed(store, [(120, 0), (130, 500)], device="f")  # reuses e's row, from scratch
    assert store.stats([store.rows[("f", P)]], T0 + 130, 60).mean[0] == 50


def test_the_collector_forgets_devices_that_went_silent_as_it_ingests() -> None:
    tel = Telemetry(Options(forget_after_s=100))
    tel.ingest([Sample("gone", P, 0, T0 * S), Sample("here", P, 0, T0 * S)], now=T0)
    tel.ingest([Sample("here", P, 10, (T0 + 200) * S)], now=T0 + 200)
    assert tel.counts()["devices"] == 1 and ("gone", P) not in tel.store.rows


@cache
def clos() -> tuple[Intent, Plan]:
    intent = validate_intent(clos_document(pods=2, tors=4, planes=2, spines=2, seed=3, demand="gravity"))
    return intent, compile_plan(intent)


def run(fabric: Fabric, tel: Telemetry, seconds: range, **kw: frozenset[str]) -> None:
    for t in seconds:
        tel.ingest(fabric.samples(fabric.t0 + t, **kw), now=fabric.t0 + t)


def test_the_link_view_reads_the_loads_the_plan_carries() -> None:
    intent, plan = clos()
    fabric = Fabric(intent, plan)
    tel = Telemetry()
    run(fabric, tel, range(0, 70, 10))
    views = tel.links(intent, fabric.t0 + 65, 60)
    for i, (lk, v) in enumerate(zip(intent.links, views, strict=True)):
        assert v.gbps_ab == pytest.approx(fabric.load[2 * i], rel=1e-5, abs=1e-6)
        assert v.gbps_ba == pytest.approx(fabric.load[2 * i + 1], rel=1e-5, abs=1e-6)
        assert v.utilization == pytest.approx(max(fabric.load[2 * i:2 * i + 2]) / lk.capacity_gbps, rel=1e-5)
        assert not v.stale and v.age_s == 5


def test_a_device_that_stops_reporting_makes_its_links_stale_and_the_other_end_fills_in() -> None:
    intent, plan = clos()
    fabric = Fabric(intent, plan)
    tel = Telemetry()
    run(fabric, tel, range(0, 70, 10))
    run(fabric, tel, range(70, 130, 10), skip=frozenset({"leaf-0-0"}))
    views = tel.links(intent, fabric.t0 + 125, 60)
    touching = [v for v in views if "leaf-0-0" in (v.a, v.b)]
    assert touching and all(v.stale and v.age_s is not None and v.age_s > 30 for v in touching)
    assert all(not v.stale for v in views if "leaf-0-0" not in (v.a, v.b))
    for v in touching:  # the other end's in-octets still give a's direction when a itself is silent
        i = next(j for j, lk in enumerate(intent.links) if (lk.a, lk.a_port) == (v.a, v.a_port))
        silent_a = v.a == "leaf-0-0"
        assert (v.gbps_ab if silent_a else v.gbps_ba) == pytest.approx(
            fabric.load[2 * i if silent_a else 2 * i + 1], rel=1e-5, abs=1e-6)


def test_an_agent_restart_mid_window_makes_no_spike() -> None:
    intent, plan = clos()
    fabric = Fabric(intent, plan, base=10**12)
    restarted = Fabric(intent, plan, t0=fabric.t0 + 30)  # every counter back to zero at t0 + 30
    tel = Telemetry()
    run(fabric, tel, range(0, 40, 10))
    for t in range(40, 70, 10):
        tel.ingest(restarted.samples(fabric.t0 + t), now=fabric.t0 + t)
    views = tel.links(intent, fabric.t0 + 60, 60, "max")
    for i, v in enumerate(views):
        assert v.gbps_ab is not None and v.gbps_ab <= fabric.load[2 * i] * (1 + 1e-5) + 1e-6
    assert tel.counts()["resets"] > 0


def test_the_demand_view_with_aft_counters_is_exact() -> None:
    intent, plan = clos()
    fabric = Fabric(intent, plan)
    tel = Telemetry()
    run(fabric, tel, range(0, 70, 10))
    view = tel.demand(intent, plan, fabric.t0 + 65, 60, "p95")
    assert view.method == "aft" and set(view.demands) == set(fabric.truth())
    for k, g in fabric.truth().items():
        assert view.demands[k] == pytest.approx(g, rel=1e-5)
    fid = tel.fidelity(intent, plan, fabric.t0 + 65, 60)
    assert fid.worst is not None and fid.worst < 1e-4 and fid.method == "aft"


def test_without_aft_counters_the_demand_is_estimated_by_tomogravity() -> None:
    intent, plan = clos()
    fabric = Fabric(intent, plan, aft=False)
    tel = Telemetry()
    run(fabric, tel, range(0, 70, 10))
    view = tel.demand(intent, plan, fabric.t0 + 65, 60)
    assert view.method == "tomogravity"
    truth = fabric.truth()
    keys = set(truth) | set(view.demands)
    l1 = sum(abs(view.demands.get(k, 0) - truth.get(k, 0)) for k in keys) / sum(truth.values())
    assert l1 < 0.25, l1
    assert view.residual is not None and view.residual < 1e-3 * fabric.load.sum()
    fid = tel.fidelity(intent, plan, fabric.t0 + 65, 60)  # the estimate fits the links: predicted == observed
    assert fid.method == "tomogravity" and fid.worst is not None and fid.worst < 1e-3


def test_tomogravity_fits_the_link_loads_and_beats_gravity() -> None:
    intent = validate_intent(clos_document(pods=4, tors=4, planes=2, spines=2, seed=5, demand="gravity"))
    plan = compile_plan(intent)
    rm = routing_matrix(intent, plan)
    truth = {(d.from_, d.to): d.gbps for d in intent.demands}
    x_true = np.array([truth.get(p, 0.0) for p in rm.pairs])
    y = link_loads(intent, plan)
    assert np.abs(rm.matrix @ x_true - y).max() < 1e-9 * max(1.0, y.max())  # A is the plan's propagation
    est = tomogravity(rm, y)
    assert (est.gbps >= 0).all()
    err, err_prior = (np.abs(v - x_true).sum() / x_true.sum() for v in (est.gbps, est.prior))
    assert est.residual < 1e-3 * y.sum() and err <= err_prior + 1e-9 and err < 0.3, (err, err_prior)


def test_the_matrix_free_routing_operator_is_the_routing_matrix() -> None:
    intent = validate_intent(clos_document(pods=4, tors=4, planes=2, spines=2, seed=5, demand="gravity", fanout=5))
    plan = compile_plan(intent)
    rm, ro = routing_matrix(intent, plan), routing_operator(intent, plan)
    assert rm.pairs == ro.pairs
    rng = np.random.default_rng(0)
    x, r = rng.random(len(rm.pairs)), rng.random(rm.topo.n_edges)
    assert np.allclose(rm.matrix @ x, ro.matrix @ x) and np.allclose(rm.matrix.T @ r, ro.matrix.T @ r)
    y = link_loads(intent, plan)
    assert np.allclose(tomogravity(rm, y).gbps, tomogravity(ro, y).gbps, atol=1e-4)


def test_a_routing_matrix_over_some_prefixes_is_the_full_ones_columns_for_them() -> None:
    intent = validate_intent(clos_document(pods=4, tors=4, planes=2, spines=2, seed=5, demand="gravity",
                                           hetero=0.3))
    plan = compile_plan(intent)
    tors = [d.name for d in intent.devices if d.role == "tor"]
    members, targets = tors[1:12:3], tors[0:16:5]
    prefixes = [p.prefix for p in intent.prefixes if set(p.origins) & set(targets)]
    full = routing_matrix(intent, plan, ingresses=members)
    part = routing_matrix(intent, plan, ingresses=members, prefixes=prefixes)
    want = [(s, p) for s, p in full.pairs if p in prefixes]
    assert want and sorted(part.pairs) == sorted(want)  # a member's own prefix has no pair from it
    at = {p: j for j, p in enumerate(full.pairs)}
    cols = [at[p] for p in part.pairs]
    assert (abs(part.matrix - full.matrix[:, cols]) > 0).nnz == 0  # the same numbers, not only close ones
    assert part.matrix.nnz > 0 and routing_matrix(intent, plan, prefixes=[]).matrix.shape[1] == 0
    # from the table link_loader compiled for the loads (every prefix has demand here), or where that table
    # lacks a prefix asked for (its demand is one pair), from one of its own: the same pairs and numbers
    one = next((d.from_, d.to) for d in intent.demands if d.to not in prefixes)
    full_table, one_pair = link_loader(intent)(plan), link_loader(with_demands(intent, {one: 1.0}))(plan)
    assert set(prefixes) <= set(full_table.table.prefixes) and one_pair.table.prefixes == [one[1]]
    for loaded in (full_table, one_pair):
        got = routing_matrix(intent, plan, ingresses=members, prefixes=prefixes, loaded=loaded)
        assert got.pairs == part.pairs and (abs(got.matrix - part.matrix) > 0).nnz == 0
    assert np.array_equal(full_table.load, link_loads(intent, plan))


def test_an_hour_long_window_sees_the_whole_hour_and_a_longer_one_is_refused() -> None:
    """Issue 31.2: an hour at 90 Gbps then 6 minutes at 9 Gbps; the 3600 s window's mean is 81.9 and its
    max 90 (with 36 rates kept it answered 9.0 for both); a window past what is kept is refused by name."""
    tel = Telemetry(Options(interval_s=10.0, max_rates=360))  # what the default LOOM_TELEMETRY_KEEP_S keeps
    gbps = 1e9 / 8
    v, points = 0, [(0.0, 0)]
    for k in range(1, 66 * 6 + 1):  # one sample every 10 s for 66 minutes
        v += int((90 if k <= 360 else 9) * gbps * 10)
        points.append((10.0 * k, v))
    for t, value in points:
        tel.store.ingest([Sample("d", P, value, int((T0 + t) * S))], now=T0 + t)
    now = T0 + points[-1][0]
    st = tel.store.stats([tel.store.rows[("d", P)]], now, 3600)
    assert st.mean[0] / gbps == pytest.approx(81.9, abs=1e-6) and st.max[0] / gbps == pytest.approx(90)
    assert tel.keep_s == 3600 and tel.window_problem(3600) is None
    why = tel.window_problem(3601)
    assert why is not None and "at most 3600 s" in why and "LOOM_TELEMETRY_KEEP_S" in why


@cache
def dual_stack_clos() -> tuple[Intent, Plan]:
    """A Clos on an unnumbered underlay with an IPv6 twin of every prefix and demand (the IPv6 demands at
    other rates, so a family mixed up would show)."""
    doc = clos_document(pods=2, tors=4, planes=2, spines=2, seed=3, demand="gravity")
    doc["defaults"] = {**doc.get("defaults", {}), "underlay": "unnumbered"}
    twins = {p["prefix"]: f"2001:db8:{k:x}::/64" for k, p in enumerate(doc["prefixes"])}
    doc["prefixes"] += [{**p, "prefix": twins[p["prefix"]]} for p in list(doc["prefixes"])]
    doc["demands"] += [{**d, "to": twins[d["to"]], "gbps": d["gbps"] / 3} for d in list(doc["demands"])]
    intent = validate_intent(doc)
    return intent, compile_plan(intent)


def test_the_demand_view_and_fidelity_count_ipv6_aft_entries() -> None:
    intent, plan = dual_stack_clos()
    fabric = Fabric(intent, plan)
    assert any("/ipv6-unicast/ipv6-entry[prefix=2001:db8:" in p for _d, p in fabric.keys)
    tel = Telemetry()
    run(fabric, tel, range(0, 70, 10))
    view = tel.demand(intent, plan, fabric.t0 + 65, 60)
    truth = fabric.truth()
    assert view.method == "aft" and set(view.demands) == set(truth)
    assert any(":" in p for _d, p in truth)
    for k, g in truth.items():
        assert view.demands[k] == pytest.approx(g, rel=1e-5)
    keys, rates, _step = tel.demand_series(intent, fabric.t0 + 65, 60)
    assert {p for _d, p in keys} == {p.prefix for p in intent.prefixes}
    fid = tel.fidelity(intent, plan, fabric.t0 + 65, 60)
    assert fid.worst is not None and fid.worst < 1e-4 and fid.method == "aft"
