"""The answer documents as pydantic models: what a client of Loom gets back.

The plan document (DESIGN.md contract 2), the safety report, the review of a
change (contract 4: ``verdict``, ``proposed_revision``, ``active_revision``,
``summary``, ``plan_diff``, ``links``, ``config_diff``, ``safety``), the
progress of a commit and the change document itself, with the change states as
:class:`ChangeState`. The values that produce these documents
(:class:`~controller.model.plan.Plan`, ``safety.report.SafetyReport``, the
workflow's review and progress) keep building plain JSON; these models are the
schema that JSON satisfies: the API declares them as response models, so
OpenAPI shows them, and the tests validate every produced document against
them (``model_validate(doc).model_dump(mode="json", exclude_unset=True)`` gives
the document back unchanged, which is how a missing or renamed field shows).

Every model refuses unknown fields except where the document is open on
purpose, which its docstring says. Fields that a document carries only
sometimes are optional without a default value in the JSON: serialize with
``exclude_unset=True`` to leave them out as the producer did. Ground layer:
imports pydantic only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AutoTeDecisionDocument",
    "AutoTeStatusDocument",
    "AutoTeTrigger",
    "FINAL_STATES",
    "OverlayDocument",
    "LinkStateDocument",
    "LinkStatesDocument",
    "DeviceStateSummary",
    "DeviceStatesDocument",
    "ReactionTableDocument",
    "ReactionTrigger",
    "REVIEWABLE_STATES",
    "ChangeDocument",
    "ClusterDocument",
    "ChangeState",
    "DeviceDiffDocument",
    "DevicePlanDocument",
    "DeviceProgress",
    "DeviceStateDocument",
    "DemandCaptureDocument",
    "FidelityDocument",
    "FidelityLinkDocument",
    "MeasuredDemandDocument",
    "MeasuredDemandsDocument",
    "PatternGroupDocument",
    "PatternsDocument",
    "TelemetryLinkDocument",
    "TelemetryLinksDocument",
    "DroppedDemandDocument",
    "FailureDocument",
    "InstalledNextHop",
    "InvariantDocument",
    "JobWhatIfDocument",
    "LeaseDocument",
    "LinkDeltaDocument",
    "LinkLoadDocument",
    "LinkUseDocument",
    "NextHopDocument",
    "PlanDiffEntry",
    "PlanDocument",
    "PlanSummaryDocument",
    "ProgressDocument",
    "ReviewBrief",
    "ReplicaDocument",
    "ReviewDocument",
    "ScheduleDocument",
    "SafetyBrief",
    "SafetyReportDocument",
    "ScenarioDocument",
    "SessionDocument",
    "SettleDocument",
    "StageDocument",
    "StageProgressDocument",
    "UnsettledDocument",
    "TransitionDocument",
]


class ChangeState(StrEnum):
    """Where a change is in its life: ``draft -> reviewed -> committing -> committed | failed | rolled_back``."""

    DRAFT = "draft"
    REVIEWED = "reviewed"
    COMMITTING = "committing"
    COMMITTED = "committed"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


#: The states a commit ends in.
FINAL_STATES = frozenset({ChangeState.COMMITTED, ChangeState.FAILED, ChangeState.ROLLED_BACK})
#: The states from which a change may be reviewed (again).
REVIEWABLE_STATES = frozenset({ChangeState.DRAFT, ChangeState.REVIEWED, ChangeState.FAILED, ChangeState.ROLLED_BACK})


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# -- the plan document (contract 2) ---------------------------------------------------
class NextHopDocument(_Closed):
    """One member of a weighted nexthop group."""

    port: str = Field(description="the local port")
    neighbor: str = Field(description="the device behind the port")
    weight: int = Field(ge=1, description="a positive integer; a group's weights sum to at most max_ecmp_entries")


class DevicePlanDocument(_Closed):
    """One device's forwarding state."""

    groups: dict[str, list[NextHopDocument]] = Field(description="nexthop groups by id")
    routes: dict[str, str] = Field(description="prefix -> group id; a prefix missing here is withdrawn")


