"""What a switch's links and sessions are doing now: the operational state its agent watches and serves.

This module owns the switch side of DESIGN.md's "Operational state": reading,
in domain values, every interface's OpenConfig ``oper-status`` and
``admin-status`` (netlink: ``IFLA_OPERSTATE`` and the ``IFF_UP`` flag) and
every BGP neighbor's ``session-state`` (bgpd over its vty socket, both address families: a neighbor is
named by its address, or by its interface when unnumbered) and every
IS-IS adjacency's ``adjacency-state`` (isisd over its vty socket: ``show isis
neighbor json``, with ``show isis hostname`` to turn the dynamic hostnames FRR
shows back into system ids) and every OSPF neighbor's ``adjacency-state`` (ospfd
over its vty socket: ``show ip ospf neighbor json``, with the area each port runs
in from the running config), and the
agent's :class:`LinkWatcher`, which reads them when the kernel says a link
changed (a netlink ``RTMGRP_LINK`` subscription: no polling of the interfaces
while nothing happens) and every ``interval_s`` otherwise (bgpd's sessions, and
the interfaces again as a safety net), and

* keeps the latest :class:`OperSnapshot`, which the agent's gNMI service serves
  (``ON_CHANGE`` subscriptions see a change within one interval), and
* calls back when an interface's oper-status changes, so that the agent
  repairs its own ``fib`` routes at once (a dead next hop dropped and the rest
  renormalized; the planned weights back when the port comes up), without
  waiting for the controller.

:class:`DryStatus` is the state of a ``--dry-frr`` agent (a simulator with no
kernel of its own): the ports its running config names, all up except those
listed, one per line, in its record directory's ``down`` file; an IS-IS (or
OSPF) adjacency on each point-to-point IS-IS (or OSPF) port of that config, up
while the port is.

isisd and ospfd forget an adjacency that goes down (``show isis neighbor`` no
longer lists it); :class:`AdjacencyMemory` keeps it, ``DOWN``, while its port is
still a circuit of the running config and no other neighbor has taken its place,
so that a subscriber sees the adjacency go down (as a BGP neighbor that lost its
session stays listed, ``IDLE`` or ``ACTIVE``) rather than vanish.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from controller.model.errors import FrrError
from southbound.device.counters import config_ports
from southbound.netlink import dump_links
from southbound.state import BgpSession
from southbound.vty import vty_run

__all__ = ["DOWN", "UP", "AdjKey", "AdjacencyMemory", "DryStatus", "KernelStatus", "LinkWatcher", "OperSnapshot",
           "OspfKey", "StatusSource", "bgp_sessions", "isis_circuits", "ospf_circuits", "parse_bgp_summary",
           "parse_isis_hostnames", "parse_isis_neighbors", "parse_ospf_neighbors", "read_bgp", "read_interfaces",
           "read_isis", "read_ospf"]

log = logging.getLogger("loom.agent.opstate")

UP, DOWN = "UP", "DOWN"
#: the kernel's operstate names as OpenConfig ``oper-status`` values
_OPER = {"UP": UP, "DOWN": DOWN, "LOWERLAYERDOWN": "LOWER_LAYER_DOWN", "NOTPRESENT": "NOT_PRESENT",
         "DORMANT": "DORMANT", "TESTING": "TESTING", "UNKNOWN": "UNKNOWN"}
#: FRR's BGP FSM state names as OpenConfig ``session-state`` values
_BGP = {"idle": "IDLE", "connect": "CONNECT", "active": "ACTIVE", "opensent": "OPENSENT",
        "openconfirm": "OPENCONFIRM", "established": "ESTABLISHED"}
#: what bgpd is asked for its sessions, and the address families of its answer that Loom reads
BGP_SUMMARY = "show bgp summary json"
BGP_FAMILIES = ("ipv4Unicast", "ipv6Unicast")
#: FRR's IS-IS adjacency states as OpenConfig ``adjacency-state`` values (anything else: ``FAILED``)
_ISIS = {"up": UP, "initializing": "INIT", "down": DOWN}
_SYSTEM_ID = re.compile(r"^[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}$")
#: FRR's OSPF neighbor states (RFC 2328 section 10.1) as OpenConfig ``OSPF_NEIGHBOR_STATE`` values
_OSPF = {"down": DOWN, "attempt": "ATTEMPT", "init": "INIT", "2-way": "TWO_WAY", "exstart": "EXSTART",
         "exchange": "EXCHANGE", "loading": "LOADING", "full": "FULL"}
#: an IS-IS adjacency: its port (OpenConfig ``interface-id``), level (``level-number``) and neighbor (``system-id``)
AdjKey = tuple[str, str, str]
#: an OSPF adjacency, in OpenConfig's order: its area (``identifier``), port (``id``) and neighbor (``router-id``)
OspfKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class OperSnapshot:
    """``interfaces[PORT]`` has ``oper-status`` and ``admin-status``; ``bgp[NEIGHBOR]`` has ``session-state``;
    ``isis[(PORT, LEVEL, SYSTEM_ID)]`` and ``ospf[(AREA, PORT, ROUTER_ID)]`` have ``adjacency-state``."""

    timestamp_ns: int = 0
    interfaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    bgp: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    isis: Mapping[AdjKey, Mapping[str, str]] = field(default_factory=dict)
    ospf: Mapping[OspfKey, Mapping[str, str]] = field(default_factory=dict)

    def down_ports(self) -> frozenset[str]:
        """The interfaces that do not forward now (any oper-status but ``UP``)."""
        return frozenset(p for p, v in self.interfaces.items() if v.get("oper-status") != UP)


class StatusSource(Protocol):
    """What the watcher reads. ``blocking``: :meth:`read` does I/O (it is run in a thread); ``interval_s``:
    how often the watcher reads it when nothing wakes it earlier."""

    blocking: bool
    interval_s: float

    def read(self) -> OperSnapshot: ...


_RTMGRP_LINK = 1


def link_events() -> socket.socket | None:
    """A non-blocking netlink socket subscribed to the kernel's link notifications (``RTMGRP_LINK``: an
    interface added, removed, or changing state), or None where netlink is not available."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    except (OSError, AttributeError):
        return None
    try:
        sock.bind((0, _RTMGRP_LINK))
        sock.setblocking(False)
    except OSError:
        sock.close()
        return None
    return sock


