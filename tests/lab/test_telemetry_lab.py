"""Telemetry end to end: real FRR with hosts, a real ``loom serve``, real UDP traffic, and the API's answers.

The lab is clos3-hosts (links of 50 Mb/s, two hosts per ToR) under its own name;
``loom serve --lab`` attaches to the lab's agents, which serve gNMI from their
nodes' kernels (interface counters over netlink, per-prefix counters in the
agents' nftables tables) and the server subscribes to them every second. After
the lab's intent is committed, ``loom lab traffic`` sends a skewed matrix from
the hosts; then the measured demand matrix must match the matrix sent within
5% per entry (by the AFT counters), every link's measured load must match the
kernel's own interface counters read independently in the node's namespace
within 5%, and the active plan's prediction under the measured demand must
stay within 5 points of utilization of what the links carry.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from controller.model.intent import load_intent
from labs import runner
from labs.traffic import SENDER, lab_hosts
from tests.labkit import REPO, ServedLab, served_lab
from tests.serving import LOOM

LAB = "tel-t"
TOKEN = "tel-" + "Vb7Nq2Lx9Rk4Tz1Hc8Mw5Jd3Pf6Gs0Ye"
MATRIX = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 0.02},
          {"from": "tor-1-1", "to": "10.0.0.0/24", "gbps": 0.012},
          {"from": "tor-0-1", "to": "10.1.1.0/24", "gbps": 0.006}]
WINDOW_S = 6


class Lab(ServedLab):
    """clos3-hosts under its own name with two hosts per ToR, the server subscribing every second."""

    def __init__(self, base: Path):
        doc = load_intent(REPO / "labs" / "clos3-hosts" / "intent.yaml").to_document()
        doc["name"] = LAB
        super().__init__(base, LAB, doc, TOKEN, hosts=2, env={"LOOM_TELEMETRY_INTERVAL_S": "1"})

    def traffic(self, tmp: Path, *, duration: float, flows: int) -> subprocess.Popen[str]:
        """``loom lab traffic`` of :data:`MATRIX` in the background (its JSON summary on stdout)."""
        matrix = tmp / "matrix.yaml"
        matrix.write_text(yaml.safe_dump(MATRIX))
        return subprocess.Popen([*LOOM, "lab", "traffic", str(self.path), "--matrix", str(matrix),
                                 "--duration", str(duration), "--flows", str(flows), "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with served_lab(Lab(tmp_path_factory.mktemp("tel"))) as lab:
        assert lab.apply(lab.doc)["state"] == "committed"
        yield lab


def tx_bytes(node: str, ports: list[str]) -> dict[str, int]:
    script = " ; ".join(f"cat /sys/class/net/{p}/statistics/tx_bytes" for p in ports)
    out = runner.node_exec(LAB, node, ["sh", "-c", script]).split()
    return dict(zip(ports, map(int, out), strict=True))


def kernel_snapshot(doc: dict[str, Any]) -> tuple[float, dict[tuple[str, str], int]]:
    ends: dict[str, list[str]] = {}
    for link in doc["links"]:
        ends.setdefault(link["a"], []).append(link["a_port"])
        ends.setdefault(link["b"], []).append(link["b_port"])
    t = time.time()
    return t, {(node, port): v for node, ports in ends.items() for port, v in tx_bytes(node, ports).items()}


def test_measured_demand_links_and_fidelity_match_the_traffic(lab: Lab, tmp_path: Path) -> None:
    sender = lab.traffic(tmp_path, duration=16, flows=512)
    try:
        time.sleep(4)  # the senders start together, and the first full samples of the stream arrive
        t0, before = kernel_snapshot(lab.doc)
        time.sleep(WINDOW_S + 1)
        t1, after = kernel_snapshot(lab.doc)
        demand = lab.server("GET", f"/v1/telemetry/demand?window_s={WINDOW_S}").json()
        links = lab.server("GET", f"/v1/telemetry/links?window_s={WINDOW_S}").json()["links"]
        fidelity = lab.server("GET", f"/v1/telemetry/fidelity?window_s={WINDOW_S}").json()
        captured = lab.cli("demand", "capture", "--window-s", str(WINDOW_S), "--stat", "mean", "--review", "--json")
    finally:
        out, err = sender.communicate(timeout=60)
    assert sender.returncode == 0, out + err
    sent = {(d["from"], d["to"]): d for d in json.loads(out)["demands"]}
    assert all(abs(d["achieved_gbps"] - d["gbps"]) <= 0.02 * d["gbps"] for d in sent.values()), sent

    # the demand matrix, by the ToRs' AFT counters: what was sent, and nothing else
    assert demand["method"] == "aft", demand
    measured = {(d["from"], d["to"]): d["gbps"] for d in demand["demands"] if d["gbps"] > 0.0005}
    assert set(measured) == {(d["from"], d["to"]) for d in MATRIX}, measured
    for d in MATRIX:
        assert abs(measured[d["from"], d["to"]] - d["gbps"]) <= 0.05 * d["gbps"], (d, measured)

    # every link, both ways, against the kernel's own counters read in the nodes
    seconds = t1 - t0
    checked = 0
    for x in links:
        assert not x["stale"], x
        for src, port, gbps in ((x["a"], x["a_port"], x["gbps_ab"]), (x["b"], x["b_port"], x["gbps_ba"])):
            kernel = (after[src, port] - before[src, port]) * 8 / seconds / 1e9
            if kernel > 0.002:
                checked += 1
                assert abs(gbps - kernel) <= 0.05 * kernel, (x, src, port, kernel)
            else:
                assert gbps < 0.002, (x, src, port, kernel)
    assert checked >= 8  # the matrix crosses both pods' uplinks and the spines

    # the active plan, under the measured demand, predicts what the links carry
    assert fidelity["worst"] is not None and abs(fidelity["worst"]) <= 0.05, fidelity

    # the measured matrix becomes the intent's demands in one revision, and its review shows the plan move
    assert captured.returncode == 0, captured.stdout + captured.stderr
    cap = json.loads(captured.stdout)
    assert cap["changed"] and cap["method"] == "aft"
    rows = {(d["from"], d["to"]): d["gbps"] for d in cap["demands"]}
    assert set(rows) == {(d["from"], d["to"]) for d in MATRIX}
    assert all(abs(rows[d["from"], d["to"]] - d["gbps"]) <= 0.05 * d["gbps"] for d in MATRIX), rows
    head = lab.server("GET", "/v1/intent").json()
    assert {(d["from"], d["to"]) for d in head["demands"]} == set(rows)
    review = cap["review"]
    assert review["verdict"] == "safe" and review["proposed_revision"] == cap["revision"]  # the captured one
    assert review["active_revision"] == 1
    assert any(abs(x["after"] - x["before"]) > 1e-3 for x in review["links"]), review["links"]
    audit = lab.server("GET", "/v1/audit?limit=20").json()["items"]
    assert any(a["action"] == "demands.from_telemetry" and f"window_s={WINDOW_S} stat=mean" in a["detail"]
               for a in audit), [a for a in audit if a["action"].startswith("demands")]


def spine_gbps(lab: Lab) -> list[float]:
    """The load of spine-0-0's links over the last 3 s, the larger direction of each."""
    return [max(x["gbps_ab"], x["gbps_ba"]) for x in lab.server("GET", "/v1/telemetry/links?window_s=3").json()["links"]
            if "spine-0-0" in (x["a"], x["b"])]


