"""The closed loop end to end: real FRR with hosts, a real ``loom serve`` streaming gNMI from
the agents, UDP traffic from the hosts, and automatic re-tuning committing on its own.

The lab is clos3-hosts with two half-capacity ToR uplinks (declared: the kernel's veths
are faster, utilization is load over the declared capacity), whose declared demand is
light: the first plan leaves a heavy matrix from tor-0-0 on its half uplink. Traffic
shifts, and without anyone touching it Loom measures, re-plans, checks safety, commits,
and the links it said would cool down do. Then: a steady matrix does not commit again,
a second shift re-tunes again, pausing stops it (while a ring all-reduce runs, which the
pattern view names), and an unsafe candidate is refused and audited.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.model.intent import load_intent
from tests.labkit import REPO, HostTraffic, ServedLab, served_lab

LAB = "cl-t"
TOKEN = "clt-" + "Qm4Zx8Nv2Lw6Rt0Yb3Hk7Jp1Fs5Dc9Ga"
HALF = {("tor-0-0", "eth2"), ("tor-0-1", "eth1")}
A = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 0.03}, {"from": "tor-1-1", "to": "10.0.0.0/24", "gbps": 0.01}]
B = [{"from": "tor-0-1", "to": "10.1.1.0/24", "gbps": 0.03}, {"from": "tor-1-0", "to": "10.0.1.0/24", "gbps": 0.01}]
#: tor-0-0 -> tor-1-0 -> tor-0-1 -> tor-1-1 -> tor-0-0, each to the next's prefix
RING = [{"from": f, "to": p, "gbps": 0.008} for f, p in (("tor-0-0", "10.1.0.0/24"), ("tor-1-0", "10.0.1.0/24"),
                                                        ("tor-0-1", "10.1.1.0/24"), ("tor-1-1", "10.0.0.0/24"))]
POLICY = {"kind": "auto_te", "interval_s": 3, "window_s": 4, "stat": "mean", "headroom": 1.1, "min_gain": 0.05}
WINDOW_S = 4


class Lab(ServedLab):
    """clos3-hosts under its own name with two hosts per ToR; the controller's intent halves two ToR uplinks
    (the lab's links stay as generated) and runs auto-TE."""

    def __init__(self, base: Path):
        lab_doc = load_intent(REPO / "labs" / "clos3-hosts" / "intent.yaml").to_document()
        lab_doc["name"] = LAB
        doc = copy.deepcopy(lab_doc)
        for lk in doc["links"]:
            if (lk["a"], lk["a_port"]) in HALF:
                lk["capacity_gbps"] = 0.025
        doc["policies"] = [POLICY]
        super().__init__(base, LAB, doc, TOKEN, hosts=2, lab_doc=lab_doc,
                         env={"LOOM_TELEMETRY_INTERVAL_S": "1", "LOOM_AUTO_TE_CONFIRM": "2"})
        self._traffic: HostTraffic | None = None

    @property
    def traffic(self) -> HostTraffic:
        if self._traffic is None:
            assert self.topo is not None, "the lab is not up"
            self._traffic = HostTraffic(self.topo)
        return self._traffic

    def down(self) -> None:
        if self._traffic is not None:
            self._traffic.stop()
        super().down()

    def cli(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The CLI, which must succeed here unless told otherwise."""
        return super().cli(*args, timeout=timeout, check=check)

    def auto_changes(self) -> list[dict[str, Any]]:
        return [c for c in self.get("/v1/changes?limit=100")["items"] if c["author"] == "auto-te"]

    def decisions(self) -> list[dict[str, Any]]:
        return list(self.get("/v1/auto-te")["decisions"])

    def observed_mlu(self) -> float:
        links = self.get(f"/v1/telemetry/links?window_s={WINDOW_S}")["links"]
        assert not any(x["stale"] for x in links), links
        return max(x["utilization"] for x in links)


def wait_for(cond: Any, timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with served_lab(Lab(tmp_path_factory.mktemp("cl"))) as lab:
        assert lab("POST", "/v1/auto-te/pause", json={"reason": "set-up"}).status_code == 200
        assert lab.apply(lab.doc)["state"] == "committed"
        yield lab


def committed_after(lab: Lab, known: set[int]) -> dict[str, Any]:
    def new() -> dict[str, Any] | None:
        done = [c for c in lab.auto_changes() if c["id"] not in known and c["state"] in
                ("committed", "failed", "rolled_back")]
        return done[0] if done else None
    ch = wait_for(new, 120, "a re-tuning committed by auto-te")
    assert ch["state"] == "committed", ch
    return dict(lab.get(f"/v1/changes/{ch['id']}"))


def test_a_traffic_shift_is_measured_retuned_committed_and_the_links_cool(lab: Lab) -> None:
    lab.traffic.run(A)
    time.sleep(WINDOW_S + 3)  # the first plan carries A for a full window
    before = lab.observed_mlu()
    t_resume = time.monotonic()
    assert lab.server("POST", "/v1/auto-te/resume").json()["paused"] is False
    first = committed_after(lab, set())
    t_commit = time.monotonic()
    trig = first["trigger"]
    assert first["review"]["verdict"] == "safe" and trig["method"] == "aft" and trig["gain"] >= 0.05
    time.sleep(WINDOW_S + 2)  # a window under the new weights
    after = lab.observed_mlu()
    fidelity = lab.get(f"/v1/telemetry/fidelity?window_s={WINDOW_S}")
    hot = sorted(fidelity["links"], key=lambda x: -(x["observed"] or 0))[:4]
    predicted_before, predicted_after = trig["active_predicted"] / 1.1, trig["candidate_predicted"] / 1.1
    print(f"\nclosed loop A: resume->commit {t_commit - t_resume:.1f} s; observed MLU {before:.3f} -> {after:.3f}; "
          f"predicted {predicted_before:.3f} -> {predicted_after:.3f}")
    assert after < before - 0.5 * (predicted_before - predicted_after), (before, after, trig)
    assert abs(before - predicted_before) <= 0.15 * predicted_before + 0.05, (before, trig)
    assert abs(after - predicted_after) <= 0.15 * predicted_after + 0.05, (after, trig, hot)

    # steady traffic: evaluations keep finding nothing worth a change
    wait_for(lambda: [d["reason"] for d in lab.decisions()[:2]] == ["below_min_gain"] * 2, 60,
             "two steady evaluations in a row")
    assert [c["id"] for c in lab.auto_changes()] == [first["id"]]

    # a second shift re-tunes again
    lab.traffic.run(B)
    t_shift = time.monotonic()
    second = committed_after(lab, {first["id"]})
    print(f"closed loop B: shift->commit {time.monotonic() - t_shift:.1f} s, gain {second['trigger']['gain']:.3f}")
    assert second["base_revision"] == first["proposed_revision"] and second["trigger"]["gain"] >= 0.05
    audit = lab.get("/v1/audit?limit=500")["items"]
    assert sum(a["action"] == "auto_te.committed" and a["actor"] == "auto-te" for a in audit) == 2
    assert 'loom_auto_te_decisions_total{decision="committed",reason="committed"} 2.0' in lab.server(
        "GET", "/metrics").text


def test_paused_it_holds_while_a_ring_allreduce_runs_and_patterns_name_it(lab: Lab) -> None:
    assert json.loads(lab.cli("auto-te", "pause", "--reason", "ring test", "--json").stdout)["paused"]
    known = {c["id"] for c in lab.auto_changes()}
    lab.traffic.run(RING)
    time.sleep(WINDOW_S + 3)
    wait_for(lambda: sum(d["reason"] == "paused" for d in lab.decisions()[:3]) >= 2, 30, "paused decisions")
    groups = lab.get(f"/v1/telemetry/patterns?window_s={WINDOW_S + 2}")["groups"]
    ring = [g for g in groups if g["pattern"] == "ring_allreduce"]
    assert ring and set(ring[0]["members"]) == {"tor-0-0", "tor-0-1", "tor-1-0", "tor-1-1"}, groups
    assert {c["id"] for c in lab.auto_changes()} == known
    shown = lab.cli("auto-te", "status").stdout
    assert "PAUSED" in shown and "ring test" in shown and "paused" in shown


def test_an_unsafe_candidate_is_refused_and_audited(lab: Lab) -> None:
    doc = json.loads(json.dumps(lab.doc))
    doc["policies"] = [POLICY, {"kind": "utilization_limit", "max": 0.42}]  # A's best plan reaches 0.44
    assert lab.apply(doc)["state"] == "committed"
    known = {c["id"] for c in lab.auto_changes()}
    lab.traffic.run(A)
    time.sleep(WINDOW_S + 1)
    assert lab.server("POST", "/v1/auto-te/resume").status_code == 200
    refused = wait_for(lambda: [d for d in lab.decisions() if d["decision"] == "refused"], 90, "a refusal")[0]
    assert refused["reason"] == "unsafe", refused
    ch = lab.get(f"/v1/changes/{refused['change']}")
    assert ch["author"] == "auto-te" and ch["state"] == "reviewed" and ch["review"]["verdict"] == "unsafe"
    assert not [c for c in lab.auto_changes() if c["id"] not in known and c["state"] == "committed"]
    audit = lab.get("/v1/audit?limit=500")["items"]
    assert any(a["action"] == "auto_te.refused" and a["outcome"] == "rejected" for a in audit)
    lab.traffic.stop()
