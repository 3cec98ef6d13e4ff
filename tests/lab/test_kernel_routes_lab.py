"""The kernel routes read over netlink against ``ip -j route``, the form they replace.

In a namespace of this test's own, with the routes FRR and Loom install (BGP's weighted multipath, IS-IS's
IPv6 over link-local gateways, an IPv4 route over an IPv6 next hop as RFC 8950 has it, Loom's own protocol, a
host route, a blackhole, a next hop made dead by its port going down, a second table that the main table's
reading leaves out):

* the agent's reading (:func:`southbound.netlink.routes_ip_json`) and ``ip -j route`` go through the
  same parsers, the read-back's :func:`~southbound.device.frr_apply.kernel_route_from_ip_json` and the
  link-local resolver's :func:`~southbound.device.linklocal.route_link_locals`, with the same answers;
* the lab's reading from outside the namespace, over a socket opened in it
  (:func:`southbound.netlink.routes_ip_json` with ``netns``), gives what the reading inside gives;
* the telemetry counters' FIB prefixes (:func:`~southbound.device.counters.read_fib_prefixes`) are those
  pyroute2 decodes from the same dump, which they replace;
* the counters' nftables commands run in process (:mod:`southbound.device.nftables`) print what ``nft -j``
  prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from southbound import netlink
from southbound.device.frr_apply import kernel_route_from_ip_json

NS = f"loomnl-{os.getpid()}"

SETUP = [
    "ip link set lo up",
    "sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0",
    *(f"ip link add v{i}a type veth peer name v{i}b" for i in range(3)),
    *(f"ip link set v{i}{e} up" for i in range(3) for e in "ab"),
    *(f"ip addr add 10.0.{i}.1/24 dev v{i}a" for i in range(3)),
    *(f"ip -6 addr add fe80::a:{i}/64 dev v{i}a" for i in range(3)),
    "ip route add 10.50.0.0/24 proto bgp nexthop via 10.0.0.2 dev v0a weight 3 nexthop via 10.0.1.2 dev v1a weight 1",
    "ip route add 10.51.0.1/32 proto 250 via 10.0.0.2 dev v0a",
    "ip route add 10.52.0.0/24 proto bgp via inet6 fe80::b:0 dev v0a",
    "ip route add blackhole 10.54.0.0/24 proto bgp",
    "ip route add default proto bgp via 10.0.1.2 dev v1a metric 20",
    "ip route add default proto ospf via 10.0.0.2 dev v0a metric 10",
    "ip route add 10.55.0.0/24 proto isis via 10.0.0.2 dev v0a table 7",
    "ip route add 10.53.0.0/24 proto bgp nexthop via 10.0.2.2 dev v2a nexthop via 10.0.0.2 dev v0a weight 2",
    "ip -6 route add 2001:db8:50::/64 proto isis nexthop via fe80::b:0 dev v0a weight 2 nexthop via fe80::b:1 dev v1a",
    "ip -6 route add 2001:db8:51::1/128 proto 250 via fe80::b:1 dev v1a",
    "ip -6 route add 2001:db8:52::/48 proto bgp nexthop via fe80::b:2 dev v2a nexthop via fe80::b:0 dev v0a",
    "ip link set v2a down",  # its next hops go dead (the multipath routes keep the others)
]

#: run inside the namespace: both readings through both parsers, and the agent's own read-back
PROBE = r"""
import json, subprocess
from pathlib import Path
from southbound.device.frr_apply import FrrReload, kernel_route_from_ip_json
from southbound.netlink import routes_ip_json
from southbound.device.linklocal import route_link_locals
out = {}
for v in (4, 6):
    ip = json.loads(subprocess.run(["ip", "-j", f"-{v}", "route", "show", "table", "main"], check=True,
                                   capture_output=True, text=True).stdout)
    nl = routes_ip_json(v)
    out[v] = {"ip": [repr(kernel_route_from_ip_json(r, v)) for r in ip],
              "nl": [repr(kernel_route_from_ip_json(r, v)) for r in nl],
              "ip_ll": route_link_locals(ip), "nl_ll": route_link_locals(nl),
              "ip_dst": [r["dst"] for r in ip], "nl_dst": [r["dst"] for r in nl]}
