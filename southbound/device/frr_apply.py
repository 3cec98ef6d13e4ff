"""How the device agent touches a switch: FRR through ``frr-reload.py`` and ``vtysh``, the kernel over netlink.

This module owns the agent's side effects and nothing else. A
:class:`~southbound.rendered.Rendered` value is what the agent applies: FRR's integrated config
text, the ``fib`` WCMP routes (weighted nexthop groups the agent installs over
netlink, preferred over BGP's routes), and per BGP peer a signature of the
link-bandwidth route-maps toward it, so a change to them triggers a soft
outbound clear (``clear bgp ipv4 unicast PEER soft out``, DESIGN.md
"Southbound"). Two backends implement :class:`FrrBackend`:
:class:`FrrReload` drives real FRR daemons and reads routes from the kernel:
where FRR runs exactly what the agent applied last, the diff is that of the
two texts and only the difference is applied, through one ``vtysh``, checked
by reading the configuration back (:mod:`southbound.device.frr_delta`); otherwise
``frr-reload.py --test`` diffs and ``--reload`` applies; :class:`DryFrr`
renders and records only, for scale tests with hundreds of agents.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from controller.model.errors import FrrError
from southbound.device import fib as kernel_fib
from southbound.device.fib import LOOM_RT_PROTO
from southbound.device.frr_delta import (
    ConfigTree,
    delta_commands,
    expected_running,
    parse_config,
    tree_document,
    tree_of_document,
)
from southbound.device.vty import VTY_OK, daemons, vty_run
from southbound.discovery.observed import ObservedDevice, interfaces_from_ip_json
from southbound.rendered import FibHop, Rendered
from southbound.state import BgpSession, KernelNextHop, KernelRoute

__all__ = ["DryFrr", "FrrBackend", "FrrError", "FrrReload", "atomic_write_json", "live_fib", "read_json"]

FRR_RELOAD = "/usr/lib/frr/frr-reload.py"
log = logging.getLogger("loom.agent.frr")


#: a BGP session and the port it runs over, as :mod:`southbound.render` describes it
_SESSION_PORT = re.compile(r"^ neighbor (\S+) description \S+ via (\S+)$", re.M)


def live_fib(fib: Mapping[str, tuple[FibHop, ...]], down: frozenset[str]) -> dict[str, tuple[FibHop, ...]]:
    """``fib`` without its next hops over ``down`` ports; a route left with none is left out."""
    out: dict[str, tuple[FibHop, ...]] = {}
    for prefix, hops in fib.items():
        alive = tuple(h for h in hops if h.port not in down)
        if alive:
            out[prefix] = alive
    return out


def changed_peers(old: Rendered | None, new: Rendered) -> list[str]:
    """BGP peers whose link-bandwidth route-maps differ between two configurations."""
    before = dict(old.lb_peers) if old else {}
    return sorted(p for p in set(before) | set(new.lb_peers) if before.get(p) != new.lb_peers.get(p))


def text_diff(old: Rendered | None, new: Rendered) -> str:
    a = (old.frr_text.splitlines() + old.fib_lines()) if old else []
    b = new.frr_text.splitlines() + new.fib_lines()
    return "\n".join(difflib.unified_diff(a, b, "running", "candidate", lineterm="", n=1))


def atomic_write_json(path: Path, doc: Any, *, durable: bool = True) -> None:
    """Write ``doc`` so that a crash leaves either the old or the new file, never half of one.
    ``durable``: also fsync it (and its directory) before returning, so it survives a power cut."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, sort_keys=True)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if not durable:
        return
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class FrrBackend(Protocol):
    """What the agent needs from a switch. Methods block; the agent runs them in a thread."""

    dry: bool

    def version(self) -> str: ...

    def snapshot(self, hostname: str) -> Rendered:
        """The configuration running now, for a first start with no history."""
        ...

    def diff(self, current: Rendered | None, target: Rendered) -> str: ...

    def apply(self, current: Rendered | None, target: Rendered) -> str:
        """Make ``target`` run; returns the backend's account of it. Raises :class:`FrrError`."""
        ...

    def read_routes(self, prefixes: Iterable[str], recorded: Rendered | None) -> tuple[bool, dict[str, KernelRoute]]:
        """(observed, routes): kernel routes installed by BGP or Loom."""
        ...

    def read_sessions(self) -> tuple[BgpSession, ...]: ...

    def repair_fib(self, recorded: Rendered | None, down: frozenset[str]) -> list[str]:
        """Ports ``down`` are not up: the ``fib`` routes of ``recorded`` without their next hops over
        them (the rest keep their weights, so the kernel renormalizes), a route with none left withdrawn
        (FRR's is used); the planned routes again when they come up. Returns the prefixes changed."""
        ...

    def running_hash(self, recorded: Rendered | None) -> str:
        """The hash of what FRR runs, as read back from it: ``recorded``'s hash when FRR runs exactly
        ``recorded``, another (``frr:...``) when anything was changed behind the agent ("" for nothing)."""
        ...

    def settle(self, timeout: float = 60.0) -> None:
        """Wait for side effects a previous agent process left running (after a crash)."""
        ...

    def daemon_pids(self) -> dict[str, int]:
        """The process id of each FRR daemon running now (a daemon that restarted has a new one)."""
        ...

    def read_running(self, hostname: str) -> ObservedDevice:
        """What discovery reads of the switch: FRR's running configuration and the kernel's interfaces."""
        ...


