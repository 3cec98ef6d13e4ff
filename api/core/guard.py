"""The route guard: who may call a route and how much it may send, settled before its body is read.

Every API route is a :class:`GuardedRoute` (each router is built with ``route_class=GuardedRoute``;
:func:`install` refuses an app with any other). FastAPI reads and parses a request's body before it
solves a single dependency, so a token checked by a dependency is checked too late: an
unauthenticated 200 MB upload would be read, and parsed, to be told 401. The guard's handler runs
first instead:

1. it authenticates and authorizes the caller for the route's role, the one its dependencies ask
   for (:func:`api.core.deps.required_role`): 401 or 403 with nothing of the body read;
2. it refuses a query parameter the route does not declare (422 naming it, as FastAPI names a
   misspelt value): ``?rol=spine`` is a mistake to report, not a filter to drop silently; and a value
   with a NUL character (422 naming it), which no filter can match and PostgreSQL refuses;
3. on a write it refuses a declared ``Content-Length`` over the route's limit (413) at once;
4. it hands FastAPI and the endpoint a :class:`BoundedRequest`, whose body is read up to the limit
   and no further (413 as soon as a chunked body passes it) and whose JSON is read by
   :func:`controller.model.text.load_json`: strict UTF-8 (400), nesting depth (422) and number of
   values (413) bounded before the parser runs, no ``NaN``, no lone surrogate.

The limit is ``settings.max_body_bytes``, or ``settings.max_document_body_bytes`` for the endpoints
marked with :func:`document_body` (those that take a whole intent). :class:`EarlyAnswerMiddleware`
closes the connection after an answer given before the request's body was read to its end (the
client need not send the rest, nor the server drain it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.core.deps import authorize, required_role
from api.core.problems import ProblemException, request_problem
from api.core.routes import allowed_methods, api_routes
from controller.model.errors import InvalidIntent
from controller.model.text import TextLimits, load_json

__all__ = ["BoundedRequest", "EarlyAnswerMiddleware", "GuardedRoute", "allowed_methods", "api_routes",
           "body_limit", "document_body", "install"]

_WRITES = frozenset({"POST", "PUT", "PATCH"})
_DOCUMENT_BODY = "loom_document_body"
_UNREAD: Any = object()
F = TypeVar("F", bound=Callable[..., Any])


def document_body(endpoint: F) -> F:
    """Mark an endpoint that takes a whole intent document: its body may be as large as
    ``settings.max_document_body_bytes`` (put it under the route decorator)."""
    setattr(endpoint, _DOCUMENT_BODY, True)
    return endpoint


def body_limit(request: Request, endpoint: Callable[..., Any]) -> tuple[int, str]:
    """The body limit of ``endpoint`` in bytes, and the setting that says it."""
    settings = request.app.state.settings
    if getattr(endpoint, _DOCUMENT_BODY, False):
        return int(settings.max_document_body_bytes), "LOOM_MAX_DOCUMENT_BODY_BYTES"
    return int(settings.max_body_bytes), "LOOM_MAX_BODY_BYTES"


def _too_large(limit: int, setting: str) -> ProblemException:
    return ProblemException(413, "Body too large",
                            f"the body is over {limit} bytes, this route's limit ({setting}); nothing past it was read",
                            kind="body-too-large")


def _bounded_receive(receive: Receive, limit: int, setting: str) -> Receive:
    """``receive`` that raises 413 once the body's chunks pass ``limit`` bytes."""
    seen = 0

    async def bounded() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _too_large(limit, setting)
        return message

    return bounded


class BoundedRequest(Request):
    """A request whose body is read within a limit (its ``receive`` counts) and whose JSON is read
    within :class:`~controller.model.text.TextLimits`, off the event loop."""

    def __init__(self, scope: Scope, receive: Receive, limits: TextLimits):
        super().__init__(scope, receive)
        self._limits = limits
        self._parsed: Any = _UNREAD

    async def json(self) -> Any:
        """The body as JSON. A syntax error stays ``json.JSONDecodeError`` (FastAPI answers 422
        ``json_invalid``); every other refusal is the problem of :func:`api.core.problems.request_problem`."""
        if self._parsed is _UNREAD:
            raw = await self.body()
            try:
                self._parsed = await run_in_threadpool(load_json, raw, self._limits, what="the body")
            except json.JSONDecodeError:
                raise
            except InvalidIntent as exc:
                raise request_problem(exc) from None
        return self._parsed


