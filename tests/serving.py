"""A real ``loom serve`` for tests: a subprocess on a free loopback port.

Component, workflow, log, browser and lab tests all talk to the controller as
a client would, over HTTP to a process of its own; this module is the one
place that starts it, waits until ``/readyz`` answers, and stops it by pid
(SIGTERM, then SIGKILL), so a test can also ``kill -9`` it mid-commit. Calls go through the public
client (:meth:`LoomServer.client`), or raw (:meth:`LoomServer.__call__`) where a test holds the HTTP
details themselves (statuses, headers, retries it must see).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from controller.client import Client, ClientError

__all__ = ["LOOM", "LoomServer", "Ports", "example_server", "free_port", "request", "running", "stop_processes",
           "wait_ready"]

#: the ``loom`` command of this interpreter's environment (works without the console script)
LOOM = [sys.executable, "-c", "from controller.cli import main; main()"]


#: the one transport of the tests' raw calls. ``httpx.request`` builds a client, and with it an SSL context, for
#: every call: about 25 ms of CPU, most of a core for a test polling every 50 ms (and the HA tests' twenty kills
#: read a thousand diffs). No keep-alive: each call opens and closes its own connection, as ``httpx.request``'s.
_TRANSPORT = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))


def request(method: str, url: str, **kw: Any) -> httpx.Response:
    """``httpx.request(method, url, **kw)`` on the shared transport: a client of its own (its own cookies, the
    default timeout of 5 s unless ``timeout`` is given), a connection of its own, the body read."""
    return httpx.Client(transport=_TRANSPORT).request(method, url, **kw)  # not closed: that would close the transport


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Ports:
    """Free ports for the components of one test cluster, no two the same: :func:`free_port` closes its socket, so
    the kernel may hand the same port out again to the next ask (a Ray head was once given one port for two of its
    components, and Ray refused to start)."""

    def __init__(self) -> None:
        self.taken: set[int] = set()

    def take(self) -> int:
        while True:
            port = free_port()
            if port not in self.taken:
                self.taken.add(port)
                return port


def wait_ready(url: str, proc: subprocess.Popen[Any], log: Path, timeout: float = 120.0) -> None:
    """Poll ``url``/readyz until it answers 200; fail with the log's tail if the
    process dies or ``timeout`` seconds pass (generous: the machine may be busy)."""
    deadline = time.monotonic() + timeout
    with Client(url, token="", timeout=2, retries=0) as probe:
        while True:
            try:
                probe.raw.health(ready=True)  # 200 (any body: the bench's bare app answers {}); else raises
                return
            except ClientError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.1)


def stop_processes(procs: list[subprocess.Popen[Any]], grace: float = 10.0) -> None:
    """SIGTERM to every process still running, then wait ``grace`` seconds for each
    before SIGKILL (the order of ``procs`` is the order they are asked to stop)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


class ChangeCalls:
    """``change`` and ``review`` over the class's ``__call__(method, path, **kw)``: the same calls whether the
    API runs in this process (:class:`tests.apps.Api`) or in a ``loom serve`` (:class:`LoomServer`)."""

    def __call__(self, method: str, path: str, **kw: Any) -> Any:
        raise NotImplementedError

    def post_change(self, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """``POST /v1/changes`` of ``body``, which must create the change: its document."""
        r = self("POST", "/v1/changes", json=body, **kw)
        assert r.status_code == 201, r.text
        return dict(r.json())

    def review(self, cid: int) -> dict[str, Any]:
        """Change ``cid``'s review document (which must be answered)."""
        r = self("POST", f"/v1/changes/{cid}/review")
        assert r.status_code == 200, r.text
        return dict(r.json())


class LoomServer(ChangeCalls):
    """``loom serve ARGS --port P`` with ``LOOM_ADMIN_TOKEN`` = ``token``, logging to ``base/serve.log``."""

    def __init__(self, base: Path, args: list[str], token: str, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, ready_timeout: float = 120.0, request_timeout: float = 120.0):
        self.base, self.args, self.token = base, args, token
        self.env, self.cwd = env or {}, cwd
        self.ready_timeout, self.request_timeout = ready_timeout, request_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.base / "serve.log"

    def start(self) -> None:
        env = {**os.environ, "LOOM_ADMIN_TOKEN": self.token, **self.env}
        with open(self.log, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([*LOOM, "serve", *self.args, "--port", str(self.port)],
                                         stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.cwd)
        wait_ready(self.url, self.proc, self.log, self.ready_timeout)

    def kill9(self) -> None:
        """The controller dies at once, as with ``kill -9``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, grace: float = 30.0) -> None:
        if self.proc is not None:
            stop_processes([self.proc], grace)

    def client(self, **kw: Any) -> Client:
        """The public client of this server with the admin token (``kw``: its options, e.g. ``retries``)."""
        kw.setdefault("timeout", self.request_timeout)
        return Client(self.url, token=self.token, **kw)

    def change(self, patch: list[Any], base: int | None = None) -> dict[str, Any]:
        """A new change of ``patch`` against ``base`` (default: the active revision): its document."""
        if base is None:
            base = self("GET", "/v1/status").json()["active_revision"]
        return self.post_change({"base_revision": base, "patch": patch})

    def __call__(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """A raw API call with the admin token (beside the ``headers`` given): sent once, any answer."""
        headers = {"Authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        kw.setdefault("timeout", self.request_timeout)
        return request(method, self.url + path, headers=headers, **kw)


@contextmanager
def running(server: LoomServer) -> Iterator[LoomServer]:
    """``server`` started for the ``with`` block and stopped after it, whatever happened (a fixture's body)."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


def example_server(base: Path, token: str, **env: str) -> LoomServer:
    """``loom serve --example`` on a SQLite file of ``base``, drift checks off (``env``: more settings)."""
    return LoomServer(base, ["--db", f"sqlite:///{base / 'loom.db'}", "--example"], token,
                      cwd=Path(__file__).resolve().parent.parent, ready_timeout=60, request_timeout=60,
                      env={"LOOM_DRIFT_INTERVAL": "0", **env})


def settled_change(fetch: Callable[[str], Any], cid: int, *, timeout: float, interval: float = 0.1,
                   must_settle: bool = False) -> dict[str, Any]:
    """Change ``cid`` once it is no longer committing, read with ``fetch(path)`` (a JSON document); at
    ``timeout`` seconds the last one read (or, with ``must_settle``, a failed assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        ch = dict(fetch(f"/v1/changes/{cid}"))
        if ch["state"] != "committing":
            return ch
        if time.monotonic() > deadline:
            assert not must_settle, ch
            return ch
        time.sleep(interval)
