"""Real FRR fabrics against the solver: routes and traffic.

Each lab (the two shipped ones, and clos3-small with a drained spine plus a
drained link, and with a missing leaf-spine link) is brought up once with
``loom lab up`` and torn down in a finalizer even when a test fails. For every
node and prefix, the next-hop ports FRR installed in the kernel
(``loom lab routes --json``) must equal the solver's (``solver.core.routing.next_hops``)
and the plan ``loom plan`` writes with WCMP disabled, including where
valley-free rules and drains withdraw a route. An IS-IS ring is held to the
same standard, and an OSPF ring with a drained (stub) router.
Then a few thousand UDP flows from one ToR's host subnet to another's show, by
interface counters, the split the routes promise at the source and at the
next hop.
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
from typer.testing import CliRunner, Result

from controller.cli import _register
from controller.cli.common import app
from controller.model import Intent
from controller.model.intent import load_intent, validate_intent
from controller.model.plan import Plan
from labs import runner
from labs.clab import load_topology
from solver.core.routing import next_hops
from southbound.state import AgentInfo

REPO = Path(__file__).resolve().parents[2]
LOOM = [str(Path(sys.executable).with_name("loom"))] if Path(sys.executable).with_name("loom").exists() \
    else [sys.executable, "-c", "from controller.cli import main; main()"]
FLOWS = 3000
_register()
cli = CliRunner()
SENDER = r"""
import socket, sys
src, dst, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for port in range(first, first + count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, port))
    s.sendto(b"loom-lab-flow" * 4, (dst, 5001))
    s.close()
