"""A write is acknowledged only once a standby holds it (:func:`controller.store.replication.await_standbys`),
and a logical replication subscriber is no standby.

Two private PostgreSQL servers: a primary with ``wal_level=logical`` publishing a table, and a second server
subscribed to it. The subscriber's walsender is listed in the primary's ``pg_stat_replication`` as streaming
and flushes every write, but a failover cannot promote it: a write it alone holds is not acknowledged
(``StoreOutcomeUnknown`` at once, no standby connected), while the same check with no standby wanted passes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from controller.model.errors import StoreOutcomeUnknown
from controller.store.replication import await_standbys, server_identity
from tests.pg import Cluster, private_cluster


@pytest.fixture(scope="module")
def publisher() -> Iterator[Cluster]:
    with private_cluster("-c wal_level=logical") as c:
        yield c


@pytest.fixture(scope="module")
def subscribed(publisher: Cluster) -> Iterator[Engine]:
    """The publisher's engine, once a subscriber on another server streams its table."""
    pub = create_engine(publisher.url, isolation_level="AUTOCOMMIT")
    with pub.connect() as conn:
        conn.execute(text("CREATE TABLE t (id int PRIMARY KEY)"))
        conn.execute(text("CREATE PUBLICATION p FOR TABLE t"))
    with private_cluster() as other:
        sub = create_engine(other.url, isolation_level="AUTOCOMMIT")
        with sub.connect() as conn:
            conn.execute(text("CREATE TABLE t (id int PRIMARY KEY)"))
            conn.execute(text(f"CREATE SUBSCRIPTION s CONNECTION 'host={publisher.root} dbname=loomtest "
                              f"user=postgres' PUBLICATION p"))
        deadline = time.monotonic() + 60
        with pub.connect() as conn:
            while conn.execute(text("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
                               ).scalar_one() < 1:
                assert time.monotonic() < deadline, "the subscriber never streamed"
                time.sleep(0.1)
        try:
            yield pub
        finally:
            with sub.connect() as conn:
                conn.execute(text("DROP SUBSCRIPTION s"))
            sub.dispose()
            pub.dispose()


def _write(engine: Engine, k: int) -> tuple[object, ...]:
    """A committed write on ``engine``'s server, and that server's identity (as a write transaction notes it)."""
    with Session(engine) as session:
        session.execute(text("INSERT INTO t VALUES (:k)"), {"k": k})
        return server_identity(session)


def test_a_logical_subscriber_is_no_standby(subscribed: Engine) -> None:
    identity = _write(subscribed, 1)
    with subscribed.connect() as conn:  # the subscriber's walsender is there, streaming (what would count)
        assert conn.execute(text("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
                            ).scalar_one() == 1
    started = time.monotonic()
    with pytest.raises(StoreOutcomeUnknown, match="may or may not"):
        await_standbys(subscribed, identity, 1, timeout_s=5.0)
    assert time.monotonic() - started < 4.0  # no standby connected: said at once, not after the timeout
    await_standbys(subscribed, identity, 0, timeout_s=1.0)  # nothing wanted: acknowledged
