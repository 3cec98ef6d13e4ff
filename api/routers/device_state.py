"""``/v1/devices/{name}/state``: what the device's agent reports now (kernel routes with weights, BGP
sessions, running config hash, a pending change); 503 when the agent does not answer
(:class:`~controller.model.errors.Unreachable`, mapped in :mod:`api.core.problems`)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.core.deps import Viewer
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.routers.changes import workflow
from controller.model.documents import DeviceStateDocument
from controller.workflow.engine import Workflow

router = APIRouter(prefix="/v1/devices", tags=["device state"], route_class=GuardedRoute)


@router.get("/{name}/state", response_model=DeviceStateDocument, response_model_exclude_unset=True,
            summary="What the switch really installed", responses=error_responses(401, 403, 404, 503))
async def device_state(request: Request, name: str, _actor: Viewer) -> DeviceStateDocument:
    wf: Workflow = workflow(request)
    return await wf.device_state(name)  # Unreachable: 503 (api.core.problems)
