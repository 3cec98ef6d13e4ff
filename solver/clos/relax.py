"""The pod model's LP through its spine-transport relaxation, for large Clos fabrics.

This module owns the step that makes the Clos LP scale with arcs instead of
leaf groups. The pod model of :mod:`solver.clos.model` has a variable per leaf group
and spine (``g[q, p, l, j]``: pods squared times spines); in plane ``l`` they
form a three-way table ``x[q, p, j]`` whose three two-way margins are what the
LP constrains: ``sum_j x = a[q, p, l]`` (a pod pair's traffic in the plane),
``sum_p x = y[q, j]`` (the load up arc ``leaf(q, l) -> j``) and
``sum_q x = z[j, p]`` (the load down arc ``j -> leaf(p, l)``).

The relaxation keeps only the margins: variables ``a``, ``y`` and ``z`` (one
per arc), with each leaf's up traffic ``sum_j y = sum_p a``, each leaf's down
traffic ``sum_j z = sum_q a``, and each spine's balance
``sum_q y = sum_p z``. Every routing of the pod model satisfies these, so its
optimum is a lower bound on the pod model's (``lp_bound`` stays a bound). It
has about as many columns as the fabric has arcs plus pod pairs and planes.

The routing itself is then recovered per plane by iterative proportional
fitting (IPF, matrix scaling in three dimensions): starting from equal splits
over each group's spines, the table is rescaled in turn to the ``y``, ``z`` and
``a`` margins; a group's structural zeros (spines it has no route through)
stay zero. The ``a`` margin is fitted last, so the result always delivers
every demand exactly; how close the ``y`` and ``z`` margins come is measured
and reported. IPF converges when a table with those margins exists. That is
not guaranteed for every optimal ``y, z`` (a vertex of the relaxation can
defeat it), but PDLP's optimum is not a vertex, so the fit is expected to
meet the margins. The caller checks the fitted routing's loads and falls back
to the full pod model when they exceed the relaxation's optimum by more than
``ClosOptions.fit_above``.

Least shares (a leaf's smallest weight, ``g >= share * a``) are carried as in
:meth:`solver.clos.model.PodModel.lp`: the fitted table is ``g' = g - share * a``,
with margins ``(1 - n * share) * a`` and the arcs' loads less their least-share
loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solver.clos.model import PodModel
from solver.clos.warm import Layout
from solver.core.options import ClosOptions

__all__ = ["Relaxation", "decompose", "relaxation"]

@dataclass
class _Plane:
    n_pods: int
    n_spines: int
    cell_a: np.ndarray  # a columns of the plane's groups
    cell_qp: np.ndarray  # their flat (q, p) index
    up: np.ndarray  # indices into Relaxation.up_arcs of the plane's arcs
    up_qj: np.ndarray  # their flat (q, j) index
    dn: np.ndarray  # indices into Relaxation.dn_arcs
    dn_jp: np.ndarray  # their flat (j, p) index
    g: np.ndarray  # g columns (less n_a) of the plane
    g_cell: np.ndarray  # their flat (q, p, j) index


@dataclass
class Relaxation:
    """Columns ``[a, y, z, U, aggregates]`` of the relaxed LP and the index maps IPF needs."""

    m: PodModel
    up_arcs: np.ndarray  # leaf -> spine arcs some group uses (the y columns, in order)
    dn_arcs: np.ndarray  # spine -> leaf arcs some group uses (the z columns)
    g_a: np.ndarray  # per g column: its a column
    phi_a: np.ndarray  # per a column: the least share of its leaf group (0 when none)
    n_spines_a: np.ndarray  # per a column: how many spines its leaf group has
    planes: list[_Plane]
    phi: dict[tuple[int, int, int], float]  # least shares, as PodModel.least_shares gives them
    a_lb: np.ndarray  # and the least a per column
    least_loads: sp.csr_matrix | None = None  # the least shares' loads, a row per arc of the fabric, once built
    flow_rows: np.ndarray | None = None  # the device rows :meth:`lp` keeps (of 3 per device), once built

    def layout(self, arcs: np.ndarray) -> Layout:
        """What each column and row of :meth:`lp` over ``arcs`` stands for (after :meth:`lp`), for warm
        starts (:mod:`solver.clos.warm`)."""
        m = self.m
        assert self.flow_rows is not None, "layout() describes an LP built by lp()"
        up_col, dn_col = m.aggregate_columns(self.phi, self.u_col + 1)
        cols: list[tuple[object, ...]] = [("a", *k) for k in m.a_col]
        cols += [("y", a) for a in self.up_arcs.tolist()] + [("z", a) for a in self.dn_arcs.tolist()] + [("U",)]
        cols += [("up", *k) for k in up_col] + [("dn", *k) for k in dn_col]
        rows: list[tuple[object, ...]] = [("d", *k) for k in m.d_qp]
        rows += [("f", r) for r in self.flow_rows.tolist()]
        if self.phi:
            rows += [("ru", *k) for k in up_col] + [("rd", *k) for k in dn_col]
        rows += [("c", a) for a in np.asarray(arcs).tolist()]
        return Layout(cols, rows, m.scale)

    @property
    def u_col(self) -> int:
        return len(self.m.a_col) + len(self.up_arcs) + len(self.dn_arcs)

    def lp(self, arcs: np.ndarray
           ) -> tuple[np.ndarray, sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``min U`` over ``[a, y, z, U, aggregates]`` (scaled by the model's scale), with capacity rows
        on ``arcs`` only (see :meth:`solver.clos.model.PodModel.lp` for least shares and lazy rows)."""
        m = self.m
        fab = m.fab
        s = m.scale
        n_a, n_up, n_dn = len(m.a_col), len(self.up_arcs), len(self.dn_arcs)
        u = self.u_col
        phi, a_lb = self.phi, self.a_lb
        up_col, dn_col = m.aggregate_columns(phi, u + 1)
        width = u + 1 + len(up_col) + len(dn_col)
        head, tail = fab.arc_head, fab.arc_tail
        blocks: list[sp.spmatrix] = [m.demand_rows(width)]
        dem = np.array([d / s for d in m.d_qp.values()])
        lbs: list[np.ndarray] = [dem]
        ubs: list[np.ndarray] = [dem]
        # leaves' up and down traffic, spines' balance: one row per device
        f = 1.0 - self.n_spines_a * self.phi_a
        carries = np.flatnonzero(self.n_spines_a > 0)
        a_src = np.array([m.leaf_at[(q, pl)] for (q, _p, pl) in m.a_col], dtype=np.int64)
        a_dst = np.array([m.leaf_at[(p, pl)] for (_q, p, pl) in m.a_col], dtype=np.int64)
        n_dev = fab.n
        y_cols = n_a + np.arange(n_up)
        z_cols = n_a + n_up + np.arange(n_dn)
        rows = np.concatenate([a_src[carries], n_dev + a_dst[carries],  # -f * a
                               tail[self.up_arcs], 2 * n_dev + head[self.up_arcs],  # y
                               n_dev + head[self.dn_arcs], 2 * n_dev + tail[self.dn_arcs]])  # z
        cols = np.concatenate([carries, carries, y_cols, y_cols, z_cols, z_cols])
        vals = np.concatenate([-f[carries], -f[carries], np.ones(n_up), np.ones(n_up), np.ones(n_dn), -np.ones(n_dn)])
        flow = sp.csr_matrix((vals, (rows, cols)), shape=(3 * n_dev, width))
        self.flow_rows = np.flatnonzero(np.diff(flow.indptr) > 0)
        flow = flow[self.flow_rows]
        blocks.append(flow)
        lbs.append(np.zeros(flow.shape[0]))
        ubs.append(np.zeros(flow.shape[0]))
        if phi:
            blocks.append(m.aggregate_rows(phi, up_col, dn_col, width))
            lbs.append(np.zeros(len(up_col) + len(dn_col)))
            ubs.append(np.zeros(len(up_col) + len(dn_col)))
        # capacity: the a part of the load rows (ToR arcs), y or z (leaf-spine arcs), least shares, -U * cap
        used = np.asarray(arcs, dtype=np.int64)
        k = len(used)
        row_of = np.full(fab.n_arcs, -1, dtype=np.int64)
        row_of[used] = np.arange(k)
        base = m.load_matrix[used][:, :n_a]
        own = np.concatenate([row_of[self.up_arcs], row_of[self.dn_arcs]])
        own_cols = np.concatenate([y_cols, z_cols])
        keep = own >= 0
        load = (sp.hstack([base, sp.csr_matrix((k, width - n_a))]).tocsr()
                + sp.csr_matrix((np.ones(int(keep.sum())), (own[keep], own_cols[keep])), shape=(k, width))
                + sp.csr_matrix((-fab.arc_cap[used] / s, (np.arange(k), np.full(k, u))), shape=(k, width)))
        if phi:  # the same for every set of rows: built once, for every arc, and its rows taken
            if self.least_loads is None:
                self.least_loads = m._least_share_loads(phi, np.arange(fab.n_arcs), up_col, dn_col, width)
            load = load + self.least_loads[used]
        blocks.append(load.tocsr())
        lbs.append(np.full(k, -np.inf))
        ubs.append(np.zeros(k))
        c = np.zeros(width)
        c[u] = 1.0
        col_lb = np.zeros(width)
        col_lb[:n_a] = a_lb
        return (c, sp.vstack(blocks).tocsr(), np.concatenate(lbs), np.concatenate(ubs), col_lb,
                np.full(width, np.inf))


