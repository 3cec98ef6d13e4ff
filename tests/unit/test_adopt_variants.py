"""Discovery of fabrics written the way operators write them: BGP peer-groups (numbered and unnumbered,
``remote-as`` on the group), ``network`` vs ``redistribute connected`` (with a route map: a question), OSPF
costs derived from ``auto-cost reference-bandwidth``, and what discovery refuses to guess."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller.model.intent import validate_intent
from southbound.discovery.frr_text import parse_running
from southbound.discovery.impact import forwarding_impact
from southbound.discovery.infer import discover
from southbound.discovery.observed import ObservedDevice, interfaces_from_ip_json

SAMPLES = Path(__file__).parent / "samples" / "frr84"
UNNUMBERED = ("leaf1", "leaf2", "spine1")

NUMBERED_PG = """\
hostname leaf1
interface eth1
 ip address 192.168.10.1/31
exit
!
router bgp 65101
 bgp router-id 10.0.0.11
 neighbor FABRIC peer-group
 neighbor FABRIC remote-as external
 neighbor FABRIC capability extended-nexthop
 neighbor 192.168.10.0 peer-group FABRIC
 neighbor 192.168.20.0 remote-as 65001
 neighbor 192.168.20.0 peer-group FABRIC
 !
 address-family ipv4 unicast
  redistribute connected
  neighbor FABRIC activate
 exit-address-family
exit
"""


def _as_peer_group(text: str, remote: str = "external", group: str = "FABRIC") -> str:
    """An unnumbered running configuration rewritten with its sessions in a peer-group."""
    text = re.sub(r"^ neighbor (\S+) interface remote-as \S+$", rf" neighbor \1 interface peer-group {group}",
                  text, flags=re.M)
    text = re.sub(r"^( bgp router-id \S+)$", rf"\1\n neighbor {group} peer-group\n neighbor {group} remote-as "
                  f"{remote}", text, count=1, flags=re.M)
    return re.sub(r"^  neighbor (eth\d) activate$", f"  neighbor {group} activate", text, flags=re.M)


def _unnumbered(edit=_as_peer_group) -> list[ObservedDevice]:
    d = SAMPLES / "unnumbered"
    return [ObservedDevice(n, edit((d / f"{n}.running.txt").read_text()), interfaces_from_ip_json(
        (d / f"{n}.addr.json").read_text(), None, (d / f"{n}.neigh6.json").read_text())) for n in UNNUMBERED]


def test_parser_resolves_numbered_members_through_their_group():
    run = parse_running(NUMBERED_PG)
    assert run.bgp is not None
    assert run.bgp.groups == {"FABRIC": "external"}
    assert run.bgp.member_of == {"192.168.10.0": "FABRIC", "192.168.20.0": "FABRIC"}
    # a member's own remote-as wins over its group's
    assert run.bgp.neighbors == {"192.168.10.0": "external", "192.168.20.0": "65001"}
    assert run.bgp.redistribute == ["connected"] and run.other == []


def test_parser_resolves_unnumbered_members_and_keeps_group_policy_as_foreign():
    text = _as_peer_group((SAMPLES / "unnumbered" / "spine1.running.txt").read_text())
    text = text.replace(" neighbor FABRIC remote-as external\n",
                        " neighbor FABRIC remote-as external\n neighbor FABRIC bfd\n")
    run = parse_running(text)
    assert run.bgp is not None and run.bgp.neighbors == {"eth1": "external", "eth2": "external"}
    assert run.other == ["router bgp 65000: neighbor FABRIC bfd"]


def test_parser_reads_a_member_of_an_undeclared_group_as_foreign():
    run = parse_running("router bgp 65001\n neighbor 10.0.0.1 peer-group NOPE\nexit\n")
    assert run.bgp is not None and run.bgp.neighbors == {}
    assert run.other == ["router bgp 65001: neighbor 10.0.0.1 peer-group NOPE"]


def _without_forms(doc: dict) -> dict:
    return {**doc, "devices": [{k: v for k, v in d.items() if k != "bgp"} for d in doc["devices"]]}


@pytest.mark.parametrize("remote", ["external", "internal-as-number"])
def test_an_unnumbered_peer_group_fabric_is_discovered_as_the_plain_one_in_its_own_form(remote):
    """The peer-group form gives the intent of ``neighbor ethX interface remote-as external`` but for each
    device's ``bgp`` form, which keeps the group; a group whose ``remote-as`` is a number is a question (Loom
    writes a group's remote-as only as ``external``, and FRR deletes the members with it)."""
    plain = discover(_unnumbered(lambda t: t), name="unnumbered")
    if remote == "external":
        edit = _as_peer_group
    else:
        asn_of = {"leaf1": "65000", "leaf2": "65000", "spine1": None}

        def edit(text: str) -> str:
            host = re.search(r"^hostname (\S+)", text, re.M)
            assert host is not None
            if asn_of[host.group(1)] is None:  # the spine's peers have two ASNs: external on the group
                return _as_peer_group(text)
            return _as_peer_group(text, remote=str(asn_of[host.group(1)]))
    grouped = discover(_unnumbered(edit), name="unnumbered")
    assert grouped.valid, grouped.questions
    assert _without_forms(grouped.intent) == _without_forms(plain.intent)
    forms = {d["name"]: d.get("bgp") for d in grouped.intent["devices"]}
    if remote == "external":
        assert forms == {n: {"peer_group": "FABRIC", "remote_as": "external", "v6only": False}
                         for n in ("leaf1", "leaf2", "spine1")}
        assert [q.where for q in grouped.questions] == [q.where for q in plain.questions] == ["links"]
    else:
        assert forms["spine1"] == {"peer_group": "FABRIC", "remote_as": "external", "v6only": False}
        assert forms["leaf1"] == {"peer_group": "FABRIC", "v6only": False}
        asked = sorted(q.where for q in grouped.questions if "carries remote-as 65000" in q.question)
        assert asked == ["device leaf1", "device leaf2"]


