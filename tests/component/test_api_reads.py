"""Reads at the speed of the framework, and still right.

The cached reads (:mod:`api.core.fastpath`, :mod:`api.core.fastread`) answer
byte for byte what FastAPI's response models and ``JSONResponse`` made of the
same data, on every collection, page and object, and the same as the routes
do with every cache off; ETags are strong and ``If-None-Match`` gets 304. Token
checks come from a cache, yet a token revoked on another replica is refused
within ``Settings.token_cache_s`` (at once on the replica that revoked it),
and an expired one at its expiry; another replica's write is read within
``Settings.read_cache_s``, this replica's own at once. Replicas are two apps on
one store: a SQLite file, and a real PostgreSQL server.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter

from api.app import create_app
from api.core.deps import TokenCache
from api.core.schemas import SCHEMAS, Page
from controller import service
from controller.gen import clos_document
from controller.settings import Settings
from controller.store import objects
from controller.store.db import Database
from tests.apps import SETUP, Api, RequestQueries, TestClient, seeded_store
from tests.pg import drop_schema

HEADERS = ("content-type", "etag", "x-total-count", "link", "vary")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'loom.db'}"
        return
    pg_url: str = request.getfixturevalue("postgres_url")
    drop_schema(Database(pg_url))
    yield pg_url
    drop_schema(Database(pg_url))


@pytest.fixture
def replicas_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL store: replicas share only that (``loom serve`` refuses a second process on SQLite)."""
    pg_url: str = request.getfixturevalue("postgres_url")
    drop_schema(Database(pg_url))
    yield pg_url
    drop_schema(Database(pg_url))


@contextmanager
def replica(db: Database, tokens: dict[str, str], counted: RequestQueries | None = None,
            **settings: Any) -> Iterator[Api]:
    """One controller process: an app of its own (its own caches) on the store at ``db.url``;
    ``counted`` sees the statements its requests run."""
    own = Database(db.url)
    app = create_app(Settings(db_url=db.url, **settings), database=own)
    if counted is not None:
        counted.listen(own.engine)
        app = counted.wrap(app)
    with TestClient(app) as client:
        yield Api(client, tokens, own)
    own.dispose()


def fabric() -> dict[str, Any]:
    doc = clos_document(pods=3, tors=4, planes=2, spines=2, fanout=3, scale_to_ecmp=False)
    doc["failure_domains"][0]["kind"] = "größe ⚡"  # served as UTF-8
    doc["policies"].append({"kind": "drain", "target": "leaf-1-0:eth5"})
    doc["jobs"] = [{"name": "llm", "tors": ["tor-0-0", "tor-1-1"], "collective": "ring_allreduce",
                    "bytes_per_iter": 1e9, "iter_s": 0.5}]
    return doc


def reads(doc: dict[str, Any]) -> list[str]:
    """Every read the cached path answers: each collection paged, each object, the intent."""
    paths = ["/v1/intent"]
    for coll in objects.COLLECTIONS.values():
        n = len(doc.get(coll.key) or [])
        paths += [f"/v1/{coll.name}", f"/v1/{coll.name}?limit=3", f"/v1/{coll.name}?limit=2&offset={max(0, n - 3)}",
                  f"/v1/{coll.name}?offset={n + 5}"]
        for e in doc.get(coll.key) or []:
            ident = coll.identity(e)
            paths.append(f"/v1/{coll.name}/{quote(ident, safe=':,')}")
            if coll.key == "prefixes":
                paths.append(f"/v1/{coll.name}/{ident.replace('/', '_')}")
    return paths


def reference(path: str, doc: dict[str, Any], revision: int, base_url: str) -> bytes:
    """What FastAPI's response models (and JSONResponse for the intent) made of the same data."""
    if path == "/v1/intent":
        return bytes(JSONResponse(doc).body)
    where, _, query = path.partition("?")
    name, _, rest = where[4:].partition("/")
    coll = objects.collection(name)
    public = SCHEMAS[name].public
    items = [{"id": coll.identity(e), **e} for e in doc.get(coll.key) or []]
    if rest:
        ident = objects.parse_object_id(coll, rest.replace("%2F", "/"))
        item = next(i for i in items if i["id"] == ident)
        adapter = TypeAdapter(public)
        return adapter.dump_json(adapter.validate_python(item), by_alias=True)
    q = dict(p.split("=") for p in query.split("&")) if query else {}
    limit, offset = int(q.get("limit", 100)), int(q.get("offset", 0))
    nxt = None
    if offset + limit < len(items):
        from starlette.datastructures import URL
        nxt = str(URL(base_url + path).include_query_params(offset=offset + limit, limit=limit))
    page = {"items": items[offset:offset + limit], "total": len(items), "limit": limit, "offset": offset, "next": nxt}
    adapter = TypeAdapter(Page[public])  # type: ignore[valid-type]
    return adapter.dump_json(adapter.validate_python(page), by_alias=True)


