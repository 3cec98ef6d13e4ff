"""The store's failover: twenty kills of the PostgreSQL primary under write load lose no acknowledged write (#31).

The store is a pg_auto_failover formation (:mod:`tests.pgha`: a monitor, a primary and a synchronous standby)
reached by a multi-host URL with ``target_session_attrs=read-write``; on it, three ``loom serve`` replicas
behind HAProxy with the dry fleet (:mod:`tests.ha_fixture`). Writers PATCH links through HAProxy (half with an
``Idempotency-Key`` of their own, retried after a 503's ``Retry-After``), a reader lists devices, and a change
is being committed (each apply of the fleet takes a second) when the primary's node is SIGKILLed (its keeper
and PostgreSQL: a machine that died; PostgreSQL alone would be restarted by its keeper, no failover). The
monitor promotes the standby; the killed node is started again and re-joins as the standby before the next
kill. Twenty times. Then: no 500 ever (only 503s with ``Retry-After`` during a switch); every acknowledged
write is in the history exactly once, where its ETag says (:func:`tests.ha_cluster.check_history`); a 503 of
a write whose COMMIT was cut is counted as an unknown outcome, found applied or not, never acknowledged; the
change in flight at each kill is settled (committed, or rolled back) by a leader afterwards, with the
switches on the active revision: the lease and the commit queue are in the store and carry over.

The write outage of each failover (from the kill to the first acknowledged write sent after it) is printed;
``python -m tests.bench store_ha`` measures it beside the leader-kill outage.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from controller.model.errors import StoreOutcomeUnknown, StoreUnavailable
from controller.store.db import Database, store_error, switching
from controller.store.replication import auto_ack_standbys, url_hosts
from tests import pgha
from tests.ha_cluster import Traffic, check_history, settle, wait_step
from tests.ha_fixture import HA, KILLS, ha_cluster
from tests.ha_fixture import ha_commit as _commit
from tests.ha_fixture import ha_status as _status

pytestmark = [pytest.mark.postgres, pytest.mark.haproxy, pytest.mark.slow]


@pytest.fixture(scope="module")
def formation() -> Iterator[pgha.Formation]:
    with pgha.formation() as f:
        yield f


@pytest.fixture(scope="module")
def ha_on_formation(tmp_path_factory: pytest.TempPathFactory, formation: pgha.Formation) -> Iterator[HA]:
    with ha_cluster(tmp_path_factory.mktemp("store-ha"), formation.url) as cluster:
        yield cluster


@pytest.mark.unit
def test_the_errors_of_a_switch_over_are_unavailable_and_discard_the_connection() -> None:
    for exc in (psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
                psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
                psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
                psycopg.errors.CannotConnectNow("the database system is starting up"),
                psycopg.errors.ConnectionFailure("connection failure")):
        assert switching(exc), exc
        err = store_error(exc, psycopg)
        assert type(err) is StoreUnavailable and err.retry_after > 0, exc
    assert not switching(psycopg.errors.UniqueViolation("duplicate key"))
    assert not switching(psycopg.errors.SerializationFailure("could not serialize"))
    assert issubclass(StoreOutcomeUnknown, StoreUnavailable)  # the same 503 with Retry-After


def test_a_store_named_by_several_hosts_asks_a_standby_for_every_write() -> None:
    pg = "postgresql+psycopg://loom@/loom"
    assert url_hosts(f"{pg}?host=db1,db2&port=5432,5432&target_session_attrs=read-write") == 2
    assert url_hosts(f"{pg}?host=db1&host=db2&host=db3") == 3
    assert url_hosts("postgresql://loom@db1/loom") == url_hosts(f"{pg}?host=/run/pg") == 1
    assert url_hosts("sqlite:///loom.db") == 0
    assert [auto_ack_standbys(u) for u in (f"{pg}?host=a,b", f"{pg}?host=a", "sqlite:///x.db")] == [1, 0, 0]
    assert Database("sqlite:///:memory:", ack_standbys=1).ack_standbys == 0  # nothing to ask


def test_a_standby_refuses_a_write_as_unavailable(formation: pgha.Formation) -> None:
    """A connection that reaches a standby (no ``target_session_attrs``, or a primary demoted under it) is
    refused a write with 25006: a 503, not a 500."""
    states = formation.wait_healthy()
    standby = next(n for n in formation.nodes if states[n.name][0] == "secondary")
    db = Database(f"postgresql+psycopg://postgres@/{pgha.DBNAME}?host=127.0.0.1&port={standby.port}")
    try:
        with pytest.raises(StoreUnavailable, match="25006"), db.write() as s:
            s.execute(text("CREATE TABLE standby_write (a int)"))
    finally:
        db.dispose()


def test_a_commit_cut_by_the_store_is_never_acknowledged(formation: pgha.Formation) -> None:
    """The connection dies between the last statement and the end of the COMMIT: the write's outcome is
    unknown (StoreOutcomeUnknown, a 503), and the pool's connections are replaced: the next write works."""
    primary = formation.primary()
    db = Database(formation.url)
    try:
        with db.write() as s:
            s.execute(text("CREATE TABLE IF NOT EXISTS cut_commit (a int)"))
        with pytest.raises(StoreOutcomeUnknown, match="may or may not have been applied"), db.write() as s:
            s.execute(text("INSERT INTO cut_commit VALUES (1)"))
            pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with psycopg.connect(host="127.0.0.1", port=primary.port, user="postgres", dbname=pgha.DBNAME,
                                 autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        with db.write() as s:
            s.execute(text("INSERT INTO cut_commit VALUES (2)"))
        with db.session() as s:
            assert s.execute(text("SELECT array_agg(a) FROM cut_commit")).scalar_one() == [2]
    finally:
        db.dispose()


def test_a_write_no_standby_holds_is_never_acknowledged(formation: pgha.Formation) -> None:
    """The standby's node dies: pg_auto_failover puts the primary in ``wait_primary``, which commits alone.
    Such a write is applied on the primary only and would be lost with it: Loom answers it as an unknown
    outcome (503) until the standby is back, then acknowledges again. The same write with a store that asks
    no standby (``ack_standbys=0``) is acknowledged: the case Loom guards against."""
    states = formation.wait_healthy()
    standby = next(n for n in formation.nodes if states[n.name][0] == "secondary")
    db, bare = Database(formation.url), Database(formation.url, ack_standbys=0)
    assert (db.ack_standbys, bare.ack_standbys) == (1, 0)  # a multi-host URL asks one standby by default
    try:
        with db.write() as s:
            s.execute(text("CREATE TABLE IF NOT EXISTS lone_commit (a int)"))
        standby.kill9()
        formation.wait_states({n.name: ("wait_primary",) for n in formation.nodes if n is not standby}, timeout=60)
        with pytest.raises(StoreOutcomeUnknown, match="may or may not have been applied") as caught, \
                db.write() as s:
            s.execute(text("INSERT INTO lone_commit VALUES (1)"))
        assert "not yet on a standby" in str(caught.value), caught.value
        with bare.write() as s:  # acknowledged by the primary alone
            s.execute(text("INSERT INTO lone_commit VALUES (2)"))
        with db.session() as s:  # both applied on the primary: the 503 was right not to say "not applied"
            assert s.execute(text("SELECT array_agg(a ORDER BY a) FROM lone_commit")).scalar_one() == [1, 2]
        formation.restart(standby)
        formation.wait_healthy()
        with db.write() as s:
            s.execute(text("INSERT INTO lone_commit VALUES (3)"))
    finally:
        db.dispose()
        bare.dispose()


def _kill_during_commit(ha: HA, formation: pgha.Formation, active: int, rng: random.Random) -> dict[str, Any]:
    """Commit a change on ``active``, kill the primary's node while its Commits run, start the node again;
    the change as it settled and how the kill went."""
    lb = ha.lb
    ch = _commit(lb, active)
    caught = wait_step(lb, ch["id"], "commit")
    time.sleep(rng.uniform(0.0, 0.3))
    victim = formation.kill_primary()
    t_kill = victim.killed_at
    formation.wait_promoted(victim)
    promoted = time.monotonic() - t_kill
    formation.restart(victim)
    try:
        done = settle(lb, ch["id"], timeout=120)
    except AssertionError as exc:  # what the formation and the replicas say, for the failure's report
        logs = [f"{ha.replicas.name(s)}: {line}" for s in ha.replicas.servers if s.log.exists()
                for line in s.log.read_text(errors="replace").splitlines()[-15:]]
        raise AssertionError(f"{exc}\nformation: {formation.states()}\n" + "\n".join(logs)) from None
    settled = time.monotonic() - t_kill
    formation.wait_healthy()
    return {"change": done, "caught": caught, "t_kill": t_kill, "promoted": promoted, "settled": settled,
            "rejoined": time.monotonic() - t_kill}


def test_twenty_primary_kills_under_write_load_lose_no_acknowledged_write(
        ha_on_formation: HA, formation: pgha.Formation) -> None:
    ha, lb = ha_on_formation, ha_on_formation.lb
    rng = random.Random(31)
    since = _status(lb)["head_revision"]
    links = [item["id"] for item in lb("GET", "/v1/links?limit=6").json()["items"]][2:6]
    traffic = Traffic(ha.balancer.url, links, pause=0.1)
    kills: list[dict[str, Any]] = []
    t_start = time.monotonic()
    print(f"\nset up in {t_start - formation.created:.0f} s (the formation and the cluster)")
    traffic.start()
    try:
        active = _status(lb)["active_revision"] or 1
        while len(kills) < KILLS:
            time.sleep(rng.uniform(0.3, 1.0))  # writes land on the healthy pair
            k = _kill_during_commit(ha, formation, active, rng)
            done = k["change"]
            assert done["state"] in ("committed", "rolled_back"), done
            before, active = active, _status(lb)["active_revision"]
            assert active == (done["proposed_revision"] if done["state"] == "committed" else before), done
            assert ha.fleet.hashes() == ha.expected(active), f"kill {len(kills) + 1}: switches not on {active}"
            kills.append(k)
        time.sleep(1.0)  # writes after the last failover too
    finally:
        traffic.stop()
    elapsed = time.monotonic() - t_start
    writes = [o for o in traffic.outcomes if o.kind == "write"]
    reads = [o for o in traffic.outcomes if o.kind == "read"]
    assert [o for o in traffic.outcomes if o.status >= 500 and o.status != 503] == []  # no 500, 502, 504
    assert [o for o in traffic.outcomes if o.status == 503 and not o.retry_after] == []
    assert [o for o in traffic.outcomes if o.status == 0] == []  # every request answered (no replica died)
    assert all(o.status in (200, 503) for o in reads), [o for o in reads if o.status not in (200, 503)][:5]
    # A Loom 503 "may or may not have been applied" (a COMMIT the store cut, or one no standby holds yet): never
    # acknowledged; check_history finds such a write applied or not (Outcome.outcome_unknown)
    in_doubt = [o for o in writes if o.outcome_unknown]
    per_kill = [(k["t_kill"], pgha.write_outage(writes, k["t_kill"])) for k in kills]
    assert all(x is not None for _, x in per_kill), "a failover after which no write was acknowledged again"
    outages = sorted(x for _, x in per_kill if x is not None)
    sample = random.Random(since)  # the content of every write around a failover, and of one in twenty others

    def read_diff(o: Any) -> bool:  # (a diff costs a request: those sent a second before a kill to 2 s after
        return any(o.started <= t + (x or 0) + 2 and o.ended >= t - 1 for t, x in per_kill) \
            or sample.random() < 0.05  # the first write acknowledged after it)
    t_check = time.monotonic()
    report = check_history(lb, writes, since=since, read_diff=read_diff)
    checked = time.monotonic() - t_check
    assert report.acknowledged > KILLS
    promoted = sorted(k["promoted"] for k in kills)
    settled = sorted(k["settled"] for k in kills)
    rejoined = sorted(k["rejoined"] for k in kills)
    recovered = sum(1 for k in kills if k["caught"] and
                    "recovered after a controller restart" in k["change"]["transitions"][-1]["reason"])
    states = {s: sum(1 for k in kills if k["change"]["state"] == s) for s in ("committed", "rolled_back")}
    print(f"\n{KILLS} primary kills in {elapsed:.0f} s: standby promoted after "
          f"{promoted[0]:.1f}/{promoted[len(promoted) // 2]:.1f}/{promoted[-1]:.1f} s, change settled "
          f"{settled[0]:.1f}/{settled[len(settled) // 2]:.1f}/{settled[-1]:.1f} s, old primary re-joined "
          f"{rejoined[0]:.1f}/{rejoined[len(rejoined) // 2]:.1f}/{rejoined[-1]:.1f} s, write outage "
          f"{outages[0]:.1f}/{outages[len(outages) // 2]:.1f}/{outages[-1]:.1f} s (min/median/max); changes in "
          f"flight {states}, {recovered} recovered by a new leader; {len(writes)} writes "
          f"({sum(1 for o in writes if o.status == 503)} answered 503, {len(in_doubt)} of them in doubt, "
          f"{sum(1 for o in writes if o.attempts > 1)} retried by their client), {len(reads)} reads: {report}; "
          f"history checked in {checked:.0f} s")
