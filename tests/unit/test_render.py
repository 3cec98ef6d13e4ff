"""The FRR renderer: device configs derived from intents, FRR text frozen by golden files.

Golden files under ``tests/golden/frr/`` are the FRR configuration for a few
devices (plain ToR, drained leaf with a drained link, WCMP by link-bandwidth
from a plan, IS-IS router) and one ``DeviceConfig`` document. Regenerate them
with ``LOOM_UPDATE_GOLDEN=1`` after a deliberate change and review the diff.
Every golden FRR text is also checked by FRR's own parser (``vtysh -C``).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import subprocess
from pathlib import Path

import pytest

from controller.model.errors import InvalidIntent
from controller.model.intent import validate_intent
from controller.model.plan import DevicePlan, NextHop, Plan, PlanSummary
from labs.gen import clos3_document
from southbound.config import DeviceConfig, bgp_session_resets, session_moves
from southbound.grpc_adapter import config_from_proto, config_to_proto
from southbound.render import bridged, device_configs, host_address, isis_net, render_frr
from tests.golden_files import GOLDEN as GOLDEN_ROOT
from tests.golden_files import assert_golden

GOLDEN = GOLDEN_ROOT / "frr"


def _clos3(**extra: object) -> dict:
    doc = clos3_document("g", pods=2, tors=2, planes=2, spines=2)
    doc.update(extra)
    return doc


def _plan_for_wcmp() -> Plan:
    """tor-0-0 splits 10.1.0.0/24 3:1 over its leaves; leaf-0-0 splits it 1:2 over its spines."""
    devices = {
        "tor-0-0": DevicePlan(groups={"g1": (NextHop("eth1", "leaf-0-0", 3), NextHop("eth2", "leaf-0-1", 1))},
                              routes={"10.1.0.0/24": "g1"}),
        "leaf-0-0": DevicePlan(groups={"g1": (NextHop("eth3", "spine-0-0", 1), NextHop("eth4", "spine-0-1", 2))},
                               routes={"10.1.0.0/24": "g1"}),
    }
    return Plan("g", PlanSummary(0.5, 0.5, 0.6, 0.1, 2, 2), devices, ())


def _dual(underlay: str, **extra: object) -> dict:
    """The clos3 fabric dual-stack on ``underlay``: an IPv6 twin (``2001:db8:K::/64``) of every prefix."""
    doc = _clos3(**extra)
    doc["defaults"] = {"underlay": underlay}
    doc["prefixes"] += [{"prefix": f"2001:db8:{k}::/64", "origins": p["origins"]}
                        for k, p in enumerate(list(doc["prefixes"]))]
    return doc


def _dual_plan() -> Plan:
    """:func:`_plan_for_wcmp`'s weights for 10.1.0.0/24 and for its IPv6 twin, 2001:db8:1::/64 (1:1 here)."""
    plan = _plan_for_wcmp()
    tor, leaf = plan.devices["tor-0-0"], plan.devices["leaf-0-0"]
    devices = {
        "tor-0-0": DevicePlan(groups={**tor.groups, "g2": (NextHop("eth1", "leaf-0-0", 1),
                                                           NextHop("eth2", "leaf-0-1", 1))},
                              routes={**tor.routes, "2001:db8:1::/64": "g2"}),
        "leaf-0-0": DevicePlan(groups=leaf.groups, routes={**leaf.routes, "2001:db8:1::/64": "g1"}),
    }
    return Plan("g", plan.summary, devices, ())


def _dual_render(underlay: str, device: str, plan: Plan | None = None, **extra: object) -> str:
    return render_frr(device_configs(validate_intent(_dual(underlay, **extra)), plan)[device])


