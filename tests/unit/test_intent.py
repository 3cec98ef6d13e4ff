"""Intent validation: one test per rule, each asserting the location and the message."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from controller.model import Intent
from controller.model.errors import InvalidIntent
from controller.model.intent import dump_intent, load_intent, parse_intent_text, validate_intent


def clos_doc() -> dict[str, Any]:
    """A valid RFC 7938 3-tier Clos: 2 pods x 2 ToRs, 2 planes x 1 spine."""
    devices = [
        {"name": "tor-0-0", "role": "tor", "pod": 0, "asn": 65100, "loopback": "10.255.0.1"},
        {"name": "tor-0-1", "role": "tor", "pod": 0, "asn": 65101, "loopback": "10.255.0.2"},
        {"name": "tor-1-0", "role": "tor", "pod": 1, "asn": 65102},
        {"name": "leaf-0-0", "role": "leaf", "pod": 0, "plane": 0, "asn": 65010},
        {"name": "leaf-0-1", "role": "leaf", "pod": 0, "plane": 1, "asn": 65010},
        {"name": "leaf-1-0", "role": "leaf", "pod": 1, "plane": 0, "asn": 65011},
        {"name": "leaf-1-1", "role": "leaf", "pod": 1, "plane": 1, "asn": 65011},
        {"name": "spine-0-0", "role": "spine", "plane": 0, "asn": 65000},
        {"name": "spine-1-0", "role": "spine", "plane": 1, "asn": 65001, "max_ecmp_entries": 64},
    ]
    links = [
        {"a": "tor-0-0", "a_port": "eth1", "b": "leaf-0-0", "b_port": "eth1"},
        {"a": "tor-0-0", "a_port": "eth2", "b": "leaf-0-1", "b_port": "eth1"},
        {"a": "tor-0-1", "a_port": "eth1", "b": "leaf-0-0", "b_port": "eth2"},
        {"a": "tor-0-1", "a_port": "eth2", "b": "leaf-0-1", "b_port": "eth2"},
        {"a": "tor-1-0", "a_port": "eth1", "b": "leaf-1-0", "b_port": "eth1"},
        {"a": "tor-1-0", "a_port": "eth2", "b": "leaf-1-1", "b_port": "eth1"},
        {"a": "leaf-0-0", "a_port": "eth9", "b": "spine-0-0", "b_port": "eth1", "capacity_gbps": 400},
        {"a": "leaf-1-0", "a_port": "eth9", "b": "spine-0-0", "b_port": "eth2", "capacity_gbps": 400},
        {"a": "leaf-0-1", "a_port": "eth9", "b": "spine-1-0", "b_port": "eth1", "capacity_gbps": 400},
        {"a": "leaf-1-1", "a_port": "eth9", "b": "spine-1-0", "b_port": "eth2", "capacity_gbps": 400},
    ]
    return {
        "name": "dc1",
        "routing": "bgp",
        "defaults": {"max_ecmp_entries": 128},
        "devices": devices,
        "links": links,
        "failure_domains": [
            {"name": "plane-0-power", "kind": "power", "devices": ["spine-0-0"], "links": ["leaf-0-1:eth9"]},
        ],
        "prefixes": [
            {"prefix": "10.0.0.0/24", "origins": ["tor-0-0"]},
            {"prefix": "10.0.1.0/24", "origins": ["tor-0-1"]},
            {"prefix": "10.9.0.0/24", "origins": ["tor-0-1", "tor-1-0"]},
        ],
        "policies": [
            {"kind": "drain", "target": "leaf-0-1:eth9"},
            {"kind": "utilization_limit", "max": 0.8},
            {"kind": "failure_tolerance", "scope": "all_single", "max_utilization": 1.0},
            {"kind": "wcmp", "enabled": True, "realization": "link-bandwidth"},
        ],
        "demands": [
            {"from": "tor-1-0", "to": "10.0.0.0/24", "gbps": 25},
            {"from": "tor-0-0", "to": "10.9.0.0/24", "gbps": 5},
        ],
    }


def errors_of(doc: Any) -> list[str]:
    with pytest.raises(InvalidIntent) as info:
        validate_intent(doc)
    return [str(e) for e in info.value.errors]


def assert_error(doc: Any, expected: str) -> None:
    errs = errors_of(doc)
    assert expected in errs, f"expected {expected!r} among {errs}"


# -- the valid document and round trips ---------------------------------------

def test_valid_document_is_accepted_and_frozen() -> None:
    intent = validate_intent(clos_doc())
    assert isinstance(intent, Intent)
    assert len(intent.devices) == 9 and len(intent.links) == 10
    with pytest.raises(ValidationError):
        intent.devices[0].asn = 1  # type: ignore[misc]
    assert intent.max_ecmp_entries("spine-1-0") == 64
    assert intent.max_ecmp_entries("tor-0-0") == 128
    assert intent.drained_links == frozenset({"leaf-0-1:eth9"})


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_written_back_losslessly(fmt: str) -> None:
    intent = validate_intent(clos_doc())
    text = dump_intent(intent, fmt)
    again = validate_intent(parse_intent_text(text, fmt))
    assert again == intent
    assert again.content_hash == intent.content_hash
    assert dump_intent(again, fmt) == text


def test_defaults_are_filled_and_hash_ignores_spelling_of_defaults() -> None:
    doc = clos_doc()
    explicit = copy.deepcopy(doc)
    for link in explicit["links"]:
        link.setdefault("metric", 10)
        link.setdefault("capacity_gbps", 100)
    assert validate_intent(doc).content_hash == validate_intent(explicit).content_hash
    minimal = validate_intent({"name": "x", "routing": "isis", "devices": [{"name": "r1"}], "links": []})
    assert minimal.devices[0].role == "router"
    assert minimal.defaults.max_ecmp_entries == 128


def test_content_hash_changes_with_content() -> None:
    doc = clos_doc()
    other = copy.deepcopy(doc)
    other["links"][0]["capacity_gbps"] = 40
    assert validate_intent(doc).content_hash != validate_intent(other).content_hash


# -- document shape -------------------------------------------------------------

def test_not_a_mapping() -> None:
    assert errors_of(["x"]) == ["an intent document must be a mapping of fields"]


def test_required_fields_and_unknown_top_level_field() -> None:
    errs = errors_of({"name": "x", "colour": "red"})
    assert "devices: required field missing" in errs
    assert "links: required field missing" in errs
    assert any(e.startswith("colour: unknown field") for e in errs)


def test_unknown_field_in_a_device() -> None:
    doc = clos_doc()
    doc["devices"][2]["color"] = "red"
    assert_error(doc, "devices[2].color: unknown field")


def test_every_error_is_reported_at_once_in_document_order() -> None:
    doc = clos_doc()
    doc["demands"][0]["gbps"] = -1
    doc["links"][7]["b"] = "leaf-9-9"
    doc["devices"][3]["asn"] = 0
    errs = errors_of(doc)
    assert errs == [
        "devices[3].asn: ASN 0 out of range 1..4294967295",
        "links[7].b: unknown device 'leaf-9-9'",
        "demands[0].gbps: input should be greater than or equal to 0",
    ]


def test_a_malformed_element_still_gets_its_reference_checks() -> None:
    """An element with a field error is checked against the rest of the document over its other
    fields, so one answer holds every error (before, the second error of each came on the next try)."""
    doc = clos_doc()
    doc["links"].append({"a": "tor-0-0", "a_port": "eth7", "b": "zz", "b_port": "eth1", "capacity_gbps": -5})
    doc["links"].append({"a": "tor-1-0", "a_port": "eth1", "b": "leaf-1-0", "b_port": "eth7", "metric": 0})
    doc["failure_domains"].append({"name": "plane-0-power", "devices": "spine-0-0", "links": ["qq:eth1"]})
    doc["prefixes"].append({"prefix": "10.8.0.0/24", "origins": ["ghost"], "color": "red"})
    doc["policies"].append({"kind": "drain", "target": "ghost", "why": "maintenance"})
    doc["demands"].append({"from": "nope", "to": "10.7.0.0/24", "gbps": -1})
    doc["jobs"] = [{"name": "j", "tors": ["tor-0-0", "ghost"], "collective": "ring_allreduce",
                    "bytes_per_iter": 1e15, "iter_s": 1e-6}]
    doc["devices"].append({"name": "tor-0-0", "role": "tor", "asn": 0})
    errs = errors_of(doc)
    for expected in (
        "devices[9].name: duplicate device 'tor-0-0' (first at devices[0])",
        "links[10].b: unknown device 'zz'",
        "links[11].a_port: port 'eth1' of 'tor-1-0' already used by links[4]",
        "failure_domains[1].name: duplicate failure domain 'plane-0-power' (first at failure_domains[0])",
        "failure_domains[1].links[0]: unknown device 'qq' in 'qq:eth1'",
        "prefixes[3].origins[0]: unknown device 'ghost'",
        "policies[4].target: unknown device 'ghost'",
        "demands[2].from: unknown device 'nope'",
        "demands[2].to: no device originates 10.7.0.0/24 (not in prefixes)",
        "jobs[0].tors[1]: unknown device 'ghost'",
    ):
        assert expected in errs, f"{expected!r} not among {errs}"
    # the field errors themselves are there too, and nothing is said twice or about a field in error
    assert {e.split(":")[0] for e in errs} >= {"devices[9].asn", "links[10].capacity_gbps", "links[11].metric",
                                              "failure_domains[1].devices", "prefixes[3].color",
                                              "policies[4].why", "demands[2].gbps", "jobs[0]"}
    assert len(errs) == len(set(errs))
    assert not [e for e in errs if "names no devices" in e]  # its devices are in error, not missing


@pytest.mark.parametrize("kind", [{"drain": 1}, ["drain"], 7, None])
def test_a_policy_whose_kind_is_not_a_string_is_one_located_error(kind: Any) -> None:
    doc = clos_doc()
    doc["policies"].append({"kind": kind, "target": "nowhere"})
    errs = errors_of(doc)
    assert [e for e in errs if e.startswith("policies[4]")] == [
        "policies[4].kind: " + ("required field missing" if kind is None else
                                f"unknown policy kind {kind!r} (expected one of drain, utilization_limit, "
                                "failure_tolerance, wcmp, paths, auto_te, failure_reaction, insight)")]


def test_a_malformed_element_is_never_a_reference_target_twice() -> None:
    doc = clos_doc()
    doc["links"][0]["capacity_gbps"] = "fast"  # the link is malformed, its ports are still in use
    doc["failure_domains"][0]["links"] = ["tor-0-0:eth1"]
    assert errors_of(doc) == ["links[0].capacity_gbps: input should be a valid number, unable to parse string as "
                              "a number"]


def test_yaml_syntax_error_names_the_line() -> None:
    with pytest.raises(InvalidIntent) as info:
        parse_intent_text("name: x\ndevices: [\n", "yaml")
    assert "YAML syntax error at line" in str(info.value.errors[0])


def test_json_syntax_error_names_the_line() -> None:
    with pytest.raises(InvalidIntent) as info:
        parse_intent_text('{"name": "x",\n "devices": ]}', "json")
    assert str(info.value.errors[0]).startswith("JSON syntax error at line 2")


# -- one test per rule ---------------------------------------------------------------

def test_duplicate_device_names() -> None:
    doc = clos_doc()
    doc["devices"].append(dict(doc["devices"][0]))
    assert_error(doc, "devices[9].name: duplicate device 'tor-0-0' (first at devices[0])")


def test_port_used_twice_on_a_device() -> None:
    doc = clos_doc()
    doc["links"][1]["a_port"] = "eth1"
    assert_error(doc, "links[1].a_port: port 'eth1' of 'tor-0-0' already used by links[0]")


def test_link_to_unknown_device() -> None:
    doc = clos_doc()
    doc["links"][7]["b"] = "leaf-9-9"
    assert_error(doc, "links[7].b: unknown device 'leaf-9-9'")


def test_link_from_a_device_to_itself() -> None:
    doc = clos_doc()
    doc["links"][0]["b"] = "tor-0-0"
    doc["links"][0]["b_port"] = "eth7"
    assert_error(doc, "links[0].b: link from 'tor-0-0' to itself")


@pytest.mark.parametrize("capacity", [0, -5, 5e-324, 1e-4])
def test_capacity_must_be_positive(capacity: float) -> None:
    doc = clos_doc()
    doc["links"][3]["capacity_gbps"] = capacity
    assert_error(doc, "links[3].capacity_gbps: input should be greater than or equal to 0.001")


@pytest.mark.parametrize("asn,msg", [
    (0, "ASN 0 out of range 1..4294967295"),
    (4294967296, "ASN 4294967296 out of range 1..4294967295"),
    (23456, "ASN 23456 is AS_TRANS (RFC 6793) and cannot be assigned"),
])
def test_asn_out_of_range(asn: int, msg: str) -> None:
    doc = clos_doc()
    doc["devices"][0]["asn"] = asn
    assert_error(doc, f"devices[0].asn: {msg}")


def test_prefix_with_bad_syntax() -> None:
    doc = clos_doc()
    doc["prefixes"][0]["prefix"] = "10.0.0/24"
    errs = errors_of(doc)
    assert any(e.startswith("prefixes[0].prefix: '10.0.0/24' is not an IPv4 prefix") for e in errs), errs


def test_prefix_without_length() -> None:
    doc = clos_doc()
    doc["prefixes"][0]["prefix"] = "10.0.0.0"
    assert_error(doc, "prefixes[0].prefix: '10.0.0.0' has no prefix length: expected a prefix like '10.0.0.0/24'")


def test_prefix_with_host_bits_set_says_which_network_was_meant() -> None:
    doc = clos_doc()
    doc["prefixes"][1]["prefix"] = "10.0.1.7/24"
    assert_error(doc, "prefixes[1].prefix: host bits set in '10.0.1.7/24': did you mean '10.0.1.0/24'?")


def test_same_prefix_listed_twice_points_to_anycast() -> None:
    doc = clos_doc()
    doc["prefixes"].append({"prefix": "10.0.0.0/24", "origins": ["tor-1-0"]})
    assert_error(doc, "prefixes[3].prefix: prefix 10.0.0.0/24 already listed at prefixes[0] "
                      "(list several origins in one entry for anycast)")


def test_prefix_origin_unknown() -> None:
    doc = clos_doc()
    doc["prefixes"][2]["origins"][1] = "tor-7-7"
    assert_error(doc, "prefixes[2].origins[1]: unknown device 'tor-7-7'")


def test_failure_domain_naming_unknown_device() -> None:
    doc = clos_doc()
    doc["failure_domains"][0]["devices"] = ["spine-9-9"]
    assert_error(doc, "failure_domains[0].devices[0]: unknown device 'spine-9-9'")


def test_failure_domain_naming_unknown_port() -> None:
    doc = clos_doc()
    doc["failure_domains"][0]["links"] = ["leaf-0-1:eth42"]
    assert_error(doc, "failure_domains[0].links[0]: 'leaf-0-1' has no link on port 'eth42'")


def test_failure_domain_link_end_malformed() -> None:
    doc = clos_doc()
    doc["failure_domains"][0]["links"] = ["leaf-0-1"]
    assert_error(doc, "failure_domains[0].links[0]: 'leaf-0-1' is not a link end: expected 'device:port'")


def test_failure_domains_that_take_down_the_same_parts_are_refused() -> None:
    """Two domains with the same members are one failure replayed twice (issue 31.5): the second is
    refused, located, whatever its name or kind, and whichever end names a link."""
    doc = clos_doc()
    first = next(i for i, fd in enumerate(doc["failure_domains"]) if fd.get("devices"))
    twin = doc["failure_domains"][first]
    doc["failure_domains"].append({"name": "again", "kind": "srlg", "devices": list(reversed(twin["devices"])),
                                   "links": list(twin.get("links", []))})
    assert_error(doc, f"failure_domains[{len(doc['failure_domains']) - 1}]: takes down the same devices and "
                      f"links as failure_domains[{first}]: one failure, declared twice")
    doc = clos_doc()
    link = doc["links"][-1]
    doc["failure_domains"] += [{"name": "x", "kind": "srlg", "links": [f"{link['a']}:{link['a_port']}"]},
                               {"name": "y", "kind": "srlg", "links": [f"{link['b']}:{link['b_port']}"]}]
    n = len(doc["failure_domains"])
    assert_error(doc, f"failure_domains[{n - 1}]: takes down the same devices and links as failure_domains[{n - 2}]: "
                      "one failure, declared twice")
    doc["failure_domains"][-1]["links"].append(f"{doc['links'][0]['a']}:{doc['links'][0]['a_port']}")
    validate_intent(doc)  # a superset is another failure


def test_demand_from_unknown_device() -> None:
    doc = clos_doc()
    doc["demands"][1]["from"] = "tor-5-5"
    assert_error(doc, "demands[1].from: unknown device 'tor-5-5'")


def test_demand_to_prefix_nobody_originates() -> None:
    doc = clos_doc()
    doc["demands"][0]["to"] = "10.7.0.0/24"
    assert_error(doc, "demands[0].to: no device originates 10.7.0.0/24 (not in prefixes)")


def test_negative_demand() -> None:
    doc = clos_doc()
    doc["demands"][0]["gbps"] = -3
    assert_error(doc, "demands[0].gbps: input should be greater than or equal to 0")


def test_drain_of_unknown_device() -> None:
    doc = clos_doc()
    doc["policies"][0]["target"] = "spine-4-4"
    assert_error(doc, "policies[0].target: unknown device 'spine-4-4'")


def test_drain_of_unknown_port() -> None:
    doc = clos_doc()
    doc["policies"][0]["target"] = "leaf-0-1:eth44"
    assert_error(doc, "policies[0].target: 'leaf-0-1' has no link on port 'eth44'")


def test_unknown_policy_kind() -> None:
    doc = clos_doc()
    doc["policies"].append({"kind": "teleport"})
    assert_error(doc, "policies[4].kind: unknown policy kind 'teleport' "
                      "(expected one of drain, utilization_limit, failure_tolerance, wcmp, paths, auto_te, "
                      "failure_reaction, insight)")


def test_the_insight_policy_has_its_defaults_and_located_errors() -> None:
    doc = clos_doc()
    doc["policies"].append({"kind": "insight"})
    pol = validate_intent(doc).policy("insight")
    assert (pol.enabled, pol.baseline_s, pol.slowdown_threshold) == (True, 300.0, 1.2)
    doc["policies"][-1] = {"kind": "insight", "baseline_s": 5, "slowdown_threshold": 1.0}
    errs = errors_of(doc)
    assert any(e.startswith("policies[4].baseline_s:") for e in errs), errs
    assert any(e.startswith("policies[4].slowdown_threshold:") for e in errs), errs
    doc["policies"][-1] = {"kind": "insight", "window": 3}
    assert_error(doc, "policies[4].window: unknown field")
    doc["policies"][-1] = {"kind": "insight"}
    doc["policies"].append({"kind": "insight", "baseline_s": 600})
    assert_error(doc, "policies[5].kind: only one 'insight' policy is allowed (first at policies[4])")


def test_unknown_policy_field() -> None:
    doc = clos_doc()
    doc["policies"][1]["min"] = 0.1
    assert_error(doc, "policies[1].min: unknown field")


def test_bad_policy_value() -> None:
    doc = clos_doc()
    doc["policies"][2]["scope"] = "everything"
    errs = errors_of(doc)
    assert any(e.startswith("policies[2].scope: input should be 'domains', 'all_single' or 'k2'") for e in errs), errs


def test_only_one_policy_of_a_singleton_kind() -> None:
    doc = clos_doc()
    doc["policies"].append({"kind": "utilization_limit", "max": 0.5})
    assert_error(doc, "policies[4].kind: only one 'utilization_limit' policy is allowed (first at policies[1])")


def test_loop_free_paths_need_isis() -> None:
    doc = clos_doc()
    doc["policies"].append({"kind": "paths", "mode": "loop_free"})
    assert_error(doc, "policies[4].mode: paths: loop_free needs routing: isis or ospf "
                      "(BGP installs only its own best paths)")


# -- RFC 7938 Clos rules (routing: bgp) -----------------------------------------------

def test_tor_wired_to_a_spine_is_not_a_clos() -> None:
    doc = clos_doc()
    doc["links"].append({"a": "tor-1-0", "a_port": "eth3", "b": "spine-0-0", "b_port": "eth3"})
    assert_error(doc, "links[10]: 'tor-1-0' (tor) wired to 'spine-0-0' (spine): a Clos links only adjacent "
                      "tiers (tor-leaf, leaf-spine, spine-superspine)")


def test_leaf_without_uplinks() -> None:
    doc = clos_doc()
    del doc["links"][9]  # leaf-1-1 -- spine-1-0
    assert_error(doc, "devices[6]: leaf 'leaf-1-1' has no uplinks to the tier above")


def test_router_role_is_not_a_clos_tier() -> None:
    doc = clos_doc()
    doc["devices"].append({"name": "r1", "role": "router", "asn": 65500})
    assert_error(doc, "devices[9].role: role 'router' is not a tier of an RFC 7938 Clos (use routing: isis or ospf)")


def test_bgp_needs_an_asn() -> None:
    doc = clos_doc()
    del doc["devices"][2]["asn"]
    assert_error(doc, "devices[2].asn: required for routing: bgp")


def test_leaves_of_a_pod_share_one_asn() -> None:
    doc = clos_doc()
    doc["devices"][4]["asn"] = 65012
    assert_error(doc, "devices[4].asn: leaf 'leaf-0-1' has ASN 65012 but the leaves of pod 0 share one ASN "
                      "(65010 on 'leaf-0-0'; RFC 7938 section 5.2.1)")


def test_each_tor_has_its_own_asn() -> None:
    doc = clos_doc()
    doc["devices"][1]["asn"] = 65100
    assert_error(doc, "devices[1].asn: ASN 65100 of tor 'tor-0-1' is already used by 'tor-0-0' (ToR 'tor-0-0'); "
                      "RFC 7938 gives each ToR, each pod's leaves and each plane's spines their own ASN")


def test_spines_of_a_plane_share_one_asn_distinct_from_other_planes() -> None:
    doc = clos_doc()
    doc["devices"][8]["asn"] = 65000
    assert_error(doc, "devices[8].asn: ASN 65000 of spine 'spine-1-0' is already used by 'spine-0-0' "
                      "(the spines of plane 0); RFC 7938 gives each ToR, each pod's leaves and each plane's "
                      "spines their own ASN")


def test_leaf_wired_to_another_planes_spine() -> None:
    doc = clos_doc()
    doc["links"][7]["b"] = "spine-1-0"
    doc["links"][7]["b_port"] = "eth3"
    assert_error(doc, "links[7]: leaf 'leaf-1-0' of plane 0 wired to spine 'spine-1-0' of plane 1")


def test_a_tor_made_a_spine_is_refused_at_its_role() -> None:
    """Its links still join adjacent tiers (leaf-spine) and its ASN is its own, but a pod groups
    ToRs and leaves: the spine keeps the ToR's pod, and that is where the role change shows."""
    doc = clos_doc()
    doc["devices"][0]["role"] = "spine"
    assert errors_of(doc) == [
        "devices[0].role: spine 'tor-0-0' is in pod 0, but a pod groups ToRs and leaves: "
        "a spine spans the pods (drop its pod, or give it the role of its tier)",
        "links[1]: spine 'tor-0-0' wired to leaf 'leaf-0-1' of plane 1 and, by links[0], to a leaf of plane 0: "
        "a spine is in one plane"]
    del doc["devices"][0]["pod"]
    assert errors_of(doc) == ["links[1]: spine 'tor-0-0' wired to leaf 'leaf-0-1' of plane 1 and, by links[0], "
                              "to a leaf of plane 0: a spine is in one plane"]


