"""The FastAPI application: :func:`create_app` builds it from :class:`Settings`.

No import-time globals: each app owns its :class:`controller.store.db.Database`
(given, or made from ``settings.db_url``), migrates it at startup, tags every
request with an id (``X-Request-ID``, echoed or generated) and mounts one
router per resource under ``/v1`` (DESIGN.md section 4). Room is left for
``changes``, ``plans`` and device state, which later routers add.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import metrics
from api.core import guard, openapi, problems
from api.core.deps import TokenCache
from api.core.fastpath import FastReads
from api.core.refusals import RefusalAudit
from api.routers import (
    audit,
    auto_te,
    changes,
    demands,
    device_state,
    devices,
    drift,
    failure_domains,
    health,
    intent,
    jobs,
    links,
    plans,
    policies,
    prefixes,
    revisions,
    state,
    tokens,
    ui,
)
from api.routers import cluster as cluster_view
from api.routers import telemetry as telemetry_views
from controller.logs import bind_request_id
from controller.model import Intent
from controller.model.errors import NotFound
from controller.model.plan import Plan
from controller.refusals import RefusalOptions
from controller.settings import Settings
from controller.store.db import Database
from controller.telemetry import Options as TelemetryOptions
from controller.telemetry import Telemetry
from controller.telemetry.stream import StreamOptions, TelemetryStream
from controller.workflow.agents import client_tls, make_driver
from controller.workflow.cluster import Cluster
from controller.workflow.engine import Workflow
from controller.workflow.telemetry import active_context
from southbound.driver import DeviceDriver

__all__ = ["create_app"]

log = logging.getLogger("loom.api")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    """Give each request an id (the client's ``X-Request-ID`` if sane) and echo it; everything the
    request logs carries it, its 500 answer too (an exception no handler knows is answered here,
    inside the request's context, rather than by the server outside it). While the app shuts down
    (``app.state.stopping``), a request is answered 503 at once."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        with bind_request_id(request_id):  # logs of this request, here and in what it calls, carry the id
            app = scope.get("app")
            if app is not None and getattr(app.state, "stopping", False):
                await problems.shutting_down(Request(scope))(scope, receive, send_with_id)
                return
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:
                if started:  # too late for an answer of our own: the server closes the connection
                    log.error("error after the answer started on %s %s", scope.get("method"),
                                       scope.get("path"), exc_info=True)
                    raise
                await problems.unexpected(Request(scope), exc)(scope, receive, send_with_id)


def _telemetry_stream(settings: Settings, db: Database, driver: DeviceDriver | None,
                      telemetry: Telemetry) -> TelemetryStream | None:
    """The gNMI subscriptions to the attached devices, feeding ``telemetry`` (none without devices)."""
    if driver is None or settings.telemetry_interval_s <= 0:
        return None

    async def active() -> tuple[int, Intent, Plan] | None:
        def read() -> tuple[int, Intent, Plan] | None:
            try:
                return active_context(telemetry, sessions=db.session)
            except NotFound:
                return None
        return await asyncio.to_thread(read)

    return TelemetryStream(telemetry, {d: driver.endpoint(d) for d in driver.devices}, active,
                           tls=client_tls(settings), options=StreamOptions(interval_s=settings.telemetry_interval_s))


def create_app(settings: Settings | None = None, *, database: Database | None = None,
               driver: DeviceDriver | None = None, telemetry: Telemetry | None = None,
               cluster: Cluster | None = None) -> FastAPI:
    """Build the API. ``database`` defaults to one made from ``settings.db_url``
    (and disposed of at shutdown); it is migrated to the newest schema at startup.
    ``driver`` reaches the device agents; by default the gRPC driver of the settings' agents
    file (none without one). ``telemetry`` is the collector the views read (a fresh one by default).
    ``cluster`` is this replica's lease (made from the settings by default): started before the
    workflow, so a lone replica leads, and recovers, before it serves."""
    settings = settings or Settings()  # type: ignore[call-arg]  # fields come from the environment
    owned = database is None
    db = database or Database(settings.db_url, ack_standbys=settings.store_ack_standbys)
    # a replica paused inside a write transaction loses it well after its lease, never keeps its locks for good
    db.write_idle_timeout_s = max(10.0, 5 * settings.lease_ttl)
    driver = driver if driver is not None else make_driver(settings)
    app = FastAPI(
        title=settings.title,
        version="1.0.0",
        description=(
            "Loom's REST API: the fabric intent (devices, links, failure domains, prefixes, policies, demands), "
            "its revisions and their diffs, tokens and the audit log. Authenticate with "
            "`Authorization: Bearer <token>`; writes honour `If-Match` with the revision's ETag. "
            "Errors are RFC 9457 problem details."
        ),
        lifespan=_lifespan(settings, db, driver, owned=owned),
        separate_input_output_schemas=False,
        docs_url=None,  # served offline by api.routers.ui
        redoc_url=None,
    )
    _set_state(app, settings, db, driver, telemetry)
    app.add_middleware(FastReads, api=app)  # innermost: cached reads answered before the routes, still measured
    metrics.install(app)  # app.state.metrics, /metrics; inside the request id middleware
    app.state.cluster = cluster if cluster is not None else Cluster(settings, db, metrics=app.state.metrics)
    if app.state.cluster.metrics is None:
        app.state.cluster.metrics = app.state.metrics
    app.add_middleware(RequestIdMiddleware)
    problems.install(app)
    openapi.install(app)
    for router in _ROUTERS:
        app.include_router(router)
    ui.install(app)  # the web UI at /, /v1/whoami, offline /docs
    guard.install(app)  # every route authorizes and bounds its body before FastAPI reads it
    return app


#: The routers, in the order the app includes them (the OpenAPI document lists their paths so).
_ROUTERS = [m.router for m in (health, intent, devices, links, failure_domains, prefixes, policies, demands,
                               revisions, tokens, audit, changes, plans, jobs, device_state, drift,
                               telemetry_views, auto_te, cluster_view, state)]


def _set_state(app: FastAPI, settings: Settings, db: Database, driver: DeviceDriver | None,
               telemetry: Telemetry | None) -> None:
    """What the routes find on ``app.state``: the settings, the store, the refusal audit, the token
    cache, the driver and the telemetry collector."""
    app.state.settings = settings
    app.state.stopping = False
    app.state.database = db
    app.state.refusals = RefusalAudit(lambda: app.state.database, RefusalOptions(
        burst=settings.audit_refusal_burst, refill_s=settings.audit_refusal_refill_s))
    app.state.token_cache = TokenCache(settings.token_cache_s)
    app.state.driver = driver
    # fed by the gNMI subscription; its stale threshold counts in the subscription's sample intervals
    interval = settings.telemetry_interval_s or 10.0
    app.state.telemetry = telemetry if telemetry is not None else Telemetry(TelemetryOptions(
        interval_s=interval, max_rates=max(2, math.ceil(settings.telemetry_keep_s / interval - 1e-9))))


def _lifespan(settings: Settings, db: Database, driver: DeviceDriver | None, *,
              owned: bool) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's startup and shutdown: migrate the store, start the lease, the workflow, the telemetry
    stream and the refusal summaries; at shutdown answer 503, flush, stop them in reverse order, and
    dispose of the store when the app made it (``owned``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.stopping = False
        db.migrate()
        await app.state.cluster.start()
        app.state.workflow = Workflow(settings, db, driver=driver, metrics=getattr(app.state, "metrics", None),
                                      telemetry=app.state.telemetry, cluster=app.state.cluster)
        await app.state.workflow.start()
        stream = _telemetry_stream(settings, db, driver, app.state.telemetry)
        if stream is not None:
            await stream.start()
        summaries = asyncio.create_task(app.state.refusals.run(settings.audit_refusal_refill_s))
        yield
        app.state.stopping = True  # a request that still arrives is answered 503 (RequestIdMiddleware)
        summaries.cancel()
        await asyncio.to_thread(app.state.refusals.flush)  # what the last interval counted
        if stream is not None:
            await stream.stop()
        await app.state.workflow.stop()
        await app.state.cluster.stop()
        if owned:
            db.dispose()

    return lifespan
