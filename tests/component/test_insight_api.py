"""Baselines and anomalies through a real app (DESIGN.md, ML workloads: policy ``insight``): its active
revision committed over the dry driver, fed AFT counters of two ring jobs and the interface counters of a
fabric link both cross, the way ``tests/component/test_job_performance_api.py`` feeds its collector. The
leader's loop learns the baselines on its own and stores them; then, driven one telemetry interval at a
time, that link made hot by other traffic raises ``link.hot`` and ``job.slowdown`` for the job crossing it
within two intervals, naming the link and the job sharing it, once, on the event stream, in the audit log
and in ``/metrics``; the stored baselines are the ones a restart reads."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.gen import clos_document
from controller.model.intent import validate_intent
from controller.settings import Settings
from controller.store import events_repo
from controller.store.db import Database
from controller.telemetry import Sample, Telemetry, aft_path, interface_path
from controller.telemetry.insight import Baselines
from controller.telemetry.jobperf import phase_bits
from controller.workflow.insight import IDLE_S, PERSIST_INTERVALS, Insight
from controller.workflow.runtime import Runtime
from southbound.device.dry import DryDriver
from tests.apps import Api, running_api

DOC = clos_document(pods=2, tors=6, planes=2, spines=2, scale_to_ecmp=False)
DOC["demands"] = []
INTENT = validate_intent(DOC)
TORS = sorted(d.name for d in INTENT.devices if d.role == "tor")
PREFIX = {p.origins[0]: p.prefix for p in INTENT.prefixes}
LLM: dict[str, Any] = {"name": "llm-7", "tors": [TORS[0], TORS[7], TORS[3], TORS[10]], "collective": "ring_allreduce",
       "bytes_per_iter": 2e9, "iter_s": 10.0}
EMB: dict[str, Any] = {"name": "emb-2", "tors": [TORS[1], TORS[8], TORS[4], TORS[11]], "collective": "ring_allreduce",
       "bytes_per_iter": 1e9, "iter_s": 10.0}
POLICY = {"kind": "insight", "baseline_s": 60, "slowdown_threshold": 1.2}
STEP = 10.0


def shared_link() -> Any:
    """A fabric link both jobs' rings cross (by the active plan's routing, as the insight reads it)."""
    doc = {**DOC, "jobs": [LLM, EMB], "policies": [*DOC["policies"], POLICY]}
    intent = validate_intent(doc)
    tel = Telemetry()
    from controller.planning import compile_plan  # lazy: the test's oracle only
    rm = tel.routing(intent, compile_plan(intent))
    crossed = [{int(e) // 2 for e in np.flatnonzero(sum(phase_bits(j, intent, rm)) > 0)} for j in intent.jobs]
    both = sorted(crossed[0] & crossed[1], key=lambda i: intent.links[i].key)
    assert both, "the two rings share no link: pick other members"
    return intent.links[both[0]]


LINK = shared_link()


class Feeder:
    """Cumulative octets: every ring member's AFT counter toward its successor's prefix, and the shared link's
    interface counters at ``util`` of its capacity in both directions (2% noise)."""

    def __init__(self, tel: Telemetry) -> None:
        self.tel, self.rng = tel, np.random.default_rng(7)
        self.octets: dict[tuple[str, str], float] = {}

    def add(self, key: tuple[str, str], gbps: float) -> None:
        got = gbps * 1e9 / 8 * STEP * (1 + 0.02 * float(self.rng.standard_normal()))
        self.octets[key] = self.octets.get(key, 0.0) + max(got, 0.0)

    def interval(self, when: float, util: float) -> None:
        for job, gbps in ((LLM, 4.0), (EMB, 2.0)):
            ring = job["tors"]
            for i, src in enumerate(ring):
                self.add((src, aft_path(PREFIX[ring[(i + 1) % len(ring)]])), gbps)
        g = util * LINK.capacity_gbps
        for dev, port in ((LINK.a, LINK.a_port), (LINK.b, LINK.b_port)):
            for name in ("out-octets", "in-octets"):
                self.add((dev, interface_path(port, name)), g)
        self.tel.ingest([Sample(d, p, int(v), int(when * 1e9)) for (d, p), v in self.octets.items()], now=when)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Api, Telemetry]]:
    tel = Telemetry()
    doc = {**DOC, "jobs": [LLM, EMB], "policies": [*DOC["policies"], POLICY]}
    driver = DryDriver([d.name for d in INTENT.devices], tmp_path / "dry")
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, driver=driver, telemetry=tel,
                     drift_interval=0, verify_timeout=5) as api:
        yield api, tel


def stream(api: Api) -> list[tuple[str, dict[str, Any]]]:
    """Every event kept, read from ``/v1/events`` up to the last one written now."""
    with api.db.session() as s:
        last = events_repo.last_event_id(session=s)
    out: list[tuple[str, dict[str, Any]]] = []
    with api.client.stream("GET", "/v1/events", headers={"Authorization": f"Bearer {api.tokens['viewer']}",
                                                          "Last-Event-ID": "0"}) as r:
        assert r.status_code == 200
        kind, ident = None, 0
        for line in r.iter_lines():
            if line.startswith("id: "):
                ident = int(line.removeprefix("id: "))
            elif line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind is not None:
                out.append((kind, json.loads(line.removeprefix("data: "))))
                if ident >= last:
                    break
    return out


def until(pred: Any, timeout: float = 20.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_a_hot_shared_link_raises_link_hot_and_job_slowdown_once_with_evidence(
        served: tuple[Api, Telemetry], tmp_path: Path) -> None:
    api, tel = served
    assert api.initial()["state"] == "committed"
    feed = Feeder(tel)
    t = time.time() - 3 * STEP  # the last interval now: the loop reads it
    for _ in range(3):
        t += STEP
        feed.interval(t, 0.1)
    insight = api.app.state.workflow.insight
    # the leader's loop runs on its own: it stores what it observed
    until(lambda: "link:" + LINK.key in api_baselines(api))
    api.client.portal.call(insight.stop)  # from here on, one interval at a time
    insight.baselines = None  # as a restart: read from the store on the next tick
    learned: list[Any] = []
    for _ in range(2 * PERSIST_INTERVALS):  # 120 s of steady traffic: the 60 s baseline is learned, nothing raised
        t += STEP
        feed.interval(t, 0.1)
        api.client.portal.call(insight.tick, t)
        learned += insight.last
    assert learned == []
    # what is stored (every PERSIST_INTERVALS intervals: the last one now) is what a restarted controller reads
    stored = api_baselines(api)
    assert stored == insight.baselines.to_documents()
    restarted = Database(str(api.db.url))
    with restarted.session() as s:
        assert Baselines.from_documents(events_repo.load_baselines(session=s)).to_documents() == stored
    restarted.dispose()
    link_base = insight.baselines.links[LINK.key].utilization
    assert link_base.mean == pytest.approx(0.1, abs=0.02) and link_base.learned(60)
    before = len(stream(api))
    raised: list[Any] = []
    for k in range(4):  # other traffic makes the shared link hot
        t += STEP
        feed.interval(t, 0.97)
        api.client.portal.call(insight.tick, t)
        raised += [(k, e) for e in insight.last]
    kinds = [(k, e.kind, e.subject) for k, e in raised if not e.cleared]
    assert ("link.hot", LINK.key) in [(kind, s) for _, kind, s in kinds]
    slow = [(k, e) for k, e in raised if e.kind == "job.slowdown" and e.subject == "llm-7"]
    assert len(slow) == 1 and slow[0][0] <= 1, kinds  # within two intervals, once
    evidence = slow[0][1].document
    assert LINK.key in evidence.links and f"{LINK.a}–{LINK.b}" in evidence.evidence
    assert "shared with job emb-2" in evidence.evidence and evidence.observed["slowdown"] > 1.2
    # on the event stream, in the audit log and in /metrics
    events = stream(api)[before:]
    hot = [d for kind, d in events if kind == "link.hot"]
    assert hot and hot[0]["link"] == LINK.key and "job" not in hot[0] and hot[0]["links"] == [LINK.key]
    jobs = [d for kind, d in events if kind == "job.slowdown" and d["job"] == "llm-7"]
    assert len(jobs) == 1 and set(jobs[0]) >= {"job", "baseline", "observed", "evidence", "links"}
    audit = api("GET", "/v1/audit?limit=200", role="viewer").json()["items"]
    assert any(a["action"] == "insight.job.slowdown" and "shared with job emb-2" in (a["detail"] or "")
               for a in audit)
    metrics = api("GET", "/metrics", role="viewer").text
    assert 'loom_insight_events_total{kind="job.slowdown",state="raised"}' in metrics
    assert 'loom_insight_events_total{kind="link.hot",state="raised"}' in metrics


def api_baselines(api: Api) -> dict[str, Any]:
    with api.db.session() as s:
        return events_repo.load_baselines(session=s)


def test_a_follower_observes_nothing_and_forgets_what_it_held(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
    db.migrate()
    try:
        rt = Runtime(Settings(db_url=db.url), db, telemetry=Telemetry())
        rt.is_leader = lambda: False
        insight = Insight(rt, baselines=Baselines())
        assert asyncio.run(insight.tick(time.time())) == IDLE_S
        assert insight.baselines is None and insight.last == []  # a new leadership reads the store again
        with db.session() as s:
            assert events_repo.load_baselines(session=s) == {} and events_repo.last_event_id(session=s) == 0
    finally:
        db.dispose()