def test_a_spine_made_a_tor_is_refused_at_its_role() -> None:
    doc = clos_doc()
    doc["devices"][7]["role"] = "tor"  # spine-0-0, alone in plane 0, wired to leaves of pods 0 and 1
    errs = errors_of(doc)
    assert any(e.startswith("devices[7].role: tor 'spine-0-0' is in plane 0, but a plane groups leaves and spines")
               for e in errs), errs
    del doc["devices"][7]["plane"]
    assert_error(doc, "links[7]: ToR 'spine-0-0' wired to leaf 'leaf-1-0' of pod 1 and, by links[6], "
                      "to a leaf of pod 0: a ToR is in one pod")


def test_isis_fabric_needs_no_clos() -> None:
    doc = {
        "name": "ring", "routing": "isis",
        "devices": [{"name": f"r{i}"} for i in range(3)],
        "links": [{"a": f"r{i}", "a_port": "e1" if i else "e2", "b": f"r{(i + 1) % 3}",
                   "b_port": "e2" if i < 2 else "e1", "metric": 5} for i in range(3)],
        "prefixes": [{"prefix": "192.0.2.0/24", "origins": ["r0"]}],
        "demands": [{"from": "r1", "to": "192.0.2.0/24", "gbps": 1}],
    }
    intent = validate_intent(doc)
    assert intent.wcmp_realization == "fib"


