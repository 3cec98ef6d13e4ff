"""``Idempotency-Key``: a retried write gets the first answer again, and its work is done once.

The one home of the key's lookup, its mismatch rule and its storage, for every write that takes a
key: the intent writes (:mod:`controller.service.writes`) and the change routes (the transactions of
:mod:`controller.workflow.changes` and the routes of :mod:`api.routers.changes`).

A key is the caller's (scoped to the actor's name) and names the request it first came with: its
path and a fingerprint, a SHA-256 of the request (:meth:`IdempotentWrite.of` for an intent write:
its method, path and body as the route read it; :func:`request_hash` for a change route: its path
and raw body). The same key on another path or fingerprint is :class:`IdempotencyMismatch` (422),
whichever write it comes to. The key is kept with the answer (status and JSON body) in the
transaction of the work it answers (:func:`keep_answer`), so a retry, on any replica and whenever the
first answer was lost, finds the work done and is answered from the store; an answer that no such
transaction kept (a review's, a refused commit's) is kept after the work, in a transaction of its own
(:func:`remember`), and only below 500, so a request that failed on the server side can be retried
for real. Keys are kept :data:`IDEMPOTENCY_KEEP_S` (a day).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy.orm import Session

from controller.model.errors import IdempotencyMismatch
from controller.store import workflow_repo as wrepo
from controller.store.db import write_transaction

__all__ = ["IDEMPOTENCY_KEEP_S", "IdempotencyMismatch", "IdempotentWrite", "Keyed", "forget_expired", "keep_answer",
           "remember", "replay", "request_hash", "stored", "stored_answer"]

#: How long an ``Idempotency-Key`` is kept (a retry after that runs again): one day.
IDEMPOTENCY_KEEP_S = 86_400


def request_hash(path: str, body: bytes) -> str:
    """The fingerprint of a change route's request: a SHA-256 of its path and raw body."""
    return hashlib.sha256(path.encode() + b"\0" + body).hexdigest()


@dataclass(frozen=True)
class IdempotentWrite:
    """A write sent with ``Idempotency-Key``: ``key`` (per actor) and the ``fingerprint`` of the request it
    names (the same key on another request is :class:`IdempotencyMismatch`)."""

    key: str
    fingerprint: str

    @staticmethod
    def of(key: str, method: str, path: str, body: bytes) -> IdempotentWrite:
        """The key of an intent write: its fingerprint is a SHA-256 of its method, path and ``body``."""
        digest = hashlib.sha256(b"\0".join((b"intent-write", method.encode(), path.encode(), body)))
        return IdempotentWrite(key, digest.hexdigest())


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Keyed(Protocol):
    """What a write's context tells about its key (:class:`controller.service.WriteContext` is one):
    who asks, on which path, and the key with its fingerprint (``None``: no key)."""

    @property
    def actor(self) -> _Named: ...

    @property
    def path(self) -> str: ...

    @property
    def idempotency(self) -> IdempotentWrite | None: ...


def stored(ctx: Keyed, *, session: Session) -> tuple[int, Any] | None:
    """The status and answer kept with ``ctx``'s key, or None when the key is new (or expired, or ``ctx``
    has none). Raises :class:`IdempotencyMismatch` when the key named another request: the one rule."""
    idem = ctx.idempotency
    if idem is None:
        return None
    row = wrepo.find_idempotent(ctx.actor.name, idem.key, session=session)
    if row is None:
        return None
    if row.request_hash != idem.fingerprint or row.path != ctx.path[:512]:
        raise IdempotencyMismatch(f"Idempotency-Key {idem.key!r} was used for a different request "
                                  f"({row.path}); a new request needs a new key")
    return row.status, json.loads(row.body)


def stored_answer(ctx: Keyed, *, session: Session) -> Any | None:
    """The answer of :func:`stored` alone: what a write's transaction checks first, under its lock."""
    found = stored(ctx, session=session)
    return None if found is None else found[1]


def keep_answer(ctx: Keyed, status: int, answer: Any, *, session: Session, now: datetime) -> None:
    """Keep ``ctx``'s key with ``status`` and ``answer`` in the caller's transaction (the one of the work it
    answers), so a retry whose first answer was lost finds the work done; nothing without a key. A key
    a concurrent retry kept first stays as it is."""
    if ctx.idempotency is not None:
        wrepo.put_idempotent(ctx.actor.name, ctx.idempotency.key, session=session, path=ctx.path,
                             request_hash=ctx.idempotency.fingerprint, status=status,
                             body=json.dumps(answer, default=str), now=now)


def replay(ctx: Keyed, *, session: Session) -> tuple[int, Any] | None:
    """:func:`stored`, read before the work runs, in a read of its own: the answer a retry gets again."""
    try:
        return stored(ctx, session=session)
    finally:
        session.rollback()


def remember(ctx: Keyed, status: int, answer: Any, *, session: Session) -> None:
    """Keep an answer the work's own transaction did not keep (:func:`keep_answer`), in a transaction of its
    own; an answer of 500 or more is not kept (the retry runs the work again)."""
    if ctx.idempotency is None or status >= 500:
        return
    with write_transaction(session):
        keep_answer(ctx, status, answer, session=session, now=datetime.now(UTC))


def forget_expired(*, session: Session, now: datetime) -> int:
    """Delete the keys older than :data:`IDEMPOTENCY_KEEP_S` (in the caller's transaction); how many."""
    return wrepo.forget_idempotent(before=now - timedelta(seconds=IDEMPOTENCY_KEEP_S), session=session)
