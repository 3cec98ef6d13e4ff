"""Is a drain real? What the counters say a drained device or link still carries.

A drained device carries no transit traffic (DESIGN.md, Semantics): what leaves
it on its fabric links is only what its own hosts send (at a ToR, the sum of
its AFT counters; elsewhere nothing). A drained link carries nothing either
way. :func:`check_drains` reads the collector's views over a window that began
after the change committed and judges each target ``verified`` (under the
counters' noise floor), ``carrying`` (over it) or ``unknown`` (no fresh
counters). Pure:
the collector, the intent, ``now`` and the window come in, a verdict goes out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller.model import Intent
from controller.model.documents import DrainCheckDocument, DrainTargetCheck
from controller.model.domain import parse_link_end
from controller.telemetry.collector import LinkView, Telemetry

__all__ = ["NOISE_PPS", "DrainCheck", "DrainVerdict", "check_drains", "noise_floor_gbps"]

Kind = Literal["device", "link"]
Status = Literal["verified", "carrying", "unknown"]


@dataclass(frozen=True, slots=True)
class DrainVerdict:
    """One target: ``transit_gbps`` it still carries (``None`` unknown) against ``tolerance_gbps``."""

    target: str
    kind: Kind
    status: Status
    transit_gbps: float | None
    tolerance_gbps: float


@dataclass(frozen=True, slots=True)
class DrainCheck:
    window_s: float
    targets: tuple[DrainVerdict, ...]

    @property
    def status(self) -> Status:
        """``carrying`` when any target carries traffic, ``verified`` when all are verified, else ``unknown``."""
        found = {t.status for t in self.targets}
        return "carrying" if "carrying" in found else "verified" if found == {"verified"} else "unknown"

    def to_model(self, checked_at: str) -> DrainCheckDocument:
        return DrainCheckDocument(
            status=self.status, checked_at=checked_at, window_s=self.window_s,
            targets=[DrainTargetCheck(target=t.target, kind=t.kind, status=t.status,
                                      transit_gbps=None if t.transit_gbps is None else round(t.transit_gbps, 6),
                                      tolerance_gbps=round(t.tolerance_gbps, 6)) for t in self.targets])


#: what a drained link still carries, per direction, in packets a second: BGP keepalives and updates, IS-IS or OSPF
#: hellos, BFD, the last packets of a flow; counted at the largest packet a fabric port sends
NOISE_PPS = 50.0
NOISE_PACKET_BYTES = 1500


def noise_floor_gbps(noise_pps: float = NOISE_PPS, packet_bytes: int = NOISE_PACKET_BYTES) -> float:
    """The counters' noise floor of one link direction, in Gbps (0.0006 by default)."""
    return noise_pps * packet_bytes * 8 / 1e9


def check_drains(telemetry: Telemetry, intent: Intent, targets: list[str], now: float, window_s: float, *,
                 noise_pps: float = NOISE_PPS) -> DrainCheck:
    """Each drain target of ``intent`` judged on the window ending at ``now``.

    The tolerance is the counters' own noise floor, not a share of capacity (a share of a 64 x 400G
    spine would pass 256 Gbps of transit): ``noise_pps`` packets a second of full-size packets per link
    direction (control traffic, the tail of a flow), times the links a drained device leaves by. Each
    verdict says the transit it saw.
    """
    floor = noise_floor_gbps(noise_pps)
    views = {(v.a, v.a_port): v for v in telemetry.links(intent, now, window_s)}
    out = []
    for target in targets:
        if ":" in target:
            out.append(_link(views, intent, target, floor, window_s))
        else:
            out.append(_device(telemetry, views, intent, target, now, window_s, floor))
    return DrainCheck(window_s, tuple(out))


def _verdict(target: str, kind: Kind, transit: float | None, tolerance_gbps: float) -> DrainVerdict:
    status: Status = "unknown" if transit is None else "verified" if transit <= tolerance_gbps else "carrying"
    return DrainVerdict(target, kind, status, transit, tolerance_gbps)


def _link(views: dict[tuple[str, str], LinkView], intent: Intent, target: str, floor: float,
          window_s: float) -> DrainVerdict:
    dev, port = parse_link_end(target)
    link = next((lk for lk in intent.links if (lk.a, lk.a_port) == (dev, port) or (lk.b, lk.b_port) == (dev, port)),
                None)
    if link is None:
        return DrainVerdict(target, "link", "unknown", None, 0.0)
    v = views.get((link.a, link.a_port))
    transit = None
    if v is not None and v.fresh and v.gbps_ab is not None and v.gbps_ba is not None:
        transit = max(v.gbps_ab, v.gbps_ba)
    return _verdict(target, "link", transit, floor)


def _device(telemetry: Telemetry, views: dict[tuple[str, str], LinkView], intent: Intent, device: str, now: float,
            window_s: float, floor: float) -> DrainVerdict:
    out_gbps = 0.0
    links = 0
    for lk in intent.links:
        if device not in (lk.a, lk.b):
            continue
        v = views.get((lk.a, lk.a_port))
        if v is None or not v.fresh:
            return DrainVerdict(device, "device", "unknown", None, 0.0)
        leaving = v.gbps_ab if lk.a == device else v.gbps_ba
        out_gbps += leaving or 0.0
        links += 1
    own = sum(g for (dev, _prefix), g in telemetry.demand(intent, None, now, window_s).demands.items()
              if dev == device)
    transit = max(0.0, out_gbps - own)
    return _verdict(device, "device", transit, floor * links)
