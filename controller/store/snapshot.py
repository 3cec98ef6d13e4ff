"""The in-memory form of a revision: an intent document taken apart into objects addressed by content.

A :class:`Snapshot` holds one revision's document as its **frame** (the
top-level keys in document order: ``name``, ``routing``, ``defaults`` with
their values, and a placeholder for each section) and, per section, its
:class:`Element` objects in document order. An element carries its identity
(:mod:`controller.store.objects`), its document, the compact JSON the store
keeps (whose SHA-256 is the object's address in the store) and, computed when
first asked, the sorted JSON the content hash covers, its validated model
object and the bytes the API serves. Each element also has an integer
**position**; document order is position order, so the store records an
insertion or a re-cabled link as one entry instead of the whole list.

Snapshots are immutable and share unchanged elements: a revision that changes
one link is a new list of references with one new element. The intent's
content hash (SHA-256 of the canonical document with sorted keys,
:attr:`controller.model.Intent.content_hash`) is assembled from the elements'
memoized sorted JSON, so it costs one pass of ``sha256`` over bytes already
made, not a serialization of the whole fabric.

Object edits make new snapshots through a :class:`controller.store.draft.Draft`.
Whole documents (``PUT /v1/intent``, a change's proposed intent) become
snapshots through :meth:`Snapshot.from_intent`, which reuses the base's
elements that did not change. Each new snapshot knows its :class:`Delta`
against its base: what the store writes.

Pure: no I/O here; :mod:`controller.store.content` reads and writes snapshots.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.model import Defaults, Intent, Routing
from controller.model.addressing import Allocation
from controller.model.documents.base import JsonObject, JsonValue
from controller.model.intent import validate_intent
from controller.model.revalidate import Context, shape
from controller.store.objects import COLLECTIONS

__all__ = ["CHUNK", "GAP", "SECTIONS", "Delta", "Element", "Section", "SectionDelta", "Snapshot", "address",
           "canonical_dump", "canonical_frame", "diff_snapshots"]

Doc = dict[str, Any]

#: the intent's lists, in the order of the canonical document
SECTIONS = ("devices", "links", "failure_domains", "prefixes", "policies", "demands", "jobs")
TOP_FIELDS = ("name", "routing", "defaults")
#: spacing of positions when a section is numbered afresh (room for 20 halvings between two neighbours)
GAP = 1 << 20
_BY_KEY = {c.key: c for c in COLLECTIONS.values()}
IDENTITY: dict[str, Callable[[Doc], str]] = {s: _BY_KEY[s].identity for s in SECTIONS}


# made once: json.dumps builds a new encoder on every call that asks for anything but the defaults
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode
_SORTED = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
_SERVED = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def dumps(value: Any) -> bytes:
    """Compact JSON, ASCII-escaped: how the store keeps documents (and always has)."""
    return _COMPACT(value).encode()


def address(body: bytes) -> str:
    """Where the store keeps ``body``: its SHA-256 in hex."""
    return hashlib.sha256(body).hexdigest()


def _sorted(value: Any) -> bytes:
    return _SORTED(value).encode()


def _served(value: Any) -> bytes:
    """JSON as Starlette's ``JSONResponse`` renders it (UTF-8, compact)."""
    return _SERVED(value).encode()


def canonical_dump(obj: Any) -> Doc:
    """An element's canonical document: its slice of :meth:`Intent.to_document`."""
    doc: Doc = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    return doc


class Element:
    """One object of a section: identity, document, stored JSON; hash, sorted JSON, model object
    and served bytes on first use. Never changed once built (the memoized fields are pure
    functions of the document)."""

    __slots__ = ("__weakref__", "_canon", "_hash", "_obj", "_out", "body", "doc", "ident", "section")

    def __init__(self, section: str, doc: Doc, *, ident: str | None = None, body: bytes | None = None,
                 obj: Any = None):
        self.section = section
        self.doc = doc
        self.ident = IDENTITY[section](doc) if ident is None else ident
        self.body = dumps(doc) if body is None else body
        self._obj = obj
        self._hash: str | None = None
        self._canon: bytes | None = None
        self._out: bytes | None = None

    @property
    def hash(self) -> str:
        """SHA-256 of the stored JSON: the element's address in the store."""
        if self._hash is None:
            self._hash = address(self.body)
        return self._hash

    @property
    def canon(self) -> bytes:
        """The element's JSON with sorted keys: its piece of the content hash."""
        if self._canon is None:
            self._canon = _sorted(self.doc)
        return self._canon

    @property
    def out(self) -> bytes:
        """The element's JSON as the API serves it (UTF-8 where the store escapes)."""
        if self._out is None:
            self._out = self.body if b"\\u" not in self.body else _served(self.doc)
        return self._out

    @property
    def obj(self) -> Any:
        """The validated model object (built from the document on first use)."""
        if self._obj is None:
            obj = shape(self.section, self.doc, 0)
            if obj is None:
                raise ValueError(f"stored {self.section} element {self.ident!r} is not a valid object")
            self._obj = obj
        return self._obj

    def __repr__(self) -> str:
        return f"Element({self.section}:{self.ident})"


