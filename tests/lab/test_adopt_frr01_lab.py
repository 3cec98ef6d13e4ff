"""Adoption of an OSPF lab as containerlab users write it, without a blip.

``tests/lab/fixtures/adopt_frr01``: three FRR routers in a triangle and a PC behind each (on the routers'
``eth3``), kinds and images from ``kinds`` and ``groups``, configurations bound as directories, the PCs set up
by ``exec``, both link syntaxes. The routers run OSPF the way most public labs do, not Loom's way: broadcast
links (FRR's default network type) with 2 s hellos and 8 s dead intervals, OSPF enabled by ``network ... area``
statements that cover several subnets, a router-level ``passive-interface``, ``frr defaults traditional``.
Discovery keeps each router's form (``devices[].ospf``: network type, intervals, the statements) and the ports
its subnets are on (``devices[].host_ports``), since FRR resets an adjacency whose type changes, drops one while
its ends' intervals differ, takes ``network`` statements or ``ip ospf area`` but not both, and a subnet moved
to another port is a forwarding change. So the adoption review is cosmetic, the adoption changes no router's
kernel routes (sampled every 50 ms), loses no ping and drops no adjacency; then a drain and a metric change
work as on a Loom-built lab.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from controller.model.intent import validate_intent
from tests.adoptkit import REPO, AdoptLab, Routes, adopt_cleanly, best_routes, served, until

FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_frr01" / "topology.clab.yml"
LAB = "adopt-frr01"
NODES = ("r1", "r2", "r3")
HOSTS = ("pc1", "pc2", "pc3")
TOKEN = "adopt-" + "Fr01Kq8Rw2Zt6Mx0Hb4Pv7Lc1Gd3Sj9Y"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    yield from served(tmp_path_factory, LAB, FIXTURE, NODES, HOSTS, TOKEN)


def routes(node: str) -> Routes:
    return best_routes(LAB, node)


def all_routes() -> dict[str, Routes]:
    return {n: routes(n) for n in NODES}


def adjacencies(lab: AdoptLab, node: str) -> dict[str, tuple[str, int, int]]:
    """neighbour router id -> (state, state changes, ms since it came up): one that dropped changes state."""
    detail = lab.vtysh(node, "show ip ospf neighbor detail json")["neighbors"]
    brief = lab.vtysh(node, "show ip ospf neighbor json")["neighbors"]
    return {rid: (ns[0]["nbrState"].split("/")[0], int(ns[0]["stateChangeCounter"]),
                  int(brief[rid][0]["upTimeInMsec"])) for rid, ns in detail.items()}


def test_an_ospf_lab_as_users_write_it_is_discovered_in_its_own_form(lab: AdoptLab) -> None:
    for pc, dst in (("pc1", "192.168.3.10"), ("pc2", "192.168.1.10"), ("pc3", "192.168.2.10")):
        assert lab.ping(pc, dst), (pc, dst)
    out = lab.base / "intent.yaml"
    found = lab.discover(str(FIXTURE), "--out", str(out))
    intent = validate_intent(yaml.safe_load(out.read_text()))
    assert intent.routing.value == "ospf" and len(intent.links) == 3
    assert {p.prefix: p.origins for p in intent.prefixes} == {
        "10.255.0.1/32": ("r1",), "10.255.0.2/32": ("r2",), "10.255.0.3/32": ("r3",),
        "192.168.1.0/24": ("r1",), "192.168.2.0/24": ("r2",), "192.168.3.0/24": ("r3",)}
    devices = {d["name"]: d for d in found["intent"]["devices"]}
    for k, name in enumerate(NODES, start=1):
        assert devices[name]["ospf"] == {"network_type": "broadcast", "hello_s": 2, "dead_s": 8, "networks": [
            "10.0.0.0/16", f"10.255.0.{k}/32", f"192.168.{k}.0/24"]}, devices[name]
        assert devices[name]["host_ports"] == [{"port": "eth3", "addresses": [f"192.168.{k}.1/24"]}]
        assert devices[name]["role"] == "router"  # a triangle is no Clos: shortest paths need no tiers
    assert [q["where"] for q in found["questions"]] == ["links"], found["questions"]  # veths report no speed


def test_adoption_changes_no_forwarding_and_drops_no_adjacency(lab: AdoptLab) -> None:
    """Every difference is cosmetic, even the costs Loom writes out: they are what ospfd computes from the
    speeds now."""
    up = {n: adjacencies(lab, n) for n in NODES}
    assert all(a[0] == "Full" for n in NODES for a in up[n].values()) and all(len(up[n]) == 2 for n in NODES), up
    seen = adopt_cleanly(lab, lab.base / "intent.yaml", all_routes, "pc1", "192.168.3.10")
    after = {n: adjacencies(lab, n) for n in NODES}
    for n in NODES:  # the same neighbours, still Full, no state change, up all along
        assert {r: a[:2] for r, a in after[n].items()} == {r: a[:2] for r, a in up[n].items()}, (n, up[n], after[n])
        assert all(after[n][r][2] > up[n][r][2] for r in up[n]), (n, up[n], after[n])
    running = lab.vtysh_text("r1", "show running-config")
    assert "description to r2:eth1" in running and "network 10.0.0.0/16 area 0.0.0.0" in running, running
    print(f"frr01-style OSPF adoption: {seen.summary()}; none differing, adjacencies kept")


def test_drain_and_metric_after_adoption(lab: AdoptLab) -> None:
    """A drained link has no adjacency (passive, since a network statement covers it); a metric moves r1's path
    to r3's PC over r2."""
    doc = yaml.safe_load((lab.base / "intent.yaml").read_text())
    doc["policies"] = [{"kind": "drain", "target": "r1:eth2"}]
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    got = until(lambda: routes("r1"), "192.168.3.0/24", lambda r: [h[1] for h in r[1]] == ["eth1"])
    assert got is not None and [h[1] for h in got[1]] == ["eth1"], got
    assert lab.ping("pc1", "192.168.3.10")
    doc["policies"] = []
    for link in doc["links"]:
        if {link["a"], link["b"]} == {"r1", "r3"}:
            link["metric"] = 100
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    got = until(lambda: routes("r1"), "192.168.3.0/24", lambda r: [h[1] for h in r[1]] == ["eth1"])
    assert got is not None and [h[1] for h in got[1]] == ["eth1"], got
    assert lab.ping("pc1", "192.168.3.10")
