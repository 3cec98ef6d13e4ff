"""Integer weight reduction (WCMP, EuroSys 2014): budgets, bounds and optimality.

Optimality is checked against brute force over every weight vector on small
groups; the bound is checked with the paper's argument that rounding to a
total W loses at most one unit per member.
"""

from __future__ import annotations

import itertools
import random

import pytest

from solver.weights import oversubscription, reduce_weights


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
