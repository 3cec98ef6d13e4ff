"""Repository functions: every query the controller makes against the store.

Each function takes the SQLAlchemy session as the keyword ``session`` and
returns plain frozen records (:class:`Revision`, :class:`Token`,
:class:`AuditEntry`), never ORM rows, so nothing above this layer builds SQL or
holds a lazy-loading object. Transactions belong to the caller
(:func:`controller.store.db.write_transaction`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.addressing import Allocation, allocate
from controller.model.documents.base import JsonObject
from controller.model.errors import Conflict, NotFound
from controller.store import content
from controller.store.content import ConcurrentWrite, WriteStats
from controller.store.models import AuditRow, RevisionRow, TokenRow
from controller.store.snapshot import Snapshot

__all__ = [
    "AuditEntry",
    "ConcurrentWrite",
    "Revision",
    "Token",
    "add_audit",
    "add_intent",
    "add_revision",
    "active_admins",
    "add_snapshot",
    "add_token",
    "count_active_tokens",
    "find_token",
    "get_revision",
    "get_token",
    "fold_proposal",
    "head_ref",
    "head_revision",
    "list_audit",
    "list_revisions",
    "list_tokens",
    "revision_document",
    "revision_identity",
    "revision_intent",
    "revision_snapshot",
    "revoke_token",
    "tail_revision",
    "update_token",
    "utc",
]


def utc(dt: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes: they were stored in UTC."""
    if dt is None:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


@dataclass(frozen=True)
class Revision:
    id: int
    parent: int | None
    hash: str
    created_at: datetime
    author: str
    message: str
    request_id: str | None
    proposal: bool = False  # a change's proposed intent, not (yet) on the head's line

    @classmethod
    def of(cls, row: RevisionRow) -> Revision:
        return cls(row.id, row.parent_id, row.hash, utc(row.created_at) or row.created_at, row.author,
                   row.message, row.request_id, bool(row.proposal))


@dataclass(frozen=True)
class Token:
    id: str
    name: str
    role: str
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    secret_hash: str

    @classmethod
    def of(cls, row: TokenRow) -> Token:
        return cls(row.id, row.name, row.role, utc(row.created_at) or row.created_at, row.created_by,
                   utc(row.expires_at), utc(row.revoked_at), row.secret_hash)

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    actor: str
    token_id: str | None
    request_id: str | None
    method: str
    path: str
    action: str
    outcome: str
    status: int
    revision: int | None
    detail: str
    client: str | None = None

    @classmethod
    def of(cls, row: AuditRow) -> AuditEntry:
        return cls(row.id, utc(row.at) or row.at, row.actor, row.token_id, row.request_id, row.method, row.path,
                   row.action, row.outcome, row.status, row.revision_id, row.detail, row.client)


# -- revisions ----------------------------------------------------------------
def head_revision(*, session: Session) -> Revision | None:
    """The head: the newest revision that is not a change's proposal (what the intent is now)."""
    row = session.scalars(select(RevisionRow).where(RevisionRow.proposal.is_(False))
                          .order_by(RevisionRow.id.desc()).limit(1)).first()
    return Revision.of(row) if row else None


def tail_revision(*, session: Session) -> Revision | None:
    """The newest revision of any kind: the one the next revision is stored after (``tail + 1``)."""
    row = session.scalars(select(RevisionRow).order_by(RevisionRow.id.desc()).limit(1)).first()
    return Revision.of(row) if row else None


def fold_proposal(rev_id: int, *, session: Session) -> None:
    """Proposal ``rev_id`` joins the head's line: it becomes the head when it is the newest on it."""
    session.execute(update(RevisionRow).where(RevisionRow.id == rev_id).values(proposal=False))
    content.remember(session, rev_id, revision_snapshot(rev_id, session=session))


