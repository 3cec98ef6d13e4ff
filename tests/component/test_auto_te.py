"""Automatic re-tuning through a real app over the dry driver, fed counters that follow the
active plan and a demand matrix the test sets (``Feeder``, a thread streaming like a fabric).

The fabric is clos3-hosts with two half-capacity ToR uplinks, so that where a ToR's
traffic goes matters; its declared demand is light, so the first plan is poor for the
skewed matrices the tests send. Pure parts (the guard rails' memory, the candidate's
demand with jobs) are tested without an app.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.model.intent import load_intent, validate_intent
from controller.planning import compile_plan
from controller.telemetry import Options, Telemetry
from controller.workflow.autote import Rails, candidate_demands, evaluate
from southbound.device.dry import DryDriver
from tests.apps import Api, running_api
from tests.telemetry_synth import Fabric

REPO = Path(__file__).resolve().parents[2]
HALF = {("tor-0-0", "eth2"), ("tor-0-1", "eth1")}
A = {("tor-0-0", "10.1.0.0/24"): 0.03, ("tor-1-1", "10.0.0.0/24"): 0.01}
B = {("tor-0-1", "10.1.1.0/24"): 0.03, ("tor-1-0", "10.0.1.0/24"): 0.01}
POLICY = {"kind": "auto_te", "interval_s": 1, "window_s": 3, "stat": "mean", "headroom": 1.1, "min_gain": 0.05}


def fabric_doc(*policies: dict[str, Any]) -> dict[str, Any]:
    doc = load_intent(REPO / "labs" / "clos3-hosts" / "intent.yaml").to_document()
    for lk in doc["links"]:
        if (lk["a"], lk["a_port"]) in HALF:
            lk["capacity_gbps"] = 0.025
    doc["policies"] = list(policies)
    return doc


class Feeder:
    """Streams every counter of the fabric each ``step`` seconds: link counters under the active plan
    (``tel.context``, as the app's views set it) and AFT counters of :attr:`matrix`; counters
    accumulate, so a new matrix or plan changes rates, never makes a counter go back."""

    def __init__(self, tel: Telemetry, step: float = 0.25):
        self.tel, self.step = tel, step
        self.matrix: dict[tuple[str, str], float] = {}
        self._values: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from controller.telemetry import Sample

        last = time.time()
        fabric: Fabric | None = None
        key: Any = None
        while not self._stop.wait(self.step):
            ctx = self.tel.context
            if ctx is None:
                continue
            if key != (ctx[0], tuple(sorted(self.matrix.items()))):
                key = (ctx[0], tuple(sorted(self.matrix.items())))
                fabric = Fabric(ctx[1], ctx[2], dict(self.matrix))
            assert fabric is not None
            now = time.time()
            for k, rate in zip(fabric.keys, fabric.rates, strict=True):
                self._values[k] = self._values.get(k, 0.0) + float(rate) * (now - last)
            last = now
            ns = int(now * 1e9)
            self.tel.ingest([Sample(d, p, int(v), ns) for (d, p), v in self._values.items()], now=now)


@pytest.fixture
def loop(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Api, Feeder]]:
    policies = getattr(request, "param", [POLICY])
    doc = fabric_doc(*policies)
    tel = Telemetry(Options(interval_s=0.25))
    driver = DryDriver([d["name"] for d in doc["devices"]], tmp_path / "dry")
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, driver=driver, telemetry=tel,
                     drift_interval=0, verify_timeout=5, auto_te_confirm=2) as api:
        assert api.initial()["state"] == "committed"
        feeder = Feeder(tel)
        feeder.start()
        try:
            yield api, feeder
        finally:
            feeder.stop()


def auto_changes(api: Api) -> list[dict[str, Any]]:
    body = api("GET", "/v1/changes?limit=100", role="viewer").json()
    return [c for c in body["items"] if c["author"] == "auto-te"]


def wait_for(cond: Any, timeout: float = 60, what: str = "") -> Any:
    end = time.time() + timeout
    while time.time() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def committed(api: Api, n: int) -> list[dict[str, Any]]:
    return wait_for(lambda: (c := [x for x in auto_changes(api) if x["state"] == "committed"]) and len(c) >= n and c,
                    what=f"{n} committed auto-te change(s)")


def decisions(api: Api) -> list[dict[str, Any]]:
    return list(api("GET", "/v1/auto-te", role="viewer").json()["decisions"])


def test_a_skewed_matrix_is_retuned_once_and_a_steady_one_not_again(loop: tuple[Api, Feeder]) -> None:
    api, feeder = loop
    feeder.matrix = dict(A)
    first = committed(api, 1)[0]
    change = api("GET", f"/v1/changes/{first['id']}", role="viewer").json()
    trig = change["trigger"]
    assert change["review"]["verdict"] == "safe" and change["base_revision"] == 1
    assert trig["method"] == "aft" and trig["stat"] == "mean" and trig["headroom"] == 1.1
    assert trig["gain"] >= 0.05
    assert trig["gain"] == pytest.approx(trig["active_predicted"] - trig["candidate_predicted"], abs=1e-5)
    # the re-tuned plan for 1.1 x A: 0.033 Gb/s out of tor-0-0 over a full and a half uplink -> 0.44
    assert trig["candidate_predicted"] == pytest.approx(0.44, abs=0.01)
    proposed = api("GET", f"/v1/revisions/{change['proposed_revision']}/intent", role="viewer").json()
    got = {(d["from"], d["to"]): d["gbps"] for d in proposed["demands"]}
    assert got == pytest.approx({k: round(g * 1.1, 6) for k, g in A.items()}, rel=0.02)
    # steady: the dead band holds (noise-free counters: the gain is zero), no second commit
    wait_for(lambda: sum(d["reason"] == "below_min_gain" for d in decisions(api)) >= 3, what="steady evaluations")
    assert len(auto_changes(api)) == 1
    audit = api("GET", "/v1/audit?limit=500", role="viewer").json()["items"]
    actions = {(e["actor"], e["action"]) for e in audit}
    assert {("auto-te", "auto_te.committed"), ("auto-te", "auto_te.skipped"), ("auto-te", "change.commit")} <= actions
    metrics = api.client.get("/metrics").text
    assert 'loom_auto_te_decisions_total{decision="committed",reason="committed"} 1.0' in metrics
    assert 'loom_auto_te_decisions_total{decision="skipped",reason="below_min_gain"}' in metrics
    # a shift re-tunes again, on top of the plan it made
    feeder.matrix = dict(B)
    second = committed(api, 2)[0]
    assert second["id"] != first["id"] and second["base_revision"] == first["proposed_revision"]


def test_pausing_stops_it_and_edits_in_flight_hold_it(loop: tuple[Api, Feeder]) -> None:
    api, feeder = loop
    r = api("POST", "/v1/auto-te/pause", json={"reason": "maintenance"})
    assert r.status_code == 200 and r.json()["paused"] and r.json()["paused_by"] == "operator-1"
    assert api("POST", "/v1/auto-te/pause", role="viewer").status_code == 403
    feeder.matrix = dict(A)
    wait_for(lambda: sum(d["reason"] == "paused" for d in decisions(api)) >= 3, what="paused decisions")
    assert auto_changes(api) == []
    # an operator's uncommitted edit holds re-tuning too
    head = api("GET", "/v1/intent", role="viewer")
    doc = head.json()
    doc["demands"] = doc["demands"][:1]
    assert api("PUT", "/v1/intent", json=doc, headers={"If-Match": head.headers["ETag"]}).status_code == 200
    assert api("POST", "/v1/auto-te/resume").json()["paused"] is False
    wait_for(lambda: sum(d["reason"] == "pending_edits" for d in decisions(api)) >= 2, what="pending edits")
    assert auto_changes(api) == []
    audit = api("GET", "/v1/audit?limit=500", role="viewer").json()["items"]
    assert {"auto_te.pause", "auto_te.resume"} <= {e["action"] for e in audit}


@pytest.mark.parametrize("loop", [[POLICY, {"kind": "utilization_limit", "max": 0.42}]], indirect=True)
def test_an_unsafe_candidate_is_refused_audited_and_backed_off(loop: tuple[Api, Feeder]) -> None:
    api, feeder = loop
    feeder.matrix = dict(A)  # the best plan for 1.1 x A reaches 0.44, over the 0.42 limit
    refused = wait_for(lambda: [d for d in decisions(api) if d["decision"] == "refused"], what="a refusal")[0]
    assert refused["reason"] == "unsafe" and refused["change"] is not None
    ch = api("GET", f"/v1/changes/{refused['change']}", role="viewer").json()
    assert ch["state"] == "reviewed" and ch["review"]["verdict"] == "unsafe" and ch["author"] == "auto-te"
    wait_for(lambda: any(d["reason"] == "backoff" for d in decisions(api)), what="the back-off")
    status = api("GET", "/v1/auto-te", role="viewer").json()
    # one failure per refusal, and never two refusals without a back-off between them (a loaded machine may
    # let the back-off of 2 intervals run out, and the loop refuse again, before this read)
    kinds = [d["reason"] if d["reason"] == "backoff" else d["decision"] for d in reversed(status["decisions"])]
    kinds = [k for k in kinds if k in ("refused", "backoff")]
    assert status["failures"] == kinds.count("refused") >= 1 and status["backoff_until"] is not None, status
    assert all(b == "backoff" for a, b in zip(kinds, kinds[1:], strict=False) if a == "refused"), kinds
    assert not [c for c in auto_changes(api) if c["state"] == "committed"]
    audit = api("GET", "/v1/audit?limit=500", role="viewer").json()["items"]
    assert any(e["action"] == "auto_te.refused" and e["outcome"] == "rejected" for e in audit)


@pytest.mark.parametrize("loop", [[{**POLICY, "enabled": False}]], indirect=True)
def test_a_disabled_policy_decides_nothing(loop: tuple[Api, Feeder]) -> None:
    api, feeder = loop
    feeder.matrix = dict(A)
    time.sleep(3)
    status = api("GET", "/v1/auto-te", role="viewer").json()
    assert status["enabled"] is False and status["decisions"] == [] and status["running"]
    assert auto_changes(api) == []


# -- the pure parts -------------------------------------------------------------------
@pytest.mark.unit
def test_rails_need_confirmation_and_back_off_doubling() -> None:
    r = Rails(confirm=2, backoff_max=8)
    assert not r.observe(0.1, 0.05) and r.observe(0.1, 0.05)
    assert not r.observe(0.01, 0.05) and r.streak == 0  # the dead band restarts the count
    r.committed(100.0)
    assert r.blocked(100.5, 1.0) == ("rate_limit", r.blocked(100.5, 1.0)[1]) and r.blocked(101.0, 1.0) is None
    r.failed(200.0, 10.0)
    assert r.backoff_until == 220.0 and r.blocked(219.0, 10.0)[0] == "backoff"
    r.failed(220.0, 10.0)
    r.failed(300.0, 10.0)
    r.failed(400.0, 10.0)
    assert r.backoff_until == 400.0 + 80.0  # 2, 4, 8, then capped at 8 intervals
    r.committed(500.0)
    assert r.failures == 0 and r.blocked(600.0, 10.0) is None


@pytest.mark.unit
def test_a_running_job_counts_once_and_a_waiting_one_keeps_its_reservation() -> None:
    doc = fabric_doc()
    doc["jobs"] = [{"name": "j", "tors": ["tor-0-0", "tor-1-0"], "collective": "pipeline",
                    "bytes_per_iter": 1.25e6, "iter_s": 1.0}]  # B/t = 0.01 gbps, tor-0-0 -> 10.1.0.0/24
    intent = validate_intent(doc)
    measured = {("tor-0-0", "10.1.0.0/24"): 0.025, ("tor-1-1", "10.0.0.0/24"): 0.005, ("nowhere", "10.0.0.0/24"): 1.0}
    got = candidate_demands(intent, measured, 1.0)
    assert got == pytest.approx({("tor-0-0", "10.1.0.0/24"): 0.015, ("tor-1-1", "10.0.0.0/24"): 0.005})
    ev = evaluate(intent, compile_plan(intent), measured, 1.0)
    eff = {(d.from_, d.to): d.gbps for d in ev.intent.effective_demands}
    assert eff[("tor-0-0", "10.1.0.0/24")] == pytest.approx(0.025)  # measured, the job inside it once
    small = candidate_demands(intent, {("tor-0-0", "10.1.0.0/24"): 0.004}, 1.0)
    assert small == {}  # the job not yet at its rate: its reservation (0.01) stands alone
    assert np.isfinite(ev.gain)
