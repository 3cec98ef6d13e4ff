"""Load-aware repair of rounded weights in a clean Clos.

This module owns one small step after weight reduction. Rounding each group
to the WCMP paper's optimum (least worst oversubscription) is blind to which
links are hot; the errors of many groups can add up on one link. The repair
looks at the hottest arc and, among the groups that send over it (a ToR's
split over planes toward a pod, a leaf's split over spines toward a pod),
moves one weight unit to another member of the same group when that lowers
the largest utilization among every arc the move changes below the current
maximum. Sums stay equal (the budget holds), every weight stays >= 1, and each
move strictly lowers the maximum or the number of arcs at it, so it stops.
Loads come from the pod model's linear load matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solver.clos.model import PodModel

__all__ = ["repair_weights"]

_Members = tuple[tuple[int, int], ...]


@dataclass
class _Group:
    members: list[int]  # plane (ToR group) or spine arc (leaf group)
    w: list[int]
    cols: list[int]  # a column per plane, or g column per spine
    a_col: int | None  # leaf group: the a column it splits
    leaf_groups: list[_Group | None]  # ToR group: the leaf group of each plane (None within a pod)


def _delta(m: PodModel, g: _Group, i: int, j: int, x: np.ndarray, demand: float) -> dict[int, float]:
    """Variable changes of moving one unit of ``g`` from member ``i`` to member ``j``."""
    out: dict[int, float] = {}
    if g.a_col is not None:  # leaf group
        unit = x[g.a_col] / sum(g.w)
        out[g.cols[i]] = -unit
        out[g.cols[j]] = unit
        return out
    unit = demand / sum(g.w)
    for k, sign in ((i, -1.0), (j, 1.0)):
        out[g.cols[k]] = out.get(g.cols[k], 0.0) + sign * unit
        lg = g.leaf_groups[k]
        if lg is not None:
            tot = sum(lg.w)
            for c, wl in zip(lg.cols, lg.w, strict=True):
                out[c] = out.get(c, 0.0) + sign * unit * wl / tot
    return out


_Move = tuple[float, _Group, int, int, np.ndarray, np.ndarray]  # (MLU after, group, from, to, columns, changes)


class _Owners:
    """Which group and member owns a column (with the pair's demand for a ToR group), the groups
    built the first time a column of theirs is asked for: a repair prices only the groups on a
    few hot arcs, and Clos L has 32,000 leaf groups."""

    def __init__(self, m: PodModel, tor_w: dict[tuple[int, int], _Members],
                 leaf_w: dict[tuple[int, int], _Members]) -> None:
        self.m, self.tor_w, self.leaf_w = m, tor_w, leaf_w
        self.a_keys = list(m.a_col)
        self.g_a = m.g_owner()
        self.tor: dict[tuple[int, int], _Group | None] = {}
        self.leaf: dict[tuple[int, int], _Group | None] = {}

    def leaf_group(self, leaf: int, p: int) -> _Group | None:
        if (leaf, p) not in self.leaf:
            m, members, g = self.m, self.leaf_w.get((leaf, p)), None
            q, pl = m.leaf_pp[leaf]
            ac = m.a_col.get((q, p, pl))
            if members is not None and ac is not None:
                arcs = [a for a, _w in members]
                g = _Group(arcs, [w for _a, w in members], [m.g_col[(q, p, pl, a)] for a in arcs], ac, [])
            self.leaf[(leaf, p)] = g
        return self.leaf[(leaf, p)]

    def tor_group(self, q: int, p: int) -> _Group | None:
        if (q, p) not in self.tor:
            m, members, g = self.m, self.tor_w.get((q, p)), None
            if members is not None and (q, p) in m.d_qp and all((q, p, pl) in m.a_col for pl, _w in members):
                planes = [pl for pl, _w in members]
                lgs = [self.leaf_group(m.leaf_at[(q, pl)], p) if q != p else None for pl in planes]
                g = _Group(planes, [w for _pl, w in members], [m.a_col[(q, p, pl)] for pl in planes], None, lgs)
            self.tor[(q, p)] = g
        return self.tor[(q, p)]

    def get(self, c: int) -> tuple[_Group, int, float] | None:
        n_a = len(self.a_keys)
        if c < n_a:
            q, p, _pl = self.a_keys[c]
            g, demand = self.tor_group(q, p), self.m.d_qp.get((q, p), 0.0)
        else:
            q, p, pl = self.a_keys[int(self.g_a[c - n_a])]
            g, demand = self.leaf_group(self.m.leaf_at[(q, pl)], p), 0.0
        if g is None or c not in g.cols:
            return None
        return g, g.cols.index(c), demand


def _column_change(lcsc: sp.csc_matrix, cols: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``lcsc[:, cols] @ vals`` touches (ascending) and its value there, read straight from the CSC
    arrays (scipy's slicing costs more than the product: this runs once per priced move). Summed column by
    column in ``cols``'s order, as scipy's product does, so the numbers are the same."""
    starts, ends = lcsc.indptr[cols], lcsc.indptr[cols + 1]
    lens = ends - starts
    at = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
    touched, inverse = np.unique(lcsc.indices[at], return_inverse=True)
    return touched, np.bincount(inverse, weights=lcsc.data[at] * np.repeat(vals, lens), minlength=len(touched))


def _best_move(m: PodModel, row: np.ndarray, col_owner: _Owners, x: np.ndarray, loads: np.ndarray,
               lcsc: sp.csc_matrix, mlu: float) -> tuple[_Move | None, int]:
    """The unit move, among the groups with a column on the hot arc's row ``row``, that lowers the
    largest utilization of the arcs it changes the most below ``mlu``; and how many were priced."""
    cap = m.fab.arc_cap
    best: _Move | None = None
    tries = 0
    for c in row:
        owner = col_owner.get(int(c))
        if owner is None:
            continue
        g, i, demand = owner
        if g.w[i] < 2:
            continue
        for j in range(len(g.w)):
            if j == i:
                continue
            tries += 1
            dx = _delta(m, g, i, j, x, demand)
            cols = np.fromiter(dx, dtype=np.int64)
            vals = np.fromiter(dx.values(), dtype=np.float64)
            touched, dl = _column_change(lcsc, cols, vals)
            after = float(((loads[touched] + dl) / cap[touched]).max()) if touched.size else mlu
            if after < mlu - 1e-12 and (best is None or after < best[0]):
                best = (after, g, i, j, cols, vals)
    return best, tries


def repair_weights(m: PodModel, tor_w: dict[tuple[int, int], _Members], leaf_w: dict[tuple[int, int], _Members],
                   x: np.ndarray, *, max_moves: int = 2000, max_tries: int = 20_000
                   ) -> tuple[dict[tuple[int, int], _Members], dict[tuple[int, int], _Members], np.ndarray, int]:
    """Move weight units inside ToR and leaf groups while that lowers the MLU.

    Stops at a local optimum, after ``max_moves`` moves or once ``max_tries`` candidate moves
    have been priced (a bound on work, not on time: the same input gives the same weights on any
    machine, however busy). Returns the updated ToR groups, leaf groups, variables and the number
    of moves.
    """
    cap = m.fab.arc_cap
    lcsr = m.load_matrix.tocsr()
    lcsc = m.load_matrix.tocsc()
    col_owner = _Owners(m, tor_w, leaf_w)
    loads = m.loads(x)
    moves = 0
    if loads.size == 0:  # no links carry anything to improve (a fabric without links)
        max_moves = 0
    tries = 0
    while moves < max_moves and tries < max_tries:
        util = loads / cap
        hot = int(np.argmax(util))
        row = lcsr.indices[lcsr.indptr[hot]:lcsr.indptr[hot + 1]]
        best, priced = _best_move(m, row, col_owner, x, loads, lcsc, float(util[hot]))
        tries += priced
        if best is None:
            break  # no single unit move lowers the maximum: a local optimum
        _after, g, i, j, cols, vals = best
        g.w[i] -= 1
        g.w[j] += 1
        x[cols] += vals
        loads = loads + lcsc[:, cols] @ vals
        moves += 1
    tor_out = dict(tor_w)
    for key, tg in col_owner.tor.items():
        if tg is not None:
            tor_out[key] = tuple(zip(tg.members, tg.w, strict=True))
    leaf_out = dict(leaf_w)
    for key, lg in col_owner.leaf.items():
        if lg is not None:
            leaf_out[key] = tuple(zip(lg.members, lg.w, strict=True))
    return tor_out, leaf_out, x, moves
