"""What a switch's links and sessions are doing now: the operational state its agent watches and serves.

This module owns the switch side of DESIGN.md's "Operational state": reading,
in domain values, every interface's OpenConfig ``oper-status`` and
``admin-status`` (netlink: ``IFLA_OPERSTATE`` and the ``IFF_UP`` flag) and
every BGP neighbor's ``session-state`` (bgpd over its vty socket), and the
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
listed, one per line, in its record directory's ``down`` file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from controller.model.errors import FrrError
from southbound.device.counters import config_ports
from southbound.device.vty import vty_run

__all__ = ["DOWN", "UP", "DryStatus", "KernelStatus", "LinkWatcher", "OperSnapshot", "StatusSource",
           "read_bgp", "read_interfaces"]

log = logging.getLogger("loom.agent.opstate")

UP, DOWN = "UP", "DOWN"
#: the kernel's operstate names as OpenConfig ``oper-status`` values
_OPER = {"UP": UP, "DOWN": DOWN, "LOWERLAYERDOWN": "LOWER_LAYER_DOWN", "NOTPRESENT": "NOT_PRESENT",
         "DORMANT": "DORMANT", "TESTING": "TESTING", "UNKNOWN": "UNKNOWN"}
#: FRR's BGP FSM state names as OpenConfig ``session-state`` values
_BGP = {"idle": "IDLE", "connect": "CONNECT", "active": "ACTIVE", "opensent": "OPENSENT",
        "openconfirm": "OPENCONFIRM", "established": "ESTABLISHED"}
_IFF_UP = 1


@dataclass(frozen=True, slots=True)
class OperSnapshot:
    """``interfaces[PORT]`` has ``oper-status`` and ``admin-status``; ``bgp[NEIGHBOR]`` has ``session-state``."""

    timestamp_ns: int = 0
    interfaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    bgp: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

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
    # lazy: pyroute2 costs 0.4 s to import; only an agent beside a real kernel reads netlink (--dry-frr never)
    from pyroute2 import IPRoute

    out: dict[str, dict[str, str]] = {}
    with IPRoute() as ipr:
        for link in ipr.get_links():
            name = str(link.get_attr("IFLA_IFNAME"))
            if name == "lo":
                continue
            oper = _OPER.get(str(link.get_attr("IFLA_OPERSTATE") or "UNKNOWN").upper(), "UNKNOWN")
            out[name] = {"oper-status": oper, "admin-status": UP if link["flags"] & _IFF_UP else DOWN}
    return out


def read_bgp(vty_dir: Path) -> dict[str, dict[str, str]]:
    """Every BGP neighbor of bgpd (its address, or its interface when unnumbered) and its session state."""
    sock = vty_dir / "bgpd.vty"
    if not sock.is_socket():
        return {}
    try:
        [(_, text)] = vty_run(sock, "show bgp ipv4 unicast summary json", timeout=2.0)
        doc = json.loads(text or "{}")
    except (FrrError, json.JSONDecodeError, ValueError):
        return {}
    peers = doc.get("peers", {}) if isinstance(doc, dict) else {}
    return {str(name): {"session-state": _BGP.get(str(p.get("state", "")).lower(), "IDLE")}
            for name, p in peers.items() if isinstance(p, dict)}


class KernelStatus:
    """The node's own state: netlink for its interfaces (every read: a link's failure is what a reaction waits
    for), bgpd (under ``vty_dir``) for its sessions, asked at most every ``bgp_every_s`` (a summary costs bgpd
    a few milliseconds of CPU, and a session's state follows its link's anyway). :meth:`events` wakes the
    watcher when a link changes, so reads between are only the once-a-second look at the sessions."""

    blocking = True
    interval_s = 1.0

    def __init__(self, vty_dir: Path | None = None, clock: Callable[[], int] = time.time_ns, *,
                 bgp_every_s: float = 1.0):
        self.vty_dir = vty_dir
        self.clock = clock
        self.bgp_every_s = bgp_every_s
        self._bgp: dict[str, dict[str, str]] = {}
        self._bgp_at = float("-inf")

    def read(self) -> OperSnapshot:
        now = time.monotonic()
        if self.vty_dir is not None and now - self._bgp_at >= self.bgp_every_s:
            self._bgp, self._bgp_at = read_bgp(self.vty_dir), now
        return OperSnapshot(self.clock(), read_interfaces(), self._bgp)

    def events(self) -> socket.socket | None:
        return link_events()


class DryStatus:
    """A dry agent's state: the ports of its running config (``frr_text()``), up unless listed in ``down_file``."""

    blocking = False
    interval_s = 0.1  # a test fails a port by writing the file: nothing notifies

    def __init__(self, frr_text: Callable[[], str], down_file: Path, clock: Callable[[], int] = time.time_ns):
        self.frr_text = frr_text
        self.down_file = down_file
        self.clock = clock
        self._ports: set[str] = set()  # every port a config named: like a kernel's, they stay when unconfigured
        self._text: str | None = None  # the config last scanned for ports (a scan per read was most of the cost)
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
            self._text = text
        ports = sorted(self._ports)
        return OperSnapshot(self.clock(), {p: {"oper-status": DOWN if p in down else UP, "admin-status": UP}
                                           for p in ports})


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
        if snap.interfaces != self.latest.interfaces or snap.bgp != self.latest.bgp or not self.latest.timestamp_ns:
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
