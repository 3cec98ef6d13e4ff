"""The audit log's entries that no accepted write makes in its own transaction: a rejected write
(:func:`audit_rejected`, in a transaction of its own, as ``rejected`` with the status the caller
answers) and requests refused before they did anything (:class:`Refusal`, :func:`audit_refusals`: a
401, a 403, a malformed request's 422). :func:`list_audit` reads the log.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from controller.model.errors import InvalidIntent, LoomError, StoreUnavailable
from controller.service.context import Page, WriteContext, utc_now
from controller.store import repo
from controller.store.db import write_transaction

__all__ = ["Refusal", "audit_refusals", "audit_rejected", "list_audit"]

log = logging.getLogger("loom.service")


def list_audit(*, session: Session, limit: int, offset: int, actor: str | None = None,
               outcome: str | None = None, revision: int | None = None) -> Page:
    items, total = repo.list_audit(session=session, limit=limit, offset=offset, actor=actor, outcome=outcome,
                                   revision=revision)
    return Page(items, total, limit, offset)


def audit_rejected(exc: LoomError, *, session: Session, ctx: WriteContext, action: str) -> None:
    """Record a rejected write (in its own transaction); a store that cannot take the entry either
    is logged, and the caller's error stands."""
    detail = str(exc)
    if isinstance(exc, InvalidIntent):
        detail = json.dumps([e.as_dict() for e in exc.errors][:50])
    try:
        with write_transaction(session):
            repo.add_audit(session=session, now=utc_now(), actor=ctx.actor.name, token_id=ctx.actor.token_id,
                           client=ctx.client, request_id=ctx.request_id, method=ctx.method, path=ctx.path,
                           action=action, outcome="rejected", status=ctx.rejected_status(exc),
                           detail=detail[:4000])
    except StoreUnavailable as lost:
        log.warning("the rejected write %s (%s) is not in the audit log: %s", action, type(exc).__name__, lost)


@dataclass(frozen=True)
class Refusal:
    """A request refused before it did anything (401, 403, a malformed request's 422), for the audit
    log: who (a token's name, else ``anonymous``) from which ``client`` address, what (``method``,
    ``path``) and why (``detail``). A ``summary`` stands for ``count`` refusals not recorded one by one."""

    actor: str
    token_id: str | None
    client: str | None
    request_id: str | None
    method: str
    path: str
    status: int
    detail: str
    count: int = 1
    summary: bool = False


def audit_refusals(refusals: list[Refusal], *, session: Session) -> None:
    """Record refused requests (action ``request.refused``, or ``request.refused.summary`` for a
    summary; outcome ``rejected``) in one transaction."""
    if not refusals:
        return
    with write_transaction(session):
        now = utc_now()
        for r in refusals:
            repo.add_audit(session=session, now=now, actor=r.actor, token_id=r.token_id, client=r.client,
                           request_id=r.request_id, method=r.method, path=r.path,
                           action="request.refused.summary" if r.summary else "request.refused",
                           outcome="rejected", status=r.status, detail=r.detail[:4000])

