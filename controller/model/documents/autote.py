"""The automatic re-tuning's documents: what triggered a change, each decision, the loop's status."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from controller.model.documents.base import Closed

__all__ = ["AutoTeDecisionDocument", "AutoTeStatusDocument", "AutoTeTrigger", "JobTimeDocument"]


class JobTimeDocument(Closed):
    """One job's predicted communication time per iteration before and after a change (the plan's prediction:
    :mod:`controller.jobplan`); ``before`` is null for a job the active revision does not run."""

    job: str
    priority: float
    comm_s_idle: float = Field(description="on an idle fabric, under the proposed plan's routing")
    comm_s_before: float | None
    comm_s_after: float
    slowdown_before: float | None
    slowdown_after: float


class AutoTeTrigger(Closed):
    """What made ``auto-te`` propose a change: the measured demand and both plans' predictions under it."""

    window_s: float
    stat: Literal["mean", "p95", "max"]
    headroom: float
    method: Literal["aft", "tomogravity"] = Field(description="how the demand was measured")
    demands: int = Field(description="measured (ingress, prefix) entries")
    measured_gbps: float = Field(description="total measured demand, before the headroom")
    active_revision: int
    objective: Literal["mlu", "jobs"] = Field(default="mlu", description="what the predictions measure: the maximum "
                                              "utilization (mlu) or the worst priority-weighted job slowdown (jobs)")
    active_predicted: float = Field(description="the active plan's maximum utilization under the measured demand "
                                                "(times the headroom); objective jobs: its worst weighted slowdown")
    candidate_predicted: float = Field(description="the re-tuned plan's maximum utilization under that demand "
                                                   "(objective jobs: its worst weighted slowdown)")
    gain: float = Field(description="active_predicted - candidate_predicted")
    min_gain: float
    observed: float | None = Field(description="the busiest link's observed utilization in the window (counters), "
                                               "null where no link reported")
    jobs: list[JobTimeDocument] = Field(default_factory=list, description="each job's predicted communication time "
                                        "under the active plan and the re-tuned one")


class AutoTeDecisionDocument(Closed):
    """One evaluation of the automatic re-tuning and what it decided."""

    at: str
    decision: Literal["skipped", "committed", "refused", "failed"]
    reason: str = Field(description="a stable key: paused, disabled, pending_edits, busy, backoff, rate_limit, "
                                    "no_telemetry, incomplete_telemetry, window_too_long, no_demand, below_min_gain, "
                                    "confirming, "
                                    "invalid_candidate, unsafe, conflict, committed, failed, rolled_back, error")
    detail: str
    change: int | None = None
    trigger: AutoTeTrigger | None = None


class AutoTeStatusDocument(Closed):
    """``GET /v1/auto-te``: the policy, the kill switch, the guard rails' state and the recent decisions."""

    policy: dict[str, Any] | None = Field(description="the active revision's auto_te policy (null: none)")
    enabled: bool = Field(description="the policy is present and enabled")
    paused: bool
    paused_by: str | None
    paused_at: str | None
    pause_reason: str | None
    leader: bool = Field(description="this replica runs the loop")
    running: bool = Field(description="the loop runs here (telemetry attached and leader)")
    streak: int = Field(description="consecutive evaluations that cleared min_gain (commits need "
                                    "`confirm` of them)")
    confirm: int
    backoff_until: str | None
    failures: int = Field(description="consecutive refused or failed attempts (the back-off doubles with each)")
    last_commit_at: str | None
    next_run_at: str | None
    decisions: list[AutoTeDecisionDocument] = Field(description="the most recent first")
