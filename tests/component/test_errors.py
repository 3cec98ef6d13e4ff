"""The error taxonomy (``controller.model.errors``) and its one mapping to HTTP (``api.core.problems``)."""

from __future__ import annotations

import grpc
from fastapi.testclient import TestClient

from api.app import create_app
from api.core.problems import PROBLEM, status_for
from controller.model import errors
from controller.settings import Settings
from controller.store.workflow_repo import CommitBusy
from southbound.driver import driver_error, error_text


def test_every_error_kind_has_an_http_status_only_in_the_api() -> None:
    assert status_for(errors.InvalidIntent([])) == 422
    assert status_for(errors.NotFound("x")) == 404
    assert status_for(errors.StaleRevision('"1"', '"2"')) == 409
    assert status_for(CommitBusy("busy")) == 409
    assert status_for(errors.SafetyViolation("unsafe")) == 409
    assert status_for(errors.Unreachable("leaf-0-0", "UNAVAILABLE: down")) == 503
    assert status_for(errors.FatalDriverError("leaf-0-0", "INVALID_ARGUMENT: no")) == 502
    assert status_for(errors.Infeasible("no route")) == 400
    for cls in (errors.AgentError, errors.FrrError, errors.DriverError, errors.RetryableDriverError,
                errors.FatalDriverError, errors.Unreachable):
        assert issubclass(cls, errors.DeviceError) and issubclass(cls, errors.LoomError)


def _rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="agent says no")


def test_driver_errors_are_sorted_into_retryable_and_fatal() -> None:
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        err = driver_error("leaf-0-0", _rpc_error(code))
        assert isinstance(err, errors.RetryableDriverError) and err.device == "leaf-0-0"
        assert error_text(err) == f"{code.name}: agent says no" and str(err) == f"leaf-0-0: {code.name}: agent says no"
    fatal = driver_error("leaf-0-0", _rpc_error(grpc.StatusCode.FAILED_PRECONDITION))
    assert isinstance(fatal, errors.FatalDriverError)
    assert isinstance(driver_error("tor-1", ValueError("TCP endpoint needs client TLS")), errors.FatalDriverError)


def test_a_refused_commit_is_a_problem_document_with_the_failing_scenarios() -> None:
    app = create_app(Settings(db_url="sqlite://"))
    failing = [{"scenario": "plane-0-power", "stage": "immediate", "invariant": "utilization", "detail": "1.2 > 1"},
               {"scenario": "baseline", "stage": "reconverged", "invariant": "delivery", "detail": "lost 5 gbps"}]

    @app.get("/boom")
    def boom() -> None:
        raise errors.SafetyViolation("change 3 is unsafe", failing)

    @app.get("/gone")
    def gone() -> None:
        raise errors.Unreachable("leaf-0-0", "UNAVAILABLE: connection refused")

    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/boom")
    assert r.status_code == 409 and r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["type"] == "urn:loom:problem:unsafe-change" and body["detail"] == "change 3 is unsafe"
    assert body["failing"] == failing and body["failing_scenarios"] == ["baseline", "plane-0-power"]
    r = client.get("/gone")
    assert r.status_code == 503 and r.json()["type"] == "urn:loom:problem:device-unreachable"
    assert r.json()["detail"] == "leaf-0-0: UNAVAILABLE: connection refused"
