"""Writing the revisioned intent: whole-document edits and object CRUD.

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
whole. A write sent with an ``Idempotency-Key`` keeps the key, with its
revision, in that same transaction (:mod:`controller.service.idempotency`): a
retry finds it there and is answered again, nothing written. A failed or
invalid write leaves no revision; it is still audited, as rejected, in its own
transaction (:func:`controller.service.audit.audit_rejected`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.documents.base import JsonObject
from controller.model.errors import (
    Conflict,
    IntentError,
    InvalidIntent,
    LoomError,
    NotFound,
    StaleRevision,
    StoreContention,
)
from controller.model.intent import format_loc, load_intent, validate_intent
from controller.service import idempotency
from controller.service.audit import audit_rejected
from controller.service.context import Doc, WriteContext, WriteResult, utc_now
from controller.service.reads import public
from controller.store import objects, repo
from controller.store.db import RetryOptions, lock_revisions, retrying, write_transaction
from controller.store.draft import Draft
from controller.store.repo import ConcurrentWrite, Revision
from controller.store.snapshot import Snapshot

__all__ = ["EXAMPLE_INTENT", "NoIntent", "apply_draft", "apply_edit", "create_object", "delete_object",
           "load_example", "replace_intent", "update_object"]

EXAMPLE_INTENT = Path(__file__).parent.parent / "examples" / "dc1.yaml"


class NoIntent(Conflict):
    """An object write on an empty store: there is no intent to edit yet."""


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


def apply_edit(edit: Callable[[JsonObject | None], JsonObject], *, session: Session, ctx: WriteContext, action: str,
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
            now = utc_now()
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
        audit_rejected(busy, session=session, ctx=ctx, action=action)
        raise busy from exc
    except LoomError as exc:
        audit_rejected(exc, session=session, ctx=ctx, action=action)
        raise


def _replayed(ctx: WriteContext, *, session: Session) -> tuple[WriteResult, Any] | None:
    """The stored result of the write ``ctx``'s key names, or None when its key is new (or expired)."""
    stored = idempotency.stored_answer(ctx, session=session)
    if stored is None:
        return None
    rev = repo.get_revision(int(stored["revision"]), session=session)
    snap = repo.revision_snapshot(rev.id, session=session, content_hash=rev.hash)
    return WriteResult(rev, bool(stored["changed"]), snap, replayed=True), stored.get("outcome")


def _remember_write(ctx: WriteContext, rev: Revision, changed: bool, found: Any, *, session: Session,
                    now: datetime) -> None:
    """Keep the key of an accepted intent write with its revision, in the write's own transaction; now
    and then (every 256th revision) forget the expired keys (:func:`idempotency.forget_expired`)."""
    answer = {"revision": rev.id, "changed": changed, "outcome": found}
    idempotency.keep_answer(ctx, ctx.status, answer, session=session, now=now)
    if rev.id % 256 == 0:
        idempotency.forget_expired(session=session, now=now)


def replace_intent(document: Any, *, session: Session, ctx: WriteContext) -> WriteResult:
    """Replace the whole intent; equal to the head = no new revision."""
    return apply_edit(lambda _base: document, session=session, ctx=ctx, action="intent.replace")


def _what(coll: objects.Collection) -> str:
    return coll.kind.replace("_", " ")


def create_object(kind: str, element: JsonObject, *, session: Session,
                  ctx: WriteContext) -> tuple[JsonObject, WriteResult]:
    coll = objects.collection(kind)
    result, ident = apply_draft(lambda draft: draft.insert(coll.key, element), session=session, ctx=ctx,
                                action=f"{coll.kind}.create",
                                empty=lambda: NoIntent("the store holds no intent yet: PUT /v1/intent first"))
    return _public_of(coll, result, ident), result


def update_object(kind: str, raw_ident: str, patch: JsonObject, *, session: Session,
                  ctx: WriteContext) -> tuple[JsonObject, WriteResult]:
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

