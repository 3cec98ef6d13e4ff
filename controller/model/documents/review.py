"""The review of a change (DESIGN.md contract 4): the plan diff, the links before and after, the BGP
sessions reset, the update schedule, the changes still unsettled; and its brief form in lists."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controller.model.documents.autote import JobTimeDocument
from controller.model.documents.base import ChangeState, Closed
from controller.model.documents.plan import NextHopDocument, PlanDocument, PlanSummaryDocument
from controller.model.documents.safety import SafetyReportDocument

__all__ = [
    "DeviceDiffDocument", "LinkDeltaDocument", "PlanDiffEntry", "ReactionReviewDocument", "ReviewBrief",
    "ReviewDocument", "RobustnessDocument", "SafetyBrief", "ScenarioReactionDocument", "StageLossDocument",
    "ScheduleCheck", "ScheduleDocument", "ScheduleFailure", "ScheduleStage", "SessionResetDocument",
    "SessionResetsDocument", "UnsettledDocument",
]


class PlanDiffEntry(Closed):
    """One route that changes on a device (a sample of them)."""

    prefix: str
    kind: Literal["added", "removed", "reweighted"]
    before: list[NextHopDocument]
    after: list[NextHopDocument]


class DeviceDiffDocument(Closed):
    """Route changes on one device: counts, and the first few."""

    device: str
    added: int
    removed: int
    reweighted: int
    changes: list[PlanDiffEntry]


class LinkDeltaDocument(Closed):
    """One link's baseline utilization (the busier direction) before and after the change,
    and the load of each direction (``{"A->B": gbps, "B->A": gbps}``)."""

    id: str = Field(description="the link's lower end by name, DEVICE:PORT")
    before: float | None = Field(description="null when no revision is active")
    after: float | None
    delta: float | None
    gbps_before: dict[str, float] | None = None
    gbps_after: dict[str, float] | None = None


class SessionResetDocument(Closed):
    """One end of a BGP session the change tears down."""

    device: str
    neighbor: str = Field(description="FRR's name of the neighbor: the peer's address (or the port, unnumbered)")
    peer: str = Field(description="the device at the far end")
    port: str
    reason: Literal["removed", "address", "remote-as", "local-as", "router-id", "form"]


class SessionResetsDocument(Closed):
    """The BGP sessions a change resets (each end once: removing one link resets two)."""

    count: int
    sessions: list[SessionResetDocument]


class SessionMoveDocument(Closed):
    """One end of a BGP session a change moves to another transport over the same link."""

    device: str
    port: str
    peer: str = Field(description="the device at the far end")
    from_: str = Field(alias="from", description="FRR's neighbor before: the peer's address, or the port (unnumbered)")
    to: str = Field(description="FRR's neighbor after")


class SessionMovesDocument(Closed):
    """The BGP sessions a change moves (an underlay change): each end once. ``bridged``: the new sessions come
    up beside the old ones before these go (the schedule's plan-1 stages), so no link is without a session."""

    count: int
    bridged: bool
    sessions: list[SessionMoveDocument]


class ScheduleStage(Closed):
    """One stage of a transition: devices that update together, in any order, and the worst
    utilization any state inside the stage reaches (exact, or the proved bound)."""

    devices: list[str]
    worst_utilization: float | None = Field(description="null when no bound holds (a stage that failed its check)")


class ScheduleCheck(Closed):
    """How a stage was judged: ``exact`` (every state replayed) or ``bound`` (one propagation
    bounding every state), and how many states that covers."""

    method: Literal["exact", "bound"]
    states: int
    plan: int = Field(default=0, description="the plan the stage moves to: 0 the proposed one, k intermediate plan k")


class ScheduleFailure(Closed):
    """A state with no safe way on: the devices on the new config, the one moving, and why."""

    state: list[str]
    moving: str
    ok: bool
    worst_utilization: float | None
    worst_link: str | None
    over_limit: list[str]
    dropped: list[str]
    loops: list[str]


class ScheduleDocument(Closed):
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
    intermediate_intent: Literal["active", "proposed", "bridge"] = Field(
        default="proposed", description="the revision whose intent the intermediate plans are rendered with; "
                                        "`bridge`: the active one with the proposed one's BGP sessions beside its own "
                                        "(make before break: the sessions the change moves, e.g. to an unnumbered "
                                        "underlay, are up before the old ones go)")
    reset_sessions: int = Field(default=0, description="links whose BGP session the change resets: in the states, a "
                                                       "reset session is down while its ends run different configs and "
                                                       "may be down (re-establishing) in the stage that moves its ends")
    note: str | None = Field(default=None, description="why the search stopped early, when it did")


class UnsettledDocument(Closed):
    """A final change that some devices have not caught up with yet."""

    change: int
    state: ChangeState
    target_revision: int | None
    devices: dict[str, str] = Field(description="device -> what it runs instead (or why it is not reached)")


class StageLossDocument(Closed):
    """Traffic one stage of a failure loses before the reaction (gbps)."""

    black_holed_gbps: float
    looped_gbps: float | None = Field(description="the gbps whose path comes back to a device it went through: it "
                                                  "loops until its TTL runs out (null: not weighed)")


class ScenarioReactionDocument(Closed):
    """One failure scenario of the safety report, then the reaction: what is lost or looped before the
    reaction, for how long, and whether the reaction plan (the proposed revision planned around the failure)
    is safe."""

    scenario: str
    immediate: StageLossDocument = Field(description="kernel-local repair, before routing moves")
    reconverged: StageLossDocument = Field(description="routing reconverged (the static routes' repair under fib)")
    lost_gbps: float = Field(description="the worse stage's black-holed plus looped gbps")
    window_s: float | None = Field(description="failure to reaction committed (s): the policy's detect_s, the plan's "
                                               "time when not precomputed, the push; null when nothing reacts")
    lost_gbit: float | None = Field(description="at most lost_gbps over window_s; null when nothing reacts (the loss "
                                                "lasts until an operator acts)")
    plan: Literal["precomputed", "planned", "not_planned", "failed", "disabled"] = Field(
        description="where the reaction plan came from: the reaction table, planned for this review, left out past "
                    "the review's budget, not plannable (the error in note), or no reaction (policy off)")
    verdict: Literal["safe", "no_worse", "worse"] | None = Field(
        description="the reaction plan replayed under the failure: safe, or against leaving the plan in place")
    safe: bool | None
    max_utilization: float | None = Field(description="the reaction plan's worst utilization under the failure")
    dropped_gbps: float | None
    loops: int | None
    plan_seconds: float | None = Field(description="the time to plan and judge it (precomputed: when it was made)")
    note: str | None = None


class ReactionReviewDocument(Closed):
    """The review's failure reaction (issue 30.5): each failure scenario of the safety report, what it loses
    until the reaction, and the reaction plan's verdict. ``window_s`` of a scenario is ``detect_s +
    plan_seconds (when not precomputed) + push_s``, ``push_s`` the push a reaction takes (measured by the
    bench, ``tests/bench/reaction.py``)."""

    enabled: bool = Field(description="the failure_reaction policy (on when absent)")
    detect_s: float | None
    push_s: float | None
    budget_s: float = Field(description="the review's planning time for reaction plans the table does not hold")
    counts: dict[str, int] = Field(description="scenarios, then per plan source, and unsafe reactions")
    worst_lost_gbit: float | None
    note: str | None = None
    scenarios: list[ScenarioReactionDocument]


class RobustnessDocument(Closed):
    """The worst utilization of any failure scenario with robust WCMP and without (issue 30.4): ``robust`` is
    the proposed plan's objective; ``failure_mlu`` is the proposed plan's (the safety report's worst), and
    ``failure_mlu_plain`` / ``failure_mlu_robust`` what the robust solve measured of the plain plan and of the
    robust one (null when the plan is not robust, or was compiled before these were kept)."""

    robust: bool
    limit: float
    failure_mlu: float
    failure_mlu_plain: float | None
    failure_mlu_robust: float | None
    baseline_mlu_plain: float | None
    baseline_mlu_robust: float | None


class AdoptionWarningDocument(Closed):
    """One difference on a router being adopted that changes what it forwards: Loom's rendering
    ``removes`` or ``adds`` ``line`` (under ``context``), which is ``effect``."""

    device: str
    action: Literal["removes", "adds"]
    context: str
    line: str
    effect: str


class AdoptionDocument(Closed):
    """Routers that run a configuration Loom did not write (DESIGN.md "Adoption"): ``devices``; ``cosmetic``
    is true when every difference on them is cosmetic, else each other difference is in ``warnings``."""

    devices: list[str]
    cosmetic: bool
    warnings: list[AdoptionWarningDocument]


class ReviewDocument(Closed):
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
        default=None, description="the staged transition (one stage of every device when no revision is active)")
    devices_attached: bool | None = None
    config_diff_note: str | None = None
    unsettled: list[UnsettledDocument] | None = Field(
        default=None, description="earlier changes whose devices are not yet on their final revision: the config diff "
                                  "of those devices is against what they really run (their agents' Prepare)")
    unsettled_note: str | None = None
    bgp_sessions_reset: SessionResetsDocument | None = Field(
        default=None, description="the BGP sessions the change tears down (from the active revision's configs)")
    jobs: list[JobTimeDocument] | None = Field(
        default=None, description="each job's predicted communication time per iteration under the active plan and "
                                  "the proposed one (absent without jobs)")
    session_moves: SessionMovesDocument | None = Field(
        default=None, description="the BGP sessions the change moves to another transport over the same link "
                                  "(an underlay change), absent when none does")
    reaction: ReactionReviewDocument | None = Field(
        default=None, description="each failure until the reaction, and the reaction plan's verdict")
    robustness: RobustnessDocument | None = Field(
        default=None, description="the worst post-failure utilization with and without robust WCMP")
    adoption: AdoptionDocument | None = Field(
        default=None, description="routers running a configuration Loom did not write, and every difference that "
                                  "would change what they forward (absent when no router is being adopted)")


class SafetyBrief(Closed):
    verdict: Literal["safe", "unsafe"] | None
    counts: dict[str, int] | None


class ReviewBrief(Closed):
    """A review without its bulk, as a list of changes shows it (``brief`` is true)."""

    verdict: Literal["safe", "unsafe"] | None
    proposed_revision: int | None
    active_revision: int | None
    summary: PlanSummaryDocument | None
    safety: SafetyBrief
    brief: Literal[True]
