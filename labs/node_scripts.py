"""The shell lines that set up a lab node's links and devices, and its ``exec`` commands' argv.

This module owns the text :mod:`labs.runner` runs inside a node's namespace for
what the topology file says of links (their temporary veth names renamed to the
link ends' interfaces, MTU, MAC, up), sysctls, ``kind: bridge`` nodes and hosts
that are not Loom's; it runs nothing itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from labs.clab import ClabNode, Topology

__all__ = ["bare_host_script", "bridge_script", "exec_argv", "link_lines", "sysctl_lines"]


def link_lines(topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str]) -> list[str]:
    """The node's link ends renamed from their temporary names and up, with their MTU and MAC if given."""
    lines = []
    for link in topo.links:
        for end, port, mac in ((link.a, link.a_port, link.a_mac), (link.b, link.b_port, link.b_mac)):
            if end != node:
                continue
            lines.append(f"ip link set {temp_names[node, port]} name {port}")
            if link.mtu is not None:
                lines.append(f"ip link set {port} mtu {link.mtu}")
            if mac is not None:
                lines.append(f"ip link set {port} address {mac}")
            lines.append(f"ip link set {port} up")
    return lines


def sysctl_lines(node: ClabNode) -> list[str]:
    return [f"sysctl -q -w {shlex.quote(f'{k}={v}')} >/dev/null" for k, v in node.sysctls.items()]


def bare_host_script(topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str]) -> str:
    """A host of a containerlab file: its links renamed and up, its sysctls; its ``exec`` commands run
    afterwards (:func:`labs.runner.run_execs`)."""
    lines = ["set -e", "ip link set lo up", *link_lines(topo, node, temp_names),
             *sysctl_lines(topo.node_map[node])]
    return "\n".join(lines) + "\n"


def bridge_script(topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str]) -> str:
    """A ``kind: bridge`` node: a bridge named after the node (``br0`` if the name is no interface
    name) with every link end of the node in it."""
    name = node if len(node) <= 15 and node.replace("-", "").replace("_", "").isalnum() else "br0"
    lines = ["set -e", "ip link set lo up", f"ip link add {name} type bridge", f"ip link set {name} up",
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
