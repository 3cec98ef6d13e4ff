"""``/v1/telemetry/*``: what the switches' counters say (DESIGN.md, Telemetry: links, demand,
fidelity, the traffic patterns), and
``POST /v1/demands/from-telemetry``, which turns the measured matrix into intent.

The views read the collector on ``app.state.telemetry`` (fed by the serving
process's gNMI subscription) against the active revision's intent and plan;
``now`` is the wall clock here, the only place that reads it.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from api.core.deps import IntentWrite, SessionDep, Viewer, fingerprinted, replay_headers
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from controller.model.documents import (
    DemandCaptureDocument,
    FidelityDocument,
    MeasuredDemandsDocument,
    PatternsDocument,
    TelemetryLinkHistoryDocument,
    TelemetryLinksDocument,
)
from controller.model.errors import IntentError, InvalidRequest, NotFound
from controller.telemetry import Telemetry
from controller.telemetry.discovery import explaining_jobs
from controller.workflow.telemetry import active_context, active_intent, capture_demands, capture_document

router = APIRouter(tags=["telemetry"], route_class=GuardedRoute)

Stat = Literal["mean", "p95", "max"]
WindowS = Annotated[float, Query(gt=0, le=86400, description="the window in seconds (rates ending within it)")]
#: a history's window: the collector's whole (``telemetry_keep_s``) when not given
HistoryWindowS = Annotated[float | None, Query(gt=0, le=86400, description=(
    "the window in seconds (rates ending within it); by default all the collector keeps"))]
StatQ = Annotated[Stat, Query(description="statistic of the per-interval rates: mean, p95 or max")]


def telemetry(request: Request, window_s: float | None = None, loc: str = "query.window_s") -> Telemetry:
    """The collector; with ``window_s``, refused (422 at ``loc``) when longer than what the collector keeps."""
    tel: Telemetry = request.app.state.telemetry
    why = tel.window_problem(window_s) if window_s is not None else None
    if why is not None:
        raise InvalidRequest([IntentError(loc, why)])
    return tel


@router.get("/v1/telemetry/links", response_model=TelemetryLinksDocument, summary="Observed link loads",
            responses=error_responses(401, 403, 404, 422))
def links(request: Request, session: SessionDep, _actor: Viewer, window_s: WindowS = 60.0) -> TelemetryLinksDocument:
    tel = telemetry(request, window_s)
    intent = active_intent(tel, session=session)
    views = tel.links(intent, time.time(), window_s)
    return TelemetryLinksDocument(window_s=window_s, links=[v.to_model() for v in views])


@router.get("/v1/telemetry/links/{link}/history", response_model=TelemetryLinkHistoryDocument,
            summary="A link's observed load, interval by interval",
            responses=error_responses(401, 403, 404, 422))
def link_history(request: Request, session: SessionDep, _actor: Viewer,
                 link: Annotated[str, Path(description="the link's lower end, DEVICE:PORT (as /v1/links names it)")],
                 window_s: HistoryWindowS = None) -> TelemetryLinkHistoryDocument:
    tel = telemetry(request, window_s)
    window_s = window_s or tel.keep_s
    intent = active_intent(tel, session=session)
    found = next((lk for lk in intent.links if lk.key == link or link in (lk.end_a, lk.end_b)), None)
    if found is None:
        raise NotFound(f"no link {link!r} in the active revision")
    points = tel.link_history(found, time.time(), window_s)
    return TelemetryLinkHistoryDocument(link=found.key, a=found.a, a_port=found.a_port, b=found.b, b_port=found.b_port,
                                        capacity_gbps=found.capacity_gbps, window_s=window_s,
                                        interval_s=tel.options.interval_s, points=[p.to_model() for p in points])


@router.get("/v1/telemetry/demand", response_model=MeasuredDemandsDocument, response_model_by_alias=True,
            summary="The measured demand matrix (ingress device to prefix)",
            responses=error_responses(401, 403, 404, 422))
def demand(request: Request, _actor: Viewer, window_s: WindowS = 60.0,
           stat: StatQ = "mean") -> MeasuredDemandsDocument:
    tel = telemetry(request, window_s)
    _rev, intent, plan = active_context(tel, sessions=request.app.state.database.session)
    return tel.demand(intent, plan, time.time(), window_s, stat).to_model(window_s, stat)


@router.get("/v1/telemetry/fidelity", response_model=FidelityDocument,
            summary="The active plan's predicted link utilization under the measured demand, beside the observed",
            responses=error_responses(401, 403, 404, 422))
def fidelity(request: Request, _actor: Viewer, window_s: WindowS = 60.0,
             stat: StatQ = "mean") -> FidelityDocument:
    tel = telemetry(request, window_s)
    _rev, intent, plan = active_context(tel, sessions=request.app.state.database.session)
    return tel.fidelity(intent, plan, time.time(), window_s, stat).to_model(window_s, stat)


@router.get("/v1/telemetry/patterns", response_model=PatternsDocument,
            summary="Communication groups of the measured traffic and their pattern (ring, all-to-all, ...)",
            responses=error_responses(401, 403, 404, 422))
def patterns(request: Request, _actor: Viewer, window_s: WindowS = 300.0) -> PatternsDocument:
    tel = telemetry(request, window_s)
    _rev, intent, plan = active_context(tel, sessions=request.app.state.database.session)
    method, groups = tel.patterns(intent, plan, time.time(), window_s)
    return PatternsDocument(window_s=window_s, method=method, groups=[
        g.to_model(() if g.is_background else explaining_jobs(g.members, intent)) for g in groups])


class DemandCapture(BaseModel):
    """The body of ``POST /v1/demands/from-telemetry``."""

    model_config = ConfigDict(extra="forbid")
    window_s: float = Field(60.0, gt=0, le=86400, description="the window in seconds")
    stat: Stat = Field("p95", description="mean, p95 or max of the per-interval rates")
    headroom: float = Field(1.0, gt=0, le=100, description="factor applied to every measured demand")


@router.post("/v1/demands/from-telemetry", response_model=DemandCaptureDocument, response_model_by_alias=True,
             tags=["demands"], summary="Replace the intent's demands with the measured matrix (one revision)",
             responses=error_responses(401, 403, 404, 409, 422))
async def from_telemetry(request: Request, response: Response, body: DemandCapture,
                         ctx: IntentWrite) -> DemandCaptureDocument:
    tel = telemetry(request, body.window_s, "body.window_s")
    database = request.app.state.database
    ctx = fingerprinted(ctx, body.model_dump_json().encode())

    def write() -> DemandCaptureDocument:
        _rev, intent, plan = active_context(tel, sessions=database.session)
        view = tel.demand(intent, plan, time.time(), body.window_s, body.stat)
        with database.session() as session:
            result = capture_demands(view.demands, headroom=body.headroom, window_s=body.window_s, stat=body.stat,
                                     method=view.method, session=session, ctx=ctx)
        response.headers["ETag"] = f'"{result.revision.id}"'
        response.headers.update(replay_headers(result))
        return capture_document(result, window_s=body.window_s, stat=body.stat, headroom=body.headroom,
                                method=view.method)

    return await run_in_threadpool(write)
