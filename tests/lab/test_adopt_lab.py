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
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from controller.model.intent import validate_intent
from labs import runner
from tests.adoptkit import (
    REPO,
    AdoptLab,
    Routes,
    adopt_under_watch,
    check_drain,
    check_reweighting,
    hops,
    served,
    until,
)

FIXTURE = REPO / "tests" / "lab" / "fixtures" / "adopt_bgp"
LAB = "adopt-bgp"
NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("h1", "h2")  # h1 behind leaf1 (172.16.1.10), h2 behind leaf2 (172.16.2.10)
TOKEN = "adopt-" + "Qm4Zr8Tx2Lk6Wp0Vb3Ns7Hd1Fy5Jc9Ga"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    yield from served(tmp_path_factory, LAB, FIXTURE, NODES, HOSTS, TOKEN)


def routes(node: str) -> Routes:
    """Every route of ``node``'s main table: protocol and next hops (gateway, port, share of the weight)."""
    return {r["dst"]: (r.get("protocol", ""), hops(r))
            for r in runner.node_routes(LAB, node)}


def all_routes() -> dict[str, Routes]:
    return {n: routes(n) for n in NODES}


def raw_weights(node: str) -> dict[str, list[int]]:
    return {r["dst"]: sorted(int(h.get("weight", 1)) for h in r["nexthops"])
            for r in runner.node_routes(LAB, node) if r.get("nexthops")}


def sessions(lab: AdoptLab, node: str) -> dict[str, tuple[str, int, int]]:
    """peer -> (state, sessions established, sessions dropped) since bgpd started."""
    peers = lab.vtysh(node, "show bgp ipv4 unicast summary json")["peers"]
    return {p: (v["state"], v["connectionsEstablished"], v["connectionsDropped"]) for p, v in peers.items()}


def test_discovery_through_namespaces_and_agents(lab: AdoptLab):
    out = lab.base / "intent.yaml"
    found = lab.discover(str(FIXTURE), "--out", str(out))
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
    via_agents = lab.discover("--agents", str(runner.agents_file(LAB)), "--name", LAB)
    assert via_agents == found


def test_adoption_changes_no_forwarding_and_resets_no_session(lab: AdoptLab):
    path = lab.base / "intent.yaml"
    before = {n: routes(n) for n in NODES}
    weights_before = {n: raw_weights(n) for n in NODES}
    established = {n: sessions(lab, n) for n in NODES}
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
    seen = adopt_under_watch(lab, path, all_routes, "h1", "172.16.2.10")
    assert seen.done["state"] == "committed", seen.done
    assert seen.sent == 400 and seen.received == seen.sent, seen.summary()
    after = {n: routes(n) for n in NODES}
    assert after == before
    differing = seen.differing(before)
    assert len(seen.samples) > 20 and differing == [], differing[:10]
    assert {n: sessions(lab, n) for n in NODES} == established
    # what changed is the scale of the weights (WCMP's link bandwidth), never their split
    for n in NODES:
        for prefix, ws in raw_weights(n).items():
            old = weights_before[n][prefix]
            assert [w / math.gcd(*ws) for w in ws] == [w / math.gcd(*old) for w in old]
    print(f"adoption: {seen.summary()}; none differing, sessions unchanged")


def test_reweighting_after_adoption(lab: AdoptLab):
    """Uneven capacities and a demand: the leaf's kernel splits 1:3, as the plan's WCMP weights say."""
    check_reweighting(lab, lambda: routes("leaf1"), fast="eth2", slow="eth1", spine="spine1", src="leaf1",
                      prefix="172.16.2.0/24")


def test_drain_after_adoption(lab: AdoptLab):
    check_drain(lab, lambda: routes("leaf1"), spine="spine1", prefix="172.16.2.0/24", port_left="eth2")  # spine2


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
        got = until(lambda: routes("leaf1"), "172.16.2.0/24", lambda r: [h[1] for h in r[1]] == ["eth2"])
        assert got is not None and [h[1] for h in got[1]] == ["eth2"], got
    finally:
        runner.node_exec(LAB, "leaf1", ["ip", "link", "set", "eth1", "up"])