def relaxation(m: PodModel, least: tuple[dict[tuple[int, int, int], float], np.ndarray]) -> Relaxation:
    """The index maps of ``m``'s relaxation (see the module docstring), for the least shares
    ``least`` (what :meth:`PodModel.least_shares` returns)."""
    fab = m.fab
    head, tail = fab.arc_head, fab.arc_tail
    g_a = m.g_owner()
    counts = m.g_col.counts
    g_up_arc, g_dn_arc = m.g_arcs()
    up_arcs, g_up = np.unique(g_up_arc, return_inverse=True)
    dn_arcs = np.unique(g_dn_arc)
    phi, a_lb = least
    phi_a = np.array([phi.get(k, 0.0) for k in m.a_col])
    pod_ix = {p: i for i, p in enumerate(m.pods)}
    a_keys = list(m.a_col)
    a_q = np.array([pod_ix[q] for (q, _p, _l) in a_keys], dtype=np.int64)
    a_p = np.array([pod_ix[p] for (_q, p, _l) in a_keys], dtype=np.int64)
    a_l = np.array([pl for (_q, _p, pl) in a_keys], dtype=np.int64)
    leaf_pod = np.full(fab.n, -1, dtype=np.int64)
    leaf_plane = np.full(fab.n, -1, dtype=np.int64)
    for v, (q, pl) in m.leaf_pp.items():
        leaf_pod[v], leaf_plane[v] = pod_ix[q], pl
    n_pods = len(m.pods)
    planes: list[_Plane] = []
    for pl in sorted(set(leaf_plane[tail[up_arcs]].tolist())):
        ups = np.flatnonzero(leaf_plane[tail[up_arcs]] == pl)
        dns = np.flatnonzero(leaf_plane[head[dn_arcs]] == pl)
        spines, j_up = np.unique(head[up_arcs[ups]], return_inverse=True)
        j_dn = np.searchsorted(spines, tail[dn_arcs[dns]])
        n_s = len(spines)
        cells = np.flatnonzero((a_l == pl) & (counts > 0))
        g = np.flatnonzero(a_l[g_a] == pl)
        g_j = np.searchsorted(spines, head[up_arcs[g_up[g]]])
        planes.append(_Plane(
            n_pods=n_pods, n_spines=n_s, cell_a=cells, cell_qp=a_q[cells] * n_pods + a_p[cells],
            up=ups, up_qj=leaf_pod[tail[up_arcs[ups]]] * n_s + j_up,
            dn=dns, dn_jp=j_dn * n_pods + leaf_pod[head[dn_arcs[dns]]],
            g=g, g_cell=(a_q[g_a[g]] * n_pods + a_p[g_a[g]]) * n_s + g_j))
    return Relaxation(m=m, up_arcs=up_arcs, dn_arcs=dn_arcs, g_a=g_a, phi_a=phi_a, n_spines_a=counts,
                      planes=planes, phi=phi, a_lb=a_lb)


