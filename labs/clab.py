"""Containerlab topology files: reading, validating and writing.

This module owns the lab file format, a subset of containerlab's
``topology.clab.yml``: a ``name``; ``topology.nodes``, each of kind ``linux``
with an FRR ``image`` and ``binds`` of its ``frr.conf`` and ``daemons`` (paths
relative to the file); ``topology.links`` as ``endpoints`` pairs of
``node:interface``. Loom's own hints ride in node ``labels`` (``loom.host-ports``:
the host subnet ports a node needs, which containerlab creates with the node's
``exec`` commands). A file is accepted whole or rejected with every error
located (``topology.links[3].endpoints[1]: unknown node 'leaf-9'``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.model.errors import IntentError, LoomError

__all__ = [
    "FRR_IMAGE",
    "HOST_PORTS_LABEL",
    "ClabLink",
    "ClabNode",
    "InvalidLab",
    "Topology",
    "dump_topology",
    "load_topology",
    "topology_path",
]

FRR_IMAGE = "quay.io/frrouting/frr:8.4.1"
HOST_PORTS_LABEL = "loom.host-ports"
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
    """A node: ``binds`` map container paths (``/etc/frr/frr.conf``) to files on the host."""

    name: str
    kind: str
    image: str | None
    binds: dict[str, Path] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def host_ports(self) -> tuple[str, ...]:
        raw = self.labels.get(HOST_PORTS_LABEL, "")
        return tuple(p for p in raw.split(",") if p)

    @property
    def frr_conf(self) -> Path:
        return self.binds["/etc/frr/frr.conf"]

    @property
    def daemons_file(self) -> Path:
        return self.binds["/etc/frr/daemons"]


@dataclass(frozen=True, slots=True)
class ClabLink:
    a: str
    a_port: str
    b: str
    b_port: str


@dataclass(frozen=True, slots=True)
class Topology:
    """A validated lab: its ``name``, the directory of its file, nodes and links."""

    name: str
    directory: Path
    nodes: tuple[ClabNode, ...]
    links: tuple[ClabLink, ...]

    @property
    def node_map(self) -> dict[str, ClabNode]:
        return {n.name: n for n in self.nodes}

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
    """A lab directory or its topology file -> the topology file."""
    p = Path(path)
    return p / FILE_NAME if p.is_dir() else p


def load_topology(path: Path | str) -> Topology:
    """Read and validate a containerlab file (or a directory holding ``topology.clab.yml``).

    Raises :class:`InvalidLab` listing every error; bind files must exist.
    """
    file = topology_path(path)
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


def _parse(doc: Any, base: Path, errors: list[IntentError]) -> Topology | None:
    if not isinstance(doc, dict):
        errors.append(IntentError("", "a containerlab file is a mapping with 'name' and 'topology'"))
        return None
    name = doc.get("name")
    if not isinstance(name, str) or not _NODE.match(name):
        errors.append(IntentError("name", "required: the lab's name (letters, digits, '-', '_', '.')"))
    topo = doc.get("topology")
    if not isinstance(topo, dict):
        errors.append(IntentError("topology", "required: a mapping with 'nodes' and 'links'"))
        return None
    raw_defaults = topo.get("defaults")
    defaults: dict[str, Any] = raw_defaults if isinstance(raw_defaults, dict) else {}
    raw_nodes = topo.get("nodes")
    if not isinstance(raw_nodes, dict) or not raw_nodes:
        errors.append(IntentError("topology.nodes", "required: a mapping of node name to node"))
        raw_nodes = {}
    nodes = [n for nname, spec in raw_nodes.items()
             if (n := _parse_node(nname, spec, defaults, base, errors)) is not None]
    names = {n.name for n in nodes} | {str(n) for n in raw_nodes}
    links = _parse_links(topo.get("links", []), names, errors)
    if errors:
        return None
    return Topology(str(name), base, tuple(nodes), tuple(links))


def _parse_node(nname: object, spec: object, defaults: dict[str, Any], base: Path,
                errors: list[IntentError]) -> ClabNode | None:
    """One node: kind ``linux``, its bind files (FRR's config and daemons files at least), labels."""
    loc = f"topology.nodes.{nname}"
    if not isinstance(nname, str) or not _NODE.match(nname):
        errors.append(IntentError(loc, f"bad node name {nname!r}"))
        return None
    spec = spec if isinstance(spec, dict) else {}
    kind = spec.get("kind", defaults.get("kind"))
    if kind != "linux":
        errors.append(IntentError(f"{loc}.kind", f"kind {kind!r} is not supported (expected linux with FRR)"))
    binds: dict[str, Path] = {}
    raw_binds = spec.get("binds", defaults.get("binds", []))
    if not isinstance(raw_binds, list):
        errors.append(IntentError(f"{loc}.binds", "must be a list of 'host:container' paths"))
        raw_binds = []
    for j, b in enumerate(raw_binds):
        parts = str(b).split(":")
        if len(parts) < 2:
            errors.append(IntentError(f"{loc}.binds[{j}]", f"'{b}' is not 'host-path:container-path'"))
            continue
        host = Path(parts[0])
        host = host if host.is_absolute() else base / host
        if not host.is_file():
            errors.append(IntentError(f"{loc}.binds[{j}]", f"bind file {parts[0]} not found ({host})"))
            continue
        binds[parts[1]] = host
    for needed in ("/etc/frr/frr.conf", "/etc/frr/daemons"):
        if needed not in binds and not any(e.loc.startswith(f"{loc}.binds[") for e in errors):
            errors.append(IntentError(f"{loc}.binds", f"no bind for {needed} (each node needs its FRR files)"))
    labels = spec.get("labels", {})
    labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
    return ClabNode(nname, str(kind), spec.get("image", defaults.get("image")), binds, labels)


def _parse_links(raw_links: object, names: set[str], errors: list[IntentError]) -> list[ClabLink]:
    """Links as endpoint pairs ``node:interface`` between known nodes, each interface used once."""
    if not isinstance(raw_links, list):
        errors.append(IntentError("topology.links", "must be a list of {endpoints: [a, b]}"))
        raw_links = []
    links: list[ClabLink] = []
    used: dict[tuple[str, str], int] = {}
    for i, link in enumerate(raw_links):
        loc = f"topology.links[{i}]"
        eps = link.get("endpoints") if isinstance(link, dict) else None
        if not isinstance(eps, list) or len(eps) != 2:
            errors.append(IntentError(f"{loc}.endpoints", "required: two 'node:interface' endpoints"))
            continue
        ends: list[tuple[str, str]] = []
        for j, ep in enumerate(eps):
            node, sep, port = str(ep).partition(":")
            if not sep or not node or not port:
                errors.append(IntentError(f"{loc}.endpoints[{j}]", f"'{ep}' is not 'node:interface'"))
            elif node not in names:
                errors.append(IntentError(f"{loc}.endpoints[{j}]", f"unknown node '{node}'"))
            elif not _IFNAME.match(port):
                errors.append(IntentError(f"{loc}.endpoints[{j}]", f"bad interface name '{port}' (1-15 characters)"))
            elif (node, port) in used:
                first = f"topology.links[{used[node, port]}]"
                errors.append(IntentError(f"{loc}.endpoints[{j}]", f"interface {node}:{port} already used by {first}"))
            else:
                used[node, port] = i
                ends.append((node, port))
        if len(ends) == 2:
            if ends[0][0] == ends[1][0]:
                errors.append(IntentError(f"{loc}.endpoints", f"link from '{ends[0][0]}' to itself"))
            else:
                links.append(ClabLink(ends[0][0], ends[0][1], ends[1][0], ends[1][1]))
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
    """containerlab YAML for ``nodes`` (name -> {binds, labels, exec}) and
    ``links`` ``(a, a_port, b, b_port)``; every node is ``kind: linux`` running ``image``."""
    doc: dict[str, Any] = {"name": name, "topology": {"nodes": {}, "links": []}}
    for nname, spec in nodes.items():
        node: dict[str, Any] = {"kind": "linux", "image": image, "binds": list(spec.get("binds", []))}
        if spec.get("labels"):
            node["labels"] = dict(spec["labels"])
        if spec.get("exec"):
            node["exec"] = list(spec["exec"])
        doc["topology"]["nodes"][nname] = node
    for a, ap, b, bp in links:
        doc["topology"]["links"].append({"endpoints": _Flow([f"{a}:{ap}", f"{b}:{bp}"])})
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120)
