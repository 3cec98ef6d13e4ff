"""What a discovery reader gathered of one router, as plain values (no I/O here).

A reader (``labs.discover`` through a lab's namespaces, or the device agents'
``GetRunning`` call) fills :class:`ObservedDevice`: the router's name, FRR's
running configuration text, and its kernel interfaces (``ip -j addr`` with
the speed ``/sys/class/net/IF/speed`` reports, and the IPv6 link-local
neighbours ``ip -j -6 neigh`` lists: on an unnumbered fabric, where links have
no addresses of their own, a port's neighbour is the link-local address of the
peer's port, which pairs the link's ends). :func:`interfaces_from_ip_json`
reads iproute2's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ObservedDevice", "ObservedInterface", "interfaces_from_ip_json"]


@dataclass(frozen=True, slots=True)
class ObservedInterface:
    """A kernel interface: ``addresses`` in CIDR form (IPv4), ``speed_mbps`` as the kernel reports it
    (``None`` when it reports none), ``kind`` iproute2's link kind (``veth``, ``bridge``, ``""``);
    ``addresses6`` its global IPv6 addresses (CIDR), ``link_local`` its IPv6 link-local addresses and
    ``neighbors6`` the link-local addresses of the neighbours the kernel resolved on it."""

    name: str
    addresses: tuple[str, ...] = ()
    speed_mbps: int | None = None
    up: bool = True
    kind: str = ""
    addresses6: tuple[str, ...] = ()
    link_local: tuple[str, ...] = ()
    neighbors6: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ObservedDevice:
    """One router as discovery sees it: ``running_config`` is FRR's ``show running-config``."""

    name: str
    running_config: str
    interfaces: tuple[ObservedInterface, ...] = ()

    def interface(self, name: str) -> ObservedInterface | None:
        return next((i for i in self.interfaces if i.name == name), None)


def interfaces_from_ip_json(addr_json: str, speeds: Mapping[str, int | None] | None = None,
                            neigh6_json: str | None = None) -> tuple[ObservedInterface, ...]:
    """The interfaces of ``ip -j addr`` output, with ``speeds`` (name -> Mb/s) where known and the
    link-local neighbours of ``ip -j -6 neigh`` output (those not ``FAILED`` or ``INCOMPLETE``)."""
    speeds = speeds or {}
    doc: list[dict[str, Any]] = json.loads(addr_json or "[]")
    neighbors = _link_local_neighbors(neigh6_json)
    out = []
    for link in doc:
        name = str(link.get("ifname", ""))
        info = link.get("addr_info", ())
        addrs = tuple(f"{a['local']}/{a['prefixlen']}" for a in info if a.get("family") == "inet")
        v6 = [a for a in info if a.get("family") == "inet6"]
        addrs6 = tuple(f"{a['local']}/{a['prefixlen']}" for a in v6 if a.get("scope") == "global")
        link_local = tuple(str(a["local"]) for a in v6 if a.get("scope") == "link")
        kind = str((link.get("linkinfo") or {}).get("info_kind", ""))
        up = "UP" in link.get("flags", ()) or link.get("operstate") == "UP"
        out.append(ObservedInterface(name, addrs, speeds.get(name), up, kind, addrs6, link_local,
                                     neighbors.get(name, ())))
    return tuple(out)


def _link_local_neighbors(neigh6_json: str | None) -> dict[str, tuple[str, ...]]:
    """Port -> the link-local addresses of its resolved neighbours, from ``ip -j -6 neigh``."""
    out: dict[str, list[str]] = {}
    for n in json.loads(neigh6_json or "[]"):
        dst, dev, state = str(n.get("dst", "")), str(n.get("dev", "")), set(n.get("state", ()))
        if dst.lower().startswith("fe80:") and dev and not state & {"FAILED", "INCOMPLETE"}:
            out.setdefault(dev, []).append(dst)
    return {dev: tuple(sorted(set(v))) for dev, v in out.items()}
