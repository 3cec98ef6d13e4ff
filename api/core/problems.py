"""Errors as RFC 9457 problem details (``application/problem+json``).

This is the one place where Loom's exceptions become HTTP (:data:`STATUS`, by
each error's ``kind``; :func:`status_for`): ``InvalidIntent`` is 422 with every
located error of the resulting document (``links[7].b``), a malformed request
is 422 with request locations (``body.asn``, ``query.limit``), ``NotFound``
404, ``StaleRevision`` and other ``Conflict`` 409, ``SafetyViolation`` (a
refused unsafe commit) 409 with the failing invariants and scenarios,
``Unreachable`` (a device's agent) 503, other device errors 502, a missing or
bad token 401 (with ``WWW-Authenticate: Bearer``), the wrong role 403, a
request's own bad field (``InvalidRequest``) 422 located like a malformed one.
Refused requests (401, 403, a malformed request's 422) are audited, at a
bounded rate (:mod:`api.core.refusals`). Input over a bound (:mod:`api.core.guard`,
:mod:`controller.model.text`): a body over the route's limit or a document of too
many values 413, nesting too deep 422, text that is not UTF-8 400, each naming the
problem and, where known, the place; a 405 lists every method of the path in ``Allow``.
Outages are 503 with ``Retry-After``: ``StoreUnavailable`` (the database does not
answer, its pool is exhausted, it shuts down), ``StoreContention`` (a write that
lost every retry to concurrent ones) and a controller that is shutting down.
Unexpected exceptions are 500 problems that name the request id, never a
traceback. Every 5xx answer is logged with its problem type and the request id.
The controller records a rejected write's status in the audit log with the
:func:`status_for` the API hands it (``WriteContext.reject_status``). The
OpenAPI document describes every error response as a ``Problem``
(:mod:`api.core.openapi`, from :func:`error_responses` and :data:`STATUS_TEXT`).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.core.routes import allowed_methods
from api.core.schemas import Problem, ProblemError
from controller.logs import bind_request_id
from controller.model.documents import FailureDocument
from controller.model.errors import (
    Conflict,
    DeviceError,
    IdempotencyMismatch,
    InvalidIntent,
    InvalidRequest,
    LoomError,
    MalformedDocument,
    MergeConflict,
    NotFound,
    SafetyViolation,
    StaleRevision,
    StoreUnavailable,
    Unreachable,
)
from controller.model.text import format_loc

__all__ = ["PROBLEM", "STATUS", "STATUS_TEXT", "ProblemException", "error_responses", "install", "problem_response",
           "shutting_down", "status_for", "unexpected", "unsafe_change"]

PROBLEM = "application/problem+json"
_TYPE = "urn:loom:problem:"
log = logging.getLogger("loom.api")

#: The HTTP status of each error kind (``LoomError.kind``); a kind not listed is 400.
STATUS: dict[str, int] = {
    "invalid-intent": 422,
    "invalid-request": 422,
    "idempotency-key-reused": 422,
    "store-unavailable": 503,
    "store-contention": 503,
    "malformed-document": 422,
    "document-too-deep": 422,
    "document-too-large": 413,
    "invalid-encoding": 400,
    "not-found": 404,
    "conflict": 409,
    "stale-revision": 409,
    "unsafe-change": 409,
    "device-unreachable": 503,
    "device-error": 502,
    "agent-error": 502,
    "frr-error": 502,
    "driver-error": 502,
    "driver-retryable": 502,
    "driver-fatal": 502,
}


def status_for(exc: LoomError) -> int:
    """The HTTP status an error answers: by its ``kind``, else its nearest ancestor's, else 400."""
    for cls in type(exc).__mro__:
        kind = vars(cls).get("kind")
        if kind in STATUS:
            return STATUS[kind]
    return 400


#: Titles of the problems of malformed documents, by kind.
_MALFORMED_TITLES = {"invalid-encoding": "Invalid encoding", "document-too-deep": "Document too deep",
                     "document-too-large": "Document too large"}


class ProblemException(StarletteHTTPException):
    """Raised by the API layer for HTTP-only conditions (401, 403, 413, 503...). An HTTP exception, so that
    FastAPI passes it on unchanged when it is raised while the body is read; ``errors`` are located ones."""

    def __init__(self, status: int, title: str, detail: str | None = None, *, kind: str | None = None,
                 headers: dict[str, str] | None = None, errors: list[dict[str, str]] | None = None):
        super().__init__(status, detail or title, headers)
        self.status, self.title, self.kind, self.errors = status, title, kind, errors
        self.detail = detail  # type: ignore[assignment]  # a problem's detail is optional


