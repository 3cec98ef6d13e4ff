"""Object edits on a revision's snapshot, and the proof that their result is valid.

A :class:`Draft` takes object edits (insert, replace in place, delete) on a base
:class:`~controller.store.snapshot.Snapshot` and finishes them into a new
snapshot, validated, in the cheapest way that is sound:

1. **proven** from the base (:func:`prove_from`, by
   :func:`controller.model.revalidate.proven_valid`): the base was validated in
   this process and the cross-object rules cannot see the change, or only the
   rules of a leaf section need running again;
2. else every cross-object rule run on the objects already built
   (:func:`controller.model.revalidate.cross_object_valid`; only the changed
   objects are built again);
3. and when that finds anything (or an object has a shape error), the document
   checked whole by :func:`controller.model.intent.validate_intent`, which is
   where the located errors come from, exactly as before snapshots existed.

:func:`prove_from` also serves the store, which proves a revision another
process wrote from the cached revision before it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from controller.model import Routing
from controller.model.documents.base import JsonObject
from controller.model.errors import Conflict, NotFound
from controller.model.intent import validate_intent
from controller.model.revalidate import Change, cross_object_valid, proven_valid, shape
from controller.store.snapshot import (
    _BY_KEY,
    GAP,
    IDENTITY,
    TOP_FIELDS,
    Delta,
    Element,
    Section,
    SectionDelta,
    Snapshot,
    _distance,
    canonical_dump,
    canonical_frame,
)

__all__ = ["Draft", "prove_from"]


class _Work:
    """A section being edited: copies of the base's lists made on the first edit."""

    def __init__(self, base: Section):
        self.elements: list[Element | None] = list(base.elements)
        self.pos = base.pos
        self.index = base.index
        self.own_index = False
        self.pending: dict[str, Any] = {}  # identity -> the raw element document given
        self.old: dict[str, Element] = {}  # identity (in the base) -> the base element it replaces
        self.removed: dict[str, Element] = {}
        self.deleted = False

    def own(self) -> None:
        if not self.own_index:
            self.index = dict(self.index)
            self.pos = list(self.pos)
            self.own_index = True


