"""The shell around :mod:`controller.telemetry`: the active revision's intent and
plan for the views, and a measured demand matrix written into the intent.

:func:`active_context` reads the active revision (cached per revision on the
:class:`~controller.telemetry.Telemetry`, so a view does not parse the plan on
every request; :func:`cached_context` is that cache); :func:`active_intent` reads only its intent (no plan compiled
or stored: what ``/metrics`` and the link view need); :func:`capture_demands` replaces the intent's demands with the
measured matrix times a headroom factor in one revision, through the service's
single write path (If-Match, whole-document validation, audit entry recording
the window, statistic and headroom), and :func:`capture_document` says what it wrote.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from controller import service
from controller.model import Intent
from controller.model.documents import DemandCaptureDocument, MeasuredDemandDocument
from controller.model.errors import Conflict, NotFound
from controller.model.intent import validate_intent
from controller.model.plan import Plan
from controller.service import WriteContext, WriteResult
from controller.telemetry import Telemetry
from controller.telemetry.collector import Method, Stat
from controller.workflow import changes, plans

__all__ = ["active_context", "active_intent", "cached_context", "capture_demands", "capture_document"]


def cached_context(telemetry: Telemetry, rev: int) -> tuple[int, Intent, Plan] | None:
    """The active revision ``rev``'s intent and plan as ``telemetry`` caches them, or None."""
    cached = telemetry.context
    return cached if cached is not None and cached[0] == rev else None


def active_context(telemetry: Telemetry, *, sessions: Callable[[], Session]) -> tuple[int, Intent, Plan]:
    """The active revision, its intent and its plan (:class:`NotFound` before the first commit), cached per
    revision; read in a session of ``sessions`` (a session factory) that is closed before a plan not kept
    yet is compiled, and kept in a second one (:mod:`controller.workflow.plans`)."""
    with sessions() as session:
        rev = changes.active_revision(session=session)
        if rev is None:
            raise NotFound("no revision is active yet: commit a change first")
        cached = cached_context(telemetry, rev)
        if cached is not None:
            return cached
        src = plans.plan_source(rev, session=session)
    got = plans.solve(src)
    if got.fresh:
        with sessions() as session:
            plans.keep(rev, got.plan, session=session)
    telemetry.context = (rev, got.intent, got.plan)
    return telemetry.context


def active_intent(telemetry: Telemetry, *, session: Session) -> Intent:
    """The active revision's intent only: never compiles or stores a plan (for ``/metrics`` and the link view)."""
    rev = changes.active_revision(session=session)
    if rev is None:
        raise NotFound("no revision is active yet: commit a change first")
    cached = cached_context(telemetry, rev)
    if cached is not None:
        return cached[1]
    _rev, doc = service.get_intent(session=session, revision=rev)
    return validate_intent(doc)


def capture_demands(demands: Mapping[tuple[str, str], float], *, headroom: float, window_s: float, stat: Stat,
                    method: Method, session: Session, ctx: WriteContext) -> WriteResult:
    """Replace the head intent's demands with ``demands`` x ``headroom`` in one revision.

    Raises :class:`Conflict` for an empty matrix (nothing measured yet: the
    intent's demands are kept), and what :func:`service.apply_edit` raises.
    """
    if not demands:
        raise Conflict("no demand measured in the window: the intent's demands are kept")
    rows = [{"from": f, "to": p, "gbps": round(g * headroom, 6)} for (f, p), g in sorted(demands.items())]

    def edit(base: dict[str, Any] | None) -> dict[str, Any]:
        if base is None:
            raise NotFound("the store holds no intent yet: PUT /v1/intent first")
        doc = copy.deepcopy(base)
        doc["demands"] = rows
        return doc

    message = (f"demands from telemetry: window_s={window_s:g} stat={stat} headroom={headroom:g} method={method} "
               f"({len(rows)} demands)")
    ctx = replace(ctx, message=ctx.message or message)
    return service.apply_edit(edit, session=session, ctx=ctx, action="demands.from_telemetry")


def capture_document(result: WriteResult, *, window_s: float, stat: Stat, headroom: float,
                     method: Method) -> DemandCaptureDocument:
    """``POST /v1/demands/from-telemetry``'s answer: the revision :func:`capture_demands` wrote (or found
    written) and the demands it holds."""
    rows = result.document.get("demands") or []
    assert isinstance(rows, list), "an intent's demands are a list"
    return DemandCaptureDocument(revision=result.revision.id, changed=result.changed, window_s=window_s, stat=stat,
                                 headroom=headroom, method=method,
                                 demands=[MeasuredDemandDocument.model_validate(r) for r in rows])