def drain(sock: socket.socket) -> None:
    """Read every pending message of ``sock`` (their content does not matter: the watcher reads the state;
    ENOBUFS, notifications lost, is covered by that reading too)."""
    while True:
        try:
            if not sock.recv(65536):
                return
        except OSError:
            return


def read_interfaces() -> dict[str, dict[str, str]]:
    """Every interface but ``lo``: its oper-status (the kernel's operstate) and admin-status (``IFF_UP``)."""
    return {link.name: {"oper-status": _OPER.get(link.operstate, "UNKNOWN"), "admin-status": UP if link.admin_up
                        else DOWN} for link in dump_links() if link.name != "lo"}


def parse_bgp_summary(doc: object) -> tuple[BgpSession, ...]:
    """``show bgp summary json`` (FRR 8.4: ``{"ipv4Unicast": {"peers": {NAME: {"state", "remoteAs", "pfxRcd",
    "idType"}}}, "ipv6Unicast": {...}}``, an address family only where some neighbor is active in it) as one
    session per neighbor, named as FRR names it: its address (IPv4 or IPv6), or its interface when unnumbered
    (``idType: interface``). A neighbor active in both families is one session: its prefixes received add up."""
    out: dict[str, BgpSession] = {}
    families = [doc.get(af) for af in BGP_FAMILIES] if isinstance(doc, dict) else []
    for family in families:
        peers = family.get("peers", {}) if isinstance(family, dict) else {}
        for name, p in peers.items() if isinstance(peers, dict) else ():
            if not isinstance(p, dict):
                continue
            received, key = int(p.get("pfxRcd", 0) or 0), _peer_name(str(name))
            seen = out.get(key)
            out[key] = BgpSession(key, str(p.get("state", "")), int(p.get("remoteAs", 0) or 0), received) \
                if seen is None else replace(seen, prefixes_received=seen.prefixes_received + received)
    return tuple(out[n] for n in sorted(out))