def test_a_drain_committed_under_traffic_is_verified_on_the_counters(lab: Lab, tmp_path: Path) -> None:
    sender = lab.traffic(tmp_path, duration=32, flows=128)
    try:
        # the spine carries traffic: waited for, since the sender's start (a Python process entering the hosts'
        # namespaces) can take seconds on a loaded machine, and a 3 s window then holds only its first packets
        deadline = time.monotonic() + 20
        while max(spine_gbps(lab)) <= 0.002:
            assert time.monotonic() < deadline and sender.poll() is None, spine_gbps(lab)
            time.sleep(1)
        drained = lab.cli("drain", "spine-0-0", "--commit", "--json")
        assert drained.returncode == 0, drained.stdout + drained.stderr
        cid = json.loads(drained.stdout)["id"]
        deadline = time.monotonic() + 60
        while not ((ch := lab.server("GET", f"/v1/changes/{cid}").json()).get("progress") or {}).get("drain_check"):
            assert time.monotonic() < deadline, ch
            time.sleep(0.5)
        check = ch["progress"]["drain_check"]
        assert check["status"] == "verified", check
        assert check["targets"][0]["target"] == "spine-0-0" and check["targets"][0]["transit_gbps"] is not None
        assert max(cooled := spine_gbps(lab)) < 0.001, cooled
        audit = lab.server("GET", "/v1/audit?limit=20").json()["items"]
        assert any(a["action"] == "change.drain_check" and "verified" in a["detail"] for a in audit)
    finally:
        # the traffic has served its purpose (32 s is room for a slow start, not what the checks need): SIGTERM
        # stops the senders at once, and the sender exits 0 unless one of them failed before
        if sender.poll() is None:
            sender.terminate()
        out, err = sender.communicate(timeout=60)
    assert sender.returncode == 0, out + err


