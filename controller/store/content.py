"""Revisions stored by content: writing a snapshot's delta, rebuilding a revision, and the cache.

A revision's document lives in three tables (:mod:`controller.store.models`):
``intent_objects`` holds every object once, as compact JSON addressed by its
SHA-256; ``revision_entries`` holds, per revision, only the objects that differ
from its parent (identity, position, address; no address = removed); the
revision row names its frame (name, routing, defaults) by address and lists the
sections it wrote out whole (``*``: all of them). So a one-field edit of a
fabric of 100,000 devices stores one object and one entry, a few hundred bytes.

:func:`write_revision` writes a snapshot made on its parent (a
:class:`controller.store.snapshot.Delta` says what changed). When the entries
written since the last whole revision outgrow the fabric
(:attr:`StoreOptions.checkpoint_ratio`), the revision is written out whole, a
**checkpoint**, so that rebuilding any revision reads at most about twice the
fabric, while the storage per revision stays proportional to the change (on
average over the revisions between two checkpoints).

:func:`load_snapshot` rebuilds a revision from the nearest revision the
:class:`SnapshotCache` holds below it (usually its parent: a replica that
missed one write reads one delta), else from the last checkpoint. Snapshots are
immutable and keyed by id and content hash, so a cached one is never stale; a
snapshot made by a write enters the cache only when its transaction commits
(:func:`remember`, :func:`install_cache_hooks`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, event, func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from controller.model.addressing import Allocation
from controller.model.errors import Conflict, NotFound
from controller.store.draft import prove_from
from controller.store.models import IntentObjectRow, RevisionEntryRow, RevisionRow
from controller.store.snapshot import (
    SECTIONS,
    Delta,
    Element,
    Section,
    SectionDelta,
    Snapshot,
    address,
    dumps,
)

__all__ = ["ALL", "ConcurrentWrite", "HeadCache", "SnapshotCache", "StoreOptions", "WriteStats", "cache_of",
           "convert_revision", "install_cache_hooks", "load_snapshot", "plan_write", "remember", "write_content",
           "write_revision"]

#: ``revisions.whole`` of a revision written out completely
ALL = "*"
_CACHE = "loom.snapshots"
_PENDING = "loom.pending_snapshots"
_BATCH = 500

objects_t: Table = IntentObjectRow.__table__  # type: ignore[assignment]
entries_t: Table = RevisionEntryRow.__table__  # type: ignore[assignment]
revisions_t: Table = RevisionRow.__table__  # type: ignore[assignment]


class ConcurrentWrite(Conflict):
    """Another writer stored a revision on the same head first."""


@dataclass(frozen=True)
class StoreOptions:
    """Knobs of revision storage.

    ``cache_revisions``: snapshots kept in memory (each shares unchanged objects with the others).
    ``checkpoint_ratio``: write a revision out whole once the entries written since the last whole
    one exceed this many times the fabric's objects (at least ``checkpoint_min``).
    """

    cache_revisions: int = 8
    checkpoint_ratio: float = 1.0
    checkpoint_min: int = 4096


@dataclass(frozen=True)
class WriteStats:
    """What a revision wrote: new objects and their JSON bytes, entries, and whether it was whole."""

    objects: int
    object_bytes: int
    entries: int
    whole: bool


class SnapshotCache:
    """Built snapshots by (revision id, content hash), least recently used first out; thread-safe."""

    def __init__(self, options: StoreOptions | None = None):
        self.options = options or StoreOptions()
        self._items: OrderedDict[tuple[int, str], Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, rev_id: int, content_hash: str) -> Snapshot | None:
        with self._lock:
            snap = self._items.get((rev_id, content_hash))
            if snap is not None:
                self._items.move_to_end((rev_id, content_hash))
            return snap

    def put(self, rev_id: int, snap: Snapshot) -> None:
        with self._lock:
            self._items[(rev_id, snap.hash)] = snap
            self._items.move_to_end((rev_id, snap.hash))
            while len(self._items) > max(1, self.options.cache_revisions):
                self._items.popitem(last=False)

    def below(self, rev_id: int) -> list[tuple[int, str, Snapshot]]:
        """Cached revisions older than ``rev_id``, newest first."""
        with self._lock:
            found = [(k[0], k[1], s) for k, s in self._items.items() if k[0] < rev_id]
        return sorted(found, key=lambda t: -t[0])

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class HeadCache:
    """The head revision (id, content hash) this process last saw, and when: a read may use it
    for a short while instead of asking the store. A commit in this process moves it at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._value: tuple[int, str, float] | None = None
        self._lock = threading.Lock()

    def get(self, max_age: float) -> tuple[int, str] | None:
        value = self._value
        if value is None or max_age <= 0 or self.clock() - value[2] >= max_age:
            return None
        return value[0], value[1]

    def put(self, rev_id: int, content_hash: str, *, at: float | None = None) -> None:
        """The head is ``rev_id`` as of ``at`` (by the clock; now by default). An answer asked
        before what is held, and older, loses: a read that raced a commit does not undo it."""
        at = self.clock() if at is None else at
        with self._lock:
            if self._value is None or rev_id >= self._value[0] or at > self._value[2]:
                self._value = (rev_id, content_hash, at)

    def clear(self) -> None:
        with self._lock:
            self._value = None


