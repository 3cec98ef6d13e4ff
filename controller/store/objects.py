"""The intent's collections as addressable objects, and diffs between revisions.

An intent document holds seven lists; the API and the revision diff address their
elements by a stable identity (DESIGN.md section 4):

=================  ===============  =========================================
collection         document key     identity
=================  ===============  =========================================
devices            devices          ``name``
links              links            :attr:`controller.model.Link.key`, the lower end by name (``leaf-0-0:eth1``)
failure-domains    failure_domains  ``name``
prefixes           prefixes         the prefix (``10.0.0.0/24``; in URLs ``10.0.0.0_24`` or ``%2F``)
policies           policies         ``drain:<target>`` for drains, else the kind (the others are singletons)
demands            demands          ``<from>,<prefix>`` (``tor-0-1,10.0.0.0/24``)
jobs               jobs             ``name``
=================  ===============  =========================================

Everything here is pure: functions take plain documents (as stored) and return
new ones; the whole resulting document is validated by the caller.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.model.errors import Conflict, NotFound

__all__ = [
    "COLLECTIONS",
    "Collection",
    "collection",
    "delete_element",
    "diff_documents",
    "find_element",
    "identity",
    "insert_element",
    "parse_object_id",
    "select_elements",
    "update_element",
]

Doc = dict[str, Any]


def _link_key(e: Doc) -> str:
    return min(f"{e.get('a')}:{e.get('a_port')}", f"{e.get('b')}:{e.get('b_port')}")


def _policy_key(e: Doc) -> str:
    return f"drain:{e.get('target')}" if e.get("kind") == "drain" else str(e.get("kind"))


def _int_eq(field: str) -> Callable[[Doc, str], bool]:
    def match(e: Doc, v: str) -> bool:
        return str(e.get(field)) == v
    return match


def _eq(field: str) -> Callable[[Doc, str], bool]:
    return lambda e, v: e.get(field) == v


def _member(field: str) -> Callable[[Doc, str], bool]:
    return lambda e, v: v in (e.get(field) or ())


@dataclass(frozen=True)
class Collection:
    """One list of the intent document, as the API and the diff see it."""

    name: str  # URL segment: failure-domains
    key: str  # document key: failure_domains
    kind: str  # singular, for diffs and messages: failure_domain
    identity: Callable[[Doc], str]
    filters: dict[str, Callable[[Doc, str], bool]]


COLLECTIONS: dict[str, Collection] = {c.name: c for c in (
    Collection("devices", "devices", "device", lambda e: str(e.get("name")),
               {"role": _eq("role"), "pod": _int_eq("pod"), "plane": _int_eq("plane")}),
    Collection("links", "links", "link", _link_key,
               {"device": lambda e, v: v in (e.get("a"), e.get("b"))}),
    Collection("failure-domains", "failure_domains", "failure_domain", lambda e: str(e.get("name")),
               {"kind": _eq("kind"), "device": _member("devices")}),
    Collection("prefixes", "prefixes", "prefix", lambda e: str(e.get("prefix")),
               {"origin": _member("origins")}),
    Collection("policies", "policies", "policy", _policy_key, {"kind": _eq("kind")}),
    Collection("demands", "demands", "demand", lambda e: f"{e.get('from')},{e.get('to')}",
               {"from": _eq("from"), "to": _eq("to")}),
    Collection("jobs", "jobs", "job", lambda e: str(e.get("name")),
               {"tor": _member("tors"), "collective": _eq("collective")}),
)}
_BY_KEY = {c.key: c for c in COLLECTIONS.values()}
_TOP_FIELDS = ("name", "routing", "defaults")


def collection(name: str) -> Collection:
    try:
        return COLLECTIONS[name]
    except KeyError:
        raise NotFound(f"no collection {name!r}") from None


def identity(coll: Collection, element: Doc) -> str:
    return coll.identity(element)


def parse_object_id(coll: Collection, raw: str) -> str:
    """The identity meant by a URL segment: prefixes may write ``/`` as ``_``."""
    if coll.key == "prefixes":
        return raw.replace("_", "/")
    if coll.key == "demands" and "," in raw:
        head, _, prefix = raw.rpartition(",")
        return f"{head},{prefix.replace('_', '/')}"
    return raw


def select_elements(coll: Collection, doc: Doc | None, filters: dict[str, str | None]) -> list[Doc]:
    """The collection's elements that match every given filter, in document order."""
    items = list((doc or {}).get(coll.key) or [])
    for name, value in filters.items():
        if value is None:
            continue
        test = coll.filters[name]
        items = [e for e in items if test(e, value)]
    return items


