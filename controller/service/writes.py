"""The controller's operations on the revisioned intent: what the API routers
and the CLI call.

Every write follows one path: in one transaction, read the head revision,
check the caller's ``If-Match``, apply the edit to the head's snapshot
(:mod:`controller.store.snapshot`), make sure the WHOLE resulting intent is
valid, store a new revision only if the content hash changed (only what
changed: :mod:`controller.store.content`), and write the audit entry. Object
edits (:func:`create_object`, :func:`update_object`, :func:`delete_object`)
run on a :class:`~controller.store.snapshot.Draft`, whose result is proven
valid from the head's when :mod:`controller.model.revalidate` can prove it and
checked whole (:func:`controller.model.intent.validate_intent`) otherwise;
whole-document edits (:func:`apply_edit`, :func:`replace_intent`) are checked
whole. A failed or invalid write leaves no revision; it is still audited, as
rejected, in its own transaction.
Tokens (bearer credentials with a role) are issued, listed, revoked and checked
here too; their secrets are shown once and stored as SHA-256 hashes.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.errors import (
    Conflict,
    IdempotencyMismatch,
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
from controller.store import content, objects, repo
from controller.store import workflow_repo as wrepo
from controller.store.db import Database, RetryOptions, lock_revisions, retrying, write_transaction
from controller.store.draft import Draft
from controller.store.models import ROLES
from controller.store.repo import ConcurrentWrite, Revision, Token
from controller.store.snapshot import Element, Snapshot, diff_snapshots

__all__ = [
    "EXAMPLE_INTENT",
    "IDEMPOTENCY_KEEP_S",
    "ROLES",
    "Actor",
    "IdempotentWrite",
    "NoIntent",
    "Listing",
    "Page",
    "Refusal",
    "WriteContext",
    "WriteResult",
    "apply_draft",
    "apply_edit",
    "audit_refusals",
    "authenticate",
    "authenticate_until",
    "bootstrap_admin",
    "create_object",
    "create_token",
    "delete_object",
    "diff_revisions",
    "element_of",
    "get_intent",
    "get_object",
    "get_revision",
    "get_token",
    "head",
    "head_snapshot",
    "find_object",
    "keep_answer",
    "list_audit",
    "list_elements",
    "list_objects",
    "list_revisions",
    "list_tokens",
    "load_example",
    "page_of",
    "cached_head",
    "read_head",
    "read_intent",
    "replace_intent",
    "revision_snapshot",
    "revoke_token",
    "role_allows",
    "stored_answer",
    "update_object",
    "update_token",
]

EXAMPLE_INTENT = Path(__file__).parent.parent / "examples" / "dc1.yaml"
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


#: How long an intent write's ``Idempotency-Key`` is kept (a retry after that runs again): one day.
IDEMPOTENCY_KEEP_S = 86_400


@dataclass(frozen=True)
class IdempotentWrite:
    """An intent write sent with ``Idempotency-Key``: ``key`` (per actor) and the ``fingerprint`` of the
    request it names (a SHA-256 of its method, path and body: the same key on another request is
    :class:`IdempotencyMismatch`). The key is stored in the transaction that stores the write's revision,
    so a retry, on any replica and whenever the first attempt's answer was lost, finds the write done
    and gets its answer again rather than writing twice."""

    key: str
    fingerprint: str

    @staticmethod
    def of(key: str, method: str, path: str, body: bytes) -> IdempotentWrite:
        digest = hashlib.sha256(b"\0".join((b"intent-write", method.encode(), path.encode(), body)))
        return IdempotentWrite(key, digest.hexdigest())


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
    idempotency: IdempotentWrite | None = None

    def rejected_status(self, exc: LoomError) -> int:
        """The audit status of a write rejected with ``exc``."""
        return self.reject_status(exc) if self.reject_status is not None else NO_STATUS


@dataclass(frozen=True)
class WriteResult:
    revision: Revision
    changed: bool
    snapshot: Snapshot
    extra: dict[str, Any] = field(default_factory=dict)
    replayed: bool = False  # the answer of an earlier request with the same Idempotency-Key, nothing written

    @property
    def document(self) -> Doc:
        """The resulting intent document (shared element dicts: never change them)."""
        return self.snapshot.document()


@dataclass(frozen=True)
class Listing:
    """A page of the head's objects: ``revision`` is the head's id (``None`` on an empty store)."""

    items: list[Any]
    total: int
    limit: int
    offset: int
    revision: int | None


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


def head_snapshot(*, session: Session) -> tuple[Revision, Snapshot]:
    """The head revision and its snapshot; :class:`NotFound` on an empty store."""
    rev = repo.head_revision(session=session)
    if rev is None:
        raise NotFound("the store holds no intent yet: PUT /v1/intent (or loom serve --example)")
    return rev, repo.revision_snapshot(rev.id, session=session, content_hash=rev.hash)


def get_revision(revision: int, *, session: Session) -> Revision:
    """A revision's metadata; :class:`NotFound` when it does not exist."""
    return repo.get_revision(revision, session=session)


