"""The revisioned store, the same suite against SQLite and a real PostgreSQL server.

Revisions (ids, hashes, parents, no revision for a no-op), whole-document
validation with nothing stored on failure, If-Match, two writers racing on
one head, tokens (hash, expiry, revocation, bootstrap), the audit log, diffs,
and that the Alembic migrations build exactly the tables the models declare.
"""

from __future__ import annotations

import copy
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from api.core.problems import status_for
from controller import service
from controller.model.errors import Conflict, InvalidIntent, NotFound, StaleRevision
from controller.model.intent import load_intent
from controller.store import objects, repo
from controller.store.db import Database
from controller.store.models import metadata
from tests.pg import drop_schema

ADMIN = service.Actor("tester", "admin")
EXAMPLE = load_intent(service.EXAMPLE_INTENT)


def ctx(if_match: str | None = None, **kw: object) -> service.WriteContext:
    return service.WriteContext(actor=ADMIN, if_match=if_match, request_id="req-1", method="TEST", path="/t",
                                reject_status=status_for, **kw)  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    else:
        db = Database(request.getfixturevalue("postgres_url"))
        drop_schema(db)
    db.migrate()
    yield db
    if request.param == "postgres":
        drop_schema(db)
    db.dispose()


def seed(db: Database) -> repo.Revision:
    with db.session() as s:
        result = service.replace_intent(EXAMPLE.to_document(), session=s, ctx=ctx())
    return result.revision


def revision_ids(db: Database) -> list[int]:
    with db.session() as s:
        return [r.id for r in service.list_revisions(session=s, limit=100, offset=0).items]