@pytest.mark.parametrize("routing", ["isis", "ospf"])
def test_link_bandwidth_is_bgp_only(routing: str) -> None:
    doc = {"name": "x", "routing": routing, "devices": [{"name": "r1"}], "links": [],
           "policies": [{"kind": "wcmp", "realization": "link-bandwidth"}]}
    assert_error(doc, "policies[0].realization: link-bandwidth is a BGP extended community; "
                      f"routing: {routing} needs realization: fib")


def _ospf_ring() -> dict:
    return {"name": "ring", "routing": "ospf", "devices": [{"name": f"r{i}"} for i in range(3)],
            "links": [{"a": f"r{i}", "a_port": "e1" if i else "e2", "b": f"r{(i + 1) % 3}",
                       "b_port": "e2" if i < 2 else "e1", "metric": 5} for i in range(3)],
            "prefixes": [{"prefix": "192.0.2.0/24", "origins": ["r0"]}],
            "demands": [{"from": "r1", "to": "192.0.2.0/24", "gbps": 1}]}


def test_ospf_is_link_state_routing_with_fib_and_loop_free() -> None:
    """``routing: ospf`` is what ``isis`` is to validation: no Clos rules, routers, ``fib`` by default and
    ``paths: loop_free`` allowed."""
    doc = _ospf_ring()
    doc["policies"] = [{"kind": "paths", "mode": "loop_free"}]
    intent = validate_intent(doc)
    assert intent.routing == "ospf" and intent.wcmp_realization == "fib" and intent.paths_mode == "loop_free"


