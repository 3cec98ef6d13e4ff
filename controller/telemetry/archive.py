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

__all__ = ["STORED", "Segment", "restore", "segment"]

_SEP = "\t"  # between a counter's device and its path (neither holds a tab)


@dataclass(frozen=True, slots=True)
class Segment:
    """A packed span of rates: ``blob`` holds ``entries`` interval rates ending in ``(start, end]``."""

    start: float
    end: float
    entries: int
    blob: bytes


#: the counters stored: the octets every view reads (links, demand, fidelity, patterns, jobs, drains); packet and
#: discard counters are a third of a switch's and no view reads them
STORED = ("/in-octets", "/out-octets", "/octets-forwarded")


def segment(store: CounterStore, start: float, end: float) -> Segment | None:
    """The entries of every stored counter's ring (:data:`STORED`) that end in ``(start, end]`` (None when
    there are none)."""
    live = np.array([k is not None and k[1].endswith(STORED) for k in store.keys], dtype=bool)
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
    """Merge the segments ``blobs`` into ``store``; returns how many entries it holds from them now (a
    counter keeps its newest ``max_rates`` entries, so older ones beyond that are dropped, and an entry it
    holds already counts once)."""
    if not blobs:
        return 0
    parts = []
    for blob in blobs:
        keys, index, t, dt, rate = _read(blob)
        rows = np.array([store.row(d, p) for d, p in keys], dtype=np.int64)
        parts.append((rows[index], t, dt, rate))
    new_rows = np.concatenate([p[0] for p in parts])
    touched = np.unique(new_rows)
    # what the touched counters hold already, beside what the segments bring (marked to count it apart)
    have_r, have_s = np.nonzero(np.isfinite(store.ring_t[touched]))
    old_rows = touched[have_r]
    r = np.concatenate([old_rows, new_rows])
    t = np.concatenate([store.ring_t[old_rows, have_s], *(p[1] for p in parts)])
    dt = np.concatenate([store.ring_dt[old_rows, have_s], *(p[2] for p in parts)])
    rate = np.concatenate([store.ring_rate[old_rows, have_s], *(p[3] for p in parts)])
    new = np.concatenate([np.zeros(len(old_rows), dtype=bool), np.ones(len(new_rows), dtype=bool)])
    order = np.lexsort((new, t, r))  # by counter, then time; a held entry before a stored twin
    r, t, dt, rate, new = r[order], t[order], dt[order], rate[order], new[order]
    first = np.ones(len(r), dtype=bool)
    first[1:] = (r[1:] != r[:-1]) | (t[1:] != t[:-1])  # an entry held or stored twice counts once
    r, t, dt, rate, new = r[first], t[first], dt[first], rate[first], new[first]
    k = store.options.max_rates
    uniq, start, count = np.unique(r, return_index=True, return_counts=True)
    pos = np.arange(len(r)) - np.repeat(start, count)  # the entry's place among its counter's, oldest first
    kept = np.repeat(count, count) - pos <= k  # each counter's newest k
    slot = pos - np.repeat(np.maximum(count - k, 0), count)
    store.ring_t[touched] = -np.inf
    store.ring_t[r[kept], slot[kept]] = t[kept]
    store.ring_dt[r[kept], slot[kept]] = dt[kept]
    store.ring_rate[r[kept], slot[kept]] = rate[kept]
    store.head[uniq] = np.minimum(count, k) % k
    for row, last in zip(uniq, t[np.cumsum(count) - 1], strict=True):  # a device is as recent as its newest rate
        key = store.keys[int(row)]
        if key is not None:
            store.device_seen[key[0]] = max(store.device_seen.get(key[0], float("-inf")), float(last))
    return int((kept & new).sum())
