"""``loom lab``: containerlab labs of FRR routers, realized in network namespaces.

This module owns the lab commands (DESIGN.md, contract 3): ``gen`` writes a
lab directory from an intent; ``up`` brings a lab up with :mod:`labs.runner`
and waits until BGP has converged to what the solver expects (every session
established, every prefix the solver routes in every node's kernel);
``status`` shows nodes, sessions and route counts; ``down`` removes
everything; ``routes`` prints the kernel routes of every node as
``{"NODE": {"PREFIX": [{"port": "eth1", "weight": 1}, ...]}}`` (IPv4 and
IPv6 prefixes alike); ``hosts`` lists a lab's host nodes as ``{"HOST": {"netns",
"tor", "address", "prefix"}}``, with ``address6`` and ``prefix6`` on hosts with
IPv6 (:func:`hosts_document`),
and ``traffic`` sends a demand matrix from them as UDP (DESIGN.md, Telemetry;
:mod:`labs.traffic`). Bad input (not a containerlab file, a missing bind file,
a bad matrix, not root, no FRR) exits 2.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from controller.cli.common import EXIT_FAIL, app, console, die, emit_json, err_console, read_intent
from controller.model.errors import InvalidIntent, LoomError
from controller.model.intent import load_intent
from labs import runner
from labs.clab import InvalidLab, Topology, load_topology, topology_path
from labs.gen import generate_lab
from labs.runner import LabError, LabPrerequisiteError, Observation, ProgressFn, UnrunnableLab
from labs.traffic import MAX_FLOWS, InvalidMatrix, TrafficOptions, lab_hosts, load_matrix, send

__all__ = ["expected_prefixes", "hosts_document", "lab_app"]

lab_app = typer.Typer(help="Labs of FRR routers from containerlab topologies, run in network namespaces.",
                      no_args_is_help=True)
app.add_typer(lab_app, name="lab")

LabArg = Annotated[Path, typer.Argument(help=(
    "a lab directory (its topology.clab.yml, or its one *.clab.yml) or a containerlab topology file"))]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def expected_prefixes(lab_dir: Path) -> dict[str, set[str]] | None:
    """Per node, the prefixes the solver routes there, from the lab's
    ``intent.yaml`` (``None`` when the lab has no intent)."""
    from solver.core.routing import next_hops  # lazy: the solver package (numpy, scipy: ~0.4 s), for `lab up`

    path = lab_dir / "intent.yaml"
    if not path.exists():
        return None
    intent = load_intent(path)
    out: dict[str, set[str]] = {d.name: set() for d in intent.devices}
    for prefix, devices in next_hops(intent).items():
        for device, hops in devices.items():
            if hops:
                out[device].add(prefix)
    return out


def _topology(lab: Path, as_json: bool) -> Topology:
    try:
        return load_topology(lab)
    except InvalidLab as exc:
        die(str(exc), as_json=as_json, errors=[e.as_dict() for e in exc.errors])


@contextmanager
def _progress(as_json: bool) -> Iterator[ProgressFn]:
    """Rich progress on a terminal, plain lines on stderr otherwise."""
    if not as_json and console.is_terminal:
        with Progress(TextColumn("{task.description:<11}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            tasks: dict[str, Any] = {}

            def show(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    tasks[phase] = bar.add_task(phase, total=max(total, 1))
                bar.update(tasks[phase], completed=done, total=max(total, 1))

            yield show
        return
    last: dict[str, tuple[int, int]] = {}

    def plain(phase: str, done: int, total: int) -> None:
        if last.get(phase) == (done, total):
            return
        last[phase] = (done, total)
        sys.stderr.write(f"  {phase}: {done}/{total}\n")
        sys.stderr.flush()

    yield plain


@lab_app.command("gen")
def gen(
    intent_path: Annotated[Path, typer.Argument(metavar="INTENT", help="the intent document (YAML or JSON)")],
    out: Annotated[Path, typer.Option("--out", help="the lab directory to write (labs/<name>)")],
    name: Annotated[str | None, typer.Option(help="lab name (default: the directory's name)")] = None,
    hosts: Annotated[int, typer.Option("--hosts", min=0, max=64,
                                       help="host nodes behind each host port of a ToR (0: none)")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Write a containerlab lab for INTENT: topology.clab.yml, FRR configs, daemons, intent.yaml (and hosts)."""
    intent = read_intent(intent_path, as_json=as_json)
    try:
        path = generate_lab(intent, out, name=name, hosts=hosts)
    except (OSError, ValueError) as exc:
        die(f"cannot write the lab: {exc}", as_json=as_json)
    topo = load_topology(path)
    routers = len(topo.routers)
    if as_json:
        emit_json({"lab": topo.name, "topology": str(path), "nodes": routers, "hosts": len(topo.hosts),
                   "links": len(topo.links)})
    else:
        console.print(f"wrote {path}: lab {topo.name}, {routers} nodes, {len(topo.hosts)} hosts, "
                      f"{len(topo.links)} links")


