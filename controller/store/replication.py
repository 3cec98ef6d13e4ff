"""A write is acknowledged only once a standby holds it (issue 31).

A replicated PostgreSQL acknowledges a COMMIT once a synchronous standby has flushed it, as long as its
failover manager keeps a standby in ``synchronous_standby_names``. It does not always: pg_auto_failover's
``wait_primary`` (the standby gone, or catching up after it re-joined) empties the list, and the primary
then commits alone; Patroni without ``synchronous_mode_strict`` does the same. A write committed there is
lost if that primary dies before a standby has it and a standby is promoted. Loom does not trust the
manager's settings for this: on a store with standbys (:func:`auto_ack_standbys`: a PostgreSQL URL naming
more than one host, or ``LOOM_STORE_ACK_STANDBYS``), each write transaction records which server took it
(:func:`server_identity`, inside the transaction) and, once committed, :func:`await_standbys` asks that same
server (a new connection: the same address, port and start time) how far its standbys have flushed. The
write is acknowledged when ``wanted`` of them have flushed past the primary's WAL position read after the
COMMIT; otherwise, or when another server answers (a failover in between), it is
:class:`StoreOutcomeUnknown`: a 503 "may or may not have been applied", whose retry with the same
``Idempotency-Key`` is answered from the store, and checked again, once a standby holds it.

Reading another role's rows of ``pg_stat_replication`` needs ``pg_monitor`` (or ``pg_read_all_stats``);
without it the flush positions read as NULL and every write is answered 503, with that reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from controller.model.errors import StoreOutcomeUnknown

__all__ = ["auto_ack_standbys", "await_standbys", "server_identity", "url_hosts"]

_IDENTITY = "inet_server_addr()::text, inet_server_port(), pg_postmaster_start_time()::text"
#: how often a write whose standbys have not flushed it yet asks again (s)
_POLL_S = 0.005


def url_hosts(url: str) -> int:
    """How many servers a PostgreSQL URL names: ``host=a,b`` (libpq's list), repeated ``host=`` parameters,
    or one host; 0 for another database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return 0
    raw = parsed.query.get("host")
    values = [raw] if isinstance(raw, str) else list(raw or [])
    listed = [h for v in values for h in v.split(",") if h.strip()]
    return max(1, len(listed))


def auto_ack_standbys(url: str) -> int:
    """The standbys a write must reach before it is acknowledged when nothing says how many: one on a
    store reached by a multi-host URL (a replicated formation), none otherwise."""
    return 1 if url_hosts(url) > 1 else 0


def server_identity(session: Session) -> tuple[Any, ...]:
    """The server running ``session``'s transaction: its address, port and start time (a restarted or
    promoted server, or another node, differs in one of them)."""
    return tuple(session.execute(text(f"SELECT {_IDENTITY}")).one())


#: the server, and how many of its standbys are connected, have flushed past ``:lsn`` (the server's own WAL
#: position when it is NULL), and show their positions at all. A standby counts while it streams or catches
#: up, not while a base backup or a start is under way (a state it hides from a role without pg_monitor: such
#: a row counts as connected, with no position, and the answer says to grant it). A logical replication's
#: walsender (a subscriber's, on a logical slot) is no standby: a failover cannot promote it
_POSITIONS = text(
    f"WITH w AS (SELECT COALESCE(CAST(:lsn AS pg_lsn), CASE WHEN pg_is_in_recovery() THEN NULL "
    f"ELSE pg_current_wal_lsn() END) AS lsn) "
    f"SELECT {_IDENTITY}, w.lsn::text, count(r.pid) FILTER (WHERE r.flush_lsn >= w.lsn), count(r.pid), "
    f"count(r.flush_lsn) FROM w LEFT JOIN pg_stat_replication r "
    f"ON (r.state IS NULL OR r.state IN ('streaming', 'catchup')) AND NOT EXISTS (SELECT 1 FROM "
    f"pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical') GROUP BY w.lsn")


def await_standbys(engine: Engine, identity: tuple[Any, ...], wanted: int, timeout_s: float, *,
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Return once ``wanted`` standbys of the server ``identity`` names have flushed its WAL past the
    position it reports first (after the write's COMMIT), within ``timeout_s``; else raise
    :class:`StoreOutcomeUnknown`. One round trip when a synchronous standby already has it. A store error on
    the way is the caller's to turn into the same."""
    lsn: str | None = None
    deadline = time.monotonic() + timeout_s
    with engine.connect() as conn:
        while True:
            row = conn.execute(_POSITIONS, {"lsn": lsn}).one()
            conn.rollback()
            if tuple(row[:3]) != identity or row[3] is None:  # another server, or one that is a standby now
                raise StoreOutcomeUnknown("the store's primary changed while the write committed: it may or may "
                                          "not have been applied (retry it with the same Idempotency-Key)")
            lsn = row[3]
            flushed, connected, visible = row[4:7]
            if flushed >= wanted:
                return
            if connected < wanted or time.monotonic() >= deadline:
                raise StoreOutcomeUnknown(_unconfirmed(flushed, connected, visible, wanted, timeout_s))
            sleep(_POLL_S)


def _unconfirmed(flushed: int, connected: int, visible: int, wanted: int, timeout_s: float) -> str:
    if visible < connected:
        why = "Loom's database role cannot read the standbys' positions (grant it pg_monitor)"
    elif connected < wanted:
        why = f"{connected} standbys connected to the primary, {wanted} needed: the store is degraded"
    else:
        why = f"{flushed} of {connected} connected standbys flushed it within {timeout_s:g} s"
    on = f"{wanted} standbys" if wanted > 1 else "a standby"
    return (f"the write committed on the store's primary but is not yet on {on} ({why}): it may or may not "
            f"have been applied, and is not acknowledged until it is (retry it with the same Idempotency-Key)")