def _peer_name(name: str) -> str:
    """A neighbor's name as Loom renders it: an address in Python's canonical text (IPv6 compressed, lower case),
    an interface as it is."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def bgp_sessions(vty_dir: Path, timeout: float = 2.0) -> tuple[BgpSession, ...] | None:
    """bgpd's sessions of both address families (under ``vty_dir``): none when bgpd does not run, None when it
    did not answer."""
    sock = vty_dir / "bgpd.vty"
    if not sock.is_socket():
        return ()
    try:  # straight to bgpd: polled, and a vtysh per poll and device is CPU
        [(_, text)] = vty_run(sock, BGP_SUMMARY, timeout=timeout)
        return parse_bgp_summary(json.loads(text or "{}"))
    except (FrrError, json.JSONDecodeError, ValueError):
        return None


def read_bgp(vty_dir: Path) -> dict[str, dict[str, str]]:
    """Every BGP neighbor of bgpd (its address, or its interface when unnumbered), of either address family,
    and its session state."""
    return {s.neighbor: {"session-state": _BGP.get(s.state.lower(), "IDLE")} for s in bgp_sessions(vty_dir) or ()}


def parse_isis_hostnames(text: str) -> dict[str, str]:
    """``show isis hostname`` (FRR 8.4's text: ``LEVEL SYSTEM-ID HOSTNAME`` rows, ``*`` for the router
    itself) as hostname -> system id."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and _SYSTEM_ID.match(parts[1]):
            out[parts[2]] = parts[1]
    return out


def parse_isis_neighbors(doc: object, hostnames: Mapping[str, str]) -> dict[AdjKey, dict[str, str]]:
    """``show isis neighbor json`` (FRR 8.4: ``{"areas": [{"circuits": [{"adj", "interface", "level",
    "state"}]}]}``; ``adj`` is the neighbor's dynamic hostname when isisd knows it, else its system id) as
    adjacencies; a level-1-2 adjacency (``level`` 3) is one per level."""
    out: dict[AdjKey, dict[str, str]] = {}
    areas = doc.get("areas", []) if isinstance(doc, dict) else []
    for area in areas if isinstance(areas, list) else []:
        circuits = area.get("circuits", []) if isinstance(area, dict) else []
        for c in circuits if isinstance(circuits, list) else []:
            if not isinstance(c, dict) or not isinstance(c.get("interface"), str) or "adj" not in c:
                continue  # a circuit without an adjacency: {"circuit": 0}
            name = str(c["adj"])
            system_id = name if _SYSTEM_ID.match(name) else hostnames.get(name, name)
            state = _ISIS.get(str(c.get("state", "")).lower(), "FAILED")
            level = int(c.get("level", 0) or 0)
            for n in (1, 2):
                if level & n:
                    out[c["interface"], str(n), system_id] = {"adjacency-state": state}
    return out


def read_isis(vty_dir: Path) -> dict[AdjKey, dict[str, str]] | None:
    """Every IS-IS adjacency isisd (under ``vty_dir``) has now: none when isisd does not run, None when it
    did not answer (busy: the last reading stands, rather than every adjacency seen down for a moment)."""
    sock = vty_dir / "isisd.vty"
    if not sock.is_socket():
        return {}
    try:
        (_, neighbors), (_, hostnames) = vty_run(sock, "show isis neighbor json", "show isis hostname", timeout=2.0)
        doc = json.loads(neighbors or "{}")
    except (FrrError, json.JSONDecodeError, ValueError):
        return None
    return parse_isis_neighbors(doc, parse_isis_hostnames(hostnames))


