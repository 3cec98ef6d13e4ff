"""Tokens that cannot lock the API out, and refused requests in the audit log.

The last active admin token can be neither revoked nor demoted over the API
(409 ``last-admin``), also when two admins try it on each other at once, on
SQLite and on PostgreSQL; token names are printable, bounded and unique among
unrevoked tokens (422 located, 409), and a store with duplicates migrates to
that rule. Refused requests (401, 403, a malformed request's 422) are audited
with who, from where, what and why, through a rate limiter whose summaries
account for every refusal left out: a flood of 1,000 bad tokens leaves a
handful of entries.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import select, text

from api.app import create_app
from api.core.problems import status_for
from controller import service
from controller.model.errors import Conflict, InvalidRequest
from controller.refusals import RefusalLimiter, RefusalOptions
from controller.settings import Settings
from controller.store import repo
from controller.store.db import Database
from controller.store.models import AuditRow
from tests import pg
from tests.apps import Api, TestClient, seeded_store
from tests.serving import LOOM

SETUP = service.WriteContext(actor=service.Actor("setup", "admin"), reject_status=status_for)


def admins(api: Api) -> list[dict[str, Any]]:
    return [t for t in api("GET", "/v1/tokens", role="admin").json() if t["role"] == "admin" and t["active"]]


# -- the last admin ---------------------------------------------------------------------------

def test_the_last_active_admin_can_be_neither_revoked_nor_demoted(api: Api) -> None:
    [only] = admins(api)
    r = api("DELETE", f"/v1/tokens/{only['id']}", role="admin")
    assert r.status_code == 409 and r.json()["type"] == "urn:loom:problem:last-admin"
    assert "last active admin token" in r.json()["detail"] and only["id"] in r.json()["detail"]
    r = api("PATCH", f"/v1/tokens/{only['id']}", role="admin", json={"role": "operator"})
    assert r.status_code == 409 and r.json()["type"] == "urn:loom:problem:last-admin"
    assert admins(api) == [only]
    refused = api("GET", "/v1/audit?outcome=rejected", role="viewer").json()["items"]
    assert [(e["action"], e["status"]) for e in refused[:2]] == [("token.update", 409), ("token.revoke", 409)]

    # a second admin: either may go, not both; an expired or revoked admin does not count
    second = api("POST", "/v1/tokens", role="admin", json={"name": "second", "role": "admin"}).json()
    expiring = api("POST", "/v1/tokens", role="admin",
                   json={"name": "short", "role": "admin", "expires_in_seconds": 60}).json()
    with api.db.session() as s, s.begin():  # it expired
        s.execute(text("UPDATE tokens SET expires_at = :t WHERE id = :id"),
                  {"t": datetime.now(UTC) - timedelta(seconds=1), "id": expiring["id"]})
    r = api("PATCH", f"/v1/tokens/{only['id']}", role="admin", json={"role": "viewer", "name": "demoted"})
    assert r.status_code == 200 and (r.json()["role"], r.json()["name"]) == ("viewer", "demoted")
    r = api("DELETE", f"/v1/tokens/{second['id']}", role=None,
            headers={"Authorization": f"Bearer {second['token']}"})
    assert r.status_code == 409 and r.json()["type"] == "urn:loom:problem:last-admin"  # not even by itself
    r = api("PATCH", f"/v1/tokens/{only['id']}", role=None, json={"role": "admin"},
            headers={"Authorization": f"Bearer {second['token']}"})
    assert r.status_code == 200 and r.json()["role"] == "admin"  # promoted back
    assert api("DELETE", f"/v1/tokens/{second['id']}", role="admin").status_code == 200
    assert [a["id"] for a in admins(api)] == [only["id"]]


def _revoke_each_other(db: Database, a: str, b: str, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Revoke ``a`` and ``b`` from two threads whose checks would both pass if they did not
    exclude each other: each waits (briefly) for the other after reading the admins."""
    barrier = threading.Barrier(2)
    read = repo.active_admins

    def slow_read(**kw: Any) -> list[repo.Token]:
        found = read(**kw)
        try:
            barrier.wait(timeout=1.5)  # a writer that excludes the other meets nobody here
        except threading.BrokenBarrierError:
            pass
        return found

    monkeypatch.setattr(repo, "active_admins", slow_read)
    results: list[object] = [None, None]

    def run(i: int, token_id: str) -> None:
        with db.session() as s:
            try:
                results[i] = service.revoke_token(token_id, session=s, ctx=SETUP)
            except Exception as exc:  # noqa: BLE001 - inspected below
                results[i] = exc

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    url = (f"sqlite:///{tmp_path / 'tokens.db'}" if request.param == "sqlite"
           else request.getfixturevalue("postgres_url"))
    db = Database(url)
    if request.param == "postgres":
        pg.drop_schema(db)
    db.migrate()
    yield db
    if request.param == "postgres":
        pg.drop_schema(db)
    db.dispose()


