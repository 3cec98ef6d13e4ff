"""Safety replay: scenario names, incremental replay against full propagation of the
failed plan, the withdrawal model against the solver's routing on failed topologies,
the independent checker on failed-topology plans, and hand-made unsafe fabrics."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from controller.model import Intent
from controller.model.intent import validate_intent
from controller.model.plan import DevicePlan, NextHop, Plan, PlanSummary
from safety import kernels
from safety.forwarding import build_topology, plan_table, propagate
from safety.replay import Replayer, replay
from safety.scenarios import Scenario, count_scenarios, scenarios
from solver.core.routing import next_hops


def clos_doc(pods: int, tors: int, planes: int, spines: int, *, ls_cap: float = 100.0, tl_cap: float = 100.0,
             demands: list[dict[str, Any]] | None = None, domains: list[dict[str, Any]] | None = None,
             policies: list[dict[str, Any]] | None = None, missing: tuple[str, ...] = ()) -> dict[str, Any]:
    """A small RFC 7938 Clos: tor-P-T, leaf-P-L (one per plane and pod), spine-L-S."""
    devices: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    prefixes = []
    for p in range(pods):
        for t in range(tors):
            devices.append({"name": f"tor-{p}-{t}", "role": "tor", "pod": p, "asn": 65200 + p * tors + t})
            prefixes.append({"prefix": f"10.{p}.{t}.0/24", "origins": [f"tor-{p}-{t}"]})
        for lp in range(planes):
            devices.append({"name": f"leaf-{p}-{lp}", "role": "leaf", "pod": p, "plane": lp, "asn": 65100 + p})
    for lp in range(planes):
        for s in range(spines):
            devices.append({"name": f"spine-{lp}-{s}", "role": "spine", "plane": lp, "asn": 65000 + lp})
    for p in range(pods):
        for t in range(tors):
            for lp in range(planes):
                links.append({"a": f"tor-{p}-{t}", "a_port": f"eth{lp + 1}", "b": f"leaf-{p}-{lp}",
                              "b_port": f"eth{t + 1}", "capacity_gbps": tl_cap})
        for lp in range(planes):
            for s in range(spines):
                a = f"leaf-{p}-{lp}:eth{tors + s + 1}"
                if a in missing:
                    continue
                links.append({"a": f"leaf-{p}-{lp}", "a_port": f"eth{tors + s + 1}", "b": f"spine-{lp}-{s}",
                              "b_port": f"eth{p + 1}", "capacity_gbps": ls_cap})
    if demands is None:
        demands = [{"from": f"tor-{p}-{t}", "to": f"10.{q}.{u}.0/24", "gbps": 10.0}
                   for p in range(pods) for t in range(tors) for q in range(pods) for u in range(tors)
                   if (p, t) != (q, u)]
    return {"name": "t", "routing": "bgp", "devices": devices, "links": links, "prefixes": prefixes,
            "failure_domains": domains or [], "policies": policies or [], "demands": demands}


def routed_plan(intent: Intent, weight: Any = None, seed: int = 0, routes: Any = None) -> Plan:
    """A plan on the routing's next hops (or ``routes``); weights from ``weight(device, prefix, hop)``
    or random 1..5."""
    rng = random.Random(seed)
    devices: dict[str, tuple[dict[tuple[Any, ...], str], dict[str, str]]] = {}
    for prefix, per in sorted((routes if routes is not None else next_hops(intent)).items()):
        for dev, hops in sorted(per.items()):
            ws = tuple(weight(dev, prefix, h) if weight else rng.randint(1, 5) for h in hops)
            groups, routes = devices.setdefault(dev, ({}, {}))
            key = tuple(zip(hops, ws, strict=True))
            routes[prefix] = groups.setdefault(key, f"g{len(groups) + 1}")
    out = {d: DevicePlan({gid: tuple(NextHop(p, nb, w) for (p, nb), w in key) for key, gid in groups.items()},
                         routes) for d, (groups, routes) in devices.items()}
    return Plan(intent.name, PlanSummary(0, 0, 0, 0, 0, 0), out, ())


def failed_plan(plan: Plan, intent: Intent, sc: Scenario,
                keep: dict[str, dict[str, tuple[tuple[str, str], ...]]] | None = None) -> Plan:
    """The plan as the fabric runs it under ``sc``: dead next hops removed (the ratio of
    the survivors' integer weights is the renormalized split), routes left empty removed;
    with ``keep`` (prefix -> device -> next hops) only those next hops stay."""
    dead_dev = set(sc.devices)
    dead_ends: set[str] = set()
    for link in intent.links:
        if link.key in sc.links or link.a in dead_dev or link.b in dead_dev:
            dead_ends |= {link.end_a, link.end_b}
    devices = {}
    for name, dp in plan.devices.items():
        if name in dead_dev:
            continue
        groups: dict[str, tuple[NextHop, ...]] = {}
        routes: dict[str, str] = {}
        for prefix, gid in dp.routes.items():
            hops = tuple(h for h in dp.groups[gid] if f"{name}:{h.port}" not in dead_ends)
            if keep is not None:
                allowed = set(keep.get(prefix, {}).get(name, ()))
                hops = tuple(h for h in hops if (h.port, h.neighbor) in allowed)
            if hops:
                gkey = f"{gid}:{'/'.join(h.port for h in hops)}"
                groups[gkey] = hops
                routes[prefix] = gkey
        devices[name] = DevicePlan(groups, routes)
    return Plan(plan.fabric, plan.summary, devices, ())


def surviving_intent(intent: Intent, sc: Scenario) -> Intent:
    """The intent without demands from failed devices or to prefixes whose origins all failed."""
    doc = intent.to_document()
    gone = {p.prefix for p in intent.prefixes if set(p.origins) <= set(sc.devices)}
    doc["demands"] = [d for d in doc["demands"] if d["from"] not in sc.devices and d["to"] not in gone]
    return validate_intent(doc)


def full_loads(intent: Intent, plan: Plan) -> tuple[np.ndarray, float]:
    topo = build_topology(intent)
    flow = propagate(plan_table(intent, plan, topo), topo)
    return flow.load, sum(flow.drops().values())


def domains_fabric(max_utilization: float = 1.0) -> Intent:
    """Three pods with a missing leaf-spine link, a power domain and an optics domain, uneven demands."""
    doc = clos_doc(3, 2, 2, 2, missing=("leaf-1-0:eth4",),
                   domains=[{"name": "plane-1-power", "kind": "power", "devices": ["spine-1-0", "spine-1-1"]},
                            {"name": "optics", "links": ["leaf-2-1:eth3", "tor-0-0:eth1"]}],
                   policies=[{"kind": "failure_tolerance", "scope": "all_single",
                              "max_utilization": max_utilization}])
    doc["demands"] = [dict(d, gbps=float(1 + (i * 7) % 13)) for i, d in enumerate(doc["demands"])]
    return validate_intent(doc)


@pytest.fixture(scope="module")
def fabric() -> Intent:
    return domains_fabric()


def test_scenario_names_and_counts(fabric: Intent) -> None:
    names = [s.name for s in scenarios(fabric)]
    assert names[0] == "baseline"
    assert names[1:3] == ["plane-1-power", "optics"]
    assert "link:leaf-0-0:eth1" in names and "device:spine-0-1" in names
    assert len(names) == 1 + 2 + len(fabric.links) + len(fabric.devices) == count_scenarios(fabric)["total"]
    optics = next(s for s in scenarios(fabric) if s.name == "optics")
    assert optics.links == {"leaf-2-1:eth3", "leaf-0-0:eth1"}  # an end names its whole link, by its key
    k2 = list(scenarios(fabric, "k2"))
    assert [s.name for s in k2 if s.kind == "domain_pair"] == ["plane-1-power+optics"]
    assert count_scenarios(fabric, "k2")["domain_pair"] == 1


def test_incremental_replay_matches_full_propagation_of_the_failed_plan(fabric: Intent) -> None:
    plan = routed_plan(fabric, seed=3)
    rp = Replayer(fabric, plan)
    assert rp.model == "withdrawal"
    for sc in scenarios(fabric):
        imm, rec = rp.outcomes(sc)
        ref_intent = surviving_intent(fabric, sc)
        load, dropped = full_loads(ref_intent, failed_plan(plan, fabric, sc))
        assert np.allclose(imm.load, load, rtol=0, atol=1e-9), sc.name
        assert abs(sum(imm.drops.values()) - dropped) < 1e-9, sc.name
        routes = next_hops(fabric, failed_devices=sc.devices, failed_links=sc.links)
        load, dropped = full_loads(ref_intent, failed_plan(plan, fabric, sc, keep=routes))
        assert np.allclose(rec.load, load, rtol=0, atol=1e-9), sc.name
        assert abs(sum(rec.drops.values()) - dropped) < 1e-9, sc.name


def test_withdrawal_model_agrees_with_rerouting(fabric: Intent) -> None:
    plan = routed_plan(fabric, seed=5)
    fast = Replayer(fabric, plan)
    slow = Replayer(fabric, plan, model="routing")
    for sc in scenarios(fabric):
        a, b = fast.outcomes(sc)[1], slow.outcomes(sc)[1]
        assert np.allclose(a.load, b.load, rtol=0, atol=1e-9), sc.name
        assert a.drops.keys() == b.drops.keys(), sc.name


def test_replay_agrees_with_the_independent_checker(fabric: Intent) -> None:
    """On a sample of scenarios, the plan as the fabric runs it (dead next hops dropped,
    survivors' weights as they are; after reconvergence only the routing's next hops)
    propagated by tests/checker.py gives the replay's link loads to 1e-9."""
    from checker import check_plan

    plan = routed_plan(fabric, seed=11)
    rp = Replayer(fabric, plan)
    sample = [s for i, s in enumerate(scenarios(fabric)) if i % 3 == 0]
    assert len(sample) > 10
    for sc in sample:
        imm, rec = rp.outcomes(sc)
        ref_intent = surviving_intent(fabric, sc)
        routes = next_hops(fabric, failed_devices=sc.devices, failed_links=sc.links)
        for out, fp in ((imm, failed_plan(plan, fabric, sc)), (rec, failed_plan(plan, fabric, sc, keep=routes))):
            loads = check_plan(ref_intent, fp).loads
            for i, link in enumerate(fabric.links):
                assert abs(out.load[2 * i] - loads[(link.end_a, "ab")]) < 1e-9, (sc.name, link.key)
                assert abs(out.load[2 * i + 1] - loads[(link.end_a, "ba")]) < 1e-9, (sc.name, link.key)


def test_draining_a_spine_pushes_a_link_over_the_limit() -> None:
    demands = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 150.0}]
    drain: list[dict[str, Any]] = [{"kind": "drain", "target": "spine-0-1"}, {"kind": "utilization_limit", "max": 0.8}]
    tight = validate_intent(clos_doc(2, 1, 1, 2, tl_cap=400, demands=demands, policies=drain))
    rep = replay(tight, routed_plan(tight))
    assert rep.verdict == "unsafe"
    assert {(f.scenario, f.stage, f.invariant) for f in rep.failing} == {
        ("baseline", "immediate", "utilization"), ("baseline", "reconverged", "utilization")}
    hot = rep.scenario("baseline").immediate.hottest[0]
    assert hot.utilization == pytest.approx(1.5) and "spine-0-0" in (hot.src, hot.dst)
    roomy = validate_intent(clos_doc(2, 1, 1, 2, tl_cap=400, ls_cap=200, demands=demands, policies=drain))
    assert replay(roomy, routed_plan(roomy)).verdict == "safe"


