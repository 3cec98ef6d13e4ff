"""The answer documents as pydantic models: what a client of Loom gets back.

The plan document (DESIGN.md contract 2), the safety report, the review of a
change (contract 4: ``verdict``, ``proposed_revision``, ``active_revision``,
``summary``, ``plan_diff``, ``links``, ``config_diff``, ``safety``), the
progress of a commit and the change document itself, with the change states as
:class:`ChangeState`; the operational state, telemetry, the automatic
re-tuning, the cluster and the jobs seen from the network. One module per family (:mod:`.plan`, :mod:`.safety`,
:mod:`.review`, :mod:`.change`, :mod:`.state`, :mod:`.telemetry`,
:mod:`.autote`, :mod:`.cluster`, :mod:`.jobs`), every model re-exported here.

The code that computes a document builds its model (the workflow's review,
progress and change, the operational state, the telemetry views, auto-TE's
status); the API declares these models as response models, so OpenAPI shows
them, and serializes them once. Values that keep a JSON form of their own (the
plan, the safety report, stored in the store as JSON) are read into their model
where a document holds them.

Every model refuses unknown fields except where the document is open on
purpose, which its docstring says. Fields that a document carries only
sometimes are optional without a default value in the JSON: a model is built
with only the fields its document carries, and serialized with
``exclude_unset=True`` to leave the others out. Ground layer: imports pydantic only.
"""

from __future__ import annotations

from controller.model.documents.autote import (
    AutoTeDecisionDocument,
    AutoTeStatusDocument,
    AutoTeTrigger,
    JobTimeDocument,
)
from controller.model.documents.base import (
    FINAL_STATES,
    REVIEWABLE_STATES,
    ChangeState,
    JsonObject,
    read_newer,
)
from controller.model.documents.change import (
    REVIEW_ANSWER_ORDER,
    ChangeDocument,
    DeviceProgress,
    DrainCheckDocument,
    DrainTargetCheck,
    ProgressDocument,
    SettleDocument,
    StageProgressDocument,
    TransitionDocument,
    answer_json,
)
from controller.model.documents.cluster import (
    ClusterDocument,
    LeaseDocument,
    ReplicaDocument,
)
from controller.model.documents.drift import DeviceDriftDocument, DriftReportDocument, RepairDocument
from controller.model.documents.jobs import (
    DiscoveredJobDocument,
    DiscoveredJobsDocument,
    InsightEventDocument,
    JobBottleneckDocument,
    JobEventDocument,
    JobHistoryDocument,
    JobHistoryPointDocument,
    JobPerformanceDocument,
    JobPlacementDocument,
    JobPlacementsDocument,
    OfferedJobDocument,
    PlacementSearchFigures,
)
from controller.model.documents.plan import (
    DevicePlanDocument,
    LinkLoadDocument,
    NextHopDocument,
    OverlayDocument,
    PlanDocument,
    PlanSummaryDocument,
)
from controller.model.documents.review import (
    AdoptionDocument,
    AdoptionWarningDocument,
    DeviceDiffDocument,
    LinkDeltaDocument,
    PlanDiffEntry,
    ReactionReviewDocument,
    ReviewBrief,
    ReviewDocument,
    RobustnessDocument,
    SafetyBrief,
    ScenarioReactionDocument,
    ScheduleCheck,
    ScheduleDocument,
    ScheduleFailure,
    ScheduleStage,
    SessionMoveDocument,
    SessionMovesDocument,
    SessionResetDocument,
    SessionResetsDocument,
    StageLossDocument,
    UnsettledDocument,
)
from controller.model.documents.safety import (
    DroppedDemandDocument,
    FailedParts,
    FailureDocument,
    InvariantDocument,
    JobWhatIfDocument,
    LinkUseDocument,
    SafetyReportDocument,
    ScenarioDocument,
    StageDocument,
)
from controller.model.documents.state import (
    AdjacencyStateDocument,
    DeviceStateDocument,
    DeviceStatesDocument,
    DeviceStateSummary,
    InstalledNextHop,
    LinkStateDocument,
    LinkStatesDocument,
    OperationalStateDocument,
    OspfAdjacencyStateDocument,
    ReactionTableDocument,
    ReactionTrigger,
    SessionDocument,
)
from controller.model.documents.telemetry import (
    DemandCaptureDocument,
    FidelityDocument,
    FidelityLinkDocument,
    MeasuredDemandDocument,
    MeasuredDemandsDocument,
    PatternGroupDocument,
    PatternsDocument,
    TelemetryHistoryPointDocument,
    TelemetryLinkDocument,
    TelemetryLinkHistoryDocument,
    TelemetryLinksDocument,
)

__all__ = [
    "AutoTeDecisionDocument", "AutoTeStatusDocument", "AutoTeTrigger", "JobTimeDocument", "ChangeDocument",
    "ChangeState",
    "AdoptionDocument", "AdoptionWarningDocument",
    "ClusterDocument", "DemandCaptureDocument", "DeviceDiffDocument", "DevicePlanDocument", "DeviceProgress",
    "AdjacencyStateDocument", "DeviceStateDocument", "DeviceStateSummary", "DeviceStatesDocument",
    "OspfAdjacencyStateDocument", "DrainCheckDocument", "DrainTargetCheck",
    "DroppedDemandDocument", "FINAL_STATES", "FailedParts", "FailureDocument", "FidelityDocument",
    "FidelityLinkDocument", "InsightEventDocument", "InstalledNextHop", "InvariantDocument", "JobWhatIfDocument",
    "JsonObject",
    "LeaseDocument", "LinkDeltaDocument", "LinkLoadDocument", "LinkStateDocument", "LinkStatesDocument",
    "LinkUseDocument", "MeasuredDemandDocument", "MeasuredDemandsDocument", "NextHopDocument",
    "OperationalStateDocument", "OverlayDocument", "PatternGroupDocument", "PatternsDocument", "PlanDiffEntry",
    "PlanDocument", "PlanSummaryDocument", "ProgressDocument", "REVIEWABLE_STATES", "REVIEW_ANSWER_ORDER",
    "ReactionReviewDocument", "ReactionTableDocument", "ReactionTrigger", "ReplicaDocument", "ReviewBrief",
    "ReviewDocument", "RobustnessDocument", "SafetyBrief", "SafetyReportDocument", "ScenarioDocument",
    "ScenarioReactionDocument", "ScheduleCheck", "ScheduleDocument", "ScheduleFailure", "ScheduleStage",
    "SessionDocument", "SessionMoveDocument", "SessionMovesDocument", "SessionResetDocument",
    "SessionResetsDocument", "SettleDocument", "StageDocument",
    "StageLossDocument", "StageProgressDocument", "TelemetryHistoryPointDocument", "TelemetryLinkDocument",
    "TelemetryLinkHistoryDocument", "TelemetryLinksDocument",
    "TransitionDocument", "UnsettledDocument", "answer_json",
    "read_newer",
    "DiscoveredJobDocument", "DiscoveredJobsDocument", "JobBottleneckDocument", "JobEventDocument",
    "JobHistoryDocument", "JobHistoryPointDocument", "JobPerformanceDocument",
    "JobPlacementDocument", "JobPlacementsDocument", "OfferedJobDocument", "PlacementSearchFigures",
    "DeviceDriftDocument", "DriftReportDocument", "RepairDocument",
]
