"""``Idempotency-Key`` on POSTs: a retried request gets the first answer again.

The key is scoped to the caller (the token's actor name); the stored entry
holds the request's path and a SHA-256 of its body, and the status and JSON
body answered. The same key with a different path or body is a client error
(:class:`IdempotencyMismatch`, 422). Only answers below 500 are kept, so a
request that failed on the server side can be retried for real.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from controller.model.errors import IdempotencyMismatch
from controller.store import workflow_repo as wrepo
from controller.store.db import write_transaction

__all__ = ["IdempotencyMismatch", "lookup", "remember", "request_hash"]


def request_hash(path: str, body: bytes) -> str:
    return hashlib.sha256(path.encode() + b"\0" + body).hexdigest()


def lookup(actor: str, key: str, path: str, body: bytes, *, session: Session) -> tuple[int, Any] | None:
    """The stored (status, body) for this key, ``None`` when the key is new."""
    row = wrepo.find_idempotent(actor, key, session=session)
    session.rollback()
    if row is None:
        return None
    if row.path != path[:512] or row.request_hash != request_hash(path, body):
        raise IdempotencyMismatch(f"Idempotency-Key {key!r} was used for a different request")
    return row.status, json.loads(row.body)


def remember(actor: str, key: str, path: str, body: bytes, status: int, answer: Any, *, session: Session) -> None:
    if status >= 500:
        return
    with write_transaction(session):
        wrepo.put_idempotent(actor, key, session=session, path=path, request_hash=request_hash(path, body),
                             status=status, body=json.dumps(answer, default=str), now=datetime.now(UTC))
