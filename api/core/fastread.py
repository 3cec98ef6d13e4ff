"""Reads answered from bytes made once: the intent, list pages and objects, with ETags and 304s.

A revision never changes, so everything derived from it is made once and
served as bytes: the intent document as JSON (byte for byte what
``JSONResponse`` made of it) or YAML (memoized on the revision's snapshot),
and each object's public JSON (the ``XPublic`` schema as FastAPI's response
model serializes it, kept per object for as long as the object lives in some
cached revision). A list page is those bytes joined inside the envelope of
:class:`api.core.schemas.Page`. Tests hold every one of them byte for byte
against the response-model path they replace.

The ETag of a read is its revision's (``"7"``, as ``If-Match`` takes it): the
bytes of a URL at one revision never change, so the tag is strong; JSON and
YAML of ``/v1/intent`` share it and say so with ``Vary: Accept``. A request
whose ``If-None-Match`` names it gets 304 without a body.

Which revision is the head: the one this process saw (or wrote) less than
``Settings.read_cache_s`` ago (:func:`controller.service.cached_head`), so a
read of a cached revision touches neither the store nor a worker thread; a
revision another replica wrote shows within that time.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.core.schemas import SCHEMAS
from controller import service
from controller.store.snapshot import Element, Snapshot

__all__ = ["YAML_TYPES", "etag", "head", "not_modified", "page_bytes", "public_bytes", "snapshot_body", "unchanged",
           "wants_yaml"]

_ADAPTERS: dict[str, TypeAdapter[Any]] = {name: TypeAdapter(s.public) for name, s in SCHEMAS.items()}
_PUBLIC: weakref.WeakKeyDictionary[Element, bytes] = weakref.WeakKeyDictionary()
JSON = "application/json"
YAML = "application/yaml"
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


def wants_yaml(accept: str | None) -> bool:
    """True when the Accept header prefers YAML over JSON."""
    if not accept:
        return False
    best: tuple[float, str] = (-1.0, "")
    for part in accept.split(","):
        media, _, params = part.strip().partition(";")
        q = 1.0
        for p in params.split(";"):
            k, _, v = p.strip().partition("=")
            if k == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        media = media.strip().lower()
        if media in YAML_TYPES or media == "application/json":
            if q > best[0]:
                best = (q, media)
    return best[1] in YAML_TYPES


async def head(request: Request, *, required: bool = True) -> tuple[int, Snapshot] | None:
    """The head revision's id and snapshot: the one this process saw within ``Settings.read_cache_s``
    (no store query, no worker thread), else asked of the store in a worker thread. ``required``:
    :class:`NotFound` on an empty store (else ``None``)."""
    database = request.app.state.database
    hit = service.cached_head(database, max_age=request.app.state.settings.read_cache_s)
    if hit is not None:
        return hit
    return await run_in_threadpool(service.read_intent if required else service.read_head, database)


def etag(revision: int) -> str:
    return f'"{revision}"'


def unchanged(if_none_match: str | None, tag: str) -> bool:
    """Whether ``If-None-Match`` names ``tag`` (weak comparison, as RFC 9110 section 13.1.2 asks) or is ``*``."""
    if not if_none_match:
        return False
    for part in if_none_match.split(","):
        t = part.strip()
        if t == "*" or t.removeprefix("W/") == tag:
            return True
    return False


def not_modified(tag: str, *, vary: str | None = None) -> Response:
    headers = {"ETag": tag}
    if vary:
        headers["Vary"] = vary
    return Response(status_code=304, headers=headers)


def public_bytes(collection: str, el: Element) -> bytes:
    """The object's JSON as ``GET /v1/<collection>/{id}`` serves it (its ``XPublic`` schema)."""
    body = _PUBLIC.get(el)
    if body is None:
        adapter = _ADAPTERS[collection]
        body = adapter.dump_json(adapter.validate_python({**el.doc, "id": el.ident}), by_alias=True)
        _PUBLIC[el] = body
    return body


def page_bytes(collection: str, items: Sequence[Element], *, total: int, limit: int, offset: int,
               next_url: str | None) -> bytes:
    """A list page's JSON (:class:`api.core.schemas.Page` of the collection's ``XPublic``)."""
    inner = b",".join([public_bytes(collection, e) for e in items])
    nxt = b"null" if next_url is None else json.dumps(next_url, ensure_ascii=False).encode()
    return (b'{"items":[' + inner + b'],"total":' + str(total).encode() + b',"limit":' + str(limit).encode()
            + b',"offset":' + str(offset).encode() + b',"next":' + nxt + b"}")


def made_body(snap: Snapshot, yaml_wanted: bool) -> tuple[bytes, str] | None:
    """:func:`snapshot_body` if it was made already (cheap), else ``None``."""
    return snapshot_body(snap, yaml_wanted) if ("yaml" if yaml_wanted else "json") in snap.memo else None


def snapshot_body(snap: Snapshot, yaml_wanted: bool) -> tuple[bytes, str]:
    """The intent document's bytes and media type (JSON, or YAML when ``yaml_wanted``), made once per revision."""
    if not yaml_wanted:
        return snap.json(), JSON
    text = snap.memo.get("yaml")
    if text is None:
        text = snap.memo["yaml"] = yaml.safe_dump(snap.document(), sort_keys=False, default_flow_style=None,
                                                   width=120).encode()
    body: bytes = text
    return body, YAML
