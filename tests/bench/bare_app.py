"""The bench's yardstick: a bare FastAPI app that answers fixed bytes, served like ``loom serve``.

``python -m tests.bench.bare_app DIR PORT`` serves every response recorded in
``DIR/index.json`` (``{path: [file, content type]}``) from an ``async``
endpoint returning the file's bytes, on uvicorn with the settings ``loom
serve`` uses (one process, no access log, no log config). No middleware, no
authentication, no store: what the framework costs, against which Loom's reads
are measured.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI, Response

__all__ = ["make_app"]


def make_app(directory: Path) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    index = json.loads((directory / "index.json").read_text())
    for path, (name, media_type) in index.items():
        body = (directory / name).read_bytes()

        def endpoint(body: bytes = body, media_type: str = media_type) -> Callable[[], Awaitable[Response]]:
            async def answer() -> Response:
                return Response(content=body, media_type=media_type)
            return answer

        app.add_api_route(path.split("?")[0], endpoint(), methods=["GET"])
    return app


if __name__ == "__main__":
    import uvicorn

    from api.wire import WholeResponseH11

    uvicorn.run(make_app(Path(sys.argv[1])), host="127.0.0.1", port=int(sys.argv[2]), log_level="info",
                log_config=None, access_log=False, http=WholeResponseH11)
