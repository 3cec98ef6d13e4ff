"""The leader fills the reaction table (:mod:`controller.operations.table`) after every commit.

When the active revision moves, the leader plans it, in a worker thread and one
scenario at a time, around each scenario of its failure-tolerance scope
(:func:`safety.scenarios.scenarios`: the declared domains first, then under
``all_single`` every link, then every device), and judges each plan against the
active plan under the same failure. It yields to commits and reactions (it waits
while one runs), stops when the replica stops leading or a newer revision is
active, and spends at most ``budget_s`` seconds of planning on one revision (the
table says ``partial`` then: the rest are solved when they happen).
``LOOM_REACTION_PRECOMPUTE_S`` sets the budget; 0 turns precomputation off.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Protocol

from controller.model import Intent
from controller.model.errors import LoomError
from controller.model.plan import Plan
from controller.operations.overlay import Overlay, intent_ends, normal, overlay_intent
from controller.operations.reaction import DEFAULT_POLICY, judge
from controller.operations.table import TABLE, Reaction
from controller.planning import CompileOptions, compile_reaction
from controller.store import repo
from controller.store import workflow_repo as wrepo
from controller.workflow.plans import plan_source
from controller.workflow.runtime import Runtime
from safety.scenarios import scenarios

__all__ = ["REACTION", "Owner", "Precompute", "reaction_of"]

log = logging.getLogger("loom.operations.precompute")
#: how a reaction plan is compiled: its LP started from the full plan's (the same optimum within PDLP's tolerance)
REACTION = CompileOptions(warm_start=True)


def reaction_of(intent: Intent, plan: Plan, overlay: Overlay, *, key: str | None = None) -> Reaction:
    """The reaction plan of ``intent`` (the active revision's, with its pins) around ``overlay``, judged
    against ``plan`` (the active plan) under the same failure; ``key`` names that plan
    (:func:`~controller.operations.reaction.replay_key`: its replayer is built once for every overlay)."""
    t0 = time.perf_counter()
    reduced = overlay_intent(intent, overlay)
    reacted = compile_reaction(intent, plan, reduced, overlay.links, overlay.devices, REACTION)
    verdict = judge((intent, plan), overlay, (reduced, reacted), key=key)
    return Reaction(reduced, reacted, verdict, time.perf_counter() - t0)


class Owner(Protocol):
    """What the precomputation waits on (:class:`controller.operations.service.Operations`): whether its
    replica's view is live (it leads), whether a reaction is being planned, and the engine's runtime."""

    live: bool
    reacting: bool
    runtime: Runtime


class Precompute:
    """One background task per active revision (see the module docstring)."""

    def __init__(self, ops: Owner, budget_s: float):
        self.ops = ops
        self.budget_s = budget_s
        self.revision: int | None = None
        self._task: asyncio.Task[None] | None = None

    def kick(self, revision: int) -> None:
        """The active revision is ``revision``: start over unless it is the one being (or already) done."""
        if self.budget_s <= 0 or revision == self.revision:
            return
        self.cancel()
        self.revision = revision
        self._task = asyncio.get_running_loop().create_task(self._run(revision))

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        self.revision = None

    async def stop(self) -> None:
        task = self._task
        self.cancel()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self, revision: int) -> None:
        rt = self.ops.runtime
        try:
            identity, src = await rt.in_session(
                lambda s: (repo.revision_identity(revision, session=s), plan_source(revision, session=s)))
            intent, plan = await rt.solve(src)  # with the session closed
        except Exception:  # noqa: BLE001 - the store away for a moment: the next kick tries again
            log.exception("reaction table: cannot read revision %s", revision)
            self.revision = None
            return
        if not (intent.policy("failure_reaction") or DEFAULT_POLICY).enabled:
            TABLE.forget(identity)
            return
        ends = intent_ends(intent)
        todo = [normal(Overlay(sc.links, sc.devices), ends) for sc in scenarios(intent) if not sc.is_baseline]
        todo = list(dict.fromkeys(o for o in todo if o))
        run = TABLE.begin(identity, revision, len(todo))
        spent = 0.0
        for i, overlay in enumerate(todo):
            if not await self._may_go(revision):
                TABLE.finish(identity, run, "stopped")
                return
            if spent >= self.budget_s:
                TABLE.finish(identity, run, "partial")
                log.info("reaction table of revision %s: %d of %d scenarios in %.1f s (budget)", revision, i,
                         len(todo), spent)
                return
            t0 = time.perf_counter()
            try:
                got = await asyncio.to_thread(functools.partial(reaction_of, intent, plan, overlay, key=identity))
            except (LoomError, ValueError) as exc:
                TABLE.failed(identity, run)
                log.info("reaction table: no plan around %s: %s", overlay.to_document(), exc)
            else:
                TABLE.put(identity, overlay, got, run=run)
            spent += time.perf_counter() - t0
        TABLE.finish(identity, run)
        log.info("reaction table of revision %s: %d scenarios in %.1f s", revision, len(todo), spent)

    async def _may_go(self, revision: int) -> bool:
        """Wait while a commit or a reaction runs; False when this replica stopped leading or the active
        revision moved on."""
        while True:
            if not self.ops.live or self.revision != revision:
                return False
            rt = self.ops.runtime
            busy = self.ops.reacting or rt.southbound_busy or await rt.in_session(
                lambda s: wrepo.committing_change(session=s) is not None)
            if not busy:
                active = await rt.in_session(lambda s: wrepo.active_revision(session=s))
                return bool(active == revision)
            await asyncio.sleep(0.2)
