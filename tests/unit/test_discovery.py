"""Discovery on FRR 8.4 output captured from real runs (tests/unit/samples/frr84): the parser, the
inference of the intent (pins, ASNs, roles, prefixes, metrics, capacities, questions) and the adoption
impact read from an agent's diff."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller.model.intent import validate_intent
from controller.planning import compile_plan
from controller.workflow.review import route_changes
from southbound.discovery.frr_text import parse_running
from southbound.discovery.impact import forwarding_impact
from southbound.discovery.infer import discover
from southbound.discovery.observed import ObservedDevice, ObservedInterface, interfaces_from_ip_json
from southbound.render import device_configs, render_frr

SAMPLES = Path(__file__).parent / "samples" / "frr84"
FIXTURE = Path(__file__).parents[1] / "lab" / "fixtures" / "adopt_bgp"
NODES = ("leaf1", "leaf2", "spine1", "spine2")


def _speeds(text: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        out[name] = int(value) if value.strip() else None
    return out


def _observed(fabric: str) -> list[ObservedDevice]:
    out = []
    for n in NODES:
        d = SAMPLES / fabric
        speeds = d / f"{n}.speeds.txt"
        out.append(ObservedDevice(n, (d / f"{n}.running.txt").read_text(), interfaces_from_ip_json(
            (d / f"{n}.addr.json").read_text(), _speeds(speeds.read_text()) if speeds.exists() else None)))
    return out


def _handwritten_pins() -> tuple[dict[str, str], dict[str, str]]:
    """From the fixture's hand-written frr.conf files: (device:port -> address, device -> router id)."""
    addrs, rids = {}, {}
    for n in NODES:
        port = None
        for line in (FIXTURE / n / "frr.conf").read_text().splitlines():
            if m := re.match(r"^interface (\S+)", line):
                port = m.group(1)
            elif (m := re.match(r"^ ip address (\S+)", line)) and port != "lo":
                addrs[f"{n}:{port}"] = m.group(1)
            elif m := re.match(r"^ bgp router-id (\S+)", line):
                rids[n] = m.group(1)
    return addrs, rids


def test_parser_reads_bgp_running_config():
    run = parse_running((SAMPLES / "adopt_bgp" / "leaf1.running.txt").read_text())
    assert run.hostname == "leaf1"
    assert run.bgp is not None and run.bgp.asn == 65101 and run.bgp.router_id == "10.0.0.11"
    assert run.bgp.neighbors == {"192.168.10.2": "65000", "192.168.20.2": "65000"}
    assert run.bgp.networks == ["10.0.0.11/32", "172.16.1.0/24"]
    assert run.interfaces["eth1"].addresses == ["192.168.10.1/30"]
    assert run.interfaces["lo"].addresses == ["10.0.0.11/32"]
    assert run.statics == [] and run.other == []


def test_parser_reads_ospf_running_config():
    run = parse_running((SAMPLES / "adopt_ospf" / "leaf1.running.txt").read_text())
    assert run.bgp is None and run.ospf is not None
    assert run.ospf.router_id == "10.0.0.11"
    assert ("192.168.0.0/16", "0") in run.ospf.networks
    assert run.interfaces["eth1"].ospf_cost == 10 and run.interfaces["eth2"].ospf_cost == 20
    assert run.interfaces["host0"].ospf_passive


def test_discovered_bgp_intent_validates_with_pins_as_they_run():
    found = discover(_observed("adopt_bgp"), name="adopt-bgp")
    assert found.valid, found.questions
    intent = validate_intent(found.intent)
    addrs, rids = _handwritten_pins()
    got = {}
    for lk in intent.links:
        got[lk.end_a], got[lk.end_b] = str(lk.a_address), str(lk.b_address)
    assert got == {k: v for k, v in addrs.items() if not k.endswith(":host0")}
    assert {d.name: str(d.router_id) for d in intent.devices} == rids
    assert {d.name: (d.role.value, d.asn) for d in intent.devices} == {
        "leaf1": ("leaf", 65101), "leaf2": ("leaf", 65102), "spine1": ("spine", 65000), "spine2": ("spine", 65000)}
    assert {p.prefix: p.origins for p in intent.prefixes} == {
        "10.0.0.1/32": ("spine1",), "10.0.0.2/32": ("spine2",), "10.0.0.11/32": ("leaf1",),
        "10.0.0.12/32": ("leaf2",), "172.16.1.0/24": ("leaf1",), "172.16.2.0/24": ("leaf2",)}
    assert {lk.capacity_gbps for lk in intent.links} == {10.0}  # veth: the default
    assert [q.where for q in found.questions] == ["links"]
    # Loom renders them as they run: addresses, router ids, sessions, and the loopback stays on lo
    text = render_frr(device_configs(intent)["leaf1"])
    for line in (" ip address 192.168.10.1/30", " bgp router-id 10.0.0.11", " neighbor 192.168.20.2 remote-as 65000",
                 "  network 10.0.0.11/32", "interface host0\n description host subnet\n ip address 172.16.1.1/24"):
        assert line in text
    assert text.count("10.0.0.11/32") == 2  # on lo and as a network statement, on no host port


