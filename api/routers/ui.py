"""The web UI and the API docs, served by the controller itself, offline.

:func:`install` serves the operator view: ``/`` is ``api/ui/index.html`` (a
single page of plain ES modules that draws the fabric in SVG and talks to
``/v1`` with the bearer token the operator typed in), ``/ui/...`` its static
files. Nothing is fetched from outside at run time, and the page says so in
its ``Content-Security-Policy``. The interactive API docs (``/docs``, Swagger
UI, and ``/redoc``) use the JavaScript and CSS that the ``fastapi-offline``
package ships, served under ``/docs-assets/``, instead of a CDN an air-gapped
data center cannot reach. ``/v1/whoami`` tells the page whose token it holds
and its role (viewers see no Commit or Rollback buttons; the API refuses them
anyway).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from api.core.deps import Viewer
from api.core.guard import GuardedRoute
from api.core.problems import error_responses

__all__ = ["UI_DIR", "WhoAmI", "install", "router"]

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
_CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")

_DOCS_CSP = ("default-src 'self'; img-src 'self' data:; script-src 'self' 'unsafe-inline' blob:; "
             "style-src 'self' 'unsafe-inline'; worker-src 'self' blob:; connect-src 'self'; font-src 'self' data:")

router = APIRouter(prefix="/v1", tags=["session"], route_class=GuardedRoute)


class WhoAmI(BaseModel):
    """The caller behind the bearer token."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    token_id: str | None = None


@router.get("/whoami", response_model=WhoAmI, summary="Whose token this is, and its role",
            responses=error_responses(401, 403))
def whoami(actor: Viewer) -> Any:
    return {"name": actor.name, "role": actor.role, "token_id": actor.token_id}


def _docs_assets() -> Path | None:
    try:
        return Path(str(importlib.resources.files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None


def install(app: FastAPI) -> None:
    """Serve the UI at ``/`` and ``/ui/``, ``/v1/whoami``, and offline docs at ``/docs`` and ``/redoc``
    (build the app with ``docs_url=None, redoc_url=None``)."""
    app.include_router(router)

    async def index(request: Request) -> Response:
        return FileResponse(UI_DIR / "index.html", media_type="text/html",
                            headers={"Cache-Control": "no-cache", "Content-Security-Policy": _CSP,
                                     "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})

    async def ui_root(request: Request) -> Response:
        return RedirectResponse("/", status_code=307)

    app.add_route("/", index, methods=["GET"], include_in_schema=False)
    app.add_route("/ui", ui_root, methods=["GET"], include_in_schema=False)
    app.mount("/ui", StaticFiles(directory=UI_DIR), name="ui")

    assets = _docs_assets()
    if assets is None or not (assets / "swagger-ui-bundle.js").is_file():
        return  # no docs rather than docs that call out to a CDN
    app.mount("/docs-assets", StaticFiles(directory=assets), name="docs-assets")
    title = f"{app.title} API"
    oauth_redirect = "/docs/oauth2-redirect"

    async def swagger(request: Request) -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=title,
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png",
                                   oauth2_redirect_url=oauth_redirect,
                                   swagger_ui_parameters={"validatorUrl": None})  # no badge from outside
        page.headers["Content-Security-Policy"] = _DOCS_CSP
        return page

    async def swagger_redirect(request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> HTMLResponse:
        page = get_redoc_html(openapi_url=app.openapi_url or "/openapi.json", title=title,
                              redoc_js_url="/docs-assets/redoc.standalone.js",
                              redoc_favicon_url="/docs-assets/favicon.png", with_google_fonts=False)
        page.headers["Content-Security-Policy"] = _DOCS_CSP  # ReDoc's footer logo would come from its CDN
        return page

    app.add_route("/docs", swagger, methods=["GET"], include_in_schema=False)
    app.add_route(oauth_redirect, swagger_redirect, methods=["GET"], include_in_schema=False)
    app.add_route("/redoc", redoc, methods=["GET"], include_in_schema=False)