def test_remote_as_external_is_kept_as_the_form_and_a_mix_is_a_question():
    """FRR 8.4 resets a session whose ``remote-as`` goes from ``external`` to a number (adopt_unnumbered lab):
    the form keeps ``external``; a device with both kinds cannot be written one way, which is a question."""
    found = discover(_unnumbered(lambda t: t), name="unnumbered")
    assert not [q for q in found.questions if "remote-as" in q.question]
    assert {d["bgp"]["remote_as"] for d in found.intent["devices"]} == {"external"}
    mixed = discover(_unnumbered(lambda t: t.replace("neighbor eth2 interface remote-as external",
                                                      "neighbor eth2 interface remote-as 65102")), name="mixed")
    asked = {q.where: q.question for q in mixed.questions if "remote-as external" in q.question}
    assert list(asked) == ["device spine1"] and asked["device spine1"].startswith(
        "BGP neighbors eth1 are remote-as external and eth2 name their peer's ASN"), asked
    assert "remote_as" not in {d["name"]: d.get("bgp", {}) for d in mixed.intent["devices"]}["spine1"]


def test_sessions_in_a_group_and_out_of_it_are_a_question():
    def half(text: str) -> str:
        text = _as_peer_group(text)
        return text.replace(" neighbor eth2 interface peer-group FABRIC", " neighbor eth2 interface remote-as external")
    found = discover(_unnumbered(half), name="half")
    asked = [q for q in found.questions if "different peer-groups or none" in q.question]
    assert [q.where for q in asked] == ["device spine1"]
    assert "eth1 (FABRIC), eth2 (no peer-group)" in asked[0].question
    assert "peer_group" not in {d["name"]: d.get("bgp", {}) for d in found.intent["devices"]}["spine1"]


def test_an_ibgp_peer_group_is_a_question():
    found = discover(_unnumbered(lambda t: _as_peer_group(t, remote="internal")), name="unnumbered")
    ibgp = [q for q in found.questions if "iBGP" in q.question]
    assert {q.where for q in ibgp} == {"device leaf1", "device leaf2", "device spine1"}
    assert "remote-as internal" in ibgp[0].question


def test_redistribute_connected_originates_like_network_statements():
    def redistributed(text: str) -> str:
        text = _as_peer_group(text)
        text = re.sub(r"^  network \S+\n", "", text, flags=re.M)
        return text.replace(" address-family ipv4 unicast\n", " address-family ipv4 unicast\n  redistribute "
                            "connected\n").replace(" address-family ipv6 unicast\n",
                                                   " address-family ipv6 unicast\n  redistribute connected\n")
    plain = discover(_unnumbered(lambda t: t), name="unnumbered")
    found = discover(_unnumbered(redistributed), name="unnumbered")
    assert found.valid, found.questions
    assert found.intent["prefixes"] == plain.intent["prefixes"]
    assert {d["bgp"]["originate"] for d in found.intent["devices"]} == {"redistribute-connected"}


