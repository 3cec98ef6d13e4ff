"""The device agents against real FRR: a WCMP plan pushed to a clos3-small lab as one transaction.

A clos3-small fabric with two thin links and a skewed demand (so the plan's
weights are far from ECMP) is brought up in network namespaces with the lab
runner, and one ``loom agent`` per node is started inside the node's
namespace on a unix socket in its run directory. The tests push plans through
the driver and the transaction, then read every kernel directly: weights
equal the plan's within FRR's link-bandwidth rounding; UDP flows split over
the uplinks as the weights say; killing an agent mid-Commit or vanishing
before Confirm leaves (or brings back) every device on the old config; the
``fib`` realization installs Loom's own weighted routes over BGP's and a
rollback removes them. Everything is torn down in finalizers.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from controller.model import Intent
from controller.model.intent import load_intent, validate_intent
from controller.model.plan import Plan
from labs import runner
from labs.clab import Topology
from solver import solve
from southbound.device.frr_apply import FRR_RELOAD, FrrReload, script_interpreter
from southbound.device.frr_delta import parse_config
from southbound.driver import AgentDriver
from southbound.state import StepResult
from southbound.transaction import commit_plan
from southbound.wcmp import expected_weights
from tests.labkit import LabAgents, lab_up

REPO = Path(__file__).resolve().parents[2]
LAB = "sbwcmp"

pytestmark = pytest.mark.anyio


def wcmp_intent_doc(name: str = LAB) -> dict:
    """clos3-small with two thin links and skewed demand: the WCMP plan is far from ECMP."""
    doc = yaml.safe_load((REPO / "labs" / "clos3-small" / "intent.yaml").read_text())
    doc["name"] = name
    for lk in doc["links"]:
        if (lk["a"], lk["b"]) in (("tor-0-0", "leaf-0-1"), ("leaf-0-0", "spine-0-1")):
            lk["capacity_gbps"] = 25.0
    doc["demands"] = [{"from": "tor-0-0", "to": "10.1.0.0/24", "gbps": 40},
                      {"from": "tor-1-0", "to": "10.0.0.0/24", "gbps": 40},
                      {"from": "tor-0-1", "to": "10.1.1.0/24", "gbps": 20}]
    return doc


def shifted_demand(doc: dict) -> dict:
    """``doc`` with its heaviest demand halved and its lightest doubled: a re-weighting (scaling every demand
    alike would leave the min-MLU plan as it is)."""
    shifted = json.loads(json.dumps(doc))
    demands = sorted(shifted["demands"], key=lambda d: float(d["gbps"]))
    demands[0]["gbps"], demands[-1]["gbps"] = float(demands[0]["gbps"]) * 2, float(demands[-1]["gbps"]) / 2
    return shifted


def with_wcmp(doc: dict, **policy: object) -> Intent:
    d = json.loads(json.dumps(doc))
    d["policies"] = [{"kind": "wcmp", **policy}]
    return validate_intent(d)


@dataclass
class WcmpLab:
    topo: Topology
    doc: dict
    agents: LabAgents


def bring_up(base: Path, name: str = LAB) -> tuple[Topology, dict]:
    doc = wcmp_intent_doc(name)
    return lab_up(base, name, doc), doc


@pytest.fixture(scope="module")
def wlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WcmpLab]:
    base = tmp_path_factory.mktemp("sbwcmp")
    nodes: list[str] = []
    agents = LabAgents(LAB, nodes)
    try:
        topo, doc = bring_up(base)
        nodes += [n.name for n in topo.nodes]
        agents.start_all()
        yield WcmpLab(topo, doc, agents)
    finally:
        agents.stop_all()
        runner.down(LAB, nodes or [d["name"] for d in wcmp_intent_doc()["devices"]])


def kernel_weights(lab: str, node: str) -> dict[str, dict[str, int]]:
    """prefix -> port -> weight of the route the kernel forwards on (lowest metric), BGP's or Loom's."""
    routes = runner.node_routes(lab, node)
    best: dict[str, tuple[int, dict[str, int]]] = {}
    for r in routes:
        if str(r.get("protocol")) not in ("bgp", "250"):
            continue
        hops = r.get("nexthops") or [{"dev": r.get("dev"), "weight": 1}]
        metric = int(r.get("metric", 0))
        if r["dst"] not in best or metric < best[r["dst"]][0]:
            best[r["dst"]] = (metric, {h["dev"]: int(h.get("weight", 1)) for h in hops})
    return {p: w for p, (_m, w) in best.items()}


def plan_mismatches(lab: str, intent: Intent, plan: Plan) -> list[str]:
    out = []
    realization, wcmp = intent.wcmp_realization.value, intent.wcmp_enabled
    tol = 1 if wcmp and realization == "link-bandwidth" else 0
    for node, dp in plan.devices.items():
        have = kernel_weights(lab, node)
        for prefix, gid in dp.routes.items():
            want = expected_weights(dp.groups[gid], realization, wcmp)
            got = have.get(prefix, {})
            if set(got) != set(want) or any(abs(got[p] - want[p]) > tol for p in want):
                out.append(f"{node} {prefix}: kernel {got} plan {want}")
    return out


async def push(wlab: WcmpLab, intent: Intent, **kw: object) -> tuple[Plan, object]:
    plan = solve(intent)
    async with AgentDriver(wlab.agents.endpoints(), timeout=20, commit_timeout=120) as drv:
        result = await commit_plan(drv, intent, plan, confirm_within=kw.pop("confirm_within", 90),
                                   verify_timeout=kw.pop("verify_timeout", 45), **kw)  # type: ignore[arg-type]
    return plan, result


async def test_wcmp_plan_lands_in_every_kernel_within_frr_rounding(wlab: WcmpLab) -> None:
    intent = with_wcmp(wlab.doc, enabled=True, realization="link-bandwidth")
    plan, r = await push(wlab, intent)
    assert r.ok, r.error  # type: ignore[attr-defined]
    weights = {w for dp in plan.devices.values() for hops in dp.groups.values() for w in (h.weight for h in hops)}
    assert len(weights) > 1, "the plan should not be plain ECMP"
    assert plan_mismatches(LAB, intent, plan) == []
    # and the split is really unequal somewhere: tor-0-0 toward 10.1.0.0/24
    tw = kernel_weights(LAB, "tor-0-0")["10.1.0.0/24"]
    assert len(set(tw.values())) > 1, tw


async def test_a_reweighting_goes_to_frr_as_the_difference_and_frr_runs_exactly_the_candidate(wlab: WcmpLab) -> None:
    """Where FRR runs what the agent applied, a change is sent as its difference through one vtysh (no
    frr-reload.py: its candidate file is not written) and checked by reading the configuration back: FRR
    then shows exactly what frr-reload.py would have left. A configuration changed behind the agent's back
    is noticed, and the next change goes through frr-reload.py, which puts it right."""
    base = with_wcmp(wlab.doc, enabled=True, realization="link-bandwidth")
    _plan, r = await push(wlab, base)
    assert r.ok, r.error  # type: ignore[attr-defined]
    nodes = [n.name for n in wlab.topo.nodes]
    agent_dir = {n: wlab.agents.dir(n) / "agent" for n in nodes}

    def reloads() -> dict[str, float]:  # frr-reload.py's candidate file in each agent's work directory
        return {n: (d / "work" / "candidate.conf").stat().st_mtime_ns for n, d in agent_dir.items()}

    def shown(node: str) -> str:
        return runner.node_exec(LAB, node, ["vtysh", "--vty_socket", str(runner.run_dir(LAB) / node),
                                            "-c", "show running-config"])

    intent = with_wcmp(shifted_demand(wlab.doc), enabled=True, realization="link-bandwidth")
    before = reloads()
    plan, r = await push(wlab, intent)
    assert r.ok, r.error  # type: ignore[attr-defined]
    assert len(r.changed_devices()) >= 2, r.changed_devices()  # type: ignore[attr-defined]
    assert plan_mismatches(LAB, intent, plan) == []
    assert reloads() == before, "frr-reload.py ran although FRR ran what the agents had applied"
    # what FRR runs is exactly what frr-reload.py makes of the same candidate, on every device: reloading it
    # changes nothing FRR shows
    for n in nodes:
        fast = parse_config(shown(n))
        conf = agent_dir[n] / "reload-check.conf"
        conf.write_text(json.loads((agent_dir[n] / "running.json").read_text())["frr_text"])
        runner.node_exec(LAB, n, [script_interpreter(FRR_RELOAD), FRR_RELOAD, "--reload", "--stdout", "--bindir",
                                  "/usr/bin", "--vty_socket", str(runner.run_dir(LAB) / n), "--confdir",
                                  str(agent_dir[n]), "--rundir", str(agent_dir[n]), str(conf)], timeout=120)
        assert parse_config(shown(n)) == fast, n
        # the agent reads each daemon over its vty socket: the same tree, but for vtysh's own lines
        direct = FrrReload(runner.run_dir(LAB) / n, agent_dir[n] / "work").running_tree()
        assert {k: v for k, v in direct.items() if k} == {k: v for k, v in fast.items() if k}, n
        vtysh_own = {ln for ln in fast[()] if ln not in direct[()]}
        assert set(direct[()]) <= set(fast[()]), n
        assert all(ln == "service integrated-vtysh-config" or ln.startswith("hostname ") for ln in vtysh_own), n
    # an edit behind the agents' back: the next change notices it and reloads, and the edit is gone
    node = "leaf-0-0"
    runner.node_exec(LAB, node, ["vtysh", "--vty_socket", str(runner.run_dir(LAB) / node), "-c", "configure terminal",
                                 "-c", "ip prefix-list LOOM-BEHIND seq 5 permit 10.99.0.0/24"])
    before = reloads()
    plan, r = await push(wlab, base)
    assert r.ok, r.error  # type: ignore[attr-defined]
    after = reloads()
    assert after[node] > before[node] and "LOOM-BEHIND" not in shown(node)
    assert [n for n in nodes if after[n] != before[n]] == [node]  # the others sent the difference


async def test_udp_flows_split_over_the_uplinks_as_weighted(wlab: WcmpLab) -> None:
    intent = with_wcmp(wlab.doc, enabled=True, realization="link-bandwidth")
    _plan, r = await push(wlab, intent)
    assert r.ok, r.error  # type: ignore[attr-defined]
    weights = kernel_weights(LAB, "tor-0-0")["10.1.0.0/24"]
    sender = ("import socket, sys\nfor p in range(int(sys.argv[1]), int(sys.argv[1]) + int(sys.argv[2])):\n"
              "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('10.0.0.1', p))\n"
              "    s.sendto(b'loom-wcmp' * 8, ('10.1.0.77', 5001)); s.close()\n")
    send = ["ip", "netns", "exec", runner.namespace(LAB, "tor-0-0"), sys.executable, "-c", sender]
    subprocess.run([*send, "10000", "50"], check=True, timeout=60)  # ARP warm-up

    def tx() -> dict[str, int]:
        links = json.loads(runner.node_exec(LAB, "tor-0-0", ["ip", "-s", "-j", "link"]))
        return {li["ifname"]: li["stats64"]["tx"]["packets"] for li in links}

    flows = 4000
    before = tx()
    subprocess.run([*send, "20000", str(flows)], check=True, timeout=120)
    after = tx()
    sent = {p: after[p] - before[p] for p in weights}
    total = sum(sent.values())
    assert total >= 0.98 * flows, sent
    wsum = sum(weights.values())
    for port, w in weights.items():
        assert abs(sent[port] / total - w / wsum) < 0.04, f"{port}: {sent} vs weights {weights}"


async def test_agent_killed_during_commit_leaves_the_old_config_everywhere(wlab: WcmpLab) -> None:
    wcmp = with_wcmp(wlab.doc, enabled=True, realization="link-bandwidth")
    plan, r = await push(wlab, wcmp)
    assert r.ok, r.error  # type: ignore[attr-defined]
    victim = "leaf-0-0"
    tasks: list[asyncio.Task[None]] = []

    async def kill_when_applying() -> None:
        for _ in range(2000):
            j = wlab.agents.journal(victim)
            if j and j.get("phase") == "applying":
                wlab.agents.kill(victim)
                return
            await asyncio.sleep(0.005)

    def progress(step: str, device: str, res: StepResult | None) -> None:
        if step == "commit" and device == victim and res is None:
            tasks.append(asyncio.get_running_loop().create_task(kill_when_applying()))

    ecmp = with_wcmp(wlab.doc, enabled=False)
    _p, r2 = await push(wlab, ecmp, progress=progress)
    await asyncio.gather(*tasks)
    assert not r2.ok and r2.stage == "commit"  # type: ignore[attr-defined]
    assert victim in [f.device for f in r2.failures("commit")]  # type: ignore[attr-defined]
    wlab.agents.launch(victim)  # recovers: undoes whatever it had half applied
    wlab.agents.wait(victim)
    async with AgentDriver(wlab.agents.endpoints(), timeout=30) as drv:
        st = await drv.state(victim)
        assert st.pending_change == "" and wlab.agents.journal(victim) is None
    deadline = time.monotonic() + 30
    while (bad := plan_mismatches(LAB, wcmp, plan)) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert bad == []


async def test_agent_killed_during_prepare_changes_nothing_and_a_restart_mid_transaction_recovers(
        wlab: WcmpLab) -> None:
    wcmp = with_wcmp(wlab.doc, enabled=True, realization="link-bandwidth")
    plan, r = await push(wlab, wcmp)
    assert r.ok, r.error  # type: ignore[attr-defined]
    victim = "spine-1-0"

    def progress(step: str, device: str, res: StepResult | None) -> None:
        if step == "prepare" and device == victim and res is None:  # frr-reload.py --test takes a while
            asyncio.get_running_loop().call_later(0.2, wlab.agents.kill, victim)

    ecmp = with_wcmp(wlab.doc, enabled=False)
    _p, r2 = await push(wlab, ecmp, progress=progress)
    assert not r2.ok and victim in [f.device for f in r2.failures()]  # type: ignore[attr-defined]
    deadline = time.monotonic() + 20  # (had the kill come after Prepare, a rollback would be settling)
    while (bad := plan_mismatches(LAB, wcmp, plan)) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert bad == []  # nothing changed anywhere
    wlab.agents.launch(victim)
    wlab.agents.wait(victim)
    # now a transaction whose agent restarts between Commit and Confirm: it comes back still pending, and
    # the Confirm that follows lands
    from southbound.render import device_configs

    ecmp_plan = solve(ecmp)
    configs = device_configs(ecmp, ecmp_plan)
    async with AgentDriver(wlab.agents.endpoints(), timeout=30, commit_timeout=120) as drv:
        nodes = list(configs)
        assert not [p for p in await asyncio.gather(*(drv.prepare(n, "chg-restart", configs[n]) for n in nodes))
                    if p.failed]
        assert not [c for c in await asyncio.gather(*(drv.commit(n, "chg-restart", 120) for n in nodes)) if c.failed]
        wlab.agents.kill(victim)
        wlab.agents.launch(victim)
        wlab.agents.wait(victim)
        assert (await drv.state(victim)).pending_change == "chg-restart"
        assert not [c for c in await asyncio.gather(*(drv.confirm(n, "chg-restart") for n in nodes)) if c.failed]
    deadline = time.monotonic() + 30
    while (bad := plan_mismatches(LAB, ecmp, ecmp_plan)) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert bad == []


async def test_unconfirmed_commit_rolls_back_on_every_device_by_itself(wlab: WcmpLab) -> None:
    wcmp = with_wcmp(wlab.doc, enabled=True, realization="link-bandwidth")
    plan, r = await push(wlab, wcmp)
    assert r.ok, r.error  # type: ignore[attr-defined]
    from southbound.render import device_configs

    ecmp = with_wcmp(wlab.doc, enabled=False)
    configs = device_configs(ecmp, solve(ecmp))
    async with AgentDriver(wlab.agents.endpoints(), timeout=20, commit_timeout=120) as ctl:
        nodes = list(configs)
        prep = await asyncio.gather(*(ctl.prepare(n, "chg-gone", configs[n]) for n in nodes))
        assert not [p for p in prep if p.failed]
        com = await asyncio.gather(*(ctl.commit(n, "chg-gone", 8.0) for n in nodes))
        assert not [c for c in com if c.failed]
    # the controller is gone; every agent rolls back within its timer, and BGP brings the weights back
    deadline = time.monotonic() + 60
    while (bad := plan_mismatches(LAB, wcmp, plan)) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert bad == []
    async with AgentDriver(wlab.agents.endpoints(), timeout=20) as drv:
        while True:  # the kernels may agree a moment before the last agent has finished its bookkeeping
            pending = {n: (await drv.state(n)).pending_change for n in nodes}
            if not any(pending.values()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    logs = {n: (wlab.agents.dir(n) / "agent.log").read_text()[-1500:] for n, c in pending.items() if c}
    assert not logs, logs


async def test_fib_realization_installs_weighted_routes_over_bgp_and_rolls_back(wlab: WcmpLab) -> None:
    fib = with_wcmp(wlab.doc, enabled=True, realization="fib")
    plan, r = await push(wlab, fib)
    assert r.ok, r.error  # type: ignore[attr-defined]
    assert plan_mismatches(LAB, fib, plan) == []
    kernel = runner.node_routes(LAB, "tor-0-0", dst="10.1.0.0/24")
    assert [str(x["protocol"]) for x in kernel] == ["250"], kernel  # Loom's route forwards
    assert "bgp" in rib_protocols("tor-0-0", "10.1.0.0/24")  # BGP's stays in zebra's RIB underneath
    async with AgentDriver(wlab.agents.endpoints(), timeout=20, commit_timeout=120) as drv:
        back = await asyncio.gather(*(drv.rollback(n, r.change) for n in wlab.agents.nodes))  # type: ignore[attr-defined]
        assert not [b for b in back if b.failed]
    deadline = time.monotonic() + 20
    while True:  # zebra puts BGP's route back into the kernel once Loom's is gone
        kernel = runner.node_routes(LAB, "tor-0-0", dst="10.1.0.0/24")
        if [str(x["protocol"]) for x in kernel] == ["bgp"] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert [str(x["protocol"]) for x in kernel] == ["bgp"], kernel


def rib_protocols(node: str, prefix: str) -> set[str]:
    out = subprocess.run(["vtysh", "--vty_socket", str(runner.run_dir(LAB) / node), "-c",
                          f"show ip route {prefix} json"], capture_output=True, text=True, timeout=30).stdout
    return {str(e.get("protocol")) for e in json.loads(out or "{}").get(prefix, [])}


def test_lab_intent_is_valid() -> None:
    assert load_intent(REPO / "labs" / "clos3-small" / "intent.yaml").name == "clos3-small"
    validate_intent(wcmp_intent_doc())
