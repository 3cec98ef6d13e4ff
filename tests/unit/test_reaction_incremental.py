"""A failure reaction's plan made from the full plan (solver.clos.react via controller.planning.compile_reaction).

Each leaf-spine link of a small Clos fails in turn: the reaction plan made from the
full plan must send nothing over the failed link (replayed by safety's propagation,
not read off the plan's own figures), deliver every demand, use exactly the next hops
BGP leaves on the degraded fabric (those of the cold compile of the drained intent),
report the loads the replay finds, and end within a small tolerance of the cold plan's
utilization (it is made so only within 1 % of the full plan's LP optimum). Failures it
does not handle (a ToR link, a device, a plan this process did not compile, a failure
whose load the touched pod pairs cannot take within that tolerance) go to the full compile.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from controller.model.plan import Plan
from controller.operations.overlay import Overlay, overlay_intent
from controller.operations.precompute import REACTION, reaction_of
from controller.planning import compile_plan, compile_reaction
from safety.forwarding import build_topology, plan_table, propagate
from solver.core.options import ReactOptions

#: the reaction's utilization may end this much (relative) above the cold plan of the degraded fabric
TOLERANCE = ReactOptions().within


@pytest.fixture(scope="module")
def fabric() -> tuple[Intent, Plan]:
    intent = validate_intent(clos_document(pods=4, tors=2, planes=2, spines=4, seed=1))
    return intent, compile_plan(intent)


def _spine_links(intent: Intent) -> list[str]:
    return [ln.key for ln in intent.links if {d.split("-")[0] for d in (ln.a, ln.b)} == {"leaf", "spine"}]


def _react(intent: Intent, plan: Plan, links: frozenset[str] = frozenset(), devices: frozenset[str] = frozenset()
           ) -> tuple[Intent, Plan]:
    reduced = overlay_intent(intent, Overlay(links, devices))
    return reduced, compile_reaction(intent, plan, reduced, links, devices, REACTION)


def _next_hops(plan: Plan) -> dict[tuple[str, str], frozenset[str]]:
    return {(name, p): frozenset(h.port for h in dp.nexthops(p)) for name, dp in plan.devices.items()
            for p in dp.routes}


def test_every_leaf_spine_failure_is_routed_around(fabric: tuple[Intent, Plan]) -> None:
    intent, plan = fabric
    links = _spine_links(intent)
    fast = 0
    for lid in links:
        reduced, made = _react(intent, plan, frozenset({lid}))
        fast += made.summary.extra["lp_model"] == "clos-reaction"  # made from the full plan, not compiled
        link = intent.link_by_end[lid]
        for name, port in ((link.a, link.a_port), (link.b, link.b_port)):
            assert all(h.port != port for g in made.devices[name].groups.values() for h in g), (lid, name)
        topo = build_topology(reduced)
        flow = propagate(plan_table(reduced, made, topo), topo)
        i = topo.link_index[lid]
        assert flow.load[2 * i] == 0.0 and flow.load[2 * i + 1] == 0.0, lid  # replayed: nothing on the failed link
        assert not flow.drops() and not flow.loops, lid  # every demand delivered
        own = np.array([[x.gbps_ab, x.gbps_ba] for x in made.links]).ravel()
        assert np.allclose(own, flow.load, atol=1e-6), lid  # the plan's loads are the replay's
        cold = compile_plan(reduced)
        assert _next_hops(made) == _next_hops(cold), lid  # the routes BGP leaves on the degraded fabric
        assert made.summary.max_utilization <= cold.summary.max_utilization * (1 + TOLERANCE), lid
        assert made.summary.max_utilization >= made.summary.lp_bound - 1e-9
    assert fast >= len(links) // 2, (fast, len(links))


def test_the_full_plan_is_not_touched(fabric: tuple[Intent, Plan]) -> None:
    intent, plan = fabric
    before = plan.to_document()
    _react(intent, plan, frozenset({_spine_links(intent)[0]}))
    assert plan.to_document() == before


def test_two_failed_links_of_one_leaf(fabric: tuple[Intent, Plan]) -> None:
    intent, plan = fabric
    leaf = intent.link_by_end[_spine_links(intent)[0]].a
    two = frozenset([lid for lid in _spine_links(intent) if intent.link_by_end[lid].a == leaf][:2])
    reduced, made = _react(intent, plan, two)
    assert made.summary.extra["lp_model"] == "clos-reaction"
    topo = build_topology(reduced)
    flow = propagate(plan_table(reduced, made, topo), topo)
    for lid in two:
        i = topo.link_index[lid]
        assert flow.load[2 * i] == flow.load[2 * i + 1] == 0.0
    assert not flow.drops() and not flow.loops
    assert _next_hops(made) == _next_hops(compile_plan(reduced))


@pytest.mark.parametrize("what", ["tor link", "device", "all spines of a leaf", "plan from elsewhere",
                                  "over the tolerance"])
def test_what_it_does_not_handle_is_compiled(fabric: tuple[Intent, Plan], what: str) -> None:
    intent, plan = fabric
    links: frozenset[str] = frozenset()
    devices: frozenset[str] = frozenset()
    if what == "tor link":
        links = frozenset({next(ln.key for ln in intent.links if ln.a.startswith("tor") or ln.b.startswith("tor"))})
    elif what == "device":
        devices = frozenset({next(d.name for d in intent.devices if d.name.startswith("spine"))})
    elif what == "all spines of a leaf":
        leaf = intent.link_by_end[_spine_links(intent)[0]].a
        links = frozenset(lid for lid in _spine_links(intent) if leaf in (intent.link_by_end[lid].a,
                                                                            intent.link_by_end[lid].b))
    elif what == "over the tolerance":  # three pods: the pair of the two others would have to move too
        intent = validate_intent(clos_document(pods=3, tors=3, planes=2, spines=3, seed=4))
        plan = compile_plan(intent)
        links = frozenset({_spine_links(intent)[0]})
    else:
        links = frozenset({_spine_links(intent)[0]})
        plan = replace(plan)  # the same plan, but not the object this process compiled
    reduced, made = _react(intent, plan, links, devices)
    assert made.summary.extra["lp_model"] != "clos-reaction"
    topo = build_topology(reduced)
    flow = propagate(plan_table(reduced, made, topo), topo)
    for lid in links:
        i = topo.link_index[lid]
        assert flow.load[2 * i] == flow.load[2 * i + 1] == 0.0


def test_the_reaction_table_entry_is_judged_safe(fabric: tuple[Intent, Plan]) -> None:
    intent, plan = fabric
    got = reaction_of(intent, plan, Overlay(frozenset({_spine_links(intent)[1]})))
    assert got.plan.summary.extra["lp_model"] == "clos-reaction"
    assert got.judgement is not None and got.judgement.verdict == "safe"


def test_what_a_plan_was_made_of_goes_with_it() -> None:
    from solver.clos.react import KEPT

    intent = validate_intent(clos_document(pods=2, tors=2, planes=2, spines=2, seed=2))
    before = len(KEPT)
    plan = compile_plan(intent)
    assert KEPT.get(intent, plan) is not None and len(KEPT) == before + 1
    assert KEPT.get(validate_intent(intent.to_document()), plan) is None  # another intent object: not this plan's
    del plan
    assert len(KEPT) == before
