"""Stored telemetry (issue 31.2): a restarted server answers a window with what it measured before the
restart, and charts a link's history, read back from the store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from controller.model.intent import load_intent
from controller.settings import Settings
from controller.store import telemetry_repo
from controller.store.db import Database
from controller.telemetry import Options, Sample, Telemetry, interface_path
from southbound.device.dry import DryDriver
from tests.apps import Api, running_api

REPO = Path(__file__).resolve().parents[2]
INTENT = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml")
LINK = INTENT.links[0]
OCTETS_PER_GBPS = 1e9 / 8
SETTINGS = {"drift_interval": 0, "verify_timeout": 5}


def collector() -> Telemetry:
    """A collector as the server makes one from its default settings: an hour of 10 s intervals."""
    return Telemetry(Options(interval_s=10.0, max_rates=360))


def feed(tel: Telemetry, now: float) -> None:
    """Ten minutes of ``LINK``'s counters: 8 Gbps a to b for the first five, then 2; 1 Gbps back."""
    ab = ba = 0.0
    for k in range(61):
        t = now - 600 + 10 * k
        tel.ingest([Sample(LINK.a, interface_path(LINK.a_port, "out-octets"), int(ab), int(t * 1e9)),
                    Sample(LINK.b, interface_path(LINK.b_port, "in-octets"), int(ab), int(t * 1e9)),
                    Sample(LINK.b, interface_path(LINK.b_port, "out-octets"), int(ba), int(t * 1e9)),
                    Sample(LINK.a, interface_path(LINK.a_port, "in-octets"), int(ba), int(t * 1e9))], now=t)
        ab += 10 * (8.0 if k < 30 else 2.0) * OCTETS_PER_GBPS
        ba += 10 * 1.0 * OCTETS_PER_GBPS


def view(api: Api, window_s: int) -> tuple[dict[str, object], dict[str, object]]:
    links = api("GET", f"/v1/telemetry/links?window_s={window_s}", role="viewer")
    assert links.status_code == 200, links.text
    mine = next(x for x in links.json()["links"] if (x["a"], x["a_port"]) == (LINK.a, LINK.a_port))
    hist = api("GET", f"/v1/telemetry/links/{LINK.key}/history?window_s={window_s}", role="viewer")
    assert hist.status_code == 200, hist.text
    return mine, hist.json()


def restarted(url: str, api: Api, tmp_path: Path, **settings: float) -> TestClient:
    """The server again on the same store, with a fresh collector (what a restart starts from)."""
    app = create_app(Settings(db_url=url, **{**SETTINGS, **settings}), database=Database(url),
                     driver=DryDriver([d.name for d in INTENT.devices], tmp_path / "dry"), telemetry=collector())
    return TestClient(app)


def test_a_restarted_server_answers_the_window_it_measured_before_and_charts_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    tel = collector()
    feed(tel, time.time())  # as the switches' streams would have (the server stores a segment as it starts)
    driver = DryDriver([d.name for d in INTENT.devices], tmp_path / "dry")
    with running_api(url, intent=INTENT.to_document(), driver=driver, telemetry=tel, **SETTINGS) as api:
        assert api.initial()["state"] == "committed"
        before, hist_before = view(api, 900)
        # the history: interval by interval, oldest first, 8 then 2 Gbps a to b, 1 back
        ab = [p["gbps_ab"] for p in hist_before["points"] if p["gbps_ab"] is not None]
        assert ab == pytest.approx([8.0] * 30 + [2.0] * 30)
        assert [p["gbps_ba"] for p in hist_before["points"] if p["gbps_ba"] is not None] == pytest.approx([1.0] * 60)
        assert hist_before["link"] == LINK.key and hist_before["interval_s"] == 10.0
        assert [p["utilization"] for p in hist_before["points"] if p["utilization"] is not None][0] == \
            pytest.approx(8.0 / LINK.capacity_gbps)
        assert before["gbps_ab"] == pytest.approx(5.0)  # the window's time-weighted mean
        tokens = api.tokens
    # the leader stored the rest of its rates when it stopped; the new process reads them back
    with Database(url).session() as s:
        assert telemetry_repo.last_end(session=s) is not None
    with restarted(url, api, tmp_path) as client:
        again = Api(client, tokens, Database(url))
        after, hist_after = view(again, 900)
        assert after["gbps_ab"] == pytest.approx(before["gbps_ab"]) and after["gbps_ba"] == pytest.approx(1.0)
        assert after["stale"]  # nothing sampled since the restart: stale, yet the window is known
        assert [p["gbps_ab"] for p in hist_after["points"] if p["gbps_ab"] is not None] == pytest.approx(ab)
        gone = again("GET", "/v1/telemetry/links/nosuch:eth9/history", role="viewer")
        assert gone.status_code == 404 and "nosuch:eth9" in gone.text
        long = again("GET", f"/v1/telemetry/links/{LINK.key}/history?window_s=86400", role="viewer")
        assert long.status_code == 422 and "window_s" in long.text
    # without the archive, a restart forgets: the same window answers nothing
    with restarted(url, api, tmp_path, telemetry_archive_s=0) as client:
        blind, _ = view(Api(client, tokens, Database(url)), 900)
        assert blind["gbps_ab"] is None


def test_the_leader_stores_its_rates_as_it_goes_and_prunes_past_the_longest_window(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loom.db'}"
    tel = collector()
    feed(tel, time.time() - 10)  # every rate due for storing (a segment stops an interval short of now)
    driver = DryDriver([d.name for d in INTENT.devices], tmp_path / "dry")
    with running_api(url, intent=INTENT.to_document(), driver=driver, telemetry=tel, telemetry_archive_s=0.2,
                     **SETTINGS) as api:
        with api.db.session() as s:  # an old segment, past the hour the collector keeps
            telemetry_repo.add_segment(0.0, 1.0, 1, b"", session=s)
            s.commit()
        deadline = time.monotonic() + 30
        while True:
            with api.db.session() as s:
                stored = telemetry_repo.segments_since(0.0, session=s)
            if stored and b"" not in stored:
                break
            assert time.monotonic() < deadline, "no segment stored while the server ran"
            time.sleep(0.1)
    assert collector().restore(stored) == 4 * 60  # every rate the counters made, once
