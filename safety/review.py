"""Change review: what a proposed plan changes against the active one, and whether it is safe.

This module owns the review of a change (DESIGN.md: the operator's dry run).
Given the active intent and plan and a proposed intent and plan it reports,
per device, the routes added, withdrawn and re-weighted (weights compared as
split ratios, so scaling a group is no change); per link, the baseline
utilization before and after (links only in one of the intents show ``None``
on the other side); the proposed plan's full :class:`~safety.report.SafetyReport`
(every scenario); and the verdict, which is the safety report's.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from controller.model import Intent
from controller.model.plan import NextHop, Plan
from safety.forwarding import build_topology, plan_table, propagate
from safety.replay import replay
from safety.report import SafetyReport

__all__ = ["DeviceDiff", "LinkChange", "Review", "diff_plans", "link_changes", "review"]

SAMPLE = 20  # route changes listed per device (all are counted)


def _ratios(hops: tuple[NextHop, ...]) -> dict[tuple[str, str], Fraction]:
    total = sum(h.weight for h in hops) or 1
    return {(h.port, h.neighbor): Fraction(h.weight, total) for h in hops}


def _hops_doc(hops: tuple[NextHop, ...]) -> list[dict[str, Any]]:
    return [h.to_document() for h in hops]


@dataclass(frozen=True, slots=True)
class DeviceDiff:
    """Route changes on one device: counts, and the first few of each kind."""

    device: str
    added: int
    removed: int
    reweighted: int
    changes: tuple[dict[str, Any], ...]

    def to_document(self) -> dict[str, Any]:
        return {"device": self.device, "added": self.added, "removed": self.removed,
                "reweighted": self.reweighted, "changes": list(self.changes)}


@dataclass(frozen=True, slots=True)
class LinkChange:
    """Baseline utilization of one link (the busier direction) before and after."""

    link: str
    before: float | None
    after: float | None

    @property
    def delta(self) -> float:
        return (self.after or 0.0) - (self.before or 0.0)

    def to_document(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 6)

        return {"link": self.link, "before": r(self.before), "after": r(self.after), "delta": round(self.delta, 6)}


@dataclass(frozen=True, slots=True)
class Review:
    fabric: str
    verdict: str
    devices: tuple[DeviceDiff, ...]
    links: tuple[LinkChange, ...]
    report: SafetyReport

    @property
    def routes_changed(self) -> int:
        return sum(d.added + d.removed + d.reweighted for d in self.devices)

    def to_document(self) -> dict[str, Any]:
        return {"fabric": self.fabric, "verdict": self.verdict,
                "summary": {"devices_changed": len(self.devices), "routes_changed": self.routes_changed,
                            "links_changed": len(self.links)},
                "devices": [d.to_document() for d in self.devices],
                "links": [x.to_document() for x in self.links],
                "safety": self.report.to_document()}


def _cached(cache: dict[tuple[int, str], dict[tuple[str, str], Fraction]], side: int, gid: str,
            dp: Any) -> dict[tuple[str, str], Fraction]:
    key = (side, gid)
    if key not in cache:
        cache[key] = _ratios(dp.groups[gid])
    return cache[key]


def diff_plans(old: Plan, new: Plan) -> list[DeviceDiff]:
    """Per device, routes added, withdrawn and re-weighted from ``old`` to ``new``."""
    out: list[DeviceDiff] = []
    for name in sorted(set(old.devices) | set(new.devices)):
        a, b = old.devices.get(name), new.devices.get(name)
        ra = a.routes if a is not None else {}
        rb = b.routes if b is not None else {}
        added = removed = reweighted = 0
        changes: list[dict[str, Any]] = []
        cache: dict[tuple[int, str], dict[tuple[str, str], Fraction]] = {}
        for prefix in sorted(set(ra) | set(rb)):
            ga, gb = ra.get(prefix), rb.get(prefix)
            if ga is None and gb is not None:
                added += 1
                kind = "added"
            elif gb is None and ga is not None:
                removed += 1
                kind = "removed"
            elif ga is not None and gb is not None and _cached(cache, 0, ga, a) != _cached(cache, 1, gb, b):
                reweighted += 1
                kind = "reweighted"
            else:
                continue
            if len(changes) < SAMPLE:
                changes.append({"prefix": prefix, "kind": kind,
                                "before": _hops_doc(a.groups[ga]) if a is not None and ga is not None else [],
                                "after": _hops_doc(b.groups[gb]) if b is not None and gb is not None else []})
        if added or removed or reweighted:
            out.append(DeviceDiff(name, added, removed, reweighted, tuple(changes)))
    return out


def _utilization(intent: Intent, load: Any) -> dict[str, float]:
    return {link.key: max(float(load[2 * i]), float(load[2 * i + 1])) / link.capacity_gbps
            for i, link in enumerate(intent.links)}


def link_changes(old_intent: Intent, old_load: Any, new_intent: Intent, new_load: Any,
                 *, tol: float = 1e-9) -> list[LinkChange]:
    """Links whose baseline utilization changed, largest change first."""
    before = _utilization(old_intent, old_load)
    after = _utilization(new_intent, new_load)
    rows = [LinkChange(k, before.get(k), after.get(k)) for k in sorted(set(before) | set(after))]
    rows = [r for r in rows if r.before is None or r.after is None or abs(r.delta) > tol]
    return sorted(rows, key=lambda r: (-abs(r.delta), r.link))


def review(old_intent: Intent, old_plan: Plan, new_intent: Intent, new_plan: Plan,
           report: SafetyReport | None = None, **replay_args: Any) -> Review:
    """Review the change from (``old_intent``, ``old_plan``) to (``new_intent``, ``new_plan``).

    ``report`` is the proposed plan's safety report (replayed here when not given,
    with ``replay_args`` passed to :func:`safety.replay.replay`).
    """
    if report is None:
        report = replay(new_intent, new_plan, **replay_args)
    loads = []
    for it, pl in ((old_intent, old_plan), (new_intent, new_plan)):
        topo = build_topology(it)
        loads.append(propagate(plan_table(it, pl, topo), topo).load)
    links = link_changes(old_intent, loads[0], new_intent, loads[1])
    return Review(new_intent.name, report.verdict, tuple(diff_plans(old_plan, new_plan)), tuple(links), report)
