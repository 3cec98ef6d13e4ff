"""A revision's intent and plan: read from the store, solved outside it, kept for the next reader.

A plan is compiled once per revision and kept compressed in the store; a plan
around an overlay (failed parts, :mod:`controller.operations.overlay`) is kept in
the process's reaction table instead (:mod:`controller.operations.table`). The
store must not wait on a solver (a Clos XL solve takes up to 40 s), so getting a
plan is three steps, each a value handed to the next:

1. :func:`plan_source`, in a session: the revision's document and address pins,
   and the plan stored for it (or, around an overlay, the revision's identity);
2. :func:`solve`, with no session open: the intent validated with its pins, and
   the stored plan decoded or a new one compiled (:attr:`Solved.fresh`);
3. :func:`keep`, in a short write transaction of its own: a fresh plan stored.

The change engine runs them in that order (:meth:`controller.workflow.runtime.Runtime.plan`).
:func:`plan_for` runs all three in a session its caller owns, for callers that
hold one anyway (an API read, a test).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.addressing import Allocation, carry
from controller.model.documents import JsonObject
from controller.model.errors import NotFound
from controller.model.plan import Plan
from controller.operations.overlay import Overlay, overlay_intent
from controller.operations.table import TABLE, Reaction
from controller.planning import CompileOptions, compile_plan
from controller.store import repo
from controller.store import workflow_repo as wrepo
from controller.store.db import write_transaction
from controller.workflow.proposals import validated

__all__ = ["PlanSource", "Solved", "keep", "overlay_plan", "plan_document", "plan_for", "plan_source", "solve"]

Doc = dict[str, Any]


@dataclass(frozen=True)
class PlanSource:
    """What the store holds of ``revision``'s plan, all a solve needs: its document and address pins, the
    plan stored for it (None: not compiled yet, or planned around ``overlay``), and with an overlay the
    revision's identity (:func:`controller.store.repo.revision_identity`, the reaction table's key)."""

    revision: int
    document: Doc
    pins: Allocation
    stored: Doc | None
    identity: str | None
    overlay: Overlay


@dataclass(frozen=True)
class Solved:
    """A revision's intent (its pins carried) and plan; ``fresh``: compiled now, to be kept (:func:`keep`)."""

    intent: Intent
    plan: Plan
    fresh: bool = False


def plan_source(revision: int, *, session: Session, overlay: JsonObject | None = None) -> PlanSource:
    """Read what :func:`solve` needs of ``revision`` (around ``overlay``'s failed parts, when it names any)."""
    over = Overlay.of(overlay)
    document = repo.revision_document(revision, session=session)
    pins = repo.revision_pins(revision, session=session)
    if over:
        return PlanSource(revision, document, pins, None, repo.revision_identity(revision, session=session), over)
    return PlanSource(revision, document, pins, wrepo.get_plan(revision, session=session), None, over)


def solve(src: PlanSource, observe: Callable[[float], None] | None = None) -> Solved:
    """The intent of ``src`` and its plan: the stored one, the reaction table's around an overlay, else
    compiled now (``observe(seconds)`` told how long). Never touches the store."""
    intent = carry(validated(src.document), src.pins)
    if src.overlay:
        assert src.identity is not None
        return Solved(*overlay_plan(src.identity, intent, src.overlay))
    if src.stored is not None:
        return Solved(intent, Plan.from_document(src.stored))
    t0 = time.perf_counter()
    plan = compile_plan(intent)
    if observe is not None:
        observe(time.perf_counter() - t0)
    return Solved(intent, plan, fresh=True)


def keep(revision: int, plan: Plan, *, session: Session) -> None:
    """Store ``revision``'s freshly compiled plan (nothing when another process stored it meanwhile)."""
    with write_transaction(session):
        wrepo.put_plan(revision, plan.to_document(), session=session, now=datetime.now(UTC))