def install_cache_hooks(factory: sessionmaker[Session], cache: SnapshotCache, heads: HeadCache | None = None) -> None:
    """Give the sessions of ``factory`` ``cache``, and move the snapshots a transaction wrote into
    it (and the head to the newest) when (and only when) the transaction commits."""
    factory.configure(info={_CACHE: cache})

    @event.listens_for(factory, "after_commit")
    def _committed(session: Session) -> None:
        pending = session.info.pop(_PENDING, None)
        c = session.info.get(_CACHE)
        if pending and c is not None:
            for rev_id, snap, head in pending:
                c.put(rev_id, snap)
                if heads is not None and head:
                    heads.put(rev_id, snap.hash)

    @event.listens_for(factory, "after_rollback")
    def _rolled_back(session: Session) -> None:
        session.info.pop(_PENDING, None)


def cache_of(session: Session) -> SnapshotCache:
    """The cache of the store ``session`` belongs to (a throwaway one for a bare session)."""
    cache = session.info.get(_CACHE)
    if cache is None:
        cache = session.info[_CACHE] = SnapshotCache()
    result: SnapshotCache = cache
    return result


def remember(session: Session, rev_id: int, snap: Snapshot, *, head: bool = True) -> None:
    """Cache ``snap`` as revision ``rev_id`` once the session's transaction commits (and, when it is
    the ``head`` now, as this process's head)."""
    session.info.setdefault(_PENDING, []).append((rev_id, snap, head))


# -- writing ------------------------------------------------------------------------------------
def _insert_ignore(conn: Connection, table: Any) -> Any:
    dialect = conn.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    return insert(table)


def _put_objects(conn: Connection, bodies: dict[str, bytes]) -> tuple[int, int]:
    """Store the objects not stored yet; returns how many and their bytes."""
    if len(bodies) > 64:  # a checkpoint or a large change: most objects are there already
        missing: dict[str, bytes] = {}
        keys = list(bodies)
        for i in range(0, len(keys), _BATCH):
            chunk = keys[i:i + _BATCH]
            have = set(conn.scalars(select(objects_t.c.hash).where(objects_t.c.hash.in_(chunk))))
            missing.update((k, bodies[k]) for k in chunk if k not in have)
        bodies = missing
    if not bodies:
        return 0, 0
    rows = [{"hash": h, "body": b.decode()} for h, b in bodies.items()]
    stmt = _insert_ignore(conn, objects_t)
    for i in range(0, len(rows), _BATCH):
        conn.execute(stmt, rows[i:i + _BATCH])
    return len(rows), sum(len(b) for b in bodies.values())


