"""Best-response descent: the last step of rounding a small Clos's weights, one group at a time.

This module owns the finish of the load-aware rounding (:mod:`solver.clos.rounding`) on fabrics
with few groups per arc, where rounding errors do not average out. From the rounded weights it
visits every group in turn (a ToR group: a pod pair's split over planes; a leaf group: a leaf's
split over its plane's spines toward a pod) and replaces its weights by its *best response* to
every other group's current weights:

* for each total ``T`` from the group's budget down to ``totals - 1`` below it (2:1 is exact in
  99 units, not in 100), the weights of sum ``T`` that minimize the largest utilization of the
  group's arcs: every member first gets its least weight, then each further unit goes to the
  member whose arcs end least utilized with it (water-filling; optimal for a fixed total because
  a member's arcs are its own: a ToR group's plane ``l`` loads the ToR arcs and the leaf-spine arcs
  of plane ``l`` only, a leaf group's spine ``j`` its uplink to ``j`` and ``j``'s downlink only);
* of those totals, the one whose arcs' utilizations, sorted in decreasing order, are
  lexicographically least; the group changes only if that beats its current weights.

Loads are exact, not linearized: a ToR group's unit in plane ``l`` travels along the leaf groups'
current integer splits. Only the responding group's arcs change, and they get lexicographically
better, so each change lowers the fabric's sorted utilization vector lexicographically: the
maximum utilization never rises, and the descent ends, at weights no single group can improve,
or after ``rounds`` rounds (a bound on work, never on time: the same input gives the same weights
on any machine). Groups that share no arc (the rounds of pod pairs of the rounding's batches)
respond at once, vectorized.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solver.clos.batches import Batch, RoundingState, arc_resources, water_fill
from solver.clos.model import PodModel

__all__ = ["descend"]

_TOL = 1e-12  # utilizations closer than this are equal


def _sorted_utils(base: np.ndarray, idx: np.ndarray, coef: np.ndarray, gbps: np.ndarray, cap: np.ndarray,
                  real: np.ndarray) -> np.ndarray:
    """Per row, the utilizations of its arcs when its members carry ``gbps`` ([rows, n]) on top of
    ``base``, sorted in decreasing order (padding arcs last, as ``-inf``) and rounded to ``_TOL``."""
    util = (base[idx] + coef * gbps[:, :, None]) / cap[idx]
    util = np.where(real, np.round(util / _TOL) * _TOL, -np.inf).reshape(len(idx), -1)
    return -np.sort(-util, axis=1)


def _fill(base: np.ndarray, idx: np.ndarray, coef: np.ndarray, cap: np.ndarray, unit: np.ndarray,
          wmin: np.ndarray, can: np.ndarray, left: np.ndarray) -> np.ndarray:
    """Water-filling, one total per row: from ``wmin`` ([rows, n]), each of ``left[row]`` further
    units to the member whose arcs' largest utilization after it is least (members where ``can`` is
    false take none), a unit of a member adding ``coef * unit`` gbps to ``base`` on its arcs ``idx``."""
    c = cap[idx]
    return water_fill(base[idx] / c, coef * unit[:, None, None] / c, wmin, can, left)


def _respond(bt: Batch, mat: sp.csc_matrix, st: RoundingState, cap: np.ndarray, totals: int) -> int:
    """Every group of one batch (arc-disjoint) takes its best response against ``st.proj``, the exact
    loads, over the capacities ``cap``; ``mat`` gives a column's gbps on each arc per gbps of the column.
    Updates the batch's weights, ``st.x_round`` (the batch's columns) and ``st.proj``; returns how many
    groups changed."""
    assert bt.w is not None
    dummy = len(st.proj) - 1
    cols = np.where(bt.valid, bt.cols, -1)
    members = bt.valid.sum(axis=1)
    live = np.flatnonzero((bt.demand > 0) & (members >= 2))
    if not live.size:
        return 0
    cols, valid, w0, demand = cols[live], bt.valid[live], bt.w[live], bt.demand[live]
    members, top = members[live], np.maximum(bt.total[live], members[live] * st.wmin_any)
    idx, coef = arc_resources(mat, cols, dummy)
    cur = np.where(cols >= 0, st.x_round[np.maximum(cols, 0)], 0.0)
    base = st.proj.copy()
    np.subtract.at(base, idx, coef * cur[:, :, None])  # the groups share no arc: each sees the others' loads
    # candidate rows: each group's current weights, then its best weights for every total
    n_g = len(live)
    tot = top[None, :] - np.arange(totals)[:, None]  # [totals, groups]
    ok = tot >= np.maximum(members * st.wmin_any, 1)[None, :]
    rep = np.tile(np.arange(n_g), totals)  # row -> group, for rows of every total
    tot, ok = tot.ravel(), ok.ravel()
    unit = np.where(ok, demand[rep] / np.maximum(tot, 1), 0.0)
    wmin = np.where(valid, st.wmin_any, 0).astype(np.int64)[rep]
    left = np.where(ok, tot - wmin.sum(axis=1), 0)
    w = _fill(base, idx[rep], coef[rep], cap, unit, wmin, valid[rep], left)
    w = np.concatenate([w0, w])
    gbps = np.concatenate([cur, w[n_g:] * unit[:, None]])
    group = np.concatenate([np.arange(n_g), rep])
    usable = np.concatenate([np.ones(n_g, dtype=bool), ok])
    v = _sorted_utils(base, idx[group], coef[group], gbps, cap, (idx != dummy)[group] & valid[group][:, :, None])
    # per group the lexicographically least row; ties keep the earliest (the current weights first)
    order = np.lexsort((*v.T[::-1], ~usable, group))
    first = order[np.r_[True, group[order][1:] != group[order][:-1]]]
    changed = first >= n_g
    changed[changed] = (w[first[changed]] != w0[changed]).any(axis=1)
    if not changed.any():
        return 0
    gi, rows = np.flatnonzero(changed), first[changed]
    new = np.where(valid[gi], gbps[rows], 0.0)
    np.add.at(st.proj, idx[gi], coef[gi] * (new - cur[gi])[:, :, None])
    ok_cols = cols[gi] >= 0
    st.x_round[cols[gi][ok_cols]] = new[ok_cols]
    bt.w[live[gi]] = w[rows]
    return len(gi)


def _leaf_share(st: RoundingState, leaf_batches: list[Batch]) -> np.ndarray:
    """Per ``g`` column, its share of its leaf group's traffic under the current integer weights."""
    share = st.share.copy()
    g_pos = np.full(st.m.n_vars, -1, dtype=np.int64)
    g_pos[st.g_cols] = np.arange(len(st.g_cols))
    for bt in leaf_batches:
        assert bt.w is not None
        ok = bt.cols >= 0
        tot = np.maximum(bt.w.sum(axis=1, keepdims=True), 1)
        share[g_pos[bt.cols[ok]]] = (bt.w / tot)[ok]
    return share


