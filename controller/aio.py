"""Small asyncio helpers the controller's background loops share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from sqlalchemy.exc import DBAPIError

__all__ = ["cancel_and_wait", "repeat"]


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel every task given (``None`` is skipped), then wait for each to end, whatever it raises."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    for t in live:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


async def repeat(tick: Callable[[], Awaitable[float]], *, what: str, log: logging.Logger, idle_s: float,
                 before_sleep: Callable[[float], None] | None = None) -> None:
    """Run ``tick`` forever, sleeping the seconds it returns between runs. A store that cannot answer (down, or
    not migrated: ``/readyz`` says so) is a warning and any other failure is logged with its traceback; either
    way the loop goes on after ``idle_s``. ``before_sleep(delay)`` is told each delay. ``what`` names the loop
    in the log (``"insight"``: "insight: the store cannot answer: ...")."""
    while True:
        try:
            delay = await tick()
        except asyncio.CancelledError:
            raise
        except DBAPIError as exc:
            log.warning("%s: the store cannot answer: %s", what, str(exc).splitlines()[0])
            delay = idle_s
        except Exception:
            log.exception("%s: the step failed", what)
            delay = idle_s
        if before_sleep is not None:
            before_sleep(delay)
        await asyncio.sleep(delay)
