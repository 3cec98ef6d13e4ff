"""The review's failure reaction: each failure until the reaction, and whether the reaction plan is safe.

Issue 30.5 (DESIGN.md, "Operational state and failure reaction"). For every
failure scenario of the proposed plan's safety report, :func:`reaction_section`
weighs what the failure loses until the reaction (:func:`safety.reaction.exposure`:
the gbps black-holed and looped in the ``immediate`` and ``reconverged``
stages, over the reaction's delay) and gives the reaction plan's verdict: the
proposed revision planned around the failure and replayed under it against
leaving the proposed plan in place (:func:`controller.operations.reaction.judge`).

The reaction plan comes from the reaction table when it holds it (precomputed
after a commit, or planned by an earlier review), else it is planned now
(:func:`controller.operations.precompute.reaction_of`) within
:attr:`ReactionOptions.budget_s` of planning, the scenarios that lose the most
first; those past the budget say ``not_planned``. Plans made here go into the
table, where the reaction itself finds them. The delay is the policy's
``detect_s``, the planning time when the plan is not precomputed, and
:attr:`ReactionOptions.push_s`, the push of a reaction measured by the bench
(``tests/bench/reaction.py``). With the policy off nothing reacts: the window
and the loss in it are null, and the note says the loss lasts until an
operator acts; likewise for a reaction plan judged ``worse``, which the leader
does not commit, and the window of a plan not planned is unknown (null). Runs
with no store session open (in the review's worker thread).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from controller.model import Intent
from controller.model.documents import (
    ReactionReviewDocument,
    RobustnessDocument,
    ScenarioReactionDocument,
    StageLossDocument,
)
from controller.model.errors import LoomError
from controller.model.plan import Plan
from controller.operations.overlay import Overlay, intent_ends, normal
from controller.operations.precompute import reaction_of
from controller.operations.reaction import DEFAULT_POLICY, Judgement, judge, replay_key
from controller.operations.table import TABLE, Reaction
from safety.reaction import Exposure, StageLoss, exposure
from safety.report import SafetyReport, ScenarioResult

__all__ = ["ReactionOptions", "reaction_section", "robustness_section"]

NO_REACTION = "failure_reaction is off: nothing reacts, the loss lasts until an operator acts"
REFUSED = ("the reaction plan is worse than leaving the plan in place under this failure: it is not committed, "
           "the loss lasts until an operator acts")


@dataclass(frozen=True, slots=True)
class ReactionOptions:
    """``budget_s``: planning time for reaction plans the table does not hold (0: lookups only);
    ``push_s``: the push of a reaction (failure plan to kernels), measured by ``tests/bench/reaction.py``."""

    budget_s: float = 5.0
    push_s: float = 0.5


@dataclass(frozen=True, slots=True)
class _Got:
    source: str  # precomputed | planned | not_planned | failed
    judgement: Judgement | None = None
    seconds: float | None = None
    note: str | None = None


def reaction_section(intent: Intent, plan: Plan, report: SafetyReport, *, identity: str | None,
                     in_force: Overlay = Overlay(), options: ReactionOptions = ReactionOptions()
                     ) -> ReactionReviewDocument:
    """The reaction section of the review of (``intent``, ``plan``) with its safety ``report``.

    ``intent`` and ``plan`` are the proposed revision's, around ``in_force`` (the failed parts of the overlay in
    force, if any); ``identity`` the proposed revision's (the reaction table's key; None: no lookup)."""
    policy = intent.policy("failure_reaction") or DEFAULT_POLICY
    failures = [s for s in report.scenarios if s.kind != "baseline"]
    if not policy.enabled:
        rows = [_row(exposure(s, None), _Got("disabled")) for s in failures]
        return ReactionReviewDocument(enabled=False, detect_s=None, push_s=None, budget_s=options.budget_s,
                                      counts=_counts(rows), worst_lost_gbit=None, note=NO_REACTION, scenarios=rows)
    got = _reactions(intent, plan, failures, identity, in_force, options)
    rows = []
    for s in failures:
        g = got[s.name]
        planning = g.seconds if g.source == "planned" and g.seconds is not None else 0.0
        reacts = g.judgement is not None and g.judgement.commit  # a reaction worse than the plan is not committed
        window = policy.detect_s + planning + options.push_s if reacts else None
        if g.judgement is not None and not reacts:
            g = _Got(g.source, g.judgement, g.seconds, REFUSED)
        rows.append(_row(exposure(s, window), g))
    lost = [r.lost_gbit for r in rows if r.lost_gbit is not None]
    left = sum(1 for r in rows if r.plan == "not_planned")
    note = (f"{left} reaction plan(s) not planned within the review's {options.budget_s:g} s: they are planned at "
            "commit (the reaction table) or when the failure happens") if left else None
    return ReactionReviewDocument(enabled=True, detect_s=policy.detect_s, push_s=options.push_s,
                                  budget_s=options.budget_s, counts=_counts(rows),
                                  worst_lost_gbit=round(max(lost), 6) if lost else None, note=note, scenarios=rows)


def _reactions(intent: Intent, plan: Plan, failures: list[ScenarioResult], identity: str | None,
               in_force: Overlay, options: ReactionOptions) -> dict[str, _Got]:
    """Each scenario's reaction: looked up with its judgement, else planned (or, found in the table without
    one, judged) within the budget, the worst losses first."""
    ends = intent_ends(intent)
    out: dict[str, _Got] = {}
    todo: list[tuple[ScenarioResult, Overlay, Reaction | None]] = []
    for s in failures:
        failed = normal(Overlay(frozenset(s.failed_links), frozenset(s.failed_devices)), ends)
        entry = TABLE.get(identity, normal(failed | in_force, ends)) if identity is not None else None
        if entry is not None and entry.judgement is not None and not in_force:  # judged against this plan
            out[s.name] = _Got("precomputed", entry.judgement, round(entry.seconds, 4))
        else:
            todo.append((s, failed, entry))
    todo.sort(key=lambda t: (-exposure(t[0], None).lost_gbps, -t[0].max_utilization))
    spent = 0.0
    for s, failed, entry in todo:
        if spent >= options.budget_s:
            out[s.name] = _Got("not_planned")
            continue
        t0 = time.perf_counter()
        out[s.name] = _make(intent, plan, failed, entry, identity if not in_force else None,
                            replay_key(identity, in_force) if identity is not None else None)
        spent += time.perf_counter() - t0
    return out


def _make(intent: Intent, plan: Plan, failed: Overlay, entry: Reaction | None, keep_as: str | None,
          key: str | None) -> _Got:
    """The reaction around ``failed``: ``entry``'s plan judged against ``plan`` (the plan in force, as the
    reaction would; ``key``, :func:`~controller.operations.reaction.replay_key`, names it), or planned and
    judged now, and kept in the table under ``keep_as`` (None: not kept)."""
    if entry is not None:
        judged = judge((intent, plan), failed, (entry.intent, entry.plan), key=key)
        return _Got("precomputed", judged, round(entry.seconds, 4))
    try:
        made = reaction_of(intent, plan, failed, key=key)
    except (LoomError, ValueError) as exc:
        return _Got("failed", note=str(exc))
    if keep_as is not None:  # judged against the full plan, as the table's are
        TABLE.put(keep_as, failed, made)
    return _Got("planned", made.judgement, round(made.seconds, 4))


def _stage(loss: StageLoss) -> StageLossDocument:
    looped = None if loss.looped_gbps is None else round(loss.looped_gbps, 6)
    return StageLossDocument(black_holed_gbps=round(loss.black_holed_gbps, 6), looped_gbps=looped)


def _row(ex: Exposure, got: _Got) -> ScenarioReactionDocument:
    j = got.judgement
    lost_gbit = ex.lost_gbit
    return ScenarioReactionDocument(
        scenario=ex.scenario, immediate=_stage(ex.immediate), reconverged=_stage(ex.reconverged),
        lost_gbps=round(ex.lost_gbps, 6), window_s=None if ex.window_s is None else round(ex.window_s, 4),
        lost_gbit=None if lost_gbit is None else round(lost_gbit, 6), plan=got.source,  # type: ignore[arg-type]
        verdict=j.verdict if j is not None else None,  # type: ignore[arg-type]
        safe=j.verdict == "safe" if j is not None else None,
        max_utilization=j.reaction["max_utilization"] if j is not None else None,
        dropped_gbps=j.reaction["dropped_gbps"] if j is not None else None,
        loops=int(j.reaction["loops"]) if j is not None else None, plan_seconds=got.seconds,
        note=got.note if got.source != "disabled" else NO_REACTION)


def _counts(rows: list[ScenarioReactionDocument]) -> dict[str, int]:
    out = {"scenarios": len(rows)}
    for r in rows:
        out[r.plan] = out.get(r.plan, 0) + 1
    out["unsafe_reactions"] = sum(1 for r in rows if r.safe is False)
    return out


def robustness_section(intent: Intent, plan: Plan, report: SafetyReport) -> RobustnessDocument:
    """The worst post-failure utilization of the proposed plan, and with and without robust WCMP where the
    robust solve measured both (``summary.extra["robust"]``, :func:`solver.robust.solve_robust`)."""
    wcmp = intent.policy("wcmp")
    info = plan.summary.extra.get("robust")
    got = info if isinstance(info, dict) else {}

    def fig(key: str) -> float | None:
        v = got.get(key)
        return round(float(v), 6) if isinstance(v, int | float) else None

    worst = max((s.max_utilization for s in report.scenarios if s.kind != "baseline"), default=0.0)
    return RobustnessDocument(
        robust=wcmp is not None and wcmp.objective == "robust", limit=report.limits.get("failure", 1.0),
        failure_mlu=round(worst, 6), failure_mlu_plain=fig("failure_mlu_plain"),
        failure_mlu_robust=fig("failure_mlu_robust"), baseline_mlu_plain=fig("baseline_mlu_plain"),
        baseline_mlu_robust=fig("baseline_mlu_robust"))