def head_ref(conn: Connection) -> tuple[int, str] | None:
    """The head revision's id and content hash, in one light query (for reads on a bare connection)."""
    row = conn.execute(_HEAD).first()
    return (int(row[0]), str(row[1])) if row else None


_HEAD = (select(RevisionRow.id, RevisionRow.hash).where(RevisionRow.proposal.is_(False))
         .order_by(RevisionRow.id.desc()).limit(1))


def get_revision(rev_id: int, *, session: Session) -> Revision:
    row = session.get(RevisionRow, rev_id)
    if row is None:
        raise NotFound(f"revision {rev_id} does not exist")
    return Revision.of(row)


def revision_snapshot(rev_id: int, *, session: Session, content_hash: str | None = None) -> Snapshot:
    """Revision ``rev_id`` as a snapshot (shared and immutable: never change what it holds); from the
    store's cache when it is there. ``content_hash`` (when known) spares a query on a cache hit."""
    return content.load_snapshot(session.connection(), rev_id, content.cache_of(session), content_hash)


def revision_document(rev_id: int, *, session: Session) -> JsonObject:
    """Revision ``rev_id``'s document, a copy of the caller's own."""
    result: JsonObject = json.loads(revision_snapshot(rev_id, session=session).json())
    return result


def revision_intent(rev_id: int, *, session: Session) -> Intent:
    """Revision ``rev_id``'s intent (validated when it was written; shared, immutable)."""
    return revision_snapshot(rev_id, session=session).intent


def list_revisions(*, session: Session, limit: int, offset: int) -> tuple[list[Revision], int]:
    """Newest first, with the total count."""
    total = session.scalar(select(func.count()).select_from(RevisionRow)) or 0
    rows = session.scalars(select(RevisionRow).order_by(RevisionRow.id.desc()).limit(limit).offset(offset))
    return [Revision.of(r) for r in rows], total


def add_snapshot(
    *,
    session: Session,
    snapshot: Snapshot,
    parent: int | None,
    author: str,
    message: str = "",
    request_id: str | None = None,
    now: datetime,
    proposal: bool = False,
    pins_from: int | None = None,
) -> tuple[Revision, WriteStats]:
    """Store ``snapshot`` (made on ``parent``'s snapshot, or on none) as the child of ``parent``
    (id ``parent + 1``, the tail): only what changed. Raises :class:`ConcurrentWrite` when another
    transaction already did. The snapshot enters the cache if the transaction commits. A
    ``proposal`` (a change's proposed intent) does not move the head; its address allocation, like
    any revision's, keeps the slots of ``pins_from`` (the revision it was made on; ``parent`` by default)."""
    rev_id = (parent or 0) + 1
    pins = _allocation_pins(snapshot, pins_from if pins_from is not None else parent, session=session)
    written, stats = content.write_revision(
        session.connection(), snapshot, rev_id=rev_id, parent=parent, author=author, message=message,
        request_id=request_id, now=now, options=content.cache_of(session).options, pins=pins, proposal=proposal)
    content.remember(session, rev_id, written, head=not proposal)
    return Revision(rev_id, parent, written.hash, now, author, message, request_id, proposal), stats


def revision_allocation(snap: Snapshot) -> Allocation:
    """The whole address allocation of a stored revision's snapshot (its intent with its pins), made once."""
    key = f"allocation:{snap.pins.to_json() if snap.pins else ''}"  # a snapshot object may serve two revisions
    got = snap.memo.get(key)
    if got is None:
        got = snap.memo[key] = allocate(snap.intent, snap.pins)
    result: Allocation = got
    return result


def _allocation_pins(snap: Snapshot, parent: int | None, *, session: Session) -> Allocation:
    """The pins of ``snap``'s allocation as ``parent``'s child: the parent's links and devices keep their
    slots (:mod:`controller.model.addressing`), new ones are placed around them."""
    keep = revision_allocation(revision_snapshot(parent, session=session)) if parent is not None else None
    return allocate(snap.intent, keep).pins()


