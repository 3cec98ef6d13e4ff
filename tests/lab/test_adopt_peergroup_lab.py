"""Discovery and the adoption review of an unnumbered eBGP leaf-spine written with peer-groups.

``tests/lab/fixtures/adopt_peergroup``: every session is ``neighbor ethN interface peer-group FABRIC`` with
``remote-as external`` on the group, the leaves originate by ``redistribute connected``. Discovery gives the
intent it gives for the same fabric written session by session, and asks about every session configured
through the group: Loom renders each session on its own lines and FRR deletes a peer that leaves its group,
so adopting would reset it. The review of the adoption names those lines before anything is pushed, and a
review pushes nothing (every router's kernel routes and every session's counters are as before).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from controller.model.intent import validate_intent
from labs import runner
from tests.adoptkit import REPO, AdoptLab, Routes, hops, served

FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_peergroup"
LAB = "adopt-pg"
NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("h1", "h2")
TOKEN = "adopt-" + "Pg7Rk2Wm9Tx4Lb6Vn1Qs8Hd3Fz5Jc0Ya"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    yield from served(tmp_path_factory, LAB, FIXTURE, NODES, HOSTS, TOKEN)


def routes(node: str) -> Routes:
    return {r["dst"]: (r.get("protocol", ""), hops(r)) for family in ("-4", "-6")
            for r in json.loads(runner.node_exec(LAB, node, ["ip", family, "-j", "route", "show", "table", "main"]))}


def sessions(lab: AdoptLab, node: str) -> dict[str, tuple[str, int, int]]:
    """peer -> (state, sessions established, sessions dropped) since bgpd started."""
    peers = lab.vtysh(node, "show bgp ipv6 unicast summary json")["peers"]
    return {p: (v["state"], v["connectionsEstablished"], v["connectionsDropped"]) for p, v in peers.items()}


def test_a_peer_group_fabric_is_discovered_and_its_adoption_reviewed(lab: AdoptLab) -> None:
    assert lab.ping("h1", "172.16.2.10") and lab.ping("h1", "2001:db8:2::10")
    before = {n: routes(n) for n in NODES}
    established = {n: sessions(lab, n) for n in NODES}
    assert all(s[0] == "Established" for n in NODES for s in established[n].values()), established
    out = lab.base / "intent.yaml"
    found = lab.discover(str(FIXTURE), "--out", str(out))
    intent = validate_intent(yaml.safe_load(out.read_text()))
    assert found["intent"]["defaults"] == {"underlay": "unnumbered"} and len(intent.links) == 4
    assert {p.prefix: p.origins for p in intent.prefixes} == {
        "10.0.0.1/32": ("spine1",), "10.0.0.2/32": ("spine2",), "10.0.0.11/32": ("leaf1",),
        "10.0.0.12/32": ("leaf2",), "172.16.1.0/24": ("leaf1",), "172.16.2.0/24": ("leaf2",),
        "2001:db8:1::/64": ("leaf1",), "2001:db8:2::/64": ("leaf2",), "fd00::1/128": ("spine1",),
        "fd00::2/128": ("spine2",), "fd00::11/128": ("leaf1",), "fd00::12/128": ("leaf2",)}
    grouped = sorted((q["where"], q["question"].split(" is ")[0]) for q in found["questions"]
                     if "peer-group FABRIC" in q["question"])
    assert grouped == sorted((f"device {n}", f"BGP neighbor eth{k}") for n in NODES for k in (1, 2)), grouped
    dry = json.loads(lab.cli("apply", str(out), "--dry-run", "--json", check=True).stdout)
    adoption = dry.get("review", dry)["adoption"]
    assert adoption["cosmetic"] is False and adoption["devices"] == list(NODES), adoption
    warned = {(w["device"], w["action"], w["line"]) for w in adoption["warnings"]}
    # frr-reload removes the group (FRR takes its members with it) and writes each session on its own
    assert {(n, "removes", "neighbor FABRIC peer-group") for n in NODES} <= warned, warned
    assert {("leaf1", "adds", "neighbor eth1 interface v6only remote-as 65000"),
            ("spine1", "adds", "neighbor eth1 interface v6only remote-as 65101")} <= warned, warned
    assert {(n, "removes", "redistribute connected") for n in ("leaf1", "leaf2")} <= warned, warned
    assert all("members" in w["effect"] for w in adoption["warnings"] if w["line"] == "neighbor FABRIC peer-group")
    assert before == {n: routes(n) for n in NODES}  # a review pushes nothing
    assert {n: sessions(lab, n) for n in NODES} == established
