"""The telemetry endpoints through a real app whose active revision was committed
over the dry driver: ``/v1/telemetry/links``, ``/demand``, ``/fidelity``, the link
gauges on ``/metrics``, and ``POST /v1/demands/from-telemetry`` (one revision, audited
with window, statistic and headroom), fed synthetic counters of the lab intent."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.model.intent import load_intent
from controller.telemetry import Telemetry
from solver import solve
from southbound.device.dry import DryDriver
from tests.apps import Api, running_api
from tests.telemetry_synth import Fabric

with warnings.catch_warnings():
    warnings.simplefilter("ignore")

REPO = Path(__file__).resolve().parents[2]
INTENT = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml")
SKEW = {("tor-0-0", "10.1.0.0/24"): 30.0, ("tor-0-1", "10.1.1.0/24"): 5.0, ("tor-1-0", "10.0.0.0/24"): 12.5,
        ("tor-1-1", "10.0.1.0/24"): 1.0}


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Api, Telemetry]]:
    tel = Telemetry()
    driver = DryDriver([d.name for d in INTENT.devices], tmp_path / "dry")
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=INTENT.to_document(), driver=driver, telemetry=tel,
                     drift_interval=0, verify_timeout=5) as api:
        assert api.initial()["state"] == "committed"
        yield api, tel


def stream(tel: Telemetry, fabric: Fabric, seconds: int = 60) -> None:
    for t in range(seconds, -1, -10):
        when = time.time() - t
        tel.ingest(fabric.samples(when), now=when)


def test_links_demand_and_fidelity_answer_what_the_counters_carry(live: tuple[Api, Telemetry]) -> None:
    api, tel = live
    fabric = Fabric(INTENT, solve(INTENT), SKEW, t0=time.time() - 100)
    stream(tel, fabric)
    r = api("GET", "/v1/telemetry/links?window_s=60", role="viewer")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["window_s"] == 60 and len(body["links"]) == len(INTENT.links)
    for i, link in enumerate(body["links"]):
        assert set(link) == {"a", "a_port", "b", "b_port", "gbps_ab", "gbps_ba", "utilization", "age_s", "stale"}
        assert link["gbps_ab"] == pytest.approx(fabric.load[2 * i], rel=1e-4, abs=1e-4) and not link["stale"]
    demand = api("GET", "/v1/telemetry/demand?window_s=60&stat=p95", role="viewer").json()
    assert demand["method"] == "aft" and demand["stat"] == "p95"
    got = {(d["from"], d["to"]): d["gbps"] for d in demand["demands"]}
    assert got.keys() == SKEW.keys() and all(got[k] == pytest.approx(g, rel=1e-4) for k, g in SKEW.items())
    fid = api("GET", "/v1/telemetry/fidelity", role="viewer").json()
    assert fid["worst"] < 1e-3 and fid["p95"] <= fid["worst"] and len(fid["links"]) == len(INTENT.links)
    assert {"a", "a_port", "b", "b_port", "predicted", "observed", "error"} <= set(fid["links"][0])
    metrics = api.client.get("/metrics").text
    assert 'loom_link_utilization{link="tor-0-0:eth1"}' in metrics and 'direction="ab"' in metrics


@pytest.mark.parametrize("query, param", [("window_s=0", "window_s"), ("stat=median", "stat"),
                                          ("window_s=abc", "window_s")])
def test_bad_query_parameters_are_problems_naming_the_parameter(live: tuple[Api, Telemetry], query: str,
                                                                param: str) -> None:
    api, _tel = live
    r = api("GET", f"/v1/telemetry/demand?{query}", role="viewer")
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert param in r.text


def test_a_silent_device_is_stale_not_zero(live: tuple[Api, Telemetry]) -> None:
    api, tel = live
    fabric = Fabric(INTENT, solve(INTENT), SKEW, t0=time.time() - 200)
    for t in range(120, 50, -10):
        tel.ingest(fabric.samples(time.time() - t), now=time.time() - t)
    for t in range(50, -1, -10):
        tel.ingest(fabric.samples(time.time() - t, skip=frozenset({"spine-0-0"})), now=time.time() - t)
    tel.mark_disconnected("spine-0-0")
    links = api("GET", "/v1/telemetry/links?window_s=60", role="viewer").json()["links"]
    for i, link in enumerate(links):
        if "spine-0-0" in (link["a"], link["b"]):
            assert link["stale"] and link["age_s"] >= 50
            for key, load in (("gbps_ab", fabric.load[2 * i]), ("gbps_ba", fabric.load[2 * i + 1])):
                # the live end's counter still reads the direction (never a made-up zero)
                assert link[key] == pytest.approx(load, rel=1e-4, abs=1e-4)
        else:
            assert not link["stale"]


def test_a_measured_matrix_becomes_the_intent_in_one_audited_revision(live: tuple[Api, Telemetry]) -> None:
    api, tel = live
    fabric = Fabric(INTENT, solve(INTENT), SKEW, t0=time.time() - 100)
    stream(tel, fabric)
    body: dict[str, Any] = {"window_s": 60, "stat": "max", "headroom": 1.5}
    assert api("POST", "/v1/demands/from-telemetry", role="viewer", json=body).status_code == 403
    assert api("POST", "/v1/demands/from-telemetry", json=body, headers={"If-Match": '"7"'}).status_code == 409
    r = api("POST", "/v1/demands/from-telemetry", json=body, headers={"If-Match": '"1"'})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["revision"] == 2 and out["changed"] and out["method"] == "aft" and r.headers["ETag"] == '"2"'
    stored = {(d["from"], d["to"]): d["gbps"] for d in api("GET", "/v1/intent", role="viewer").json()["demands"]}
    assert stored.keys() == SKEW.keys() and all(stored[k] == pytest.approx(1.5 * g, rel=1e-4)
                                                for k, g in SKEW.items())
    audit = api("GET", "/v1/audit?limit=1", role="admin").json()["items"][0]
    assert audit["action"] == "demands.from_telemetry" and audit["revision"] == 2
    assert "window_s=60" in audit["detail"] and "stat=max" in audit["detail"] and "headroom=1.5" in audit["detail"]
    bad = api("POST", "/v1/demands/from-telemetry", json={**body, "headroom": 0})
    assert bad.status_code == 422 and "headroom" in bad.text


def test_loom_demand_capture_writes_the_measured_matrix(live: tuple[Api, Telemetry],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import httpx
    from typer.testing import CliRunner

    from controller.cli import _register
    from controller.cli.common import app as cli

    api, tel = live
    _register()

    def through_app(*, base_url: str, headers: dict[str, str], timeout: float) -> Any:
        api.client.headers.update(headers)  # the CLI's client is the in-process app's
        return api.client

    monkeypatch.setattr(httpx, "Client", through_app)
    monkeypatch.setenv("LOOM_TOKEN", api.tokens["operator"])
    runner = CliRunner()
    empty = runner.invoke(cli, ["demand", "capture", "--server", "http://app", "--json"])
    assert empty.exit_code == 1 and "no demand measured" in empty.output  # nothing streamed yet: kept
    stream(tel, Fabric(INTENT, solve(INTENT), SKEW, t0=time.time() - 100))
    done = runner.invoke(cli, ["demand", "capture", "--server", "http://app", "--window-s", "60", "--stat", "p95",
                               "--headroom", "1.1", "--base", "1", "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    assert out["revision"] == 2 and {(d["from"], d["to"]) for d in out["demands"]} == set(SKEW)
    stale = runner.invoke(cli, ["demand", "capture", "--server", "http://app", "--base", "1"])
    assert stale.exit_code == 1


def test_a_window_longer_than_the_collector_keeps_is_refused_by_name(api: Api) -> None:
    """Issue 31.2: the API accepted up to 86,400 s and answered from what it had; now past the kept window
    (LOOM_TELEMETRY_KEEP_S) it is a 422 at window_s that says the limit."""
    for path in ("/v1/telemetry/links?window_s=7200", "/v1/telemetry/demand?window_s=86400&stat=max"):
        r = api("GET", path, role="viewer")
        assert r.status_code == 422, r.text
        assert [e["loc"] for e in r.json()["errors"]] == ["query.window_s"]
        assert "at most 3600 s" in r.json()["errors"][0]["msg"]
    r = api("POST", "/v1/demands/from-telemetry", json={"window_s": 5000, "stat": "max", "headroom": 1.0})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == "body.window_s"
