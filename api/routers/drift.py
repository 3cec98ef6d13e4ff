"""``/v1/drift``: the last comparison of every device with the active revision (``?refresh=true``
checks now); ``POST /v1/drift/repair`` pushes the active revision again."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Request

from api.core.deps import OperatorWrite, SessionDep, Viewer
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.routers.changes import workflow
from controller.model.documents import DriftReportDocument, RepairDocument
from controller.store import workflow_repo
from controller.workflow.engine import Workflow

router = APIRouter(prefix="/v1/drift", tags=["drift"], route_class=GuardedRoute)


@router.get("", response_model=DriftReportDocument, summary="Drift of the devices from the active revision",
            responses=error_responses(401, 403, 422))
async def get_drift(request: Request, _actor: Viewer, refresh: Annotated[
        bool, Query(description="check the devices now")] = False) -> DriftReportDocument:
    wf: Workflow = workflow(request)
    if refresh:
        return await wf.check_drift(repair=False)

    def read() -> DriftReportDocument | None:
        with request.app.state.database.session() as s:
            last = workflow_repo.latest_drift(session=s)
        return None if last is None else DriftReportDocument.model_validate(last)
    return await asyncio.to_thread(read) or await wf.check_drift(repair=False)


@router.post("/repair", status_code=202, response_model=RepairDocument,
             summary="Push the active revision again (a repair change)", responses=error_responses(401, 403, 404, 409))
async def repair(request: Request, ctx: OperatorWrite, _session: SessionDep) -> RepairDocument:
    wf: Workflow = workflow(request)
    return await wf.repair(None, ctx)