def test_cached_reads_answer_what_the_routes_and_the_response_models_did(tmp_path: Any) -> None:
    doc = fabric()
    db, tokens = seeded_store(f"sqlite:///{tmp_path / 'r.db'}", intent=doc)
    with db.session() as s:
        stored = service.get_intent(session=s)[1]
    db.dispose()  # checkpointed: the copy is the same store, for a second process of its own (SQLite allows one)
    shutil.copy(tmp_path / "r.db", tmp_path / "r2.db")
    twin = Database(f"sqlite:///{tmp_path / 'r2.db'}")
    with ExitStack() as stack:
        counted = RequestQueries()
        fast = stack.enter_context(replica(db, tokens, counted))
        slow = stack.enter_context(replica(twin, tokens, read_cache_s=0, token_cache_s=0))  # every read asks
        paths = reads(stored)
        for path in paths:  # the first time: the routes answer and fill the caches
            fast("GET", path, role="viewer")
        for path in paths:
            a = fast("GET", path, role="viewer")
            b = slow("GET", path, role="viewer")
            assert a.status_code == b.status_code == 200, (path, a.text, b.text)
            assert a.content == b.content == reference(path, stored, 1, "http://testserver"), path
            assert {h: a.headers.get(h) for h in HEADERS} == {h: b.headers.get(h) for h in HEADERS}, path
            assert a.headers["etag"] == '"1"'
        counted.statements.clear()
        for path in paths:  # alone, so that its caches' periods pass at most once or twice
            assert fast("GET", path, role="viewer").status_code == 200
        # the cached path asked the store (next to) nothing: a token's or the head's check when a period ends
        assert len(counted.statements) <= 2 * len(paths) // 10, counted.statements
        y = fast("GET", "/v1/intent", role="viewer", headers={"Accept": "application/yaml"})
        assert y.headers["content-type"] == "application/yaml" and yaml.safe_load(y.text) == stored
        assert y.content == slow("GET", "/v1/intent", role="viewer", headers={"Accept": "application/yaml"}).content
        # what the cached path leaves to the routes, the routes answer as before
        assert fast("GET", "/v1/devices?limit=0", role="viewer").status_code == 422
        assert fast("GET", "/v1/devices?limit=2&limit=3", role="viewer").json()["limit"] == 3
        assert fast("GET", "/v1/devices/nope", role="viewer").status_code == 404
        assert fast("GET", "/v1/devices", role=None).status_code == 401
    db.dispose()
    twin.dispose()


@pytest.mark.parametrize("path", ["/v1/intent", "/v1/links?limit=5", "/v1/devices/tor-0-1"])
def test_if_none_match_gets_304_until_the_revision_changes(api: Api, path: str) -> None:
    first = api("GET", path, role="viewer")
    tag = first.headers["etag"]
    assert first.status_code == 200 and tag == '"1"' and not tag.startswith("W/")  # a strong ETag
    for given in (tag, f"W/{tag}", f'"7", {tag}', "*"):
        again = api("GET", path, role="viewer", headers={"If-None-Match": given})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag, given
    assert api("GET", path, role="viewer", headers={"If-None-Match": '"2"'}).status_code == 200
    assert api("PATCH", "/v1/links/leaf-0-0:eth3", json={"capacity_gbps": 40}).status_code == 200
    changed = api("GET", path, role="viewer", headers={"If-None-Match": tag})  # this replica wrote: at once
    assert changed.status_code == 200 and changed.headers["etag"] == '"2"'


@pytest.mark.postgres
def test_a_revoked_token_is_refused_within_a_second_on_every_replica(replicas_url: str) -> None:
    db, tokens = seeded_store(replicas_url)
    with db.session() as s:
        token, secret = service.create_token("short-lived", "viewer", session=s, ctx=SETUP)
    with replica(db, tokens) as a, replica(db, tokens) as b:
        ttl = a.app.state.settings.token_cache_s
        assert 0 < ttl <= 1
        who = {"Authorization": f"Bearer {secret}"}
        assert a("GET", "/v1/devices", role=None, headers=who).status_code == 200  # cached on replica a
        assert b("GET", "/v1/devices", role=None, headers=who).status_code == 200
        assert b("DELETE", f"/v1/tokens/{token.id}", role="admin").status_code == 200  # revoked on replica b
        revoked = time.monotonic()
        assert b("GET", "/v1/devices", role=None, headers=who).status_code == 401  # b at once
        while True:  # a takes it only from its cache, and not for longer than the cache period
            started = time.monotonic()
            if a("GET", "/v1/devices", role=None, headers=who).status_code != 200:
                break
            assert started - revoked < ttl + 0.05, "replica a took the revoked token past its cache period"
            time.sleep(0.02)
        time.sleep(max(0.0, revoked + ttl - time.monotonic()))
        for path in ("/v1/intent", "/v1/devices", "/v1/links/leaf-0-0:eth3"):  # within a second: refused
            assert a("GET", path, role=None, headers=who).status_code == 401
    db.dispose()