def test_redistribute_connected_through_a_route_map_is_a_question():
    def mapped(text: str) -> str:
        text = re.sub(r"^  network \S+\n", "", _as_peer_group(text), flags=re.M)
        return text.replace(" address-family ipv4 unicast\n",
                            " address-family ipv4 unicast\n  redistribute connected route-map HOSTS\n")
    found = discover(_unnumbered(mapped), name="unnumbered")
    asked = [q for q in found.questions if "route-map HOSTS" in q.question]
    assert {q.where for q in asked} == {"router leaf1", "router leaf2", "router spine1"}


@pytest.mark.parametrize("line", ["neighbor 192.168.10.0 peer-group FABRIC", "neighbor FABRIC peer-group",
                                  "neighbor FABRIC remote-as external", "neighbor eth1 interface peer-group FABRIC"])
def test_adoption_review_flags_a_peer_group_or_member_removed(line):
    diff = f"Lines To Delete\n===============\nrouter bgp 65101\n no {line}\n\nLines To Add\n============\n"
    assert [i.text() for i in forwarding_impact(diff) or []] == [
        f"removes a BGP session{' (FRR deletes' if 'remote-as' not in line else ''}"
        + ("" if "remote-as" in line else " a peer-group's members with the group, and a member leaving it)")
        + f": '{line}' (in router bgp 65101)"]


def _ospf_router(name: str, addr: str, rid: str, extra: str) -> ObservedDevice:
    """A router written with ``passive-interface default``, a point-to-point link and ``network`` statements."""
    text = (f"hostname {name}\ninterface eth1\n ip address {addr}/31\n ip ospf network point-to-point\nexit\n"
            f"interface lo\n ip address {rid}/32\nexit\nrouter ospf\n ospf router-id {rid}\n{extra}"
            " passive-interface default\n no passive-interface eth1\n network 10.0.0.0/8 area 0\n"
            " network 192.168.0.0/16 area 0\nexit\n")
    addr_json = ('[{"ifname": "eth1", "link_type": "ether", "addr_info": [{"family": "inet", "local": "' + addr
                 + '", "prefixlen": 31}]}, {"ifname": "lo", "link_type": "loopback", "addr_info": [{"family": '
                 '"inet", "local": "' + rid + '", "prefixlen": 32}]}]')
    return ObservedDevice(name, text, interfaces_from_ip_json(addr_json, {"eth1": 10_000}))


@pytest.mark.parametrize(("extra", "metric"), [(" auto-cost reference-bandwidth 400000\n", 40),
                                               (" auto-cost reference-bandwidth 1000\n", 1), ("", 10)])
def test_ospf_costs_follow_auto_cost_reference_bandwidth(extra, metric):
    devs = [_ospf_router("r1", "192.168.1.0", "10.0.0.1", extra), _ospf_router("r2", "192.168.1.1", "10.0.0.2", extra)]
    run = parse_running(devs[0].running_config)
    assert run.ospf is not None and run.other == [] and run.ospf.passive_default
    assert run.ospf.active == {"eth1"} and run.ospf.reference_mbps == (int(extra.split()[-1]) if extra else None)
    found = discover(devs, name="ospf-ref")
    assert [lk["metric"] for lk in found.intent["links"]] == [metric]
    assert not any(q.where.startswith("link") and "passive" in q.question for q in found.questions)
    # OSPF by "network ... area" statements, point-to-point, FRR's default intervals: kept as each router's form
    forms = {d["name"]: d.get("ospf") for d in found.intent["devices"]}
    assert forms["r1"] == forms["r2"] == {"hello_s": 10, "dead_s": 40, "networks": ["10.0.0.0/8", "192.168.0.0/16"]}
    assert not [q for q in found.questions if "OSPF" in q.question], found.questions
    validate_intent(found.intent)