class LinkLoadDocument(_Closed):
    """Load on one link; utilization is the busier direction over capacity."""

    a: str
    a_port: str
    b: str
    b_port: str
    gbps_ab: float
    gbps_ba: float
    utilization: float


class PlanSummaryDocument(BaseModel):
    """The plan's headline numbers. Open on purpose: solvers add keys beside these
    (``robust``, ``lp_seconds``, ``lp_model``, ``wcmp``, ``clos``, ...)."""

    model_config = ConfigDict(extra="allow")
    max_utilization: float = Field(description="after integer weight rounding")
    lp_bound: float = Field(description="the linear program's optimum")
    ecmp_max_utilization: float = Field(description="what plain ECMP would give")
    solve_seconds: float
    groups: int
    routes: int


class OverlayDocument(_Closed):
    """Failed parts a plan leaves out (DESIGN.md, Operational state and failure reaction): link ids
    (``device:port`` of the lower end) and device names; empty lists when nothing is overlaid."""

    links: list[str]
    devices: list[str]


class PlanDocument(_Closed):
    """A fabric's forwarding plan: what ``loom plan`` writes and ``/v1/plans/{revision}`` answers."""

    fabric: str
    summary: PlanSummaryDocument
    devices: dict[str, DevicePlanDocument]
    links: list[LinkLoadDocument]
    overlay: OverlayDocument | None = Field(None, description="``/v1/plans/active`` only: the failed parts the "
                                                              "plan in force leaves out")


# -- the safety report ---------------------------------------------------------------
class LinkUseDocument(_Closed):
    """Load on one direction of a link, traffic running ``from -> to``."""

    link: str
    from_: str = Field(alias="from")
    to: str
    gbps: float
    capacity_gbps: float
    utilization: float


class DroppedDemandDocument(_Closed):
    """Traffic toward ``prefix`` black-holed at ``device``."""

    prefix: str
    device: str
    gbps: float


class InvariantDocument(_Closed):
    """One invariant in one stage; ``gating``: whether failing it fails the scenario."""

    ok: bool
    gating: bool
    detail: str


class StageDocument(_Closed):
    """One stage of a scenario: ``immediate`` (local repair) or ``reconverged``."""

    ok: bool
    invariants: dict[str, InvariantDocument] = Field(description="delivery, loop, utilization, group_budget")
    max_utilization: float
    limit: float
    hottest: list[LinkUseDocument]
    dropped: list[DroppedDemandDocument]
    dropped_gbps: float
    loops: list[str]


class FailedParts(_Closed):
    devices: list[str]
    links: list[str]


class ScenarioDocument(_Closed):
    """One failure scenario (``baseline``, a domain's name, ``link:DEVICE:PORT``, ``device:NAME``)."""

    name: str
    kind: str
    ok: bool
    failed: FailedParts
    immediate: StageDocument
    reconverged: StageDocument


class FailureDocument(_Closed):
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


class JobWhatIfDocument(_Closed):
    """``POST /v1/jobs/what-if``: the active intent with one more job, planned and replayed (nothing stored)."""

    max_utilization: float = Field(description="the planned maximum link utilization with the job")
    verdict: Literal["safe", "unsafe"] = Field(description="the safety replay's verdict (the review's scope)")
    failing: list[FailureDocument] = Field(description="the safety report's failing entries")


# -- the review (contract 4) -----------------------------------------------------------
class PlanDiffEntry(_Closed):
    """One route that changes on a device (a sample of them)."""

    prefix: str
    kind: Literal["added", "removed", "reweighted"]
    before: list[NextHopDocument]
    after: list[NextHopDocument]


class DeviceDiffDocument(_Closed):
    """Route changes on one device: counts, and the first few."""

    device: str
    added: int
    removed: int
    reweighted: int
    changes: list[PlanDiffEntry]


