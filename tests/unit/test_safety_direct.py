"""One scenario replayed without a replayer (:mod:`safety.direct`), against :class:`safety.replay.Replayer`.

Plans made around a failure (the next hops BGP leaves on the failed topology, random weights) are pushed
directly and must give the replayer's result to the rounding of the report, in both stages, for every
single failure of a fabric with failure domains and a missing link; so must plans that loop or black-hole
traffic away from the failure. Plans whose traffic crosses the failed parts, and link-state fabrics, go to
the replayer. The compiled push gives :func:`safety.forwarding.propagate`'s loads and black holes, and a
table compiled from a neighbouring plan (``plan_table(like=...)``) routes every class as one compiled
from scratch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import safety.direct
from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from controller.model.plan import DevicePlan, NextHop, Plan
from controller.operations.overlay import Overlay, overlay_intent
from controller.operations.precompute import REACTION
from controller.planning import compile_plan, compile_reaction
from safety.direct import _push, replay_scenario
from safety.forwarding import Table, build_topology, plan_table, propagate
from safety.replay import Replayer
from safety.scenarios import Scenario, scenarios
from solver.core.routing import next_hops
from tests.unit.test_safety_replay import clos_doc, domains_fabric, routed_plan


@pytest.fixture(scope="module")
def fabric() -> Intent:
    return domains_fabric(max_utilization=0.5)  # some plans made around a failure run a link over it


class Built:
    """Counts the replayers :func:`replay_scenario` falls back to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        real = safety.direct.Replayer

        def counted(*args: Any, **kwargs: Any) -> Replayer:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(safety.direct, "Replayer", counted)


def _same(intent: Intent, plan: Plan, sc: Scenario) -> None:
    """The same report, but for which of two links of equal load (to the last bits of a float, which a
    difference push and a direct one sum in other orders) is named among the hottest: those named carry
    the load the replayer finds on them."""
    got = replay_scenario(intent, plan, sc)
    rp = Replayer(intent, plan)
    want = rp.run(sc)
    g, w = got.to_document(), want.to_document()
    for stage, out in zip(("immediate", "reconverged"), rp.outcomes(sc), strict=True):
        hot_g, hot_w = g[stage].pop("hottest"), w[stage].pop("hottest")
        assert [h["gbps"] for h in hot_g] == [h["gbps"] for h in hot_w], sc.name
        topo = rp.topo
        load = {(topo.names[a], topo.names[b]): x for a, b, x in zip(topo.edge_src.tolist(), topo.edge_dst.tolist(),
                                                                     out.load.tolist(), strict=True)}
        assert all(load[(h["from"], h["to"])] == pytest.approx(h["gbps"], abs=1e-6) for h in hot_g), sc.name
    assert g == w, sc.name


def test_a_plan_made_around_each_failure_is_pushed_directly_and_replays_as_the_replayer_does(
        fabric: Intent, monkeypatch: pytest.MonkeyPatch) -> None:
    built = Built(monkeypatch)
    failures = [sc for sc in scenarios(fabric, "all_single") if not sc.is_baseline]
    assert len(failures) > 30
    gated = 0
    for i, sc in enumerate(failures):
        around = routed_plan(fabric, seed=i, routes=next_hops(fabric, failed_devices=sc.devices,
                                                              failed_links=sc.links))
        _same(fabric, around, sc)
        gated += not replay_scenario(fabric, around, sc).ok
    assert built.count == 0
    assert gated  # some of them run links over the 0.5 limit: the verdicts compared are not all "ok"


def test_a_plan_whose_traffic_crosses_the_failure_goes_to_the_replayer(
        fabric: Intent, monkeypatch: pytest.MonkeyPatch) -> None:
    built = Built(monkeypatch)
    plan = routed_plan(fabric, seed=5)
    failures = [sc for sc in scenarios(fabric, "all_single") if not sc.is_baseline]
    for sc in failures:
        _same(fabric, plan, sc)
    # every failure but a ToR's, whose traffic (its rack's, to and from it) the replay does not count
    racks = [sc for sc in failures if sc.kind == "device" and next(iter(sc.devices)).startswith("tor-")]
    assert racks and built.count == len(failures) - len(racks)


