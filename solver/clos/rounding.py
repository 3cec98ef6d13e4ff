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
groups per arc, so little to average) each stage is then finished by an
integer program (SCIP, time-bounded, started from the rounding): ``min U``
over every group's weights at once, a group free to take a total a little
under its budget (2:1 is exact in 99 units, not in 100); the ToR and leaf
stages alternate once. Weights are finally divided by their common divisor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from solver.clos.model import PodModel
from solver.core.lp import solve_milp
from solver.core.options import ClosOptions

__all__ = ["carry_round", "integral_plane_split"]

_Members = tuple[tuple[int, int], ...]
_TIE = 1e-9  # tie-break toward the member whose own relative excess is least


def _resources(mat: sp.csc_matrix, cols: np.ndarray, dummy: int) -> tuple[np.ndarray, np.ndarray]:
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
    k_max = int(left.max(initial=0))
    if k_max <= 0:
        return base
    b, n = base.shape
    ks = np.arange(1, k_max + 1, dtype=np.float64)
    extra = (base[:, :, None] + ks[None, None, :]) * u[:, None, None] - t[:, :, None]  # [B, n, K] gbps over target
    util = (proj[idx][:, :, None, :] + coef[:, :, None, :] * extra[:, :, :, None]) / cap[idx][:, :, None, :]
    cost = util.max(axis=3)
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = cost + _TIE * np.where(t[:, :, None] > 0, extra / t[:, :, None], 1.0)
    can = valid & ((wmin > 0) | (t > 0))  # a member the fib realization drops gets no units
    cost = np.where(can[:, :, None], cost, np.inf)
    order = np.argsort(cost.reshape(b, n * k_max), axis=1, kind="stable")
    take = np.arange(n * k_max)[None, :] < left[:, None]
    member = order // k_max
    rows = np.broadcast_to(np.arange(b)[:, None], member.shape)
    add = np.zeros_like(base)
    np.add.at(add, (rows[take], member[take]), 1)
    return base + add


def _lowest(members: _Members) -> _Members:
    """The same split in the fewest entries: weights divided by their greatest common divisor."""
    d = math.gcd(*(w for _m, w in members)) if members else 1
    return tuple((x, w // d) for x, w in members) if d > 1 else members


def _pad(rows: list[list[int]], fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    n = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), n), fill, dtype=np.int64)
    valid = np.zeros((len(rows), n), dtype=bool)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
        valid[i, :len(r)] = True
    return out, valid


@dataclass
class _Batch:
    """Arc-disjoint groups rounded in one vectorized step (rows), members padded (columns)."""

    keys: list[tuple[int, ...]]
    members: list[list[int]]
    cols: np.ndarray
    valid: np.ndarray
    demand: np.ndarray
    total: np.ndarray
    w: np.ndarray | None = None
    err: tuple[np.ndarray, np.ndarray] | None = None  # (arcs, gbps) this batch's rounding added to proj


