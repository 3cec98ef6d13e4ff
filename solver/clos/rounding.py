"""Load-aware rounding of a clean Clos's LP splits into integer weights.

This module owns the step from the pod model's fractional splits (the LP's
``a`` and ``g`` of :mod:`solver.clos.model`) to integer weights. Rounding each group
on its own (the WCMP paper's per-group optimum, :mod:`solver.core.weights`) is
blind to links: at the LP optimum nearly every leaf-spine arc is at the
maximum utilization, and a group's rounding error lands on the same arcs as
the errors of every other group through them (identical splits round alike,
so the errors add up instead of cancelling). Here the groups are rounded in
sequence with *error feedback*: each arc keeps its projected load (the LP's,
plus the rounding errors of the groups already rounded), and a group's
weights are its floors (at least 1, or 0 for a member the LP gives nothing
under the ``fib`` realization) plus its remaining units given, one at a time,
to the member whose arcs end least utilized with it (water-filling on the
projected utilization). Later groups so compensate earlier ones' errors.

Order and batching: ToR groups (a pod pair's split over planes) come first,
against every arc a unit of the pair's traffic in a plane crosses (the
sending ToRs' uplinks, the receiving ToRs' downlinks, and the leaf-spine arcs
in proportion to the LP's leaf split, which the leaf groups then realize);
then leaf groups (a leaf's split over its plane's spines toward a destination
pod) against their uplink and the spine's downlink. Groups are rounded in
rounds of pod pairs ``(q, q + r mod P)``: within a round no two groups share
an arc, so a round is one vectorized step. A few passes re-round each group
knowing every other group's error.

A group's total is the device's budget (a ToR pod's least budget, a leaf's
own): the finest granularity the hardware allows. On small fabrics (few
groups per arc, so little to average) the rounding is then finished by a
best-response descent (:mod:`solver.clos.descent`, bounded by rounds), each
group free to take a total a little under its budget (2:1 is exact in 99
units, not in 100). On request (``milp_nodes`` > 0), :func:`integral_plane_split`
solves the LP with whole ToR weight units (SCIP, bounded by nodes) for a
second rounding to compete. Weights are finally divided by their common divisor.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solver.clos.batches import Batch, RoundingState, arc_resources, pad, water_fill
from solver.clos.descent import descend
from solver.clos.model import PodModel
from solver.core.lp import solve_milp
from solver.core.options import ClosOptions

__all__ = ["carry_round", "integral_plane_split"]

_Members = tuple[tuple[int, int], ...]
_TIE = 1e-9  # tie-break toward the member whose own relative excess is least


def _fill(t: np.ndarray, u: np.ndarray, total: np.ndarray, wmin: np.ndarray, valid: np.ndarray,
          idx: np.ndarray, coef: np.ndarray, proj: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Integer weights for a batch of groups (rows) with padded members (columns).

    ``t`` target gbps per member, ``u`` gbps per weight unit, ``total`` units per
    group, ``wmin`` least weight per member; a unit on a member adds ``coef * u``
    to the projected load ``proj`` of each arc ``idx`` ([B, n, R]).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        base = np.where(valid, np.maximum(wmin, np.floor(t / u[:, None] + 1e-9)), 0).astype(np.int64)
    over = base.sum(axis=1) > total
    base[over] = np.where(valid[over], wmin[over], 0)
    left = total - base.sum(axis=1)
    can = valid & ((wmin > 0) | (t > 0))  # a member the fib realization drops gets no units
    # a unit's cost, max_r (proj + coef * (w u - t)) / cap + _TIE * (w u - t) / t at the member's
    # weight w after it (_TIE instead where t = 0), is linear in w on each arc
    with np.errstate(divide="ignore", invalid="ignore"):
        tie_slope = np.where(t > 0, _TIE * u[:, None] / t, 0.0)
    tie_0 = np.where(t > 0, -_TIE, _TIE)
    c = cap[idx]
    return water_fill((proj[idx] - coef * t[:, :, None]) / c + tie_0[:, :, None],
                      coef * u[:, None, None] / c + tie_slope[:, :, None], base, can, left)


def _apply(bt: Batch, w: np.ndarray, u: np.ndarray, t: np.ndarray, idx: np.ndarray, coef: np.ndarray,
           proj: np.ndarray, x_round: np.ndarray) -> None:
    """Make ``w`` the batch's weights: its variables in ``x_round``, its errors in ``proj``."""
    if bt.err is not None:
        np.subtract.at(proj, *bt.err)
    carries = bt.demand > 0
    got = np.where(bt.valid & carries[:, None], w * u[:, None], 0.0)
    ok = bt.cols >= 0
    x_round[bt.cols[ok]] = got[ok]
    delta = np.where(ok, got - t, 0.0)
    bt.err = (idx.ravel(), (coef * delta[:, :, None]).ravel())
    np.add.at(proj, *bt.err)
    bt.w = w