def test_loops_and_black_holes_away_from_the_failure_are_reported_as_the_replayer_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built = Built(monkeypatch)
    demands = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 5.0}, {"from": "tor-1-0", "to": "10.0.0.0/24",
                                                                       "gbps": 3.0}]
    it = validate_intent(clos_doc(2, 2, 1, 2, demands=demands))
    plan = routed_plan(it)
    leaf = plan.devices["leaf-1-0"]
    # leaf-1-0 sends 10.1.0.0/24 back up to spine-0-0 (a loop) and has no route to 10.0.0.0/24 (a black hole)
    bad = DevicePlan({**leaf.groups, "up": (NextHop("eth3", "spine-0-0", 1),)},
                     {p: g for p, g in {**leaf.routes, "10.1.0.0/24": "up"}.items() if p != "10.0.0.0/24"})
    plan = Plan(plan.fabric, plan.summary, {**plan.devices, "leaf-1-0": bad}, ())
    rp = Replayer(it, plan)
    base = rp.run(Scenario("baseline", "baseline"))
    assert base.reconverged.loops and base.reconverged.dropped
    crossing = next(sc for sc in scenarios(it, "all_single") if sc.name == "link:leaf-0-0:eth3")
    away = next(sc for sc in scenarios(it, "all_single") if sc.name == "device:tor-0-1")  # it carries nothing
    _same(it, plan, crossing)
    assert built.count == 1
    got = replay_scenario(it, plan, away)
    assert built.count == 1
    for stage in (got.immediate, got.reconverged):
        assert stage.loops == base.reconverged.loops and stage.dropped == base.reconverged.dropped
        assert stage.looped_gbps == base.reconverged.looped_gbps == 5.0
    _same(it, plan, away)  # the replayer keeps the plan's own loop where the failure leaves it as it is


@pytest.mark.parametrize("routing", ["isis"])
def test_a_link_state_fabric_always_goes_to_the_replayer(routing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    built = Built(monkeypatch)
    doc = clos_doc(2, 2, 2, 2)
    doc["routing"] = routing
    doc["policies"] = [{"kind": "wcmp", "enabled": False}]  # ECMP: the protocol's own routes reconverge
    it = validate_intent(doc)
    sc = next(sc for sc in scenarios(it, "all_single") if sc.kind == "link")
    around = routed_plan(it, routes=next_hops(it, failed_devices=sc.devices, failed_links=sc.links))
    _same(it, around, sc)
    assert built.count == 1


def test_fib_plans_are_pushed_directly_when_the_kernel_would_repair_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    built = Built(monkeypatch)
    doc = clos_doc(2, 2, 2, 2)
    doc["policies"] = [{"kind": "wcmp", "enabled": True, "realization": "fib"}]
    it = validate_intent(doc)
    sc = next(sc for sc in scenarios(it, "all_single") if sc.kind == "device")
    around = routed_plan(it, seed=2, routes=next_hops(it, failed_devices=sc.devices, failed_links=sc.links))
    _same(it, around, sc)
    assert built.count == 0


def test_the_compiled_push_gives_the_propagated_loads_and_black_holes(fabric: Intent) -> None:
    topo = build_topology(fabric)
    for seed in range(4):
        plan = routed_plan(fabric, seed=seed)
        gaps = {name: DevicePlan(dp.groups, dict(list(dp.routes.items())[seed:])) for name, dp in plan.devices.items()}
        for p in (plan, Plan(plan.fabric, plan.summary, gaps, ())):
            table = plan_table(fabric, p, topo)
            flow = propagate(table, topo)
            load, drops, loops = _push(table, topo)
            assert np.allclose(load, flow.load, rtol=1e-12, atol=1e-9)
            want = flow.drops()
            assert drops.keys() == want.keys() and all(drops[k] == pytest.approx(want[k]) for k in want)
            assert loops == flow.loops


def _routing(table: Table) -> dict[tuple[int, int], tuple[tuple[int, float], ...]]:
    out = {}
    for c, u in zip(*np.nonzero(table.route >= 0), strict=True):
        g = int(table.route[c, u])
        lo, hi = table.g_indptr[g], table.g_indptr[g + 1]
        out[(int(c), int(u))] = tuple(sorted(zip(table.g_edge[lo:hi].tolist(), table.g_frac[lo:hi].tolist(),
                                                 strict=True)))
    return out


def test_a_table_compiled_from_the_plan_in_force_routes_as_one_compiled_from_scratch() -> None:
    intent = validate_intent(clos_document(pods=4, tors=2, planes=2, spines=4, seed=1))
    plan = compile_plan(intent)
    topo = build_topology(intent)
    full = plan_table(intent, plan, topo)
    link = next(ln for ln in intent.links if ln.a.startswith("leaf") and ln.b.startswith("spine"))
    failed = Overlay(frozenset({link.key}))
    reduced = overlay_intent(intent, failed)
    reaction = compile_reaction(intent, plan, reduced, failed.links, failed.devices, REACTION)
    shared = sum(reaction.devices[n] is plan.devices.get(n) for n in reaction.devices)
    assert 0 < shared < len(reaction.devices)  # the case this is for: some devices changed, some did not
    fresh = plan_table(reduced, reaction, topo)
    made = plan_table(reduced, reaction, topo, like=(plan, full))
    assert _routing(made) == _routing(fresh)
    assert made.budget_errors == fresh.budget_errors
    for a, b in ((made.demand_class, fresh.demand_class), (made.demand_gbps, fresh.demand_gbps)):
        assert np.array_equal(a, b)
    sc = Scenario("failure", "reaction", links=failed.links)
    assert replay_scenario(reduced, reaction, sc, topo=topo, like=(plan, full)).to_document() == \
        replay_scenario(reduced, reaction, sc).to_document()
    _same(reduced, reaction, sc)