def _apply(bt: _Batch, w: np.ndarray, u: np.ndarray, t: np.ndarray, idx: np.ndarray, coef: np.ndarray,
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


def _setup(bt: _Batch, x: np.ndarray, mat: sp.csc_matrix, dummy: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Targets, unit, total, arcs and coefficients of a batch."""
    t = np.where(bt.cols >= 0, x[np.maximum(bt.cols, 0)], 0.0) * bt.valid
    total = np.maximum(bt.total, bt.valid.sum(axis=1))
    u = np.where(bt.demand > 0, bt.demand / total, 1.0)
    idx, coef = _resources(mat, np.where(bt.valid, bt.cols, -1), dummy)
    return t, u, total, idx, coef


def _round_batch(bt: _Batch, x: np.ndarray, wmin_any: int, mat: sp.csc_matrix, proj: np.ndarray,
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


@dataclass
class _Program:
    """The integer program of one stage as sparse triplets: capacity rows (by arc), one row per
    option tying its weights to its total, least weights, one choice per group; and the hint."""

    const: np.ndarray  # per arc: the load of everything the program does not choose
    cap_r: list[int] = field(default_factory=list)
    cap_c: list[int] = field(default_factory=list)
    cap_v: list[float] = field(default_factory=list)
    eq_r: list[int] = field(default_factory=list)
    eq_c: list[int] = field(default_factory=list)
    eq_v: list[float] = field(default_factory=list)
    n_eq: int = 0
    lo_r: list[int] = field(default_factory=list)
    lo_c: list[int] = field(default_factory=list)
    lo_v: list[float] = field(default_factory=list)
    n_lo: int = 0
    ch_r: list[int] = field(default_factory=list)
    ch_c: list[int] = field(default_factory=list)
    n_ch: int = 0
    hint: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    # batch, row, members, options (total, choice column, weight columns)
    plan: list[tuple[int, int, list[int], list[tuple[int, int, list[int]]]]] = field(default_factory=list)


def _milp_option(prog: _Program, bt: _Batch, gi: int, js: list[int], tot: int, first: bool, wmin_any: int,
                 idx: np.ndarray, coef: np.ndarray, cap: np.ndarray, dummy: int) -> tuple[int, int, list[int]]:
    """Columns of group ``gi`` taking the total ``tot``: a binary choice and a weight per member."""
    assert bt.w is not None
    z = len(prog.hint)
    prog.hint.append(1.0 if first else 0.0)
    prog.ub.append(1.0)
    ws = []
    for j in js:
        v = len(prog.hint)
        ws.append(v)
        prog.hint.append(float(bt.w[gi, j]) if first else 0.0)
        prog.ub.append(float(tot))
        per = float(bt.demand[gi]) / tot
        for arc, cf in zip(idx[gi, j].tolist(), coef[gi, j].tolist(), strict=True):
            if arc != dummy and cf != 0.0 and np.isfinite(cap[arc]):
                prog.cap_r.append(arc)
                prog.cap_c.append(v)
                prog.cap_v.append(cf * per)
        prog.eq_r.append(prog.n_eq)
        prog.eq_c.append(v)
        prog.eq_v.append(1.0)
        if wmin_any > 0:
            prog.lo_r += [prog.n_lo, prog.n_lo]
            prog.lo_c += [v, z]
            prog.lo_v += [1.0, -float(wmin_any)]
            prog.n_lo += 1
    prog.eq_r.append(prog.n_eq)
    prog.eq_c.append(z)
    prog.eq_v.append(-float(tot))
    prog.n_eq += 1
    prog.ch_r.append(prog.n_ch)
    prog.ch_c.append(z)
    return tot, z, ws


_Setup = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _milp_program(batches: list[_Batch], setups: list[_Setup], wmin_any: int, proj: np.ndarray,
                  cap: np.ndarray, totals: int) -> _Program:
    """The program's columns: every carrying group, each of its totals, and its current weights as hint."""
    dummy = len(proj) - 1
    prog = _Program(const=proj.copy())
    for bi, (bt, (t, u, total, idx, coef)) in enumerate(zip(batches, setups, strict=True)):
        assert bt.w is not None
        live = bt.valid & (bt.demand > 0)[:, None] & ((wmin_any > 0) | (bt.w > 0) | (t > 0))
        for gi in np.flatnonzero(live.any(axis=1)).tolist():
            js = np.flatnonzero(live[gi]).tolist()
            for j in js:  # the current weights' load leaves the constant part
                np.subtract.at(prog.const, idx[gi, j], coef[gi, j] * u[gi] * bt.w[gi, j])
            opts: list[tuple[int, int, list[int]]] = []
            for o in range(totals):
                tot = int(total[gi]) - o
                if tot < max(len(js) * wmin_any, 1):
                    break
                opts.append(_milp_option(prog, bt, gi, js, tot, o == 0, wmin_any, idx, coef, cap, dummy))
            prog.n_ch += 1
            prog.plan.append((bi, gi, js, opts))
    return prog


def _milp_solve(prog: _Program, proj: np.ndarray, cap: np.ndarray, nodes: int) -> tuple[np.ndarray | None, float]:
    """Solve ``min U`` over the program (the arcs it does not move floor ``U``); returns the integer
    columns of a solution better than the current maximum (or ``None``) and that maximum."""
    dummy = len(proj) - 1
    n_var = len(prog.hint)
    arcs, arc_row = np.unique(np.asarray(prog.cap_r, dtype=np.int64), return_inverse=True)
    n_arc = len(arcs)
    u_col = n_var
    width = n_var + 1
    cap_rows = sp.csr_matrix((np.asarray(prog.cap_v) / cap[arcs][arc_row], (arc_row, prog.cap_c)),
                             shape=(n_arc, width))
    cap_rows = (cap_rows - sp.csr_matrix((np.ones(n_arc), (np.arange(n_arc), np.full(n_arc, u_col))),
                                         shape=(n_arc, width))).tocsr()
    a = sp.vstack([cap_rows, sp.csr_matrix((prog.eq_v, (prog.eq_r, prog.eq_c)), shape=(prog.n_eq, width)),
                   sp.csr_matrix((prog.lo_v, (prog.lo_r, prog.lo_c)), shape=(prog.n_lo, width)),
                   sp.csr_matrix((np.ones(len(prog.ch_c)), (prog.ch_r, prog.ch_c)), shape=(prog.n_ch, width))]).tocsr()
    row_lb = np.concatenate([np.full(n_arc, -np.inf), np.zeros(prog.n_eq), np.zeros(prog.n_lo), np.ones(prog.n_ch)])
    row_ub = np.concatenate([-prog.const[arcs] / cap[arcs], np.zeros(prog.n_eq), np.full(prog.n_lo, np.inf),
                             np.ones(prog.n_ch)])
    others = np.ones(len(cap), dtype=bool)
    others[arcs] = False
    others[dummy] = False
    floor_u = float((proj[others] / cap[others]).max(initial=0.0))  # arcs this stage does not move
    now = float((proj[:dummy] / cap[:dummy]).max(initial=0.0))
    c = np.zeros(width)
    c[u_col] = 1.0
    res = solve_milp(c, a, row_lb, row_ub, np.append(np.zeros(n_var), floor_u), np.append(prog.ub, np.inf),
                     np.append(np.ones(n_var, dtype=bool), False), hint=np.append(prog.hint, now), nodes=nodes)
    if res is None or res.x[u_col] >= now - 1e-12:
        return None, now
    return np.rint(res.x[:n_var]).astype(np.int64), now


def _milp_adopt(batches: list[_Batch], prog: _Program, sol: np.ndarray, now: float, x: np.ndarray,
                mat: sp.csc_matrix, proj: np.ndarray, cap: np.ndarray, x_round: np.ndarray) -> None:
    """Apply the program's weights and totals; undo them if the projected maximum is not lower after all."""
    dummy = len(proj) - 1
    before = [(bt.w, bt.total.copy()) for bt in batches]
    new_w = [bt.w.copy() for bt in batches if bt.w is not None]
    new_t = [bt.total.copy() for bt in batches]
    for bi, gi, js, opts in prog.plan:
        for tot, z, ws in opts:
            if sol[z] == 1:
                new_t[bi][gi] = tot
                new_w[bi][gi, js] = sol[ws]
    for bi, bt in enumerate(batches):
        bt.total = new_t[bi]
        t, u, _total, idx, coef = _setup(bt, x, mat, dummy)
        _apply(bt, new_w[bi], u, t, idx, coef, proj, x_round)
    if float((proj[:dummy] / cap[:dummy]).max(initial=0.0)) > now + 1e-12:  # not better after all: undo
        for bt, (w_old, t_old) in zip(batches, before, strict=True):
            assert w_old is not None
            bt.total = t_old
            t, u, _total, idx, coef = _setup(bt, x, mat, dummy)
            _apply(bt, w_old, u, t, idx, coef, proj, x_round)


def _milp(batches: list[_Batch], x: np.ndarray, wmin_any: int, mat: sp.csc_matrix, proj: np.ndarray,
          cap: np.ndarray, x_round: np.ndarray, nodes: int, totals: int = 1) -> None:
    """Re-choose every carrying group's weights of one stage at once: the integer program
    ``min U`` with each arc's load (the other stage fixed) ``<= U * capacity``, started from the
    current weights; applied when it lowers the stage's MLU. Each group picks its total among
    its current one and the ``totals - 1`` below it (a binary per choice keeps loads linear:
    a unit of a group with total ``T`` carries ``demand / T``)."""
    dummy = len(proj) - 1
    setups = [_setup(bt, x, mat, dummy) for bt in batches]
    prog = _milp_program(batches, setups, wmin_any, proj, cap, totals)
    if not prog.plan:
        return
    sol, now = _milp_solve(prog, proj, cap, nodes)
    if sol is not None:
        _milp_adopt(batches, prog, sol, now, x, mat, proj, cap, x_round)


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


@dataclass
class _Rounding:
    """What the stages of :func:`carry_round` share: the LP's variables, the rounded ones, the
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


def _start(m: PodModel, x: np.ndarray, fib: bool) -> _Rounding:
    x = np.asarray(x, dtype=np.float64)
    n_a = len(m.a_col)
    lmat = sp.vstack([m.load_matrix, sp.csr_matrix((1, m.n_vars))]).tocsc()
    g_cols = np.arange(n_a, n_a + len(m.g_col), dtype=np.int64)
    g_src = m.g_owner()
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(x[g_src] > 0, x[g_cols] / x[np.maximum(g_src, 0)], 0.0) if len(m.g_col) else np.zeros(0)
    return _Rounding(m=m, x=x, x_round=np.zeros_like(x), wmin_any=0 if fib else 1,
                     cap=np.append(m.fab.arc_cap, np.inf), lmat=lmat, proj=np.asarray(lmat @ x), share=share,
                     g_cols=g_cols, g_src=g_src)


def _tor_batches(m: PodModel, tor_budget: dict[int, int]) -> list[_Batch]:
    """ToR groups (a pod pair's split over planes) in rounds of pod pairs ``(q, q + r mod P)``."""
    pods = m.pods
    n_p = len(pods)
    batches: list[_Batch] = []
    for r in range(n_p):
        keys = [(pods[i], pods[(i + r) % n_p]) for i in range(n_p)]
        keys = [k for k in keys if m.allowed_planes.get(k)]
        if not keys:
            continue
        members = [m.allowed_planes[k] for k in keys]
        cols, valid = _pad([[m.a_col.get((q, p, pl), -1) for pl in ms] for (q, p), ms in zip(keys, members,
                                                                                              strict=True)], -1)
        batches.append(_Batch(list(keys), members, cols, valid, np.array([m.d_qp.get(k, 0.0) for k in keys]),
                              np.array([tor_budget[k[0]] for k in keys], dtype=np.int64)))
    return batches


def _leaf_batches(m: PodModel, leaf_budget: dict[int, int], x_round: np.ndarray) -> list[_Batch]:
    """Leaf groups (a leaf's split over its plane's spines toward a pod), per plane in rounds of pod
    pairs; each carries the rounded plane traffic of its pair."""
    pods = m.pods
    n_p = len(pods)
    batches: list[_Batch] = []
    for pl in sorted({pl for (_q, pl) in m.leaf_at}):
        for r in range(1, n_p):
            keys3 = [(pods[i], pods[(i + r) % n_p], pl) for i in range(n_p)]
            keys3 = [k for k in keys3 if k in m.allowed_spines]
            if not keys3:
                continue
            members = [m.allowed_spines[k] for k in keys3]
            cols, valid = _pad([[m.g_col.get((*k, arc), -1) for arc in ms] for k, ms in zip(keys3, members,
                                                                                             strict=True)], -1)
            demand = np.array([x_round[m.a_col[k]] if k in m.a_col else 0.0 for k in keys3])
            total = np.array([leaf_budget[m.leaf_at[(k[0], pl)]] for k in keys3], dtype=np.int64)
            batches.append(_Batch(list(keys3), members, cols, valid, demand, total))
    return batches


def _leaf_targets(st: _Rounding) -> np.ndarray:
    """The leaf stage's targets: the LP's leaf split of the rounded plane traffic."""
    n_a = len(st.m.a_col)
    target = st.x.copy()
    target[:n_a] = st.x_round[:n_a]
    if len(st.g_cols):
        target[st.g_cols] = st.share * st.x_round[st.g_src]
    return target


def _round_leaves(st: _Rounding, batches: list[_Batch], target: np.ndarray, passes: int) -> None:
    """Passes over the leaf groups; later passes only while they lower the projected maximum."""
    worst = np.inf
    for _ in range(passes):
        for bt in batches:
            _round_batch(bt, target, st.wmin_any, st.lmat, st.proj, st.cap, st.x_round)
        now = float((st.proj[:-1] / st.cap[:-1]).max(initial=0.0))
        if now >= worst - 1e-12:
            break
        worst = now


def _alternate(st: _Rounding, tor_batches: list[_Batch], leaf_batches: list[_Batch], nodes: int,
               totals: int) -> None:
    """Once more each stage's integer program, knowing the other's integers: the ToR splits through
    the leaves' rounded splits (not the LP's), then the leaves for the plane traffic that gives."""
    m = st.m
    leaf_share = st.share.copy()
    g_pos = np.full(m.n_vars, -1, dtype=np.int64)
    g_pos[st.g_cols] = np.arange(len(st.g_cols))
    for bt in leaf_batches:
        assert bt.w is not None
        tot = np.maximum(bt.w.sum(axis=1, keepdims=True), 1)
        ok = bt.cols >= 0
        leaf_share[g_pos[bt.cols[ok]]] = (bt.w / tot)[ok]
    a_mat = st.a_matrix(leaf_share)
    for bt in tor_batches:
        bt.err = None  # targets below are the current values: errors count from here
    _milp(tor_batches, st.x_round.copy(), st.wmin_any, a_mat, st.proj, st.cap, st.x_round, nodes, totals)
    if len(st.g_cols):
        st.x_round[st.g_cols] = leaf_share * st.x_round[st.g_src]
    for bt in leaf_batches:
        bt.err = None
        bt.demand = np.array([st.x_round[m.a_col[k]] if k in m.a_col else 0.0 for k in bt.keys])
    _milp(leaf_batches, st.x_round.copy(), st.wmin_any, st.lmat, st.proj, st.cap, st.x_round, nodes, totals)


def _weights_of(m: PodModel, tor_batches: list[_Batch], leaf_batches: list[_Batch]
                ) -> tuple[dict[tuple[int, int], _Members], dict[tuple[int, int], _Members]]:
    """The batches' weights as ToR and leaf groups, zero weights left out, in lowest terms."""
    tor_w: dict[tuple[int, int], _Members] = {}
    for bt in tor_batches:
        assert bt.w is not None
        for gi, (k, ms) in enumerate(zip(bt.keys, bt.members, strict=True)):
            tor_w[(k[0], k[1])] = _lowest(tuple((pl, int(v)) for pl, v in zip(ms, bt.w[gi, :len(ms)], strict=True)
                                                if v > 0))
    leaf_w: dict[tuple[int, int], _Members] = {}
    for bt in leaf_batches:
        assert bt.w is not None
        for gi, (k, ms) in enumerate(zip(bt.keys, bt.members, strict=True)):
            leaf_w[(m.leaf_at[(k[0], k[2])], k[1])] = _lowest(tuple(
                (a, int(v)) for a, v in zip(ms, bt.w[gi, :len(ms)], strict=True) if v > 0))
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
        utilization), ``milp_nodes`` (branch-and-bound nodes of each integer program, 0: none),
        ``milp_max_weights`` (the integer programs run on fabrics with at most this many leaf
        weights) and ``milp_totals``.

    Returns
    -------
    ToR groups ``(q, p) -> ((plane, weight), ...)``, leaf groups ``(leaf, p) -> ((spine arc, weight), ...)``
    (zero weights left out) and the variables the rounded weights imply.
    """
    passes, nodes, totals = options.rounding_passes, options.milp_nodes, options.milp_totals
    st = _start(m, x, fib)
    # ToR groups: a unit in plane l moves traffic on the a column's arcs and, through the LP's
    # leaf split, on the leaf-spine arcs of its g columns
    a_mat = st.a_matrix(st.share)
    tor_batches = _tor_batches(m, tor_budget)
    for _ in range(passes):
        for bt in tor_batches:
            _round_batch(bt, st.x, st.wmin_any, a_mat, st.proj, st.cap, st.x_round)
    small = len(m.g_col) <= options.milp_max_weights and nodes > 0
    if small:
        _milp(tor_batches, st.x, st.wmin_any, a_mat, st.proj, st.cap, st.x_round, nodes, totals)
    target = _leaf_targets(st)
    leaf_batches = _leaf_batches(m, leaf_budget, st.x_round)
    _round_leaves(st, leaf_batches, target, passes)
    if small:
        _milp(leaf_batches, target, st.wmin_any, st.lmat, st.proj, st.cap, st.x_round, nodes, totals)
        _alternate(st, tor_batches, leaf_batches, nodes, totals)
    return (*_weights_of(m, tor_batches, leaf_batches), st.x_round)
