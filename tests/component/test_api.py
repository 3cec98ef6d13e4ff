"""The REST API through the real ASGI app (FastAPI's TestClient, httpx underneath)
on a real SQLite store: auth on every route, roles, If-Match, problem details
with locations, YAML in and out, paging and filters, revisions and their diff,
tokens and the audit log."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from fastapi.routing import APIRoute

from api.app import create_app
from controller import service
from controller.model.intent import load_intent
from controller.settings import Settings
from controller.store.db import Database
from tests.apps import Api, RequestQueries, TestClient, running_api, seeded_store

EXAMPLE = load_intent(service.EXAMPLE_INTENT)
PUBLIC = {"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def _api_routes(routes: list[Any]) -> Iterator[APIRoute]:
    for r in routes:
        if isinstance(r, APIRoute):
            yield r
        elif hasattr(r, "original_router"):  # FastAPI >= 0.120 keeps included routers as such
            yield from _api_routes(r.original_router.routes)


def routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) of the app but the public ones, path parameters filled in."""
    out, seen = [], set()
    for r in _api_routes(app.routes):
        if r.path not in PUBLIC:
            seen.add(r.path.replace(":path}", "}"))
            for m in sorted(r.methods - {"HEAD"}):
                out.append((m, re.sub(r"\{[^}]+\}", "x", r.path)))
    assert seen == set(app.openapi()["paths"]) - PUBLIC  # nothing hidden from the walk
    return out


def revisions_total(api: Api) -> int:
    return int(api("GET", "/v1/revisions", role="viewer").json()["total"])


def test_every_route_needs_a_token(api: Api) -> None:
    all_routes = routes(api.app)
    assert len(all_routes) >= 25
    malformed = {"content": b'{"not json', "headers": {"Content-Type": "application/json"}}
    for method, path in all_routes:
        r = api(method, path, role=None)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["www-authenticate"].startswith("Bearer")
        bad = api(method, path, role=None, headers={"Authorization": "Bearer loom_abc_def"})
        assert bad.status_code == 401, (method, path)
        # the token is checked before the body is read: a malformed one is not a 422 here
        unread = api(method, path, role=None, **malformed)
        assert unread.status_code == 401, (method, path, unread.text)


def test_a_viewer_cannot_write_anywhere(api: Api) -> None:
    writes = [(m, p) for m, p in routes(api.app) if m in ("POST", "PUT", "PATCH", "DELETE")]
    assert len(writes) >= 15
    for method, path in writes:
        r = api(method, path, role="viewer", json={})
        assert r.status_code == 403, (method, path, r.text)
        assert r.json()["type"].endswith("forbidden")
        unread = api(method, path, role="viewer", content=b"[" * 100_000, headers={"Content-Type": "application/json"})
        assert unread.status_code == 403, (method, path, unread.text)
    assert revisions_total(api) == 1


