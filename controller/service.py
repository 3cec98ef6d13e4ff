"""The controller's operations on the revisioned intent: what the API routers
and the CLI call.

Every write follows one path (:func:`apply_edit`): in one transaction, read the
head revision, check the caller's ``If-Match``, apply the edit to a copy of the
head document, validate the WHOLE resulting document
(:func:`controller.model.intent.validate_intent`), store a new revision only if the
content hash changed, and write the audit entry. A failed or invalid write
leaves no revision; it is still audited, as rejected, in its own transaction.
Tokens (bearer credentials with a role) are issued, listed, revoked and checked
here too; their secrets are shown once and stored as SHA-256 hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.errors import (
    Conflict,
    IntentError,
    InvalidIntent,
    InvalidRequest,
    LastAdmin,
    LoomError,
    NotFound,
    StaleRevision,
    StoreContention,
    StoreUnavailable,
)
from controller.model.intent import format_loc, load_intent, validate_intent
from controller.model.tokens import token_name_problem
from controller.store import objects, repo
from controller.store.db import RetryOptions, lock_revisions, retrying, write_transaction
from controller.store.models import ROLES
from controller.store.repo import ConcurrentWrite, Revision, Token

__all__ = [
    "EXAMPLE_INTENT",
    "ROLES",
    "Actor",
    "NoIntent",
    "Page",
    "Refusal",
    "WriteContext",
    "WriteResult",
    "apply_edit",
    "audit_refusals",
    "authenticate",
    "bootstrap_admin",
    "create_object",
    "create_token",
    "delete_object",
    "diff_revisions",
    "get_intent",
    "get_object",
    "get_token",
    "head",
    "list_audit",
    "list_objects",
    "list_revisions",
    "list_tokens",
    "load_example",
    "replace_intent",
    "revoke_token",
    "role_allows",
    "update_object",
    "update_token",
]

EXAMPLE_INTENT = Path(__file__).parent / "examples" / "dc1.yaml"
_RANK = {r: i for i, r in enumerate(ROLES)}
Doc = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger("loom.service")


class NoIntent(Conflict):
    """An object write on an empty store: there is no intent to edit yet."""


def _now() -> datetime:
    return datetime.now(UTC)


def role_allows(role: str, needed: str) -> bool:
    """``viewer`` < ``operator`` < ``admin``."""
    return _RANK.get(role, -1) >= _RANK[needed]


@dataclass(frozen=True)
class Actor:
    """Who is calling: a token's name and id (``None`` for settings or CLI), and its role."""

    name: str
    role: str
    token_id: str | None = None


#: The audit status of a rejected write whose caller answers no HTTP (no ``reject_status``).
NO_STATUS = 0


@dataclass(frozen=True)
class WriteContext:
    """Where a write comes from, for ``If-Match`` and the audit log.

    ``status`` is what the caller answers when the write is accepted, and
    ``reject_status`` what it answers for an error (the API passes
    :func:`api.core.problems.status_for`): the audit log records both, and the
    controller itself decides no HTTP status.
    """

    actor: Actor
    request_id: str | None = None
    method: str = "CLI"
    path: str = ""
    if_match: str | None = None
    message: str = ""
    status: int = 200
    reject_status: Callable[[LoomError], int] | None = None
    client: str | None = None  # the caller's address (HTTP), for the audit log

    def rejected_status(self, exc: LoomError) -> int:
        """The audit status of a write rejected with ``exc``."""
        return self.reject_status(exc) if self.reject_status is not None else NO_STATUS


@dataclass(frozen=True)
class WriteResult:
    revision: Revision
    changed: bool
    document: Doc
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int
    limit: int
    offset: int
    revision: Revision | None = None


# -- reading ------------------------------------------------------------------
def head(*, session: Session) -> Revision | None:
    return repo.head_revision(session=session)


