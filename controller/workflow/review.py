"""The review document of a change: the dry run an operator reads before committing.

Pure functions over values. :func:`review_document` runs the safety replay of the
proposed plan (:func:`safety.sweep.check`: on the configured executor, ``LOOM_EXECUTOR``,
for a scope of at least ``LOOM_EXECUTOR_THRESHOLD`` scenarios) and
:func:`safety.review.review` against the active intent and plan (with no active
revision yet, every route counts as added and every link has no "before"), and builds the API's ``Review``
(:class:`~controller.model.documents.ReviewDocument`): verdict, proposed and
active revisions, the plan summary, the per-device plan diff, per-link
utilization before and after, the per-device FRR config diff and the whole
safety report, the BGP sessions the change resets (both revisions' device
configs compared, :func:`southbound.config.bgp_session_resets`), and the update
schedule (:func:`safety.transition.schedule`: stages whose every intermediate
state is safe; a change with no safe order is ``unsafe``), each failure until its
reaction with the reaction plan's verdict (:mod:`controller.workflow.reactions`,
which does not change the verdict: the reaction comes after the failure the
safety report already judges) and the worst post-failure utilization with and
without robust WCMP; :func:`build_review`
is its JSON, as ``POST /v1/changes/{id}/review`` answers it.
:func:`local_config_diff` renders both revisions' FRR configs
(``southbound.render``) and diffs them, for a controller with no agents.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from controller.jobplan import job_time_rows, job_times
from controller.model import Intent
from controller.model.documents import (
    AdoptionDocument,
    AdoptionWarningDocument,
    DeviceDiffDocument,
    JobTimeDocument,
    JsonObject,
    LinkDeltaDocument,
    PlanSummaryDocument,
    ReviewDocument,
    ScheduleCheck,
    ScheduleDocument,
    ScheduleStage,
    SessionMoveDocument,
    SessionMovesDocument,
    SessionResetDocument,
    SessionResetsDocument,
    answer_json,
)
from controller.model.plan import Plan, PlanSummary
from controller.workflow.changes import ReviewInputs
from controller.workflow.reactions import ReactionOptions, reaction_section, robustness_section
from safety.replay import limits
from safety.report import SafetyReport
from safety.review import diff_plans
from safety.review import review as review_plans
from safety.sweep import SweepPolicy, check
from safety.transition import ownership, schedule
from southbound.config import SessionReset, bgp_session_resets, session_moves
from southbound.discovery.impact import forwarding_impact
from southbound.render import config_hash, device_configs, render_frr
from southbound.transaction import commit_order

__all__ = ["CommitLeg", "adoption_section", "build_review", "commit_legs", "commit_stages", "expected_hashes",
           "leg_transaction", "local_config_diff", "review_document", "route_changes", "session_resets",
           "transition_schedule"]

Doc = dict[str, Any]


def _gbps(intent: Intent | None, plan: Plan | None) -> dict[str, dict[str, float]]:
    if intent is None or plan is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for x in plan.links:
        ea, eb = f"{x.a}:{x.a_port}", f"{x.b}:{x.b_port}"
        out[min(ea, eb)] = {f"{x.a}->{x.b}": round(x.gbps_ab, 6), f"{x.b}->{x.a}": round(x.gbps_ba, 6)}
    return out


#: one link of a review: its id, utilization before and after, and the change
LinkRow = tuple[str, float | None, float | None, float | None]


def _diff_and_links(inp: ReviewInputs, report: SafetyReport) -> tuple[list[DeviceDiffDocument], list[LinkRow]]:
    """The per-device plan diff, and each link's (id, before, after, delta)."""
    if inp.active_intent is not None and inp.active_plan is not None:
        rv = review_plans(inp.active_intent, inp.active_plan, inp.intent, inp.plan, report=report)
        return ([DeviceDiffDocument.model_validate(d.to_document()) for d in rv.devices],
                [(x.link, x.before, x.after, round(x.delta, 6)) for x in rv.links])
    empty = Plan(inp.plan.fabric, PlanSummary(0, 0, 0, 0, 0, 0), {}, ())
    return ([DeviceDiffDocument.model_validate(d.to_document()) for d in diff_plans(empty, inp.plan)],
            [(x.link_key, None, round(x.utilization, 6), None) for x in _link_rows(inp.plan)])