def test_losing_a_power_domain_black_holes_a_prefix() -> None:
    demands = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 10.0},
               {"from": "tor-1-0", "to": "10.0.0.0/24", "gbps": 10.0}]
    domains = [{"name": "pod-1-power", "kind": "power", "devices": ["leaf-1-0"]}]
    single = validate_intent(clos_doc(2, 1, 1, 2, demands=demands, domains=domains))
    rep = replay(single, routed_plan(single))
    assert {(f.scenario, f.stage, f.invariant) for f in rep.failing} == {("pod-1-power", "reconverged", "delivery")}
    rec = rep.scenario("pod-1-power").reconverged
    # tor-0-0 loses its route to 10.1.0.0/24 and drops at the source; tor-1-0's own demand
    # is lost too, though it only lost its uplink: both are surviving devices
    assert {(d.prefix, d.device) for d in rec.dropped} == {("10.1.0.0/24", "tor-0-0"), ("10.0.0.0/24", "tor-1-0")}
    assert rep.scenario("pod-1-power").immediate.dropped  # reported, not gating
    dual = validate_intent(clos_doc(2, 1, 2, 2, demands=demands, domains=domains))
    rep = replay(dual, routed_plan(dual))
    assert rep.verdict == "safe", rep.failing


def test_failed_devices_demands_are_not_counted() -> None:
    demands = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 10.0},
               {"from": "tor-1-0", "to": "10.0.0.0/24", "gbps": 10.0}]
    domains = [{"name": "rack-1", "devices": ["tor-1-0"]}]
    it = validate_intent(clos_doc(2, 1, 1, 2, demands=demands, domains=domains))
    rep = replay(it, routed_plan(it))
    assert rep.verdict == "safe", rep.failing
    assert rep.scenario("rack-1").reconverged.max_utilization == 0.0


