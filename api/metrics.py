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
"""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controller.metrics import CONTENT_TYPE_LATEST, Metrics

__all__ = ["MetricsMiddleware", "install", "route_template"]

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


def install(app: FastAPI, metrics: Metrics | None = None) -> Metrics:
    """Put ``metrics`` (a fresh :class:`Metrics`) on ``app.state``, count requests, serve ``/metrics``."""
    metrics = metrics or Metrics()
    app.state.metrics = metrics

    async def scrape(request: Request) -> Response:
        m: Metrics = request.app.state.metrics
        return Response(m.render(), media_type=CONTENT_TYPE_LATEST)

    app.add_route("/metrics", scrape, methods=["GET"], include_in_schema=False)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return metrics
