"""``loom gen clos`` and ``loom plan`` end to end: generated fabrics validate, plan and pass the checker."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controller.cli import _register
from controller.cli.common import app
from controller.gen import clos_document
from controller.model.intent import load_intent, validate_intent
from controller.model.plan import Plan
from solver.ecmp import ecmp_max_utilization
from tests.checker import assert_plan_ok

_register()
runner = CliRunner()


def test_structure_asns_and_domains() -> None:
    doc = clos_document(pods=3, tors=4, planes=2, spines=3, missing=0.2, hetero=0.4, seed=7, scale_to_ecmp=False)
    it = validate_intent(doc)  # RFC 7938 ASN rules are part of validation
    roles = Counter(d.role.value for d in it.devices)
    assert roles == {"tor": 12, "leaf": 6, "spine": 6}
    leaf_spine = [x for x in it.links if x.a.startswith("leaf")]
    assert len(leaf_spine) == round(0.8 * 6 * 3)
    assert Counter(x.capacity_gbps for x in leaf_spine)[100.0] == len(leaf_spine) - round(0.4 * len(leaf_spine))
    kinds = Counter(fd.kind for fd in it.failure_domains)
    assert kinds["device"] == 6 and kinds["power"] == 2 and kinds["srlg"] >= 1
    assert len({d.asn for d in it.devices if d.role.value == "tor"}) == 12
    assert len(it.demands) == 12 * 11


@pytest.mark.parametrize("kind", ["uniform", "gravity", "hotspot"])
def test_demand_scaled_to_ecmp_load(kind: str) -> None:
    doc = clos_document(pods=2, tors=3, planes=2, spines=2, missing=0.1, seed=1, demand=kind, load=0.7)
    assert ecmp_max_utilization(validate_intent(doc)) == pytest.approx(0.7, rel=1e-3)


def test_fanout_bounds_demands() -> None:
    doc = clos_document(pods=4, tors=4, planes=2, spines=2, fanout=3, scale_to_ecmp=False)
    assert len(doc["demands"]) == 16 * 3
    assert all(d["to"] != f"10.{d['from'].split('-')[1]}.{d['from'].split('-')[2]}.0/24" for d in doc["demands"])


def test_pods_of_more_than_256_tors_originate_distinct_slash26s() -> None:
    doc = clos_document(pods=3, tors=300, planes=1, spines=2, fanout=1, scale_to_ecmp=False)
    intent = validate_intent(doc)  # distinct prefixes, every demand towards one of them
    assert len(intent.devices) == 3 * 300 + 3 + 2 and len({p.prefix for p in intent.prefixes}) == 900
    assert all(p.prefix.endswith("/26") for p in intent.prefixes) and len(intent.demands) == 900
    assert clos_document(pods=2, tors=2, planes=1, spines=1, fanout=0, scale_to_ecmp=False)["demands"] == []
    with pytest.raises(ValueError):
        clos_document(pods=256, tors=1025, planes=1, spines=1)


def test_cli_gen_then_plan_is_accepted(tmp_path: Path) -> None:
    intent_file, plan_file = tmp_path / "fabric.yaml", tmp_path / "plan.json"
    r = runner.invoke(app, ["gen", "clos", "--pods", "3", "--tors", "3", "--planes", "2", "--spines", "2",
                            "--missing", "0.1", "--hetero", "0.3", "--demand", "gravity", "--load", "0.9",
                            "--out", str(intent_file)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["plan", str(intent_file), "--out", str(plan_file), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout[r.stdout.index("{"):])["summary"]
    plan = Plan.from_document(json.loads(plan_file.read_text()))
    intent = load_intent(intent_file)
    rep = assert_plan_ok(intent, plan, link_bandwidth_budget=100)
    assert summary["max_utilization"] == pytest.approx(rep.max_utilization, abs=1e-5)
    assert summary["ecmp_max_utilization"] == pytest.approx(0.9, rel=1e-3)


def test_cli_plan_rejects_bad_and_infeasible_intents(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndevices: [{name: a, role: tor}]\nlinks: [{a: a, a_port: e1, b: zz, b_port: e1}]\n")
    r = runner.invoke(app, ["plan", str(bad), "--json"])
    assert r.exit_code == 2
    assert "links[0]" in r.stdout
    doc = clos_document(pods=1, tors=2, planes=1, spines=1, scale_to_ecmp=False)
    doc["policies"] = [{"kind": "drain", "target": "tor-0-0:eth1"}]
    f = tmp_path / "cut.json"
    f.write_text(json.dumps(doc))
    r = runner.invoke(app, ["plan", str(f), "--json"])
    assert r.exit_code == 2
    out = json.loads(r.stdout)
    assert "infeasible" in out["error"] and out["errors"][0]["loc"].startswith("demands[")


@pytest.mark.parametrize("spines", [1, 2])
def test_no_two_generated_domains_take_down_the_same_parts(spines: int) -> None:
    """Issue 31.5: ``--pods 2 --tors 2 --planes 2 --spines 2 --missing 0.1 --hetero 0.3`` drew one SRLG twice."""
    for seed in range(40):
        doc = clos_document(pods=2, tors=2, planes=2, spines=spines, seed=seed, missing=0.1, hetero=0.3, srlgs=4)
        members = [(frozenset(fd.get("devices", ())), frozenset(fd.get("links", ()))) for fd in doc["failure_domains"]]
        assert len(set(members)) == len(members), seed
        validate_intent(doc)


def test_gen_clos_families_plan_alike() -> None:
    """``--family ipv6`` and ``dual`` (#36): the same fabric, its ToRs' prefixes IPv6 or both, on an unnumbered
    underlay, with the same load (a dual-stack demand is split over the two families): the same maximum
    utilization as IPv4 alone."""
    from controller.gen import clos_document, tor_prefix6, with_family
    from controller.model.intent import validate_intent
    from solver.solve import solve

    base = clos_document(pods=2, tors=2, planes=2, spines=1, scale_to_ecmp=False)
    got = {}
    for family in ("ipv4", "ipv6", "dual"):
        doc = with_family(base, family)
        it = validate_intent(doc)
        six = [p.prefix for p in it.prefixes if p.version == 6]
        assert len(six) == {"ipv4": 0, "ipv6": 4, "dual": 4}[family]
        assert (doc.get("defaults", {}).get("underlay") == "unnumbered") == (family != "ipv4")
        got[family] = solve(it).summary.max_utilization
    assert got["ipv6"] == got["ipv4"] and abs(got["dual"] - got["ipv4"]) < 1e-9, got
    assert tor_prefix6(0, 1) == "2001:db8:0:1::/64"
