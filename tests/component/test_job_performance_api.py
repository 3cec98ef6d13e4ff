"""``GET /v1/jobs/{name}/performance`` and ``GET /v1/jobs/discovered`` through a real app whose
active revision was committed over the dry driver, fed AFT counters the way the patterns tests
feed them (``tests/unit/test_telemetry_patterns.py``: per-prefix octets of every ToR, one sample
per 10 s interval), here integrated exactly from on/off senders whose period is not a whole number
of intervals: a declared ring all-reduce, and an all-to-all nobody declared, which is offered as a
job, adopted through the ordinary change path, and then measured as the ring is."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model.intent import validate_intent
from controller.store import events_repo
from controller.telemetry import Sample, Telemetry, aft_path
from southbound.device.dry import DryDriver
from tests.apps import Api, running_api

DOC = clos_document(pods=2, tors=6, planes=2, spines=2, scale_to_ecmp=False)
DOC["demands"] = []
INTENT = validate_intent(DOC)
TORS = sorted(d.name for d in INTENT.devices if d.role == "tor")
PREFIX = {p.origins[0]: p.prefix for p in INTENT.prefixes}
RING = [TORS[0], TORS[7], TORS[3], TORS[10]]
A2A = [TORS[2], TORS[5], TORS[8]]
JOB = {"name": "llm-7", "tors": RING, "collective": "ring_allreduce", "bytes_per_iter": 2e10, "iter_s": 37.0}
INTERVALS = 36
WINDOW_S = 300.0


@dataclass(frozen=True)
class Sender:
    """``gbps`` from ``src`` to ``dst``'s prefix while busy: ``duty`` of every ``period_s``, from ``offset_s``."""

    src: str
    dst: str
    gbps: float
    period_s: float
    duty: float = 0.5
    offset_s: float = 0.0

    def busy_s(self, t: float) -> float:
        """Seconds busy in ``[0, t]``."""
        u = t + self.offset_s
        whole, part = divmod(u, self.period_s)
        on = self.duty * self.period_s
        w0, p0 = divmod(self.offset_s, self.period_s)
        return whole * on + min(part, on) - (w0 * on + min(p0, on))


def senders() -> list[Sender]:
    ring = [Sender(RING[i], RING[(i + 1) % 4], 40.0, 37.0, offset_s=3.0) for i in range(4)]
    a2a = [Sender(a, b, 8.0, 43.0, duty=0.4, offset_s=11.0) for a in A2A for b in A2A if a != b]
    return ring + a2a


def feed(tel: Telemetry, now: float, *, noise: float = 0.05, seed: int = 0) -> dict[tuple[str, str], float]:
    """AFT octets of every ToR pair each 10 s for INTERVALS intervals up to ``now`` (each interval's bytes
    times ``1 + noise x N(0, 1)``); returns each sender's bytes over the last WINDOW_S seconds."""
    rng = np.random.default_rng(seed)
    octets = {(s, PREFIX[d]): 0.0 for s in TORS for d in TORS if s != d}
    start = now - 10.0 * INTERVALS
    sent: dict[tuple[str, str], float] = {}
    for k in range(INTERVALS + 1):
        when = start + 10.0 * k
        if k:
            for s in senders():
                key = (s.src, PREFIX[s.dst])
                got = s.gbps * 1e9 / 8 * (s.busy_s(when - start) - s.busy_s(when - start - 10.0))
                got *= max(0.0, 1.0 + noise * float(rng.standard_normal()))
                octets[key] += got
                if when > now - WINDOW_S:
                    sent[key] = sent.get(key, 0.0) + got
        tel.ingest([Sample(s, aft_path(p), int(v), int(when * 1e9)) for (s, p), v in octets.items()], now=when)
    return sent


def gbps_of(sent: dict[tuple[str, str], float], members: list[str]) -> float:
    prefixes = {PREFIX[m] for m in members}
    return sum(v for (s, p), v in sent.items() if s in members and p in prefixes) * 8 / 1e9 / WINDOW_S


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Api, Telemetry]]:
    tel = Telemetry()
    doc = {**DOC, "jobs": [JOB]}
    driver = DryDriver([d.name for d in INTENT.devices], tmp_path / "dry")
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, driver=driver, telemetry=tel,
                     drift_interval=0, verify_timeout=5) as api:
        yield api, tel


