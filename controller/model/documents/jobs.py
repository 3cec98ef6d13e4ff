"""ML jobs seen from the network (DESIGN.md, ML workloads): a job's performance from counters alone,
the groups of traffic no declared job explains, offered as jobs, and where to put a new job."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controller.model.documents.base import Closed, JsonObject
from controller.model.documents.safety import FailureDocument

__all__ = ["DiscoveredJobDocument", "DiscoveredJobsDocument", "InsightEventDocument",
           "JobBottleneckDocument", "JobEventDocument", "JobHistoryDocument", "JobHistoryPointDocument",
           "JobPerformanceDocument",
           "JobPlacementDocument", "JobPlacementsDocument", "OfferedJobDocument", "PlacementSearchFigures"]


class InsightEventDocument(Closed):
    """The data of a ``job.slowdown``, ``job.stalled``, ``job.pattern_changed`` or ``link.hot`` event on the
    event stream (DESIGN.md, ML workloads): the job or the link (one of the two), its baseline, what was
    observed, the evidence in words and numbers, and the links the evidence names. An episode is raised once;
    its end is the same kind with ``cleared: true``."""

    job: str | None = Field(None, description="the job (job.* events)")
    link: str | None = Field(None, description="the link's id, device:port of its lower end (link.hot)")
    baseline: dict[str, float | str | None] = Field(description="the learned baseline: mean and spread (sd)")
    observed: dict[str, float | str | None] = Field(description="what the telemetry interval showed")
    evidence: str
    links: list[str] = Field(description="the links the evidence names, as device:port of their lower end")
    cleared: bool = Field(False, description="true: the episode ended (the observation is back under)")


class JobBottleneckDocument(Closed):
    """A link the job's traffic crosses, among those that take it the longest per iteration."""

    link: str = Field(description="the link's id, device:port of its lower end")
    utilization: float | None = Field(description=(
        "the busier direction the job crosses: its measured load over the capacity (the counters', else the "
        "active plan's under the measured demand); null with no telemetry"))
    job_share: float | None = Field(description="the job's share of that load (null when nothing is measured)")


class JobPerformanceDocument(Closed):
    """``GET /v1/jobs/{name}/performance``: the job's traffic from its members' prefix counters beside its
    collective's expectation, the iteration period recovered from the counters, and the predicted
    communication time per iteration under the measured load against an idle fabric. A figure that cannot be
    had is null and ``reasons`` says why, under the field's name."""

    job: str
    window_s: float
    interval_s: float = Field(description="the telemetry interval: periods under twice it are averaged out")
    method: Literal["aft", "tomogravity"] | None = Field(description=(
        "how the job's traffic was measured: its members' per-prefix (AFT) counters, or estimated from link loads "
        "(tomogravity); null when nothing was measured"))
    measured_gbps: float | None = Field(description="the job's mean rate over the window, summed over its pairs")
    expected_gbps: float = Field(description="bytes_per_iter / iter_s through the job's collective template")
    period_s: float | None = Field(description="the iteration period recovered from the job's rate series")
    iter_s: float = Field(description="the job's declared iteration period, beside the recovered one")
    periodicity: float | None = Field(description="the strength of the period's evidence (0..1)")
    comm_s: float | None = Field(description=(
        "predicted communication time per iteration: the template's phases routed by the active plan, each "
        "phase as long as its slowest link over the capacity the measured load of other traffic leaves"))
    comm_s_idle: float = Field(description="the same on an idle fabric (the full capacity of every link)")
    slowdown: float | None = Field(description="comm_s / comm_s_idle")
    bottlenecks: list[JobBottleneckDocument]
    reasons: dict[str, str] = Field(description="why a figure is null or approximate, by field name")


class JobHistoryPointDocument(Closed):
    """One telemetry interval of a job's measured rate."""

    t: float = Field(description="the interval's end, seconds since the epoch")
    gbps: float | None = Field(description="the job's pairs summed; null where none reported in the interval")


class JobEventDocument(Closed):
    """One of the job's insight events (the event stream's ``job.*``), as stored."""

    id: int = Field(description="the event's id (the event stream's, for Last-Event-ID)")
    at: str
    kind: str
    data: InsightEventDocument


