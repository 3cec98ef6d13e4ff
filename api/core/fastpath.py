"""The reads' fast path: the common GET answered from caches before FastAPI solves its dependencies.

``GET /v1/intent``, ``GET /v1/<collection>`` and ``GET /v1/<collection>/{id}``
are most of what clients and the web UI ask, and for a cached revision their
answer is bytes made once (:mod:`api.core.fastread`). What is left per request
is FastAPI's dependency solving (the bearer token, the role, paging), which
costs a read several times what the answer does. :class:`FastReads` is an ASGI
middleware, inside the request-id and metrics middlewares, that answers such a
request itself when everything it needs is already known in this process:

* the bearer token was checked against the store within ``Settings.token_cache_s``
  (:class:`api.core.deps.TokenCache`) and its role may read;
* the head revision was seen within ``Settings.read_cache_s`` and its snapshot
  is cached (:func:`controller.service.cached_head`), with the intent's bytes
  made already for ``/v1/intent``;
* the query is no more than ``limit`` and ``offset`` as plain decimal numbers
  within their bounds (a list), or nothing (an object, the intent).

Anything else (no token or one not checked lately, a filter, a value FastAPI
would refuse, an unknown object, HEAD, another path) goes on to the routes,
unchanged, which answer it and fill the caches. The answers are the routes'
own, byte for byte and header for header (tests hold the two paths side by
side), and the request keeps its route (``scope["route"]``) for the metrics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.datastructures import URL
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api.core import fastread
from api.core.deps import MAX_LIMIT, TokenCache
from controller import service
from controller.model.errors import NotFound
from controller.store.objects import COLLECTIONS

__all__ = ["FastReads"]

_NUMBER = re.compile(rb"^[0-9]{1,10}$")
_MAX_OFFSET = 2**31 - 1
_MAX_ID = 300
_PATH_IDS = ("prefixes", "demands")  # their ids may hold '/' (route parameter {object_id:path})
_DEFAULT_LIMIT = 100


class FastReads:
    """ASGI middleware: answer cached reads at once, pass everything else on (see the module docstring)."""

    def __init__(self, app: ASGIApp, api: FastAPI):
        self.app = app
        self.api = api
        self._routes: dict[str, APIRoute] | None = None
        self._next: dict[tuple[Any, ...], str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].startswith("/v1/"):
            try:
                answer = self._answer(scope)
            except NotFound:
                answer = None
            if answer is not None:
                response, route = answer
                scope["route"] = route
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _route(self, name: str) -> APIRoute | None:
        """The route that would answer (for the metrics' route template); none: no fast path for it."""
        if self._routes is None:
            self._routes = {r.name: r for r in _api_routes(self.api.routes)}
        return self._routes.get(name)

    def _answer(self, scope: Scope) -> tuple[Response, APIRoute] | None:
        headers = _headers(scope)
        state = self.api.state
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() != b"bearer ":
            return None
        cache: TokenCache = state.token_cache
        actor = cache.get(cache.key(auth[7:].decode("latin-1").strip()))
        if actor is None or not service.role_allows(actor.role, "viewer"):
            return None
        head = service.cached_head(state.database, max_age=state.settings.read_cache_s)
        if head is None:
            return None
        rest = scope["path"][4:]
        if rest == "intent":
            return self._intent(scope, headers, head)
        name, sep, ident = rest.partition("/")
        coll = COLLECTIONS.get(name)
        if coll is None:
            return None
        if not sep:
            return self._list(scope, headers, name, head)
        if not ident or len(ident) > _MAX_ID or ("/" in ident and name not in _PATH_IDS):
            return None
        route = self._route(f"get_{coll.kind}")
        if route is None:
            return None
        el, rev = service.element_of(name, ident, head)
        tag = fastread.etag(rev)
        if fastread.unchanged(_text(headers.get(b"if-none-match")), tag):
            return fastread.not_modified(tag), route
        return Response(fastread.public_bytes(name, el), media_type=fastread.JSON, headers={"ETag": tag}), route

    def _intent(self, scope: Scope, headers: dict[bytes, bytes], head: Any) -> tuple[Response, APIRoute] | None:
        route = self._route("get_intent")
        made = fastread.made_body(head[1], fastread.wants_yaml(_text(headers.get(b"accept"))))
        if route is None or made is None:
            return None
        tag = fastread.etag(head[0])
        if fastread.unchanged(_text(headers.get(b"if-none-match")), tag):
            return fastread.not_modified(tag, vary="Accept"), route
        body, media_type = made
        return Response(body, media_type=media_type, headers={"ETag": tag, "Vary": "Accept"}), route

    def _list(self, scope: Scope, headers: dict[bytes, bytes], name: str, head: Any
              ) -> tuple[Response, APIRoute] | None:
        route = self._route(f"list_{name.replace('-', '_')}")
        paging = _paging(scope["query_string"])
        if route is None or paging is None:
            return None
        limit, offset = paging
        page = service.page_of(name, head, filters={}, limit=limit, offset=offset)
        tag = fastread.etag(head[0])
        if fastread.unchanged(_text(headers.get(b"if-none-match")), tag):
            return fastread.not_modified(tag), route
        out = {"X-Total-Count": str(page.total), "ETag": tag}
        nxt = None
        if offset + limit < page.total:
            nxt = self._next_url(scope, headers, offset + limit, limit)
            out["Link"] = f'<{nxt}>; rel="next"'
        body = fastread.page_bytes(name, page.items, total=page.total, limit=limit, offset=offset, next_url=nxt)
        return Response(body, media_type=fastread.JSON, headers=out), route

    def _next_url(self, scope: Scope, headers: dict[bytes, bytes], offset: int, limit: int) -> str:
        """What the route's ``request.url.include_query_params(offset=, limit=)`` gives, remembered."""
        server = scope.get("server")
        key = (scope.get("scheme"), headers.get(b"host"), tuple(server) if server else None, scope.get("root_path"),
               scope["path"], scope["query_string"], offset, limit)
        url = self._next.get(key)
        if url is None:
            if len(self._next) > 1024:
                self._next.clear()
            url = self._next[key] = str(URL(scope=scope).include_query_params(offset=offset, limit=limit))
        return url


def _api_routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    """Every APIRoute of the app, inside included routers too (FastAPI keeps those behind the router)."""
    for r in routes:
        if isinstance(r, APIRoute):
            yield r
        inner = getattr(getattr(r, "original_router", None), "routes", None)
        if inner is not None:
            yield from _api_routes(inner)


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The headers this path reads; a header given twice sends the request to the routes."""
    out: dict[bytes, bytes] = {}
    for k, v in scope["headers"]:
        if k in (b"authorization", b"if-none-match", b"accept", b"host"):
            if k in out:
                out[b"authorization"] = b""  # ambiguous: let the routes decide
            out[k] = v
    return out


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def _paging(query: bytes) -> tuple[int, int] | None:
    """``limit`` and ``offset`` from a query of nothing else, as the route would read them; else None."""
    limit, offset = _DEFAULT_LIMIT, 0
    seen: set[bytes] = set()
    if not query:
        return limit, offset
    for part in query.split(b"&"):
        key, eq, value = part.partition(b"=")
        if not eq or key in seen or key not in (b"limit", b"offset") or not _NUMBER.match(value):
            return None
        seen.add(key)
        n = int(value)
        if key == b"limit":
            if not 1 <= n <= MAX_LIMIT:
                return None
            limit = n
        else:
            if n > _MAX_OFFSET:
                return None
            offset = n
    return limit, offset