def revision_snapshot(revision: int, *, session: Session) -> tuple[Revision, Snapshot]:
    """A revision and its snapshot; :class:`NotFound` when it does not exist."""
    rev = repo.get_revision(revision, session=session)
    return rev, repo.revision_snapshot(rev.id, session=session, content_hash=rev.hash)


def get_intent(*, session: Session, revision: int | None = None) -> tuple[Revision, Doc]:
    """The document of ``revision`` (the head by default); :class:`NotFound` on an empty store.
    The element dicts are the store's cached ones: read them, never change them."""
    rev, snap = head_snapshot(session=session) if revision is None else revision_snapshot(revision, session=session)
    return rev, snap.document()


def read_head(database: Database) -> tuple[int, Snapshot] | None:
    """The head revision's id and snapshot, for reads: one light query on a connection of its own
    (no ORM session), the snapshot from the store's cache (``None`` on an empty store)."""
    asked = database.heads.clock()
    with database.engine.connect() as conn:
        ref = repo.head_ref(conn)
        if ref is None:
            return None
        snap = content.load_snapshot(conn, ref[0], database.snapshots, ref[1])
    database.heads.put(ref[0], ref[1], at=asked)
    return ref[0], snap


def cached_head(database: Database, *, max_age: float) -> tuple[int, Snapshot] | None:
    """The head as this process saw it less than ``max_age`` seconds ago (or wrote it since), with
    its snapshot, without asking the store; ``None`` when that is not known (ask :func:`read_head`).
    Another replica's newer revision shows here within ``max_age``; this process's own at once."""
    ref = database.heads.get(max_age)
    if ref is None:
        return None
    snap = database.snapshots.get(ref[0], ref[1])
    return None if snap is None else (ref[0], snap)


def read_intent(database: Database) -> tuple[int, Snapshot]:
    """:func:`read_head`; :class:`NotFound` on an empty store."""
    head = read_head(database)
    if head is None:
        raise NotFound("the store holds no intent yet: PUT /v1/intent (or loom serve --example)")
    return head


def list_elements(kind: str, *, database: Database, filters: dict[str, str | None], limit: int,
                  offset: int) -> Listing:
    """A page of the head's elements of collection ``kind`` (:class:`Element`), filtered; the page's
    ``revision`` is the head's id (``None`` on an empty store)."""
    head = read_head(database)
    if head is None:
        return Listing([], 0, limit, offset, None)
    return page_of(kind, head, filters=filters, limit=limit, offset=offset)


def page_of(kind: str, head: tuple[int, Snapshot], *, filters: dict[str, str | None], limit: int,
            offset: int) -> Listing:
    """A page of the elements of collection ``kind`` in the revision ``head`` (id, snapshot), filtered."""
    coll = objects.collection(kind)
    rev_id, snap = head
    items = snap.sections[coll.key].elements
    wanted = [(coll.filters[k], v) for k, v in filters.items() if v is not None]
    if wanted:
        items = [e for e in items if all(test(e.doc, v) for test, v in wanted)]
    return Listing(items[offset:offset + limit], len(items), limit, offset, rev_id)


