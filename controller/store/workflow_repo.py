"""Repository functions of the change workflow's tables (session as keyword, frozen records out).

Changes (their state a :class:`~controller.model.documents.ChangeState`) with
their transitions, compressed plans per revision, deployments
(the active revision), drift reports and idempotency keys. The one-at-a-time
commit guard is :func:`claim_commit`: it sets the change's ``committing_slot``
under a unique constraint and raises :class:`CommitBusy` when another change
holds it. Transactions belong to the caller.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controller.model.documents import ChangeState
from controller.model.documents.base import JsonObject
from controller.model.errors import Conflict, NotFound
from controller.store.events_repo import add_event
from controller.store.lease_repo import holds
from controller.store.repo import utc
from controller.store.workflow_models import (
    AutoTeStateRow,
    ChangeRow,
    DeploymentRow,
    DriftRow,
    IdempotencyRow,
    PlanRow,
    TransitionRow,
)

__all__ = [
    "Change", "CommitBusy", "Transition", "active_overlay", "active_revision", "add_change", "add_deployment",
    "add_drift", "set_overlay",
    "add_transition", "claim_commit", "committing_change", "find_idempotent", "forget_idempotent", "get_change",
    "get_plan", "latest_drift", "list_changes", "put_idempotent", "put_plan", "release_commit", "runs", "take_up",
    "update_change",
]


class CommitBusy(Conflict):
    """Another change is committing."""


@dataclass(frozen=True)
class Transition:
    state: ChangeState
    at: datetime
    actor: str
    reason: str

    def to_document(self) -> dict[str, Any]:
        return {"state": self.state, "at": self.at.isoformat(), "actor": self.actor, "reason": self.reason}


@dataclass(frozen=True)
class Change:
    id: int
    kind: str
    state: ChangeState
    base_revision: int | None
    proposed_revision: int | None
    message: str
    author: str
    created_at: datetime
    review: dict[str, Any] | None
    reviewed_active: int | None
    verdict: str | None
    progress: dict[str, Any] | None
    force_reason: str | None
    error: str | None
    transaction: str | None
    previous_active: int | None
    transitions: tuple[Transition, ...] = ()
    trigger: dict[str, Any] | None = None
    runner_epoch: int | None = None  # the epoch of the leader that took its commit up (None: queued)
    settled: bool | None = None  # None: not final yet; False: some device is not yet on its final revision
    settle: dict[str, Any] | None = None
    overlay: dict[str, Any] | None = None  # the failed parts its plan leaves out (None: none)

    @classmethod
    def of(cls, row: ChangeRow, transitions: tuple[Transition, ...] = ()) -> Change:
        return cls(row.id, row.kind, ChangeState(row.state), row.base_revision, row.proposed_revision, row.message,
                   row.author, utc(row.created_at) or row.created_at, json.loads(row.review) if row.review else None,
                   row.reviewed_active, row.verdict, json.loads(row.progress) if row.progress else None,
                   row.force_reason, row.error, row.transaction, row.previous_active, transitions,
                   json.loads(row.trigger) if row.trigger else None, row.runner_epoch, row.settled,
                   json.loads(row.settle) if row.settle else None, json.loads(row.overlay) if row.overlay else None)


def _transitions(session: Session, ids: list[int]) -> dict[int, tuple[Transition, ...]]:
    out: dict[int, list[Transition]] = {i: [] for i in ids}
    if ids:
        rows = session.scalars(select(TransitionRow).where(TransitionRow.change_id.in_(ids))
                               .order_by(TransitionRow.id))
        for r in rows:
            out[r.change_id].append(Transition(ChangeState(r.state), utc(r.at) or r.at, r.actor, r.reason))
    return {k: tuple(v) for k, v in out.items()}


# -- changes ------------------------------------------------------------------
def add_change(*, session: Session, kind: str, base_revision: int | None, proposed_revision: int | None,
               message: str, author: str, now: datetime, trigger: JsonObject | None = None,
               overlay: JsonObject | None = None) -> Change:
    row = ChangeRow(kind=kind, state=ChangeState.DRAFT, base_revision=base_revision,
                    proposed_revision=proposed_revision, message=message, author=author, created_at=now,
                    trigger=json.dumps(trigger, separators=(",", ":")) if trigger is not None else None,
                    overlay=_overlay_json(overlay))
    session.add(row)
    session.flush()
    add_transition(row.id, ChangeState.DRAFT, session=session, actor=author, now=now, reason=message)
    return get_change(row.id, session=session)


def add_transition(change_id: int, state: ChangeState, *, session: Session, actor: str, now: datetime,
                   reason: str = "") -> None:
    """A change's move to ``state``, and its ``change.state`` event, in the caller's transaction."""
    session.add(TransitionRow(change_id=change_id, state=state, at=now, actor=actor, reason=reason[:4000]))
    session.flush()
    add_event("change.state", {"change": change_id, "state": str(state), "actor": actor, "reason": reason[:500]},
              session=session, now=now)


def get_change(change_id: int, *, session: Session, for_update: bool = False) -> Change:
    q = select(ChangeRow).where(ChangeRow.id == change_id)
    if for_update and session.get_bind().dialect.name == "postgresql":
        q = q.with_for_update()
    row = session.scalars(q).first()
    if row is None:
        raise NotFound(f"change {change_id} does not exist")
    session.refresh(row)
    return Change.of(row, _transitions(session, [row.id])[row.id])


def list_changes(*, session: Session, limit: int, offset: int, state: ChangeState | str | None = None
                 ) -> tuple[list[Change], int]:
    conds = [ChangeRow.state == state] if state else []
    total = session.scalar(select(func.count()).select_from(ChangeRow).where(*conds)) or 0
    rows = list(session.scalars(select(ChangeRow).where(*conds).order_by(ChangeRow.id.desc())
                                .limit(limit).offset(offset)))
    trans = _transitions(session, [r.id for r in rows])
    return [Change.of(r, trans[r.id]) for r in rows], total


_JSON_FIELDS = ("review", "progress", "trigger", "settle")


def set_overlay(change_id: int, overlay: JsonObject | None, *, session: Session) -> None:
    """The overlay the change's plan leaves out (None or empty: none)."""
    session.execute(update(ChangeRow).where(ChangeRow.id == change_id).values(overlay=_overlay_json(overlay)))
    session.flush()


