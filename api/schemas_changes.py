"""Request and response schemas of the change workflow: changes, their review and commit,
the active revision's status, plans, device state and drift (the contract the UI shares)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ChangeCreate", "ChangePage", "ChangePublic", "CommitRequest", "DeviceDrift", "DriftReport",
           "Progress", "RollbackRequest", "Status", "TransitionPublic"]

State = Literal["draft", "reviewed", "committing", "committed", "failed", "rolled_back"]


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


class TransitionPublic(BaseModel):
    state: str
    at: str
    actor: str
    reason: str


class DeviceProgress(BaseModel):
    step: str = Field(description="the transaction step the device is in (prepare, commit, verify, confirm...)")
    status: Literal["pending", "ok", "failed"]
    changed: bool
    error: str | None
    steps: dict[str, str] = Field(default_factory=dict, description="every finished step's status")


class Progress(BaseModel):
    model_config = ConfigDict(extra="allow")
    step: str
    devices: dict[str, DeviceProgress]


class ChangePublic(BaseModel):
    id: int
    kind: str = Field(description="change, rollback or repair (drift)")
    state: State
    base_revision: int | None
    proposed_revision: int | None
    message: str
    author: str
    created_at: str
    transitions: list[TransitionPublic]
    review: dict[str, Any] | None
    progress: Progress | None
    force_reason: str | None
    error: str | None
    transaction: str | None = None


class ChangePage(BaseModel):
    items: list[ChangePublic]
    total: int
    limit: int
    offset: int
    next: str | None


class Status(BaseModel):
    head_revision: int | None
    active_revision: int | None
    committing_change: int | None
    devices: list[str] = Field(default_factory=list, description="devices with an agent attached")


class DeviceDrift(BaseModel):
    status: Literal["ok", "drift", "unreachable"]
    details: list[str]


class DriftReport(BaseModel):
    model_config = ConfigDict(extra="allow")
    checked_at: str | None
    active_revision: int | None
    devices: dict[str, DeviceDrift]