"""


def _variant_drained(doc: dict) -> dict:
    doc["policies"] = [{"kind": "drain", "target": "spine-0-0"}, {"kind": "drain", "target": "leaf-1-1:eth4"}]
    return doc


def _variant_cut(doc: dict) -> dict:
    doc["links"] = [lk for lk in doc["links"] if not (lk["a"] == "leaf-0-0" and lk["b"] == "spine-0-0")]
    return doc


def _variant_isis(doc: dict) -> dict:
    """Not a Clos: an IS-IS ring of five routers with unequal metrics and two prefixes."""
    names = [f"r{i}" for i in range(1, 6)]
    links = [{"a": names[i], "a_port": "eth1", "b": names[(i + 1) % 5], "b_port": "eth2", "metric": 10}
             for i in range(5)]
    links[0]["metric"] = 20  # r1 reaches r3 two equal ways (30 each); r4 reaches r1 one way (20, not 40)
    return {"name": "isis-ring", "routing": "isis", "devices": [{"name": n} for n in names], "links": links,
            "prefixes": [{"prefix": "10.9.1.0/24", "origins": ["r1"]},
                         {"prefix": "10.9.3.0/24", "origins": ["r3"]}]}


def _variant_ospf(doc: dict) -> dict:
    """The IS-IS ring under OSPF, with r5 drained (a stub router: r4 reaches r1 the long way round) and a
    router r6 behind it, whose prefix is reachable only through r5 (OSPF still carries that transit); and an
    anycast prefix of r2 and r4 (each origin's host port costs the same)."""
    doc = _variant_isis(doc)
    doc["routing"] = "ospf"
    doc["devices"].append({"name": "r6"})
    doc["links"].append({"a": "r5", "a_port": "eth3", "b": "r6", "b_port": "eth1", "metric": 5})
    doc["prefixes"][1:1] = [{"prefix": "10.9.6.0/24", "origins": ["r6"]},
                            {"prefix": "10.9.7.0/24", "origins": ["r2", "r4"]}]
    doc["policies"] = [{"kind": "drain", "target": "r5"}]
    return doc


VARIANTS = {"clos-2x2": None, "clos3-small": None, "c3-drained": _variant_drained, "c3-cut": _variant_cut,
            "isis-ring": _variant_isis, "ospf-ring": _variant_ospf}


@dataclass
class Lab:
    name: str
    path: Path
    intent: Intent
    report: dict
    shipped: bool = False


def loom(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real ``loom`` command in its own process (up and down)."""
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=timeout)


def loom_here(*args: str) -> Result:
    """The same command line, run in this process (quick reads: routes, status, gen)."""
    return cli.invoke(app, list(args))


def expected_ports(intent: Intent) -> dict[str, dict[str, set[str]]]:
    """The solver's ECMP next-hop ports: node -> prefix -> ports."""
    out: dict[str, dict[str, set[str]]] = {d.name: {} for d in intent.devices}
    for prefix, devices in next_hops(intent).items():
        for device, hops in devices.items():
            if hops:
                out[device][prefix] = {port for port, _neighbor in hops}
    return out


def installed_ports(routes: dict) -> dict[str, dict[str, set[str]]]:
    return {node: {p: {h["port"] for h in hops} for p, hops in prefixes.items()} for node, prefixes in routes.items()}


@pytest.fixture(scope="module", params=list(VARIANTS))
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    name = request.param
    variant = VARIANTS[name]
    if variant is None:
        path = REPO / "labs" / name
    else:
        doc = variant(yaml.safe_load((REPO / "labs" / "clos3-small" / "intent.yaml").read_text()))
        doc["name"] = name
        intent_file = tmp_path_factory.mktemp("intents") / f"{name}.yaml"
        intent_file.write_text(yaml.safe_dump(doc))
        path = tmp_path_factory.mktemp("labs") / name
        gen = loom_here("lab", "gen", str(intent_file), "--out", str(path))
        assert gen.exit_code == 0, gen.output
    topo = load_topology(path)

    def teardown() -> None:
        result = loom_here("lab", "down", str(path))
        if result.exit_code != 0:  # the CLI failed: still leave nothing behind
            runner.down(topo.name, [n.name for n in topo.nodes])

    request.addfinalizer(teardown)
    if variant is None:  # the shipped labs come up through the real command, as a user types it
        proc = loom("lab", "up", str(path), "--json", "--timeout", "60")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
    else:
        result = loom_here("lab", "up", str(path), "--json", "--timeout", "60", "--no-agents")
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
    yield Lab(name, path, load_intent(path / "intent.yaml"), report, shipped=variant is None)


def test_up_reports_convergence(lab: Lab) -> None:
    r = lab.report
    assert r["converged"] and r["lab"] == lab.name
    bgp_sessions = 2 * len(lab.intent.links) if lab.intent.routing.value == "bgp" else 0
    assert r["sessions"] == bgp_sessions == r["sessions_established"]
    want = sum(len(p) for p in expected_ports(lab.intent).values())
    assert r["expected_routes"] == want == r["routes"]
    assert r["memory_mb_per_node"] > 1


async def _agent_info(sock: Path) -> AgentInfo:
    import grpc

    from southbound.grpc_adapter import AgentClient

    async with grpc.aio.insecure_channel(f"unix:{sock}") as channel:
        return await AgentClient(channel).info(timeout=10)


def test_up_starts_a_device_agent_per_node(lab: Lab) -> None:
    """``loom lab up`` (as a user types it) leaves one Loom agent per node answering GetInfo
    on its unix socket, beside that node's FRR; ``--no-agents`` starts none."""
    names = [n.name for n in lab.intent.devices]
    if not lab.shipped:
        assert lab.report["agents"] == 0
        return
    assert lab.report["agents"] == len(names)
    for name in names:
        info = asyncio.run(_agent_info(runner.agent_socket(lab.name, name)))
        assert info.hostname == name and not info.dry_frr, info


def test_kernel_routes_equal_the_solver(lab: Lab, tmp_path: Path) -> None:
    """Polled with a bound (BGP may still be settling multipath), then compared exactly
    with the solver's routing and with the plan ``loom plan`` compiles (WCMP disabled)."""
    want = expected_ports(lab.intent)
    prefixes = {p.prefix for p in lab.intent.prefixes}  # IS-IS also carries the links' own /31s
    deadline = time.monotonic() + 20
    while True:
        proc = loom_here("lab", "routes", str(lab.path), "--json")
        assert proc.exit_code == 0, proc.output
        routes = json.loads(proc.stdout)
        if lab.intent.routing.value == "bgp":  # BGP carries the intent's prefixes and nothing else
            assert all(set(t) <= prefixes for t in routes.values()), routes
        have = {n: {p: v for p, v in t.items() if p in prefixes} for n, t in installed_ports(routes).items()}
        if have == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    diff = [f"{node} {prefix}: FRR {sorted(have.get(node, {}).get(prefix, []))} "
            f"solver {sorted(want.get(node, {}).get(prefix, []))}"
            for node in sorted(set(want) | set(have))
            for prefix in sorted(set(want.get(node, {})) | set(have.get(node, {})))
            if have.get(node, {}).get(prefix) != want.get(node, {}).get(prefix)]
    assert not diff, "\n".join(diff)
    # the plan `loom plan` writes for the intent with WCMP disabled: the same next hops, with
    # weights in the same proportions as the kernel's
    doc = lab.intent.to_document()
    doc["policies"] = [p for p in doc.get("policies", []) if p["kind"] != "wcmp"] + [{"kind": "wcmp", "enabled": False}]
    (tmp_path / "ecmp.yaml").write_text(yaml.safe_dump(doc))
    planned_run = loom_here("plan", str(tmp_path / "ecmp.yaml"), "--out", str(tmp_path / "plan.json"), "--json")
    assert planned_run.exit_code == 0, planned_run.output
    plan = Plan.from_document(json.loads((tmp_path / "plan.json").read_text()))
    for node, table in have.items():
        dp = plan.devices.get(node)
        planned = {p: {h.port: h.weight for h in dp.nexthops(p)} for p in dp.routes} if dp else {}
        assert set(planned) == set(table), (node, sorted(planned), sorted(table))
        for prefix, hops in planned.items():
            kernel = {h["port"]: h["weight"] for h in routes[node][prefix]}
            assert set(kernel) == set(hops), (node, prefix, kernel, hops)
            assert all(kernel[a] * hops[b] == kernel[b] * hops[a] for a in hops for b in hops), (node, prefix)
    # plain ECMP: every installed weight is equal within a route
    for node, prefixes in routes.items():
        for prefix, hops in prefixes.items():
            assert len({h["weight"] for h in hops}) == 1, (node, prefix, hops)


@pytest.mark.parametrize("variant", ["c3-drained", "c3-cut"])
def test_variants_exercise_withdrawals_and_drains(variant: str) -> None:
    """The drained and cut labs really differ from the plain one: fewer next hops,
    and (cut) routes withdrawn by AS-path loop prevention (no valleys)."""
    base_doc = yaml.safe_load((REPO / "labs" / "clos3-small" / "intent.yaml").read_text())
    intent = validate_intent(VARIANTS[variant](json.loads(json.dumps(base_doc))))  # type: ignore[misc]
    base = expected_ports(validate_intent(base_doc))
    mine = expected_ports(intent)

    def count(table: dict[str, dict[str, set[str]]]) -> int:
        return sum(len(v) for p in table.values() for v in p.values())

    assert count(mine) < count(base)
    if variant == "c3-cut":
        withdrawn = [(n, p) for n in base for p in base[n] if p not in mine[n]]
        assert withdrawn and all(n == "spine-0-0" for n, _ in withdrawn)
    else:
        # the drained spine carries no transit: nobody routes through it, yet it still learns routes
        assert all("spine-0-0" not in {nb for _port, nb in hops}
                   for devices in next_hops(intent).values() for hops in devices.values())
        assert mine["spine-0-0"]


def test_status_shows_nodes_sessions_and_hostnames(lab: Lab) -> None:
    proc = loom_here("lab", "status", str(lab.path), "--json")
    assert proc.exit_code == 0, proc.output
    nodes = json.loads(proc.stdout)["nodes"]
    assert set(nodes) == {d.name for d in lab.intent.devices}
    for name, n in nodes.items():
        assert n["daemons_running"] == n["daemons"] == 3  # zebra, staticd, bgpd, isisd or ospfd
        assert n["namespace"] == f"loom-{lab.name}-{name}"
        assert set(n["sessions"].values()) == ({"Established"} if lab.intent.routing.value == "bgp" else set())
    if lab.intent.routing.value != "bgp":
        return
    # each node runs under its own hostname: peers learn it through BGP's hostname capability
    node = lab.intent.links[0].a
    text = subprocess.run(["vtysh", "--vty_socket", str(runner.run_dir(lab.name) / node), "-c",
                           "show bgp ipv4 unicast summary json"], capture_output=True, text=True, timeout=10).stdout
    peers = {p["hostname"] for p in json.loads(text)["peers"].values()}
    assert peers == {lk.b if lk.a == node else lk.a for lk in lab.intent.links if node in (lk.a, lk.b)}


def _tx(lab: str, node: str) -> dict[str, int]:
    links = json.loads(runner.node_exec(lab, node, ["ip", "-s", "-j", "link"]))
    return {li["ifname"]: li["stats64"]["tx"]["packets"] for li in links}


def _rx(lab: str, node: str) -> dict[str, int]:
    links = json.loads(runner.node_exec(lab, node, ["ip", "-s", "-j", "link"]))
    return {li["ifname"]: li["stats64"]["rx"]["packets"] for li in links}


def test_traffic_splits_as_the_routes_promise(lab: Lab) -> None:
    """UDP flows with distinct source ports from the first ToR's host subnet to
    the last ToR's prefix: per-port packet counts at the source and at each
    next hop follow the kernel routes' weights (L4 multipath hash)."""
    intent = lab.intent
    src, dst_prefix = intent.prefixes[0].origins[0], intent.prefixes[-1]
    dst = dst_prefix.origins[0]
    src_addr = str(intent.prefixes[0].network.network_address + 1)
    dst_addr = str(dst_prefix.network.network_address + 50)
    routes = json.loads(loom_here("lab", "routes", str(lab.path), "--json").stdout)
    first_hops = routes[src][dst_prefix.prefix]
    behind = {}  # port of src -> the neighbor behind it
    for lk in intent.links:
        if lk.a == src:
            behind[lk.a_port] = lk.b
        elif lk.b == src:
            behind[lk.b_port] = lk.a
    neighbors = {behind[h["port"]]: h["port"] for h in first_hops}
    send = ["ip", "netns", "exec", runner.namespace(lab.name, src), sys.executable, "-c", SENDER, src_addr, dst_addr]
    subprocess.run([*send, "10000", "50"], check=True, timeout=60)  # warm up neighbor (ARP) entries
    time.sleep(0.2)
    watched = [src, *sorted(neighbors)]
    before = {n: _tx(lab.name, n) for n in watched}
    rx_before = _rx(lab.name, dst)
    subprocess.run([*send, "20000", str(FLOWS)], check=True, timeout=120)
    time.sleep(0.3)
    after = {n: _tx(lab.name, n) for n in watched}
    rx_after = _rx(lab.name, dst)
    fabric_ports = [lk.a_port for lk in intent.links if lk.a == dst] + [lk.b_port for lk in intent.links if lk.b == dst]
    delivered = sum(rx_after[p] - rx_before[p] for p in fabric_ports)
    assert delivered >= 0.99 * FLOWS, f"{dst} received {delivered} of {FLOWS} packets"
    received = {src: FLOWS}
    for node in watched:
        hops = routes[node][dst_prefix.prefix]
        sent = {h["port"]: after[node][h["port"]] - before[node][h["port"]] for h in hops}
        total = sum(sent.values())
        if node == src:
            received.update({n: sent[port] for n, port in neighbors.items()})
        assert total >= 0.98 * received[node], f"{node} forwarded {total} of {received[node]} packets: {sent}"
        weight_sum = sum(h["weight"] for h in hops)
        for h in hops:
            share, promised = sent[h["port"]] / total, h["weight"] / weight_sum
            assert abs(share - promised) < 0.06, \
                f"{node} {h['port']}: {share:.3f} of the packets, the routes promise {promised:.3f}"


def test_intent_variants_are_valid() -> None:
    base = yaml.safe_load((REPO / "labs" / "clos3-small" / "intent.yaml").read_text())
    for variant in (_variant_drained, _variant_cut):
        validate_intent(variant(json.loads(json.dumps(base))))


def test_the_ospf_variant_exercises_the_stub_router() -> None:
    """The drained r5 of the OSPF ring: r4 reaches r1 the long way (via r3), yet r1 reaches r6 through r5."""
    ports = expected_ports(validate_intent(_variant_ospf({})))
    assert ports["r4"]["10.9.1.0/24"] == {"eth2"} and ports["r1"]["10.9.6.0/24"] == {"eth2"}
    assert ports["r3"]["10.9.7.0/24"] == {"eth1", "eth2"}  # r2 and r4, 10 away each
