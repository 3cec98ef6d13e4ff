"""The change document: its transitions, the progress of its commit (with the drain check), what is left
to settle, and its review (full, or brief in lists)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from controller.model.documents.autote import AutoTeTrigger
from controller.model.documents.base import ChangeState, Closed, JsonObject
from controller.model.documents.plan import OverlayDocument
from controller.model.documents.review import ReviewBrief, ReviewDocument
from controller.model.documents.state import ReactionTrigger

__all__ = [
    "ChangeDocument", "DeviceProgress", "DrainCheckDocument", "DrainTargetCheck", "ProgressDocument",
    "REVIEW_ANSWER_ORDER", "SettleDocument", "StageProgressDocument", "TransitionDocument", "answer_json",
]


class DeviceProgress(Closed):
    """One device in a commit."""

    step: str = Field(description="the transaction step the device is in (prepare, commit, verify, confirm...)")
    status: Literal["pending", "ok", "failed"]
    changed: bool
    error: str | None
    steps: dict[str, str] | None = Field(default=None, description="every finished step's status")


class DrainTargetCheck(Closed):
    """One drained device or link, by its counters after the commit."""

    target: str
    kind: Literal["device", "link"]
    status: Literal["verified", "carrying", "unknown"]
    transit_gbps: float | None = Field(description="transit traffic it still carries (None: no fresh counters)")
    tolerance_gbps: float = Field(description="what still counts as drained (a share of its capacity)")


class DrainCheckDocument(Closed):
    """Whether the drains a change added took effect in the traffic (``carrying`` flags one that did not)."""

    status: Literal["verified", "carrying", "unknown"]
    checked_at: str
    window_s: float
    targets: list[DrainTargetCheck]


class StageProgressDocument(Closed):
    """One stage of the commit order (the review's schedule, DESIGN.md Transitions)."""

    devices: list[str]
    status: Literal["pending", "commit", "verify", "done", "failed"] = Field(
        description="committing, its kernels being read back, done, or where the transaction stopped")
    worst_utilization: float | None = Field(default=None, description="the schedule's worst utilization in this stage")
    plan: int | None = Field(default=None, description="a commit through intermediate plans: the plan this stage moves "
                                                       "its devices to (J: the schedule's J-th intermediate plan, "
                                                       "0: the proposed plan)")


class ProgressDocument(Closed):
    """A commit's progress: the transaction's step (``done`` at the end) and each device's; with
    stages, which one runs (``stage``, an index into ``stages``)."""

    step: str
    devices: dict[str, DeviceProgress]
    stages: list[StageProgressDocument] | None = None
    stage: int | None = Field(default=None, description="the stage running (or the last one run)")
    note: str | None = Field(default=None, description="why there is nothing to follow (no devices attached)")
    drain_check: DrainCheckDocument | None = Field(
        default=None, description="after a committed drain: what the counters say the drained targets still carry")


class TransitionDocument(Closed):
    """One move of a change's state: when, by whom, why."""

    state: ChangeState
    at: str
    actor: str
    reason: str


class SettleDocument(Closed):
    """After a commit: the devices the leader still drives onto the revision the final state names."""

    settled: bool
    target_revision: int | None = Field(description="committed: the new revision; rolled back or failed: the "
                                                    "one active before (null: none, the change is undone instead)")
    transaction: str
    undo: bool = Field(description="the change's transaction is undone on the pending devices")
    pending: dict[str, str] = Field(description="device -> why it is not on the target yet")
    attempts: int
    checked_at: str
    note: str | None


class ChangeDocument(Closed):
    """``GET /v1/changes/{id}``: a set of edits against a base revision, and how it went."""

    id: int
    kind: Literal["change", "rollback", "repair", "reaction"] = Field(
        description="change, rollback, repair (drift) or reaction (a failure reaction, author failover)")
    state: ChangeState
    base_revision: int | None
    proposed_revision: int | None
    message: str
    author: str
    created_at: str
    transitions: list[TransitionDocument]
    review: ReviewDocument | ReviewBrief | dict[str, Any] | None = Field(
        union_mode="left_to_right",
        description="the review (brief in lists); a review recorded by other means than POST .../review "
                    "(a test, an older controller) is served as it was stored")
    progress: ProgressDocument | None
    force_reason: str | None
    error: str | None
    transaction: str | None = None
    trigger: AutoTeTrigger | ReactionTrigger | None = Field(
        default=None, union_mode="left_to_right",
        description="for a change by auto-te: the measured figures that triggered it; for a failure reaction: the "
                    "failure (or recovery) and the verdict")
    overlay: OverlayDocument | None = Field(
        default=None, description="the failed parts its plan leaves out (a failure reaction's, or the one in force "
                                  "when it committed)")
    settled: bool | None = Field(default=None, description="null until the commit ends; false while some device is not "
                                                           "yet on the revision the final state names")
    settle: SettleDocument | None = None


#: The key order of a review as ``POST /v1/changes/{id}/review`` has always answered it (and a change's
#: ``review`` in the other POST answers); ``GET /v1/changes/{id}`` serves the model's field order.
REVIEW_ANSWER_ORDER = ("verdict", "proposed_revision", "active_revision", "summary", "plan_diff", "links",
                       "config_diff", "safety", "bgp_sessions_reset", "schedule", "unsettled", "unsettled_note",
                       "devices_attached", "config_diff_note", "reaction", "robustness", "adoption")


def _in_order(doc: JsonObject, keys: tuple[str, ...]) -> JsonObject:
    return {**{k: doc[k] for k in keys if k in doc}, **{k: v for k, v in doc.items() if k not in keys}}


def answer_json(doc: ChangeDocument | ReviewDocument) -> JsonObject:
    """``doc`` as JSON, the way the POST routes of the change workflow answer it and an ``Idempotency-Key``
    keeps it for a replay: the fields its producer set, by alias, in the key order these answers have always
    had (a review's in :data:`REVIEW_ANSWER_ORDER`, a change's ``overlay`` last)."""
    body = doc.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(doc, ReviewDocument):
        return _in_order(body, REVIEW_ANSWER_ORDER)
    review = body.get("review")
    if isinstance(doc.review, ReviewDocument) and isinstance(review, dict):
        body["review"] = _in_order(review, REVIEW_ANSWER_ORDER)
    if "overlay" in body:
        body["overlay"] = body.pop("overlay")
    return body
