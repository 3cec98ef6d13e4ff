"""The collector's rates as stored segments: what a restart reads back so that no window forgets.

A :class:`~controller.telemetry.counters.CounterStore` keeps, per counter, a
ring of interval rates (the end of each interval, its length and the rate over
it). :func:`segment` packs the entries of every ring that end in a span of time
into one compressed, self-describing blob (numpy's ``npz``: the counters' keys,
and per entry the key's index, end, length and rate; no pickles), and
:func:`restore` merges blobs back into a store: each counter keeps its newest
``max_rates`` entries, in time order, whatever it held already. A restored
counter has no last reading (its next sample starts a new interval, never one
across the restart's gap), so it reads stale until its device samples again.

The serving side (:mod:`controller.workflow.telemetry_archive`) writes a
segment every archive interval on the leader and reads them at startup.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from controller.telemetry.counters import CounterStore

__all__ = ["Segment", "restore", "segment"]

_SEP = "\t"  # between a counter's device and its path (neither holds a tab)


@dataclass(frozen=True, slots=True)
class Segment:
    """A packed span of rates: ``blob`` holds ``entries`` interval rates ending in ``(start, end]``."""

    start: float
    end: float
    entries: int
    blob: bytes


def segment(store: CounterStore, start: float, end: float) -> Segment | None:
    """The entries of every counter's ring that end in ``(start, end]`` (None when there are none)."""
    live = np.array([k is not None for k in store.keys], dtype=bool)
    n = len(store.keys)
    inside = (store.ring_t[:n] > start) & (store.ring_t[:n] <= end) & live[:, None]
    rows, slots = np.nonzero(inside)
    if not len(rows):
        return None
    used, index = np.unique(rows, return_inverse=True)
    keys = [store.keys[r] for r in used]
    buf = io.BytesIO()
    names = [f"{k[0]}{_SEP}{k[1]}" for k in keys if k is not None]
    np.savez_compressed(buf, keys=np.array(names, dtype=np.str_), index=index.astype(np.int32),
                        t=store.ring_t[rows, slots].astype(np.float64),
                        dt=store.ring_dt[rows, slots].astype(np.float32),
                        rate=store.ring_rate[rows, slots].astype(np.float32))
    return Segment(start, end, int(len(rows)), buf.getvalue())


def _read(blob: bytes) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        keys = [tuple(str(k).split(_SEP, 1)) for k in z["keys"]]
        return ([(k[0], k[1]) for k in keys], z["index"].astype(np.int64), z["t"], z["dt"], z["rate"])


def restore(store: CounterStore, blobs: list[bytes]) -> int:
    """Merge the segments ``blobs`` into ``store``; returns how many entries it now holds from them (a
    counter keeps its newest ``max_rates`` entries, so older ones beyond that are dropped)."""
    per_row: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for blob in blobs:
        keys, index, t, dt, rate = _read(blob)
        rows = np.array([store.row(d, p) for d, p in keys], dtype=np.int64)
        for i, r in enumerate(rows):
            pick = index == i
            per_row.setdefault(int(r), []).append((t[pick], dt[pick], rate[pick]))
    k = store.options.max_rates
    restored = 0
    for r, parts in per_row.items():
        have = np.isfinite(store.ring_t[r])
        t = np.concatenate([store.ring_t[r][have], *(p[0] for p in parts)])
        dt = np.concatenate([store.ring_dt[r][have], *(p[1] for p in parts)])
        rate = np.concatenate([store.ring_rate[r][have], *(p[2] for p in parts)])
        t, first = np.unique(t, return_index=True)  # sorted; an entry stored twice counts once
        dt, rate = dt[first][-k:], rate[first][-k:]
        t = t[-k:]
        store.ring_t[r] = -np.inf
        store.ring_t[r, :len(t)] = t
        store.ring_dt[r, :len(t)] = dt
        store.ring_rate[r, :len(t)] = rate
        store.head[r] = len(t) % k
        restored += max(0, len(t) - int(have.sum()))
        device = store.keys[r]
        if device is not None and len(t):
            seen = store.device_seen.get(device[0], float("-inf"))
            store.device_seen[device[0]] = max(seen, float(t[-1]))
    return restored