def get_intent(*, session: Session, revision: int | None = None) -> tuple[Revision, Doc]:
    """The document of ``revision`` (the head by default); :class:`NotFound` on an empty store."""
    if revision is None:
        rev = repo.head_revision(session=session)
        if rev is None:
            raise NotFound("the store holds no intent yet: PUT /v1/intent (or loom serve --example)")
    else:
        rev = repo.get_revision(revision, session=session)
    return rev, repo.revision_document(rev.id, session=session)


def list_objects(kind: str, *, session: Session, filters: dict[str, str | None], limit: int,
                 offset: int) -> Page:
    coll = objects.collection(kind)
    rev = repo.head_revision(session=session)
    doc = repo.revision_document(rev.id, session=session) if rev else None
    items = objects.select_elements(coll, doc, filters)
    page = [_public(coll, e) for e in items[offset:offset + limit]]
    return Page(page, len(items), limit, offset, rev)


def get_object(kind: str, ident: str, *, session: Session) -> tuple[Doc, Revision]:
    coll = objects.collection(kind)
    rev, doc = get_intent(session=session)
    _, element = objects.find_element(coll, doc, objects.parse_object_id(coll, ident))
    return _public(coll, element), rev


def _public(coll: objects.Collection, element: Doc) -> Doc:
    return {"id": coll.identity(element), **element}


def list_revisions(*, session: Session, limit: int, offset: int) -> Page:
    items, total = repo.list_revisions(session=session, limit=limit, offset=offset)
    return Page(items, total, limit, offset, repo.head_revision(session=session))


def diff_revisions(a: int, b: int, *, session: Session) -> Doc:
    """Objects added, removed and changed from revision ``a`` to revision ``b``."""
    old = repo.revision_document(a, session=session)
    new = repo.revision_document(b, session=session)
    return {"from": a, "to": b, **objects.diff_documents(old, new)}


def list_audit(*, session: Session, limit: int, offset: int, actor: str | None = None,
               outcome: str | None = None, revision: int | None = None) -> Page:
    items, total = repo.list_audit(session=session, limit=limit, offset=offset, actor=actor, outcome=outcome,
                                   revision=revision)
    return Page(items, total, limit, offset)


# -- writing ------------------------------------------------------------------
def _check_if_match(if_match: str | None, rev: Revision | None) -> None:
    if if_match is None or not if_match.strip():
        return
    current = str(rev.id) if rev else "0"
    wanted = [t.strip().removeprefix("W/").strip('"') for t in if_match.split(",")]
    if "*" in wanted and rev is not None:
        return
    if current not in wanted:
        raise StaleRevision(if_match.strip(), f'"{current}"' if rev else None)


def _validated(document: Any) -> Intent:
    """:func:`validate_intent`, with any shape error that slipped past its first
    pass (pydantic's, when the whole Intent is built) reported as located errors too."""
    try:
        return validate_intent(document)
    except ValidationError as exc:
        raise InvalidIntent([IntentError(format_loc(list(e["loc"])), str(e["msg"])) for e in exc.errors()]) from None


