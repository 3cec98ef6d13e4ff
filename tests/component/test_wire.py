"""A replica killed in the middle of an answer leaves nothing half sent (api.wire.WholeResponseH11).

A real uvicorn process serves an app that starts its response and then kills its own process (``SIGKILL``) before
the body: with uvicorn's own h11 protocol the client gets the head and a cut body, which no balancer can replay;
with Loom's, it gets no byte at all, which a balancer replays on another replica (``retry-on empty-response``).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.serving import free_port

APP = textwrap.dedent("""
    import os, signal, sys
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from api.wire import WholeResponseH11

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"11")]})
        if scope["path"] == "/die":
            os.kill(os.getpid(), signal.SIGKILL)  # dies with its head written and its body not
        await send({"type": "http.response.body", "body": b'{"ok":true}'})

    protocol = WholeResponseH11 if sys.argv[2] == "whole" else H11Protocol
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", http=protocol)
""")


def _serve(tmp_path: Path, protocol: str) -> tuple[subprocess.Popen[bytes], int]:
    script, port = tmp_path / "app.py", free_port()
    script.write_text(APP)
    proc = subprocess.Popen([sys.executable, str(script), str(port), protocol], cwd=Path(__file__).parents[2],
                            env={"PYTHONPATH": str(Path(__file__).parents[2]), "PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            assert proc.poll() is None, "the app did not start"
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the app did not listen")


def _ask(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got


@pytest.mark.parametrize("protocol", ["whole", "uvicorn"])
def test_a_process_killed_between_head_and_body_sends_nothing_only_with_loom_protocol(tmp_path: Path,
                                                                                    protocol: str) -> None:
    proc, port = _serve(tmp_path, protocol)
    try:
        whole = _ask(port, "/ok")
        assert whole.startswith(b"HTTP/1.1 200") and whole.endswith(b'{"ok":true}')
        cut = _ask(port, "/die")
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if protocol == "whole":
        assert cut == b"", cut  # nothing: a balancer replays it
    else:  # the reference: uvicorn's own protocol leaves the head of an answer that never comes
        assert cut.startswith(b"HTTP/1.1 200") and not cut.endswith(b'{"ok":true}'), cut
