"""Discovery and adoption of an OSPF fabric Loom did not build: a hand-written leaf-spine lab.

``tests/lab/fixtures/adopt_ospf`` is two spines and two leaves in containerlab's own style (groups,
directory binds, servers set up by ``exec``, both link syntaxes), /30 links in 192.168.0.0/16 and
router ids 10.0.0.x, one backbone area set per interface, point-to-point adjacencies with 1 s
hellos, the loopbacks and the servers' subnets in OSPF, and SPF and LSA throttling of the
operator's own (which Loom's rendering changes: a cosmetic difference). The steps run in order,
as an operator would: ``loom discover`` reads the lab through its namespaces and through its agents
(the same intent, every pin as it runs, no question about OSPF); ``loom apply --dry-run`` of that
intent reviews as a cosmetic adoption; ``loom apply`` commits it while a sampler reads every
router's kernel routes every 50 ms and srv1 pings srv2 across the fabric every 20 ms: no sample and
no router differs in next hops or their split, no ping is lost, and no OSPF adjacency changes state
(FRR's per-neighbour state change counter) or restarts its uptime; then a re-weighting (uneven
capacities and a demand) splits the leaf's traffic 1:3 and a drain moves it off a spine.
The lab and the controller are torn down in the module's finalizer.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.model.intent import validate_intent
from labs import runner
from labs.clab import load_topology
from tests.labkit import ServedLab
from tests.serving import LoomServer

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = REPO / "tests" / "lab" / "fixtures" / "adopt_ospf" / "adopt-ospf.clab.yml"
LAB = "adopt-ospf"
NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("srv1", "srv2")  # srv1 behind leaf1 (172.16.1.10), srv2 behind leaf2 (172.16.2.10)
TOKEN = "adopt-ospf-" + "Vq7Lm2Xc9Rt4Hb6Nz1Kd3Wf8Gs5Jp0Ye"

Routes = dict[str, tuple[str, tuple[tuple[str, str, float], ...]]]


class AdoptLab(ServedLab):
    """The hand-written lab (not generated from an intent) with ``loom serve --lab`` on it."""

    def __init__(self, base: Path):
        super().__init__(base, LAB, {"name": LAB, "devices": [{"name": n} for n in NODES + HOSTS]}, TOKEN)
        self.server = LoomServer(base, ["--db", str(base / "loom.db"), "--lab", str(TOPOLOGY)], TOKEN, cwd=REPO,
                                 env={"LOOM_DRIFT_INTERVAL": "0"})

    def up(self, timeout: float = 90) -> None:
        runner.down(LAB, NODES + HOSTS)  # a lab left by an earlier run that was killed
        report = runner.up(load_topology(TOPOLOGY), timeout=timeout)
        assert report.converged, report.problems
        self.server.start()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    served = AdoptLab(tmp_path_factory.mktemp("adopt-ospf"))
    try:
        served.up()
        yield served
    finally:
        served.down()


def routes(node: str) -> Routes:
    """What ``node`` forwards on, per destination of its main table: the route the kernel uses (the lowest
    metric: Loom's ``fib`` routes sit above OSPF's) as its next hops (gateway, port, share of the weight)."""
    best: dict[str, tuple[int, Any]] = {}
    for r in json.loads(runner.node_exec(LAB, node, ["ip", "-j", "route", "show", "table", "main"])):
        metric = int(r.get("metric", 0))
        if r["dst"] not in best or metric < best[r["dst"]][0]:
            best[r["dst"]] = (metric, r)
    return {dst: ("", _hops(r)) for dst, (_m, r) in best.items()}


def ospf_routes(node: str) -> Routes:
    """The routes OSPF installed in ``node``'s kernel (under any of Loom's), with their next hops."""
    return {r["dst"]: ("ospf", _hops(r)) for r in json.loads(runner.node_exec(
        LAB, node, ["ip", "-j", "route", "show", "table", "main", "proto", "ospf"]))}


def ospf_rib(node: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """What OSPF computed (zebra's RIB): prefix -> next hops (gateway, port). Loom's ``fib`` routes take the
    kernel over from OSPF's for the plan's prefixes (zebra then uninstalls its own), so the computation is
    compared here."""
    rib = vtysh(node, "show ip route ospf json")
    return {p: tuple(sorted((h.get("ip", ""), h.get("interfaceName", "")) for r in rs for h in r.get("nexthops", ())
                            if r.get("protocol") == "ospf")) for p, rs in rib.items()}


def _hops(r: dict[str, Any]) -> tuple[tuple[str, str, float], ...]:
    hops = r.get("nexthops") or [r]
    total = sum(int(h.get("weight", 1)) for h in hops)
    return tuple(sorted((h.get("gateway", ""), h.get("dev", ""), round(int(h.get("weight", 1)) / total, 6))
                        for h in hops))


def vtysh(node: str, command: str) -> Any:
    return json.loads(runner.node_exec(LAB, node, ["vtysh", "--vty_socket", str(runner.run_dir(LAB) / node),
                                                   "-c", command]))


def adjacencies(node: str) -> dict[tuple[str, str], tuple[str, int, int]]:
    """(neighbour router id, port) -> (state, state changes, ms since it came up)."""
    detail = vtysh(node, "show ip ospf neighbor detail json")["neighbors"]
    brief = vtysh(node, "show ip ospf neighbor json")["neighbors"]
    up = {(rid, n["ifaceName"].split(":")[0]): int(n["upTimeInMsec"]) for rid, ns in brief.items() for n in ns}
    return {(rid, n["ifaceName"]): (n["nbrState"], int(n["stateChangeCounter"]), up[rid, n["ifaceName"]])
            for rid, ns in detail.items() for n in ns}


class Sampler(threading.Thread):
    """Every router's routes every ``every`` seconds until stopped."""

    def __init__(self, every: float = 0.05):
        super().__init__(daemon=True)
        self.every, self.samples = every, []  # type: list[tuple[float, dict[str, Routes]]]
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.monotonic(), {n: routes(n) for n in NODES}))
            time.sleep(self.every)


