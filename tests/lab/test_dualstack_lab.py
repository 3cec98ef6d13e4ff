"""A generated dual-stack Clos on an unnumbered underlay comes up as a lab (#36): IPv6 in every namespace,
BGP on the interfaces, both families in every kernel, dual-stack hosts that reach each other.

One lab for the module (``loom lab gen --hosts 1`` of a 3-tier Clos: 2 pods of 2 ToRs, 2 planes of one
spine, ``defaults.underlay: unnumbered``, every ToR originating ``10.P.T.0/24`` and ``2001:db8:P:T::/64``)
brought up by :func:`tests.labkit.lab_up` and converged. The tests hold it to the lab contracts without a
controller: every router's kernel routes every remote prefix of both families over exactly the ports
BGP's ECMP gives (the routing's equal-cost next hops, :func:`solver.core.routing.next_hops`: the intent
carries no WCMP until a plan is committed), and ``loom lab routes`` lists them so; ``loom lab status``
shows every session established on its interface; every namespace has IPv6 on with its addresses usable
(none tentative, a link-local address on every link end), routers forwarding it; ``loom lab hosts`` gives
every host both addresses, and every host pings every other over IPv4 and IPv6. The lab is taken down at
the end, and no namespace of it is left.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.gen import with_family
from controller.model.intent import validate_intent
from labs import runner
from labs.clab import Topology
from labs.gen import clos3_document
from solver.core.routing import next_hops
from tests import dualstack
from tests.dualstack import until
from tests.labkit import lab_down, lab_up

REPO = Path(__file__).resolve().parents[2]
LOOM = [sys.executable, "-c", "from controller.cli import main; main()"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
LAB = "dsl6"


def dual_stack_doc() -> dict[str, Any]:
    """Clos 2x2x2x1, dual-stack ToR prefixes (``loom gen clos --family dual``'s), unnumbered underlay."""
    doc = with_family(clos3_document(LAB, pods=2, tors=2, planes=2, spines=1), "dual")
    assert doc["defaults"]["underlay"] == "unnumbered"
    return doc


def loom(*args: str) -> Any:
    out = subprocess.run([*LOOM, *args, "--json"], capture_output=True, text=True, timeout=120, env=ENV, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    doc = dual_stack_doc()
    try:
        yield lab_up(tmp_path_factory.mktemp(LAB), LAB, doc, hosts=1, timeout=90)
    finally:
        lab_down(LAB, doc)  # the hosts' namespaces too: the lab's state file lists every namespace it made
        left = {ns for ns in runner.existing_namespaces() if ns.startswith(f"loom-{LAB}-")}
        assert not left, left


def expected() -> dict[str, dict[str, list[str]]]:
    """router -> prefix -> the ports BGP's ECMP forwards it on, both families."""
    out: dict[str, dict[str, list[str]]] = {}
    for prefix, devices in next_hops(validate_intent(dual_stack_doc())).items():
        for device, hops in devices.items():
            out.setdefault(device, {})[prefix] = sorted(port for port, _peer in hops)
    return out


def route_mismatches(routes: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """Where ``loom lab routes`` differs from BGP's ECMP: a missing prefix, other ports, unequal weights."""
    bad = []
    for node, want in sorted(expected().items()):
        for prefix, ports in sorted(want.items()):
            hops = routes.get(node, {}).get(prefix)
            if hops is None or sorted(h["port"] for h in hops) != ports or {h["weight"] for h in hops} != {1}:
                bad.append(f"{node} {prefix}: {hops}, want {ports}")
    return bad


def test_every_kernel_routes_every_remote_prefix_of_both_families_over_bgps_ecmp(lab: Topology) -> None:
    intent = validate_intent(dual_stack_doc())
    assert {p.version for p in intent.prefixes} == {4, 6}
    want = expected()
    for router in (n.name for n in lab.routers):
        remote = {p.prefix for p in intent.prefixes if router not in p.origins}
        assert set(want[router]) == remote, router  # every router, every remote prefix of both families
    def mismatches() -> list[str]:
        return route_mismatches(loom("lab", "routes", str(lab.directory)))

    until(lambda: not mismatches(), 30, "loom lab routes differs from BGP's ECMP", lambda: mismatches()[:6])
    for router, prefixes_ in want.items():  # the agent's reader of the kernel agrees
        kernel = dualstack.kernel(LAB, router)
        assert {p: sorted(kernel.get(p, {})) for p in prefixes_} == prefixes_, router
    tor = runner.node_routes(LAB, "tor-0-0", dst="10.1.1.0/24")
    gateways = {h.get("via", {}).get("host") or h.get("gateway") for h in tor[0]["nexthops"]}
    assert all(g == "169.254.0.1" or g.startswith("fe80:") for g in gateways), gateways  # IPv4 over IPv6


def test_status_shows_every_session_established_on_its_interface(lab: Topology) -> None:
    nodes = loom("lab", "status", str(lab.directory))["nodes"]
    for router in lab.routers:
        ports = {port for port, peer, _pp in lab.ports(router.name) if lab.node_map[peer].is_router}
        assert nodes[router.name]["sessions"] == {p: "Established" for p in ports}, router.name


def test_every_namespace_has_ipv6_with_usable_addresses(lab: Topology) -> None:
    for node in lab.nodes:
        addrs = json.loads(runner.node_exec(LAB, node.name, ["ip", "-j", "-6", "addr"]))
        tentative = [(a["ifname"], i["local"]) for a in addrs for i in a.get("addr_info", []) if i.get("tentative")]
        assert not tentative, (node.name, tentative)
        local = {a["ifname"] for a in addrs for i in a.get("addr_info", []) if i.get("scope") == "link"}
        assert {port for port, _peer, _pp in lab.ports(node.name)} <= local, node.name
        forwarding = runner.node_exec(LAB, node.name, ["sysctl", "-n", "net.ipv6.conf.all.forwarding"]).strip()
        assert forwarding == ("1" if node.is_router else "0"), node.name


def test_hosts_have_both_families_and_reach_each_other_over_both(lab: Topology) -> None:
    hosts = loom("lab", "hosts", str(lab.directory))
    assert len(hosts) == 4
    for name, h in hosts.items():
        tor = h["tor"]
        p, t = tor.split("-")[1:]
        six = str(ipaddress.IPv6Network(f"2001:db8:{p}:{t}::/64"))
        assert (h["prefix"], h["prefix6"]) == (f"10.{p}.{t}.0/24", six), name
        assert h["address6"].endswith("::a"), name
    until(lambda: not dualstack.unreachable(hosts), 30, "some hosts cannot reach each other",
          lambda: dualstack.unreachable(hosts))
