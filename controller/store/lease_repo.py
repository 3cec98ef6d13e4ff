"""Repository functions of the leader lease and the replicas' heartbeats (session as keyword).

The lease is one row (``leader_lease``, id 1). Every time is the **database's**
clock (seconds since 1970), so replicas whose clocks disagree still agree on
who holds it. :func:`acquire` and :func:`renew` are single conditional
``UPDATE`` statements: on PostgreSQL a concurrent update of the row waits and
then re-checks the condition against the winner's row, on SQLite writers are
serialized by ``BEGIN IMMEDIATE``; either way at most one replica's update
matches, so two replicas never both come out holding the lease. Every
acquisition raises the epoch by one (the agents' fence). Transactions belong
to the caller (:func:`controller.store.db.write_transaction`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

__all__ = ["LeaseView", "acquire", "db_now", "forget", "heartbeat", "holds", "read_lease", "release", "renew",
           "replicas"]


@dataclass(frozen=True)
class LeaseView:
    """The lease as the store holds it, with the store's clock when it was read."""

    holder: str | None
    epoch: int
    expires_at: float
    now: float

    @property
    def live(self) -> bool:
        return self.holder is not None and self.expires_at > self.now


def _now_sql(session: Session) -> str:
    """The database clock in unix seconds, as SQL (the wall clock at each statement, not the transaction's)."""
    if session.get_bind().dialect.name == "postgresql":
        return "extract(epoch from clock_timestamp())"
    return "((julianday('now') - 2440587.5) * 86400.0)"


def db_now(*, session: Session) -> float:
    return float(session.execute(text(f"SELECT {_now_sql(session)}")).scalar_one())


def acquire(*, session: Session, replica: str, ttl: float, takeover: bool = False) -> int | None:
    """Take the lease for ``replica`` when nobody holds it or it expired (or at once with ``takeover``,
    for a store that only this process can open); returns the new epoch, or None when it is held."""
    now = _now_sql(session)
    cond = "" if takeover else f" AND (holder IS NULL OR expires_at <= {now})"
    got = session.execute(text(
        f"UPDATE leader_lease SET holder = :me, epoch = epoch + 1, expires_at = {now} + :ttl, acquired_at = {now} "
        f"WHERE id = 1{cond}"), {"me": replica, "ttl": ttl})
    if got.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return int(session.execute(text("SELECT epoch FROM leader_lease WHERE id = 1")).scalar_one())


def renew(*, session: Session, replica: str, epoch: int, ttl: float) -> bool:
    """Extend ``replica``'s lease of ``epoch`` by ``ttl`` from now, if it still holds it and it has not expired."""
    now = _now_sql(session)
    got = session.execute(text(
        f"UPDATE leader_lease SET expires_at = {now} + :ttl "
        f"WHERE id = 1 AND holder = :me AND epoch = :epoch AND expires_at > {now}"),
        {"me": replica, "epoch": epoch, "ttl": ttl})
    return bool(got.rowcount == 1)  # type: ignore[attr-defined]


def holds(*, session: Session, replica: str, epoch: int) -> bool:
    """Whether ``replica`` holds the lease of ``epoch`` now (in the store's clock)."""
    return session.execute(text(
        f"SELECT 1 FROM leader_lease WHERE id = 1 AND holder = :me AND epoch = :epoch AND expires_at > "
        f"{_now_sql(session)}"), {"me": replica, "epoch": epoch}).first() is not None


def release(*, session: Session, replica: str, epoch: int) -> bool:
    """Give the lease up (a clean shutdown): a follower takes it at its next attempt instead of after the TTL."""
    got = session.execute(text(
        "UPDATE leader_lease SET expires_at = 0 WHERE id = 1 AND holder = :me AND epoch = :epoch"),
        {"me": replica, "epoch": epoch})
    return bool(got.rowcount == 1)  # type: ignore[attr-defined]


def read_lease(*, session: Session) -> LeaseView:
    row = session.execute(text(
        f"SELECT holder, epoch, expires_at, {_now_sql(session)} FROM leader_lease WHERE id = 1")).one()
    return LeaseView(row[0], int(row[1]), float(row[2]), float(row[3]))


def heartbeat(*, session: Session, replica: str, url: str, started_at: float) -> None:
    """Record that ``replica`` is alive now (inserting its row the first time)."""
    now = _now_sql(session)
    got = session.execute(text(f"UPDATE replicas SET seen_at = {now}, url = :url WHERE id = :me"),
                          {"me": replica, "url": url})
    if got.rowcount == 1:  # type: ignore[attr-defined]
        return
    try:
        with session.begin_nested():
            session.execute(text(f"INSERT INTO replicas (id, url, started_at, seen_at) VALUES (:me, :url, :s, {now})"),
                            {"me": replica, "url": url, "s": started_at})
    except IntegrityError:
        pass  # inserted meanwhile by this replica's previous incarnation: seen next time


def replicas(*, session: Session, within: float) -> list[dict[str, object]]:
    """The replicas heard from in the last ``within`` seconds, by id."""
    rows = session.execute(text(
        f"SELECT id, url, started_at, seen_at FROM replicas WHERE seen_at > {_now_sql(session)} - :w ORDER BY id"),
        {"w": within}).all()
    return [{"id": r[0], "url": r[1], "started_at": float(r[2]), "seen_at": float(r[3])} for r in rows]


def forget(*, session: Session, replica: str) -> None:
    session.execute(text("DELETE FROM replicas WHERE id = :me"), {"me": replica})