from pyroute2 import IPRoute
from southbound.device.counters import canonical, read_fib_prefixes
decoded = set()
with IPRoute() as ipr:  # the prefixes counted, as pyroute2 decoded them before
    for family in (2, 10):
        for r in ipr.get_routes(family=family, table=254):
            if r["proto"] != 2 and r["scope"] == 0 and r["dst_len"] and r["type"] == 1:
                decoded.add(canonical(f"{r.get_attr('RTA_DST')}/{r['dst_len']}"))
out["fib"] = [sorted(read_fib_prefixes()), sorted(decoded)]
from southbound.device import nftables
nftables.run("add table ip t\nadd chain ip t forward { type filter hook forward priority -150; policy accept; }\n"
             'add rule ip t forward ip daddr 10.50.0.0/24 counter accept comment "10.50.0.0/24"\n')
cli = subprocess.run(["nft", "-j", "list", "table", "ip", "t"], check=True, capture_output=True, text=True).stdout
try:
    nftables.run("list table ip nope", json=True)
    refused = ""
except nftables.NftError as exc:
    refused = str(exc)
out["nft"] = [nftables.run("list table ip t", json=True) == cli, refused]
observed, routes = FrrReload(Path("/nonexistent"), Path("/nonexistent")).read_routes([], None)
out["read"] = {p: [(h.port, h.via, h.weight) for h in r.nexthops] for p, r in routes.items()}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def namespace() -> Iterator[str]:
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        for line in SETUP:
            subprocess.run(["ip", "netns", "exec", NS, *line.split()], check=True, capture_output=True, text=True)
        yield NS
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def test_netlink_routes_read_as_ip_json_reads_them(namespace: str) -> None:
    proc = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", PROBE], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    for v in ("4", "6"):
        assert got[v]["nl"] == got[v]["ip"], v
        assert got[v]["nl_ll"] == got[v]["ip_ll"], v
        assert got[v]["nl_dst"] == got[v]["ip_dst"], v  # the same routes, in the kernel's order
    counted, decoded = got["fib"]
    assert counted == decoded
    assert "10.50.0.0/24" in counted and "2001:db8:50::/64" in counted and "0.0.0.0/0" not in counted
    for version in (4, 6):  # read from outside, through a socket opened in the namespace: what the inside read
        outside = [repr(kernel_route_from_ip_json(r, version))
                   for r in netlink.routes_ip_json(version, netns=namespace)]
        assert outside == got[str(version)]["nl"], version
    assert {x.name for x in netlink.dump_links(netns=namespace)} == {"lo", "v0a", "v0b", "v1a", "v1b", "v2a", "v2b"}
    with pytest.raises(FileNotFoundError):
        netlink.dump_links(netns=f"{namespace}-not-there")
    with pytest.raises(ValueError, match="not a network namespace name"):
        netlink.dump_links(netns="../x")
    same, refused = got["nft"]
    assert same  # libnftables in process prints what nft -j prints
    assert "No such file or directory" in refused and "list table ip nope" in refused
    read = got["read"]
    assert read["10.50.0.0/24"] == [["v0a", "10.0.0.2", 3], ["v1a", "10.0.1.2", 1]]
    assert read["10.53.0.0/24"] == [["v0a", "10.0.0.2", 2]]  # the next hop over the port that is down: dead
    assert read["10.52.0.0/24"] == [["v0a", "fe80::b:0", 1]]  # RFC 8950: an IPv4 route over an IPv6 next hop
    assert read["10.51.0.1/32"] == [["v0a", "10.0.0.2", 1]]  # Loom's own protocol, a host route
    assert read["0.0.0.0/0"] == [["v0a", "10.0.0.2", 1]]  # the lowest metric is the one the kernel forwards on
    assert read["2001:db8:50::/64"] == [["v0a", "fe80::b:0", 2], ["v1a", "fe80::b:1", 1]]
    assert read["2001:db8:52::/48"] == [["v0a", "fe80::b:0", 1]]
    assert "10.55.0.0/24" not in read  # another table's
    assert "10.0.0.0/24" not in read  # connected: the kernel's own