def test_a_store_never_migrated_has_no_schema_revision(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        assert db.current_migration() is None and not db.schema_is_current()  # not an error: /readyz says 503
        db.migrate()
        assert db.current_migration() == db.head_migration() and db.schema_is_current()
    finally:
        db.dispose()


def test_migrations_match_models_and_are_idempotent(database: Database) -> None:
    database.migrate()
    assert database.schema_is_current()
    with database.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []


def test_sqlite_pragmas(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = Database(str(tmp_path / "plain.db"))  # a plain path means SQLite
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_first_write_is_revision_1_with_the_intent_hash(database: Database) -> None:
    rev = seed(database)
    assert (rev.id, rev.parent, rev.hash) == (1, None, EXAMPLE.content_hash)
    assert rev.created_at.tzinfo is not None and rev.author == "tester" and rev.request_id == "req-1"
    with database.session() as s:
        head, doc = service.get_intent(session=s)
    assert head == rev
    assert doc == EXAMPLE.to_document()
    assert list(doc)[:3] == ["name", "routing", "defaults"]  # document order kept


def test_a_write_that_changes_nothing_creates_no_revision(database: Database) -> None:
    seed(database)
    with database.session() as s:
        again = service.replace_intent(copy.deepcopy(EXAMPLE.to_document()), session=s, ctx=ctx())
        assert not again.changed and again.revision.id == 1
        entries = service.list_audit(session=s, limit=10, offset=0).items
    assert revision_ids(database) == [1]
    assert [e.outcome for e in entries] == ["unchanged", "accepted"]


def test_edits_chain_revisions_with_parents(database: Database) -> None:
    seed(database)
    with database.session() as s:
        obj, r2 = service.update_object("links", "leaf-0-0:eth1", {"capacity_gbps": 40}, session=s, ctx=ctx('"1"'))
        assert obj["capacity_gbps"] == 40 and obj["id"] == "leaf-0-0:eth1"
        _, r3 = service.create_object("policies", {"kind": "drain", "target": "leaf-0-0"}, session=s, ctx=ctx())
        page = service.list_revisions(session=s, limit=2, offset=0)
    assert (r2.revision.id, r2.revision.parent, r3.revision.id, r3.revision.parent) == (2, 1, 3, 2)
    assert [r.id for r in page.items] == [3, 2] and page.total == 3
    assert r3.revision.hash == load_intent_hash(r3.document)


def load_intent_hash(doc: dict) -> str:  # type: ignore[type-arg]
    from controller.model.intent import validate_intent
    return validate_intent(doc).content_hash


def test_invalid_write_stores_nothing_and_reports_locations(database: Database) -> None:
    seed(database)
    bad = EXAMPLE.to_document()
    bad["links"][7]["b"] = "leaf-9-9"
    bad["devices"][0]["asn"] = "x"
    with database.session() as s:
        with pytest.raises(InvalidIntent) as err:
            service.replace_intent(bad, session=s, ctx=ctx())
        locs = {e.loc for e in err.value.errors}
        assert {"links[7].b", "devices[0].asn"} <= locs
        rejected = service.list_audit(session=s, limit=10, offset=0, outcome="rejected").items
    assert revision_ids(database) == [1]
    assert len(rejected) == 1 and rejected[0].status == 422 and "links[7].b" in rejected[0].detail


def test_deleting_a_referenced_device_is_rejected_with_the_references(database: Database) -> None:
    seed(database)
    with database.session() as s, pytest.raises(InvalidIntent) as err:
        service.delete_object("devices", "spine-0-0", session=s, ctx=ctx())
    assert any(e.loc.startswith("links[") and "spine-0-0" in e.msg for e in err.value.errors)
    assert any(e.loc.startswith("failure_domains[0]") for e in err.value.errors)
    assert revision_ids(database) == [1]


def test_failed_edit_leaves_no_trace(database: Database) -> None:
    seed(database)
    with database.session() as s:
        with pytest.raises(NotFound):
            service.update_object("devices", "no-such-device", {"asn": 1}, session=s, ctx=ctx())
        with pytest.raises(Conflict):
            service.create_object("devices", EXAMPLE.to_document()["devices"][0], session=s, ctx=ctx())
    assert revision_ids(database) == [1]


def test_stale_if_match_is_refused(database: Database) -> None:
    seed(database)
    with database.session() as s:
        service.update_object("devices", "tor-0-0", {"asn": 65199}, session=s, ctx=ctx('"1"'))
        with pytest.raises(StaleRevision):
            service.update_object("devices", "tor-0-1", {"asn": 65198}, session=s, ctx=ctx('"1"'))
        service.update_object("devices", "tor-0-1", {"asn": 65198}, session=s, ctx=ctx("*"))
    assert revision_ids(database) == [3, 2, 1]


def test_if_match_zero_means_create_only(database: Database) -> None:
    with database.session() as s:
        with pytest.raises(StaleRevision):
            service.replace_intent(EXAMPLE.to_document(), session=s, ctx=ctx("*"))  # nothing to match yet
        service.replace_intent(EXAMPLE.to_document(), session=s, ctx=ctx('"0"'))
        with pytest.raises(StaleRevision):
            service.replace_intent(EXAMPLE.to_document(), session=s, ctx=ctx('"0"'))
    assert revision_ids(database) == [1]


def _race(db: Database, edits: list[tuple[str, dict[str, object]]], if_match: str | None) -> list[object]:
    """Run the edits in threads that all read the same head before any writes."""
    barrier = threading.Barrier(len(edits))
    results: list[object] = [None] * len(edits)

    def run(i: int, device: str, patch: dict[str, object]) -> None:
        first = [True]
        coll = objects.collection("devices")

        def edit(base):  # type: ignore[no-untyped-def]
            if first[0]:
                first[0] = False
                try:  # SQLite queues writers at BEGIN IMMEDIATE, so only PostgreSQL meets here
                    barrier.wait(timeout=1.5)
                except threading.BrokenBarrierError:
                    pass
            return objects.update_element(coll, base, device, patch)[0]

        with db.session() as s:
            try:
                results[i] = service.apply_edit(edit, session=s, ctx=ctx(if_match), action="device.update")
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                results[i] = exc

    threads = [threading.Thread(target=run, args=(i, d, p)) for i, (d, p) in enumerate(edits)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_two_writers_on_the_same_base_do_not_both_win(database: Database) -> None:
    seed(database)
    results = _race(database, [("tor-0-0", {"asn": 65190}), ("tor-0-1", {"asn": 65191})], '"1"')
    won = [r for r in results if isinstance(r, service.WriteResult)]
    lost = [r for r in results if isinstance(r, Exception)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], Conflict), results
    assert revision_ids(database) == [2, 1]


def test_racing_writers_without_if_match_are_applied_in_turn(database: Database) -> None:
    seed(database)
    results = _race(database, [("tor-0-0", {"asn": 65190}), ("tor-0-1", {"asn": 65191})], None)
    assert all(isinstance(r, service.WriteResult) for r in results), results
    assert revision_ids(database) == [3, 2, 1]
    with database.session() as s:
        _, doc = service.get_intent(session=s)
    asns = {d["name"]: d["asn"] for d in doc["devices"]}
    assert asns["tor-0-0"] == 65190 and asns["tor-0-1"] == 65191  # neither edit lost


def test_diff_between_revisions(database: Database) -> None:
    seed(database)
    with database.session() as s:
        service.update_object("links", "leaf-0-0:eth1", {"capacity_gbps": 40}, session=s, ctx=ctx())
        service.delete_object("demands", "tor-0-0,10.0.1.0_24", session=s, ctx=ctx())
        service.create_object("policies", {"kind": "drain", "target": "leaf-1-1"}, session=s, ctx=ctx())
        doc = service.get_intent(session=s)[1]
        service.replace_intent({**doc, "name": "dc1b", "routing": "bgp"}, session=s, ctx=ctx())
        d = service.diff_revisions(1, 5, session=s)
        back = service.diff_revisions(5, 1, session=s)
        with pytest.raises(NotFound):
            service.diff_revisions(1, 99, session=s)
    assert d["fields"] == {"name": ["dc1", "dc1b"]}
    assert d["added"] == [{"kind": "policy", "name": "drain:leaf-1-1"}]
    assert d["removed"] == [{"kind": "demand", "name": "tor-0-0,10.0.1.0/24"}]
    assert d["changed"] == [{"kind": "link", "name": "leaf-0-0:eth1", "fields": {"capacity_gbps": [100.0, 40.0]}}]
    assert back["added"] == d["removed"] and back["removed"] == d["added"]


def test_tokens_hash_expiry_revocation(database: Database) -> None:
    with database.session() as s:
        token, secret = service.create_token("ci", "operator", session=s, ctx=ctx())
        assert secret.startswith(f"loom_{token.id}_") and token.secret_hash != secret
        assert secret not in token.secret_hash
        assert service.authenticate(secret, session=s) == service.Actor("ci", "operator", token.id)
        assert service.authenticate(secret + "x", session=s) is None
        assert service.authenticate(f"loom_{token.id}_guess", session=s) is None
        assert service.authenticate("not-a-token", session=s) is None
        short, short_secret = service.create_token("short", "viewer", session=s, ctx=ctx(),
                                                   expires_at=datetime.now(UTC) + timedelta(seconds=1))
        assert service.authenticate(short_secret, session=s) is not None
        service.revoke_token(token.id, session=s, ctx=ctx())
        assert service.authenticate(secret, session=s) is None
        with pytest.raises(NotFound):
            service.revoke_token("nope", session=s, ctx=ctx())
        with pytest.raises(Conflict):
            service.create_token("old", "viewer", session=s, ctx=ctx(), expires_at=datetime.now(UTC) - timedelta(1))
        listed = {t.id: t for t in service.list_tokens(session=s)}
        assert listed[token.id].revoked_at is not None and listed[short.id].expires_at is not None
        actions = [e.action for e in service.list_audit(session=s, limit=10, offset=0).items]
    assert actions.count("token.create") == 2 and "token.revoke" in actions
    assert not listed[short.id].active(datetime.now(UTC) + timedelta(seconds=5))


def test_an_expired_token_is_refused(database: Database) -> None:
    secret = "loom_0123456789ab_an-expired-secret"
    past = datetime.now(UTC) - timedelta(minutes=1)
    with database.session() as s, s.begin():
        repo.add_token(session=s, token_id="0123456789ab", name="old", role="admin",
                       secret_hash=service.tokens._hash_secret(secret), created_by="test", now=past - timedelta(days=1),
                       expires_at=past)
    with database.session() as s:
        assert service.authenticate(secret, session=s) is None
        assert service.bootstrap_admin(session=s, ctx=ctx()) is not None  # an expired admin does not count


def test_settings_admin_token_authenticates_without_a_row(database: Database) -> None:
    admin = "k" * 8 + "Xy7-pQ2_" * 4
    with database.session() as s:
        assert service.authenticate(admin, session=s, admin_token=admin) == service.Actor(
            "admin (LOOM_ADMIN_TOKEN)", "admin")
        assert service.authenticate(admin[:-1], session=s, admin_token=admin) is None


def test_bootstrap_admin_only_once(database: Database) -> None:
    with database.session() as s:
        first = service.bootstrap_admin(session=s, ctx=ctx())
        assert first is not None and first[0].role == "admin"
        assert service.bootstrap_admin(session=s, ctx=ctx()) is None
        service.revoke_token(first[0].id, session=s, ctx=ctx(), keep_last_admin=False)  # the CLI's way
        assert service.bootstrap_admin(session=s, ctx=ctx()) is not None  # recovery after revoking


def test_example_loads_only_into_an_empty_store(database: Database) -> None:
    with database.session() as s:
        loaded = service.load_example(session=s, ctx=ctx())
        assert loaded is not None and loaded.revision.id == 1
        assert service.load_example(session=s, ctx=ctx()) is None
    assert revision_ids(database) == [1]


def test_object_writes_need_an_intent_first(database: Database) -> None:
    with database.session() as s, pytest.raises(service.NoIntent):
        service.create_object("devices", {"name": "r1"}, session=s, ctx=ctx())
    with database.session() as s, pytest.raises(NotFound):
        service.get_intent(session=s)


def test_audit_paging_and_filters(database: Database) -> None:
    seed(database)
    with database.session() as s:
        for asn in (65180, 65181, 65182):
            service.update_object("devices", "tor-0-0", {"asn": asn}, session=s, ctx=ctx())
        page = service.list_audit(session=s, limit=2, offset=1)
        by_rev = service.list_audit(session=s, limit=10, offset=0, revision=3)
    assert page.total == 4 and [e.revision for e in page.items] == [3, 2]
    assert len(by_rev.items) == 1 and by_rev.items[0].action == "device.update"
    assert by_rev.items[0].request_id == "req-1" and by_rev.items[0].actor == "tester"
