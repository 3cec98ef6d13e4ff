"""Discovery of a running fabric on a BGP unnumbered underlay (#36), through its namespaces.

``tests/lab/fixtures/adopt_unnumbered`` is the hand-written leaf-spine of ``adopt_bgp`` with no link
addresses: every session is ``neighbor ethN interface remote-as external`` over the ports' IPv6
link-local addresses, with IPv4 and IPv6 host subnets and loopbacks announced. ``labs.discover``
reads each router's running configuration, addresses and IPv6 neighbours in its namespace; the
discovered intent is valid on ``defaults.underlay: unnumbered``, has exactly the topology's four
links (paired by the link-local addresses each end's kernel sees), no link pins, and both
families' prefixes and loopbacks as the routers announce them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.model.intent import validate_intent
from labs import runner
from labs.clab import Topology, load_topology
from labs.discover import observe_lab
from southbound.discovery.infer import discover
from tests.adoptkit import REPO

FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_unnumbered"
LAB = "adopt-un"


@pytest.fixture(scope="module")
def topo() -> Iterator[Topology]:
    t = load_topology(FIXTURE)
    names = [n.name for n in t.nodes]
    runner.down(LAB, names)  # a lab left by an earlier run that was killed
    try:
        report = runner.up(t, timeout=90)
        assert report.converged, report.problems
        yield t
    finally:
        runner.down(LAB, names)


def test_an_unnumbered_lab_is_discovered_on_its_underlay(topo: Topology) -> None:
    found = discover(observe_lab(topo), name=LAB)
    assert found.valid, found.questions
    assert [q.where for q in found.questions] == ["links"]  # only: veth links have no physical speed
    doc = found.intent
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
