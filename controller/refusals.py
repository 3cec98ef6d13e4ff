"""How many refused requests the audit log records one by one, and the summary of the rest.

A refused request (a missing or bad token, the wrong role, a malformed request)
is worth an audit entry, but a flood of them must not fill the store. The
:class:`RefusalLimiter` keeps a token bucket per client and reason (who: a
token, or else an address; why: the status) and one over all clients: a
refusal gets its own entry while both buckets have a token, and is otherwise
counted. :meth:`RefusalLimiter.flush` hands out what was counted as summaries
("N more refused"), at most ``summaries`` of them per call, the largest
first, with the rest folded into one more. So the entries a flood leaves are
bounded by the buckets' rates plus ``summaries + 1`` per flush, whatever the
number of requests or clients; the memory by ``max_clients``.

Pure bookkeeping (time is a parameter); the API writes the entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["RefusalLimiter", "RefusalOptions", "Suppressed"]


@dataclass(frozen=True)
class RefusalOptions:
    """``burst`` entries at once per client and reason, then one per ``refill_s`` seconds; over all
    clients ``total_burst``, then one per ``total_refill_s``; ``summaries`` summary entries per flush
    (plus one for the rest); buckets of at most ``max_clients`` clients (the least recently refused
    are dropped, their counts kept for the summary of the rest)."""

    burst: int = 5
    refill_s: float = 60.0
    total_burst: int = 100
    total_refill_s: float = 1.0
    summaries: int = 20
    max_clients: int = 10_000


@dataclass
class _Bucket:
    tokens: float
    at: float

    def refill(self, now: float, burst: int, refill_s: float) -> bool:
        """Refill for the time since the last look; True when a token is there to take."""
        self.tokens = min(float(burst), self.tokens + max(0.0, now - self.at) / refill_s)
        self.at = now
        return self.tokens >= 1.0


@dataclass
class Suppressed:
    """Refusals of one client and reason that got no entry of their own: how many, over which time,
    and the last one's method and path. ``clients`` > 1 for the summary of the rest."""

    who: str
    status: int
    count: int
    first: float
    last: float
    method: str = ""
    path: str = ""
    clients: int = 1


@dataclass
class _Client:
    bucket: _Bucket
    suppressed: Suppressed | None = None


@dataclass
class RefusalLimiter:
    """Decides which refusals are recorded one by one (:meth:`admit`) and summarizes the others
    (:meth:`flush`). Thread-safe: the API's worker threads share one."""

    options: RefusalOptions = field(default_factory=RefusalOptions)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: OrderedDict[tuple[str, int], _Client] = OrderedDict()
        self._total: _Bucket | None = None
        self._dropped: Suppressed | None = None

    def admit(self, who: str, status: int, now: float, *, method: str = "", path: str = "") -> bool:
        """True when this refusal of ``who`` (a token or an address) with ``status`` gets its own
        entry; otherwise it is counted for a summary."""
        o = self.options
        with self._lock:
            key = (who, status)
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = _Client(_Bucket(float(o.burst), now))
                self._evict()
            self._clients.move_to_end(key)
            if self._total is None:
                self._total = _Bucket(float(o.total_burst), now)
            mine = client.bucket.refill(now, o.burst, o.refill_s)
            if self._total.refill(now, o.total_burst, o.total_refill_s) and mine:
                client.bucket.tokens -= 1.0
                self._total.tokens -= 1.0
                return True
            s = client.suppressed
            if s is None:
                s = client.suppressed = Suppressed(who, status, 0, now, now)
            s.count, s.last, s.method, s.path = s.count + 1, now, method, path
            return False

    def _evict(self) -> None:
        while len(self._clients) > self.options.max_clients:
            _, old = self._clients.popitem(last=False)
            if old.suppressed is not None:
                self._dropped = _merge(self._dropped, old.suppressed)

    def flush(self) -> list[Suppressed]:
        """What was counted since the last flush, as summaries: the ``summaries`` largest one by one,
        the others (and those of dropped clients) folded into one, ``who`` ``*``."""
        with self._lock:
            pending = [c.suppressed for c in self._clients.values() if c.suppressed is not None]
            for c in self._clients.values():
                c.suppressed = None
            rest, self._dropped = self._dropped, None
        pending.sort(key=lambda s: (-s.count, s.first))
        out = pending[:self.options.summaries]
        for s in pending[self.options.summaries:]:
            rest = _merge(rest, s)
        if rest is not None:
            out.append(rest)
        return out

    def __len__(self) -> int:
        return len(self._clients)


def _merge(into: Suppressed | None, s: Suppressed) -> Suppressed:
    if into is None:
        return Suppressed("*", s.status, s.count, s.first, s.last, s.method, s.path, s.clients)
    return Suppressed("*", into.status, into.count + s.count, min(into.first, s.first), max(into.last, s.last),
                      s.method, s.path, into.clients + s.clients)