def _setup(bt: Batch, x: np.ndarray, mat: sp.csc_matrix, dummy: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Targets, unit, total, arcs and coefficients of a batch."""
    t = np.where(bt.cols >= 0, x[np.maximum(bt.cols, 0)], 0.0) * bt.valid
    total = np.maximum(bt.total, bt.valid.sum(axis=1))
    u = np.where(bt.demand > 0, bt.demand / total, 1.0)
    if bt.arcs is None or bt.arcs[0] is not mat:  # the same matrix on every pass: its arcs once
        bt.arcs = (mat, *arc_resources(mat, np.where(bt.valid, bt.cols, -1), dummy))
    return t, u, total, bt.arcs[1], bt.arcs[2]


def _round_batch(bt: Batch, x: np.ndarray, wmin_any: int, mat: sp.csc_matrix, proj: np.ndarray,
                 cap: np.ndarray, x_round: np.ndarray) -> None:
    """(Re-)round one batch against ``proj``; updates ``proj``, ``x_round`` and the batch in place."""
    if bt.err is not None:  # a later pass: take this batch's own errors out first
        np.subtract.at(proj, *bt.err)
        bt.err = None
    t, u, total, idx, coef = _setup(bt, x, mat, len(proj) - 1)
    w = _fill(t, u, total, np.where(bt.valid, wmin_any, 0), bt.valid, idx, coef, proj, cap)
    idle = ~(bt.demand > 0)  # nothing flows: equal weights
    w[idle] = bt.valid[idle].astype(np.int64)
    _apply(bt, w, u, t, idx, coef, proj, x_round)


def integral_plane_split(m: PodModel, x: np.ndarray, min_share: np.ndarray | None, tor_budget: dict[int, int],
                         hint_w: dict[tuple[int, int], _Members] | None, nodes: int) -> np.ndarray | None:
    """The pod model's LP with every ToR split restricted to whole weight units (``a = D * k / W``,
    ``k`` integer, ``W`` the pod's budget) and leaf splits left fractional: a mixed-integer program
    small fabrics can afford (the ToR layer's few groups cannot average rounding errors out). Returns
    the variables (``a`` then ``g``, gbps) of the best solution found within ``nodes``
    branch-and-bound nodes, or ``None``."""
    c, a, row_lb, row_ub, col_lb, col_ub = m.lp(min_share)
    n_lp = a.shape[1]
    keys = [k for k in m.a_col if k[:2] in m.d_qp]
    n_k = len(keys)
    if n_k == 0:
        return None
    s = m.scale
    unit = np.array([m.d_qp[k[:2]] / tor_budget[k[0]] / s for k in keys])
    link = sp.hstack([sp.csr_matrix((np.ones(n_k), (np.arange(n_k), [m.a_col[k] for k in keys])), shape=(n_k, n_lp)),
                      sp.csr_matrix(sp.diags(-unit))]).tocsr()
    big = sp.vstack([sp.hstack([a, sp.csr_matrix((a.shape[0], n_k))]), link]).tocsr()
    k_lb = np.array([1.0 if len(m.allowed_planes[k[:2]]) > 1 and col_lb[m.a_col[k]] > 0 else 0.0 for k in keys])
    hint = None
    if hint_w is not None:
        w_of = {(q, p, pl): w for (q, p), mem in hint_w.items() for pl, w in mem}
        kv = np.array([float(w_of.get(k, 0)) for k in keys])
        hint = np.concatenate([np.full(n_lp, np.nan), kv])
    res = solve_milp(np.append(c, np.zeros(n_k)), big, np.append(row_lb, np.zeros(n_k)),
                     np.append(row_ub, np.zeros(n_k)), np.append(col_lb, k_lb), np.append(col_ub, np.full(n_k, np.inf)),
                     np.append(np.zeros(n_lp, dtype=bool), np.ones(n_k, dtype=bool)), hint=hint, nodes=nodes)
    if res is None:
        return None
    xv = m.lp_values(res.x[:n_lp])
    return np.asarray(np.maximum(xv[:-1], 0.0) * s)


def _start(m: PodModel, x: np.ndarray, fib: bool) -> RoundingState:
    x = np.asarray(x, dtype=np.float64)
    n_a = len(m.a_col)
    lmat = sp.vstack([m.load_matrix, sp.csr_matrix((1, m.n_vars))]).tocsc()
    g_cols = np.arange(n_a, n_a + len(m.g_col), dtype=np.int64)
    g_src = m.g_owner()
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(x[g_src] > 0, x[g_cols] / x[np.maximum(g_src, 0)], 0.0) if len(m.g_col) else np.zeros(0)
    return RoundingState(m=m, x=x, x_round=np.zeros_like(x), wmin_any=0 if fib else 1,
                     cap=np.append(m.fab.arc_cap, np.inf), lmat=lmat, proj=np.asarray(lmat @ x), share=share,
                     g_cols=g_cols, g_src=g_src)


def _tor_batches(m: PodModel, tor_budget: dict[int, int]) -> list[Batch]:
    """ToR groups (a pod pair's split over planes) in rounds of pod pairs ``(q, q + r mod P)``."""
    pods = m.pods
    n_p = len(pods)
    batches: list[Batch] = []
    for r in range(n_p):
        keys = [(pods[i], pods[(i + r) % n_p]) for i in range(n_p)]
        keys = [k for k in keys if m.allowed_planes.get(k)]
        if not keys:
            continue
        members = [m.allowed_planes[k] for k in keys]
        cols, valid = pad([[m.a_col.get((q, p, pl), -1) for pl in ms] for (q, p), ms in zip(keys, members,
                                                                                              strict=True)], -1)
        batches.append(Batch(list(keys), members, cols, valid, np.array([m.d_qp.get(k, 0.0) for k in keys]),
                              np.array([tor_budget[k[0]] for k in keys], dtype=np.int64)))
    return batches


def _leaf_batches(m: PodModel, leaf_budget: dict[int, int], x_round: np.ndarray) -> list[Batch]:
    """Leaf groups (a leaf's split over its plane's spines toward a pod) in rounds of pod pairs, every
    plane in one batch (planes share no arc: a round is one vectorized step however many planes);
    each carries the rounded plane traffic of its pair."""
    pods = m.pods
    n_p = len(pods)
    planes = sorted({pl for (_q, pl) in m.leaf_at})
    first = m.g_col.first
    batches: list[Batch] = []
    for r in range(1, n_p):
        keys3 = [(pods[i], pods[(i + r) % n_p], pl) for pl in planes for i in range(n_p)]
        keys3 = [k for k in keys3 if k in m.allowed_spines]
        if not keys3:
            continue
        members = [m.allowed_spines[k] for k in keys3]
        _, valid = pad(members, -1)
        a = np.array([m.a_col.get(k, -1) for k in keys3], dtype=np.int64)  # a group's g columns follow one
        cols = np.where(valid & (a >= 0)[:, None],  # another from its first, in the order of its members
                        first[np.maximum(a, 0)][:, None] + np.arange(valid.shape[1])[None, :], -1)
        demand = np.array([x_round[m.a_col[k]] if k in m.a_col else 0.0 for k in keys3])
        total = np.array([leaf_budget[m.leaf_at[(k[0], k[2])]] for k in keys3], dtype=np.int64)
        batches.append(Batch(list(keys3), members, cols, valid, demand, total))
    return batches


def _leaf_targets(st: RoundingState) -> np.ndarray:
    """The leaf stage's targets: the LP's leaf split of the rounded plane traffic."""
    n_a = len(st.m.a_col)
    target = st.x.copy()
    target[:n_a] = st.x_round[:n_a]
    if len(st.g_cols):
        target[st.g_cols] = st.share * st.x_round[st.g_src]
    return target


def _round_leaves(st: RoundingState, batches: list[Batch], target: np.ndarray, passes: int) -> None:
    """Passes over the leaf groups; later passes only while they lower the projected maximum."""
    worst = np.inf
    for _ in range(passes):
        for bt in batches:
            _round_batch(bt, target, st.wmin_any, st.lmat, st.proj, st.cap, st.x_round)
        now = float((st.proj[:-1] / st.cap[:-1]).max(initial=0.0))
        if now >= worst - 1e-12:
            break
        worst = now


def _lowest_rows(w: np.ndarray) -> list[list[int]]:
    """Each row's weights divided by their greatest common divisor (a row of zeros stays one)."""
    d = np.maximum(np.gcd.reduce(w, axis=1), 1)
    return (w // d[:, None]).tolist()  # type: ignore[no-any-return]


def _weights_of(m: PodModel, tor_batches: list[Batch], leaf_batches: list[Batch]
                ) -> tuple[dict[tuple[int, int], _Members], dict[tuple[int, int], _Members]]:
    """The batches' weights as ToR and leaf groups, zero weights left out, in lowest terms."""
    tor_w: dict[tuple[int, int], _Members] = {}
    for bt in tor_batches:
        assert bt.w is not None
        for k, ms, row in zip(bt.keys, bt.members, _lowest_rows(bt.w), strict=True):
            tor_w[(k[0], k[1])] = tuple((pl, v) for pl, v in zip(ms, row[:len(ms)], strict=True) if v > 0)
    leaf_w: dict[tuple[int, int], _Members] = {}
    leaf_at = m.leaf_at
    for bt in leaf_batches:
        assert bt.w is not None
        for k, ms, row in zip(bt.keys, bt.members, _lowest_rows(bt.w), strict=True):
            leaf_w[(leaf_at[(k[0], k[2])], k[1])] = tuple((a, v) for a, v in zip(ms, row[:len(ms)], strict=True)
                                                          if v > 0)
    return tor_w, leaf_w


def carry_round(m: PodModel, x: np.ndarray, tor_budget: dict[int, int], leaf_budget: dict[int, int], fib: bool,
                *, options: ClosOptions = ClosOptions()
                ) -> tuple[dict[tuple[int, int], _Members], dict[tuple[int, int], _Members], np.ndarray]:
    """Integer weights for every ToR group ``(q, p)`` and leaf group ``(leaf, p)`` of ``m``.

    Parameters
    ----------
    m : the pod model.
    x : the LP's variables (``a`` then ``g``, in gbps).
    tor_budget : weight budget per source pod (its ToRs' least ``max_ecmp_entries``).
    leaf_budget : weight budget per leaf.
    fib : members with no LP share may get weight 0 (dropped); otherwise every member keeps >= 1.
    options : ``rounding_passes`` (most rounds over every group; after the first, each group is
        re-rounded knowing every other's error, for as long as a round lowers the projected maximum
        utilization) and the ``descent_*`` knobs of the best-response descent that finishes the
        rounding on small fabrics (:func:`solver.clos.descent.descend`).

    Returns
    -------
    ToR groups ``(q, p) -> ((plane, weight), ...)``, leaf groups ``(leaf, p) -> ((spine arc, weight), ...)``
    (zero weights left out) and the variables the rounded weights imply.
    """
    passes = options.rounding_passes
    st = _start(m, x, fib)
    # ToR groups: a unit in plane l moves traffic on the a column's arcs and, through the LP's
    # leaf split, on the leaf-spine arcs of its g columns
    a_mat = st.a_matrix(st.share)
    tor_batches = _tor_batches(m, tor_budget)
    for _ in range(passes):
        for bt in tor_batches:
            _round_batch(bt, st.x, st.wmin_any, a_mat, st.proj, st.cap, st.x_round)
    target = _leaf_targets(st)
    leaf_batches = _leaf_batches(m, leaf_budget, st.x_round)
    _round_leaves(st, leaf_batches, target, passes)
    if len(m.g_col) <= options.descent_max_weights and options.descent_rounds > 0:
        descend(st, tor_batches, leaf_batches, rounds=options.descent_rounds, totals=options.descent_totals,
                kick=options.descent_kick, patience=options.descent_patience)
    return (*_weights_of(m, tor_batches, leaf_batches), st.x_round)
