"""Integer weight reduction (WCMP, EuroSys 2014): budgets, bounds and optimality.

Optimality is checked against brute force over every weight vector on small
groups; the bound is checked with the paper's argument that rounding to a
total W loses at most one unit per member.
"""

from __future__ import annotations

import itertools
import random

import pytest

from solver.core.weights import oversubscription, reduce_weights


def brute_force(ratios: list[float], budget: int) -> float:
    n = len(ratios)
    best = float("inf")
    for total in range(n, budget + 1):
        for w in itertools.product(range(1, total - n + 2), repeat=n):
            if sum(w) == total:
                best = min(best, oversubscription(w, ratios))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_optimal_on_small_groups(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 3)
    ratios = [rng.random() + 0.01 for _ in range(n)]
    budget = rng.randint(n, 9)
    w = reduce_weights(ratios, budget)
    assert all(isinstance(x, int) and x >= 1 for x in w)
    assert sum(w) <= budget
    assert oversubscription(w, ratios) == pytest.approx(brute_force(ratios, budget), rel=1e-9)


@pytest.mark.parametrize("budget", [16, 64, 128])
def test_bound_and_budget_on_random_groups(budget: int) -> None:
    rng = random.Random(budget)
    for _ in range(40):
        n = rng.randint(2, 16)
        ratios = [rng.random() for _ in range(n)]
        s = sum(ratios)
        ratios = [r / s for r in ratios]
        w = reduce_weights(ratios, budget)
        assert len(w) == n and sum(w) <= budget and min(w) >= 1
        # taking W = budget and w_i = ceil-ish of W * r_i is one candidate: oversubscription
        # of member i is at most (W r_i + 1) / (W r_i) when all W r_i >= 1; the optimum is no worse
        if min(ratios) * budget >= 1:
            bound = max((budget * r + n) / (budget * r) for r in ratios)
            assert oversubscription(w, ratios) <= bound + 1e-12


def test_exact_ratios_are_reproduced() -> None:
    assert reduce_weights([0.5, 0.25, 0.25], 128) == [2, 1, 1]
    assert reduce_weights([1, 1, 1, 1], 4) == [1, 1, 1, 1]
    assert reduce_weights([0.6, 0.4], 128) == [3, 2]


def test_zero_ratio_member_keeps_one_unit() -> None:
    w = reduce_weights([0.0, 1.0, 0.0], 100)
    assert w == [1, 98, 1]


def test_budget_too_small_or_bad_ratios() -> None:
    with pytest.raises(ValueError):
        reduce_weights([0.5, 0.5, 0.0], 2)
    with pytest.raises(ValueError):
        reduce_weights([0.0, 0.0], 8)
    with pytest.raises(ValueError):
        reduce_weights([-1.0, 2.0], 8)


def _pod_model_and_lp(pods: int, budget: int):  # type: ignore[no-untyped-def]
    import numpy as np

    from solver.core.lp import solve_lp
    from solver.core.weights import device_budget
    from tests.podmodel import generated_pod_model

    intent, fab, m, share = generated_pod_model(pods=pods, tors=4, planes=2, spines=6, seed=3, missing=0.05,
                                                hetero=0.3, max_ecmp_entries=budget)
    res = solve_lp(*m.lp(share), backend="glop")
    xv = m.lp_values(res.x)
    tor_budget = {m.tor_pod[t]: device_budget(intent, fab.names[t]) for t in m.tor_pod}
    leaf_budget = {v: device_budget(intent, fab.names[v]) for v in m.leaf_pp}
    return intent, fab, m, np.maximum(xv[:-1], 0.0) * m.scale, float(xv[-1]), tor_budget, leaf_budget


