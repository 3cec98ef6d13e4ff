"""Revisions stored by content, on SQLite and on a real PostgreSQL server.

What a one-field edit stores (bytes in the tables, the same on a fabric four
times larger), the migration of a store whose revisions are full copies (every
document and hash reads back byte for byte, and the downgrade writes them back),
checkpoints and rebuilding any revision cold, a second process on the same
store catching up by one delta, and a rolled-back write that leaves nothing in
the cache.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic import command
from sqlalchemy import func, select, text

from controller import service
from controller.gen import clos_document
from controller.model.intent import validate_intent
from controller.store import content, repo
from controller.store.content import StoreOptions
from controller.store.db import Database, write_transaction
from controller.store.models import IntentObjectRow, RevisionEntryRow, RevisionRow
from tests.pg import drop_schema

ADMIN = service.Actor("tester", "admin")
CTX = service.WriteContext(actor=ADMIN, request_id="req", method="TEST", path="/t")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'loom.db'}"
        return
    pg_url: str = request.getfixturevalue("postgres_url")
    db = Database(pg_url)
    drop_schema(db)
    db.dispose()
    yield pg_url
    db = Database(pg_url)
    drop_schema(db)
    db.dispose()


def open_store(url: str, **options: Any) -> Database:
    db = Database(url, options=StoreOptions(**options) if options else None)
    db.migrate()
    return db


def stored_bytes(db: Database) -> int:
    """Everything the revisions take in the tables: objects, entries and revision rows."""
    with db.engine.connect() as conn:
        objects = conn.scalar(select(func.sum(func.length(IntentObjectRow.body) + func.length(IntentObjectRow.hash))))
        entries = conn.scalar(select(func.sum(
            func.length(RevisionEntryRow.section) + func.length(RevisionEntryRow.ident) + 8
            + func.coalesce(func.length(RevisionEntryRow.object_hash), 0))))
        rows = conn.scalar(select(func.sum(
            func.length(RevisionRow.hash) + func.length(RevisionRow.top_hash) + func.length(RevisionRow.whole)
            + func.length(RevisionRow.author) + func.length(RevisionRow.message) + 32)))
    return int(objects or 0) + int(entries or 0) + int(rows or 0)


def fabric(pods: int) -> dict[str, Any]:
    return clos_document(pods=pods, tors=16, planes=4, spines=4, fanout=2, scale_to_ecmp=False)


@pytest.mark.parametrize("edit", ["capacity", "drain", "device"])
def test_a_small_edit_stores_what_changed_not_the_fabric(url: str, edit: str) -> None:
    per_size = []
    for pods in (4, 16):
        db = open_store(url if url.startswith("postgresql") else url.replace("loom.db", f"loom-{pods}.db"))
        with db.session() as s:
            service.replace_intent(fabric(pods), session=s, ctx=CTX)
        before = stored_bytes(db)
        with db.session() as s:
            if edit == "capacity":
                service.update_object("links", "leaf-0-0:eth17", {"capacity_gbps": 40}, session=s, ctx=CTX)
            elif edit == "drain":
                service.create_object("policies", {"kind": "drain", "target": "spine-0-1"}, session=s, ctx=CTX)
            else:
                service.update_object("devices", "tor-1-1", {"max_ecmp_entries": 32}, session=s, ctx=CTX)
            doc_bytes = len(json.dumps(service.get_intent(session=s)[1]))
        per_size.append((stored_bytes(db) - before, doc_bytes))
        db.dispose()
        if url.startswith("postgresql"):
            drop_schema(Database(url))
    (small, small_doc), (large, large_doc) = per_size
    assert large_doc > 3 * small_doc  # the fabric really grew
    assert small < 1500 and large < 1500, per_size  # a revision row, one entry, one object (or two)
    assert abs(large - small) <= 16, per_size  # and no more on the larger fabric


def test_reads_and_hashes_across_revisions_and_a_cold_rebuild(url: str) -> None:
    db = open_store(url, checkpoint_min=8, checkpoint_ratio=0.25)  # a checkpoint after every other reordering
    doc = fabric(2)
    expected = []
    with db.session() as s:
        service.replace_intent(doc, session=s, ctx=CTX)
        expected.append(validate_intent(doc))
        for i in range(25):
            if i % 5 == 4:  # a whole-document write that reorders the devices
                d = service.get_intent(session=s)[1]
                d = {**d, "devices": list(reversed(d["devices"]))}
                service.replace_intent(d, session=s, ctx=CTX)
            elif i % 3 == 0:
                own = {"from": f"tor-0-{i % 16}", "to": f"10.0.{i % 16}.0/24", "gbps": i + 0.5}
                service.create_object("demands", own, session=s, ctx=CTX)  # to its own prefix: never generated
            else:
                service.update_object("links", f"leaf-{i % 2}-0:eth{17 + i % 4}", {"capacity_gbps": 10 + i},
                                      session=s, ctx=CTX)
            expected.append(validate_intent(service.get_intent(session=s)[1]))
        wholes = s.scalars(select(RevisionRow.whole).order_by(RevisionRow.id)).all()
    assert wholes[0] == content.ALL and wholes.count(content.ALL) >= 2  # checkpoints were written
    assert "devices" in wholes  # the reordering wrote only its section whole
    cold = Database(url)  # another process: nothing cached
    with cold.session() as s:
        for rev_id in reversed(range(1, len(expected) + 1)):  # newest first: no ancestor in the cache
            want = expected[rev_id - 1]
            got = repo.revision_document(rev_id, session=s)
            assert json.dumps(got) == json.dumps(want.to_document())
            assert repo.get_revision(rev_id, session=s).hash == want.content_hash
            assert repo.revision_snapshot(rev_id, session=s).hash == want.content_hash
    cold.dispose()
    db.dispose()


def test_a_second_process_catches_up_by_one_delta_and_writes_on_it(url: str) -> None:
    a, b = open_store(url), Database(url)
    with a.session() as s:
        service.replace_intent(fabric(2), session=s, ctx=CTX)
    with b.session() as s:
        service.update_object("links", "leaf-0-0:eth17", {"capacity_gbps": 40}, session=s, ctx=CTX)  # B loads rev 1
    with a.session() as s:  # A holds revision 1, reads revision 2's single entry
        rev, snap = service.head_snapshot(session=s)
        assert rev.id == 2 and snap.validated and snap.hash == rev.hash
        el, _ = service.find_object("links", "leaf-0-0:eth17", database=a)
        assert el.doc["capacity_gbps"] == 40
        service.update_object("links", "leaf-0-0:eth17", {"capacity_gbps": 50}, session=s, ctx=CTX)
    assert service.get_object("links", "leaf-0-0:eth17", database=b)[0]["capacity_gbps"] == 50
    with b.session() as s:
        assert service.diff_revisions(1, 3, session=s)["changed"] == [
            {"kind": "link", "name": "leaf-0-0:eth17", "fields": {"capacity_gbps": [100.0, 50.0]}}]
    a.dispose()
    b.dispose()


def test_a_rolled_back_write_leaves_nothing_behind(url: str) -> None:
    db = open_store(url)
    with db.session() as s:
        service.replace_intent(fabric(2), session=s, ctx=CTX)
        head = repo.head_revision(session=s)
        assert head is not None
        base = repo.revision_snapshot(1, session=s)
        with pytest.raises(RuntimeError), write_transaction(s):
            doc = copy.deepcopy(base.document())
            doc["name"] = "never"
            intent = validate_intent(doc)
            repo.add_revision(session=s, document=intent.to_document(), content_hash=intent.content_hash,
                              parent=1, author="x", now=datetime.now(UTC))
            raise RuntimeError("the transaction fails after the revision was written")
        assert all(k[0] == 1 for k in db.snapshots._items)  # nothing of revision 2 was cached
        service.update_object("links", "leaf-0-0:eth17", {"capacity_gbps": 40}, session=s, ctx=CTX)
        rev, doc2 = service.get_intent(session=s)
    assert rev.id == 2 and doc2["name"] == base.frame["name"]
    with db.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(RevisionEntryRow)
                           .where(RevisionEntryRow.revision_id == 2)) == 1
    db.dispose()


# -- the migration of full-copy stores ----------------------------------------------------------------
def _old_store(url: str, documents: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """A store at migration 0002 whose revisions hold full copies, written as the old code did;
    returns each revision's (hash, stored text)."""
    db = Database(url)
    cfg = db._alembic_config()
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
    rows = []
    with db.engine.begin() as conn:
        for i, doc in enumerate(documents, start=1):
            intent = validate_intent(doc)
            canonical = intent.to_document()
            if "jobs" in doc and not doc["jobs"]:  # a document from the days of 'jobs: []'
                canonical["jobs"] = []
            body = json.dumps(canonical, separators=(",", ":"))
            conn.execute(text("INSERT INTO revisions (id, parent_id, hash, created_at, author, message, request_id, "
                              "document) VALUES (:id, :parent, :hash, :at, 'old', 'm', NULL, :doc)"),
                         {"id": i, "parent": i - 1 or None, "hash": intent.content_hash,
                          "at": datetime(2026, 1, 1, tzinfo=UTC), "doc": body})
            rows.append((intent.content_hash, body))
    db.dispose()
    return rows


