"""Structured logs: JSON lines with the request id, in-process and from a real ``loom serve``.

The formatter's fields and ``extra`` keys; the request id set by the API's
middleware reaching records logged in a sync route (run in a worker thread),
in an asyncio task the request started (as the change workflow's background
commit is) and in a plain thread given :func:`controller.logs.copy_context_run`;
and a ``loom serve`` process whose stderr is one JSON object a line, its access
records carrying the ``X-Request-ID`` the client sent.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import create_app
from controller.logs import JsonFormatter, bind_request_id, copy_context_run, current_request_id, setup_logging
from controller.settings import Settings
from controller.store.db import Database
from tests.serving import LOOM, free_port, wait_ready

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's note about httpx versions
    from fastapi.testclient import TestClient


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """setup_logging() into a buffer; the root logger is put back afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buf = io.StringIO()
    setup_logging("INFO", json=True, stream=buf)
    try:
        yield buf
    finally:
        logging.captureWarnings(False)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def records(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def test_a_record_is_one_json_object_with_its_extras(captured: io.StringIO) -> None:
    log = logging.getLogger("loom.workflow")
    with bind_request_id("req-1"):
        log.info("pushed %s", "leaf-0-0", extra={"device": "leaf-0-0", "seconds": 0.25})
    log.warning("outside any request")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, second, third = records(captured)
    assert first["msg"] == "pushed leaf-0-0" and first["logger"] == "loom.workflow" and first["level"] == "info"
    assert first["request_id"] == "req-1" and first["device"] == "leaf-0-0" and first["seconds"] == 0.25
    assert first["ts"].endswith("+00:00")
    assert second["request_id"] is None and second["level"] == "warning"
    assert third["exc"].startswith("Traceback") and "ValueError: boom" in third["exc"]


def test_setup_logging_twice_keeps_one_handler(captured: io.StringIO) -> None:
    buf = io.StringIO()
    setup_logging("INFO", json=False, stream=buf)
    with bind_request_id("req-2"):
        logging.getLogger("loom.x").info("hello")
    assert captured.getvalue() == ""  # the first handler was replaced, not doubled
    assert "[req-2] hello" in buf.getvalue()
    assert not isinstance(logging.getLogger().handlers[-1].formatter, JsonFormatter)


def test_the_request_id_follows_the_request_into_threads_and_tasks(tmp_path: Path, captured: io.StringIO) -> None:
    db = Database(f"sqlite:///{tmp_path / 'l.db'}")
    app = create_app(Settings(db_url=db.url), database=db)
    log = logging.getLogger("loom.controller")
    done = threading.Event()

    def sync_route() -> dict[str, str | None]:  # FastAPI runs this in a worker thread
        log.info("in the worker thread")

        def later() -> None:
            log.info("in a plain thread")
            done.set()

        threading.Thread(target=copy_context_run(later)).start()
        return {"id": current_request_id()}

    async def async_route() -> dict[str, str | None]:
        async def background() -> None:
            await asyncio.sleep(0.01)
            log.info("in a background task")

        await asyncio.get_running_loop().create_task(background())
        return {"id": current_request_id()}

    app.add_api_route("/test/sync", sync_route)
    app.add_api_route("/test/async", async_route)
    with TestClient(app) as client:
        assert client.get("/test/sync", headers={"X-Request-ID": "rid-sync"}).json() == {"id": "rid-sync"}
        assert done.wait(10)
        r = client.get("/test/async", headers={"X-Request-ID": "rid-async"})
        assert r.json() == {"id": "rid-async"} and r.headers["x-request-id"] == "rid-async"
        generated = client.get("/healthz").headers["x-request-id"]
    db.dispose()
    by_msg = {r["msg"]: r for r in records(captured) if r["logger"] == "loom.controller"}
    assert by_msg["in the worker thread"]["request_id"] == "rid-sync"
    assert by_msg["in a plain thread"]["request_id"] == "rid-sync"
    assert by_msg["in a background task"]["request_id"] == "rid-async"
    access = [r for r in records(captured) if r["logger"] == "loom.access"]
    assert {(a["route"], a["status"], a["request_id"]) for a in access} >= {
        ("/test/sync", 200, "rid-sync"), ("/test/async", 200, "rid-async"), ("/healthz", 200, generated)}
    assert all(isinstance(a["seconds"], float) for a in access)


def test_a_commit_logs_with_the_request_id_of_the_commit_call(tmp_path: Path, captured: io.StringIO) -> None:
    from controller import service

    db = Database(f"sqlite:///{tmp_path / 'c.db'}")
    db.migrate()
    cli = service.WriteContext(actor=service.Actor("setup", "admin"))
    with db.session() as s:
        service.load_example(session=s, ctx=cli)
        token = service.create_token("op", "operator", session=s, ctx=cli)[1]
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(Settings(db_url=db.url), database=db)) as client:
        ch = client.post("/v1/revisions/1/rollback", headers=auth, json={}).json()
        client.post(f"/v1/changes/{ch['id']}/review", headers=auth)
        r = client.post(f"/v1/changes/{ch['id']}/commit", headers={**auth, "X-Request-ID": "commit-log-1"}, json={})
        assert r.status_code == 202
        deadline = time.monotonic() + 60
        while client.get(f"/v1/changes/{ch['id']}", headers=auth).json()["state"] == "committing":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    db.dispose()
    mine = [r for r in records(captured) if r["logger"] == "loom.workflow" and r.get("change") == ch["id"]]
    assert mine and all(r["request_id"] == "commit-log-1" for r in mine)  # the background commit kept it


