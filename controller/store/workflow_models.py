"""The change workflow's tables: changes and their transitions, compressed plans,
deployments (which revision is active), drift reports and idempotency keys.

A **change** carries a proposed revision against a base revision through
draft -> reviewed -> committing -> committed | failed | rolled_back; each move is
a **transition** row (time, actor, reason). ``committing_slot`` is 1 while a
change commits and NULL otherwise, under a unique constraint, so only one
change can commit at a time across every controller process sharing the store.
A **plan** is stored per revision as zlib-compressed JSON (DESIGN contract 2).
A **deployment** row is written each time a revision becomes active; the
active revision is the newest one. **Drift** reports keep what the last check
found; **idempotency keys** keep the answer given to a POST so that a retry
with the same ``Idempotency-Key`` gets the same answer.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from controller.store.base import Base

__all__ = ["AutoTeStateRow", "ChangeRow", "DeploymentRow", "DriftRow", "EventRow", "IdempotencyRow",
           "InsightBaselineRow", "LeaseRow", "OpStateRow", "PlanRow", "ReplicaRow", "TransitionRow"]


class ChangeRow(Base):
    """One change: a proposed revision, its review and its commit."""

    __tablename__ = "changes"
    __table_args__ = (Index("ix_changes_state", "state"), Index("ix_changes_settled", "settled"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16), default="change")  # change | rollback | repair
    state: Mapped[str] = mapped_column(String(16))
    base_revision: Mapped[int | None] = mapped_column(ForeignKey("revisions.id"))
    proposed_revision: Mapped[int | None] = mapped_column(ForeignKey("revisions.id"))
    message: Mapped[str] = mapped_column(Text, default="")
    author: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    review: Mapped[str | None] = mapped_column(Text)  # JSON of the last review
    reviewed_active: Mapped[int | None] = mapped_column(Integer)  # the active revision the review was made against
    verdict: Mapped[str | None] = mapped_column(String(16))
    progress: Mapped[str | None] = mapped_column(Text)  # JSON
    force_reason: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    transaction: Mapped[str | None] = mapped_column(String(64))
    previous_active: Mapped[int | None] = mapped_column(Integer)
    committing_slot: Mapped[int | None] = mapped_column(Integer, unique=True)
    trigger: Mapped[str | None] = mapped_column(Text)  # JSON: what made auto-te propose it (measured vs predicted)
    runner_epoch: Mapped[int | None] = mapped_column(Integer)  # the leader epoch running its commit (NULL: queued)
    settled: Mapped[bool | None] = mapped_column(Boolean)  # NULL: not final yet; false: devices still to drive
    settle: Mapped[str | None] = mapped_column(Text)  # JSON: the target revision and the devices still pending
    #: JSON ``{"links": [...], "devices": [...]}``: the failed parts its plan leaves out (a failure reaction's
    #: overlay, or the one in force when an operator's change committed); NULL: none
    overlay: Mapped[str | None] = mapped_column(Text)


class TransitionRow(Base):
    """One state change of a change."""

    __tablename__ = "change_transitions"
    __table_args__ = (Index("ix_change_transitions_change_id", "change_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    change_id: Mapped[int] = mapped_column(ForeignKey("changes.id"))
    state: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(Text, default="")


class PlanRow(Base):
    """A revision's compiled plan, zlib-compressed JSON."""

    __tablename__ = "plans"

    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id"), primary_key=True, autoincrement=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    data: Mapped[bytes] = mapped_column(LargeBinary)


class DeploymentRow(Base):
    """A revision became active (committed to the devices)."""

    __tablename__ = "deployments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id"))
    change_id: Mapped[int | None] = mapped_column(ForeignKey("changes.id"))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    overlay: Mapped[str | None] = mapped_column(Text)  # JSON: the overlay the fabric runs with it (NULL: none)


class EventRow(Base):
    """One event of ``GET /v1/events`` (server-sent events): its id is the stream's ``id``, resumable."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    kind: Mapped[str] = mapped_column(String(64))
    data: Mapped[str] = mapped_column(Text)  # JSON


class OpStateRow(Base):
    """The operational view the leader keeps (links and devices as their agents report them), for the
    followers and for a new leader: one row (id 1)."""

    __tablename__ = "operational_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    document: Mapped[str] = mapped_column(Text)  # JSON


class DriftRow(Base):
    """One drift check: the whole report as JSON."""

    __tablename__ = "drift_reports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    checked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    active_revision: Mapped[int | None] = mapped_column(Integer)
    document: Mapped[str] = mapped_column(Text)


class IdempotencyRow(Base):
    """The answer given to a POST carrying ``Idempotency-Key`` (per actor)."""

    __tablename__ = "idempotency_keys"

    actor: Mapped[str] = mapped_column(String(128), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    path: Mapped[str] = mapped_column(String(512))
    request_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[int] = mapped_column(Integer)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AutoTeStateRow(Base):
    """The automatic re-tuning's kill switch: one row (id 1), made by the migration."""

    __tablename__ = "auto_te_state"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    paused: Mapped[bool] = mapped_column(Boolean)
    actor: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str] = mapped_column(Text, default="")


class LeaseRow(Base):
    """The leader lease: one row (id 1), made by the migration; times in the database's clock (unix s)."""

    __tablename__ = "leader_lease"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    holder: Mapped[str | None] = mapped_column(String(128))
    epoch: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[float] = mapped_column(Float)
    acquired_at: Mapped[float] = mapped_column(Float)


class ReplicaRow(Base):
    """A replica's heartbeat (``GET /v1/cluster`` lists those seen lately)."""

    __tablename__ = "replicas"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    url: Mapped[str] = mapped_column(String(512))
    started_at: Mapped[float] = mapped_column(Float)
    seen_at: Mapped[float] = mapped_column(Float)


class InsightBaselineRow(Base):
    """A job's or a link's learned baseline (DESIGN.md, ML workloads: policy ``insight``), keyed ``job:NAME`` or
    ``link:ID``, so that a restart or a new leader does not forget it."""

    __tablename__ = "insight_baselines"

    key: Mapped[str] = mapped_column(String(400), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    document: Mapped[str] = mapped_column(Text)  # JSON: controller.telemetry.insight's baseline document


class TelemetrySegmentRow(Base):
    """A span of the collector's interval rates (:mod:`controller.telemetry.archive`), written by the leader
    every archive interval, so that a restarted replica's windows reach back over what it did not see."""

    __tablename__ = "telemetry_segments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    start: Mapped[float] = mapped_column(Float)  # the rates ending in (start, end], epoch seconds
    end: Mapped[float] = mapped_column(Float, index=True)
    entries: Mapped[int] = mapped_column(Integer)
    blob: Mapped[bytes] = mapped_column(LargeBinary)  # numpy npz (no pickles)