#: the daemons whose restart loses the configuration the agent applied (each starts from its own file)
ROUTING_DAEMONS = ("zebra", "bgpd", "isisd", "ospfd", "staticd")


def _foreign_hash(text: str) -> str:
    return "frr:" + hashlib.sha256(text.encode()).hexdigest()


class DryFrr:
    """Renders and records, calls no FRR: ``--dry-frr``, only for scale tests.

    ``prepare_delay``/``apply_delay`` (seconds) stretch the calls so that fault
    tests can kill an agent while a call is in flight.
    """

    dry = True

    def __init__(self, record_dir: Path, *, prepare_delay: float = 0.0, apply_delay: float = 0.0):
        self.record_dir = record_dir
        self.prepare_delay = prepare_delay
        self.apply_delay = apply_delay

    def version(self) -> str:
        return "dry"

    def snapshot(self, hostname: str) -> Rendered:
        path = self.record_dir / "frr.conf"
        return Rendered(hostname, path.read_text() if path.exists() else "")

    def diff(self, current: Rendered | None, target: Rendered) -> str:
        if self.prepare_delay:
            time.sleep(self.prepare_delay)
        return text_diff(current, target)

    def apply(self, current: Rendered | None, target: Rendered) -> str:
        if self.apply_delay:
            time.sleep(self.apply_delay)
        self.record_dir.mkdir(parents=True, exist_ok=True)
        (self.record_dir / "frr.conf").write_text(target.frr_text)
        atomic_write_json(self.record_dir / "fib.json", target.to_document()["fib"], durable=False)
        cleared = changed_peers(current, target)
        if cleared:
            with open(self.record_dir / "clears.log", "a") as fh:
                fh.write(" ".join(cleared) + "\n")
        return text_diff(current, target)

    def read_routes(self, prefixes: Iterable[str], recorded: Rendered | None) -> tuple[bool, dict[str, KernelRoute]]:
        wanted = set(prefixes)
        fib = recorded.fib if recorded else {}
        routes = {p: KernelRoute(p, "loom", tuple(KernelNextHop(h.port, h.via, h.weight) for h in hops))
                  for p, hops in fib.items() if not wanted or p in wanted}
        return False, routes

    def read_sessions(self) -> tuple[BgpSession, ...]:
        return ()

    def repair_fib(self, recorded: Rendered | None, down: frozenset[str]) -> list[str]:
        return []

    def running_hash(self, recorded: Rendered | None) -> str:
        path = self.record_dir / "frr.conf"
        text = path.read_text() if path.exists() else ""
        if recorded is None:
            return _foreign_hash(text) if text else ""
        return recorded.hash if text == recorded.frr_text else _foreign_hash(text)

    def settle(self, timeout: float = 60.0) -> None:
        return None

    def daemon_pids(self) -> dict[str, int]:
        return {}  # no daemons: nothing restarts

    def read_running(self, hostname: str) -> ObservedDevice:
        return ObservedDevice(hostname, self.snapshot(hostname).frr_text)