@pytest.mark.parametrize("budget", [16, 64])
def test_load_aware_rounding_is_consistent_and_no_worse_than_per_group(budget: int) -> None:
    """The load-aware rounding's variables are exactly what its weights send, every group keeps
    its budget with every member >= 1, and its MLU beats rounding each group on its own."""

    from solver.clos.plan import _weights
    from solver.clos.rounding import carry_round
    from solver.core.options import ClosOptions

    intent, fab, m, x, lp_bound, tor_budget, leaf_budget = _pod_model_and_lp(12, budget)
    tor_w, leaf_w, xr = carry_round(m, x, tor_budget, leaf_budget, fib=False,
                                    options=ClosOptions(milp_nodes=0))
    assert set(tor_w) == {k for k, v in m.allowed_planes.items() if v}
    for (q, p), mem in tor_w.items():
        assert len(mem) == len(m.allowed_planes[(q, p)]) and min(w for _l, w in mem) >= 1
        assert sum(w for _l, w in mem) <= tor_budget[q]
        d = m.d_qp.get((q, p), 0.0)
        if d > 0:
            tot = sum(w for _l, w in mem)
            for pl, w in mem:
                assert xr[m.a_col[(q, p, pl)]] == pytest.approx(d * w / tot, rel=1e-12)
    for (leaf, p), mem in leaf_w.items():
        q, pl = m.leaf_pp[leaf]
        assert len(mem) == len(m.allowed_spines[(q, p, pl)]) and min(w for _a, w in mem) >= 1
        tot = sum(w for _a, w in mem)
        assert tot <= leaf_budget[leaf]
        a_r = xr[m.a_col[(q, p, pl)]] if (q, p, pl) in m.a_col else 0.0
        for arc, w in mem:
            if (q, p, pl, arc) in m.g_col:
                assert xr[m.g_col[(q, p, pl, arc)]] == pytest.approx(a_r * w / tot, rel=1e-12, abs=1e-12)
    mlu = float((m.loads(xr) / fab.arc_cap).max())
    _t, _l, xr_group = _weights(m, x, False)
    mlu_group = float((m.loads(xr_group) / fab.arc_cap).max())
    assert lp_bound - 1e-9 <= mlu < mlu_group


def test_repair_moves_units_within_groups_and_lowers_the_mlu() -> None:
    """Starting from the per-group rounding (blind to links), the repair's moves keep every group's
    members, total and least weight, its variables are what the weights send, and each move
    lowers the maximum: the result is no hotter, and here strictly cooler."""
    from solver.clos.plan import _weights
    from solver.clos.repair import repair_weights

    intent, fab, m, x, lp_bound, tor_budget, leaf_budget = _pod_model_and_lp(12, 16)
    tor_w, leaf_w, xr = _weights(m, x, False)
    before = float((m.loads(xr) / fab.arc_cap).max())
    tor2, leaf2, xr2, moves = repair_weights(m, dict(tor_w), dict(leaf_w), xr.copy(), max_moves=50)
    after = float((m.loads(xr2) / fab.arc_cap).max())
    assert moves > 0 and lp_bound - 1e-9 <= after < before
    for old, new in ((tor_w, tor2), (leaf_w, leaf2)):
        assert set(old) == set(new)
        for k, mem in old.items():
            assert [a for a, _w in new[k]] == [a for a, _w in mem]
            assert sum(w for _a, w in new[k]) == sum(w for _a, w in mem) and min(w for _a, w in new[k]) >= 1
    changed = [k for k in leaf_w if leaf2[k] != leaf_w[k]] + [k for k in tor_w if tor2[k] != tor_w[k]]
    assert changed
    for (leaf, p), mem in leaf2.items():  # the variables follow the (moved) weights
        q, pl = m.leaf_pp[leaf]
        if (q, p, pl) in m.a_col:
            tot = sum(w for _a, w in mem)
            for arc, w in mem:
                assert xr2[m.g_col[(q, p, pl, arc)]] == pytest.approx(xr2[m.a_col[(q, p, pl)]] * w / tot, rel=1e-9)


def test_the_repairs_column_change_is_scipys_product_to_the_last_bit() -> None:
    """The repair prices a move from the load matrix's CSC arrays instead of scipy's slicing: the same rows
    and the same numbers (summed in the same order), so repaired plans do not change."""
    import numpy as np
    import scipy.sparse as sp

    from solver.clos.repair import _column_change

    rng = np.random.default_rng(3)
    a = sp.random(60, 40, density=0.15, random_state=4, format="csc") * 7.3
    for _ in range(200):
        cols = rng.choice(40, size=int(rng.integers(1, 9)), replace=False)
        vals = rng.normal(size=len(cols)) / 3.0
        touched, dl = _column_change(a, cols, vals)
        sub = a[:, cols]
        want = np.unique(sub.indices)
        assert np.array_equal(touched, want) and np.array_equal(dl, sub[want] @ vals)
    empty = np.flatnonzero(np.diff(a.indptr) == 0)[:1]  # a column without entries touches nothing
    assert all(len(v) == 0 for v in _column_change(a, empty, np.ones(len(empty))))