def plan_for(revision: int, *, session: Session, observe: Callable[[float], None] | None = None,
             overlay: JsonObject | None = None) -> tuple[Intent, Plan]:
    """The intent of ``revision`` and its plan (compiled once, then read back from the store), in the
    caller's ``session``. The intent carries the revision's address allocation pins, so that every config
    built from it numbers links and devices as the revision does (:mod:`controller.model.addressing`). With
    an ``overlay`` (failed parts, :mod:`controller.operations.overlay`), that intent without them and its
    plan (compiled once per process and overlay). The change engine does not call this: it closes its
    session before it solves (:meth:`controller.workflow.runtime.Runtime.plan`)."""
    got = solve(plan_source(revision, session=session, overlay=overlay), observe)
    if got.fresh:
        keep(revision, got.plan, session=session)
    return got.intent, got.plan


def overlay_plan(identity: str, intent: Intent, overlay: Overlay) -> tuple[Intent, Plan]:
    """``intent`` (that of the revision ``identity`` names: :func:`repo.revision_identity`) without
    ``overlay``'s parts, and its plan: from the reaction table when it was precomputed or solved before
    (a reaction, its drift checks and its review share one), else compiled now and kept there."""
    got = TABLE.get(identity, overlay)
    if got is None:
        t0 = time.perf_counter()
        reduced = overlay_intent(intent, overlay)  # InvalidIntent names a part the revision does not have
        plan = compile_plan(reduced, CompileOptions(warm_start=True))  # from the full plan's LP optimum
        got = Reaction(reduced, plan, seconds=time.perf_counter() - t0)
        TABLE.put(identity, overlay, got)
    return got.intent, got.plan


def plan_document(revision: int | str, *, session: Session | None = None,
                  sessions: Callable[[], Session] | None = None) -> JsonObject:
    """The plan document of ``revision`` (``active``: the active revision's), as the store keeps it: JSON
    (DESIGN.md contract 2) made by :meth:`Plan.to_document` when it was compiled. It is served as JSON
    and checked once, by the API's response model (a plan of 1 MB takes 0.2 s to validate: reading it
    into a :class:`~controller.model.documents.PlanDocument` here would double that).

    With ``sessions`` (a session factory, as the API has) a plan not compiled yet is read in one session,
    solved with none open and kept in a second one; with ``session`` all three run in the caller's."""
    if sessions is None:
        assert session is not None, "plan_document needs a session or a session factory"
        rev, overlay, doc, src = _plan_read(revision, session=session)
        if src is not None:
            doc = _plan_compiled(src, session=session)
    else:
        with sessions() as s:
            rev, overlay, doc, src = _plan_read(revision, session=s)
        if src is not None:
            got = solve(src)  # no session open: a Clos XL solve takes tens of seconds
            if got.fresh:
                with sessions() as s:
                    keep(rev, got.plan, session=s)
            doc = got.plan.to_document()
    assert doc is not None
    if revision == "active":  # the failed parts its plan leaves out (empty lists when none)
        doc = {**doc, "overlay": Overlay.of(overlay).to_document()}
    return doc


def _plan_read(revision: int | str, *, session: Session
               ) -> tuple[int, Doc | None, JsonObject | None, PlanSource | None]:
    """``revision``'s id, the active overlay (``active`` only), its stored plan document, and when there is
    none what :func:`solve` needs to compile it."""
    if revision == "active":
        rev = wrepo.active_revision(session=session)
        if rev is None:
            raise NotFound("no revision is active yet: commit a change first")
    else:
        rev = int(revision)
        repo.get_revision(rev, session=session)
    overlay = wrepo.active_overlay(session=session) if revision == "active" else None
    doc = wrepo.get_plan(rev, session=session) if not overlay else None
    src = plan_source(rev, session=session, overlay=overlay) if doc is None else None
    return rev, overlay, doc, src


def _plan_compiled(src: PlanSource, *, session: Session) -> JsonObject:
    got = solve(src)
    if got.fresh:
        keep(src.revision, got.plan, session=session)
    return got.plan.to_document()