def test_a_405_allows_every_method_of_the_path(api: Api) -> None:
    spec = api.app.openapi()["paths"]
    templates = {path: re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$") for path in spec}
    for path in spec:
        url = re.sub(r"\{[^}]+\}", "x", path)  # /v1/jobs/what-if is also /v1/jobs/{object_id}
        methods = sorted({m.upper() for p, rx in templates.items() if rx.match(url) for m in spec[p]})
        for method in sorted({"GET", "PUT", "POST", "PATCH", "DELETE"} - set(methods)):
            r = api(method, url, role=None)
            assert r.status_code == 405, (method, path, r.text)
            assert r.headers["allow"] == ", ".join(methods), (method, path)
            assert r.headers["content-type"] == "application/problem+json"


def test_every_api_route_is_guarded() -> None:
    from fastapi import APIRouter, FastAPI

    from api.core import guard

    app = create_app(Settings(db_url="sqlite://"))
    assert all(isinstance(r, guard.GuardedRoute) for r in guard.api_routes(app) if isinstance(r, APIRoute))
    plain = FastAPI()
    router = APIRouter()
    router.add_api_route("/v1/x", lambda: None, methods=["POST"])
    plain.include_router(router)
    with pytest.raises(RuntimeError, match="without the guard"):
        guard.install(plain)


def test_only_admins_manage_tokens(api: Api) -> None:
    assert api("GET", "/v1/tokens", role="operator").status_code == 403
    assert api("POST", "/v1/tokens", role="operator", json={"name": "x", "role": "viewer"}).status_code == 403
    made = api("POST", "/v1/tokens", role="admin", json={"name": "grafana", "role": "viewer",
                                                         "expires_in_seconds": 3600})
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["token"].startswith(f"loom_{body['id']}_") and body["expires_at"] and body["active"]
    listed = api("GET", "/v1/tokens", role="admin").json()
    assert body["id"] in {t["id"] for t in listed} and all("token" not in t for t in listed)
    assert api("GET", "/v1/intent", role=None, headers={"Authorization": f"Bearer {body['token']}"}).status_code == 200
    revoked = api("DELETE", f"/v1/tokens/{body['id']}", role="admin")
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert api("GET", "/v1/intent", role=None,
               headers={"Authorization": f"Bearer {body['token']}"}).status_code == 401
    assert api("GET", "/v1/tokens/nope", role="admin").status_code == 404
    entries = api("GET", "/v1/audit", role="viewer").json()["items"]
    assert [e["action"] for e in entries if e["action"] != "request.refused"][:2] == ["token.revoke", "token.create"]
    assert (entries[0]["action"], entries[0]["status"], entries[0]["actor"]) == ("request.refused", 401, "anonymous")


def test_get_intent_json_and_yaml(api: Api) -> None:
    r = api("GET", "/v1/intent", role="viewer")
    assert r.status_code == 200 and r.headers["etag"] == '"1"'
    assert r.json() == EXAMPLE.to_document()
    y = api("GET", "/v1/intent", role="viewer", headers={"Accept": "application/yaml"})
    assert y.headers["content-type"].startswith("application/yaml") and y.headers["etag"] == '"1"'
    assert yaml.safe_load(y.text) == EXAMPLE.to_document()
    j = api("GET", "/v1/intent", role="viewer", headers={"Accept": "application/yaml;q=0.5, application/json"})
    assert j.headers["content-type"].startswith("application/json")


def test_put_yaml_then_equal_put_makes_no_revision(api: Api) -> None:
    doc = EXAMPLE.to_document()
    doc["name"] = "dc1-renamed"
    r = api("PUT", "/v1/intent", content=yaml.safe_dump(doc), headers={"Content-Type": "application/yaml",
                                                                         "If-Match": '"1"'})
    assert r.status_code == 200 and r.headers["etag"] == '"2"' and r.json()["name"] == "dc1-renamed"
    again = api("PUT", "/v1/intent", json=doc)
    assert again.status_code == 200 and again.headers["etag"] == '"2"'
    assert revisions_total(api) == 2
    outcomes = [e["outcome"] for e in api("GET", "/v1/audit", role="viewer").json()["items"]]
    assert outcomes[:2] == ["unchanged", "accepted"]


def test_invalid_put_is_422_with_every_location_and_no_revision(api: Api) -> None:
    doc = EXAMPLE.to_document()
    doc["links"][7]["b"] = "leaf-9-9"
    doc["devices"][2]["asn"] = 23456
    doc["demands"].append({"from": "tor-0-0", "to": "10.9.0.0/24", "gbps": 1})
    r = api("PUT", "/v1/intent", json=doc, headers={"X-Request-ID": "bad-put-1"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    body = r.json()
    locs = [e["loc"] for e in body["errors"]]
    assert {"links[7].b", "devices[2].asn", "demands[5].to"} <= set(locs)
    assert body["request_id"] == "bad-put-1" and r.headers["x-request-id"] == "bad-put-1"
    assert revisions_total(api) == 1
    rejected = api("GET", "/v1/audit?outcome=rejected", role="viewer").json()["items"]
    assert rejected[0]["request_id"] == "bad-put-1" and rejected[0]["status"] == 422
    syntax = api("PUT", "/v1/intent", content="name: [", headers={"Content-Type": "application/yaml"})
    assert syntax.status_code == 422 and "YAML syntax error" in syntax.json()["errors"][0]["msg"]
    assert revisions_total(api) == 1


def test_one_answer_holds_every_error_of_the_document(api: Api) -> None:
    doc = EXAMPLE.to_document()
    doc["links"].append({"a": "tor-0-0", "a_port": "eth9", "b": "zz", "b_port": "e1", "capacity_gbps": -5})
    doc["demands"].append({"from": "nobody", "to": "10.0.0.0/24", "gbps": "lots"})
    r = api("PUT", "/v1/intent", json=doc)
    assert r.status_code == 422
    assert {(e["loc"], e["msg"]) for e in r.json()["errors"]} >= {
        ("links[16].capacity_gbps", "input should be greater than or equal to 0.001"),
        ("links[16].b", "unknown device 'zz'"),
        ("demands[5].from", "unknown device 'nobody'")}
    assert revisions_total(api) == 1


def test_a_patch_is_validated_as_the_whole_intent_it_makes(api: Api) -> None:
    """A ToR made a spine keeps its links between adjacent tiers; the resulting intent is still not a
    Clos (a spine in a pod), so the PATCH, and the same edit as a change's JSON Patch, are refused."""
    r = api("PATCH", "/v1/devices/tor-0-0", json={"role": "spine"}, headers={"If-Match": '"1"'})
    assert r.status_code == 422 and r.json()["type"] == "urn:loom:problem:invalid-intent"
    assert [e["loc"] for e in r.json()["errors"]] == ["devices[0].role", "links[1]"]
    assert "pod 0" in r.json()["errors"][0]["msg"]
    c = api("POST", "/v1/changes", json={"base_revision": 1,
                                         "patch": [{"op": "replace", "path": "/devices/1/role", "value": "spine"}]})
    assert c.status_code == 422 and "devices[1].role" in [e["loc"] for e in c.json()["errors"]]
    assert revisions_total(api) == 1
    assert api("GET", "/v1/devices/tor-0-0", role="viewer").json()["role"] == "tor"
    # out of its pod as well, it would be a spine of two planes (its leaves are in planes 0 and 1)
    r = api("PATCH", "/v1/devices/tor-0-0", json={"role": "spine", "pod": None})
    assert r.status_code == 422 and [e["loc"] for e in r.json()["errors"]] == ["links[1]"], r.text
    assert "a spine is in one plane" in r.json()["errors"][0]["msg"]
    assert revisions_total(api) == 1


def test_stale_if_match_is_409(api: Api) -> None:
    ok = api("PATCH", "/v1/links/leaf-0-0:eth1", json={"capacity_gbps": 40}, headers={"If-Match": '"1"'})
    assert ok.status_code == 200 and ok.headers["etag"] == '"2"' and ok.json()["capacity_gbps"] == 40
    for method, path, body in (("PATCH", "/v1/links/leaf-0-0:eth1", {"capacity_gbps": 50}),
                               ("PUT", "/v1/intent", EXAMPLE.to_document()),
                               ("DELETE", "/v1/demands/tor-0-0,10.0.1.0_24", None),
                               ("POST", "/v1/policies", {"kind": "drain", "target": "leaf-0-1"})):
        r = api(method, path, json=body, headers={"If-Match": '"1"'})
        assert r.status_code == 409, (method, path, r.text)
        assert r.json()["type"].endswith("stale-revision") and r.json()["revision"] == 2
    assert revisions_total(api) == 2
    assert api("PATCH", "/v1/links/leaf-0-0:eth1", json={"metric": 20}, headers={"If-Match": "*"}).status_code == 200


def test_object_write_422_points_into_the_resulting_document(api: Api) -> None:
    r = api("POST", "/v1/links", json={"a": "tor-0-0", "a_port": "eth9", "b": "leaf-9-9", "b_port": "eth1"})
    assert r.status_code == 422 and r.json()["errors"] == [{"loc": "links[16].b", "msg": "unknown device 'leaf-9-9'"}]
    d = api("DELETE", "/v1/devices/spine-0-0")
    assert d.status_code == 422
    assert {e["loc"] for e in d.json()["errors"]} == {"links[8].b", "links[12].b", "failure_domains[0].devices[0]"}
    shape = api("POST", "/v1/devices", json={"name": "x", "asn": "sixty"})
    assert shape.status_code == 422 and shape.json()["errors"][0]["loc"] == "body.asn"
    extra = api("PATCH", "/v1/devices/tor-0-0", json={"colour": "red"})
    assert extra.status_code == 422 and extra.json()["errors"][0]["loc"] == "body.colour"
    assert revisions_total(api) == 1


def test_crud_round_trip_and_revision_diff(api: Api) -> None:
    dev = api("POST", "/v1/devices", json={"name": "tor-1-2", "role": "tor", "pod": 1, "asn": 65104})
    assert dev.status_code == 422  # a ToR without uplinks: the whole document is checked
    steps = [
        ("PUT", "/v1/intent", {**EXAMPLE.to_document(),
                               "devices": [*EXAMPLE.to_document()["devices"],
                                           {"name": "tor-1-2", "role": "tor", "pod": 1, "asn": 65104}],
                               "links": [*EXAMPLE.to_document()["links"],
                                         {"a": "tor-1-2", "a_port": "eth1", "b": "leaf-1-0", "b_port": "eth5"}]}),
        ("POST", "/v1/prefixes", {"prefix": "10.0.4.0/24", "origins": ["tor-1-2"]}),
        ("POST", "/v1/demands", {"from": "tor-0-0", "to": "10.0.4.0/24", "gbps": 5}),
        ("PATCH", "/v1/demands/tor-0-0,10.0.4.0_24", {"gbps": 7.5}),
        ("PATCH", "/v1/policies/wcmp", {"enabled": False}),
        ("POST", "/v1/failure-domains", {"name": "rack-9", "devices": ["tor-1-2"]}),
        ("DELETE", "/v1/demands/tor-1-1,10.0.1.0%2F24", None),
    ]
    for method, path, body in steps:
        r = api(method, path, json=body)
        assert r.status_code in (200, 201, 204), (method, path, r.text)
    assert api("GET", "/v1/prefixes/10.0.4.0_24", role="viewer").json()["origins"] == ["tor-1-2"]
    assert api("GET", "/v1/prefixes/10.0.4.0%2F24", role="viewer").json()["id"] == "10.0.4.0/24"
    created = api("POST", "/v1/policies", json={"kind": "drain", "target": "leaf-0-0:eth1"})
    assert created.status_code == 201 and created.headers["location"].endswith("/v1/policies/drain:leaf-0-0:eth1")
    assert api("GET", "/v1/policies/drain:leaf-0-0:eth1", role="viewer").json()["target"] == "leaf-0-0:eth1"
    assert api("POST", "/v1/failure-domains", json={"name": "rack-9", "devices": ["tor-0-0"]}).status_code == 409
    assert api("GET", "/v1/devices/nope", role="viewer").status_code == 404
    head = int(api("GET", "/v1/intent", role="viewer").headers["etag"].strip('"'))
    assert head == 9 and revisions_total(api) == 9
    diff = api("GET", f"/v1/revisions/1/diff/{head}", role="viewer").json()
    added = {(e["kind"], e["name"]) for e in diff["added"]}
    assert added == {("device", "tor-1-2"), ("link", "leaf-1-0:eth5"), ("prefix", "10.0.4.0/24"),
                     ("demand", "tor-0-0,10.0.4.0/24"), ("failure_domain", "rack-9"),
                     ("policy", "drain:leaf-0-0:eth1")}
    assert diff["removed"] == [{"kind": "demand", "name": "tor-1-1,10.0.1.0/24"}]
    assert diff["changed"] == [{"kind": "policy", "name": "wcmp", "fields": {"enabled": [True, False]}}]
    meta = api("GET", "/v1/revisions/2", role="viewer")
    assert meta.json()["parent"] == 1 and meta.json()["author"] == "operator-1" and meta.headers["etag"] == '"2"'
    old = api("GET", "/v1/revisions/1/intent", role="viewer", headers={"Accept": "application/yaml"})
    assert yaml.safe_load(old.text) == EXAMPLE.to_document()
    assert api("GET", "/v1/revisions/99/diff/1", role="viewer").status_code == 404


def test_paging_and_filters(api: Api) -> None:
    first = api("GET", "/v1/devices?limit=5", role="viewer")
    body = first.json()
    assert body["total"] == 12 and len(body["items"]) == 5 and first.headers["etag"] == '"1"'
    assert 'rel="next"' in first.headers["link"] and "offset=5" in body["next"]
    names = [d["id"] for d in body["items"]]
    while body["next"]:
        body = api("GET", body["next"], role="viewer").json()
        names += [d["id"] for d in body["items"]]
    assert names == [d.name for d in EXAMPLE.devices]

    def ids(path: str) -> list[str]:
        return [o["id"] for o in api("GET", path, role="viewer").json()["items"]]

    assert ids("/v1/devices?role=spine") == ["spine-0-0", "spine-0-1", "spine-1-0", "spine-1-1"]
    assert ids("/v1/devices?pod=1&role=leaf") == ["leaf-1-0", "leaf-1-1"]
    assert ids("/v1/devices?plane=1&role=spine") == ["spine-1-0", "spine-1-1"]
    assert ids("/v1/links?device=tor-0-0") == ["leaf-0-0:eth1", "leaf-0-1:eth1"]
    assert ids("/v1/prefixes?origin=tor-1-1") == ["10.0.3.0/24"]
    assert ids("/v1/demands?from=tor-0-0") == ["tor-0-0,10.0.2.0/24", "tor-0-0,10.0.1.0/24"]
    assert ids("/v1/demands?to=10.0.0.0/24") == ["tor-1-0,10.0.0.0/24"]
    assert ids("/v1/policies?kind=wcmp") == ["wcmp"]
    assert ids("/v1/failure-domains?device=spine-0-1") == ["plane-0-power"]
    assert api("GET", "/v1/devices?limit=0", role="viewer").status_code == 422
    assert api("GET", "/v1/devices?role=router-ish", role="viewer").json()["errors"][0]["loc"] == "query.role"


def test_list_query_count_does_not_grow_with_the_page(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db, tokens = seeded_store(f"sqlite:///{tmp_path / 'api.db'}")
    counted = RequestQueries()
    counted.listen(db.engine)
    with TestClient(counted.wrap(create_app(Settings(db_url=db.url), database=db))) as client:
        api = Api(client, tokens, db)
        per_page = {}
        assert api("GET", "/v1/intent", role="viewer").status_code == 200  # the token checked, the head built
        for path in ("/v1/devices?limit=1", "/v1/devices?limit=12", "/v1/links?limit=16", "/v1/revisions",
                     "/v1/audit?limit=50"):
            counted.statements.clear()
            assert api("GET", path, role="viewer").status_code == 200
            per_page[path] = len(counted.statements)
    assert per_page["/v1/devices?limit=1"] == per_page["/v1/devices?limit=12"] == per_page["/v1/links?limit=16"]
    assert per_page["/v1/devices?limit=1"] <= 1, per_page  # the head's id at most: token and objects are cached
    assert max(per_page.values()) <= 4, per_page  # (or count, page, head)
    assert per_page["/v1/audit?limit=50"] >= 1, per_page  # the requests' statements are seen
    db.dispose()


def test_audit_records_who_when_request_and_revision(api: Api) -> None:
    r = api("PATCH", "/v1/devices/tor-0-0", json={"asn": 65150}, headers={"X-Request-ID": "change-42"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "change-42"
    entry = api("GET", "/v1/audit?limit=1", role="viewer").json()["items"][0]
    assert entry["actor"] == "operator-1" and entry["request_id"] == "change-42" and entry["revision"] == 2
    assert entry["method"] == "PATCH" and entry["path"] == "/v1/devices/tor-0-0" and entry["outcome"] == "accepted"
    assert api("GET", "/v1/audit?revision=2", role="viewer").json()["total"] == 1
    generated = api("GET", "/v1/intent", role="viewer").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)


def test_health_needs_no_token(api: Api) -> None:
    assert api("GET", "/healthz", role=None).json() == {"status": "ok"}
    ready = api("GET", "/readyz", role=None)
    assert ready.status_code == 200 and ready.json()["schema_revision"] == api.app.state.database.head_migration()


def test_readyz_is_503_when_the_store_does_not_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = Database(f"postgresql://nobody@/nodb?host={tmp_path}")
    client = TestClient(create_app(Settings(db_url=db.url), database=db))  # no lifespan: nothing migrates
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["type"].endswith("not-ready")
    assert client.get("/healthz").status_code == 200


def test_unknown_route_is_a_problem(api: Api) -> None:
    r = api("GET", "/v1/nothing-here", role="viewer")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"


def test_openapi_describes_every_route(api: Api) -> None:
    spec = api("GET", "/openapi.json", role=None).json()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert {"200", "201", "202", "204"} & set(op["responses"]), (method, path)
            if path not in PUBLIC:
                assert op.get("security") == [{"HTTPBearer": []}], (method, path)
                assert "401" in op["responses"] and "403" in op["responses"], (method, path)
            for code, resp in op["responses"].items():
                if int(code) >= 400:
                    assert list(resp["content"]) == ["application/problem+json"], (method, path, code)
    put = spec["paths"]["/v1/intent"]["put"]["requestBody"]["content"]
    assert set(put) == {"application/json", "application/yaml"}
    for name in ("DeviceCreate", "DeviceUpdate", "DevicePublic", "Intent", "Problem", "RevisionDiff"):
        assert name in spec["components"]["schemas"]


def test_empty_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with running_api(f"sqlite:///{tmp_path / 'api.db'}", example=False) as api:
        assert api("GET", "/v1/intent", role="viewer").status_code == 404
        listed = api("GET", "/v1/devices", role="viewer")
        assert listed.status_code == 200 and listed.json()["total"] == 0 and "etag" not in listed.headers
        assert api("POST", "/v1/devices", json={"name": "r1"}).status_code == 409
        r = api("PUT", "/v1/intent", json=EXAMPLE.to_document(), headers={"If-Match": '"0"'})
        assert r.status_code == 200 and r.headers["etag"] == '"1"'


def test_settings_admin_token(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="at least 32"):
        Settings(admin_token="short-secret")
    with pytest.raises(ValueError, match="placeholder"):
        Settings(admin_token="changethis" * 4)
    secret = "Zq8-" + "pL3xW9vR2tY6uK1m" * 2
    db, _ = seeded_store(f"sqlite:///{tmp_path / 'api.db'}")
    with TestClient(create_app(Settings(db_url=db.url, admin_token=secret), database=db)) as client:
        r = client.get("/v1/tokens", headers={"Authorization": f"Bearer {secret}"})
        assert r.status_code == 200 and len(r.json()) == 3
    db.dispose()


@pytest.mark.parametrize(("path", "unknown"), [
    ("/v1/devices?rol=spine", ["rol"]),
    ("/v1/devices?role=spine&pods=1&limit=2", ["pods"]),
    ("/v1/intent?revision=1", ["revision"]),
    ("/v1/revisions?limit=2&ofset=1", ["ofset"]),
    ("/v1/changes?state=draft&b=1&a=2", ["a", "b"]),
])
def test_unknown_query_parameters_are_refused_by_name(api: Api, path: str, unknown: list[str]) -> None:
    """A misspelt filter is a 422 that names it (issue 31.3), never a filter silently dropped."""
    r = api("GET", path, role="viewer")
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["errors"]] == [f"query.{k}" for k in unknown]
    assert "unknown query parameter" in r.json()["errors"][0]["msg"]
    known = api("GET", "/v1/devices?role=spine&limit=2", role="viewer")
    assert known.status_code == 200 and {d["role"] for d in known.json()["items"]} == {"spine"}
    write = api("PATCH", "/v1/links/leaf-0-0:eth3?dry=1", json={"capacity_gbps": 40})
    assert write.status_code == 422 and write.json()["errors"][0]["loc"] == "query.dry"
    assert api("GET", "/v1/intent", role="viewer").headers["etag"] == '"1"'  # the refused write wrote nothing
