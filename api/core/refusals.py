"""Refused requests in the audit log: a missing or bad token (401), the wrong role (403), a
malformed request (422), each with who, from where, what and why, at a bounded rate.

:class:`RefusalAudit` is the app's (``app.state.refusals``): the problem handlers
(:mod:`api.core.problems`) call :meth:`RefusalAudit.record` for every such answer;
a :class:`controller.refusals.RefusalLimiter` decides which get an entry of
their own (per client and reason, and over all) and counts the rest, which
:meth:`RefusalAudit.flush` writes as "N more refused" summaries: every
``refill_s`` seconds while the app runs (:meth:`RefusalAudit.run`) and once at
shutdown. A store that cannot take the entries costs the refusal nothing but a
warning in the log. Who is a token's name when the token was valid (a 403, a
422 after authentication), else ``anonymous``; the client is the peer address.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from controller import service
from controller.model.errors import StoreUnavailable
from controller.refusals import RefusalLimiter, RefusalOptions, Suppressed
from controller.store.db import Database

__all__ = ["RefusalAudit"]

log = logging.getLogger("loom.api.audit")
ANONYMOUS = "anonymous"


class RefusalAudit:
    """Records refused requests through a limiter into the audit log of the store ``database()``
    answers (the app's, looked up at each write as the routes do)."""

    def __init__(self, database: Callable[[], Database], options: RefusalOptions | None = None, *,
                 clock: Callable[[], float] = time.time):
        self.database = database
        self.limiter = RefusalLimiter(options or RefusalOptions())
        self.clock = clock

    async def record(self, request: Request, status: int, why: str | list[dict[str, str]]) -> None:
        """Audit this refusal now if the limiter admits it, else count it for the next summary."""
        actor = getattr(request.state, "actor", None)
        client = request.client.host if request.client else None
        who = f"token {actor.name}" if actor is not None else f"address {client}"
        if not self.limiter.admit(who, status, self.clock(), method=request.method, path=request.url.path):
            return
        detail = why if isinstance(why, str) else json.dumps(why[:50])
        refusal = service.Refusal(actor=actor.name if actor is not None else ANONYMOUS,
                                  token_id=actor.token_id if actor is not None else None, client=client,
                                  request_id=getattr(request.state, "request_id", None), method=request.method,
                                  path=request.url.path, status=status, detail=detail)
        await run_in_threadpool(self._write, [refusal])

    def flush(self) -> int:
        """Write the summaries of what was counted; returns how many refusals they cover."""
        summaries = [self._summary(s) for s in self.limiter.flush()]
        self._write(summaries)
        return sum(s.count for s in summaries)

    async def run(self, every_s: float) -> None:
        """Flush every ``every_s`` seconds until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            await asyncio.to_thread(self.flush)

    def _summary(self, s: Suppressed) -> service.Refusal:
        when = f"{_iso(s.first)} to {_iso(s.last)}"
        if s.who == "*":
            what = f"{s.count} more refused requests from {s.clients} clients ({when}), not recorded one by one"
            actor, client = "*", None
        else:
            kind, _, ident = s.who.partition(" ")
            actor = ANONYMOUS if kind == "address" else ident
            client = ident if kind == "address" else None
            what = f"{s.count} more refused requests ({s.status}) from {s.who} ({when}), not recorded one by one"
        return service.Refusal(actor=actor, token_id=None, client=client, request_id=None, method=s.method,
                               path=s.path, status=s.status, detail=f"{what}; the last: {s.method} {s.path}",
                               count=s.count, summary=True)

    def _write(self, refusals: list[service.Refusal]) -> None:
        try:
            with self.database().session() as session:
                service.audit_refusals(refusals, session=session)
        except StoreUnavailable as exc:
            log.warning("%d refused request(s) not in the audit log: %s", len(refusals), exc)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
