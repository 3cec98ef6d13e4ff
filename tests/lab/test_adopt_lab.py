"""Discovery and adoption of a fabric Loom did not build: a hand-written eBGP leaf-spine lab.

``tests/lab/fixtures/adopt_bgp`` is two spines (one ASN) and two leaves (an ASN each) with /30
links in 192.168.0.0/16 and router ids 10.0.0.x, none of it Loom's numbering, with hand-written
``frr.conf`` files (loopbacks and host subnets announced with ``network``). The steps run in
order, as an operator would: ``loom discover`` reads the lab through its namespaces and through
its agents (the same intent, every pin as it runs); ``loom apply --dry-run`` of that intent
reviews as a cosmetic adoption; ``loom apply`` commits it while a sampler reads every router's
kernel routes every 50 ms and host h1 pings h2 across the fabric every 20 ms: no sample and no
router differs in next hops or their split, no ping is lost, and no BGP session resets; then a
re-weighting (uneven capacities and a demand), a drain and a failure reaction (a link taken down
in a namespace) work as on a Loom-built lab. The lab and the controller are torn down in the
module's finalizer.
"""

from __future__ import annotations

import json
import math
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
FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_bgp"
LAB = "adopt-bgp"
NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("h1", "h2")  # h1 behind leaf1 (172.16.1.10), h2 behind leaf2 (172.16.2.10)
TOKEN = "adopt-" + "Qm4Zr8Tx2Lk6Wp0Vb3Ns7Hd1Fy5Jc9Ga"

Routes = dict[str, tuple[str, tuple[tuple[str, str, float], ...]]]


class AdoptLab(ServedLab):
    """The hand-written lab (not generated from an intent) with ``loom serve --lab`` on it."""

    def __init__(self, base: Path):
        super().__init__(base, LAB, {"name": LAB, "devices": [{"name": n} for n in NODES + HOSTS]}, TOKEN)
        self.server = LoomServer(base, ["--db", str(base / "loom.db"), "--lab", str(FIXTURE)], TOKEN, cwd=REPO,
                                 env={"LOOM_DRIFT_INTERVAL": "0"})

    def up(self, timeout: float = 90) -> None:
        runner.down(LAB, NODES + HOSTS)  # a lab left by an earlier run that was killed
        report = runner.up(load_topology(FIXTURE), timeout=timeout)
        assert report.converged, report.problems
        self.server.start()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    served = AdoptLab(tmp_path_factory.mktemp("adopt"))
    try:
        served.up()
        yield served
    finally:
        served.down()


def routes(node: str) -> Routes:
    """Every route of ``node``'s main table: protocol and next hops (gateway, port, share of the weight)."""
    out: Routes = {}
    for r in json.loads(runner.node_exec(LAB, node, ["ip", "-j", "route", "show", "table", "main"])):
        hops = r.get("nexthops") or [r]
        total = sum(int(h.get("weight", 1)) for h in hops)
        out[r["dst"]] = (r.get("protocol", ""), tuple(sorted(
            (h.get("gateway", ""), h.get("dev", ""), round(int(h.get("weight", 1)) / total, 6)) for h in hops)))
    return out


def raw_weights(node: str) -> dict[str, list[int]]:
    return {r["dst"]: sorted(int(h.get("weight", 1)) for h in r["nexthops"])
            for r in json.loads(runner.node_exec(LAB, node, ["ip", "-j", "route"])) if r.get("nexthops")}


def sessions(node: str) -> dict[str, tuple[str, int, int]]:
    """peer -> (state, sessions established, sessions dropped) since bgpd started."""
    text = runner.node_exec(LAB, node, ["vtysh", "--vty_socket", str(runner.run_dir(LAB) / node),
                                        "-c", "show bgp ipv4 unicast summary json"])
    peers = json.loads(text)["peers"]
    return {p: (v["state"], v["connectionsEstablished"], v["connectionsDropped"]) for p, v in peers.items()}


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
    found = _discover(lab, str(FIXTURE), "--out", str(out))
    intent = validate_intent(yaml.safe_load(out.read_text()))
    assert validate_intent(found["intent"]) == intent
    ends = {}
    for lk in intent.links:
        ends[lk.end_a], ends[lk.end_b] = str(lk.a_address), str(lk.b_address)
    for node in NODES:  # every pinned address is what the kernel has on that port
        for itf in json.loads(runner.node_exec(LAB, node, ["ip", "-j", "addr"])):
            for a in itf.get("addr_info", ()):
                key = f"{node}:{itf['ifname']}"
                if a["family"] == "inet" and key in ends:
                    assert ends[key] == f"{a['local']}/{a['prefixlen']}"
    assert len(ends) == 8
    assert {d.name: str(d.router_id) for d in intent.devices} == {
        "leaf1": "10.0.0.11", "leaf2": "10.0.0.12", "spine1": "10.0.0.1", "spine2": "10.0.0.2"}
    via_agents = _discover(lab, "--agents", str(runner.agents_file(LAB)), "--name", LAB)
    assert via_agents == found


