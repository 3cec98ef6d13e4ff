"""The plan document (DESIGN.md contract 2): a fabric's forwarding plan, what ``loom plan`` writes and
``/v1/plans/{revision}`` answers, and the overlay of failed parts a plan leaves out."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from controller.model.documents.base import Closed

__all__ = [
    "DevicePlanDocument", "LinkLoadDocument", "NextHopDocument", "OverlayDocument", "PlanDocument",
    "PlanSummaryDocument",
]


class NextHopDocument(Closed):
    """One member of a weighted nexthop group."""

    port: str = Field(description="the local port")
    neighbor: str = Field(description="the device behind the port")
    weight: int = Field(ge=1, description="a positive integer; a group's weights sum to at most max_ecmp_entries")


class DevicePlanDocument(Closed):
    """One device's forwarding state."""

    groups: dict[str, list[NextHopDocument]] = Field(description="nexthop groups by id")
    routes: dict[str, str] = Field(description="prefix -> group id; a prefix missing here is withdrawn")


class LinkLoadDocument(Closed):
    """Load on one link; utilization is the busier direction over capacity."""

    a: str
    a_port: str
    b: str
    b_port: str
    gbps_ab: float
    gbps_ba: float
    utilization: float


class PlanSummaryDocument(BaseModel):
    """The plan's headline numbers. Open on purpose: solvers add keys beside these
    (``robust``, ``lp_seconds``, ``lp_model``, ``wcmp``, ``clos``, ...)."""

    model_config = ConfigDict(extra="allow")
    max_utilization: float = Field(description="after integer weight rounding")
    lp_bound: float = Field(description="the linear program's optimum")
    ecmp_max_utilization: float = Field(description="what plain ECMP would give")
    solve_seconds: float
    groups: int
    routes: int


class OverlayDocument(Closed):
    """Failed parts a plan leaves out (DESIGN.md, Operational state and failure reaction): link ids
    (``device:port`` of the lower end) and device names; empty lists when nothing is overlaid."""

    links: list[str]
    devices: list[str]


class PlanDocument(Closed):
    """A fabric's forwarding plan: what ``loom plan`` writes and ``/v1/plans/{revision}`` answers."""

    fabric: str
    summary: PlanSummaryDocument
    devices: dict[str, DevicePlanDocument]
    links: list[LinkLoadDocument]
    overlay: OverlayDocument | None = Field(default=None, description="``/v1/plans/active`` only: the failed parts the "
                                                                      "plan in force leaves out")