def test_default_gbps_and_physical_speeds():
    devs = _observed("adopt_bgp")
    found = discover(devs, name="x", default_gbps=40)
    assert {lk["capacity_gbps"] for lk in found.intent["links"]} == {40}
    phys = [ObservedDevice(d.name, d.running_config, tuple(
        ObservedInterface(i.name, i.addresses, 25000 if i.name.startswith("eth") else None, i.up, "")
        for i in d.interfaces)) for d in devs]
    found = discover(phys, name="x")
    assert {lk["capacity_gbps"] for lk in found.intent["links"]} == {25.0}
    assert found.questions == []


def test_ospf_discovery_keeps_costs_and_asks_about_routing():
    found = discover(_observed("adopt_ospf"), name="adopt-ospf")
    assert found.intent["routing"] == "ospf"
    metrics = {(lk["a"], lk["a_port"]): lk["metric"] for lk in found.intent["links"]}
    assert metrics == {("leaf1", "eth1"): 10, ("leaf2", "eth1"): 10, ("leaf1", "eth2"): 20, ("leaf2", "eth2"): 20}
    assert {d["name"]: d["router_id"] for d in found.intent["devices"]}["spine2"] == "10.0.0.2"
    prefixes = {p["prefix"] for p in found.intent["prefixes"]}
    assert {"172.16.1.0/24", "172.16.2.0/24", "10.0.0.11/32"} <= prefixes
    validate_intent(found.intent)
    assert found.valid


def test_statics_shared_subnets_and_foreign_policy_are_questions():
    devs = _observed("adopt_bgp")
    leaf1 = devs[0]
    extra = leaf1.running_config.replace(
        "router bgp 65101", "ip route 198.51.100.0/24 blackhole\n!\nroute-map KEEP permit 10\n!\nrouter bgp 65101")
    lan = ObservedDevice("leaf1", extra, leaf1.interfaces + (ObservedInterface("eth9", ("10.9.9.1/24",)),))
    other = ObservedDevice("leaf2", devs[1].running_config,
                           devs[1].interfaces + (ObservedInterface("eth9", ("10.9.9.2/24",)),))
    third = ObservedDevice("spine1", devs[2].running_config,
                           devs[2].interfaces + (ObservedInterface("eth9", ("10.9.9.3/24",)),))
    found = discover([lan, other, third, devs[3]], name="x")
    text = [f"{q.where}: {q.question}" for q in found.questions]
    assert any(t.startswith("subnet 10.9.9.0/24: 3 interfaces") for t in text), text
    assert any("static route 'ip route 198.51.100.0/24 blackhole'" in t for t in text), text
    assert any("route-map KEEP permit 10" in t for t in text), text


def test_adoption_diff_captured_from_an_agent_is_cosmetic():
    impacts = forwarding_impact((SAMPLES / "bgp_leaf1_adopt_diff.txt").read_text())
    assert impacts == []


