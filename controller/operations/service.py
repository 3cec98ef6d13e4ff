"""The leader's operational view and failure reaction, wired to the store, the workflow and the agents.

:class:`Operations` is made and started by the change engine (:class:`controller.workflow.engine.Workflow`),
which hands it its :class:`~controller.workflow.runtime.Runtime` (the store, the agents, leadership) and
its commit path (:class:`~controller.workflow.runtime.Commit`): this package never imports the engine.
While its replica leads, it

* follows every attached device over gNMI ``ON_CHANGE``
  (:class:`~controller.operations.stream.StateStream`) into the
  :class:`~controller.operations.view.OperationalView`, whose topology is the
  active revision's intent (the head's before anything is active);
* stores what changes, in one transaction a few times a second at most: each
  event (``link.down``, ``link.up``, ``device.unreachable``...) in the event
  stream and in the audit log, and the view's documents for the followers;
* ticks the :class:`~controller.operations.reaction.FailureReaction`, and
  commits the reactions it decides on (:meth:`Operations.react`) through the
  workflow, as changes of kind ``reaction`` by ``failover``.

Followers serve ``GET /v1/state/*`` from what the leader stored (:func:`stored_view`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from sqlalchemy.orm import Session

from controller.model import FailureReactionPolicy, Intent
from controller.model.documents import ChangeState, JsonObject, OperationalStateDocument, ReactionTrigger
from controller.model.errors import LoomError
from controller.operations.overlay import Overlay
from controller.operations.precompute import Precompute
from controller.operations.reaction import (
    AUTHOR,
    DEFAULT_POLICY,
    FailureReaction,
    Judgement,
    Seen,
    plan_seconds,
    replay_key,
    run_judge,
)
from controller.operations.stream import StateStream
from controller.operations.table import TABLE
from controller.operations.view import ADJACENCY_UP, OperationalView, ViewEvent
from controller.service import Actor, WriteContext
from controller.store import events_repo, repo
from controller.store import workflow_repo as wrepo
from controller.store.db import write_transaction
from controller.workflow.agents import client_tls
from controller.workflow.plans import PlanSource, overlay_plan, plan_source
from controller.workflow.proposals import validated
from controller.workflow.runtime import Commit, Runtime, commit_at_once

__all__ = ["Operations", "OperationsOptions", "state_document", "stored_view"]

log = logging.getLogger("loom.operations")
#: where a reaction's plan came from: the reaction table, or solved when the failure happened
PlanFrom = Literal["precomputed", "solved"]
CTX = WriteContext(actor=Actor(AUTHOR, "operator"), method="SYSTEM", path="failure-reaction")
OPS_CTX = WriteContext(actor=Actor("loom-controller (operational state)", "admin"), method="SYSTEM",
                       path="operational-state")


def _now() -> datetime:
    return datetime.now(UTC)


class OperationsOptions:
    """``tick_s``: how often the view is stored and the reactor looks; ``topology_s``: how often the active
    revision (and so the links and devices followed) is read again; ``adjacency_grace_s``: how long an IS-IS
    or OSPF adjacency may be other than up on a link that is up before drift reports it."""

    def __init__(self, tick_s: float = 0.1, topology_s: float = 2.0, adjacency_grace_s: float = 10.0):
        self.tick_s = tick_s
        self.topology_s = topology_s
        self.adjacency_grace_s = adjacency_grace_s


class Operations:
    """The operational view of one replica (live while it leads), and its failure reaction."""

    def __init__(self, runtime: Runtime, *, commit: Commit, options: OperationsOptions | None = None,
                 clock: Any = time.time):
        """``runtime``: the change engine's store, agents and leadership; ``commit``: its commit path, through
        which the reactions are committed."""
        self.runtime = runtime
        self._commit = commit
        self.options = options or OperationsOptions()
        self.clock = clock
        self.view = OperationalView()
        self.reaction = FailureReaction(self)
        self.stream: StateStream | None = None
        self.live = False  # this replica's view is the one in force (it leads, and follows the devices)
        self._pending: list[ViewEvent] = []
        self._saved = -1
        self._topology: tuple[int | None, Intent | None, FailureReactionPolicy] = (None, None, DEFAULT_POLICY)
        self._topology_at = 0.0
        self._in_force: tuple[Overlay, bool] = (Overlay(), False)  # the overlay in force, a commit running
        self._in_force_at = float("-inf")
        self._task: asyncio.Task[None] | None = None
        self.reacting = False  # a reaction is being planned or judged (the precomputation waits)
        self.precompute = Precompute(self, runtime.settings.reaction_precompute_s)

    def failure_watch(self, intent: Intent) -> Callable[[], str | None]:
        """A check for the read-back of a commit of ``intent`` (:attr:`Runtime.failure_watch`): while this
        replica's view is the live one, the links down for the failure reaction's ``detect_s`` (a failure, not a
        blip) that ``intent`` still routes over (neither drained nor on a drained device: a reaction's overlay
        drains its failed parts). Such a commit cannot be read back as planned; failing it at once (it rolls
        back) lets the failure reaction, which waits for the commit in progress, go at once too, not after the
        read-back's timeout (a drift repair read back for 20 s while a link was down, and held a reaction past
        the chaos run's 20 s)."""
        drained, devices = intent.drained_links, intent.drained_devices

        def check() -> str | None:
            if not self.live:
                return None
            detect_s = self._topology[2].detect_s
            gone = sorted(lid for lid in self.view.down_links(self.clock(), for_s=detect_s)
                          if lid not in drained and not {self.view.links[lid].a, self.view.links[lid].b} & devices)
            return (f"link {', '.join(gone)} is down (for {detect_s:g} s or more) and the plan routes over it"
                    if gone else None)
        return check

    # -- life cycle -----------------------------------------------------------------------
    async def start(self) -> None:
        rt = self.runtime
        if rt.driver is not None:
            endpoints = {d: rt.driver.endpoint(d) for d in rt.driver.devices}
            self.stream = StateStream(endpoints, self._report, self._reachable, rt.is_leader,
                                      tls=client_tls(rt.settings))
            await self.stream.start()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await self.precompute.stop()
        if self.stream is not None:
            await self.stream.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            await self._flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.options.tick_s)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the store may be away for a moment: next tick
                log.exception("operational state: tick failed")

    async def tick(self) -> None:
        """Refresh the topology now and then, store what changed, and let the reactor look."""
        self.live = self.runtime.is_leader() and self.stream is not None
        if not self.live:
            self.precompute.cancel()
            return
        now = self.clock()
        if now - self._topology_at >= self.options.topology_s:
            await self._refresh_topology(now)
        await self._flush()
        rev, _, policy = self._topology
        if rev is None:
            return
        # the store is asked what is in force only while something is down or overlaid (else now and then)
        quiet = not self.view.down_links(now) and not self.view.failed_devices(now) and not self._in_force[0]
        if not quiet or now - self._in_force_at >= self.options.topology_s:
            self._in_force = await self.runtime.in_session(_in_force)
            self._in_force_at = now
        in_force, busy = self._in_force
        await self.reaction.tick(policy, in_force, busy or self.runtime.southbound_busy, now)

    async def _refresh_topology(self, now: float) -> None:
        """The active revision's intent, read (and validated) only when the active revision moved."""
        self._topology_at = now
        active, rev = await self.runtime.in_session(_revisions)
        if active is not None:
            self.precompute.kick(active)  # nothing when precomputation is off
        if rev is None or (rev == self._topology[0] and self._topology[1] is not None):
            return
        intent = await self.runtime.in_session(lambda s: validated(repo.revision_document(rev, session=s)))
        policy = intent.policy("failure_reaction") or DEFAULT_POLICY
        self._topology = (rev, intent, policy)
        self._pending += self.view.set_topology(intent, now)
        if self.stream is not None:
            self.stream.devices = {d.name for d in intent.devices}

    # -- reports from the stream ------------------------------------------------------------
    async def _report(self, device: str, what: str, key: tuple[str, ...], value: str | None) -> None:
        now = self.clock()
        if what in ("isis", "ospf"):
            port, instance, neighbor = key
            self._pending += self.view.report_adjacency(device, (port, instance, neighbor), value, now,
                                                        protocol=what)
        elif value is None:
            return  # an interface or a BGP neighbor the target deleted: its last state stands
        elif what == "port":
            self._pending += self.view.report_port(device, key[0], value, now)
        else:
            self._pending += self.view.report_session(device, key[0], value, now)

    async def _reachable(self, device: str, ok: bool, why: str) -> None:
        self._pending += self.view.set_reachable(device, ok, self.clock(), why)

    # -- the store ------------------------------------------------------------------------
    async def _flush(self) -> None:
        events, self._pending = self._pending, []
        version = self.view.version
        if not events and version == self._saved:
            return
        doc = self.view.to_document(self.clock())

        def save(s: Session) -> None:
            with write_transaction(s):
                now = _now()
                for e in events:
                    events_repo.add_event(e.kind, e.data, session=s, now=now)
                    _audit(s, e.kind, e.data, now)
                events_repo.save_opstate(doc.model_dump(mode="json"), session=s, now=now)
        try:
            await self.runtime.in_session(save)
        except Exception:
            self._pending = events + self._pending  # stored with the next flush
            raise
        self._saved = version
        for e in events:
            log.warning("%s: %s", e.kind, e.data.get("link") or e.data.get("device"),
                        extra={"event": e.kind, **{k: v for k, v in e.data.items() if k in ("link", "device")}})
        self._count(events)

    def _count(self, events: list[ViewEvent]) -> None:
        metrics = self.runtime.metrics
        if metrics is None or not hasattr(metrics, "state_transitions"):
            return
        for e in events:
            metrics.state_transitions.labels(event=e.kind).inc()
        docs = self.view.links_document(self.clock()).links
        for oper in ("up", "down", "unknown"):
            metrics.links_by_state.labels(oper=oper).set(sum(1 for x in docs if x.oper == oper))
        metrics.devices_unreachable.set(sum(1 for d in self.view.devices.values() if not d.reachable))

    async def record_decision(self, kind: str, data: JsonObject) -> None:
        """A reaction's decision that commits nothing (refused, worse): an event and an audit entry."""
        self.reaction.last = {"event": kind, **data}

        def save(s: Session) -> None:
            with write_transaction(s):
                now = _now()
                events_repo.add_event(kind, data, session=s, now=now)
                _audit(s, kind, data, now)
        await self.runtime.in_session(save)
        log.warning("%s: %s", kind, data.get("reason"))

    def drift(self, overlay: JsonObject | None, sessions: dict[str, dict[str, str]],
              circuits: dict[str, frozenset[str]] | None = None) -> dict[str, list[str]]:
        """What the fabric runs that the plan in force does not expect, per device: a link down that no
        overlay leaves out, a BGP session not established over a link that is up and in use (``sessions``:
        device -> the neighbor key of each session -> its port), an IS-IS or OSPF adjacency not up on a link
        that is up and in use (``circuits``: device -> the ports the plan runs IS-IS or OSPF on, drained ones
        left out), for
        ``adjacency_grace_s`` (an adjacency takes a few hellos to come up). Empty unless this replica's view is
        live."""
        if not self.live:
            return {}
        out: dict[str, list[str]] = {}
        over = Overlay.of(overlay)
        quiet: set[tuple[str, str]] = set()  # link ends whose sessions are expected down, or already reported
        for ln in self.view.links.values():
            if ln.oper != "up" or ln.id in over.links or ln.a in over.devices or ln.b in over.devices:
                quiet |= {(ln.a, ln.a_port), (ln.b, ln.b_port)}
            if ln.oper == "down" and ln.id not in over.links:
                for d in (ln.a, ln.b):
                    out.setdefault(d, []).append(f"link {ln.id} is down where the plan expects it up ({ln.why})")
        for name in sorted(self.view.names - over.devices):
            dev = self.view.devices.get(name)
            ports = sessions.get(name, {})
            for peer, state in sorted((dev.sessions if dev is not None else {}).items()):
                if peer not in ports:  # not the plan's (a neighbor a change removed: its last state stands)
                    continue
                if state != "ESTABLISHED" and (name, ports[peer]) not in quiet:
                    out.setdefault(name, []).append(f"BGP session {peer} is {state}")
        for name, why in self._adjacency_drift(circuits or {}, quiet):
            out.setdefault(name, []).append(why)
        return out

    def _adjacency_drift(self, circuits: dict[str, frozenset[str]],
                         quiet: set[tuple[str, str]]) -> list[tuple[str, str]]:
        """The IS-IS or OSPF ports of ``circuits`` on links up and in use (not ``quiet``) whose adjacency has
        not been up for ``adjacency_grace_s``: (device, why)."""
        now, grace = self.clock(), self.options.adjacency_grace_s
        out: list[tuple[str, str]] = []
        for name in sorted(circuits):
            for port in sorted(circuits[name]):
                link_id = self.view.port_link(name, port)
                link = self.view.links.get(link_id) if link_id is not None else None
                if link is None or (name, port) in quiet:
                    continue
                adj = self.view.adjacency_at(name, port)  # None too while its agent is unreachable
                if adj is not None and adj[0] in ADJACENCY_UP or not self.view.reachable(name):
                    continue
                if now - max(link.since, adj[1] if adj is not None else 0.0) < grace:
                    continue
                state = f"is {adj[0]}" if adj is not None else "is not reported"
                out.append((name, f"{self.view.protocol} adjacency on {port} (link {link.id}) {state} "
                                  "while the link is up"))
        return out

    # -- reacting --------------------------------------------------------------------------
    async def react(self, desired: Overlay, seen: Seen) -> bool:
        """Plan the active revision without ``desired``'s parts (looked up in the reaction table when it
        was precomputed), judge it against the plan in force under the same failure, and commit it when
        it is no worse; True when a reaction change was committed (started)."""
        t0 = time.perf_counter()
        self.reacting = True
        try:
            got = await self._plan_reaction(desired)
        except (LoomError, ValueError) as exc:
            await self.record_decision("reaction.refused", {"reason": f"cannot plan around the failure: {exc}"[:500],
                                                            "overlay": desired.to_document(), **seen.to_json()})
            return False
        finally:
            self.reacting = False
        if got is None:
            return False
        active, judgement, source = got
        trigger = ReactionTrigger(event=seen.event, links=seen.links, devices=seen.devices,
                                  detected_at=seen.detected_at, verdict=judgement.verdict, current=judgement.current,
                                  reaction=judgement.reaction, plan=source, plan_seconds=plan_seconds(t0))
        data = trigger.model_dump(mode="json")
        if not judgement.commit:
            await self.record_decision("reaction.refused", {
                "reason": "the reaction plan is worse than the plan in force under the same failure",
                "overlay": desired.to_document(), **data})
            return False
        change = await self.runtime.in_session(lambda s: _create_reaction(active, desired, trigger, session=s))
        self.reaction.last = {"event": "reaction.committing", "change": change, **data}
        log.warning("failure reaction: change %s leaves out %s (%s, %s plan)", change, desired.to_document(),
                    judgement.verdict, source)
        await commit_at_once(self.runtime, self._commit, change, CTX, then="the reaction is tried again")
        return True

    async def _plan_reaction(self, desired: Overlay) -> tuple[int, Judgement, PlanFrom] | None:
        """The active revision, the judgement of its plan around ``desired`` and where that plan came from
        (``precomputed``, or ``solved`` now, outside any store session); None when nothing is active."""
        def read(s: Session) -> tuple[int, str, PlanSource, Overlay] | None:
            active = wrepo.active_revision(session=s)
            if active is None:
                return None
            return (active, repo.revision_identity(active, session=s), plan_source(active, session=s),
                    Overlay.of(wrepo.active_overlay(session=s)))
        got = await self.runtime.in_session(read)
        if got is None:
            return None
        active, identity, source, in_force = got
        full = await self.runtime.solve(source)
        entry = TABLE.get(identity, desired) if desired else None
        if entry is not None and entry.judgement is not None and not in_force:
            return active, entry.judgement, "precomputed"  # judged against the full plan: the one in force
        current = full if not in_force else await asyncio.to_thread(overlay_plan, identity, full[0], in_force)
        target = full if not desired else await asyncio.to_thread(overlay_plan, identity, full[0], desired)
        judged = await run_judge(current, desired, target, key=replay_key(identity, in_force))
        return active, judged, "precomputed" if entry is not None else "solved"