def request_problem(exc: InvalidIntent) -> ProblemException:
    """The problem of a request body that cannot be read as JSON within the bounds, its errors located
    in the request (``body``, ``body.devices[0].name``): the malformed document's own kind and status,
    else 422 ``invalid-request`` like any invalid request."""
    errors = [{"loc": _body_loc(e.loc), "msg": e.msg} for e in exc.errors]
    if isinstance(exc, MalformedDocument):
        return ProblemException(status_for(exc), _MALFORMED_TITLES.get(exc.kind, "Malformed document"),
                                exc.reason, kind=exc.kind, errors=errors)
    return ProblemException(422, "Invalid request", f"{len(errors)} error(s) in the request", kind="invalid-request",
                            errors=errors)


def _body_loc(loc: str) -> str:
    return "body" if not loc else f"body{loc}" if loc.startswith("[") else f"body.{loc}"


def problem_response(request: Request, status: int, title: str, detail: str | None = None, *,
                     kind: str | None = None, errors: list[dict[str, str]] | None = None,
                     headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    body = Problem(
        type=_TYPE + kind if kind else "about:blank",
        title=title,
        status=status,
        detail=detail,
        instance=request.url.path,
        request_id=getattr(request.state, "request_id", None),
        errors=[ProblemError(**e) for e in errors or []],
        **extra,
    ).model_dump(mode="json", exclude_none=True)
    if status >= 500 and kind != "internal":  # in the request's context: the record carries its id
        log.warning("%d %s on %s %s: %s", status, body["type"], request.method, request.url.path, detail or title,
                    extra={"status": status, "problem": body["type"]})
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def unexpected(request: Request, exc: BaseException) -> JSONResponse:
    """The 500 of an exception no handler knows, logged (once) with its traceback; the caller runs
    it in the request's context, so both carry the request id."""
    log.error("unexpected error on %s %s", request.method, request.url.path,
              exc_info=(type(exc), exc, exc.__traceback__))
    return problem_response(request, 500, "Internal error",
                            "the controller failed unexpectedly; the request id is in the server log",
                            kind="internal")


#: the ``Retry-After`` (seconds) of a request refused because the controller is shutting down
SHUTDOWN_RETRY_AFTER = 5


def shutting_down(request: Request) -> JSONResponse:
    """The 503 of a request that arrives while the controller shuts down: another replica (or this
    one, restarted) will answer it; the connection is closed."""
    return problem_response(request, 503, "Shutting down",
                            "the controller is shutting down; retry (another replica, or this one once restarted)",
                            kind="shutting-down",
                            headers={"Retry-After": str(SHUTDOWN_RETRY_AFTER), "Connection": "close"})


def unsafe_change(request: Request, exc: SafetyViolation) -> tuple[int, dict[str, Any]]:
    """The problem document of a refused unsafe commit: status and body (``failing``: every failed
    invariant; ``failing_scenarios``: their scenarios), for the handler and for idempotent replay."""
    status = status_for(exc)
    body = Problem(type=_TYPE + exc.kind, title="Unsafe change", status=status, detail=str(exc),
                   instance=request.url.path, request_id=getattr(request.state, "request_id", None),
                   failing=[FailureDocument.model_validate(f) for f in exc.failing],
                   failing_scenarios=exc.scenarios()).model_dump(mode="json", exclude_none=True)
    return status, body


def _request_loc(loc: tuple[Any, ...] | list[Any]) -> str:
    return format_loc(list(loc)) if loc else ""


def install(app: FastAPI) -> None:
    """Register the exception handlers on ``app`` (:mod:`api.core.openapi` describes them in its OpenAPI)."""
    _install_domain_handlers(app)
    _install_http_handlers(app)


def _install_domain_handlers(app: FastAPI) -> None:
    """Loom's own errors (:mod:`controller.model.errors`), each as its problem document."""

    @app.exception_handler(MalformedDocument)
    async def _malformed(request: Request, exc: MalformedDocument) -> JSONResponse:
        return problem_response(request, status_for(exc), _MALFORMED_TITLES.get(exc.kind, "Malformed document"),
                                f"{exc.reason}; nothing was stored", kind=exc.kind,
                                errors=[e.as_dict() for e in exc.errors])

    @app.exception_handler(InvalidIntent)
    async def _invalid(request: Request, exc: InvalidIntent) -> JSONResponse:
        return problem_response(request, status_for(exc), "Invalid intent",
                                f"the resulting intent has {len(exc.errors)} error(s); nothing was stored",
                                kind="invalid-intent", errors=[e.as_dict() for e in exc.errors])

    @app.exception_handler(SafetyViolation)
    async def _unsafe(request: Request, exc: SafetyViolation) -> JSONResponse:
        status, body = unsafe_change(request, exc)
        return JSONResponse(body, status_code=status, media_type=PROBLEM)

    @app.exception_handler(Unreachable)
    async def _unreachable(request: Request, exc: Unreachable) -> JSONResponse:
        return problem_response(request, status_for(exc), "Device unreachable", str(exc), kind=exc.kind)

    @app.exception_handler(DeviceError)
    async def _device(request: Request, exc: DeviceError) -> JSONResponse:
        return problem_response(request, status_for(exc), "Device error", str(exc), kind=exc.kind)

    @app.exception_handler(StoreUnavailable)
    async def _store(request: Request, exc: StoreUnavailable) -> JSONResponse:
        title = "Store busy" if exc.kind == "store-contention" else "Store unavailable"
        return problem_response(request, status_for(exc), title, f"{exc}; retry in {exc.retry_after} s",
                                kind=exc.kind, headers={"Retry-After": str(exc.retry_after)})

    @app.exception_handler(IdempotencyMismatch)
    async def _idempotency(request: Request, exc: IdempotencyMismatch) -> JSONResponse:
        return problem_response(request, status_for(exc), "Idempotency-Key reused", str(exc), kind=exc.kind)

    @app.exception_handler(InvalidRequest)
    async def _invalid_request(request: Request, exc: InvalidRequest) -> JSONResponse:
        return problem_response(request, status_for(exc), "Invalid request",
                                f"{len(exc.errors)} error(s) in the request", kind="invalid-request",
                                errors=[e.as_dict() for e in exc.errors])

    @app.exception_handler(StaleRevision)
    async def _stale(request: Request, exc: StaleRevision) -> JSONResponse:
        head = (exc.actual or "").strip('"')
        return problem_response(request, status_for(exc), "Stale revision",
                                f"If-Match {exc.expected} does not name the head revision ({exc.actual or 'none'}); "
                                "read the intent again and retry", kind="stale-revision",
                                revision=int(head) if head.isdigit() and head != "0" else None)

    @app.exception_handler(MergeConflict)
    async def _merge_conflict(request: Request, exc: MergeConflict) -> JSONResponse:
        return problem_response(request, status_for(exc), "Conflict", str(exc), kind=exc.kind,
                                errors=[e.as_dict() for e in exc.conflicts])

    @app.exception_handler(Conflict)
    async def _conflict(request: Request, exc: Conflict) -> JSONResponse:
        return problem_response(request, status_for(exc), "Conflict", str(exc), kind=exc.kind)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return problem_response(request, status_for(exc), "Not found", str(exc), kind="not-found")

    @app.exception_handler(LoomError)
    async def _loom(request: Request, exc: LoomError) -> JSONResponse:
        return problem_response(request, status_for(exc), "Bad request", str(exc), kind="bad-request")



def _install_http_handlers(app: FastAPI) -> None:
    """What the framework raises (request validation, routing, HTTP errors) and anything unexpected."""

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": _request_loc(e.get("loc", ())),
                   "msg": str(e.get("msg", "invalid")).removeprefix("Value error, ")} for e in exc.errors()]
        await _audit_refusal(request, 422, errors)
        return problem_response(request, 422, "Invalid request", f"{len(errors)} error(s) in the request",
                                kind="invalid-request", errors=errors)

    @app.exception_handler(ProblemException)
    async def _problem(request: Request, exc: ProblemException) -> JSONResponse:
        if exc.status in (401, 403):
            await _audit_refusal(request, exc.status, exc.detail or exc.title)
        return problem_response(request, exc.status, exc.title, exc.detail, kind=exc.kind,
                                headers=dict(exc.headers) if exc.headers else None, errors=exc.errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {400: "Bad request", 404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "HTTP error")
        detail = exc.detail if isinstance(exc.detail, str) else None
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:  # the router names the methods of one route; the path may have more
            headers["Allow"] = ", ".join(allowed_methods(request.app, request.scope["path"]))
            detail = f"{request.method} is not a method of {request.scope['path']}; it has {headers['Allow']}"
        return problem_response(request, exc.status_code, title, detail, headers=headers or None)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # the request id middleware answers these first (inside the request's context); this is the
        # last resort for an exception raised outside it
        with bind_request_id(getattr(request.state, "request_id", None)):
            return unexpected(request, exc)


async def _audit_refusal(request: Request, status: int, why: str | list[dict[str, str]]) -> None:
    """A refused request into the audit log, as the app's :class:`api.core.refusals.RefusalAudit`
    (rate-limited) sees fit."""
    audit = getattr(request.app.state, "refusals", None)
    if audit is not None:
        await audit.record(request, status, why)


#: The description of each problem status in the OpenAPI document.
STATUS_TEXT = {
    400: "Bad request: a body that is not UTF-8 or cannot be read, or (planning) a demand that cannot be routed",
    401: "Missing, invalid, expired or revoked bearer token",
    403: "The token's role may not do this", 404: "No such object or revision",
    409: "Stale If-Match, or a conflicting object",
    413: "The body is over the route's limit, or its document has too many values",
    422: "Invalid request or invalid resulting intent",
    502: "A device refused or failed the call", 503: "Not ready",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the problem statuses a route can answer."""
    return {c: {"description": STATUS_TEXT.get(c, "Error"), "model": Problem} for c in codes}
