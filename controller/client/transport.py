"""The client's one way to the server: an httpx client, retries with back-off, idempotency keys, errors.

A request is sent again only when repeating it is safe: a ``GET`` (or ``HEAD``), a
write that carries an ``Idempotency-Key`` (Loom answers its repeat with the first
answer and does the work once: :mod:`controller.service.idempotency`), or a dry run
the caller marks ``repeatable`` (a review, a what-if). It is sent again when it did
not get through or the connection broke before the answer (refused, reset, closed),
and when the answer is 429, 502, 503 or 504, after the answer's ``Retry-After`` or
else an exponential back-off (:class:`RetryPolicy`). A request that timed out
waiting for its answer is not repeated: the timeout is the caller's bound. Once the
tries are spent, a transport failure is :class:`ServerUnreachable` and an error
answer is :class:`ApiError` with its problem document (transport errors become the
client's at this one boundary, as httpx maps httpcore's).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from controller.client.errors import ApiError, Problem, ServerUnreachable

__all__ = ["RETRYABLE_ERRORS", "RetryPolicy", "Transport", "new_idempotency_key"]

#: transport errors after which the request may be sent again: it never got through, or the connection
#: broke before the answer (a timeout waiting for the answer is the caller's bound, not retried)
RETRYABLE_ERRORS: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ReadError, httpx.WriteError,
    httpx.RemoteProtocolError)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a request that is safe to repeat is sent again.

    ``retries`` more tries after the first; before try ``n`` (from 1) the client waits
    ``backoff * 2 ** (n - 1)`` seconds, at most ``max_backoff``, or the answer's ``Retry-After``
    when it has one, at most ``max_retry_after``; ``statuses`` are the answers worth another try."""

    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 30.0
    statuses: frozenset[int] = frozenset({429, 502, 503, 504})

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait before try ``attempt + 1`` (``attempt`` tries made so far, from 1)."""
        told = _seconds(retry_after) if retry_after else None
        if told is not None:
            return min(told, self.max_retry_after)
        return float(min(self.backoff * 2 ** (attempt - 1), self.max_backoff))


def _seconds(retry_after: str) -> float | None:
    """``Retry-After`` as seconds from now: a number of seconds or an HTTP date (None: unreadable)."""
    text = retry_after.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds()) if when.tzinfo else None


def new_idempotency_key() -> str:
    """A fresh ``Idempotency-Key`` (random; one per logical request, the same on each of its tries)."""
    return f"loom-{uuid.uuid4().hex}"


class Transport:
    """Requests to one controller with one token: :meth:`send` answers the HTTP response (any status),
    :meth:`call` the JSON of a success or :class:`ApiError`.

    ``http`` is an httpx client to use instead of making one (its base URL and headers are the caller's;
    it is not closed here)."""

    def __init__(self, base_url: str, token: str | None, *, timeout: float, retry: RetryPolicy,
                 http: httpx.Client | None = None, sleep: Callable[[float], None] = time.sleep):
        self.retry, self.sleep = retry, sleep
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._owned = http is None
        self.http = http if http is not None else httpx.Client(base_url=base_url.rstrip("/"), headers=self._auth,
                                                               timeout=timeout)

    @property
    def base_url(self) -> str:
        return str(self.http.base_url)

    def close(self) -> None:
        if self._owned:
            self.http.close()

    @contextmanager
    def stream(self, method: str, path: str, *, headers: Mapping[str, str] | None = None) -> Iterator[httpx.Response]:
        """A streamed answer (server-sent events), sent once: the caller resumes a broken stream."""
        with self.http.stream(method, path, headers={**self._auth, **(headers or {})}) as response:
            yield response

    def send(self, method: str, path: str, *, json_body: object = None, content: bytes | None = None,
             params: Mapping[str, str | int | float] | None = None, headers: Mapping[str, str] | None = None,
             idempotency_key: str | None = None, repeatable: bool | None = None) -> httpx.Response:
        """``method path`` with the token; ``json_body`` is encoded once (every try sends the same bytes,
        which an ``Idempotency-Key`` is bound to). ``repeatable`` overrides whether the request is safe to
        send again (default: a safe method, or a key). Raises :class:`ServerUnreachable`."""
        method = method.upper()
        sent = {**self._auth, **(headers or {})}
        if idempotency_key:
            sent["Idempotency-Key"] = idempotency_key
        if json_body is not None:
            content = json.dumps(json_body, separators=(",", ":"), ensure_ascii=False).encode()
            sent.setdefault("Content-Type", "application/json")
        safe = repeatable if repeatable is not None else (method in SAFE_METHODS or "Idempotency-Key" in sent)
        attempt = 1
        while True:
            try:
                response = self.http.request(method, path, content=content, params=params, headers=sent)
            except httpx.HTTPError as exc:
                if not (safe and attempt <= self.retry.retries and isinstance(exc, RETRYABLE_ERRORS)):
                    raise ServerUnreachable(self.base_url, str(exc), attempt) from exc
                self.sleep(self.retry.delay(attempt))
            else:
                if not (safe and attempt <= self.retry.retries and response.status_code in self.retry.statuses):
                    return response
                self.sleep(self.retry.delay(attempt, response.headers.get("Retry-After")))
            attempt += 1

    def call(self, method: str, path: str, *, json_body: object = None, content: bytes | None = None,
             params: Mapping[str, str | int | float] | None = None, headers: Mapping[str, str] | None = None,
             idempotency_key: str | None = None, repeatable: bool | None = None) -> Any:
        """:meth:`send`, then the decoded JSON of a 2xx answer (None when it has no body); raises
        :class:`ApiError` with the problem document for any other status."""
        response = self.send(method, path, json_body=json_body, content=content, params=params, headers=headers,
                             idempotency_key=idempotency_key, repeatable=repeatable)
        if not response.is_success:
            raise ApiError(Problem.of(response), response.headers)
        return response.json() if response.content else None