def _run(argv: list[str], *, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise FrrError(f"{' '.join(argv[:3])} ... exited {proc.returncode}: {detail}")
    return proc


class FrrReload:
    """Real FRR: the daemons' vty sockets are in ``vty_dir``; the agent runs in the switch's namespace."""

    dry = False

    def __init__(self, vty_dir: Path, work_dir: Path, *, vtysh: str | None = None, frr_reload: str = FRR_RELOAD):
        self.vty_dir = vty_dir
        self.work_dir = work_dir
        self.vtysh = vtysh or shutil.which("vtysh") or "/usr/bin/vtysh"
        self.frr_reload = frr_reload
        #: apply only the difference where FRR runs what the agent applied (``LOOM_FRR_DELTA=0``: always
        #: ``frr-reload.py``, the bench's reference)
        self.delta = os.environ.get("LOOM_FRR_DELTA", "1") != "0"
        self._down: frozenset[str] = frozenset()  # ports not up, as the agent's link watcher last saw them
        self._installed: dict[str, tuple[FibHop, ...]] | None = None  # the fib routes in the kernel now

    # -- vtysh --------------------------------------------------------------
    def vtysh_cmd(self, *commands: str, check: bool = True) -> str:
        argv = [self.vtysh, "--vty_socket", str(self.vty_dir)]
        for c in commands:
            argv += ["-c", c]
        return _run(argv, check=check).stdout

    def version(self) -> str:
        out = self.vtysh_cmd("show version", check=False)
        first = out.strip().splitlines()[0] if out.strip() else ""
        return first.removeprefix("FRRouting ").split(" ")[0] if first else "unknown"

    def snapshot(self, hostname: str) -> Rendered:
        text = self.vtysh_cmd("show running-config")
        skip = ("Building configuration", "Current configuration")
        lines = [ln for ln in text.splitlines() if not ln.startswith(skip)]
        return Rendered(hostname, "\n".join(lines).strip() + "\n")

    # -- frr-reload.py --------------------------------------------------------
    def _reload(self, target: Rendered, mode: str) -> str:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        conf = self.work_dir / "candidate.conf"
        conf.write_text(target.frr_text)
        bindir = str(Path(self.vtysh).parent)
        argv = ["python3", self.frr_reload, mode, "--stdout", "--vty_socket", str(self.vty_dir),
                "--bindir", bindir, "--confdir", str(self.work_dir), "--rundir", str(self.work_dir), str(conf)]
        proc = _run(argv, timeout=120, check=False)
        if proc.returncode != 0:
            detail = (proc.stderr + proc.stdout).strip()[-2000:]
            raise FrrError(f"frr-reload.py {mode} exited {proc.returncode}: {detail}")
        return proc.stdout

    def check_syntax(self, target: Rendered) -> None:
        """Have vtysh read ``target`` as a file (``-m -f``, as frr-reload.py does first): a line it does not
        take is :class:`FrrError`, before anything is applied."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        conf = self.work_dir / "check.conf"
        conf.write_text(target.frr_text)
        _run([self.vtysh, "--vty_socket", str(self.vty_dir), "-m", "-f", str(conf)], timeout=60)

    def diff(self, current: Rendered | None, target: Rendered) -> str:
        if self._shown(current) is not None:  # FRR runs what we applied: the difference is that of the texts
            if current is None or current.frr_text != target.frr_text:  # the same text already runs
                self.check_syntax(target)
            return text_diff(current, target)
        out = self._reload(target, "--test")
        fib_old = current.fib_lines() if current else []
        fib_diff = "\n".join(difflib.unified_diff(fib_old, target.fib_lines(), "running", "candidate", lineterm=""))
        return (out.strip() + ("\n" + fib_diff if fib_diff else "")).strip()

    # -- the difference alone (frr_delta), where FRR runs what the agent applied ----------------------
    def running_tree(self) -> ConfigTree:
        """What the daemons run, as one tree: each daemon's ``show running-config`` read over its vty
        socket (:mod:`southbound.device.vty`, a millisecond where ``vtysh`` costs 30 ms of CPU), merged as
        ``vtysh`` merges them. :class:`FrrError` if a daemon does not answer."""
        socks = daemons(self.vty_dir)
        if not socks:
            return parse_config(self.vtysh_cmd("show running-config"))
        tree: ConfigTree = {(): {}}
        for sock in socks:
            [(code, text)] = vty_run(sock, "show running-config")
            if code != VTY_OK:
                raise FrrError(f"{sock.stem} answered {code} to show running-config: {text.strip()[:200]}")
            for ctx, lines in parse_config(text).items():
                tree.setdefault(ctx, {}).update(lines)
        return tree

    @property
    def _shown_path(self) -> Path:
        return self.work_dir / "frr-shown.json"

    def _record_shown(self, target: Rendered, tree: ConfigTree | None = None) -> None:
        """Keep how FRR shows ``target`` (its ``show running-config`` once ``target`` is applied): what the
        next delta starts from, and what :meth:`running_hash` holds FRR's running configuration against."""
        try:
            shown = tree if tree is not None else self.running_tree()
        except FrrError:
            self._shown_path.unlink(missing_ok=True)
            return
        atomic_write_json(self._shown_path, {"hash": target.hash, "tree": tree_document(shown)}, durable=False)

    def _shown(self, current: Rendered | None) -> ConfigTree | None:
        """How FRR showed ``current`` when the agent applied it, if it still shows exactly that; else None."""
        if not self.delta or current is None:
            return None
        doc = read_json(self._shown_path)
        if not isinstance(doc, dict) or doc.get("hash") != current.hash:
            return None
        shown = tree_of_document(doc.get("tree", []))
        try:
            running = self.running_tree()
        except FrrError as exc:
            log.info("cannot read what FRR runs (%s): reloading", exc)
            return None
        return shown if running == shown else None

    def _apply_delta(self, current: Rendered | None, target: Rendered, then: list[str]) -> str | None:
        """Apply only the difference from ``current`` through one ``vtysh``, followed by the commands
        ``then`` (the soft clears), when FRR shows exactly what it showed when ``current`` was applied; the
        account of it when FRR then shows exactly what ``target`` should look like
        (:func:`expected_running`), else None (the caller reloads)."""
        shown = self._shown(current)
        if shown is None or current is None:
            if self.delta and current is not None and self._shown_path.exists():
                log.info("FRR does not show what it showed after this agent's last apply: reloading")
            return None
        old, new = parse_config(current.frr_text), parse_config(target.frr_text)
        commands = delta_commands(old, new)
        steps = [*(["configure terminal", *commands, "end"] if commands else []), *then]
        if steps:  # one vtysh for the difference and the clears
            self.vtysh_cmd(*steps, check=False)
        try:
            after = self.running_tree()
        except FrrError as exc:
            log.warning("cannot read back what FRR runs (%s); reloading", exc)
            return None
        want = expected_running(new, old, shown)
        if after != want:
            odd = sorted(k for k in set(after) | set(want) if after.get(k) != want.get(k))[:3]
            log.warning("the difference left FRR off the candidate (%s); reloading", "; ".join(
                f"{' > '.join(k) or 'top'}: extra {sorted(set(after.get(k, {})) - set(want.get(k, {})))[:3]}, "
                f"missing {sorted(set(want.get(k, {})) - set(after.get(k, {})))[:3]}" for k in odd))
            return None
        self._record_shown(target, after)
        return f"applied {len(commands)} command(s) of the difference through vtysh"

    def apply(self, current: Rendered | None, target: Rendered) -> str:
        # the new route-maps take effect in ~0.2 s after a soft clear instead of ~5 s
        clears = [f"clear bgp ipv4 unicast {peer} soft out" for peer in changed_peers(current, target)]
        out = self._apply_delta(current, target, clears)
        if out is None:
            self._shown_path.unlink(missing_ok=True)
            out = self._reload(target, "--reload")
            self._record_shown(target)
            if clears:  # one vtysh for all of them
                self.vtysh_cmd(*clears, check=False)
        self._install_fib(current.fib if current else {}, target.fib)
        return out.strip()

    def _install_fib(self, before: Mapping[str, tuple[FibHop, ...]], fib: Mapping[str, tuple[FibHop, ...]]
                     ) -> list[str]:
        """Install ``fib`` less its next hops over ports that are down (``before``: what the kernel held
        when nothing was installed by this process yet)."""
        live = live_fib(fib, self._down)
        changed = kernel_fib.install(self._installed if self._installed is not None else before, live)
        self._installed = live
        return changed

    def repair_fib(self, recorded: Rendered | None, down: frozenset[str]) -> list[str]:
        came_up, self._down = self._down - down, down
        if recorded is not None and came_up:
            self._restart_sessions(recorded, came_up)
        if recorded is None or (not recorded.fib and not self._installed):
            return []
        # every live route again, not only the changed ones: the kernel flushes an IPv4 multipath route
        # when one of its next hops' interfaces goes down, and a route must come back when the port does
        return self._install_fib(recorded.fib, recorded.fib)

    def daemon_pids(self) -> dict[str, int]:
        """From the daemons' pid files beside their vty sockets (``vty_dir/DAEMON.pid``, as FRR writes them)."""
        out: dict[str, int] = {}
        for daemon in ROUTING_DAEMONS:
            try:
                out[daemon] = int((self.vty_dir / f"{daemon}.pid").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        return out

    def read_running(self, hostname: str) -> ObservedDevice:
        """``show running-config``, and the interfaces of ``ip -j -d addr`` with their ``/sys`` speeds (the agent
        runs in the switch's network namespace, so these are the switch's)."""
        speeds: dict[str, int | None] = {}
        for path in Path("/sys/class/net").glob("*/speed"):
            try:
                value = int(path.read_text().strip())
            except (OSError, ValueError):
                value = 0
            speeds[path.parent.name] = value if value > 0 else None
        addr = _run(["ip", "-j", "-d", "addr"], timeout=10).stdout
        return ObservedDevice(hostname, self.snapshot(hostname).frr_text, interfaces_from_ip_json(addr, speeds))

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until no ``frr-reload.py`` of ours (one a crashed agent left behind) is still running."""
        needle = str(self.work_dir).encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = False
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and int(entry.name) != os.getpid():
                    try:
                        cmd = (entry / "cmdline").read_bytes()
                    except OSError:
                        continue
                    if b"frr-reload" in cmd and needle in cmd:
                        busy = True
                        break
            if not busy:
                return
            time.sleep(0.1)

    # -- reading state ----------------------------------------------------------
    def read_routes(self, prefixes: Iterable[str], recorded: Rendered | None) -> tuple[bool, dict[str, KernelRoute]]:
        wanted = set(prefixes)
        proc = _run(["ip", "-j", "route", "show", "table", "main"], check=True)
        routes: dict[str, KernelRoute] = {}
        metrics: dict[str, int] = {}
        for r in json.loads(proc.stdout or "[]"):
            route = kernel_route_from_ip_json(r)
            if route is None or (wanted and route.prefix not in wanted):
                continue
            metric = int(r.get("metric", 0) or 0)
            if route.prefix not in routes or metric < metrics[route.prefix]:  # the kernel forwards on the lowest
                routes[route.prefix] = route
                metrics[route.prefix] = metric
        return True, routes

    def _restart_sessions(self, recorded: Rendered, ports: frozenset[str]) -> None:
        """The BGP sessions over ``ports``, which came back up, are reset now: bgpd would otherwise wait for its
        connect-retry timer (up to two minutes), and zebra (FRR 8.4) does not put a flapped veth's next hop back
        into a nexthop group it kept; a session that starts afresh makes both happen at once."""
        peers = [m.group(1) for m in _SESSION_PORT.finditer(recorded.frr_text) if m.group(2) in ports]
        if peers:
            log.info("ports up again (%s): resetting their BGP sessions %s", ", ".join(sorted(ports)), peers)
            self.vtysh_cmd(*(f"clear bgp ipv4 unicast {p}" for p in peers), check=False)

    def running_hash(self, recorded: Rendered | None) -> str:
        """FRR's running configuration read back (every daemon's ``show running-config``) against how FRR
        showed ``recorded`` when the agent applied it: the same, ``recorded``'s hash; else a hash of the
        running tree (an edit behind Loom is drift). Where it was never recorded, ``recorded``'s hash."""
        if recorded is None:
            return ""
        doc = read_json(self._shown_path)
        if not isinstance(doc, dict) or doc.get("hash") != recorded.hash:
            return recorded.hash
        try:
            running = self.running_tree()
        except FrrError as exc:
            return _foreign_hash(f"unreadable: {exc}")
        if running == tree_of_document(doc.get("tree", [])):
            return recorded.hash
        return _foreign_hash(json.dumps(tree_document(running), sort_keys=True))

    def read_sessions(self) -> tuple[BgpSession, ...]:
        bgpd = self.vty_dir / "bgpd.vty"
        if not bgpd.is_socket():
            return ()
        try:  # straight to bgpd: the read-back polls this, and a vtysh per poll and device is CPU
            [(_, out)] = vty_run(bgpd, "show bgp ipv4 unicast summary json")
        except FrrError:
            return ()
        try:
            doc = json.loads(out or "{}")
        except json.JSONDecodeError:
            return ()
        peers = doc.get("peers", {}) if isinstance(doc, dict) else {}
        return tuple(BgpSession(name, str(p.get("state", "")), int(p.get("remoteAs", 0) or 0),
                                int(p.get("pfxRcd", 0) or 0)) for name, p in sorted(peers.items()))


_PROTO_NAMES = {"bgp": "bgp", "186": "bgp", "isis": "isis", "187": "isis", "ospf": "ospf", "188": "ospf",
                str(LOOM_RT_PROTO): "loom", "loom": "loom"}


def kernel_route_from_ip_json(r: Mapping[str, Any]) -> KernelRoute | None:
    """One ``ip -j route`` entry as a :class:`KernelRoute`, or ``None`` if neither BGP, IS-IS, OSPF nor Loom made it."""
    proto = _PROTO_NAMES.get(str(r.get("protocol", "")))
    if proto is None:
        return None
    dst = str(r.get("dst", ""))
    if dst == "default":
        dst = "0.0.0.0/0"
    elif "/" not in dst:
        dst += "/32"
    if "nexthops" in r:
        hops = tuple(KernelNextHop(str(h.get("dev", "")), str(h.get("gateway", "")), int(h.get("weight", 1)))
                     for h in r["nexthops"])
    else:
        hops = (KernelNextHop(str(r.get("dev", "")), str(r.get("gateway", "")), 1),)
    return KernelRoute(dst, proto, hops)
