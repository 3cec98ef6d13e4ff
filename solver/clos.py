"""The pod-level WCMP LP for a clean 3-tier RFC 7938 Clos.

This module owns the decomposition that makes WCMP scale with pods instead of
prefixes. In a 3-tier Clos (ToRs linked to every leaf of their pod, one leaf
per plane per pod, leaves linked to spines of their plane) each plane is a
two-stage leaf-spine network, and the choices BGP leaves open are the ToR's
split over planes and the leaf's split over its plane's spines. The model:

* ``a[q, p, l]``: traffic from pod ``q`` to pod ``p`` sent into plane ``l``;
  every ToR of pod ``q`` splits its traffic for any ToR of pod ``p`` in the
  proportions ``a[q, p, :] / D[q, p]`` (one split per pod pair: a restriction
  of per-ToR splits, which this LP's bound is the optimum *of*);
* ``g[q, p, l, j]``: the part of ``a[q, p, l]`` that leaf ``(q, l)`` sends via
  spine ``j``; a leaf's split is per destination pod, which loses nothing,
  since every destination in pod ``p`` leaves plane ``l`` at the same leaf.

Capacity rows cover all four arc kinds (ToR up, leaf down to a ToR, leaf up,
spine down), with the exact per-ToR loads as linear functions of ``a``.
Which planes and spines a pod pair may use comes from the BGP routes
themselves (:mod:`solver.routing`), so the LP never uses a path BGP lacks.
:func:`clos_ratios` returns per-edge split ratios for the generic commodities
of :mod:`solver.wcmp`, or ``None`` when the fabric is not such a clean Clos.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import scipy.sparse as sp

from controller.model import Role
from solver.lp import DEFAULT_BACKEND, solve_lp
from solver.wcmp import Commodities, WcmpSolution

__all__ = ["clos_ratios"]


class _NotClean(Exception):
    """The fabric is not a clean 3-tier Clos: use the generic LP."""


def _structure(com: Commodities) -> tuple[dict[int, int], dict[tuple[int, int], int], dict[int, tuple[int, int]],
                                          dict[int, tuple[int, int]]]:
    """ToR -> pod, (pod, plane) -> leaf, leaf -> (pod, plane), spine -> (plane, index)."""
    fab = com.fab
    intent = fab.intent
    if intent.drained_devices or intent.drained_links:
        raise _NotClean("drains")
    tor_pod: dict[int, int] = {}
    leaf_at: dict[tuple[int, int], int] = {}
    leaf_pp: dict[int, tuple[int, int]] = {}
    spine_pl: dict[int, tuple[int, int]] = {}
    for i, d in enumerate(intent.devices):
        if d.role == Role.TOR and d.pod is not None:
            tor_pod[i] = d.pod
        elif d.role == Role.LEAF and d.pod is not None and d.plane is not None:
            if (d.pod, d.plane) in leaf_at:
                raise _NotClean("two leaves in one pod and plane")
            leaf_at[(d.pod, d.plane)] = i
            leaf_pp[i] = (d.pod, d.plane)
        elif d.role == Role.SPINE and d.plane is not None:
            spine_pl[i] = (d.plane, i)
        else:
            raise _NotClean(f"device {d.name} is not a ToR, leaf or spine of a 3-tier Clos")
    planes_of_pod: dict[int, set[int]] = defaultdict(set)
    for (p, lp) in leaf_at:
        planes_of_pod[p].add(lp)
    for t, p in tor_pod.items():
        ups = [w for _a, w, _port in fab.adj[t]]
        if len(ups) != len(set(ups)) or {leaf_pp.get(w, (-1, -1)) for w in ups} != {(p, lp) for lp in planes_of_pod[p]}:
            raise _NotClean(f"ToR {fab.names[t]} does not link once to every leaf of its pod")
    for rc in com.classes:
        if len(rc.origins) != 1 or rc.origins[0] not in tor_pod:
            raise _NotClean("a prefix not originated by exactly one ToR")
    for v in com.node_v[com.node_demand > 0]:
        if int(v) not in tor_pod:
            raise _NotClean("demand entering at a device that is not a ToR")
    return tor_pod, leaf_at, leaf_pp, spine_pl


def clos_ratios(com: Commodities, *, backend: str = DEFAULT_BACKEND,
                min_share: np.ndarray | None = None) -> WcmpSolution | None:
    """Solve the pod-level LP; per-edge ratios over ``com`` (NaN where no flow), or ``None``."""
    try:
        tor_pod, leaf_at, leaf_pp, _spines = _structure(com)
    except _NotClean:
        return None
    fab = com.fab
    n_e = len(com.e_arc)
    # demand per (source ToR, destination ToR)
    d_st: dict[tuple[int, int], float] = {}
    origin_of = {ci: rc.origins[0] for ci, rc in enumerate(com.classes) if rc.origins}
    for k in np.flatnonzero(com.node_demand > 0):
        t = origin_of[int(com.commodity_class[com.node_c[k]])]
        d_st[(int(com.node_v[k]), t)] = float(com.node_demand[k])
    if not d_st:
        return WcmpSolution(np.zeros(n_e), 0.0, np.full(n_e, np.nan), 0.0)
    d_sp: dict[tuple[int, int], float] = defaultdict(float)
    d_qt: dict[tuple[int, int], float] = defaultdict(float)
    d_qp: dict[tuple[int, int], float] = defaultdict(float)
    for (s, t), x in d_st.items():
        q, p = tor_pod[s], tor_pod[t]
        d_sp[(s, p)] += x
        d_qt[(q, t)] += x
        d_qp[(q, p)] += x
    # allowed planes and spines per pod pair, read off the BGP routes of one ToR per destination pod
    rep: dict[int, int] = {}
    for ci, rc in enumerate(com.classes):
        rep.setdefault(tor_pod[rc.origins[0]], ci)
    head = fab.arc_head
    arc_of: dict[tuple[int, int], int] = {}
    for v in range(fab.n):
        for arc, w, _port in fab.adj[v]:
            arc_of[(v, w)] = arc
    a_var: dict[tuple[int, int, int], int] = {}
    g_var: dict[tuple[int, int, int, int], int] = {}
    g_parent: list[int] = []
    for (q, p) in d_qp:
        routes = com.classes[rep[p]].nexthops
        for (pq, lp), leaf in leaf_at.items():
            if pq != q:
                continue
            if q == p:
                a_var[(q, p, lp)] = len(a_var)
                continue
            spines = routes.get(leaf, ())
            if not spines:
                continue
            ai = a_var[(q, p, lp)] = len(a_var)
            for arc in spines:
                g_var[(q, p, lp, int(head[arc]))] = len(g_var)
                g_parent.append(ai)
    n_a, n_g = len(a_var), len(g_var)
    u_col = n_a + n_g
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lb: list[np.ndarray] = []
    ub: list[np.ndarray] = []
    n_rows = 0

    def add(r: list[int] | np.ndarray, c: list[int] | np.ndarray, v: list[float] | np.ndarray, n_new: int,
            lo: np.ndarray, hi: np.ndarray) -> None:
        nonlocal n_rows
        rows.append(np.asarray(r, dtype=np.int64) + n_rows)
        cols.append(np.asarray(c, dtype=np.int64))
        vals.append(np.asarray(v, dtype=np.float64))
        lb.append(lo)
        ub.append(hi)
        n_rows += n_new

    scale = float(np.median(fab.arc_cap))
    # 1. each pod pair's demand is split over planes
    pair_row = {pq: i for i, pq in enumerate(d_qp)}
    missing = [pq for pq in d_qp if not any((pq[0], pq[1], lp) in a_var for (_x, lp) in leaf_at)]
    if missing:
        return None  # some pod pair has no plane: the generic path names the unroutable demand
    r1 = [pair_row[(q, p)] for (q, p, _lp) in a_var]
    add(r1, list(a_var.values()), [1.0] * n_a, len(d_qp), np.array([d_qp[pq] / scale for pq in d_qp]),
        np.array([d_qp[pq] / scale for pq in d_qp]))
    # 2. a leaf's split of a[q, p, l] over spines
    gp = np.array(g_parent, dtype=np.int64)
    add(np.concatenate([gp, np.arange(n_a)]), np.concatenate([n_a + np.arange(n_g), np.arange(n_a)]),
        np.concatenate([np.ones(n_g), -np.ones(n_a)]), n_a, np.zeros(n_a), np.zeros(n_a))
    # (rows for intra-pod a's and a's without spines read 0 = -a + 0 only if no g; fix those below via bounds)
    intra = np.array([q == p for (q, p, _lp) in a_var], dtype=bool)
    # 3.-6. capacity rows, one per arc used
    arc_terms: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (s, p), x in d_sp.items():
        q = tor_pod[s]
        for lp in range(max(lp for (_pq, lp) in leaf_at) + 1):
            ai = a_var.get((q, p, lp))
            if ai is not None:
                arc_terms[arc_of[(s, leaf_at[(q, lp)])]].append((ai, x / d_qp[(q, p)]))
    for (q, t), x in d_qt.items():
        p = tor_pod[t]
        for (pp, lp), leaf in leaf_at.items():
            if pp != p:
                continue
            ai = a_var.get((q, p, lp))
            if ai is not None:
                arc_terms[arc_of[(leaf, t)]].append((ai, x / d_qp[(q, p)]))
    for (q, p, lp, j), gi in g_var.items():
        arc_terms[arc_of[(leaf_at[(q, lp)], j)]].append((n_a + gi, 1.0))
        arc_terms[arc_of[(j, leaf_at[(p, lp)])]].append((n_a + gi, 1.0))
    arcs = list(arc_terms)
    rr: list[int] = []
    cc: list[int] = []
    vv: list[float] = []
    for i, arc in enumerate(arcs):
        for col, coef in arc_terms[arc]:
            rr.append(i)
            cc.append(col)
            vv.append(coef)
        rr.append(i)
        cc.append(u_col)
        vv.append(-float(fab.arc_cap[arc]) / scale)
    add(rr, cc, vv, len(arcs), np.full(len(arcs), -np.inf), np.zeros(len(arcs)))
    col_lb = np.zeros(n_a + n_g + 1)
    # 7. with every multipath next hop keeping weight >= 1 (link-bandwidth), a least share per next hop
    if min_share is not None:
        n_planes_of: dict[tuple[int, int], int] = defaultdict(int)
        for (q, p, _lp) in a_var:
            n_planes_of[(q, p)] += 1
        tors_of: dict[int, list[int]] = defaultdict(list)
        for s, q in tor_pod.items():
            tors_of[q].append(s)
        for (q, p, _lp), ai in a_var.items():
            if n_planes_of[(q, p)] >= 2:
                col_lb[ai] = max(min_share[s] for s in tors_of[q]) * d_qp[(q, p)] / scale
        n_sp: dict[int, int] = defaultdict(int)
        for gi in g_parent:
            n_sp[gi] += 1
        sel = [(gi, ai) for gi, ai in enumerate(g_parent) if n_sp[ai] >= 2]
        if sel:
            leaf_share = np.array([min_share[leaf_at[(q, lp)]] for (q, _p, lp, _j) in g_var])
            gsel = np.array([x[0] for x in sel], dtype=np.int64)
            asel = np.array([x[1] for x in sel], dtype=np.int64)
            r = np.arange(len(sel))
            add(np.concatenate([r, r]), np.concatenate([n_a + gsel, asel]),
                np.concatenate([np.ones(len(sel)), -leaf_share[gsel]]), len(sel), np.zeros(len(sel)),
                np.full(len(sel), np.inf))
    a_mat = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(n_rows, n_a + n_g + 1))
    row_lb, row_ub = np.concatenate(lb), np.concatenate(ub)
    # intra-pod a's (and a's with no spine variables) have no leaf split: free their row 2
    no_split = intra.copy()
    has_g = np.zeros(n_a, dtype=bool)
    has_g[gp] = True
    no_split |= ~has_g
    base2 = len(d_qp)
    row_lb[base2 + np.flatnonzero(no_split)] = -np.inf
    row_ub[base2 + np.flatnonzero(no_split)] = np.inf
    c = np.zeros(n_a + n_g + 1)
    c[u_col] = 1.0
    res = solve_lp(c, a_mat, row_lb, row_ub, col_lb, np.full(n_a + n_g + 1, np.inf), backend=backend)
    x = np.maximum(res.x, 0.0)
    a_val, g_val = x[:n_a], x[n_a:n_a + n_g]
    return WcmpSolution(np.zeros(0), float(res.x[u_col]), _edge_ratios(com, tor_pod, leaf_pp, a_var, a_val, g_var,
                                                                          g_val, origin_of), res.seconds)


def _edge_ratios(com: Commodities, tor_pod: dict[int, int], leaf_pp: dict[int, tuple[int, int]],
                 a_var: dict[tuple[int, int, int], int], a_val: np.ndarray,
                 g_var: dict[tuple[int, int, int, int], int], g_val: np.ndarray,
                 origin_of: dict[int, int]) -> np.ndarray:
    """Per commodity edge, the LP's split (NaN where the pod pair carries nothing)."""
    fab = com.fab
    head = fab.arc_head
    ratio = np.full(len(com.e_arc), np.nan)
    for k in range(com.n_nodes):
        v = int(com.node_v[k])
        t = origin_of[int(com.commodity_class[com.node_c[k]])]
        p = tor_pod[t]
        s, e = int(com.node_start[k]), int(com.node_start[k + 1])
        if e - s == 1:
            ratio[s] = 1.0
            continue
        hs = [int(head[a]) for a in com.e_arc[s:e]]
        if v in tor_pod:
            q = tor_pod[v]
            vals = [a_val[a_var[(q, p, leaf_pp[h][1])]] if (q, p, leaf_pp[h][1]) in a_var else 0.0 for h in hs]
        elif v in leaf_pp and leaf_pp[v][0] != p:
            q, lp = leaf_pp[v]
            vals = [g_val[g_var[(q, p, lp, h)]] if (q, p, lp, h) in g_var else 0.0 for h in hs]
        else:
            continue  # spines with several leaves of one pod: equal split
        tot = sum(vals)
        if tot > 1e-12:
            ratio[s:e] = np.asarray(vals) / tot
    return ratio
