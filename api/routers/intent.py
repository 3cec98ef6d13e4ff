"""``/v1/intent``: the whole intent document of the head revision.

``GET`` exports it (JSON, or YAML with ``Accept: application/yaml``) with the
head's ``ETag`` (304 to an ``If-None-Match`` naming it; the bytes are made once
per revision); ``PUT`` replaces it (JSON, or YAML with ``Content-Type:
application/yaml``), honouring ``If-Match`` and ``Idempotency-Key``. A document equal to the head
stores no revision and answers 200 with the head; an invalid one answers 422
with every error's location and stores nothing. The body is bounded by
``LOOM_MAX_DOCUMENT_BODY_BYTES`` and read strictly as UTF-8 within the
document bounds (:mod:`controller.model.text`); anything else stores nothing.
"""

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from starlette.concurrency import run_in_threadpool

from api.core import fastread
from api.core.deps import IntentWrite, Viewer, fingerprinted, replay_headers
from api.core.fastread import YAML_TYPES, wants_yaml
from api.core.guard import GuardedRoute, document_body
from api.core.problems import error_responses
from controller import service
from controller.model import Intent
from controller.model.intent import parse_intent_text
from controller.store.snapshot import Snapshot

__all__ = ["YAML_TYPES", "body_format", "revision_response", "router", "wants_yaml"]

router = APIRouter(prefix="/v1/intent", tags=["intent"], route_class=GuardedRoute)

_INTENT_REF = {"$ref": "#/components/schemas/Intent"}
_CONTENT = {"application/json": {"schema": _INTENT_REF}, "application/yaml": {"schema": {"type": "string"}}}


async def revision_response(request: Request, read: Callable[[], tuple[int, Snapshot]],
                            accept: str | None, head: tuple[int, Snapshot] | None = None) -> Response:
    """A revision's intent, or 304 when ``If-None-Match`` names its ETag: ``head`` when given
    and its bytes are made already, else ``read`` in a worker thread (it reads the store, and
    the first request for a revision makes its bytes there)."""
    yaml_wanted = wants_yaml(accept)
    made = fastread.made_body(head[1], yaml_wanted) if head is not None else None
    if head is not None and made is not None:
        rev, (body, media_type) = head[0], made
    else:
        def load() -> tuple[int, bytes, str]:
            rev, snap = head if head is not None else read()
            return (rev, *fastread.snapshot_body(snap, yaml_wanted))

        rev, body, media_type = await run_in_threadpool(load)
    tag = fastread.etag(rev)
    if fastread.unchanged(request.headers.get("if-none-match"), tag):
        return fastread.not_modified(tag, vary="Accept")
    return Response(body, media_type=media_type, headers={"ETag": tag, "Vary": "Accept"})


def body_format(request: Request) -> str:
    """``yaml`` for a YAML ``Content-Type``, else ``json``."""
    ctype = (request.headers.get("content-type") or "application/json").split(";")[0].strip().lower()
    return "yaml" if ctype in YAML_TYPES else "json"


@router.get("", response_model=Intent, summary="Export the intent of the head revision",
            responses={200: {"content": _CONTENT}, **error_responses(401, 403, 404)})
async def get_intent(request: Request, _actor: Viewer,
                     accept: Annotated[str | None, Header(include_in_schema=False)] = None) -> Response:
    database = request.app.state.database

    hit = service.cached_head(database, max_age=request.app.state.settings.read_cache_s)
    return await revision_response(request, lambda: service.read_intent(database), accept, head=hit)


@router.put("", response_model=Intent, summary="Replace the whole intent (JSON or YAML)",
            responses={200: {"content": _CONTENT}, **error_responses(401, 403, 409, 422)},
            openapi_extra={"requestBody": {"required": True, "content": _CONTENT}})
@document_body
async def put_intent(request: Request, ctx: IntentWrite) -> Response:
    raw = await request.body()  # bounded by the route guard
    fmt = body_format(request)
    ctx = fingerprinted(ctx, fmt.encode() + b"\0" + raw)
    database = request.app.state.database
    limits = request.app.state.settings.text_limits()

    yaml_wanted = wants_yaml(request.headers.get("accept"))

    def write() -> tuple[service.WriteResult, bytes, str]:
        with database.session() as session:
            result = service.apply_edit(
                lambda _head: parse_intent_text(raw, fmt, allow_aliases=False, limits=limits, what="the body"),
                session=session, ctx=ctx, action="intent.replace")
        return (result, *fastread.snapshot_body(result.snapshot, yaml_wanted))

    result, body, media_type = await run_in_threadpool(write)
    return Response(body, media_type=media_type, headers={"ETag": fastread.etag(result.revision.id), "Vary": "Accept",
                                                         **replay_headers(result)})
