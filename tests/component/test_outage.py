"""Outages are 503s, and writers do not lose to each other.

The store's failures become typed errors (``controller.store.db``): a driver's
operational error, a closed connection or an exhausted pool is
``StoreUnavailable``, a serialization failure or deadlock ``StoreContention``,
which writers retry with jittered back-off. The API answers both 503 with
``Retry-After`` (``api.core.problems``), as it does a request that arrives
while the controller shuts down. Against real PostgreSQL: a real serialization
failure is recognized and retried; 20 concurrent writers without If-Match all
land, each exactly once, where 20 with the same If-Match produce one revision
and 19 stale-revision answers; and a ``loom serve`` whose PostgreSQL is stopped
under load answers only 503s (with ``Retry-After``) until it is started again,
then serves everything.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import select, text

from api.app import create_app
from controller.model.errors import StoreContention, StoreUnavailable
from controller.settings import Settings
from controller.store.db import Database, RetryOptions, retrying, store_error
from controller.store.models import AuditRow, RevisionRow
from tests import pg
from tests.apps import seeded_store
from tests.serving import LoomServer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's note about httpx versions
    from fastapi.testclient import TestClient

PROBLEM = "application/problem+json"


def assert_outage_answer(r: httpx.Response) -> None:
    """A 503 problem document of the store with a positive ``Retry-After``."""
    assert r.status_code == 503, (r.status_code, r.text)
    assert r.headers["content-type"].startswith(PROBLEM)
    assert int(r.headers["retry-after"]) > 0
    body = r.json()
    assert body["status"] == 503 and body["type"].startswith("urn:loom:problem:store-"), body
    assert body["request_id"] == r.headers["x-request-id"]


# -- the classification and the retry loop ----------------------------------------------------

@pytest.mark.unit
def test_driver_failures_are_sorted_into_unavailable_and_contention() -> None:
    for exc in (psycopg.errors.SerializationFailure("could not serialize access"),
                psycopg.errors.DeadlockDetected("deadlock detected")):
        assert isinstance(store_error(exc, psycopg), StoreContention), exc
    for exc in (psycopg.OperationalError("connection failed: No such file or directory"),
                psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
                psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"),
                psycopg.InterfaceError("the connection is closed"),
                sqlite3.OperationalError("database is locked")):
        err = store_error(exc, psycopg if not isinstance(exc, sqlite3.Error) else sqlite3)
        assert type(err) is StoreUnavailable and err.retry_after > 0, exc
    # a constraint or a bad statement is not an outage: it stays the driver's (and SQLAlchemy's)
    assert store_error(psycopg.errors.UniqueViolation("duplicate key"), psycopg) is None
    assert store_error(sqlite3.IntegrityError("UNIQUE constraint failed"), sqlite3) is None
    assert store_error(psycopg.ProgrammingError("syntax error"), psycopg) is None
    assert isinstance(store_error(ValueError("x"), psycopg, disconnect=True), StoreUnavailable)


@pytest.mark.unit
def test_retrying_backs_off_with_jitter_and_gives_up_after_its_attempts() -> None:
    pauses: list[float] = []
    calls = [0]

    def flaky(failures: int) -> Callable[[], str]:
        def run() -> str:
            calls[0] += 1
            if calls[0] <= failures:
                raise StoreContention("serialization failure")
            return "done"
        return run

    options = RetryOptions(attempts=5, base_s=0.01, cap_s=0.05)
    assert retrying(flaky(4), options=options, sleep=pauses.append, rng=lambda: 1.0) == "done"
    assert calls[0] == 5 and pauses == [0.01, 0.02, 0.04, 0.05]  # doubling, capped (rng at its maximum)
    calls[0], pauses[:] = 0, []
    with pytest.raises(StoreContention):
        retrying(flaky(5), options=options, sleep=pauses.append, rng=lambda: 0.5)
    assert calls[0] == 5 and pauses == [0.005, 0.01, 0.02, 0.025]  # four pauses between five attempts, jittered
    calls[0] = 0

    def down() -> str:
        calls[0] += 1
        raise StoreUnavailable("connection refused")

    with pytest.raises(StoreUnavailable):  # an outage is not retried here: the client is told to come back
        retrying(down, options=options, sleep=pauses.append)
    assert calls[0] == 1


def test_an_exhausted_pool_is_store_unavailable(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'pool.db'}", pool_timeout_s=0.2)
    held = []
    try:
        with pytest.raises(StoreUnavailable, match="pool"):
            for _ in range(100):  # the pool's size and overflow, and one more
                held.append(db.engine.connect())
        assert len(held) == db.engine.pool.size() + 10  # type: ignore[attr-defined]
    finally:
        for c in held:
            c.close()
        db.dispose()


# -- the API's answers -------------------------------------------------------------------------

def test_a_store_that_does_not_answer_is_503_with_retry_after_on_every_route(tmp_path: Path) -> None:
    db = Database(f"postgresql://nobody@/nodb?host={tmp_path}")  # no server behind this socket directory
    admin = "Zq8-" + secrets.token_urlsafe(32)
    client = TestClient(create_app(Settings(db_url=db.url, admin_token=admin), database=db))  # no lifespan
    settings_admin = {"Authorization": f"Bearer {admin}"}  # authenticates without the store
    stored = {"Authorization": "Bearer loom_0123456789ab_not-checkable-while-down"}  # needs the store
    for method, path, headers, body in (
            ("GET", "/v1/devices", settings_admin, None),
            ("GET", "/v1/intent", stored, None),
            ("PATCH", "/v1/links/leaf-0-0:eth1", settings_admin, {"capacity_gbps": 40}),
            ("POST", "/v1/tokens", settings_admin, {"name": "ci", "role": "viewer"}),
            ("GET", "/v1/audit", stored, None)):
        assert_outage_answer(client.request(method, path, headers=headers, json=body))
    ready = client.get("/readyz")
    assert ready.status_code == 503 and int(ready.headers["retry-after"]) > 0
    spec = client.get("/openapi.json").json()
    for ops in spec["paths"].values():
        for op in ops.values():
            assert "Retry-After" in op["responses"]["503"]["headers"]
    db.dispose()


def test_a_request_during_shutdown_is_503_and_closes_the_connection(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    app = create_app(Settings(db_url=db.url), database=db)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        app.state.stopping = True  # what the lifespan sets when the server begins to stop
        r = client.get("/v1/devices", headers={"X-Request-ID": "late-1"})
        assert r.status_code == 503 and r.json()["type"] == "urn:loom:problem:shutting-down"
        assert int(r.headers["retry-after"]) > 0 and r.headers["connection"] == "close"
        assert r.json()["request_id"] == "late-1" == r.headers["x-request-id"]
        app.state.stopping = False
    db.dispose()


# -- PostgreSQL: contention ----------------------------------------------------------------------

@pytest.fixture
def pg_db(postgres_url: str) -> Iterator[Database]:
    db = Database(postgres_url)
    pg.drop_schema(db)
    db.migrate()
    yield db
    pg.drop_schema(db)
    db.dispose()


@pytest.mark.postgres
def test_a_real_serialization_failure_is_contention_and_is_retried(pg_db: Database) -> None:
    """Two SERIALIZABLE transactions that each read what the other writes: PostgreSQL refuses one
    (40001); the store calls it StoreContention, and a retry of that transaction then succeeds."""
    attempts = [0]

    def write_skew() -> None:
        attempts[0] += 1
        with pg_db.engine.connect() as a, pg_db.engine.connect() as b:
            a = a.execution_options(isolation_level="SERIALIZABLE")
            b = b.execution_options(isolation_level="SERIALIZABLE")
            a.begin()
            a.execute(select(AuditRow.id))
            if attempts[0] == 1:  # the first time, a concurrent transaction races this one
                b.begin()
                b.execute(select(AuditRow.id))
                b.execute(text("INSERT INTO audit (at, actor, method, path, action, outcome, status, detail) "
                               "VALUES (now(), 'b', 'T', '/', 'race', 'accepted', 200, '')"))
            a.execute(text("INSERT INTO audit (at, actor, method, path, action, outcome, status, detail) "
                           "VALUES (now(), 'a', 'T', '/', 'race', 'accepted', 200, '')"))
            if attempts[0] == 1:
                b.commit()
            a.commit()

    with pytest.raises(StoreContention, match="40001"):
        write_skew()
    retrying(write_skew, options=RetryOptions(attempts=3, base_s=0.001))
    assert attempts[0] == 2
    with pg_db.session() as s:
        assert sorted(s.scalars(select(AuditRow.actor))) == ["a", "b"]


@dataclass
class Served:
    server: LoomServer
    tokens: dict[str, str]
    db: Database

    def call(self, method: str, path: str, role: str = "operator", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[role]}", **kw.pop("headers", {})}
        return httpx.request(method, self.server.url + path, headers=headers, timeout=120, **kw)


@pytest.fixture
def served_on_postgres(tmp_path: Path, postgres_url: str) -> Iterator[Served]:
    """``loom serve`` on the session's PostgreSQL, seeded with the example fabric and a token per role."""
    pg.drop_schema(Database(postgres_url))
    db, tokens = seeded_store(postgres_url)
    server = LoomServer(tmp_path, ["--db", postgres_url], "Zq8-" + secrets.token_urlsafe(32))
    server.start()
    try:
        yield Served(server, tokens, db)
    finally:
        server.stop()
        pg.drop_schema(db)
        db.dispose()