@pytest.mark.parametrize(("deleted", "added", "expected"), [
    ("no ip route 198.51.100.0/24 blackhole", "", "removes a static route: 'ip route 198.51.100.0/24 blackhole'"),
    ("router bgp 65101\n address-family ipv4 unicast\n  no network 172.16.9.0/24", "",
     "removes an announced prefix: 'network 172.16.9.0/24' (in router bgp 65101 / address-family ipv4 unicast)"),
    ("", "interface host1\n ip address 172.16.9.1/24",
     "adds an interface address (its connected route): 'ip address 172.16.9.1/24' (in interface host1)"),
    ("no route-map KEEP permit 10", "", "removes routing policy: 'route-map KEEP permit 10'"),
    ("no ipv6 route 2001:db8:9::/64 blackhole", "", "removes a static route: 'ipv6 route 2001:db8:9::/64 blackhole'"),
    ("interface eth1\n ipv6 nd suppress-ra", "", "removes IPv6 router advertisements (an unnumbered BGP session "
     "needs them): 'no ipv6 nd suppress-ra' (in interface eth1)"),
    ("router bgp 65101\n address-family ipv6 unicast\n  no network 2001:db8:1::/64", "",
     "removes an announced prefix: 'network 2001:db8:1::/64' (in router bgp 65101 / address-family ipv6 unicast)"),
    ("router bgp 65101\n no bgp router-id 10.0.0.11", "router bgp 65101\n bgp router-id 100.127.0.1",
     "removes the router id (sessions or adjacencies reset): 'bgp router-id 10.0.0.11' (in router bgp 65101)"),
])
def test_adoption_diff_names_what_changes_forwarding(deleted, added, expected):
    diff = f"Lines To Delete\n===============\n{deleted}\n\nLines To Add\n============\n{added}\n"
    assert expected in [i.text() for i in forwarding_impact(diff) or []]


def test_a_unified_diff_is_no_adoption():
    assert forwarding_impact("--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n") is None


def _synthetic(asns: dict[str, int], links: list[tuple[str, str]], hosts: dict[str, str],
               extra: dict[str, str] | None = None) -> list[ObservedDevice]:
    """Routers with /31 links numbered in order, one ``network`` per host subnet: configs as FRR shows them."""
    ports: dict[str, list[tuple[str, str, str, str]]] = {n: [] for n in asns}
    for k, (a, b) in enumerate(links):
        base = f"10.1.{k // 128}.{2 * (k % 128)}"
        peer = f"10.1.{k // 128}.{2 * (k % 128) + 1}"
        ports[a].append((f"eth{len(ports[a]) + 1}", f"{base}/31", peer, b))
        ports[b].append((f"eth{len(ports[b]) + 1}", f"{peer}/31", base, a))
    out = []
    for n, asn in asns.items():
        lines = [f"hostname {n}", "!"]
        itfs = []
        for port, addr, _peer, _far in ports[n]:
            lines += [f"interface {port}", f" ip address {addr}", "exit", "!"]
            itfs.append(ObservedInterface(port, (addr,), None, True, "veth"))
        if n in hosts:
            lines += ["interface host0", f" ip address {hosts[n]}", "exit", "!"]
            itfs.append(ObservedInterface("host0", (hosts[n],), None, True, "veth"))
        lines += [f"router bgp {asn}", f" bgp router-id 192.0.2.{len(out) + 1}"]
        lines += [f" neighbor {peer} remote-as {asns[far]}" for _p, _a, peer, far in ports[n]]
        lines += [line for line in (extra or {}).get(n, "").splitlines()]
        lines += [" address-family ipv4 unicast"]
        if n in hosts:
            net = hosts[n].rsplit(".", 1)[0] + ".0/24"
            lines.append(f"  network {net}")
        lines += [" exit-address-family", "exit"]
        out.append(ObservedDevice(n, "\n".join(lines) + "\n", tuple(itfs)))
    return out


def test_three_tier_clos_roles_pods_and_planes():
    asns = {"t1": 65101, "t2": 65102, "l1": 65010, "l2": 65010, "s1": 65001, "s2": 65002}
    links = [("t1", "l1"), ("t1", "l2"), ("t2", "l1"), ("t2", "l2"), ("l1", "s1"), ("l1", "s2"), ("l2", "s1"),
             ("l2", "s2")]
    found = discover(_synthetic(asns, links, {"t1": "172.20.1.1/24", "t2": "172.20.2.1/24"}), name="c3")
    assert found.valid, found.questions
    devices = {d["name"]: d for d in found.intent["devices"]}
    assert {n: d["role"] for n, d in devices.items()} == {"t1": "tor", "t2": "tor", "l1": "leaf", "l2": "leaf",
                                                           "s1": "spine", "s2": "spine"}
    assert devices["l1"]["pod"] == devices["l2"]["pod"] == 0  # one ASN: one pod
    assert (devices["s1"]["plane"], devices["s2"]["plane"]) == (0, 1)  # two spine ASNs: two planes
    assert [q.where for q in found.questions] == ["links"]  # only: veth links have no physical speed


