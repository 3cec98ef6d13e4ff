"""containerlab topologies Loom never generated, run as containerlab would run them, without Docker.

Three labs written in the styles found in public containerlab repositories
(tests/lab/fixtures): an OSPF triangle of FRR routers with a PC behind each
(kinds and images from ``groups``, directory binds, PCs set up by ``exec``, the
file named ``frr01.clab.yml``), an eBGP leaf-spine (``defaults`` and ``kinds``,
``type: veth`` links with endpoint maps and an MTU, file binds, ``env``), and
an IS-IS pair (a router ``exec`` that makes a bridge for its host, a ``kind:
bridge`` switch, an ``ldpd`` the kernel cannot run, ``loom serve --lab`` on
it), and a BGP-unnumbered leaf-spine with dual-stack hosts (sessions on the
interfaces' link-local addresses, IPv4 over IPv6 next hops: IPv6 works in
namespaces of any file). Each is brought up with the real ``loom lab up PATH``, its hosts ping
each other across the fabric from inside their namespaces, and ``loom lab down`` leaves no namespace and no process.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labs import runner
from labs.clab import Topology, load_topology
from tests.serving import LoomServer, running

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
LOOM = [sys.executable, "-c", "from controller.cli import main; main()"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def loom(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=timeout, env=ENV)


def leftovers(topo: Topology) -> list[str]:
    names = {runner.namespace(topo.name, n.name) for n in topo.nodes}
    found = [f"namespace {n}" for n in sorted(runner.existing_namespaces() & names)]
    found += [f"process {pid}" for pid in runner._our_pids(runner.run_dir(topo.name))]
    return found


def pings(topo: Topology, src: str, address: str, *, within: float = 30.0) -> bool:
    """Whether ``src`` reaches ``address`` (a ping from inside its namespace), retried while the
    fabric's protocols converge."""
    deadline = time.monotonic() + within
    while True:
        proc = subprocess.run(["ip", "netns", "exec", runner.namespace(topo.name, src), "ping", "-c", "1",
                               "-W", "1", address], capture_output=True, text=True, timeout=10)
        if proc.returncode == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)


def in_node(topo: Topology, node: str, *args: str) -> str:
    return runner.node_exec(topo.name, node, list(args))