class Draft:
    """Object edits on a base snapshot (or on none: then only whole documents), then :meth:`finish`.

    Edits raise :class:`NotFound` for an unknown identity and :class:`Conflict` for a taken
    one, as the object API answers; element documents are taken as given (shape errors are
    found by :meth:`finish`, located in the resulting document).
    """

    def __init__(self, base: Snapshot):
        self.base = base
        self.work: dict[str, _Work] = {}

    def _section(self, section: str) -> _Work:
        w = self.work.get(section)
        if w is None:
            w = self.work[section] = _Work(self.base.sections[section])
        return w

    def _what(self, section: str) -> str:
        return _BY_KEY[section].kind.replace("_", " ")

    def get(self, section: str, ident: str) -> JsonObject:
        """The element's document as the draft has it now (raw if edited)."""
        w = self.work.get(section)
        if w is not None:
            if ident in w.pending:
                return dict(w.pending[ident])
            i = w.index.get(ident)
            el = w.elements[i] if i is not None else None
        else:
            el = self.base.element(section, ident)
        if el is None:
            raise NotFound(f"{self._what(section)} {ident!r} does not exist")
        return el.doc

    def insert(self, section: str, raw: JsonObject) -> str:
        """Append ``raw``; its identity must be free. Returns the identity."""
        ident = IDENTITY[section](raw)
        w = self._section(section)
        if ident in w.index:
            raise Conflict(f"{self._what(section)} {ident!r} already exists")
        w.own()
        w.index[ident] = len(w.elements)
        w.pos.append((w.pos[-1] + GAP) if w.pos else 0)
        w.elements.append(None)
        w.pending[ident] = raw
        return ident

    def replace(self, section: str, ident: str, raw: JsonObject) -> str:
        """Put ``raw`` in the place of element ``ident`` (same position); returns its identity,
        which a rename changes (it must be free)."""
        w = self._section(section)
        i = w.index.get(ident)
        if i is None:
            raise NotFound(f"{self._what(section)} {ident!r} does not exist")
        new_ident = IDENTITY[section](raw)
        if new_ident != ident and new_ident in w.index:
            raise Conflict(f"{self._what(section)} {new_ident!r} already exists")
        prev = w.elements[i]
        if prev is not None:
            w.old.setdefault(ident, prev)
        if new_ident != ident:
            w.own()
            del w.index[ident]
            w.index[new_ident] = i
            w.pending.pop(ident, None)
            if ident in w.old:
                w.removed[ident] = w.old.pop(ident)
        w.elements[i] = None
        w.pending[new_ident] = raw
        return new_ident

    def delete(self, section: str, ident: str) -> None:
        w = self._section(section)
        i = w.index.get(ident)
        if i is None:
            raise NotFound(f"{self._what(section)} {ident!r} does not exist")
        prev = w.elements[i]
        if prev is not None or ident in w.old:
            w.removed[ident] = prev if prev is not None else w.old.pop(ident)
        w.old.pop(ident, None)
        w.pending.pop(ident, None)
        w.own()
        w.deleted = True
        keys = _keys(w)
        del keys[i]
        del w.elements[i]
        del w.pos[i]
        w.index = {k: n for n, k in enumerate(keys)}

    def document(self) -> JsonObject:
        """The edited document, raw elements as given (for the whole-document check)."""
        doc = self.base.document()
        for s, w in self.work.items():
            keys = _keys(w)
            doc[s] = [e.doc if e is not None else w.pending[k] for e, k in zip(w.elements, keys, strict=True)]
        return doc

    def finish(self) -> Snapshot:
        """The resulting snapshot, validated: proven valid from the base when
        :mod:`controller.model.revalidate` can; else every cross-object rule run on the objects
        (only the changed ones built again); and when anything fails, the document checked whole
        for its located errors.

        Raises :class:`InvalidIntent` with every located error of the resulting document.
        """
        made = self._candidate()
        if made is not None:
            new, delta = made
            if prove_from(self.base, new, delta):
                return new
            if cross_object_valid(Routing(new.frame["routing"]), _LazyObjects(new.sections)):
                new.validated = True
                return new
        intent = validate_intent(self.document())
        return Snapshot.from_intent(intent, self.base)

    def _candidate(self) -> tuple[Snapshot, Delta] | None:
        """The result with each changed element shaped and canonical, not yet known valid; ``None``
        when an element has a shape error or the base is not canonical (check the document whole)."""
        base = self.base
        if not base.canonical():
            return None
        sections = dict(base.sections)
        deltas: dict[str, SectionDelta] = {}
        for s, w in self.work.items():
            elements = list(w.elements)
            for ident, raw in w.pending.items():
                i = w.index[ident]
                obj = shape(s, raw, i)
                if obj is None:
                    return None  # a shape error: the whole-document check locates it
                el = Element(s, canonical_dump(obj), obj=obj)
                if el.ident != ident:
                    return None
                old = w.old.get(ident)
                elements[i] = old if old is not None and old.body == el.body else el
            done = [e for e in elements if e is not None]
            sections[s] = Section(done, w.pos, w.index)
            if not w.deleted:  # the places of the base's elements did not move
                sections[s].inherit(base.sections[s], [w.index[k] for k in w.pending])
            puts = tuple(k for k in w.pending if done[w.index[k]] is not w.old.get(k))
            if puts or w.removed:
                deltas[s] = SectionDelta(puts, tuple(w.removed))
        f = base.frame
        frame = canonical_frame(f["name"], f["routing"], f["defaults"], bool(sections["jobs"]), f.get("collectives"))
        delta = Delta(deltas, frame != base.frame)
        return Snapshot(frame, sections, delta=delta, distance=_distance(base, deltas), hint=base), delta


def prove_from(base: Snapshot, new: Snapshot, delta: Delta) -> bool:
    """Whether ``new``, which is ``base`` changed as ``delta`` says, is proven valid from ``base``
    (validated in this process) by :func:`controller.model.revalidate.proven_valid`; marks it
    validated if so. The changed elements must be canonical documents of valid objects."""
    if not (base.validated and base.canonical_frame() and new.canonical_frame()):
        return False
    if any(base.frame[k] != new.frame[k] for k in TOP_FIELDS):
        return False
    changes: list[Change] = []
    for s, d in delta.sections.items():
        if d.whole:
            return False
        for ident in d.puts:
            el = new.sections[s].get(ident)
            old = base.sections[s].get(ident)
            if el is None or el is old:
                continue  # moved, not changed
            obj = el._obj
            if obj is None:
                obj = shape(s, el.doc, 0)
                if obj is None or canonical_dump(obj) != el.doc:
                    return False
                el._obj = obj
            changes.append(Change(s, old.obj if old is not None else None, obj))
        for ident in d.removed:
            gone = base.sections[s].get(ident)
            if gone is not None:
                changes.append(Change(s, gone.obj, None))
    if not proven_valid(changes, _LazyObjects(new.sections), base.context):
        return False
    # proven: devices, links and prefixes kept every reference field, so the base's lookups still hold
    new._context = base._context
    new.validated = True
    return True


def _keys(w: _Work) -> list[str]:
    """The identity at each place of a section being edited."""
    names = [""] * len(w.elements)
    for k, i in w.index.items():
        names[i] = k
    return names


class _LazyObjects(Mapping[str, Sequence[Any]]):
    """Each section's model objects, listed only for the sections asked for."""

    def __init__(self, sections: Mapping[str, Section]):
        self.sections = sections

    def __getitem__(self, key: str) -> Sequence[Any]:
        return [e.obj for e in self.sections[key].elements]

    def __iter__(self) -> Iterator[str]:
        return iter(self.sections)

    def __len__(self) -> int:
        return len(self.sections)
