"""``/v1/audit``: every write attempt and every refused request (401, 403, a
malformed request's 422; rate-limited, the rest summarized), newest first: who,
from which client address, when, request id, method, path, outcome (accepted,
unchanged, rejected) and the resulting revision."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response

from api.core.deps import PagingDep, SessionDep, Viewer, page_body
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.core.schemas import AuditPublic, Page
from controller import service

router = APIRouter(prefix="/v1/audit", tags=["audit"], route_class=GuardedRoute)


@router.get("", response_model=Page[AuditPublic], summary="The audit log, newest first",
            responses=error_responses(401, 403, 422))
def list_audit(
    request: Request,
    response: Response,
    session: SessionDep,
    _actor: Viewer,
    paging: PagingDep,
    actor: Annotated[str | None, Query(description="the token name that wrote")] = None,
    outcome: Annotated[Literal["accepted", "unchanged", "rejected"] | None, Query()] = None,
    revision: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="writes that made this revision")] = None,
) -> Any:
    page = service.list_audit(session=session, limit=paging.limit, offset=paging.offset, actor=actor,
                              outcome=outcome, revision=revision)
    items = [{**e.__dict__} for e in page.items]
    return page_body(request, response, page, items)
