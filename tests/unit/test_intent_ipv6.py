"""Intents of either family (#36): IPv6 prefixes, loopbacks and link pins, ``defaults.underlay``, the family
rules of each routing located at the field to change, and the device configs each underlay gives."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controller.model.addressing import LINK6_POOL, allocate
from controller.model.errors import InvalidIntent
from controller.model.intent import validate_intent
from southbound.render import device_configs
from tests.unit.test_safety_replay import clos_doc


def _dual(underlay: str | None = "unnumbered", routing: str = "bgp") -> dict[str, Any]:
    doc = clos_doc(1, 2, 2, 1)
    doc["routing"] = routing
    if underlay is not None:
        doc["defaults"] = {"underlay": underlay}
    doc["prefixes"].append({"prefix": "2001:DB8:0:1::/64", "origins": ["tor-0-0"]})
    doc["demands"].append({"from": "tor-0-1", "to": "2001:db8:0:1::/64", "gbps": 1.0})
    return doc


def _errors(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidIntent) as exc:
        validate_intent(doc)
    return [f"{e.loc}: {e.msg}" for e in exc.value.errors]


def test_a_dual_stack_intent_is_canonical_and_its_default_underlay_is_left_out_of_the_document() -> None:
    it = validate_intent(_dual())
    assert it.prefixes[-1].prefix == "2001:db8:0:1::/64" and it.prefixes[-1].version == 6
    assert it.demands[-1].to == "2001:db8:0:1::/64"
    assert it.to_document()["defaults"]["underlay"] == "unnumbered"
    v4 = clos_doc(1, 2, 2, 1)
    plain, explicit = validate_intent(v4), validate_intent({**v4, "defaults": {"underlay": "ipv4-numbered"}})
    assert "underlay" not in plain.to_document()["defaults"]
    assert plain.content_hash == explicit.content_hash  # documents before underlays existed hash the same


@pytest.mark.parametrize(("underlay", "routing", "expected"), [
    ("ipv4-numbered", "bgp", "prefixes[2].prefix: 2001:db8:0:1::/64: BGP sessions of defaults.underlay "
                             "ipv4-numbered carry IPv4 only"),
    (None, "bgp", "prefixes[2].prefix: 2001:db8:0:1::/64: BGP sessions"),
    ("ipv4-numbered", "ospf", "prefixes[2].prefix: 2001:db8:0:1::/64: routing ospf (OSPFv2) carries IPv4 only"),
    ("unnumbered", "isis", "defaults.underlay: unnumbered is BGP's"),
    ("ipv6-numbered", "isis", "prefixes[0].prefix: 10.0.0.0/24: routing isis carries IPv4 only over IPv4 link"),
])
def test_a_family_the_fabric_cannot_carry_is_located(underlay: str | None, routing: str, expected: str) -> None:
    errors = _errors(_dual(underlay, routing))
    assert any(e.startswith(expected) for e in errors), errors


def test_isis_carries_ipv6_over_numbered_ipv4_links() -> None:
    it = validate_intent(_dual("ipv4-numbered", "isis"))
    cfg = device_configs(it)["tor-0-0"]
    host = next(i for i in cfg.interfaces if i.host)
    assert (host.address, host.address6) == ("10.0.0.1/24", "2001:db8:0:1::1/64")  # one dual-stack host port


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["devices"][0].update(loopback="2001:db8:ff::1", loopback6="2001:db8:ff::2"),
     "devices[0].loopback6"),
    (lambda d: d["devices"][1].update(loopback6="2001:db8:ff::1") or d["devices"][0].update(loopback6="2001:db8:ff::1"),
     "devices[1].loopback6: loopback 2001:db8:ff::1 already used by 'tor-0-0'"),
    (lambda d: d["devices"][0].update(loopback6="10.255.0.1"), "devices[0].loopback6: "),
    (lambda d: d["devices"][0].update(loopback="not-an-address"), "devices[0].loopback: 'not-an-address' is not"),
    (lambda d: d["links"][0].update(a_address="fd00::0/127", b_address="fd00::1/127"),
     "links[0].a_address: defaults.underlay unnumbered has no link addresses"),
    (lambda d: d.update(defaults={"underlay": "ipv6-numbered"}) or d["links"][0].update(
        a_address="192.168.0.0/31", b_address="192.168.0.1/31"),
     "links[0].a_address: 192.168.0.0/31 is IPv4, and defaults.underlay ipv6-numbered numbers links in IPv6"),
    (lambda d: d["prefixes"].append({"prefix": "::ffff:10.0.0.0/120", "origins": ["tor-0-1"]}),
     "prefixes[3].prefix: '::ffff:10.0.0.0/120' lies in ::ffff:0:0/96"),
    (lambda d: d["prefixes"].append({"prefix": "fe80::/64", "origins": ["tor-0-1"]}),
     "prefixes[3].prefix: 'fe80::/64' lies in fe80::/10"),
    (lambda d: d["prefixes"].append({"prefix": "2001:db8::1/64", "origins": ["tor-0-1"]}),
     "prefixes[3].prefix: host bits set in '2001:db8::1/64': did you mean '2001:db8::/64'?"),
    (lambda d: d["demands"].append({"from": "tor-0-0", "to": "2001:db8:9::/64", "gbps": 1.0}),
     "demands["),
    (lambda d: d.update(defaults={"underlay": "ipv5-numbered"}), "defaults.underlay: "),
])
def test_bad_ipv6_input_is_located(mutate: Any, expected: str) -> None:
    doc = copy.deepcopy(_dual())
    mutate(doc)
    errors = _errors(doc)
    assert any(e.startswith(expected) for e in errors), errors


def test_each_underlay_numbers_links_and_sessions_its_way() -> None:
    v4 = device_configs(validate_intent(_dual("ipv4-numbered", "isis")))["tor-0-0"]
    un = device_configs(validate_intent(_dual("unnumbered")))["tor-0-0"]
    it6 = validate_intent(_dual("ipv6-numbered"))
    v6 = device_configs(it6)["tor-0-0"]
    up4, upu, up6 = (next(i for i in c.interfaces if i.name == "eth1") for c in (v4, un, v6))
    assert up4.address and up4.address.endswith("/31") and up4.address6 is None
    assert upu.address is None and upu.address6 is None
    assert up6.address is None and up6.address6 and up6.address6.endswith("/127")
    assert all(n.address is None and n.key == n.port for n in un.neighbors)  # BGP on the interfaces
    assert all(n.address is not None and ":" in n.address for n in v6.neighbors)
    assert (un.underlay, v6.underlay) == ("unnumbered", "ipv6-numbered")
    # a link's /127 is the slot of its /31: the two numberings move together
    alloc = allocate(it6)
    lk = it6.links[0]
    lo4 = int(alloc.link_addresses(lk)[0].split("/")[0].split(".")[-1]) % 2
    a6 = alloc.link_addresses6(lk)[0]
    assert a6.startswith(str(LINK6_POOL.network_address)[:-1]) and int(a6.split("/")[0].split(":")[-1], 16) % 2 == lo4


def test_an_ipv6_only_device_keeps_a_32_bit_router_id_and_its_ipv6_loopback() -> None:
    doc = _dual()
    doc["devices"][0]["loopback"] = "2001:db8:ff::1"
    it = validate_intent(doc)
    cfg = device_configs(it)[doc["devices"][0]["name"]]
    assert cfg.router_id.count(".") == 3 and cfg.loopback6 == "2001:db8:ff::1"
    doc["prefixes"].append({"prefix": "2001:db8:ff::1/128", "origins": [doc["devices"][0]["name"]]})
    cfg = device_configs(validate_intent(doc))[doc["devices"][0]["name"]]
    assert all(i.address6 != "2001:db8:ff::1/128" for i in cfg.interfaces)  # the loopback's /128 lives on lo


def test_fib_next_hops_of_ipv6_prefixes_over_ipv4_links_are_the_peers_link_local() -> None:
    from solver.solve import solve

    it = validate_intent(_dual("ipv4-numbered", "isis"))
    cfgs = device_configs(it, solve(it))
    routes = {r.prefix: r for r in cfgs["tor-0-1"].fib_routes}
    assert all(h.gateway == "" for h in routes["2001:db8:0:1::/64"].nexthops)
    assert all(h.gateway.count(".") == 3 for h in routes["10.0.0.0/24"].nexthops)
    assert json.loads(json.dumps(cfgs["tor-0-1"].to_document()))["fib_routes"]


def test_a_router_without_ipv6_of_its_own_still_carries_the_fabrics_ipv6() -> None:
    """IS-IS transit: a router in the middle of a dual-stack fabric runs IPv6 on its links though it originates
    none (without it, IPv6 would route around it, or nowhere on a line)."""
    from southbound.render import render_frr

    it = validate_intent(_dual("ipv4-numbered", "isis"))
    leaf = device_configs(it)["leaf-0-0"]  # originates nothing
    assert leaf.ipv6 and not any(i.address6 for i in leaf.interfaces)
    text = render_frr(leaf)
    assert "ipv6 router isis" in text and "ipv6 forwarding" in text
    v4 = device_configs(validate_intent(clos_doc(1, 2, 2, 1) | {"routing": "isis"}))["leaf-0-0"]
    assert not v4.ipv6 and "ipv6" not in render_frr(v4)  # an IPv4 fabric renders as before
