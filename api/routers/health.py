"""``/healthz`` (the process answers) and ``/readyz`` (the store answers and its
schema is at the newest migration; ``role``: this replica leads or follows, and
either is ready: every replica serves requests); neither needs a token."""

from typing import Any

from fastapi import APIRouter, Request

from api.core.guard import GuardedRoute
from api.core.problems import ProblemException, error_responses
from api.core.schemas import Health

router = APIRouter(tags=["health"], route_class=GuardedRoute)
_RETRY_AFTER = 2  # seconds


@router.get("/healthz", response_model=Health, response_model_exclude_none=True, summary="Liveness")
def healthz() -> Any:
    return {"status": "ok"}


@router.get("/readyz", response_model=Health, summary="Readiness: store reachable, migrations at head",
            responses=error_responses(503))
def readyz(request: Request) -> Any:
    db = request.app.state.database
    retry = {"Retry-After": str(_RETRY_AFTER)}
    try:
        current, head = db.current_migration(), db.head_migration()
    except Exception as exc:  # noqa: BLE001 - any store failure means not ready
        raise ProblemException(503, "Not ready", f"the store does not answer: {type(exc).__name__}",
                               kind="not-ready", headers=retry) from None
    if current != head:
        raise ProblemException(503, "Not ready", f"store schema at {current}, expected {head}: run migrations",
                               kind="not-ready", headers=retry)
    cluster = getattr(request.app.state, "cluster", None)
    return {"status": "ready", "schema_revision": current, "role": cluster.role if cluster is not None else None}
