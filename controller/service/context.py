"""Who calls the service and what a write answers: the :class:`Actor` (a token's name and role), the
:class:`WriteContext` every write carries (``If-Match``, the audit log's fields, the
``Idempotency-Key``), and the values the service returns (:class:`WriteResult`, the pages
:class:`Listing` and :class:`Page`). Roles rank ``viewer`` < ``operator`` < ``admin``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from controller.model.documents.base import JsonObject
from controller.model.errors import LoomError
from controller.service.idempotency import IdempotentWrite
from controller.store.models import ROLES
from controller.store.repo import Revision
from controller.store.snapshot import Snapshot

__all__ = ["NO_STATUS", "ROLES", "Actor", "Doc", "Listing", "Page", "WriteContext", "WriteResult",
           "role_allows", "utc_now"]

_RANK = {r: i for i, r in enumerate(ROLES)}
Doc = dict[str, Any]

#: The audit status of a rejected write whose caller answers no HTTP (no ``reject_status``).
NO_STATUS = 0


def utc_now() -> datetime:
    """The time the service stamps on what it writes (UTC)."""
    return datetime.now(UTC)


def role_allows(role: str, needed: str) -> bool:
    """``viewer`` < ``operator`` < ``admin``."""
    return _RANK.get(role, -1) >= _RANK[needed]


@dataclass(frozen=True)
class Actor:
    """Who is calling: a token's name and id (``None`` for settings or CLI), and its role."""

    name: str
    role: str
    token_id: str | None = None


@dataclass(frozen=True)
class WriteContext:
    """Where a write comes from, for ``If-Match`` and the audit log.

    ``status`` is what the caller answers when the write is accepted, and
    ``reject_status`` what it answers for an error (the API passes
    :func:`api.core.problems.status_for`): the audit log records both, and the
    controller itself decides no HTTP status.
    """

    actor: Actor
    request_id: str | None = None
    method: str = "CLI"
    path: str = ""
    if_match: str | None = None
    message: str = ""
    status: int = 200
    reject_status: Callable[[LoomError], int] | None = None
    client: str | None = None  # the caller's address (HTTP), for the audit log
    idempotency: IdempotentWrite | None = None

    def rejected_status(self, exc: LoomError) -> int:
        """The audit status of a write rejected with ``exc``."""
        return self.reject_status(exc) if self.reject_status is not None else NO_STATUS


@dataclass(frozen=True)
class WriteResult:
    revision: Revision
    changed: bool
    snapshot: Snapshot
    extra: dict[str, Any] = field(default_factory=dict)
    replayed: bool = False  # the answer of an earlier request with the same Idempotency-Key, nothing written

    @property
    def document(self) -> JsonObject:
        """The resulting intent document (shared element dicts: never change them)."""
        return self.snapshot.document()


@dataclass(frozen=True)
class Listing:
    """A page of the head's objects: ``revision`` is the head's id (``None`` on an empty store)."""

    items: list[Any]
    total: int
    limit: int
    offset: int
    revision: int | None


@dataclass(frozen=True)
class Page:
    items: list[Any]
    total: int
    limit: int
    offset: int
    revision: Revision | None = None
