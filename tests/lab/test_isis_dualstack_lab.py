"""An IS-IS ring carries both families (#36): IPv4 over the links' /31s, IPv6 over their link-local addresses.

Four routers in a ring (``r1``-``r2``-``r3``-``r4``-``r1``, one link with a higher metric), each originating an
IPv4 and an IPv6 prefix with a host behind it, ``routing: isis`` on the default ``ipv4-numbered`` underlay,
WCMP through ``fib`` nexthop groups (the link-state routings' default) and ``paths: loop_free`` so the plan
may leave shortest paths. ``loom apply`` commits it through ``loom serve --lab``; every router's kernel then
holds, in both families, exactly the plan's next hops and weights (IPv6 ones through the peers' link-local
addresses), and every host reaches every other over IPv4 and IPv6. A link taken down in its namespace makes
the leader plan around it in both families. The lab and the controller are torn down in the finalizer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from labs import runner
from tests import dualstack
from tests.dualstack import until
from tests.labkit import ServedLab, served_lab

LAB = "isis6"
TOKEN = "isis6-" + "Tk2Pw7Lz4Qm9Vb1Rx6Ns3Hd8Fy5Jc0Ga"
ROUTERS = ("r1", "r2", "r3", "r4")


def ring_doc() -> dict[str, Any]:
    devices = [{"name": r, "role": "router"} for r in ROUTERS]
    links = []
    for k, r in enumerate(ROUTERS):
        nxt = ROUTERS[(k + 1) % len(ROUTERS)]
        links.append({"a": r, "a_port": "eth2", "b": nxt, "b_port": "eth1", "capacity_gbps": 10.0,
                      "metric": 30 if r == "r4" else 10})
    prefixes = [{"prefix": f"10.9.{k}.0/24", "origins": [r]} for k, r in enumerate(ROUTERS)]
    prefixes += [{"prefix": f"2001:db8:9:{k}::/64", "origins": [r]} for k, r in enumerate(ROUTERS)]
    demands = [{"from": "r1", "to": "10.9.2.0/24", "gbps": 6.0}, {"from": "r1", "to": "2001:db8:9:2::/64", "gbps": 6.0},
               {"from": "r2", "to": "2001:db8:9:3::/64", "gbps": 3.0}, {"from": "r4", "to": "10.9.1.0/24", "gbps": 3.0}]
    return {"name": LAB, "routing": "isis", "devices": devices, "links": links, "prefixes": prefixes,
            "demands": demands,
            "policies": [{"kind": "paths", "mode": "loop_free"}, {"kind": "utilization_limit", "max": 0.95},
                         {"kind": "failure_reaction", "detect_s": 0.5, "hold_down_s": 3}]}


@pytest.fixture(scope="module")
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedLab]:
    lab = ServedLab(tmp_path_factory.mktemp(LAB), LAB, ring_doc(), TOKEN, hosts=1,
                    env={"LOOM_CONFIRM_WITHIN": "90", "LOOM_VERIFY_TIMEOUT": "45"})
    with served_lab(lab) as c:
        yield c


def mismatches(ctl: ServedLab) -> list[str]:
    return dualstack.mismatches(LAB, ctl.get("/v1/plans/active"), "fib")


def unreachable(ctl: ServedLab) -> list[str]:
    return dualstack.unreachable(json.loads(ctl.cli("lab", "hosts", str(ctl.path), "--json", check=True).stdout))


def test_the_ring_commits_and_both_families_hold_the_plan(ctl: ServedLab) -> None:
    ch = ctl.apply(ctl.doc, "-m", "dual-stack ring")
    assert ch["state"] == "committed", ch
    plan = ctl.get("/v1/plans/active")
    r1 = plan["devices"]["r1"]
    assert len(r1["groups"][r1["routes"]["2001:db8:9:2::/64"]]) == 2  # r3 both ways round, weighted
    until(lambda: not mismatches(ctl), 60, "the kernels do not hold the plan", lambda: mismatches(ctl)[:6])
    six = dualstack.kernel(LAB, "r1")["2001:db8:9:2::/64"]
    assert set(six) == {"eth1", "eth2"}, six
    until(lambda: not unreachable(ctl), 30, "some hosts cannot reach each other", lambda: unreachable(ctl))


def test_a_failed_link_is_planned_around_in_both_families(ctl: ServedLab) -> None:
    runner.node_exec(LAB, "r2", ["ip", "link", "set", "eth2", "down"])  # r2 - r3
    try:
        until(lambda: ctl.get("/v1/plans/active")["overlay"]["links"] == ["r2:eth2"], 60, "no reaction was committed")
        until(lambda: not mismatches(ctl), 60, "the kernels do not hold the reaction", lambda: mismatches(ctl)[:6])
        assert "eth2" not in dualstack.kernel(LAB, "r2").get("2001:db8:9:2::/64", {})
        assert not unreachable(ctl)
    finally:
        runner.node_exec(LAB, "r2", ["ip", "link", "set", "eth2", "up"])
    until(lambda: ctl.get("/v1/plans/active")["overlay"] == {"links": [], "devices": []}, 90,
          "the full plan did not return")
    until(lambda: not mismatches(ctl), 60, "the kernels do not hold the full plan", lambda: mismatches(ctl)[:6])
