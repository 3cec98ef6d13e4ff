"""Reviewing a change: the dry run an operator reads before committing, computed and recorded.

:class:`Reviewer` reads what the review needs in one short session
(:func:`controller.workflow.changes.review_sources`), solves both plans with no
session open (a plan compiled now is kept in a short write of its own), takes
the per-device config diff from the agents' ``Prepare`` in preview (nothing
stored on the devices) or, with no agents or while a change commits, renders it
locally, builds the review (:func:`controller.workflow.review.review_document`,
safety replay and transition schedule, in a worker thread) and records it. A
review records the active revision it was made against: a commit refuses a
review whose active revision has moved on since ("review again").
"""

from __future__ import annotations

import asyncio
import ipaddress

from controller.model.documents import AdoptionWarningDocument, ReviewDocument
from controller.service import WriteContext
from controller.store import workflow_repo as wrepo
from controller.workflow import changes
from controller.workflow.reactions import ReactionOptions
from controller.workflow.review import local_config_diff, review_document, route_changes
from controller.workflow.runtime import Runtime
from controller.workflow.settle import unsettled_note
from safety.sweep import SweepPolicy
from southbound.discovery.forms import unchanged_costs
from southbound.render import device_configs
from southbound.transaction import new_change_id

__all__ = ["Reviewer"]


class Reviewer:
    """The review use case of one controller process; ``in_flight`` counts the reviews running now
    (automatic re-tuning waits while any runs)."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.in_flight = 0

    async def review(self, change_id: int, ctx: WriteContext) -> ReviewDocument:
        self.in_flight += 1
        try:
            return await self._review(change_id, ctx)
        finally:
            self.in_flight -= 1

    async def inputs(self, change_id: int) -> changes.ReviewInputs:
        """The change and both plans (proposed and active, around the failed parts in force), read in one
        session and solved after it closed."""
        rt = self.rt
        src = await rt.in_session(lambda s: changes.review_sources(change_id, session=s))
        proposed = await rt.solve(src.proposed, observe=True)
        active = await rt.solve(src.active_source, observe=True) if src.active_source is not None else None
        a_intent, a_plan = active if active is not None else (None, None)
        return changes.ReviewInputs(src.change, proposed[0], proposed[1], src.active, a_intent, a_plan, src.identity,
                                    src.proposed.overlay)

    async def _review(self, change_id: int, ctx: WriteContext) -> ReviewDocument:
        rt = self.rt
        inp = await self.inputs(change_id)
        busy = rt.southbound_busy or await rt.in_session(lambda s: wrepo.committing_change(session=s) is not None)
        config_diff: dict[str, str] | None = None
        if rt.driver is not None and not busy:
            config_diff = await self._agent_diff(inp)
        if config_diff is None:
            config_diff = await asyncio.to_thread(local_config_diff, inp)
        options = ReactionOptions(budget_s=rt.settings.review_reaction_s, push_s=rt.settings.reaction_push_s)
        policy = SweepPolicy(rt.settings.executor, rt.settings.executor_threshold)
        doc = await asyncio.to_thread(review_document, inp, config_diff, observe_safety=rt.observe_safety,
                                      reactions=options, sweep_policy=policy)
        left = await rt.in_session(lambda s: changes.unsettled(session=s))
        notes: dict[str, object] = {}
        if left:
            notes.update(unsettled=left, unsettled_note=unsettled_note(left, rt.driver is not None and not busy))
        if rt.driver is None:
            notes["devices_attached"] = False
        elif busy:
            notes["config_diff_note"] = "a change is committing: the config diff was rendered locally, not by Prepare"
        doc = doc.model_copy(update=notes)
        if doc.adoption is not None and rt.driver is not None and not busy:
            doc = await self._with_route_changes(inp, doc)
        await rt.in_session(lambda s: changes.record_review(change_id, doc, session=s, ctx=ctx))
        return doc

    async def _with_route_changes(self, inp: changes.ReviewInputs, doc: ReviewDocument) -> ReviewDocument:
        """An adoption's review, with every next hop the plan would move on the routers being adopted, from what
        their kernels forward on now (their agents' GetState)."""
        assert doc.adoption is not None
        agents = self.rt.agents
        got = await asyncio.gather(*(agents.state(d) for d in doc.adoption.devices), return_exceptions=True)
        kernel = {d: (None if isinstance(s, BaseException) else
                      {p: frozenset(r.weights()) for p, r in s.routes.items() if r.protocol != "loom"})
                  for d, s in zip(doc.adoption.devices, got, strict=True)}
        extra = route_changes(inp.plan, kernel, _igp_link_subnets(inp))
        warnings = await self._without_unchanged_costs(doc.adoption.warnings) + extra
        if warnings == doc.adoption.warnings:
            return doc
        adoption = doc.adoption.model_copy(update={"cosmetic": not warnings, "warnings": warnings})
        return doc.model_copy(update={"adoption": adoption})

    async def _without_unchanged_costs(self, warnings: list[AdoptionWarningDocument]) -> list[AdoptionWarningDocument]:
        """``warnings`` but the ``ip ospf cost N`` an adoption adds where ospfd computes ``N`` already (a cost from
        the interface's speed, written out: :func:`southbound.discovery.forms.unchanged_costs`), read from each
        router's running configuration and interfaces (its agent's ``GetRunning``)."""
        costs = {w.device for w in warnings if w.action == "adds" and w.line.startswith("ip ospf cost ")}
        if not costs:
            return warnings
        devices = sorted(costs)
        got = await asyncio.gather(*(self.rt.agents.running(d) for d in devices), return_exceptions=True)
        same: set[tuple[str, str, str]] = set()
        for device, observed in zip(devices, got, strict=True):
            if isinstance(observed, BaseException):
                continue  # unread: the warning stays
            added = [(w.context, w.line) for w in warnings if w.device == device and w.action == "adds"]
            same |= {(device, c, ln) for c, ln in unchanged_costs(observed, added)}
        return [w for w in warnings if (w.device, w.context, w.line) not in same]

    async def _agent_diff(self, inp: changes.ReviewInputs) -> dict[str, str]:
        """Every device's diff from its agent's Prepare in preview: the agent stores nothing, so a review
        on any replica never disturbs a transaction the leader runs (no lock needed between them)."""
        agents = self.rt.agents
        configs = {d: c for d, c in device_configs(inp.intent, inp.plan).items() if d in set(agents.devices)}
        change = f"review-{new_change_id()}"
        got = await asyncio.gather(*(agents.preview(d, change, c) for d, c in configs.items()))
        out: dict[str, str] = {}
        for d, r in sorted(zip(configs, got, strict=True)):
            if r.failed:
                out[d] = f"# Prepare failed: {r.error}"
            elif r.changed:
                out[d] = r.diff
        return out


def _igp_link_subnets(inp: changes.ReviewInputs) -> frozenset[str]:
    """The link subnets an OSPF or IS-IS rendering of ``inp``'s intent carries in the IGP (none for BGP: Loom
    announces no link subnet there)."""
    if inp.intent.routing.value == "bgp":
        return frozenset()
    return frozenset(str(ipaddress.IPv4Interface(i.address).network) for cfg in device_configs(inp.intent).values()
                     for i in cfg.interfaces if i.peer is not None and i.address is not None)
