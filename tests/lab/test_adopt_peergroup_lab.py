"""Discovery and adoption of an unnumbered eBGP leaf-spine written with peer-groups, without a blip.

``tests/lab/fixtures/adopt_peergroup``: every session is ``neighbor ethN interface peer-group FABRIC`` with
``remote-as external`` on the group (not ``v6only``), and the leaves originate by ``redistribute connected``.
Discovery gives the intent it gives for the same fabric written session by session, and keeps the form each
router runs (``devices[].bgp``: the peer-group, ``remote-as external``, not ``v6only``, redistribution): FRR
deletes a peer that leaves its group, resets a session whose remote-as or v6only changes, and withdraws what
``redistribute connected`` announced for the moment before a ``network`` replaces it. So the review of the
adoption is cosmetic, and the adoption itself changes no router's kernel routes in either family (sampled
every 50 ms), loses no ping and resets no session; a re-weighting and a drain then work through the group.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from controller.model.intent import validate_intent
from tests import adoptkit
from tests.adoptkit import REPO, AdoptLab, Routes, adopt_cleanly, check_drain, check_reweighting, served

FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_peergroup"
LAB = "adopt-pg"
NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("h1", "h2")
TOKEN = "adopt-" + "Pg7Rk2Wm9Tx4Lb6Vn1Qs8Hd3Fz5Jc0Ya"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    yield from served(tmp_path_factory, LAB, FIXTURE, NODES, HOSTS, TOKEN)


def routes(node: str) -> Routes:
    return adoptkit.routes(LAB, node)


def sessions(lab: AdoptLab, node: str) -> dict[str, tuple[str, int, int]]:
    """peer -> (state, sessions established, sessions dropped) since bgpd started."""
    peers = lab.vtysh(node, "show bgp ipv6 unicast summary json")["peers"]
    return {p: (v["state"], v["connectionsEstablished"], v["connectionsDropped"]) for p, v in peers.items()}


def all_routes() -> dict[str, Routes]:
    return {n: routes(n) for n in NODES}


def test_a_peer_group_fabric_is_discovered_in_its_own_form(lab: AdoptLab) -> None:
    assert lab.ping("h1", "172.16.2.10") and lab.ping("h1", "2001:db8:2::10")
    out = lab.base / "intent.yaml"
    found = lab.discover(str(FIXTURE), "--out", str(out))
    intent = validate_intent(yaml.safe_load(out.read_text()))
    assert found["intent"]["defaults"] == {"underlay": "unnumbered"} and len(intent.links) == 4
    assert {p.prefix: p.origins for p in intent.prefixes} == {
        "10.0.0.1/32": ("spine1",), "10.0.0.2/32": ("spine2",), "10.0.0.11/32": ("leaf1",),
        "10.0.0.12/32": ("leaf2",), "172.16.1.0/24": ("leaf1",), "172.16.2.0/24": ("leaf2",),
        "2001:db8:1::/64": ("leaf1",), "2001:db8:2::/64": ("leaf2",), "fd00::1/128": ("spine1",),
        "fd00::2/128": ("spine2",), "fd00::11/128": ("leaf1",), "fd00::12/128": ("leaf2",)}
    grouped = {"peer_group": "FABRIC", "remote_as": "external", "v6only": False}
    assert {d["name"]: d.get("bgp") for d in found["intent"]["devices"]} == {
        "leaf1": {**grouped, "originate": "redistribute-connected"},
        "leaf2": {**grouped, "originate": "redistribute-connected"}, "spine1": grouped, "spine2": grouped}
    assert [q["where"] for q in found["questions"]] == ["links"], found["questions"]  # veths report no speed


def test_adoption_changes_no_forwarding_and_resets_no_session(lab: AdoptLab) -> None:
    established = {n: sessions(lab, n) for n in NODES}
    assert all(s[0] == "Established" for n in NODES for s in established[n].values()), established
    seen = adopt_cleanly(lab, lab.base / "intent.yaml", all_routes, "h1", "172.16.2.10")
    assert {n: sessions(lab, n) for n in NODES} == established
    running = lab.vtysh_text("leaf1", "show running-config")
    assert "neighbor eth1 interface peer-group FABRIC" in running and "redistribute connected" in running, running
    assert "neighbor eth1 description spine1 via eth1" in running, running  # Loom's rendering runs now
    assert lab.ping("h1", "2001:db8:2::10")
    print(f"peer-group adoption: {seen.summary()}; none differing, sessions unchanged")


def test_reweighting_and_drain_after_adoption(lab: AdoptLab) -> None:
    """Through the peer-group: each member's link-bandwidth route map, then a drained spine's deny maps."""
    check_reweighting(lab, lambda: routes("leaf1"), fast="eth2", slow="eth1", spine="spine1", src="leaf1",
                      prefix="172.16.2.0/24")
    check_drain(lab, lambda: routes("leaf1"), spine="spine1", prefix="172.16.2.0/24", port_left="eth2")
