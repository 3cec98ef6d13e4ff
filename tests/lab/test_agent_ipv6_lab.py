"""``fib`` WCMP over IPv6 link-local next hops in a real kernel (#36): the agent's backend, in a router's network
namespace, installs an IPv4 and an IPv6 route whose next hops have no gateway (an unnumbered underlay), each over
the peer's link-local address it finds in the kernel's neighbor table, with the plan's weights; reads them back
per port; traffic of both families reaches the peer over them; a next hop over a port whose peer nothing knows
fails the Prepare and the Commit with the port named, the routes installed before left whole; removing the routes
leaves none; a port that flaps loses its next hops and gets them back over the address found before (the
kernel flushed its neighbors), and an agent that never saw the peer repairs the other routes at once and gets it
back once the peer answers; a global IPv6 gateway (ipv6-numbered) serves routes of both families too. Two
namespaces joined by three veth pairs, no FRR (the peer is a plain IPv6 router)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
R, P = "loom6fib-r", "loom6fib-p"

#: run inside R: install, read back, refuse eth3, flap eth1, remove, then numbered; prints what it saw as JSON
SCRIPT = r"""
import json, subprocess, sys, time
from pathlib import Path
from southbound.device.frr_apply import FrrReload
from southbound.device.linklocal import UnresolvedNextHop
from southbound.rendered import FibHop, Rendered
from controller.model.errors import FrrError

work = Path(sys.argv[1])
be = FrrReload(work / "vty", work / "work")  # no FRR here: bgpd is not asked
fib = {"10.9.9.0/24": (FibHop("eth1", "g1", 3), FibHop("eth2", "g1", 1)),
       "2001:db8:9::/64": (FibHop("eth1", "g2", 1), FibHop("eth2", "g2", 4))}
out = {}

def kernel(prefixes):
    return {p: [[h.port, h.via, h.weight] for h in r.nexthops] for p, r in be.read_routes(prefixes, None)[1].items()}

def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True)

be._install_fib({}, fib)
out["installed"] = kernel(list(fib))
out["protocols"] = sorted({r.protocol for r in be.read_routes(list(fib), None)[1].values()})
out["ping4"] = run("ping", "-c", "2", "-i", "0.2", "-W", "1", "-I", "10.8.8.1", "10.9.9.1").returncode == 0
out["ping6"] = run("ping", "-c", "2", "-i", "0.2", "-W", "1", "-I", "2001:db8:8::1", "2001:db8:9::1").returncode == 0
bad = dict(fib, **{"10.9.9.0/24": fib["10.9.9.0/24"] + (FibHop("eth3", "g1", 2),)})
try:
    be.check_fib(Rendered("r", "", bad))
    out["prepare"] = "accepted"
except UnresolvedNextHop as exc:
    out["prepare"] = str(exc)
try:
    be._install_fib(fib, bad)
    out["commit"] = "accepted"
except FrrError as exc:
    out["commit"] = str(exc)
out["after_refusal"] = kernel(list(fib))
recorded = Rendered("r", "", fib)
run("ip", "link", "set", "eth1", "down")  # the kernel flushes eth1's neighbors
be.repair_fib(recorded, frozenset({"eth1"}))
out["eth1_down"] = kernel(list(fib))
run("ip", "link", "set", "eth1", "up")
neigh = json.loads(run("ip", "-j", "-6", "neigh", "show", "dev", "eth1").stdout or "[]")
out["eth1_neighbors_after_flap"] = [n for n in neigh if "router" in n]
be.repair_fib(recorded, frozenset())
out["eth1_up"] = kernel(list(fib))
# a new agent process (nothing remembered) repairs while eth1's peer is not in the neighbor table yet
run("ip", "link", "set", "eth1", "down")
fresh = FrrReload(work / "vty", work / "work")
fresh._installed = dict(be._installed)
fresh.repair_fib(recorded, frozenset({"eth1"}))
run("ip", "link", "set", "eth1", "up")
try:
    fresh.repair_fib(recorded, frozenset())
    out["fresh_repair"] = "accepted"
except UnresolvedNextHop as exc:
    out["fresh_repair"] = list(exc.ports)
out["fresh_without_eth1"] = kernel(list(fib))
for _ in range(20):  # the peer answers (once eth1 has its link-local address again): the neighbor table has it
    if run("ping", "-c", "1", "-W", "1", sys.argv[2] + "%eth1").returncode == 0:
        break
    time.sleep(0.2)
fresh.repair_fib(recorded, frozenset())
out["fresh_eth1_back"] = kernel(list(fib))
be = fresh
be._install_fib(fib, {})
out["removed"] = sorted(kernel(list(fib)))
numbered = {"10.9.8.0/24": (FibHop("eth2", "g3", 2, "fd6c::1"), FibHop("eth1", "g3", 1)),
            "2001:db8:9:8::/64": (FibHop("eth2", "g4", 1, "fd6c::1"),)}