def _history() -> list[dict[str, Any]]:
    doc = fabric(2)
    docs = [copy.deepcopy(doc)]
    doc["links"][3]["capacity_gbps"] = 25.0
    docs.append(copy.deepcopy(doc))
    doc["policies"].append({"kind": "drain", "target": "spine-1-1"})
    doc["failure_domains"][0]["kind"] = "größe ⚡"  # escaped in the stored text
    docs.append(copy.deepcopy(doc))
    doc["jobs"] = [{"name": "llm", "tors": ["tor-0-0", "tor-1-1"], "collective": "ring_allreduce",
                    "bytes_per_iter": 1e9, "iter_s": 0.5}]
    docs.append(copy.deepcopy(doc))
    doc["jobs"] = []
    docs.append(copy.deepcopy(doc))  # an old 'jobs: []' revision
    doc.pop("jobs")
    doc["devices"] = list(reversed(doc["devices"]))
    del doc["demands"][5]
    docs.append(copy.deepcopy(doc))
    return docs


def test_a_full_copy_store_migrates_and_reads_back_byte_for_byte(url: str) -> None:
    old = _old_store(url, _history())
    db = open_store(url)  # 0006 converts
    with db.engine.connect() as conn:
        columns = {c["name"] for c in __import__("sqlalchemy").inspect(conn).get_columns("revisions")}
    assert "document" not in columns
    with db.session() as s:
        for rev_id, (content_hash, body) in enumerate(old, start=1):
            assert json.dumps(repo.revision_document(rev_id, session=s), separators=(",", ":")) == body
            assert repo.get_revision(rev_id, session=s).hash == content_hash
            assert repo.revision_snapshot(rev_id, session=s).json() == json.dumps(
                json.loads(body), ensure_ascii=False, separators=(",", ":")).encode()  # what GET served
        # and writing goes on by delta, with the hashes of the old revisions still meaning "no change"
        unchanged = service.replace_intent(json.loads(old[-1][1]), session=s, ctx=CTX)
        assert not unchanged.changed and unchanged.revision.id == len(old)
        service.update_object("links", "leaf-0-0:eth17", {"capacity_gbps": 40}, session=s, ctx=CTX)
        entries = s.scalar(select(func.count()).select_from(RevisionEntryRow)
                           .where(RevisionEntryRow.revision_id == len(old) + 1))
    assert entries == 1
    with db.engine.connect() as conn:  # revision 2 changed one link: one entry, one new object
        assert conn.scalar(select(func.count()).select_from(RevisionEntryRow)
                           .where(RevisionEntryRow.revision_id == 2)) == 1
    # and back: the downgrade writes the full copies again
    cfg = db._alembic_config()
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    with db.engine.connect() as conn:
        back = dict(conn.execute(text("SELECT id, document FROM revisions")).all())
    assert [back[i] for i in range(1, len(old) + 1)] == [b for _, b in old]
    db.dispose()


def test_a_changes_proposed_revision_is_stored_by_delta_and_known_valid(url: str) -> None:
    from controller.workflow import changes

    db = open_store(url)
    with db.session() as s:
        service.replace_intent(fabric(2), session=s, ctx=CTX)
        ch = changes.create_change(session=s, ctx=CTX, base_revision=1, intent=None,
                                   patch=[{"op": "add", "path": "/policies/-",
                                           "value": {"kind": "drain", "target": "spine-0-1"}}])
        assert ch.proposed_revision == 2
        entries = select(func.count()).select_from(RevisionEntryRow).where(RevisionEntryRow.revision_id == 2)
        assert s.scalar(entries) == 1
        assert repo.revision_snapshot(2, session=s).validated  # the next edit is proven from it
    db.dispose()
