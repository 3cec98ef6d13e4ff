"""The batches of groups that the rounding of a clean Clos's weights works on, and its shared state.

This module owns the data that the load-aware rounding (:mod:`solver.clos.rounding`) and the
best-response descent that finishes it on small fabrics (:mod:`solver.clos.descent`) share: a
:class:`Batch` of groups that share no arc (rows) with their members padded (columns), the
:class:`RoundingState` (the LP's variables, the rounded ones and the load they put on every arc),
and :func:`arc_resources`, the arcs and coefficients of a batch's columns in a load matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solver.clos.model import PodModel

__all__ = ["Batch", "RoundingState", "arc_resources", "pad", "water_fill"]

LEVEL_STEPS = 14  # bisection steps of the level below which every unit is taken at once
LEVEL_FROM = 4  # units to place per member past which most go by level
FEW = 4  # below that, each member is first offered this many units (its row again if one takes them all)


def arc_resources(mat: sp.csc_matrix, cols: np.ndarray, dummy: int) -> tuple[np.ndarray, np.ndarray]:
    """Arcs and coefficients of columns ``cols`` ([B, n], -1 for none) of ``mat``, padded to [B, n, R]."""
    c = np.maximum(cols, 0)
    start = mat.indptr[c]
    length = np.where(cols >= 0, mat.indptr[c + 1] - start, 0)
    r = max(int(length.max(initial=0)), 1)
    k = np.arange(r)
    inside = k[None, None, :] < length[:, :, None]
    pos = np.where(inside, start[:, :, None] + k[None, None, :], 0)
    idx = np.where(inside, mat.indices[pos] if mat.nnz else 0, dummy)
    coef = np.where(inside, mat.data[pos] if mat.nnz else 0.0, 0.0)
    return idx, coef


def water_fill(a: np.ndarray, slope: np.ndarray, w0: np.ndarray, can: np.ndarray, left: np.ndarray) -> np.ndarray:
    """Water-filling, one group per row: from ``w0`` ([rows, n]), each of ``left[row]`` further units
    to the member whose next unit costs least, a unit's cost being ``max_r(a + slope * w)`` over the
    member's arcs ``r`` ([rows, n, R]) at its weight ``w`` after it; ties go to the lower member, then
    to its lower weight; members where ``can`` is false take none (unless no member can).

    Costs grow with the weight, so the units taken are the ``left`` cheapest, each member's a prefix
    of its own. Every unit cheaper than a level ``lam`` below the ``left``-th cheapest is taken: for
    the level that ``LEVEL_STEPS`` bisection steps per row (on how many units cost at most ``lam``)
    leave, each member first takes in closed form its units up to ``lam``, less one (a margin for the
    division's rounding); the rest, one at a time among each member's next few units (as many as cost
    at most the bisection's upper level: a member that takes them all is rare, and its row is then
    filled again without the cap). The weights are those of placing every unit one at a time, in
    work that grows with the members, not with the budget."""
    w = w0.astype(np.int64)
    k_max = int(left.max(initial=0))
    if k_max <= LEVEL_FROM * w.shape[1]:  # few units to place: one at a time costs less than the levels
        return _capped(a, slope, w, can, left, FEW)
    real = slope > 1e-200  # below: as an arc the unit does not move (its inverse stays finite)
    inv = np.where(real, 1.0 / np.where(real, slope, 1.0), 0.0)
    off = np.where(real, a * inv, -np.inf)  # a unit arc: units up to floor(lam * inv - off)
    block = np.where(real, -np.inf, a).max(axis=2, initial=-np.inf)  # an arc no unit moves: lam below it, none
    wf = w.astype(np.float64)
    lim = np.where(can, left.astype(np.float64)[:, None], 0.0)

    def count(lam: np.ndarray) -> np.ndarray:
        k = np.floor(lam[:, None, None] * inv - off).min(axis=2, initial=np.inf) - wf
        return np.where(lam[:, None] >= block, np.clip(k, 0.0, lim), 0.0)

    top = np.where(can[:, :, None], a + slope * (wf + lim)[:, :, None], -np.inf)
    hi = np.maximum(top.max(axis=(1, 2), initial=0.0), 0.0)
    lo = np.minimum(np.where(can[:, :, None], a + slope * wf[:, :, None], np.inf).min(axis=(1, 2), initial=0.0),
                    0.0) - 1.0
    for _ in range(LEVEL_STEPS):
        mid = 0.5 * (lo + hi)
        under = count(mid).sum(axis=1) <= left
        lo = np.where(under, mid, lo)
        hi = np.where(under, hi, mid)
    pre = np.maximum(count(lo) - 1.0, 0.0).astype(np.int64)
    w = w + pre
    left = left - pre.sum(axis=1)
    return _capped(a, slope, w, can, left, int((count(hi) - pre).max(initial=0.0)) + 2)


def _capped(a: np.ndarray, slope: np.ndarray, w: np.ndarray, can: np.ndarray, left: np.ndarray,
            room: int) -> np.ndarray:
    """:func:`water_fill` one unit at a time among each member's next ``room`` units; a row where a
    member took all of them (so the cap may have bound) again, offered every unit it may take."""
    out, full = _one_at_a_time(a, slope, w, can, left, room)
    if full.any():
        rows = np.flatnonzero(full)
        out[rows] = _one_at_a_time(a[rows], slope[rows], w[rows], can[rows], left[rows],
                                   int(left[rows].max(initial=0)))[0]
    return out


def _one_at_a_time(a: np.ndarray, slope: np.ndarray, w: np.ndarray, can: np.ndarray, left: np.ndarray,
                   k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`water_fill` one unit at a time among each member's next ``k_max`` units; also, per row,
    whether a member took all of them (so the cap may have bound: not so when ``k_max >= left``)."""
    b, n = w.shape
    k_max = min(k_max, int(left.max(initial=0)))
    if k_max <= 0:
        return w.copy(), np.zeros(b, dtype=bool)
    ks = np.arange(1, k_max + 1, dtype=np.float64)
    wk = w[:, :, None] + ks[None, None, :]  # [rows, n, K]: the weight after each next unit
    cost = (a[:, :, None, :] + slope[:, :, None, :] * wk[:, :, :, None]).max(axis=3)
    cost = np.where(can[:, :, None], cost, np.inf).reshape(b, n * k_max)
    order = np.argsort(cost, axis=1, kind="stable")
    take = np.arange(n * k_max)[None, :] < left[:, None]
    member = order // k_max
    add = np.zeros((b, n), dtype=np.int64)
    rows = np.broadcast_to(np.arange(b)[:, None], member.shape)
    np.add.at(add, (rows[take], member[take]), 1)
    capped = (add >= k_max).any(axis=1) & (left > k_max)
    return w + add, capped


def pad(rows: list[list[int]], fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of different lengths as one array padded with ``fill``, and the mask of real entries."""
    n = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), n), fill, dtype=np.int64)
    valid = np.zeros((len(rows), n), dtype=bool)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
        valid[i, :len(r)] = True
    return out, valid


@dataclass
class Batch:
    """Arc-disjoint groups rounded in one vectorized step (rows), members padded (columns)."""

    keys: list[tuple[int, ...]]
    members: list[list[int]]
    cols: np.ndarray
    valid: np.ndarray
    demand: np.ndarray
    total: np.ndarray
    w: np.ndarray | None = None
    arcs: tuple[sp.csc_matrix, np.ndarray, np.ndarray] | None = None  # a load matrix, its arcs, coefficients
    err: tuple[np.ndarray, np.ndarray] | None = None  # (arcs, gbps) this batch's rounding added to proj


@dataclass
class RoundingState:
    """What the stages of :func:`~solver.clos.rounding.carry_round` share: the LP's variables, the rounded ones, the
    projected load per arc (the last entry: a padding arc nothing overloads) and the LP's leaf split."""

    m: PodModel
    x: np.ndarray
    x_round: np.ndarray
    wmin_any: int
    cap: np.ndarray
    lmat: sp.csc_matrix  # the load matrix with the padding arc's row
    proj: np.ndarray
    share: np.ndarray  # per g column: its share of its a column in the LP
    g_cols: np.ndarray
    g_src: np.ndarray  # per g column: its a column

    def a_matrix(self, share: np.ndarray) -> sp.csc_matrix:
        """Loads per unit of ``a`` when every leaf splits by ``share`` (per g column)."""
        n = self.m.n_vars
        return (self.lmat + self.lmat @ sp.csr_matrix((share, (self.g_cols, self.g_src)), shape=(n, n))).tocsc()
