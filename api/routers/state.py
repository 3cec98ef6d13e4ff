"""``/v1/state/links`` and ``/v1/state/devices``: the fabric as its switches report it;
``/v1/state/reactions``: the reaction table this replica precomputed (:mod:`controller.operations.table`);
``/v1/events``: the server-sent event stream (DESIGN.md, "Operational state and failure reaction").

The events are ``link.down``, ``link.up``, ``device.unreachable``, ``device.reachable``, ``change.state``,
``reaction.committed``, ``reaction.refused`` and ``auto_te.decision``, each as ``id``, ``event`` and JSON
``data``. A client resumes after the last event it saw with ``Last-Event-ID`` (any replica: the ids are the
store's); ``Last-Event-ID: 0`` replays every event kept; without it the stream starts with the next event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import StreamingResponse

from api.core.deps import Viewer
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.routers.changes import workflow
from controller.model.documents import (
    DeviceStatesDocument,
    LinkStatesDocument,
    OperationalStateDocument,
    ReactionTableDocument,
)
from controller.operations.service import state_document
from controller.operations.table import TABLE
from controller.store import events_repo, repo
from controller.store import workflow_repo as wrepo

router = APIRouter(tags=["operational state"], route_class=GuardedRoute)

POLL_S = 0.2
KEEPALIVE_S = 15.0


async def _state(request: Request) -> OperationalStateDocument:
    wf = workflow(request)

    def read() -> OperationalStateDocument:
        with request.app.state.database.session() as s:
            return state_document(wf, s)
    return await asyncio.to_thread(read)


@router.get("/v1/state/links", response_model=LinkStatesDocument, summary="Every link as its ends report it",
            responses=error_responses(401, 403, 422))
async def links(request: Request, _actor: Viewer) -> LinkStatesDocument:
    return LinkStatesDocument(links=(await _state(request)).links)


@router.get("/v1/state/devices", response_model=DeviceStatesDocument,
            summary="Every device's agent and BGP sessions, as the leader follows them",
            responses=error_responses(401, 403, 422))
async def devices(request: Request, _actor: Viewer) -> DeviceStatesDocument:
    return DeviceStatesDocument(devices=(await _state(request)).devices)


@router.get("/v1/state/reactions", response_model=ReactionTableDocument,
            summary="The reaction table: failures whose reaction plan is ready before they happen",
            responses=error_responses(401, 403, 422))
async def reactions(request: Request, _actor: Viewer) -> ReactionTableDocument:
    def read() -> tuple[str | None, int | None]:
        with request.app.state.database.session() as s:
            active = wrepo.active_revision(session=s)
            return (repo.revision_identity(active, session=s) if active is not None else None), active
    identity, active = await asyncio.to_thread(read)
    return TABLE.status(identity, active)


@router.get("/v1/events", response_class=StreamingResponse, summary="Server-sent events (resumable)",
            responses={200: {"content": {"text/event-stream": {}}}, **error_responses(401, 403, 422)})
async def events(request: Request, _actor: Viewer,
                 last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", description=(
                     "the id of the last event seen: the stream goes on after it (0: every event kept)"))] = None
                 ) -> StreamingResponse:
    db = request.app.state.database

    def read(after: int | None) -> list[events_repo.Event] | int:
        with db.session() as s:
            if after is None:
                return events_repo.last_event_id(session=s)
            return events_repo.events_after(after, session=s)

    start = int(last_event_id) if last_event_id is not None and last_event_id.strip().isdigit() else None

    async def stream() -> AsyncIterator[bytes]:
        got = await asyncio.to_thread(read, start)
        last = got if isinstance(got, int) else start or 0
        yield b"retry: 1000\n\n"
        quiet = 0.0
        while not request.app.state.stopping and not await request.is_disconnected():
            batch = await asyncio.to_thread(read, last)
            assert not isinstance(batch, int)
            for e in batch:
                data = json.dumps(e.data, separators=(",", ":"))
                yield f"id: {e.id}\nevent: {e.kind}\ndata: {data}\n\n".encode()
                last = e.id
            if batch:
                quiet = 0.0
                continue
            quiet += POLL_S
            if quiet >= KEEPALIVE_S:
                quiet = 0.0
                yield b": keep-alive\n\n"
            await asyncio.sleep(POLL_S)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
