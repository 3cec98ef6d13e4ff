"""What a discovery reader gathered of one router, as plain values (no I/O here).

A reader (``labs.discover`` through a lab's namespaces, or the device agents'
``GetRunning`` call) fills :class:`ObservedDevice`: the router's name, FRR's
running configuration text, and its kernel interfaces (``ip -j addr`` with
the speed ``/sys/class/net/IF/speed`` reports). :func:`interfaces_from_ip_json`
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
    (``None`` when it reports none), ``kind`` iproute2's link kind (``veth``, ``bridge``, ``""``)."""

    name: str
    addresses: tuple[str, ...] = ()
    speed_mbps: int | None = None
    up: bool = True
    kind: str = ""


@dataclass(frozen=True, slots=True)
class ObservedDevice:
    """One router as discovery sees it: ``running_config`` is FRR's ``show running-config``."""

    name: str
    running_config: str
    interfaces: tuple[ObservedInterface, ...] = ()

    def interface(self, name: str) -> ObservedInterface | None:
        return next((i for i in self.interfaces if i.name == name), None)


def interfaces_from_ip_json(addr_json: str, speeds: Mapping[str, int | None] | None = None
                            ) -> tuple[ObservedInterface, ...]:
    """The interfaces of ``ip -j addr`` output, with ``speeds`` (name -> Mb/s) where known."""
    speeds = speeds or {}
    doc: list[dict[str, Any]] = json.loads(addr_json or "[]")
    out = []
    for link in doc:
        name = str(link.get("ifname", ""))
        addrs = tuple(f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", ())
                      if a.get("family") == "inet")
        kind = str((link.get("linkinfo") or {}).get("info_kind", ""))
        up = "UP" in link.get("flags", ()) or link.get("operstate") == "UP"
        out.append(ObservedInterface(name, addrs, speeds.get(name), up, kind))
    return tuple(out)