class JobHistoryDocument(Closed):
    """``GET /v1/jobs/{name}/history``: the job's measured rate per interval over the window, oldest first,
    beside its collective's expectation, and its insight events of the window, newest first."""

    job: str
    window_s: float
    interval_s: float
    expected_gbps: float
    method: Literal["aft"] | None = Field(description="aft: its members' AFT counters; null without them")
    points: list[JobHistoryPointDocument]
    events: list[JobEventDocument]


class OfferedJobDocument(Closed):
    """A job as the intent document spells one, ready to adopt."""

    name: str
    tors: list[str] = Field(description="the members in the collective's order (ring or stage order)")
    collective: str
    bytes_per_iter: float
    iter_s: float


class DiscoveredJobDocument(Closed):
    """A communication group found with high confidence that no declared job explains."""

    members: list[str]
    pattern: str = Field(description="the classifier's label (GET /v1/telemetry/patterns)")
    collective: str = Field(description="the template the job is offered as")
    confidence: float = Field(ge=0, le=1)
    gbps: float = Field(description="the group's mean rate between its members")
    period_s: float | None = Field(description="the period recovered from the group's rate (the offered iter_s)")
    job: OfferedJobDocument
    patch: list[JsonObject] = Field(description=(
        "the JSON patch that adds the job to the intent: POST /v1/changes with it (loom jobs adopt NAME) "
        "makes the reviewed change"))


class DiscoveredJobsDocument(Closed):
    """``GET /v1/jobs/discovered``."""

    window_s: float
    method: Literal["aft", "tomogravity"]
    min_confidence: float
    jobs: list[DiscoveredJobDocument]


class PlacementSearchFigures(Closed):
    """A placement's figures under the active plan, as the search ranked it (before the job is planned)."""

    comm_s: float = Field(description="the job's predicted communication time per iteration beside the active "
                                      "plan's predicted load")
    max_slowdown_others: float | None = Field(description="the others' worst slowdown from the job's traffic "
                                                          "(null: no other job)")


class JobPlacementDocument(Closed):
    """One placement of the job, planned with it and checked like ``POST /v1/jobs/what-if``."""

    tors: list[str] = Field(description="the members in the collective's order (ring or stage order)")
    comm_s: float = Field(description=(
        "predicted communication time per iteration on the plan compiled with the job: its template's phases "
        "routed by that plan, each as long as its slowest link over the capacity the plan's predicted load of "
        "the other traffic leaves"))
    comm_s_idle: float = Field(description="the same on an idle fabric")
    max_slowdown_others: float | None = Field(description=(
        "the declared jobs' worst slowdown: a job's predicted time per iteration on the new plan with this job "
        "over its time on the active plan without it (null: no other job)"))
    slowest_other: str | None = Field(description="the job that slowdown is of")
    max_utilization: float = Field(description="the planned maximum link utilization with the job")
    verdict: Literal["safe", "unsafe"] = Field(description="the safety replay's verdict (the review's scope)")
    failing: list[FailureDocument] = Field(description="the safety report's failing entries")
    search: PlacementSearchFigures


class JobPlacementsDocument(Closed):
    """``POST /v1/jobs/placement``: the best placements of a new job over the candidate ToRs, each planned and
    replayed; safe ones first, then by the objective. Nothing is stored."""

    job: str
    members: int
    objective: Literal["balanced", "job", "others"] = Field(description=(
        "balanced: the job's comm_s times the others' worst priority-weighted slowdown (at least 1); job: its "
        "comm_s first; others: their slowdown first"))
    search: Literal["exhaustive", "heuristic"] = Field(description=(
        "exhaustive: every placement was scored under the active plan (the best is optimal under the model); "
        "heuristic: local search from per-pod and greedy starts (a local optimum)"))
    candidates: int
    evaluated: int = Field(description="placements scored under the active plan")
    search_s: float = Field(description="seconds the search took (the plans and replays not counted)")
    infeasible: list[list[str]] = Field(description="placements the planner could not route, skipped")
    placements: list[JobPlacementDocument]