def test_adoption_changes_no_forwarding_and_resets_no_session(lab: AdoptLab):
    path = lab.base / "intent.yaml"
    before = {n: routes(n) for n in NODES}
    weights_before = {n: raw_weights(n) for n in NODES}
    established = {n: sessions(n) for n in NODES}
    assert all(s[0] == "Established" for n in NODES for s in established[n].values())
    dry = json.loads(lab.cli("apply", str(path), "--dry-run", "--json", check=True).stdout)
    review = dry.get("review", dry)
    assert review["adoption"] == {"devices": list(NODES), "cosmetic": True, "warnings": []}, review.get("adoption")
    assert set(review["config_diff"]) == set(NODES)  # there are differences, all cosmetic
    # an intent that would not originate h2's subnet: the review says so, before anything is pushed
    dropped = yaml.safe_load(path.read_text())
    dropped["prefixes"] = [p for p in dropped["prefixes"] if p["prefix"] != "172.16.2.0/24"]
    (lab.base / "dropped.yaml").write_text(yaml.safe_dump(dropped, sort_keys=False))
    shown = lab.cli("apply", str(lab.base / "dropped.yaml"), "--dry-run")
    assert "WARNING adoption of leaf1, leaf2, spine1, spine2" in shown.stdout, shown.stdout + shown.stderr
    warned = json.loads(lab.cli("apply", str(lab.base / "dropped.yaml"), "--dry-run", "--json").stdout)
    warnings = {(w["device"], w["action"], w["line"]) for w in warned.get("review", warned)["adoption"]["warnings"]}
    assert ("leaf2", "removes", "network 172.16.2.0/24") in warnings, warnings
    assert {("spine1", "removes", "next hop eth2"), ("leaf1", "removes", "next hop eth1")} <= warnings, warnings
    assert before == {n: routes(n) for n in NODES}  # a review pushes nothing
    sampler = Sampler()
    sampler.start()
    ping = subprocess.Popen(["ip", "netns", "exec", runner.namespace(LAB, "h1"), "ping", "-q", "-n", "-i", "0.02",
                             "-c", "400", "172.16.2.10"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        change = json.loads(lab.cli("apply", str(path), "--json", check=True).stdout)
        done = lab.wait(change["id"])
        time.sleep(1.0)  # what BGP does after the commit is part of the adoption too
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
    differing = [(round(t, 2), n) for t, s in sampler.samples for n in NODES if s[n] != before[n]]
    assert len(sampler.samples) > 20 and differing == [], differing[:10]
    assert {n: sessions(n) for n in NODES} == established
    # what changed is the scale of the weights (WCMP's link bandwidth), never their split
    for n in NODES:
        for prefix, ws in raw_weights(n).items():
            old = weights_before[n][prefix]
            assert [w / math.gcd(*ws) for w in ws] == [w / math.gcd(*old) for w in old]
    print(f"adoption: {len(sampler.samples)} samples of {len(NODES)} routers' routes over "
          f"{sampler.samples[-1][0] - sampler.samples[0][0]:.1f} s, none differing; sessions unchanged; "
          f"ping h1 -> h2: {got}/{sent} received")


def _until(node: str, prefix: str, want: Any, timeout: float = 20) -> Any:
    """``node``'s route to ``prefix`` once ``want(route)`` holds, or the last one read at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = routes(node).get(prefix)
        if (got is not None and want(got)) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_reweighting_after_adoption(lab: AdoptLab):
    """Uneven capacities and a demand: the leaf's kernel splits 1:3, as the plan's WCMP weights say."""
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


def _eventually(check: Any, timeout: float = 30, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(interval)


def test_failure_reaction_after_adoption(lab: AdoptLab):
    """A link of the adopted fabric goes down with nobody touching Loom: the leader sees it and commits
    the plan without it, as on a Loom-built lab."""
    doc = yaml.safe_load((lab.base / "intent.yaml").read_text())
    doc["policies"] = [{"kind": "failure_reaction", "detect_s": 0.5, "hold_down_s": 3}]
    done = lab.wait(lab.apply(doc)["id"])
    assert done["state"] == "committed", done
    assert _eventually(lambda: {x["oper"] for x in lab("GET", "/v1/state/links").json()["links"]} == {"up"})

    def reactions() -> list[dict[str, Any]]:
        items = lab("GET", "/v1/changes?limit=50").json()["items"]
        return [c for c in items if c["kind"] == "reaction" and c["state"] == "committed"]

    runner.node_exec(LAB, "leaf1", ["ip", "link", "set", "eth1", "down"])
    try:
        first = _eventually(reactions, timeout=30)
        assert first and first[0]["author"] == "failover", first
        assert first[0]["overlay"] == {"links": ["leaf1:eth1"], "devices": []}, first[0]
        got = _until("leaf1", "172.16.2.0/24", lambda r: [h[1] for h in r[1]] == ["eth2"])
        assert got is not None and [h[1] for h in got[1]] == ["eth2"], got
    finally:
        runner.node_exec(LAB, "leaf1", ["ip", "link", "set", "eth1", "up"])