def _merged(m: PodModel, batches: list[Batch]) -> list[tuple[Batch, list[Batch]]]:
    """Leaf batches of one round of pod pairs, over every plane, as one batch (planes share no arc):
    fewer, larger vectorized steps. Each merged batch comes with the batches it stacks, in order."""
    pos = {p: i for i, p in enumerate(m.pods)}
    by_round: dict[int, list[Batch]] = {}
    for bt in batches:
        q, p = bt.keys[0][:2]
        by_round.setdefault((pos[p] - pos[q]) % len(m.pods), []).append(bt)
    out = []
    for parts in by_round.values():
        n = max(bt.cols.shape[1] for bt in parts)

        def wide(a: np.ndarray, fill: int | bool, n: int = n) -> np.ndarray:
            return np.pad(a, ((0, 0), (0, n - a.shape[1])), constant_values=fill)

        assert all(bt.w is not None for bt in parts)
        big = Batch([k for bt in parts for k in bt.keys], [x for bt in parts for x in bt.members],
                    np.vstack([wide(bt.cols, -1) for bt in parts]), np.vstack([wide(bt.valid, False) for bt in parts]),
                    np.concatenate([bt.demand for bt in parts]), np.concatenate([bt.total for bt in parts]),
                    np.vstack([wide(bt.w, 0) for bt in parts if bt.w is not None]))
        out.append((big, parts))
    return out