def _isis_dual(underlay: str) -> dict:
    """The IS-IS ring of ``isis-r1.conf``, dual-stack (``ipv4-numbered``) or IPv6 only (``ipv6-numbered``),
    ``r1`` with an IPv6 loopback it originates."""
    v6 = [{"prefix": "2001:db8:9::/64", "origins": ["r1"]}, {"prefix": "2001:db8:9:2::/64", "origins": ["r2"]},
          {"prefix": "fd00:ff::1/128", "origins": ["r1"]}]
    v4 = [{"prefix": "10.9.0.0/24", "origins": ["r1"]}, {"prefix": "10.255.0.1/32", "origins": ["r1"]}]
    return {"name": "ring", "routing": "isis", "defaults": {"underlay": underlay},
            "devices": [{"name": "r1", "loopback": "10.255.0.1", "loopback6": "fd00:ff::1"},
                        {"name": "r2"}, {"name": "r3"}],
            "links": [{"a": "r1", "a_port": "eth1", "b": "r2", "b_port": "eth1", "metric": 20},
                      {"a": "r2", "a_port": "eth2", "b": "r3", "b_port": "eth1"},
                      {"a": "r3", "a_port": "eth2", "b": "r1", "b_port": "eth2"}],
            "prefixes": v6 + (v4 if underlay == "ipv4-numbered" else []),
            "policies": [{"kind": "drain", "target": "r1:eth2"}, {"kind": "drain", "target": "r1"}]}


DUAL_CASES = {
    # an adopted unnumbered fabric as operators write it: a peer-group with remote-as external, no v6only,
    # redistribute connected; a drained link and link-bandwidth WCMP go on the members
    "form-peer-group-external-leaf-0-0.conf": lambda: render_frr(device_configs(validate_intent(_formed(
        _dual("unnumbered", policies=[{"kind": "drain", "target": "leaf-0-0:eth2"}]), peer_group="FABRIC",
        remote_as="external", v6only=False, originate="redistribute-connected")), _dual_plan())["leaf-0-0"]),
    # numbered sessions through a group that carries no remote-as: each member keeps its peer's ASN
    "form-peer-group-asn-tor-0-0.conf": lambda: render_frr(device_configs(validate_intent(_formed(
        _clos3(), peer_group="TORS")), _plan_for_wcmp())["tor-0-0"]),
    "form-external-unnumbered-tor-0-0.conf": lambda: render_frr(device_configs(validate_intent(_formed(
        _dual("unnumbered"), remote_as="external", v6only=False)))["tor-0-0"]),
}

def _formed(doc: dict, **form: object) -> dict:
    """``doc`` with every device's sessions in ``form`` (``devices[].bgp``)."""
    doc["devices"] = [{**d, "bgp": dict(form)} for d in doc["devices"]]
    return doc


FORM_CASES = {
    "unnumbered-tor-0-0.conf": lambda: _dual_render("unnumbered", "tor-0-0"),
    "unnumbered-wcmp-leaf-0-0.conf": lambda: _dual_render("unnumbered", "leaf-0-0", _dual_plan()),
    "unnumbered-drained-leaf.conf": lambda: _dual_render("unnumbered", "leaf-0-0", _dual_plan(), policies=[
        {"kind": "drain", "target": "leaf-0-0"}, {"kind": "drain", "target": "tor-0-1:eth1"}]),
    "ipv6-numbered-tor-0-0.conf": lambda: _dual_render("ipv6-numbered", "tor-0-0"),
    "ipv6-numbered-wcmp-leaf-0-0.conf": lambda: _dual_render("ipv6-numbered", "leaf-0-0", _dual_plan(), policies=[
        {"kind": "drain", "target": "tor-0-1:eth1"}]),
    # the bridge of an underlay change (make before break): the IPv4 sessions and the interface ones side by side
    "bridge-ipv4-to-unnumbered-leaf-0-0.conf": lambda: render_frr(device_configs(bridged(
        validate_intent(_clos3()), validate_intent(_dual("unnumbered"))))["leaf-0-0"]),
    "bridge-unnumbered-to-ipv4-leaf-0-0.conf": lambda: render_frr(device_configs(bridged(
        validate_intent(_dual("unnumbered")), validate_intent(_clos3())))["leaf-0-0"]),
    "isis-dual-r1.conf": lambda: render_frr(device_configs(validate_intent(_isis_dual("ipv4-numbered")))["r1"]),
    "isis-ipv6-numbered-r1.conf": lambda: render_frr(
        device_configs(validate_intent(_isis_dual("ipv6-numbered")))["r1"]),
}

