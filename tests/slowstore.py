"""A slow database for tests: a TCP relay to PostgreSQL's unix socket that delays what the server sends.

:class:`SlowStore` runs ``python -m tests.slowstore SOCKET PORT CONTROL`` as a
child process (a process of its own, so that a busy test process does not slow
it further), listening on ``127.0.0.1:PORT`` and relaying every connection to
the server's unix socket (where the private test server trusts its ``postgres``
user). Every chunk the server sends is held for the current delay before it is
passed on, in order: each round trip of every statement takes that much longer.
:meth:`SlowStore.set_delay` changes the delay while connections are open (the
relay re-reads the file ``CONTROL`` every 50 ms); 0 relays at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.serving import free_port, stop_processes

__all__ = ["SlowStore", "unix_socket_of"]


def unix_socket_of(url: str) -> Path:
    """The unix socket of a ``postgresql+psycopg://user@/db?host=DIR`` URL (port 5432)."""
    host = parse_qs(urlsplit(url).query)["host"][0]
    return Path(host) / ".s.PGSQL.5432"


class SlowStore:
    """The relay as a child process; :attr:`url` reaches the database of ``url`` through it."""

    def __init__(self, base: Path, url: str):
        self.base, self.socket = base, unix_socket_of(url)
        self.port = free_port()
        parts = urlsplit(url)
        self.url = f"{parts.scheme}://postgres@127.0.0.1:{self.port}{parts.path}"
        self.control = base / "slowstore.delay"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.set_delay(0.0)
        with open(self.base / "slowstore.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.slowstore", str(self.socket), str(self.port),
                                          str(self.control)], stdout=log, stderr=subprocess.STDOUT,
                                         cwd=Path(__file__).resolve().parent.parent)
        deadline = time.monotonic() + timeout
        import socket

        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, "the slow store did not start"
                time.sleep(0.05)

    def set_delay(self, seconds: float) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(repr(float(seconds)))
        tmp.replace(self.control)

    def stop(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc], 5)


# -- the relay (the child process) ----------------------------------------------------------------
class _Delay:
    def __init__(self, control: Path):
        self.control, self.value = control, 0.0

    async def follow(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.value = max(0.0, float(self.control.read_text()))
            await asyncio.sleep(0.05)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: _Delay | None) -> None:
    """Copy ``reader`` to ``writer``; with ``delay``, each chunk leaves the delay after it arrived, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()

    sender = asyncio.create_task(send())
    last = 0.0
    try:
        while chunk := await reader.read(65536):
            last = max(last, loop.time() + (delay.value if delay else 0.0))
            queue.put_nowait((last, chunk))
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait((0.0, b""))
        with contextlib.suppress(Exception):
            await sender
        writer.close()


async def _relay(socket_path: str, port: int, control: Path) -> None:
    delay = _Delay(control)
    follower = asyncio.create_task(delay.follow())

    async def client(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            c_writer.close()
            return
        await asyncio.gather(_pipe(c_reader, s_writer, None), _pipe(s_reader, c_writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(client, "127.0.0.1", port)
    try:
        async with server:
            await server.serve_forever()
    finally:
        follower.cancel()


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(_relay(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])))
