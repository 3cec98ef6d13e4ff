"""A change's proposed revision, off the head's line, and how its edits join the head when it commits.

The head is the intent as operators and automation have written it (``GET
/v1/intent``, the revision ``If-Match`` names); a change is a set of edits made
on a base revision, which may be older than the head (``loom drain`` and
``loom apply`` build on the active revision). Its intent is stored as a
**proposal**: a revision that reviews, plans and commits name like any other,
but that does not become the head, so a dry run or a change on an older base
never replaces the head and the edits made on it (issue 31).

When a change commits, its edits join the head in the commit's own transaction
(:func:`fold_into_head`): the proposal itself becomes the head when nothing was
written since its base; otherwise the change's edits are merged onto the head
(:mod:`controller.store.merge`), and a head that changed the same objects
refuses the commit with a located :class:`~controller.model.errors.MergeConflict`
rather than lose either side's edit. Rollbacks and repairs re-push an existing
revision and leave the head alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from controller.model import Intent
from controller.model.errors import IntentError, InvalidIntent, MergeConflict
from controller.model.intent import format_loc, validate_intent
from controller.service import WriteContext
from controller.store import repo
from controller.store.merge import merge_onto_head
from controller.store.workflow_repo import Change

__all__ = ["fold_into_head", "store_proposed", "validated"]


def validated(document: Any) -> Intent:
    """``document`` as a valid intent; :class:`InvalidIntent` with every located error."""
    try:
        return validate_intent(document)
    except ValidationError as exc:
        raise InvalidIntent([IntentError(format_loc(list(e["loc"])), str(e["msg"])) for e in exc.errors()]) from None


def store_proposed(intent: Intent, base: repo.Revision, *, session: Session, ctx: WriteContext) -> int:
    """The revision holding a change's ``intent``: the head or the base when identical, else a new proposal
    after the store's tail, which keeps the base's address slots and leaves the head where it is."""
    head = repo.head_revision(session=session)
    assert head is not None
    for rev in (head, base):
        if rev.hash == intent.content_hash:
            return rev.id
    tail = repo.tail_revision(session=session)
    assert tail is not None
    new = repo.add_intent(session=session, intent=intent, parent=tail.id, author=ctx.actor.name,
                          message=ctx.message or "proposed by a change", request_id=ctx.request_id,
                          now=datetime.now(UTC), proposal=True, pins_from=base.id)
    return new.id


def fold_into_head(ch: Change, *, session: Session, ctx: WriteContext) -> int | None:
    """Carry committing change ``ch``'s edits (its base to its proposal) onto the head, in the caller's
    transaction (which holds the revisions' lock). Returns the head afterwards (None: the change is not
    one of edits). Raises :class:`MergeConflict` when the head changed the same objects differently, or
    when the merged intent is not valid (objects of both sides that do not fit together)."""
    if ch.kind != "change" or ch.proposed_revision is None or ch.base_revision is None:
        return None
    head = repo.head_revision(session=session)
    prop = repo.get_revision(ch.proposed_revision, session=session)
    assert head is not None
    if head.hash == prop.hash:
        return head.id
    if head.id == ch.base_revision and prop.proposal and prop.id > head.id:
        repo.fold_proposal(prop.id, session=session)  # nothing written since its base: it is the head now
        return prop.id
    snap = [repo.revision_snapshot(r.id, session=session, content_hash=r.hash)
            for r in (repo.get_revision(ch.base_revision, session=session), head, prop)]
    what = f"change {ch.id}"
    doc = merge_onto_head(*snap, what=what)
    try:
        intent = validated(doc)
    except InvalidIntent as exc:
        raise MergeConflict(f"{what}'s edits on head revision {head.id} do not form a valid intent",
                            exc.errors) from None
    if intent.content_hash == head.hash:
        return head.id
    if intent.content_hash == prop.hash and prop.proposal and prop.id > head.id:
        repo.fold_proposal(prop.id, session=session)
        return prop.id
    tail = repo.tail_revision(session=session)
    assert tail is not None
    new = repo.add_intent(session=session, intent=intent, parent=tail.id, author=ctx.actor.name,
                          message=f"{what} (revision {prop.id}) merged onto head revision {head.id}",
                          request_id=ctx.request_id, now=datetime.now(UTC), pins_from=prop.id)
    return new.id