def test_sessions_loom_would_not_render_are_questions():
    asns = {"l1": 65101, "l2": 65102, "s1": 65000}
    found = discover(_synthetic(asns, [("l1", "s1"), ("l2", "s1")], {"l1": "172.20.1.1/24", "l2": "172.20.2.1/24"},
                                {"l1": " neighbor 192.0.2.99 remote-as 65101\n neighbor eth7 interface remote-as "
                                       "external"}), name="x")
    text = [f"{q.where}: {q.question}" for q in found.questions]
    assert any(t.startswith("device l1: BGP neighbor 192.0.2.99 is not across a discovered link") for t in text)
    assert any(t.startswith("device l1: BGP neighbor eth7 is over an interface (unnumbered)") for t in text)


def test_subnets_elsewhere_are_pinned_and_what_loom_drops_is_a_question():
    devs = _observed("adopt_bgp")
    leaf1 = devs[0]
    moved = tuple(ObservedInterface(i.name, ("172.16.1.254/24",) if i.name == "host0" else
                                    i.addresses + (("10.0.9.9/32",) if i.name == "lo" else ()), i.speed_mbps, i.up,
                                    i.kind) for i in leaf1.interfaces)
    moved += (ObservedInterface("eth7", ("10.77.0.1/24",)),)
    found = discover([ObservedDevice("leaf1", leaf1.running_config, moved), *devs[1:]], name="x")
    text = [f"{q.where}: {q.question}" for q in found.questions]
    # the announced subnet on another address (or port) than Loom's is pinned where it runs
    assert {d["name"]: d.get("host_ports") for d in found.intent["devices"]}["leaf1"] == [
        {"port": "host0", "addresses": ["172.16.1.254/24"]}]
    assert not any("host0" in t for t in text), text
    assert any(t.startswith("device leaf1: eth7 has 10.77.0.1/24, on no link and not announced") for t in text)
    assert any(t.startswith("device leaf1: loopback addresses 10.0.9.9/32 besides the router id") for t in text)


def test_route_changes_compare_planned_next_hops_with_the_kernels():
    intent = validate_intent(discover(_observed("adopt_bgp"), name="x").intent)
    plan = compile_plan(intent)
    plan = plan[0] if isinstance(plan, tuple) else plan
    kernel = {"leaf1": {"172.16.2.0/24": frozenset({"eth1", "eth2"}), "10.0.0.12/32": frozenset({"eth1", "eth2"}),
                        "10.0.0.1/32": frozenset({"eth1"}), "10.0.0.2/32": frozenset({"eth2"})}}
    assert route_changes(plan, kernel) == []
    kernel["leaf1"] = {**kernel["leaf1"], "172.16.2.0/24": frozenset({"eth1"}), "198.51.100.0/24": frozenset({"eth2"})}
    got = {(w.action, w.context, w.line) for w in route_changes(plan, kernel)}
    assert got == {("adds", "route 172.16.2.0/24", "next hop eth2"), ("removes", "route 198.51.100.0/24",
                                                                      "next hop eth2")}
    assert [w.line for w in route_changes(plan, {"leaf2": None})] == ["its kernel routes"]


def test_isis_discovery_keeps_metrics_and_the_form_it_runs():
    found = discover(_observed("adopt_isis"), name="adopt-isis")
    assert found.valid, found.questions
    assert found.intent["routing"] == "isis"
    metrics = {(lk["a"], lk["a_port"]): lk["metric"] for lk in found.intent["links"]}
    assert metrics == {("leaf1", "eth1"): 15, ("leaf2", "eth1"): 15, ("leaf1", "eth2"): 10, ("leaf2", "eth2"): 10}
    assert {d["name"]: d["router_id"] for d in found.intent["devices"]} == {
        "leaf1": "10.0.0.11", "leaf2": "10.0.0.12", "spine1": "10.0.0.1", "spine2": "10.0.0.2"}
    assert {p["prefix"] for p in found.intent["prefixes"]} >= {"172.16.1.0/24", "10.0.0.11/32"}
    # the NET (not the one Loom derives from the router id, 49.0001.0100.0000.0011.00) and the tag are kept,
    # so the system id and the instance stay; point-to-point links at FRR's default hellos (3 s, x10)
    forms = {d["name"]: d.get("isis") for d in found.intent["devices"]}
    assert forms["leaf1"] == {"tag": "core", "net": "49.0002.0000.0000.0011.00", "hello_s": 3,
                              "hello_multiplier": 10}, forms
    assert not [q for q in found.questions if "IS-IS" in q.question], found.questions
    text = render_frr(device_configs(validate_intent(found.intent))["leaf1"])
    assert "router isis core\n net 49.0002.0000.0000.0011.00\n is-type level-2-only\n" in text, text
    assert "interface eth1\n description to spine1:eth1\n ip address 192.168.10.1/30\n ip router isis core\n" \
           " isis network point-to-point\n isis metric 15\n isis hello-interval 3\n isis hello-multiplier 10\n" in text