class LinkDeltaDocument(_Closed):
    """One link's baseline utilization (the busier direction) before and after the change,
    and the load of each direction (``{"A->B": gbps, "B->A": gbps}``)."""

    id: str = Field(description="the link's lower end by name, DEVICE:PORT")
    before: float | None = Field(description="null when no revision is active")
    after: float | None
    delta: float | None
    gbps_before: dict[str, float] | None = None
    gbps_after: dict[str, float] | None = None


class SessionResetDocument(_Closed):
    """One end of a BGP session the change tears down."""

    device: str
    neighbor: str = Field(description="FRR's name of the neighbor: the peer's address (or the port, unnumbered)")
    peer: str = Field(description="the device at the far end")
    port: str
    reason: Literal["removed", "address", "remote-as", "local-as", "router-id"]


class SessionResetsDocument(_Closed):
    """The BGP sessions a change resets (each end once: removing one link resets two)."""

    count: int
    sessions: list[SessionResetDocument]


class ScheduleStage(_Closed):
    """One stage of a transition: devices that update together, in any order, and the worst
    utilization any state inside the stage reaches (exact, or the proved bound)."""

    devices: list[str]
    worst_utilization: float | None = Field(description="null when no bound holds (a stage that failed its check)")


class ScheduleCheck(_Closed):
    """How a stage was judged: ``exact`` (every state replayed) or ``bound`` (one propagation
    bounding every state), and how many states that covers."""

    method: Literal["exact", "bound"]
    states: int
    plan: int = Field(0, description="the plan the stage moves to: 0 the proposed one, k intermediate plan k")


class ScheduleFailure(_Closed):
    """A state with no safe way on: the devices on the new config, the one moving, and why."""

    state: list[str]
    moving: str
    ok: bool
    worst_utilization: float | None
    worst_link: str | None
    over_limit: list[str]
    dropped: list[str]
    loops: list[str]


class ScheduleDocument(_Closed):
    """The update schedule of a change (DESIGN.md, Transitions): ``stages`` in commit order
    and ``intermediate_plans``; beside them whether every state is safe, the limit, the
    ownership model, how each stage was checked and the states that fail."""

    stages: list[ScheduleStage]
    intermediate_plans: int
    safe: bool
    limit: float
    ownership: Literal["advertised", "installed"]
    checks: list[ScheduleCheck]
    failing: list[ScheduleFailure]
    intermediate: list[PlanDocument] = Field(
        default_factory=list, description="the intermediate plans, in order (stages with plan k push plan k)")
    intermediate_intent: Literal["active", "proposed"] = Field(
        "proposed", description="the revision whose intent the intermediate plans are rendered with")
    reset_sessions: int = Field(0, description="links whose BGP session the change resets: in the states, a "
                                               "reset session is down while its ends run different configs and "
                                               "may be down (re-establishing) in the stage that moves its ends")
    note: str | None = Field(None, description="why the search stopped early, when it did")


class ReviewDocument(_Closed):
    """``POST /v1/changes/{id}/review``: the dry run of a change. The top-level fields up to
    ``safety`` are a contract (DESIGN.md section 4); ``devices_attached`` is present (false)
    when the controller has no agents, ``config_diff_note`` when the config diff was rendered
    locally because a change was committing."""

    verdict: Literal["safe", "unsafe"]
    proposed_revision: int | None
    active_revision: int | None
    summary: PlanSummaryDocument
    plan_diff: list[DeviceDiffDocument]
    links: list[LinkDeltaDocument]
    config_diff: dict[str, str] = Field(description="device -> unified diff of its FRR config")
    safety: SafetyReportDocument
    schedule: ScheduleDocument | None = Field(
        None, description="the staged transition (one stage of every device when no revision is active)")
    devices_attached: bool | None = None
    config_diff_note: str | None = None
    unsettled: list[UnsettledDocument] | None = Field(
        None, description="earlier changes whose devices are not yet on their final revision: the config diff "
                          "of those devices is against what they really run (their agents' Prepare)")
    unsettled_note: str | None = None
    bgp_sessions_reset: SessionResetsDocument | None = Field(
        None, description="the BGP sessions the change tears down (from the active revision's configs)")