def test_ospf_enabled_per_interface_is_no_question_of_form():
    def per_interface(d: ObservedDevice) -> ObservedDevice:
        text = re.sub(r"^ network \S+ area 0\n", "", d.running_config, flags=re.M)
        text = text.replace("ip ospf network point-to-point\n", "ip ospf network point-to-point\n ip ospf area 0\n")
        text = text.replace("interface lo\n", "interface lo\n ip ospf area 0\n")
        return ObservedDevice(d.name, text, d.interfaces)
    devs = [per_interface(_ospf_router("r1", "192.168.1.0", "10.0.0.1", "")),
            per_interface(_ospf_router("r2", "192.168.1.1", "10.0.0.2", ""))]
    found = discover(devs, name="ospf-area")
    assert not [q for q in found.questions if "statements" in q.question]
    assert {p["prefix"] for p in found.intent["prefixes"]} == {"10.0.0.1/32", "10.0.0.2/32"}


@pytest.mark.parametrize("how", ["default", "router", "interface"])
def test_an_ospf_link_passive_at_either_end_is_a_question(how):
    def r2(text: str) -> str:
        if how == "default":
            return text.replace(" no passive-interface eth1\n", "")
        if how == "router":
            return text.replace(" passive-interface default\n no passive-interface eth1\n", " passive-interface eth1\n")
        return text.replace("ip ospf network point-to-point\n", "ip ospf network point-to-point\n ip ospf passive\n")
    devs = [_ospf_router("r1", "192.168.1.0", "10.0.0.1", "")]
    other = _ospf_router("r2", "192.168.1.1", "10.0.0.2", "")
    devs.append(ObservedDevice("r2", r2(other.running_config), other.interfaces))
    found = discover(devs, name="ospf-passive")
    assert [q.where for q in found.questions if "passive" in q.question] == ["link r2:eth1"]


def test_frr8_writes_no_passive_interface_on_the_interface():
    text = _ospf_router("r1", "192.168.1.0", "10.0.0.1", "").running_config
    text = text.replace(" no passive-interface eth1\n", "").replace(
        "ip ospf network point-to-point\n", "ip ospf network point-to-point\n no ip ospf passive\n")
    devs = [ObservedDevice("r1", text, _ospf_router("r1", "192.168.1.0", "10.0.0.1", "").interfaces),
            _ospf_router("r2", "192.168.1.1", "10.0.0.2", "")]
    found = discover(devs, name="ospf-passive")
    assert parse_running(text).other == []
    assert not [q for q in found.questions if "passive" in q.question]


def _isis(edit) -> list[ObservedDevice]:
    d = SAMPLES / "adopt_isis"
    return [ObservedDevice(n, edit((d / f"{n}.running.txt").read_text()), interfaces_from_ip_json(
        (d / f"{n}.addr.json").read_text())) for n in ("leaf1", "leaf2", "spine1", "spine2")]


@pytest.mark.parametrize(("is_type", "kept"), [("level-2-only", None), ("level-1", "level-1"), (None, "level-1-2")])
def test_isis_levels_are_kept_as_the_form_and_several_areas_are_a_question(is_type, kept):
    def edit(text: str) -> str:
        return text.replace(" is-type level-2-only\n", f" is-type {is_type}\n" if is_type else "")
    found = discover(_isis(edit), name="isis-levels")
    assert {(d.get("isis") or {}).get("is_type") for d in found.intent["devices"]} == {kept}
    assert not [q for q in found.questions if "IS-IS" in q.question]
    run = parse_running(edit((SAMPLES / "adopt_isis" / "leaf1.running.txt").read_text()))
    assert run.isis is not None and run.isis.is_type == is_type and run.other == []
    if kept:  # two areas with level-1 routing: Loom's one-level shortest paths would not hold
        def two_areas(text: str) -> str:
            return edit(text).replace("net 49.0002.0000.0000.0011.00", "net 49.0003.0000.0000.0011.00")
        asked = [q for q in discover(_isis(two_areas), name="x").questions if "IS-IS areas" in q.question]
        assert [q.where for q in asked] == ["devices"], asked


def test_an_isis_circuit_type_is_kept_as_foreign_configuration():
    text = (SAMPLES / "adopt_isis" / "leaf1.running.txt").read_text().replace(
        " isis metric 15\n", " isis metric 15\n isis circuit-type level-1\n")
    assert parse_running(text).other == ["interface eth1: isis circuit-type level-1"]
