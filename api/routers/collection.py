"""CRUD routes for one intent collection (devices, links, failure domains,
prefixes, policies, demands), built once per resource by :func:`collection_router`.

``GET /v1/<name>`` lists with filters and ``?limit=&offset=`` paging,
``POST`` creates, ``GET/PATCH/DELETE /v1/<name>/{id}`` read, update and delete
one object. Every write makes sure the whole resulting intent is valid (422
with the locations in that document), honours ``If-Match`` (409 when stale) and
answers with the new revision's ``ETag``. Reads answer bytes made once per
object (:mod:`api.core.fastread`) with the head's ``ETag``, and 304 to an
``If-None-Match`` that names it. A write with ``Idempotency-Key`` is stored
with its key in one transaction, so a retry gets the first answer again. The
routes call :mod:`controller.service`; no SQL here.
"""

# No ``from __future__ import annotations``: FastAPI reads these signatures at runtime.

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Body, Depends, Path, Request, Response
from starlette.concurrency import run_in_threadpool

from api.core import fastread
from api.core.deps import (
    IntentWrite,
    Paging,
    PagingDep,
    SessionDep,
    Viewer,
    fingerprinted,
    replay_headers,
    set_etag,
    with_status,
)
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.core.schemas import SCHEMAS, Page
from controller import service
from controller.store import objects

__all__ = ["collection_router"]

Filters = dict[str, str | None]


def collection_router(name: str, filters: Callable[..., Awaitable[Filters]], *, id_help: str) -> APIRouter:
    """The router of collection ``name`` (``devices``...); ``filters`` is a
    dependency (a coroutine: it needs no worker thread) returning the list filters from the query string."""
    schemas = SCHEMAS[name]
    coll = objects.collection(name)
    what = coll.kind.replace("_", " ")
    router = APIRouter(prefix=f"/v1/{name}", tags=[name], route_class=GuardedRoute)
    FiltersDep = Annotated[Filters, Depends(filters)]
    ObjectId = Annotated[str, Path(description=id_help, min_length=1, max_length=300)]
    CreateBody = Annotated[schemas.create, Body()]  # type: ignore[name-defined]
    UpdateBody = Annotated[schemas.update, Body()]  # type: ignore[name-defined]

    item = "/{object_id:path}" if coll.key in ("prefixes", "demands") else "/{object_id}"

    @router.get("", response_model=Page[schemas.public],  # type: ignore[name-defined]
                name=f"list_{name.replace('-', '_')}", summary=f"List {name}",
                responses=error_responses(401, 403, 422))
    async def list_objects(request: Request, _actor: Viewer, paging: PagingDep, where: FiltersDep) -> Response:
        return await _listing(request, name, paging, where)

    @router.post("", status_code=201, response_model=schemas.public,
                 name=f"create_{coll.kind}", summary=f"Create a {what}",
                 responses=error_responses(401, 403, 409, 422))
    def create_object(request: Request, response: Response, session: SessionDep, ctx: IntentWrite,
                      body: CreateBody) -> Any:
        element = body.model_dump(mode="json", by_alias=True, exclude_none=True)
        obj, result = service.create_object(name, element, session=session,
                                            ctx=with_status(fingerprinted(ctx, _canonical(element)), 201))
        set_etag(response, result.revision)
        response.headers["Location"] = _location(request, coll.kind, str(obj["id"]))
        response.headers.update(replay_headers(result))
        return obj

    @router.get(item, response_model=schemas.public,
                name=f"get_{coll.kind}", summary=f"Read a {what}", responses=error_responses(401, 403, 404, 422))
    async def get_object(request: Request, _actor: Viewer, object_id: ObjectId) -> Response:
        head = await fastread.head(request)
        assert head is not None
        el, rev = service.element_of(name, object_id, head)
        tag = fastread.etag(rev)
        if fastread.unchanged(request.headers.get("if-none-match"), tag):
            return fastread.not_modified(tag)
        return Response(fastread.public_bytes(name, el), media_type=fastread.JSON, headers={"ETag": tag})

    @router.patch(item, response_model=schemas.public,
                  name=f"update_{coll.kind}", summary=f"Change fields of a {what} (null clears a field)",
                  responses=error_responses(401, 403, 404, 409, 422))
    def update_object(response: Response, session: SessionDep, ctx: IntentWrite, object_id: ObjectId,
                      body: UpdateBody) -> Any:
        patch = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
        obj, result = service.update_object(name, object_id, patch, session=session,
                                            ctx=fingerprinted(ctx, _canonical(patch)))
        set_etag(response, result.revision)
        response.headers.update(replay_headers(result))
        return obj

    @router.delete(item, status_code=204, name=f"delete_{coll.kind}", summary=f"Delete a {what}",
                   responses=error_responses(401, 403, 404, 409, 422))
    def delete_object(session: SessionDep, ctx: IntentWrite, object_id: ObjectId) -> Response:
        result = service.delete_object(name, object_id, session=session,
                                       ctx=with_status(fingerprinted(ctx, b""), 204))
        return Response(status_code=204, headers={"ETag": f'"{result.revision.id}"', **replay_headers(result)})

    return router


def _canonical(doc: Any) -> bytes:
    """The body an ``Idempotency-Key`` is bound to, as the route read it."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _location(request: Request, kind: str, ident: str) -> str:
    """The URL of object ``ident`` of ``kind`` (a new object's ``Location``)."""
    return str(request.url_for(f"get_{kind}", object_id=quote(ident, safe=":,")))


async def _listing(request: Request, name: str, paging: Paging, where: Filters) -> Response:
    """A page of collection ``name`` in the head, filtered by ``where``: the bytes made once per object, the
    head's ``ETag`` (304 to an ``If-None-Match`` naming it), ``X-Total-Count`` and a ``Link`` to the next page."""
    head = await fastread.head(request, required=False)
    if head is None:
        page = service.Listing([], 0, paging.limit, paging.offset, None)
    elif any(v is not None for v in where.values()):  # a scan of the section: not on the event loop
        page = await run_in_threadpool(service.page_of, name, head, filters=where, limit=paging.limit,
                                       offset=paging.offset)
    else:
        page = service.page_of(name, head, filters=where, limit=paging.limit, offset=paging.offset)
    headers = {"X-Total-Count": str(page.total)}
    if page.revision is not None:
        headers["ETag"] = tag = fastread.etag(page.revision)
        if fastread.unchanged(request.headers.get("if-none-match"), tag):
            return fastread.not_modified(tag)
    nxt = None
    if page.offset + page.limit < page.total:
        nxt = str(request.url.include_query_params(offset=page.offset + page.limit, limit=page.limit))
        headers["Link"] = f'<{nxt}>; rel="next"'
    body = fastread.page_bytes(name, page.items, total=page.total, limit=page.limit, offset=page.offset,
                               next_url=nxt)
    return Response(body, media_type=fastread.JSON, headers=headers)