def test_a_jobs_performance_is_read_from_its_counters(served: tuple[Api, Telemetry]) -> None:
    api, tel = served
    assert api("GET", "/v1/jobs/llm-7/performance", role="viewer").status_code == 404  # nothing active yet
    assert api.initial()["state"] == "committed"
    # no telemetry yet: nulls, each with its reason, never a 500
    r = api("GET", "/v1/jobs/llm-7/performance", role="viewer")
    assert r.status_code == 200, r.text
    empty = r.json()
    assert empty["measured_gbps"] is None and empty["period_s"] is None and empty["slowdown"] is None
    assert empty["comm_s"] is None and empty["comm_s_idle"] > 0
    assert {"measured_gbps", "period_s", "comm_s", "slowdown"} <= set(empty["reasons"])
    sent = feed(tel, time.time())
    r = api("GET", f"/v1/jobs/llm-7/performance?window_s={WINDOW_S:g}", role="viewer")
    assert r.status_code == 200, r.text
    perf = r.json()
    assert set(perf) >= {"measured_gbps", "expected_gbps", "period_s", "comm_s", "comm_s_idle", "slowdown",
                         "bottlenecks"}
    assert perf["method"] == "aft" and perf["job"] == "llm-7"
    assert perf["measured_gbps"] == pytest.approx(gbps_of(sent, RING), rel=0.05)
    # the template: 2 (n-1)/n B per member per iteration, four members, over 37 s
    assert perf["expected_gbps"] == pytest.approx(4 * 2 * 0.75 * 2e10 * 8 / 1e9 / 37.0, rel=1e-6)
    assert perf["period_s"] == pytest.approx(37.0, rel=0.05) and perf["iter_s"] == 37.0
    assert perf["comm_s"] >= perf["comm_s_idle"] > 0 and perf["slowdown"] >= 1.0
    assert perf["slowdown"] == pytest.approx(perf["comm_s"] / perf["comm_s_idle"], rel=1e-3)
    assert perf["bottlenecks"] and all(0 < b["job_share"] <= 1 and b["utilization"] > 0 for b in perf["bottlenecks"])
    assert all(b["link"] in {lk.key for lk in INTENT.links} for b in perf["bottlenecks"])
    missing = api("GET", "/v1/jobs/emb-2/performance", role="viewer")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("application/problem+json")
    assert "emb-2" in missing.json()["detail"]
    bad = api("GET", "/v1/jobs/llm-7/performance?window_s=100000", role="viewer")
    assert bad.status_code == 422 and "window_s" in bad.text
    assert api.client.get("/v1/jobs/llm-7/performance").status_code == 401


def test_an_undeclared_collective_is_offered_as_a_job_and_adopted_by_a_reviewed_change(
        served: tuple[Api, Telemetry]) -> None:
    api, tel = served
    assert api.initial()["state"] == "committed"
    sent = feed(tel, time.time())
    r = api("GET", f"/v1/jobs/discovered?window_s={WINDOW_S:g}", role="viewer")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == "aft" and body["min_confidence"] == 0.8
    (found,) = body["jobs"]  # the ring is declared (llm-7): only the all-to-all is offered
    assert set(found["members"]) == set(A2A) and found["pattern"] == "all_to_all"
    assert found["confidence"] >= 0.8 and found["period_s"] == pytest.approx(43.0, rel=0.05)
    job = found["job"]
    assert set(job["tors"]) == set(A2A) and job["iter_s"] == pytest.approx(43.0, rel=0.05)
    assert job["collective"] == found["collective"]
    # adopting it: the patch through the change path every intent edit takes, reviewed, committed
    change = api.change(found["patch"], base=1, message=f"adopt discovered job {job['name']}")
    review = api.review(change["id"])
    assert review["verdict"] == "safe"
    assert api.commit(change["id"])["state"] == "committed"
    assert api("GET", f"/v1/jobs/{job['name']}", role="viewer").status_code == 200
    again = api("GET", f"/v1/jobs/discovered?window_s={WINDOW_S:g}", role="viewer").json()
    assert again["jobs"] == []  # now declared, it explains its group
    perf = api("GET", f"/v1/jobs/{job['name']}/performance?window_s={WINDOW_S:g}", role="viewer").json()
    truth = gbps_of(sent, A2A)
    assert perf["measured_gbps"] == pytest.approx(truth, rel=0.05)
    assert perf["expected_gbps"] == pytest.approx(truth, rel=0.05)  # offered at the rate it was measured at
    assert perf["period_s"] == pytest.approx(43.0, rel=0.05)


