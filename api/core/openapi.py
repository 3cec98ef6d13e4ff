"""The OpenAPI document as Loom serves it: every 4xx/5xx answer described as an RFC 9457
``Problem`` under ``application/problem+json`` (:mod:`api.core.problems`), every route's 503 with
``Retry-After``, and each operation listing the statuses every route of its kind can answer (401 and
403 behind a token, 413 on writes, 400 and 422 with a body) beside its own.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from api.core.deps import required_role
from api.core.problems import PROBLEM, STATUS_TEXT
from api.core.routes import api_routes
from api.core.schemas import Problem

__all__ = ["install"]

#: every route's 503: what an outage answers, anywhere
OUTAGE = ("The store does not answer or stayed too busy, or the controller is shutting down: "
          "retry after the Retry-After header's seconds")
RETRY_AFTER = {"description": "seconds after which the request may succeed", "schema": {"type": "integer"}}
_WRITES = ("post", "put", "patch")


def install(app: FastAPI) -> None:
    """Serve ``app``'s OpenAPI document rewritten so (made once, on first use)."""
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document, with every 4xx/5xx answer as an RFC 9457 problem document."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes, separate_input_output_schemas=False)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Problem", Problem.model_json_schema(ref_template="#/components/schemas/{model}"))
    for defn in Problem.model_json_schema(ref_template="#/components/schemas/{model}").get("$defs", {}).items():
        components.setdefault(*defn)
    components["Problem"].pop("$defs", None)
    _add_common_statuses(app, schema)
    for ops in schema.get("paths", {}).values():
        for op in ops.values():
            outage = op.setdefault("responses", {}).setdefault("503", {"description": OUTAGE})
            outage.setdefault("headers", {"Retry-After": RETRY_AFTER})
            for code, resp in op.get("responses", {}).items():
                if code.isdigit() and int(code) >= 400:
                    resp["content"] = {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    app.openapi_schema = schema
    return schema


def _add_common_statuses(app: FastAPI, schema: dict[str, Any]) -> None:
    """Statuses every route of a kind can answer, beside those its decorator lists: 401 and 403 behind a
    token, 413 on a write (a declared or read body over the limit), 400 and 422 with a request body."""
    for route in api_routes(app):
        if not isinstance(route, APIRoute):
            continue
        ops = schema.get("paths", {}).get(route.path_format, {})
        for method in route.methods or ():
            op = ops.get(method.lower())
            if op is None:
                continue
            codes = set()
            if required_role(route.dependant) is not None:
                codes |= {401, 403}
            if method.lower() in _WRITES:
                codes.add(413)
            if "requestBody" in op:
                codes |= {400, 422}
            responses = op.setdefault("responses", {})
            for code in sorted(codes):
                responses.setdefault(str(code), {"description": STATUS_TEXT[code]})
            op["responses"] = dict(sorted(responses.items()))