def test_two_admins_revoking_each_other_at_once_leave_one(database: Database,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with database.session() as s:
        a = service.create_token("admin-a", "admin", session=s, ctx=SETUP)[0]
        b = service.create_token("admin-b", "admin", session=s, ctx=SETUP)[0]
    results = _revoke_each_other(database, a.id, b.id, monkeypatch)
    assert sorted(type(r).__name__ for r in results) == ["LastAdmin", "Token"], results
    with database.session() as s:
        assert repo.count_active_tokens(session=s, role="admin", now=datetime.now(UTC)) == 1


# -- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, why", [
    ("ci\x1b[2Jroot", "U+001B"), ("two\nlines", "U+000A"), ("bell\x07", "U+0007"), ("rtl\u202eevil", "U+202E"),
    ("", "at least 1"), ("x" * 129, "at most 128"), (" padded", "space"),
])
def test_token_names_are_printable_and_bounded(api: Api, name: str, why: str) -> None:
    r = api("POST", "/v1/tokens", role="admin", json={"name": name, "role": "viewer"})
    assert r.status_code == 422 and r.json()["type"] == "urn:loom:problem:invalid-request", r.text
    [err] = r.json()["errors"]
    assert err["loc"] == "body.name" and why in err["msg"], err
    [viewer] = [t for t in api("GET", "/v1/tokens", role="admin").json() if t["role"] == "viewer"]
    r = api("PATCH", f"/v1/tokens/{viewer['id']}", role="admin", json={"name": name})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == "body.name"
    with api.db.session() as s, pytest.raises(InvalidRequest) as err_info:  # the CLI's path, the same rule
        service.create_token(name, "viewer", session=s, ctx=SETUP)
    assert err_info.value.errors[0].loc == "name"
    names = {t["name"] for t in api("GET", "/v1/tokens", role="admin").json()}
    assert name not in names


def test_token_names_are_unique_among_unrevoked_tokens(api: Api) -> None:
    made = api("POST", "/v1/tokens", role="admin", json={"name": "grafana", "role": "viewer"})
    assert made.status_code == 201
    again = api("POST", "/v1/tokens", role="admin", json={"name": "grafana", "role": "operator"})
    assert again.status_code == 409 and "grafana" in again.json()["detail"]
    assert made.json()["id"] in again.json()["detail"]
    [viewer] = [t for t in api("GET", "/v1/tokens", role="admin").json() if t["name"] == "viewer-1"]
    assert api("PATCH", f"/v1/tokens/{viewer['id']}", role="admin", json={"name": "grafana"}).status_code == 409
    assert api("DELETE", f"/v1/tokens/{made.json()['id']}", role="admin").status_code == 200
    reused = api("POST", "/v1/tokens", role="admin", json={"name": "grafana", "role": "operator"})
    assert reused.status_code == 201  # a revoked token's name is free again
    assert api("PATCH", f"/v1/tokens/{made.json()['id']}", role="admin", json={"name": "x"}).status_code == 409
    rejected = [e for e in api("GET", "/v1/audit?outcome=rejected", role="viewer").json()["items"]
                if e["action"].startswith("token.")]
    assert [e["status"] for e in rejected] == [409, 409, 409]


def test_two_creators_of_one_name_at_once_one_wins(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    barrier = threading.Barrier(2)
    check = repo._live_name_taken

    def slow_check(name: str, **kw: Any) -> repo.Token | None:
        found = check(name, **kw)
        try:
            barrier.wait(timeout=1.5)
        except threading.BrokenBarrierError:
            pass
        return found

    monkeypatch.setattr(repo, "_live_name_taken", slow_check)
    results: list[object] = [None, None]

    def run(i: int) -> None:
        with database.session() as s:
            try:
                results[i] = service.create_token("deploy", "operator", session=s, ctx=SETUP)[0]
            except Exception as exc:  # noqa: BLE001 - inspected below
                results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "Token"], results
    assert all(not isinstance(r, Exception) or isinstance(r, Conflict) for r in results)


def test_a_store_with_duplicate_names_migrates_to_unique_ones(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'old.db'}")
    cfg = db._alembic_config()
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with db.engine.begin() as conn:
        for i, (name, revoked) in enumerate([("ci", None), ("ci", None), ("ci", t0), ("ops", None), ("ci", None)]):
            conn.execute(text("INSERT INTO tokens (id, name, role, secret_hash, created_at, created_by, revoked_at) "
                              "VALUES (:id, :name, 'viewer', :h, :at, 'test', :rev)"),
                         {"id": f"id{i}", "name": name, "h": f"h{i}", "at": t0 + timedelta(minutes=i), "rev": revoked})
    db.migrate()
    with db.session() as s:
        names = {t.id: t.name for t in service.list_tokens(session=s)}
    assert names == {"id0": "ci", "id1": "ci (id1)", "id2": "ci", "id3": "ops", "id4": "ci (id4)"}
    db.dispose()


