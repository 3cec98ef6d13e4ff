"""The lab runner: a containerlab topology realized in Linux network namespaces.

This module owns ``loom lab up|down|status|routes``' side effects. ``up`` gives
each node a namespace ``loom-<lab>-<node>``, a veth pair per link (made
straight into the two namespaces under temporary names, renamed there to the
containerlab interface names), a veth pair kept inside the node per host
subnet port, IPv6 on with addresses usable at once and, on routers, forwarding
of both families and L4 multipath hashing (:mod:`labs.node_scripts`; a node's
own ``sysctls`` win), and FRR's daemons (zebra,
staticd, and the routing daemons the node's ``daemons`` file or, without one,
its configuration asks for: :mod:`labs.frr_daemons`) under their own UTS
namespace with the node's hostname and a run directory owned by ``frr``; the
node's ``frr.conf`` is loaded with ``vtysh -b``, then the ``exec`` commands of
nodes that are not Loom's own run in their namespaces (:func:`run_execs`). It then polls until every
BGP session (of every address family) is established and every expected prefix
(of either family) is in every kernel, with a bound (:mod:`labs.lab_readings`
reads them). What was created is recorded in a state file first, so ``down`` (and
``up`` of a half-built lab) can stop every daemon by pid and delete every
namespace after a crash. Nothing here knows FRR's configuration syntax beyond
which daemon a section needs.

Loom's host nodes (:mod:`labs.clab`) get a namespace, their link, their address and
default route of each family they have, and an nftables rule that drops the lab's
test traffic of both families (:data:`SINK_PORTS`) so that nothing answers it; no
FRR and no agent. Other hosts get a namespace, their links (with their MTU), their
sysctls, and their ``exec`` commands. A ToR's
host port that is a link end is that veth; one declared a bridge is made a
bridge over its members; otherwise it stays a veth kept inside the node.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.model.errors import FrrError, LoomError
from labs.clab import ClabNode, Topology
from labs.clab_spec import exec_env
from labs.frr_daemons import cannot_run, plan_daemons
from labs.lab_readings import NodeObservation, Observation, bgp_sessions, parse_routes, routes_of_both
from labs.node_scripts import (
    IPV6_SYSCTLS,
    ROUTER_SYSCTLS,
    bare_host_script,
    bridge_script,
    exec_argv,
    link_lines,
    sysctl_lines,
)
from southbound.netlink import routes_ip_json
from southbound.vty import VTY_OK, vty_run

__all__ = [
    "FRR_BIN",
    "LabError",
    "agent_socket",
    "lab_agent_command",
    "node_routes",
    "start_agents",
    "LabPrerequisiteError",
    "UnrunnableLab",
    "NodeObservation",
    "Observation",
    "UpReport",
    "check_prerequisites",
    "daemon_command",
    "down",
    "existing_namespaces",
    "namespace",
    "node_exec",
    "bgp_sessions",
    "observe",
    "parse_routes",
    "routes_of_both",
    "run_dir",
    "status",
    "up",
]

FRR_BIN = Path(os.environ.get("LOOM_FRR_BIN", "/usr/lib/frr"))
RUN_ROOT = Path(os.environ.get("LOOM_LAB_RUN_DIR", "/run/loom/labs"))
HASH_SEED = "/proc/sys/net/ipv4/fib_multipath_hash_seed"
#: UDP ports of lab traffic (:mod:`labs.traffic`), dropped silently by every host
SINK_PORTS = (40000, 49999)


class LabError(LoomError):
    """The lab could not be brought up, observed or torn down."""


class LabPrerequisiteError(LabError):
    """Something the runner needs is missing (root, FRR, iproute2)."""


class UnrunnableLab(LabError):
    """A lab whose routers need what this machine cannot run (``errors``: located, one a line)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("routers that cannot run here: " + "; ".join(errors))


def namespace(lab: str, node: str) -> str:
    """The network namespace of ``node`` in ``lab``."""
    return f"loom-{lab}-{node}"


