"""The store's tables: SQLAlchemy 2 typed models for revisions, tokens and audit.

A **revision** is an immutable snapshot of the intent document (canonical
JSON, :meth:`controller.model.Intent.to_document`) with its content hash and its
parent; ids are 1, 2, 3... assigned as ``head + 1`` inside the writing
transaction, so two writers racing on the same head cannot both commit (the
loser hits the primary key, and the unique ``parent_id`` for good measure).
Its document is stored by content (:mod:`controller.store.content`): each
object of the intent once in **intent_objects** (compact JSON, addressed by its
SHA-256), and per revision only the **revision_entries** that differ from its
parent (an object's identity, position and address; no address: removed), the
frame (name, routing, defaults) by address in ``top_hash``, and in ``whole``
the sections written out completely (all of them in a first revision and in a
checkpoint). ``allocation`` keeps the pins of the revision's address allocation
(:mod:`controller.model.addressing`): the links and devices whose /31 or router id
is not at its home slot, so that each keeps its numbers in every later revision.
**Tokens** are bearer credentials stored as SHA-256 hashes with a role and an
optional expiry; no two unrevoked tokens share a name (a partial unique index,
so a revoked token's name may be given again). The **audit** log records every
write and every refused request: who, from which client address, when, request
id, method, path, outcome and the resulting revision. Constraint names follow one
naming convention so Alembic migrations stay portable between SQLite and
PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

# The change workflow's tables live in their own module; importing it puts them in ``metadata`` too.
from controller.store import workflow_models as _workflow_models  # noqa: F401
from controller.store.base import Base, metadata

__all__ = ["AuditRow", "Base", "IntentObjectRow", "ROLES", "RevisionEntryRow", "RevisionRow", "TokenRow", "metadata"]

ROLES = ("viewer", "operator", "admin")

class IntentObjectRow(Base):
    """One object of an intent (or a revision's frame) as compact JSON, stored once by its SHA-256."""

    __tablename__ = "intent_objects"

    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[str] = mapped_column(Text)


class RevisionRow(Base):
    """One immutable snapshot of the whole intent: its metadata, its frame, what it wrote out whole."""

    __tablename__ = "revisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("revisions.id"), unique=True)
    hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    author: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text, default="")
    request_id: Mapped[str | None] = mapped_column(String(128))
    top_hash: Mapped[str] = mapped_column(String(64))  # an intent_objects.hash (no constraint: SQLite cannot add one)
    whole: Mapped[str] = mapped_column(String(128), default="")
    entries: Mapped[int] = mapped_column(Integer, default=0)
    #: the address allocation's pins (:meth:`controller.model.addressing.Allocation.to_json`; usually "")
    allocation: Mapped[str] = mapped_column(Text, default="", server_default="")
    #: a change's proposed intent, off the head's line: the head is the newest revision that is not one
    proposal: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class RevisionEntryRow(Base):
    """An object a revision adds, changes or moves (``object_hash`` set) or removes (``NULL``)."""

    __tablename__ = "revision_entries"

    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id"), primary_key=True)
    section: Mapped[str] = mapped_column(String(32), primary_key=True)
    ident: Mapped[str] = mapped_column(String(512), primary_key=True)
    pos: Mapped[int | None] = mapped_column(BigInteger)
    object_hash: Mapped[str | None] = mapped_column(ForeignKey("intent_objects.hash"))


class TokenRow(Base):
    """A bearer token: only the SHA-256 of the secret is kept."""

    __tablename__ = "tokens"
    __table_args__ = (
        CheckConstraint("role IN ('viewer', 'operator', 'admin')", name="role"),
        Index("uq_tokens_name_unrevoked", "name", unique=True, sqlite_where=text("revoked_at IS NULL"),
              postgresql_where=text("revoked_at IS NULL")),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AuditRow(Base):
    """One write attempt against the controller, or one refused request (``client``: its address)."""

    __tablename__ = "audit"
    __table_args__ = (Index("ix_audit_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(128))
    token_id: Mapped[str | None] = mapped_column(String(32))
    client: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(128))
    method: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(String(512))
    action: Mapped[str] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(16))
    status: Mapped[int] = mapped_column(Integer)
    revision_id: Mapped[int | None] = mapped_column(ForeignKey("revisions.id"))
    detail: Mapped[str] = mapped_column(Text, default="")


