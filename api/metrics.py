"""``/metrics`` (Prometheus text format) and the middleware that counts requests.

:func:`install` gives the app its :class:`controller.metrics.Metrics`
(``app.state.metrics``, one registry per app), adds :class:`MetricsMiddleware`
and serves ``/metrics``. The middleware labels each request by its route
*template* (``/v1/devices/{name}``, never the raw path, so a scan cannot blow
up the label set; unmatched paths are ``unmatched``), records the count by
method, route and status and the latency by method and route, and writes one
structured access-log record (``loom.access``) with the request id, which
:mod:`controller.logs` adds. ``/metrics`` is unauthenticated like ``/healthz``
(Prometheus scrapes it; it carries counts, never intent or tokens) and is left
out of the OpenAPI document.

Each scrape also sets the link gauges from the collector (``app.state.telemetry``)
against the active revision: ``loom_link_utilization{link="a:port"}``,
``loom_link_gbps{link, direction="ab"|"ba"}`` and ``loom_link_stale{link}``
(a stale or unknown direction has no ``loom_link_gbps`` sample, never a zero).
"""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI
from prometheus_client import Gauge
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controller.metrics import CONTENT_TYPE_LATEST, Metrics
from controller.model.errors import LoomError
from controller.workflow.telemetry import active_intent

__all__ = ["LinkGauges", "MetricsMiddleware", "install", "route_template"]

access_log = logging.getLogger("loom.access")
UNMATCHED = "unmatched"


def route_template(scope: Scope) -> str:
    """The template of the route that served ``scope`` (after routing), or ``unmatched``."""
    route = scope.get("route")  # FastAPI's routes put themselves here
    path = getattr(route, "path", None)
    if isinstance(path, str) and path:
        return path
    endpoint = scope.get("endpoint")  # plain Starlette routes and mounts leave only their endpoint
    if endpoint is None:
        return UNMATCHED
    for r in getattr(scope.get("app"), "routes", ()):
        if isinstance(r, Mount) and r.app is endpoint:
            return f"{r.path}/{{path}}"
        if getattr(r, "endpoint", None) is endpoint and isinstance(getattr(r, "path", None), str):
            return str(r.path)
    return UNMATCHED


class MetricsMiddleware:
    """Count and time every HTTP request into ``metrics`` and log it."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            elapsed = time.perf_counter() - started
            method = scope.get("method", "GET")
            route = route_template(scope)
            self.metrics.requests.labels(method, route, str(status[0])).inc()
            self.metrics.request_seconds.labels(method, route).observe(elapsed)
            access_log.info("%s %s %d", method, scope.get("path", ""), status[0],
                            extra={"method": method, "route": route, "path": scope.get("path", ""),
                                   "status": status[0], "seconds": round(elapsed, 6)})


class LinkGauges:
    """Per-link utilization gauges on ``metrics``' registry, refreshed from the collector at each scrape."""

    WINDOW_S = 60.0

    def __init__(self, metrics: Metrics):
        r = metrics.registry
        self.utilization = Gauge("loom_link_utilization", "Observed utilization of the busier direction (0..1)",
                                 ["link"], registry=r)
        self.gbps = Gauge("loom_link_gbps", "Observed load per direction (ab: from the link's a end)",
                          ["link", "direction"], registry=r)
        self.stale = Gauge("loom_link_stale", "1 when the link's counters are stale", ["link"], registry=r)

    def refresh(self, app: FastAPI) -> None:
        """Set the gauges from ``app.state.telemetry`` and the active revision (none before a commit)."""
        tel = getattr(app.state, "telemetry", None)
        if tel is None or not tel.counts()["counters"]:
            return  # nothing streamed: no gauges, and no store read on this scrape
        try:
            with app.state.database.session() as session:
                intent = active_intent(tel, session=session)
        except LoomError:
            return
        for g in (self.utilization, self.gbps, self.stale):
            g.clear()
        for v in tel.links(intent, time.time(), self.WINDOW_S):
            link = f"{v.a}:{v.a_port}"
            self.stale.labels(link).set(1 if v.stale else 0)
            if v.utilization is not None:
                self.utilization.labels(link).set(v.utilization)
            if v.gbps_ab is not None:
                self.gbps.labels(link, "ab").set(v.gbps_ab)
            if v.gbps_ba is not None:
                self.gbps.labels(link, "ba").set(v.gbps_ba)


def install(app: FastAPI, metrics: Metrics | None = None) -> Metrics:
    """Put ``metrics`` (a fresh :class:`Metrics`) on ``app.state``, count requests, serve ``/metrics``."""
    metrics = metrics or Metrics()
    app.state.metrics = metrics

    gauges = LinkGauges(metrics)

    async def scrape(request: Request) -> Response:
        m: Metrics = request.app.state.metrics
        await run_in_threadpool(gauges.refresh, request.app)
        return Response(m.render(), media_type=CONTENT_TYPE_LATEST)

    app.add_route("/metrics", scrape, methods=["GET"], include_in_schema=False)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return metrics
