"""The WCMP LP and plans: hand-solved optima, ECMP, drains, anycast, infeasible inputs.

Every plan goes through the independent checker (tests/checker.py), for every
LP backend; the only numbers asserted are optima worked out by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.gen import clos_document
from controller.model import Intent
from controller.model.errors import Infeasible
from controller.model.intent import validate_intent
from controller.model.plan import Plan
from solver import BACKENDS, solve
from tests.checker import assert_plan_ok

pytestmark = pytest.mark.timeout(300)


def check(intent: Intent, plan: Plan) -> float:
    lb = 100 if intent.wcmp_realization.value == "link-bandwidth" else None
    return assert_plan_ok(intent, plan, link_bandwidth_budget=lb).max_utilization


def pod(cap_t0_l1: float = 100.0, gbps: float = 90.0, **extra: Any) -> dict[str, Any]:
    """One pod: tor-0 and tor-1 each linked to leaf-0 (plane 0) and leaf-1 (plane 1)."""
    links = [
        {"a": "tor-0", "a_port": "eth1", "b": "leaf-0", "b_port": "eth1"},
        {"a": "tor-0", "a_port": "eth2", "b": "leaf-1", "b_port": "eth1", "capacity_gbps": cap_t0_l1},
        {"a": "tor-1", "a_port": "eth1", "b": "leaf-0", "b_port": "eth2"},
        {"a": "tor-1", "a_port": "eth2", "b": "leaf-1", "b_port": "eth2"},
        {"a": "leaf-0", "a_port": "eth9", "b": "spine-0", "b_port": "eth1"},
        {"a": "leaf-1", "a_port": "eth9", "b": "spine-1", "b_port": "eth1"},
    ]
    return {
        "name": "pod", "routing": "bgp",
        "devices": [
            {"name": "tor-0", "role": "tor", "pod": 0, "asn": 65100},
            {"name": "tor-1", "role": "tor", "pod": 0, "asn": 65101},
            {"name": "leaf-0", "role": "leaf", "pod": 0, "plane": 0, "asn": 65010},
            {"name": "leaf-1", "role": "leaf", "pod": 0, "plane": 1, "asn": 65010},
            {"name": "spine-0", "role": "spine", "plane": 0, "asn": 65000},
            {"name": "spine-1", "role": "spine", "plane": 1, "asn": 65001},
        ],
        "links": links,
        "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["tor-0"]}, {"prefix": "10.0.1.0/24", "origins": ["tor-1"]}],
        "demands": [{"from": "tor-0", "to": "10.0.1.0/24", "gbps": gbps}],
        **extra,
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_half_capacity_uplink_hand_optimum(backend: str) -> None:
    """90 G over uplinks of 100 G and 50 G: best split 60/30 gives 0.6; ECMP puts 45 G on the 50 G link (0.9)."""
    it = validate_intent(pod(cap_t0_l1=50.0))
    plan = solve(it, backend=backend)
    assert plan.summary.lp_bound == pytest.approx(0.6, abs=1e-5)
    assert plan.summary.ecmp_max_utilization == pytest.approx(0.9, abs=1e-9)
    mlu = check(it, plan)
    assert mlu == pytest.approx(0.6, abs=1e-5)  # weights 2:1 are exact
    hops = plan.devices["tor-0"].nexthops("10.0.1.0/24")
    assert sorted((h.neighbor, h.weight) for h in hops) == [("leaf-0", 2), ("leaf-1", 1)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_symmetric_fabric_ecmp_is_optimal(backend: str) -> None:
    it = validate_intent(pod(gbps=80.0))
    plan = solve(it, backend=backend)
    assert plan.summary.lp_bound == pytest.approx(0.4, abs=1e-5)
    assert check(it, plan) == pytest.approx(0.4, abs=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_demands_share_a_bottleneck(backend: str) -> None:
    """tor-0 -> tor-1 (90 G) and tor-1 -> tor-0 (30 G): directions are separate, so still 0.6."""
    doc = pod(cap_t0_l1=50.0)
    doc["demands"].append({"from": "tor-1", "to": "10.0.0.0/24", "gbps": 30.0})
    it = validate_intent(doc)
    plan = solve(it, backend=backend)
    assert plan.summary.lp_bound == pytest.approx(0.6, abs=1e-5)
    check(it, plan)


def isis_square(extra_edge: bool = False) -> dict[str, Any]:
    """a -> d over a-b-d (10 G bottleneck) and a-c-d (metric 20, 10 G): 12 G to carry."""
    links = [
        {"a": "a", "a_port": "e1", "b": "b", "b_port": "e1", "capacity_gbps": 10, "metric": 10},
        {"a": "b", "a_port": "e2", "b": "d", "b_port": "e1", "capacity_gbps": 10, "metric": 10},
        {"a": "a", "a_port": "e2", "b": "c", "b_port": "e1", "capacity_gbps": 10, "metric": 10},
        {"a": "c", "a_port": "e2", "b": "d", "b_port": "e2", "capacity_gbps": 10, "metric": 20},
    ]
    return {"name": "sq", "routing": "isis", "devices": [{"name": n} for n in "abcd"], "links": links,
            "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["d"]}],
            "demands": [{"from": "a", "to": "10.0.0.0/24", "gbps": 12}]}


@pytest.mark.parametrize("routing", ["isis", "ospf"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_link_state_shortest_vs_loop_free(backend: str, routing: str) -> None:
    """Shortest paths force all 12 G over a-b-d (1.2); loop_free may split 6/6 (0.6). OSPF as IS-IS."""
    it = validate_intent({**isis_square(), "routing": routing})
    plan = solve(it, backend=backend)
    assert plan.summary.lp_bound == pytest.approx(1.2, abs=1e-5)
    assert check(it, plan) == pytest.approx(1.2, abs=1e-5)
    doc = {**isis_square(), "routing": routing}
    doc["policies"] = [{"kind": "paths", "mode": "loop_free"}]
    it = validate_intent(doc)
    plan = solve(it, backend=backend)
    assert plan.summary.lp_bound == pytest.approx(0.6, abs=1e-4)
    assert check(it, plan) == pytest.approx(0.6, abs=1e-3)
    assert plan.summary.ecmp_max_utilization == pytest.approx(1.2, abs=1e-9)


def test_loop_free_takes_no_needless_detour() -> None:
    """Another link fixes the optimum at 0.8; a -> d (4 G) then fits on its shortest path
    (0.4), and the secondary term keeps it there instead of spreading it over a-c-d."""
    doc = isis_square()
    doc["demands"][0]["gbps"] = 4
    doc["devices"] += [{"name": "x"}, {"name": "y"}]
    doc["links"].append({"a": "x", "a_port": "e1", "b": "y", "b_port": "e1", "capacity_gbps": 10})
    doc["prefixes"].append({"prefix": "10.0.1.0/24", "origins": ["y"]})
    doc["demands"].append({"from": "x", "to": "10.0.1.0/24", "gbps": 8})
    doc["policies"] = [{"kind": "paths", "mode": "loop_free"}]
    it = validate_intent(doc)
    plan = solve(it)
    check(it, plan)
    loads = {(x.a, x.b): x.gbps_ab for x in plan.links}
    assert plan.summary.lp_bound == pytest.approx(0.8, abs=1e-6)
    assert loads[("a", "c")] == pytest.approx(0.0, abs=1e-6)
    assert loads[("a", "b")] == pytest.approx(4.0, abs=1e-6)


def test_wcmp_disabled_gives_ecmp() -> None:
    it = validate_intent(pod(cap_t0_l1=50.0, policies=[{"kind": "wcmp", "enabled": False}]))
    plan = solve(it)
    assert check(it, plan) == pytest.approx(0.9)
    assert all(h.weight == 1 for dp in plan.devices.values() for hops in dp.groups.values() for h in hops)


def test_anycast_demand_is_delivered() -> None:
    doc = pod()
    doc["prefixes"].append({"prefix": "10.9.0.0/24", "origins": ["tor-0", "tor-1"]})
    doc["demands"] = [{"from": "tor-0", "to": "10.9.0.0/24", "gbps": 50},
                      {"from": "spine-0", "to": "10.9.0.0/24", "gbps": 10}]
    it = validate_intent(doc)
    plan = solve(it)
    rep = assert_plan_ok(it, plan, link_bandwidth_budget=100)
    assert rep.delivered_gbps == pytest.approx(60)


def test_drained_leaf_carries_no_transit() -> None:
    it = validate_intent(pod(policies=[{"kind": "drain", "target": "leaf-1"}]))
    plan = solve(it)
    assert check(it, plan) == pytest.approx(0.9)  # all 90 G over leaf-0


def test_unroutable_demand_is_infeasible_and_named() -> None:
    doc = pod(policies=[{"kind": "drain", "target": "tor-0:eth1"}, {"kind": "drain", "target": "tor-0:eth2"}])
    with pytest.raises(Infeasible) as exc:
        solve(validate_intent(doc))
    assert exc.value.details[0]["loc"] == "demands[0]"
    assert "tor-0 has no route to 10.0.1.0/24" in exc.value.details[0]["reason"]


def test_the_garbage_collector_is_held_off_only_while_solving() -> None:
    """A solve pauses the cyclic collector and leaves it as it found it, also when it fails."""
    import gc

    it = validate_intent(pod())
    seen: list[bool] = []
    assert gc.isenabled()
    solve(it, progress=lambda _stage, _f: seen.append(gc.isenabled()))
    assert seen and not any(seen) and gc.isenabled()
    bad = validate_intent(pod(policies=[{"kind": "drain", "target": "tor-0:eth1"},
                                        {"kind": "drain", "target": "tor-0:eth2"}]))
    with pytest.raises(Infeasible):
        solve(bad)
    assert gc.isenabled()
    gc.disable()
    try:
        solve(it)
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


@pytest.mark.parametrize("backend", BACKENDS)
def test_generated_clos_plan_is_accepted(backend: str) -> None:
    doc = clos_document(pods=3, tors=3, planes=2, spines=3, missing=0.1, hetero=0.3, seed=4, load=0.9,
                        demand="gravity")
    it = validate_intent(doc)
    plan = solve(it, backend=backend)
    mlu = check(it, plan)
    assert plan.summary.lp_bound <= plan.summary.ecmp_max_utilization + 1e-6
    assert plan.summary.lp_bound <= mlu + 1e-6  # rounding never beats the LP optimum
    round_trip = Plan.from_document(plan.to_document())
    check(it, round_trip)


def test_fib_realization_budget_64() -> None:
    doc = clos_document(pods=2, tors=3, planes=3, spines=2, missing=0.1, hetero=0.5, seed=2, load=0.9,
                        max_ecmp_entries=4)
    doc["policies"] = [{"kind": "wcmp", "enabled": True, "realization": "fib"}]
    it = validate_intent(doc)
    plan = solve(it)
    check(it, plan)
    assert all(sum(h.weight for h in hops) <= 4 for dp in plan.devices.values() for hops in dp.groups.values())


@pytest.mark.parametrize("seed", [3, 5, 8])
def test_clos_fast_path_matches_route_classes(seed: int) -> None:
    """The pod-level path (one BGP run per pod) installs the same next hops as the per-class
    path, its LP bound is never below the per-class optimum, and both plans pass the checker."""
    doc = clos_document(pods=3, tors=3, planes=3, spines=3, missing=0.25, hetero=0.4, seed=seed, load=0.9,
                        fanout=4)
    it = validate_intent(doc)
    fast = solve(it)
    slow = solve(it, method="generic")
    assert fast.summary.extra["lp_model"] == "clos-pods"
    assert slow.summary.extra["lp_model"] == "route-classes"
    check(it, fast)
    check(it, slow)
    assert fast.summary.lp_bound >= slow.summary.lp_bound - 1e-6
    assert fast.summary.ecmp_max_utilization == pytest.approx(slow.summary.ecmp_max_utilization, rel=1e-9)
    for name, dp in fast.devices.items():
        other = slow.devices[name]
        assert set(dp.routes) == set(other.routes), name
        for prefix in dp.routes:  # link-bandwidth keeps every BGP multipath member
            assert {h.neighbor for h in dp.nexthops(prefix)} == {h.neighbor for h in other.nexthops(prefix)}, \
                (name, prefix)


def test_a_fabric_without_links_plans_its_local_demand() -> None:
    """A lone ToR whose demand stays on the box: nothing to route, nothing to repair
    (the weight repair once took the argmax of no links at all; found by the API fuzz run)."""
    intent = validate_intent({
        "name": "lone", "devices": [{"name": "t1", "role": "tor", "asn": 65001, "pod": 0}], "links": [],
        "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["t1"]}],
        "demands": [{"from": "t1", "to": "10.0.0.0/24", "gbps": 1}],
    })
    plan = solve(intent)
    assert plan.summary.max_utilization == 0.0
    assert_plan_ok(intent, plan)


def test_a_clos_without_demand_plans_its_routes_at_zero_load() -> None:
    """No demand at all (a new fabric): every route is planned, no link carries anything (the Clos
    pipeline's rounding used to fail on an empty demand)."""
    from controller.gen import clos_document

    doc = clos_document(pods=2, tors=2, planes=2, spines=2)
    doc["demands"] = []
    intent = validate_intent(doc)
    plan = solve(intent)
    assert plan.summary.max_utilization == 0 and all(x.utilization == 0 for x in plan.links)
    tors = [d.name for d in intent.devices if d.role == "tor"]
    prefixes = {p.prefix for p in intent.prefixes}
    for tor in tors:  # every other ToR's prefix is routed from every ToR
        own = {p.prefix for p in intent.prefixes if tor in p.origins}
        assert set(plan.devices[tor].routes) == prefixes - own


def test_milp_is_bounded_by_work_not_by_time() -> None:
    """The integer programs that finish rounding are bounded by nodes and simplex iterations only:
    a wall-clock limit would let a loaded machine (CI) return another plan for the same intent.
    A small knapsack reaches its optimum, and the work bounds are the only knobs."""
    import inspect

    import numpy as np
    import scipy.sparse as sp

    from solver.core.lp import solve_milp

    assert "seconds" not in inspect.signature(solve_milp).parameters
    # max 5x + 4y + 3z  s.t.  2x + 3y + z <= 5,  4x + y + 2z <= 11,  3x + 4y + 2z <= 8,  x, y, z in {0..3}
    a = sp.csr_matrix(np.array([[2.0, 3.0, 1.0], [4.0, 1.0, 2.0], [3.0, 4.0, 2.0]]))
    res = solve_milp(np.array([-5.0, -4.0, -3.0]), a, np.full(3, -np.inf), np.array([5.0, 11.0, 8.0]),
                     np.zeros(3), np.full(3, 3.0), np.ones(3, dtype=bool), nodes=100)
    assert res is not None and res.backend == "scip"
    assert res.objective == pytest.approx(-13.0)  # x = 2, z = 1 (or any other optimum of value 13)
    assert solve_milp(np.array([-1.0]), sp.csr_matrix([[1.0]]), np.array([-np.inf]), np.array([1.0]),
                      np.zeros(1), np.ones(1), np.ones(1, dtype=bool), nodes=0) is None


@pytest.mark.parametrize(("priced", "large"), [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lexicographic_lp_warm_start_matches_two_cold_solves(seed: int, priced: bool, large: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``solve_lp_lex`` with HiGHS re-optimizes the tie-break from the first stage's basis; its two
    objectives must equal those of two cold solves by an independent build (SciPy's HiGHS),
    on random min-max load problems: ``min U`` over splits of demands on parallel paths, then
    the least total cost with ``U`` held at its optimum. ``priced``: by column generation from
    one path per demand (the others priced in at each stage), which must not change either.
    ``large``: the thresholds lowered so that the model counts as large: ``auto`` must still price
    with HiGHS (the restricted LP is small enough), and the tie-break starts by the interior point
    method with crossover; neither may change the answers."""
    import numpy as np
    import scipy.sparse as sp

    from solver.core import lp
    from solver.core.lp import solve_lp, solve_lp_lex

    if large:
        monkeypatch.setattr(lp, "AUTO_PDLP_VARIABLES", 1)
        monkeypatch.setattr(lp, "TIE_BREAK_IPM_COLUMNS", 0)
        ran: list[str] = []
        run = lp._priced_run

        def spy(*args: object, interior_first: bool = False) -> object:
            ran.append(f"{args[-1]}:{'ipm' if interior_first else 'simplex'}")
            return run(*args, interior_first=interior_first)  # type: ignore[arg-type]

        monkeypatch.setattr(lp, "_priced_run", spy)

    rng = np.random.default_rng(seed)
    n_dem, n_path, n_arc = 12, 4, 15
    n_x = n_dem * n_path
    uses = rng.random((n_arc, n_x)) < 0.25  # path x crosses arc
    cap = rng.uniform(5, 20, n_arc)
    dem = rng.uniform(1, 10, n_dem)
    rows = [np.hstack([np.kron(np.eye(n_dem), np.ones(n_path)), np.zeros((n_dem, 1))]),
            np.hstack([uses.astype(float), -cap[:, None]])]
    a = sp.csr_matrix(np.vstack(rows))
    row_lb = np.concatenate([dem, np.full(n_arc, -np.inf)])
    row_ub = np.concatenate([dem, np.zeros(n_arc)])
    col_lb, col_ub = np.zeros(n_x + 1), np.full(n_x + 1, np.inf)
    c = np.zeros(n_x + 1)
    c[n_x] = 1.0
    then = np.concatenate([rng.uniform(1, 3, n_x), [0.0]])
    initial = (np.arange(n_x + 1) % n_path == 0) if priced else None
    first, second = solve_lp_lex(c, then, n_x, a, row_lb, row_ub, col_lb, col_ub, backend="auto", initial=initial)
    assert first.backend == second.backend == "highs"
    cold1 = solve_lp(c, a, row_lb, row_ub, col_lb, col_ub, backend="scipy-highs")
    assert first.objective == pytest.approx(cold1.objective, rel=1e-7)
    fixed_ub = col_ub.copy()
    fixed_ub[n_x] = cold1.objective * (1 + 1e-6) + 1e-9
    cold2 = solve_lp(then, a, row_lb, row_ub, col_lb, fixed_ub, backend="scipy-highs")
    assert second.objective == pytest.approx(cold2.objective, rel=1e-6)
    assert second.x[n_x] <= first.objective * (1 + 1e-6) + 1e-9  # the tie-break kept the optimum
    assert a @ second.x == pytest.approx(np.where(np.isfinite(row_lb), row_lb, a @ second.x), abs=1e-6)
    if large:
        assert ran == ["objective:simplex", "tie-break:ipm"]
    with pytest.raises(ValueError, match="column `fix` alone"):
        solve_lp_lex(then, c, n_x, a, row_lb, row_ub, col_lb, col_ub)


def test_highs_writes_nothing_on_stdout() -> None:
    """HiGHS prints a banner on stdout when a process builds its first instance; ``loom plan``
    writes its plan document there, so a loop-free plan's stdout must be the JSON alone."""
    import json
    import subprocess
    import sys

    code = ("import json, sys\n"
            "from controller.model.intent import validate_intent\n"
            "from solver import solve\n"
            "doc = json.loads(sys.argv[1])\n"
            "print(solve(validate_intent(doc)).summary.max_utilization)\n")
    doc = {"name": "ring", "routing": "isis", "devices": [{"name": f"r{i}"} for i in range(4)],
           "links": [{"a": f"r{i}", "a_port": "e1", "b": f"r{(i + 1) % 4}", "b_port": "e2", "capacity_gbps": 10}
                     for i in range(4)],
           "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["r0"]}],
           "policies": [{"kind": "paths", "mode": "loop_free"}],
           "demands": [{"from": "r2", "to": "10.0.0.0/24", "gbps": 10}]}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(doc)], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "0.5", out  # two disjoint paths of 10 Gb/s from r2 to r0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pdlp_with_a_warm_start_reaches_the_same_optimum_as_cold(seed: int) -> None:
    """``solve_pdlp`` against an independent build (SciPy's HiGHS) on random min-max load problems;
    then the cut loop's use of it: the LP without some capacity rows, solved, and the full LP
    started from that answer (the new rows' duals 0), which must reach the same optimum as the
    cold solve in fewer iterations; and started from its own optimum, it stops at once."""
    import numpy as np

    from solver.core.lp import solve_lp, solve_pdlp

    rng = np.random.default_rng(seed)
    a, row_lb, row_ub, col_lb, col_ub, c = _paths_lp(rng)
    n_dem, _, n_arc = PATHS_LP
    exact = solve_lp(c, a, row_lb, row_ub, col_lb, col_ub, backend="scipy-highs").objective
    cold = solve_pdlp(c, a, row_lb, row_ub, col_lb, col_ub, tolerance=1e-8)
    assert cold.objective == pytest.approx(exact, rel=1e-6)
    assert cold.y is not None and len(cold.y) == a.shape[0] and cold.iterations > 0
    keep = np.ones(a.shape[0], dtype=bool)
    keep[n_dem + rng.choice(n_arc, n_arc // 3, replace=False)] = False  # a third of the capacity rows left out
    part = solve_pdlp(c, a[keep], row_lb[keep], row_ub[keep], col_lb, col_ub, tolerance=1e-8)
    assert part.objective <= exact * (1 + 1e-6)  # fewer rows: a lower bound
    assert part.y is not None
    y = np.zeros(a.shape[0])
    y[keep] = part.y
    warm = solve_pdlp(c, a, row_lb, row_ub, col_lb, col_ub, tolerance=1e-8, start=(part.x, y))
    assert warm.objective == pytest.approx(exact, rel=1e-6)
    again = solve_pdlp(c, a, row_lb, row_ub, col_lb, col_ub, tolerance=1e-8, start=(cold.x, cold.y))
    assert again.objective == pytest.approx(exact, rel=1e-6)
    assert again.iterations < cold.iterations


@pytest.mark.parametrize("drop_used", [True, False])
@pytest.mark.parametrize("priced", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_kept_lexicographic_lp_solved_again_without_columns_matches_cold_solves(seed: int, priced: bool,
                                                                                 drop_used: bool) -> None:
    """``LexModel.without`` (the general planner's LP again without the members rounding left out)
    re-optimizes both stages from the kept basis; both objectives must equal two cold solves by
    SciPy's HiGHS with those columns held at 0, and the columns must carry nothing."""
    import numpy as np

    from solver.core.lp import LexModel, solve_lp, solve_lp_lex

    rng = np.random.default_rng(seed)
    a, row_lb, row_ub, col_lb, col_ub, c = _paths_lp(rng)
    n_dem, n_path, _ = PATHS_LP
    n_x = n_dem * n_path
    then = np.concatenate([rng.uniform(1, 3, n_x), [0.0]])
    kept: list[LexModel] = []
    first, second = solve_lp_lex(c, then, n_x, a, row_lb, row_ub, col_lb, col_ub, backend="highs",
                                 initial=(np.arange(n_x + 1) % n_path == 0) if priced else None, keep=kept)
    used = np.flatnonzero(second.x[:n_x] > 1e-9)
    if drop_used:  # per demand, its most used path goes (the others stay: every demand keeps a way)
        drop = np.array(sorted({int(d * n_path + np.argmax(second.x[d * n_path:(d + 1) * n_path]))
                                for d in range(n_dem)} & set(used.tolist())))
    else:  # paths that carry nothing: U keeps its optimum, and only the tie-break runs again
        drop = np.setdiff1d(np.arange(n_x), used)[::2]
    again1, again2 = kept[0].without(drop)
    zero_ub = col_ub.copy()
    zero_ub[drop] = 0.0
    cold1 = solve_lp(c, a, row_lb, row_ub, col_lb, zero_ub, backend="scipy-highs")
    assert again1.objective == pytest.approx(cold1.objective, rel=2e-6)  # within the tie-break's slack
    assert again1.objective >= first.objective - 1e-9
    zero_ub[n_x] = cold1.objective * (1 + 1e-6) + 1e-9
    cold2 = solve_lp(then, a, row_lb, row_ub, col_lb, zero_ub, backend="scipy-highs")
    assert again2.objective == pytest.approx(cold2.objective, rel=1e-6)
    assert again2.objective == pytest.approx(float(then @ again2.x), rel=1e-9)  # every column at its own cost
    assert np.abs(again2.x[drop]).max() <= 1e-9


#: demands, paths per demand and arcs of :func:`_paths_lp`
PATHS_LP = (12, 4, 15)


def _paths_lp(rng: Any) -> tuple[Any, ...]:
    """A random min-max load LP: 12 demands split over 4 paths each (columns), 15 arcs crossed by
    each path with probability 1/4; the last column is ``U``. Returns (A, row bounds, column
    bounds, the objective ``min U``)."""
    import numpy as np
    import scipy.sparse as sp

    n_dem, n_path, n_arc = PATHS_LP
    n_x = n_dem * n_path
    uses = rng.random((n_arc, n_x)) < 0.25
    cap = rng.uniform(5, 20, n_arc)
    dem = rng.uniform(1, 10, n_dem)
    a = sp.csr_matrix(np.vstack([np.hstack([np.kron(np.eye(n_dem), np.ones(n_path)), np.zeros((n_dem, 1))]),
                                 np.hstack([uses.astype(float), -cap[:, None]])]))
    c = np.zeros(n_x + 1)
    c[n_x] = 1.0
    return (a, np.concatenate([dem, np.full(n_arc, -np.inf)]), np.concatenate([dem, np.zeros(n_arc)]),
            np.zeros(n_x + 1), np.full(n_x + 1, np.inf), c)