def plan_write(snap: Snapshot, options: StoreOptions) -> Snapshot:
    """``snap`` as it will be written: whole (a checkpoint) when the entries written since the last
    whole revision outgrow the fabric, else as its delta says."""
    delta = snap.delta
    if delta is None:
        raise ValueError("a snapshot loaded from the store has no delta to write")
    if not delta.whole and snap.distance > max(options.checkpoint_min, options.checkpoint_ratio * snap.size()):
        return snap.whole()
    return snap


@dataclass(frozen=True)
class _Frame:
    top_hash: str
    whole: str
    entries: int
    top_bytes: int


def _put_frame(conn: Connection, snap: Snapshot) -> _Frame:
    delta = snap.delta
    assert delta is not None
    top = dumps(snap.frame)
    top_hash = address(top)
    _put_objects(conn, {top_hash: top})
    whole = ALL if delta.whole else ",".join(s for s in SECTIONS if s in delta.sections and delta.sections[s].whole)
    return _Frame(top_hash, whole, 0 if delta.whole else delta.entries, len(top))


def write_content(conn: Connection, snap: Snapshot, rev_id: int) -> WriteStats:
    """The objects and entries of ``snap``'s delta as revision ``rev_id`` (its row must exist)."""
    delta = snap.delta
    assert delta is not None
    bodies: dict[str, bytes] = {}
    entries: list[dict[str, Any]] = []
    for s, d in delta.sections.items():
        section = snap.sections[s]
        for ident in d.puts:
            i = section.index[ident]
            el = section.elements[i]
            bodies.setdefault(el.hash, el.body)
            entries.append({"revision_id": rev_id, "section": s, "ident": ident, "pos": section.pos[i],
                            "object_hash": el.hash})
        if not d.whole:
            entries.extend({"revision_id": rev_id, "section": s, "ident": ident, "pos": None, "object_hash": None}
                           for ident in d.removed)
    n_objects, n_bytes = _put_objects(conn, bodies)
    for i in range(0, len(entries), _BATCH):
        conn.execute(insert(entries_t), entries[i:i + _BATCH])
    return WriteStats(n_objects, n_bytes, len(entries), delta.whole)


def write_revision(conn: Connection, snap: Snapshot, *, rev_id: int, parent: int | None, author: str,
                   message: str, request_id: str | None, now: datetime, options: StoreOptions,
                   content_hash: str | None = None, pins: Allocation | None = None,
                   proposal: bool = False) -> tuple[Snapshot, WriteStats]:
    """Store ``snap`` (made on revision ``parent``, or on none) as revision ``rev_id``: its row, its
    new objects, its entries. Raises :class:`ConcurrentWrite` when the id is taken. Returns the
    snapshot as written (a checkpoint is the same intent with a whole delta) and what was written.
    ``pins``: the revision's address allocation pins (:mod:`controller.model.addressing`)."""
    snap = plan_write(snap, options)
    frame = _put_frame(conn, snap)
    row = {"id": rev_id, "parent_id": parent, "hash": content_hash or snap.hash, "created_at": now,
           "author": author, "message": message, "request_id": request_id, "top_hash": frame.top_hash,
           "whole": frame.whole, "entries": frame.entries, "allocation": pins.to_json() if pins else "",
           "proposal": proposal}
    try:
        conn.execute(insert(revisions_t), row)
    except IntegrityError:
        raise ConcurrentWrite(f"revision {rev_id} was written concurrently; retry on the new head") from None
    stats = write_content(conn, snap, rev_id)
    written = snap.with_delta(snap.delta, 0 if stats.whole else snap.distance)  # type: ignore[arg-type]
    written.pins = pins or Allocation()
    return written, WriteStats(stats.objects, stats.object_bytes + frame.top_bytes, stats.entries, stats.whole)


