"""Containerlab topology files: reading, validating and writing.

This module owns the lab file format: containerlab's ``*.clab.yml`` as people
write it, for nodes of kind ``linux``. A lab path is a directory (its
``topology.clab.yml``, or its one ``*.clab.yml``/``*.clab.yaml``) or a file of
any name (:func:`topology_path`, as ``containerlab -t``); the lab is named by
the file's ``name``. A node's values come from ``topology.defaults``,
``topology.kinds``, ``topology.groups`` and the node with containerlab's
precedence, and what each field becomes here (honoured, accepted and ignored
with one note, or refused) is :mod:`labs.clab_spec`'s. ``binds`` map files or
directories (``config/r1:/etc/frr``) relative to the file into the node; a
node whose binds provide ``/etc/frr/frr.conf`` is a router (FRR, its
``daemons`` file, a device agent); any other node is a host, set up by its
``exec`` commands (run for real by :mod:`labs.runner`, with ``env``). Links come
in both syntaxes, with ``mtu``. A file is accepted whole or rejected with every
error located (``topology.links[3].endpoints[1]: unknown node 'leaf-9'``).

Loom's own labs (:mod:`labs.gen`) are such files, with Loom's hints in node
``labels`` (``loom.host-ports``: the host subnet ports a router needs, which
containerlab creates with the node's ``exec`` commands and the runner makes its
own way). Loom's hosts carry the label ``loom.role: host``: a plain image, one
link to their ToR, and ``exec`` commands that Loom reads rather than runs:
``ip addr add ADDRESS/LEN dev IF`` and ``ip route replace default via
GATEWAY`` for IPv4, ``ip -6 addr add`` and ``ip -6 route replace default via``
for IPv6, either or both (``add`` works too; ``ip link set IF up`` is accepted
and implied; :mod:`labs.host_exec` reads them, and what it can of other hosts'
commands). Any other command on such a host is refused with its location. A
ToR's host port (``host0``, holding its prefixes' first addresses, one of each
family) is then the veth to its host;
with several hosts on one port it is a bridge over the host links' ends,
declared as ``loom.host-bridges: host0=host0h0,host0h1`` (``;`` between
bridges) and created by the ToR's ``exec`` commands under containerlab.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.model.errors import IntentError, LoomError
from labs.clab_spec import bind_source, magic_vars, parse_bind, parse_link, resolve_node
from labs.host_exec import HostSpec, parse_host_exec, read_host_exec

__all__ = [
    "FRR_IMAGE",
    "HOST_BRIDGES_LABEL",
    "HOST_IMAGE",
    "HOST_PORTS_LABEL",
    "HOST_ROLE",
    "ROLE_LABEL",
    "ClabLink",
    "ClabNode",
    "HostSpec",
    "InvalidLab",
    "Topology",
    "dump_topology",
    "load_topology",
    "topology_path",
]

FRR_IMAGE = "quay.io/frrouting/frr:8.4.1"
HOST_PORTS_LABEL = "loom.host-ports"
HOST_BRIDGES_LABEL = "loom.host-bridges"
ROLE_LABEL = "loom.role"
HOST_ROLE = "host"
HOST_IMAGE = "alpine:3.20"
FILE_NAME = "topology.clab.yml"
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class InvalidLab(LoomError):
    """A lab file that is not a usable containerlab topology; ``errors`` are located."""

    def __init__(self, path: Path | str, errors: list[IntentError]) -> None:
        self.path = str(path)
        self.errors = errors
        super().__init__(f"{path}: not a usable containerlab topology ({len(errors)} error(s))")


@dataclass(frozen=True, slots=True)
class ClabNode:
    """A node after containerlab's inheritance (:mod:`labs.clab_spec`): ``binds`` map container paths
    (``/etc/frr/frr.conf``, or a directory such as ``/etc/frr``) to files or directories on the host;
    ``exec`` in run order, with ``env``; ``host`` is the host's network when it can be read (always for
    Loom's hosts, ``loom.role: host``). A node whose binds provide ``/etc/frr/frr.conf`` is a router
    (FRR and a device agent); any other is a host."""

    name: str
    kind: str
    image: str | None
    binds: dict[str, Path] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    host: HostSpec | None = None
    exec: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    group: str | None = None
    exec_locs: tuple[str, ...] = ()  #: where each ``exec`` command was given (``topology.groups.g.exec[0]``)

    @property
    def loom_host(self) -> bool:
        """One of Loom's own hosts (``loom.role: host``), whose ``exec`` Loom reads rather than runs."""
        return self.labels.get(ROLE_LABEL) == HOST_ROLE

    @property
    def is_router(self) -> bool:
        return self.frr_conf_file is not None

    @property
    def is_bridge(self) -> bool:
        """A ``kind: bridge`` node: here a namespace holding one Linux bridge over the node's link ends."""
        return self.kind == "bridge"

    @property
    def is_host(self) -> bool:
        return not self.is_router and not self.is_bridge

    @property
    def runs_exec(self) -> bool:
        """Whether the runner runs the node's ``exec`` commands: not for Loom's own nodes, whose
        commands (host addresses, host ports) the runner carries out its own way."""
        return not self.loom_host and HOST_PORTS_LABEL not in self.labels

    @property
    def frr_conf_file(self) -> Path | None:
        if self.loom_host:
            return None
        found = bind_source(self.binds, "/etc/frr/frr.conf")
        return found if found is not None and found.is_file() else None

    @property
    def frr_conf(self) -> Path:
        found = self.frr_conf_file
        if found is None:
            raise KeyError(f"{self.name} has no /etc/frr/frr.conf")
        return found

    @property
    def daemons_file(self) -> Path | None:
        """FRR's ``daemons`` file from the binds, or None (the configuration then decides)."""
        found = bind_source(self.binds, "/etc/frr/daemons")
        return found if found is not None and found.is_file() else None

    @property
    def host_ports(self) -> tuple[str, ...]:
        raw = self.labels.get(HOST_PORTS_LABEL, "")
        return tuple(p for p in raw.split(",") if p)

    @property
    def host_bridges(self) -> dict[str, tuple[str, ...]]:
        """Host ports that are bridges -> their member ports (the ends of the links to hosts)."""
        return _parse_bridges(self.labels.get(HOST_BRIDGES_LABEL, ""))