def test_loops_in_a_plan_are_found() -> None:
    it = validate_intent(clos_doc(2, 1, 1, 2, demands=[{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 5.0}]))
    plan = routed_plan(it)
    leaf = plan.devices["leaf-1-0"]
    # leaf-1-0 sends 10.1.0.0/24 back up to spine-0-0, which sends it down to leaf-1-0
    bad = DevicePlan({**leaf.groups, "up": (NextHop("eth2", "spine-0-0", 1),)}, {**leaf.routes, "10.1.0.0/24": "up"})
    plan = Plan(plan.fabric, plan.summary, {**plan.devices, "leaf-1-0": bad}, ())
    rep = replay(it, plan)
    loop = rep.scenario("baseline").immediate.invariant("loop")
    assert loop is not None and not loop.ok and "10.1.0.0/24" in loop.detail


def test_a_push_steps_through_one_way_states_only_without_cycles(fabric: Intent) -> None:
    """A state with a single next hop is stepped through (its traffic goes on whole) only when
    no cycle exists among the transitions: a loop's report names every state it passes."""
    assert kernels.acyclic(np.array([0, 1, 2, 2]), np.array([1, 2]))
    assert not kernels.acyclic(np.array([0, 1, 2, 3]), np.array([1, 2, 0]))
    rp = Replayer(fabric, routed_plan(fabric, seed=3))
    one = rp._fab[-1]
    f = rp.flow
    single = np.flatnonzero(np.diff(f.t_indptr) == 1)
    assert len(single) and (one[single] == rp._hop[f.t_indptr[single]]).all()
    assert (one[np.diff(f.t_indptr) != 1] == -1).all()
    it = validate_intent(clos_doc(2, 1, 1, 2, demands=[{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 5.0}]))
    plan = routed_plan(it)
    leaf = plan.devices["leaf-1-0"]
    bad = DevicePlan({**leaf.groups, "up": (NextHop("eth2", "spine-0-0", 1),)}, {**leaf.routes, "10.1.0.0/24": "up"})
    looping = Replayer(it, Plan(plan.fabric, plan.summary, {**plan.devices, "leaf-1-0": bad}, ()))
    assert (looping._fab[-1] == -1).all()
    res = looping.run(next(s for s in scenarios(it, "all_single") if s.name == "link:leaf-0-0:eth3"))
    assert not res.reconverged.invariant("loop").ok  # type: ignore[union-attr]


