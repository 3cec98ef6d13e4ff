"""``/v1/jobs``: ML jobs of the intent, by name (the collection routes; filter by a member ToR and
by collective); ``POST /v1/jobs/what-if``: the planned maximum utilization and the safety verdict of the active
intent with one more ML job (DESIGN.md, Closed loop); nothing is written. And the jobs seen from the network
(DESIGN.md, ML workloads): ``GET /v1/jobs/{name}/performance`` (:func:`controller.telemetry.jobperf.job_performance`)
and ``GET /v1/jobs/{name}/history`` (its measured rate per interval and its ``job.*`` insight events) and
``GET /v1/jobs/discovered`` (:func:`controller.telemetry.discovery.discovered_jobs`), read from the collector
against the active revision like the telemetry views; ``discovered`` is declared before the collection's
``/v1/jobs/{name}``, which would take it for a job's name.

The body is one job as the intent document spells it (JSON or YAML); errors are located under
``job`` (``job.tors[0]: unknown device 'x'``, 422). It needs the ``operator`` role, like the other
requests that plan and replay (a review), though it stores nothing and is not audited; the ETag
names the revision the job was added to (the active one, else the head). The work is
:func:`controller.workflow.jobs.what_if_stored`.

``POST /v1/jobs/placement`` (DESIGN.md, ML workloads): ``{"job", "candidates": [TOR, ...], "top": K,
"objective"}`` (:mod:`controller.model.placement`; the job spelt with ``members: N`` in place of ``tors``)
answers the best placements of the job over the candidate ToRs, each planned and replayed like the
what-if, with the same role, body formats, ETag and nothing stored; errors are located in the body
(``candidates[2]``, ``job.members``). The work is :func:`controller.workflow.jobs.placement_stored`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.core.deps import Operator, SessionDep, Viewer, set_etag
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.routers.collection import collection_router
from api.routers.intent import body_format
from api.routers.telemetry import HistoryWindowS, WindowS, telemetry
from controller.model.documents import (
    DiscoveredJobsDocument,
    InsightEventDocument,
    JobEventDocument,
    JobHistoryDocument,
    JobHistoryPointDocument,
    JobPerformanceDocument,
    JobPlacementsDocument,
    JobWhatIfDocument,
)
from controller.model.errors import NotFound
from controller.model.intent import parse_intent_text
from controller.model.placement import MAX_CANDIDATES, MAX_TOP
from controller.store import events_repo
from controller.telemetry.discovery import discovered_jobs
from controller.telemetry.jobperf import job_performance, job_rate_history
from controller.workflow import jobs
from controller.workflow.telemetry import active_context


async def filters(
    tor: Annotated[str | None, Query(description="jobs with this member")] = None,
    collective: Annotated[str | None, Query(description="a collective's name (a built-in or the intent's own)")] = None,
) -> dict[str, str | None]:
    return {"tor": tor, "collective": collective}


router = APIRouter(tags=["jobs"], route_class=GuardedRoute)

JobName = Annotated[str, Path(description="the job's name", min_length=1, max_length=300)]
MinConfidence = Annotated[float, Query(ge=0, le=1, description="the least confidence of a group's template match")]


@router.get("/v1/jobs/discovered", response_model=DiscoveredJobsDocument,
            summary="Groups of the measured traffic that no declared job explains, offered as jobs",
            responses=error_responses(401, 403, 404, 422))
def discovered(request: Request, _actor: Viewer, window_s: WindowS = 300.0,
               min_confidence: MinConfidence = 0.8) -> DiscoveredJobsDocument:
    tel = telemetry(request, window_s)
    _rev, intent, plan = active_context(tel, sessions=request.app.state.database.session)
    method, series = tel.tor_series(intent, plan, time.time(), window_s)
    return discovered_jobs(intent, method, series, window_s, min_confidence=min_confidence)


@router.get("/v1/jobs/{name}/performance", response_model=JobPerformanceDocument,
            summary="A job's measured traffic, iteration period and network slowdown, from counters alone",
            responses=error_responses(401, 403, 404, 422))
def performance(request: Request, _actor: Viewer, name: JobName, window_s: WindowS = 300.0) -> JobPerformanceDocument:
    tel = telemetry(request, window_s)
    _rev, intent, plan = active_context(tel, sessions=request.app.state.database.session)
    job = next((j for j in intent.jobs if j.name == name), None)
    if job is None:
        raise NotFound(f"no job named '{name}' in the active revision")
    return job_performance(tel, intent, plan, job, time.time(), window_s)


@router.get("/v1/jobs/{name}/history", response_model=JobHistoryDocument,
            summary="A job's measured rate per interval and its insight events over the window",
            responses=error_responses(401, 403, 404, 422))
def history(request: Request, session: SessionDep, _actor: Viewer, name: JobName,
            window_s: HistoryWindowS = None) -> JobHistoryDocument:
    tel = telemetry(request, window_s)
    window_s = window_s or tel.keep_s
    _rev, intent, _plan = active_context(tel, sessions=request.app.state.database.session)
    job = next((j for j in intent.jobs if j.name == name), None)
    if job is None:
        raise NotFound(f"no job named '{name}' in the active revision")
    now = time.time()
    expected, points = job_rate_history(tel, intent, job, now, window_s)
    since = datetime.fromtimestamp(now - window_s, UTC)
    events = [e for e in events_repo.events_since("job.", since, session=session) if e.data.get("job") == name]
    return JobHistoryDocument(
        job=name, window_s=window_s, interval_s=tel.options.interval_s, expected_gbps=expected,
        method="aft" if points is not None else None,
        points=[JobHistoryPointDocument(t=round(t, 3), gbps=g) for t, g in points or []],
        events=[JobEventDocument(id=e.id, at=e.at.isoformat(), kind=e.kind,
                                 data=InsightEventDocument.model_validate(e.data)) for e in events])


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


_PLACEMENT = {"application/json": {"schema": {
    "type": "object", "required": ["job", "candidates"], "additionalProperties": False,
    "properties": {
        "job": {"type": "object", "description": "a job as the intent spells one, with members: N (how many "
                                                 "ToRs) in place of tors"},
        "candidates": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_CANDIDATES,
                       "description": "the ToRs with a free slot, each once (a ToR hosts one member)"},
        "top": {"type": "integer", "minimum": 1, "maximum": MAX_TOP, "default": 3},
        "objective": {"type": "string", "enum": ["balanced", "job", "others"], "default": "balanced"}}}},
    "application/yaml": {"schema": {"type": "string"}}}


@router.post("/v1/jobs/placement", response_model=JobPlacementsDocument,
             summary="The best placements of a new job over candidate ToRs, each planned and checked (nothing "
                     "stored)",
             responses=error_responses(401, 403, 404, 422),
             openapi_extra={"requestBody": {"required": True, "content": _PLACEMENT}})
async def placement(request: Request, response: Response, _actor: Operator) -> JobPlacementsDocument:
    raw = await request.body()  # bounded by the route guard
    fmt = body_format(request)
    database = request.app.state.database
    limits = request.app.state.settings.text_limits()

    def run() -> Any:
        body = parse_intent_text(raw, fmt, allow_aliases=False, limits=limits, what="the body")
        return jobs.placement_stored(body, sessions=database.session)  # the search, plans and replays: no session

    rev, answer = await run_in_threadpool(run)
    set_etag(response, rev)
    return answer
