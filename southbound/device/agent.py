"""The Loom device agent: one per switch, the only thing that changes it.

This module owns the agent's transaction state machine and its gRPC server.
:class:`AgentCore` takes a declarative :class:`~southbound.config.DeviceConfig`,
renders it (:func:`southbound.render.render_frr`), shows the diff on
``Prepare``, applies it on ``Commit`` through an :class:`~southbound.device.frr_apply.FrrBackend`,
and rolls the commit back by itself when ``Confirm`` does not arrive in time
(Junos' ``commit confirmed``). Everything it needs to survive its own restart
is on disk in ``state_dir`` and written atomically before each side effect: the
running config (``running.json``), the prepared change (``prepared.json``), the
journal of a commit in flight (``journal.json``: phase ``applying``,
``committed`` or ``rolling_back``, the previous config, the confirm deadline)
and a short history for ``Rollback``. On start, a half-applied config is undone
and an unconfirmed commit whose deadline passed is rolled back.

**Fencing** (DESIGN.md, High availability): a controller call may carry the
epoch of the leader that sends it. The agent keeps the highest epoch it has
seen in its epoch log (``epochs.json``, written durably before the call that
raised it goes on, with every refusal listed) and refuses any call carrying a
lower epoch with ``failed_precondition``, so a leader that lost its lease while
frozen cannot push a config after it wakes. Beside each epoch it records the
replica that raised it (``loom-replica``, when the call names one), and a call
of the current epoch from another replica is listed as ``shared`` and logged as
an error: one epoch is one leadership, so that would mean two leaders. Transaction calls are checked under
the agent's lock, so a refused call never interleaves with an accepted one.
Calls without an epoch (tools, tests, a review's preview) are not fenced. :func:`serve`
runs it on a unix socket or TCP (mutual TLS) with the gRPC health service and,
on the same listener, gNMI telemetry (:mod:`southbound.device.gnmi_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from southbound.config import DeviceConfig
from southbound.device.counters import KernelCounters, SyntheticCounters, fabric_ports
from southbound.device.frr_apply import DryFrr, FrrBackend, FrrError, FrrReload, atomic_write_json, read_json, text_diff
from southbound.device.gnmi_server import GnmiService, add_gnmi_servicer
from southbound.device.linklocal import UnresolvedNextHop
from southbound.device.opstate import DryStatus, KernelStatus, LinkWatcher
from southbound.discovery.observed import ObservedDevice
from southbound.gnmi import GNMI_SERVICE
from southbound.grpc_adapter import SERVICE_NAME, add_agent_servicer
from southbound.render import build_rendered
from southbound.rendered import Rendered
from southbound.state import CALLER, AgentError, AgentInfo, DeviceState, Outcome

__all__ = ["AGENT_VERSION", "AgentCore", "default_counters", "serve"]

AGENT_VERSION = "0.1.0"
HISTORY = 16
EPOCH_LOG = 100  # entries kept of each list of the epoch log
#: seconds after a port comes up during which the watch loop puts lost members back in zebra's nexthop groups
REGROUP_S = 30.0
log = logging.getLogger("loom.agent")


@dataclass
class _Journal:
    change: str
    phase: str  # applying | committed | rolling_back
    previous: Rendered | None
    target: Rendered
    deadline: float

    def to_document(self) -> dict[str, Any]:
        return {"change": self.change, "phase": self.phase, "deadline": self.deadline,
                "previous": self.previous.to_document() if self.previous else None,
                "target": self.target.to_document()}

    @classmethod
    def from_document(cls, d: dict[str, Any]) -> _Journal:
        prev = Rendered.from_document(d["previous"]) if d.get("previous") else None
        return cls(d["change"], d["phase"], prev, Rendered.from_document(d["target"]), float(d["deadline"]))


class AgentCore:
    """The agent's logic in domain types; one change at a time (an asyncio lock)."""

    def __init__(self, backend: FrrBackend, state_dir: Path, hostname: str, *,
                 build: Callable[[DeviceConfig], Rendered] = build_rendered,
                 clock: Callable[[], float] = time.time):
        self.backend = backend
        self.dir = state_dir
        self.hostname = hostname
        self.build = build
        self.clock = clock
        self._lock = asyncio.Lock()
        self._pids: dict[str, int] = {}  # the FRR daemons' process ids last seen (heal_restarted)
        self._down: frozenset[str] = frozenset()  # the ports last seen not up (repair_links)
        self._regroup_until = 0.0  # until when the watch loop looks for nexthop groups to put back (regroup)
        self._timer: asyncio.Task[None] | None = None
        self.running: Rendered | None = None
        self.port = 0  # the TCP port :func:`serve` bound (for HOST:0)
        self.dir.mkdir(parents=True, exist_ok=True)
        log_doc = read_json(self._path("epochs.json")) or {}
        self.epoch = int(log_doc.get("epoch", 0))  # the highest leader epoch seen (the fence)
        last = (log_doc.get("raised") or [{}])[-1]
        self._holder = str(last.get("replica", "")) if last.get("epoch") == self.epoch else ""  # who raised it
        self._shared: set[tuple[int, str]] = set()  # (epoch, replica) already listed as shared

    # -- disk ---------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        return self.dir / name

    def _journal(self) -> _Journal | None:
        d = read_json(self._path("journal.json"))
        return _Journal.from_document(d) if d else None

    def _write_journal(self, j: _Journal) -> None:
        atomic_write_json(self._path("journal.json"), j.to_document())

    def _drop(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(name).unlink()

    def _set_running(self, r: Rendered | None) -> None:
        self.running = r
        if r is not None:
            atomic_write_json(self._path("running.json"), r.to_document())
            # history is a cache for Rollback(to_hash): no fsync (running.json and the journal are the truth)
            hist = self._path("history") / f"{r.hash}.json"
            if hist.exists():
                hist.touch()  # most recently used: trimmed last
            else:
                atomic_write_json(hist, r.to_document(), durable=False)
                self._trim_history()

    def _trim_history(self) -> None:
        files = sorted(self._path("history").glob("*.json"), key=lambda p: p.stat().st_mtime)
        for p in files[:-HISTORY]:
            p.unlink(missing_ok=True)

    def _log_change(self, change: str, previous: Rendered | None, target: Rendered) -> None:
        doc = read_json(self._path("changes.json")) or []
        doc = [c for c in doc if c["change"] != change][-(HISTORY - 1):]
        doc.append({"change": change, "previous": previous.hash if previous else "", "hash": target.hash})
        atomic_write_json(self._path("changes.json"), doc, durable=False)

    # -- the fence --------------------------------------------------------------------
    def fence(self, call: str, change: str, epoch: int | None) -> None:
        """Refuse ``call`` when it carries an epoch lower than the highest seen; record a higher one
        durably before the call goes on. (Synchronous: nothing else runs on the loop meanwhile.)"""
        if epoch is None:
            return
        if epoch < self.epoch:
            self._epoch_log("refused", {"epoch": epoch, "call": call, "change": change, "at": self.clock(),
                                        "fence": self.epoch})
            log.warning("refused %s of change %s from the leader of epoch %d: this agent follows epoch %d",
                        call, change, epoch, self.epoch)
            raise AgentError("failed_precondition",
                             f"fenced: {call} of change {change or '-'} comes from the leader of epoch {epoch}, "
                             f"but this agent follows epoch {self.epoch} (a newer leader took over)")
        caller = CALLER.get()
        if epoch > self.epoch:
            self._epoch_log("raised", {"epoch": epoch, "call": call, "change": change, "at": self.clock(),
                                       "replica": caller}, epoch=epoch)
            log.info("leader epoch %d (was %d), first heard in %s from %s", epoch, self.epoch, call,
                     caller or "an unnamed replica")
            self.epoch, self._holder = epoch, caller
        elif caller and self._holder and caller != self._holder and (epoch, caller) not in self._shared:
            self._shared.add((epoch, caller))
            self._epoch_log("shared", {"epoch": epoch, "call": call, "change": change, "at": self.clock(),
                                       "replica": caller, "holder": self._holder})
            log.error("replicas %s and %s both call with epoch %d: two leaders of one epoch", self._holder,
                      caller, epoch)

    def _epoch_log(self, key: str, entry: dict[str, Any], *, epoch: int | None = None) -> None:
        doc = read_json(self._path("epochs.json")) or {}
        doc[key] = [*doc.get(key, []), entry][-EPOCH_LOG:]
        doc["epoch"] = epoch if epoch is not None else doc.get("epoch", self.epoch)
        # a raised fence must survive a crash before the call it admits does anything; a refusal is a record
        atomic_write_json(self._path("epochs.json"), doc, durable=epoch is not None)

    def epoch_log(self) -> dict[str, Any]:
        """``{"epoch": N, "raised": [...], "refused": [...], "shared": [...]}`` as on disk."""
        return self.read_epoch_log(self.dir)

    @staticmethod
    def read_epoch_log(state_dir: Path) -> dict[str, Any]:
        """The epoch log an agent keeps in ``state_dir`` (also while it runs elsewhere: tests, operators)."""
        doc = read_json(state_dir / "epochs.json") or {}
        return {"epoch": int(doc.get("epoch", 0)), "raised": doc.get("raised", []), "refused": doc.get("refused", []),
                "shared": doc.get("shared", [])}

    def _prepared(self) -> dict[str, Any] | None:
        d = read_json(self._path("prepared.json"))
        return d if isinstance(d, dict) else None

    # -- side effects, in a thread ------------------------------------------------
    async def _apply(self, current: Rendered | None, target: Rendered) -> str:
        return await asyncio.to_thread(self.backend.apply, current, target)

    # -- life cycle ---------------------------------------------------------------
    async def start(self) -> None:
        """Load state from disk and finish or undo what a previous run left half done."""
        async with self._lock:
            d = read_json(self._path("running.json"))
            if d:
                self.running = Rendered.from_document(d)
            else:
                self._set_running(await asyncio.to_thread(self.backend.snapshot, self.hostname))
            j = self._journal()
            if j is None:
                return
            await asyncio.to_thread(self.backend.settle)
            if j.phase in ("applying", "rolling_back"):
                log.warning("recovering: change %s was %s when the agent stopped; restoring the previous config",
                            j.change, j.phase)
                await self._restore(j)
            elif j.phase == "committed":
                if j.deadline and self.clock() >= j.deadline:
                    log.warning("recovering: change %s was not confirmed in time; rolling back", j.change)
                    await self._restore(j)
                else:
                    self.running = j.target
                    self._arm(j.change, j.deadline)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._timer
            self._timer = None

    async def _restore(self, j: _Journal) -> str:
        """Apply the journal's previous config (lock held). Keeps the journal until it is done."""
        if j.phase != "rolling_back":
            j.phase = "rolling_back"
            self._write_journal(j)
        previous = j.previous if j.previous is not None else Rendered(self.hostname, "")
        await self._apply(j.target, previous)
        self._set_running(previous)
        self._drop("journal.json")
        return text_diff(j.target, previous)

    def _arm(self, change: str, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if deadline:
            self._timer = asyncio.get_running_loop().create_task(self._expire(change, deadline))

    async def _expire(self, change: str, deadline: float) -> None:
        await asyncio.sleep(max(0.0, deadline - self.clock()))
        async with self._lock:
            j = self._journal()
            if j is None or j.change != change or j.phase != "committed":
                return
            log.warning("change %s was not confirmed by its deadline: rolling back", change)
            self._timer = None
            try:
                await self._restore(j)
            except Exception as exc:  # the journal stays: the watch loop (or a restart) retries the rollback
                log.error("automatic rollback of %s failed: %s (retried every second)", change, exc)

    # -- calls --------------------------------------------------------------------
    async def info(self, *, epoch: int | None = None) -> AgentInfo:
        self.fence("GetInfo", "", epoch)
        j = self._journal()
        p = self._prepared()
        return AgentInfo(self.hostname, AGENT_VERSION, await asyncio.to_thread(self.backend.version),
                         self.backend.dry, self.running.hash if self.running else "",
                         j.change if j else "", p["change"] if p else "")

    async def prepare(self, change: str, config: DeviceConfig, *, epoch: int | None = None,
                      preview: bool = False) -> Outcome:
        """Render ``config`` and answer the diff from the running config; store it as the prepared
        change (``preview``: store nothing, whatever is in flight stays as it is)."""
        if not change:
            raise AgentError("invalid_argument", "a change id is required")
        if config.hostname != self.hostname:
            raise AgentError("invalid_argument", f"config is for {config.hostname!r}, this is {self.hostname!r}")
        if preview:
            return await self._preview(change, config, epoch)
        async with self._lock:
            self.fence("Prepare", change, epoch)
            j = self._journal()
            if j is not None and j.change != change:
                raise AgentError("failed_precondition", f"busy: change {j.change} is {j.phase}, not yet confirmed")
            if j is not None:
                raise AgentError("failed_precondition", f"change {change} is already {j.phase}")
            try:
                target = self.build(config)
            except (ValueError, KeyError) as exc:
                raise AgentError("invalid_argument", f"config does not render: {exc}") from exc
            try:
                diff = await asyncio.to_thread(self.backend.diff, self.running, target)
                await asyncio.to_thread(self.backend.check_fib, target)  # not in a preview: no link-local yet there
            except UnresolvedNextHop as exc:
                raise AgentError("failed_precondition", f"cannot install the fib routes yet: {exc}") from exc
            except FrrError as exc:
                raise AgentError("internal", f"FRR refused the candidate config: {exc}") from exc
            await asyncio.to_thread(atomic_write_json, self._path("prepared.json"),
                                    {"change": change, "target": target.to_document(), "diff": diff})
            changed = self.running is None or target.hash != self.running.hash
            return Outcome(changed, diff, target.hash)

    async def _preview(self, change: str, config: DeviceConfig, epoch: int | None) -> Outcome:
        self.fence("Prepare", change, epoch)
        try:
            target = self.build(config)
        except (ValueError, KeyError) as exc:
            raise AgentError("invalid_argument", f"config does not render: {exc}") from exc
        running = self.running
        try:
            diff = await asyncio.to_thread(self.backend.diff, running, target)
        except FrrError as exc:
            raise AgentError("internal", f"FRR refused the candidate config: {exc}") from exc
        return Outcome(running is None or target.hash != running.hash, diff, target.hash)

    async def commit(self, change: str, confirm_within: float, *, epoch: int | None = None) -> Outcome:
        async with self._lock:
            self.fence("Commit", change, epoch)
            p = self._prepared()
            j = self._journal()
            if j is not None and j.change == change:
                return Outcome(False, "", j.target.hash, j.deadline)  # a retried Commit: already done
            if p is None or p["change"] != change:
                held = p["change"] if p else "nothing"
                raise AgentError("failed_precondition", f"change {change} is not prepared here ({held} is)")
            target = Rendered.from_document(p["target"])
            previous = self.running
            deadline = self.clock() + confirm_within if confirm_within > 0 else 0.0
            j = _Journal(change, "applying", previous, target, deadline)

            def begin() -> None:
                self._write_journal(j)
                self._drop("prepared.json")

            await asyncio.to_thread(begin)  # disk waits off the event loop: many agents may share it
            try:
                await self._apply(previous, target)
                diff = str(p.get("diff", ""))  # what Prepare showed is what was applied
            except Exception as exc:
                log.error("commit %s failed: %s; restoring the previous config", change, exc)
                try:
                    await self._restore(j)
                except Exception as exc2:  # the journal stays: a restart retries the restore
                    raise AgentError("internal", f"apply failed ({exc}) and so did the restore ({exc2})") from exc2
                raise AgentError("internal", f"apply failed, previous config restored: {exc}") from exc

            def finish() -> None:
                self._set_running(target)
                self._log_change(change, previous, target)
                if deadline:
                    j.phase = "committed"
                    self._write_journal(j)
                else:
                    self._drop("journal.json")

            await asyncio.to_thread(finish)
            if deadline:
                self._arm(change, deadline)
            changed = previous is None or previous.hash != target.hash
            return Outcome(changed, diff, target.hash, deadline)

    async def confirm(self, change: str, *, epoch: int | None = None) -> Outcome:
        async with self._lock:
            self.fence("Confirm", change, epoch)
            j = self._journal()
            if j is not None and j.change == change and j.phase == "committed":
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                self._drop("journal.json")
                return Outcome(False, "", j.target.hash)
            if j is None and self.running is not None and self._last_change(change) == self.running.hash:
                return Outcome(False, "", self.running.hash)  # a retried Confirm: already done
            state = f"{j.change} is {j.phase}" if j else "no commit awaits confirmation"
            raise AgentError("failed_precondition", f"cannot confirm {change}: {state} (rolled back in time?)")

    def _last_change(self, change: str) -> str:
        for c in read_json(self._path("changes.json")) or []:
            if c["change"] == change:
                return str(c["hash"])
        return ""

    async def abort(self, change: str, *, epoch: int | None = None) -> bool:
        async with self._lock:
            self.fence("Abort", change, epoch)
            j = self._journal()
            if j is not None and j.change == change:
                raise AgentError("failed_precondition", f"change {change} is {j.phase}: roll it back instead")
            p = self._prepared()
            if p is not None and (p["change"] == change or not change):
                self._drop("prepared.json")
                return True
            return False

    async def rollback(self, change: str, to_hash: str, *, epoch: int | None = None) -> Outcome:
        async with self._lock:
            self.fence("Rollback", change, epoch)
            j = self._journal()
            if j is not None and (j.change == change or not change):
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                diff = await self._restore_checked(j)
                return Outcome(True, diff, self.running.hash if self.running else "")
            if j is not None:
                raise AgentError("failed_precondition", f"busy: change {j.change} is {j.phase}; roll that back first")
            if not to_hash and change:
                p = self._prepared()
                if p is not None and p["change"] == change:
                    self._drop("prepared.json")
                for c in read_json(self._path("changes.json")) or []:
                    if c["change"] == change:
                        if self.running is None or self.running.hash != c["hash"]:
                            # something else ran since (or it was already undone): nothing to do
                            return Outcome(False, "", self.running.hash if self.running else "")
                        to_hash = c["previous"]
                        break
                else:
                    return Outcome(False, "", self.running.hash if self.running else "")
            if not to_hash:
                raise AgentError("invalid_argument", "Rollback needs a change or a config hash")
            doc = read_json(self._path("history") / f"{to_hash}.json")
            if doc is None:
                raise AgentError("not_found", f"config {to_hash[:12]} is not in this agent's history")
            target = Rendered.from_document(doc)
            if self.running is not None and target.hash == self.running.hash:
                return Outcome(False, "", target.hash)
            jr = _Journal(change or f"rollback-{to_hash[:12]}", "applying", self.running, target, 0.0)
            self._write_journal(jr)
            try:
                await self._apply(self.running, target)
                diff = text_diff(self.running, target)
            except Exception as exc:
                await self._restore_checked(jr)
                raise AgentError("internal", f"rollback failed, config left as it was: {exc}") from exc
            self._set_running(target)
            self._drop("journal.json")
            return Outcome(True, diff, target.hash)

    async def _restore_checked(self, j: _Journal) -> str:
        try:
            return await self._restore(j)
        except Exception as exc:
            raise AgentError("internal", f"restoring the previous config failed: {exc}") from exc

    async def repair_links(self, down: frozenset[str]) -> None:
        """Ports ``down`` are not up (the link watcher says so): the running config's ``fib`` routes lose
        their next hops over them at once, and get them back when they come up (kernel-local repair: the
        controller's reaction follows). Under the agent's lock, so it never interleaves with a commit."""
        async with self._lock:
            changed = await asyncio.to_thread(self.backend.repair_fib, self.running, down)
        if self._down - down:  # a port came up: zebra's groups may have lost its next hops (regroup)
            self._regroup_until = self.clock() + REGROUP_S
        self._down = down
        if changed:
            log.info("fib repaired for ports not up (%s): %s", ", ".join(sorted(down)) or "none",
                     ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else ""))

    async def heal_restarted(self) -> list[str]:
        """Re-apply the running config when an FRR daemon restarted since the last look (a new process id):
        a restarted daemon starts from its own file, not from what the agent applied, so its sessions and
        routes are gone until then (an edit behind Loom restarts nothing: it stays drift, reported). Not
        while a transaction is applying or rolling back (it applies what it applies). The daemons restarted."""
        pids = self.backend.daemon_pids()  # a few pid files on a tmpfs: cheaper read here than a thread's hop
        restarted = sorted(d for d, pid in pids.items() if self._pids.get(d, pid) != pid)
        if not restarted or self.running is None or not self.running.frr_text:
            self._pids.update(pids)
            return []
        async with self._lock:
            j = self._journal()
            if j is not None and j.phase in ("applying", "rolling_back"):
                return []  # looked at again once the transaction is done (the new pids are not taken yet)
            log.warning("FRR daemon(s) restarted (%s): applying the running config %s again", ", ".join(restarted),
                        self.running.hash[:12])
            await asyncio.to_thread(self.backend.heal, self.running, restarted)
        self._pids.update(pids)  # only once applied: a daemon still starting fails the apply, tried again
        return restarted

    async def finish_rollback(self) -> str | None:
        """Try again a rollback that failed (a daemon down or starting: FRR refused the previous config), which
        left the journal ``rolling_back``: until it is done the agent refuses every change as busy, so the
        controller's repairs could never reach the device (seen in the chaos run). The change rolled back."""
        async with self._lock:
            j = self._journal()
            if j is None or j.phase != "rolling_back":
                return None
            log.warning("retrying the rollback of change %s", j.change)
            await self._restore(j)
            log.info("rolled back change %s", j.change)
            return j.change

    async def regroup(self) -> list[int]:
        """For :data:`REGROUP_S` after a port came up: the kernel nexthop groups that lost the next hops over
        it while zebra lists them as installed, given them back (FRR 8.4 does not:
        :mod:`southbound.device.nhgroups`). Under the lock: never beside a transaction's apply."""
        if self.clock() >= self._regroup_until:
            return []
        async with self._lock:
            return await asyncio.to_thread(self.backend.resync_groups)

    async def watch_daemons(self, every_s: float = 1.0) -> None:
        """:meth:`finish_rollback`, :meth:`heal_restarted` and :meth:`regroup` every ``every_s`` (the agent's
        server runs it while it serves)."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.finish_rollback()
                await self.heal_restarted()
                await self.regroup()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - FRR busy or half started: the next look tries again
                log.exception("the daemon watch failed (a rollback, a restarted daemon or a nexthop group)")

    async def read_running(self, *, epoch: int | None = None) -> ObservedDevice:
        """What discovery reads of the switch (``GetRunning``): FRR's running configuration, the interfaces."""
        self.fence("GetRunning", "", epoch)
        return await asyncio.to_thread(self.backend.read_running, self.hostname)

    async def state(self, prefixes: tuple[str, ...], *, epoch: int | None = None) -> DeviceState:
        self.fence("GetState", "", epoch)
        observed, routes = await asyncio.to_thread(self.backend.read_routes, prefixes, self.running)
        sessions = await asyncio.to_thread(self.backend.read_sessions)
        running = await asyncio.to_thread(self.backend.running_hash, self.running)  # read back from FRR
        j = self._journal()
        return DeviceState(self.hostname, running, observed, routes, sessions, j.change if j else "",
                           j.deadline if j else 0.0)


# -- the server ------------------------------------------------------------------
def default_counters(core: AgentCore) -> Any:
    """The counters an agent serves over gNMI: the kernel's (netlink, the agent's nftables table) beside
    real FRR, synthetic ones for a ``--dry-frr`` agent. Both follow the running config: its fabric ports
    (the rest are host-facing) and, for the synthetic source, its ports and prefixes."""
    if core.backend.dry:
        def config() -> tuple[str, tuple[str, ...]]:
            r = core.running
            return (r.frr_text, tuple(r.fib)) if r is not None else ("", ())
        return SyntheticCounters(core.hostname, config=config)
    return KernelCounters(lambda: fabric_ports(core.running.frr_text) if core.running is not None else frozenset())


def default_status(core: AgentCore) -> Any:
    """The operational state an agent watches and serves: its node's interfaces (netlink), bgpd's sessions and
    isisd's and ospfd's adjacencies beside real FRR; for a ``--dry-frr`` agent, its running config's ports, up
    unless listed in its record directory's ``down`` file, and their IS-IS or OSPF adjacencies
    (:class:`southbound.device.opstate.DryStatus`)."""
    backend: Any = core.backend
    if backend.dry:
        return DryStatus(lambda: core.running.frr_text if core.running is not None else "",
                         Path(backend.record_dir) / "down")
    return KernelStatus(getattr(backend, "vty_dir", None),
                        frr_text=lambda: core.running.frr_text if core.running is not None else "")


async def serve(core: AgentCore, listen: str, *, tls: Any = None, ready: Callable[[], None] | None = None,
                stop: asyncio.Event | None = None, counters: Any = None, gnmi_options: Any = None,
                status: Any = None) -> None:
    """Run ``core`` on ``listen`` (``unix:PATH`` or ``HOST:PORT``) until ``stop`` is set or SIGTERM/SIGINT.

    ``tls`` (a :class:`southbound.pki.ServerTls`) is required for TCP: mutual TLS, client certificates required.
    The same server serves gNMI (:mod:`southbound.device.gnmi_server`) over ``counters`` (a
    :class:`~southbound.device.counters.CounterSource`; default :func:`default_counters`).
    """
    await core.start()
    watcher = LinkWatcher(status if status is not None else default_status(core), on_ports=core.repair_links)
    await watcher.start()
    await core.heal_restarted()  # the daemons' process ids now: a later one is a restart
    healer = asyncio.get_running_loop().create_task(core.watch_daemons())
    server = grpc.aio.server()
    add_agent_servicer(server, core)
    add_gnmi_servicer(server, GnmiService(counters if counters is not None else default_counters(core),
                                          core.hostname, gnmi_options, status=watcher))
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    if listen.startswith("unix:"):
        path = Path(listen.removeprefix("unix:").removeprefix("//"))
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server.add_insecure_port(f"unix:{path}")
    else:
        if tls is None:
            raise ValueError("an agent on TCP needs --tls (mutual TLS with a private CA)")
        core.port = server.add_secure_port(listen, tls.server_credentials())
    await server.start()
    for svc in ("", SERVICE_NAME, GNMI_SERVICE):
        await health.set(svc, health_pb2.HealthCheckResponse.SERVING)
    log.info("agent %s listening on %s (%s)", core.hostname, listen, "dry-frr" if core.backend.dry else "frr")
    if ready is not None:
        ready()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await health.enter_graceful_shutdown()
    await server.stop(grace=1.0)
    healer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await healer
    await watcher.stop()
    await core.close()


def run_agent(*, hostname: str, frr_dir: Path, listen: str, state_dir: Path | None = None, dry_frr: bool = False,
              tls: Any = None, prepare_delay: float = 0.0, apply_delay: float = 0.0) -> None:
    """Blocking entry point of ``loom agent``."""
    state = state_dir or (frr_dir / "agent")
    backend: FrrBackend
    if dry_frr:
        backend = DryFrr(state / "dry", prepare_delay=prepare_delay, apply_delay=apply_delay)
    else:
        backend = FrrReload(frr_dir, state / "work")
    logging.basicConfig(level=os.environ.get("LOOM_LOG", "INFO"), format="%(asctime)s %(name)s %(message)s")
    asyncio.run(serve(AgentCore(backend, state, hostname), listen, tls=tls))


async def serve_dry_fleet(names: list[str], base: Path, *, ready_file: Path | None = None) -> None:
    """Many ``--dry-frr`` agents in one process, each its own gRPC server on ``base/NAME/agent.sock``
    with its own state directory: the 200-agent scale test and benchmark. Stops on SIGTERM/SIGINT."""
    stop = asyncio.Event()
    started = 0

    def one_ready() -> None:
        nonlocal started
        started += 1
        if started == len(names) and ready_file is not None:
            ready_file.write_text(str(os.getpid()))

    tasks = [asyncio.create_task(serve(AgentCore(DryFrr(base / n / "agent" / "dry"), base / n / "agent", n),
                                       f"unix:{base / n / 'agent.sock'}", ready=one_ready, stop=stop))
             for n in names]
    await asyncio.gather(*tasks)
