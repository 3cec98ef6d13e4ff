"""Changes in the store: creation, review bookkeeping, the commit gate and the outcome.

This module owns the change state machine on the store side, as plain
functions over a session (the API and the engine call them; southbound is the
engine's business). A change is created from a base revision and either a JSON
Patch or a whole document; the resulting intent is validated whole and stored
as the proposed revision (or an identical existing one is reused). Its life:
``draft -> reviewed -> committing -> committed | failed | rolled_back``, each
move a transition row with time, actor and reason, and each an audit entry.
:func:`begin_commit` is the safety gate and the durable record written before
any device is touched: it refuses an unreviewed change, a review made against
another active revision ("review again"), an unsafe verdict without ``force``
and a reason (:class:`~controller.model.errors.SafetyViolation` with the failing
scenarios), and a second concurrent commit (the store's unique commit slot).
Plans are compiled once per revision and kept compressed (:mod:`controller.workflow.plans`, whose
:func:`plan_for`, :func:`overlay_plan` and :func:`plan_document` this module re-exports).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from controller import service
from controller.model import Intent
from controller.model.documents import (
    FINAL_STATES,
    REVIEWABLE_STATES,
    AutoTeTrigger,
    ChangeDocument,
    ChangeState,
    DrainCheckDocument,
    JsonObject,
    OverlayDocument,
    ProgressDocument,
    ReviewBrief,
    ReviewDocument,
    SafetyBrief,
    SettleDocument,
    TransitionDocument,
    UnsettledDocument,
    answer_json,
)
from controller.model.errors import (
    Conflict,
    Deposed,
    IntentError,
    InvalidIntent,
    NotFound,
    SafetyViolation,
    StoreContention,
)
from controller.model.plan import Plan
from controller.operations.overlay import Overlay
from controller.service import WriteContext
from controller.store import events_repo, repo
from controller.store import workflow_repo as wrepo
from controller.store.db import lock_revisions, retrying, write_transaction
from controller.store.repo import ConcurrentWrite
from controller.store.workflow_repo import Change
from controller.workflow.jsonpatch import apply_patch
from controller.workflow.plans import (
    PlanSource,
    Solved,
    keep,
    overlay_plan,
    plan_document,
    plan_for,
    plan_source,
    solve,
)
from controller.workflow.proposals import fold_into_head, store_proposed, validated

__all__ = [
    "FINAL", "STATES", "ReviewInputs", "ReviewSources", "RevisionStatus", "begin_commit", "change_document",
    "change_model", "create_change",
    "create_rollback", "finish_commit", "get_change", "list_changes", "overlay_plan", "plan_document", "plan_for",
    "record_review", "record_settle", "review_inputs", "review_sources", "settle_document", "status", "take_up",
    "unsettled", "validated",
]

STATES = tuple(ChangeState)
FINAL = FINAL_STATES
REVIEWABLE = REVIEWABLE_STATES
Doc = dict[str, Any]


def _now() -> datetime:
    return datetime.now(UTC)


def _audit(session: Session, ctx: WriteContext, action: str, *, outcome: str = "accepted", status: int = 200,
           revision: int | None = None, detail: str = "") -> None:
    repo.add_audit(session=session, now=_now(), actor=ctx.actor.name, token_id=ctx.actor.token_id,
                   client=ctx.client, request_id=ctx.request_id, method=ctx.method, path=ctx.path, action=action,
                   outcome=outcome, status=status, revision=revision, detail=detail[:4000])


def _brief(review: Doc | None) -> ReviewBrief | None:
    """A review without its bulk (per-scenario results, diffs): what a list of changes shows."""
    if review is None:
        return None
    safety = review.get("safety") or {}
    return ReviewBrief.model_validate({
        "verdict": review.get("verdict"), "proposed_revision": review.get("proposed_revision"),
        "active_revision": review.get("active_revision"), "summary": review.get("summary"),
        "safety": SafetyBrief(verdict=safety.get("verdict"), counts=safety.get("counts")), "brief": True})


def change_model(ch: Change, *, full: bool = True) -> ChangeDocument:
    """The API's ``Change``, its review, progress, trigger and settling read from what the store keeps;
    ``full=False`` (lists) keeps only the review's verdict and summary."""
    fields: dict[str, object] = {
        "id": ch.id, "kind": ch.kind, "state": ch.state, "base_revision": ch.base_revision,
        "proposed_revision": ch.proposed_revision, "message": ch.message, "author": ch.author,
        "created_at": ch.created_at.isoformat(),
        "transitions": [TransitionDocument(state=t.state, at=t.at.isoformat(), actor=t.actor, reason=t.reason)
                        for t in ch.transitions],
        "review": ch.review if full else _brief(ch.review), "progress": ch.progress,
        "force_reason": ch.force_reason, "error": ch.error, "transaction": ch.transaction,
        "trigger": ch.trigger, "settled": ch.settled, "settle": ch.settle}
    if ch.overlay:
        fields["overlay"] = Overlay.of(ch.overlay).to_model()
    return ChangeDocument.model_validate(fields)