class UnsettledDocument(_Closed):
    """A final change that some devices have not caught up with yet."""

    change: int
    state: ChangeState
    target_revision: int | None
    devices: dict[str, str] = Field(description="device -> what it runs instead (or why it is not reached)")


class SafetyBrief(_Closed):
    verdict: Literal["safe", "unsafe"] | None
    counts: dict[str, int] | None


class ReviewBrief(_Closed):
    """A review without its bulk, as a list of changes shows it (``brief`` is true)."""

    verdict: Literal["safe", "unsafe"] | None
    proposed_revision: int | None
    active_revision: int | None
    summary: PlanSummaryDocument | None
    safety: SafetyBrief
    brief: Literal[True]


# -- progress and the change -------------------------------------------------------------
class DeviceProgress(_Closed):
    """One device in a commit."""

    step: str = Field(description="the transaction step the device is in (prepare, commit, verify, confirm...)")
    status: Literal["pending", "ok", "failed"]
    changed: bool
    error: str | None
    steps: dict[str, str] | None = Field(None, description="every finished step's status")


class DrainTargetCheck(_Closed):
    """One drained device or link, by its counters after the commit."""

    target: str
    kind: Literal["device", "link"]
    status: Literal["verified", "carrying", "unknown"]
    transit_gbps: float | None = Field(description="transit traffic it still carries (None: no fresh counters)")
    tolerance_gbps: float = Field(description="what still counts as drained (a share of its capacity)")


class DrainCheckDocument(_Closed):
    """Whether the drains a change added took effect in the traffic (``carrying`` flags one that did not)."""

    status: Literal["verified", "carrying", "unknown"]
    checked_at: str
    window_s: float
    targets: list[DrainTargetCheck]


class StageProgressDocument(_Closed):
    """One stage of the commit order (the review's schedule, DESIGN.md Transitions)."""

    devices: list[str]
    status: Literal["pending", "commit", "verify", "done", "failed"] = Field(
        description="committing, its kernels being read back, done, or where the transaction stopped")
    worst_utilization: float | None = Field(None, description="the schedule's worst utilization in this stage")
    plan: int | None = Field(None, description="a commit through intermediate plans: the plan this stage moves "
                                               "its devices to (J: the schedule's J-th intermediate plan, "
                                               "0: the proposed plan)")


class ProgressDocument(_Closed):
    """A commit's progress: the transaction's step (``done`` at the end) and each device's; with
    stages, which one runs (``stage``, an index into ``stages``)."""

    step: str
    devices: dict[str, DeviceProgress]
    stages: list[StageProgressDocument] | None = None
    stage: int | None = Field(None, description="the stage running (or the last one run)")
    note: str | None = Field(None, description="why there is nothing to follow (no devices attached)")
    drain_check: DrainCheckDocument | None = Field(
        None, description="after a committed drain: what the counters say the drained targets still carry")


class TransitionDocument(_Closed):
    """One move of a change's state: when, by whom, why."""

    state: ChangeState
    at: str
    actor: str
    reason: str


class AutoTeTrigger(_Closed):
    """What made ``auto-te`` propose a change: the measured demand and both plans' predictions under it."""

    window_s: float
    stat: Literal["mean", "p95", "max"]
    headroom: float
    method: Literal["aft", "tomogravity"] = Field(description="how the demand was measured")
    demands: int = Field(description="measured (ingress, prefix) entries")
    measured_gbps: float = Field(description="total measured demand, before the headroom")
    active_revision: int
    active_predicted: float = Field(description="the active plan's maximum utilization under the measured demand "
                                                "(times the headroom)")
    candidate_predicted: float = Field(description="the re-tuned plan's maximum utilization under that demand")
    gain: float = Field(description="active_predicted - candidate_predicted")
    min_gain: float
    observed: float | None = Field(description="the busiest link's observed utilization in the window (counters), "
                                               "null where no link reported")