#: elements per piece of a section's sorted JSON: an edit makes its piece again, not the section
CHUNK = 256


class Section:
    """A section's elements in document order, their positions (increasing) and an index by identity."""

    __slots__ = ("_canon", "_chunks", "elements", "index", "pos")

    def __init__(self, elements: list[Element], pos: list[int], index: dict[str, int] | None = None):
        self.elements = elements
        self.pos = pos
        self.index = {e.ident: i for i, e in enumerate(elements)} if index is None else index
        if len(self.index) != len(elements):
            raise ValueError("a section's elements must have distinct identities")
        self._canon: bytes | None = None
        self._chunks: list[bytes | None] | None = None

    @property
    def canon(self) -> bytes:
        """The section's list in the content hash's JSON (sorted keys), made once, from pieces of
        :data:`CHUNK` elements (those an edit did not touch come from the section it was made from)."""
        if self._canon is None:
            chunks = self._chunks
            n = (len(self.elements) + CHUNK - 1) // CHUNK
            if chunks is None or len(chunks) != n:
                chunks = [None] * n
            for c in range(n):
                if chunks[c] is None:
                    chunks[c] = b",".join([e.canon for e in self.elements[c * CHUNK:(c + 1) * CHUNK]])
            self._chunks = chunks
            self._canon = b"[" + b",".join(chunks) + b"]"  # type: ignore[arg-type]
        return self._canon

    def inherit(self, base: Section, changed: Iterable[int]) -> Section:
        """Take ``base``'s pieces of the sorted JSON but those holding the places ``changed``: this
        section is ``base`` with elements replaced there or appended (the others in their places)."""
        if base._chunks is not None:
            chunks = list(base._chunks)
            n = (len(base.elements) + CHUNK - 1) // CHUNK
            if len(base.elements) % CHUNK and len(self.elements) != len(base.elements):
                chunks[n - 1] = None  # the last piece grows
            for i in changed:
                if i // CHUNK < len(chunks):
                    chunks[i // CHUNK] = None
            chunks.extend([None] * ((len(self.elements) + CHUNK - 1) // CHUNK - len(chunks)))
            self._chunks = chunks
        return self

    def __len__(self) -> int:
        return len(self.elements)

    def get(self, ident: str) -> Element | None:
        i = self.index.get(ident)
        return None if i is None else self.elements[i]


EMPTY = Section([], [], {})


@dataclass(frozen=True)
class SectionDelta:
    """What changed in one section against the base: identities written (new or changed, with
    their positions) and removed; ``whole`` when the section is written out completely."""

    puts: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    whole: bool = False


@dataclass(frozen=True)
class Delta:
    """A snapshot against its base: the changed sections, and whether the frame changed."""

    sections: dict[str, SectionDelta] = field(default_factory=dict)
    frame: bool = False
    whole: bool = False  # every section written out (a first revision, or a checkpoint)

    @property
    def entries(self) -> int:
        return sum(len(d.puts) + len(d.removed) for d in self.sections.values())


def canonical_frame(name: Any, routing: Any, defaults: Any, has_jobs: bool, collectives: Any = None) -> Doc:
    """The frame of :meth:`Intent.to_document`: jobs only when there are any, and the intent's
    ``collectives`` (a value of the frame, not a section) only when it has any."""
    frame: Doc = {"name": name, "routing": routing, "defaults": defaults}
    for s in SECTIONS:
        if s != "jobs" or has_jobs:
            frame[s] = None
    if collectives:
        frame["collectives"] = collectives
    return frame


def _is_section(key: str, value: Any) -> bool:
    return key in IDENTITY and value is None


class Snapshot:
    """One revision's intent, taken apart (see the module docstring). Build it with
    :meth:`from_document`, :meth:`from_intent`, :meth:`assemble` or a :class:`Draft`."""

    def __init__(self, frame: Doc, sections: Mapping[str, Section], *, content_hash: str | None = None,
                 delta: Delta | None = None, validated: bool = False, intent: Intent | None = None,
                 context: Any = None, distance: int = 0, hint: Snapshot | None = None):
        self.frame = frame
        self.sections: dict[str, Section] = {s: sections.get(s, EMPTY) for s in SECTIONS}
        self._hash = content_hash
        #: the hash's running states after each top-level key (sorted), and what they covered
        self._states: list[tuple[str, Any, Any]] = []
        #: a snapshot sharing most sections, whose states the hash may start from (dropped once used)
        self._hint = hint if content_hash is None else None
        #: what changed against the base this snapshot was made from (None: loaded from the store)
        self.delta = delta
        #: True when this process checked the intent whole, or proved it valid from one it checked
        self.validated = validated
        self._intent = intent
        self._context = context
        #: entries the store wrote since the last revision written out whole
        self.distance = distance
        #: derived representations (served bytes, YAML) by name, filled by their users
        self.memo: dict[str, Any] = {}
        #: the pins of the revision's address allocation (None: not stored yet)
        self.pins: Allocation | None = None

    # -- reading ----------------------------------------------------------------------
    @property
    def hash(self) -> str:
        """The intent's content hash (SHA-256 of its canonical JSON with sorted keys)."""
        if self._hash is None:
            self._hash = self._content_hash()
        return self._hash

    def _content_hash(self) -> str:
        """SHA-256 over the canonical JSON, fed key by key in sorted order. The running state after
        each key is kept, and a snapshot made from another starts from the other's state after
        the keys both have the same (the same section objects): an edit of the links does not
        hash the devices again."""
        keys = sorted(self.frame)
        tokens = [self.sections[k] if _is_section(k, self.frame[k]) else _sorted(self.frame[k]) for k in keys]
        h = hashlib.sha256(b"{")
        start = 0
        prior = self._hint._states if self._hint is not None else []
        for n, (key, token) in enumerate(zip(keys, tokens, strict=True)):
            if n >= len(prior) or prior[n][0] != key or not (
                    prior[n][1] is token or (isinstance(token, bytes) and prior[n][1] == token)):
                break
            h, start = prior[n][2], n + 1
        h = h.copy()
        states = list(prior[:start])
        for n in range(start, len(keys)):
            token = tokens[n]
            h.update((b"," if n else b"") + _sorted(keys[n]) + b":")
            h.update(token.canon if isinstance(token, Section) else token)
            states.append((keys[n], token, h.copy()))
        self._states = states
        self._hint = None
        h.update(b"}")
        return h.hexdigest()

    def size(self) -> int:
        """Elements in all sections."""
        return sum(len(s) for s in self.sections.values())

    def element(self, section: str, ident: str) -> Element | None:
        return self.sections[section].get(ident)

    def document(self) -> JsonObject:
        """The intent document (a new dict and new lists; the element dicts are shared: never change them)."""
        return {k: ([e.doc for e in self.sections[k].elements] if _is_section(k, v) else v)
                for k, v in self.frame.items()}

    def json(self) -> bytes:
        """The document as the API serves JSON (byte for byte ``JSONResponse(document())``), made once."""
        body = self.memo.get("json")
        if body is None:
            parts = []
            for k, v in self.frame.items():
                value = (b"[" + b",".join([e.out for e in self.sections[k].elements]) + b"]"
                         if _is_section(k, v) else _served(v))
                parts.append(_served(k) + b":" + value)
            body = self.memo["json"] = b"{" + b",".join(parts) + b"}"
        out: bytes = body
        return out

    @property
    def intent(self) -> Intent:
        """The intent as model objects (each element's object; the stored revision was validated when written)."""
        if self._intent is None:
            f = self.frame
            if not self.canonical_frame():
                self._intent = validate_intent(self.document())
            else:
                fields: dict[str, Any] = {s: tuple(e.obj for e in self.sections[s].elements) for s in SECTIONS}
                fields.update(name=f["name"], routing=Routing(f["routing"]),
                              defaults=Defaults.model_validate(f["defaults"]), collectives=f.get("collectives") or {})
                self._intent = Intent.model_construct(**fields)
        return self._intent

    def context(self) -> Context:
        """The lookups of :mod:`controller.model.revalidate` for this (valid) intent, made once."""
        if self._context is None:
            self._context = Context(self.intent)
        ctx: Context = self._context
        return ctx

    def canonical(self) -> bool:
        """True when the frame is canonical and every element's document is its valid object's
        canonical document (always so for a validated snapshot; else checked once)."""
        if self.validated:
            return True
        ok = self.memo.get("canonical")
        if ok is None:
            ok = self.canonical_frame() and all(_canonical_element(e) for s in self.sections.values()
                                                for e in s.elements)
            self.memo["canonical"] = ok
        return bool(ok)

    def canonical_frame(self) -> bool:
        f = self.frame
        return (all(k in f for k in TOP_FIELDS)
                and f == canonical_frame(f["name"], f["routing"], f["defaults"], bool(self.sections["jobs"]),
                                         f.get("collectives")))

    # -- building ---------------------------------------------------------------------
    @classmethod
    def from_document(cls, doc: JsonObject, base: Snapshot | None = None, *,
                      objects: Mapping[str, Sequence[Any]] | None = None, content_hash: str | None = None,
                      validated: bool = False, intent: Intent | None = None) -> Snapshot:
        """``doc`` taken apart, reusing ``base``'s elements whose documents are equal and keeping their
        positions where the order allows (else the section is numbered afresh and written whole).
        ``objects`` are the sections' model objects when known (from a validated intent)."""
        frame = {k: (None if k in IDENTITY and isinstance(v, list) else v) for k, v in doc.items()}
        sections: dict[str, Section] = {}
        deltas: dict[str, SectionDelta] = {}
        for s in SECTIONS:
            raw = doc.get(s)
            items = raw if isinstance(raw, list) else []
            objs = objects.get(s) if objects is not None else None
            old = base.sections[s] if base is not None else EMPTY
            sections[s], d = _rebuild(s, items, objs, old, whole=base is None)
            if d.puts or d.removed or d.whole:
                deltas[s] = d
        frame_changed = base is None or frame != base.frame
        return cls(frame, sections, content_hash=content_hash,
                   delta=Delta(deltas, frame_changed, whole=base is None), validated=validated, intent=intent,
                   distance=_distance(base, deltas), hint=base)

    @classmethod
    def from_intent(cls, intent: Intent, base: Snapshot | None = None) -> Snapshot:
        """A validated intent as a snapshot on ``base`` (whose equal elements are reused)."""
        doc = intent.to_document()
        objs = {s: getattr(intent, s) for s in SECTIONS}
        return cls.from_document(doc, base, objects=objs, validated=True, intent=intent)

    def on(self, base: Snapshot) -> Snapshot:
        """This intent as a snapshot made on ``base``, another revision than the one it was edited
        from (the store's tail when change proposals stand after the head), so that what the store
        writes is the delta against ``base``. Its elements are this snapshot's, or ``base``'s equal ones."""
        objs = {s: [e._obj for e in self.sections[s].elements] for s in SECTIONS}
        known = {s: o for s, o in objs.items() if all(x is not None for x in o)}
        return Snapshot.from_document(self.document(), base, objects=known or None, content_hash=self.hash,
                                      validated=self.validated, intent=self._intent)

    def with_delta(self, delta: Delta, distance: int) -> Snapshot:
        """This snapshot, to be written as ``delta`` (a checkpoint writes everything)."""
        snap = Snapshot(self.frame, self.sections, content_hash=self._hash, delta=delta, validated=self.validated,
                        intent=self._intent, context=self._context, distance=distance, hint=self._hint)
        snap.memo = self.memo
        snap.pins = self.pins
        snap._states = self._states
        return snap

    def whole(self) -> Snapshot:
        """This snapshot as a checkpoint: every section written out."""
        return self.with_delta(Delta({s: SectionDelta(tuple(self.sections[s].index), (), True)
                                      for s in SECTIONS}, True, whole=True), 0)


def _canonical_element(e: Element) -> bool:
    obj = e._obj if e._obj is not None else shape(e.section, e.doc, 0)
    if obj is None or canonical_dump(obj) != e.doc:
        return False
    e._obj = obj
    return True


def _distance(base: Snapshot | None, deltas: Mapping[str, SectionDelta]) -> int:
    if base is None:
        return 0
    return base.distance + sum(len(d.puts) + len(d.removed) for d in deltas.values())


def _numbered(n: int) -> list[int]:
    return [i * GAP for i in range(n)]


def _rebuild(section: str, items: list[Any], objs: Sequence[Any] | None, old: Section, *, whole: bool
             ) -> tuple[Section, SectionDelta]:
    """The section holding ``items`` (element documents), with its delta against ``old``."""
    elements: list[Element] = []
    puts: list[str] = []
    for i, doc in enumerate(items):
        ident = IDENTITY[section](doc)
        prev = old.get(ident)
        if prev is not None and prev.doc == doc:
            el = prev
            if objs is not None and el._obj is None:
                el._obj = objs[i]
        else:
            el = Element(section, doc, ident=ident, obj=objs[i] if objs is not None else None)
            puts.append(ident)
        elements.append(el)
    index = {e.ident: i for i, e in enumerate(elements)}
    if len(index) != len(elements):
        raise ValueError(f"{section}: two elements with one identity")
    removed = tuple(ident for ident in old.index if ident not in index)
    if whole:
        return Section(elements, _numbered(len(elements)), index), SectionDelta(tuple(index), (), True)
    if not puts and not removed and all(a is b for a, b in zip(elements, old.elements, strict=True)):
        return old, SectionDelta()
    pos = _positions(elements, old)
    if pos is None:  # reordered, or no room between two neighbours: number afresh, write whole
        return Section(elements, _numbered(len(elements)), index), SectionDelta(tuple(index), removed, True)
    return Section(elements, pos, index), SectionDelta(tuple(puts), removed)


def _positions(elements: list[Element], old: Section) -> list[int] | None:
    """Positions for ``elements``: those kept from ``old`` keep theirs (they must still be in
    order), new ones go between their neighbours; ``None`` when that is impossible."""
    kept = [old.pos[old.index[e.ident]] if e.ident in old.index else None for e in elements]
    last = None
    for p in kept:
        if p is not None:
            if last is not None and p <= last:
                return None
            last = p
    out: list[int] = []
    i = 0
    while i < len(kept):
        if kept[i] is not None:
            out.append(kept[i])  # type: ignore[arg-type]
            i += 1
            continue
        j = i
        while j < len(kept) and kept[j] is None:
            j += 1
        lo = out[-1] if out else None
        hi = kept[j] if j < len(kept) else None
        run = j - i
        if lo is None and hi is None:
            out.extend(_numbered(run))
        elif hi is None:
            out.extend(lo + GAP * (k + 1) for k in range(run))  # type: ignore[operator]
        elif lo is None:
            out.extend(hi - GAP * (run - k) for k in range(run))
        else:
            step = (hi - lo) // (run + 1)
            if step < 1:
                return None
            out.extend(lo + step * (k + 1) for k in range(run))
        i = j
    return out


# -- diffs ----------------------------------------------------------------------------------------
def diff_snapshots(old: Snapshot | None, new: Snapshot | None) -> JsonObject:
    """What changed from ``old`` to ``new``, as :func:`controller.store.objects.diff_documents`
    answers it, comparing stored JSON before looking into fields."""
    of = old.frame if old is not None else {}
    nf = new.frame if new is not None else {}
    fields: JsonObject = {f: [of.get(f), nf.get(f)] for f in (*TOP_FIELDS, "collectives") if of.get(f) != nf.get(f)}
    added: list[JsonValue] = []
    removed: list[JsonValue] = []
    changed: list[JsonValue] = []
    for coll in COLLECTIONS.values():
        a = old.sections[coll.key] if old is not None else EMPTY
        b = new.sections[coll.key] if new is not None else EMPTY
        if a is b:
            continue
        added.extend({"kind": coll.kind, "name": n} for n in sorted(b.index.keys() - a.index.keys()))
        removed.extend({"kind": coll.kind, "name": n} for n in sorted(a.index.keys() - b.index.keys()))
        for name in sorted(a.index.keys() & b.index.keys()):
            ea, eb = a.elements[a.index[name]], b.elements[b.index[name]]
            if ea is eb or ea.body == eb.body:
                continue
            x, y = ea.doc, eb.doc
            delta: JsonObject = {k: [x.get(k), y.get(k)] for k in sorted(x.keys() | y.keys()) if x.get(k) != y.get(k)}
            if delta:
                changed.append({"kind": coll.kind, "name": name, "fields": delta})
    return {"fields": fields, "added": added, "removed": removed, "changed": changed}