@lab_app.command("up")
def up(
    lab: LabArg,
    timeout: Annotated[float, typer.Option(
        help="seconds to wait for the routing to converge (OSPF on broadcast links with FRR's default 40 s dead "
             "interval elects its routers only after that wait)")] = 120.0,
    agents: Annotated[bool, typer.Option("--agents/--no-agents",
                                         help="start a Loom device agent per node (a unix socket)")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Bring a lab up in network namespaces, wait until BGP has converged, start the device agents."""
    topo = _topology(lab, as_json)
    lab_dir = topology_path(lab).parent
    try:
        expected = expected_prefixes(lab_dir)
    except InvalidIntent as exc:
        die(f"{lab_dir / 'intent.yaml'}: invalid intent", as_json=as_json, errors=[e.as_dict() for e in exc.errors])
    if not as_json:
        hosts = f", {len(topo.hosts)} hosts" if topo.hosts else ""
        console.print(f"lab {topo.name}: {len(topo.routers)} nodes{hosts}, {len(topo.links)} links, "
                      f"namespaces loom-{topo.name}-*", highlight=False, soft_wrap=True)
    try:
        with _progress(as_json) as show:
            report = runner.up(topo, expected=expected, timeout=timeout, progress=show, settle=expected is None)
    except LabPrerequisiteError as exc:
        die(str(exc), as_json=as_json)
    except UnrunnableLab as exc:  # refused before anything was made
        die(str(exc), as_json=as_json,
            errors=[{"loc": e.partition(": ")[0], "msg": e.partition(": ")[2]} for e in exc.errors])
    except LabError as exc:
        runner.down(topo.name, [n.name for n in topo.nodes])
        die(str(exc), code=EXIT_FAIL, as_json=as_json)
    doc = report.to_document()
    doc["agents"] = 0
    if agents and report.converged:
        try:
            doc["agents"] = len(runner.start_agents(topo))
        except LabError as exc:
            runner.down(topo.name, [n.name for n in topo.nodes])
            die(str(exc), code=EXIT_FAIL, as_json=as_json)
    doc["memory_mb_per_node"] = round(
        sum(runner.memory_per_node(topo.name).values()) / max(1, len(topo.routers)) / 2**20, 1)
    if as_json:
        emit_json(doc)
    else:
        est, total = report.sessions
        routes = (f"{report.routes}/{report.expected_routes} routes as the solver expects"
                  if report.expected_routes is not None else f"{report.routes} routes")
        verdict = "converged" if report.converged else "NOT converged"
        sessions = f"{est}/{total} BGP sessions established, " if total else ""
        console.print(f"{verdict} in {report.seconds:.1f} s: {sessions}{routes}",
                      highlight=False, soft_wrap=True)
        console.print(f"memory: {doc['memory_mb_per_node']} MB per node (RSS of its FRR daemons)",
                      highlight=False, soft_wrap=True)
        for note in report.notes:
            console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
        if doc["agents"]:
            console.print(f"device agents: {doc['agents']} (unix:{runner.agent_socket(topo.name, '<node>')})",
                          highlight=False, markup=False, soft_wrap=True)
        for problem in report.problems[:20]:
            err_console.print(f"  {problem}", highlight=False, markup=False, soft_wrap=True)
        if report.converged:
            console.print(f"next: loom lab status|routes|down {lab}", highlight=False, markup=False, soft_wrap=True)
    if not report.converged:
        raise typer.Exit(EXIT_FAIL)


@lab_app.command("down")
def down(lab: LabArg, as_json: JsonOpt = False) -> None:
    """Stop every daemon of a lab, delete its namespaces and files (safe to repeat)."""
    topo = _topology(lab, as_json)
    try:
        runner.check_prerequisites()
        report = runner.down(topo.name, [n.name for n in topo.nodes])
    except LabPrerequisiteError as exc:
        die(str(exc), as_json=as_json)
    except LoomError as exc:
        die(str(exc), code=EXIT_FAIL, as_json=as_json)
    if as_json:
        emit_json(report.to_document())
    else:
        console.print(f"lab {topo.name} down: {report.stopped} daemons stopped, {report.namespaces} namespaces "
                      f"deleted ({report.seconds:.1f} s)", highlight=False)


def _observe(lab: Path, as_json: bool) -> tuple[Topology, Observation]:
    topo = _topology(lab, as_json)
    try:
        runner.check_prerequisites()
        obs = runner.status(topo)
    except LabPrerequisiteError as exc:
        die(str(exc), as_json=as_json)
    if obs is None:
        die(f"lab {topo.name} is not up (loom lab up {lab})", code=EXIT_FAIL, as_json=as_json)
    return topo, obs


@lab_app.command("status")
def status(lab: LabArg, as_json: JsonOpt = False) -> None:
    """Nodes, BGP sessions and route counts of a running lab."""
    topo, obs = _observe(lab, as_json)
    if as_json:
        emit_json({"lab": topo.name, "nodes": {
            name: {"namespace": runner.namespace(topo.name, name), "daemons": n.daemons,
                   "daemons_running": n.daemons_alive, "sessions": n.sessions, "routes": len(n.routes),
                   "error": n.error}
            for name, n in obs.nodes.items()}})
        return
    table = Table(title=f"lab {topo.name}")
    for col in ("node", "namespace", "daemons", "BGP sessions", "routes"):
        table.add_column(col, justify="right" if col in ("daemons", "BGP sessions", "routes") else "left")
    for name, n in obs.nodes.items():
        table.add_row(name, runner.namespace(topo.name, name), f"{n.daemons_alive}/{n.daemons}",
                      f"{n.established}/{len(n.sessions)}", str(len(n.routes)))
    console.print(table)
    est, total = obs.sessions
    console.print(f"{len(obs.nodes)} nodes, {est}/{total} sessions established, {obs.route_count} routes",
                  highlight=False)


@lab_app.command("routes")
def routes(lab: LabArg, as_json: JsonOpt = False) -> None:
    """Every node's kernel routes with next-hop ports and weights."""
    _topo, obs = _observe(lab, as_json)
    data = obs.routes()
    if as_json:
        emit_json(data)
        return
    table = Table()
    for col in ("node", "prefix", "next hops (port weight)"):
        table.add_column(col)
    for node, prefixes in data.items():
        for prefix, hops in prefixes.items():
            table.add_row(node, prefix, ", ".join(f"{h['port']} {h['weight']}" for h in hops))
    console.print(table)


def hosts_document(topo: Topology) -> dict[str, dict[str, str]]:
    """``loom lab hosts --json`` (DESIGN.md, Telemetry): per host, ``netns``, ``tor``, ``address`` and
    ``prefix``, plus ``address6`` and ``prefix6`` when the host has IPv6. ``address`` and ``prefix`` are
    its IPv4 ones, or on an IPv6-only host its IPv6 ones (then the same as ``address6`` and ``prefix6``):
    every host has them, as before IPv6."""
    nodes = topo.node_map
    out = {}
    for name, h in lab_hosts(topo).items():
        doc = h.to_document()
        spec = nodes[name].host
        if spec is not None and spec.ip6 is not None and spec.prefix6 is not None:
            doc |= {"address6": spec.ip6, "prefix6": spec.prefix6}
        out[name] = doc
    return out


@lab_app.command("hosts")
def hosts(lab: LabArg, as_json: JsonOpt = False) -> None:
    """The lab's hosts: namespace, ToR, addresses and prefixes of each family (from the topology file)."""
    found = hosts_document(_topology(lab, as_json))
    if as_json:
        emit_json(found)
        return
    table = Table()
    six = any("address6" in h for h in found.values())
    for col in ("host", "namespace", "ToR", "address", "prefix", *(("IPv6 address", "IPv6 prefix") if six else ())):
        table.add_column(col)
    for name, h in found.items():
        table.add_row(name, h["netns"], h["tor"], h["address"], h["prefix"],
                      *((h.get("address6", ""), h.get("prefix6", "")) if six else ()))
    console.print(table)
    console.print(f"{len(found)} hosts", highlight=False)


@lab_app.command("traffic")
def traffic(
    lab: LabArg,
    matrix: Annotated[Path, typer.Option("--matrix", help="demands [{from: TOR, to: PREFIX, gbps: G}] (YAML/JSON)")],
    duration: Annotated[float, typer.Option("--duration", min=0.1, max=86400.0, help="seconds of traffic")] = 10.0,
    flows: Annotated[int, typer.Option("--flows", min=1, max=MAX_FLOWS, help="UDP flows per demand")] = 32,
    packet_bytes: Annotated[int, typer.Option("--packet-bytes", min=64, max=1500,
                                              help="IP packet size (headers included)")] = 1300,
    period_s: Annotated[float, typer.Option("--period-s", min=0.0, max=3600.0, help=(
        "send on/off: busy --duty of every period (0: steady); a demand's gbps is its mean"))] = 0.0,
    duty: Annotated[float, typer.Option("--duty", min=0.01, max=1.0, help="the busy share of each period")] = 0.5,
    as_json: JsonOpt = False,
) -> None:
    """Send a demand matrix as UDP from the lab's hosts for --duration seconds; report what each demand sent.
    SIGINT or SIGTERM stops the senders at once (the report then says stopped_early)."""
    topo = _topology(lab, as_json)
    options = TrafficOptions(packet_bytes=packet_bytes, flows=flows, period_s=period_s,
                             duty=duty if period_s > 0 else 1.0)
    try:
        demands = load_matrix(matrix, lab_hosts(topo), options)
    except InvalidMatrix as exc:
        die(str(exc), as_json=as_json, errors=[e.as_dict() for e in exc.errors])
    try:
        runner.check_prerequisites()
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        with _progress(as_json) as show:
            report = send(topo, demands, duration, options=options, progress=show, stop=stop)
    except LabPrerequisiteError as exc:
        die(str(exc), as_json=as_json)
    except LabError as exc:
        die(str(exc), code=EXIT_FAIL, as_json=as_json)
    doc = report.to_document()
    if as_json:
        emit_json(doc)
    else:
        table = Table(title=f"lab {topo.name}: {duration:g} s, {flows} flows per demand, {packet_bytes}-byte packets")
        for col in ("from", "to", "Gbit/s asked", "Gbit/s sent", "error", "packets", "senders"):
            table.add_column(col, justify="right" if col not in ("from", "to", "senders") else "left")
        for d in doc["demands"]:
            table.add_row(d["from"], d["to"], f"{d['gbps']:g}", f"{d['achieved_gbps']:.4f}",
                          f"{100 * d['error']:+.1f}%", str(d["packets"]), ", ".join(d["sources"]))
        console.print(table)
        for host, why in doc["failed"].items():
            err_console.print(f"  {host}: {why}", highlight=False, markup=False)
    if any(why != "stopped early" for why in doc["failed"].values()):
        raise typer.Exit(EXIT_FAIL)