CASES = {
    "clos3-tor-0-0.conf": lambda: render_frr(device_configs(validate_intent(_clos3()))["tor-0-0"]),
    "clos3-drained-leaf.conf": lambda: render_frr(device_configs(validate_intent(_clos3(policies=[
        {"kind": "drain", "target": "leaf-0-0"}, {"kind": "drain", "target": "tor-0-1:eth1"}])))["leaf-0-0"]),
    "wcmp-link-bandwidth-leaf-0-0.conf": lambda: render_frr(
        device_configs(validate_intent(_clos3()), _plan_for_wcmp())["leaf-0-0"]),
    "wcmp-link-bandwidth-spine-0-1.conf": lambda: render_frr(
        device_configs(validate_intent(_clos3()), _plan_for_wcmp())["spine-0-1"]),
    "isis-r1.conf": lambda: render_frr(device_configs(validate_intent({
        "name": "ring", "routing": "isis",
        "devices": [{"name": "r1", "loopback": "10.255.0.1"}, {"name": "r2"}, {"name": "r3"}],
        "links": [{"a": "r1", "a_port": "eth1", "b": "r2", "b_port": "eth1", "metric": 20},
                  {"a": "r2", "a_port": "eth2", "b": "r3", "b_port": "eth1"},
                  {"a": "r3", "a_port": "eth2", "b": "r1", "b_port": "eth2"}],
        "prefixes": [{"prefix": "10.9.0.0/24", "origins": ["r1"]}],
        "policies": [{"kind": "drain", "target": "r1:eth2"}]}))["r1"]),
    **DUAL_CASES,
    **FORM_CASES,
    "ospf-r1.conf": lambda: render_frr(device_configs(validate_intent({
        "name": "ring", "routing": "ospf",
        "devices": [{"name": "r1", "loopback": "10.255.0.1"}, {"name": "r2"}, {"name": "r3"}],
        "links": [{"a": "r1", "a_port": "eth1", "b": "r2", "b_port": "eth1", "metric": 20},
                  {"a": "r2", "a_port": "eth2", "b": "r3", "b_port": "eth1"},
                  {"a": "r3", "a_port": "eth2", "b": "r1", "b_port": "eth2"}],
        "prefixes": [{"prefix": "10.9.0.0/24", "origins": ["r1"]}],
        "policies": [{"kind": "drain", "target": "r1:eth2"}, {"kind": "drain", "target": "r1"}]}))["r1"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_frr_config_matches_golden(name: str) -> None:
    assert_golden(GOLDEN / name, CASES[name]())


def test_device_config_document_matches_golden() -> None:
    cfg = device_configs(validate_intent(_clos3()), _plan_for_wcmp())["spine-0-1"]
    assert_golden(GOLDEN / "device-config-spine-0-1.json", json.dumps(cfg.to_document(), indent=2) + "\n")


@pytest.mark.lab
@pytest.mark.parametrize("name", sorted(n for n in CASES if n.endswith(".conf")))
def test_frr_parses_every_golden_config(name: str) -> None:
    proc = subprocess.run(["vtysh", "-C", "-f", str(GOLDEN / name)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.lab
def test_frr_parser_check_is_real(tmp_path: Path) -> None:
    """The check above can fail: a misspelt command is refused."""
    bad = tmp_path / "bad.conf"
    bad.write_text(CASES["clos3-tor-0-0.conf"]().replace("remote-as", "remote-az"))
    assert subprocess.run(["vtysh", "-C", "-f", str(bad)], capture_output=True, timeout=30).returncode != 0


def test_device_config_round_trips_through_its_document() -> None:
    configs = device_configs(validate_intent(_clos3(policies=[{"kind": "drain", "target": "spine-0-0"}])),
                             _plan_for_wcmp())
    for cfg in configs.values():
        assert DeviceConfig.from_document(copy.deepcopy(cfg.to_document())) == cfg


def test_addressing_is_consistent_across_the_fabric() -> None:
    intent = validate_intent(_clos3())
    configs = device_configs(intent)
    seen: set[str] = set()
    for link in intent.links:
        a = configs[link.a].interface(link.a_port)
        b = configs[link.b].interface(link.b_port)
        ia, ib = ipaddress.IPv4Interface(a.address), ipaddress.IPv4Interface(b.address)
        assert ia.network == ib.network and ia.network.prefixlen == 31 and ia.ip != ib.ip
        assert (a.peer, a.peer_port, b.peer, b.peer_port) == (link.b, link.b_port, link.a, link.a_port)
        assert str(ia.ip) not in seen and str(ib.ip) not in seen
        seen |= {str(ia.ip), str(ib.ip)}
        # each end's BGP neighbor is the other end, with the other device's ASN
        na = next(n for n in configs[link.a].neighbors if n.port == link.a_port)
        assert (na.address, na.remote_asn, na.peer) == (str(ib.ip), intent.device_map[link.b].asn, link.b)
    ids = [c.router_id for c in configs.values()]
    assert len(set(ids)) == len(ids)
    assert configs["tor-0-0"].originated == ("10.0.0.0/24",)
    assert configs["tor-0-0"].interface("host0").address == "10.0.0.1/24"
    assert configs["leaf-0-0"].originated == () and configs["leaf-0-0"].host_ports == ()


def test_addressing_is_deterministic() -> None:
    a = device_configs(validate_intent(_clos3()))
    b = device_configs(validate_intent(_clos3()))
    assert {k: render_frr(v) for k, v in a.items()} == {k: render_frr(v) for k, v in b.items()}


def test_drains_become_config() -> None:
    intent = validate_intent(_clos3(policies=[{"kind": "drain", "target": "spine-0-0"},
                                              {"kind": "drain", "target": "leaf-1-1:eth4"}]))
    configs = device_configs(intent)
    assert configs["spine-0-0"].drained and not configs["spine-0-1"].drained
    drained = {(d, n.port) for d, c in configs.items() for n in c.neighbors if n.drained}
    assert drained == {("leaf-1-1", "eth4"), ("spine-1-1", "eth2")}
    text = render_frr(configs["spine-0-0"])
    assert "match as-path LOOM-LOCAL" in text and "permit ^$" in text


def test_link_bandwidth_is_attached_by_the_next_hop() -> None:
    """Device N's weight for next hop M is the bandwidth M attaches toward N."""
    configs = device_configs(validate_intent(_clos3()), _plan_for_wcmp())
    lb = {(d, b.port, b.prefix): b.mbps for d, c in configs.items() for b in c.link_bandwidth}
    assert lb == {("leaf-0-0", "eth1", "10.1.0.0/24"): 3, ("leaf-0-1", "eth1", "10.1.0.0/24"): 1,
                  ("spine-0-0", "eth1", "10.1.0.0/24"): 1, ("spine-0-1", "eth1", "10.1.0.0/24"): 2}


def test_fib_realization_gives_weighted_groups_with_gateways() -> None:
    intent = validate_intent(_clos3(policies=[{"kind": "wcmp", "realization": "fib"}]))
    configs = device_configs(intent, _plan_for_wcmp())
    (route,) = configs["tor-0-0"].fib_routes
    assert route.prefix == "10.1.0.0/24"
    assert [(h.port, h.weight) for h in route.nexthops] == [("eth1", 3), ("eth2", 1)]
    leaf_addr = configs["leaf-0-0"].interface("eth1").address
    assert route.nexthops[0].gateway == leaf_addr.split("/")[0]
    assert all(not c.link_bandwidth for c in configs.values())


def test_small_helpers() -> None:
    assert host_address("10.0.0.0/24") == "10.0.0.1/24"
    assert host_address("10.0.0.7/32") == "10.0.0.7/32"
    assert isis_net("10.255.0.1") == "49.0001.0102.5500.0001.00"


@pytest.mark.parametrize(("before", "after"), [("ipv4-numbered", "unnumbered"), ("ipv4-numbered", "ipv6-numbered"),
                                               ("unnumbered", "ipv4-numbered"), ("ipv6-numbered", "unnumbered")])
def test_an_underlay_change_reports_every_moved_session(before: str, after: str) -> None:
    """Each end of every link's session moves (``address``) to FRR's new name for it, and the end of a link
    removed in the same change is ``removed``."""
    def doc(underlay: str, drop: bool) -> dict:
        d = _clos3()
        if underlay != "ipv4-numbered":
            d["defaults"] = {"underlay": underlay}
        if drop:
            d["links"] = d["links"][1:]
        return d
    old_intent, new_intent = validate_intent(doc(before, False)), validate_intent(doc(after, True))
    old, new = device_configs(old_intent), device_configs(new_intent)
    resets = {(r.device, r.port): (r.reason, r.neighbor) for r in bgp_session_resets(old, new)}
    gone = old_intent.links[0]
    ends = {(link.a, link.a_port) for link in old_intent.links} | {(link.b, link.b_port) for link in old_intent.links}
    assert set(resets) == ends
    for (device, port), (reason, neighbor) in resets.items():
        n = next(n for n in old[device].neighbors if n.port == port)
        assert neighbor == n.key and reason == ("removed" if device in (gone.a, gone.b) and port in
                                                (gone.a_port, gone.b_port) and n.peer in (gone.a, gone.b)
                                                else "address"), (device, port)
    moves = {(m.device, m.port): (m.before, m.after) for m in session_moves(old, new)}
    assert len(moves) == len(ends) - 2
    for (device, port), (was, now) in moves.items():
        assert was != now and now == next(n.key for n in new[device].neighbors if n.port == port)
        assert (now == port) == (after == "unnumbered")


def test_a_session_form_round_trips_and_changing_it_is_a_reset() -> None:
    """The form goes through the config document and the agent's protobuf unchanged, and a change of it is
    a reset of every session it writes (FRR deletes a member that leaves its group, restarts one whose
    remote-as kind or v6only changes); Loom's own form is no field at all (documents read as before)."""
    plain = device_configs(validate_intent(_dual("unnumbered")))
    assert "session_form" not in plain["tor-0-0"].to_document()
    assert not config_to_proto(plain["tor-0-0"]).HasField("session_form")
    for form in ({"peer_group": "FABRIC"}, {"remote_as": "external"}, {"v6only": False},
                 {"originate": "redistribute-connected"}):
        formed = device_configs(validate_intent(_formed(_dual("unnumbered"), **form)))
        cfg = formed["tor-0-0"]
        assert DeviceConfig.from_document(copy.deepcopy(cfg.to_document())) == cfg
        assert config_from_proto(config_to_proto(cfg)) == cfg
        reasons = {r.reason for r in bgp_session_resets(plain, formed)}
        assert reasons == (set() if "originate" in form else {"form"}), (form, reasons)


def test_a_session_form_is_only_for_bgp() -> None:
    doc = {"name": "ring", "routing": "ospf", "devices": [{"name": "r1", "bgp": {"remote_as": "external"}},
                                                          {"name": "r2"}], "links": []}
    with pytest.raises(InvalidIntent) as err:
        validate_intent(doc)
    assert [(e.loc, e.msg) for e in err.value.errors] == [
        ("devices[0].bgp", "only for routing: bgp (the form of the device's BGP sessions)")]
    with pytest.raises(InvalidIntent) as err:
        validate_intent(_formed(_clos3(), peer_group="FABRIC") | {"devices": [
            {**d, "ospf": {"hello_s": 2}} for d in _clos3()["devices"][:1]] + _clos3()["devices"][1:]})
    assert ("devices[0].ospf", "only for routing: ospf (the form of the device's OSPF)") in [
        (e.loc, e.msg) for e in err.value.errors]
    with pytest.raises(InvalidIntent) as err:
        validate_intent(_formed(_clos3(), peer_group="9bad", remote_as="internal"))
    assert {e.loc for e in err.value.errors} >= {"devices[0].bgp.peer_group", "devices[0].bgp.remote_as"}
