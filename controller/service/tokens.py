"""Tokens: bearer credentials with a role, issued, listed, renamed, revoked and checked. A token's
secret (``loom_<id>_<random>``) is shown once and stored as a SHA-256 hash; the last active admin
token is kept (:class:`LastAdmin`) unless the caller, the CLI on the store itself, says otherwise.
Every change of a token is audited in its own transaction; a refused one as rejected.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy.orm import Session

from controller.model.errors import Conflict, IntentError, InvalidRequest, LastAdmin, LoomError
from controller.model.tokens import token_name_problem
from controller.service.audit import audit_rejected
from controller.service.context import Actor, WriteContext, utc_now
from controller.store import repo
from controller.store.db import retrying, write_transaction
from controller.store.models import ROLES
from controller.store.repo import Token

__all__ = ["TOKEN_PREFIX", "authenticate", "authenticate_until", "bootstrap_admin", "create_token", "get_token",
           "list_tokens", "revoke_token", "update_token"]

TOKEN_PREFIX = "loom"
T = TypeVar("T")


def _hash_secret(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_secret() -> tuple[str, str]:
    token_id = secrets.token_hex(6)
    return token_id, f"{TOKEN_PREFIX}_{token_id}_{secrets.token_urlsafe(32)}"


def _check_token_name(name: str) -> None:
    problem = token_name_problem(name)
    if problem:
        raise InvalidRequest([IntentError("name", problem)])


def _audit_token(ctx: WriteContext, action: str, detail: str, *, session: Session, now: datetime) -> None:
    repo.add_audit(session=session, now=now, actor=ctx.actor.name, token_id=ctx.actor.token_id, client=ctx.client,
                   request_id=ctx.request_id, method=ctx.method, path=ctx.path, action=action, outcome="accepted",
                   status=ctx.status, detail=detail)


def _token_write(action: str, run: Callable[[], T], *, session: Session, ctx: WriteContext) -> T:
    """``run`` (one write transaction) retried on contention; a refusal is audited as rejected."""
    try:
        return retrying(run)
    except LoomError as exc:
        audit_rejected(exc, session=session, ctx=ctx, action=action)
        raise


def create_token(name: str, role: str, *, session: Session, ctx: WriteContext,
                 expires_at: datetime | None = None) -> tuple[Token, str]:
    """Issue a token; returns it and its secret (shown once, stored hashed). Raises
    :class:`InvalidRequest` for a name that breaks :func:`token_name_problem`'s rules and
    :class:`Conflict` for a name an unrevoked token has."""
    if role not in ROLES:
        raise Conflict(f"unknown role {role!r} (expected one of {', '.join(ROLES)})")
    now = utc_now()
    if expires_at is not None:
        expires_at = expires_at if expires_at.tzinfo else expires_at.replace(tzinfo=UTC)
        if expires_at <= now:
            raise Conflict("expires_at is in the past")
    token_id, secret = _new_secret()

    def run() -> Token:
        _check_token_name(name)
        with write_transaction(session):
            token = repo.add_token(session=session, token_id=token_id, name=name, role=role,
                                   secret_hash=_hash_secret(secret), created_by=ctx.actor.name, now=now,
                                   expires_at=expires_at)
            _audit_token(ctx, "token.create", f"token {token_id} ({name}, {role})", session=session, now=now)
        return token

    return _token_write("token.create", run, session=session, ctx=ctx), secret


def get_token(token_id: str, *, session: Session) -> Token:
    return repo.get_token(token_id, session=session)


def list_tokens(*, session: Session, include_revoked: bool = True) -> list[Token]:
    return repo.list_tokens(session=session, include_revoked=include_revoked)


def _keep_an_admin(token: Token, what: str, *, session: Session, now: datetime) -> None:
    """:class:`LastAdmin` when ``token`` is the only active admin token. Run inside the write
    transaction: :func:`repo.active_admins` locks them, so two concurrent writes cannot each
    leave the other's token as the last one and then remove it too."""
    admins = repo.active_admins(session=session, now=now)
    if token.role == "admin" and token.active(now) and all(a.id == token.id for a in admins):
        raise LastAdmin(f"token {token.id} ({token.name}) is the last active admin token: {what} it would leave "
                        "nobody to manage tokens over the API; issue another admin token first")