def list_objects(kind: str, *, database: Database, filters: dict[str, str | None], limit: int,
                 offset: int) -> Listing:
    page = list_elements(kind, database=database, filters=filters, limit=limit, offset=offset)
    return replace(page, items=[public(e) for e in page.items])


def find_object(kind: str, ident: str, *, database: Database) -> tuple[Element, int]:
    """The head's element ``ident`` of collection ``kind`` (as a URL names it), and the head's id."""
    return element_of(kind, ident, read_intent(database))


def element_of(kind: str, ident: str, head: tuple[int, Snapshot]) -> tuple[Element, int]:
    """Element ``ident`` (as a URL names it) of collection ``kind`` in the revision ``head`` (id, snapshot)."""
    coll = objects.collection(kind)
    rev_id, snap = head
    key = objects.parse_object_id(coll, ident)
    el = snap.element(coll.key, key)
    if el is None:
        raise NotFound(f"{coll.kind.replace('_', ' ')} {key!r} does not exist")
    return el, rev_id


def get_object(kind: str, ident: str, *, database: Database) -> tuple[Doc, int]:
    el, rev_id = find_object(kind, ident, database=database)
    return public(el), rev_id


def public(el: Element) -> Doc:
    """An object as the API shows it: its identity first, as ``id``, then its fields."""
    return {"id": el.ident, **el.doc}


def list_revisions(*, session: Session, limit: int, offset: int) -> Page:
    items, total = repo.list_revisions(session=session, limit=limit, offset=offset)
    return Page(items, total, limit, offset, repo.head_revision(session=session))