# -- unnumbered and IPv6 fabrics ---------------------------------------------------------------------------------
UNNUMBERED = ("leaf1", "leaf2", "spine1")


def _observed_unnumbered(neighbours: bool = True) -> list[ObservedDevice]:
    """The captured dual-stack unnumbered fabric (samples/frr84/unnumbered); ``neighbours=False``: as a
    reader that gathers no ``ip -6 neigh`` sees it."""
    d = SAMPLES / "unnumbered"
    return [ObservedDevice(n, (d / f"{n}.running.txt").read_text(), interfaces_from_ip_json(
        (d / f"{n}.addr.json").read_text(), None, (d / f"{n}.neigh6.json").read_text() if neighbours else None))
        for n in UNNUMBERED]


def test_parser_reads_an_unnumbered_running_config():
    run = parse_running((SAMPLES / "unnumbered" / "spine1.running.txt").read_text())
    assert run.bgp is not None and run.bgp.asn == 65000 and run.bgp.router_id == "10.0.0.1"
    assert run.bgp.neighbors == {"eth1": "external", "eth2": "external"}
    assert run.bgp.networks == ["10.0.0.1/32", "fd00::1/128"]
    assert run.interfaces["eth1"].ra and run.interfaces["eth1"].addresses == []
    assert run.interfaces["lo"].addresses6 == ["fd00::1/128"]
    leaf = parse_running((SAMPLES / "unnumbered" / "leaf1.running.txt").read_text())
    assert leaf.interfaces["host0"].addresses6 == ["2001:db8:1::1/64"]
    assert run.other == [] and leaf.other == [] and run.statics == []


def test_an_unnumbered_fabric_is_discovered_with_its_underlay_and_no_link_pins():
    found = discover(_observed_unnumbered(), name="unnumbered")
    assert found.valid, found.questions
    # veth links have no physical speed; remote-as external on plain interface sessions is kept as the form
    assert [q.where for q in found.questions] == ["links"]
    doc = found.intent
    assert {d["name"]: d.get("bgp") for d in doc["devices"]} == {
        n: {"remote_as": "external", "v6only": False} for n in ("leaf1", "leaf2", "spine1")}
    assert doc["defaults"] == {"underlay": "unnumbered"}
    assert [(lk["a"], lk["a_port"], lk["b"], lk["b_port"]) for lk in doc["links"]] == [
        ("leaf1", "eth1", "spine1", "eth1"), ("leaf2", "eth1", "spine1", "eth2")]
    assert not any("a_address" in lk or "b_address" in lk for lk in doc["links"])
    intent = validate_intent(doc)
    assert {p.prefix: p.origins for p in intent.prefixes} == {
        "10.0.0.1/32": ("spine1",), "10.0.0.11/32": ("leaf1",), "10.0.0.12/32": ("leaf2",),
        "172.16.1.0/24": ("leaf1",), "172.16.2.0/24": ("leaf2",), "2001:db8:1::/64": ("leaf1",),
        "2001:db8:2::/64": ("leaf2",), "fd00::1/128": ("spine1",), "fd00::11/128": ("leaf1",),
        "fd00::12/128": ("leaf2",)}
    assert {d.name: (d.role.value, d.asn, str(d.router_id), str(d.loopback_v6)) for d in intent.devices} == {
        "leaf1": ("leaf", 65101, "10.0.0.11", "fd00::11"), "leaf2": ("leaf", 65102, "10.0.0.12", "fd00::12"),
        "spine1": ("spine", 65000, "10.0.0.1", "fd00::1")}
    plan = compile_plan(intent)
    plan = plan[0] if isinstance(plan, tuple) else plan
    assert set(plan.devices["leaf1"].routes) >= {"2001:db8:2::/64", "172.16.2.0/24"}