def revoke_token(token_id: str, *, session: Session, ctx: WriteContext, keep_last_admin: bool = True) -> Token:
    """Revoke a token (it stays listed). With ``keep_last_admin`` (the API's way) the last active
    admin token is refused (:class:`LastAdmin`); the CLI, which works on the store itself and can
    bootstrap a new admin, may pass False."""

    def run() -> Token:
        with write_transaction(session):
            now = utc_now()
            current = repo.get_token(token_id, session=session)
            if keep_last_admin:
                _keep_an_admin(current, "revoking", session=session, now=now)
            token = repo.revoke_token(token_id, session=session, now=now)
            _audit_token(ctx, "token.revoke", f"token {token_id} ({token.name})", session=session, now=now)
        return token

    return _token_write("token.revoke", run, session=session, ctx=ctx)


def update_token(token_id: str, *, session: Session, ctx: WriteContext, name: str | None = None,
                 role: str | None = None, keep_last_admin: bool = True) -> Token:
    """Rename a token or change its role. Demoting the last active admin token is :class:`LastAdmin`
    (with ``keep_last_admin``); names follow :func:`create_token`'s rules."""
    if role is not None and role not in ROLES:
        raise Conflict(f"unknown role {role!r} (expected one of {', '.join(ROLES)})")

    def run() -> Token:
        if name is not None:
            _check_token_name(name)
        with write_transaction(session):
            now = utc_now()
            current = repo.get_token(token_id, session=session)
            if keep_last_admin and role is not None and role != "admin":
                _keep_an_admin(current, f"making {role} of", session=session, now=now)
            token = repo.update_token(token_id, session=session, name=name, role=role)
            changes = [f"{k} {getattr(current, k)!r} -> {getattr(token, k)!r}" for k in ("name", "role")
                       if getattr(current, k) != getattr(token, k)]
            _audit_token(ctx, "token.update", f"token {token_id}: {', '.join(changes) or 'unchanged'}",
                         session=session, now=now)
        return token

    return _token_write("token.update", run, session=session, ctx=ctx)


def bootstrap_admin(*, session: Session, ctx: WriteContext, name: str = "bootstrap-admin") -> tuple[Token, str] | None:
    """Create the first admin token, only if no active admin token exists (named ``name``, or
    ``name-2``... when an unrevoked token, an expired one say, still has that name)."""
    with write_transaction(session):
        exists = repo.count_active_tokens(session=session, role="admin", now=utc_now()) > 0
        taken = {t.name for t in repo.list_tokens(session=session, include_revoked=False)}
    if exists:
        return None
    free = next(n for n in (name, *(f"{name}-{i}" for i in range(2, len(taken) + 3))) if n not in taken)
    return create_token(free, "admin", session=session, ctx=ctx)


def authenticate(bearer: str, *, session: Session, admin_token: str | None = None) -> Actor | None:
    """The actor a bearer token stands for, or ``None`` (unknown, revoked, expired)."""
    return authenticate_until(bearer, session=session, admin_token=admin_token)[0]


def authenticate_until(bearer: str, *, session: Session, admin_token: str | None = None
                       ) -> tuple[Actor | None, datetime | None]:
    """:func:`authenticate`, and when the token expires (``None``: no expiry, or no actor)."""
    if admin_token and hmac.compare_digest(bearer.encode(), admin_token.encode()):
        return Actor("admin (LOOM_ADMIN_TOKEN)", "admin"), None
    parts = bearer.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1]:
        return None, None
    token = repo.find_token(parts[1], session=session)
    if token is None or not hmac.compare_digest(token.secret_hash, _hash_secret(bearer)):
        return None, None
    if not token.active(utc_now()):
        return None, None
    return Actor(token.name, token.role, token.id), token.expires_at
