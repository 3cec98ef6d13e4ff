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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.documents import FailureDocument, JobWhatIfDocument
from controller.model.errors import NotFound
from controller.model.intent import validate_intent, validate_job, with_job
from controller.planning import compile_plan
from controller.store import repo
from controller.store import workflow_repo as wrepo
from safety.replay import replay

__all__ = ["base_revision", "what_if", "what_if_stored"]


def what_if(intent: Intent, job: Any) -> JobWhatIfDocument:
    """The planned maximum utilization, the safety verdict and the failing invariants of ``intent``
    with ``job`` added.

    Raises :class:`~controller.model.errors.InvalidIntent` (errors located under ``job``) when the
    job is malformed or names devices the intent lacks, and
    :class:`~controller.model.errors.Infeasible` when its demand cannot be routed.
    """
    candidate = with_job(intent, validate_job(job, intent))
    plan = compile_plan(candidate)
    report = replay(candidate, plan)
    return JobWhatIfDocument(
        max_utilization=plan.summary.max_utilization, verdict="safe" if report.verdict == "safe" else "unsafe",
        failing=[FailureDocument(scenario=f.scenario, stage=f.stage, invariant=f.invariant, detail=f.detail)
                 for f in report.failing])


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