class SettleDocument(_Closed):
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


class LinkStateDocument(_Closed):
    """One link as its ends report it: ``down`` when either end says so, ``unknown`` while an end's agent is
    unreachable (an unreachable agent is not a failed link)."""

    id: str = Field(description="device:port of its lower end")
    a: str
    a_port: str
    b: str
    b_port: str
    oper: Literal["up", "down", "unknown"]
    since: str | None = Field(description="when it last changed state")
    flaps_1h: int = Field(description="how often it went down in the last hour")


class LinkStatesDocument(_Closed):
    """``GET /v1/state/links``."""

    links: list[LinkStateDocument]


class DeviceStateSummary(_Closed):
    """One device's agent and sessions, as the leader follows them."""

    name: str
    agent: Literal["reachable", "unreachable"]
    sessions_up: int
    sessions: int
    last_seen: str | None


class DeviceStatesDocument(_Closed):
    """``GET /v1/state/devices``."""

    devices: list[DeviceStateSummary]


class ReactionTrigger(_Closed):
    """What made the leader commit a failure reaction (author ``failover``): the parts seen failed (or
    healthy again), when, and how the reaction plan compared with leaving the plan in force."""

    event: Literal["failure", "recovery"] = Field(description="parts failed, or came back after their hold-down")
    links: list[str] = Field(description="link ids (device:port of the lower end) the event names")
    devices: list[str]
    detected_at: str | None = Field(None, description="when the first of them was seen down (or up again)")
    verdict: str = Field(description="safe: the reaction plan passes the replay on the degraded fabric; no_worse: "
                                     "it fails some invariant, but less than the plan in force under the failure")
    current: dict[str, float] = Field(default_factory=dict, description="the plan in force under the failure: "
                                                                        "dropped_gbps, loops, max_utilization")
    reaction: dict[str, float] = Field(default_factory=dict, description="the reaction plan, likewise")
    plan: Literal["precomputed", "solved"] | None = Field(
        None, description="the reaction plan was looked up in the reaction table, or solved on the failure")
    plan_seconds: float | None = Field(None, description="time to plan and replay the reaction")


class ReactionTableDocument(_Closed):
    """``GET /v1/state/reactions``: this replica's reaction table (the leader's is the one in use)."""

    state: Literal["idle", "building", "ready", "partial", "stopped"] = Field(
        description="partial: the planning budget ran out (the rest are solved when they fail); stopped: the "
                    "replica stopped leading, or a newer revision became active")
    revision: int | None = None
    scenarios: int = Field(0, description="scenarios of the failure-tolerance scope (baseline excluded)")
    ready: int = Field(0, description="reaction plans precomputed and judged")
    failed: int = Field(0, description="scenarios no plan could route around")
    seconds: float = Field(0.0, description="planning time so far")


class ChangeDocument(_Closed):
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
        None, union_mode="left_to_right",
        description="for a change by auto-te: the measured figures that triggered it; for a failure reaction: the "
                    "failure (or recovery) and the verdict")
    overlay: OverlayDocument | None = Field(None, description="the failed parts its plan leaves out (a failure "
                                                              "reaction's, or the one in force when it committed)")
    settled: bool | None = Field(None, description="null until the commit ends; false while some device is not "
                                                   "yet on the revision the final state names")
    settle: SettleDocument | None = None


# -- what a device really runs -------------------------------------------------------------
class InstalledNextHop(_Closed):
    """One next hop a switch's kernel holds for a prefix."""

    port: str
    via: str = Field(description="the gateway (may be empty)")
    weight: int


class SessionDocument(_Closed):
    """One BGP session as the switch reports it."""

    neighbor: str
    state: str
    remote_asn: int
    prefixes_received: int


