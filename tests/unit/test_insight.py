"""The pure rules of baselines and anomalies (:mod:`controller.telemetry.insight`): each event kind is raised
once per episode and cleared once, with evidence that names the link and the job sharing it; steady traffic
with noise raises nothing; the baselines survive a round trip through their stored documents."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from controller.telemetry.insight import (
    Baselines,
    Bottleneck,
    InsightEvent,
    JobObservation,
    LinkObservation,
    Thresholds,
    step,
)

HOT = "leaf-0-1:eth3"
HOT_NAME = "leaf-0-1–spine-1-0"
COLD = "leaf-0-2:eth3"
TH = Thresholds(baseline_s=100.0, slowdown_threshold=1.2, interval_s=10.0)


def observe(rng: np.random.Generator, *, gbps: float = 100.0, period: float = 0.5, slowdown: float = 1.05,
            util: float = 0.4, label: str = "ring_allreduce") -> tuple[list[JobObservation], list[LinkObservation]]:
    """llm-7 (a ring over HOT and COLD) and emb-2 (an all-to-all over HOT), with 2% noise."""
    def n(x: float) -> float:
        return x * (1 + 0.02 * float(rng.standard_normal()))
    u = n(util)
    llm = JobObservation("llm-7", "ring_allreduce", gbps=n(gbps), period_s=n(period), slowdown=n(slowdown),
                         label=label, label_confidence=0.95, expected_label="ring_allreduce",
                         bottlenecks=(Bottleneck(HOT, HOT_NAME, u, 0.6),
                                      Bottleneck(COLD, "leaf-0-2–spine-1-0", 0.2, 1.0)),
                         crossed=frozenset({HOT, COLD}))
    emb = JobObservation("emb-2", "all_to_all", gbps=n(40.0), period_s=n(1.0), slowdown=1.0, label="all_to_all",
                         label_confidence=0.9, expected_label="all_to_all",
                         bottlenecks=(Bottleneck(HOT, HOT_NAME, u, 0.3),), crossed=frozenset({HOT}))
    return [llm, emb], [LinkObservation(HOT, HOT_NAME, u), LinkObservation(COLD, "leaf-0-2–spine-1-0", n(0.2))]


class Run:
    """Baselines stepped one telemetry interval at a time, the events of each interval kept."""

    def __init__(self, th: Thresholds = TH, seed: int = 0) -> None:
        self.th, self.rng, self.b, self.t = th, np.random.default_rng(seed), Baselines(), 1000.0
        self.events: list[list[InsightEvent]] = []

    def tick(self, **kw: float | str) -> list[InsightEvent]:
        jobs, links = observe(self.rng, **kw)  # type: ignore[arg-type]
        self.t += self.th.interval_s
        self.b, ev = step(self.b, jobs, links, self.t, self.th)
        self.events.append(ev)
        return ev

    def warm(self, n: int = 30) -> None:
        for _ in range(n):
            assert self.tick() == []


def test_steady_traffic_with_noise_raises_nothing_and_learns_its_baseline() -> None:
    run = Run()
    run.warm(200)
    jb, lb = run.b.jobs["llm-7"], run.b.links[HOT]
    assert jb.gbps.mean == pytest.approx(100.0, rel=0.02) and 0 < jb.gbps.sd < 5
    assert jb.period_s.mean == pytest.approx(0.5, rel=0.02) and jb.label == "ring_allreduce"
    assert lb.utilization.mean == pytest.approx(0.4, rel=0.03) and lb.utilization.learned(TH.baseline_s)


def test_a_predicted_slowdown_fires_after_two_intervals_once_and_clears_once() -> None:
    run = Run()
    run.warm()
    assert run.tick(slowdown=1.5) == []  # one interval above: not yet
    (ev,) = run.tick(slowdown=1.5)
    assert ev.kind == "job.slowdown" and not ev.cleared
    doc = ev.document.model_dump(mode="json", exclude_none=True)
    assert doc["job"] == "llm-7" and "link" not in doc and doc["observed"]["slowdown"] > 1.2
    assert HOT in doc["links"] and HOT_NAME in doc["evidence"] and "shared with job emb-2" in doc["evidence"]
    assert "threshold 1.2" in doc["evidence"]
    for _ in range(5):
        assert run.tick(slowdown=1.5) == []  # the episode is open: no repeat
    assert run.tick() == []  # one interval back under: not cleared yet
    (end,) = run.tick()
    assert end.kind == "job.slowdown" and end.cleared and end.document.evidence.startswith("back under")
    assert run.tick() == []


def test_a_period_risen_well_past_its_baseline_is_a_slowdown_in_words_and_numbers() -> None:
    run = Run()
    run.warm()
    (ev,) = run.tick(period=0.61)
    assert ev.kind == "job.slowdown"
    assert re.search(r"^llm-7's iteration period rose from 0\.(49|50|51) s to 0\.(5[89]|6\d) s", ev.document.evidence)
    assert ev.document.baseline["period_s"] == pytest.approx(0.5, rel=0.02)
    assert ev.document.observed["period_s"] == pytest.approx(0.61, rel=0.05)


def test_a_job_whose_rate_falls_to_nothing_is_stalled_once() -> None:
    run = Run()
    run.warm()
    kinds = [e.kind for e in run.tick(gbps=0.0)]
    assert kinds == ["job.stalled"]
    (ev,) = run.events[-1]
    assert re.search(r"llm-7's measured rate fell to 0 Gb/s from a baseline of (9[89](\.\d)?|10[01](\.\d)?) Gb/s",
                     ev.document.evidence)
    assert all(e.kind != "job.stalled" for _ in range(4) for e in run.tick(gbps=0.0))
    assert run.b.jobs["llm-7"].gbps.mean == pytest.approx(100.0, rel=0.02)  # the anomaly is not learned
    run.tick()
    assert [(e.kind, e.cleared) for e in run.tick()] == [("job.stalled", True)]


def test_a_job_that_reads_as_another_pattern_is_pattern_changed_once() -> None:
    run = Run()
    run.warm()
    assert run.tick(label="all_to_all") == []
    (ev,) = run.tick(label="all_to_all")
    assert ev.kind == "job.pattern_changed"
    assert ev.document.evidence == ("llm-7's traffic now reads as all_to_all (confidence 0.95), not ring_allreduce "
                                    "as its collective ring_allreduce declares")
    assert run.tick(label="all_to_all") == []


def test_a_link_well_past_its_baseline_is_hot_once_naming_the_jobs_crossing_it() -> None:
    run = Run()
    run.warm()
    got = run.tick(util=0.9)
    hot = [e for e in got if e.kind == "link.hot"]
    assert len(hot) == 1 and hot[0].subject == HOT and hot[0].document.links == [HOT]
    assert hot[0].document.link == HOT and hot[0].document.job is None
    assert "is at 90%" in hot[0].document.evidence or "is at 9" in hot[0].document.evidence
    assert "jobs crossing it: emb-2, llm-7" in hot[0].document.evidence
    assert [e for e in run.tick(util=0.9) if e.kind == "link.hot"] == []


def test_a_link_over_the_intents_limit_is_hot_without_a_baseline() -> None:
    run = Run(Thresholds(baseline_s=100.0, interval_s=10.0, utilization_limit=0.8))
    (ev,) = [e for e in run.tick(util=0.85) if e.kind == "link.hot"]
    assert "the intent's utilization limit 80%" in ev.document.evidence and ev.document.baseline["limit"] == 0.8


def test_baselines_survive_a_round_trip_through_their_documents() -> None:
    run = Run()
    run.warm()
    run.tick(slowdown=1.5)
    run.tick(slowdown=1.5)  # an open episode, stored too
    stored = json.loads(json.dumps(run.b.to_documents()))
    back = Baselines.from_documents(stored)
    assert back.to_documents() == run.b.to_documents()
    assert back.jobs["llm-7"].episode("job.slowdown").open
    # the restored baselines go on as the originals would: no repeat of the open episode
    jobs, links = observe(np.random.default_rng(5), slowdown=1.5)
    _, again = step(back, jobs, links, run.t + 10, TH)
    assert [e.kind for e in again] == []