def run_dir(lab: str) -> Path:
    """Where a lab keeps its state file and its nodes' FRR directories."""
    return RUN_ROOT / lab


def _state_file(lab: str) -> Path:
    return run_dir(lab) / "state.json"


def check_prerequisites() -> None:
    """Raise :class:`LabPrerequisiteError` unless root, FRR and iproute2 are here."""
    if os.geteuid() != 0:
        raise LabPrerequisiteError("labs need root (network namespaces, veth pairs, FRR daemons): run as root")
    missing = [str(FRR_BIN / d) for d in ("zebra", "staticd", "bgpd") if not (FRR_BIN / d).exists()]
    missing += [t for t in ("vtysh", "ip", "unshare") if shutil.which(t) is None]
    if missing:
        raise LabPrerequisiteError(
            f"FRR or tools not installed (missing {', '.join(missing)}): apt-get install frr frr-pythontools iproute2")
    try:
        pwd.getpwnam("frr")
    except KeyError:
        raise LabPrerequisiteError("user 'frr' missing: install Debian's frr package") from None


def _run(args: list[str], *, input: str | None = None, check: bool = True, timeout: float = 30) -> str:
    proc = subprocess.run(args, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise LabError(f"{shlex.join(args)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def node_exec(lab: str, node: str, args: list[str], *, check: bool = True, timeout: float = 30) -> str:
    """Run ``args`` inside ``node``'s namespace; return its standard output."""
    return _run(["ip", "netns", "exec", namespace(lab, node), *args], check=check, timeout=timeout)


def node_routes(lab: str, node: str, version: int = 4, *, dst: str | None = None,
                protocol: str | None = None) -> list[dict[str, Any]]:
    """``ip -j -4|-6 route show table main [DST] [proto PROTOCOL]`` of ``node``: its main table's routes of IP
    ``version`` in that form (:func:`southbound.netlink.routes_ip_json`), read over netlink in its namespace
    (no process); ``dst``: only the routes to exactly that prefix (``default``, or a prefix of the family),
    ``protocol``: only those of that protocol (its name, as ``ip`` prints it)."""
    want = None if dst is None else _network(dst, version)
    return [r for r in routes_ip_json(version, netns=namespace(lab, node))
            if (want is None or _network(str(r["dst"]), version) == want)
            and (protocol is None or r["protocol"] == protocol)]


def _network(dst: str, version: int) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if dst == "default":
        return ipaddress.ip_network("::/0" if version == 6 else "0.0.0.0/0")
    return ipaddress.ip_network(dst, strict=False)


def plan_routers(topo: Topology) -> tuple[dict[str, list[str]], list[str]]:
    """Each router's daemons (:mod:`labs.frr_daemons`) and the notes of those skipped; raises
    :class:`UnrunnableLab`, with each node's location, when a configuration needs a daemon that will not run."""
    daemons: dict[str, list[str]] = {}
    notes: list[str] = []
    errors: list[str] = []
    for node in topo.routers:
        plan = plan_daemons(node.frr_conf, node.daemons_file, lambda d: cannot_run(d, FRR_BIN))
        daemons[node.name] = plan.start
        notes += [f"{node.name}: {s}" for s in plan.skipped]
        errors += [f"topology.nodes.{node.name}.binds: {e}" for e in plan.errors]
    if errors:
        raise UnrunnableLab(errors)
    return daemons, notes


# -- state -------------------------------------------------------------------


def _load_state(lab: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(_state_file(lab).read_text())
        return data
    except (OSError, ValueError):
        return None


def _save_state(state: dict[str, Any]) -> None:
    path = _state_file(state["lab"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(path)


def existing_namespaces() -> set[str]:
    """The names of the machine's network namespaces."""
    out = _run(["ip", "-j", "netns", "list"], check=False) or "[]"
    try:
        return {n["name"] for n in json.loads(out)}
    except ValueError:
        return set()


def _our_pids(directory: Path) -> set[int]:
    """Processes whose command line names a path inside ``directory`` (our daemons)."""
    needle = (str(directory) + "/").encode()
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids - {os.getpid()}


def _alive(pid: int, directory: Path) -> bool:
    try:
        return (str(directory) + "/").encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# -- down ----------------------------------------------------------------------


@dataclass
class DownReport:
    lab: str
    stopped: int = 0
    killed: int = 0
    namespaces: int = 0
    seconds: float = 0.0

    def to_document(self) -> dict[str, Any]:
        return {"lab": self.lab, "daemons_stopped": self.stopped, "daemons_killed": self.killed,
                "namespaces_deleted": self.namespaces, "seconds": round(self.seconds, 2)}


def down(lab: str, nodes: Iterable[str] = (), *, grace: float = 10.0) -> DownReport:
    """Stop every daemon of ``lab`` by pid (waiting for each), delete its
    namespaces and run directory. Safe to run twice or after a crash: what to
    remove is the union of the state file, ``nodes`` (from the topology) and
    the processes whose command line names the lab's run directory."""
    t0 = time.monotonic()
    report = DownReport(lab)
    directory = run_dir(lab)
    state = _load_state(lab) or {}
    pids = {int(p) for node in state.get("nodes", {}).values() for p in node.get("pids", {}).values()}
    pids = {p for p in pids if _alive(p, directory)} | _our_pids(directory)
    for pid in sorted(pids):
        try:
            os.kill(pid, signal.SIGTERM)
            report.stopped += 1
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = {p for p in pids if _alive(p, directory)}
        if pids:
            time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            report.killed += 1
        except ProcessLookupError:
            pass
    while pids and time.monotonic() < deadline + 5:
        pids = {p for p in pids if _alive(p, directory)}
        time.sleep(0.05)
    wanted = set(state.get("namespaces", [])) | {namespace(lab, n) for n in nodes}
    present = existing_namespaces() & wanted
    if present:
        _run(["ip", "-batch", "-"], input="".join(f"netns del {ns}\n" for ns in sorted(present)), check=False)
        report.namespaces = len(present)
    # the lab's own directory only: the run root stays, as another lab coming up at the same time
    # (one per test worker) makes its directory under it between two mkdir calls (CI raced there)
    shutil.rmtree(directory, ignore_errors=True)
    report.seconds = time.monotonic() - t0
    return report


# -- observation ---------------------------------------------------------------


def _observe_node(lab: str, node: str, state: Mapping[str, Any]) -> NodeObservation:
    info = state.get("nodes", {}).get(node, {})
    directory = Path(info.get("dir", run_dir(lab) / node))
    obs = NodeObservation(node, daemons=len(info.get("pids", {})))
    obs.daemons_alive = sum(1 for p in info.get("pids", {}).values() if _alive(int(p), run_dir(lab)))
    try:
        ns = namespace(lab, node)  # read over netlink in the node's namespace: no process per reading
        obs.routes = routes_of_both(routes_ip_json(4, netns=ns), routes_ip_json(6, netns=ns))
        if "bgpd" in info.get("pids", {}):
            # bgpd's own vty socket, as vtysh would ask it: a millisecond, where starting vtysh costs 30 ms of CPU
            # (a lab coming up asks every node every half second until it converges)
            [(code, text)] = vty_run(directory / "bgpd.vty", "show bgp summary json", timeout=10)
            obs.sessions = bgp_sessions(json.loads(text or "{}") if code == VTY_OK else {})
    except (LabError, FrrError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        obs.error = str(exc)
    return obs


def observe(lab: str, nodes: Iterable[str], *, workers: int = 6) -> Observation:
    """Sessions and kernel routes of every node (read concurrently)."""
    state = _load_state(lab) or {}
    names = list(nodes)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = list(pool.map(lambda n: _observe_node(lab, n, state), names))
    return Observation({o.node: o for o in found})


# -- up --------------------------------------------------------------------------


@dataclass
class UpReport:
    lab: str
    nodes: int
    links: int
    seconds: float
    converged: bool
    sessions: tuple[int, int]
    routes: int
    expected_routes: int | None
    observation: Observation | None = None
    problems: list[str] = field(default_factory=list)
    hosts: int = 0
    notes: list[str] = field(default_factory=list)

    def to_document(self) -> dict[str, Any]:
        return {"lab": self.lab, "nodes": self.nodes, "hosts": self.hosts, "links": self.links,
                "converged": self.converged,
                "seconds": round(self.seconds, 2), "sessions_established": self.sessions[0],
                "sessions": self.sessions[1], "routes": self.routes, "expected_routes": self.expected_routes,
                "problems": self.problems, "notes": self.notes}


ProgressFn = Callable[[str, int, int], None]


def daemon_command(directory: Path, daemon: str) -> str:
    """The command that starts FRR's ``daemon`` of the node whose run directory is ``directory``, in its
    namespace: in the background, empty (``-f /dev/null``: the agent applies the configuration), its vty
    socket, pid file and log in ``directory`` (zebra with a netlink buffer for large tables)."""
    opts = (f"-d -P 0 --vty_socket {directory} -z {directory}/zserv.api -i {directory}/{daemon}.pid "
            f"-f /dev/null --log file:{directory}/{daemon}.log")
    if daemon == "zebra":
        opts += " -s 90000000"
    return f"{FRR_BIN / daemon} {opts}"


def _node_script(lab: str, topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str],
                 directory: Path, daemons: list[str]) -> str:
    before, after = sysctl_lines(topo.node_map[node], {**IPV6_SYSCTLS, **ROUTER_SYSCTLS})
    lines = ["set -e", *before, "ip link set lo up", *link_lines(topo, node, temp_names)]
    ends = {port for port, _peer, _pp in topo.ports(node)}
    bridges = topo.node_map[node].host_bridges
    for port in topo.node_map[node].host_ports:
        if port in ends:
            continue  # the veth to the node's host
        if port in bridges:
            lines += [f"ip link add {port} type bridge", f"ip link set {port} up"]
            lines += [f"ip link set {m} master {port}" for m in bridges[port]]
            continue
        peer = f"{port}p"[:15]
        lines += [f"ip link add {port} type veth peer name {peer}", f"ip link set {port} up", f"ip link set {peer} up"]
    lines += after
    # a per-node hash seed (kernel 6.11+) keeps nodes from hashing alike: no polarization
    seed = zlib.crc32(node.encode()) or 1
    lines.append(f"if [ -e {HASH_SEED} ]; then echo {seed} > {HASH_SEED}; fi")
    starts = [daemon_command(directory, d) for d in daemons]
    inner = f"hostname {shlex.quote(node)}; " + "; ".join(starts)
    lines.append(f"unshare --uts sh -c {shlex.quote(inner)}")
    return "\n".join(lines) + "\n"


def _host_script(topo: Topology, node: str, temp_names: Mapping[tuple[str, str], str]) -> str:
    """A Loom host: IPv6 on, its link renamed, its address and default route of each family it has, and
    the sink for lab traffic (both families)."""
    spec = topo.node_map[node].host
    assert spec is not None  # validated by labs.clab
    low, high = SINK_PORTS
    sink = (f"nft add table inet loom-host && nft add chain inet loom-host input "
            f"'{{ type filter hook input priority 0; policy accept; }}' && "
            f"nft add rule inet loom-host input udp dport {low}-{high} counter drop")
    before, after = sysctl_lines(topo.node_map[node], IPV6_SYSCTLS)
    lines = ["set -e", *before, "ip link set lo up", *link_lines(topo, node, temp_names), *after]
    if spec.address is not None:
        lines += [f"ip addr add {spec.address} dev {spec.interface}", f"ip route replace default via {spec.gateway}"]
    if spec.address6 is not None:
        lines += [f"ip -6 addr add {spec.address6} dev {spec.interface}",
                  f"ip -6 route replace default via {spec.gateway6} dev {spec.interface}"]
    lines.append(f"if command -v nft >/dev/null; then {sink}; fi")
    return "\n".join(lines) + "\n"


def run_execs(topo: Topology) -> int:
    """Every node's ``exec`` commands, in order inside its namespace with its ``env`` and its labels as
    ``CLAB_LABEL_*`` (:func:`labs.clab_spec.exec_env`; nodes in parallel);
    raises :class:`LabError` naming the first command that failed on each node. Returns how many ran."""
    lab = topo.name

    def run(node: ClabNode) -> tuple[int, str | None]:
        node_dir = run_dir(lab) / node.name if node.is_router else None
        env = exec_env(lab, node.name, node.kind, node.group, node.labels, node.env)
        for j, command in enumerate(node.exec):
            where = node.exec_locs[j] if j < len(node.exec_locs) else f"topology.nodes.{node.name}.exec[{j}]"
            try:
                argv = exec_argv(command, node_dir)
                proc = subprocess.run(["ip", "netns", "exec", namespace(lab, node.name), *argv], env=env,
                                      capture_output=True, text=True, timeout=60)
            except (ValueError, OSError, subprocess.TimeoutExpired) as exc:
                return j, f"{where} (node {node.name}): '{command}' could not run: {exc}"
            if proc.returncode != 0:
                why = (proc.stderr.strip() or proc.stdout.strip())[:300]
                return j, f"{where} (node {node.name}): '{command}' failed ({proc.returncode}): {why}"
        return len(node.exec), None

    nodes = [n for n in topo.nodes if n.runs_exec and n.exec]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(run, nodes))
    errors = [e for _n, e in results if e]
    if errors:
        raise LabError("exec commands failed: " + "; ".join(errors[:10]))
    return sum(n for n, _e in results)


def _wait_files(paths: list[Path], timeout: float) -> list[Path]:
    deadline = time.monotonic() + timeout
    missing = list(paths)
    while missing and time.monotonic() < deadline:
        missing = [p for p in missing if not p.exists()]
        if missing:
            time.sleep(0.05)
    return missing


def up(topo: Topology, *, expected: Mapping[str, Iterable[str]] | None = None, timeout: float = 60.0,
       progress: ProgressFn | None = None, poll: float = 0.5, settle: bool = False) -> UpReport:
    """Bring ``topo`` up and wait (at most ``timeout`` seconds) until it has converged.

    ``expected``: node -> the prefixes its kernel should hold (from the solver);
    without it, converged means every session established and the routes
    unchanged between two polls (with ``settle``, when a link-state daemon
    runs: every router has routes and they stayed unchanged for
    :data:`LINK_STATE_SETTLE` seconds). Raises :class:`LabPrerequisiteError` or
    :class:`LabError`; a lab that does not converge in time is returned with
    ``converged=False`` and the problems found (and left up for inspection).
    """
    check_prerequisites()
    daemons, notes = plan_routers(topo)  # before anything is made: a router that cannot run is refused
    note = progress or (lambda phase, done, total: None)
    lab = topo.name
    node_names = [n.name for n in topo.nodes]  # hosts too: every node has a namespace
    t0 = time.monotonic()
    down(lab, node_names)  # a lab that is half there is cleaned first
    state: dict[str, Any] = {"lab": lab, "topology": str(topo.directory), "run_dir": str(run_dir(lab)),
                             "namespaces": [namespace(lab, n) for n in node_names], "nodes": {}}
    run_dir(lab).mkdir(parents=True, exist_ok=True)
    _save_state(state)  # before anything exists: down after a crash knows what to remove
    note("namespaces", 0, len(node_names))
    _run(["ip", "-batch", "-"], input="".join(f"netns add {namespace(lab, n)}\n" for n in node_names))
    temp_names = _create_links(topo)
    note("links", len(topo.links), len(topo.links))
    _start_daemons(topo, temp_names, state, daemons)
    note("daemons", len(node_names), len(node_names))
    routers = [n.name for n in topo.routers]
    _load_configs(lab, routers)
    note("config", len(routers), len(routers))
    ran = run_execs(topo)
    if ran:
        note("exec", ran, ran)
    report = wait_converged(topo, expected=expected, timeout=timeout, progress=note, poll=poll, settle=settle)
    report.seconds = time.monotonic() - t0
    report.notes = [*topo.notes, *notes]
    return report


def _create_links(topo: Topology) -> dict[tuple[str, str], str]:
    """A veth pair per link, created straight into its two namespaces under temporary names
    (each node's script renames them to the link ends' ports); returns those names."""
    lab = topo.name
    tag = hashlib.sha1(lab.encode()).hexdigest()[:4]
    temp_names: dict[tuple[str, str], str] = {}
    batch = []
    for i, link in enumerate(topo.links):
        ta, tb = f"lm{tag}{i:x}a", f"lm{tag}{i:x}b"
        temp_names[link.a, link.a_port] = ta
        temp_names[link.b, link.b_port] = tb
        batch.append(f"link add {ta} netns {namespace(lab, link.a)} type veth peer name {tb} "
                     f"netns {namespace(lab, link.b)}\n")
    if batch:
        _run(["ip", "-batch", "-"], input="".join(batch))
    return temp_names


def _start_daemons(topo: Topology, temp_names: Mapping[tuple[str, str], str], state: dict[str, Any],
                   daemons: Mapping[str, list[str]]) -> None:
    """Each node's files and FRR ``daemons`` (node -> names), all nodes at once; their pids go into
    ``state`` (saved)."""
    lab, directory = topo.name, run_dir(topo.name)
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    node_daemons: dict[str, list[str]] = {}
    for node in topo.bridges:
        state["nodes"][node.name] = {"namespace": namespace(lab, node.name), "role": "bridge", "pids": {}}
        procs.append((node.name, subprocess.Popen(
            ["ip", "netns", "exec", namespace(lab, node.name), "sh", "-c", bridge_script(topo, node.name, temp_names)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for node in topo.hosts:
        state["nodes"][node.name] = {"namespace": namespace(lab, node.name), "role": "host", "pids": {}}
        script = _host_script(topo, node.name, temp_names) if node.loom_host else \
            bare_host_script(topo, node.name, temp_names)
        procs.append((node.name, subprocess.Popen(
            ["ip", "netns", "exec", namespace(lab, node.name), "sh", "-c", script],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for node in topo.routers:
        ndir = directory / node.name
        ndir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(node.frr_conf, ndir / "frr.conf")
        (ndir / "vtysh.conf").write_text("service integrated-vtysh-config\n")
        for p in (ndir, ndir / "frr.conf", ndir / "vtysh.conf"):
            shutil.chown(p, user="frr", group="frr")
        node_daemons[node.name] = daemons[node.name]
        state["nodes"][node.name] = {"namespace": namespace(lab, node.name), "dir": str(ndir), "pids": {}}
        script = _node_script(lab, topo, node.name, temp_names, ndir, node_daemons[node.name])
        procs.append((node.name, subprocess.Popen(
            ["ip", "netns", "exec", namespace(lab, node.name), "sh", "-c", script],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    _save_state(state)
    failures = []
    for name, proc in procs:
        _out, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            failures.append(f"{name}: {err.strip()}")
    pid_files = [directory / n / f"{d}.pid" for n, ds in node_daemons.items() for d in ds]
    vty_files = [directory / n / f"{d}.vty" for n, ds in node_daemons.items() for d in ds]
    missing = _wait_files(pid_files + vty_files, 15.0)
    for name, ds in node_daemons.items():
        for d in ds:
            pid_file = directory / name / f"{d}.pid"
            if pid_file.exists():
                state["nodes"][name]["pids"][d] = int(pid_file.read_text().split()[0])
    _save_state(state)
    if failures or missing:
        raise LabError("lab nodes failed to start: " + "; ".join(failures + [f"{m} missing" for m in missing][:10]))


def _load_configs(lab: str, node_names: list[str]) -> None:
    """Every node's ``frr.conf`` loaded through vtysh, six nodes at a time."""
    directory = run_dir(lab)

    def load(name: str) -> str | None:
        nd = directory / name
        proc = subprocess.run(["vtysh", "--vty_socket", str(nd), "--config_dir", str(nd), "-b"],
                              capture_output=True, text=True, timeout=60)
        return None if proc.returncode == 0 else \
            f"topology.nodes.{name}.binds (its frr.conf): {proc.stdout.strip()} {proc.stderr.strip()}"

    with ThreadPoolExecutor(max_workers=6) as pool:
        errors = [e for e in pool.map(load, node_names) if e]
    if errors:
        raise LabError("FRR refused a node's configuration: " + "; ".join(errors[:5]))


def agent_socket(lab: str, node: str) -> Path:
    """Where ``node``'s device agent listens (a unix socket in the node's run directory)."""
    return run_dir(lab) / node / "agent.sock"


def lab_agent_command(node: str, node_dir: Path, *, python: str | None = None) -> list[str]:
    """The command that runs ``node``'s agent in a lab (to be run inside the node's namespace): FRR's vty
    sockets and the agent's unix socket (``agent.sock``) and state (``agent/``) in the node's directory."""
    return [python or sys.executable, "-c", "from controller.cli import main; main()", "agent",
            "--frr-dir", str(node_dir), "--listen", f"unix:{node_dir / 'agent.sock'}", "--hostname", node,
            "--state-dir", str(node_dir / "agent")]


def agents_file(lab: str) -> Path:
    """The lab's agents file, ``{node: "unix:SOCKET"}`` (what ``loom serve --agents`` reads); written
    by :func:`start_agents`, so a controller finds a lab's agents through it, not through this module."""
    return run_dir(lab) / "agents.json"


def write_agents_file(topo: Topology) -> Path:
    """Write :func:`agents_file` for every node of ``topo`` and return its path."""
    path = agents_file(topo.name)
    doc = {n.name: f"unix:{agent_socket(topo.name, n.name)}" for n in topo.routers}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def _socket_answers(sock: Path) -> bool:
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


def start_agents(topo: Topology, *, timeout: float = 60.0) -> list[str]:
    """Start a Loom device agent inside each node of the running lab whose socket does not answer.

    Each runs ``loom agent`` in the node's namespace, detached (it outlives the
    command that started it, as a switch's agent would), on the node's
    :func:`agent_socket` with its state in ``NODE/agent``; :func:`down` stops
    them with the lab (their command lines name the run directory). The lab's
    :func:`agents_file` is written for the controller. Returns the nodes whose
    agent was started; raises :class:`LabError` when one does not answer within
    ``timeout`` seconds.
    """
    base = run_dir(topo.name)
    if not base.exists():
        raise LabError(f"lab {topo.name} is not running (loom lab up {topo.directory})")
    started = []
    for node in topo.routers:
        ndir = base / node.name
        sock = agent_socket(topo.name, node.name)
        if _socket_answers(sock):
            continue
        sock.unlink(missing_ok=True)
        with open(ndir / "agent.log", "ab") as log:
            subprocess.Popen(["ip", "netns", "exec", namespace(topo.name, node.name),
                              *lab_agent_command(node.name, ndir)],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        started.append(node.name)
    deadline = time.monotonic() + timeout
    for name in started:
        while not _socket_answers(agent_socket(topo.name, name)):
            if time.monotonic() > deadline:
                raise LabError(f"the agent of {name} did not start: see {base / name / 'agent.log'}")
            time.sleep(0.1)
    write_agents_file(topo)
    return started


def _problems(obs: Observation, expected: Mapping[str, set[str]] | None) -> list[str]:
    """Why ``obs`` is not converged yet; only the expected prefixes' routes are judged."""
    out = []
    universe = set().union(*expected.values()) if expected else set()
    for name, n in sorted(obs.nodes.items()):
        if n.error:
            out.append(f"{name}: {n.error}")
        if n.daemons_alive < n.daemons:
            out.append(f"{name}: {n.daemons - n.daemons_alive} daemon(s) not running")
        down_peers = sorted(p for p, s in n.sessions.items() if s != "Established")
        if down_peers:
            out.append(f"{name}: sessions not established with {', '.join(down_peers)}")
        if expected is not None:
            want = expected.get(name, set())
            have = set(n.routes) & universe  # e.g. IS-IS also carries the links' own subnets
            if want - have:
                out.append(f"{name}: missing {', '.join(sorted(want - have))}")
            if have - want:
                out.append(f"{name}: unexpected {', '.join(sorted(have - want))}")
    return out


#: without expected routes, how long a lab running a link-state protocol must stay unchanged to count as
#: converged, once every router has learnt a route (its adjacencies come up over hellos, with no session
#: state to wait for); FRR's SPF throttle holds a recomputation up to 5 s by default
LINK_STATE_SETTLE = 5.0


def _settle_seconds(lab: str) -> float:
    state = _load_state(lab) or {}
    daemons = {d for node in state.get("nodes", {}).values() for d in node.get("pids", {})}
    return LINK_STATE_SETTLE if daemons & {"ospfd", "ospf6d", "isisd", "ripd", "fabricd"} else 0.0


def wait_converged(topo: Topology, *, expected: Mapping[str, Iterable[str]] | None = None,
                   timeout: float = 60.0, progress: ProgressFn | None = None, poll: float = 0.5,
                   settle: bool = False) -> UpReport:
    """Poll until converged (see :func:`up`) or ``timeout`` seconds have passed."""
    note = progress or (lambda phase, done, total: None)
    want = {k: set(v) for k, v in expected.items()} if expected is not None else None
    names = [n.name for n in topo.routers]
    want_routes = sum(len(v) for v in want.values()) if want is not None else None
    t0 = time.monotonic()
    previous, since = "", t0
    settle_s = _settle_seconds(topo.name) if want is None and settle else 0.0
    obs = observe(topo.name, names)
    while True:
        problems = _problems(obs, want)
        established, total = obs.sessions
        routes = obs.route_count if want is None else sum(
            len(set(n.routes) & want.get(k, set())) for k, n in obs.nodes.items())
        note("converging", established + routes, total + (want_routes or routes))
        sig = obs.signature()
        if sig != previous:
            since = time.monotonic()
        learning = settle_s and len(names) > 1 and not all(n.routes for n in obs.nodes.values())
        if not problems and (want is not None or (sig == previous and not learning
                                                  and time.monotonic() - since >= settle_s)):
            converged = True
            break
        previous = sig
        if time.monotonic() - t0 > timeout:
            converged = False
            break
        time.sleep(poll)
        obs = observe(topo.name, names)
    routes = obs.route_count if want is None else sum(
        len(set(n.routes) & want.get(k, set())) for k, n in obs.nodes.items())
    return UpReport(topo.name, len(names), len(topo.links), time.monotonic() - t0, converged, obs.sessions,
                    routes, want_routes, obs, problems if not converged else [], len(topo.hosts))


def status(topo: Topology) -> Observation | None:
    """The lab's nodes, sessions and routes, or ``None`` when it is not up."""
    state = _load_state(topo.name)
    if state is None:
        return None
    return observe(topo.name, [n.name for n in topo.routers])


def memory_per_node(lab: str) -> dict[str, int]:
    """Resident memory (bytes) of each node's daemons, summed per node."""
    state = _load_state(lab) or {}
    out: dict[str, int] = {}
    for name, info in state.get("nodes", {}).items():
        if info.get("role") in ("host", "bridge"):
            continue
        total = 0
        for pid in info.get("pids", {}).values():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                continue
        out[name] = total
    return out
