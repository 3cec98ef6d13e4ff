"""``/v1/plans/{revision}``: a revision's compiled plan (DESIGN contract 2), stored compressed;
``/v1/plans/active`` is the active revision's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from api.core.deps import Viewer, get_database
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from controller.model.documents import JsonObject, PlanDocument
from controller.store.db import Database
from controller.workflow import changes

#: the store (a plan not compiled yet is solved between two of its sessions, none held open through it)
DatabaseDep = Annotated[Database, Depends(get_database)]

router = APIRouter(prefix="/v1/plans", tags=["plans"], route_class=GuardedRoute)


@router.get("/active", response_model=PlanDocument, response_model_exclude_unset=True,
            summary="The active revision's plan", responses=error_responses(401, 403, 404))
def active_plan(database: DatabaseDep, _actor: Viewer) -> JsonObject:
    return changes.plan_document("active", sessions=database.session)


@router.get("/{revision}", response_model=PlanDocument, response_model_exclude_unset=True,
            summary="A revision's plan (compiled on first request)",
            responses=error_responses(401, 403, 404, 422))
def get_plan(database: DatabaseDep, _actor: Viewer,
             revision: Annotated[int, Path(ge=1, le=2**31 - 1, description="revision id")]) -> JsonObject:
    return changes.plan_document(revision, sessions=database.session)