@dataclass(frozen=True, slots=True)
class ClabLink:
    """A veth link; ``mtu`` (both ends) and the ends' MAC addresses when the file gives them."""

    a: str
    a_port: str
    b: str
    b_port: str
    mtu: int | None = None
    a_mac: str | None = None
    b_mac: str | None = None


@dataclass(frozen=True, slots=True)
class Topology:
    """A validated lab: its ``name``, the directory of its file, nodes and links."""

    name: str
    directory: Path
    nodes: tuple[ClabNode, ...]
    links: tuple[ClabLink, ...]
    notes: tuple[str, ...] = ()

    @property
    def node_map(self) -> dict[str, ClabNode]:
        return {n.name: n for n in self.nodes}

    @property
    def routers(self) -> tuple[ClabNode, ...]:
        """The nodes that run FRR (and a device agent): those with an FRR configuration."""
        return tuple(n for n in self.nodes if n.is_router)

    @property
    def hosts(self) -> tuple[ClabNode, ...]:
        return tuple(n for n in self.nodes if n.is_host)

    @property
    def bridges(self) -> tuple[ClabNode, ...]:
        return tuple(n for n in self.nodes if n.is_bridge)

    def attachment(self, host: str) -> tuple[str, str]:
        """``(tor, tor_port)``: where ``host``'s one link ends; ``tor_port`` is the host port
        (the bridge, when the link's end is one of its members)."""
        (_port, tor, tor_port), = self.ports(host)
        for bridge, members in self.node_map[tor].host_bridges.items():
            if tor_port in members:
                return tor, bridge
        return tor, tor_port

    def ports(self, node: str) -> list[tuple[str, str, str]]:
        """``(port, peer, peer_port)`` of each link end on ``node``."""
        out = []
        for link in self.links:
            if link.a == node:
                out.append((link.a_port, link.b, link.b_port))
            if link.b == node:
                out.append((link.b_port, link.a, link.a_port))
        return out


def topology_path(path: Path | str) -> Path:
    """A lab directory or its topology file -> the topology file, as ``containerlab -t`` finds it: the
    directory's ``topology.clab.yml``, else its one ``*.clab.yml`` or ``*.clab.yaml`` (with none or
    several, the directory's ``topology.clab.yml``, which :func:`load_topology` then reports missing)."""
    p = Path(path)
    if not p.is_dir() or (p / FILE_NAME).exists():
        return p / FILE_NAME if p.is_dir() else p
    found = sorted({*p.glob("*.clab.yml"), *p.glob("*.clab.yaml")})
    return found[0] if len(found) == 1 else p / FILE_NAME