class Lab:
    """A fixture lab, up through the CLI (``up`` is its JSON report; device agents on its routers only when
    ``agents``), always taken down at the end."""

    def __init__(self, path: Path, *, agents: bool = True):
        self.path, self.agents = path, agents
        self.topo = load_topology(path)
        self.up: dict = {}

    def __enter__(self) -> Lab:
        proc = loom("lab", "up", str(self.path), "--json", *(() if self.agents else ("--no-agents",)))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        self.up = json.loads(proc.stdout)
        return self

    def down(self) -> dict:
        proc = loom("lab", "down", str(self.path), "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    def __exit__(self, *exc: object) -> None:
        runner.down(self.topo.name, [n.name for n in self.topo.nodes])


@pytest.fixture
def ospf() -> Iterator[Lab]:
    with Lab(FIXTURES / "ospf-triangle") as lab:  # a directory holding frr01.clab.yml
        yield lab


@pytest.fixture
def leafspine() -> Iterator[Lab]:
    with Lab(FIXTURES / "ebgp-leafspine" / "leafspine.clab.yaml", agents=False) as lab:
        yield lab


@pytest.fixture
def isis() -> Iterator[Lab]:
    with Lab(FIXTURES / "isis-pair" / "isis.clab.yml", agents=False) as lab:
        yield lab


@pytest.fixture
def unnumbered() -> Iterator[Lab]:
    with Lab(FIXTURES / "bgp-unnumbered", agents=False) as lab:
        yield lab


def test_bgp_unnumbered_carries_both_families_between_dual_stack_hosts(unnumbered: Lab) -> None:
    topo = unnumbered.topo
    assert unnumbered.up["converged"] and unnumbered.up["sessions_established"] == unnumbered.up["sessions"] == 4
    status = json.loads(loom("lab", "status", str(unnumbered.path), "--json").stdout)["nodes"]
    assert status["spine"]["sessions"] == {"eth1": "Established", "eth2": "Established"}  # peers by interface
    routes = json.loads(loom("lab", "routes", str(unnumbered.path), "--json").stdout)
    assert routes["leaf1"]["172.20.2.0/24"] == routes["leaf1"]["2001:db8:20:2::/64"] == [{"port": "eth1", "weight": 1}]
    assert routes["spine"]["2001:db8:20:1::/64"] == [{"port": "eth1", "weight": 1}]
    hosts = json.loads(loom("lab", "hosts", str(unnumbered.path), "--json").stdout)
    assert (hosts["h2"]["address"], hosts["h2"]["address6"]) == ("172.20.2.10", "2001:db8:20:2::10")
    for src, dst in (("h1", "172.20.2.10"), ("h1", "2001:db8:20:2::10"), ("h2", "2001:db8:20:1::10")):
        assert pings(topo, src, dst), f"{src} cannot reach {dst}"
    assert in_node(topo, "h1", "sysctl", "-n", "net.ipv6.conf.eth1.accept_dad").strip() == "0"  # usable at once
    unnumbered.down()
    assert leftovers(topo) == []


def test_ospf_triangle_pcs_reach_each_other_then_nothing_is_left(ospf: Lab) -> None:
    topo = ospf.topo
    assert ospf.up["converged"] and ospf.up["agents"] == 3 and ospf.up["nodes"] == 3 and ospf.up["hosts"] == 3
    assert sum("no Docker here" in n for n in ospf.up["notes"]) == 1  # one note, not one per node
    for src, dst in (("pc1", "192.168.2.10"), ("pc1", "192.168.3.10"), ("pc2", "192.168.3.10"),
                     ("pc3", "192.168.1.10")):
        assert pings(topo, src, dst), f"{src} cannot reach {dst}"
    routes = json.loads(loom("lab", "routes", str(ospf.path), "--json").stdout)
    assert set(routes) == {"r1", "r2", "r3"}
    # converged means the shortest paths: r1 reaches r2's PC over their own link, r3's over theirs
    assert routes["r1"]["192.168.2.0/24"] == [{"port": "eth1", "weight": 1}]
    assert routes["r1"]["192.168.3.0/24"] == [{"port": "eth2", "weight": 1}]
    assert (runner.run_dir(topo.name) / "r1" / "ospfd.pid").exists()
    report = ospf.down()
    assert report["namespaces_deleted"] == 6 and report["daemons_stopped"] == 3 * 3 + 3  # zebra staticd ospfd, agents
    assert leftovers(topo) == []


def test_ebgp_leafspine_hosts_reach_each_other_with_mtu_and_env(leafspine: Lab) -> None:
    topo = leafspine.topo
    assert leafspine.up["converged"] and leafspine.up["sessions_established"] == leafspine.up["sessions"] == 8
    assert pings(topo, "h1", "172.16.2.10") and pings(topo, "h2", "172.16.1.10")
    for node, port in (("leaf1", "e1-1"), ("spine1", "e1-1"), ("leaf2", "e1-2"), ("spine2", "e1-2")):
        assert json.loads(in_node(topo, node, "ip", "-j", "link", "show", port))[0]["mtu"] == 9000
    assert json.loads(in_node(topo, "h1", "ip", "-j", "link", "show", "eth1"))[0]["mtu"] == 1500
    link = json.loads(in_node(topo, "h1", "ip", "-j", "link", "show", "eth1"))[0]
    assert link.get("ifalias") == "lab-web"  # env from defaults and the node, applied to its exec
    report = leafspine.down()
    assert report["namespaces_deleted"] == 6
    assert leftovers(topo) == []


def test_isis_pair_with_a_router_exec_bridge_and_a_skipped_ldpd_and_loom_serve_on_it(isis: Lab,
                                                                                      tmp_path: Path) -> None:
    topo = isis.topo
    assert isis.up["converged"] and isis.up["agents"] == 0
    assert any(n.startswith("ra: ldpd skipped") for n in isis.up["notes"]), isis.up["notes"]
    assert pings(topo, "ha", "10.20.2.5") and pings(topo, "hb", "10.20.1.5")
    assert "10.20.2.1/24" in in_node(topo, "rb", "ip", "-br", "addr", "show", "br-hosts")
    ports = json.loads(in_node(topo, "lan-a", "ip", "-j", "link", "show", "master", "lan-a"))
    assert sorted(p["ifname"] for p in ports) == ["port1", "port2"]  # kind: bridge, a namespace with a bridge
    server = LoomServer(tmp_path, ["--db", f"sqlite:///{tmp_path / 'loom.db'}", "--lab", str(isis.path)],
                        secrets.token_urlsafe(32), cwd=REPO, env={"LOOM_DRIFT_INTERVAL": "0"})
    with running(server):  # loom serve --lab FILE starts the routers' agents (not the hosts')
        assert server("GET", "/v1/status").status_code == 200
        agents = json.loads(runner.agents_file(topo.name).read_text())
        assert sorted(agents) == ["ra", "rb"]
        assert all(runner._socket_answers(runner.agent_socket(topo.name, n)) for n in agents)
    isis.down()
    assert leftovers(topo) == []


def _copy_isis(tmp_path: Path, name: str) -> Path:
    """The IS-IS fixture lab copied under another lab name, to break."""
    lab = tmp_path / name
    shutil.copytree(FIXTURES / "isis-pair", lab)
    path = lab / "isis.clab.yml"
    path.write_text(path.read_text().replace("name: clab-isis2", f"name: {name}"))
    return path


def test_a_configuration_that_needs_a_daemon_that_cannot_run_is_refused_before_anything(tmp_path: Path) -> None:
    path = _copy_isis(tmp_path, "clab-ldp")
    conf = path.parent / "ra" / "frr.conf"
    conf.write_text(conf.read_text() + "mpls ldp\n router-id 10.255.9.1\n!\n")
    if runner.cannot_run("ldpd", runner.FRR_BIN) is None:
        pytest.skip("this kernel runs ldpd (it has MPLS)")
    proc = loom("lab", "up", str(path), "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = json.loads(proc.stdout)["errors"]
    assert errors[0]["loc"] == "topology.nodes.ra.binds" and "'mpls ldp' needs ldpd" in errors[0]["msg"]
    assert leftovers(load_topology(path)) == [] and not runner.run_dir("clab-ldp").exists()


def test_an_exec_command_that_fails_is_named_and_the_lab_removed(tmp_path: Path) -> None:
    path = _copy_isis(tmp_path, "clab-badexec")
    path.write_text(path.read_text().replace("- ip route add default via 10.20.2.1",
                                             "- ip route add default via 10.99.0.1"))
    topo = load_topology(path)
    try:
        proc = loom("lab", "up", str(path), "--no-agents")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "topology.nodes.hb.exec[1] (node hb): 'ip route add default via 10.99.0.1' failed" in proc.stderr
        assert leftovers(topo) == []
    finally:
        runner.down(topo.name, [n.name for n in topo.nodes])