def review_document(inp: ReviewInputs, config_diff: dict[str, str], *,
                    observe_safety: Callable[[float, int], None] | None = None,
                    reactions: ReactionOptions = ReactionOptions(),
                    sweep_policy: SweepPolicy = SweepPolicy()) -> ReviewDocument:
    """The review of ``inp`` with ``config_diff`` (device -> unified diff); ``reactions``: how the failure
    reaction section is made (:func:`controller.workflow.reactions.reaction_section`); ``sweep_policy``: where
    the safety sweep runs (:func:`safety.sweep.check`: the configured executor for a large scope; the commit
    gate reads this review's verdict)."""
    t0 = time.perf_counter()
    report = check(inp.intent, inp.plan, sweep_policy)
    if observe_safety is not None:
        observe_safety(time.perf_counter() - t0, int(report.counts.get("scenarios", 0)))
    reaction = reaction_section(inp.intent, inp.plan, report, identity=inp.identity, in_force=inp.overlay,
                                options=reactions)
    plan_diff, rows = _diff_and_links(inp, report)
    resets = _resets(inp)
    sched = transition_schedule(inp, config_diff, resets)
    before, after = _gbps(inp.active_intent, inp.active_plan), _gbps(inp.intent, inp.plan)
    links = [LinkDeltaDocument(id=key, before=b, after=a, delta=d, gbps_before=before.get(key),
                               gbps_after=after.get(key)) for key, b, a, d in rows]
    return ReviewDocument(
        verdict="unsafe" if report.verdict == "unsafe" or not sched.safe else "safe",
        proposed_revision=inp.change.proposed_revision,
        active_revision=inp.active,
        summary=PlanSummaryDocument.model_validate(inp.plan.summary.to_document()),
        plan_diff=plan_diff,
        links=links,
        config_diff=config_diff,
        safety=report.to_model(),
        bgp_sessions_reset=session_resets(inp, resets),
        session_moves=_moves(inp, resets, sched),
        jobs=_job_times(inp),
        schedule=sched,
        reaction=reaction,
        robustness=robustness_section(inp.intent, inp.plan, report),
        adoption=adoption_section(config_diff),
    )


def route_changes(plan: Plan, kernel: Mapping[str, Mapping[str, frozenset[str]] | None],
                  igp_carried: frozenset[str] = frozenset()) -> list[AdoptionWarningDocument]:
    """Where ``plan`` would move a router's forwarding: per device of ``kernel`` (prefix -> the ports its kernel
    forwards on now, as its routing protocol installed them; ``None``: not read), every prefix whose next-hop
    ports the plan changes, gains or drops. WCMP weights are not compared (a plan re-weights on purpose).
    ``igp_carried``: prefixes the rendered IGP carries beside the plan's (OSPF's and IS-IS's link subnets, kept
    as their addresses are), compared only where the plan routes them too."""
    out: list[AdoptionWarningDocument] = []
    for device, now in sorted(kernel.items()):
        if now is None:
            out.append(AdoptionWarningDocument(device=device, action="removes", context="", line="its kernel routes",
                                               effect="what it forwards (its agent did not answer GetState)"))
            continue
        dp = plan.devices.get(device)
        planned = {p: frozenset(h.port for h in dp.groups[g]) for p, g in dp.routes.items()} if dp else {}
        for prefix in sorted(set(planned) | (set(now) - igp_carried)):
            before, after = now.get(prefix, frozenset()), planned.get(prefix, frozenset())
            for action, ports in (("removes", before - after), ("adds", after - before)):
                for port in sorted(ports):
                    out.append(AdoptionWarningDocument(
                        device=device, action=cast(Literal["removes", "adds"], action), context=f"route {prefix}",
                        line=f"next hop {port}", effect="a next hop the router forwards on"))
    return out


def adoption_section(config_diff: dict[str, str]) -> AdoptionDocument | None:
    """The routers whose agents diffed against a configuration Loom did not write, with every difference
    that changes forwarding (:func:`southbound.discovery.impact.forwarding_impact`); ``None`` when none."""
    devices: list[str] = []
    warnings: list[AdoptionWarningDocument] = []
    for device, diff in sorted(config_diff.items()):
        impacts = forwarding_impact(diff)
        if impacts is None:
            continue
        devices.append(device)
        warnings += [AdoptionWarningDocument(device=device, action=cast(Literal["removes", "adds"], i.action),
                                             context=i.context, line=i.line, effect=i.effect) for i in impacts]
    if not devices:
        return None
    return AdoptionDocument(devices=devices, cosmetic=not warnings, warnings=warnings)


