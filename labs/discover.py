"""Discovery's reader for a lab: what each router of a running lab runs, read in its namespace.

For every router node of the lab's topology it reads FRR's ``show running-config`` through the
node's vty sockets (``RUN/<lab>/<node>``), the kernel's interfaces (``ip -j -d addr``), their
speeds (``/sys/class/net/IF/speed``) and IPv6 link-local neighbours (``ip -j -6 neigh``: they pair
the ends of an unnumbered fabric's links) inside ``loom-<lab>-<node>``, as
:class:`~southbound.discovery.observed.ObservedDevice` values for
:func:`southbound.discovery.infer.discover`.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from labs import runner
from labs.clab import Topology
from southbound.discovery.observed import ObservedDevice, interfaces_from_ip_json

__all__ = ["observe_lab"]

_SPEEDS = 'for f in /sys/class/net/*/speed; do n=${f#/sys/class/net/}; echo "${n%/speed} $(cat $f 2>/dev/null)"; done'


def _speeds(text: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        out[name] = int(value) if value.strip().lstrip("-").isdigit() and int(value) > 0 else None
    return out


def observe_node(lab: str, node: str) -> ObservedDevice:
    """What router ``node`` of running lab ``lab`` runs."""
    vty = str(runner.run_dir(lab) / node)
    config = runner.node_exec(lab, node, ["vtysh", "--vty_socket", vty, "-c", "show running-config"])
    addr = runner.node_exec(lab, node, ["ip", "-j", "-d", "addr"])
    speeds = _speeds(runner.node_exec(lab, node, ["sh", "-c", _SPEEDS], check=False))
    neigh = runner.node_exec(lab, node, ["ip", "-j", "-6", "neigh", "show"], check=False) or "[]"
    json.loads(addr)  # fail here, with the node's name in the traceback, on output that is not JSON
    return ObservedDevice(node, config, interfaces_from_ip_json(addr, speeds, neigh))


def observe_lab(topo: Topology, *, workers: int = 4) -> list[ObservedDevice]:
    """Every router of the running lab ``topo``, observed (hosts are not routers)."""
    if not runner.run_dir(topo.name).exists():
        raise runner.LabError(f"lab {topo.name} is not running (loom lab up {topo.directory})")
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda n: observe_node(topo.name, n.name), topo.routers))
