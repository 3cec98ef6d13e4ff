"""Robust WCMP (solver.robust with safety.replay.peaks as its oracle): a fabric whose
min-MLU plan breaks the failure limit when a spine of its small plane fails, while a
robust plan holds; every scenario of the report is then checked by the replay; and a
limit no weights can meet is reported as impossible, naming the scenarios."""

from __future__ import annotations

from typing import Any

import pytest
from test_safety_replay import clos_doc

from controller.intent import validate_intent
from controller.model import Intent
from safety.replay import peaks, replay
from solver import solve
from solver.robust import solve_robust


def lopsided(gbps: float, limit: float) -> Intent:
    """Plane 0 has four spines, plane 1 two: losing a spine costs plane 1 half its capacity."""
    doc: dict[str, Any] = clos_doc(2, 1, 2, 4, tl_cap=1000,
                                   demands=[{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": gbps}],
                                   missing=tuple(f"leaf-{p}-1:eth{1 + s + 1}" for p in (0, 1) for s in (2, 3)))
    doc["devices"] = [d for d in doc["devices"] if d["name"] not in ("spine-1-2", "spine-1-3")]
    doc["failure_domains"] = [{"name": f"{d['name']}-power", "kind": "power", "devices": [d["name"]]}
                              for d in doc["devices"] if d["role"] == "spine"]
    doc["policies"] = [{"kind": "failure_tolerance", "scope": "domains", "max_utilization": limit}]
    return validate_intent(doc)


def test_plain_plan_breaks_the_limit_and_the_robust_plan_holds() -> None:
    intent = lopsided(315.0, 0.9)
    plain = replay(intent, solve(intent))
    assert plain.verdict == "unsafe"
    assert {f.scenario for f in plain.failing} == {"spine-1-0-power", "spine-1-1-power"}
    assert {f.invariant for f in plain.failing} == {"utilization"}

    plan = solve_robust(intent, peaks)
    info = plan.summary.extra["robust"]
    assert info["robust"] is True and info["violating"] == {} and info["impossible"] == {}
    report = replay(intent, plan)
    assert report.verdict == "safe", report.failing
    for sc in report.scenarios:
        for stage in sc.stages():
            assert stage.max_utilization <= 0.9 + 1e-9, (sc.name, stage.stage)
    # the price: the baseline MLU grows from the unconstrained optimum (315/600)
    assert info["baseline_mlu_plain"] == pytest.approx(315 / 600, abs=0.01)
    assert info["baseline_mlu_robust"] > info["baseline_mlu_plain"]
    assert info["baseline_mlu_robust"] == pytest.approx(report.scenario("baseline").immediate.max_utilization)
    assert plan.summary.max_utilization == pytest.approx(info["baseline_mlu_robust"])


def test_impossible_limit_names_the_scenarios() -> None:
    # 380 gbps: plane 1 may carry at most 0.9*100 after losing a spine and plane 0 at most
    # 0.9*300 after losing one of its spines: 360 < 380, no split of the ToR meets both.
    # Each single failure alone is possible though (a plan may move load away from it),
    # so no scenario is impossible on its own: the report says not robust, names the
    # violating scenarios and proves none impossible.
    intent = lopsided(380.0, 0.9)
    plan = solve_robust(intent, peaks, max_rounds=6)
    info = plan.summary.extra["robust"]
    assert info["robust"] is False and info["violating"]
    assert info["impossible"] == {}
    # a limit below what even the failed topology allows: losing a plane-1 spine leaves
    # 500 gbps of capacity toward pod 1 for 520 gbps of demand
    intent = lopsided(520.0, 0.99)
    info = solve_robust(intent, peaks, max_rounds=3).summary.extra["robust"]
    assert info["robust"] is False
    assert set(info["impossible"]) >= {"spine-1-0-power", "spine-1-1-power"}
    assert all(b > 0.99 for b in info["impossible"].values())