def _at_once(n: int, request: Callable[[int], httpx.Response]) -> list[httpx.Response]:
    """``request(i)`` for i in 0..n-1 from n threads released together."""
    barrier = threading.Barrier(n)
    answers: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait(30)
        answers[i] = request(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return answers


WRITERS = 20


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_writers_without_if_match_all_land_exactly_once(served_on_postgres: Served) -> None:
    srv = served_on_postgres
    names = sorted(d["name"] for d in srv.call("GET", "/v1/devices", role="viewer").json()["items"])
    ends = sorted(x["id"] for x in srv.call("GET", "/v1/links?limit=1000", role="viewer").json()["items"])
    # each writer's domain takes down a device and a link of its own: two alike would be refused, and the
    # example's own domains name devices only or links only
    members = [([names[i % len(names)]], [ends[i % len(ends)]]) for i in range(WRITERS)]
    assert len({(d[0], e[0]) for d, e in members}) == WRITERS
    answers = _at_once(WRITERS, lambda i: srv.call(
        "POST", "/v1/failure-domains", json={"name": f"rack-{i}", "kind": "rack", "devices": members[i][0],
                                             "links": members[i][1]},
        headers={"X-Request-ID": f"writer-{i}"}))
    assert [r.status_code for r in answers] == [201] * WRITERS, [r.text for r in answers if r.status_code != 201]
    etags = sorted(int(r.headers["etag"].strip('"')) for r in answers)
    assert etags == list(range(2, 2 + WRITERS))  # one new revision each, none shared, none skipped
    with srv.db.session() as s:
        made = s.execute(select(RevisionRow.id, RevisionRow.request_id).where(RevisionRow.id > 1)).all()
        accepted = s.scalars(select(AuditRow.request_id).where(AuditRow.outcome == "accepted",
                                                               AuditRow.action == "failure_domain.create")).all()
    assert sorted(rid for _, rid in made) == sorted(f"writer-{i}" for i in range(WRITERS))  # each applied once
    assert sorted(accepted) == sorted(f"writer-{i}" for i in range(WRITERS))
    names = {fd["name"] for fd in srv.call("GET", "/v1/intent", role="viewer").json()["failure_domains"]}
    assert {f"rack-{i}" for i in range(WRITERS)} <= names  # every write is in the head


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_writers_with_the_same_if_match_one_wins_the_rest_are_stale(served_on_postgres: Served) -> None:
    srv = served_on_postgres
    answers = _at_once(WRITERS, lambda i: srv.call(
        "PATCH", f"/v1/links/leaf-0-0:eth{1 + i % 2}", json={"capacity_gbps": 10 + i}, headers={"If-Match": '"1"'}))
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] + [409] * (WRITERS - 1), [r.text for r in answers]
    assert all(r.json()["type"] == "urn:loom:problem:stale-revision" for r in answers if r.status_code == 409)
    assert srv.call("GET", "/v1/revisions", role="viewer").json()["total"] == 2


