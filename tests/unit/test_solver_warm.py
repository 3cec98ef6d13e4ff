"""Warm starts of the Clos LP (solver.clos.warm): a reaction plan started from the full fabric's optimum.

The oracle is the cold solve of the same intent: a warm-started PDLP stops under the same termination
criteria (``ClosOptions.pdlp_tolerance``, 1e-5 relative gap and residuals), so its optimum ``lp_bound`` may
differ from the cold one's by that much relative; the tests allow 1e-4 (ten times it: both ends of the
comparison carry the tolerance, and the relaxation's fit is checked against ``fit_above`` = 1e-3).
The plans' maximum utilization after rounding may differ by what rounding does with splits that differ
that little: the tests allow 1e-3 absolute, the plan checker (an independent propagation) must accept
the warm plan, and the failed link must carry nothing. A start is kept only from a cold solve and only
for its own LP (devices, arcs, capacities, pod-pair demands, least shares), never for another fabric's.
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from controller.operations.overlay import Overlay, overlay_intent
from solver import solve
from solver.clos.warm import STARTS, Layout, Starts
from solver.core.options import ClosOptions
from tests.checker import assert_plan_ok

WARM = ClosOptions(warm_start=True)


def _clos(seed: int) -> Intent:
    return validate_intent(clos_document(pods=6, tors=3, planes=3, spines=4, seed=seed, missing=0.05, hetero=0.3,
                                         load=0.9))


def _spine_links(intent: Intent) -> list[str]:
    return [ln.key for ln in intent.links if ln.a.startswith("leaf") and ln.b.startswith("spine")]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_reaction_plan_warm_started_from_the_full_optimum_is_the_cold_ones(seed: int) -> None:
    STARTS.clear()
    intent = _clos(seed)
    full = solve(intent, backend="pdlp")
    assert full.summary.extra["lp_model_solved"] == "spine-transport" and "warm_start" not in full.summary.extra
    for link in _spine_links(intent)[::7][:4]:
        reduced = overlay_intent(intent, Overlay(frozenset({link})))
        cold = solve(reduced, backend="pdlp")
        warm = solve(reduced, backend="pdlp", options=WARM)
        assert warm.summary.extra["warm_start"] is True
        assert warm.summary.lp_bound == pytest.approx(cold.summary.lp_bound, rel=1e-4)
        assert warm.summary.max_utilization == pytest.approx(cold.summary.max_utilization, abs=1e-3)
        assert_plan_ok(reduced, warm)
        assert all(ld.gbps_ab == 0 and ld.gbps_ba == 0 for ld in warm.links
                   if f"{ld.a}:{ld.a_port}" == link or f"{ld.b}:{ld.b_port}" == link)


def test_a_start_is_kept_from_cold_solves_only_and_for_its_own_lp() -> None:
    STARTS.clear()
    intent, other = _clos(1), _clos(3)  # the same shape, other demands and capacities
    solve(intent, backend="pdlp")
    kept = dict(STARTS._by)
    assert len(kept) == 1
    reduced = overlay_intent(intent, Overlay(frozenset({_spine_links(intent)[0]})))
    solve(reduced, backend="pdlp", options=WARM)
    assert dict(STARTS._by) == kept  # a warm-started optimum is never kept
    got = solve(other, backend="pdlp", options=WARM)
    assert got.summary.extra["warm_start"] is False  # another fabric's optimum is never its start
    assert len(STARTS._by) == 2  # its own cold optimum is kept


def test_a_start_is_laid_out_by_what_each_column_and_row_stands_for() -> None:
    starts = Starts()
    old = Layout([("a", 0, 1, 0), ("y", 4), ("U",)], [("d", 0, 1), ("c", 4)], scale=10.0)
    starts.put("sig", old, np.array([1.0, 2.0, 0.5]), np.array([3.0, 4.0]))
    new = Layout([("U",), ("a", 0, 1, 0), ("z", 9)], [("c", 7), ("d", 0, 1)], scale=5.0)
    x, y = starts.start("sig", new)  # type: ignore[misc]
    assert x.tolist() == [1.0, 2.0, 0.0] and y.tolist() == [0.0, 3.0]  # rescaled; new ones start at 0
    assert starts.start("other", new) is None