def build_review(inp: ReviewInputs, config_diff: dict[str, str], *,
                 observe_safety: Callable[[float, int], None] | None = None,
                 reactions: ReactionOptions = ReactionOptions(),
                 sweep_policy: SweepPolicy = SweepPolicy()) -> JsonObject:
    """:func:`review_document` as JSON, the way ``POST /v1/changes/{id}/review`` answers it
    (:func:`controller.model.documents.answer_json`)."""
    return answer_json(review_document(inp, config_diff, observe_safety=observe_safety, reactions=reactions,
                                       sweep_policy=sweep_policy))


def _resets(inp: ReviewInputs) -> list[SessionReset]:
    """The BGP session ends the change tears down (:func:`southbound.config.bgp_session_resets`; none
    without an active revision: nothing runs yet). Sessions do not depend on the plan, so configs are
    built without."""
    if inp.active_intent is None:
        return []
    return bgp_session_resets(device_configs(inp.active_intent), device_configs(inp.intent))


def _job_times(inp: ReviewInputs) -> list[JobTimeDocument] | None:
    """Each job's predicted communication time under the active plan and the proposed one (none without jobs)."""
    if not inp.intent.jobs:
        return None
    before = job_times(inp.active_intent, inp.active_plan) if inp.active_intent and inp.active_plan else {}
    return job_time_rows(before, job_times(inp.intent, inp.plan))


def _moves(inp: ReviewInputs, resets: list[SessionReset], sched: ScheduleDocument) -> SessionMovesDocument | None:
    """The sessions the change moves over their links (``address`` resets), absent when none moves."""
    if inp.active_intent is None or not any(r.reason == "address" for r in resets):
        return None
    moves = session_moves(device_configs(inp.active_intent), device_configs(inp.intent))
    return SessionMovesDocument(count=len(moves), bridged=sched.intermediate_intent == "bridge",
                                sessions=[SessionMoveDocument.model_validate(m.to_document()) for m in moves])


def session_resets(inp: ReviewInputs, resets: list[SessionReset] | None = None) -> SessionResetsDocument:
    """``{"count": N, "sessions": [...]}``: the BGP session ends the change tears down."""
    resets = _resets(inp) if resets is None else resets
    return SessionResetsDocument(count=len(resets),
                                 sessions=[SessionResetDocument.model_validate(r.to_document()) for r in resets])


def transition_schedule(inp: ReviewInputs, config_diff: dict[str, str],
                        resets: list[SessionReset] | None = None) -> ScheduleDocument:
    """The schedule from the active plan to the proposed one; with no active revision, one stage of
    every device (nothing runs yet to be mixed with)."""
    if inp.active_intent is None or inp.active_plan is None:
        devices = sorted(set(config_diff) | {d.name for d in inp.intent.devices})
        return ScheduleDocument(
            stages=[ScheduleStage(devices=devices, worst_utilization=round(inp.plan.summary.max_utilization, 6))],
            intermediate_plans=0, safe=True, limit=limits(inp.intent)["baseline"],
            ownership=cast(Literal["advertised", "installed"], ownership(inp.intent)),
            checks=[ScheduleCheck(method="exact", states=1, plan=0)], failing=[], intermediate=[],
            intermediate_intent="proposed", reset_sessions=0, note=None)
    resets = _resets(inp) if resets is None else resets
    if any(r.reason == "address" for r in resets):
        bridged = _bridged_schedule(inp, config_diff, resets)
        if bridged is not None:
            return bridged
    ends = [(r.device, r.port) for r in resets]
    return ScheduleDocument.model_validate(schedule(inp.active_intent, inp.active_plan, inp.intent, inp.plan,
                                                    also=config_diff, resets=ends).to_document())


def _bridged_schedule(inp: ReviewInputs, config_diff: dict[str, str],
                      resets: list[SessionReset]) -> ScheduleDocument | None:
    """Make before break, for a change that moves BGP sessions to another transport over the same links
    (``address`` resets: an underlay change): first every device runs the bridge (the active plan with the
    proposed sessions beside the active ones: it moves no traffic, so every state of it is the active plan's),
    then the proposed plan as any change, its moved sessions up already (only the other resets count). None
    when the second leg would need intermediate plans of its own (the change then schedules as before)."""
    assert inp.active_intent is not None and inp.active_plan is not None
    active, plan = inp.active_intent, inp.active_plan
    bridging = sorted(set(config_diff) | {r.device for r in resets if r.reason == "address"})
    first = schedule(active, plan, active, plan, also=bridging)
    rest = [(r.device, r.port) for r in resets if r.reason != "address"]
    second = schedule(active, plan, inp.intent, inp.plan, also=bridging, resets=rest)
    if second.intermediate_plans:
        return None
    one, two = first.to_document(), second.to_document()
    doc = {**two, "stages": one["stages"] + two["stages"], "intermediate_plans": 1,
           "safe": first.safe and second.safe, "failing": one["failing"] + two["failing"],
           "checks": [{**c, "plan": 1} for c in one["checks"]] + two["checks"],
           "intermediate": [plan.to_document()], "intermediate_intent": "bridge",
           "note": f"{sum(r.reason == 'address' for r in resets)} BGP session end(s) move: the proposed sessions "
                   "come up beside the active ones first (stages of plan 1), then the active ones go"}
    return ScheduleDocument.model_validate(doc)