def test_loom_jobs_performance_patterns_discovered_and_adopt(served: tuple[Api, Telemetry],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import httpx
    from typer.testing import CliRunner

    from controller.cli import _register
    from controller.cli.common import app as cli

    api, tel = served
    assert api.initial()["state"] == "committed"
    _register()

    def through_app(*, base_url: str, headers: dict[str, str], timeout: float) -> Any:
        api.client.headers.update(headers)  # the CLI's client is the in-process app's
        return api.client

    monkeypatch.setattr(httpx, "Client", through_app)
    monkeypatch.setenv("LOOM_TOKEN", api.tokens["operator"])
    runner = CliRunner()
    server = ["--server", "http://app"]
    before = runner.invoke(cli, ["jobs", "performance", "llm-7", *server])
    assert before.exit_code == 0, before.output
    assert "no telemetry" in before.output and "slowdown -" in before.output
    feed(tel, time.time())
    out = runner.invoke(cli, ["jobs", "performance", "llm-7", *server, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["period_s"] == pytest.approx(37.0, rel=0.05)
    text = runner.invoke(cli, ["jobs", "performance", "llm-7", *server])
    assert text.exit_code == 0 and "bottlenecks" in text.output and "37 s declared" in text.output
    unknown = runner.invoke(cli, ["jobs", "performance", "emb-2", *server])
    assert unknown.exit_code != 0 and "emb-2" in unknown.output
    listed = runner.invoke(cli, ["jobs", "discovered", *server, "--json"])
    assert listed.exit_code == 0, listed.output
    (offer,) = json.loads(listed.output)["jobs"]
    name = offer["job"]["name"]
    from controller.cli.common import console

    monkeypatch.setattr(console, "_width", 200)  # whatever width an earlier test of this process left
    assert name in runner.invoke(cli, ["jobs", "discovered", *server]).output
    # the same groups as patterns: the declared job's tied to it, the offered one to none
    groups = json.loads(runner.invoke(cli, ["jobs", "patterns", *server, "--json"]).output)["groups"]
    tied = {tuple(sorted(g["members"])): g["jobs"] for g in groups if g["pattern"] != "background"}
    assert tied[tuple(sorted(offer["job"]["tors"]))] == [] and ["llm-7"] in tied.values(), groups
    shown = runner.invoke(cli, ["jobs", "patterns", *server])
    assert shown.exit_code == 0 and "llm-7" in shown.output and "traffic patterns" in shown.output, shown.output
    missing = runner.invoke(cli, ["jobs", "adopt", "nope", *server])
    assert missing.exit_code == 2 and name in missing.output
    adopted = runner.invoke(cli, ["jobs", "adopt", name, *server, "--json"])
    assert adopted.exit_code == 0, adopted.output
    rv = json.loads(adopted.output)
    assert rv["verdict"] == "safe"
    change = api("GET", f"/v1/changes/{rv['change']}", role="viewer").json()
    assert change["state"] == "reviewed"


def test_a_jobs_history_is_its_rate_per_interval_and_its_own_events(served: tuple[Api, Telemetry]) -> None:
    api, tel = served
    assert api.initial()["state"] == "committed"
    now = time.time()
    feed(tel, now)
    at = datetime.fromtimestamp(now - 30, UTC)
    event = {"baseline": {"mean": 1.0}, "observed": {"mean": 2.0}, "links": [], "cleared": False}
    with api.db.session() as s:
        mine = events_repo.add_event("job.slowdown", {**event, "job": "llm-7", "evidence": "slower"}, session=s, now=at)
        events_repo.add_event("job.stalled", {**event, "job": "emb-2", "evidence": "not mine"}, session=s, now=at)
        events_repo.add_event("link.hot", {**event, "link": "x:eth1", "evidence": "a link"}, session=s, now=at)
        old = datetime.fromtimestamp(now - 7200, UTC)
        events_repo.add_event("job.stalled", {**event, "job": "llm-7", "evidence": "long ago"}, session=s, now=old)
        s.commit()
    r = api("GET", f"/v1/jobs/llm-7/history?window_s={10 * INTERVALS}", role="viewer")
    assert r.status_code == 200, r.text
    h = r.json()
    assert h["job"] == "llm-7" and h["method"] == "aft" and h["interval_s"] == 10.0
    assert len(h["points"]) == INTERVALS and [p["t"] for p in h["points"]] == sorted(p["t"] for p in h["points"])
    # every interval's rate is the ring's bytes in it: the points integrate to what the ring sent
    ring_gbit = sum(v for (s, p), v in feed(Telemetry(), now).items()
                    if s in RING and p in {PREFIX[m] for m in RING}) * 8 / 1e9
    window_gbit = sum(10.0 * p["gbps"] for p in h["points"][-int(WINDOW_S // 10):] if p["gbps"] is not None)
    assert window_gbit == pytest.approx(ring_gbit, rel=0.02)
    assert h["expected_gbps"] == pytest.approx(4 * 2 * 0.75 * 2e10 * 8 / 1e9 / 37.0, rel=1e-6)
    assert [(e["id"], e["kind"], e["data"]["evidence"]) for e in h["events"]] == [(mine, "job.slowdown", "slower")]
    assert api("GET", "/v1/jobs/emb-2/history", role="viewer").status_code == 404
