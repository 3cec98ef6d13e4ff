"""The public client (:mod:`controller.client`) against a real ``loom serve --example``.

Typed reads; a change whose answer is lost on the way back, sent again with the same
``Idempotency-Key`` and made once; a problem document raised as :class:`ApiError` with
its located errors; a connection refused, then the server there; a POST without a key
never sent twice; ``Retry-After`` honoured; the server-sent events; and the README's
five-line script, run exactly as the README shows it. Faults come from a small HTTP
proxy on loopback in front of the server (:class:`FlakyProxy`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

import controller.client
from controller.client import (
    ApiError,
    Client,
    Page,
    RetryPolicy,
    Revision,
    ServerUnreachable,
    Status,
    load_intent,
)
from controller.model import Intent
from controller.model.documents import ChangeState, PlanDocument, ReviewDocument
from tests.serving import LoomServer, example_server, free_port, running

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "controller" / "examples" / "dc1.yaml"
TOKEN = "client-" + "Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz9Xc"
FAST = RetryPolicy(retries=3, backoff=0.01)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoomServer]:
    with running(example_server(tmp_path_factory.mktemp("client"), TOKEN)) as s:
        yield s


class FlakyProxy:
    """An HTTP proxy on ``port`` in front of ``upstream`` that records every request and misbehaves once
    per :meth:`fault`: ``drop`` forwards the request and loses the answer (the connection closes with
    nothing sent back), ``503`` answers 503 with ``Retry-After`` without forwarding."""

    def __init__(self, upstream: str, port: int | None = None):
        self.upstream, self.port = upstream, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self._faults: list[tuple[str, str, str, str]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    def fault(self, method: str, path: str, kind: str, retry_after: str = "0") -> None:
        with self._lock:
            self._faults.append((method, path, kind, retry_after))

    def _take(self, method: str, path: str) -> tuple[str, str] | None:
        with self._lock:
            for f in self._faults:
                if f[0] == method and path.startswith(f[1]):
                    self._faults.remove(f)
                    return f[2], f[3]
        return None

    def requests(self, method: str, path: str) -> list[dict[str, str]]:
        return [h for m, p, h in self.seen if m == method and p.startswith(path)]

    def start(self) -> FlakyProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def handle_one(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                with proxy._lock:
                    proxy.seen.append((self.command, self.path, {k.lower(): v for k, v in headers.items()}))
                fault = proxy._take(self.command, self.path)
                if fault and fault[0] == "503":
                    answer = json.dumps({"type": "urn:loom:problem:shutting-down", "title": "Shutting down",
                                         "status": 503}).encode()
                    self.send_response(503)
                    self.send_header("Retry-After", fault[1])
                    self.send_header("Content-Type", "application/problem+json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                r = httpx.request(self.command, proxy.upstream + self.path, content=body, headers=headers,
                                  timeout=120)
                if fault and fault[0] == "drop":
                    self.close_connection = True  # the server did the work; its answer is lost
                    return
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "content-encoding", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_one

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


@pytest.fixture
def proxy(server: LoomServer) -> Iterator[FlakyProxy]:
    p = FlakyProxy(server.url).start()
    try:
        yield p
    finally:
        p.stop()


def test_typed_reads(server: LoomServer) -> None:
    with Client(server.url, token=TOKEN) as loom:
        assert loom.whoami().role == "admin"
        assert loom.health().status == "ready"
        status = loom.status()
        assert isinstance(status, Status) and status.head_revision is not None and status.devices == ()
        intent = loom.intent()
        assert isinstance(intent, Intent) and intent == load_intent(EXAMPLE)
        assert loom.raw.intent(1) == load_intent(EXAMPLE).to_document()  # the document as the server sent it
        revisions = loom.revisions(limit=1)
        assert isinstance(revisions, Page) and isinstance(revisions.items[0], Revision)
        assert revisions.total >= 1 and revisions.items[0].hash == loom.revision(revisions.items[0].id).hash
        plan = loom.plan(1)
        assert isinstance(plan, PlanDocument) and plan.fabric == "dc1" and 0 < plan.summary.max_utilization < 1
        assert loom.changes(limit=5).total == loom.raw.changes(limit=5)["total"]


def test_a_change_whose_answer_is_lost_is_made_once(server: LoomServer, proxy: FlakyProxy) -> None:
    with Client(server.url, token=TOKEN) as direct, Client(proxy.url, token=TOKEN, retries=FAST) as loom:
        before = direct.changes(limit=1).total
        proxy.fault("POST", "/v1/changes", "drop")
        change = loom.create_change(1, intent=load_intent(EXAMPLE), message="lost answer")
        sent = proxy.requests("POST", "/v1/changes")
        assert len(sent) == 2 and sent[0]["idempotency-key"] == sent[1]["idempotency-key"]
        assert sent[0]["idempotency-key"].startswith("loom-")
        assert direct.changes(limit=1).total == before + 1  # one change, though the server saw two requests
        assert direct.change(change.id).message == "lost answer" and change.state == ChangeState.DRAFT
        # the same key, given by the caller: the same change again, nothing made
        again = [loom.create_change(1, patch=[], message="keyed", idempotency_key="client-test-1") for _ in range(2)]
        assert again[0].id == again[1].id and direct.changes(limit=1).total == before + 2


def test_a_problem_is_raised_with_its_located_errors(server: LoomServer) -> None:
    bad = load_intent(EXAMPLE).to_document()
    bad["links"] = [*bad["links"], {"a": "tor-0-0", "a_port": "eth7", "b": "nowhere", "b_port": "eth1"}]
    with Client(server.url, token=TOKEN) as loom:
        head = loom.status().head_revision
        with pytest.raises(ApiError) as caught:
            loom.put_intent(bad)
        problem = caught.value.problem
        assert caught.value.status == 422 and problem.kind == "invalid-intent" and problem.title == "Invalid intent"
        assert problem.errors[0].loc == f"links[{len(bad['links']) - 1}].b" and "nowhere" in problem.errors[0].msg
        assert problem.document["status"] == 422 and loom.status().head_revision == head  # nothing written
        with pytest.raises(ApiError) as missing:
            loom.change(999_999)
        assert missing.value.status == 404 and missing.value.kind == "not-found"


def test_a_refused_connection_is_tried_again(server: LoomServer) -> None:
    port = free_port()
    waits: list[float] = []
    started: list[FlakyProxy] = []

    def sleep(seconds: float) -> None:  # between the refused try and the next: the server appears
        waits.append(seconds)
        if not started:
            started.append(FlakyProxy(server.url, port).start())

    try:
        with Client(f"http://127.0.0.1:{port}", token=TOKEN, retries=FAST, sleep=sleep) as loom:
            assert loom.status().head_revision is not None
        assert waits == [0.01] and len(started[0].seen) == 1
    finally:
        for p in started:
            p.stop()
    with Client(f"http://127.0.0.1:{free_port()}", token=TOKEN, retries=FAST, sleep=waits.append) as nowhere:
        with pytest.raises(ServerUnreachable) as caught:
            nowhere.status()
    assert caught.value.attempts == 4 and waits[1:] == [0.01, 0.02, 0.04]


def test_a_post_without_a_key_is_sent_once(server: LoomServer, proxy: FlakyProxy) -> None:
    waits: list[float] = []
    with Client(proxy.url, token=TOKEN, retries=FAST, sleep=waits.append) as loom:
        proxy.fault("POST", "/v1/auto-te/pause", "503")
        with pytest.raises(ApiError) as caught:
            loom.pause_auto_te("not sent twice")
        assert caught.value.status == 503 and len(proxy.requests("POST", "/v1/auto-te/pause")) == 1
        proxy.fault("POST", "/v1/auto-te/resume", "drop")
        with pytest.raises(ServerUnreachable) as lost:
            loom.resume_auto_te("not sent twice")
        assert lost.value.attempts == 1 and len(proxy.requests("POST", "/v1/auto-te/resume")) == 1
        assert waits == []
        # a read and a keyed write are sent again after the 503, after its Retry-After
        proxy.fault("GET", "/v1/status", "503", retry_after="2")
        assert loom.status().head_revision is not None and len(proxy.requests("GET", "/v1/status")) == 2
        proxy.fault("POST", "/v1/revisions/1/rollback", "503", retry_after="1")
        assert loom.rollback(1).kind == "rollback" and len(proxy.requests("POST", "/v1/revisions/1/rollback")) == 2
        assert waits == [2.0, 1.0]


def test_review_commit_and_events(server: LoomServer) -> None:
    with Client(server.url, token=TOKEN) as loom:
        change = loom.propose(load_intent(EXAMPLE), message="client test")
        review = loom.review(change.id)
        assert isinstance(review, ReviewDocument) and review.verdict == "safe"
        done = loom.commit(change.id, wait=True)
        assert done.state == ChangeState.COMMITTED and loom.status().active_revision == done.proposed_revision
        events = loom.events(last_event_id=0)
        try:
            seen = [next(events) for _ in range(3)]
        finally:
            events.close()
        assert all(e.id > 0 and e.kind for e in seen) and [e.id for e in seen] == sorted(e.id for e in seen)
        assert any(e.kind == "change.state" for e in seen)
        assert loom.drift(refresh=False).active_revision == done.proposed_revision


def readme_script() -> str:
    """The README's client example: the Python block after the line that names this test."""
    text = (REPO / "README.md").read_text()
    marker = r"<!-- tests/component/test_client\.py runs exactly these five lines[^\n]*-->\n"
    found = re.search(marker + r"```python\n(.*?)```", text, re.S)
    assert found, "the README's client example is missing"
    return found.group(1)


def test_the_readme_script_runs(server: LoomServer, tmp_path: Path) -> None:
    script = readme_script()
    assert len(script.splitlines()) == 5
    assert textwrap.indent(script, "    ") in (controller.client.__doc__ or "")  # the package's docstring shows it too
    shutil.copy(EXAMPLE, tmp_path / "dc1.yaml")
    (tmp_path / "example.py").write_text(script)
    env = {**os.environ, "LOOM_SERVER": server.url, "LOOM_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    verdict, state, mlu = out.stdout.split()
    assert verdict == "safe" and state == "committed" and 0 < float(mlu) < 1
    readme = (REPO / "README.md").read_text()
    assert f"It prints `{out.stdout.strip()}`" in readme  # what the README says it prints