def revision_identity(rev_id: int, *, session: Session) -> str:
    """What revision ``rev_id`` plans as, whatever its number: its content hash and its address pins (a
    process that serves two stores, as tests do, must not take one store's revision 3 for the other's)."""
    snap = revision_snapshot(rev_id, session=session)
    pins = snap.pins.to_json() if snap.pins else ""
    return f"{snap.hash}:{hashlib.sha256(pins.encode()).hexdigest()[:16]}"


def revision_pins(rev_id: int, *, session: Session) -> Allocation:
    """Revision ``rev_id``'s address allocation pins (what :func:`controller.model.addressing.carry` takes)."""
    return revision_snapshot(rev_id, session=session).pins or Allocation()


def add_intent(
    *,
    session: Session,
    intent: Intent,
    parent: int | None,
    author: str,
    message: str = "",
    request_id: str | None = None,
    now: datetime,
    proposal: bool = False,
    pins_from: int | None = None,
) -> Revision:
    """Store ``intent`` (validated whole by the caller) as the child of ``parent`` (the tail): only
    what changed from ``parent``'s snapshot, which the next edit may prove its validity from."""
    base = revision_snapshot(parent, session=session) if parent is not None else None
    snap = Snapshot.from_intent(intent, base)
    return add_snapshot(session=session, snapshot=snap, parent=parent, author=author, message=message,
                        request_id=request_id, now=now, proposal=proposal, pins_from=pins_from)[0]


def add_revision(
    *,
    session: Session,
    document: dict[str, Any],
    content_hash: str,
    parent: int | None,
    author: str,
    message: str = "",
    request_id: str | None = None,
    now: datetime,
) -> Revision:
    """Store ``document`` (canonical and validated, with its content hash) as the child of ``parent``
    (id ``parent + 1``). Raises :class:`ConcurrentWrite` when another transaction already did."""
    base = revision_snapshot(parent, session=session) if parent is not None else None
    snap = Snapshot.from_document(document, base, content_hash=content_hash)
    return add_snapshot(session=session, snapshot=snap, parent=parent, author=author, message=message,
                        request_id=request_id, now=now)[0]


# -- tokens -------------------------------------------------------------------
def _live_name_taken(name: str, *, session: Session, other_than: str | None = None) -> Token | None:
    q = select(TokenRow).where(TokenRow.name == name, TokenRow.revoked_at.is_(None))
    if other_than is not None:
        q = q.where(TokenRow.id != other_than)
    row = session.scalars(q.limit(1)).first()
    return Token.of(row) if row else None


def _name_conflict(name: str, holder: Token | None) -> Conflict:
    who = f" ({holder.id})" if holder else ""
    return Conflict(f"a token named {name!r} exists already{who}: names of unrevoked tokens are unique")


def add_token(
    *,
    session: Session,
    token_id: str,
    name: str,
    role: str,
    secret_hash: str,
    created_by: str,
    now: datetime,
    expires_at: datetime | None = None,
) -> Token:
    """Store a token; :class:`Conflict` when an unrevoked token has its name (the unique index
    settles a race between two writers of the same name)."""
    holder = _live_name_taken(name, session=session)
    if holder is not None:
        raise _name_conflict(name, holder)
    row = TokenRow(id=token_id, name=name, role=role, secret_hash=secret_hash, created_at=now,
                   created_by=created_by, expires_at=expires_at)
    session.add(row)
    try:
        session.flush()
    except IntegrityError:
        raise _name_conflict(name, None) from None
    return Token.of(row)


