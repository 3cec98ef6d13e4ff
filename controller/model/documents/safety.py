"""The safety report of one plan (``loom check --json``, a review's ``safety``) and the what-if of a job."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from controller.model.documents.base import Closed

__all__ = [
    "DroppedDemandDocument", "FailedParts", "FailureDocument", "InvariantDocument", "JobWhatIfDocument",
    "LinkUseDocument", "SafetyReportDocument", "ScenarioDocument", "StageDocument",
]


class LinkUseDocument(Closed):
    """Load on one direction of a link, traffic running ``from -> to``."""

    link: str
    from_: str = Field(alias="from")
    to: str
    gbps: float
    capacity_gbps: float
    utilization: float


class DroppedDemandDocument(Closed):
    """Traffic toward ``prefix`` black-holed at ``device``."""

    prefix: str
    device: str
    gbps: float


class InvariantDocument(Closed):
    """One invariant in one stage; ``gating``: whether failing it fails the scenario."""

    ok: bool
    gating: bool
    detail: str


class StageDocument(Closed):
    """One stage of a scenario: ``immediate`` (local repair) or ``reconverged``."""

    ok: bool
    invariants: dict[str, InvariantDocument] = Field(description="delivery, loop, utilization, group_budget")
    max_utilization: float
    limit: float
    hottest: list[LinkUseDocument]
    dropped: list[DroppedDemandDocument]
    dropped_gbps: float
    loops: list[str]


class FailedParts(Closed):
    devices: list[str]
    links: list[str]


class ScenarioDocument(Closed):
    """One failure scenario (``baseline``, a domain's name, ``link:DEVICE:PORT``, ``device:NAME``)."""

    name: str
    kind: str
    ok: bool
    failed: FailedParts
    immediate: StageDocument
    reconverged: StageDocument


class FailureDocument(Closed):
    """One failed invariant: where and why."""

    scenario: str
    stage: str
    invariant: str
    detail: str


class SafetyReportDocument(BaseModel):
    """The safety report of one plan (``loom check --json``, a review's ``safety``). Open on
    purpose: analyses add sections beside these (``robust`` from ``loom check``)."""

    model_config = ConfigDict(extra="allow")
    fabric: str
    verdict: Literal["safe", "unsafe"]
    scope: str = Field(description="domains, all_single or k2")
    limits: dict[str, float] = Field(description="the utilization limit per scenario class (baseline, failure)")
    model: str = Field(description="the replay model")
    counts: dict[str, int] = Field(description="scenarios, failing_scenarios, and scenarios per kind")
    seconds: float
    failing: list[FailureDocument]
    scenarios: list[ScenarioDocument]


class JobWhatIfDocument(Closed):
    """``POST /v1/jobs/what-if``: the active intent with one more job, planned and replayed (nothing stored)."""

    max_utilization: float = Field(description="the planned maximum link utilization with the job")
    verdict: Literal["safe", "unsafe"] = Field(description="the safety replay's verdict (the review's scope)")
    failing: list[FailureDocument] = Field(description="the safety report's failing entries")