# -- PostgreSQL: an outage under load ----------------------------------------------------------------

@dataclass
class Load:
    """Requests from a few threads until stopped: (sent at, answered at, method, status, response)."""

    call: Callable[..., httpx.Response]
    answers: list[tuple[float, float, str, int, httpx.Response | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, k: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            method, path, body = (("PATCH", "/v1/links/leaf-0-0:eth1", {"capacity_gbps": 50 + (n % 50)})
                                  if (k + n) % 3 == 0 else ("GET", "/v1/devices?limit=5", None))
            sent = time.monotonic()
            try:
                r: httpx.Response | None = self.call(method, path, json=body)
                status = r.status_code
            except httpx.HTTPError:
                r, status = None, -1
            with self.lock:
                self.answers.append((sent, time.monotonic(), method, status, r))
            time.sleep(0.02)

    def between(self, start: float, end: float) -> list[tuple[float, float, str, int, httpx.Response | None]]:
        with self.lock:
            return [a for a in self.answers if a[0] >= start and a[1] <= end]


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_stopped_and_started_under_load_is_503_then_full_service(tmp_path: Path) -> None:
    with pg.private_cluster() as cluster:
        db, tokens = seeded_store(cluster.url)
        db.dispose()
        server = LoomServer(tmp_path, ["--db", cluster.url], "Zq8-" + secrets.token_urlsafe(32))
        server.start()
        headers = {"Authorization": f"Bearer {tokens['operator']}"}
        load = Load(lambda method, path, **kw: httpx.request(method, server.url + path, headers=headers,
                                                             timeout=60, **kw))
        threads = [threading.Thread(target=load.run, args=(k,)) for k in range(4)]
        try:
            for t in threads:
                t.start()
            time.sleep(2)
            t_stop = time.monotonic()
            cluster.stop("fast")
            t_down = time.monotonic()
            time.sleep(4)
            ready = httpx.get(server.url + "/readyz", timeout=30)
            t_start = time.monotonic()
            cluster.start()
            t_up = time.monotonic()
            deadline = t_up + 60
            while not load.between(t_up, time.monotonic()) or \
                    load.between(t_up, time.monotonic())[-1][3] != 200:
                assert time.monotonic() < deadline, "no full service within 60 s of the restart"
                time.sleep(0.1)
            t_recovered = time.monotonic()
            time.sleep(3)
            t_end = time.monotonic()
        finally:
            load.stop.set()
            for t in threads:
                t.join(60)
            server.stop()
        before = load.between(0, t_stop)
        during = load.between(t_down + 0.5, t_start)  # sent after the server was down, answered before it was up
        after = load.between(t_recovered, t_end)
        everything = load.between(0, t_end)
        assert before and during and after and len(during) >= 20, (len(before), len(during), len(after))
        assert {a[3] for a in before} == {200}
        assert {a[3] for a in during} == {503}, sorted({a[3] for a in during})  # only 503s in the outage
        for a in during:
            assert a[4] is not None
            assert_outage_answer(a[4])
        assert {"GET", "PATCH"} <= {a[2] for a in during}
        assert {a[3] for a in after} == {200}, sorted({a[3] for a in after})  # full service after
        assert {a[3] for a in everything} <= {200, 503}  # never a 500, never a dropped connection
        assert ready.status_code == 503 and int(ready.headers["retry-after"]) > 0
        assert t_recovered - t_up < 10, t_recovered - t_up
        assert_logs_name_request_ids(server.log)


def assert_logs_name_request_ids(log: Path) -> None:
    """Every 5xx the server logged (its problem line and its access line) carries the request id, and
    nothing was logged without being a JSON line."""
    import json

    docs = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    fives = [d for d in docs if isinstance(d.get("status"), int) and d["status"] >= 500]
    assert fives and all(d["request_id"] for d in fives), [d for d in fives if not d["request_id"]][:3]
    assert not [d for d in docs if d.get("status") == 500]