def change_document(ch: Change, *, full: bool = True) -> JsonObject:
    """:func:`change_model` as JSON, the way the POST routes answer it (what an ``Idempotency-Key`` keeps)."""
    return answer_json(change_model(ch, full=full))


# -- reading --------------------------------------------------------------------
def get_change(change_id: int, *, session: Session) -> Change:
    return wrepo.get_change(change_id, session=session)


def list_changes(*, session: Session, limit: int, offset: int, state: ChangeState | str | None = None
                 ) -> tuple[list[Change], int]:
    return wrepo.list_changes(session=session, limit=limit, offset=offset, state=state)


@dataclass(frozen=True)
class RevisionStatus:
    """The head and active revisions, and the change committing now (``GET /v1/status``)."""

    head_revision: int | None
    active_revision: int | None
    committing_change: int | None


def status(*, session: Session) -> RevisionStatus:
    head = repo.head_revision(session=session)
    busy = wrepo.committing_change(session=session)
    return RevisionStatus(head.id if head else None, wrepo.active_revision(session=session),
                          busy.id if busy else None)


def active_overlay(*, session: Session) -> OverlayDocument:
    """The overlay in force (empty lists when none)."""
    return Overlay.of(wrepo.active_overlay(session=session)).to_model()


# -- creating -------------------------------------------------------------------
def _replay_of(ctx: WriteContext, *, session: Session) -> int | None:
    """The change an earlier request with ``ctx``'s ``Idempotency-Key`` made or committed (the key is kept in
    that request's transaction), or None."""
    stored = service.stored_answer(ctx, session=session)
    return int(stored["id"]) if stored is not None else None


def _keep_key(change_id: int, status: int, *, session: Session, ctx: WriteContext) -> None:
    """Keep ``ctx``'s ``Idempotency-Key`` with the answer (``status``, the change's document) in the
    transaction of the work, so a replay of a request whose answer was lost finds it done."""
    if ctx.idempotency is not None:
        service.keep_answer(ctx, status, change_document(wrepo.get_change(change_id, session=session)),
                            session=session, now=_now())


def create_change(*, session: Session, ctx: WriteContext, base_revision: int, patch: list[Any] | None,
                  intent: Any | None, message: str = "", kind: str = "change",
                  trigger: AutoTeTrigger | None = None) -> Change:
    """A draft change: the base's document with ``patch`` applied, or ``intent`` whole.

    Raises :class:`InvalidIntent` (422, nothing stored) when the result is not a valid intent
    (or a patch operation fails), :class:`NotFound` for an unknown base revision.
    """
    if (patch is None) == (intent is None):
        raise InvalidIntent([IntentError("body", "give exactly one of 'patch' and 'intent'")])
    def attempt() -> int:
        with write_transaction(session):
            lock_revisions(session)
            prior = _replay_of(ctx, session=session)
            if prior is not None:
                return prior
            base = repo.get_revision(base_revision, session=session)
            document = (apply_patch(repo.revision_document(base.id, session=session), patch)
                        if patch is not None else intent)
            proposed = validated(document)
            rev = store_proposed(proposed, base, session=session, ctx=ctx)
            ch = wrepo.add_change(session=session, kind=kind, base_revision=base.id, proposed_revision=rev,
                                  message=message, author=ctx.actor.name, now=_now(),
                                  trigger=trigger.model_dump(mode="json") if trigger is not None else None)
            _audit(session, ctx, f"{kind}.create", status=201, revision=rev,
                   detail=f"change {ch.id}: base {base.id} -> proposed {rev}" + (f": {message}" if message else ""))
            _keep_key(ch.id, 201, session=session, ctx=ctx)
        return ch.id

    try:
        change_id = retrying(attempt, retry_on=(StoreContention, ConcurrentWrite))
    except ConcurrentWrite as exc:  # every attempt lost the race for the next revision
        raise StoreContention(str(exc)) from exc
    return wrepo.get_change(change_id, session=session)