def parse_ospf_neighbors(doc: object, areas: Mapping[str, str]) -> dict[OspfKey, dict[str, str]]:
    """``show ip ospf neighbor json`` (FRR 8.4: ``{"neighbors": {ROUTER_ID: [{"converged": "Full",
    "nbrState": "Full/-", "ifaceName": "eth1:100.64.0.0", ...}]}}``) as adjacencies, each in the area its
    port runs in (``areas``: port -> area; ``0.0.0.0`` for a port it does not name)."""
    out: dict[OspfKey, dict[str, str]] = {}
    neighbors = doc.get("neighbors", {}) if isinstance(doc, dict) else {}
    for router_id, entries in neighbors.items() if isinstance(neighbors, dict) else ():
        for n in entries if isinstance(entries, list) else []:
            if not isinstance(n, dict) or not isinstance(n.get("ifaceName"), str):
                continue
            port = n["ifaceName"].split(":", 1)[0]
            state = str(n.get("converged") or str(n.get("nbrState", "")).split("/", 1)[0])
            out[areas.get(port, "0.0.0.0"), port, str(router_id)] = {
                "adjacency-state": _OSPF.get(state.lower(), DOWN)}
    return out


def read_ospf(vty_dir: Path, areas: Mapping[str, str]) -> dict[OspfKey, dict[str, str]] | None:
    """Every OSPF adjacency ospfd (under ``vty_dir``) has now, as :func:`read_isis` for isisd."""
    sock = vty_dir / "ospfd.vty"
    if not sock.is_socket():
        return {}
    try:
        [(_, text)] = vty_run(sock, "show ip ospf neighbor json", timeout=2.0)
        doc = json.loads(text or "{}")
    except (FrrError, json.JSONDecodeError, ValueError):
        return None
    return parse_ospf_neighbors(doc, areas)


_BLOCK = re.compile(r"^interface (\S+)\n(.*?)^exit", re.M | re.S)
_PEER = re.compile(r"^ description to ([^:\s]+):", re.M)
_OSPF_AREA = re.compile(r"^ ip ospf area (\S+)$", re.M)


def isis_circuits(frr_text: str) -> dict[str, str]:
    """The point-to-point IS-IS ports of a rendered configuration (``ip router isis``, not passive): port ->
    the neighbor its description names (``to PEER:PORT``; empty when none)."""
    out: dict[str, str] = {}
    for port, body in _BLOCK.findall(frr_text):
        if " ip router isis " in body and " isis passive" not in body:
            peer = _PEER.search(body)
            out[port] = peer.group(1) if peer else ""
    return out


def ospf_circuits(frr_text: str) -> dict[str, tuple[str, str]]:
    """The point-to-point OSPF ports of a rendered configuration (``ip ospf area``, not passive): port ->
    (the neighbor its description names, or empty; its area)."""
    out: dict[str, tuple[str, str]] = {}
    for port, body in _BLOCK.findall(frr_text):
        area = _OSPF_AREA.search(body)
        if area and " ip ospf passive" not in body:
            peer = _PEER.search(body)
            out[port] = (peer.group(1) if peer else "", area.group(1))
    return out


