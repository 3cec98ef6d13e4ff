"""Bounded windows of counter samples and the rates between them (pure, no I/O).

A :class:`CounterStore` keeps, per counter ``(device, path)``, the last sample
and a ring of the last ``Options.max_rates`` per-interval rates, in numpy arrays
(one row per counter) so that a thousand devices' counters fit in memory and a
batch of samples is ingested with vector operations. Everything takes ``now``
(seconds since the epoch) as a parameter; timestamps of samples are in
nanoseconds, as gNMI sends them.

The rules, for every sample ``(t, v)`` of a counter whose last sample is ``(t0, v0)``:

* **late or duplicate**: ``t <= t0`` -> dropped (counted in ``late``); the window
  never goes backwards.
* **normal**: ``v >= v0`` -> one interval of rate ``(v - v0) / (t - t0)``.
* **64-bit wrap**: ``v < v0`` and the delta modulo 2**64 is a plausible rate
  (at most ``Options.max_rate``) -> one interval of that rate. Only a counter
  that was near 2**64 can wrap plausibly.
* **reset** (an agent or daemon restart): any other drop. The counter restarted
  from zero at an unknown moment inside the interval, so ``v / (t - t0)`` is at
  best a lower bound. It becomes the interval's rate only if that is plausible:
  at most ``Options.max_rate`` and at most ``Options.reset_ratio`` times the
  counter's previous rate (i.e. no spike); otherwise the interval is skipped (a
  gap, counted in ``resets``). Either way ``(t, v)`` is the new baseline.
* **spike guard**: any interval whose rate exceeds ``Options.max_rate`` is skipped.
* **stale**: a counter whose last sample is older than ``stale_intervals x
  interval_s`` or than the window asked for, or whose device was marked
  disconnected, is reported stale with its age, never as zero.
* **devices that come and go**: :meth:`CounterStore.expire` forgets every counter
  of a device not heard from for ``Options.forget_after_s``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = ["STATS", "CounterStore", "Options", "Sample", "WindowStats"]

STATS = ("mean", "p95", "max")
_WRAP = 2**64


class Sample(NamedTuple):
    """One counter reading: ``value`` of ``path`` on ``device`` at ``timestamp_ns``."""

    device: str
    path: str
    value: int
    timestamp_ns: int


@dataclass(frozen=True, slots=True)
class Options:
    """Tuning of the collector's windows (the knobs a user or a bench may turn).

    ``interval_s`` is the subscription's sample interval; ``max_rates`` bounds each
    counter's ring (``max_rates x interval_s`` is the longest useful window: 6
    minutes by default, beyond a 300 s planning window; 16 bytes per rate);
    ``max_rate`` is the most a counter can plausibly grow per second (units of
    the counter: octets by default, 1.6 Tbps); ``reset_ratio`` bounds the rate
    believed after a reset relative to the previous one.
    """

    interval_s: float = 10.0
    max_rates: int = 36
    stale_intervals: float = 3.0
    max_rate: float = 2e11
    reset_ratio: float = 1.0
    forget_after_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Per requested row: rates over the window (NaN where none) and staleness."""

    mean: np.ndarray
    p95: np.ndarray
    max: np.ndarray
    age_s: np.ndarray  # NaN for a counter never seen
    stale: np.ndarray  # bool

    def stat(self, name: str) -> np.ndarray:
        if name not in STATS:
            raise ValueError(f"unknown statistic {name!r} (expected one of {', '.join(STATS)})")
        out: np.ndarray = getattr(self, name)
        return out


