"""Warm starts of the Clos LP: a fabric's last cold optimum as the start of a nearby LP's PDLP.

A failure reaction plans its revision again with a few leaf-spine links or spines
drained (:mod:`controller.operations.overlay`): the same pod model, less a few
columns and rows. PDLP started from the full fabric's optimum (its primal and
dual, mapped column by column and row by row by what each stands for; what the
new LP has and the old did not starts at 0) needs far fewer iterations than a
cold start. This module owns that memory: :func:`signature` names what an LP is
over (devices, arcs, capacities, pod-pair demands, least shares; drains apart,
which only take columns and rows away), :class:`Layout` what each column and row
of :meth:`solver.clos.relax.Relaxation.lp` stands for, and :data:`STARTS` keeps
the last few *cold* optima by signature (a warm-started optimum is never kept, so
a start is always a cold solve's answer, the same in every process that made it).

A start changes how many iterations PDLP takes, not where it stops: the answer
meets the same termination criteria (``ClosOptions.pdlp_tolerance``, relative
gap and residuals), so a warm and a cold solve agree within that tolerance.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

__all__ = ["STARTS", "Layout", "Starts", "signature"]

Key = tuple[object, ...]


def signature(names: tuple[str, ...], tail: np.ndarray, head: np.ndarray, cap: np.ndarray,
              d_qp: dict[tuple[int, int], float], share: np.ndarray | None) -> str:
    """What a Clos LP is over, drains apart (see the module docstring)."""
    h = hashlib.blake2b(digest_size=16)
    h.update("\0".join(names).encode())
    for arr in (tail, head, cap):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(np.array(list(d_qp), dtype=np.int64).tobytes())
    h.update(np.array(list(d_qp.values()), dtype=np.float64).tobytes())
    if share is not None:
        h.update(np.ascontiguousarray(share, dtype=np.float64).tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Layout:
    """What each column and row of one LP stands for (keys comparable across LPs of one signature)."""

    columns: list[Key]
    rows: list[Key]
    scale: float

    @staticmethod
    def _map(old: list[Key], new: list[Key]) -> tuple[np.ndarray, np.ndarray]:
        """The positions in ``new`` of the keys ``old`` has too, and theirs in ``old``."""
        pos = {k: i for i, k in enumerate(old)}
        at = np.fromiter((pos.get(k, -1) for k in new), dtype=np.int64, count=len(new))
        hit = np.flatnonzero(at >= 0)
        return hit, at[hit]


@dataclass(frozen=True)
class _Start:
    layout: Layout
    x: np.ndarray
    y: np.ndarray


class Starts:
    """The last few cold optima, by :func:`signature` (thread-safe)."""

    def __init__(self, size: int = 2):
        self._lock = threading.Lock()
        self._size = size
        self._by: OrderedDict[str, _Start] = OrderedDict()

    def put(self, sig: str, layout: Layout, x: np.ndarray, y: np.ndarray) -> None:
        with self._lock:
            self._by[sig] = _Start(layout, x, y)
            self._by.move_to_end(sig)
            while len(self._by) > self._size:
                self._by.popitem(last=False)

    def start(self, sig: str, layout: Layout) -> tuple[np.ndarray, np.ndarray] | None:
        """The kept optimum of ``sig`` laid out as ``layout`` (None when none is kept)."""
        with self._lock:
            got = self._by.get(sig)
        if got is None:
            return None
        x = np.zeros(len(layout.columns))
        new, old = Layout._map(got.layout.columns, layout.columns)
        x[new] = got.x[old] * (got.layout.scale / layout.scale)
        y = np.zeros(len(layout.rows))
        new, old = Layout._map(got.layout.rows, layout.rows)
        y[new] = got.y[old]
        return x, y

    def clear(self) -> None:
        with self._lock:
            self._by.clear()


#: this process's cold optima
STARTS = Starts()
