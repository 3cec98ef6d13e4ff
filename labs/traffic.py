"""Lab traffic: a demand matrix sent as UDP by a lab's hosts.

This module owns ``loom lab hosts`` and ``loom lab traffic`` (DESIGN.md,
Telemetry). :func:`lab_hosts` lists a lab's host nodes with their namespace,
ToR, address and prefix, and (dual-stack hosts) their IPv6 address and
prefix. :func:`load_matrix` reads a matrix, a list of demands in the
intent's shape (``{from: TOR, to: PREFIX, gbps: G}``, also accepted under a
``demands:`` key), and checks it against the lab: every error is located
(``demands[1].to: ...``) and a matrix with any error is
refused whole. :func:`plan_traffic` (pure) spreads each demand over
``flows`` UDP flows, from the hosts of its ToR to the hosts in its prefix
(destination addresses and ports vary, so L4 multipath hashing spreads them;
a demand's flows have equal shares of its rate). A demand to an IPv6 prefix is
sent over IPv6, from the IPv6 addresses of its ToR's hosts to those of the
hosts in the prefix; an IPv4 one over IPv4, as before. :func:`send` runs one
:mod:`labs.udp_sender` per sending host with ``ip netns exec``, all started
for one common wall-clock instant, and collects their counts; a sender still
running after the duration and a grace period is killed by its pid. Traffic a
ToR originates itself is not host traffic: only hosts send. Rates are in the
intent's units (Gbit/s) and count IP packets (headers included), as the
switches' prefix counters do.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from controller.model.domain import Demand, canonical_prefix, prefix_version
from controller.model.errors import IntentError, InvalidIntent, LoomError
from controller.model.intent import format_loc, parse_intent_text
from labs import runner
from labs.clab import Topology

__all__ = [
    "HostInfo",
    "InvalidMatrix",
    "SenderPlan",
    "TrafficOptions",
    "TrafficReport",
    "lab_hosts",
    "load_matrix",
    "plan_traffic",
    "send",
    "validate_matrix",
]

SENDER = Path(__file__).with_name("udp_sender.py")
_DEMAND = TypeAdapter(Demand)


class InvalidMatrix(LoomError):
    """A traffic matrix that cannot be sent in this lab; ``errors`` are located."""

    def __init__(self, source: str, errors: list[IntentError]) -> None:
        self.source = source
        self.errors = errors
        super().__init__(f"{source}: invalid traffic matrix ({len(errors)} error(s))")


#: the most flows one demand may have (each takes a destination port of the hosts' sink range)
MAX_FLOWS = 1024


@dataclass(frozen=True, slots=True)
class TrafficOptions:
    """Knobs of lab traffic: ``packet_bytes`` (IP packet), ``flows`` per demand (each its own
    destination port: more flows spread more evenly over a multipath group, and leave room for fewer
    demands), destination ports from ``base_port`` (a block of ``flows`` per demand, within
    :data:`labs.runner.SINK_PORTS`), the start ``lead_s`` that lets every sender start, the
    senders' pacing ``tick_s`` and the ``grace_s`` after the duration before a sender is killed. With
    ``period_s`` (0: steady) the hosts send only ``duty`` of every period, from the common start, at
    ``gbps / duty``: a demand's rate stays its mean over whole periods (an ML job's iterations: busy
    communicating, then quiet computing)."""

    packet_bytes: int = 1300
    flows: int = 32
    base_port: int = runner.SINK_PORTS[0]
    lead_s: float = 1.0
    tick_s: float = 0.001
    grace_s: float = 10.0
    period_s: float = 0.0
    duty: float = 1.0

    def __post_init__(self) -> None:
        if not 64 <= self.packet_bytes <= 1500:
            raise ValueError(f"packet_bytes must be 64..1500, not {self.packet_bytes}")
        if not 1 <= self.flows <= MAX_FLOWS:
            raise ValueError(f"flows must be 1..{MAX_FLOWS}, not {self.flows}")
        if self.period_s < 0 or not 0 < self.duty <= 1:
            raise ValueError(f"period_s must be >= 0 and duty in (0, 1], not {self.period_s} and {self.duty}")

    @property
    def max_demands(self) -> int:
        return (runner.SINK_PORTS[1] + 1 - self.base_port) // self.flows


@dataclass(frozen=True, slots=True)
class HostInfo:
    """A host of a lab: the DESIGN.md document of ``loom lab hosts`` is :meth:`to_document`
    (``address6`` and ``prefix6``, a dual-stack host's IPv6 address and canonical prefix, only when it has one)."""

    name: str
    netns: str
    tor: str
    address: str
    prefix: str
    address6: str | None = None
    prefix6: str | None = None

    def to_document(self) -> dict[str, str]:
        doc = {"netns": self.netns, "tor": self.tor, "address": self.address, "prefix": self.prefix}
        if self.address6 is not None and self.prefix6 is not None:
            doc |= {"address6": self.address6, "prefix6": self.prefix6}
        return doc

    def address_in(self, prefix: str) -> str | None:
        """The host's address in ``prefix`` (a canonical prefix of either family), if it lives there."""
        if prefix == self.prefix:
            return self.address
        return self.address6 if prefix == self.prefix6 else None


def lab_hosts(topo: Topology) -> dict[str, HostInfo]:
    """The lab's hosts by name, from its topology file (the lab need not be up): Loom's hosts, and
    those of another containerlab file whose ``exec`` gives an address and that have one link (to
    their router, the ``tor``)."""
    out = {}
    for node in topo.hosts:
        if node.host is None or len(topo.ports(node.name)) != 1:
            continue  # validated by labs.clab for Loom's hosts; another host may have no address of its own
        out[node.name] = HostInfo(node.name, runner.namespace(topo.name, node.name), topo.attachment(node.name)[0],
                                  node.host.ip, node.host.prefix)
    return with_namespace_ipv6(out, {n.name: n.host.interface for n in topo.hosts if n.host is not None})


def with_namespace_ipv6(hosts: Mapping[str, HostInfo], interfaces: Mapping[str, str]) -> dict[str, HostInfo]:
    """``hosts``, those without an IPv6 address given one from their namespace when it exists (a running
    dual-stack lab): the first global IPv6 address on the host's interface (``interfaces[host]``)."""
    out = dict(hosts)
    missing = {n for n, h in hosts.items() if h.address6 is None and n in interfaces}
    if not missing:
        return out
    up = runner.existing_namespaces()
    for name in sorted(missing):
        h = hosts[name]
        if h.netns in up and (found := namespace_ipv6(h.netns, interfaces[name])) is not None:
            out[name] = HostInfo(h.name, h.netns, h.tor, h.address, h.prefix, *found)
    return out


def namespace_ipv6(netns: str, interface: str) -> tuple[str, str] | None:
    """The first global IPv6 address (and its canonical prefix) on ``interface`` in ``netns``, if any."""
    proc = subprocess.run(["ip", "netns", "exec", netns, "ip", "-j", "-6", "addr", "show", "dev", interface,
                           "scope", "global"], capture_output=True, text=True, timeout=10)
    try:
        links = json.loads(proc.stdout or "[]") if proc.returncode == 0 else []
    except ValueError:
        return None
    for link in links:
        for a in link.get("addr_info", []):
            if a.get("family") == "inet6" and "local" in a and "prefixlen" in a:
                iface = ipaddress.IPv6Interface(f"{a['local']}/{a['prefixlen']}")
                return str(iface.ip), str(iface.network)
    return None


# -- the matrix --------------------------------------------------------------------------------


def load_matrix(path: Path | str, hosts: Mapping[str, HostInfo], options: TrafficOptions | None = None,
                ) -> tuple[Demand, ...]:
    """Read a matrix file (YAML or JSON) and :func:`validate_matrix` it; raises :class:`InvalidMatrix`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidMatrix(str(path), [IntentError("", f"cannot read {path}: {exc.strerror}")]) from None
    try:
        doc = parse_intent_text(text, "json" if path.suffix.lower() == ".json" else None)
    except InvalidIntent as exc:
        raise InvalidMatrix(str(path), exc.errors) from None
    return validate_matrix(doc, hosts, options, source=str(path))


def validate_matrix(doc: Any, hosts: Mapping[str, HostInfo], options: TrafficOptions | None = None, *,
                    source: str = "matrix") -> tuple[Demand, ...]:
    """The demands of ``doc`` (a list, or a mapping with only ``demands``), each shaped as an
    intent's demand, sent from a ToR with hosts to a prefix with hosts, at most once per pair.

    >>> h = {"h0": HostInfo("h0", "ns", "tor-0", "10.0.0.10", "10.0.0.0/24")}
    >>> validate_matrix([{"from": "tor-0", "to": "10.0.0.0/24", "gbps": 0.01}], h)[0].gbps
    0.01
    >>> validate_matrix([{"from": "tor-9", "to": "10.0.0.0/24", "gbps": 1}], h)
    Traceback (most recent call last):
    ...
    labs.traffic.InvalidMatrix: matrix: invalid traffic matrix (1 error(s))
    """
    options = options or TrafficOptions()
    errors: list[IntentError] = []
    if isinstance(doc, dict) and set(doc) == {"demands"}:
        doc = doc["demands"]
    if not isinstance(doc, list) or not doc:
        raise InvalidMatrix(source, [IntentError("", "a traffic matrix is a non-empty list of demands "
                                                     "{from: TOR, to: PREFIX, gbps: G}")])
    tors = sorted({h.tor for h in hosts.values()})
    prefixes = sorted({h.prefix for h in hosts.values()} | {h.prefix6 for h in hosts.values() if h.prefix6},
                      key=lambda p: (":" in p, p))
    demands: list[Demand] = []
    first: dict[tuple[str, str], int] = {}
    for i, item in enumerate(doc):
        try:
            dm = _DEMAND.validate_python(item)
        except ValidationError as exc:
            errors += [IntentError(format_loc(("demands", i, *e["loc"])), _message(e)) for e in exc.errors()]
            continue
        if dm.from_ not in tors:
            errors.append(IntentError(f"demands[{i}].from", f"'{dm.from_}' is not a ToR with hosts in this lab "
                                                            f"({', '.join(tors) or 'the lab has no hosts'})"))
        if dm.to not in prefixes:
            errors.append(IntentError(f"demands[{i}].to", f"no host lives in {dm.to} "
                                                          f"(prefixes with hosts: {', '.join(prefixes) or 'none'})"))
        elif prefix_version(dm.to) == 6 and dm.from_ in tors and not any(
                h.tor == dm.from_ and h.address6 for h in hosts.values()):
            errors.append(IntentError(f"demands[{i}].from", f"no host of '{dm.from_}' has an IPv6 address "
                                                            f"to send to {dm.to} from"))
        if (dm.from_, dm.to) in first:
            errors.append(IntentError(f"demands[{i}]", f"duplicate demand from '{dm.from_}' to {dm.to} "
                                                       f"(first at demands[{first[dm.from_, dm.to]}])"))
        first.setdefault((dm.from_, dm.to), i)
        demands.append(dm)
    if len(doc) > options.max_demands:
        errors.append(IntentError("demands", f"{len(doc)} demands: at most {options.max_demands} "
                                             "(a block of UDP ports each)"))
    if errors:
        raise InvalidMatrix(source, errors)
    return tuple(demands)


def _message(err: Mapping[str, Any]) -> str:
    if err.get("type") == "extra_forbidden":
        return "unknown field"
    if err.get("type") == "missing":
        return "required field missing"
    return str(err.get("msg", "invalid")).removeprefix("Value error, ")


# -- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SenderPlan:
    """What one host sends: streams of ``{"demand", "bps", "flows": [[address, port], ...]}``."""

    host: str
    netns: str
    streams: tuple[dict[str, Any], ...]


def plan_traffic(demands: tuple[Demand, ...], hosts: Mapping[str, HostInfo],
                 options: TrafficOptions | None = None) -> dict[str, SenderPlan]:
    """The senders for ``demands`` (pure): demand ``d``'s flow ``f`` goes from the ``f``-th host of its
    ToR (round robin) to the next host of its prefix, on port ``base_port + d * flows + f``;
    each flow carries ``gbps / flows``. A demand to an IPv6 prefix goes from the ToR's hosts that have
    an IPv6 address to the IPv6 addresses of the hosts in the prefix (its flows name IPv6 addresses,
    so the sender sends them over IPv6).

    >>> h = {"a": HostInfo("a", "ns-a", "t0", "10.0.0.10", "10.0.0.0/24"),
    ...      "b": HostInfo("b", "ns-b", "t1", "10.0.1.10", "10.0.1.0/24")}
    >>> p = plan_traffic((Demand.model_validate({"from": "t0", "to": "10.0.1.0/24", "gbps": 0.032}),), h)
    >>> s = p["a"].streams[0]; (s["bps"], len(s["flows"]), s["flows"][0])
    (32000000.0, 32, ['10.0.1.10', 40000])
    """
    options = options or TrafficOptions()
    streams: dict[str, list[dict[str, Any]]] = {}
    for d, dm in enumerate(demands):
        if dm.gbps <= 0:
            continue
        to = canonical_prefix(dm.to)
        v6 = prefix_version(to) == 6
        sources = sorted(n for n, h in hosts.items() if h.tor == dm.from_ and (h.address6 or not v6))
        targets = sorted((a for h in hosts.values() if (a := h.address_in(to)) is not None),
                         key=ipaddress.ip_address)
        if not sources or not targets:
            continue  # validate_matrix refuses such a demand
        flows: dict[str, list[list[Any]]] = {s: [] for s in sources}
        for f in range(options.flows):
            src = sources[f % len(sources)]
            dst = targets[(f // len(sources) + f % len(sources)) % len(targets)]
            flows[src].append([dst, options.base_port + d * options.flows + f])
        for src, fl in flows.items():
            if fl:
                streams.setdefault(src, []).append(
                    {"demand": d, "bps": dm.gbps * 1e9 * len(fl) / options.flows, "flows": fl})
    return {h: SenderPlan(h, hosts[h].netns, tuple(s)) for h, s in sorted(streams.items())}


# -- sending -----------------------------------------------------------------------------------


@dataclass
class TrafficReport:
    """Per demand what was sent; ``achieved_gbps`` is bytes over the duration."""

    lab: str
    duration_s: float
    options: TrafficOptions
    demands: tuple[Demand, ...]
    senders: dict[str, SenderPlan]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> the sender's counts
    failed: dict[str, str] = field(default_factory=dict)  # host -> why (killed, exit status)
    seconds: float = 0.0
    stopped_early: bool = False

    def demand_totals(self) -> list[dict[str, Any]]:
        totals: list[dict[str, Any]] = [
            {"from": dm.from_, "to": dm.to, "gbps": dm.gbps, "sources": [], "packets": 0, "bytes": 0, "errors": 0}
            for dm in self.demands]
        for host, plan in self.senders.items():
            for s in plan.streams:
                totals[s["demand"]]["sources"].append(host)
        for res in self.results.values():
            for s in res.get("streams", []):
                t = totals[s["demand"]]
                t["packets"] += s["packets"]
                t["bytes"] += s["bytes"]
                t["errors"] += s["errors"]
        for t in totals:
            t["achieved_gbps"] = round(t["bytes"] * 8 / self.duration_s / 1e9, 6)
            t["error"] = round(t["achieved_gbps"] / t["gbps"] - 1, 4) if t["gbps"] else 0.0
        return totals

    def to_document(self) -> dict[str, Any]:
        return {"lab": self.lab, "duration_s": self.duration_s, "packet_bytes": self.options.packet_bytes,
                "flows_per_demand": self.options.flows, "senders": sorted(self.senders),
                "demands": self.demand_totals(), "failed": self.failed, "seconds": round(self.seconds, 2),
                "stopped_early": self.stopped_early}


ProgressFn = Callable[[str, int, int], None]


def send(topo: Topology, demands: tuple[Demand, ...], duration: float, *, options: TrafficOptions | None = None,
         progress: ProgressFn | None = None, stop: threading.Event | None = None) -> TrafficReport:
    """Send ``demands`` from the hosts of the running lab for ``duration`` seconds (see the module docstring);
    setting ``stop`` ends the senders early (by their pids; the report says ``stopped_early``).

    Raises :class:`labs.runner.LabError` when the lab is not up or a sender cannot start.
    """
    options = options or TrafficOptions()
    note = progress or (lambda phase, done, total: None)
    hosts = lab_hosts(topo)
    missing = sorted(set(h.netns for h in hosts.values()) - runner.existing_namespaces())
    if not hosts or missing:
        raise runner.LabError(f"lab {topo.name} is not up with its hosts"
                              + (f" (no namespace {', '.join(missing[:3])})" if missing else ""))
    plans = plan_traffic(demands, hosts, options)
    report = TrafficReport(topo.name, duration, options, demands, plans)
    workdir = runner.run_dir(topo.name) / "traffic"
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    start_at = time.time() + options.lead_s
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for host, plan in plans.items():
            spec = workdir / f"{host}.json"
            spec.write_text(json.dumps({"start_at": start_at, "duration": duration, "tick_s": options.tick_s,
                                        "packet_bytes": options.packet_bytes, "streams": list(plan.streams),
                                        "period_s": options.period_s, "duty": options.duty}))
            procs[host] = subprocess.Popen(["ip", "netns", "exec", plan.netns, sys.executable, str(SENDER), str(spec)],
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _collect(procs, report, start_at + duration + options.grace_s, start_at, duration, note, stop)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    report.seconds = time.monotonic() - t0
    return report


def _collect(procs: dict[str, subprocess.Popen[str]], report: TrafficReport, deadline: float, start_at: float,
             duration: float, note: ProgressFn, stop: threading.Event | None = None) -> None:
    """Wait for the senders (progress in tenths of the duration), kill those past ``deadline``, read their counts."""
    pending = dict(procs)
    while pending and time.time() < deadline:
        if stop is not None and stop.is_set():
            report.stopped_early = True
            for host, proc in pending.items():
                proc.kill()
                proc.wait()
                report.failed[host] = "stopped early"
            return
        note("sending", int(10 * min(max(time.time() - start_at, 0), duration) / duration), 10)
        for host, proc in list(pending.items()):
            if proc.poll() is not None:
                del pending[host]
        time.sleep(0.1)
    for host, proc in pending.items():
        proc.kill()  # by its pid: ip netns exec runs the sender in its own process
        proc.wait()
        report.failed[host] = "killed after the duration and grace period"
    note("sending", 10, 10)
    for host, proc in procs.items():
        out, err = proc.communicate()
        if host in report.failed:
            continue
        if proc.returncode != 0:
            report.failed[host] = f"exit status {proc.returncode}: {err.strip()[-300:]}"
            continue
        try:
            report.results[host] = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            report.failed[host] = f"no counts: {out.strip()[-200:]} {err.strip()[-200:]}"