def load_topology(path: Path | str) -> Topology:
    """Read and validate a containerlab file (or a lab directory, see :func:`topology_path`).

    Raises :class:`InvalidLab` listing every error; bind files must exist.
    """
    file = topology_path(path)
    if Path(path).is_dir() and not file.exists():
        found = sorted(q.name for q in (*Path(path).glob("*.clab.yml"), *Path(path).glob("*.clab.yaml")))
        why = f"several topology files ({', '.join(found)}): name one" if found else "no *.clab.yml file"
        raise InvalidLab(path, [IntentError("", f"cannot read {file}: {why} in {path}")])
    try:
        text = file.read_text()
    except OSError as exc:
        raise InvalidLab(file, [IntentError("", f"cannot read {file}: {exc.strerror}")]) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidLab(file, [IntentError("", f"YAML syntax error: {exc}")]) from None
    errors: list[IntentError] = []
    topo = _parse(doc, file.parent, errors)
    if errors or topo is None:
        raise InvalidLab(file, errors or [IntentError("", "empty topology")])
    return topo


_TOP_FIELDS = frozenset({"name", "topology", "mgmt", "prefix", "settings", "debug"})
_TOPOLOGY_FIELDS = frozenset({"nodes", "links", "defaults", "kinds", "groups"})


def _parse(doc: Any, base: Path, errors: list[IntentError]) -> Topology | None:
    if not isinstance(doc, dict):
        errors.append(IntentError("", "a containerlab file is a mapping with 'name' and 'topology'"))
        return None
    name = doc.get("name")
    if not isinstance(name, str) or not _NODE.match(name):
        errors.append(IntentError("name", "required: the lab's name (letters, digits, '-', '_', '.')"))
    errors += [IntentError(str(k), f"unknown field '{k}'") for k in doc if k not in _TOP_FIELDS]
    topo = doc.get("topology")
    if not isinstance(topo, dict):
        errors.append(IntentError("topology", "required: a mapping with 'nodes' and 'links'"))
        return None
    errors += [IntentError(f"topology.{k}", f"unknown field '{k}'") for k in topo if k not in _TOPOLOGY_FIELDS]
    for key in ("defaults", "kinds", "groups"):
        if topo.get(key) is not None and not isinstance(topo[key], dict):
            errors.append(IntentError(f"topology.{key}", "must be a mapping"))
    raw_nodes = topo.get("nodes")
    if not isinstance(raw_nodes, dict) or not raw_nodes:
        errors.append(IntentError("topology.nodes", "required: a mapping of node name to node"))
        raw_nodes = {}
    ignored: dict[str, list[str]] = {k: ["the lab"] for k in ("mgmt", "prefix") if k in doc}
    nodes = [n for nname, spec in raw_nodes.items()
             if (n := _parse_node(nname, spec, (str(name), topo), base, errors, ignored)) is not None]
    names = {n.name for n in nodes} | {str(n) for n in raw_nodes}
    links = _parse_links(topo.get("links") or [], names, errors)
    if errors:
        return None
    result = Topology(str(name), base, tuple(nodes), tuple(links), _notes(nodes, ignored))
    _check_hosts(result, errors)
    return None if errors else result


def _notes(nodes: list[ClabNode], ignored: dict[str, list[str]]) -> tuple[str, ...]:
    """One note for every field accepted and ignored (no Docker here), and one for FRR images
    without an FRR configuration."""
    notes = []
    if ignored:
        fields = "; ".join(f"{k} ({', '.join(v[:4])}{', ...' if len(v) > 4 else ''})"
                           for k, v in sorted(ignored.items()))
        notes.append("no Docker here: nodes are network namespaces, images are not run and there is no "
                     f"management network, so these are accepted and ignored: {fields}")
    bare = [n.name for n in nodes if n.is_host and not n.loom_host and "frr" in (n.image or "").lower()]
    if bare:
        notes.append(f"{', '.join(bare)}: an FRR image but no /etc/frr/frr.conf bound: run as Linux hosts")
    return tuple(notes)


