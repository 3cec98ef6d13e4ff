"""Lab generation: from an intent to a containerlab lab directory.

This module owns ``loom lab gen``: for an intent it writes
``topology.clab.yml`` (a node of kind ``linux`` per device, a link per intent
link with the intent's port names), each node's ``frr.conf`` rendered by
:func:`southbound.render.render_frr` (the one source of FRR syntax) and its
``daemons`` file, and the intent itself as ``intent.yaml``; with ``hosts=N``,
N host nodes behind each host port of a device that originates prefixes
(``tor-0-0-h0``, ...), dual-stack where the port is (``hostK`` holds the
device's K-th prefix of each family): addressed ``.10``, ``.11``, ... in its
IPv4 prefix and ``::a``, ``::b``, ... in its IPv6 one, with a default route of
each family through the ToR (see :mod:`labs.clab` for their form). Routers of
a lab with IPv6 (prefixes, loopbacks or an underlay over IPv6) and hosts with
IPv6 declare the ``sysctls`` that turn IPv6 (and its forwarding) on under
containerlab. It also builds the
documents of 3-tier RFC 7938 Clos intents used by the shipped labs and the
benchmark (:func:`clos3_document`, :func:`clos2_document`).
"""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.model import Intent, Routing
from controller.model.intent import dump_intent
from labs.clab import (
    FILE_NAME,
    FRR_IMAGE,
    HOST_BRIDGES_LABEL,
    HOST_IMAGE,
    HOST_PORTS_LABEL,
    HOST_ROLE,
    ROLE_LABEL,
    dump_topology,
)
from southbound.config import DeviceConfig
from southbound.render import device_configs, render_frr

__all__ = ["ROUTING_DAEMON", "clos2_document", "clos3_document", "daemons_text", "generate_lab", "host_addresses",
           "host_exec"]

_DAEMONS = ("bgpd", "ospfd", "ospf6d", "ripd", "ripngd", "isisd", "pimd", "ldpd", "nhrpd", "eigrpd",
            "babeld", "sharpd", "pbrd", "bfdd", "fabricd", "vrrpd", "pathd")
#: the FRR daemon that runs each routing
ROUTING_DAEMON: dict[Routing, str] = {Routing.BGP: "bgpd", Routing.ISIS: "isisd", Routing.OSPF: "ospfd"}


def daemons_text(node: str, routing: Routing) -> str:
    """FRR's ``/etc/frr/daemons`` for a node: zebra and staticd always, plus
    the daemon of its routing (:data:`ROUTING_DAEMON`: bgpd, isisd or ospfd)."""
    wanted = {ROUTING_DAEMON[routing]}
    lines = [f"# FRR daemons of {node} (Loom lab); zebra and staticd always run"]
    lines += [f"{d}={'yes' if d in wanted else 'no'}" for d in _DAEMONS]
    lines += ["vtysh_enable=yes", 'zebra_options="  -A 127.0.0.1 -s 90000000"',
              'bgpd_options="   -A 127.0.0.1"', 'ospfd_options="  -A 127.0.0.1"', 'isisd_options="  -A 127.0.0.1"',
              'staticd_options="-A 127.0.0.1"']
    return "\n".join(lines) + "\n"


#: the first host of a prefix is its ``.10`` (``::a`` in IPv6); the ToR holds ``.1`` (``::1``)
FIRST_HOST = 10
#: what a router of a lab with IPv6 declares for containerlab (IPv6 on, forwarding it); the runner sets
#: these in every lab anyway (:mod:`labs.node_scripts`)
ROUTER_SYSCTLS6 = {"net.ipv6.conf.all.disable_ipv6": 0, "net.ipv6.conf.all.forwarding": 1}
#: what a host with IPv6 declares (a container may start with IPv6 off)
HOST_SYSCTLS6 = {"net.ipv6.conf.all.disable_ipv6": 0}


def host_addresses(prefix: str, origin_index: int, count: int) -> list[str]:
    """The addresses (CIDR) of ``count`` hosts behind the ``origin_index``-th origin of ``prefix`` (either
    family): ``.10``, ``.11``, ... (``::a``, ``::b``, ...); raises ValueError when the prefix is too small."""
    net = ipaddress.ip_network(prefix)
    first = FIRST_HOST + origin_index * count
    if first + count >= net.num_addresses - 1:
        raise ValueError(f"prefix {prefix} is too small for {count} host(s) from the {FIRST_HOST}th address "
                         f"(origin {origin_index})")
    return [f"{net.network_address + first + i}/{net.prefixlen}" for i in range(count)]


def _carries_ipv6(intent: Intent) -> bool:
    """Whether the lab's routers need IPv6: IPv6 prefixes or loopbacks, or an underlay over IPv6."""
    return (intent.defaults.underlay.value != "ipv4-numbered" or any(p.version == 6 for p in intent.prefixes)
            or any(d.loopback_v6 is not None for d in intent.devices))