def create_rollback(revision: int, *, session: Session, ctx: WriteContext, message: str = "") -> Change:
    """A change whose target is ``revision``'s intent (the same revision, immutable), based on the active one."""
    with write_transaction(session):
        prior = _replay_of(ctx, session=session)
        if prior is not None:
            return wrepo.get_change(prior, session=session)
        rev = repo.get_revision(revision, session=session)
        active = wrepo.active_revision(session=session)
        ch = wrepo.add_change(session=session, kind="rollback", base_revision=active or rev.id,
                              proposed_revision=rev.id, message=message or f"roll back to revision {rev.id}",
                              author=ctx.actor.name, now=_now())
        _audit(session, ctx, "rollback.create", status=201, revision=rev.id,
               detail=f"change {ch.id}: roll back from {active} to revision {rev.id}")
        _keep_key(ch.id, 201, session=session, ctx=ctx)
    return wrepo.get_change(ch.id, session=session)


# -- review ---------------------------------------------------------------------
@dataclass(frozen=True)
class ReviewInputs:
    change: Change
    intent: Intent
    plan: Plan
    active: int | None
    active_intent: Intent | None
    active_plan: Plan | None
    #: the proposed revision's identity (the reaction table's key) and the overlay in force it is planned around
    identity: str | None = None
    overlay: Overlay = Overlay()


@dataclass(frozen=True)
class ReviewSources:
    """What a review reads of the store in one session: the change, and what the plans of its proposed
    revision and of the active one are made from (both around the failed parts in force)."""

    change: Change
    proposed: PlanSource
    active: int | None
    active_source: PlanSource | None
    identity: str | None = None


def review_sources(change_id: int, *, session: Session) -> ReviewSources:
    ch = wrepo.get_change(change_id, session=session)
    if ch.state not in REVIEWABLE:
        raise Conflict(f"change {ch.id} is {ch.state}: it cannot be reviewed now")
    assert ch.proposed_revision is not None
    overlay = wrepo.active_overlay(session=session)  # reviewed around the failed parts in force
    proposed = plan_source(ch.proposed_revision, session=session, overlay=overlay)
    active = wrepo.active_revision(session=session)
    source = plan_source(active, session=session, overlay=overlay) if active is not None else None
    return ReviewSources(ch, proposed, active, source, repo.revision_identity(ch.proposed_revision, session=session))


def review_inputs(change_id: int, *, session: Session,
                  observe: Callable[[float], None] | None = None) -> ReviewInputs:
    """:func:`review_sources` solved in the caller's ``session`` (the engine solves outside its sessions)."""
    def solved(source: PlanSource) -> Solved:
        got = solve(source, observe)
        if got.fresh:
            keep(source.revision, got.plan, session=session)
        return got

    src = review_sources(change_id, session=session)
    proposed = solved(src.proposed)
    active = solved(src.active_source) if src.active_source is not None else None
    return ReviewInputs(src.change, proposed.intent, proposed.plan, src.active,
                        active.intent if active is not None else None, active.plan if active is not None else None,
                        src.identity, src.proposed.overlay)