def _discover(lab: AdoptLab, *args: str) -> dict[str, Any]:
    out = lab.cli("discover", *args, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    return dict(json.loads(out.stdout))


def test_discovery_through_namespaces_and_agents(lab: AdoptLab):
    out = lab.base / "intent.yaml"
    found = _discover(lab, str(TOPOLOGY), "--out", str(out))
    intent = validate_intent(yaml.safe_load(out.read_text()))
    assert validate_intent(found["intent"]) == intent
    assert intent.routing.value == "ospf"
    ends = {}
    for lk in intent.links:
        ends[lk.end_a], ends[lk.end_b] = str(lk.a_address), str(lk.b_address)
        assert lk.metric == 10
    for node in NODES:  # every pinned address is what the kernel has on that port
        for itf in json.loads(runner.node_exec(LAB, node, ["ip", "-j", "addr"])):
            for a in itf.get("addr_info", ()):
                key = f"{node}:{itf['ifname']}"
                if a["family"] == "inet" and key in ends:
                    assert ends[key] == f"{a['local']}/{a['prefixlen']}"
    assert len(ends) == 8
    assert {d.name: (d.role, str(d.router_id)) for d in intent.devices} == {
        "leaf1": ("leaf", "10.0.0.11"), "leaf2": ("leaf", "10.0.0.12"),
        "spine1": ("spine", "10.0.0.1"), "spine2": ("spine", "10.0.0.2")}
    assert {(p.prefix, tuple(p.origins)) for p in intent.prefixes} == {
        ("10.0.0.1/32", ("spine1",)), ("10.0.0.2/32", ("spine2",)), ("10.0.0.11/32", ("leaf1",)),
        ("10.0.0.12/32", ("leaf2",)), ("172.16.1.0/24", ("leaf1",)), ("172.16.2.0/24", ("leaf2",))}
    # the fabric runs what Loom renders of OSPF: the only question is the veths' capacities
    assert [q["where"] for q in found["questions"]] == ["links"], found["questions"]
    via_agents = _discover(lab, "--agents", str(runner.agents_file(LAB)), "--name", LAB)
    assert via_agents == found


def test_adoption_changes_no_forwarding_and_resets_no_adjacency(lab: AdoptLab):
    path = lab.base / "intent.yaml"
    before = {n: routes(n) for n in NODES}
    rib_before = {n: ospf_rib(n) for n in NODES}
    assert set(ospf_routes("leaf1")) == {
        "10.0.0.1", "10.0.0.2", "10.0.0.12", "172.16.2.0/24", "192.168.12.0/30", "192.168.22.0/30"}
    assert len(before["leaf1"]["172.16.2.0/24"][1]) == 2  # ECMP through both spines
    adj = {n: adjacencies(n) for n in NODES}
    assert sum(len(a) for a in adj.values()) == 8 and {s[0] for a in adj.values() for s in a.values()} == {"Full/-"}
    dry = json.loads(lab.cli("apply", str(path), "--dry-run", "--json", check=True).stdout)
    review = dry.get("review", dry)
    assert review["adoption"] == {"devices": list(NODES), "cosmetic": True, "warnings": []}, review.get("adoption")
    assert set(review["config_diff"]) == set(NODES)  # there are differences (throttling, descriptions), cosmetic
    assert "timers throttle spf" in review["config_diff"]["leaf1"]
    assert before == {n: routes(n) for n in NODES}  # a review pushes nothing
    sampler = Sampler()
    sampler.start()
    started = time.monotonic()
    ping = subprocess.Popen(["ip", "netns", "exec", runner.namespace(LAB, "srv1"), "ping", "-q", "-n", "-i", "0.02",
                             "-c", "400", "172.16.2.10"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        change = json.loads(lab.cli("apply", str(path), "--json", check=True).stdout)
        done = lab.wait(change["id"])
        time.sleep(1.0)  # what OSPF does after the commit (an SPF run, LSA refreshes) is part of the adoption too
        pinged, _ = ping.communicate(timeout=30)
    finally:
        ping.kill()
        sampler.halt.set()
        sampler.join(10)
    assert done["state"] == "committed", done
    sent, got = (int(x) for x in re.search(r"(\d+) packets transmitted, (\d+) received", pinged).groups())
    assert sent == 400 and got == sent, pinged
    after = {n: routes(n) for n in NODES}
    assert after == before
    assert {n: ospf_rib(n) for n in NODES} == rib_before  # and OSPF computes what it did
    differing = [(round(t, 2), n) for t, s in sampler.samples for n in NODES if s[n] != before[n]]
    assert len(sampler.samples) > 20 and differing == [], differing[:10]
    elapsed_ms = (time.monotonic() - started) * 1000
    now = {n: adjacencies(n) for n in NODES}
    for n in NODES:  # same neighbours, still Full, no state change, and up all along
        assert {k: v[:2] for k, v in now[n].items()} == {k: v[:2] for k, v in adj[n].items()}, n
        assert all(now[n][k][2] >= adj[n][k][2] + elapsed_ms - 1000 for k in adj[n]), (n, adj[n], now[n])
    running = runner.node_exec(LAB, "leaf1", ["vtysh", "--vty_socket", str(runner.run_dir(LAB) / "leaf1"),
                                              "-c", "show running-config"])
    assert "timers throttle spf 0 50 1000" in running  # Loom's rendering runs now
    print(f"OSPF adoption: {len(sampler.samples)} samples of {len(NODES)} routers' routes over "
          f"{sampler.samples[-1][0] - sampler.samples[0][0]:.1f} s, none differing; "
          f"{sum(len(a) for a in now.values())} adjacency ends Full with no state change; "
          f"ping srv1 -> srv2: {got}/{sent} received")


def _until(node: str, prefix: str, want: Any, timeout: float = 20) -> Any:
    """``node``'s route to ``prefix`` once ``want(route)`` holds, or the last one read at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = routes(node).get(prefix)
        if (got is not None and want(got)) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_reweighting_after_adoption(lab: AdoptLab):
    """Uneven capacities and a demand: the leaf's kernel splits 1:3 (Loom's ``fib`` routes over OSPF's), as the
    plan's WCMP weights say."""
    doc = yaml.safe_load((lab.base / "intent.yaml").read_text())
    for link in doc["links"]:
        link["capacity_gbps"] = 10.0 if "spine1" in (link["a"], link["b"]) else 30.0
    doc["demands"] = [{"from": "leaf1", "to": "172.16.2.0/24", "gbps": 20}]
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    got = _until("leaf1", "172.16.2.0/24", lambda r: {h[1]: h[2] for h in r[1]}.get("eth2") == 0.75)
    assert got is not None and {h[1]: h[2] for h in got[1]} == {"eth1": 0.25, "eth2": 0.75}, got


def test_drain_after_adoption(lab: AdoptLab):
    doc = yaml.safe_load((lab.base / "intent.yaml").read_text())
    doc["policies"] = [{"kind": "drain", "target": "spine1"}]
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    got = _until("leaf1", "172.16.2.0/24", lambda r: [h[1] for h in r[1]] == ["eth2"])
    assert got is not None and [h[1] for h in got[1]] == ["eth2"], got  # only through spine2
    out = subprocess.run(["ip", "netns", "exec", runner.namespace(LAB, "srv1"), "ping", "-q", "-n", "-c", "3",
                          "-i", "0.2", "172.16.2.10"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stdout + out.stderr