def _audit(s: Session, kind: str, data: dict[str, Any], now: datetime) -> None:
    what = data.get("link") or data.get("device") or data.get("change") or ""
    repo.add_audit(session=s, now=now, actor=OPS_CTX.actor.name, token_id=None, client=None, request_id=None,
                   method=OPS_CTX.method, path=OPS_CTX.path, action=kind, outcome="accepted", status=200,
                   revision=None, detail=f"{what}: {data.get('reason') or ''}"[:4000])


def _in_force(s: Session) -> tuple[Overlay, bool]:
    return Overlay.of(wrepo.active_overlay(session=s)), wrepo.committing_change(session=s) is not None


def _revisions(s: Session) -> tuple[int | None, int | None]:
    """The active revision, and the one whose links and devices the view follows: the active one, else the
    head."""
    active = wrepo.active_revision(session=s)
    if active is not None:
        return active, active
    head = repo.head_revision(session=s)
    return None, head.id if head is not None else None


def _topology(s: Session) -> tuple[int | None, Intent | None]:
    _, rev = _revisions(s)
    if rev is None:
        return None, None
    return rev, validated(repo.revision_document(rev, session=s))


def _create_reaction(active: int, overlay: Overlay, trigger: ReactionTrigger, *, session: Session) -> int:
    with write_transaction(session):
        what = ", ".join([*sorted(overlay.links), *sorted(overlay.devices)]) or "nothing"
        message = (f"failure reaction: plan revision {active} without {what}" if overlay
                   else f"failure reaction: the full plan of revision {active} returns")
        ch = wrepo.add_change(session=session, kind="reaction", base_revision=active, proposed_revision=active,
                              message=message, author=AUTHOR, now=_now(), trigger=trigger.model_dump(mode="json"),
                              overlay=overlay.to_document())
        review = {"verdict": "safe" if trigger.verdict == "safe" else "unsafe", "active_revision": active,
                  "reaction": trigger.model_dump(mode="json")}
        wrepo.update_change(ch.id, session=session, state=ChangeState.REVIEWED, review=review,
                            reviewed_active=active, verdict=review["verdict"])
        wrepo.add_transition(ch.id, ChangeState.REVIEWED, session=session, actor=AUTHOR, now=_now(),
                             reason=f"reaction {trigger.verdict}: {trigger.current} in force under the "
                                    f"failure, {trigger.reaction} with the reaction")
    return ch.id


def stored_view(session: Session) -> OperationalStateDocument | None:
    """What the leader stored last (its ``links`` and ``devices`` documents), or None."""
    got = events_repo.load_opstate(session=session)
    return OperationalStateDocument.model_validate(got[1]) if got is not None else None


class _Engine(Protocol):
    @property
    def operations(self) -> Operations: ...


def state_document(wf: _Engine, session: Session) -> OperationalStateDocument:
    """The links and devices as the fabric reports them: this replica's live view when it leads, else what
    the leader stored, else every link and device of the intent unknown (nothing reported yet)."""
    ops = wf.operations
    now = ops.clock()
    if ops.live:
        return ops.view.to_document(now)
    stored = stored_view(session)
    if stored is not None:
        return stored
    view = OperationalView()
    _, intent = _topology(session)
    if intent is not None:
        view.set_topology(intent, now)
    return view.to_document(now)
