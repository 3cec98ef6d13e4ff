"""What-if for ML jobs: plan and check the fabric with one more job, writing nothing.

:func:`what_if` is pure: given an intent and a candidate job (as the intent
document spells one), it adds the job (in place of a declared job of the same
name: a what-if of a job already declared tries a new placement), compiles the
plan with :func:`controller.planning.compile_plan` (the jobs become demand
through :attr:`controller.model.Intent.effective_demands`, as in every plan)
and replays it with :func:`safety.replay.replay` in the scope a change's review
uses (the intent's ``failure_tolerance`` policy). :func:`what_if_stored` runs
it against the active revision's intent (the head's when none is active); it
only reads the store. This answers ``POST /v1/jobs/what-if`` (DESIGN.md,
Closed loop).

:func:`placement` answers ``POST /v1/jobs/placement`` (DESIGN.md, ML workloads):
the candidate placements of a new job are ranked under the active plan by
:func:`controller.telemetry.placement.rank` (its docstring says what is exact and
what heuristic), and the best ``top`` are each planned and replayed as a what-if,
with the job's communication time and the others' slowdown predicted again on the
plan compiled with it; safe placements first, then by the objective.
:func:`placement_stored` runs it against the active revision and its plan (the
head's, compiled and not kept, when none is active), reading the store in a
session closed before any search, plan or replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from controller.model import Intent, Job
from controller.model.documents import (
    FailureDocument,
    JobPlacementDocument,
    JobPlacementsDocument,
    JobWhatIfDocument,
    PlacementSearchFigures,
)
from controller.model.errors import Infeasible, NotFound
from controller.model.intent import validate_intent, validate_job, with_job
from controller.model.placement import PlacementRequest, validate_placement
from controller.model.plan import Plan
from controller.planning import compile_plan
from controller.store import repo
from controller.store import workflow_repo as wrepo
from controller.telemetry.placement import PlacementOptions, Scored, objective_key, on_plan, rank
from controller.workflow import plans
from safety.replay import replay

__all__ = ["base_revision", "placement", "placement_stored", "what_if", "what_if_stored"]


def _planned(intent: Intent, job: Job) -> tuple[Intent, Plan, JobWhatIfDocument]:
    """``intent`` with the checked ``job`` added, its plan, and the what-if answer (plan and replay)."""
    candidate = with_job(intent, job)
    plan = compile_plan(candidate)
    report = replay(candidate, plan)
    return candidate, plan, JobWhatIfDocument(
        max_utilization=plan.summary.max_utilization, verdict="safe" if report.verdict == "safe" else "unsafe",
        failing=[FailureDocument(scenario=f.scenario, stage=f.stage, invariant=f.invariant, detail=f.detail)
                 for f in report.failing])


def what_if(intent: Intent, job: Any) -> JobWhatIfDocument:
    """The planned maximum utilization, the safety verdict and the failing invariants of ``intent``
    with ``job`` added.

    Raises :class:`~controller.model.errors.InvalidIntent` (errors located under ``job``) when the
    job is malformed or names devices the intent lacks, and
    :class:`~controller.model.errors.Infeasible` when its demand cannot be routed.
    """
    return _planned(intent, validate_job(job, intent))[2]


def base_revision(*, session: Session) -> repo.Revision:
    """The revision a what-if builds on: the active one, else the head; :class:`NotFound` when the
    store holds no intent."""
    active = wrepo.active_revision(session=session)
    if active is not None:
        return repo.get_revision(active, session=session)
    head = repo.head_revision(session=session)
    if head is None:
        raise NotFound("the store holds no intent yet: PUT /v1/intent (or loom serve --example)")
    return head


def what_if_stored(job: Any, *, sessions: Callable[[], Session]) -> tuple[repo.Revision, JobWhatIfDocument]:
    """:func:`what_if` against :func:`base_revision`'s intent; returns that revision and the answer. The
    revision is read in a session of ``sessions`` (a session factory) closed before the plan and the
    replay run."""
    with sessions() as session:
        rev = base_revision(session=session)
        document = repo.revision_document(rev.id, session=session)
    return rev, what_if(validate_intent(document), job)


def _placed(intent: Intent, request: PlacementRequest, scored: Scored, base_s: dict[str, float]
            ) -> tuple[tuple[Any, ...], JobPlacementDocument]:
    """One ranked placement planned and replayed: its sort key (safe first, then the objective on the new
    plan, then the names) and its document. Raises :class:`Infeasible` when the planner cannot route it."""
    job = request.job.model_copy(update={"tors": scored.tors})
    candidate, plan, answer = _planned(intent, job)
    e = on_plan(candidate, plan, job, base_s)
    doc = JobPlacementDocument(
        tors=list(scored.tors), comm_s=_r(e.comm_s), comm_s_idle=_r(e.comm_s_idle),
        max_slowdown_others=None if e.max_slowdown_others is None else _r(e.max_slowdown_others),
        slowest_other=e.slowest_other, max_utilization=answer.max_utilization, verdict=answer.verdict,
        failing=answer.failing,
        search=PlacementSearchFigures(comm_s=_r(scored.evaluation.comm_s), max_slowdown_others=(
            None if scored.evaluation.max_slowdown_others is None else _r(scored.evaluation.max_slowdown_others))))
    return (answer.verdict != "safe", objective_key(e, request.objective), scored.tors), doc


def _r(x: float) -> float:
    return round(float(x), 9)


def placement(intent: Intent, plan: Plan, request: PlacementRequest,
              options: PlacementOptions | None = None) -> JobPlacementsDocument:
    """The best ``request.top`` placements of ``request.job`` over its candidates, ``plan`` being ``intent``'s
    active plan (see the module docstring). A ranked placement the planner cannot route is skipped (listed in
    ``infeasible``) and the next one taken. Writes nothing."""
    t0 = time.perf_counter()
    ranking = rank(intent, plan, request.job, request.candidates, objective=request.objective, options=options,
                   limit=3 * request.top)
    search_s = time.perf_counter() - t0
    answers: list[tuple[tuple[Any, ...], JobPlacementDocument]] = []
    infeasible: list[list[str]] = []
    for scored in ranking.placements:
        if len(answers) == request.top:
            break
        try:
            answers.append(_placed(intent, request, scored, ranking.base_s))
        except Infeasible:
            infeasible.append(list(scored.tors))
    answers.sort(key=lambda a: a[0])
    return JobPlacementsDocument(
        job=request.job.name, members=request.members, objective=request.objective,
        search=ranking.search,
        candidates=len(request.candidates), evaluated=ranking.evaluated, search_s=round(search_s, 6),
        infeasible=infeasible, placements=[doc for _key, doc in answers])


def placement_stored(body: Any, *, sessions: Callable[[], Session]) -> tuple[repo.Revision, JobPlacementsDocument]:
    """:func:`placement` of the request ``body`` (checked by :func:`validate_placement`, errors located in it)
    against :func:`base_revision` and its plan; returns that revision and the answer. The store is read in a
    session of ``sessions`` closed before the search, the plans and the replays; nothing is written (a plan
    compiled for a revision not active yet is not kept)."""
    with sessions() as session:
        rev = base_revision(session=session)
        src = plans.plan_source(rev.id, session=session)
    solved = plans.solve(src)
    return rev, placement(solved.intent, solved.plan, validate_placement(body, solved.intent))