def record_review(change_id: int, review: ReviewDocument | JsonObject, *, session: Session,
                  ctx: WriteContext) -> Change:
    """Keep ``review`` on the change (as ``POST .../review`` answered it), now ``reviewed``. A review
    recorded by other means (a test) is its JSON, kept as given: its ``verdict`` and ``active_revision``."""
    verdict: str
    if isinstance(review, ReviewDocument):
        stored, verdict, active = answer_json(review), review.verdict, review.active_revision
    else:
        got = review.get("active_revision")
        stored, verdict, active = review, str(review["verdict"]), got if isinstance(got, int) else None
    with write_transaction(session):
        ch = wrepo.get_change(change_id, session=session)
        if ch.state not in REVIEWABLE:
            raise Conflict(f"change {ch.id} is {ch.state}: it cannot be reviewed now")
        wrepo.update_change(change_id, session=session, state=ChangeState.REVIEWED, review=stored,
                            reviewed_active=active, verdict=verdict, error=None, progress=None)
        reason = f"verdict {verdict} against active revision {active}"
        wrepo.add_transition(change_id, ChangeState.REVIEWED, session=session, actor=ctx.actor.name, now=_now(),
                             reason=reason)
        _audit(session, ctx, "change.review", revision=ch.proposed_revision, detail=f"change {change_id}: {reason}")
    return wrepo.get_change(change_id, session=session)


# -- commit -----------------------------------------------------------------------
def begin_commit(change_id: int, *, session: Session, ctx: WriteContext, transaction: str, force: bool = False,
                 reason: str | None = None, skip_gate: bool = False) -> Change:
    """Gate and durably mark ``change_id`` as committing (before any device is touched)."""
    try:
        with write_transaction(session):
            lock_revisions(session)  # the change's edits join the head in this transaction
            ch = wrepo.get_change(change_id, session=session, for_update=True)
            if _replay_of(ctx, session=session) is not None:  # this request committed it already
                return ch
            active = wrepo.active_revision(session=session)
            if not skip_gate:
                _gate(ch, active, force, reason)
            wrepo.claim_commit(change_id, session=session)
            fold_into_head(ch, session=session, ctx=ctx)
            if ch.kind != "reaction":  # an operator's change commits around the failed parts too
                wrepo.set_overlay(change_id, wrepo.active_overlay(session=session), session=session)
            forced = reason if force and ch.verdict == "unsafe" else None
            wrepo.update_change(change_id, session=session, state=ChangeState.COMMITTING, transaction=transaction,
                                previous_active=active, force_reason=forced if forced else ch.force_reason,
                                error=None, progress=None, runner_epoch=None, settled=None, settle=None)
            why = f"transaction {transaction}" + (f"; forced: {forced}" if forced else "")
            wrepo.add_transition(change_id, ChangeState.COMMITTING, session=session, actor=ctx.actor.name, now=_now(),
                                 reason=why)
            _audit(session, ctx, "change.commit", status=202,
                   revision=ch.proposed_revision, detail=f"change {change_id}: {why}")
            _keep_key(change_id, 202, session=session, ctx=ctx)
    except (Conflict, SafetyViolation, InvalidIntent, NotFound) as exc:
        with write_transaction(session):
            _audit(session, ctx, "change.commit", outcome="rejected", status=ctx.rejected_status(exc),
                   detail=f"change {change_id}: {exc}")
        raise
    return wrepo.get_change(change_id, session=session)


def _gate(ch: Change, active: int | None, force: bool, reason: str | None) -> None:
    if ch.state == ChangeState.COMMITTING:
        raise Conflict(f"change {ch.id} is already committing")
    if ch.state != ChangeState.REVIEWED:
        raise Conflict(f"change {ch.id} is {ch.state}: review it first (POST /v1/changes/{ch.id}/review)")
    if ch.reviewed_active != active:
        raise Conflict(f"change {ch.id} was reviewed against active revision {ch.reviewed_active}, but the active "
                       f"revision is now {active}: review again")
    if ch.verdict == "unsafe":
        if not force:
            failing = list((ch.review or {}).get("safety", {}).get("failing", []))
            sched = (ch.review or {}).get("schedule") or {}
            failing += [{"scenario": "transition:" + "+".join(f.get("state", [])), "stage": "transition",
                         "invariant": "transition", "detail": f"moving {f.get('moving')}: " + "; ".join(
                             f.get("over_limit", []) + f.get("dropped", []) + f.get("loops", []))}
                        for f in sched.get("failing", [])]
            raise SafetyViolation(f"change {ch.id} is unsafe: {len(failing)} failing invariant(s); "
                                  "commit with force and a reason to override", failing)
        if not (reason or "").strip():
            raise InvalidIntent([IntentError("body.reason", "a forced commit of an unsafe change needs a reason")])