class GuardedRoute(APIRoute):
    """An API route whose caller is authorized, and whose body bounded, before FastAPI reads it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        role = required_role(self.dependant)
        endpoint = self.endpoint
        known = query_names(self.dependant)

        async def guarded(request: Request) -> Response:
            if role is not None:
                await authorize(request, role)
            _refuse_unknown_query(request, known)
            limit, setting = body_limit(request, endpoint)
            if request.method in _WRITES:
                declared = request.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise _too_large(limit, setting)
            bounded = BoundedRequest(request.scope, _bounded_receive(request.receive, limit, setting),
                                     request.app.state.settings.text_limits())
            return await handler(bounded)

        return guarded


def query_names(dependant: Dependant) -> frozenset[str]:
    """The query parameters a route declares, through its dependencies, and the fields of a query model."""
    names: set[str] = set()
    todo = [dependant]
    while todo:
        d = todo.pop()
        for f in d.query_params:
            model = f.field_info.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                names.update(info.alias or name for name, info in model.model_fields.items())
            else:
                names.add(f.alias)
        todo.extend(d.dependencies)
    return frozenset(names)


def _refuse_unknown_query(request: Request, known: frozenset[str]) -> None:
    """A 422 (``query.NAME: unknown query parameter``) for every query parameter the route does not declare,
    and one (``query.NAME: ... NUL``) for every value with a NUL character: no name, state or prefix a filter
    matches holds one, and PostgreSQL refuses a string that does (an audit filter by such an actor was a
    500 on a PostgreSQL store)."""
    unknown = sorted({k for k in request.query_params if k not in known})
    if unknown:
        accepted = ", ".join(sorted(known)) or "none"
        raise RequestValidationError([{"type": "extra_forbidden", "loc": ("query", k),
                                       "msg": f"unknown query parameter (this route accepts: {accepted})",
                                       "input": request.query_params.get(k)} for k in unknown])
    nul = sorted({k for k, v in request.query_params.multi_items() if "\0" in v})
    if nul:
        raise RequestValidationError([{"type": "string_pattern_mismatch", "loc": ("query", k),
                                       "msg": "must not contain a NUL character (U+0000)",
                                       "input": request.query_params.get(k)} for k in nul])


class EarlyAnswerMiddleware:
    """An answer that starts before the request's body was read to its end (a 401, 403, 404, 405 or 413 to
    a large upload) closes the connection, the way HTTP servers close: lingering. The answer is sent
    whole, then the rest of the body is read and discarded for at most ``linger_s`` seconds and
    ``linger_bytes`` bytes, then the connection closes. A client that sends its whole body before it reads
    (Python's urllib, no ``Expect: 100-continue``) would otherwise get a connection reset instead of the
    answer; one that stops sending and reads gets the answer at once all the same."""

    def __init__(self, app: ASGIApp, *, linger_s: float = 5.0, linger_bytes: int = 1 << 30):
        self.app = app
        self.linger_s = linger_s
        self.linger_bytes = linger_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _declares_body(scope):
            await self.app(scope, receive, send)
            return
        read_all = False

        async def watch_receive() -> Message:
            nonlocal read_all
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                read_all = True
            return message

        async def close_if_unread(message: Message) -> None:
            if message["type"] == "http.response.start" and not read_all:
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not read_all:
                await send({**message, "more_body": True})  # the whole answer is out (its length is declared)
                await self._linger(watch_receive)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await send(message)

        await self.app(scope, watch_receive, close_if_unread)

    async def _linger(self, receive: Receive) -> None:
        """Read and drop what is left of the body, within the bounds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.linger_s
        dropped = 0
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            while dropped < self.linger_bytes:
                left = deadline - loop.time()
                if left <= 0:
                    return
                message = await asyncio.wait_for(receive(), left)
                if message["type"] != "http.request":
                    return
                dropped += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return


def _declares_body(scope: Scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def install(app: FastAPI) -> None:
    """Check that every API route of ``app`` is guarded, and add :class:`EarlyAnswerMiddleware`."""
    unguarded = [f"{sorted(r.methods or ())} {r.path}" for r in api_routes(app)
                 if isinstance(r, APIRoute) and not isinstance(r, GuardedRoute)]
    if unguarded:
        raise RuntimeError(f"API routes without the guard (build their router with route_class=GuardedRoute): "
                           f"{unguarded}")
    app.add_middleware(EarlyAnswerMiddleware)
