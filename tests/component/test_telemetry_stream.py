"""The live telemetry path: the server subscribes to real device agents over gNMI and serves what they count.

Twelve ``--dry-frr`` agents (one subprocess, unix sockets) serve synthetic
counters through the same gNMI service a switch's agent serves; the API app
(in process, lifespan and all) is attached to them with a short sample
interval. After the first commit, ``GET /v1/telemetry/links`` reports every
link measured; when the agents stop, their links read stale (with their age)
instead of zero; when they come back their counters restart from zero, and no
rate spike follows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.apps import Api
from tests.component.test_workflow_api import DOC, Fleet, fleet  # noqa: F401 - the fixture

#: the synthetic counters' fastest rate (southbound.device.counters.SyntheticCounters' max_bps), in Gb/s
FASTEST_GBPS = 1.0


@pytest.fixture
def api_intent() -> dict[str, Any]:
    return DOC


@pytest.fixture
def api_settings(fleet: Fleet) -> dict[str, Any]:  # noqa: F811 - the fleet fixture
    import json

    return {"agents": json.dumps(fleet.endpoints()), "drift_interval": 0, "verify_timeout": 5,
            "telemetry_interval_s": 0.5}


def _links(api: Api) -> list[dict[str, Any]]:
    r = api("GET", "/v1/telemetry/links?window_s=3", role="viewer")
    assert r.status_code == 200, r.text
    return list(r.json()["links"])


def _until(api: Api, ok: Callable[[list[dict[str, Any]]], bool], timeout: float = 40.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        links = _links(api)
        if ok(links):
            return links
        assert time.monotonic() < deadline, links[:3]
        time.sleep(0.25)


def test_links_are_measured_then_stale_when_agents_stop_and_fresh_without_a_spike_after(
        api: Api, fleet: Fleet) -> None:  # noqa: F811 - the fleet fixture
    assert api("GET", "/v1/telemetry/links", role="viewer").status_code == 404  # nothing active yet
    assert api.initial()["state"] == "committed"
    fresh = _until(api, lambda ls: bool(ls) and all(not x["stale"] and x["gbps_ab"] for x in ls))
    assert len(fresh) == len(DOC["links"])
    assert all(0 < x["gbps_ab"] <= FASTEST_GBPS * 1.01 and 0 < x["gbps_ba"] <= FASTEST_GBPS * 1.01 for x in fresh)

    fleet.stop()
    stale = _until(api, lambda ls: all(x["stale"] for x in ls))
    assert all(x["age_s"] is not None and x["age_s"] > 0 for x in stale)
    assert not all(x["gbps_ab"] == 0 for x in stale)  # stale, not zero

    fleet.start()  # the agents' counters restart from zero, as a restarted switch's do
    again = _until(api, lambda ls: all(not x["stale"] for x in ls))
    for _ in range(8):  # a few samples after the restart: no rate is ever above what a counter can do
        time.sleep(0.5)
        again = _links(api)
        assert all((x["gbps_ab"] or 0) <= FASTEST_GBPS * 1.01 and (x["gbps_ba"] or 0) <= FASTEST_GBPS * 1.01
                   for x in again), again
