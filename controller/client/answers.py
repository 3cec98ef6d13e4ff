"""Typed answers of the API that the ground layer has no model for (:mod:`controller.model.documents`
has the plan, review, change, state, telemetry and auto-TE documents; :class:`controller.model.Intent`
is the intent): the status, a revision, a page, the drift report, who a token is, an event.

Frozen dataclasses read from the server's JSON by ``of``; a field the server adds
later is ignored, so an older client keeps working against a newer server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["DeviceDrift", "Document", "DriftReport", "Event", "Health", "Page", "Repair", "Revision", "Status",
           "WhoAmI", "parse_events"]

T = TypeVar("T")
#: one JSON object of the API, as decoded
Document = dict[str, Any]


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


@dataclass(frozen=True)
class Status:
    """``GET /v1/status``: the head revision (the intent being edited), the active one (what the
    devices run) and the change being committed, if any; ``devices``: those with an agent attached."""

    head_revision: int | None
    active_revision: int | None
    committing_change: int | None
    devices: tuple[str, ...] = ()

    @staticmethod
    def of(doc: Document) -> Status:
        return Status(_opt_int(doc.get("head_revision")), _opt_int(doc.get("active_revision")),
                      _opt_int(doc.get("committing_change")), tuple(doc.get("devices") or ()))


@dataclass(frozen=True)
class Revision:
    """An immutable snapshot of the whole intent (``proposal``: a change's, off the head's line)."""

    id: int
    parent: int | None
    hash: str
    created_at: str
    author: str
    message: str
    request_id: str | None = None
    proposal: bool = False

    @staticmethod
    def of(doc: Document) -> Revision:
        return Revision(int(doc["id"]), _opt_int(doc.get("parent")), str(doc["hash"]), str(doc["created_at"]),
                        str(doc["author"]), str(doc.get("message", "")), doc.get("request_id"),
                        bool(doc.get("proposal", False)))


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list, newest first where the list has an order; ``next`` is the next page's URL."""

    items: tuple[T, ...]
    total: int
    limit: int
    offset: int
    next: str | None = None

    @staticmethod
    def of(doc: Document, item: Callable[[Document], T]) -> Page[T]:
        return Page(tuple(item(x) for x in doc.get("items") or ()), int(doc["total"]), int(doc["limit"]),
                    int(doc["offset"]), doc.get("next"))


@dataclass(frozen=True)
class DeviceDrift:
    status: str  # ok, drift or unreachable
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class DriftReport:
    """``GET /v1/drift``: every device against the active revision."""

    active_revision: int | None
    checked_at: str | None
    devices: Mapping[str, DeviceDrift] = field(default_factory=dict)
    note: str | None = None

    @property
    def drifted(self) -> list[str]:
        """The devices not ``ok``, by name."""
        return sorted(n for n, d in self.devices.items() if d.status != "ok")

    @staticmethod
    def of(doc: Document) -> DriftReport:
        devices = {n: DeviceDrift(str(d["status"]), tuple(d.get("details") or ()))
                   for n, d in (doc.get("devices") or {}).items()}
        return DriftReport(_opt_int(doc.get("active_revision")), doc.get("checked_at"), devices, doc.get("note"))


@dataclass(frozen=True)
class Repair:
    """``POST /v1/drift/repair``: the repair change pushing ``revision`` again."""

    change: int
    revision: int

    @staticmethod
    def of(doc: Document) -> Repair:
        return Repair(int(doc["change"]), int(doc["revision"]))


@dataclass(frozen=True)
class WhoAmI:
    name: str
    role: str
    token_id: str | None = None

    @staticmethod
    def of(doc: Document) -> WhoAmI:
        return WhoAmI(str(doc["name"]), str(doc["role"]), doc.get("token_id"))


@dataclass(frozen=True)
class Health:
    """``/readyz`` or ``/healthz``; ``role``: this replica's (leader or follower)."""

    status: str
    role: str | None = None
    schema_revision: str | None = None

    @staticmethod
    def of(doc: Document) -> Health:
        return Health(str(doc["status"]), doc.get("role"), doc.get("schema_revision"))


@dataclass(frozen=True)
class Event:
    """One server-sent event of ``/v1/events``: ``kind`` is ``change.state``, ``link.down``... and ``data``
    its JSON; ``id`` resumes the stream after it (``Last-Event-ID``)."""

    id: int
    kind: str
    data: Document


def parse_events(lines: Iterable[str]) -> Iterator[Event]:
    """The events of a ``text/event-stream`` (comments, ``retry`` and events without an id skipped)."""
    ident: str | None = None
    kind = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if ident is not None and ident.isdigit() and data:
                yield Event(int(ident), kind, json.loads("\n".join(data)))
            ident, kind, data = None, "message", []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            ident = value
        elif name == "event":
            kind = value
        elif name == "data":
            data.append(value)
