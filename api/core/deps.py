"""Dependencies shared by the routers: the store session, the caller, paging, ETags.

``SessionDep`` is a SQLAlchemy session for the request; ``CurrentUser`` is the
:class:`controller.service.Actor` behind the bearer token (401 without a valid
one); ``Viewer``, ``Operator`` and ``Admin`` add the role check (403). The route guard
(:mod:`api.core.guard`) runs the same check, found by :func:`required_role`, before the
body is read, and the dependencies then reuse its actor. Writes take ``OperatorWrite`` or
``AdminWrite``: a :class:`controller.service.WriteContext` carrying the actor, the request
id and the ``If-Match`` header, for the service's revision check and the audit log.
Nothing here builds SQL.

Tokens are checked against the store at most once per :class:`TokenCache`
period (``Settings.token_cache_s``, at most a second) per token and process:
a revoked or expired token is refused within that period on every replica, and
at once on the replica that revoked it. The dependencies that need no I/O are
coroutines, so a request does not hop to a worker thread for each of them.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, Header, Query, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.core.problems import ProblemException, status_for
from controller import service
from controller.service import Actor, IdempotentWrite, Page, WriteContext, WriteResult
from controller.settings import Settings
from controller.store.db import Database
from controller.store.repo import Revision

__all__ = [
    "Admin", "AdminWrite", "CurrentUser", "IdempotencyKey", "IfMatch", "IntentWrite", "MAX_LIMIT", "OperatorWrite",
    "Paging", "SessionDep", "TokenCache", "Viewer", "authenticate_request", "authorize", "check_role",
    "fingerprinted", "page_body", "replay_headers", "required_role", "set_etag",
]

MAX_LIMIT = 1000
_bearer = HTTPBearer(auto_error=False, description="a Loom token: `loom_<id>_<secret>`")


async def get_database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


class TokenCache:
    """Who each bearer token stood for when the store was last asked, for ``ttl`` seconds.

    Keys are the tokens' SHA-256 (no secret is kept); only successful checks are kept (a
    token made a moment ago on another replica works at once); an entry past its token's
    expiry is not used. ``clear`` after a revocation makes it count at once in this process;
    elsewhere it counts when the entry ages out, within ``ttl`` (at most a second).
    """

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._items: dict[str, tuple[float, Actor, datetime | None]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(bearer: str) -> str:
        return hashlib.sha256(bearer.encode()).hexdigest()

    def get(self, key: str) -> Actor | None:
        if self.ttl <= 0:
            return None
        hit = self._items.get(key)
        if hit is None:
            return None
        at, actor, expires = hit
        if self.clock() - at >= self.ttl or (expires is not None and expires <= datetime.now(UTC)):
            with self._lock:
                self._items.pop(key, None)
            return None
        return actor

    def put(self, key: str, actor: Actor, expires: datetime | None) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if len(self._items) > 10_000:  # a flood of distinct tokens: start over rather than grow
                self._items.clear()
            self._items[key] = (self.clock(), actor, expires)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def token_cache(request: Request) -> TokenCache:
    cache: TokenCache = request.app.state.token_cache
    return cache


def get_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    with db.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


async def authenticate_request(request: Request) -> Actor:
    """The caller behind the request's bearer token: the actor the route guard already found for
    this request, else the token's check (cached per :class:`TokenCache` period, else a store read
    in a worker thread).

    Raises :class:`ProblemException` 401 (with ``WWW-Authenticate: Bearer``) without a valid token."""
    known = getattr(request.state, "actor", None)
    if isinstance(known, Actor):
        return known
    header = request.headers.get("authorization")
    scheme, bearer = get_authorization_scheme_param(header)
    if not header or not bearer or scheme.lower() != "bearer":
        raise ProblemException(401, "Unauthorized", "send 'Authorization: Bearer <token>'", kind="unauthorized",
                               headers={"WWW-Authenticate": 'Bearer realm="loom"'})
    cache = token_cache(request)
    key = cache.key(bearer)
    actor = cache.get(key)
    if actor is None:
        db: Database = request.app.state.database
        settings: Settings = request.app.state.settings
        admin = settings.admin_token.get_secret_value() if settings.admin_token else None

        def check() -> tuple[Actor | None, datetime | None]:
            with db.session() as session:
                return service.authenticate_until(bearer, session=session, admin_token=admin)

        actor, expires = await run_in_threadpool(check)
        if actor is not None:
            cache.put(key, actor, expires)
    if actor is None:
        raise ProblemException(401, "Unauthorized", "the token is unknown, expired or revoked", kind="unauthorized",
                               headers={"WWW-Authenticate": 'Bearer realm="loom", error="invalid_token"'})
    request.state.actor = actor
    return actor


def check_role(actor: Actor, role: str) -> Actor:
    """``actor`` if its role allows ``role``'s work; else :class:`ProblemException` 403."""
    if not service.role_allows(actor.role, role):
        raise ProblemException(403, "Forbidden", f"this needs the {role} role; the token has {actor.role}",
                               kind="forbidden")
    return actor