def take_up(change_id: int, epoch: int, *, session: Session, previous: int | None, replica: str | None) -> bool:
    """The leader of ``epoch`` takes committing change ``change_id`` up (to push it when ``previous`` is
    None, else to recover it from the leader of epoch ``previous``); see :func:`wrepo.take_up`."""
    with write_transaction(session):
        return wrepo.take_up(change_id, epoch, session=session, previous=previous, replica=replica)


def finish_commit(change_id: int, outcome: ChangeState, *, session: Session, ctx: WriteContext, reason: str,
                  error: str | None = None, progress: ProgressDocument | None = None, action: str | None = None,
                  runner: int | None = None, settle: SettleDocument | None = None) -> Change:
    """Record how a commit ended (``committed``, ``failed``, ``rolled_back``) and free the commit slot.

    ``runner`` is the epoch of the leader that ran the commit: when the change is no longer committing
    under that epoch (a newer leader took it over), nothing is recorded and :class:`Deposed` is raised.
    ``settle`` (:func:`settle_document`) says which devices are not yet on the revision the outcome
    names; recorded in the same transaction, so nobody sees the change final without it. A committed
    change supersedes what older changes had left to settle: its transaction drove every device."""
    assert outcome in FINAL_STATES
    outcome = ChangeState(outcome)
    with write_transaction(session):
        if runner is not None and not wrepo.runs(change_id, runner, session=session):
            raise Deposed(f"change {change_id} is no longer run by the leader of epoch {runner}: "
                          f"its outcome ({outcome}) is not recorded")
        ch = wrepo.get_change(change_id, session=session)
        fields: dict[str, Any] = {"state": outcome, "error": error}
        if progress is not None:
            fields["progress"] = _stored(progress)
        if settle is not None:
            fields["settle"], fields["settled"] = _stored(settle), settle.settled
        wrepo.update_change(change_id, session=session, **fields)
        wrepo.release_commit(change_id, session=session)
        if outcome == ChangeState.COMMITTED:
            assert ch.proposed_revision is not None
            wrepo.add_deployment(ch.proposed_revision, change_id, session=session, now=_now(), overlay=ch.overlay)
            for old in wrepo.unsettled_changes(session=session):
                if old.id != change_id:
                    doc = {**(old.settle or {}), "settled": True, "pending": {},
                           "note": f"superseded by change {change_id}, committed to every device"}
                    wrepo.update_change(old.id, session=session, settled=True, settle=doc)
        wrepo.add_transition(change_id, outcome, session=session, actor=ctx.actor.name, now=_now(), reason=reason)
        if ch.kind == "reaction" and outcome == ChangeState.COMMITTED:
            events_repo.add_event("reaction.committed", {
                "change": change_id, "revision": ch.proposed_revision, "overlay": Overlay.of(ch.overlay).to_document(),
                "trigger": ch.trigger or {}}, session=session, now=_now())
        _audit(session, ctx, action or f"change.{outcome}", status=200, revision=ch.proposed_revision,
               detail=f"change {change_id} {outcome}: {reason}" + (f" ({error})" if error else ""))
    return wrepo.get_change(change_id, session=session)


def withdraw(change_id: int, *, session: Session, ctx: WriteContext, reason: str) -> None:
    """A change that Loom made to commit at once (a drift repair, a failure reaction) and whose commit found
    another change committing (:class:`~controller.store.workflow_repo.CommitBusy`): ``failed``, saying why,
    so that no such change is left waiting for a commit nobody will ask (the loop that made it tries again)."""
    with write_transaction(session):
        wrepo.update_change(change_id, session=session, state=ChangeState.FAILED, error=reason)
        wrepo.add_transition(change_id, ChangeState.FAILED, session=session, actor=ctx.actor.name, now=_now(),
                             reason=reason)


