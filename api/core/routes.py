"""The routes of an app as it serves them: every route through the routers it includes
(:func:`api_routes`), and the methods a path answers (:func:`allowed_methods`, a 405's ``Allow``).
Below the guard, the error mapping and the OpenAPI rewrite, which all walk the routes.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI
from starlette.routing import BaseRoute, Route

__all__ = ["allowed_methods", "api_routes"]


def api_routes(app: FastAPI) -> Iterator[BaseRoute]:
    """Every route of ``app``, through the routers it includes (FastAPI >= 0.120 keeps them whole)."""
    def walk(routes: list[BaseRoute]) -> Iterator[BaseRoute]:
        for r in routes:
            included = getattr(r, "original_router", None)
            if included is not None:
                yield from walk(included.routes)
            else:
                yield r
    yield from walk(app.routes)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route of ``app`` answers on ``path`` (for a 405's ``Allow``)."""
    methods: set[str] = set()
    for route in api_routes(app):
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            methods |= route.methods
    return sorted(methods)
