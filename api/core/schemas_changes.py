"""Request and response schemas of the change workflow: changes, their review and commit,
the active revision's status, plans, device state and drift (the contract the UI shares).

The answer documents themselves (the change, its review and progress, the safety report,
the plan) are the ground layer's models in :mod:`controller.model.documents`; this module
adds the requests, pages and the API-only answers around them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from controller.model.documents import ChangeDocument, PlanDocument, ReviewDocument

__all__ = ["ChangeCreate", "ChangeDocument", "ChangePage", "CommitRequest",
           "PlanDocument", "ReviewDocument", "RollbackRequest", "Status"]


class ChangeCreate(BaseModel):
    """A set of edits against a base revision: a JSON Patch (RFC 6902) or a whole intent document."""

    model_config = ConfigDict(extra="forbid")
    base_revision: int = Field(ge=1, le=2**31 - 1, description="the revision the edits apply to")
    patch: list[dict[str, Any]] | None = Field(None, description="RFC 6902 operations on the intent document")
    intent: dict[str, Any] | None = Field(None, description="a whole new intent document")
    message: str = Field("", max_length=4000)


class CommitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    force: bool = Field(False, description="commit even though the review is unsafe (needs a reason)")
    reason: str | None = Field(None, max_length=4000, description="why an unsafe change is forced (audited)")


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field("", max_length=4000)


class ChangePage(BaseModel):
    items: list[ChangeDocument]
    total: int
    limit: int
    offset: int
    next: str | None


class Status(BaseModel):
    head_revision: int | None
    active_revision: int | None
    committing_change: int | None
    devices: list[str] = Field(default_factory=list, description="devices with an agent attached")
