"""Labs in both address families (#36): generated dual-stack hosts, host commands of either family read
from any containerlab file, ``loom lab hosts`` and ``loom lab routes`` of IPv6, and IPv6 in every node's
namespace before its interfaces come up.

Nothing is brought up: the lab files are generated or written into temporary directories, the kernel
and FRR outputs are samples in the forms iproute2 6.1 and FRR 8.4 print (read off a running unnumbered
lab), and the node scripts are checked as text.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from controller.cli import _register
from controller.cli.common import app
from controller.model.intent import validate_intent
from labs import runner
from labs.clab import InvalidLab, load_topology
from labs.gen import clos3_document, generate_lab
from labs.lab_readings import bgp_sessions, parse_routes, routes_of_both
from labs.node_scripts import bare_host_script, link_lines

_register()
cli = CliRunner()


def dual_doc(family: str = "dual") -> dict[str, Any]:
    """Clos 2 pods x 2 ToRs x 2 planes x 1 spine on an unnumbered underlay; ToR ``tor-P-T`` originates
    ``10.P.T.0/24`` and/or ``2001:db8:P:T::/64``."""
    doc = clos3_document("ds", pods=2, tors=2, planes=2, spines=1)
    doc["defaults"] = {"underlay": "unnumbered"}
    six = {p["prefix"]: str(ipaddress.IPv6Network("2001:db8:{}:{}::/64".format(*p["prefix"].split(".")[1:3])))
           for p in doc["prefixes"]}
    twins = [{"prefix": six[p["prefix"]], "origins": p["origins"]} for p in doc["prefixes"]]
    doc["prefixes"] = twins if family == "ipv6" else doc["prefixes"] + twins
    doc["demands"] = [{**d, "to": six[d["to"]]} for d in doc["demands"]] if family == "ipv6" else doc["demands"]
    return doc


def gen(tmp_path: Path, doc: dict[str, Any], hosts: int) -> Path:
    return generate_lab(validate_intent(doc), tmp_path / "ds", hosts=hosts)


def test_a_dual_stack_tor_has_dual_stack_hosts_with_both_default_routes(tmp_path: Path) -> None:
    path = gen(tmp_path, dual_doc(), 1)
    nodes = yaml.safe_load(path.read_text())["topology"]["nodes"]
    assert nodes["tor-1-0-h0"]["exec"] == [
        "ip addr add 10.1.0.10/24 dev eth1", "ip -6 addr add 2001:db8:1::a/64 dev eth1", "ip link set eth1 up",
        "ip route replace default via 10.1.0.1", "ip -6 route replace default via 2001:db8:1::1"]
    assert nodes["tor-1-0-h0"]["sysctls"] == {"net.ipv6.conf.all.disable_ipv6": 0}
    for name in ("tor-0-0", "leaf-1-1", "spine-0-0"):  # under containerlab too, the routers forward IPv6
        assert nodes[name]["sysctls"] == {"net.ipv6.conf.all.disable_ipv6": 0, "net.ipv6.conf.all.forwarding": 1}
    host = load_topology(path).node_map["tor-0-1-h0"].host
    assert host is not None
    assert (host.ip, host.prefix, host.gateway) == ("10.0.1.10", "10.0.1.0/24", "10.0.1.1")
    assert (host.ip6, host.prefix6, host.gateway6) == ("2001:db8:0:1::a", "2001:db8:0:1::/64", "2001:db8:0:1::1")


def test_several_hosts_per_port_share_its_bridge_in_both_families(tmp_path: Path) -> None:
    topo = load_topology(gen(tmp_path, dual_doc(), 3))
    hosts = [topo.node_map[f"tor-1-1-h{i}"].host for i in range(3)]
    assert [(h.ip, h.ip6) for h in hosts if h] == [("10.1.1.10", "2001:db8:1:1::a"), ("10.1.1.11", "2001:db8:1:1::b"),
                                                 ("10.1.1.12", "2001:db8:1:1::c")]
    assert topo.node_map["tor-1-1"].host_bridges == {"host0": ("host0h0", "host0h1", "host0h2")}


def test_lab_hosts_adds_the_ipv6_address_and_prefix(tmp_path: Path) -> None:
    gen(tmp_path, dual_doc(), 1)
    result = cli.invoke(app, ["lab", "hosts", str(tmp_path / "ds"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["tor-1-1-h0"] == {
        "netns": "loom-ds-tor-1-1-h0", "tor": "tor-1-1", "address": "10.1.1.10", "prefix": "10.1.1.0/24",
        "address6": "2001:db8:1:1::a", "prefix6": "2001:db8:1:1::/64"}


def test_an_ipv6_only_host_gives_its_ipv6_address_as_its_address(tmp_path: Path) -> None:
    path = gen(tmp_path, dual_doc("ipv6"), 1)
    nodes = yaml.safe_load(path.read_text())["topology"]["nodes"]
    assert nodes["tor-0-0-h0"]["exec"] == ["ip -6 addr add 2001:db8::a/64 dev eth1", "ip link set eth1 up",
                                           "ip -6 route replace default via 2001:db8::1"]
    result = cli.invoke(app, ["lab", "hosts", str(tmp_path / "ds"), "--json"])
    assert json.loads(result.output)["tor-0-0-h0"] == {
        "netns": "loom-ds-tor-0-0-h0", "tor": "tor-0-0", "address": "2001:db8::a", "prefix": "2001:db8::/64",
        "address6": "2001:db8::a", "prefix6": "2001:db8::/64"}


def test_an_ipv4_lab_declares_no_ipv6(tmp_path: Path) -> None:
    doc = clos3_document("v4", pods=1, tors=2, planes=1, spines=1)
    nodes = yaml.safe_load(gen(tmp_path, doc, 1).read_text())["topology"]["nodes"]
    assert not any("sysctls" in n for n in nodes.values())
    assert nodes["tor-0-0-h0"]["exec"] == ["ip addr add 10.0.0.10/24 dev eth1", "ip link set eth1 up",
                                           "ip route replace default via 10.0.0.1"]
    result = cli.invoke(app, ["lab", "hosts", str(tmp_path / "ds"), "--json"])
    assert set(json.loads(result.output)["tor-0-0-h0"]) == {"netns", "tor", "address", "prefix"}


def test_gen_refuses_ipv6_hosts_that_do_not_fit_their_prefix(tmp_path: Path) -> None:
    doc = dual_doc("ipv6")
    doc["prefixes"][0]["prefix"] = "2001:db8::/124"
    doc["demands"] = [d for d in doc["demands"] if d["to"] != "2001:db8::/64"]
    with pytest.raises(ValueError, match="2001:db8::/124 is too small"):
        gen(tmp_path, doc, 6)


# -- hosts' commands, read strictly (Loom's hosts) ----------------------------------------------


def host_lab(tmp_path: Path, commands: list[str]) -> Path:
    """A lab of one ToR (``r1``, host port ``host0``) and one Loom host ``h1`` running ``commands``."""
    (tmp_path / "r1").mkdir(exist_ok=True)
    (tmp_path / "r1" / "frr.conf").write_text("hostname r1\n")
    topo = {"nodes": {"r1": {"kind": "linux", "binds": ["r1/frr.conf:/etc/frr/frr.conf"],
                             "labels": {"loom.host-ports": "host0"}},
                      "h1": {"kind": "linux", "labels": {"loom.role": "host"}, "exec": commands}},
            "links": [{"endpoints": ["r1:host0", "h1:eth1"]}]}
    path = tmp_path / "lab.clab.yml"
    path.write_text(yaml.safe_dump({"name": "h", "topology": topo}))
    return path


@pytest.mark.parametrize("commands, want", [
    (["ip -6 addr add 2001:db8:5::a/64 dev eth1", "ip -6 route add ::/0 via 2001:db8:5::1"],
     (None, None, "2001:db8:5::a/64", "2001:db8:5::1")),
    (["ip address add 2001:db8:5::a/64 dev eth1", "ip route replace default via fe80::1 dev eth1",
      "ip -4 addr add 10.5.0.9/24 dev eth1", "ip -4 route add 0.0.0.0/0 via 10.5.0.1 dev eth1"],
     ("10.5.0.9/24", "10.5.0.1", "2001:db8:5::a/64", "fe80::1")),
])
def test_a_loom_host_takes_either_family_or_both(tmp_path: Path, commands: list[str],
                                                 want: tuple[str | None, ...]) -> None:
    host = load_topology(host_lab(tmp_path, commands)).node_map["h1"].host
    assert host is not None and (host.address, host.gateway, host.address6, host.gateway6) == want


@pytest.mark.parametrize("commands, loc, words", [
    (["ip -6 addr add 2001:db8:5::a/64 dev eth1"], "exec", "needs its default route ('ip -6 route replace"),
    (["ip addr add 10.5.0.9/24 dev eth1", "ip route add default via 10.5.0.1",
      "ip -6 route add default via 2001:db8:5::1"], "exec", "but no IPv6 address"),
    (["ip -6 addr add 2001:db8:5::a/64 dev eth1", "ip -6 route add default via 2001:db8:6::1"], "exec",
     "gateway 2001:db8:6::1 is not in the host's subnet 2001:db8:5::a/64"),
    (["ip -6 addr add 2001:db8:5::a/64 dev eth1", "ip -6 route add default via fe80::1"], "exec[1]",
     "a link-local gateway (fe80::1) needs 'dev IF'"),
    (["ip -4 addr add 2001:db8:5::a/64 dev eth1"], "exec[0]", "is not an IPv4 address (ip -4)"),
    (["ip route add 0.0.0.0/0 via 2001:db8:5::1"], "exec[0]", "is not an IPv4 address (the route is 0.0.0.0/0)"),
    (["ip -6 addr add 2001:db8:5::a/127 dev eth1"], "exec[0]", "needs a prefix length below 127"),
    (["ip -6 addr add fe80::a/64 dev eth1"], "exec[0]", "is link-local"),
    (["ip -6 addr add 2001:db8:5::a/64 dev eth1", "ip -6 addr add 2001:db8:5::b/64 dev eth1"], "exec[1]",
     "a host has one IPv6 address"),
    (["ip addr add 10.5.0.9/24 dev eth1", "ip route add default via 10.5.0.1",
      "ip -6 addr add 2001:db8:5::a/64 dev eth2", "ip -6 route add default via 2001:db8:5::1"], "exec",
     "the addresses are on eth1 and eth2: a host has one link"),
    (["ip -6 addr add 2001:db8:5::a/64 dev eth1", "ip -6 route add default via fe80::1 dev eth2"], "exec",
     "the default route is via eth2, but the address is on eth1"),
    (["ip -6 neigh add 2001:db8:5::1 lladdr 02:00:00:00:00:01 dev eth1"], "exec[0]", "not supported on a host"),
])
def test_a_bad_ipv6_host_is_refused_with_a_location(tmp_path: Path, commands: list[str], loc: str,
                                                   words: str) -> None:
    with pytest.raises(InvalidLab) as err:
        load_topology(host_lab(tmp_path, commands))
    found = {e.loc: e.msg for e in err.value.errors}
    assert words in found.get(f"topology.nodes.h1.{loc}", ""), found


def test_an_ipv6_address_used_twice_is_refused(tmp_path: Path) -> None:
    path = gen(tmp_path, dual_doc(), 2)
    doc = yaml.safe_load(path.read_text())
    doc["topology"]["nodes"]["tor-0-0-h1"]["exec"][1] = "ip -6 addr add 2001:db8::a/64 dev eth1"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InvalidLab) as err:
        load_topology(path)
    assert {e.loc: e.msg for e in err.value.errors}["topology.nodes.tor-0-0-h1.exec"] == \
        "address 2001:db8::a already used by tor-0-0-h0"


# -- other files' hosts, read leniently --------------------------------------------------------


def test_another_files_host_shows_its_ipv6_in_lab_hosts(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "frr.conf").write_text("hostname r1\n")
    topo = {"nodes": {"r1": {"kind": "linux", "binds": ["r1:/etc/frr"]},
                      "s1": {"kind": "linux", "exec": ["ip link set eth1 up", "ip -6 addr add fe80::5/64 dev eth1",
                                                       "ip addr add 2001:db8:7::5/64 dev eth1",
                                                       "ip -6 route add default via fe80::1 dev eth1"]},
                      "s2": {"kind": "linux", "exec": ["ip -4 addr add 192.0.2.5/24 dev eth1",
                                                       "ip -6 a add 2001:db8:8::5/64 dev eth1",
                                                       "ip r add default via 192.0.2.1"]}},
            "links": [{"endpoints": ["r1:eth1", "s1:eth1"]}, {"endpoints": ["r1:eth2", "s2:eth1"]}]}
    (tmp_path / "lab.clab.yml").write_text(yaml.safe_dump({"name": "o", "topology": topo}))
    result = cli.invoke(app, ["lab", "hosts", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "s1": {"netns": "loom-o-s1", "tor": "r1", "address": "2001:db8:7::5", "prefix": "2001:db8:7::/64",
               "address6": "2001:db8:7::5", "prefix6": "2001:db8:7::/64"},
        "s2": {"netns": "loom-o-s2", "tor": "r1", "address": "192.0.2.5", "prefix": "192.0.2.0/24",
               "address6": "2001:db8:8::5", "prefix6": "2001:db8:8::/64"}}
    s1 = load_topology(tmp_path).node_map["s1"].host
    assert s1 is not None and s1.gateway6 == "fe80::1" and s1.gateway is None


# -- routes and sessions read back -------------------------------------------------------------

#: ``ip -j -4 route show table main`` of an unnumbered ToR: zebra 8.4 installs IPv4 routes over the peers'
#: link-local addresses (``via inet6``); the onlink form through 169.254.0.1 is read the same way
V4 = [{"dst": "10.0.0.0/24", "dev": "host0", "protocol": "kernel", "scope": "link", "prefsrc": "10.0.0.1",
       "flags": []},
      {"dst": "10.0.1.0/24", "nhid": 15, "protocol": "bgp", "metric": 20, "flags": [],
       "nexthops": [{"via": {"family": "inet6", "host": "fe80::9b:d4ff:fe28:47b3"}, "dev": "eth2", "weight": 1,
                     "flags": []},
                    {"via": {"family": "inet6", "host": "fe80::a84e:85ff:fe7d:efc7"}, "dev": "eth1", "weight": 1,
                     "flags": []}]},
      {"dst": "10.1.0.0/24", "nhid": 11, "via": {"family": "inet6", "host": "fe80::dcbf:6cff:fe46:930d"},
       "dev": "eth1", "protocol": "bgp", "metric": 20, "flags": []},
      {"dst": "10.1.1.0/24", "gateway": "169.254.0.1", "dev": "eth2", "protocol": "bgp", "metric": 20,
       "flags": ["onlink"]},
      {"dst": "100.127.0.9", "dev": "eth1", "protocol": "bgp", "flags": []}]
V6 = [{"dst": "2001:db8::/64", "dev": "host0", "protocol": "kernel", "metric": 256, "flags": [], "pref": "medium"},
      {"dst": "2001:db8:0:1::/64", "nhid": 15, "protocol": "bgp", "metric": 20, "flags": [], "pref": "medium",
       "nexthops": [{"gateway": "fe80::9b:d4ff:fe28:47b3", "dev": "eth2", "weight": 3, "flags": []},
                    {"gateway": "fe80::a84e:85ff:fe7d:efc7", "dev": "eth1", "weight": 1, "flags": []}]},
      {"dst": "2001:db8:1:0::/64", "nhid": 14, "gateway": "fe80::94df:8eff:fe08:f123", "dev": "eth1",
       "protocol": "bgp", "metric": 20, "flags": [], "pref": "medium"},
      {"dst": "2001:db8:ff::9", "dev": "eth2", "protocol": "bgp", "flags": []},
      {"dst": "default", "gateway": "fe80::1", "dev": "eth1", "protocol": "ra", "metric": 1024, "flags": []},
      {"dst": "fe80::/64", "dev": "eth2", "protocol": "kernel", "metric": 256, "flags": [], "pref": "medium"},
      {"type": "multicast", "dst": "ff00::/8", "dev": "eth1", "protocol": "kernel", "flags": []},
      {"type": "unreachable", "dst": "2001:db8:dead::/48", "dev": "lo", "protocol": "bgp", "flags": []}]


def test_routes_of_both_families_map_to_their_ports_by_dev() -> None:
    routes = routes_of_both(V4, V6)
    assert routes == {
        "10.0.1.0/24": [{"port": "eth1", "weight": 1}, {"port": "eth2", "weight": 1}],
        "10.1.0.0/24": [{"port": "eth1", "weight": 1}],
        "10.1.1.0/24": [{"port": "eth2", "weight": 1}],
        "100.127.0.9/32": [{"port": "eth1", "weight": 1}],
        "2001:db8:0:1::/64": [{"port": "eth1", "weight": 1}, {"port": "eth2", "weight": 3}],
        "2001:db8:1::/64": [{"port": "eth1", "weight": 1}],  # canonical text, as the intent writes it
        "2001:db8:ff::9/128": [{"port": "eth2", "weight": 1}]}
    assert parse_routes(json.dumps([{"dst": "default", "dev": "eth1", "protocol": "static"}]), 6) == {
        "::/0": [{"port": "eth1", "weight": 1}]}


def test_sessions_of_every_address_family_by_interface() -> None:
    summary = {"ipv4Unicast": {"routerId": "100.127.0.1", "peers": {
                   "eth1": {"hostname": "leaf-0-0", "state": "Established", "idType": "interface"},
                   "eth2": {"hostname": "leaf-0-1", "state": "Established", "idType": "interface"}}},
               "ipv6Unicast": {"routerId": "100.127.0.1", "peers": {
                   "eth1": {"state": "Established", "idType": "interface"},
                   "eth2": {"state": "Connect", "idType": "interface"},
                   "fd6c:6f6f:6d00:1::1": {"state": "Active", "idType": "ipv6"}}}}
    assert bgp_sessions(summary) == {"eth1": "Established", "eth2": "Connect", "fd6c:6f6f:6d00:1::1": "Active"}
    assert bgp_sessions({}) == {}


# -- IPv6 in every namespace, before its interfaces come up ------------------------------------


def two_node_lab(tmp_path: Path, sysctls: dict[str, str] | None = None) -> Path:
    (tmp_path / "r1").mkdir(exist_ok=True)
    (tmp_path / "r1" / "frr.conf").write_text("hostname r1\n!\nrouter bgp 65001\n neighbor eth1 interface "
                                              "remote-as external\n!\n")
    node: dict[str, Any] = {"kind": "linux", "exec": ["ip -6 addr add 2001:db8::5/64 dev eth1"]}
    if sysctls:
        node["sysctls"] = sysctls
    topo = {"nodes": {"r1": {"kind": "linux", "binds": ["r1/frr.conf:/etc/frr/frr.conf"]}, "s1": node},
            "links": [{"endpoints": ["r1:eth1", "s1:eth1"]}]}
    (tmp_path / "lab.clab.yml").write_text(yaml.safe_dump({"name": "t6", "topology": topo}))
    return tmp_path


def _before_up(script: str, needle: str, port: str = "eth1") -> bool:
    lines = script.splitlines()
    return any(needle in line for line in lines[:lines.index(f"ip link set {port} up")])


def test_a_router_has_ipv6_forwarding_and_no_dad_before_its_links_come_up(tmp_path: Path) -> None:
    topo = load_topology(two_node_lab(tmp_path))
    script = runner._node_script("t6", topo, "r1", {("r1", "eth1"): "tmp0", ("s1", "eth1"): "tmp1"},
                                 tmp_path, ["zebra", "bgpd"])
    for key in ("net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.accept_dad=0",
                "net.ipv6.conf.all.forwarding=1", "net.ipv6.fib_multipath_hash_policy=1", "net.ipv4.ip_forward=1"):
        assert _before_up(script, key), (key, script)
    assert _before_up(script, "echo 0 > /proc/sys/net/ipv6/conf/eth1/accept_dad")


def test_a_hosts_own_sysctls_win(tmp_path: Path) -> None:
    topo = load_topology(two_node_lab(tmp_path, {"net.ipv6.conf.default.accept_dad": "1",
                                                 "net.ipv6.conf.all.disable_ipv6": "1",
                                                 "net.ipv6.conf.eth1.mtu": "1400"}))
    temp = {("r1", "eth1"): "tmp0", ("s1", "eth1"): "tmp1"}
    script = bare_host_script(topo, "s1", temp)
    lines = script.splitlines()
    loom = [line for line in lines if "sysctl -q -e -w" in line]  # Loom's: neither of a pair the host sets
    assert not any("disable_ipv6" in line or "accept_dad" in line for line in loom), loom
    assert lines.index("sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 >/dev/null") < lines.index("ip link set eth1 up")
    assert lines.index("sysctl -q -w net.ipv6.conf.eth1.mtu=1400 >/dev/null") > lines.index("ip link set eth1 up")
    assert not any("accept_dad" in line for line in link_lines(topo, "s1", temp))  # DAD as the host asks
    assert any("accept_dad" in line for line in link_lines(topo, "r1", temp))