def apply_edit(edit: Callable[[Doc | None], Doc], *, session: Session, ctx: WriteContext, action: str,
               retry: RetryOptions = RetryOptions()) -> WriteResult:
    """Apply ``edit`` (head document, or ``None`` on an empty store -> new
    document) as one transaction: If-Match, whole-document validation, a new
    revision if the content hash changed, and the audit entry.

    Raises :class:`StaleRevision` (If-Match is not the head), :class:`InvalidIntent`
    (every located error of the resulting document), or what ``edit`` raises
    (:class:`NotFound`, :class:`Conflict`). Writers of the revision chain queue on
    :func:`lock_revisions`; a write that still loses a race (a serialization failure, another
    writer's revision first) runs again on the new head after a jittered back-off (``retry``),
    where a stale If-Match is refused as ever. Once the attempts are used up it is
    :class:`StoreContention`; a store that does not answer is :class:`StoreUnavailable`.
    """

    def attempt() -> WriteResult:
        with write_transaction(session):
            lock_revisions(session)
            rev = repo.head_revision(session=session)
            _check_if_match(ctx.if_match, rev)
            base = repo.revision_document(rev.id, session=session) if rev else None
            intent = _validated(edit(base))
            doc = intent.to_document()
            now = _now()
            changed = rev is None or rev.hash != intent.content_hash
            if changed:
                rev = repo.add_revision(session=session, document=doc, content_hash=intent.content_hash,
                                        parent=rev.id if rev else None, author=ctx.actor.name,
                                        message=ctx.message, request_id=ctx.request_id, now=now)
            assert rev is not None
            repo.add_audit(session=session, now=now, actor=ctx.actor.name, token_id=ctx.actor.token_id,
                           client=ctx.client, request_id=ctx.request_id, method=ctx.method, path=ctx.path,
                           action=action, outcome="accepted" if changed else "unchanged", status=ctx.status,
                           revision=rev.id, detail=ctx.message)
        return WriteResult(rev, changed, doc)

    try:
        return retrying(attempt, retry_on=(StoreContention, ConcurrentWrite), options=retry)
    except ConcurrentWrite as exc:  # every attempt lost: the store is too busy for this write now
        busy = StoreContention(f"{exc} ({retry.attempts} attempts)")
        _audit_rejected(busy, session=session, ctx=ctx, action=action)
        raise busy from exc
    except LoomError as exc:
        _audit_rejected(exc, session=session, ctx=ctx, action=action)
        raise


def _audit_rejected(exc: LoomError, *, session: Session, ctx: WriteContext, action: str) -> None:
    """Record a rejected write (in its own transaction); a store that cannot take the entry either
    is logged, and the caller's error stands."""
    detail = str(exc)
    if isinstance(exc, InvalidIntent):
        detail = json.dumps([e.as_dict() for e in exc.errors][:50])
    try:
        with write_transaction(session):
            repo.add_audit(session=session, now=_now(), actor=ctx.actor.name, token_id=ctx.actor.token_id,
                           client=ctx.client, request_id=ctx.request_id, method=ctx.method, path=ctx.path,
                           action=action, outcome="rejected", status=ctx.rejected_status(exc),
                           detail=detail[:4000])
    except StoreUnavailable as lost:
        log.warning("the rejected write %s (%s) is not in the audit log: %s", action, type(exc).__name__, lost)


@dataclass(frozen=True)
class Refusal:
    """A request refused before it did anything (401, 403, a malformed request's 422), for the audit
    log: who (a token's name, else ``anonymous``) from which ``client`` address, what (``method``,
    ``path``) and why (``detail``). A ``summary`` stands for ``count`` refusals not recorded one by one."""

    actor: str
    token_id: str | None
    client: str | None
    request_id: str | None
    method: str
    path: str
    status: int
    detail: str
    count: int = 1
    summary: bool = False


def audit_refusals(refusals: list[Refusal], *, session: Session) -> None:
    """Record refused requests (action ``request.refused``, or ``request.refused.summary`` for a
    summary; outcome ``rejected``) in one transaction."""
    if not refusals:
        return
    with write_transaction(session):
        now = _now()
        for r in refusals:
            repo.add_audit(session=session, now=now, actor=r.actor, token_id=r.token_id, client=r.client,
                           request_id=r.request_id, method=r.method, path=r.path,
                           action="request.refused.summary" if r.summary else "request.refused",
                           outcome="rejected", status=r.status, detail=r.detail[:4000])


def replace_intent(document: Any, *, session: Session, ctx: WriteContext) -> WriteResult:
    """Replace the whole intent; equal to the head = no new revision."""
    return apply_edit(lambda _base: document, session=session, ctx=ctx, action="intent.replace")


def _require(base: Doc | None) -> Doc:
    if base is None:
        raise NoIntent("the store holds no intent yet: PUT /v1/intent first")
    return base