def settle_document(*, target_revision: int | None, transaction: str, undo: bool, pending: dict[str, str],
                    attempts: int = 0, note: str | None = None) -> SettleDocument:
    """What is left to settle of a final change: ``pending`` (device -> why it is not yet on
    ``target_revision``; ``undo``: the change's transaction must be undone there)."""
    return SettleDocument(settled=not pending, target_revision=target_revision, transaction=transaction, undo=undo,
                          pending=dict(sorted(pending.items())), attempts=attempts, checked_at=_now().isoformat(),
                          note=note)


def _stored(doc: ProgressDocument | SettleDocument) -> JsonObject:
    """A document as the change's row keeps it (JSON, the fields its producer set)."""
    return doc.model_dump(mode="json", by_alias=True, exclude_unset=True)


def record_settle(change_id: int, settle: SettleDocument, *, session: Session,
                  ctx: WriteContext | None = None) -> Change | None:
    """Store a settling step of ``change_id`` (only while it is unsettled); when it settles, say so in
    the audit log. None when the change was settled meanwhile (superseded)."""
    with write_transaction(session):
        ch = wrepo.get_change(change_id, session=session)
        if ch.settled is not False:
            return None
        wrepo.update_change(change_id, session=session, settle=_stored(settle), settled=settle.settled)
        if settle.settled and ctx is not None:
            _audit(session, ctx, "change.settled", revision=settle.target_revision,
                   detail=f"change {change_id} ({ch.state}): every device runs revision "
                          f"{settle.target_revision} after {settle.attempts} attempt(s)")
    return wrepo.get_change(change_id, session=session)


def unsettled(*, session: Session) -> list[UnsettledDocument]:
    """The final changes whose devices are not all on their final revision yet (what a review warns of)."""
    return [UnsettledDocument(change=ch.id, state=ch.state, target_revision=(ch.settle or {}).get("target_revision"),
                              devices=dict((ch.settle or {}).get("pending", {})))
            for ch in wrepo.unsettled_changes(session=session)]


def save_progress(change_id: int, progress: ProgressDocument, *, session: Session, runner: int | None = None) -> None:
    """Store a commit's progress (skipped when ``runner``'s leader no longer runs it)."""
    with write_transaction(session):
        if runner is None or wrepo.runs(change_id, runner, session=session):
            wrepo.update_change(change_id, session=session, progress=_stored(progress))


def record_drain_check(change_id: int, check: DrainCheckDocument, *, session: Session, ctx: WriteContext) -> None:
    """Keep what the counters said of a committed change's drains on its progress, and audit it
    (outcome ``flagged`` when a drained target still carries traffic)."""
    with write_transaction(session):
        ch = wrepo.get_change(change_id, session=session)
        wrepo.update_change(change_id, session=session, progress={
            **(ch.progress or {}), "drain_check": check.model_dump(mode="json", exclude_unset=True)})
        detail = "; ".join(f"{t.target}: {t.status}" + (f" ({t.transit_gbps} Gb/s)" if t.transit_gbps is not None
                                                       else "") for t in check.targets)
        _audit(session, ctx, "change.drain_check", outcome="flagged" if check.status == "carrying" else "accepted",
               revision=ch.proposed_revision, detail=f"change {change_id}: drains {check.status}: {detail}")


def drains_added(change: Change, intent: Intent, *, session: Session) -> list[str]:
    """The drain targets ``intent`` has that the revision active before ``change`` did not."""
    def targets(i: Intent) -> frozenset[str]:
        return i.drained_devices | i.drained_link_ends

    before: frozenset[str] = frozenset()
    if change.previous_active is not None:
        before = targets(validated(repo.revision_document(change.previous_active, session=session)))
    return sorted(targets(intent) - before)


def active_revision(*, session: Session) -> int | None:
    return wrepo.active_revision(session=session)


def json_size(doc: Any) -> int:
    return len(json.dumps(doc))