def _parse_node(nname: object, spec: object, lab: tuple[str, dict[str, Any]], base: Path,
                errors: list[IntentError], ignored: dict[str, list[str]]) -> ClabNode | None:
    """One node of ``lab`` (its name and ``topology``): its values after inheritance, kind ``linux``, its
    binds (which must exist), and for a Loom host (``loom.role: host``) its network read from its ``exec``
    commands. containerlab's magic variables (``__clabNodeName__``...) are replaced in binds and exec."""
    lab_name, topo = lab
    loc = f"topology.nodes.{nname}"
    if not isinstance(nname, str) or not _NODE.match(nname):
        errors.append(IntentError(loc, f"bad node name {nname!r}"))
        return None
    if spec is not None and not isinstance(spec, dict):
        errors.append(IntentError(loc, "a node is a mapping of its fields"))
        return None
    r = resolve_node(nname, spec or {}, topo, errors)
    for key in r.ignored:
        ignored.setdefault(key, []).append(nname)
    if r.kind == "bridge":  # containerlab's bridge takes no binds, exec or env
        return ClabNode(nname, "bridge", None, labels=r.labels, group=r.group)
    if r.kind != "linux":
        origin = r.sources["kind"]
        given = f"kind '{r.kind}' (from {origin})" if r.kind else "no kind (on the node, its group or defaults)"
        errors.append(IntentError(f"{loc}.kind", f"{given} is not supported: Loom runs linux nodes (FRR routers "
                                                 "and hosts) and bridges, not NOS images"))
    binds = _binds(nname, [(at, magic_vars(b, lab_name, nname, base)) for at, b in r.binds], base, errors)
    labels = r.labels
    commands = [magic_vars(cmd, lab_name, nname, base) for _at, cmd in r.exec]
    raw_bridges = labels.get(HOST_BRIDGES_LABEL, "")
    if raw_bridges and not _parse_bridges(raw_bridges):
        errors.append(IntentError(f"{loc}.labels.{HOST_BRIDGES_LABEL}",
                                  f"'{raw_bridges}' is not 'PORT=MEMBER,MEMBER[;PORT=...]'"))
    node = ClabNode(nname, str(r.kind), r.image, binds, labels, None, tuple(commands), r.env, r.sysctls, r.group)
    if node.loom_host:
        network = parse_host_exec(loc, commands, errors)
    else:
        network = read_host_exec(commands) if node.is_host else None
    return ClabNode(nname, str(r.kind), r.image, {} if node.loom_host else binds, labels, network,
                    tuple(commands), r.env, r.sysctls, r.group, tuple(at for at, _cmd in r.exec))


def _binds(nname: str, raw: list[tuple[str, str]], base: Path, errors: list[IntentError]) -> dict[str, Path]:
    """Container path -> host path (relative to the topology file); a later (more specific) bind of the
    same container path wins, as in containerlab."""
    binds: dict[str, Path] = {}
    for at, b in raw:
        parsed = parse_bind(b)
        if parsed is None:
            errors.append(IntentError(at, f"'{b}' is not 'host-path:container-path[:ro|rw]' (node {nname})"))
            continue
        src, dst, _mode = parsed
        host = Path(src).expanduser()
        host = host if host.is_absolute() else base / host
        if not host.exists():
            errors.append(IntentError(at, f"bind file {src} not found ({host}) (node {nname})"))
            continue
        binds[dst] = host
    return binds


def _parse_bridges(raw: str) -> dict[str, tuple[str, ...]]:
    """``host0=host0h0,host0h1;host1=...`` -> ``{"host0": ("host0h0", "host0h1"), ...}`` ({} if malformed)."""
    out: dict[str, tuple[str, ...]] = {}
    for part in (p.strip() for p in raw.split(";") if p.strip()):
        port, sep, members = part.partition("=")
        names = tuple(m.strip() for m in members.split(",") if m.strip())
        if not sep or not _IFNAME.match(port.strip()) or not names or not all(_IFNAME.match(m) for m in names):
            return {}
        out[port.strip()] = names
    return out