def find_element(coll: Collection, doc: Doc | None, ident: str) -> tuple[int, Doc]:
    for i, e in enumerate((doc or {}).get(coll.key) or []):
        if coll.identity(e) == ident:
            return i, e
    raise NotFound(f"{coll.kind.replace('_', ' ')} {ident!r} does not exist")


def _with_list(doc: Doc, key: str) -> Doc:
    """A copy of ``doc`` whose list ``key`` is new (the elements are shared, not
    copied: edits replace elements, never change them in place)."""
    out = dict(doc)
    out[key] = list(doc.get(key) or [])
    return out


def insert_element(coll: Collection, doc: Doc, element: Doc) -> Doc:
    """A copy of ``doc`` with ``element`` appended; :class:`Conflict` if its identity is taken."""
    ident = coll.identity(element)
    if any(coll.identity(e) == ident for e in doc.get(coll.key) or []):
        raise Conflict(f"{coll.kind.replace('_', ' ')} {ident!r} already exists")
    out = _with_list(doc, coll.key)
    out[coll.key].append(copy.deepcopy(element))
    return out


def update_element(coll: Collection, doc: Doc, ident: str, patch: Doc) -> tuple[Doc, str]:
    """A copy of ``doc`` with the fields of ``patch`` set on the element (``None``
    clears an optional field); returns the document and the element's identity
    afterwards (it changes when the patch renames it)."""
    i, element = find_element(coll, doc, ident)
    merged = copy.deepcopy(element)
    for field, value in patch.items():
        if value is None:
            merged.pop(field, None)
        else:
            merged[field] = copy.deepcopy(value)
    new_ident = coll.identity(merged)
    if new_ident != ident and any(coll.identity(e) == new_ident for e in doc.get(coll.key) or []):
        raise Conflict(f"{coll.kind.replace('_', ' ')} {new_ident!r} already exists")
    out = _with_list(doc, coll.key)
    out[coll.key][i] = merged
    return out, new_ident


def delete_element(coll: Collection, doc: Doc, ident: str) -> Doc:
    i, _ = find_element(coll, doc, ident)
    out = _with_list(doc, coll.key)
    del out[coll.key][i]
    return out


def diff_documents(old: Doc | None, new: Doc | None) -> dict[str, Any]:
    """What changed from ``old`` to ``new``: top-level ``fields`` (name, routing,
    defaults) as ``{field: [old, new]}``, and the objects ``added``, ``removed``
    and ``changed`` (each ``{kind, name}``; changed ones with ``fields``)."""
    old, new = old or {}, new or {}
    fields = {f: [old.get(f), new.get(f)] for f in (*_TOP_FIELDS, "collectives") if old.get(f) != new.get(f)}
    added: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    for coll in COLLECTIONS.values():
        before = {coll.identity(e): e for e in old.get(coll.key) or []}
        after = {coll.identity(e): e for e in new.get(coll.key) or []}
        for name in sorted(after.keys() - before.keys()):
            added.append({"kind": coll.kind, "name": name})
        for name in sorted(before.keys() - after.keys()):
            removed.append({"kind": coll.kind, "name": name})
        for name in sorted(before.keys() & after.keys()):
            a, b = before[name], after[name]
            delta = {k: [a.get(k), b.get(k)] for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}
            if delta:
                changed.append({"kind": coll.kind, "name": name, "fields": delta})
    return {"fields": fields, "added": added, "removed": removed, "changed": changed}
