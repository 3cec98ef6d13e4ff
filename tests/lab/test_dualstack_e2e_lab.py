"""End to end on a dual-stack fabric with an unnumbered underlay (#36): a real ``loom serve`` drives a
real FRR lab whose BGP sessions run on the interfaces' IPv6 link-local addresses, and every ToR
originates an IPv4 and an IPv6 prefix.

The lab is a 3-tier Clos (2 pods of 2 ToRs, 2 planes of one spine, a host behind every ToR) generated
from the intent with ``defaults.underlay: unnumbered``. The steps run in order, as an operator would:
``loom apply`` commits it, and every router's kernel holds, for both families, exactly the plan's next
hops and weights (within FRR's link-bandwidth rounding) and the hosts reach each other over IPv4 and
IPv6; a re-weighting (uneven spine capacities) commits and the kernels follow in both families; a
drained spine carries nothing in either family; a leaf-spine link taken down in its namespace makes the
leader commit a reaction around it, whose plan the kernels then hold in both families, and the full
plan returns when the link comes back. The lab and the controller are torn down in the finalizer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from labs import runner
from labs.gen import clos3_document
from tests import dualstack
from tests.dualstack import until
from tests.labkit import ServedLab, served_lab

LAB = "ds6"
TOKEN = "ds6-" + "Vb7Qm2Xz9Lk4Rt1Wp8Ns3Hd6Fy0Jc5Ga"


def dual_stack_doc() -> dict[str, Any]:
    """The lab intent: clos 2x2x2x1 at 10 Gb/s, an IPv6 twin of every prefix and of every demand."""
    doc = clos3_document(LAB, pods=2, tors=2, planes=2, spines=1, gbps=2.0)
    doc["defaults"] = {"underlay": "unnumbered"}
    for link in doc["links"]:
        link["capacity_gbps"] = 10.0
    twins = {p["prefix"]: f"2001:db8:{k}::/64" for k, p in enumerate(doc["prefixes"])}
    doc["prefixes"] += [{"prefix": twins[p["prefix"]], "origins": p["origins"]} for p in list(doc["prefixes"])]
    doc["demands"] += [{**d, "to": twins[d["to"]]} for d in list(doc["demands"])]
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.9},
                       {"kind": "failure_reaction", "detect_s": 0.5, "hold_down_s": 3}]
    return doc


@pytest.fixture(scope="module")
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedLab]:
    lab = ServedLab(tmp_path_factory.mktemp(LAB), LAB, dual_stack_doc(), TOKEN, hosts=1,
                    env={"LOOM_CONFIRM_WITHIN": "90", "LOOM_VERIFY_TIMEOUT": "45"})
    with served_lab(lab) as c:
        yield c


def active_plan(ctl: ServedLab) -> dict[str, Any]:
    return dict(ctl.get("/v1/plans/active"))


def in_kernels(ctl: ServedLab, timeout: float = 60) -> None:
    """Every kernel holds the active plan in both families, within ``timeout``."""
    until(lambda: not mismatches(active_plan(ctl)), timeout, "the kernels do not hold the active plan",
          lambda: mismatches(active_plan(ctl))[:6])


def hosts(ctl: ServedLab) -> dict[str, Any]:
    return dict(json.loads(ctl.cli("lab", "hosts", str(ctl.path), "--json", check=True).stdout))


def kernel(node: str) -> dict[str, dict[str, int]]:
    return dualstack.kernel(LAB, node)


def mismatches(plan: dict[str, Any]) -> list[str]:
    return dualstack.mismatches(LAB, plan, "link-bandwidth")


def unreachable(ctl: ServedLab) -> list[str]:
    return dualstack.unreachable(hosts(ctl))


def test_a_dual_stack_unnumbered_fabric_commits_and_both_kernels_hold_the_plan(ctl: ServedLab) -> None:
    ch = ctl.apply(ctl.doc, "-m", "dual stack, unnumbered")
    assert ch["state"] == "committed", ch
    plan = active_plan(ctl)
    v6 = {p for dp in plan["devices"].values() for p in dp["routes"] if ":" in p}
    assert len(v6) == 4 and any("." in p for dp in plan["devices"].values() for p in dp["routes"])
    in_kernels(ctl)
    hs = hosts(ctl)
    assert len(hs) == 4 and all(":" in h["address6"] and "." in h["address"] for h in hs.values()), hs
    until(lambda: not unreachable(ctl), 30, "some hosts cannot reach each other", lambda: unreachable(ctl))
    state = ctl.get("/v1/devices/tor-0-0/state")
    assert state["observed"] and "2001:db8:2::/64" in state["routes"] and "10.1.0.0/24" in state["routes"]
    sessions = state["sessions"]
    assert len(sessions) == 2 and all(s["state"] == "Established" for s in sessions), sessions
    assert {s["neighbor"] for s in sessions} == {"eth1", "eth2"}  # unnumbered: the peers are the interfaces


def test_a_reweighting_commits_and_both_families_follow(ctl: ServedLab) -> None:
    doc = ctl.doc
    for link in doc["links"]:
        if link["b"] == "spine-0-0" and link["a"] == "leaf-0-0":
            link["capacity_gbps"] = 2.5  # plane 0 of pod 0 is thin: the ToRs of pod 0 send less through it
    for d in doc["demands"]:
        d["gbps"] = 1.5  # 6 Gb/s across the pods: ECMP would fill the thin link 1.2 times, WCMP about half
    before = active_plan(ctl)
    ch = ctl.apply(doc, "-m", "uneven plane 0")
    assert ch["state"] == "committed", ch
    after = active_plan(ctl)
    changed = [p for p, g in after["devices"]["tor-0-0"]["routes"].items()
               if after["devices"]["tor-0-0"]["groups"][g]
               != before["devices"]["tor-0-0"]["groups"][before["devices"]["tor-0-0"]["routes"][p]]]
    assert any(":" in p for p in changed) and any("." in p for p in changed), changed
    in_kernels(ctl)


def test_a_drained_spine_carries_nothing_in_either_family(ctl: ServedLab) -> None:
    doc = ctl.doc
    for link in doc["links"]:
        link["capacity_gbps"] = 10.0  # plane 0 whole again: it carries everything across the pods now
    doc["policies"].append({"kind": "drain", "target": "spine-1-0"})
    ch = ctl.apply(doc, "-m", "drain spine-1-0")
    assert ch["state"] == "committed", ch
    in_kernels(ctl)
    toward = {"leaf-0-1": "eth3", "leaf-1-1": "eth3"}  # the plane-1 leaves' ports up to spine-1-0
    for leaf, port in toward.items():
        routes = kernel(leaf)
        for prefix in ("10.1.0.0/24", "2001:db8:2::/64") if leaf == "leaf-0-1" else ("10.0.0.0/24", "2001:db8::/64"):
            assert port not in routes.get(prefix, {}), (leaf, prefix, routes.get(prefix))
    assert not unreachable(ctl)


def _reactions(ctl: ServedLab) -> list[dict[str, Any]]:
    items = ctl.get("/v1/changes?limit=20")["items"]
    return [c for c in items if c["author"] == "failover" and c["state"] == "committed"]


def test_a_failed_link_is_planned_around_in_both_families_and_the_plan_returns(ctl: ServedLab) -> None:
    doc = ctl.doc
    doc["policies"] = [p for p in doc["policies"] if p["kind"] != "drain"]
    assert ctl.apply(doc, "-m", "undrain")["state"] == "committed"
    in_kernels(ctl)
    seen = len(_reactions(ctl))
    runner.node_exec(LAB, "leaf-0-0", ["ip", "link", "set", "eth3", "down"])  # leaf-0-0 -> spine-0-0
    try:
        first = until(lambda: len(_reactions(ctl)) > seen and _reactions(ctl)[0], 60, "no reaction was committed")
        assert first["overlay"]["links"] == ["leaf-0-0:eth3"], first["overlay"]
        assert active_plan(ctl)["overlay"]["links"] == ["leaf-0-0:eth3"]
        in_kernels(ctl)
        assert "eth3" not in kernel("leaf-0-0").get("2001:db8:2::/64", {})
    finally:
        runner.node_exec(LAB, "leaf-0-0", ["ip", "link", "set", "eth3", "up"])
    until(lambda: len(_reactions(ctl)) > seen + 1, 90, "the full plan did not return")
    until(lambda: active_plan(ctl)["overlay"] == {"links": [], "devices": []}, 30, "the overlay stays")
    in_kernels(ctl)
    assert not unreachable(ctl)

