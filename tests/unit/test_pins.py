"""Pinned link addresses and router ids (DESIGN.md "Adoption"): validated with located errors, kept
exactly by the allocation and the renderer, and nothing allocated collides with them."""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

import pytest

from controller.model.addressing import LINK_POOL, allocate
from controller.model.errors import InvalidIntent
from controller.model.intent import dump_intent, parse_intent_text, validate_intent
from southbound.render import device_configs, render_frr


def _doc() -> dict[str, Any]:
    return {"name": "x", "devices": [
        {"name": "t0", "role": "tor", "asn": 65100, "router_id": "192.168.255.1"},
        {"name": "s0", "role": "leaf", "asn": 65000}],
        "links": [{"a": "t0", "a_port": "eth1", "b": "s0", "b_port": "eth1",
                   "a_address": "192.168.1.1/30", "b_address": "192.168.1.2/30"},
                  {"a": "t0", "a_port": "eth2", "b": "s0", "b_port": "eth2"}],
        "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["t0"]}]}


def _errors(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidIntent) as exc:
        validate_intent(doc)
    return [str(e) for e in exc.value.errors]


def test_pins_are_kept_exactly_in_configs_and_frr():
    intent = validate_intent(_doc())
    configs = device_configs(intent)
    t0, s0 = configs["t0"], configs["s0"]
    assert t0.router_id == "192.168.255.1"
    assert t0.interface("eth1").address == "192.168.1.1/30"
    assert s0.interface("eth1").address == "192.168.1.2/30"
    assert [n.address for n in t0.neighbors if n.port == "eth1"] == ["192.168.1.2"]
    text = render_frr(t0)
    assert " bgp router-id 192.168.255.1" in text and " ip address 192.168.1.1/30" in text
    # the unpinned link is allocated from the pool as before
    assert ipaddress.IPv4Interface(t0.interface("eth2").address).network.subnet_of(LINK_POOL)


def test_document_round_trips_and_omits_absent_pins():
    intent = validate_intent(_doc())
    again = validate_intent(parse_intent_text(dump_intent(intent)))
    assert again == intent
    assert "a_address" not in intent.to_document()["links"][1]
    assert "router_id" not in intent.to_document()["devices"][1]


def test_allocation_skips_pinned_and_avoids_their_slots():
    doc = _doc()
    free = validate_intent({**doc, "links": [dict(doc["links"][1])]})
    home = allocate(free).link_addresses(free.links[0])
    # pin the first link onto exactly the /31 the second would have had at home
    lo = ipaddress.IPv4Interface(min(home)).ip
    doc["links"][0].update(a_address=f"{lo}/31", b_address=f"{lo + 1}/31")
    intent = validate_intent(doc)
    alloc = allocate(intent)
    assert len(alloc.links) == 1  # the pinned link takes no slot
    got = alloc.link_addresses(intent.links[1])
    assert set(got).isdisjoint({f"{lo}/31", f"{lo + 1}/31"})
    assert alloc.link_addresses(intent.links[0]) == (f"{lo}/31", f"{lo + 1}/31")
    assert "t0" not in alloc.devices


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["links"][0].update(b_address="192.168.2.2/30"),
     "links[0].b_address: 192.168.2.2/30 is not on the subnet of a_address"),
    (lambda d: d["links"][0].pop("b_address"), "links[0].b_address: pin both ends' addresses or neither"),
    (lambda d: d["links"][0].update(a_address="192.168.1.0/30"),
     "links[0].a_address: 192.168.1.0 is the network address of 192.168.1.0/30"),
    (lambda d: d["links"][0].update(b_address="192.168.1.1/30"), "links[0].b_address: both ends have the address"),
    (lambda d: d["links"][1].update(a_address="192.168.1.1/29", b_address="192.168.1.3/29"),
     "links[1].a_address: address 192.168.1.1 already used by links[0].a_address"),
    (lambda d: d["links"][1].update(a_address="192.168.1.5/29", b_address="192.168.1.6/29"),
     "links[1].a_address: subnet 192.168.1.0/29 overlaps that of links[0]"),
    (lambda d: d["links"][0].update(a_address="nonsense"), "links[0].a_address: "),
    (lambda d: d["devices"][1].update(router_id="192.168.255.1"),
     "devices[1].router_id: router id 192.168.255.1 already used by 't0'"),
    (lambda d: d["devices"][1].update(router_id="300.1.1.1"), "devices[1].router_id: "),
    (lambda d: d["devices"][1].update(router_id="0.0.0.0"), "devices[1].router_id: 0.0.0.0 cannot be a router id"),
    (lambda d: d["devices"][1].update(loopback="192.168.255.1"),
     "devices[0].router_id: router id 192.168.255.1 is the loopback of 's0'"),
])
def test_bad_pins_are_located(mutate, expected):
    doc = copy.deepcopy(_doc())
    mutate(doc)
    errors = _errors(doc)
    assert len(errors) == 1 and errors[0].startswith(expected), errors


@pytest.mark.parametrize(("pins", "expected"), [
    ([{"port": "eth3", "addresses": ["10.0.0.9/24"]}], []),
    ([{"port": "eth1", "addresses": ["10.0.0.9/24"]}],
     ["devices[0].host_ports[0].port: eth1 is a link's port of 't0'"]),
    ([{"port": "eth3", "addresses": ["10.0.1.1/24"]}],
     ["devices[0].host_ports[0].addresses[0]: 10.0.1.1/24 is in no prefix 't0' originates (its subnet 10.0.1.0/24 "
      "must be one)"]),
    ([{"port": "eth3", "addresses": ["10.0.0.9/24"]}, {"port": "eth4", "addresses": ["10.0.0.7/24"]}],
     ["devices[0].host_ports[1].addresses[0]: 10.0.0.0/24 is on eth3 already"]),
    ([{"port": "eth3", "addresses": ["10.0.0.9/24"]}, {"port": "eth3", "addresses": ["10.0.0.7/24"]}],
     ["devices[0].host_ports[1].port: eth3 is pinned twice", "devices[0].host_ports[1].addresses[0]: 10.0.0.0/24 "
      "is on eth3 already"]),
    ([{"port": "eth3", "addresses": ["10.0.0.9/24", "10.0.0.8/24"]}],
     ["devices[0].host_ports[0].addresses: at most one address of each family"]),
])
def test_host_port_pins_are_located_and_kept(pins, expected):
    doc = _doc()
    doc["devices"][0]["host_ports"] = pins
    if expected:
        got = _errors(doc)
        assert got == expected, got
        return
    text = render_frr(device_configs(validate_intent(doc))["t0"])
    assert "interface eth3\n description host subnet\n ip address 10.0.0.9/24\n" in text and "host0" not in text
    kept = validate_intent(doc).to_document()["devices"][0]["host_ports"]
    assert kept == [{"port": "eth3", "addresses": ["10.0.0.9/24"]}]  # the document round-trips the pin
