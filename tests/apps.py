"""The API app in-process for component tests: a seeded store, a token per role, a client.

:func:`seeded_store` migrates a store and loads the example fabric (or a given
intent document) with one token per role; :func:`running_api` wraps the app
built by ``create_app`` in FastAPI's ``TestClient`` (lifespan and all) and
yields an :class:`Api` that calls it with a role's token. The ``api`` fixture
of ``tests/conftest.py`` is this, on a fresh SQLite file per test.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from api.app import create_app
from controller import service
from controller.settings import Settings
from controller.store.db import Database
from tests.serving import ChangeCalls, settled_change

with warnings.catch_warnings():  # starlette's note about httpx versions
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["SETUP", "Api", "RequestQueries", "TestClient", "running_api", "seeded_store"]

#: who writes the seed: the set-up step, as an admin
SETUP = service.WriteContext(actor=service.Actor("setup", "admin"))


def seeded_store(url: str, *, intent: dict[str, Any] | None = None,
                 example: bool = True) -> tuple[Database, dict[str, str]]:
    """A migrated store at ``url`` holding ``intent`` (or the example fabric, or
    nothing when ``example`` is false) and one token per role, by role."""
    db = Database(url)
    db.migrate()
    tokens = {}
    with db.session() as s:
        if intent is not None:
            service.replace_intent(intent, session=s, ctx=SETUP)
        elif example:
            service.load_example(session=s, ctx=SETUP)
        for role in service.ROLES:
            tokens[role] = service.create_token(f"{role}-1", role, session=s, ctx=SETUP)[1]
    return db, tokens


@dataclass
class Api(ChangeCalls):
    """A client of the app with a token per role; ``doc`` is the intent the store was seeded with."""

    client: Any
    tokens: dict[str, str]
    db: Database
    doc: dict[str, Any] | None = None

    @property
    def app(self) -> Any:
        return self.client.app

    def __call__(self, method: str, path: str, role: str | None = "operator", **kw: Any) -> Any:
        """A request with ``role``'s token (none when ``role`` is None); ``headers`` are added over it."""
        headers = dict(kw.pop("headers", None) or {})
        if role is not None:
            headers = {"Authorization": f"Bearer {self.tokens[role]}", **headers}
        return self.client.request(method, path, headers=headers, **kw)

    def change(self, patch: list[Any] | None = None, base: int = 1, intent: Any = None, **kw: Any) -> dict[str, Any]:
        body = {"base_revision": base, "patch": patch, "intent": intent, "message": kw.pop("message", "")}
        return self.post_change(body, **kw)

    def wait(self, cid: int, timeout: float = 60) -> dict[str, Any]:
        """The change once it is no longer committing (or after ``timeout`` seconds)."""
        return settled_change(lambda path: self("GET", path, role="viewer").json(), cid, timeout=timeout,
                              interval=0.05)

    def commit(self, cid: int, **body: Any) -> dict[str, Any]:
        r = self("POST", f"/v1/changes/{cid}/commit", json=body)
        assert r.status_code == 202, r.text
        return self.wait(cid)

    def initial(self) -> dict[str, Any]:
        """Commit the seeded intent (revision 1) as the first active revision."""
        ch = self.change(intent=self.doc)
        self.review(ch["id"])
        return self.commit(ch["id"])


@contextmanager
def running_api(url: str, *, intent: dict[str, Any] | None = None, example: bool = True, driver: Any = None,
                telemetry: Any = None, **settings: Any) -> Iterator[Api]:
    """The app on a store seeded by :func:`seeded_store`, with ``Settings(**settings)`` (and the device
    ``driver`` and ``telemetry`` collector the composition root would hand it)."""
    db, tokens = seeded_store(url, intent=intent, example=example)
    try:
        app = create_app(Settings(db_url=db.url, **settings), database=db, driver=driver, telemetry=telemetry)
        with TestClient(app) as client:
            yield Api(client, tokens, db, intent)
    finally:
        db.dispose()


class RequestQueries:
    """The SQL statements (``BEGIN`` aside) that HTTP requests run on an engine: not those of the
    app's lifespan loops (the lease's renewals, the commit queue's polls, the collector), which
    share the engine and run at any moment. ``wrap`` the ASGI app and ``listen`` to its engine;
    the mark is a context variable, which the worker threads of a request inherit."""

    def __init__(self) -> None:
        self._in_request: ContextVar[bool] = ContextVar(f"in_request_{id(self)}", default=False)
        self.statements: list[str] = []

    def listen(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if self._in_request.get() and not statement.startswith("BEGIN"):
            self.statements.append(statement)

    def wrap(self, app: Any) -> Any:
        async def marked(scope: Any, receive: Any, send: Any) -> None:
            mark = self._in_request.set(scope["type"] == "http")
            try:
                await app(scope, receive, send)
            finally:
                self._in_request.reset(mark)
        return marked
