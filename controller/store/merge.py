"""Three-way merge of intent snapshots: a change's edits carried onto a head that moved since its base.

A change is made on a base revision; its proposal is the base with the change's
edits. When the change commits, its edits join the head (the intent as it is
now, which other writes may have moved since the base): every object the change
added, changed or removed (by identity, :mod:`controller.store.objects`) is
added, changed or removed on the head, and every object it left alone keeps
the head's version. An object that both the head and the change changed, to
different results, is a conflict: the merge refuses it, with the object's place
(``links[leaf-0-0:eth3]``, ``defaults.max_ecmp_entries``), instead of letting
either side's edit vanish. The frame's fields (``name``, ``routing``, each key
of ``defaults``) merge the same way.

Pure: snapshots in, a document out (the caller validates it whole).
"""

from __future__ import annotations

from typing import Any

from controller.model.documents.base import JsonObject
from controller.model.errors import IntentError, MergeConflict
from controller.store.snapshot import SECTIONS, Element, Section, Snapshot

__all__ = ["merge_onto_head"]

Doc = dict[str, Any]
_MISSING = object()


def merge_onto_head(base: Snapshot, head: Snapshot, proposal: Snapshot, *, what: str = "the change") -> JsonObject:
    """The head's document with the edits that ``proposal`` makes on ``base``.

    Parameters: ``base``, the revision the change was made on; ``head``, the intent now;
    ``proposal``, the change's intent; ``what`` names the change in the conflicts' messages.

    Returns the merged document (not validated: objects merged from two sides may not fit together).

    Raises :class:`MergeConflict` naming every object or field that the head and the change both
    changed, differently.

    Example: the head raised a link's capacity after the base, the change drained a spine; the
    merged document has both.
    """
    conflicts: list[IntentError] = []
    frame = _merge_frame(base.frame, head.frame, proposal.frame, conflicts, what)
    merged = {s: _merge_section(s, base.sections[s], head.sections[s], proposal.sections[s], conflicts, what)
              for s in SECTIONS}
    if conflicts:
        raise MergeConflict(f"{what} and the head both changed {len(conflicts)} object(s) since its base",
                            conflicts)
    doc: Doc = {key: merged[key] if key in merged else value for key, value in frame.items()}
    for key in SECTIONS:  # a section the head's frame lacks, which the change filled
        if key not in doc and merged[key]:
            doc[key] = merged[key]
    return doc


def _merge_value(loc: str, b: Any, h: Any, p: Any, conflicts: list[IntentError], what: str) -> Any:
    if p == b or h == p:
        return h
    if h == b:
        return p
    if isinstance(h, dict) and isinstance(p, dict) and isinstance(b, dict | None):
        bd: dict[str, Any] = b or {}
        out: dict[str, Any] = {}
        for k in [*h, *(k for k in p if k not in h)]:
            v = _merge_value(f"{loc}.{k}", bd.get(k, _MISSING), h.get(k, _MISSING), p.get(k, _MISSING),
                             conflicts, what)
            if v is not _MISSING:
                out[k] = v
        return out
    conflicts.append(IntentError(loc, f"the head has {_shown(h)} and {what} {_shown(p)} (the base had {_shown(b)})"))
    return h


def _shown(v: Any) -> str:
    return "nothing" if v is _MISSING or v is None else repr(v)


def _merge_frame(b: Doc, h: Doc, p: Doc, conflicts: list[IntentError], what: str) -> Doc:
    out: Doc = {}
    for key in [*h, *(k for k in p if k not in h)]:
        if key in SECTIONS:
            out[key] = None
            continue
        v = _merge_value(key, b.get(key, _MISSING), h.get(key, _MISSING), p.get(key, _MISSING), conflicts, what)
        if v is not _MISSING:
            out[key] = v
    return out


def _same(x: Element | None, y: Element | None) -> bool:
    if x is None or y is None:
        return x is y
    return x is y or x.body == y.body


def _merge_section(name: str, b: Section, h: Section, p: Section, conflicts: list[IntentError],
                   what: str) -> list[Doc]:
    """The head's elements in its order, each as the change left it; then what the change added."""
    if p is b:
        return [e.doc for e in h.elements]
    out: list[Doc] = []
    for e in h.elements:
        be, pe = b.get(e.ident), p.get(e.ident)
        if _same(pe, be) or _same(e, pe):
            out.append(e.doc)
        elif _same(e, be):
            if pe is not None:
                out.append(pe.doc)  # changed by the change (a removal drops it)
        else:
            side = "removed it" if pe is None else "changed it"
            conflicts.append(IntentError(f"{name}[{e.ident}]", f"the head changed it and {what} {side}"))
            out.append(e.doc)
    for pe in p.elements:
        if h.get(pe.ident) is not None:
            continue
        be = b.get(pe.ident)
        if be is None:
            out.append(pe.doc)  # added by the change
        elif not _same(pe, be):
            conflicts.append(IntentError(f"{name}[{pe.ident}]", f"the head removed it and {what} changed it"))
    return out
