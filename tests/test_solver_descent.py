"""The best-response descent that finishes the rounding of small Clos fabrics (solver.clos.descent)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_solver_weights import _pod_model_and_lp


@pytest.mark.parametrize("seed", range(6))
def test_level_fill_places_exactly_the_units_the_greedy_places(seed: int) -> None:
    """The fill that places most units by level gives the one-unit-at-a-time greedy's weights, also
    with members that may take nothing, members with no arc, arcs a unit does not move and idle rows."""
    from solver.clos.descent import _fill, _greedy

    rng = np.random.default_rng(seed)
    rows, n, r, arcs = 40, 5, 4, 30
    base = np.append(rng.uniform(0.0, 50.0, arcs), 0.0)  # the last: the padding arc
    cap = np.append(rng.choice([50.0, 100.0, 200.0], arcs), np.inf)
    idx = rng.integers(0, arcs, (rows, n, r))
    idx[rng.random((rows, n, r)) < 0.2] = arcs
    idx[0, 0, :] = arcs  # a member with no arc at all
    coef = np.where(idx == arcs, 0.0, rng.choice([0.0, 0.5, 1.0], (rows, n, r), p=[0.1, 0.3, 0.6]))
    unit = rng.uniform(0.05, 2.0, rows)
    wmin = rng.integers(0, 2, (rows, n))
    can = rng.random((rows, n)) < 0.85
    left = rng.integers(0, 130, rows)
    left[1] = 0
    got = _fill(base, idx, coef, cap, unit, wmin, can, left)
    want = _greedy(base, idx, coef, cap, unit, wmin, can, left)
    assert (got == want).all()
    assert (got.sum(axis=1) == wmin.sum(axis=1) + left).all()


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


@pytest.mark.parametrize("seed", range(6))
def test_rounding_fill_by_level_gives_the_unit_by_unit_weights(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load-aware rounding's water-filling (error feedback, tie-break by relative excess) gives
    the same weights with most units placed by level as with every unit placed one at a time."""
    import solver.clos.rounding as rounding

    rng = np.random.default_rng(100 + seed)
    rows, n, r, arcs = 40, 6, 3, 25
    proj = np.append(rng.uniform(0.0, 80.0, arcs), 0.0)
    cap = np.append(rng.choice([50.0, 100.0, 200.0], arcs), np.inf)
    idx = rng.integers(0, arcs, (rows, n, r))
    idx[rng.random((rows, n, r)) < 0.2] = arcs
    coef = np.where(idx == arcs, 0.0, rng.choice([0.5, 1.0], (rows, n, r)))
    valid = rng.random((rows, n)) < 0.9
    t = np.where(valid & (rng.random((rows, n)) < 0.85), rng.uniform(0.0, 40.0, (rows, n)), 0.0)
    total = rng.integers(n, 200, rows)
    u = rng.uniform(0.5, 2.0, rows)
    wmin = np.where(valid, rng.integers(0, 2), 0)
    got = rounding._fill(t, u, total, wmin, valid, idx, coef, proj, cap)
    monkeypatch.setattr(rounding, "level_units", lambda a, s, w0, can, left: np.zeros_like(w0))
    want = rounding._fill(t, u, total, wmin, valid, idx, coef, proj, cap)
    assert (got == want).all()