def _unmerge(merged: list[tuple[Batch, list[Batch]]]) -> None:
    """The merged batches' weights back into the batches they stack."""
    for big, parts in merged:
        assert big.w is not None
        row = 0
        for bt in parts:
            bt.w = big.w[row:row + len(bt.keys), :bt.cols.shape[1]].copy()
            row += len(bt.keys)


def _round(st: RoundingState, tor_batches: list[Batch], leaf: list[Batch], cap: np.ndarray, totals: int) -> int:
    """One round: the best response of every ToR group, then of every leaf group; how many changed."""
    m = st.m
    share = _leaf_share(st, leaf)
    if len(st.g_cols):  # the variables and loads as the weights define them, free of accumulated rounding
        st.x_round[st.g_cols] = share * st.x_round[st.g_src]
    st.proj = np.asarray(st.lmat @ st.x_round)
    a_mat = st.a_matrix(share)
    changed = 0
    for bt in tor_batches:
        changed += _respond(bt, a_mat, st, cap, totals)
    if len(st.g_cols):  # the leaf groups carry their (new) plane traffic in their current splits
        st.x_round[st.g_cols] = share * st.x_round[st.g_src]
    for bt in leaf:
        bt.demand = np.array([st.x_round[m.a_col[k]] if k in m.a_col else 0.0 for k in bt.keys])
        changed += _respond(bt, st.lmat, st, cap, totals)
    return changed


def descend(st: RoundingState, tor_batches: list[Batch], leaf_batches: list[Batch], *,
            rounds: int, totals: int, kick: float = 0.0, patience: int = 0) -> int:
    """Best responses of every ToR group, then of every leaf group, round after round, until a round
    changes nothing or after ``rounds`` rounds; returns the number of changes.

    Parameters
    ----------
    st : the rounding's state, its ``x_round`` set by integer weights for every group.
    tor_batches, leaf_batches : the rounded groups (arc-disjoint within a batch), weights set.
    rounds : most rounds (each visits every group once).
    totals : each group may take its budget or one of the ``totals - 1`` totals below it.
    kick : with ``kick > 0``, a round that changes nothing (a local optimum) is not the end: the arcs
        at the maximum utilization get their capacity, as the responses see it, lowered by ``kick``
        (relative) once more, and the descent goes on (guided local search); the weights with the
        least maximum utilization seen are kept.
    patience : with ``kick > 0`` and ``patience > 0``, a descent whose maximum utilization has not
        fallen for ``patience`` rounds is kicked too, without waiting for its last (lexicographic)
        changes: those rarely lower the maximum, and the rounds they take are the budget's.

    Returns
    -------
    How many best responses changed a group's weights. ``st.x_round``, ``st.proj`` and the batches'
    weights are updated in place; the maximum utilization of ``st.x_round`` is never higher than before.
    """
    leaf = _merged(st.m, leaf_batches)
    leaf_b = [big for big, _parts in leaf]
    every = tor_batches + leaf_b
    cap = st.cap.copy()
    pen = np.zeros(len(cap))

    def mlu() -> float:
        return float((st.proj[:-1] / st.cap[:-1]).max(initial=0.0))

    def save() -> tuple[float, list[np.ndarray], np.ndarray]:
        return mlu(), [bt.w.copy() for bt in every if bt.w is not None], st.x_round.copy()

    best = save()
    changes = 0
    basin, stalled = np.inf, 0  # this descent's least maximum, and rounds since it fell
    for _ in range(rounds):
        changed = _round(st, tor_batches, leaf_b, cap, totals)
        changes += changed
        now = mlu()
        if now < best[0] - _TOL:
            best = save()
        stalled = 0 if now < basin - _TOL else stalled + 1
        basin = min(basin, now)
        if not changed or (kick > 0 and 0 < patience <= stalled):
            if kick <= 0:
                break
            basin, stalled = np.inf, 0
            pen[:-1] += (st.proj[:-1] / st.cap[:-1]) >= now - _TOL
            cap = st.cap * np.maximum(1.0 - kick * pen, 0.5)
    if mlu() > best[0] + _TOL or kick > 0:
        for bt, w in zip(every, best[1], strict=True):
            bt.w = w
        st.x_round = best[2]
        st.proj = np.asarray(st.lmat @ st.x_round)
    _unmerge(leaf)
    return changes