def create_object(kind: str, element: Doc, *, session: Session, ctx: WriteContext) -> tuple[Doc, WriteResult]:
    coll = objects.collection(kind)
    ident = coll.identity(element)
    result = apply_edit(lambda base: objects.insert_element(coll, _require(base), element), session=session,
                        ctx=ctx, action=f"{coll.kind}.create")
    _, created = objects.find_element(coll, result.document, ident)
    return _public(coll, created), result


def update_object(kind: str, raw_ident: str, patch: Doc, *, session: Session,
                  ctx: WriteContext) -> tuple[Doc, WriteResult]:
    coll = objects.collection(kind)
    ident = objects.parse_object_id(coll, raw_ident)
    renamed: list[str] = []

    def edit(base: Doc | None) -> Doc:
        if base is None:
            raise NotFound(f"{coll.kind.replace('_', ' ')} {ident!r} does not exist")
        out, new_ident = objects.update_element(coll, base, ident, patch)
        renamed.append(new_ident)
        return out

    result = apply_edit(edit, session=session, ctx=ctx, action=f"{coll.kind}.update")
    _, updated = objects.find_element(coll, result.document, renamed[-1])
    return _public(coll, updated), result


def delete_object(kind: str, raw_ident: str, *, session: Session, ctx: WriteContext) -> WriteResult:
    coll = objects.collection(kind)
    ident = objects.parse_object_id(coll, raw_ident)

    def edit(base: Doc | None) -> Doc:
        if base is None:
            raise NotFound(f"{coll.kind.replace('_', ' ')} {ident!r} does not exist")
        return objects.delete_element(coll, base, ident)

    return apply_edit(edit, session=session, ctx=ctx, action=f"{coll.kind}.delete")


def load_example(*, session: Session, ctx: WriteContext, path: Path = EXAMPLE_INTENT) -> WriteResult | None:
    """Store the example fabric as the first revision, if the store is empty."""
    if repo.head_revision(session=session) is not None:
        session.rollback()
        return None
    document = load_intent(path).to_document()
    ctx = replace(ctx, if_match='"0"', message=ctx.message or f"example fabric {path.name}", status=200)
    try:
        return replace_intent(document, session=session, ctx=ctx)
    except StaleRevision:
        return None  # someone stored a first revision meanwhile


# -- tokens -------------------------------------------------------------------
TOKEN_PREFIX = "loom"


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
        _audit_rejected(exc, session=session, ctx=ctx, action=action)
        raise


def create_token(name: str, role: str, *, session: Session, ctx: WriteContext,
                 expires_at: datetime | None = None) -> tuple[Token, str]:
    """Issue a token; returns it and its secret (shown once, stored hashed). Raises
    :class:`InvalidRequest` for a name that breaks :func:`token_name_problem`'s rules and
    :class:`Conflict` for a name an unrevoked token has."""
    if role not in ROLES:
        raise Conflict(f"unknown role {role!r} (expected one of {', '.join(ROLES)})")
    now = _now()
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
            now = _now()
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
            now = _now()
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
        exists = repo.count_active_tokens(session=session, role="admin", now=_now()) > 0
        taken = {t.name for t in repo.list_tokens(session=session, include_revoked=False)}
    if exists:
        return None
    free = next(n for n in (name, *(f"{name}-{i}" for i in range(2, len(taken) + 3))) if n not in taken)
    return create_token(free, "admin", session=session, ctx=ctx)


def authenticate(bearer: str, *, session: Session, admin_token: str | None = None) -> Actor | None:
    """The actor a bearer token stands for, or ``None`` (unknown, revoked, expired)."""
    if admin_token and hmac.compare_digest(bearer.encode(), admin_token.encode()):
        return Actor("admin (LOOM_ADMIN_TOKEN)", "admin")
    parts = bearer.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1]:
        return None
    token = repo.find_token(parts[1], session=session)
    if token is None or not hmac.compare_digest(token.secret_hash, _hash_secret(bearer)):
        return None
    if not token.active(_now()):
        return None
    return Actor(token.name, token.role, token.id)
