"""``/healthz`` (the process answers) and ``/readyz`` (the store answers and its
schema is at the newest migration); neither needs a token."""

from typing import Any

from fastapi import APIRouter, Request

from api.core.guard import GuardedRoute
from api.core.problems import ProblemException, error_responses
from api.core.schemas import Health

router = APIRouter(tags=["health"], route_class=GuardedRoute)


@router.get("/healthz", response_model=Health, response_model_exclude_none=True, summary="Liveness")
def healthz() -> Any:
    return {"status": "ok"}


@router.get("/readyz", response_model=Health, summary="Readiness: store reachable, migrations at head",
            responses=error_responses(503))
def readyz(request: Request) -> Any:
    db = request.app.state.database
    try:
        current, head = db.current_migration(), db.head_migration()
    except Exception as exc:  # noqa: BLE001 - any store failure means not ready
        raise ProblemException(503, "Not ready", f"the store does not answer: {type(exc).__name__}",
                               kind="not-ready") from None
    if current != head:
        raise ProblemException(503, "Not ready", f"store schema at {current}, expected {head}: run migrations",
                               kind="not-ready")
    return {"status": "ready", "schema_revision": current}
