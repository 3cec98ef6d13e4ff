"""Discovery of a running fabric on a BGP unnumbered underlay (#36), through its namespaces.

``tests/lab/fixtures/adopt_unnumbered`` is the hand-written leaf-spine of ``adopt_bgp`` with no link
addresses: every session is ``neighbor ethN interface remote-as external`` over the ports' IPv6
link-local addresses, with IPv4 and IPv6 host subnets and loopbacks announced. ``labs.discover``
reads each router's running configuration, addresses and IPv6 neighbours in its namespace; the
discovered intent is valid on ``defaults.underlay: unnumbered``, has exactly the topology's four
links (paired by the link-local addresses each end's kernel sees), no link pins, and both
families' prefixes and loopbacks as the routers announce them.

Its hosts are dual-stack (their IPv6 addresses set by ``exec``, read back from their namespaces by
``lab_hosts``): lab traffic to an IPv6 prefix goes over IPv6, and the ToR's agent counts every byte of
it at its gNMI ``ipv6-entry``, as it counts the IPv4 demand's at the ``ipv4-entry``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from controller.model.intent import validate_intent
from labs import runner
from labs.clab import Topology, load_topology
from labs.discover import observe_lab
from labs.traffic import lab_hosts, send, validate_matrix
from southbound.discovery.infer import discover
from southbound.gnmi import GnmiClient
from tests import adoptkit
from tests.adoptkit import REPO, AdoptLab, Routes, adopt_cleanly, served

FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_unnumbered"
LAB = "adopt-un"


NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("h1", "h2")
TOKEN = "adopt-" + "Un5Kq8Rw2Zt6Mx0Hb4Pv7Lc1Gd3Sj9Fy"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    yield from served(tmp_path_factory, LAB, FIXTURE, NODES, HOSTS, TOKEN)


@pytest.fixture(scope="module")
def topo(lab: AdoptLab) -> Topology:
    return load_topology(FIXTURE)


def test_an_unnumbered_lab_is_discovered_on_its_underlay(topo: Topology) -> None:
    found = discover(observe_lab(topo), name=LAB)
    assert found.valid, found.questions
    # veth links have no physical speed; remote-as external on plain interface sessions is kept as the form
    assert [q.where for q in found.questions] == ["links"], found.questions
    doc = found.intent
    assert {d["bgp"]["remote_as"] for d in doc["devices"]} == {"external"}
    assert doc["defaults"] == {"underlay": "unnumbered"}
    got = {frozenset({(lk["a"], lk["a_port"]), (lk["b"], lk["b_port"])}) for lk in doc["links"]}
    routers = {n.name for n in topo.routers}
    want = {frozenset({(lk.a, lk.a_port), (lk.b, lk.b_port)}) for lk in topo.links if {lk.a, lk.b} <= routers}
    assert got == want and len(got) == 4
    assert not any("a_address" in lk for lk in doc["links"])
    intent = validate_intent(doc)
    assert {p.prefix: p.origins for p in intent.prefixes} == {
        "10.0.0.1/32": ("spine1",), "10.0.0.2/32": ("spine2",), "10.0.0.11/32": ("leaf1",),
        "10.0.0.12/32": ("leaf2",), "172.16.1.0/24": ("leaf1",), "172.16.2.0/24": ("leaf2",),
        "2001:db8:1::/64": ("leaf1",), "2001:db8:2::/64": ("leaf2",), "fd00::1/128": ("spine1",),
        "fd00::2/128": ("spine2",), "fd00::11/128": ("leaf1",), "fd00::12/128": ("leaf2",)}
    assert {d.name: (d.role.value, d.asn, str(d.loopback_v6)) for d in intent.devices} == {
        "leaf1": ("leaf", 65101, "fd00::11"), "leaf2": ("leaf", 65102, "fd00::12"),
        "spine1": ("spine", 65000, "fd00::1"), "spine2": ("spine", 65000, "fd00::2")}


AFT = ("/network-instances/network-instance[name=default]/afts/ipv{v}-unicast/ipv{v}-entry[prefix={p}]/"
       "state/counters/{c}")


def aft(v: int, prefix: str) -> str:
    return AFT.format(v=v, p=prefix, c="octets-forwarded")


def counters(node: str) -> dict[str, int]:
    async def get() -> dict[str, int]:
        async with GnmiClient(node, f"unix:{runner.agent_socket(LAB, node)}", timeout=10, max_attempts=1) as c:
            return {s.path: int(s.value) for s in await c.get(["/network-instances"]) if isinstance(s.value, int)}
    return asyncio.run(get())


def test_ipv6_lab_traffic_is_counted_at_the_tors_ipv6_entry(topo: Topology) -> None:
    hosts = lab_hosts(topo)
    assert {n: (h.address6, h.prefix6) for n, h in hosts.items()} == {
        "h1": ("2001:db8:1::10", "2001:db8:1::/64"), "h2": ("2001:db8:2::10", "2001:db8:2::/64")}
    runner.start_agents(topo)
    demands = validate_matrix([{"from": "leaf1", "to": "2001:db8:2::/64", "gbps": 0.02},
                               {"from": "leaf1", "to": "172.16.2.0/24", "gbps": 0.01}], hosts)
    before = counters("leaf1")
    assert aft(6, "2001:db8:2::/64") in before and aft(4, "172.16.2.0/24") in before
    report = send(topo, demands, 2.0)
    after = counters("leaf1")
    assert report.failed == {}
    v6, v4 = report.demand_totals()
    assert v6["bytes"] > 0 and v6["errors"] == 0 and v4["bytes"] > 0
    print(f"leaf1 ipv6-entry 2001:db8:2::/64: {after[aft(6, '2001:db8:2::/64')] - before[aft(6, '2001:db8:2::/64')]} "
          f"octets counted, {v6['bytes']} sent ({v6['achieved_gbps']} Gb/s); ipv4-entry 172.16.2.0/24: "
          f"{after[aft(4, '172.16.2.0/24')] - before[aft(4, '172.16.2.0/24')]} counted, {v4['bytes']} sent")
    assert after[aft(6, "2001:db8:2::/64")] - before[aft(6, "2001:db8:2::/64")] == v6["bytes"]
    assert after[aft(4, "172.16.2.0/24")] - before[aft(4, "172.16.2.0/24")] == v4["bytes"]


def routes(node: str) -> Routes:
    return adoptkit.routes(LAB, node)


def all_routes() -> dict[str, Routes]:
    return {n: routes(n) for n in NODES}


def test_a_remote_as_external_fabric_is_adopted_without_a_blip(lab: AdoptLab) -> None:
    """``neighbor ethN interface remote-as external`` (no v6only), the prefixes by ``network``: discovery keeps
    that form, so the adoption review is cosmetic, and committing it changes no router's kernel routes in either
    family, loses no ping and resets no BGP session (FRR 8.4 resets one whose remote-as external becomes a
    number, or whose v6only changes)."""
    path = lab.base / "intent.yaml"
    lab.discover(str(FIXTURE), "--out", str(path))
    established = {n: _sessions(lab, n) for n in NODES}
    assert all(s[0] == "Established" for n in NODES for s in established[n].values()), established
    seen = adopt_cleanly(lab, path, all_routes, "h1", "2001:db8:2::10")
    assert {n: _sessions(lab, n) for n in NODES} == established
    running = lab.vtysh_text("spine1", "show running-config")
    assert "neighbor eth1 interface remote-as external" in running and "description leaf1 via eth1" in running
    print(f"remote-as external adoption: {seen.summary()}; none differing, sessions unchanged")


def _sessions(lab: AdoptLab, node: str) -> dict[str, tuple[str, int, int]]:
    peers = lab.vtysh(node, "show bgp ipv6 unicast summary json")["peers"]
    return {p: (v["state"], v["connectionsEstablished"], v["connectionsDropped"]) for p, v in peers.items()}
