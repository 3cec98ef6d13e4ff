"""``/v1/tokens`` (admin only): issue bearer tokens with a role and an optional
expiry (the secret is shown once), list them, read one, rename one or change its
role, revoke one. Names are printable and unique among unrevoked tokens (422,
409); the last active admin token can be neither revoked nor demoted (409
``last-admin``), so the API cannot lock every admin out."""

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from api.core.deps import Admin, AdminWrite, SessionDep, with_status
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from api.core.schemas import TokenCreate, TokenCreated, TokenPublic, TokenUpdate
from controller import service
from controller.store.repo import Token

router = APIRouter(prefix="/v1/tokens", tags=["tokens"], route_class=GuardedRoute)
TokenId = Annotated[str, Path(min_length=1, max_length=32, description="the token's id (loom_<id>_...)")]


def public(token: Token) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "role": token.role, "created_at": token.created_at,
            "created_by": token.created_by, "expires_at": token.expires_at, "revoked_at": token.revoked_at,
            "active": token.active(datetime.now(UTC))}


@router.get("", response_model=list[TokenPublic], summary="List tokens (never their secrets)",
            responses=error_responses(401, 403))
def list_tokens(session: SessionDep, _actor: Admin) -> Any:
    return [public(t) for t in service.list_tokens(session=session)]


@router.post("", status_code=201, response_model=TokenCreated, summary="Issue a token; its secret is shown once",
             responses=error_responses(401, 403, 409, 422))
def create_token(response: Response, session: SessionDep, ctx: AdminWrite, body: TokenCreate) -> Any:
    expires = None
    if body.expires_in_seconds is not None:
        expires = datetime.now(UTC) + timedelta(seconds=body.expires_in_seconds)
    token, secret = service.create_token(body.name, body.role, session=session, ctx=with_status(ctx, 201),
                                         expires_at=expires)
    response.headers["Location"] = f"/v1/tokens/{token.id}"
    return {**public(token), "token": secret}


@router.get("/{token_id}", response_model=TokenPublic, summary="One token", responses=error_responses(401, 403, 404))
def get_token(session: SessionDep, _actor: Admin, token_id: TokenId) -> Any:
    return public(service.get_token(token_id, session=session))


@router.patch("/{token_id}", response_model=TokenPublic, summary="Rename a token or change its role",
              responses=error_responses(401, 403, 404, 409, 422))
def update_token(request: Request, session: SessionDep, ctx: AdminWrite, token_id: TokenId, body: TokenUpdate) -> Any:
    token = service.update_token(token_id, session=session, ctx=ctx, name=body.name, role=body.role)
    request.app.state.token_cache.clear()  # a demotion counts here at once; other replicas within the cache period
    return public(token)


@router.delete("/{token_id}", response_model=TokenPublic, summary="Revoke a token (it stays listed)",
               responses=error_responses(401, 403, 404, 409))
def revoke_token(request: Request, session: SessionDep, ctx: AdminWrite, token_id: TokenId) -> Any:
    token = service.revoke_token(token_id, session=session, ctx=ctx)
    request.app.state.token_cache.clear()  # here at once; other replicas within Settings.token_cache_s
    return public(token)