#: a ring all-reduce's traffic among the four ToRs (each to the next one's prefix), on/off: busy half of every
#: 3.5 s (the period falls between whole 1 s telemetry intervals), 8 Mb/s on average per member
RING = [{"from": f, "to": p, "gbps": 0.008} for f, p in (("tor-0-0", "10.1.0.0/24"), ("tor-1-0", "10.0.1.0/24"),
                                                         ("tor-0-1", "10.1.1.0/24"), ("tor-1-1", "10.0.0.0/24"))]
RING_PERIOD_S = 3.5


def test_a_jobs_rate_and_period_are_read_from_its_counters_within_5_percent(lab: Lab, tmp_path: Path) -> None:
    """The job declared over the ring's ToRs (in ring order), its hosts sending on/off for five whole periods;
    ``GET /v1/jobs/{name}/performance`` over a window that holds all of it and quiet seconds at both ends (the
    counters' one-second samples then cut no burst short): its measured gigabits within 5% of what the senders
    sent, its period within 5% of theirs (a window of four periods inside the traffic was off by up to a burst's
    worth wherever its edges fell within a sample); the classifier finds the ring in the same counters and ties
    it to the job."""
    job = {"name": "lab-ring", "tors": ["tor-0-0", "tor-1-0", "tor-0-1", "tor-1-1"], "collective": "ring_allreduce",
           "bytes_per_iter": 0.032e9 / 8 * RING_PERIOD_S / 6, "iter_s": RING_PERIOD_S}  # 2 (n-1)/n B from each of 4
    assert lab.apply({**lab.doc, "jobs": [job]})["state"] == "committed"
    matrix = tmp_path / "ring.yaml"
    matrix.write_text(yaml.safe_dump(RING))
    duration = 5 * RING_PERIOD_S
    time.sleep(2.0)  # quiet seconds before the traffic
    began = time.monotonic()
    sender = subprocess.Popen([*LOOM, "lab", "traffic", str(lab.path), "--matrix", str(matrix), "--duration",
                               str(duration), "--period-s", str(RING_PERIOD_S), "--duty", "0.5", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    out, err = sender.communicate(timeout=120)
    assert sender.returncode == 0, out + err
    time.sleep(2.5)  # the last samples, and quiet seconds after the traffic
    window = math.ceil(time.monotonic() - began) + 2
    perf = lab.get(f"/v1/jobs/lab-ring/performance?window_s={window:g}")
    shown = lab.cli("jobs", "performance", "lab-ring", "--window-s", f"{window:g}")
    sent = sum(d["achieved_gbps"] for d in json.loads(out)["demands"])  # five whole periods: the mean rate
    measured = perf["measured_gbps"] * window / duration  # the same gigabits over the senders' five periods
    print(f"\njob lab-ring: measured {measured:.5f} gbps over the senders' time (senders {sent:.5f}), period "
          f"{perf['period_s']} s (senders {RING_PERIOD_S} s), slowdown {perf['slowdown']}")
    assert perf["method"] == "aft", perf
    assert abs(measured - sent) <= 0.05 * sent, (perf, window, sent)
    assert perf["period_s"] is not None and abs(perf["period_s"] - RING_PERIOD_S) <= 0.05 * RING_PERIOD_S, perf
    assert perf["expected_gbps"] == pytest.approx(0.032, rel=1e-6)
    assert perf["slowdown"] is not None and perf["slowdown"] >= 1.0 and perf["bottlenecks"], perf
    assert shown.returncode == 0 and "lab-ring" in shown.stdout, shown.stdout + shown.stderr
    # the classifier finds the ring in the same counters and ties it to the job declared over its ToRs
    groups = lab.get(f"/v1/telemetry/patterns?window_s={window:g}")["groups"]
    ring = [g for g in groups if set(g["members"]) == set(job["tors"])]
    print(f"job lab-ring's group: {ring}")
    assert ring and ring[0]["jobs"] == ["lab-ring"], groups
    assert "ring_allreduce" in (ring[0]["pattern"], ring[0]["collective"]), ring


#: a job in each pod (a ring of the pod's two ToRs), steady, 6 Mb/s from each member: pod 0's crosses the links
#: between its ToRs and leaves, pod 1's none of them
POD_JOBS = [{"name": f"pod{p}-ring", "tors": [f"tor-{p}-0", f"tor-{p}-1"], "collective": "ring_allreduce",
             "bytes_per_iter": 0.006e9 / 8, "iter_s": 1.0} for p in (0, 1)]  # 2 (n-1)/n B a second from each
POD_TRAFFIC = [{"from": f"tor-{p}-{i}", "to": f"10.{p}.{1 - i}.0/24", "gbps": 0.006} for p in (0, 1) for i in (0, 1)]
#: the background: from leaf-0-0 to a host of tor-0-1, so it crosses one fabric link (leaf-0-0→tor-0-1) and no
#: ToR's per-prefix counter tells it from the jobs' (it enters no ToR from a host)
HOT_GBPS = 0.04
HOT_FROM, HOT_PORT = "leaf-0-0", "eth2"


def background(lab: Lab, to: str, *, start_at: float, duration: float) -> subprocess.Popen[str]:
    """:data:`HOT_GBPS` of UDP from :data:`HOT_FROM`'s namespace to ``to``, by the labs' own paced sender (its spec
    in the lab's run directory, so ``loom lab down`` stops it if the test does not)."""
    spec = runner.run_dir(LAB) / "background.json"
    flows = [[to, port] for port in range(runner.SINK_PORTS[1] - 3, runner.SINK_PORTS[1] + 1)]
    spec.write_text(json.dumps({"start_at": start_at, "duration": duration, "packet_bytes": 1300, "streams": [
        {"demand": 0, "bps": HOT_GBPS * 1e9, "flows": flows}]}))
    return subprocess.Popen(["ip", "netns", "exec", runner.namespace(LAB, HOT_FROM), sys.executable, str(SENDER),
                             str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def insight_audit(lab: Lab, kind: str) -> list[dict[str, Any]]:
    return [a for a in lab.get("/v1/audit?limit=200")["items"] if a["action"] == f"insight.{kind}"]


def slowdown_events(lab: Lab, job: str, timeout: float) -> list[dict[str, Any]]:
    """``job``'s ``job.slowdown`` events on ``/v1/events`` (every event kept, replayed), once one arrived."""
    got: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {TOKEN}", "Last-Event-ID": "0"}
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=timeout) as client, client.stream("GET", f"{lab.url}/v1/events",
                                                                headers=headers) as r:
        kind = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind == "job.slowdown":
                data = json.loads(line[6:])
                if data.get("job") == job:
                    got.append(data)
            if got or time.monotonic() > deadline:
                return got
    return got


def test_a_link_made_hot_raises_job_slowdown_for_the_job_crossing_it_naming_it(lab: Lab, tmp_path: Path) -> None:
    """Two jobs, one per pod, their hosts sending their rings' traffic; the insight (baselines over 10 s, the
    least it takes) learns them quiet. Then background traffic from a leaf makes one link of pod 0 hot: within
    two telemetry intervals of the first interval whose counters show it hot, pod 0's job has a ``job.slowdown``
    on the event stream, in the audit log and in ``/metrics``, naming that link; pod 1's job, which does not cross
    it, has none."""
    policy = {"kind": "insight", "baseline_s": 10, "slowdown_threshold": 1.2}
    assert lab.apply({**lab.doc, "jobs": POD_JOBS, "policies": [*lab.doc["policies"], policy]})["state"] == "committed"
    hot = next(lk for lk in lab.doc["links"] if (lk["a"], lk["b"]) == ("tor-0-1", HOT_FROM))
    hot_id, hot_name = min(f"{hot['a']}:{hot['a_port']}", f"{hot['b']}:{hot['b_port']}"), f"{hot['a']}–{hot['b']}"
    assert lab.topo is not None
    sink = sorted(h.address for h in lab_hosts(lab.topo).values() if h.tor == "tor-0-1")[0]
    matrix = tmp_path / "pods.yaml"
    matrix.write_text(yaml.safe_dump(POD_TRAFFIC))
    jobs = subprocess.Popen([*LOOM, "lab", "traffic", str(lab.path), "--matrix", str(matrix), "--duration", "40",
                             "--flows", "64", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
    hot_sender: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 20  # the senders' start, and the jobs' first measured interval
        while not (lab.get("/v1/jobs/pod0-ring/performance?window_s=2")["measured_gbps"] or 0) > 0.006:
            assert time.monotonic() < deadline and jobs.poll() is None, "the jobs' traffic never showed"
            time.sleep(0.5)
        time.sleep(12)  # the baselines learn (10 s of observations)
        quiet = {j["name"]: lab.get(f"/v1/jobs/{j['name']}/performance?window_s=4")["slowdown"] for j in POD_JOBS}
        assert all(s is not None and s < 1.2 for s in quiet.values()), quiet
        assert not [a for a in insight_audit(lab, "job.slowdown") if "pod" in a["path"]]

        hot_sender = background(lab, sink, start_at=time.time() + 0.5, duration=10)
        seen = None  # when the controller's counters first show the link hot over one interval
        deadline = time.monotonic() + 15
        while seen is None:
            assert time.monotonic() < deadline and hot_sender.poll() is None, "the link never showed hot"
            link = next(x for x in lab.get("/v1/telemetry/links?window_s=1")["links"]
                        if (x["a"], x["b"]) == ("tor-0-1", HOT_FROM))
            if (link["gbps_ba"] or 0) > 0.5 * HOT_GBPS:
                seen = time.time()
            time.sleep(0.1)
        events = slowdown_events(lab, "pod0-ring", timeout=10)
        audit = insight_audit(lab, "job.slowdown")
        metrics = lab.server("GET", "/metrics").text
    finally:
        for p in (hot_sender, jobs):
            if p is not None and p.poll() is None:
                p.terminate()
            if p is not None:
                p.communicate(timeout=60)
    assert events, "no job.slowdown for pod0-ring on the event stream"
    ev = events[0]
    assert not ev["cleared"] and hot_id in ev["links"] and hot_name in ev["evidence"], ev
    mine = [a for a in audit if a["path"] == "insight/pod0-ring"]
    assert mine and hot_name in mine[-1]["detail"], audit
    raised = datetime.fromisoformat(mine[-1]["at"]).timestamp()
    interval = 1.0  # LOOM_TELEMETRY_INTERVAL_S
    print(f"\njob.slowdown for pod0-ring {raised - seen:+.2f} s after the link first showed hot: {ev['evidence']}")
    assert raised - seen <= 2 * interval, (raised, seen, ev)
    assert not [a for a in audit if a["path"] == "insight/pod1-ring"], audit  # it does not cross the link
    assert 'loom_insight_events_total{kind="job.slowdown",state="raised"}' in metrics