def test_without_the_kernels_neighbours_unnumbered_sessions_are_questions():
    found = discover(_observed_unnumbered(neighbours=False), name="unnumbered")
    assert found.intent["links"] == [] and "defaults" not in found.intent
    text = [f"{q.where}: {q.question}" for q in found.questions]
    assert any(t.startswith("device spine1: BGP neighbor eth2 is over an interface (unnumbered) that is on no "
                            "discovered link") for t in text), text


def test_a_port_seeing_several_routers_link_locals_is_a_question():
    devs = _observed_unnumbered()
    spine = next(d for d in devs if d.name == "spine1")
    eth1 = spine.interface("eth1")
    eth2 = spine.interface("eth2")
    assert eth1 is not None and eth2 is not None
    shared = ObservedInterface("eth1", (), None, True, "veth", (), eth1.link_local, eth1.neighbors6 + eth2.neighbors6)
    spine = ObservedDevice("spine1", spine.running_config, tuple(shared if i.name == "eth1" else i
                                                                  for i in spine.interfaces if i.name != "eth2"))
    found = discover([d for d in devs if d.name != "spine1"] + [spine], name="x")
    assert any(q.where == "device spine1" and "eth1 sees the link-local addresses of leaf1:eth1, leaf2:eth1"
               in q.question for q in found.questions), found.questions


def _ipv6_numbered(asns: dict[str, int], links: list[tuple[str, str]], hosts: dict[str, str]) -> list[ObservedDevice]:
    """Routers whose links carry IPv6 /127s only, sessions to the peers' IPv6 addresses with the extended
    next hop capability (IPv4 routes over them), IPv6 host subnets: configs as FRR shows them."""
    ports: dict[str, list[tuple[str, str, str, str]]] = {n: [] for n in asns}
    for k, (a, b) in enumerate(links):
        lo, hi = f"fd6c:6f6f:6d00:1::{2 * k:x}", f"fd6c:6f6f:6d00:1::{2 * k + 1:x}"
        ports[a].append((f"eth{len(ports[a]) + 1}", f"{lo}/127", hi, b))
        ports[b].append((f"eth{len(ports[b]) + 1}", f"{hi}/127", lo, a))
    out = []
    for i, (n, asn) in enumerate(asns.items()):
        lines = [f"hostname {n}", "!"]
        itfs = []
        for port, addr, _peer, _far in ports[n]:
            lines += [f"interface {port}", f" ipv6 address {addr}", "exit", "!"]
            itfs.append(ObservedInterface(port, (), None, True, "veth", (addr,)))
        if n in hosts:
            lines += ["interface host0", f" ipv6 address {hosts[n]}", "exit", "!"]
            itfs.append(ObservedInterface("host0", (), None, True, "veth", (hosts[n],)))
        lines += [f"router bgp {asn}", f" bgp router-id 192.0.2.{i + 1}"]
        for _p, _a, peer, far in ports[n]:
            lines += [f" neighbor {peer} remote-as {asns[far]}", f" neighbor {peer} capability extended-nexthop"]
        lines += [" address-family ipv6 unicast"]
        if n in hosts:
            lines.append(f"  network {hosts[n].rsplit('::', 1)[0]}::/64")
        lines += [f"  neighbor {peer} activate" for _p, _a, peer, _f in ports[n]]
        lines += [" exit-address-family", "exit"]
        out.append(ObservedDevice(n, "\n".join(lines) + "\n", tuple(itfs)))
    return out


def test_an_ipv6_numbered_fabric_keeps_its_link_addresses_pinned():
    asns = {"l1": 65101, "l2": 65102, "s1": 65000}
    found = discover(_ipv6_numbered(asns, [("l1", "s1"), ("l2", "s1")], {"l1": "2001:db8:1::1/64",
                                                                          "l2": "2001:db8:2::1/64"}), name="v6")
    assert found.valid, found.questions
    assert [q.where for q in found.questions] == ["links"]
    assert found.intent["defaults"] == {"underlay": "ipv6-numbered"}
    assert [(lk["a_address"], lk["b_address"]) for lk in found.intent["links"]] == [
        ("fd6c:6f6f:6d00:1::/127", "fd6c:6f6f:6d00:1::1/127"), ("fd6c:6f6f:6d00:1::2/127", "fd6c:6f6f:6d00:1::3/127")]
    assert {p["prefix"]: p["origins"] for p in found.intent["prefixes"]} == {
        "2001:db8:1::/64": ["l1"], "2001:db8:2::/64": ["l2"]}
