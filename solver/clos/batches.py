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
    member's arcs ``r`` ([rows, n, R]) at its weight ``w`` after it; ties go to the lower member;
    members where ``can`` is false take none (unless no member can: then the first takes them).
    Compiled (:func:`solver.core.kernels.water_fill_units`): a row costs ``left * (n + R)``."""
    from solver.core.kernels import water_fill_units  # lazy: numba loads at the first solve, not with the package

    return water_fill_units(np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(slope, dtype=np.float64),
                            np.ascontiguousarray(w0, dtype=np.int64), np.ascontiguousarray(can, dtype=np.bool_),
                            np.ascontiguousarray(left, dtype=np.int64))


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
