"""Stored telemetry (issue 31.2): the collector's windows outlive a restart.

Every replica collects from every switch, so a new leader already holds the
windows; a restarted replica does not. So the leader stores, every
``telemetry_archive_s``, the interval rates that ended since the last stored
segment (:mod:`controller.telemetry.archive`) and prunes the segments older than
``telemetry_keep_s``; every replica, when it starts, merges the stored segments
of the last ``telemetry_keep_s`` into its collector before it subscribes, so
that a window of an hour answers with the hour, not with what came since the
restart. A segment stops one interval short of now (a rate is ingested a moment
after it ends, and one ingested after its span was stored would be lost); a
leader that stops stores the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from controller.aio import cancel_and_wait, repeat
from controller.store import telemetry_repo
from controller.store.db import write_transaction
from controller.telemetry.archive import Segment
from controller.workflow.runtime import Runtime

__all__ = ["Archive"]

log = logging.getLogger("loom.telemetry")
IDLE_S = 5.0


@dataclass
class Archive:
    """The telemetry archive of one controller process (see the module's docstring)."""

    runtime: Runtime
    clock: Callable[[], float] = time.time
    stored_to: float | None = None  # where the stored segments end; None: read it on the next leading tick
    _task: asyncio.Task[Any] | None = None

    @property
    def every_s(self) -> float:
        return self.runtime.settings.telemetry_archive_s

    async def restore(self) -> int:
        """Merge the stored segments of the last ``telemetry_keep_s`` into the collector; how many rates."""
        tel = self.runtime.telemetry
        if tel is None or self.every_s <= 0:
            return 0
        since = self.clock() - tel.keep_s
        blobs = await self.runtime.in_session(lambda s: telemetry_repo.segments_since(since, session=s))
        n = await asyncio.to_thread(tel.restore, blobs) if blobs else 0
        if n:
            log.info("telemetry: %d stored interval rates restored from %d segment(s)", n, len(blobs))
        return n

    def start(self) -> None:
        if self.runtime.telemetry is not None and self.every_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(repeat(
                self.tick, what="telemetry archive", log=log, idle_s=IDLE_S))

    async def stop(self) -> None:
        """Stop the loop; a leader stores what it has not yet (up to now)."""
        await cancel_and_wait([self._task])
        if self._task is not None and self.runtime.is_leader():
            try:
                await self.tick(final=True)
            except Exception:  # noqa: BLE001 - stopping: the store may be gone; a restart forgets those rates
                log.warning("telemetry: the last rates could not be stored at shutdown", exc_info=True)
        self._task = None

    async def tick(self, now: float | None = None, *, final: bool = False) -> float:
        """Store the rates that ended since the last segment (the leader only); the seconds to the next."""
        rt, tel = self.runtime, self.runtime.telemetry
        if tel is None or not rt.is_leader():
            self.stored_to = None  # a next leadership reads where the store ends
            return IDLE_S
        now = self.clock() if now is None else now
        end = now if final else now - tel.options.interval_s
        if self.stored_to is None:
            last = await rt.in_session(lambda s: telemetry_repo.last_end(session=s))
            self.stored_to = max(last, now - tel.keep_s) if last is not None else now - tel.keep_s
        start = self.stored_to
        if end <= start:
            return self.every_s
        seg = await asyncio.to_thread(tel.segment, start, end)
        await rt.in_session(lambda s: self._store(seg, end, now - tel.keep_s, s))
        self.stored_to = end
        return self.every_s

    @staticmethod
    def _store(seg: Segment | None, end: float, keep_from: float, s: Session) -> None:
        with write_transaction(s):
            if seg is not None:
                telemetry_repo.add_segment(seg.start, end, seg.entries, seg.blob, session=s)
            telemetry_repo.prune_segments(keep_from, session=s)
