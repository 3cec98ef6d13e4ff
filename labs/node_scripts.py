"""The shell lines that set up a lab node's links and devices, and its ``exec`` commands' argv.

This module owns the text :mod:`labs.runner` runs inside a node's namespace for
what the topology file says of links (their temporary veth names renamed to the
link ends' interfaces, MTU, MAC, up), sysctls, ``kind: bridge`` nodes and hosts
that are not Loom's; it runs nothing itself.

Every node's IPv6 is on and its addresses are usable at once (:data:`IPV6_SYSCTLS`:
no duplicate address detection, so no address stays ``tentative`` for a second or
two), set before any interface comes up: the sysctls of ``all`` and ``default``
first (interfaces made later inherit them), then ``accept_dad`` on each link end
before it goes up (the veths were made in the namespace before its script ran, and
the kernel skips DAD only where both ``all`` and the interface say so). Routers also
forward both families and hash flows by L4 (:data:`ROUTER_SYSCTLS`). A node's own
``sysctls`` are set after these, so they win; those naming one of its interfaces
(``net.ipv6.conf.eth1.*``) once its links exist, the others before them, as
containerlab sets them at the container's creation.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from labs.clab import ClabNode, Topology

__all__ = ["IPV6_SYSCTLS", "ROUTER_SYSCTLS", "bare_host_script", "bridge_script", "exec_argv", "link_lines",
           "sysctl_lines"]

#: every lab node: IPv6 on, addresses usable at once
IPV6_SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": "0", "net.ipv6.conf.default.disable_ipv6": "0",
                "net.ipv6.conf.all.accept_dad": "0", "net.ipv6.conf.default.accept_dad": "0"}
#: every router besides: forwarding of both families, L4 multipath hashing, no reverse-path filter
ROUTER_SYSCTLS = {"net.ipv4.ip_forward": "1", "net.ipv4.fib_multipath_hash_policy": "1",
                  "net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf.default.rp_filter": "0",
                  "net.ipv6.conf.all.forwarding": "1", "net.ipv6.fib_multipath_hash_policy": "1"}
_DAD_KEYS = ("net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad")


def _key(name: str) -> str:
    """A sysctl's name with dots (``net/ipv6/conf/all/forwarding`` is ``net.ipv6.conf.all.forwarding``)."""
    return name.replace("/", ".")


def _pair(key: str) -> str:
    """A sysctl's name with ``all`` and ``default`` as one (``net.ipv6.conf.*.accept_dad``): a node that sets
    either has Loom set neither."""
    return re.sub(r"\.conf\.(all|default)\.", ".conf.*.", key)


def _dad_off(node: ClabNode) -> bool:
    """Whether Loom turns DAD off on the node's link ends: unless its own sysctls say otherwise."""
    return not any(_key(k) in _DAD_KEYS for k in node.sysctls)


_PER_INTERFACE = re.compile(r"^net[./]ipv[46][./](?:conf|neigh)[./](.+)[./][^./]+$")


def _names_interface(key: str) -> bool:
    """Whether a sysctl is one interface's (``net.ipv4.conf.eth1.rp_filter``), not ``all``'s or ``default``'s."""
    m = _PER_INTERFACE.match(key)
    return m is not None and m.group(1) not in ("all", "default")


def sysctl_lines(node: ClabNode, defaults: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The node's sysctl lines: Loom's ``defaults`` (those the node does not set itself, ``all`` and
    ``default`` counting as one; a kernel without one, such as one without IPv6, skips it) and the node's
    own ``sysctls``, as ``(before its links, after them)``: its own that name an interface come after."""
    own = {_pair(_key(k)) for k in node.sysctls}
    mine = {k: v for k, v in defaults.items() if _pair(k) not in own}
    before = [f"sysctl -q -e -w {' '.join(shlex.quote(f'{k}={v}') for k, v in mine.items())} >/dev/null"] \
        if mine else []
    after: list[str] = []
    for k, v in node.sysctls.items():
        line = f"sysctl -q -w {shlex.quote(f'{k}={v}')} >/dev/null"
        (after if _names_interface(k) else before).append(line)
    return before, after


def link_lines(topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str]) -> list[str]:
    """The node's link ends renamed from their temporary names and up, with their MTU and MAC if given, and
    (unless the node's sysctls set ``accept_dad``) no duplicate address detection on them."""
    lines = []
    dad_off = _dad_off(topo.node_map[node])
    for link in topo.links:
        for end, port, mac in ((link.a, link.a_port, link.a_mac), (link.b, link.b_port, link.b_mac)):
            if end != node:
                continue
            lines.append(f"ip link set {temp_names[node, port]} name {port}")
            if link.mtu is not None:
                lines.append(f"ip link set {port} mtu {link.mtu}")
            if mac is not None:
                lines.append(f"ip link set {port} address {mac}")
            if dad_off:
                conf = f"/proc/sys/net/ipv6/conf/{port}"
                lines.append(f"if [ -e {conf} ]; then echo 0 > {conf}/accept_dad; fi")
            lines.append(f"ip link set {port} up")
    return lines


def bare_host_script(topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str]) -> str:
    """A host of a containerlab file: IPv6 on, its links renamed and up, its sysctls; its ``exec`` commands
    run afterwards (:func:`labs.runner.run_execs`)."""
    before, after = sysctl_lines(topo.node_map[node], IPV6_SYSCTLS)
    lines = ["set -e", *before, "ip link set lo up", *link_lines(topo, node, temp_names), *after]
    return "\n".join(lines) + "\n"



def bridge_script(topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str]) -> str:
    """A ``kind: bridge`` node: a bridge named after the node (``br0`` if the name is no interface
    name) with every link end of the node in it (IPv6 on, as everywhere)."""
    name = node if len(node) <= 15 and node.replace("-", "").replace("_", "").isalnum() else "br0"
    before, _after = sysctl_lines(topo.node_map[node], IPV6_SYSCTLS)
    lines = ["set -e", *before, "ip link set lo up", f"ip link add {name} type bridge", f"ip link set {name} up",
             *link_lines(topo, node, temp_names)]
    lines += [f"ip link set {port} master {name}" for port, _peer, _pp in topo.ports(node)]
    return "\n".join(lines) + "\n"


def exec_argv(command: str, node_dir: Path | None) -> list[str]:
    """An ``exec`` command as containerlab runs it (split as a shell would, no shell); ``vtysh`` is
    pointed at the node's own FRR."""
    argv = shlex.split(command)
    if argv and Path(argv[0]).name == "vtysh" and node_dir is not None:
        argv[1:1] = ["--vty_socket", str(node_dir), "--config_dir", str(node_dir)]
    return argv
