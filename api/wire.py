"""The HTTP/1.1 protocol ``loom serve`` runs: uvicorn's h11 protocol, with a response's head and body sent together.

uvicorn writes a response's status line and headers to the socket as soon as the app starts the response, and its
body at the next message: two ``send`` calls, with other tasks free to run between them. A replica killed there
(``kill -9``, the OOM killer, a lost host) leaves a balancer with the head of an answer and no body. It has begun
to forward the answer, so it cannot replay the request on another replica, and the client is cut off without
knowing whether its write was done. With the head held until the first piece of the body is written, and both
going to the kernel in one ``write``, a reply is either wholly in the kernel (which delivers it, even once the
process is gone) or not begun at all, which a balancer sees as an empty response and replays (HAProxy's
``retry-on empty-response``; a write is replayed with its ``Idempotency-Key``, so it is done once). A streamed
body is atomic only up to its first piece; Loom streams none.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["WholeResponseH11"]


class _HeadHolding:
    """The connection's transport, holding a response's head (the first write once h11 sends a body) until the
    next write, the body's, or the close."""

    def __init__(self, transport: asyncio.Transport, protocol: H11Protocol) -> None:
        self._transport, self._protocol = transport, protocol
        self._head = b""
        self._state: Any = None  # h11's state at the last write

    def write(self, data: bytes) -> None:
        state = self._protocol.conn.our_state
        if state is h11.SEND_BODY and self._state is not h11.SEND_BODY:  # the head of a response: held
            self._head += data
        else:
            data, self._head = self._head + data, b""
            if data:
                self._transport.write(data)
        self._state = state

    def close(self) -> None:
        self._head = b""  # a head whose body never came is dropped: a bare close is an answer a balancer replays
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class WholeResponseH11(H11Protocol):
    """uvicorn's h11 protocol writing a response's head only with (the first piece of) its body: one ``write``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(_HeadHolding(transport, self))  # type: ignore[arg-type]
