"""Structured logs of the controller process: one JSON object per line, each with its request id.

This module owns the request id's :mod:`contextvars` variable and the log
format. The API's request middleware sets the id (:func:`bind_request_id`) for
the life of one request; because it is a context variable it follows the
request into the controller's functions, into ``run_in_threadpool`` threads and
into asyncio tasks created while it is set (the change workflow's background
commit, the southbound driver's ``grpc.aio`` calls), so every record logged
there by any ``loom.*`` logger carries ``request_id``. Work started in a plain
``threading.Thread`` can carry it with :func:`copy_context_run`.
:func:`setup_logging` installs the handler on the root logger (``loom serve``
calls it), JSON by default or a human line format, and routes Python's warnings
(:func:`logging.captureWarnings`, logger ``py.warnings``) through it. A record's ``extra`` fields
(``log.info("pushed", extra={"device": "leaf-0-0"})``) become JSON keys.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any, TypeVar

__all__ = [
    "JsonFormatter", "RequestIdFilter", "bind_request_id", "copy_context_run", "current_request_id",
    "request_id_var", "setup_logging",
]

T = TypeVar("T")

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("loom_request_id", default=None)

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "request_id"}


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    return request_id_var.get()


@contextmanager
def bind_request_id(request_id: str | None) -> Iterator[None]:
    """Set the request id for the code run inside the block (and the tasks it starts)."""
    token = request_id_var.set(request_id)
    try:
        yield
    finally:
        request_id_var.reset(token)


def copy_context_run(fn: Callable[..., T]) -> Callable[..., T]:
    """Wrap ``fn`` to run in a copy of the current context: hand it to a thread so
    its log records keep the request id of the request that started it."""
    ctx = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> T:
        return ctx.run(fn, *args, **kwargs)

    return run


class RequestIdFilter(logging.Filter):
    """Put the current request id on every record that passes (``None`` outside requests)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
    ``msg``, ``request_id``, the record's ``extra`` fields, and ``exc`` with the
    traceback text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or request_id_var.get(),
        }
        if record.threadName and record.threadName != "MainThread" and record.thread != threading.main_thread().ident:
            doc["thread"] = record.threadName
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exc"] = record.exc_text
        return json.dumps(doc, default=str, separators=(",", ":"))


_TEXT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
_MARK = "_loom_handler"


def setup_logging(level: str | int = "INFO", json: bool = True, *, stream: IO[str] | None = None) -> logging.Handler:
    """Send every logger's records to ``stream`` (stderr) as JSON lines (or text lines
    with ``json=False``), each with the request id. Idempotent: a second call
    replaces the handler it installed before. uvicorn's own loggers are pointed
    at the same handler, and so are Python's warnings (a record of ``py.warnings``
    at level warning) instead of raw lines on stderr. Returns the handler."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _MARK, False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    setattr(handler, _MARK, True)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if json else logging.Formatter(_TEXT))
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "py.warnings"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    logging.captureWarnings(True)
    return handler
