"""Baselines and anomalies on the leader (DESIGN.md, ML workloads: policy ``insight``).

Every telemetry interval, :meth:`Insight.tick` (the leader only; a follower
does nothing and forgets what it held, so that a new leadership starts from the
store):

1. reads the active revision's intent and plan (as the telemetry caches them)
   and its ``insight`` policy (its defaults when absent; ``enabled: false``
   makes no observations);
2. observes the telemetry (:func:`controller.telemetry.insight_observe.observe`)
   and steps the baselines (:func:`controller.telemetry.insight.step`), read
   from the store on the first tick of a leadership;
3. in one transaction, stores the baselines (``insight_baselines``: a restart
   goes on from them; every ``PERSIST_INTERVALS`` intervals, at once with an
   event or a new job or link, and never while they are unchanged), appends each event due to the event stream (kind
   ``job.slowdown``, ``job.stalled``, ``job.pattern_changed``, ``link.hot``; data
   ``{"job" | "link", "baseline", "observed", "evidence", "links", "cleared"}``)
   and writes an audit entry per event (action ``insight.<kind>``, with
   ``.cleared`` for an episode's end; actor ``insight``, outcome ``flagged``);
4. counts each in ``loom_insight_events_total{kind,state}`` (``raised`` or ``cleared``).

Only where a collector is attached (``runtime.telemetry``), as auto-te; an interval
while a transaction holds the devices is skipped (the fabric is changing).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from controller.aio import cancel_and_wait, repeat
from controller.model import InsightPolicy, Intent
from controller.model.errors import NotFound
from controller.model.plan import Plan
from controller.service import NO_STATUS
from controller.store import events_repo, repo
from controller.store.db import write_transaction
from controller.telemetry.insight import Baselines, InsightEvent, step
from controller.telemetry.insight_observe import observe, thresholds
from controller.workflow.runtime import Runtime
from controller.workflow.telemetry import active_context

__all__ = ["ACTOR", "Insight", "event_data"]

log = logging.getLogger("loom.insight")
ACTOR = "insight"
#: How often the loop looks again when there is nothing to observe (no active revision, not the leader).
IDLE_S = 5.0
#: The baselines are stored at least every this many intervals (at once when an event is due): a restart
#: loses at most these intervals of learning, and the store is not written every interval.
PERSIST_INTERVALS = 6


def event_data(ev: InsightEvent) -> dict[str, Any]:
    """The event stream's data of ``ev``: ``job`` or ``link`` (the other left out), and the rest."""
    doc = ev.document.model_dump(mode="json")
    return {k: v for k, v in doc.items() if not (k in ("job", "link") and v is None)}


@dataclass
class Insight:
    """The insight loop of one controller process (see the module's docstring)."""

    runtime: Runtime
    clock: Callable[[], float] = time.time
    baselines: Baselines | None = None  # None: read them from the store on the next tick
    recent: list[InsightEvent] = field(default_factory=list)  # the newest 50, newest first
    last: list[InsightEvent] = field(default_factory=list)  # the last tick's
    _stored: dict[str, Any] = field(default_factory=dict)  # the documents the store holds
    _unsaved: int = 0  # intervals stepped since the baselines were last stored
    _task: asyncio.Task[Any] | None = None

    def start(self) -> None:
        if self.runtime.telemetry is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None

    async def _loop(self) -> None:
        await repeat(self.tick, what="insight", log=log, idle_s=IDLE_S)

    async def _active(self) -> tuple[Intent, Plan] | None:
        tel = self.runtime.telemetry
        assert tel is not None
        try:
            _rev, intent, plan = await asyncio.to_thread(active_context, tel, sessions=self.runtime.db.session)
        except NotFound:
            return None
        return intent, plan

    async def tick(self, now: float | None = None) -> float:
        """One observation (the leader only); returns the seconds until the next one: what is left of the
        telemetry interval, so that the observations keep its cadence however long one takes (two intervals
        are two observations). ``now``: the clock's, read as the tick starts."""
        started = time.monotonic()
        now = self.clock() if now is None else now
        rt, tel = self.runtime, self.runtime.telemetry
        if tel is None or not rt.is_leader():
            self.baselines = None
            return IDLE_S
        if rt.southbound_busy:  # a transaction is changing the fabric: this interval is not its steady state
            return tel.options.interval_s
        active = await self._active()
        policy: InsightPolicy | None = active[0].policy("insight") if active is not None else None
        if active is None or (policy is not None and not policy.enabled):
            return IDLE_S
        intent, plan = active
        th = thresholds(intent, tel)
        jobs, links = await asyncio.to_thread(observe, tel, intent, plan, now)
        if self.baselines is None:
            self._stored = await rt.in_session(lambda s: events_repo.load_baselines(session=s))
            self.baselines = Baselines.from_documents(self._stored)
        new, events = step(self.baselines, jobs, links, now, th)
        docs = new.to_documents()
        self._unsaved += 1
        due = docs.keys() != self._stored.keys() or (docs != self._stored and self._unsaved >= PERSIST_INTERVALS)
        if events or due:
            await rt.in_session(lambda s: self._record(docs, events, now, s))
            self._stored, self._unsaved = docs, 0
        self.baselines = new
        self.last, self.recent = events, (events[::-1] + self.recent)[:50]
        for ev in events:
            state = "cleared" if ev.cleared else "raised"
            log.log(logging.INFO if ev.cleared else logging.WARNING, "insight %s %s: %s", ev.kind, state,
                    ev.document.evidence, extra={"event": ev.kind, "subject": ev.subject})
            if rt.metrics is not None:
                rt.metrics.insight_events.labels(kind=ev.kind, state=state).inc()
        return max(0.0, th.interval_s - (time.monotonic() - started))

    @staticmethod
    def _record(docs: dict[str, Any], events: list[InsightEvent], now: float, s: Session) -> None:
        at = datetime.fromtimestamp(now, UTC)
        with write_transaction(s):
            events_repo.save_baselines(docs, session=s, now=at)
            for ev in events:
                events_repo.add_event(ev.kind, event_data(ev), session=s, now=at)
                repo.add_audit(session=s, now=at, actor=ACTOR, token_id=None, request_id=None, method="SYSTEM",
                               path=f"insight/{ev.subject}",
                               action=f"insight.{ev.kind}" + (".cleared" if ev.cleared else ""),
                               outcome="flagged", status=NO_STATUS, revision=None,
                               detail=ev.document.evidence[:4000])