def test_cli_refuses_an_unprintable_name(tmp_path: Path) -> None:
    import subprocess

    r = subprocess.run([*LOOM, "token", "create", "--name", "evil\x1b]0;x\x07", "--role", "viewer", "--db",
                        str(tmp_path / "cli.db")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--name: must be printable" in r.stdout + r.stderr


# -- refused requests in the audit log ------------------------------------------------------------

def rows_of(db: Database) -> list[AuditRow]:
    with db.session() as s:
        return list(s.scalars(select(AuditRow).order_by(AuditRow.id)))


def audit_rows(api: Api) -> list[AuditRow]:
    return rows_of(api.db)


def test_refused_requests_are_audited_with_who_what_and_why(api: Api) -> None:
    before = len(audit_rows(api))
    assert api("GET", "/v1/devices", role=None, headers={"X-Request-ID": "no-token"}).status_code == 401
    assert api("GET", "/v1/devices", role=None, headers={"Authorization": "Bearer loom_abc_wrong",
                                                         "X-Request-ID": "bad-token"}).status_code == 401
    assert api("DELETE", "/v1/devices/tor-0-0", role="viewer", headers={"X-Request-ID": "viewer-writes"}
               ).status_code == 403
    assert api("POST", "/v1/links", role="operator", json={"a": "tor-0-0", "capacity_gbps": -1},
               headers={"X-Request-ID": "bad-body"}).status_code == 422
    rows = {r.request_id: r for r in audit_rows(api)[before:]}
    assert set(rows) == {"no-token", "bad-token", "viewer-writes", "bad-body"}
    for r in rows.values():
        assert r.action == "request.refused" and r.outcome == "rejected" and r.client == "testclient"
    assert (rows["no-token"].actor, rows["no-token"].status, rows["no-token"].method, rows["no-token"].path) == (
        "anonymous", 401, "GET", "/v1/devices")
    assert "Authorization: Bearer" in rows["no-token"].detail
    assert rows["bad-token"].actor == "anonymous" and "unknown, expired or revoked" in rows["bad-token"].detail
    viewer = rows["viewer-writes"]
    assert (viewer.actor, viewer.status, viewer.method, viewer.path) == ("viewer-1", 403, "DELETE",
                                                                        "/v1/devices/tor-0-0")
    assert viewer.token_id is not None and "operator role" in viewer.detail
    bad = rows["bad-body"]
    assert (bad.actor, bad.status) == ("operator-1", 422)
    assert {"body.capacity_gbps", "body.a_port"} <= {e["loc"] for e in json.loads(bad.detail)}
    listed = api("GET", "/v1/audit?outcome=rejected", role="viewer").json()["items"]
    assert {e["request_id"] for e in listed} >= set(rows) and all("client" in e for e in listed)


@pytest.mark.slow
def test_a_flood_of_bad_tokens_leaves_a_bounded_number_of_entries(tmp_path: Path) -> None:
    n = 1000
    db, _ = seeded_store(f"sqlite:///{tmp_path / 'flood.db'}")
    before = len(rows_of(db))
    with TestClient(create_app(Settings(db_url=db.url), database=db)) as client:
        for i in range(n):
            r = client.get("/v1/intent", headers={"Authorization": f"Bearer loom_x{i % 7}_guess"})
            assert r.status_code == 401
        during = rows_of(db)[before:]
    rows = rows_of(db)[before:]  # the shutdown wrote the summary of the rest
    db.dispose()
    one_by_one = [r for r in rows if r.action == "request.refused"]
    summaries = [r for r in rows if r.action == "request.refused.summary"]
    assert len(during) == len(one_by_one) == RefusalOptions().burst  # the flood did not fill the store
    assert len(summaries) == 1 and summaries[0].actor == "anonymous" and summaries[0].client == "testclient"
    assert (summaries[0].status, summaries[0].method, summaries[0].path) == (401, "GET", "/v1/intent")
    counted = re.match(r"(\d+) more refused requests \(401\)", summaries[0].detail)
    assert counted is not None and len(one_by_one) + int(counted.group(1)) == n  # every refusal accounted for


# -- the limiter on its own ---------------------------------------------------------------------

@pytest.mark.unit
def test_the_limiter_refills_and_summarizes_largest_first() -> None:
    lim = RefusalLimiter(RefusalOptions(burst=2, refill_s=10, total_burst=5, total_refill_s=1, summaries=1,
                                        max_clients=3))
    assert [lim.admit("address a", 401, 0.0) for _ in range(4)] == [True, True, False, False]
    assert lim.admit("address a", 403, 0.0)  # another reason, another bucket
    assert not lim.admit("address a", 401, 5.0)  # half a token
    assert lim.admit("address a", 401, 10.5)  # refilled
    assert [s.count for s in lim.flush()] == [3] and lim.flush() == []
    # the total bucket holds over many clients, and the rest of the summaries are folded into one
    admitted = sum(lim.admit(f"address c{i}", 401, 20.0) for i in range(50))
    assert admitted == 5  # total_burst, though every client had its own tokens
    summaries = lim.flush()
    assert len(summaries) == 2 and summaries[-1].who == "*"
    assert sum(s.count for s in summaries) == 45 and len(lim) == 3  # bounded memory, nothing lost
