"""``loom check``: exit status, the failing scenario and invariant named, JSON report,
review against an active intent, located errors for bad input. Plans come from the
real solver."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from controller.cli import _register
from controller.cli.common import app
from tests.unit.test_safety_replay import clos_doc

_register()
runner = CliRunner()

TIGHT = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 150.0}]
LIMIT = [{"kind": "utilization_limit", "max": 0.8}]


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def run(*args: str) -> Any:
    return runner.invoke(app, ["check", *args])


def test_draining_a_spine_fails_baseline_utilization(tmp_path: Path) -> None:
    drained = write(tmp_path, "drained.yaml", clos_doc(2, 1, 1, 2, tl_cap=400, demands=TIGHT,
                                                        policies=[*LIMIT, {"kind": "drain", "target": "spine-0-1"}]))
    res = run(str(drained))
    assert res.exit_code == 1, res.output
    assert "UNSAFE" in res.output and "baseline" in res.output and "utilization" in res.output
    res = run(str(drained), "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "unsafe"
    assert {(f["scenario"], f["invariant"]) for f in doc["failing"]} == {("baseline", "utilization")}


def test_enough_capacity_passes(tmp_path: Path) -> None:
    roomy = write(tmp_path, "roomy.yaml", clos_doc(2, 1, 1, 2, tl_cap=400, ls_cap=200, demands=TIGHT,
                                                    policies=[*LIMIT, {"kind": "drain", "target": "spine-0-1"}]))
    res = run(str(roomy), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "safe" and doc["failing"] == []
    assert [s["name"] for s in doc["scenarios"]] == ["baseline"]


def test_power_domain_black_hole_is_named(tmp_path: Path) -> None:
    demands = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 10.0}]
    domains = [{"name": "pod-1-power", "kind": "power", "devices": ["leaf-1-0"]}]
    single = write(tmp_path, "single.yaml", clos_doc(2, 1, 1, 2, demands=demands, domains=domains))
    res = run(str(single), "--json")
    assert res.exit_code == 1
    failing = json.loads(res.stdout)["failing"]
    assert [(f["scenario"], f["stage"], f["invariant"]) for f in failing] == [
        ("pod-1-power", "reconverged", "delivery")]
    assert "10.1.0.0/24 at tor-0-0" in failing[0]["detail"]
    res = run(str(single))
    assert res.exit_code == 1 and "pod-1-power" in res.output and "delivery" in res.output
    dual = write(tmp_path, "dual.yaml", clos_doc(2, 1, 2, 2, demands=demands, domains=domains))
    assert run(str(dual)).exit_code == 0


def test_single_failures_scope_names_the_spine(tmp_path: Path) -> None:
    policies = [{"kind": "failure_tolerance", "scope": "all_single", "max_utilization": 0.9}]
    doc = clos_doc(2, 1, 1, 2, tl_cap=400, demands=[{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 120.0}],
                   policies=policies)
    res = run(str(write(tmp_path, "f.yaml", doc)), "--json")
    assert res.exit_code == 1
    rep = json.loads(res.stdout)
    assert rep["counts"]["scenarios"] == 1 + len(doc["links"]) + len(doc["devices"])
    failing = {(f["scenario"], f["invariant"]) for f in rep["failing"]}
    # losing either spine (or one of its links) puts 120 gbps on one 100 gbps leaf-spine link;
    # each pod's single leaf (and the ToR's only uplink) cuts the demand off
    assert failing == {(s, "utilization") for s in ("device:spine-0-0", "device:spine-0-1", "link:leaf-0-0:eth2",
                                                    "link:leaf-0-0:eth3", "link:leaf-1-0:eth2", "link:leaf-1-0:eth3")
                       } | {(s, "delivery") for s in ("device:leaf-0-0", "device:leaf-1-0", "link:leaf-0-0:eth1",
                                                      "link:leaf-1-0:eth1")}


def test_review_against_the_active_intent(tmp_path: Path) -> None:
    old = write(tmp_path, "old.yaml", clos_doc(2, 1, 1, 2, tl_cap=400, demands=TIGHT, policies=LIMIT))
    new = write(tmp_path, "new.yaml", clos_doc(2, 1, 1, 2, tl_cap=400, demands=TIGHT,
                                                policies=[*LIMIT, {"kind": "drain", "target": "spine-0-1"}]))
    res = run(str(new), "--against", str(old), "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "unsafe" and doc["safety"]["verdict"] == "unsafe"
    changed = {d["device"] for d in doc["devices"]}
    assert "leaf-0-0" in changed  # its route toward pod 1 no longer uses spine-0-1
    links = {x["link"]: x for x in doc["links"]}
    assert links["leaf-0-0:eth3"]["after"] == 0.0 and links["leaf-0-0:eth2"]["after"] == pytest.approx(1.5)
    res = run(str(new), "--against", str(old))
    assert res.exit_code == 1 and "route changes" in res.output


def test_plan_file_is_judged(tmp_path: Path) -> None:
    from controller.model.intent import load_intent
    from solver import solve

    demands = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 10}]
    path = write(tmp_path, "i.yaml", clos_doc(2, 1, 1, 2, demands=demands))
    plan = solve(load_intent(path))
    doc = plan.to_document()
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert run(str(path), "--plan", str(tmp_path / "p.json")).exit_code == 0
    # a plan whose group points at a port the device does not have
    dev = next(iter(doc["devices"].values()))
    next(iter(dev["groups"].values()))[0]["port"] = "eth99"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    res = run(str(path), "--plan", str(tmp_path / "bad.json"), "--json")
    assert res.exit_code == 2 and "eth99" in res.stdout
    (tmp_path / "broken.json").write_text("{")
    assert run(str(path), "--plan", str(tmp_path / "broken.json")).exit_code == 2


def test_bad_intent_exits_2_with_locations(tmp_path: Path) -> None:
    doc = clos_doc(2, 1, 1, 2)
    doc["links"][0]["b"] = "leaf-9-9"
    res = run(str(write(tmp_path, "bad.yaml", doc)), "--json")
    assert res.exit_code == 2
    errs = json.loads(res.stdout)["errors"]
    assert any(e["loc"] == "links[0].b" and "leaf-9-9" in e["msg"] for e in errs)
    assert run(str(write(tmp_path, "ok.yaml", clos_doc(2, 1, 1, 2))), "--scope", "bogus").exit_code == 2


def test_single_pairs_scope_and_local_executor(tmp_path: Path) -> None:
    """``--scope single_pairs`` replays all_single and every pair of single parts (the
    intent's k2 stays pairs of domains); ``--executor local`` gives the same report as
    no executor; an unknown executor exits 2."""
    path = write(tmp_path, "ok.yaml", clos_doc(2, 2, 2, 2))
    single = json.loads(run(str(path), "--scope", "all_single", "--json").stdout)
    res = run(str(path), "--scope", "single_pairs", "--json")
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(res.stdout)
    n = single["counts"]["link"] + single["counts"]["device"]
    c = doc["counts"]
    assert c["pair"] == n * (n - 1) // 2 == c["pairs_replayed"] + c["pairs_implied"] and c["pairs_implied"] > 0
    assert c["scenarios"] == single["counts"]["scenarios"] + c["pair"]
    assert doc["scope"] == "single_pairs"
    assert doc["scenarios"][:len(single["scenarios"])] == single["scenarios"]
    assert all(s["kind"] == "pair" and not s["ok"] for s in doc["scenarios"][len(single["scenarios"]):])
    text = run(str(path), "--scope", "single_pairs")
    assert f"{c['pair']} pair" in text.output and "implied by a single failure" in text.output
    local = json.loads(run(str(path), "--scope", "all_single", "--executor", "local", "--json").stdout)
    assert {**local, "seconds": 0} == {**single, "seconds": 0}
    bad = run(str(path), "--executor", "dask", "--json")
    assert bad.exit_code == 2 and "unknown executor" in bad.stdout


def test_robust_compile_reports_the_price(tmp_path: Path) -> None:
    from tests.unit.test_safety_robust import lopsided

    path = write(tmp_path, "lop.yaml", lopsided(315.0, 0.9).to_document())
    assert run(str(path)).exit_code == 1  # the min-MLU plan breaks the limit when a plane-1 spine fails
    res = run(str(path), "--robust")
    assert res.exit_code == 0, res.output
    assert "robust WCMP: utilization under 0.9 in every scenario" in res.output
    doc = json.loads(run(str(path), "--robust", "--json").stdout)
    assert doc["verdict"] == "safe" and doc["robust"]["robust"] is True
    assert doc["robust"]["baseline_mlu_robust"] > doc["robust"]["baseline_mlu_plain"]


def test_robust_summary_never_claims_what_the_report_refutes(tmp_path: Path) -> None:
    """Issue 31.6: robust WCMP speaks of utilization only; a report that black-holes traffic says so."""
    from tests.unit.test_safety_robust import lopsided

    doc = lopsided(315.0, 0.9).to_document()
    doc["failure_domains"].append({"name": "pod-1-leaves", "kind": "power", "devices": ["leaf-1-0", "leaf-1-1"]})
    res = run(str(write(tmp_path, "cut.yaml", doc)), "--robust")
    assert res.exit_code == 1 and "UNSAFE" in res.output
    assert "every scenario under" not in res.output
    assert "delivery" in res.output and "the report stays UNSAFE" in res.output, res.output


def test_scenario_names_print_as_they_are() -> None:
    """``link:a:eth2`` is a link of device ``a``, not Rich's ``:a:`` emoji."""
    from controller.cli.common import console, err_console

    for c in (console, err_console):
        with c.capture() as cap:
            c.print("link:a:eth2 link:b:eth1 device:smile", highlight=False)
        assert cap.get().strip() == "link:a:eth2 link:b:eth1 device:smile"


def test_the_intent_asks_for_robust_wcmp_and_every_compile_honours_it(tmp_path: Path) -> None:
    """``{kind: wcmp, objective: robust}``: reviews and commits (every caller of compile_plan) use the robust
    plan without being asked, so the plan that commits already holds the limit under every failure."""
    from tests.unit.test_safety_robust import lopsided

    doc = lopsided(315.0, 0.9).to_document()
    doc["policies"].append({"kind": "wcmp", "objective": "robust"})
    res = run(str(write(tmp_path, "robust.yaml", doc)), "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["verdict"] == "safe" and rep["robust"]["robust"] is True


def test_reaction_adds_each_failure_until_the_reaction(tmp_path: Path) -> None:
    """``--reaction``: the review's reaction section in the report (the fib square, worked out by hand in
    ``tests/unit/test_review_reaction.py``); without it the report is as it was."""
    from tests.lab.test_fib_failure_lab import square_doc

    doc = square_doc()
    doc["policies"].append({"kind": "failure_tolerance", "scope": "all_single"})
    path = write(tmp_path, "square.yaml", doc)
    plain = json.loads(run(str(path), "--json").stdout)
    assert "reaction" not in plain
    got = run(str(path), "--json", "--reaction")
    assert got.exit_code == 1  # the report's verdict, unchanged
    rc = json.loads(got.stdout)["reaction"]
    rows = {r["scenario"]: r for r in rc["scenarios"]}
    assert rows["link:b:eth2"]["verdict"] == "safe" and rows["link:b:eth2"]["reconverged"]["looped_gbps"] == 4.0
    assert rows["link:c:eth2"]["verdict"] == "worse" and rows["link:c:eth2"]["window_s"] is None
    text = run(str(path), "--reaction").stdout
    assert "failure reaction: detect 1 s" in text and "until the reaction" in text
