"""``/v1/cluster`` (DESIGN.md, High availability): which replica answered, its role, the leader,
the lease's epoch and the replicas heard from lately. Any replica answers from the store."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.core.deps import Viewer
from api.core.guard import GuardedRoute
from api.core.problems import error_responses
from controller.model.documents import ClusterDocument

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], route_class=GuardedRoute)


@router.get("", response_model=ClusterDocument, summary="Replicas, the leader and its epoch",
            responses=error_responses(401, 403))
async def cluster(request: Request, _actor: Viewer) -> ClusterDocument:
    return await request.app.state.cluster.document()