def diff_revisions(a: int, b: int, *, session: Session) -> Doc:
    """Objects added, removed and changed from revision ``a`` to revision ``b``."""
    old = repo.revision_snapshot(a, session=session)
    new = repo.revision_snapshot(b, session=session)
    return {"from": a, "to": b, **diff_snapshots(old, new)}


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
    document; it must not change the head document in place) as one transaction:
    If-Match, whole-document validation, a new revision if the content hash
    changed, and the audit entry.

    Raises :class:`StaleRevision` (If-Match is not the head), :class:`InvalidIntent`
    (every located error of the resulting document), or what ``edit`` raises
    (:class:`NotFound`, :class:`Conflict`). Writers of the revision chain queue on
    :func:`lock_revisions`; a write that still loses a race (a serialization failure, another
    writer's revision first) runs again on the new head after a jittered back-off (``retry``),
    where a stale If-Match is refused as ever. Once the attempts are used up it is
    :class:`StoreContention`; a store that does not answer is :class:`StoreUnavailable`.
    """
    def make(base: Snapshot | None) -> Snapshot:
        intent = _validated(edit(base.document() if base is not None else None))
        return Snapshot.from_intent(intent, base)

    return _write(make, session=session, ctx=ctx, action=action, retry=retry)[0]


def apply_draft(edit: Callable[[Draft], Any], *, session: Session, ctx: WriteContext, action: str,
                empty: Callable[[], LoomError], retry: RetryOptions = RetryOptions()) -> tuple[WriteResult, Any]:
    """Apply the object edits ``edit`` makes on a :class:`Draft` of the head, as :func:`apply_edit`
    does a whole-document edit; ``empty`` is the error for an empty store. Returns the result
    and what ``edit`` returned."""
    out: list[Any] = []

    def make(base: Snapshot | None) -> Snapshot:
        if base is None:
            raise empty()
        draft = Draft(base)
        out.append(edit(draft))
        try:
            return draft.finish()
        except ValidationError as exc:
            raise InvalidIntent([IntentError(format_loc(list(e["loc"])), str(e["msg"])) for e in exc.errors()]
                                ) from None

    return _write(make, session=session, ctx=ctx, action=action, retry=retry,
                  outcome=lambda: out[-1] if out else None)


def _add_on_head(snap: Snapshot, head: Revision | None, *, session: Session, ctx: WriteContext,
                 now: datetime) -> tuple[Revision, Any]:
    """Store ``snap``, made on ``head``, as the new head: after the store's tail, which is a change's
    proposal when one was made since the head (the snapshot is then re-made on it for the delta)."""
    tail = repo.tail_revision(session=session)
    if tail is not None and head is not None and tail.id != head.id:
        snap = snap.on(repo.revision_snapshot(tail.id, session=session, content_hash=tail.hash))
    return repo.add_snapshot(session=session, snapshot=snap, parent=tail.id if tail else None,
                             author=ctx.actor.name, message=ctx.message, request_id=ctx.request_id, now=now,
                             pins_from=head.id if head else None)


def _write(make: Callable[[Snapshot | None], Snapshot], *, session: Session, ctx: WriteContext,
           action: str, retry: RetryOptions, outcome: Callable[[], Any] = lambda: None) -> tuple[WriteResult, Any]:
    """One write: head, If-Match, the new snapshot from ``make``, a revision if it changed, the audit;
    writers queue on :func:`lock_revisions` and a lost race runs again after a back-off (``retry``).
    Returns the result and ``outcome()`` (what ``make`` found, JSON-able: kept with an ``Idempotency-Key``
    for the replay). A write whose key is stored is not run again: its stored result is answered."""

    def attempt() -> tuple[WriteResult, Any]:
        with write_transaction(session):
            lock_revisions(session)
            done = _replayed(ctx, session=session)  # under the lock: the key's first write is committed or gone
            if done is not None:
                return done
            rev = repo.head_revision(session=session)
            _check_if_match(ctx.if_match, rev)
            base = repo.revision_snapshot(rev.id, session=session, content_hash=rev.hash) if rev else None
            snap = make(base)
            now = _now()
            changed = rev is None or rev.hash != snap.hash
            if changed:
                rev, _ = _add_on_head(snap, rev, session=session, ctx=ctx, now=now)
            else:
                assert base is not None
                snap = base
            assert rev is not None
            repo.add_audit(session=session, now=now, actor=ctx.actor.name, token_id=ctx.actor.token_id,
                           client=ctx.client, request_id=ctx.request_id, method=ctx.method, path=ctx.path,
                           action=action, outcome="accepted" if changed else "unchanged", status=ctx.status,
                           revision=rev.id, detail=ctx.message)
            found = outcome()
            if ctx.idempotency is not None:
                _remember_write(ctx, rev, changed, found, session=session, now=now)
        return WriteResult(rev, changed, snap), found

    try:
        return retrying(attempt, retry_on=(StoreContention, ConcurrentWrite), options=retry)
    except ConcurrentWrite as exc:  # every attempt lost: the store is too busy for this write now
        busy = StoreContention(f"{exc} ({retry.attempts} attempts)")
        _audit_rejected(busy, session=session, ctx=ctx, action=action)
        raise busy from exc
    except LoomError as exc:
        _audit_rejected(exc, session=session, ctx=ctx, action=action)
        raise


def stored_answer(ctx: WriteContext, *, session: Session) -> Any | None:
    """The answer kept with ``ctx``'s ``Idempotency-Key`` (by :func:`keep_answer`), or None when the key is
    new (or expired, or ``ctx`` has none). Raises :class:`IdempotencyMismatch` when the key named another
    request."""
    idem = ctx.idempotency
    if idem is None:
        return None
    row = wrepo.find_idempotent(ctx.actor.name, idem.key, session=session)
    if row is None:
        return None
    if row.request_hash != idem.fingerprint or row.path != ctx.path[:512]:
        raise IdempotencyMismatch(f"Idempotency-Key {idem.key!r} was used for a different request "
                                  f"({row.path}); a new request needs a new key")
    return json.loads(row.body)


def keep_answer(ctx: WriteContext, status: int, answer: Any, *, session: Session, now: datetime) -> None:
    """Keep ``ctx``'s ``Idempotency-Key`` with ``answer`` in the caller's transaction (the one of the work it
    answers), so a retry whose first answer was lost finds the work done; nothing without a key."""
    if ctx.idempotency is not None:
        wrepo.put_idempotent(ctx.actor.name, ctx.idempotency.key, session=session, path=ctx.path,
                             request_hash=ctx.idempotency.fingerprint, status=status,
                             body=json.dumps(answer, default=str), now=now)


def _replayed(ctx: WriteContext, *, session: Session) -> tuple[WriteResult, Any] | None:
    """The stored result of the write ``ctx``'s key names, or None when its key is new (or expired)."""
    stored = stored_answer(ctx, session=session)
    if stored is None:
        return None
    rev = repo.get_revision(int(stored["revision"]), session=session)
    snap = repo.revision_snapshot(rev.id, session=session, content_hash=rev.hash)
    return WriteResult(rev, bool(stored["changed"]), snap, replayed=True), stored.get("outcome")


def _remember_write(ctx: WriteContext, rev: Revision, changed: bool, found: Any, *, session: Session,
                    now: datetime) -> None:
    """Keep the key of an accepted intent write with its revision, in the write's own transaction; now
    and then (every 256th revision) forget the keys older than :data:`IDEMPOTENCY_KEEP_S`."""
    keep_answer(ctx, ctx.status, {"revision": rev.id, "changed": changed, "outcome": found}, session=session, now=now)
    if rev.id % 256 == 0:
        wrepo.forget_idempotent(before=now - timedelta(seconds=IDEMPOTENCY_KEEP_S), session=session)


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


def _what(coll: objects.Collection) -> str:
    return coll.kind.replace("_", " ")


def create_object(kind: str, element: Doc, *, session: Session, ctx: WriteContext) -> tuple[Doc, WriteResult]:
    coll = objects.collection(kind)
    result, ident = apply_draft(lambda draft: draft.insert(coll.key, element), session=session, ctx=ctx,
                                action=f"{coll.kind}.create",
                                empty=lambda: NoIntent("the store holds no intent yet: PUT /v1/intent first"))
    return _public_of(coll, result, ident), result


def update_object(kind: str, raw_ident: str, patch: Doc, *, session: Session,
                  ctx: WriteContext) -> tuple[Doc, WriteResult]:
    coll = objects.collection(kind)
    ident = objects.parse_object_id(coll, raw_ident)

    def edit(draft: Draft) -> str:
        merged = dict(draft.get(coll.key, ident))
        for name, value in patch.items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = copy.deepcopy(value)
        return draft.replace(coll.key, ident, merged)

    result, new_ident = apply_draft(edit, session=session, ctx=ctx, action=f"{coll.kind}.update",
                                    empty=lambda: NotFound(f"{_what(coll)} {ident!r} does not exist"))
    return _public_of(coll, result, new_ident), result


def _public_of(coll: objects.Collection, result: WriteResult, ident: str) -> Doc:
    el = result.snapshot.element(coll.key, ident)
    if el is None:  # the canonical form renamed it (cannot happen for a valid object; kept for clarity)
        raise NotFound(f"{_what(coll)} {ident!r} does not exist")
    return public(el)


def delete_object(kind: str, raw_ident: str, *, session: Session, ctx: WriteContext) -> WriteResult:
    coll = objects.collection(kind)
    ident = objects.parse_object_id(coll, raw_ident)
    result, _ = apply_draft(lambda draft: draft.delete(coll.key, ident), session=session, ctx=ctx,
                            action=f"{coll.kind}.delete",
                            empty=lambda: NotFound(f"{_what(coll)} {ident!r} does not exist"))
    return result


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
    if not token.active(_now()):
        return None, None
    return Actor(token.name, token.role, token.id), token.expires_at
