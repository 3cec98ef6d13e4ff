"""Dependencies shared by the routers: the store session, the caller, paging, ETags.

``SessionDep`` is a SQLAlchemy session for the request; ``CurrentUser`` is the
:class:`controller.service.Actor` behind the bearer token (401 without a valid
one); ``Viewer``, ``Operator`` and ``Admin`` add the role check (403). Writes
take ``OperatorWrite`` or ``AdminWrite``: a :class:`controller.service.WriteContext`
carrying the actor, the request id and the ``If-Match`` header, for the
service's revision check and the audit log. Nothing here builds SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Annotated

from fastapi import Depends, Header, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.core.problems import ProblemException, status_for
from controller import service
from controller.service import Actor, Page, WriteContext
from controller.settings import Settings
from controller.store.db import Database
from controller.store.repo import Revision

__all__ = [
    "Admin", "AdminWrite", "CurrentUser", "IfMatch", "MAX_LIMIT", "OperatorWrite", "Paging", "SessionDep",
    "Viewer", "page_body", "set_etag",
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


def current_user(
    request: Request,
    db: Annotated[Database, Depends(get_database)],
    settings: Annotated[Settings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Actor:
    challenge = {"WWW-Authenticate": 'Bearer realm="loom"'}
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ProblemException(401, "Unauthorized", "send 'Authorization: Bearer <token>'", kind="unauthorized",
                               headers=challenge)
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    with db.session() as session:
        actor = service.authenticate(credentials.credentials, session=session, admin_token=admin)
    if actor is None:
        raise ProblemException(401, "Unauthorized", "the token is unknown, expired or revoked", kind="unauthorized",
                               headers={"WWW-Authenticate": 'Bearer realm="loom", error="invalid_token"'})
    request.state.actor = actor
    return actor


CurrentUser = Annotated[Actor, Depends(current_user)]


def _require(role: str) -> Callable[[Actor], Actor]:
    def check(actor: CurrentUser) -> Actor:
        if not service.role_allows(actor.role, role):
            raise ProblemException(403, "Forbidden", f"this needs the {role} role; the token has {actor.role}",
                                   kind="forbidden")
        return actor
    check.__name__ = f"require_{role}"
    return check


Viewer = Annotated[Actor, Depends(_require("viewer"))]
Operator = Annotated[Actor, Depends(_require("operator"))]
Admin = Annotated[Actor, Depends(_require("admin"))]

IfMatch = Annotated[str | None, Header(
    alias="If-Match", description='the revision the write is based on, as its ETag ("7") or *; stale -> 409')]


def _context(request: Request, actor: Actor, if_match: str | None) -> WriteContext:
    return WriteContext(actor=actor, request_id=getattr(request.state, "request_id", None), method=request.method,
                        path=request.url.path, if_match=if_match, reject_status=status_for,
                        client=request.client.host if request.client else None)


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