class CounterStore:
    """Rows of counters: last sample, a ring of interval rates, the device of each row."""

    def __init__(self, options: Options | None = None):
        self.options = options or Options()
        self.rows: dict[tuple[str, str], int] = {}
        self.keys: list[tuple[str, str] | None] = []
        self._free: list[int] = []
        self.devices: dict[str, set[int]] = {}
        self.device_seen: dict[str, float] = {}
        self.disconnected: set[str] = set()
        self.late = 0
        self.resets = 0
        self.wraps = 0
        self.spikes = 0
        self._alloc(0)

    # -- storage --------------------------------------------------------------
    def _alloc(self, size: int) -> None:
        k = self.options.max_rates
        self.last_t = np.zeros(size, dtype=np.int64)
        self.last_v = np.zeros(size, dtype=np.uint64)
        self.has_last = np.zeros(size, dtype=bool)
        self.prev_rate = np.full(size, np.nan, dtype=np.float64)
        self.head = np.zeros(size, dtype=np.int64)
        self.ring_t = np.full((size, k), -np.inf, dtype=np.float64)  # interval end, seconds
        self.ring_dt = np.zeros((size, k), dtype=np.float32)
        self.ring_rate = np.zeros((size, k), dtype=np.float32)

    def _grow(self, size: int) -> None:
        old = self._arrays()
        n = len(old[0])
        self._alloc(size)
        for new, prev in zip(self._arrays(), old, strict=True):
            new[:n] = prev

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (self.last_t, self.last_v, self.has_last, self.prev_rate, self.head, self.ring_t, self.ring_dt,
                self.ring_rate)

    def _clear(self, row: int) -> None:
        self.has_last[row] = False
        self.prev_rate[row] = np.nan
        self.head[row] = 0
        self.ring_t[row] = -np.inf

    def row(self, device: str, path: str) -> int:
        """The row of a counter, created on first sight."""
        key = (device, path)
        r = self.rows.get(key)
        if r is not None:
            return r
        if self._free:
            r = self._free.pop()
            self.keys[r] = key
        else:
            r = len(self.keys)
            if r >= len(self.last_t):
                self._grow(max(1024, 2 * len(self.last_t)))
            self.keys.append(key)
        self._clear(r)
        self.rows[key] = r
        self.devices.setdefault(device, set()).add(r)
        return r

    def __len__(self) -> int:
        return len(self.rows)

    # -- ingestion ------------------------------------------------------------
    def ingest(self, samples: Iterable[Any], now: float) -> int:
        """Add samples (objects with ``device``, ``path``, ``value``, ``timestamp_ns``; any order,
        any counters); returns how many were kept."""
        rows: list[int] = []
        ts: list[int] = []
        vs: list[int] = []
        row = self.row
        seen: set[str] = set()
        for s in samples:
            rows.append(row(s.device, s.path))
            ts.append(s.timestamp_ns)
            vs.append(s.value)
            seen.add(s.device)
        for d in seen:
            self.device_seen[d] = now
            self.disconnected.discard(d)
        if not rows:
            return 0
        r = np.asarray(rows, dtype=np.int64)
        t = np.asarray(ts, dtype=np.int64)
        v = np.asarray(vs, dtype=np.uint64)
        order = np.lexsort((t, r))
        r, t, v = r[order], t[order], v[order]
        kept = 0
        while len(r):  # rounds: each counter at most once per round, in time order
            first = np.ones(len(r), dtype=bool)
            first[1:] = r[1:] != r[:-1]
            kept += self._apply(r[first], t[first], v[first])
            rest = ~first
            r, t, v = r[rest], t[rest], v[rest]
        return kept

    def _apply(self, r: np.ndarray, t: np.ndarray, v: np.ndarray) -> int:
        o = self.options
        had = self.has_last[r]
        late = had & (t <= self.last_t[r])
        self.late += int(late.sum())
        ok = ~late
        r, t, v, had = r[ok], t[ok], v[ok], had[ok]
        step = had.copy()
        if step.any():
            rs, ts, vs = r[step], t[step], v[step]
            v0 = self.last_v[rs]
            dt = (ts - self.last_t[rs]) / 1e9
            dropped = vs < v0
            delta = (vs - v0).astype(np.float64)  # uint64 arithmetic: modulo 2**64 on a drop
            rate = delta / dt
            wrap = dropped & (rate <= o.max_rate)
            reset = dropped & ~wrap
            after = vs.astype(np.float64) / dt
            prev = self.prev_rate[rs]
            believe = reset & (after <= o.max_rate) & (after <= o.reset_ratio * prev)  # NaN prev: not believed
            rate = np.where(reset, after, rate)
            good = (~reset | believe) & (rate <= o.max_rate)
            self.wraps += int(wrap.sum())
            self.resets += int(reset.sum())
            self.spikes += int((~dropped & (rate > o.max_rate)).sum())
            rg, tg, dg, rate_g = rs[good], ts[good], dt[good], rate[good]
            h = self.head[rg]
            self.ring_t[rg, h] = tg / 1e9
            self.ring_dt[rg, h] = dg
            self.ring_rate[rg, h] = rate_g
            self.head[rg] = (h + 1) % o.max_rates
            self.prev_rate[rg] = rate_g
        self.last_t[r] = t
        self.last_v[r] = v
        self.has_last[r] = True
        return len(r)

    # -- devices --------------------------------------------------------------
    def mark_disconnected(self, device: str) -> None:
        """The device's stream is down: its counters read stale until it samples again."""
        self.disconnected.add(device)

    def forget(self, device: str) -> None:
        """Drop every counter of ``device``."""
        for r in self.devices.pop(device, set()):
            key = self.keys[r]
            if key is not None:
                del self.rows[key]
            self.keys[r] = None
            self._clear(r)
            self._free.append(r)
        self.device_seen.pop(device, None)
        self.disconnected.discard(device)

    def expire(self, now: float) -> list[str]:
        """Forget the devices not heard from for ``forget_after_s``; returns them."""
        gone = [d for d, seen in self.device_seen.items() if now - seen > self.options.forget_after_s]
        for d in gone:
            self.forget(d)
        return gone

    # -- windows --------------------------------------------------------------
    def stats(self, rows: Sequence[int] | np.ndarray, now: float, window_s: float) -> WindowStats:
        """Mean (time-weighted), p95 and max of the interval rates ending in
        ``(now - window_s, now]`` for each row (-1: unknown counter), with age and staleness."""
        o = self.options
        idx = np.asarray(rows, dtype=np.int64)
        known = idx >= 0
        safe = np.where(known, idx, 0)
        if len(self.last_t) == 0:
            nan = np.full(len(idx), np.nan)
            return WindowStats(nan, nan.copy(), nan.copy(), nan.copy(), np.ones(len(idx), dtype=bool))
        tt = self.ring_t[safe]
        inside = (tt > now - window_s) & (tt <= now) & known[:, None]
        dt = np.where(inside, self.ring_dt[safe], 0.0).astype(np.float64)
        rate = self.ring_rate[safe].astype(np.float64)
        span = dt.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(span > 0, (rate * dt).sum(axis=1) / np.where(span > 0, span, 1.0), np.nan)
        any_in = inside.any(axis=1)
        p95, mx = _p95_max(np.where(inside, rate, np.nan))
        seen = known & self.has_last[safe]
        age = np.where(seen, now - self.last_t[safe] / 1e9, np.nan)
        off = np.array([k is not None and k[0] in self.disconnected for k in (self.keys[i] for i in safe)],
                       dtype=bool) if len(idx) else np.zeros(0, dtype=bool)
        limit = min(o.stale_intervals * o.interval_s, window_s)
        stale = ~seen | (age > limit) | off | ~any_in
        return WindowStats(mean, p95, mx, age, stale)


def _p95_max(masked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the 95th percentile (linear interpolation, as numpy's default) and the maximum of the
    non-NaN entries; NaN for a row without any. Vectorized: one sort, NaNs last."""
    rows = np.sort(masked, axis=1)
    k = (~np.isnan(rows)).sum(axis=1)
    pos = np.maximum(k - 1, 0) * 0.95
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(k - 1, 0))
    r = np.arange(len(rows))
    frac = pos - lo
    p95 = rows[r, lo] * (1 - frac) + rows[r, hi] * frac if len(rows) else np.empty(0)
    mx = rows[r, np.maximum(k - 1, 0)] if len(rows) else np.empty(0)
    none = k == 0
    return np.where(none, np.nan, p95), np.where(none, np.nan, mx)