def test_ospf_cost_is_sixteen_bits() -> None:
    doc = _ospf_ring()
    doc["links"][1]["metric"] = 65536
    assert_error(doc, "links[1].metric: 65536 is over 65535, the largest OSPF interface cost (routing: ospf)")
    doc["links"][1]["metric"] = 65535
    validate_intent(doc)
    doc["routing"], doc["links"][1]["metric"] = "isis", 65536  # IS-IS's wide metrics go further
    validate_intent(doc)


def test_unknown_routing_names_the_choices() -> None:
    doc = _ospf_ring()
    doc["routing"] = "rip"
    assert_error(doc, "routing: unknown routing 'rip' (expected bgp, isis or ospf)")


def test_json_and_yaml_inputs_agree() -> None:
    doc = clos_doc()
    a = validate_intent(parse_intent_text(json.dumps(doc)))
    b = validate_intent(parse_intent_text(yaml.safe_dump(doc)))
    assert a == b


def test_yaml_aliases_can_be_refused_for_network_input() -> None:
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nname: *b\n"
    with pytest.raises(InvalidIntent) as info:
        parse_intent_text(bomb, "yaml", allow_aliases=False)
    assert "YAML aliases (*name) are not accepted here" in str(info.value.errors[0])
    assert parse_intent_text(bomb, "yaml")["b"] == [["x", "x"], ["x", "x"]]
    assert parse_intent_text("name: 'R&D'\n", "yaml", allow_aliases=False) == {"name": "R&D"}


def test_a_copy_with_other_demands_derives_its_own_views() -> None:
    """pydantic copies the instance dict, where the cached derived views live: a copy must not answer
    the original's (the telemetry views replace the demands with the measured ones this way)."""
    intent = load_intent(Path(__file__).resolve().parents[2] / "labs" / "clos3-small" / "intent.yaml")
    assert intent.effective_demands and intent.device_map
    other = intent.model_copy(update={"demands": ()})
    assert other.effective_demands == () and other.device_map == intent.device_map


def test_an_intent_without_jobs_hashes_as_before_jobs_existed() -> None:
    """Stored revisions are identified by their content hash: adding the jobs section must not change
    the canonical document (nor the hash) of an intent that has none."""
    intent = load_intent(Path(__file__).resolve().parents[2] / "labs" / "clos3-small" / "intent.yaml")
    assert "jobs" not in intent.to_document()
    assert intent.content_hash == "29c4fbe8ba507aae697a9b9360c9c370d2f65eb5133ed0c0c433d2973b8d9cd5"
