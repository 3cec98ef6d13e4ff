"""``/v1/changes``: create a change (JSON Patch or whole intent against a base revision), review it
(the dry run), commit it (in the background; 409 when unsafe without force, stale or busy), follow its
progress; ``/v1/revisions/{rev}/rollback`` makes a change back to an older revision; ``/v1/status``.
``Idempotency-Key`` is honoured on every POST. The routers call :mod:`controller.workflow` only."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from api.core.deps import OperatorWrite, PagingDep, SessionDep, Viewer, page_body
from api.core.guard import GuardedRoute, document_body
from api.core.problems import PROBLEM, error_responses, unsafe_change
from api.core.schemas_changes import (
    ChangeCreate,
    ChangeDocument,
    ChangePage,
    CommitRequest,
    ReviewDocument,
    RollbackRequest,
    Status,
)
from controller.model.documents import answer_json
from controller.model.errors import SafetyViolation
from controller.service import IdempotentWrite, Page, WriteContext, idempotency
from controller.workflow import changes
from controller.workflow.engine import Workflow

router = APIRouter(tags=["changes"], route_class=GuardedRoute)
ChangeId = Annotated[int, Path(ge=1, le=2**31 - 1, description="change id")]
RevisionId = Annotated[int, Path(ge=1, le=2**31 - 1, description="revision id")]
IdemKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=128,
                                       description="a retried POST with the same key gets the first answer")]


def workflow(request: Request) -> Workflow:
    """The app's change engine (made on first use when the app runs without its lifespan)."""
    wf: Workflow | None = getattr(request.app.state, "workflow", None)
    if wf is None or wf.db is not request.app.state.database:
        wf = Workflow(request.app.state.settings, request.app.state.database, driver=request.app.state.driver,
                      metrics=getattr(request.app.state, "metrics", None), telemetry=request.app.state.telemetry)
        request.app.state.workflow = wf
    return wf


def _db(request: Request, fn: Callable[[Any], Any]) -> Awaitable[Any]:
    def run() -> Any:
        with request.app.state.database.session() as session:
            return fn(session)
    return asyncio.to_thread(run)


async def keyed(request: Request, ctx: WriteContext, key: str | None) -> WriteContext:
    """``ctx`` carrying ``key``, bound to this request's path and body (:mod:`controller.service.idempotency`):
    the work's own transaction keeps the key with its answer where the workflow makes one (a change made,
    rolled back or committed), so a request replayed while the first was still running finds it there."""
    if not key:
        return ctx
    fingerprint = idempotency.request_hash(request.url.path, await request.body())
    return replace(ctx, idempotency=IdempotentWrite(key, fingerprint))


async def idempotent(request: Request, ctx: WriteContext, handler: Callable[[], Awaitable[tuple[int, Any]]]
                     ) -> JSONResponse:
    """Run ``handler`` once per ``ctx``'s ``Idempotency-Key`` (:func:`keyed`): a retry gets the stored answer
    (a key on another request is :class:`IdempotencyMismatch`, 422); an answer the work's transaction did
    not keep (a review's, a refused commit's) is kept after it."""
    if ctx.idempotency is not None:
        found = await _db(request, lambda s: idempotency.replay(ctx, session=s))
        if found is not None:
            return JSONResponse(found[1], status_code=found[0], headers={"Idempotent-Replayed": "true"})
    status, answer = await handler()
    if ctx.idempotency is not None:
        await _db(request, lambda s: idempotency.remember(ctx, status, answer, session=s))
    return JSONResponse(answer, status_code=status)


@router.post("/v1/changes", status_code=201, response_model=ChangeDocument, summary="Create a change (a draft)",
             responses=error_responses(401, 403, 404, 409, 422))
