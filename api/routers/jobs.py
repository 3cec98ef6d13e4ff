"""``/v1/jobs``: ML jobs of the intent, by name (the collection routes; filter by a member ToR and
by collective); and ``POST /v1/jobs/what-if``: the planned maximum utilization and the safety verdict of the active
intent with one more ML job (DESIGN.md, Closed loop); nothing is written.

The body is one job as the intent document spells it (JSON or YAML); errors are located under
``job`` (``job.tors[0]: unknown device 'x'``, 422). It needs the ``operator`` role, like the other
requests that plan and replay (a review), though it stores nothing and is not audited; the ETag
names the revision the job was added to (the active one, else the head). The work is
:func:`controller.workflow.jobs.what_if_stored`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.core.deps import Operator, set_etag
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.routers.collection import collection_router
from api.routers.intent import body_format
from controller.model.documents import JobWhatIfDocument
from controller.model.intent import parse_intent_text
from controller.workflow import jobs


async def filters(
    tor: Annotated[str | None, Query(description="jobs with this member")] = None,
    collective: Annotated[str | None, Query(description="a collective's name (a built-in or the intent's own)")] = None,
) -> dict[str, str | None]:
    return {"tor": tor, "collective": collective}


router = APIRouter(tags=["jobs"], route_class=GuardedRoute)
router.include_router(collection_router("jobs", filters, id_help="the job's name"))

_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Job"}},
            "application/yaml": {"schema": {"type": "string"}}}


@router.post("/v1/jobs/what-if", response_model=JobWhatIfDocument,
             summary="Plan and check the active intent with one more job (nothing stored)",
             responses=error_responses(401, 403, 404, 422),
             openapi_extra={"requestBody": {"required": True, "content": _CONTENT}})
async def what_if(request: Request, response: Response, _actor: Operator) -> JobWhatIfDocument:
    raw = await request.body()  # bounded by the route guard
    fmt = body_format(request)
    database = request.app.state.database
    limits = request.app.state.settings.text_limits()

    def run() -> Any:
        job = parse_intent_text(raw, fmt, allow_aliases=False, limits=limits, what="the body")
        return jobs.what_if_stored(job, sessions=database.session)  # the plan and replay run with no session

    rev, answer = await run_in_threadpool(run)
    set_etag(response, rev)
    return answer
