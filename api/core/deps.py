"""Dependencies shared by the routers: the store session, the caller, paging, ETags.

``SessionDep`` is a SQLAlchemy session for the request; ``CurrentUser`` is the
:class:`controller.service.Actor` behind the bearer token (401 without a valid
one); ``Viewer``, ``Operator`` and ``Admin`` add the role check (403). The route guard
(:mod:`api.core.guard`) runs the same check, found by :func:`required_role`, before the
body is read, and the dependencies then reuse its actor. Writes take ``OperatorWrite`` or
``AdminWrite``: a :class:`controller.service.WriteContext` carrying the actor, the request
id and the ``If-Match`` header, for the service's revision check and the audit log.
Nothing here builds SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Annotated

from fastapi import Depends, Header, Query, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.core.problems import ProblemException, status_for
from controller import service
from controller.service import Actor, Page, WriteContext
from controller.settings import Settings
from controller.store.db import Database
from controller.store.repo import Revision

__all__ = [
    "Admin", "AdminWrite", "CurrentUser", "IfMatch", "MAX_LIMIT", "OperatorWrite", "Paging", "SessionDep",
    "Viewer", "authenticate_request", "authorize", "check_role", "page_body", "required_role", "set_etag",
]

MAX_LIMIT = 1000
_bearer = HTTPBearer(auto_error=False, description="a Loom token: `loom_<id>_<secret>`")


def get_database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    with db.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def authenticate_request(request: Request) -> Actor:
    """The caller behind the request's bearer token (a store read: run it in a thread from async code).

    Raises :class:`ProblemException` 401 (with ``WWW-Authenticate: Bearer``) without a valid token."""
    header = request.headers.get("authorization")
    scheme, credentials = get_authorization_scheme_param(header)
    if not header or not credentials or scheme.lower() != "bearer":
        raise ProblemException(401, "Unauthorized", "send 'Authorization: Bearer <token>'", kind="unauthorized",
                               headers={"WWW-Authenticate": 'Bearer realm="loom"'})
    settings: Settings = request.app.state.settings
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    with request.app.state.database.session() as session:
        actor = service.authenticate(credentials, session=session, admin_token=admin)
    if actor is None:
        raise ProblemException(401, "Unauthorized", "the token is unknown, expired or revoked", kind="unauthorized",
                               headers={"WWW-Authenticate": 'Bearer realm="loom", error="invalid_token"'})
    return actor


def check_role(actor: Actor, role: str) -> Actor:
    """``actor`` if its role allows ``role``'s work; else :class:`ProblemException` 403."""
    if not service.role_allows(actor.role, role):
        raise ProblemException(403, "Forbidden", f"this needs the {role} role; the token has {actor.role}",
                               kind="forbidden")
    return actor


async def authorize(request: Request, role: str) -> Actor:
    """Authenticate the caller and check ``role`` (401, 403), and remember the actor on the request
    for the dependencies below. The route guard (:mod:`api.core.guard`) calls this before the body is read."""
    actor = check_role(await run_in_threadpool(authenticate_request, request), role)
    request.state.actor = actor
    return actor


def current_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Actor:
    """The caller: the actor the route guard authenticated before the body was read, else
    (a route outside the guard) the bearer token's now. ``credentials`` puts the bearer scheme in OpenAPI."""
    actor = getattr(request.state, "actor", None)
    if isinstance(actor, Actor):
        return actor
    actor = authenticate_request(request)
    request.state.actor = actor
    return actor


CurrentUser = Annotated[Actor, Depends(current_user)]


def _require(role: str) -> Callable[[Actor], Actor]:
    def check(actor: CurrentUser) -> Actor:
        return check_role(actor, role)
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


def _context(request: Request, actor: Actor, if_match: str | None) -> WriteContext:
    return WriteContext(actor=actor, request_id=getattr(request.state, "request_id", None), method=request.method,
                        path=request.url.path, if_match=if_match, reject_status=status_for)


def operator_write(request: Request, actor: Operator, if_match: IfMatch = None) -> WriteContext:
    return _context(request, actor, if_match)


def admin_write(request: Request, actor: Admin) -> WriteContext:
    return _context(request, actor, None)


OperatorWrite = Annotated[WriteContext, Depends(operator_write)]
AdminWrite = Annotated[WriteContext, Depends(admin_write)]


def with_status(ctx: WriteContext, status: int) -> WriteContext:
    return replace(ctx, status=status)


class Paging:
    def __init__(
        self,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")] = 100,
        offset: Annotated[int, Query(ge=0, le=2**31 - 1, description="items to skip")] = 0,
    ):
        self.limit, self.offset = limit, offset


PagingDep = Annotated[Paging, Depends()]


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