@document_body
async def create_change(request: Request, body: ChangeCreate, ctx: OperatorWrite,
                        key: IdemKey = None) -> JSONResponse:
    ctx = await keyed(request, ctx, key)

    async def run() -> tuple[int, Any]:
        ch = await _db(request, lambda s: changes.create_change(
            session=s, ctx=ctx, base_revision=body.base_revision, patch=body.patch, intent=body.intent,
            message=body.message))
        return 201, answer_json(changes.change_model(ch))
    return await idempotent(request, ctx, run)


@router.get("/v1/changes", response_model=ChangePage, response_model_exclude_unset=True,
            summary="List changes, newest first (each review brief: verdict, revisions, summary)",
            responses=error_responses(401, 403, 422))
def list_changes(request: Request, response: Response, session: SessionDep, _actor: Viewer, paging: PagingDep,
                 state: Annotated[str | None, Query(description="only changes in this state")] = None
                 ) -> dict[str, object]:
    items, total = changes.list_changes(session=session, limit=paging.limit, offset=paging.offset, state=state)
    page = Page(items, total, paging.limit, paging.offset)
    return page_body(request, response, page, [changes.change_model(c, full=False) for c in items])


@router.get("/v1/changes/{change_id}", response_model=ChangeDocument, response_model_exclude_unset=True,
            summary="One change, with progress",
            responses=error_responses(401, 403, 404, 422))
def get_change(session: SessionDep, _actor: Viewer, change_id: ChangeId) -> ChangeDocument:
    return changes.change_model(changes.get_change(change_id, session=session))


@router.post("/v1/changes/{change_id}/review", response_model=ReviewDocument,
             summary="Review (dry run): plan diff, config diff, safety report",
             responses=error_responses(400, 401, 403, 404, 409, 422))
async def review_change(request: Request, ctx: OperatorWrite, change_id: ChangeId,
                        key: IdemKey = None) -> JSONResponse:
    ctx = await keyed(request, ctx, key)

    async def run() -> tuple[int, Any]:
        return 200, answer_json(await workflow(request).review(change_id, ctx))
    return await idempotent(request, ctx, run)


@router.post("/v1/changes/{change_id}/commit", status_code=202, response_model=ChangeDocument,
             summary="Commit a reviewed change to the devices (runs in the background)",
             responses=error_responses(401, 403, 404, 409, 422))
async def commit_change(request: Request, ctx: OperatorWrite, change_id: ChangeId, body: CommitRequest | None = None,
                        key: IdemKey = None) -> JSONResponse:
    body = body or CommitRequest(force=False, reason=None)
    ctx = await keyed(request, ctx, key)

    async def run() -> tuple[int, Any]:
        try:
            ch = await workflow(request).commit(change_id, ctx, force=body.force, reason=body.reason)
        except SafetyViolation as exc:  # answered here, not by the handler, so a retry replays the refusal
            return unsafe_change(request, exc)
        return 202, answer_json(changes.change_model(ch))

    resp = await idempotent(request, ctx, run)
    if resp.status_code >= 400:
        resp.headers["content-type"] = PROBLEM
    return resp


@router.post("/v1/revisions/{revision}/rollback", status_code=201, response_model=ChangeDocument,
             summary="A change back to this revision's intent (then review and commit it)",
             responses=error_responses(401, 403, 404, 422))
async def rollback(request: Request, ctx: OperatorWrite, revision: RevisionId, body: RollbackRequest | None = None,
                   key: IdemKey = None) -> JSONResponse:
    message = body.message if body else ""
    ctx = await keyed(request, ctx, key)

    async def run() -> tuple[int, Any]:
        ch = await _db(request, lambda s: changes.create_rollback(revision, session=s, ctx=ctx, message=message))
        return 201, answer_json(changes.change_model(ch))
    return await idempotent(request, ctx, run)


@router.get("/v1/status", response_model=Status, summary="Head and active revisions, the committing change",
            responses=error_responses(401, 403))
def get_status(request: Request, session: SessionDep, _actor: Viewer) -> Status:
    st = changes.status(session=session)
    return Status(head_revision=st.head_revision, active_revision=st.active_revision,
                  committing_change=st.committing_change, devices=list(workflow(request).devices))