@pytest.mark.parametrize("routing", ["isis", "ospf"])
def test_link_state_reconvergence_follows_new_shortest_paths(routing: str) -> None:
    """routing: isis (and ospf, the same): losing r1-r2 makes r1 route over r4 and r3, a path it did not use
    (plain ECMP: the protocol's own routes; under ``fib`` they would be static, see test_transition.py)."""
    from checker import check_plan

    ring = [("r1", "r2", 10), ("r2", "r3", 10), ("r3", "r4", 10), ("r4", "r1", 10), ("r1", "r3", 30)]
    doc = {"name": "ring", "routing": routing,
           "devices": [{"name": f"r{i}"} for i in range(1, 5)],
           "links": [{"a": a, "a_port": f"to-{b}", "b": b, "b_port": f"to-{a}", "metric": m, "capacity_gbps": 100}
                     for a, b, m in ring],
           "prefixes": [{"prefix": "10.0.2.0/24", "origins": ["r2"]}],
           "demands": [{"from": "r1", "to": "10.0.2.0/24", "gbps": 30}, {"from": "r3", "to": "10.0.2.0/24", "gbps": 20},
                       {"from": "r4", "to": "10.0.2.0/24", "gbps": 10}],
           "policies": [{"kind": "failure_tolerance", "scope": "all_single"}, {"kind": "wcmp", "enabled": False}]}
    intent = validate_intent(doc)
    plan = routed_plan(intent, weight=lambda *_: 1)
    report = replay(intent, plan)
    assert report.model == "routing"
    sc = report.scenario("link:r1:to-r2")
    assert sc.immediate.dropped and sc.immediate.dropped[0].device == "r1"  # local repair has nothing left
    assert sc.reconverged.ok and not sc.reconverged.dropped
    rp = Replayer(intent, plan)
    for scenario in scenarios(intent):
        rec = rp.outcomes(scenario)[1]
        routes = next_hops(intent, failed_devices=scenario.devices, failed_links=scenario.links)
        loads = check_plan(surviving_intent(intent, scenario),
                           routed_plan(intent, weight=lambda *_: 1, routes=routes)).loads
        for i, link in enumerate(intent.links):
            assert abs(rec.load[2 * i] - loads[(link.end_a, "ab")]) < 1e-9, (scenario.name, link.key)
            assert abs(rec.load[2 * i + 1] - loads[(link.end_a, "ba")]) < 1e-9, (scenario.name, link.key)