def convert_revision(conn: Connection, rev_id: int, document: dict[str, Any], content_hash: str,
                     base: Snapshot | None, options: StoreOptions) -> Snapshot:
    """Store the content of an existing revision row (a full copy of ``document``, from before
    revisions were stored by content) as a delta on ``base``, its parent's snapshot, and fill in
    the row's frame. Raises ``ValueError`` if the rebuilt document would not be byte-identical."""
    snap = plan_write(Snapshot.from_document(document, base, content_hash=content_hash), options)
    if dumps(snap.document()) != dumps(document):
        raise ValueError(f"revision {rev_id}: its document does not take apart and back into the same bytes")
    frame = _put_frame(conn, snap)
    conn.execute(revisions_t.update().where(revisions_t.c.id == rev_id)
                 .values(top_hash=frame.top_hash, whole=frame.whole, entries=frame.entries))
    stats = write_content(conn, snap, rev_id)
    return snap.with_delta(snap.delta, 0 if stats.whole else snap.distance)  # type: ignore[arg-type]


# -- reading ------------------------------------------------------------------------------------
@dataclass
class _Meta:
    id: int
    hash: str
    top_hash: str
    whole: str
    entries: int
    allocation: str = ""

    def whole_sections(self) -> Sequence[str]:
        return SECTIONS if self.whole == ALL else [s for s in self.whole.split(",") if s]


def _metas(conn: Connection, lo: int, hi: int, *, allocations: bool = True) -> list[_Meta]:
    cols = [revisions_t.c.id, revisions_t.c.hash, revisions_t.c.top_hash, revisions_t.c.whole, revisions_t.c.entries]
    if allocations:
        cols.append(revisions_t.c.allocation)
    rows = conn.execute(select(*cols).where(revisions_t.c.id >= lo, revisions_t.c.id <= hi).order_by(revisions_t.c.id))
    return [_Meta(*r) for r in rows]


def _bodies(conn: Connection, hashes: Iterable[str]) -> dict[str, str]:
    keys = list(set(hashes))
    out: dict[str, str] = {}
    for i in range(0, len(keys), _BATCH):
        chunk = keys[i:i + _BATCH]
        out.update((h, b) for h, b in conn.execute(select(objects_t.c.hash, objects_t.c.body)
                                                   .where(objects_t.c.hash.in_(chunk))))
    return out


def load_snapshot(conn: Connection, rev_id: int, cache: SnapshotCache, content_hash: str | None = None, *,
                  allocations: bool = True) -> Snapshot:
    """Revision ``rev_id`` as a snapshot (from the cache, or rebuilt and cached). Raises
    :class:`NotFound` for a revision that does not exist. ``allocations=False`` reads a store
    migrated below 0007 (no allocation pins: the snapshot's ``pins`` stay unknown)."""
    if content_hash is not None:
        hit = cache.get(rev_id, content_hash)
        if hit is not None:
            return hit
    metas = _metas(conn, rev_id, rev_id, allocations=allocations)
    if not metas:
        raise NotFound(f"revision {rev_id} does not exist")
    target = metas[0]
    hit = cache.get(rev_id, target.hash)
    if hit is not None:
        return hit
    checkpoint = conn.scalar(select(func.max(revisions_t.c.id))
                             .where(revisions_t.c.id <= rev_id, revisions_t.c.whole == ALL)) or 1
    base: Snapshot | None = None
    start = checkpoint
    for k, k_hash, snap in cache.below(rev_id):
        if k < checkpoint:
            break
        stored = conn.scalar(select(revisions_t.c.hash).where(revisions_t.c.id == k))
        if stored == k_hash:
            base, start = snap, k + 1
            break
    snap = _replay(conn, base, _metas(conn, start, rev_id, allocations=allocations))
    if allocations:
        snap.pins = Allocation.from_json(metas[0].allocation)
    cache.put(rev_id, snap)
    return snap


