"""``/metrics``: scraped through the real app (in-process ASGI), parsed with prometheus-client's parser.

Request counters move by route *template* and status, latencies are observed,
unknown paths collapse into one ``unmatched`` label; a review observes solve
and safety durations and counts scenarios; a commit moves
``loom_commits_total{outcome="committed"}`` and sets ``loom_active_revision``.
(The per-device push latency needs agents: the browser suite, which runs
twelve, checks it on a ``loom serve`` process.)
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from controller.settings import Settings
from controller.store.db import Database
from tests.apps import Api, TestClient


class Scrape:
    """One scrape of ``/metrics``: sample values by (name, labels)."""

    def __init__(self, text: str):
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def get(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def labels(self, name: str) -> list[dict[str, str]]:
        return [dict(lbl) for (n, lbl) in self.samples if n == name]


def scrape(api: Api) -> Scrape:
    """One scrape of ``/metrics``, without a token (Prometheus scrapes it like /healthz)."""
    r = api.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return Scrape(r.text)


def test_requests_are_counted_by_route_template(api: Api) -> None:
    before = scrape(api)
    route = "/v1/devices/{object_id}"
    for name in ("tor-0-0", "tor-0-0", "leaf-0-0"):
        assert api("GET", f"/v1/devices/{name}").status_code == 200
    assert api("GET", "/v1/devices/no-such-switch").status_code == 404
    for i in range(3):
        assert api("GET", f"/v1/scan-{i}").status_code == 404
    after = scrape(api)
    assert after.get("loom_http_requests_total", method="GET", route=route, status="200") \
        - before.get("loom_http_requests_total", method="GET", route=route, status="200") == 3
    assert after.get("loom_http_requests_total", method="GET", route=route, status="404") \
        - before.get("loom_http_requests_total", method="GET", route=route, status="404") == 1
    assert after.get("loom_http_requests_total", method="GET", route="unmatched", status="404") \
        - before.get("loom_http_requests_total", method="GET", route="unmatched", status="404") == 3
    assert after.get("loom_http_request_duration_seconds_count", method="GET", route=route) \
        - before.get("loom_http_request_duration_seconds_count", method="GET", route=route) == 4
    routes = {lbl["route"] for lbl in after.labels("loom_http_requests_total")}
    assert not any("tor-0-0" in r or "scan-" in r for r in routes), routes  # templates, never raw paths
    assert "/metrics" not in api("GET", "/openapi.json").json()["paths"]


def test_a_commit_moves_the_commit_counter_and_the_active_revision(api: Api) -> None:
    m0 = scrape(api)
    assert m0.get("loom_commits_total", outcome="committed") == 0
    first = api("POST", "/v1/revisions/1/rollback", json={"message": "activate the example"}).json()
    assert api("POST", f"/v1/changes/{first['id']}/review").status_code == 200
    m1 = scrape(api)
    assert m1.get("loom_solve_duration_seconds_count") > m0.get("loom_solve_duration_seconds_count")
    assert m1.get("loom_safety_duration_seconds_count") == m0.get("loom_safety_duration_seconds_count") + 1
    review = api("GET", f"/v1/changes/{first['id']}").json()["review"]
    assert m1.get("loom_safety_scenarios_total") - m0.get("loom_safety_scenarios_total") \
        == review["safety"]["counts"]["scenarios"]
    assert api.commit(first["id"])["state"] == "committed"
    m2 = scrape(api)
    assert m2.get("loom_commits_total", outcome="committed") == 1
    assert m2.get("loom_active_revision") == 1

    drain = api("POST", "/v1/changes", json={
        "base_revision": 1, "message": "drain spine-1-1",
        "patch": [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "spine-1-1"}}]}).json()
    api("POST", f"/v1/changes/{drain['id']}/review")
    done = api.commit(drain["id"])
    assert done["state"] == "committed"
    m3 = scrape(api)
    assert m3.get("loom_commits_total", outcome="committed") == 2
    assert m3.get("loom_active_revision") == drain["proposed_revision"] == 2
    route = "/v1/changes/{change_id}/commit"
    assert m3.get("loom_http_requests_total", method="POST", route=route, status="202") == 2


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    dbs = [Database(f"sqlite:///{tmp_path / f'{i}.db'}") for i in range(2)]
    apps = [create_app(Settings(db_url=d.url), database=d) for d in dbs]
    with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
        for _ in range(3):
            a.get("/healthz")
        b.get("/healthz")
        ca = Scrape(a.get("/metrics").text).get("loom_http_requests_total", method="GET", route="/healthz",
                                                 status="200")
        cb = Scrape(b.get("/metrics").text).get("loom_http_requests_total", method="GET", route="/healthz",
                                                 status="200")
    assert (ca, cb) == (3, 1)
    assert apps[0].state.metrics is not apps[1].state.metrics
    for d in dbs:
        d.dispose()