def test_a_single_failure_equal_to_a_domain_replays_as_the_domain(fabric: Intent) -> None:
    """A device whose failure is exactly a declared domain's gets the domain's stage results,
    and they are what a replayer that never saw the domain computes."""
    doc = fabric.to_document()
    doc["failure_domains"] = [*doc["failure_domains"], {"name": "spine-0-1", "devices": ["spine-0-1"]},
                              {"name": "leaf-0-1", "devices": ["leaf-0-1"]}]
    intent = validate_intent(doc)
    plan = routed_plan(intent, seed=7)
    rep = replay(intent, plan)
    fresh = Replayer(intent, plan)
    for dev in ("spine-0-1", "leaf-0-1"):
        single, domain = rep.scenario(f"device:{dev}"), rep.scenario(dev)
        assert (single.kind, domain.kind) == ("device", "domain")
        alone = fresh.run(Scenario(f"device:{dev}", "device", frozenset({dev})))
        assert single.immediate == domain.immediate == alone.immediate
        assert single.reconverged == domain.reconverged == alone.reconverged
    assert rep.scenario("device:leaf-0-1").reconverged != rep.scenario("device:leaf-0-0").reconverged


def test_hottest_links_break_ties_by_link_order() -> None:
    """The hottest links of a stage, read from its changed edges and the baseline's order, are a
    stable sort's first k of the whole load (ties by edge index), ties and unchanged edges included."""
    from safety import kernels

    rng = np.random.default_rng(3)
    for size in (1, 3, 5, 40, 400):
        for _ in range(20):
            cap = rng.choice([10.0, 40.0], size)
            base = rng.integers(0, 6, size) * cap / 8  # many exact ties
            order = np.argsort(-base / cap, kind="stable")
            changed = rng.choice(size, rng.integers(0, size + 1), replace=False)
            load = base.copy()
            load[changed] = rng.integers(0, 6, len(changed)) * cap[changed] / 8
            mark = np.zeros(size, dtype=bool)
            got, loads = kernels.hottest(base, cap, changed.astype(np.int64), load[changed], order, 3, mark)
            assert got.tolist() == np.argsort(-load / cap, kind="stable")[:3].tolist()
            assert loads.tolist() == load[got].tolist()
            assert not mark.any()