#: per host port: its name and, for each family it has (IPv4 first), the ToR's address and its hosts'
HostPort = tuple[str, list[tuple[str, list[str]]]]


def _host_ports(intent: Intent, configs: Mapping[str, DeviceConfig], per_port: int) -> dict[str, list[HostPort]]:
    """Per device, its host ports (``hostK``: its K-th prefix of each family, :func:`device_configs`), each
    with ``(gateway, host addresses)`` per family: the port's address and ``per_port`` addresses of the
    prefix (:func:`host_addresses`; raises ValueError when a prefix has no room for them)."""
    origin_index = {(o, p.prefix): j for p in intent.prefixes for j, o in enumerate(p.origins)}
    out: dict[str, list[HostPort]] = {}
    for dev in intent.devices:
        out[dev.name] = []
        for iface in (i for i in configs[dev.name].interfaces if i.host):
            families = []
            for cidr in (c for c in (iface.address, iface.address6) if c is not None):
                prefix = str(ipaddress.ip_interface(cidr).network)
                families.append((cidr.split("/")[0], host_addresses(prefix, origin_index[dev.name, prefix], per_port)))
            out[dev.name].append((iface.name, families))
    return out


def host_exec(addresses: list[tuple[str, str]], interface: str = "eth1") -> list[str]:
    """A Loom host's ``exec`` commands (:mod:`labs.host_exec`) for ``(address CIDR, gateway)`` per family:
    its addresses, its link up, a default route of each family through its ToR."""
    def ip(address: str) -> str:
        return "ip -6" if ":" in address else "ip"
    return [*(f"{ip(a)} addr add {a} dev {interface}" for a, _g in addresses), f"ip link set {interface} up",
            *(f"{ip(g)} route replace default via {g}" for _a, g in addresses)]


def _add_hosts(intent: Intent, ports: Mapping[str, list[HostPort]], nodes: dict[str, dict[str, Any]],
               links: list[tuple[str, str, str, str]], per_port: int) -> None:
    """``per_port`` host nodes behind each host port: a veth to the port itself (one host) or to members
    ``PORThI`` of a bridge named after the port (several); the ToR's ``exec`` makes the bridge. A host
    has an address of each family its port has, and a default route of each through the ToR."""
    for dev in intent.devices:
        spec = nodes[dev.name]
        spec["exec"] = []
        bridges: list[str] = []
        index = 0
        for port, families in ports[dev.name]:
            members = [port] if per_port == 1 else [f"{port}h{i}" for i in range(per_port)]
            if per_port > 1:
                bridges.append(f"{port}={','.join(members)}")
                spec["exec"] += [f"ip link add {port} type bridge", f"ip link set {port} up"]
                spec["exec"] += [f"ip link set {m} master {port}" for m in members]
            for i, member in enumerate(members):
                host = f"{dev.name}-h{index}"
                index += 1
                nodes[host] = {"image": HOST_IMAGE, "labels": {ROLE_LABEL: HOST_ROLE},
                               "exec": host_exec([(addrs[i], gateway) for gateway, addrs in families])}
                if len(families) > 1 or ":" in families[0][0]:
                    nodes[host]["sysctls"] = dict(HOST_SYSCTLS6)
                links.append((dev.name, member, host, "eth1"))
        if bridges:
            spec["labels"][HOST_BRIDGES_LABEL] = ";".join(bridges)
        if not spec["exec"]:
            del spec["exec"]


def generate_lab(intent: Intent, out: Path | str, *, name: str | None = None, image: str = FRR_IMAGE,
                 hosts: int = 0) -> Path:
    """Write the lab for ``intent`` into ``out`` (created; stale node directories
    of an earlier generation removed) and return the topology file's path.
    The lab is named ``name`` or after ``out``'s last component. ``hosts``: host
    nodes per host port (0: none, the host subnets stay inside the devices).
    Raises ValueError when a prefix has no room for the hosts."""
    if hosts < 0:
        raise ValueError(f"hosts must be 0 or more, not {hosts}")
    configs = device_configs(intent)
    ports = _host_ports(intent, configs, hosts) if hosts else {}  # room for every host, before writing
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lab = name or out.resolve().name
    for child in out.iterdir():
        if child.is_dir() and (child / "frr.conf").exists() and child.name not in configs:
            shutil.rmtree(child)
    nodes: dict[str, dict[str, Any]] = {}
    six = _carries_ipv6(intent)
    for dev in intent.devices:
        cfg = configs[dev.name]
        ndir = out / dev.name
        ndir.mkdir(exist_ok=True)
        (ndir / "frr.conf").write_text(render_frr(cfg))
        (ndir / "daemons").write_text(daemons_text(dev.name, intent.routing))
        spec: dict[str, Any] = {"binds": [f"{dev.name}/frr.conf:/etc/frr/frr.conf",
                                          f"{dev.name}/daemons:/etc/frr/daemons"]}
        if six:
            spec["sysctls"] = dict(ROUTER_SYSCTLS6)
        if cfg.host_ports:
            spec["labels"] = {HOST_PORTS_LABEL: ",".join(cfg.host_ports)}
            spec["exec"] = [cmd for p in cfg.host_ports
                            for cmd in (f"ip link add {p} type dummy", f"ip link set {p} up")]
        nodes[dev.name] = spec
    links = [(link.a, link.a_port, link.b, link.b_port) for link in intent.links]
    if hosts:
        _add_hosts(intent, ports, nodes, links, hosts)
    path = out / FILE_NAME
    path.write_text(dump_topology(lab, nodes, links, image=image))
    (out / "intent.yaml").write_text(dump_intent(intent))
    return path


