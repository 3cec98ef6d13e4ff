"""``/v1/intent``: the whole intent document of the head revision.

``GET`` exports it (JSON, or YAML with ``Accept: application/yaml``) with the
head's ``ETag``; ``PUT`` replaces it (JSON, or YAML with ``Content-Type:
application/yaml``), honouring ``If-Match``. A document equal to the head
stores no revision and answers 200 with the head; an invalid one answers 422
with every error's location and stores nothing. The body is bounded by
``LOOM_MAX_DOCUMENT_BODY_BYTES`` and read strictly as UTF-8 within the
document bounds (:mod:`controller.model.text`); anything else stores nothing.
"""

from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.core.deps import OperatorWrite, SessionDep, Viewer
from api.core.guard import GuardedRoute, document_body
from api.core.problems import error_responses
from controller import service
from controller.model import Intent
from controller.model.intent import parse_intent_text

router = APIRouter(prefix="/v1/intent", tags=["intent"], route_class=GuardedRoute)

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
_INTENT_REF = {"$ref": "#/components/schemas/Intent"}
_CONTENT = {"application/json": {"schema": _INTENT_REF}, "application/yaml": {"schema": {"type": "string"}}}


def body_format(request: Request) -> str:
    """``yaml`` for a YAML ``Content-Type``, else ``json``."""
    ctype = (request.headers.get("content-type") or "application/json").split(";")[0].strip().lower()
    return "yaml" if ctype in YAML_TYPES else "json"


def wants_yaml(accept: str | None) -> bool:
    """True when the Accept header prefers YAML over JSON."""
    if not accept:
        return False
    best: tuple[float, str] = (-1.0, "")
    for part in accept.split(","):
        media, _, params = part.strip().partition(";")
        q = 1.0
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        media = media.strip().lower()
        if media in YAML_TYPES or media == "application/json":
            if q > best[0]:
                best = (q, media)
    return best[1] in YAML_TYPES


def document_response(doc: dict[str, Any], revision: int, accept: str | None, status: int = 200) -> Response:
    headers = {"ETag": f'"{revision}"', "Vary": "Accept"}
    if wants_yaml(accept):
        text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)
        return Response(text, status_code=status, media_type="application/yaml", headers=headers)
    return JSONResponse(doc, status_code=status, headers=headers)


@router.get("", response_model=Intent, summary="Export the intent of the head revision",
            responses={200: {"content": _CONTENT}, **error_responses(401, 403, 404)})
def get_intent(session: SessionDep, _actor: Viewer,
               accept: Annotated[str | None, Header(include_in_schema=False)] = None) -> Response:
    rev, doc = service.get_intent(session=session)
    return document_response(doc, rev.id, accept)


@router.put("", response_model=Intent, summary="Replace the whole intent (JSON or YAML)",
            responses={200: {"content": _CONTENT}, **error_responses(401, 403, 409, 422)},
            openapi_extra={"requestBody": {"required": True, "content": _CONTENT}})
@document_body
async def put_intent(request: Request, ctx: OperatorWrite) -> Response:
    raw = await request.body()  # bounded by the route guard
    fmt = body_format(request)
    database = request.app.state.database
    limits = request.app.state.settings.text_limits()

    def write() -> service.WriteResult:
        with database.session() as session:
            return service.apply_edit(
                lambda _head: parse_intent_text(raw, fmt, allow_aliases=False, limits=limits, what="the body"),
                session=session, ctx=ctx, action="intent.replace")

    result = await run_in_threadpool(write)
    return document_response(result.document, result.revision.id, request.headers.get("accept"))
