"""Adoption of an IS-IS leaf-spine as public labs write it, without a blip.

``tests/lab/fixtures/adopt_isis_clab``: ``router isis FABRIC`` with NETs of its own (not derived from a router
id), FRR's default level (level-1-2), broadcast links (FRR's default network type, so a DIS per link) at FRR's
default hellos (3 s, x10), /24 link subnets, hosts on the leaves' ``eth3``, ``frr defaults traditional``.
Discovery keeps each router's form (``devices[].isis``: tag, NET, level, network type, hellos) and the ports its
subnets are on: FRR starts a new instance for another tag, resets adjacencies for another system id or level,
resets one whose network type changes and drops one while its ends' hold times differ. So the adoption review
is cosmetic, and the adoption changes no router's kernel routes (sampled every 50 ms), loses no ping and flaps no
adjacency; then a drain works as on a Loom-built lab.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import yaml

from controller.model.intent import validate_intent
from tests.adoptkit import REPO, AdoptLab, Routes, adopt_cleanly, best_routes, served, until

FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_isis_clab"
LAB = "adopt-isis"
NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("h1", "h2")
TOKEN = "adopt-" + "Is1sKq8Rw2Zt6Mx0Hb4Pv7Lc1Gd3Sj9Y"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    yield from served(tmp_path_factory, LAB, FIXTURE, NODES, HOSTS, TOKEN)


def routes(node: str) -> Routes:
    return best_routes(LAB, node)


def all_routes() -> dict[str, Routes]:
    return {n: routes(n) for n in NODES}


_ADJ = re.compile(r"^ (\S+)\s*\n\s+Interface: (\S+), Level: (\d), State: (\S+),.*\n\s+Adjacency flaps: (\d+)", re.M)


def adjacencies(lab: AdoptLab, node: str) -> dict[tuple[str, str, str], tuple[str, int]]:
    """(neighbour, port, level) -> (state, flaps): an adjacency that dropped and came back counts a flap."""
    text = lab.vtysh_text(node, "show isis neighbor detail")
    return {(m[0], m[1], m[2]): (m[3], int(m[4])) for m in _ADJ.findall(text)}


def test_an_isis_lab_as_users_write_it_is_discovered_in_its_own_form(lab: AdoptLab) -> None:
    assert lab.ping("h1", "192.168.12.10")
    out = lab.base / "intent.yaml"
    found = lab.discover(str(FIXTURE), "--out", str(out))
    intent = validate_intent(yaml.safe_load(out.read_text()))
    assert intent.routing.value == "isis" and len(intent.links) == 4
    devices = {d["name"]: d for d in found["intent"]["devices"]}
    for name, k in (("spine1", 1), ("spine2", 2), ("leaf1", 11), ("leaf2", 12)):
        assert devices[name]["isis"] == {"tag": "FABRIC", "net": f"49.0001.0000.0000.{k:04d}.00",
                                         "is_type": "level-1-2", "network_type": "broadcast", "hello_s": 3,
                                         "hello_multiplier": 10}, devices[name]
    assert devices["leaf1"]["host_ports"] == [{"port": "eth3", "addresses": ["192.168.11.1/24"]}]
    assert [q["where"] for q in found["questions"]] == ["links"], found["questions"]  # veths report no speed


def test_adoption_changes_no_forwarding_and_flaps_no_adjacency(lab: AdoptLab) -> None:
    up = {n: adjacencies(lab, n) for n in NODES}
    assert all(a[0] == "Up" for n in NODES for a in up[n].values()) and sum(len(a) for a in up.values()) == 16, up
    seen = adopt_cleanly(lab, lab.base / "intent.yaml", all_routes, "h1", "192.168.12.10")
    assert {n: adjacencies(lab, n) for n in NODES} == up  # the same adjacencies, Up, not one flap more
    running = lab.vtysh_text("leaf1", "show running-config")
    assert "description to spine1:eth1" in running and "router isis FABRIC" in running, running
    print(f"IS-IS adoption: {seen.summary()}; none differing, 16 adjacency ends Up with no flap")


def test_drain_after_adoption(lab: AdoptLab) -> None:
    """A drained spine sets the overload bit: the leaves reach each other through the other spine."""
    doc = yaml.safe_load((lab.base / "intent.yaml").read_text())
    doc["policies"] = [{"kind": "drain", "target": "spine1"}]
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    got = until(lambda: routes("leaf1"), "192.168.12.0/24", lambda r: [h[1] for h in r[1]] == ["eth2"])
    assert got is not None and [h[1] for h in got[1]] == ["eth2"], got
    assert lab.ping("h1", "192.168.12.10")