def update_token(token_id: str, *, session: Session, name: str | None = None, role: str | None = None) -> Token:
    """Rename a token or change its role; :class:`NotFound`, or :class:`Conflict` for a revoked token
    or a name an unrevoked token has."""
    row = session.get(TokenRow, token_id)
    if row is None:
        raise NotFound(f"token {token_id!r} does not exist")
    if row.revoked_at is not None:
        raise Conflict(f"token {token_id!r} is revoked: it changes no more")
    if name is not None and name != row.name:
        holder = _live_name_taken(name, session=session, other_than=token_id)
        if holder is not None:
            raise _name_conflict(name, holder)
        row.name = name
    if role is not None:
        row.role = role
    try:
        session.flush()
    except IntegrityError:
        raise _name_conflict(name or row.name, None) from None
    return Token.of(row)


def active_admins(*, session: Session, now: datetime) -> list[Token]:
    """The active admin tokens, locked until the transaction ends (``FOR UPDATE`` on PostgreSQL; on
    SQLite the write transaction already excludes other writers), so a check of "is another admin
    left" cannot race a concurrent revocation or demotion."""
    q = select(TokenRow).where(
        TokenRow.role == "admin",
        TokenRow.revoked_at.is_(None),
        (TokenRow.expires_at.is_(None)) | (TokenRow.expires_at > now),
    ).order_by(TokenRow.id).with_for_update()
    return [Token.of(r) for r in session.scalars(q)]


def get_token(token_id: str, *, session: Session) -> Token:
    row = session.get(TokenRow, token_id)
    if row is None:
        raise NotFound(f"token {token_id!r} does not exist")
    return Token.of(row)


def find_token(token_id: str, *, session: Session) -> Token | None:
    row = session.get(TokenRow, token_id)
    return Token.of(row) if row else None


def list_tokens(*, session: Session, include_revoked: bool = True) -> list[Token]:
    q = select(TokenRow).order_by(TokenRow.created_at, TokenRow.id)
    if not include_revoked:
        q = q.where(TokenRow.revoked_at.is_(None))
    return [Token.of(r) for r in session.scalars(q)]


def count_active_tokens(*, session: Session, role: str, now: datetime) -> int:
    q = select(func.count()).select_from(TokenRow).where(
        TokenRow.role == role,
        TokenRow.revoked_at.is_(None),
        (TokenRow.expires_at.is_(None)) | (TokenRow.expires_at > now),
    )
    return session.scalar(q) or 0


def revoke_token(token_id: str, *, session: Session, now: datetime) -> Token:
    row = session.get(TokenRow, token_id)
    if row is None:
        raise NotFound(f"token {token_id!r} does not exist")
    if row.revoked_at is None:
        row.revoked_at = now
        session.flush()
    return Token.of(row)


# -- audit --------------------------------------------------------------------
def add_audit(
    *,
    session: Session,
    now: datetime,
    actor: str,
    token_id: str | None,
    request_id: str | None,
    method: str,
    path: str,
    action: str,
    outcome: str,
    status: int,
    revision: int | None = None,
    detail: str = "",
    client: str | None = None,
) -> AuditEntry:
    row = AuditRow(at=now, actor=actor[:128], token_id=token_id, request_id=request_id, method=method[:16],
                   path=path[:512], action=action, outcome=outcome, status=status, revision_id=revision,
                   detail=detail, client=client[:64] if client else None)
    session.add(row)
    session.flush()
    return AuditEntry.of(row)


def list_audit(
    *,
    session: Session,
    limit: int,
    offset: int,
    actor: str | None = None,
    outcome: str | None = None,
    revision: int | None = None,
) -> tuple[list[AuditEntry], int]:
    """Newest first, with the total count of matching entries."""
    conds = []
    if actor is not None:
        conds.append(AuditRow.actor == actor)
    if outcome is not None:
        conds.append(AuditRow.outcome == outcome)
    if revision is not None:
        conds.append(AuditRow.revision_id == revision)
    total = session.scalar(select(func.count()).select_from(AuditRow).where(*conds)) or 0
    rows = session.scalars(select(AuditRow).where(*conds).order_by(AuditRow.id.desc()).limit(limit).offset(offset))
    return [AuditEntry.of(r) for r in rows], total