def clos3_document(name: str, *, pods: int, tors: int, planes: int, spines: int,
                   gbps: float = 10.0) -> dict[str, Any]:
    """A 3-tier RFC 7938 Clos intent document: ``tor-P-T`` (own ASN, originating
    ``10.P.T.0/24``), ``leaf-P-Q`` (pod P, plane Q; a pod's leaves share an ASN),
    ``spine-Q-i`` (a plane's spines share an ASN); a ToR's port ``eth(Q+1)``
    goes to its pod's plane-Q leaf, a leaf's ports ``eth1..`` go down to its
    ToRs and the next ones up to its plane's spines, a spine's ``eth(P+1)`` to
    pod P. Demands: each ToR sends ``gbps`` to the next pod's same ToR and to
    its pod neighbour."""
    devices: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    prefixes: list[dict[str, Any]] = []
    for p in range(pods):
        for t in range(tors):
            devices.append({"name": f"tor-{p}-{t}", "role": "tor", "pod": p,
                            "asn": (65100 if pods * tors <= 400 else 4_200_000_000) + p * tors + t})
            prefixes.append({"prefix": f"10.{p}.{t}.0/24", "origins": [f"tor-{p}-{t}"]})
        for q in range(planes):
            devices.append({"name": f"leaf-{p}-{q}", "role": "leaf", "pod": p, "plane": q, "asn": 65010 + p})
    for q in range(planes):
        for i in range(spines):
            devices.append({"name": f"spine-{q}-{i}", "role": "spine", "plane": q, "asn": 65000 + q})
    for p in range(pods):
        for t in range(tors):
            for q in range(planes):
                links.append({"a": f"tor-{p}-{t}", "a_port": f"eth{q + 1}", "b": f"leaf-{p}-{q}",
                              "b_port": f"eth{t + 1}", "capacity_gbps": 100})
    for p in range(pods):
        for q in range(planes):
            for i in range(spines):
                links.append({"a": f"leaf-{p}-{q}", "a_port": f"eth{tors + i + 1}", "b": f"spine-{q}-{i}",
                              "b_port": f"eth{p + 1}", "capacity_gbps": 100})
    demands = []
    for p in range(pods):
        for t in range(tors):
            if pods > 1:
                demands.append({"from": f"tor-{p}-{t}", "to": f"10.{(p + 1) % pods}.{t}.0/24", "gbps": gbps})
            if tors > 1:
                demands.append({"from": f"tor-{p}-{t}", "to": f"10.{p}.{(t + 1) % tors}.0/24", "gbps": gbps})
    return {"name": name, "routing": "bgp", "devices": devices, "links": links, "prefixes": prefixes,
            "demands": demands}


def clos2_document(name: str, *, leaves: int, spines: int, gbps: float = 10.0) -> dict[str, Any]:
    """A 2-tier (leaf-spine) RFC 7938 Clos: ``leaf-L`` (own ASN, originating
    ``10.0.L.0/24``, port ``eth(S+1)`` to ``spine-S``), ``spine-S`` (one shared
    ASN, port ``eth(L+1)`` to ``leaf-L``). Each leaf sends ``gbps`` to the next."""
    devices: list[dict[str, Any]] = [{"name": f"leaf-{n}", "role": "leaf", "asn": 65100 + n}
                                     for n in range(leaves)]
    devices += [{"name": f"spine-{s}", "role": "spine", "asn": 65000} for s in range(spines)]
    links = [{"a": f"leaf-{n}", "a_port": f"eth{s + 1}", "b": f"spine-{s}", "b_port": f"eth{n + 1}",
              "capacity_gbps": 100} for n in range(leaves) for s in range(spines)]
    prefixes = [{"prefix": f"10.0.{n}.0/24", "origins": [f"leaf-{n}"]} for n in range(leaves)]
    demands = [{"from": f"leaf-{n}", "to": f"10.0.{(n + 1) % leaves}.0/24", "gbps": gbps}
               for n in range(leaves) if leaves > 1]
    return {"name": name, "routing": "bgp", "devices": devices, "links": links, "prefixes": prefixes,
            "demands": demands}
