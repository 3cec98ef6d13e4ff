"""Lab hosts and traffic on real namespaces and FRR: hosts reach each other and send a matrix at its rates.

One lab for the whole module (clos3-hosts' intent, two hosts per ToR, under
another name so that it cannot disturb a lab someone brought up by hand) is
brought up with the real ``loom lab up``; the tests list its hosts, ping
across the fabric, send a skewed matrix with ``loom lab traffic`` and measure
every demand independently of the sender, by the ToRs' host-port counters
(what the sending ToR received from its hosts, what the receiving ToR passed
on to its hosts). Bad matrices exit 2 with a located error. The lab is taken
down at the end, and no namespace of it is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.model.intent import load_intent
from labs import runner
from labs.clab import Topology, load_topology
from labs.gen import generate_lab

REPO = Path(__file__).resolve().parents[2]
LOOM = [sys.executable, "-c", "from controller.cli import main; main()"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
LAB = "hosts-t"


def loom(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=timeout, env=ENV)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Topology, dict[str, Any]]]:
    intent = load_intent(REPO / "labs" / "clos3-hosts" / "intent.yaml")
    path = generate_lab(intent, tmp_path_factory.mktemp("labs") / LAB, hosts=2)
    topo = load_topology(path)
    try:
        up = loom("lab", "up", str(topo.directory), "--json")
        assert up.returncode == 0, up.stdout + up.stderr
        yield topo, json.loads(up.stdout)
    finally:
        down = loom("lab", "down", str(topo.directory), "--json")
        left = {runner.namespace(LAB, n.name) for n in topo.nodes} & runner.existing_namespaces()
        if down.returncode != 0 or left:
            runner.down(LAB, [n.name for n in topo.nodes])
        assert down.returncode == 0 and not left, (down.stdout + down.stderr, left)


def counters(node: str, port: str = "host0") -> dict[str, int]:
    out = runner.node_exec(LAB, node, ["sh", "-c", f"cd /sys/class/net/{port}/statistics && "
                                                   "echo $(cat rx_bytes rx_packets tx_bytes tx_packets)"])
    return dict(zip(("rx_bytes", "rx_packets", "tx_bytes", "tx_packets"), map(int, out.split()), strict=True))


def test_the_lab_with_hosts_comes_up_converged(lab: tuple[Topology, dict[str, Any]]) -> None:
    topo, up = lab
    assert up["converged"] and up["problems"] == []
    assert up["nodes"] == 12 and up["hosts"] == 8 and up["agents"] == 12  # no FRR, no agent on a host
    assert up["sessions_established"] == up["sessions"] == 32


def test_hosts_json_lists_every_host_with_the_contract_keys(lab: tuple[Topology, dict[str, Any]]) -> None:
    topo, _up = lab
    result = loom("lab", "hosts", str(topo.directory), "--json")
    assert result.returncode == 0, result.stderr
    hosts = json.loads(result.stdout)
    assert set(hosts) == {f"tor-{p}-{t}-h{i}" for p in (0, 1) for t in (0, 1) for i in (0, 1)}
    for name, h in hosts.items():
        assert set(h) == {"netns", "tor", "address", "prefix"}
        assert h["netns"] in runner.existing_namespaces()
        assert name.startswith(h["tor"] + "-h")
        p, t = h["tor"].split("-")[1:]
        assert h["prefix"] == f"10.{p}.{t}.0/24" and h["address"] == f"10.{p}.{t}.{10 + int(name[-1])}"


def test_a_host_pings_a_host_behind_another_tor(lab: tuple[Topology, dict[str, Any]]) -> None:
    out = runner.node_exec(LAB, "tor-0-0-h0", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.1.11"], check=False)
    assert " 0% packet loss" in out, out
    assert runner.node_routes(LAB, "tor-0-0-h0", dst="default")[0]["gateway"] == "10.0.0.1"


MATRIX = [  # skewed: one demand per sending ToR and per destination prefix, so the ToRs' counters tell them apart
    {"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 0.04},
    {"from": "tor-0-1", "to": "10.1.1.0/24", "gbps": 0.015},
    {"from": "tor-1-1", "to": "10.0.0.0/24", "gbps": 0.005},
]
DESTINATION = {"10.1.0.0/24": "tor-1-0", "10.1.1.0/24": "tor-1-1", "10.0.0.0/24": "tor-0-0"}


def test_traffic_sends_each_demand_at_its_rate(lab: tuple[Topology, dict[str, Any]], tmp_path: Path) -> None:
    topo, _up = lab
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(MATRIX))
    tors = sorted({d["from"] for d in MATRIX} | set(DESTINATION.values()))
    before = {t: counters(t) for t in tors}
    uplinks_before = {p: counters("tor-0-0", p)["tx_bytes"] for p in ("eth1", "eth2")}
    duration = 3.0
    t0 = time.monotonic()
    result = loom("lab", "traffic", str(topo.directory), "--matrix", str(matrix), "--duration", str(duration),
                  "--json")
    took = time.monotonic() - t0
    assert result.returncode == 0, result.stdout + result.stderr
    time.sleep(0.2)  # the last packets drain through the fabric
    after = {t: counters(t) for t in tors}
    doc = json.loads(result.stdout)
    assert doc["failed"] == {} and took < duration + 8
    for want, sent in zip(MATRIX, doc["demands"], strict=True):
        expect = want["gbps"] * 1e9 / 8 * duration
        assert (sent["from"], sent["to"], sent["gbps"]) == (want["from"], want["to"], want["gbps"])
        assert abs(sent["achieved_gbps"] / want["gbps"] - 1) < 0.02, sent
        assert len(sent["sources"]) == 2  # both hosts of the ToR send
        # measured by the switches, not the sender: the sending ToR's host port received it from its hosts,
        # the destination ToR's host port passed it on to the hosts of the prefix
        src, dst = want["from"], DESTINATION[want["to"]]
        received = after[src]["rx_bytes"] - before[src]["rx_bytes"]
        delivered = after[dst]["tx_bytes"] - before[dst]["tx_bytes"]
        assert abs(received / expect - 1) < 0.05, (want, received, expect)
        assert abs(delivered / expect - 1) < 0.05, (want, delivered, expect)
    # many flows: ECMP at tor-0-0 spreads its demand over both uplinks
    spread = [counters("tor-0-0", p)["tx_bytes"] - uplinks_before[p] for p in ("eth1", "eth2")]
    assert min(spread) > 0.25 * sum(spread), spread


@pytest.mark.parametrize("content, loc, words", [
    ([{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": -1}], "demands[0].gbps", "greater than or equal"),
    ([{"from": "tor-9-9", "to": "10.1.0.0/24", "gbps": 0.01}], "demands[0].from", "not a ToR with hosts"),
    ([{"from": "tor-0-0", "to": "10.9.0.0/24", "gbps": 0.01}], "demands[0].to", "no host lives in"),
    ({"from": "tor-0-0"}, "", "non-empty list of demands"),
])
def test_a_bad_matrix_exits_2_with_a_located_error(lab: tuple[Topology, dict[str, Any]], tmp_path: Path,
                                                   content: Any, loc: str, words: str) -> None:
    topo, _up = lab
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps(content))
    result = loom("lab", "traffic", str(topo.directory), "--matrix", str(matrix), "--duration", "1", "--json")
    assert result.returncode == 2, result.stdout + result.stderr
    errors = json.loads(result.stdout)["errors"]
    assert any(e["loc"] == loc and words in e["msg"] for e in errors), errors
