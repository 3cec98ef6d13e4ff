"""``GET /v1/cluster`` (DESIGN.md, High availability): the replicas, the leader and the lease."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controller.model.documents.base import Closed

__all__ = ["ClusterDocument", "LeaseDocument", "ReplicaDocument"]


class ReplicaDocument(Closed):
    """A replica heard from lately (its heartbeat comes with each lease attempt)."""

    id: str
    url: str = Field(description="where it serves, as it was configured (host:port)")
    role: Literal["leader", "follower"]
    seen_s_ago: float = Field(description="seconds since its last heartbeat, in the store's clock")


class LeaseDocument(Closed):
    ttl_s: float = Field(description="the lease's time to live")
    renew_s: float = Field(description="seconds between renewals (and between a follower's attempts)")
    expires_in_s: float | None = Field(description="until the current lease lapses unless renewed (null: none held)")


class ClusterDocument(Closed):
    """``GET /v1/cluster`` (DESIGN.md, High availability): this replica, its role, the leader and its epoch."""

    replica: str = Field(description="the replica that answered")
    role: Literal["leader", "follower"] = Field(description="its role now")
    leader: str | None = Field(description="the replica holding a live lease (null: none right now)")
    epoch: int = Field(description="the lease's epoch, one higher at each acquisition; agents refuse older ones")
    replicas: list[ReplicaDocument]
    lease: LeaseDocument
