"""The safety report: what each failure scenario does to a plan, and the verdict.

This module owns the report's value types (frozen dataclasses, each with
``to_document()`` giving the JSON the CLI prints and the API serves). A
:class:`SafetyReport` lists every scenario with two :class:`StageResult`\\ s
(``immediate``: local repair in the data plane; ``reconverged``: after routing
withdrew what lost its path), each with a pass/fail per invariant
(``delivery``, ``loop``, ``utilization``, ``group_budget``), the maximum link
utilization, the hottest links and the black-holed demand; ``failing`` names
every (scenario, stage, invariant) that failed, and ``verdict`` is ``safe``
only when that list is empty. The document's typed shape is
:class:`controller.model.documents.SafetyReportDocument` (:meth:`SafetyReport.to_model`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.model.documents import SafetyReportDocument
from controller.model.documents.base import JsonObject

__all__ = [
    "INVARIANTS",
    "DroppedDemand",
    "Failure",
    "InvariantResult",
    "LinkUse",
    "SafetyReport",
    "ScenarioResult",
    "Shipped",
    "StageResult",
]

INVARIANTS = ("delivery", "loop", "utilization", "group_budget")
STAGES = ("immediate", "reconverged")


class Shipped:
    """A frozen slots dataclass that pickles as its constructor's arguments. The pickling
    dataclasses give slots classes runs field by field in Python, four times slower, and a
    sweep ships tens of thousands of results between processes."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        cls = type(self)
        get = _FIELDS.get(cls)
        if get is None:  # the fields in one C call (a generator of getattr is twice as slow)
            names = tuple(cls.__dataclass_fields__)  # type: ignore[attr-defined]
            get = _FIELDS[cls] = operator.attrgetter(*names) if len(names) > 1 else (
                lambda obj: (getattr(obj, names[0]),))
        return cls, get(self)


_FIELDS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _r(x: float) -> float:
    return round(float(x), 6)


@dataclass(frozen=True, slots=True)
class LinkUse(Shipped):
    """Load on one direction of a link: ``link`` is its key, traffic runs ``src -> dst``."""

    link: str
    src: str
    dst: str
    gbps: float
    capacity_gbps: float
    utilization: float

    def to_document(self) -> JsonObject:
        return {"link": self.link, "from": self.src, "to": self.dst, "gbps": _r(self.gbps),
                "capacity_gbps": _r(self.capacity_gbps), "utilization": _r(self.utilization)}


@dataclass(frozen=True, slots=True)
class DroppedDemand(Shipped):
    """Traffic toward ``prefix`` black-holed at ``device`` (no usable next hop there)."""

    prefix: str
    device: str
    gbps: float

    def to_document(self) -> JsonObject:
        return {"prefix": self.prefix, "device": self.device, "gbps": _r(self.gbps)}


@dataclass(frozen=True, slots=True)
class InvariantResult(Shipped):
    """One invariant in one stage. ``gating``: whether a failure here fails the
    scenario (see :mod:`safety.replay` for the one that does not)."""

    name: str
    ok: bool
    detail: str = ""
    gating: bool = True

    def to_document(self) -> JsonObject:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "gating": self.gating}


@dataclass(frozen=True, slots=True)
class StageResult(Shipped):
    """One stage of one scenario. ``limit`` is the utilization limit applied."""

    stage: str
    invariants: tuple[InvariantResult, ...]
    max_utilization: float
    limit: float
    hottest: tuple[LinkUse, ...] = ()
    dropped: tuple[DroppedDemand, ...] = ()
    loops: tuple[str, ...] = ()
    #: the gbps the loops keep (still moving after as many hops as devices); None when not weighed. Not in
    #: the stage's document (whose shape is fixed): the review's reaction section reports it
    looped_gbps: float | None = 0.0

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.invariants if i.gating)

    @property
    def dropped_gbps(self) -> float:
        return sum(d.gbps for d in self.dropped)

    def invariant(self, name: str) -> InvariantResult | None:
        return next((i for i in self.invariants if i.name == name), None)

    def to_document(self) -> JsonObject:
        return {
            "ok": self.ok,
            "invariants": {i.name: {"ok": i.ok, "gating": i.gating, "detail": i.detail} for i in self.invariants},
            "max_utilization": _r(self.max_utilization),
            "limit": _r(self.limit),
            "hottest": [h.to_document() for h in self.hottest],
            "dropped": [d.to_document() for d in self.dropped],
            "dropped_gbps": _r(self.dropped_gbps),
            "loops": list(self.loops),
        }


