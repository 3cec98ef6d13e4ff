"""The spine-transport relaxation of the Clos LP (solver.clos.relax) and its recovery by IPF.

The relaxation's optimum must be a lower bound on the pod model's (it drops
constraints), the routing recovered from it must deliver every demand exactly
with every least share, and on generated fabrics it must reach the pod model's
optimum (solved exactly by the simplex). When the recovery misses, the plan
falls back to the full model, and the independent checker accepts both.
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from solver import solve
from solver.clos.model import PodModel
from solver.clos.relax import decompose, relaxation
from solver.core.lp import solve_lp
from tests.checker import assert_plan_ok
from tests.podmodel import generated_pod_model


def _fabric(seed: int, budget: int = 16) -> tuple[Intent, PodModel, np.ndarray]:
    intent, _fab, m, share = generated_pod_model(pods=6, tors=3, planes=3, spines=5, seed=seed, missing=0.1,
                                                 hetero=0.3, max_ecmp_entries=budget)
    return intent, m, share


@pytest.mark.parametrize("seed", [1, 4, 9])
def test_relaxation_reaches_the_pod_model_optimum(seed: int) -> None:
    _intent, m, share = _fabric(seed)
    exact = solve_lp(*m.lp(share), backend="glop")
    u_exact = float(m.lp_values(exact.x)[-1])
    r = relaxation(m, m.least_shares(share))
    used = np.flatnonzero(np.diff(m.load_matrix.indptr) > 0)
    res = solve_lp(*r.lp(used), backend="pdlp", tolerance=1e-8)
    xv, fit, _sweeps = decompose(r, res.x)
    u_relaxed = float(xv[-1])
    assert u_relaxed <= u_exact * (1 + 1e-6)  # a relaxation: never above the full model's optimum
    x = np.maximum(xv[:-1], 0.0) * m.scale
    routed = float((m.loads(x) / m.fab.arc_cap).max())
    assert routed >= u_exact * (1 - 1e-6)  # a real routing of the pod model cannot beat its optimum
    assert routed <= u_exact * (1 + 1e-4), (routed, u_exact, fit)
    # every leaf group sends exactly its plane traffic, and every spine at least its least share
    phi, _ = m.least_shares(share)
    for (q, p, pl), spines in m.allowed_spines.items():
        if (q, p) not in m.d_qp:
            continue
        a = x[m.a_col[(q, p, pl)]]
        g = np.array([x[m.g_col[(q, p, pl, arc)]] for arc in spines])
        assert g.sum() == pytest.approx(a, rel=1e-9, abs=1e-9)
        assert (g >= phi.get((q, p, pl), 0.0) * a * (1 - 1e-9) - 1e-12).all()
    for (q, p), d in m.d_qp.items():  # and every pod pair's demand
        assert sum(x[m.a_col[(q, p, pl)]] for pl in m.allowed_planes[(q, p)]) == pytest.approx(d, rel=1e-6)


def test_pdlp_plans_go_through_the_relaxation_and_pass_the_checker() -> None:
    intent, m, share = _fabric(2)
    plan = solve(intent, backend="pdlp")
    assert plan.summary.extra["lp_model_solved"] == "spine-transport"
    assert_plan_ok(intent, plan)
    exact = solve_lp(*m.lp(share), backend="glop")
    assert plan.summary.lp_bound == pytest.approx(float(m.lp_values(exact.x)[-1]), rel=1e-4)


def test_a_missed_fit_falls_back_to_the_full_model() -> None:
    """When the recovered routing does not meet the relaxation's optimum (forced here), the plan
    comes from the full pod model, and still passes the checker."""
    from solver.core.options import ClosOptions

    intent, _m, _share = _fabric(5)
    plan = solve(intent, backend="pdlp", options=ClosOptions(fit_above=-1.0))  # no routing is that far under
    assert plan.summary.extra["lp_model_solved"] == "pod-groups"
    assert "spine_transport_missed" in plan.summary.extra
    assert_plan_ok(intent, plan)


def test_a_vertex_of_the_relaxation_may_defeat_the_fit_but_not_the_bound() -> None:
    """The simplex returns a vertex, whose margins need not come from any routing; IPF then
    still delivers every demand (the margin it fits last), and the loads it reports are real."""
    _intent, m, share = _fabric(3)
    r = relaxation(m, m.least_shares(share))
    used = np.flatnonzero(np.diff(m.load_matrix.indptr) > 0)
    res = solve_lp(*r.lp(used), backend="glop")
    xv, fit, _sweeps = decompose(r, res.x)
    x = np.maximum(xv[:-1], 0.0) * m.scale
    routed = float((m.loads(x) / m.fab.arc_cap).max())
    assert routed >= float(xv[-1]) * (1 - 1e-6)
    assert fit >= 0.0
    for (q, p), d in m.d_qp.items():
        assert sum(x[m.a_col[(q, p, pl)]] for pl in m.allowed_planes[(q, p)]) == pytest.approx(d, rel=1e-6)


def test_pods_numbered_far_apart_plan_alike() -> None:
    """Pod numbers are labels: renumbering them (here by a billion) changes nothing in the plan's
    loads (the cut bounds once indexed arrays by pod number and asked for 15 GiB)."""
    doc = clos_document(pods=4, tors=2, planes=2, spines=3, seed=6, missing=0.1, hetero=0.3,
                        demand="uniform", load=0.9, max_ecmp_entries=16)
    plain = validate_intent(doc)
    for d in doc["devices"]:
        if d.get("pod") is not None:
            d["pod"] = d["pod"] + 10**9
    far = validate_intent(doc)
    a = solve(plain, backend="pdlp")
    b = solve(far, backend="pdlp")
    assert_plan_ok(far, b)
    assert b.summary.lp_bound == pytest.approx(a.summary.lp_bound, rel=1e-6)
    assert b.summary.max_utilization == pytest.approx(a.summary.max_utilization, rel=1e-6)


@pytest.mark.parametrize("target", ["spine-1-1", "leaf-0-0:SPINE"])
def test_a_drained_spine_or_leaf_spine_link_stays_on_the_clos_fast_path(target: str) -> None:
    """A drained spine carries no transit and a drained leaf-spine link has no adjacency: the pod model
    treats both as missing links, so the drain is planned at pod granularity (Clos L with a spine
    drained: 11 s, where the generic route-class LP ran out of memory). No group uses what is drained,
    the independent checker agrees, and the MLU is within 2% of the generic LP's plan. A drained ToR or
    leaf still takes the generic path."""
    import time

    from solver.clos.plan import clos_plan

    doc = clos_document(pods=3, tors=4, planes=2, spines=3, seed=5, missing=0.05, hetero=0.2)
    if target.endswith(":SPINE"):
        link = next(lk for lk in doc["links"] if lk["a"] == "leaf-0-0" and lk["b"].startswith("spine"))
        target, gone = f"leaf-0-0:{link['a_port']}", (link["a_port"], link["b"])
    else:
        gone = ("", target)
    doc["policies"] = [*doc.get("policies", []), {"kind": "drain", "target": target}]
    it = validate_intent(doc)
    fast = clos_plan(it, backend="auto", progress=lambda s, f: None, t0=time.perf_counter())
    assert fast is not None, "the drain left the Clos fast path"
    for name, dp in fast.devices.items():
        for hops in dp.groups.values():
            assert not any(h.neighbor == gone[1] and (not gone[0] or (name == "leaf-0-0" and h.port == gone[0]))
                           for h in hops), (name, hops)
    assert_plan_ok(it, fast)
    generic = solve(it, method="generic")
    assert fast.summary.max_utilization <= generic.summary.max_utilization * 1.02
    for other in ("leaf-1-0", "tor-0-0"):
        doc2 = {**doc, "policies": [*doc["policies"][:-1], {"kind": "drain", "target": other}]}
        assert clos_plan(validate_intent(doc2), backend="auto", progress=lambda s, f: None, t0=0.0) is None


@pytest.mark.parametrize("hot", [0.0, 0.9, 2.0])
@pytest.mark.parametrize("seed", [1, 2])
def test_tor_rows_that_join_lazily_leave_the_optimum_where_it_is(seed: int, hot: float) -> None:
    """With ToR uplinks a third of their capacity, ToR rows bind. The relaxed LP then starts with
    the ToR rows whose ECMP utilization is at least ``hot_tor_rows`` of the hottest's (0: every
    one, 2: none) and takes the others when its optimum overloads them, each round started from
    the last one's answer. Whichever rows it starts with, it must end at the pod model's optimum
    (the simplex on every row), and the plan must pass the checker; starting with none must take
    a second round (the loop really ran)."""
    from solver.core.options import ClosOptions

    doc = clos_document(pods=4, tors=4, planes=3, spines=4, seed=seed, missing=0.1, hetero=0.3,
                        demand="uniform", load=0.9, max_ecmp_entries=16)
    for link in doc["links"]:
        if link["a"].startswith("tor") or link["b"].startswith("tor"):
            link["capacity_gbps"] /= 3
    intent = validate_intent(doc)
    exact = solve(intent, backend="glop").summary.lp_bound
    plan = solve(intent, backend="pdlp", options=ClosOptions(tor_rows_at=0.0, hot_tor_rows=hot))
    assert plan.summary.extra["lp_model_solved"] == "spine-transport"
    assert plan.summary.lp_bound == pytest.approx(exact, rel=1e-4)
    assert plan.summary.extra["pdlp_iterations"] > 0
    if hot > 1:
        assert plan.summary.extra["lp_rounds"] >= 2
    assert_plan_ok(intent, plan)
