"""The event stream and the operational view in the store (DESIGN.md, "Operational state and failure reaction").

Events (``link.down``, ``change.state``, ``reaction.committed``...) are rows
whose ids are the server-sent events' ids, so that a client resumes with
``Last-Event-ID`` on any replica; they are written in the transaction of what
they report where there is one (a change's state), and the newest
:data:`KEEP` are kept. The operational view is one JSON document the leader
rewrites as it changes, for the followers and for the next leader. The insight's
baselines (``job:NAME``, ``link:ID``: JSON documents) are kept the same way, so
that a restart does not forget them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from controller.model.documents.base import JsonObject
from controller.store.repo import utc
from controller.store.workflow_models import EventRow, InsightBaselineRow, OpStateRow

__all__ = ["KEEP", "Event", "add_event", "events_after", "events_since", "last_event_id", "load_baselines",
           "load_opstate", "save_baselines", "save_opstate"]

#: events kept (older ones are deleted as new ones come)
KEEP = 20_000


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    at: datetime
    kind: str
    data: dict[str, Any]

    def to_document(self) -> JsonObject:
        return {"id": self.id, "at": self.at.isoformat(), "event": self.kind, "data": self.data}


def add_event(kind: str, data: JsonObject, *, session: Session, now: datetime) -> int:
    """Append an event (in the caller's transaction); returns its id."""
    row = EventRow(at=now, kind=kind, data=json.dumps(data, separators=(",", ":"), default=str))
    session.add(row)
    session.flush()
    if row.id % 500 == 0:  # now and then, the oldest beyond KEEP go
        session.execute(delete(EventRow).where(EventRow.id <= row.id - KEEP))
    return int(row.id)


def events_after(last_id: int, *, session: Session, limit: int = 500) -> list[Event]:
    """Events with an id above ``last_id``, oldest first."""
    rows = session.scalars(select(EventRow).where(EventRow.id > last_id).order_by(EventRow.id).limit(limit))
    return [Event(r.id, utc(r.at) or r.at, r.kind, json.loads(r.data)) for r in rows]


def events_since(kind_prefix: str, since: datetime, *, session: Session, limit: int = 2000) -> list[Event]:
    """The newest ``limit`` events whose kind starts with ``kind_prefix`` (``job.``) at or after ``since``,
    newest first."""
    rows = session.scalars(select(EventRow).where(EventRow.kind.startswith(kind_prefix, autoescape=True))
                           .order_by(EventRow.id.desc()).limit(limit))
    events = (Event(r.id, utc(r.at) or r.at, r.kind, json.loads(r.data)) for r in rows)
    return [e for e in events if e.at >= since]  # (ids grow with time: the newest are the ones in the window)


def last_event_id(*, session: Session) -> int:
    return int(session.scalar(select(func.max(EventRow.id))) or 0)


def save_opstate(document: JsonObject, *, session: Session, now: datetime) -> None:
    row = session.get(OpStateRow, 1)
    text = json.dumps(document, separators=(",", ":"))
    if row is None:
        session.add(OpStateRow(id=1, at=now, document=text))
    else:
        row.at, row.document = now, text
    session.flush()


def load_opstate(*, session: Session) -> tuple[datetime, JsonObject] | None:
    row = session.get(OpStateRow, 1)
    if row is None:
        return None
    return utc(row.at) or row.at, json.loads(row.document)


def save_baselines(documents: dict[str, JsonObject], *, session: Session, now: datetime) -> None:
    """Store the insight's baselines (in the caller's transaction): ``documents`` replaces what was stored."""
    rows = {r.key: r for r in session.scalars(select(InsightBaselineRow))}
    for key in set(rows) - set(documents):
        session.delete(rows[key])
    for key, doc in documents.items():
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        row = rows.get(key)
        if row is None:
            session.add(InsightBaselineRow(key=key, at=now, document=text))
        elif row.document != text:
            row.at, row.document = now, text
    session.flush()


def load_baselines(*, session: Session) -> dict[str, JsonObject]:
    """The insight's stored baselines by key."""
    return {r.key: json.loads(r.document) for r in session.scalars(select(InsightBaselineRow))}
