"""A small HTTP/1.1 load generator for the bench: keep-alive connections, one request repeated.

The request is bytes (the same every time) or a function that makes each one
(writes that must differ, see :func:`json_request`). Each of ``connections``
coroutines sends the request, reads the status line,
the headers and exactly ``Content-Length`` bytes of body, and records the
latency, until the deadline. Plain asyncio streams with the request bytes made
once, so the client spends little of the machine the server needs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Load", "Request", "json_request", "measure", "request_bytes"]

#: what a worker sends: the same bytes every time, or a function making each request
Request = bytes | Callable[[], bytes]


@dataclass(frozen=True)
class Load:
    """What a run measured: requests, errors (status other than expected), seconds, latencies (s)."""

    requests: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def request_bytes(path: str, headers: dict[str, str] | None = None, host: str = "127.0.0.1") -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_request(method: str, path: str, body: Any, headers: dict[str, str] | None = None,
                 host: str = "127.0.0.1") -> bytes:
    """A request with a JSON body (``Content-Length`` set)."""
    data = json.dumps(body, separators=(",", ":")).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
             f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


async def _worker(host: str, port: int, request: Request, deadline: float, expect: int, lat: list[float],
                  errors: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    try:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            writer.write(request() if callable(request) else request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            lat.append(time.perf_counter() - t0)
            if status != expect:
                errors.append(status)
    finally:
        writer.close()


async def _run(host: str, port: int, request: Request, seconds: float, connections: int, expect: int) -> Load:
    lat: list[float] = []
    errors: list[int] = []
    t0 = time.perf_counter()
    deadline = t0 + seconds
    await asyncio.gather(*(_worker(host, port, request, deadline, expect, lat, errors) for _ in range(connections)))
    return Load(len(lat), len(errors), time.perf_counter() - t0, lat)


def measure(port: int, request: Request, *, seconds: float = 3.0, connections: int = 4, expect: int = 200,
            host: str = "127.0.0.1") -> Load:
    """Load ``host:port`` with ``request`` for ``seconds`` over ``connections`` keep-alive connections."""
    return asyncio.run(_run(host, port, request, seconds, connections, expect))