async def authorize(request: Request, role: str) -> Actor:
    """Authenticate the caller and check ``role`` (401, 403); the actor is remembered on the request
    for the dependencies. The route guard (:mod:`api.core.guard`) calls this before the body is read."""
    return check_role(await authenticate_request(request), role)


async def current_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Actor:
    """The caller (401 without a valid token). ``credentials`` puts the bearer scheme in OpenAPI."""
    return await authenticate_request(request)


CurrentUser = Annotated[Actor, Depends(current_user)]


def _require(role: str) -> Callable[..., Awaitable[Actor]]:
    # one dependency with the token's check inside, not one on top of current_user: each
    # dependency FastAPI solves costs a read request a noticeable share of its time
    async def check(request: Request,
                    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Actor:
        return check_role(await authenticate_request(request), role)
    check.__name__ = f"require_{role}"
    check.loom_role = role  # type: ignore[attr-defined]  # read by required_role
    return check


def required_role(dependant: Dependant) -> str | None:
    """The role a route's dependencies require (the highest of ``Viewer``, ``Operator``, ``Admin``...;
    ``viewer`` for ``CurrentUser`` alone), or ``None`` for a public route."""
    roles: list[str] = []
    authenticated = False
    stack = [dependant]
    while stack:
        dep = stack.pop()
        role = getattr(dep.call, "loom_role", None)
        if isinstance(role, str):
            roles.append(role)
        authenticated = authenticated or dep.call is current_user
        stack.extend(dep.dependencies)
    if roles:
        return max(roles, key=service.ROLES.index)
    return "viewer" if authenticated else None


Viewer = Annotated[Actor, Depends(_require("viewer"))]
Operator = Annotated[Actor, Depends(_require("operator"))]
Admin = Annotated[Actor, Depends(_require("admin"))]

IfMatch = Annotated[str | None, Header(
    alias="If-Match", description='the revision the write is based on, as its ETag ("7") or *; stale -> 409')]


IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=128,
    description="makes the write safe to retry: a retry with the same key (on any replica, after any failure) "
                "gets the first answer, with Idempotent-Replayed: true, and writes nothing; the key on another "
                "request -> 422. Keys are kept a day")]


def _context(request: Request, actor: Actor, if_match: str | None, idempotency_key: str | None = None) -> WriteContext:
    # the body's fingerprint is added by the route (:func:`fingerprinted`), which has the body in the form it reads
    idem = IdempotentWrite(idempotency_key, "") if idempotency_key else None
    return WriteContext(actor=actor, request_id=getattr(request.state, "request_id", None), method=request.method,
                        path=request.url.path, if_match=if_match, reject_status=status_for,
                        client=request.client.host if request.client else None, idempotency=idem)


async def operator_write(request: Request, actor: Operator, if_match: IfMatch = None) -> WriteContext:
    return _context(request, actor, if_match)


async def intent_write(request: Request, actor: Operator, if_match: IfMatch = None,
                       idempotency_key: IdempotencyKey = None) -> WriteContext:
    return _context(request, actor, if_match, idempotency_key)


def fingerprinted(ctx: WriteContext, body: bytes) -> WriteContext:
    """``ctx`` with its ``Idempotency-Key`` bound to this request: its method, path and ``body``."""
    if ctx.idempotency is None:
        return ctx
    return replace(ctx, idempotency=IdempotentWrite.of(ctx.idempotency.key, ctx.method, ctx.path, body))


def replay_headers(result: WriteResult) -> dict[str, str]:
    """``Idempotent-Replayed: true`` on the answer of a write that was replayed, not run."""
    return {"Idempotent-Replayed": "true"} if result.replayed else {}


async def admin_write(request: Request, actor: Admin) -> WriteContext:
    return _context(request, actor, None)


OperatorWrite = Annotated[WriteContext, Depends(operator_write)]
#: an operator's write of the intent: ``If-Match`` and ``Idempotency-Key``
IntentWrite = Annotated[WriteContext, Depends(intent_write)]
AdminWrite = Annotated[WriteContext, Depends(admin_write)]


def with_status(ctx: WriteContext, status: int) -> WriteContext:
    return replace(ctx, status=status)


class Paging:
    def __init__(self, limit: int = 100, offset: int = 0):
        self.limit, self.offset = limit, offset


async def paging(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1, description="items to skip")] = 0,
) -> Paging:
    return Paging(limit, offset)


PagingDep = Annotated[Paging, Depends(paging)]


def set_etag(response: Response, revision: Revision | None) -> None:
    if revision is not None:
        response.headers["ETag"] = f'"{revision.id}"'


def page_body(request: Request, response: Response, page: Page, items: Sequence[object]) -> dict[str, object]:
    """The page as JSON, with ``next`` (and a ``Link: rel="next"`` header) when more remain."""
    nxt = None
    if page.offset + page.limit < page.total:
        nxt = str(request.url.include_query_params(offset=page.offset + page.limit, limit=page.limit))
        response.headers["Link"] = f'<{nxt}>; rel="next"'
    response.headers["X-Total-Count"] = str(page.total)
    return {"items": items, "total": page.total, "limit": page.limit, "offset": page.offset, "next": nxt}
