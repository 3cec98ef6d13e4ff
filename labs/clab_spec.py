"""containerlab's rules for what a node is and how links are written, without Docker.

This module owns the part of containerlab's topology format that is not Loom's:
which fields a node may carry and what happens to each (:data:`SUPPORTED`,
:data:`IGNORED`, :data:`REFUSED`), how a node's values come from
``topology.defaults``, ``topology.kinds.<kind>``, ``topology.groups.<group>`` and
the node itself (:func:`resolve_node`, containerlab's precedence: node > group >
kind > defaults for single values; ``env``, ``labels`` and ``sysctls`` merged key
by key with the same precedence; ``exec`` and ``binds`` concatenated from defaults
to node, a bind replacing a less specific one with the same container path), how
bind strings and container paths map to files (:func:`parse_bind`,
:func:`bind_source`), and both link syntaxes (:func:`parse_link`: ``endpoints:
["a:eth1", "b:eth1"]``, and ``type: veth`` with ``{node, interface}`` maps), with
``mtu``. Errors are located (``topology.nodes.r1.kind: ...``) and collected, never
raised one by one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.model.errors import IntentError

__all__ = [
    "IGNORED",
    "REFUSED",
    "SUPPORTED",
    "EndPoint",
    "LinkSpec",
    "ResolvedNode",
    "bind_source",
    "exec_env",
    "magic_vars",
    "parse_bind",
    "parse_link",
    "resolve_node",
]

IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
MTU_RANGE = (68, 65535)

#: node fields Loom honours
SUPPORTED = frozenset({"kind", "group", "image", "binds", "exec", "env", "labels", "sysctls"})
#: node fields accepted and ignored (one note per field for the whole lab): what they configure
#: (management network, Docker's resources and lifecycle) does not exist without Docker
IGNORED = {
    "mgmt-ipv4": "no Docker management network here", "mgmt-ipv6": "no Docker management network here",
    "network-mode": "no Docker management network here",
    "image-pull-policy": "no images are pulled", "startup-delay": "nodes start together",
    "stages": "nodes start together", "wait-for": "nodes start together",
    "ports": "nothing is published (no Docker)", "cpu": "no resource limits", "cpu-set": "no resource limits",
    "memory": "no resource limits", "shm-size": "no resource limits", "restart-policy": "no container restarts",
    "auto-remove": "no containers", "runtime": "no container runtime", "dns": "the machine's DNS is used",
    "aliases": "no Docker network aliases", "cap-add": "nodes run as root", "devices": "no device mapping",
    "user": "nodes run as root", "type": "meaningless for linux nodes", "position": "graph layout only",
    "certificate": "no node certificates", "healthcheck": "no container health checks", "extras": "no extras",
    "entrypoint": "FRR and hosts are started by Loom", "cmd": "FRR and hosts are started by Loom",
}
#: node fields that cannot be honoured here: a located error
REFUSED = {
    "startup-config": "a startup-config is for a NOS kind; an FRR node binds its frr.conf",
    "enforce-startup-config": "a startup-config is for a NOS kind",
    "suppress-startup-config": "a startup-config is for a NOS kind",
    "license": "licenses are for NOS kinds", "env-files": "not supported: give the variables in 'env'",
    "kernel": "no VM sandbox here", "sandbox": "no VM sandbox here", "components": "for NOS kinds only",
    "config": "config templates are not supported",
}
_NETWORK_MODES_ACCEPTED = ("none", "bridge", "")
_LINK_TYPES_REFUSED = ("host", "mgmt-net", "macvlan", "vxlan", "vxlan-stitch", "dummy")
_LINK_FIELDS = frozenset({"endpoints", "type", "mtu", "vars", "labels"})
_ENDPOINT_FIELDS = frozenset({"node", "interface", "mac"})
_MAC = re.compile(r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$")


@dataclass
class ResolvedNode:
    """A node's values after inheritance: ``binds`` as ``(loc, "src:dst[:mode]")`` (loc of the list item
    that gave it), ``exec`` in run order, ``sources`` the location each single value came from,
    ``ignored``: field -> the location it was given at."""

    name: str
    kind: str | None = None
    group: str | None = None
    image: str | None = None
    binds: list[tuple[str, str]] = field(default_factory=list)
    exec: list[tuple[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _levels(name: str, spec: dict[str, Any], topo: dict[str, Any]) -> tuple[str | None, str | None,
                                                                           list[tuple[str, dict[str, Any]]]]:
    """The node's kind and group (containerlab: kind from node, group, defaults; group from node, kind,
    defaults) and its definitions from least to most specific, each with its location."""
    defaults = _mapping(topo.get("defaults"))
    kinds, groups = _mapping(topo.get("kinds")), _mapping(topo.get("groups"))
    first_group = str(spec.get("group") or defaults.get("group") or "")
    kind = str(spec.get("kind") or _mapping(groups.get(first_group)).get("kind") or defaults.get("kind") or "")
    group = str(spec.get("group") or _mapping(kinds.get(kind)).get("group") or defaults.get("group") or "")
    levels = [("topology.defaults", defaults)]
    if kind and isinstance(kinds.get(kind), dict):
        levels.append((f"topology.kinds.{kind}", kinds[kind]))
    if group and isinstance(groups.get(group), dict):
        levels.append((f"topology.groups.{group}", groups[group]))
    levels.append((f"topology.nodes.{name}", spec))
    return kind or None, group or None, levels


def resolve_node(name: str, spec: dict[str, Any], topo: dict[str, Any], errors: list[IntentError]) -> ResolvedNode:
    """``name``'s values under containerlab's inheritance (see the module docstring); fields that are
    unknown or refused are reported at the level that gives them, naming the node."""
    kind, group, levels = _levels(name, spec, topo)
    node = ResolvedNode(name, kind, group)
    where = f"topology.nodes.{name}"
    if spec.get("group") is not None and spec["group"] not in _mapping(topo.get("groups")):
        errors.append(IntentError(f"{where}.group", f"unknown group '{spec['group']}' (not in topology.groups)"))
    for loc, level in levels:
        for key, value in level.items():
            _take(node, key, value, loc, where, errors)
    groups, defaults = _mapping(topo.get("groups")), _mapping(topo.get("defaults"))
    first_group = str(spec.get("group") or defaults.get("group") or "")
    node.sources["kind"] = (f"{where}.kind" if spec.get("kind") else
                            f"topology.groups.{first_group}.kind" if _mapping(groups.get(first_group)).get("kind")
                            else "topology.defaults.kind")
    return node


def _take(node: ResolvedNode, key: str, value: object, loc: str, where: str, errors: list[IntentError]) -> None:
    """Fold one field of one level into ``node`` (levels arrive from least to most specific)."""
    at = f"{loc}.{key}"
    suffix = "" if loc == where else f" (for node {node.name})"
    if key in ("kind", "group"):
        return  # resolved first (see _levels)
    if key == "image":
        if value:
            node.image, node.sources["image"] = str(value), at
    elif key in ("binds", "exec"):
        if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
            errors.append(IntentError(at, f"must be a list of strings{suffix}"))
            return
        getattr(node, key).extend((f"{at}[{j}]", str(v)) for j, v in enumerate(value))
    elif key in ("env", "labels", "sysctls"):
        if not isinstance(value, dict):
            errors.append(IntentError(at, f"must be a mapping{suffix}"))
            return
        getattr(node, key).update({str(k): "" if v is None else str(v) for k, v in value.items()})
    elif key == "network-mode" and str(value) not in _NETWORK_MODES_ACCEPTED:
        errors.append(IntentError(at, f"network-mode '{value}' cannot be honoured: every node has its own "
                                      f"network namespace here (accepted: none){suffix}"))
    elif key in IGNORED:
        node.ignored[key] = at
    elif key in REFUSED:
        errors.append(IntentError(at, f"{REFUSED[key]}{suffix}"))
    else:
        errors.append(IntentError(at, f"unknown node field '{key}'{suffix}"))


def magic_vars(text: str, lab: str, node: str, base: Path) -> str:
    """containerlab's magic variables in a bind or an ``exec`` command: ``__clabNodeName__`` (the node),
    ``__clabDir__`` (``clab-LAB`` beside the topology file) and ``__clabNodeDir__`` (its node directory)."""
    lab_dir = base / f"clab-{lab}"
    return (text.replace("__clabNodeDir__", str(lab_dir / node)).replace("__clabDir__", str(lab_dir))
            .replace("__clabNodeName__", node))


def exec_env(lab: str, node: str, kind: str, group: str | None, labels: dict[str, str],
             env: dict[str, str]) -> dict[str, str]:
    """The environment of a node's ``exec`` commands as containerlab gives it: a plain PATH, each label
    as ``CLAB_LABEL_<KEY>`` (containerlab's own labels too), then the node's ``env``."""
    own = {"containerlab": lab, "clab-node-name": node, "clab-node-kind": kind, "clab-node-group": group or ""}
    out = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "HOSTNAME": node}
    for key, value in {**own, **labels}.items():
        out["CLAB_LABEL_" + re.sub(r"[^A-Za-z0-9]", "_", key).upper()] = value
    return {**out, **env}


def parse_bind(raw: str) -> tuple[str, str, str] | None:
    """``src:dst[:ro|rw|...]`` -> ``(src, dst, mode)``, or None when it is not a bind."""
    parts = raw.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        return None
    return parts[0], parts[1].rstrip("/") or "/", parts[2] if len(parts) == 3 else "rw"


def bind_source(binds: dict[str, Path], container_path: str) -> Path | None:
    """The host path that ``container_path`` is inside the node, through its binds (a file bound at
    that path, or under a bound directory), or None when no bind provides it or it does not exist."""
    best = ""
    for dst in binds:
        if (container_path == dst or container_path.startswith(dst.rstrip("/") + "/")) and len(dst) > len(best):
            best = dst
    if not best:
        return None
    rest = container_path[len(best):].lstrip("/")
    found = binds[best] / rest if rest else binds[best]
    return found if found.exists() else None


@dataclass(frozen=True, slots=True)
class EndPoint:
    node: str
    interface: str
    mac: str | None = None


@dataclass(frozen=True, slots=True)
class LinkSpec:
    a: EndPoint
    b: EndPoint
    mtu: int | None = None


def parse_link(i: int, link: object, errors: list[IntentError]) -> LinkSpec | None:
    """One entry of ``topology.links`` in either syntax; None (with located errors) if unusable."""
    loc = f"topology.links[{i}]"
    if not isinstance(link, dict):
        errors.append(IntentError(loc, "a link is a mapping with 'endpoints'"))
        return None
    n = len(errors)
    for key in link:
        if key not in _LINK_FIELDS:
            errors.append(IntentError(f"{loc}.{key}", f"unknown link field '{key}'"))
    kind = link.get("type")
    if kind is not None and kind != "veth":
        why = "needs Docker's host or management network" if kind in _LINK_TYPES_REFUSED else "is unknown"
        errors.append(IntentError(f"{loc}.type", f"link type '{kind}' cannot be honoured here ({why}; "
                                                 "only veth links between nodes)"))
        return None
    mtu = link.get("mtu")
    if mtu is not None and (not isinstance(mtu, int) or isinstance(mtu, bool)
                            or not MTU_RANGE[0] <= mtu <= MTU_RANGE[1]):
        errors.append(IntentError(f"{loc}.mtu", f"'{mtu}' is not an MTU ({MTU_RANGE[0]}..{MTU_RANGE[1]})"))
    eps = link.get("endpoints")
    if not isinstance(eps, list) or len(eps) != 2:
        errors.append(IntentError(f"{loc}.endpoints", "required: two endpoints ('node:interface' or "
                                                      "{node: N, interface: I})"))
        return None
    ends = [e for j, ep in enumerate(eps) if (e := _endpoint(f"{loc}.endpoints[{j}]", ep, errors)) is not None]
    if len(errors) > n or len(ends) != 2:
        return None
    return LinkSpec(ends[0], ends[1], mtu)


def _endpoint(loc: str, ep: object, errors: list[IntentError]) -> EndPoint | None:
    if isinstance(ep, dict):
        extra = sorted(str(k) for k in ep if k not in _ENDPOINT_FIELDS)
        if extra:
            errors.append(IntentError(f"{loc}.{extra[0]}", f"unknown endpoint field '{extra[0]}'"))
            return None
        node, port, mac = ep.get("node"), ep.get("interface"), ep.get("mac")
        if not isinstance(node, str) or not node or not isinstance(port, str) or not port:
            errors.append(IntentError(loc, "an endpoint map needs 'node' and 'interface'"))
            return None
        if mac is not None and not _MAC.match(str(mac)):
            errors.append(IntentError(f"{loc}.mac", f"'{mac}' is not a MAC address"))
            return None
        return EndPoint(node, port, None if mac is None else str(mac))
    node, sep, port = str(ep).partition(":")
    if not sep or not node or not port:
        errors.append(IntentError(loc, f"'{ep}' is not 'node:interface'"))
        return None
    return EndPoint(node, port)
