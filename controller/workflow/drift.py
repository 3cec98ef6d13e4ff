"""Drift: every device held against the active revision, and the active revision pushed again to repair it.

Every ``drift_interval`` seconds (on the leader) and after each commit,
:meth:`Drift.check_drift` reads every device's ``GetState`` and holds it against
the active revision: its config hash, a change awaiting confirmation, its kernel
routes against the plan where the agent observes them, and what the operational
view reports that the plan does not expect (a link down that no overlay leaves
out, a BGP session down, an IS-IS or OSPF adjacency down on a link that is up).
The report is stored; with ``drift_repair`` (or ``POST /v1/drift/repair``) the
active revision is pushed again as a ``repair`` change through the one commit
path (:meth:`Drift.repair`), unless settling is still driving devices.
:meth:`Drift.device_state` answers one device's state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from controller.model import LINK_STATE, Intent
from controller.model.documents import (
    DeviceDriftDocument,
    DeviceStateDocument,
    DriftReportDocument,
    InstalledNextHop,
    JsonObject,
    RepairDocument,
    SessionDocument,
)
from controller.model.errors import NotFound, Unreachable
from controller.model.plan import Plan
from controller.service import Actor, WriteContext
from controller.store import workflow_repo as wrepo
from controller.store.db import write_transaction
from controller.store.workflow_repo import CommitBusy
from controller.workflow import changes
from controller.workflow.review import expected_hashes
from controller.workflow.runtime import Commit, Runtime, commit_at_once
from southbound.config import DeviceConfig
from southbound.driver import error_text
from southbound.render import device_configs
from southbound.state import DeviceState
from southbound.wcmp import compare

__all__ = ["Drift"]

log = logging.getLogger("loom.workflow")
#: what the operational view says the fabric runs that the plan in force does not expect, per device
#: (:meth:`controller.operations.service.Operations.drift`: the overlay in force, each device's sessions and
#: the ports it runs IS-IS or OSPF on)
Operational = Callable[[JsonObject | None, dict[str, dict[str, str]], dict[str, frozenset[str]]],
                       dict[str, list[str]]]
REPAIR_CTX = WriteContext(actor=Actor("loom-controller (drift repair)", "admin"), method="SYSTEM", path="drift")


def _now() -> datetime:
    return datetime.now(UTC)


def _device_drift(st: DeviceState, want: str, intent: Intent, plan: Plan, d: str, config: DeviceConfig,
                  fabric: list[str]) -> list[str]:
    """How device ``d``'s state ``st`` differs from the active revision (config hash ``want``, the plan)."""
    details: list[str] = []
    if st.running_hash != want:
        details.append(f"running config {st.running_hash[:12]} is not the active revision's {want[:12]}")
    if st.pending_change:
        details.append(f"change {st.pending_change} awaits confirmation on the device")
    dp = plan.devices.get(d)
    if st.observed and dp is not None:
        details += compare(dp, st, realization=intent.wcmp_realization.value, wcmp=intent.wcmp_enabled,
                           fabric_prefixes=fabric, originated=config.originated)
    return details


def link_state_ports(config: DeviceConfig) -> frozenset[str]:
    """The ports ``config`` runs IS-IS or OSPF adjacencies on: its fabric links, drained ones left out (as
    rendered)."""
    if config.routing not in LINK_STATE:
        return frozenset()
    return frozenset(i.name for i in config.interfaces if i.peer is not None and not i.host and not i.drained)


