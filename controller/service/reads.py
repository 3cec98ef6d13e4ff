"""Reading the revisioned intent: the head and any revision with its snapshot, the whole document,
pages of one collection's objects (filtered), one object as the API shows it, the revisions and the
diff between two of them. The reads the API answers most (:func:`read_head`, :func:`cached_head`) use
one light query on a connection of their own and the store's snapshot cache, no ORM session.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session

from controller.model.documents.base import JsonObject
from controller.model.errors import NotFound
from controller.service.context import Doc, Listing, Page
from controller.store import content, objects, repo
from controller.store.db import Database
from controller.store.repo import Revision
from controller.store.snapshot import Element, Snapshot, diff_snapshots

__all__ = ["cached_head", "diff_revisions", "element_of", "find_object", "get_intent", "get_object", "get_revision",
           "head", "head_snapshot", "list_elements", "list_objects", "list_revisions", "page_of", "public",
           "read_head", "read_intent", "revision_snapshot"]


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


def get_intent(*, session: Session, revision: int | None = None) -> tuple[Revision, JsonObject]:
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


def diff_revisions(a: int, b: int, *, session: Session) -> JsonObject:
    """Objects added, removed and changed from revision ``a`` to revision ``b``."""
    old = repo.revision_snapshot(a, session=session)
    new = repo.revision_snapshot(b, session=session)
    return {"from": a, "to": b, **diff_snapshots(old, new)}

