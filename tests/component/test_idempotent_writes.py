"""``Idempotency-Key`` on intent writes: a retry gets the first answer and writes nothing.

Every write of the intent (``POST``/``PATCH``/``DELETE`` of an object, ``PUT /v1/intent``, the demands
captured from telemetry) stores its key in the transaction that stores its revision. So a retry of a
write whose answer was lost (the replica died after its commit, the connection broke, a balancer
replays it on another replica) finds it done and answers as the first time, with
``Idempotent-Replayed: true``, whatever happened to the intent since; the same key on another request
is 422. The concurrent test runs on SQLite and PostgreSQL, with two apps (two replicas' caches) on
the PostgreSQL store.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.app import create_app
from controller import service
from controller.settings import Settings
from controller.store import workflow_repo as wrepo
from controller.store.db import Database, write_transaction
from tests.apps import Api, TestClient, running_api, seeded_store
from tests.pg import drop_schema


def _revisions(api: Api) -> int:
    return int(api("GET", "/v1/revisions?limit=1").json()["total"])


def _link(api: Api) -> str:
    return str(api("GET", "/v1/links?limit=1").json()["items"][0]["id"])


def test_a_retried_patch_answers_the_first_answer_and_writes_once(api: Api) -> None:
    link, before = _link(api), _revisions(api)
    key = {"Idempotency-Key": "patch-1"}
    first = api("PATCH", f"/v1/links/{link}", json={"capacity_gbps": 123.0}, headers=key)
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    assert _revisions(api) == before + 1
    # the link changes meanwhile: the retry still answers what the first request was answered
    assert api("PATCH", f"/v1/links/{link}", json={"capacity_gbps": 77.0}).status_code == 200
    again = api("PATCH", f"/v1/links/{link}", json={"capacity_gbps": 123.0}, headers=key)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json() and again.headers["etag"] == first.headers["etag"]
    assert _revisions(api) == before + 2  # the retry wrote nothing
    assert api("GET", f"/v1/links/{link}").json()["capacity_gbps"] == 77.0


def test_a_replayed_write_is_not_refused_by_the_if_match_it_made_stale(api: Api) -> None:
    link = _link(api)
    etag = api("GET", f"/v1/links/{link}").headers["etag"]
    headers = {"Idempotency-Key": "if-match-1", "If-Match": etag}
    first = api("PATCH", f"/v1/links/{link}", json={"metric": 7}, headers=headers)
    assert first.status_code == 200
    again = api("PATCH", f"/v1/links/{link}", json={"metric": 7}, headers=headers)
    assert again.status_code == 200 and again.headers["etag"] == first.headers["etag"], again.text
    other = api("PATCH", f"/v1/links/{link}", json={"metric": 7}, headers={"If-Match": etag})
    assert other.status_code == 409  # without the key the same request is stale


def test_a_key_used_for_another_request_is_422_and_writes_nothing(api: Api) -> None:
    link, before = _link(api), _revisions(api)
    assert api("PATCH", f"/v1/links/{link}", json={"metric": 5}, headers={"Idempotency-Key": "k"}).status_code == 200
    for method, path, body in (("PATCH", f"/v1/links/{link}", {"metric": 6}),  # another body
                               ("DELETE", f"/v1/links/{link}", None),  # another method
                               ("PATCH", "/v1/devices/spine-1", {"asn": 65000})):  # another path
        r = api(method, path, json=body, headers={"Idempotency-Key": "k"})
        assert r.status_code == 422, r.text
        assert r.json()["type"].endswith("idempotency-key-reused") and "different request" in r.json()["detail"]
    assert _revisions(api) == before + 1
    # keys belong to their actor: another token's same key is another write
    assert api("PATCH", f"/v1/links/{link}", role="admin", json={"metric": 6},
               headers={"Idempotency-Key": "k"}).status_code == 200
    assert _revisions(api) == before + 2


def test_create_and_delete_replay_their_first_answers(api: Api) -> None:
    device = api("GET", "/v1/devices?limit=1").json()["items"][0]["id"]
    prefix = {"prefix": "10.250.0.0/24", "origins": [device]}
    before = _revisions(api)
    made = api("POST", "/v1/prefixes", json=prefix, headers={"Idempotency-Key": "mk"})
    assert made.status_code == 201, made.text
    ident = made.json()["id"]
    gone = api("DELETE", f"/v1/prefixes/{ident}", headers={"Idempotency-Key": "rm"})
    assert gone.status_code == 204
    # retried after the delete: the create answers 201 as before and does not bring the prefix back
    again = api("POST", "/v1/prefixes", json=prefix, headers={"Idempotency-Key": "mk"})
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == made.json() and again.headers["location"] == made.headers["location"]
    assert again.headers["etag"] == made.headers["etag"]
    assert api("GET", f"/v1/prefixes/{ident}").status_code == 404
    # and the delete's retry answers 204 where a new delete finds nothing (404)
    rm = api("DELETE", f"/v1/prefixes/{ident}", headers={"Idempotency-Key": "rm"})
    assert rm.status_code == 204 and rm.headers["idempotent-replayed"] == "true"
    assert api("DELETE", f"/v1/prefixes/{ident}").status_code == 404
    assert _revisions(api) == before + 2


def test_a_retried_put_of_the_intent_stores_one_revision(api: Api) -> None:
    doc = api("GET", "/v1/intent").json()
    doc["links"][0]["capacity_gbps"] = 555.0
    before = _revisions(api)
    first = api("PUT", "/v1/intent", json=doc, headers={"Idempotency-Key": "put-1"})
    assert first.status_code == 200, first.text
    doc["links"][0]["capacity_gbps"] = 556.0
    assert api("PUT", "/v1/intent", json=doc).status_code == 200
    doc["links"][0]["capacity_gbps"] = 555.0
    again = api("PUT", "/v1/intent", json=doc, headers={"Idempotency-Key": "put-1"})
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.headers["etag"] == first.headers["etag"] and again.json() == first.json()
    assert _revisions(api) == before + 2
    assert api("GET", "/v1/intent").json()["links"][0]["capacity_gbps"] == 556.0


def test_a_rejected_write_keeps_no_key(api: Api) -> None:
    link = _link(api)
    bad = api("PATCH", f"/v1/links/{link}", json={"capacity_gbps": -1.0}, headers={"Idempotency-Key": "bad"})
    assert bad.status_code == 422
    etag = api("GET", f"/v1/links/{link}").headers["etag"]
    assert api("PATCH", f"/v1/links/{link}", json={"metric": 8}).status_code == 200
    stale = api("PATCH", f"/v1/links/{link}", json={"metric": 9}, headers={"Idempotency-Key": "st", "If-Match": etag})
    assert stale.status_code == 409
    with api.db.session() as session:
        assert wrepo.find_idempotent("operator-1", "bad", session=session) is None
        assert wrepo.find_idempotent("operator-1", "st", session=session) is None


def test_keys_older_than_a_day_are_forgotten(api: Api) -> None:
    link = _link(api)
    assert api("PATCH", f"/v1/links/{link}", json={"metric": 3}, headers={"Idempotency-Key": "old"}).status_code == 200
    with api.db.session() as session:
        with write_transaction(session):
            assert wrepo.forget_idempotent(before=datetime.now(UTC) - timedelta(hours=1), session=session) == 0
        with write_transaction(session):
            later = datetime.now(UTC) + timedelta(seconds=service.IDEMPOTENCY_KEEP_S)
            assert wrepo.forget_idempotent(before=later, session=session) >= 1
        assert wrepo.find_idempotent("operator-1", "old", session=session) is None


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def apps(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[list[Api]]:
    """Two apps (a replica each on PostgreSQL; one app twice on SQLite, which allows one process)."""
    if request.param == "sqlite":
        with running_api(f"sqlite:///{tmp_path / 'loom.db'}") as one:
            yield [one, one]
        return
    url: str = request.getfixturevalue("postgres_url")
    drop_schema(Database(url))
    db, tokens = seeded_store(url)
    dbs = [Database(url) for _ in range(2)]
    try:
        with ExitStack() as stack:
            clients = [stack.enter_context(TestClient(create_app(Settings(db_url=url), database=d))) for d in dbs]
            yield [Api(c, tokens, d, None) for c, d in zip(clients, dbs, strict=True)]
    finally:
        for d in (db, *dbs):
            d.dispose()
        drop_schema(Database(url))


def test_concurrent_retries_on_two_replicas_write_once(apps: list[Api]) -> None:
    link, before = _link(apps[0]), _revisions(apps[0])
    answers: list[Any] = []
    lock = threading.Lock()
    go = threading.Barrier(8)

    def send(i: int) -> None:
        go.wait()
        r = apps[i % 2]("PATCH", f"/v1/links/{link}", json={"capacity_gbps": 321.0},
                        headers={"Idempotency-Key": "race-1", "X-Request-ID": f"race-{i}"})
        with lock:
            answers.append(r)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
    assert len({r.headers["etag"] for r in answers}) == 1
    assert sum(1 for r in answers if "idempotent-replayed" not in r.headers) == 1
    assert _revisions(apps[0]) == before + 1


def test_a_change_made_by_a_request_whose_answer_was_lost_is_answered_once(api: Api) -> None:
    """The changes' POSTs store the key in the transaction that makes the change: a replica that made the
    change and died before answering (here: the workflow called directly, as that replica did) leaves the
    key with it, and the retry is answered with that change instead of making a second one."""
    from controller.service import idempotency
    from controller.workflow import changes

    body = json.dumps({"base_revision": 1, "patch": [{"op": "replace", "path": "/links/0/metric", "value": 42}]})
    path = "/v1/changes"
    with api.db.session() as session:
        actor = service.authenticate(api.tokens["operator"], session=session)
        assert actor is not None
        ctx = service.WriteContext(actor=actor, method="POST", path=path, idempotency=service.IdempotentWrite(
            "lost-answer", idempotency.request_hash(path, body.encode())))
        made = changes.create_change(session=session, ctx=ctx, base_revision=1,
                                     patch=json.loads(body)["patch"], intent=None)
    total = api("GET", "/v1/changes").json()["total"]
    again = api("POST", path, content=body, headers={"Idempotency-Key": "lost-answer",
                                                     "Content-Type": "application/json"})
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true", again.text
    assert again.json()["id"] == made.id
    assert api("GET", "/v1/changes").json()["total"] == total
    other = api("POST", path, content=body.replace("42", "43"), headers={"Idempotency-Key": "lost-answer",
                                                                        "Content-Type": "application/json"})
    assert other.status_code == 422 and other.json()["type"].endswith("idempotency-key-reused")