class AdjacencyMemory:
    """Adjacencies as isisd reports them, and those it forgot (see the module docstring) as ``DOWN``: one per
    port and level, the last neighbor seen there, while that port is still a circuit."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], str] = {}  # (port, level) -> the system id last seen there

    def __call__(self, now: Mapping[AdjKey, Mapping[str, str]],
                 circuits: Iterable[str] | None = None) -> dict[AdjKey, dict[str, str]]:
        """``now`` with the forgotten adjacencies added; ``circuits``: the IS-IS ports of the running config
        (None: not known, nothing is dropped for it)."""
        ports = None if circuits is None else set(circuits)
        out = {k: dict(v) for k, v in now.items()}
        for port, level, system_id in now:
            self._last[port, level] = system_id
        for (port, level), system_id in list(self._last.items()):
            if ports is not None and port not in ports:
                del self._last[port, level]
            elif (port, level, system_id) not in out and not any(k[:2] == (port, level) for k in out):
                out[port, level, system_id] = {"adjacency-state": DOWN}
        return out


class KernelStatus:
    """The node's own state: netlink for its interfaces (every read: a link's failure is what a reaction waits
    for), bgpd, isisd and ospfd (under ``vty_dir``) for its sessions and adjacencies, asked at most every
    ``bgp_every_s`` (a summary costs a daemon a few milliseconds of CPU, and a session's state follows its
    link's anyway). :meth:`events` wakes the watcher when a link changes, so reads between are only the
    once-a-second look at the protocols. ``frr_text``: the running config, whose IS-IS and OSPF circuits
    bound what :class:`AdjacencyMemory` keeps (and name each OSPF port's area)."""

    blocking = True
    interval_s = 1.0

    def __init__(self, vty_dir: Path | None = None, clock: Callable[[], int] = time.time_ns, *,
                 bgp_every_s: float = 1.0, frr_text: Callable[[], str] | None = None):
        self.vty_dir = vty_dir
        self.clock = clock
        self.bgp_every_s = bgp_every_s
        self.frr_text = frr_text
        self._bgp: dict[str, dict[str, str]] = {}
        self._isis: dict[AdjKey, dict[str, str]] = {}
        self._ospf: dict[OspfKey, dict[str, str]] = {}
        self._memory = AdjacencyMemory()
        self._ospf_memory = AdjacencyMemory()
        self._bgp_at = float("-inf")

    def read(self) -> OperSnapshot:
        now = time.monotonic()
        if self.vty_dir is not None and now - self._bgp_at >= self.bgp_every_s:
            text = self.frr_text() if self.frr_text is not None else None
            self._bgp, self._bgp_at = read_bgp(self.vty_dir), now
            isis = read_isis(self.vty_dir)
            if isis is not None:
                self._isis = self._memory(isis, isis_circuits(text) if text is not None else None)
            self._read_ospf(self.vty_dir, ospf_circuits(text) if text is not None else None)
        return OperSnapshot(self.clock(), read_interfaces(), self._bgp, self._isis, self._ospf)

    def _read_ospf(self, vty_dir: Path, circuits: Mapping[str, tuple[str, str]] | None) -> None:
        """ospfd's adjacencies, those it forgot kept ``DOWN`` (the memory keys them by port first)."""
        ospf = read_ospf(vty_dir, {p: area for p, (_, area) in (circuits or {}).items()})
        if ospf is not None:
            kept = self._ospf_memory({(p, a, r): v for (a, p, r), v in ospf.items()}, circuits)
            self._ospf = {(a, p, r): v for (p, a, r), v in kept.items()}

    def events(self) -> socket.socket | None:
        return link_events()


class DryStatus:
    """A dry agent's state: the ports of its running config (``frr_text()``), up unless listed in ``down_file``,
    and an IS-IS adjacency (level 2, as rendered) on each of its point-to-point IS-IS ports, ``UP`` while the
    port is, else ``DOWN`` (an OSPF one on each OSPF port, ``FULL`` or ``DOWN``). A dry agent learns no system
    or router id: the neighbor is named by the hostname its port's description gives (as FRR's ``show isis
    neighbor`` names it once it knows the dynamic hostname)."""

    blocking = False
    interval_s = 0.1  # a test fails a port by writing the file: nothing notifies

    def __init__(self, frr_text: Callable[[], str], down_file: Path, clock: Callable[[], int] = time.time_ns):
        self.frr_text = frr_text
        self.down_file = down_file
        self.clock = clock
        self._ports: set[str] = set()  # every port a config named: like a kernel's, they stay when unconfigured
        self._text: str | None = None  # the config last scanned for ports (a scan per read was most of the cost)
        self._circuits: dict[str, str] = {}  # its IS-IS ports -> their neighbor
        self._ospf: dict[str, tuple[str, str]] = {}  # its OSPF ports -> their neighbor and area
        self._down: tuple[float, set[str]] = (-1.0, set())  # the down file's mtime and content

    def _down_ports(self) -> set[str]:
        try:
            mtime = self.down_file.stat().st_mtime
            if mtime != self._down[0]:
                self._down = (mtime, {ln.strip() for ln in self.down_file.read_text().splitlines() if ln.strip()})
        except OSError:
            self._down = (-1.0, set())
        return self._down[1]

    def read(self) -> OperSnapshot:
        down = self._down_ports()
        text = self.frr_text()
        if text != self._text:
            self._ports.update(config_ports(text))
            self._circuits = isis_circuits(text)
            self._ospf = ospf_circuits(text)
            self._text = text
        ports = sorted(self._ports)
        isis = {(p, "2", peer or p): {"adjacency-state": DOWN if p in down else UP}
                for p, peer in self._circuits.items()}
        ospf = {(area, p, peer or p): {"adjacency-state": DOWN if p in down else "FULL"}
                for p, (peer, area) in self._ospf.items()}
        return OperSnapshot(self.clock(), {p: {"oper-status": DOWN if p in down else UP, "admin-status": UP}
                                           for p in ports}, isis=isis, ospf=ospf)


class LinkWatcher:
    """Reads ``source`` every ``interval_s`` (the source's own by default), and at once when the source's
    ``events()`` socket (if it has one) becomes readable; keeps the latest snapshot (itself a non-blocking
    :class:`StatusSource`, what the gNMI service serves: replaced only when a state changed) and calls
    ``on_ports`` with the set of ports not up whenever it changes (and once at the start)."""

    blocking = False

    def __init__(self, source: StatusSource, *, interval_s: float | None = None,
                 on_ports: Callable[[frozenset[str]], Awaitable[None]] | None = None):
        self.source = source
        self.interval_s = interval_s if interval_s is not None else getattr(source, "interval_s", 0.1)
        self.interval_s = float(self.interval_s)
        self.on_ports = on_ports
        self.latest = OperSnapshot()
        self._down: frozenset[str] | None = None
        self._task: asyncio.Task[None] | None = None

    def read(self) -> OperSnapshot:
        return self.latest

    async def poll(self) -> OperSnapshot:
        """One reading (and the callback when the down ports changed)."""
        snap = await asyncio.to_thread(self.source.read) if self.source.blocking else self.source.read()
        if (snap.interfaces != self.latest.interfaces or snap.bgp != self.latest.bgp or snap.isis != self.latest.isis
                or snap.ospf != self.latest.ospf or not self.latest.timestamp_ns):
            self.latest = snap
        snap = self.latest
        down = snap.down_ports()
        if down != self._down:
            if self._down is not None:
                log.info("ports not up: %s", ", ".join(sorted(down)) or "none")
            self._down = down
            if self.on_ports is not None:
                try:
                    await self.on_ports(down)
                except Exception:  # noqa: BLE001 - a repair that failed is tried again at the next change
                    log.exception("reacting to a port state change failed")
                    self._down = None
        return snap

    async def start(self) -> None:
        if self._task is None:
            with contextlib.suppress(Exception):
                await self.poll()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        events = getattr(self.source, "events", None)
        sock = events() if events is not None else None
        if sock is not None:
            def readable() -> None:
                drain(sock)
                wake.set()
            loop.add_reader(sock.fileno(), readable)
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.interval_s)
                wake.clear()
                try:
                    await self.poll()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - netlink or bgpd busy for a moment: next interval
                    log.debug("reading the operational state failed", exc_info=True)
        finally:
            if sock is not None:
                loop.remove_reader(sock.fileno())
                sock.close()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
