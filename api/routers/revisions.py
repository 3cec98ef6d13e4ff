"""``/v1/revisions``: the immutable snapshots of the intent, newest first; one
revision's metadata and document; and the diff between two revisions (objects
added, removed and changed, by kind and name)."""

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Request, Response

from api.core.deps import PagingDep, SessionDep, Viewer, page_body, set_etag
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.core.schemas import Page, RevisionDiff, RevisionPublic
from api.routers.intent import _CONTENT, revision_response
from controller import service
from controller.model import Intent
from controller.store.repo import Revision
from controller.store.snapshot import Snapshot

router = APIRouter(prefix="/v1/revisions", tags=["revisions"], route_class=GuardedRoute)
RevisionId = Annotated[int, Path(ge=1, le=2**31 - 1, description="revision id (1, 2, 3...)")]


def public(rev: Revision) -> dict[str, Any]:
    return {"id": rev.id, "parent": rev.parent, "hash": rev.hash, "created_at": rev.created_at,
            "author": rev.author, "message": rev.message, "request_id": rev.request_id, "proposal": rev.proposal}


@router.get("", response_model=Page[RevisionPublic], summary="List revisions, newest first",
            responses=error_responses(401, 403, 422))
def list_revisions(request: Request, response: Response, session: SessionDep, _actor: Viewer,
                   paging: PagingDep) -> Any:
    page = service.list_revisions(session=session, limit=paging.limit, offset=paging.offset)
    set_etag(response, page.revision)
    return page_body(request, response, page, [public(r) for r in page.items])


@router.get("/{revision}", response_model=RevisionPublic, summary="One revision's metadata",
            responses=error_responses(401, 403, 404, 422))
def get_revision(response: Response, session: SessionDep, _actor: Viewer, revision: RevisionId) -> Any:
    rev = service.get_revision(revision, session=session)
    set_etag(response, rev)
    return public(rev)


@router.get("/{revision}/intent", response_model=Intent, summary="One revision's intent document (JSON or YAML)",
            responses={200: {"content": _CONTENT}, **error_responses(401, 403, 404, 422)})
async def get_revision_intent(request: Request, _actor: Viewer, revision: RevisionId,
                              accept: Annotated[str | None, Header(include_in_schema=False)] = None) -> Response:
    database = request.app.state.database

    def read() -> tuple[int, Snapshot]:
        with database.session() as session:
            rev, snap = service.revision_snapshot(revision, session=session)
        return rev.id, snap

    return await revision_response(request, read, accept)


@router.get("/{a}/diff/{b}", response_model=RevisionDiff, response_model_exclude_none=True,
            summary="What changed from revision a to revision b",
            responses=error_responses(401, 403, 404, 422))
def diff(session: SessionDep, _actor: Viewer, a: RevisionId, b: RevisionId) -> Any:
    return service.diff_revisions(a, b, session=session)