def _check_hosts(topo: Topology, errors: list[IntentError]) -> None:
    """Each host has one link, on its addressed interface, to a router's host port (or a member of its bridge);
    host addresses (of either family) are unique."""
    nodes = topo.node_map
    seen: dict[str, str] = {}
    for node in topo.hosts:
        if not node.loom_host:
            continue  # another host is run as its exec commands say
        loc = f"topology.nodes.{node.name}"
        ports = topo.ports(node.name)
        if len(ports) != 1:
            errors.append(IntentError(loc, f"a host has exactly one link (to its ToR), not {len(ports)}"))
            continue
        port, peer, peer_port = ports[0]
        if node.host is None:
            continue
        if port != node.host.interface:
            errors.append(IntentError(f"{loc}.exec", f"the address is on {node.host.interface}, "
                                                     f"but the host's link ends on {port}"))
        if nodes[peer].is_host:
            errors.append(IntentError(loc, f"linked to another host ({peer}); a host links to its ToR"))
            continue
        tor_port = topo.attachment(node.name)[1]
        if tor_port not in nodes[peer].host_ports:
            errors.append(IntentError(loc, f"linked to {peer}:{peer_port}, which is not one of {peer}'s host ports "
                                           f"({HOST_PORTS_LABEL}: {','.join(nodes[peer].host_ports) or 'none'})"))
        for ip in node.host.ips:
            if ip in seen:
                errors.append(IntentError(f"{loc}.exec", f"address {ip} already used by {seen[ip]}"))
            seen.setdefault(ip, node.name)
    for node in topo.routers:
        ends = {p for p, _peer, _pp in topo.ports(node.name)}
        for bridge, members in node.host_bridges.items():
            loc = f"topology.nodes.{node.name}.labels.{HOST_BRIDGES_LABEL}"
            if bridge not in node.host_ports:
                errors.append(IntentError(loc, f"bridge {bridge} is not one of the node's host ports"))
            missing = [m for m in members if m not in ends]
            if missing:
                errors.append(IntentError(loc, f"bridge {bridge}: {', '.join(missing)} not a link end of the node"))


def _parse_links(raw_links: object, names: set[str], errors: list[IntentError]) -> list[ClabLink]:
    """Links in either syntax (:func:`labs.clab_spec.parse_link`) between known nodes, each interface
    used once."""
    if not isinstance(raw_links, list):
        errors.append(IntentError("topology.links", "must be a list of {endpoints: [a, b]}"))
        raw_links = []
    links: list[ClabLink] = []
    used: dict[tuple[str, str], int] = {}
    for i, link in enumerate(raw_links):
        loc = f"topology.links[{i}]"
        spec = parse_link(i, link, errors)
        if spec is None:
            continue
        ok = True
        for j, ep in enumerate((spec.a, spec.b)):
            where = f"{loc}.endpoints[{j}]"
            if ep.node not in names:
                errors.append(IntentError(where, f"unknown node '{ep.node}'"))
            elif not _IFNAME.match(ep.interface):
                errors.append(IntentError(where, f"bad interface name '{ep.interface}' (1-15 characters)"))
            elif (ep.node, ep.interface) in used:
                first = f"topology.links[{used[ep.node, ep.interface]}]"
                errors.append(IntentError(where, f"interface {ep.node}:{ep.interface} already used by {first}"))
            else:
                used[ep.node, ep.interface] = i
                continue
            ok = False
        if not ok:
            continue
        if spec.a.node == spec.b.node:
            errors.append(IntentError(f"{loc}.endpoints", f"link from '{spec.a.node}' to itself"))
            continue
        links.append(ClabLink(spec.a.node, spec.a.interface, spec.b.node, spec.b.interface, spec.mtu,
                              spec.a.mac, spec.b.mac))
    return links


class _Flow(list[str]):
    """A list YAML writes inline (``endpoints: [a, b]``)."""


def _flow_representer(dumper: yaml.SafeDumper, data: _Flow) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, _flow_representer)


def dump_topology(name: str, nodes: dict[str, dict[str, Any]], links: list[tuple[str, str, str, str]],
                  image: str = FRR_IMAGE) -> str:
    """containerlab YAML for ``nodes`` (name -> {binds, labels, sysctls, exec, image}) and
    ``links`` ``(a, a_port, b, b_port)``; every node is ``kind: linux`` running its
    ``image`` or ``image``; a node without ``binds`` (a host) is written without them."""
    doc: dict[str, Any] = {"name": name, "topology": {"nodes": {}, "links": []}}
    for nname, spec in nodes.items():
        node: dict[str, Any] = {"kind": "linux", "image": spec.get("image", image)}
        if "binds" in spec or not spec.get("labels", {}).get(ROLE_LABEL) == HOST_ROLE:
            node["binds"] = list(spec.get("binds", []))
        if spec.get("labels"):
            node["labels"] = dict(spec["labels"])
        if spec.get("sysctls"):
            node["sysctls"] = dict(spec["sysctls"])
        if spec.get("exec"):
            node["exec"] = list(spec["exec"])
        doc["topology"]["nodes"][nname] = node
    for a, ap, b, bp in links:
        doc["topology"]["links"].append({"endpoints": _Flow([f"{a}:{ap}", f"{b}:{bp}"])})
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120)
