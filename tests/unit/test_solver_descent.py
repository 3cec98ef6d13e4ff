"""The best-response descent that finishes the rounding of small Clos fabrics (solver.clos.descent)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_solver_weights import _pod_model_and_lp


def _one_unit_at_a_time(a: np.ndarray, slope: np.ndarray, w0: np.ndarray, can: np.ndarray,
                        left: np.ndarray) -> np.ndarray:
    """The water-filling by definition: each unit in turn to the member whose next unit costs least."""
    w = w0.copy()
    for i in range(len(w)):
        for _ in range(int(left[i])):
            cost = np.where(can[i], (a[i] + slope[i] * (w[i] + 1)[:, None]).max(axis=1), np.inf)
            w[i, int(np.argmin(cost))] += 1  # ties: the lower member (its lower weight comes first anyway)
    return w


@pytest.mark.parametrize("most", [12, 130])  # few units per member (placed one at a time) or many (by level)
@pytest.mark.parametrize("seed", range(6))
def test_water_fill_by_level_places_exactly_the_units_of_one_at_a_time(seed: int, most: int) -> None:
    """The fill that places most units by level gives the weights of placing every unit one at a time,
    also with members that may take nothing (or a row where none may), members with no arc, arcs a
    unit does not move, ties, idle rows and budgets far above the members."""
    from solver.clos.batches import water_fill

    rng = np.random.default_rng(seed)
    rows, n, r = 30, 5, 3
    a = np.round(rng.uniform(0.0, 1.0, (rows, n, r)), 1)  # coarse: ties happen
    slope = rng.choice([0.0, 0.01, 0.02, 0.05], (rows, n, r), p=[0.15, 0.35, 0.25, 0.25])
    slope[0, 0, :] = 0.0  # a member no unit moves at all
    a[0, 0, :] = 0.0
    w0 = rng.integers(0, 3, (rows, n))
    can = rng.random((rows, n)) < 0.85
    can[2, :] = False
    left = rng.integers(0, most, rows)
    left[1] = 0
    left[3] = 2
    got = water_fill(a, slope, w0, can, left)
    assert (got == _one_unit_at_a_time(a, slope, w0, can, left)).all()
    assert (got.sum(axis=1) == w0.sum(axis=1) + left).all()


@pytest.mark.parametrize("budget", [16, 64])
def test_descent_never_raises_the_mlu_keeps_budgets_and_is_deterministic(budget: int) -> None:
    """From the load-aware rounding, the descent (with kicks) ends at an MLU no higher, every group
    within its budget with every member >= 1, the variables exactly what the weights send, and the
    same weights on a second run."""
    from solver.clos.rounding import carry_round
    from solver.core.options import ClosOptions

    intent, fab, m, x, lp_bound, tor_budget, leaf_budget = _pod_model_and_lp(12, budget)

    def mlu(xr: np.ndarray) -> float:
        return float((m.loads(xr) / fab.arc_cap).max())

    _t, _l, xr0 = carry_round(m, x, tor_budget, leaf_budget, fib=False, options=ClosOptions(descent_rounds=0))
    opts = ClosOptions(descent_rounds=12, descent_kick=0.05, descent_patience=2)
    tor_w, leaf_w, xr = carry_round(m, x, tor_budget, leaf_budget, fib=False, options=opts)
    assert lp_bound - 1e-9 <= mlu(xr) <= mlu(xr0) + 1e-12
    for (q, p), mem in tor_w.items():
        assert len(mem) == len(m.allowed_planes[(q, p)]) and min(w for _l, w in mem) >= 1
        assert sum(w for _l, w in mem) <= tor_budget[q]
        d = m.d_qp.get((q, p), 0.0)
        if d > 0:
            tot = sum(w for _l, w in mem)
            for pl, w in mem:
                assert xr[m.a_col[(q, p, pl)]] == pytest.approx(d * w / tot, rel=1e-9)
    for (leaf, p), mem in leaf_w.items():
        q, pl = m.leaf_pp[leaf]
        assert min(w for _a, w in mem) >= 1 and sum(w for _a, w in mem) <= leaf_budget[leaf]
        a_r = xr[m.a_col[(q, p, pl)]] if (q, p, pl) in m.a_col else 0.0
        tot = sum(w for _a, w in mem)
        for arc, w in mem:
            if (q, p, pl, arc) in m.g_col:
                assert xr[m.g_col[(q, p, pl, arc)]] == pytest.approx(a_r * w / tot, rel=1e-9, abs=1e-12)
    again = carry_round(m, x, tor_budget, leaf_budget, fib=False, options=opts)
    assert again[0] == tor_w and again[1] == leaf_w
    assert np.array_equal(again[2], xr)