@dataclass(frozen=True, slots=True)
class ScenarioResult(Shipped):
    name: str
    kind: str
    failed_devices: tuple[str, ...]
    failed_links: tuple[str, ...]
    immediate: StageResult
    reconverged: StageResult

    @property
    def ok(self) -> bool:
        return self.immediate.ok and self.reconverged.ok

    @property
    def max_utilization(self) -> float:
        return max(self.immediate.max_utilization, self.reconverged.max_utilization)

    def stages(self) -> tuple[StageResult, StageResult]:
        return (self.immediate, self.reconverged)

    def to_document(self) -> JsonObject:
        return {"name": self.name, "kind": self.kind, "ok": self.ok,
                "failed": {"devices": list(self.failed_devices), "links": list(self.failed_links)},
                "immediate": self.immediate.to_document(), "reconverged": self.reconverged.to_document()}


@dataclass(frozen=True, slots=True)
class Failure(Shipped):
    """One failed invariant: which scenario, which stage, which invariant, why."""

    scenario: str
    stage: str
    invariant: str
    detail: str

    def to_document(self) -> JsonObject:
        return {"scenario": self.scenario, "stage": self.stage, "invariant": self.invariant, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class SafetyReport:
    """The whole safety report of one plan.

    ``verdict`` is ``safe`` or ``unsafe``; ``counts`` has ``scenarios``,
    ``failing_scenarios`` and scenarios per kind; ``model`` names the replay
    model (see :mod:`safety.replay`); ``seconds`` the wall time of the replay.
    """

    fabric: str
    verdict: str
    scope: str
    limits: dict[str, float]
    model: str
    counts: dict[str, int]
    scenarios: tuple[ScenarioResult, ...]
    failing: tuple[Failure, ...]
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def safe(self) -> bool:
        return self.verdict == "safe"

    def scenario(self, name: str) -> ScenarioResult:
        for s in self.scenarios:
            if s.name == name:
                return s
        raise KeyError(name)

    def failing_scenarios(self) -> list[str]:
        seen: dict[str, None] = {}
        for f in self.failing:
            seen.setdefault(f.scenario, None)
        return list(seen)

    def hottest(self, k: int = 10) -> list[tuple[str, str, LinkUse]]:
        """The ``k`` hottest link directions over every scenario and stage, each
        with the scenario and stage where it peaks (one row per link direction)."""
        best: dict[tuple[str, str], tuple[str, str, LinkUse]] = {}
        for s in self.scenarios:
            for st in s.stages():
                for h in st.hottest:
                    key = (h.link, h.src)
                    if key not in best or h.utilization > best[key][2].utilization:
                        best[key] = (s.name, st.stage, h)
        return sorted(best.values(), key=lambda r: -r[2].utilization)[:k]

    def to_document(self) -> JsonObject:
        doc: JsonObject = {
            "fabric": self.fabric,
            "verdict": self.verdict,
            "scope": self.scope,
            "limits": {k: _r(v) for k, v in self.limits.items()},
            "model": self.model,
            "counts": dict(self.counts),
            "seconds": round(self.seconds, 3),
            "failing": [f.to_document() for f in self.failing],
            "scenarios": [s.to_document() for s in self.scenarios],
        }
        doc.update(self.extra)
        return doc

    def to_model(self) -> SafetyReportDocument:
        """The report as its typed document (what the API's schema shows)."""
        return SafetyReportDocument.model_validate(self.to_document())
