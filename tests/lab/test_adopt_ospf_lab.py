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
import time
from collections.abc import Iterator

import pytest
import yaml

from controller.model.intent import validate_intent
from labs import runner
from tests.adoptkit import (
    REPO,
    AdoptLab,
    Routes,
    adopt_under_watch,
    best_routes,
    check_drain,
    check_reweighting,
    hops,
    served,
)

TOPOLOGY = REPO / "tests" / "lab" / "fixtures" / "adopt_ospf" / "adopt-ospf.clab.yml"
LAB = "adopt-ospf"
NODES = ("leaf1", "leaf2", "spine1", "spine2")
HOSTS = ("srv1", "srv2")  # srv1 behind leaf1 (172.16.1.10), srv2 behind leaf2 (172.16.2.10)
TOKEN = "adopt-ospf-" + "Vq7Lm2Xc9Rt4Hb6Nz1Kd3Wf8Gs5Jp0Ye"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdoptLab]:
    yield from served(tmp_path_factory, LAB, TOPOLOGY, NODES, HOSTS, TOKEN)


def routes(node: str) -> Routes:
    """What ``node`` forwards on (:func:`tests.adoptkit.best_routes`: Loom's ``fib`` routes sit above OSPF's)."""
    return best_routes(LAB, node)


def all_routes() -> dict[str, Routes]:
    return {n: routes(n) for n in NODES}


def ospf_routes(node: str) -> Routes:
    """The routes OSPF installed in ``node``'s kernel (under any of Loom's), with their next hops."""
    return {r["dst"]: ("ospf", hops(r)) for r in runner.node_routes(LAB, node, protocol="ospf")}


def ospf_rib(lab: AdoptLab, node: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """What OSPF computed (zebra's RIB): prefix -> next hops (gateway, port). Loom's ``fib`` routes take the
    kernel over from OSPF's for the plan's prefixes (zebra then uninstalls its own), so the computation is
    compared here."""
    rib = lab.vtysh(node, "show ip route ospf json")
    return {p: tuple(sorted((h.get("ip", ""), h.get("interfaceName", "")) for r in rs for h in r.get("nexthops", ())
                            if r.get("protocol") == "ospf")) for p, rs in rib.items()}


def adjacencies(lab: AdoptLab, node: str) -> dict[tuple[str, str], tuple[str, int, int]]:
    """(neighbour router id, port) -> (state, state changes, ms since it came up)."""
    detail = lab.vtysh(node, "show ip ospf neighbor detail json")["neighbors"]
    brief = lab.vtysh(node, "show ip ospf neighbor json")["neighbors"]
    up = {(rid, n["ifaceName"].split(":")[0]): int(n["upTimeInMsec"]) for rid, ns in brief.items() for n in ns}
    return {(rid, n["ifaceName"]): (n["nbrState"], int(n["stateChangeCounter"]), up[rid, n["ifaceName"]])
            for rid, ns in detail.items() for n in ns}


def test_discovery_through_namespaces_and_agents(lab: AdoptLab):
    out = lab.base / "intent.yaml"
    found = lab.discover(str(TOPOLOGY), "--out", str(out))
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
    via_agents = lab.discover("--agents", str(runner.agents_file(LAB)), "--name", LAB)
    assert via_agents == found


def test_adoption_changes_no_forwarding_and_resets_no_adjacency(lab: AdoptLab):
    path = lab.base / "intent.yaml"
    before = {n: routes(n) for n in NODES}
    rib_before = {n: ospf_rib(lab, n) for n in NODES}
    assert set(ospf_routes("leaf1")) == {
        "10.0.0.1", "10.0.0.2", "10.0.0.12", "172.16.2.0/24", "192.168.12.0/30", "192.168.22.0/30"}
    assert len(before["leaf1"]["172.16.2.0/24"][1]) == 2  # ECMP through both spines
    adj = {n: adjacencies(lab, n) for n in NODES}
    assert sum(len(a) for a in adj.values()) == 8 and {s[0] for a in adj.values() for s in a.values()} == {"Full/-"}
    dry = json.loads(lab.cli("apply", str(path), "--dry-run", "--json", check=True).stdout)
    review = dry.get("review", dry)
    assert review["adoption"] == {"devices": list(NODES), "cosmetic": True, "warnings": []}, review.get("adoption")
    assert set(review["config_diff"]) == set(NODES)  # there are differences (throttling, descriptions), cosmetic
    assert "timers throttle spf" in review["config_diff"]["leaf1"]
    assert before == {n: routes(n) for n in NODES}  # a review pushes nothing
    started = time.monotonic()
    seen = adopt_under_watch(lab, path, all_routes, "srv1", "172.16.2.10")
    assert seen.done["state"] == "committed", seen.done
    assert seen.sent == 400 and seen.received == seen.sent, seen.summary()
    after = {n: routes(n) for n in NODES}
    assert after == before
    assert {n: ospf_rib(lab, n) for n in NODES} == rib_before  # and OSPF computes what it did
    differing = seen.differing(before)
    assert len(seen.samples) > 20 and differing == [], differing[:10]
    elapsed_ms = (time.monotonic() - started) * 1000
    now = {n: adjacencies(lab, n) for n in NODES}
    for n in NODES:  # same neighbours, still Full, no state change, and up all along
        assert {k: v[:2] for k, v in now[n].items()} == {k: v[:2] for k, v in adj[n].items()}, n
        assert all(now[n][k][2] >= adj[n][k][2] + elapsed_ms - 1000 for k in adj[n]), (n, adj[n], now[n])
    running = lab.vtysh_text("leaf1", "show running-config")
    assert "timers throttle spf 0 50 1000" in running  # Loom's rendering runs now
    print(f"OSPF adoption: {seen.summary()}; none differing; "
          f"{sum(len(a) for a in now.values())} adjacency ends Full with no state change")


def test_reweighting_after_adoption(lab: AdoptLab):
    """Uneven capacities and a demand: the leaf's kernel splits 1:3 (Loom's ``fib`` routes over OSPF's), as the
    plan's WCMP weights say."""
    check_reweighting(lab, lambda: routes("leaf1"), fast="eth2", slow="eth1", spine="spine1", src="leaf1",
                      prefix="172.16.2.0/24")


def test_drain_after_adoption(lab: AdoptLab):
    check_drain(lab, lambda: routes("leaf1"), spine="spine1", prefix="172.16.2.0/24", port_left="eth2")  # spine2
    assert lab.ping("srv1", "172.16.2.10")