def update_change(change_id: int, *, session: Session, **fields: Any) -> None:
    """Set columns of a change (``review``/``progress`` given as documents)."""
    values = {k: (json.dumps(v, separators=(",", ":")) if k in _JSON_FIELDS and v is not None else v)
              for k, v in fields.items()}
    session.execute(update(ChangeRow).where(ChangeRow.id == change_id).values(**values))
    session.flush()


def committing_change(*, session: Session) -> Change | None:
    row = session.scalars(select(ChangeRow).where(ChangeRow.state == ChangeState.COMMITTING)
                          .order_by(ChangeRow.id)).first()
    return Change.of(row, _transitions(session, [row.id])[row.id]) if row else None


def unsettled_changes(*, session: Session) -> list[Change]:
    """Final changes some of whose devices are not yet on the revision their final state names (oldest first)."""
    rows = list(session.scalars(select(ChangeRow).where(ChangeRow.settled.is_(False)).order_by(ChangeRow.id)))
    ts = _transitions(session, [r.id for r in rows])
    return [Change.of(r, ts[r.id]) for r in rows]


def claim_commit(change_id: int, *, session: Session) -> None:
    """Take the one commit slot for ``change_id``; :class:`CommitBusy` when another change holds it."""
    holder = session.scalar(select(ChangeRow.id).where(ChangeRow.committing_slot == 1))
    if holder is not None and holder != change_id:
        raise CommitBusy(f"change {holder} is committing; one change commits at a time")
    try:
        with session.begin_nested():
            session.execute(update(ChangeRow).where(ChangeRow.id == change_id).values(committing_slot=1))
    except IntegrityError:
        raise CommitBusy("another change is committing; one change commits at a time") from None


def take_up(change_id: int, epoch: int, *, session: Session, previous: int | None, replica: str | None) -> bool:
    """Mark committing change ``change_id`` as run by the leader of ``epoch``, if it still is committing,
    its runner is still ``previous`` (None: it waits in the queue) and, with ``replica``, that replica
    still holds the lease of ``epoch`` (a deposed leader takes nothing up). True when it did."""
    conds = [ChangeRow.id == change_id, ChangeRow.state == ChangeState.COMMITTING,
             ChangeRow.runner_epoch.is_(None) if previous is None else ChangeRow.runner_epoch == previous]
    if replica is not None:
        if not holds(session=session, replica=replica, epoch=epoch):
            return False
    got = session.execute(update(ChangeRow).where(*conds).values(runner_epoch=epoch))
    return bool(got.rowcount == 1)  # type: ignore[attr-defined]


def runs(change_id: int, epoch: int | None, *, session: Session) -> bool:
    """Whether the commit of ``change_id`` is still run by the leader of ``epoch`` (None: no lease, one process)."""
    row = session.execute(select(ChangeRow.state, ChangeRow.runner_epoch).where(ChangeRow.id == change_id)).first()
    return row is not None and row[0] == ChangeState.COMMITTING and (epoch is None or row[1] == epoch)