be._install_fib({}, numbered)
out["numbered"] = kernel(list(numbered))
be._install_fib(numbered, {})
print(json.dumps(out))
"""


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout


def link_local(ns: str, port: str) -> str:
    doc = json.loads(sh("ip", "netns", "exec", ns, "ip", "-j", "-6", "addr", "show", "dev", port))
    return next(str(a["local"]) for a in doc[0]["addr_info"] if a.get("scope") == "link")


@pytest.fixture(scope="module")
def pair() -> Iterator[dict[str, str]]:
    """R and P joined on eth1..eth3, IPv6 on (no DAD), P a router (forwarding) with 10.9.9.1 and 2001:db8:9::1 on
    its loopback and routes back to R's; R has resolved P on eth1 and eth2 (a ping each), never on eth3."""
    for ns in (R, P):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    try:
        for ns in (R, P):
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0",
               "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.forwarding=1", "net.ipv4.ip_forward=1")
        for i in (1, 2, 3):
            sh("ip", "link", "add", f"eth{i}", "netns", R, "type", "veth", "peer", f"eth{i}", "netns", P)
        for ns in (R, P):
            for port in ("lo", "eth1", "eth2", "eth3"):
                sh("ip", "netns", "exec", ns, "ip", "link", "set", port, "up")
        sh("ip", "netns", "exec", R, "ip", "addr", "add", "10.8.8.1/32", "dev", "lo")
        sh("ip", "netns", "exec", R, "ip", "addr", "add", "2001:db8:8::1/128", "dev", "lo")
        sh("ip", "netns", "exec", P, "ip", "addr", "add", "10.9.9.1/32", "dev", "lo")
        sh("ip", "netns", "exec", P, "ip", "addr", "add", "2001:db8:9::1/128", "dev", "lo")
        sh("ip", "netns", "exec", R, "ip", "addr", "add", "fd6c::/127", "dev", "eth2")  # ipv6-numbered on eth2
        sh("ip", "netns", "exec", P, "ip", "addr", "add", "fd6c::1/127", "dev", "eth2")
        back = link_local(R, "eth1")
        sh("ip", "netns", "exec", P, "ip", "-4", "route", "add", "10.8.8.0/24", "via", "inet6", back, "dev", "eth1")
        sh("ip", "netns", "exec", P, "ip", "-6", "route", "add", "2001:db8:8::/64", "via", back, "dev", "eth1")
        peers = {port: link_local(P, port) for port in ("eth1", "eth2", "eth3")}
        for port in ("eth1", "eth2"):  # R learns P there as a router (P forwards: its NA has the R flag)
            subprocess.run(["ip", "netns", "exec", R, "ping", "-c", "1", "-W", "2", f"{peers[port]}%{port}"],
                           capture_output=True, timeout=10)
        yield peers
    finally:
        for ns in (R, P):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_fib_routes_of_both_families_over_link_local_next_hops(pair: dict[str, str], tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = ["ip", "netns", "exec", R, sys.executable, "-c", SCRIPT, str(tmp_path), pair["eth1"]]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    ll1, ll2 = pair["eth1"], pair["eth2"]
    want = {"10.9.9.0/24": [["eth1", ll1, 3], ["eth2", ll2, 1]],
            "2001:db8:9::/64": [["eth1", ll1, 1], ["eth2", ll2, 4]]}
    assert seen["installed"] == want
    assert seen["protocols"] == ["loom"]
    assert seen["ping4"] and seen["ping6"], "traffic over the link-local next hops"
    assert "eth3" in seen["prepare"] and "link-local" in seen["prepare"]
    assert "eth3" in seen["commit"]
    assert seen["after_refusal"] == want  # nothing half installed
    # eth1 down: its next hops leave both routes; up again before the peer is in the neighbor table again, they
    # come back over the address found before
    assert seen["eth1_down"] == {p: [[port, via, 1] for port, via, _ in hops if port != "eth1"]  # one path: no weight
                                 for p, hops in want.items()}
    assert seen["eth1_neighbors_after_flap"] == []
    assert seen["eth1_up"] == want
    # an agent that never saw eth1's peer repairs the rest at once and retries eth1 until it is found
    assert seen["fresh_repair"] == ["eth1"]
    assert seen["fresh_without_eth1"] == seen["eth1_down"]
    assert seen["fresh_eth1_back"] == want
    assert seen["removed"] == []
    # ipv6-numbered: the peer's global IPv6 address as the gateway of an IPv4 route (RTA_VIA) and an IPv6 one,
    # beside an unnumbered next hop in one group
    assert seen["numbered"] == {"10.9.8.0/24": [["eth2", "fd6c::1", 2], ["eth1", ll1, 1]],
                                "2001:db8:9:8::/64": [["eth2", "fd6c::1", 1]]}
