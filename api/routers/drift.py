"""``/v1/drift``: the last comparison of every device with the active revision (``?refresh=true``
checks now); ``POST /v1/drift/repair`` pushes the active revision again."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from api.core.deps import OperatorWrite, SessionDep, Viewer
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.core.schemas_changes import DriftReport
from api.routers.changes import workflow
from controller.store import workflow_repo
from controller.workflow.engine import Workflow

router = APIRouter(prefix="/v1/drift", tags=["drift"], route_class=GuardedRoute)


@router.get("", response_model=DriftReport, summary="Drift of the devices from the active revision",
            responses=error_responses(401, 403, 422))
async def get_drift(request: Request, _actor: Viewer,
                    refresh: Annotated[bool, Query(description="check the devices now")] = False) -> Any:
    wf: Workflow = workflow(request)
    if refresh:
        return await wf.check_drift(repair=False)

    def read() -> Any:
        with request.app.state.database.session() as s:
            return workflow_repo.latest_drift(session=s)
    last = await asyncio.to_thread(read)
    return last or await wf.check_drift(repair=False)


@router.post("/repair", status_code=202, summary="Push the active revision again (a repair change)",
             responses=error_responses(401, 403, 404, 409))
async def repair(request: Request, ctx: OperatorWrite, _session: SessionDep) -> Any:
    wf: Workflow = workflow(request)
    return (await wf.repair(None, ctx)).to_json()
