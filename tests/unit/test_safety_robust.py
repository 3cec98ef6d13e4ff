"""Robust WCMP (solver.robust with safety.replay.peaks as its oracle): a fabric whose
min-MLU plan breaks the failure limit when a spine of its small plane fails, while a
robust plan holds; every scenario of the report is then checked by the replay; and a
limit no weights can meet is reported as impossible, naming the scenarios.

The pod-level path (solver.clos.robust) on a generated Clos with a half-size plane and
``all_single``: the plain plan breaks the limit, the robust plan holds in every scenario
of the replay; its certificate bounds every link's peak the replay finds, at every grid
point (held or not); every single failure takes no more than the protected loss sets
of its class; fabrics the pod model cannot describe fall back to the DAG path."""

from __future__ import annotations

from typing import Any

import pytest

from controller.gen import clos_document
from controller.model import Intent
from controller.model.intent import validate_intent
from safety.replay import peaks, replay
from safety.scenarios import scenarios
from solver import solve
from solver.clos.model import build_pod_model
from solver.clos.robust import CLASSES, clos_robust, protected_losses, scenario_losses
from solver.core.fabric import build_fabric
from solver.robust import solve_robust
from tests.unit.test_safety_replay import clos_doc


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


def half_plane(limit: float, *, scope: str = "all_single") -> Intent:
    """4 pods of 4 ToRs, 4 planes of 4 spines but the last keeps 2; ToR uplinks 400 gbps."""
    doc = clos_document(pods=4, tors=4, planes=4, spines=4, seed=1)
    gone = {"spine-3-2", "spine-3-3"}
    doc["devices"] = [d for d in doc["devices"] if d["name"] not in gone]
    doc["links"] = [x for x in doc["links"] if x["a"] not in gone and x["b"] not in gone]
    for x in doc["links"]:
        if x["a"].startswith("tor"):
            x["capacity_gbps"] = 400.0
    ends = {f"{x[s]}:{x[s + '_port']}" for x in doc["links"] for s in ("a", "b")}
    domains = [dict(fd, devices=[d for d in fd.get("devices", []) if d not in gone],
                    links=[e for e in fd.get("links", []) if e in ends]) for fd in doc["failure_domains"]]
    doc["failure_domains"] = [fd for fd in domains if fd["devices"] or fd["links"]]
    doc["policies"] = [{"kind": "failure_tolerance", "scope": scope, "max_utilization": limit}]
    return validate_intent(doc)


def test_clos_plain_breaks_all_single_and_the_robust_plan_holds_every_scenario() -> None:
    intent = half_plane(1.0)
    plain = replay(intent, solve(intent))
    assert plain.verdict == "unsafe"
    assert {f.invariant for f in plain.failing} == {"utilization"}

    plan = solve_robust(intent, peaks)
    info = plan.summary.extra["robust"]
    assert info["method"] == "clos" and info["robust"] is True and info["violating"] == {}
    report = replay(intent, plan)
    assert report.verdict == "safe", report.failing
    assert len(report.scenarios) == 1 + len(intent.failure_domains) + len(intent.links) + len(intent.devices)
    for sc in report.scenarios:
        for stage in sc.stages():
            assert stage.max_utilization <= 1.0 + 1e-9, (sc.name, stage.stage)
    # the price is reported against the plain plan; the summary's MLU is the replay's baseline (the
    # report rounds to 6 decimals: up to 5e-7 apart, more than approx's default of 1e-6 relative)
    assert info["baseline_mlu_plain"] == pytest.approx(plain.scenario("baseline").immediate.max_utilization, abs=1e-6)
    assert info["baseline_mlu_robust"] == pytest.approx(report.scenario("baseline").immediate.max_utilization,
                                                        abs=1e-6)
    assert plan.summary.max_utilization == pytest.approx(info["baseline_mlu_robust"])
    # the plan's link loads are its baseline loads
    assert max(link.utilization for link in plan.links) == pytest.approx(info["baseline_mlu_robust"])


@pytest.mark.parametrize("scope", ["all_single", "domains", "k2"])
def test_clos_certificate_bounds_every_link_peak(scope: str) -> None:
    intent = half_plane(1.0, scope=scope)
    cands = clos_robust(intent, 1.0, grid=((1.0, 1.0), (1.2, 1.0), (1.45, 1.2)), derate_rounds=0)
    assert cands is not None and len(cands) == 3
    for cand in cands:
        ev = peaks(intent, cand.plan())
        assert max(ev.link_peak.values()) <= cand.reserved_mlu + 1e-9, cand.t
        for i, link in enumerate(intent.links):  # link by link, where the replay's peak comes from failures
            bound = max(cand.arc_reserved[2 * i], cand.arc_reserved[2 * i + 1])
            assert ev.link_peak[link.key] <= bound + 1e-9, (cand.t, link.key)
        assert ev.baseline_mlu == pytest.approx(cand.baseline_mlu)
        if cand.reserved_mlu <= 1.0:
            assert ev.violating == {}


def test_clos_single_failures_stay_within_their_protected_sets() -> None:
    intent = half_plane(1.0)
    m = build_pod_model(build_fabric(intent))
    assert m is not None
    fams = protected_losses(intent, m)
    n_checked = 0
    for sc in scenarios(intent):
        if sc.kind not in ("link", "device"):
            continue
        got = scenario_losses(m, sc.devices, sc.links)
        if not got.kind:
            continue
        n_checked += 1
        fam = fams[got.kind]
        for pair, sets in got.planes.items():
            allowed = frozenset(m.allowed_planes[pair])
            assert all(s >= allowed or s in fam.planes[pair] for s in sets), (sc.name, pair, sets)
        for group, sets in got.spines.items():
            allowed = frozenset(m.allowed_spines[group])
            assert all(s >= allowed or s in fam.spines[group] for s in sets), (sc.name, group, sets)
        # a single failure never takes more than one plane of a pair or one spine of a leaf group
        assert all(len(s) == 1 or s >= frozenset(m.allowed_planes[k]) for k, ss in got.planes.items() for s in ss)
        assert all(len(s) == 1 or s >= frozenset(m.allowed_spines[k]) for k, ss in got.spines.items() for s in ss)
    assert n_checked > len(intent.devices)
    assert set(fams) == set(CLASSES)


def test_clos_path_is_skipped_where_the_pod_model_does_not_apply() -> None:
    doc = half_plane(1.0).to_document()
    doc["policies"].append({"kind": "drain", "target": "spine-0-0"})
    assert clos_robust(validate_intent(doc), 1.0) is None
    intent = lopsided(315.0, 0.9)
    info = solve_robust(intent, peaks, method="ffc").summary.extra["robust"]
    assert info["method"] == "ffc" and info["robust"] is True