def release_commit(change_id: int, *, session: Session) -> None:
    session.execute(update(ChangeRow).where(ChangeRow.id == change_id).values(committing_slot=None))
    session.flush()


# -- plans --------------------------------------------------------------------
def put_plan(revision: int, document: JsonObject, *, session: Session, now: datetime) -> None:
    if session.get(PlanRow, revision) is not None:
        return
    blob = zlib.compress(json.dumps(document, separators=(",", ":")).encode(), 6)
    session.add(PlanRow(revision_id=revision, created_at=now, data=blob))
    session.flush()


def get_plan(revision: int, *, session: Session) -> JsonObject | None:
    blob = session.scalar(select(PlanRow.data).where(PlanRow.revision_id == revision))
    if blob is None:
        return None
    doc: dict[str, Any] = json.loads(zlib.decompress(blob))
    return doc


# -- deployments ----------------------------------------------------------------
def active_revision(*, session: Session) -> int | None:
    return session.scalar(select(DeploymentRow.revision_id).order_by(DeploymentRow.id.desc()).limit(1))


def active_overlay(*, session: Session) -> JsonObject | None:
    """The overlay the fabric runs with its active revision (the newest deployment's), None for none."""
    row = session.execute(select(DeploymentRow.overlay).order_by(DeploymentRow.id.desc()).limit(1)).first()
    return json.loads(row[0]) if row is not None and row[0] else None


def _overlay_json(overlay: JsonObject | None) -> str | None:
    links, devices = (overlay.get("links") or [], overlay.get("devices") or []) if overlay else ([], [])
    if not isinstance(links, list) or not isinstance(devices, list):
        raise TypeError(f"an overlay's links and devices are lists: {overlay!r}")
    if not (links or devices):
        return None
    return json.dumps({"links": sorted(map(str, links)), "devices": sorted(map(str, devices))}, separators=(",", ":"))


def add_deployment(revision: int, change_id: int | None, *, session: Session, now: datetime,
                   overlay: JsonObject | None = None) -> None:
    session.add(DeploymentRow(revision_id=revision, change_id=change_id, at=now, overlay=_overlay_json(overlay)))
    session.flush()


# -- drift ----------------------------------------------------------------------
def add_drift(document: JsonObject, *, session: Session, now: datetime, active: int | None) -> None:
    session.add(DriftRow(checked_at=now, active_revision=active, document=json.dumps(document)))
    session.flush()
    # keep the last 100 reports
    old = session.scalar(select(DriftRow.id).order_by(DriftRow.id.desc()).offset(100).limit(1))
    if old is not None:
        session.query(DriftRow).filter(DriftRow.id <= old).delete()


def latest_drift(*, session: Session) -> JsonObject | None:
    doc = session.scalar(select(DriftRow.document).order_by(DriftRow.id.desc()).limit(1))
    return json.loads(doc) if doc else None


# -- idempotency ------------------------------------------------------------------
def find_idempotent(actor: str, key: str, *, session: Session) -> IdempotencyRow | None:
    row = session.get(IdempotencyRow, (actor, key))
    if row is not None:
        session.expunge(row)
    return row


def put_idempotent(actor: str, key: str, *, session: Session, path: str, request_hash: str, status: int,
                   body: str, now: datetime) -> None:
    try:
        with session.begin_nested():
            session.add(IdempotencyRow(actor=actor, key=key, path=path[:512], request_hash=request_hash,
                                       status=status, body=body, created_at=now))
    except IntegrityError:
        pass  # a concurrent retry stored it first


def forget_idempotent(*, before: datetime, session: Session) -> int:
    """Delete the idempotency keys stored before ``before``; how many."""
    result = session.execute(delete(IdempotencyRow).where(IdempotencyRow.created_at < before))
    return int(getattr(result, "rowcount", 0) or 0)


def auto_te_paused(*, session: Session) -> AutoTeStateRow | None:
    """The automatic re-tuning's pause switch (one row, made by the migration)."""
    return session.get(AutoTeStateRow, 1, populate_existing=True)


def set_auto_te_paused(paused: bool, *, session: Session, actor: str, now: datetime, reason: str) -> None:
    """Set the switch (its one row exists from the migration on: concurrent writers update, never insert)."""
    session.execute(update(AutoTeStateRow).where(AutoTeStateRow.id == 1)
                    .values(paused=paused, actor=actor, at=now, reason=reason[:4000]))
    session.flush()