class Drift:
    """The drift use case of one controller process (see the module docstring)."""

    def __init__(self, rt: Runtime, *, operational: Operational, commit: Commit):
        self.rt = rt
        self._operational = operational
        self._commit = commit
        self._lock = asyncio.Lock()

    async def device_state(self, name: str) -> DeviceStateDocument:
        """What device ``name``'s agent reports it runs now, and where it is reached."""
        driver = self.rt.driver
        if driver is None or name not in driver.devices:
            raise NotFound(f"device {name!r} has no agent attached to this controller")
        try:
            st = await driver.state(name)
        except Exception as exc:
            raise Unreachable(name, error_text(exc)) from exc
        return DeviceStateDocument(
            hostname=st.hostname, running_hash=st.running_hash, observed=st.observed,
            routes={p: [InstalledNextHop(port=nh.port, via=nh.via, weight=nh.weight) for nh in r.nexthops]
                    for p, r in sorted(st.routes.items())},
            sessions=[SessionDocument(neighbor=x.neighbor, state=x.state, remote_asn=x.remote_asn,
                                      prefixes_received=x.prefixes_received) for x in st.sessions],
            pending_change=st.pending_change, endpoint=driver.endpoint(name))

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.rt.settings.drift_interval)
            if not self.rt.is_leader():
                continue  # the leader checks (and repairs) drift; followers only serve its reports
            try:
                await self.check_drift(repair=self.rt.settings.drift_repair)
            except Exception:
                log.exception("drift check failed")

    async def check_drift(self, *, repair: bool = False) -> DriftReportDocument:
        """Hold every device against the active revision; store and return the report."""
        rt = self.rt
        async with self._lock:
            def read(s: Session) -> tuple[int | None, bool]:
                return changes.active_revision(session=s), wrepo.committing_change(session=s) is not None
            active, busy = await rt.in_session(read)
            doc = DriftReportDocument(checked_at=_now().isoformat(), active_revision=active, devices={})
            if busy:
                last = await rt.in_session(lambda s: wrepo.latest_drift(session=s))
                if last is not None:
                    return DriftReportDocument.model_validate(last)
                return doc.model_copy(update={"note": "a change is committing: not checked"})
            if active is None or rt.driver is None:
                doc.note = "no devices attached" if rt.driver is None else "no revision is active yet"
                await self._save(doc, active)
                return doc
            doc.devices, down = await self._hold(active)
            await self._save(doc, active)
            drifted = [d for d, r in doc.devices.items() if r.status == "drift"]
        if repair and drifted:
            left = await rt.in_session(lambda s: changes.unsettled(session=s))
            if left:  # settling drives those devices first; a repair now would find them busy
                doc.repair_note = f"not repaired: change(s) {', '.join(str(u.change) for u in left)} settle"
            elif down:  # a failure, not an edit: pushing the revision again cannot bring a link up, and would hold
                # the commit slot while the failure reaction needs it (its overlay is what the kernels then match)
                doc.repair_note = f"not repaired: links of {', '.join(down)} are down where the plan expects them " \
                                  "up: the failure reaction acts first"
            else:
                try:
                    doc.repair = await self.repair(drifted)
                except CommitBusy as exc:
                    doc.repair_note = f"not repaired: {exc}"
        return doc

    async def _hold(self, active: int) -> tuple[dict[str, DeviceDriftDocument], list[str]]:
        """Every attached device of the active revision: ok, drift or unreachable, with the details; and the
        devices at the ends of links that are down where the plan expects them up."""
        rt = self.rt
        assert rt.driver is not None
        overlay = await rt.in_session(lambda s: wrepo.active_overlay(session=s))
        intent, plan = await rt.plan(active, overlay)
        want = await asyncio.to_thread(expected_hashes, intent, plan)
        configs = device_configs(intent, plan)
        operational = self._operational(  # links, sessions, adjacencies down that the plan expects up
            overlay, {d: {n.key: n.port for n in c.neighbors} for d, c in configs.items()},
            {d: link_state_ports(c) for d, c in configs.items()})
        names = sorted(set(want) & set(rt.driver.devices))
        fabric = sorted({p for dp in plan.devices.values() for p in dp.routes})
        # the leader's reads carry its epoch too (they raise the agents' fence); a follower's do not
        states = await rt.states(names, rt.fenced(rt.epoch) if rt.is_leader() else None)
        out: dict[str, DeviceDriftDocument] = {}
        for d in names:
            st = states[d]
            if isinstance(st, BaseException):
                out[d] = DeviceDriftDocument(status="unreachable", details=[error_text(st)])
                continue
            details = _device_drift(st, want[d], intent, plan, d, configs[d], fabric) + operational.get(d, [])
            out[d] = DeviceDriftDocument(status="drift" if details else "ok", details=details)
        # a link down (not a session or adjacency: a daemon restarted empty is what a repair brings back)
        return out, sorted(d for d, why in operational.items() if any(w.startswith("link ") for w in why))

    async def _save(self, doc: DriftReportDocument, active: int | None) -> None:
        def save(s: Session) -> None:
            with write_transaction(s):
                wrepo.add_drift(doc.model_dump(mode="json"), session=s, now=_now(), active=active)
        await self.rt.in_session(save)
        if self.rt.metrics is not None:
            self.rt.metrics.drift_devices.set(sum(1 for r in doc.devices.values() if r.status != "ok"))

    async def repair(self, devices: list[str] | None = None, ctx: WriteContext | None = None) -> RepairDocument:
        """Push the active revision again, as a ``repair`` change (same gate-free commit path)."""
        ctx = ctx or REPAIR_CTX
        active = await self.rt.in_session(lambda s: changes.active_revision(session=s))
        if active is None:
            raise NotFound("no revision is active: nothing to repair")
        why = f"drift repair: re-push active revision {active}" + (f" ({', '.join(devices)})" if devices else "")

        def make(s: Session) -> int:
            with write_transaction(s):
                ch = wrepo.add_change(session=s, kind="repair", base_revision=active, proposed_revision=active,
                                      message=why, author=ctx.actor.name, now=_now())
            return ch.id
        change_id = await self.rt.in_session(make)
        ch = await commit_at_once(self.rt, self._commit, change_id, ctx, then="the next drift check repairs")
        return RepairDocument(change=ch.id, revision=active)
