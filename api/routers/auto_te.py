"""``/v1/auto-te``: the automatic re-tuning (DESIGN.md, Closed loop): its state and recent
decisions, and the kill switch (``POST /v1/auto-te/pause`` and ``/resume``, operators).

The switch lives in the store, so a pause survives a restart and holds for every
replica; the policy (``{kind: auto_te, enabled: ...}`` in the intent) is the other
off switch. Both calls are idempotent and audited.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from api.core.deps import OperatorWrite, Viewer
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.routers.changes import workflow
from controller.model.documents import AutoTeStatusDocument
from controller.service import WriteContext
from controller.workflow.autote import set_paused
from controller.workflow.engine import Workflow

router = APIRouter(prefix="/v1/auto-te", tags=["auto-te"], route_class=GuardedRoute)


class PauseBody(BaseModel):
    """Why (kept in the audit log and shown by ``GET /v1/auto-te``)."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=1000)


@router.get("", response_model=AutoTeStatusDocument, summary="Automatic re-tuning: state and recent decisions",
            responses=error_responses(401, 403))
async def status(request: Request, _actor: Viewer) -> AutoTeStatusDocument:
    wf: Workflow = workflow(request)

    def read() -> AutoTeStatusDocument:
        with request.app.state.database.session() as s:
            return wf.auto_te.status(s)
    return await asyncio.to_thread(read)


async def _switch(request: Request, ctx: WriteContext, paused: bool, body: PauseBody | None) -> AutoTeStatusDocument:
    wf: Workflow = workflow(request)

    def write() -> AutoTeStatusDocument:
        with request.app.state.database.session() as s:
            set_paused(paused, session=s, ctx=ctx, reason=body.reason if body else "")
            return wf.auto_te.status(s)
    return await asyncio.to_thread(write)


@router.post("/pause", response_model=AutoTeStatusDocument, summary="Stop automatic re-tuning (kill switch)",
             responses=error_responses(401, 403, 422))
async def pause(request: Request, ctx: OperatorWrite, body: PauseBody | None = None) -> AutoTeStatusDocument:
    return await _switch(request, ctx, True, body)


@router.post("/resume", response_model=AutoTeStatusDocument, summary="Let automatic re-tuning run again",
             responses=error_responses(401, 403, 422))
async def resume(request: Request, ctx: OperatorWrite, body: PauseBody | None = None) -> AutoTeStatusDocument:
    return await _switch(request, ctx, False, body)