def _grid(size: int, at: np.ndarray, values: np.ndarray, fill: float) -> np.ndarray:
    out = np.full(size, fill)
    out[at] = values
    return out


def _ratio(target: np.ndarray, now: np.ndarray) -> np.ndarray:
    return np.divide(target, now, out=np.zeros_like(now), where=now > 0)


def decompose(r: Relaxation, x_lp: np.ndarray, options: ClosOptions = ClosOptions()) -> tuple[np.ndarray, float, int]:
    """The pod model's variables ``[a, g, U]`` (scaled) from a solution of :meth:`Relaxation.lp`, by IPF
    per plane. Also returns how far the fitted loads ended from the ``y``/``z`` margins (the largest
    difference over any leaf-spine arc, in utilization) and the most sweeps a plane took. A plane's
    fit stops once that difference is at most ``options.fit_tolerance``, once ten sweeps shrink it
    by less than ``options.fit_progress`` (relative), or after ``options.fit_sweeps`` sweeps (three
    rescalings each)."""
    m = r.m
    n_a, n_up = len(m.a_col), len(r.up_arcs)
    a = np.maximum(x_lp[:n_a], 0.0)
    y = np.maximum(x_lp[n_a:n_a + n_up], 0.0)
    z = np.maximum(x_lp[n_a + n_up:r.u_col], 0.0)
    cap = m.fab.arc_cap / m.scale
    g = np.zeros(len(m.g_col))
    worst, sweeps = 0.0, 0
    for pl in r.planes:
        p_, s_ = pl.n_pods, pl.n_spines
        target_a = _grid(p_ * p_, pl.cell_qp, (1.0 - r.n_spines_a[pl.cell_a] * r.phi_a[pl.cell_a]) * a[pl.cell_a],
                         0.0).reshape(p_, p_)
        target_y = _grid(p_ * s_, pl.up_qj, y[pl.up], 0.0).reshape(p_, s_)
        target_z = _grid(s_ * p_, pl.dn_jp, z[pl.dn], 0.0).reshape(s_, p_).T  # (p, j)
        cap_y = _grid(p_ * s_, pl.up_qj, cap[r.up_arcs[pl.up]], np.inf).reshape(p_, s_)
        cap_z = _grid(s_ * p_, pl.dn_jp, cap[r.dn_arcs[pl.dn]], np.inf).reshape(s_, p_).T
        mask = _grid(p_ * p_ * s_, pl.g_cell, np.ones(len(pl.g_cell)), 0.0).reshape(p_, p_, s_)
        n_cell = mask.sum(axis=2)
        x = mask * _ratio(target_a, n_cell)[:, :, None]
        err = np.inf
        k = 0
        while k < options.fit_sweeps:
            x *= _ratio(target_y, x.sum(axis=1))[:, None, :]
            x *= _ratio(target_z, x.sum(axis=0))[None, :, :]
            x *= _ratio(target_a, x.sum(axis=2))[:, :, None]
            k += 1
            if k % 10 == 0 or k == options.fit_sweeps:
                last, err = err, max(float((np.abs(x.sum(axis=1) - target_y) / cap_y).max(initial=0.0)),
                                     float((np.abs(x.sum(axis=0) - target_z) / cap_z).max(initial=0.0)))
                if err <= options.fit_tolerance or err > last * (1.0 - options.fit_progress):
                    break  # close enough, or stuck at the floor the LP's own residual leaves
        lost = (x.sum(axis=2) <= 0) & (target_a > 0)  # a group whose every spine's margin is 0: split evenly
        if lost.any():
            x[lost] = mask[lost] * _ratio(target_a, n_cell)[lost][:, None]
            err = max(float((np.abs(x.sum(axis=1) - target_y) / cap_y).max(initial=0.0)),
                      float((np.abs(x.sum(axis=0) - target_z) / cap_z).max(initial=0.0)))
        worst, sweeps = max(worst, err), max(sweeps, k)
        g[pl.g] = x.reshape(-1)[pl.g_cell] + r.phi_a[r.g_a[pl.g]] * a[r.g_a[pl.g]]
    return np.concatenate([a, g, [x_lp[r.u_col]]]), worst, sweeps
