"""Stored telemetry segments (:mod:`controller.telemetry.archive`): appended by the leader, read at startup,
pruned past the collector's longest window."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from controller.store.workflow_models import TelemetrySegmentRow

__all__ = ["add_segment", "last_end", "prune_segments", "segments_since"]


def add_segment(start: float, end: float, entries: int, blob: bytes, *, session: Session) -> None:
    """Append a segment (in the caller's transaction)."""
    session.add(TelemetrySegmentRow(start=start, end=end, entries=entries, blob=blob))
    session.flush()


def last_end(*, session: Session) -> float | None:
    """Where the stored segments end (None when there are none): the next one starts there."""
    value = session.scalar(select(func.max(TelemetrySegmentRow.end)))
    return None if value is None else float(value)


def segments_since(t: float, *, session: Session) -> list[bytes]:
    """The blobs of the segments that end after ``t``, oldest first."""
    return list(session.scalars(select(TelemetrySegmentRow.blob).where(TelemetrySegmentRow.end > t)
                                .order_by(TelemetrySegmentRow.end)))


def prune_segments(before: float, *, session: Session) -> int:
    """Delete the segments that end at or before ``before`` (in the caller's transaction); how many."""
    result = session.execute(delete(TelemetrySegmentRow).where(TelemetrySegmentRow.end <= before))
    return int(getattr(result, "rowcount", 0) or 0)