def _replay(conn: Connection, base: Snapshot | None, metas: list[_Meta]) -> Snapshot:
    """``base`` (or nothing) with the revisions of ``metas`` applied in order."""
    if not metas:
        raise NotFound("no revisions to rebuild from")
    lo, hi = metas[0].id, metas[-1].id
    # per section: identity -> (position, address), or None for removed; against the base unless reset
    changes: dict[str, dict[str, tuple[int, str] | None]] = {}
    reset: set[str] = set(SECTIONS) if base is None else set()
    by_rev: dict[int, list[tuple[str, str, int | None, str | None]]] = {}
    rows = conn.execute(select(entries_t.c.revision_id, entries_t.c.section, entries_t.c.ident, entries_t.c.pos,
                               entries_t.c.object_hash)
                        .where(entries_t.c.revision_id >= lo, entries_t.c.revision_id <= hi))
    for rid, s, ident, pos, h in rows:
        by_rev.setdefault(rid, []).append((s, ident, pos, h))
    distance = base.distance if base is not None else 0
    for meta in metas:
        for s in meta.whole_sections():
            reset.add(s)
            changes[s] = {}
        for s, ident, pos, h in by_rev.get(meta.id, ()):
            changes.setdefault(s, {})[ident] = None if h is None else (pos or 0, h)
        distance = 0 if meta.whole == ALL else distance + meta.entries
    target = metas[-1]
    wanted = {v[1] for ch in changes.values() for v in ch.values() if v is not None} | {target.top_hash}
    bodies = _bodies(conn, wanted)
    sections: dict[str, Section] = dict(base.sections) if base is not None else {}
    deltas: dict[str, SectionDelta] = {}
    for s, ch in changes.items():
        old = base.sections[s] if base is not None and s not in reset else None
        sections[s] = _apply(s, old, ch, bodies)
        if base is not None:
            deltas[s] = _section_delta(base.sections[s], sections[s], ch, whole=s in reset)
    frame = json.loads(bodies[target.top_hash])
    snap = Snapshot(frame, sections, content_hash=target.hash, delta=None, distance=distance)
    if base is not None and prove_from(base, snap, Delta(deltas, frame != base.frame)):
        snap.validated = True
    return snap


def _element(section: str, ident: str, address: str, bodies: dict[str, str], old: Element | None) -> Element:
    if old is not None and old.ident == ident and old.hash == address:
        return old
    body = bodies[address]
    return Element(section, json.loads(body), ident=ident, body=body.encode())


def _apply(s: str, old: Section | None, ch: dict[str, tuple[int, str] | None], bodies: dict[str, str]) -> Section:
    """Section ``old`` (or an empty one) with the entries ``ch`` applied."""
    if old is not None and all(v is not None and k in old.index and old.pos[old.index[k]] == v[0]
                               for k, v in ch.items()):
        elements = list(old.elements)  # objects replaced in place: the order and the index stay
        for k, v in ch.items():
            assert v is not None
            i = old.index[k]
            elements[i] = _element(s, k, v[1], bodies, old.elements[i])
        return Section(elements, old.pos, old.index).inherit(old, [old.index[k] for k in ch])
    state: dict[str, tuple[int, Element | str]] = (
        {e.ident: (p, e) for e, p in zip(old.elements, old.pos, strict=True)} if old is not None else {})
    for k, v in ch.items():
        if v is None:
            state.pop(k, None)
        else:
            prev = state.get(k)
            state[k] = (v[0], prev[1] if prev is not None and isinstance(prev[1], Element)
                        and prev[1].hash == v[1] else v[1])
    ordered = sorted(state.items(), key=lambda kv: kv[1][0])
    elements = [v if isinstance(v, Element) else _element(s, k, v, bodies, None) for k, (_, v) in ordered]
    return Section(elements, [p for _, (p, _) in ordered])


def _section_delta(old: Section, new: Section, ch: dict[str, tuple[int, str] | None], *, whole: bool
                   ) -> SectionDelta:
    if whole:
        return SectionDelta(tuple(new.index), (), True)
    puts = tuple(k for k, v in ch.items() if v is not None and k in new.index and (
        old.get(k) is not new.elements[new.index[k]] or old.pos[old.index[k]] != new.pos[new.index[k]]))
    return SectionDelta(puts, tuple(k for k, v in ch.items() if v is None and k in old.index))
