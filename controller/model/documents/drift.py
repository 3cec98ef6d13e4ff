"""The drift report (``GET /v1/drift``): every attached device held against the active revision, and the
repair change a check started, if any."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controller.model.documents.base import Closed

__all__ = ["DeviceDriftDocument", "DriftReportDocument", "RepairDocument"]


class DeviceDriftDocument(Closed):
    """One device: ``ok``, ``drift`` (each difference in ``details``) or ``unreachable`` (why, in ``details``)."""

    status: Literal["ok", "drift", "unreachable"]
    details: list[str]


class RepairDocument(Closed):
    """A repair change: it pushes ``revision``, the active one, again."""

    change: int
    revision: int


class DriftReportDocument(Closed):
    """The last check of every device against the active revision."""

    checked_at: str | None
    active_revision: int | None
    devices: dict[str, DeviceDriftDocument]
    note: str | None = Field(default=None, description="why nothing was checked (no agent, no active revision, "
                                                       "a change committing)")
    repair: RepairDocument | None = Field(default=None, description="the repair this check started")
    repair_note: str | None = Field(default=None, description="why the drifted devices were not repaired")