@pytest.mark.postgres
def test_another_replicas_write_is_read_within_the_read_cache_period(replicas_url: str) -> None:
    db, tokens = seeded_store(replicas_url)
    with replica(db, tokens) as a, replica(db, tokens) as b:
        assert a("GET", "/v1/links/leaf-0-0:eth3", role="viewer").json()["capacity_gbps"] == 100
        assert b("PATCH", "/v1/links/leaf-0-0:eth3", json={"capacity_gbps": 40}).headers["etag"] == '"2"'
        written = time.monotonic()
        assert b("GET", "/v1/links/leaf-0-0:eth3", role="viewer").json()["capacity_gbps"] == 40  # its own: at once
        period = a.app.state.settings.read_cache_s
        while True:  # a may show revision 1 from its cache, and not for longer than the cache period
            started = time.monotonic()
            if a("GET", "/v1/links/leaf-0-0:eth3", role="viewer").headers["etag"] == '"2"':
                break
            assert started - written < period + 0.05, "replica a showed an old head past its cache period"
            time.sleep(0.02)
        assert a("GET", "/v1/links/leaf-0-0:eth3", role="viewer").json()["capacity_gbps"] == 40
        # a stale If-Match is refused whatever a read showed: writes always ask the store
        assert a("PATCH", "/v1/links/leaf-0-0:eth3", json={"capacity_gbps": 50},
                 headers={"If-Match": '"1"'}).status_code == 409
    db.dispose()


def test_token_cache_keeps_no_secret_and_honours_ttl_and_expiry() -> None:
    now = [100.0]
    cache = TokenCache(0.5, clock=lambda: now[0])
    actor = service.Actor("t", "viewer", "id1")
    key = cache.key("loom_id1_secret")
    assert "secret" not in key and len(key) == 64
    cache.put(key, actor, None)
    assert cache.get(key) == actor
    now[0] += 0.49
    assert cache.get(key) == actor
    now[0] += 0.02
    assert cache.get(key) is None  # aged out: the store is asked again
    cache.put(key, actor, datetime.now(UTC) - timedelta(seconds=1))
    assert cache.get(key) is None  # past the token's expiry
    off = TokenCache(0)
    off.put(key, actor, None)
    assert off.get(key) is None
    with pytest.raises(ValueError):
        Settings(token_cache_s=2)  # more than a second would let a revoked token through for longer


def test_head_cache_does_not_go_back_behind_a_commit(tmp_path: Any) -> None:
    db, _ = seeded_store(f"sqlite:///{tmp_path / 'h.db'}")
    asked = db.heads.clock()
    with db.session() as s:  # a commit moves the head at once...
        service.update_object("devices", "tor-0-0", {"max_ecmp_entries": 32}, session=s, ctx=SETUP)
    assert db.heads.get(10)[0] == 2  # type: ignore[index]
    db.heads.put(1, "old", at=asked)  # ...and a read that was asked before it cannot move it back
    assert db.heads.get(10)[0] == 2  # type: ignore[index]
    assert service.read_head(db)[0] == 2  # type: ignore[index]
    db.dispose()


@pytest.mark.parametrize(("path", "names"), [
    ("/v1/audit?actor=admin%00-1", ["actor"]),
    ("/v1/changes?state=draft%00", ["state"]),
    ("/v1/devices?role=%00&limit=2", ["role"]),
    ("/v1/links?device=a%00&limit=1%00", ["device", "limit"]),
])
def test_a_nul_in_a_query_value_is_a_422_naming_it_on_either_store(url: str, path: str, names: list[str]) -> None:
    """PostgreSQL refuses a string with a NUL: an audit filter by such an actor was a 500 there (found by the
    HA schema fuzzing). Every route answers 422 naming the value, before the store is asked."""
    db, tokens = seeded_store(url)
    with replica(db, tokens) as api:
        r = api("GET", path, role="admin")
        assert r.status_code == 422, r.text
        assert [e["loc"] for e in r.json()["errors"]] == [f"query.{k}" for k in names]
        assert "NUL" in r.json()["errors"][0]["msg"]
        assert api("GET", path.replace("%00", ""), role="admin").status_code in (200, 422)
        assert api("GET", "/v1/audit?actor=admin-1", role="admin").status_code == 200
    db.dispose()
