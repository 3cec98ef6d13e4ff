"""The forwarding plan: what the solver produces and everything downstream reads.

A :class:`Plan` is DESIGN.md's plan document (contract 2) as frozen values:
per device, weighted nexthop groups (positive integer weights whose sum fits
the device's ``max_ecmp_entries``; identical groups on one device are one
group) and the routes that point at them; per link, the load in both
directions and the utilization; a summary. Safety replays plans, southbound
renders them into device configs, the store keeps them as documents.

A device has no route for a prefix it originates itself (it delivers locally);
a prefix missing from a device's routes is withdrawn there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.model.documents.base import JsonObject

__all__ = ["DevicePlan", "LinkLoad", "NextHop", "Plan", "PlanSummary"]


@dataclass(frozen=True, slots=True)
class NextHop:
    """One member of a nexthop group: the local ``port``, the ``neighbor`` behind it, its weight."""

    port: str
    neighbor: str
    weight: int

    def to_document(self) -> JsonObject:
        return {"port": self.port, "neighbor": self.neighbor, "weight": self.weight}


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """One device's forwarding state: ``groups`` by id, ``routes`` prefix -> group id."""

    groups: Mapping[str, tuple[NextHop, ...]]
    routes: Mapping[str, str]

    def nexthops(self, prefix: str) -> tuple[NextHop, ...]:
        """The weighted next hops for ``prefix`` (empty if withdrawn here)."""
        gid = self.routes.get(prefix)
        return self.groups[gid] if gid is not None else ()

    def to_document(self) -> JsonObject:
        return {
            "groups": {g: [h.to_document() for h in hops] for g, hops in self.groups.items()},
            "routes": dict(self.routes),
        }


@dataclass(frozen=True, slots=True)
class LinkLoad:
    """Load on one link: ``gbps_ab`` from ``a`` toward ``b``; utilization is the larger direction."""

    a: str
    a_port: str
    b: str
    b_port: str
    gbps_ab: float
    gbps_ba: float
    utilization: float

    def to_document(self) -> JsonObject:
        return {"a": self.a, "a_port": self.a_port, "b": self.b, "b_port": self.b_port,
                "gbps_ab": round(self.gbps_ab, 6), "gbps_ba": round(self.gbps_ba, 6),
                "utilization": round(self.utilization, 6)}


@dataclass(frozen=True, slots=True)
class PlanSummary:
    """Headline numbers. ``max_utilization`` is after integer rounding; ``lp_bound``
    is the LP optimum; ``ecmp_max_utilization`` what plain ECMP would give.
    ``extra`` holds further keys (e.g. robustness) written beside them."""

    max_utilization: float
    lp_bound: float
    ecmp_max_utilization: float
    solve_seconds: float
    groups: int
    routes: int
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_document(self) -> JsonObject:
        doc: dict[str, Any] = {
            "max_utilization": round(self.max_utilization, 6),
            "lp_bound": round(self.lp_bound, 6),
            "ecmp_max_utilization": round(self.ecmp_max_utilization, 6),
            "solve_seconds": round(self.solve_seconds, 3),
            "groups": self.groups,
            "routes": self.routes,
        }
        doc.update(self.extra)
        return doc


_SUMMARY_KEYS = ("max_utilization", "lp_bound", "ecmp_max_utilization", "solve_seconds", "groups", "routes")


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Plan:
    """A whole fabric's forwarding plan (DESIGN.md, contract 2)."""

    fabric: str
    summary: PlanSummary
    devices: Mapping[str, DevicePlan]
    links: tuple[LinkLoad, ...]

    def to_document(self) -> JsonObject:
        return {
            "fabric": self.fabric,
            "summary": self.summary.to_document(),
            "devices": {name: dp.to_document() for name, dp in self.devices.items()},
            "links": [link.to_document() for link in self.links],
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Plan:
        """Read a plan document back (raises ``KeyError``/``TypeError``/``ValueError`` on a malformed one)."""
        s = doc["summary"]
        summary = PlanSummary(
            max_utilization=float(s["max_utilization"]),
            lp_bound=float(s["lp_bound"]),
            ecmp_max_utilization=float(s["ecmp_max_utilization"]),
            solve_seconds=float(s["solve_seconds"]),
            groups=int(s["groups"]),
            routes=int(s["routes"]),
            extra={k: v for k, v in s.items() if k not in _SUMMARY_KEYS},
        )
        devices = {
            name: DevicePlan(
                groups={g: tuple(NextHop(str(h["port"]), str(h["neighbor"]), int(h["weight"])) for h in hops)
                        for g, hops in dp["groups"].items()},
                routes={str(p): str(g) for p, g in dp["routes"].items()},
            )
            for name, dp in doc["devices"].items()
        }
        links = tuple(
            LinkLoad(str(x["a"]), str(x["a_port"]), str(x["b"]), str(x["b_port"]),
                     float(x["gbps_ab"]), float(x["gbps_ba"]), float(x["utilization"]))
            for x in doc["links"]
        )
        return cls(fabric=str(doc["fabric"]), summary=summary, devices=devices, links=links)