def test_python_warnings_are_json_records(captured: io.StringIO) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with bind_request_id("req-warn"):
            warnings.warn("this knob is going away", DeprecationWarning, stacklevel=1)
    [doc] = [r for r in records(captured) if r["logger"] == "py.warnings"]
    assert doc["level"] == "warning" and doc["request_id"] == "req-warn"
    assert "DeprecationWarning: this knob is going away" in doc["msg"]


def test_a_500_is_logged_and_answered_with_its_request_id(tmp_path: Path, captured: io.StringIO) -> None:
    db = Database(f"sqlite:///{tmp_path / 'e.db'}")
    db.migrate()  # a store the lease and the commit engine can use: their records are not the requests'
    app = create_app(Settings(db_url=db.url), database=db)

    def broken() -> None:
        raise RuntimeError("a bug")

    async def broken_async() -> None:
        raise KeyError("another bug")

    app.add_api_route("/test/broken", broken)
    app.add_api_route("/test/broken-async", broken_async)
    with TestClient(app) as client:  # raise_server_exceptions stays on: nothing escapes to the server
        for path, rid in (("/test/broken", "rid-500"), ("/test/broken-async", "rid-500-async")):
            r = client.get(path, headers={"X-Request-ID": rid})
            assert r.status_code == 500 and r.headers["x-request-id"] == rid
            assert r.json()["request_id"] == rid and r.json()["type"] == "urn:loom:problem:internal"
            assert "bug" not in r.text  # no traceback, no message of the exception
    db.dispose()
    docs = records(captured)
    for rid, cause in (("rid-500", "RuntimeError: a bug"), ("rid-500-async", "KeyError: 'another bug'")):
        errors = [d for d in docs if d["level"] == "error" and d["request_id"] == rid]
        assert len(errors) == 1 and cause in errors[0]["exc"], errors
        assert [d["status"] for d in docs if d["logger"] == "loom.access" and d["request_id"] == rid] == [500]
    assert all(d["request_id"] for d in docs if d["level"] in ("warning", "error")), \
        [d for d in docs if d["level"] in ("warning", "error") and not d["request_id"]]


def test_loom_serve_logs_json_lines_with_the_request_id(tmp_path: Path) -> None:
    port, admin = free_port(), secrets.token_urlsafe(32)
    err = open(tmp_path / "serve.err", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*LOOM, "serve", "--example",
         "--db", f"sqlite:///{tmp_path / 'loom.db'}", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "LOOM_ADMIN_TOKEN": admin})
    err.close()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, tmp_path / "serve.err")
        auth = {"Authorization": f"Bearer {admin}"}
        assert httpx.get(f"{url}/v1/intent", headers={**auth, "X-Request-ID": "serve-intent-1"}).status_code == 200
        r = httpx.get(f"{url}/v1/devices/nope", headers={**auth, "X-Request-ID": "serve-404"})
        assert r.status_code == 404 and r.json()["request_id"] == "serve-404"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    lines = [x for x in (tmp_path / "serve.err").read_text().splitlines() if x.strip()]
    docs = [json.loads(x) for x in lines]  # every line is one JSON object
    access = {d["request_id"]: d for d in docs if d["logger"] == "loom.access"}
    assert access["serve-intent-1"]["route"] == "/v1/intent" and access["serve-intent-1"]["status"] == 200
    assert access["serve-404"]["route"] == "/v1/devices/{object_id}" and access["serve-404"]["status"] == 404
    assert any(d["logger"].startswith("uvicorn") for d in docs)  # uvicorn's own lines too, as JSON
