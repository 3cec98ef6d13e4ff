"""Telemetry (DESIGN.md, Telemetry): observed link loads, the measured demand, the plan's fidelity, a
demand capture, the traffic patterns."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controller.model.documents.base import Closed

__all__ = [
    "DemandCaptureDocument", "FidelityDocument", "FidelityLinkDocument", "MeasuredDemandDocument",
    "MeasuredDemandsDocument", "PatternGroupDocument", "PatternsDocument", "TelemetryHistoryPointDocument",
    "TelemetryLinkDocument", "TelemetryLinkHistoryDocument", "TelemetryLinksDocument",
]


class TelemetryLinkDocument(Closed):
    """One link's observed load over the window; ``null`` where no rate is known (a stale or silent
    counter is never reported as zero)."""

    a: str
    a_port: str
    b: str
    b_port: str
    gbps_ab: float | None = Field(description="a's out-octets rate (b's in-octets when a's is missing)")
    gbps_ba: float | None
    utilization: float | None = Field(description="the busier direction over the link's capacity")
    age_s: float | None = Field(description="seconds since the older direction's last sample")
    stale: bool = Field(description="no sample for more than 3 intervals, older than the window, or disconnected")


class TelemetryHistoryPointDocument(Closed):
    """One interval of a link's history: the rates that ended within it, time-weighted; ``null`` where no
    counter of that direction had a rate ending in it."""

    t: float = Field(description="the interval's end, seconds since the epoch")
    gbps_ab: float | None
    gbps_ba: float | None
    utilization: float | None = Field(description="the busier direction over the link's capacity")


class TelemetryLinkHistoryDocument(Closed):
    """``GET /v1/telemetry/links/{link}/history``: a link's load, interval by interval, oldest first, over
    the window (what the collector measured and, after a restart, what the store kept of it)."""

    link: str = Field(description="the link's lower end, DEVICE:PORT (as /v1/links names it)")
    a: str
    a_port: str
    b: str
    b_port: str
    capacity_gbps: float
    window_s: float
    interval_s: float
    points: list[TelemetryHistoryPointDocument]


class TelemetryLinksDocument(Closed):
    """``GET /v1/telemetry/links``."""

    window_s: float
    links: list[TelemetryLinkDocument]


class MeasuredDemandDocument(Closed):
    from_: str = Field(alias="from", description="ingress device")
    to: str = Field(description="destination prefix")
    gbps: float


class MeasuredDemandsDocument(Closed):
    """``GET /v1/telemetry/demand``: the measured matrix (non-zero entries)."""

    window_s: float
    stat: Literal["mean", "p95", "max"]
    method: Literal["aft", "tomogravity"] = Field(
        description="aft: the devices' per-prefix forwarding counters; tomogravity: estimated from link loads")
    demands: list[MeasuredDemandDocument]


class FidelityLinkDocument(Closed):
    a: str
    a_port: str
    b: str
    b_port: str
    predicted: float = Field(description="the active plan's utilization under the measured demand")
    observed: float | None = Field(description="the counters' utilization (null when stale)")
    error: float | None = Field(description="observed - predicted")


class FidelityDocument(Closed):
    """``GET /v1/telemetry/fidelity``: predicted against observed utilization, per link."""

    window_s: float
    stat: Literal["mean", "p95", "max"]
    method: Literal["aft", "tomogravity"] = Field(description="how the measured demand was obtained")
    links: list[FidelityLinkDocument]
    worst: float | None = Field(description="the largest |error| over links with an observation")
    p95: float | None = Field(description="the 95th percentile of |error|")


class DemandCaptureDocument(Closed):
    """``POST /v1/demands/from-telemetry``: the revision that holds the measured demands."""

    revision: int
    changed: bool
    window_s: float
    stat: Literal["mean", "p95", "max"]
    headroom: float
    method: Literal["aft", "tomogravity"]
    demands: list[MeasuredDemandDocument]


class PatternGroupDocument(Closed):
    """One communication group of the measured traffic and the evidence for its pattern."""

    members: list[str] = Field(description="the ToRs of the group")
    pattern: Literal["ring_allreduce", "all_to_all", "pipeline", "incast", "background"]
    confidence: float = Field(ge=0, le=1)
    gbps: float = Field(description="the group's total rate between its members (mean over the window)")
    score: float = Field(description="fit x uniformity of the pattern (0 for background)")
    fit: float = Field(description="share of the group's traffic on the pattern's edges")
    uniformity: float = Field(description="1 - CV / max_cv of the pattern edges' rates, clipped to [0, 1]")
    internal: float = Field(description="share of the members' traffic that stays inside the group")
    periodicity: float = Field(description="autocorrelation peak of the group's total rate over the intervals")
    period_s: float | None = Field(description="the period of that peak in seconds (null: none found)")
    scores: dict[str, float] = Field(description="every pattern's score for this group")
    collective: str | None = Field(None, description=(
        "the collective template (built-in or of the intent's collectives:) whose traffic matrix the group's "
        "is nearest to, when confident (null: none)"))
    collective_confidence: float | None = Field(None, ge=0, le=1, description="the confidence of that match")
    alternatives: list[str] | None = Field(None, description=(
        "templates whose traffic matrix has the same shape as the collective's: counters cannot tell them apart"))
    jobs: list[str] = Field(default_factory=list, description=(
        "the declared jobs this group's traffic is tied to: those whose ToRs overlap the group's by half or more "
        "(Jaccard >= 0.5), nearest first; empty for background and for a group no job explains (GET "
        "/v1/jobs/discovered offers those)"))


class PatternsDocument(Closed):
    """``GET /v1/telemetry/patterns``: the communication groups and their patterns."""

    window_s: float
    method: Literal["aft", "tomogravity"] = Field(
        description="aft: per-interval matrices from the forwarding counters; tomogravity: one estimated matrix")
    groups: list[PatternGroupDocument]