class _Row:
    def __init__(self, key: str, utilization: float):
        self.link_key, self.utilization = key, utilization


def _link_rows(plan: Plan) -> list[_Row]:
    return [_Row(min(f"{x.a}:{x.a_port}", f"{x.b}:{x.b_port}"), x.utilization) for x in plan.links]


def _configs(intent: Intent | None, plan: Plan | None) -> dict[str, str]:
    if intent is None:
        return {}
    return {d: render_frr(c) for d, c in device_configs(intent, plan).items()}


def local_config_diff(inp: ReviewInputs) -> dict[str, str]:
    """Per device, the unified diff of the active revision's FRR config to the proposed one's."""
    old, new = _configs(inp.active_intent, inp.active_plan), _configs(inp.intent, inp.plan)
    out: dict[str, str] = {}
    for d in sorted(set(old) | set(new)):
        a, b = old.get(d, ""), new.get(d, "")
        if a != b:
            out[d] = "\n".join(difflib.unified_diff(a.splitlines(), b.splitlines(), f"{d} (active)",
                                                    f"{d} (proposed)", lineterm="", n=1))
    return out


def expected_hashes(intent: Intent, plan: Plan) -> dict[str, str]:
    """The config hash each device's agent reports once it runs this intent and plan."""
    return {d: config_hash(c) for d, c in device_configs(intent, plan).items()}


def commit_stages(review: Doc | None, names: list[str]) -> tuple[list[list[str]], list[float | None]]:
    """The commit order of ``names`` from the review's schedule (DESIGN.md Transitions), and each
    stage's worst utilization where the schedule gives it; no schedule: one stage of every device."""
    sched = (review or {}).get("schedule")
    rows = sched.get("stages") if isinstance(sched, dict) else None
    if not isinstance(rows, list) or not rows:
        return commit_order(names), [None]
    named = [[str(d) for d in (r.get("devices") or [])] if isinstance(r, dict) else [] for r in rows]
    order = commit_order(names, named)
    worst: list[float | None] = []
    for stage in order:  # a stage of the order is (part of) the first schedule stage naming its devices
        src = next((r for r, devs in zip(rows, named, strict=True) if set(stage) & set(devs)), None)
        u = src.get("worst_utilization") if isinstance(src, dict) else None
        worst.append(float(u) if isinstance(u, int | float) else None)
    return order, worst


@dataclass(frozen=True)
class CommitLeg:
    """One transaction of a commit: the devices move to plan ``target`` (0: the proposed plan, ``j``: the
    schedule's ``j``-th intermediate plan) in ``stages``, each with the schedule's worst utilization."""

    target: int
    stages: list[list[str]]
    worst: list[float | None]


def leg_transaction(transaction: str, target: int) -> str:
    """The agents' change id of the leg to plan ``target``: the change's own transaction for the proposed
    plan, ``TRANSACTION.pJ`` for intermediate plan ``J``."""
    return transaction if target == 0 else f"{transaction}.p{target}"


def commit_legs(review: Doc | None, names: list[str]) -> list[CommitLeg]:
    """The transactions a commit runs, in order (DESIGN.md Transitions): one per intermediate plan of the
    review's schedule (its stages are those whose check names that plan), then the proposed plan's; a
    schedule without intermediate plans (or no schedule) is one leg, :func:`commit_stages`."""
    sched = (review or {}).get("schedule")
    k = int(sched.get("intermediate_plans") or 0) if isinstance(sched, dict) else 0
    if not k or not isinstance(sched, dict):
        return [CommitLeg(0, *commit_stages(review, names))]
    rows = [r for r in sched.get("stages") or [] if isinstance(r, dict)]
    checks = [c for c in sched.get("checks") or [] if isinstance(c, dict)]
    targets = [int(c.get("plan") or 0) for c in checks] if len(checks) == len(rows) else [0] * len(rows)
    legs = []
    for target in [*range(1, k + 1), 0]:
        mine = [r for r, t in zip(rows, targets, strict=True) if t == target]
        legs.append(CommitLeg(target, *commit_stages({"schedule": {"stages": mine}}, names)))
    return legs