class DeviceStateDocument(_Closed):
    """``GET /v1/devices/{name}/state``: what the switch really installed. ``observed`` is false
    for an agent that records routes instead of reading a kernel (``--dry-frr``)."""

    hostname: str
    running_hash: str
    observed: bool
    routes: dict[str, list[InstalledNextHop]] = Field(description="prefix -> next hops, as loom lab routes")
    sessions: list[SessionDocument]
    pending_change: str = Field(description="a change committed but not yet confirmed, or empty")
    endpoint: str | None = Field(None, description="where the controller reaches the device's agent")


# -- telemetry (DESIGN.md, Telemetry) -----------------------------------------------------
class TelemetryLinkDocument(_Closed):
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


class TelemetryLinksDocument(_Closed):
    """``GET /v1/telemetry/links``."""

    window_s: float
    links: list[TelemetryLinkDocument]


class MeasuredDemandDocument(_Closed):
    from_: str = Field(alias="from", description="ingress device")
    to: str = Field(description="destination prefix")
    gbps: float


class MeasuredDemandsDocument(_Closed):
    """``GET /v1/telemetry/demand``: the measured matrix (non-zero entries)."""

    window_s: float
    stat: Literal["mean", "p95", "max"]
    method: Literal["aft", "tomogravity"] = Field(
        description="aft: the devices' per-prefix forwarding counters; tomogravity: estimated from link loads")
    demands: list[MeasuredDemandDocument]


class FidelityLinkDocument(_Closed):
    a: str
    a_port: str
    b: str
    b_port: str
    predicted: float = Field(description="the active plan's utilization under the measured demand")
    observed: float | None = Field(description="the counters' utilization (null when stale)")
    error: float | None = Field(description="observed - predicted")


class FidelityDocument(_Closed):
    """``GET /v1/telemetry/fidelity``: predicted against observed utilization, per link."""

    window_s: float
    stat: Literal["mean", "p95", "max"]
    method: Literal["aft", "tomogravity"] = Field(description="how the measured demand was obtained")
    links: list[FidelityLinkDocument]
    worst: float | None = Field(description="the largest |error| over links with an observation")
    p95: float | None = Field(description="the 95th percentile of |error|")


class DemandCaptureDocument(_Closed):
    """``POST /v1/demands/from-telemetry``: the revision that holds the measured demands."""

    revision: int
    changed: bool
    window_s: float
    stat: Literal["mean", "p95", "max"]
    headroom: float
    method: Literal["aft", "tomogravity"]
    demands: list[MeasuredDemandDocument]


class AutoTeDecisionDocument(_Closed):
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


class AutoTeStatusDocument(_Closed):
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


class PatternGroupDocument(_Closed):
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


class PatternsDocument(_Closed):
    """``GET /v1/telemetry/patterns``: the communication groups and their patterns."""

    window_s: float
    method: Literal["aft", "tomogravity"] = Field(
        description="aft: per-interval matrices from the forwarding counters; tomogravity: one estimated matrix")
    groups: list[PatternGroupDocument]


class ReplicaDocument(_Closed):
    """A replica heard from lately (its heartbeat comes with each lease attempt)."""

    id: str
    url: str = Field(description="where it serves, as it was configured (host:port)")
    role: Literal["leader", "follower"]
    seen_s_ago: float = Field(description="seconds since its last heartbeat, in the store's clock")


class LeaseDocument(_Closed):
    ttl_s: float = Field(description="the lease's time to live")
    renew_s: float = Field(description="seconds between renewals (and between a follower's attempts)")
    expires_in_s: float | None = Field(description="until the current lease lapses unless renewed (null: none held)")


class ClusterDocument(_Closed):
    """``GET /v1/cluster`` (DESIGN.md, High availability): this replica, its role, the leader and its epoch."""

    replica: str = Field(description="the replica that answered")
    role: Literal["leader", "follower"] = Field(description="its role now")
    leader: str | None = Field(description="the replica holding a live lease (null: none right now)")
    epoch: int = Field(description="the lease's epoch, one higher at each acquisition; agents refuse older ones")
    replicas: list[ReplicaDocument]
    lease: LeaseDocument
