"""Robust WCMP on the pod-level model of a clean 3-tier RFC 7938 Clos.

This module owns the FFC-style ("Traffic Engineering with Forward Fault
Correction", SIGCOMM 2014) robust plan for the fabrics :mod:`solver.clos.model`
models: the ToR's split over planes per pod pair and the leaf's split over its
plane's spines per destination pod. Variables are the baseline flows of that
model, ``a[q, p, l]`` (pod pair ``q -> p`` in plane ``l``, summing to ``D[q, p]``)
and ``g[q, p, l, j]`` (via spine ``j``, summing to ``a``); every group splits in
proportion to them. A failure makes a group renormalize over its survivors,
which amplifies each survivor's flow by ``1 / (surviving share)``. Fixing the
largest amplification a group may suffer, ``kappa``, makes robustness linear:
``sum_{l in K} a <= (1 - 1/kappa1) * D`` for every set ``K`` of planes a
scenario can take from the pair, ``sum_{j in J} g <= (1 - 1/kappa2) * a`` for
every set ``J`` of spines; then the traffic of any ToR pair in plane ``l`` is at
most ``kappa1 * a`` (its share), a leaf's inflow toward pod ``p`` at most that
and what it sends to spine ``j`` at most ``kappa1 * kappa2 * g``, in both replay
stages (local repair and BGP withdrawal only ever remove next hops of a clean
Clos). These *allocations* (FFC's word) through the pod model's linear load
rows bound every such scenario's loads; they must stay under the limit.

Loss sets come in classes, each with its own allocations, because a single
failure never takes a plane and a spine at once: class ``planes`` (a ToR, a
ToR-leaf link, a leaf, a whole plane), class ``spines`` (a spine or a
leaf-spine link) and class ``mixed`` (a failure that takes both, e.g. a spine
that was some group's only spine, or a declared SRLG); stacking the classes'
amplifications would price a plane and a spine lost together. With
``all_single``: every single plane of a pair (class ``planes``: a ToR-leaf link
takes one plane from that ToR's pairs at the source and from the pairs toward
its prefix after withdrawal; a leaf takes its plane from every pair of its
pod), and the losses of every spine and leaf-spine link computed by
:func:`scenario_losses` (a spine's one down link to a pod is its only route
there, so each takes at most one spine per leaf group, or the whole plane of a
group it was the only spine of). Every declared failure domain (and pair of
them under ``k2``) is computed the same way. Sets that take every plane of a
pair or every spine of a leaf group cannot be protected: that traffic is
black-holed or withdrawn whatever the weights (the replay reports it). A ToR
failure only removes traffic.

``kappa`` is ``t * n / (n - k)`` for a group of ``n`` members whose largest
protected set (in the class) has ``k`` (``t = 1`` forces equal splits, a larger
``t`` allows skew and reserves more). One LP per ``(t1, t2)`` of a small grid
minimizes the baseline MLU with every class's allocation rows under the limit
(a penalized excess keeps it feasible and tells by how much it missed).
The ``auto`` backend means PDLP here: this LP is degenerate, which slows the
simplex down far more than PDLP; PDLP's tolerance is harmless since the
certificate is recomputed at the rounded weights anyway.
Integer weights (within each device's budget) change the splits, so each
candidate's certificate is recomputed at its rounded splits
(:func:`certificate`: the tightest allocations of those splits, per class) and
arcs over the limit are derated for another LP. The exact oracle
(:func:`safety.replay.peaks`) then judges the result in :mod:`solver.robust`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from collections.abc import Callable, Iterable

import numpy as np
import scipy.sparse as sp

from controller.model import Intent, Role
from controller.model.errors import Infeasible
from controller.model.plan import DevicePlan, LinkLoad, NextHop, Plan, PlanSummary
from solver.clos.model import PodModel, build_pod_model, pod_budgets
from solver.core.fabric import build_fabric
from solver.core.lp import DEFAULT_BACKEND, solve_lp
from solver.core.options import RobustOptions
from solver.core.weights import reduce_weights

__all__ = ["CLASSES", "ClosCandidate", "LossFamily", "certificate", "clos_robust",
           "protected_losses", "scenario_losses"]

CLASSES = ("planes", "spines", "mixed")
Progress = Callable[[str, float], None]
Pair = tuple[int, int]
Group = tuple[int, int, int]


@dataclasses.dataclass
class LossFamily:
    """Loss sets: planes (pod pair -> sets of planes), spines ((q, p, l) -> sets of spine arcs)."""

    planes: dict[Pair, set[frozenset[int]]]
    spines: dict[Group, set[frozenset[int]]]

    def add(self, other: LossFamily) -> None:
        for k, sets in other.planes.items():
            self.planes.setdefault(k, set()).update(sets)
        for g, sets in other.spines.items():
            self.spines.setdefault(g, set()).update(sets)

    @property
    def kind(self) -> str:
        """The class of one scenario's losses (``""`` when it takes nothing)."""
        if self.planes and self.spines:
            return "mixed"
        return "planes" if self.planes else ("spines" if self.spines else "")


@dataclasses.dataclass
class _Index:
    """Arrays over the model's ``a`` and ``g`` columns for fast per-scenario losses."""

    a_keys: list[Group]
    g_up: np.ndarray  # leaf -> spine arc per g column
    g_down: np.ndarray  # spine -> destination leaf arc per g column
    g_group: np.ndarray  # a column of (q, p, l) per g column
    g_size: np.ndarray  # spines per a column (0 within a pod)
    a_src_leaf: np.ndarray
    a_dst_leaf: np.ndarray
    a_src_pp: np.ndarray  # (pod, plane) index of the source side per a column
    a_dst_pp: np.ndarray
    tor_arcs: np.ndarray  # every ToR uplink arc
    tor_pp: np.ndarray  # its (pod, plane) index
    n_pp: int


def _index(m: PodModel) -> _Index:
    n_a = len(m.a_col)
    a_keys = sorted(m.a_col, key=m.a_col.__getitem__)
    g_keys = sorted(m.g_col, key=m.g_col.__getitem__)
    head = m.fab.arc_head
    g_group = np.array([m.a_col[k[:3]] for k in g_keys], dtype=np.int64)
    pp = {k: i for i, k in enumerate(sorted(m.leaf_at))}
    tor_items = sorted(m.tor_arc.items())
    return _Index(
        a_keys=a_keys,
        g_up=np.array([k[3] for k in g_keys], dtype=np.int64),
        g_down=np.array([m.spine_down[(int(head[k[3]]), k[1])] for k in g_keys], dtype=np.int64),
        g_group=g_group,
        g_size=np.bincount(g_group, minlength=n_a),
        a_src_leaf=np.array([m.leaf_at[(q, pl)] for q, _p, pl in a_keys], dtype=np.int64),
        a_dst_leaf=np.array([m.leaf_at[(p, pl)] for _q, p, pl in a_keys], dtype=np.int64),
        a_src_pp=np.array([pp[(q, pl)] for q, _p, pl in a_keys], dtype=np.int64),
        a_dst_pp=np.array([pp[(p, pl)] for _q, p, pl in a_keys], dtype=np.int64),
        tor_arcs=np.array([arc for _k, arc in tor_items], dtype=np.int64),
        tor_pp=np.array([pp[(m.tor_pod[t], pl)] for (t, pl), _arc in tor_items], dtype=np.int64),
        n_pp=len(pp),
    )


def scenario_losses(m: PodModel, devices: Iterable[str], links: Iterable[str], ix: _Index | None = None
                    ) -> LossFamily:
    """The plane and spine sets one scenario takes from each group, in either replay stage.

    Immediate stage (local repair): a ToR loses the planes whose uplink or leaf
    failed; a leaf the spines whose link or device failed. Reconverged (BGP
    withdrawal): also the spines whose one route down to the destination pod
    failed, and a pair's plane when the destination leaf, a destination ToR's
    link to it, or every spine of the source leaf's group is gone. Per pair the
    sets are the union over its ToRs (an over-approximation, which stays sound).
    Leaf groups are only listed while their leaf can still carry traffic there.
    """
    ix = ix or _index(m)
    fab = m.fab
    dev_dead = np.zeros(fab.n, dtype=bool)
    for d in devices:
        dev_dead[fab.index[d]] = True
    keys = set(links)
    link_dead = np.array([lk.key in keys for lk in fab.intent.links], dtype=bool)
    arc_dead = np.repeat(link_dead, 2) | dev_dead[fab.arc_tail] | dev_dead[fab.arc_head]
    fam = LossFamily({}, {})
    n_a = len(ix.a_keys)
    imm_g = arc_dead[ix.g_up]
    rec_g = imm_g | arc_dead[ix.g_down]
    cnt = np.bincount(ix.g_group, weights=rec_g, minlength=n_a)
    all_rec = (ix.g_size > 0) & (cnt >= ix.g_size)
    tor_dead = np.bincount(ix.tor_pp, weights=arc_dead[ix.tor_arcs], minlength=ix.n_pp) > 0
    src_gone = dev_dead[ix.a_src_leaf] | tor_dead[ix.a_src_pp]
    dst_gone = dev_dead[ix.a_dst_leaf] | tor_dead[ix.a_dst_pp]
    for lost in (src_gone, src_gone | dst_gone | all_rec):
        per: dict[Pair, set[int]] = {}
        for i in np.flatnonzero(lost):
            q, p, pl = ix.a_keys[i]
            per.setdefault((q, p), set()).add(pl)
        for k, planes in per.items():
            fam.planes.setdefault(k, set()).add(frozenset(planes))
    leaf_alive = ~dev_dead[ix.a_src_leaf]
    for lost, live in ((imm_g, leaf_alive), (rec_g, leaf_alive & ~dev_dead[ix.a_dst_leaf] & ~all_rec)):
        per_g: dict[Group, set[int]] = {}
        for col in np.flatnonzero(lost):
            gi = int(ix.g_group[col])
            if live[gi]:
                per_g.setdefault(ix.a_keys[gi], set()).add(int(ix.g_up[col]))
        for g, arcs in per_g.items():
            fam.spines.setdefault(g, set()).add(frozenset(arcs))
    return fam


def protected_losses(intent: Intent, m: PodModel, ix: _Index | None = None) -> dict[str, LossFamily]:
    """Every loss set the intent's scenarios can take, by class (see the module docstring)."""
    ix = ix or _index(m)
    pol = intent.policy("failure_tolerance")
    scope = str(pol.scope) if pol is not None else "domains"
    out = {c: LossFamily({}, {}) for c in CLASSES}

    def add(fam: LossFamily) -> None:
        if fam.kind:
            out[fam.kind].add(fam)

    if scope == "all_single":
        for pq in m.d_qp:
            out["planes"].planes.setdefault(pq, set()).update(frozenset({pl}) for pl in m.allowed_planes[pq])
        spines = {int(m.fab.arc_head[arc]) for (_q, _p, _pl, arc) in m.g_col}
        for v in sorted(spines):
            add(scenario_losses(m, (m.fab.names[v],), (), ix))
        leaf_spine = {m.fab.intent.links[arc // 2].key for (_q, _p, _pl, arc) in m.g_col}
        leaf_spine |= {m.fab.intent.links[arc // 2].key for arc in m.spine_down.values()}
        for key in sorted(leaf_spine):
            add(scenario_losses(m, (), (key,), ix))
    domains = [(frozenset(fd.devices), frozenset(intent.link_by_end[e].key for e in fd.links
                                                  if e in intent.link_by_end)) for fd in intent.failure_domains]
    for devs, links in domains:
        add(scenario_losses(m, devs, links, ix))
    if scope == "k2":
        for (d1, l1), (d2, l2) in itertools.combinations(domains, 2):
            add(scenario_losses(m, d1 | d2, l1 | l2, ix))
    return out


@dataclasses.dataclass
class _Rows:
    """One class's protected sets reduced to what the LP needs, and its largest set per group."""

    planes: dict[Pair, list[frozenset[int]]]
    spines: dict[Group, list[frozenset[int]]]
    k_plane: dict[Pair, int]
    k_spine: dict[Group, int]


def _rows(m: PodModel, fam: LossFamily) -> _Rows:
    planes: dict[Pair, list[frozenset[int]]] = {}
    k_plane: dict[Pair, int] = {}
    for pq in m.d_qp:
        allowed = frozenset(m.allowed_planes[pq])
        keep = sorted({s & allowed for s in fam.planes.get(pq, ())} - {frozenset(), allowed}, key=sorted)
        planes[pq] = keep
        k_plane[pq] = max((len(s) for s in keep), default=0)
    spines: dict[Group, list[frozenset[int]]] = {}
    k_spine: dict[Group, int] = {}
    for g, arcs in m.allowed_spines.items():
        if g in m.a_col:
            allowed = frozenset(arcs)
            keep = sorted({s & allowed for s in fam.spines.get(g, ())} - {frozenset(), allowed}, key=sorted)
            spines[g] = keep
            k_spine[g] = max((len(s) for s in keep), default=0)
    return _Rows(planes, spines, k_plane, k_spine)


def _kappas(m: PodModel, rows: _Rows, t1: float, t2: float) -> tuple[np.ndarray, np.ndarray]:
    """Per ``a`` column: ``kappa1`` of its pair and ``kappa2`` of its leaf group (see the module docstring)."""
    k1 = np.ones(len(m.a_col))
    k2 = np.ones(len(m.a_col))
    for (q, p, pl), ac in m.a_col.items():
        n = len(m.allowed_planes[(q, p)])
        k = rows.k_plane.get((q, p), 0)
        k1[ac] = t1 * n / (n - k) if k else 1.0
        arcs = m.allowed_spines.get((q, p, pl), ())
        kj = rows.k_spine.get((q, p, pl), 0)
        k2[ac] = t2 * len(arcs) / (len(arcs) - kj) if kj else 1.0
    return k1, k2


@dataclasses.dataclass
class ClosCandidate:
    """One robust plan: its grid point, the certificate at its rounded splits, and how to build the plan."""

    t: tuple[float, float]
    reserved_mlu: float  # the certificate: worst utilization any protected scenario can cause
    baseline_mlu: float
    excess: float  # the LP's allocation excess over the limit (0: the LP met it)
    build: Callable[[], Plan] = dataclasses.field(repr=False)
    arc_reserved: np.ndarray = dataclasses.field(repr=False)  # the certificate per arc (utilization)

    def plan(self) -> Plan:
        """The device plans and link loads (built on demand: a plan of a large fabric is not small)."""
        return self.build()


class _Builder:
    """Sparse rows over ``[a, g, U, e]`` with their bounds."""

    def __init__(self, n_cols: int) -> None:
        self.n_cols = n_cols
        self.blocks: list[sp.csr_matrix] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []
        self.bl: list[float] = []
        self.bu: list[float] = []

    def row(self, entries: Iterable[tuple[int, float]], lo: float, hi: float) -> None:
        i = len(self.bl)
        for col, val in entries:
            self.r.append(i)
            self.c.append(col)
            self.v.append(val)
        self.bl.append(lo)
        self.bu.append(hi)

    def block(self, a: sp.spmatrix, lo: np.ndarray, hi: np.ndarray) -> None:
        self.blocks.append(sp.csr_matrix(a))
        self.lo.append(lo)
        self.hi.append(hi)

    def matrix(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        small = sp.csr_matrix((self.v, (self.r, self.c)), shape=(len(self.bl), self.n_cols))
        return (sp.vstack([small, *self.blocks]).tocsr(), np.concatenate([np.asarray(self.bl), *self.lo]),
                np.concatenate([np.asarray(self.bu), *self.hi]))


def _lp(m: PodModel, ix: _Index, classes: list[tuple[_Rows, np.ndarray, np.ndarray]], limit: float,
        cap_res: np.ndarray, tor_budget: dict[int, int], backend: str, options: RobustOptions
        ) -> tuple[np.ndarray, float, float]:
    """Baseline flows ``[a, g]`` (gbps), the baseline MLU and the allocation excess (module docstring)."""
    n_a, n_g = len(m.a_col), len(m.g_col)
    n = n_a + n_g
    u_col, e_col = n, n + 1
    s = m.scale
    b = _Builder(n + 2)
    for (q, p), d in m.d_qp.items():  # sum_l a = D
        b.row(((m.a_col[(q, p, pl)], 1.0) for pl in m.allowed_planes[(q, p)]), d / s, d / s)
    for g, arcs in m.allowed_spines.items():  # sum_j g = a
        if g in m.a_col:
            b.row([*((m.g_col[(*g, arc)], 1.0) for arc in arcs), (m.a_col[g], -1.0)], 0.0, 0.0)
    for rows, k1, k2 in classes:  # what a protected set takes stays within what kappa allows
        for (q, p), sets in rows.planes.items():
            top = m.d_qp[(q, p)] / s * (1.0 - 1.0 / k1[m.a_col[(q, p, m.allowed_planes[(q, p)][0])]])
            for lost in sets:
                b.row(((m.a_col[(q, p, pl)], 1.0) for pl in lost), -np.inf, top)
        for g, sets in rows.spines.items():
            ac = m.a_col[g]
            for lost in sets:
                b.row([*((m.g_col[(*g, arc)], 1.0) for arc in lost), (ac, -(1.0 - 1.0 / k2[ac]))], -np.inf, 0.0)
    used = np.flatnonzero(np.diff(m.load_matrix.indptr) > 0)
    lm = m.load_matrix[used]
    rng = np.arange(len(used))
    pad = sp.csr_matrix((len(used), 2))

    def with_col(a: sp.spmatrix, col: int, vals: np.ndarray) -> sp.csr_matrix:
        return (sp.hstack([a, pad]).tocsr()
                + sp.csr_matrix((vals, (rng, np.full(len(used), col))), shape=(len(used), n + 2))).tocsr()

    cap = m.fab.arc_cap[used] / s
    b.block(with_col(lm, u_col, -cap), np.full(len(used), -np.inf), np.zeros(len(used)))
    for _rows_c, k1, k2 in classes:
        scale = sp.diags(np.concatenate([k1, k1[ix.g_group] * k2[ix.g_group]]))
        b.block(with_col(lm @ scale, e_col, -cap_res[used] / s), np.full(len(used), -np.inf),
                limit * (1 - options.clos_margin) * cap_res[used] / s)
    col_lb = np.zeros(n + 2)
    for (q, p), d in m.d_qp.items():  # every plane keeps one unit of the ToR's budget
        planes = m.allowed_planes[(q, p)]
        if len(planes) >= 2:
            for pl in planes:
                col_lb[m.a_col[(q, p, pl)]] = d / (tor_budget[q] * s)
    c = np.zeros(n + 2)
    c[u_col] = 1.0
    c[e_col] = options.clos_penalty
    a, lo, hi = b.matrix()
    res = solve_lp(c, a, lo, hi, col_lb, np.full(n + 2, np.inf), backend="pdlp" if backend == "auto" else backend)
    return np.maximum(res.x[:n], 0.0) * s, float(res.x[u_col]), float(max(res.x[e_col], 0.0))


@dataclasses.dataclass
class _Weights:
    tor: dict[Pair, tuple[tuple[int, int], ...]]  # (q, p) -> (plane, weight)
    leaf: dict[Group, tuple[tuple[int, int], ...]]  # (q, p, l) -> (spine arc, weight)


def _round(m: PodModel, x: np.ndarray, budgets: tuple[dict[int, int], dict[int, int]]) -> _Weights:
    """Integer weights for the splits ``x`` (equal where nothing flows); every member keeps weight >= 1."""
    tor_budget, leaf_budget = budgets
    cache: dict[tuple[tuple[float, ...], int], tuple[int, ...]] = {}

    def reduce(vals: list[float], budget: int) -> tuple[int, ...]:
        tot = sum(vals)
        if len(vals) == 1 or tot <= 0:
            return (1,) * len(vals)
        key = (tuple(round(v / tot, 9) for v in vals), budget)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = tuple(reduce_weights(list(key[0]), max(budget, len(vals))))
        return hit

    tor: dict[Pair, tuple[tuple[int, int], ...]] = {}
    for (q, p), planes in m.allowed_planes.items():
        if planes:
            vals = [float(x[m.a_col[(q, p, pl)]]) if (q, p, pl) in m.a_col else 0.0 for pl in planes]
            tor[(q, p)] = tuple(zip(planes, reduce(vals, tor_budget[q]), strict=True))
    leaf: dict[Group, tuple[tuple[int, int], ...]] = {}
    for g, arcs in m.allowed_spines.items():
        vals = [float(x[m.g_col[(*g, arc)]]) if (*g, arc) in m.g_col else 0.0 for arc in arcs]
        leaf[g] = tuple(zip(arcs, reduce(vals, leaf_budget[m.leaf_at[(g[0], g[2])]]), strict=True))
    return _Weights(tor, leaf)


def _amplify(shares: dict[int, float], sets: list[frozenset[int]]) -> dict[int, float]:
    """Per member, the largest factor a protected set's loss multiplies its share by."""
    out = dict.fromkeys(shares, 1.0)
    for lost in sets:
        left = 1.0 - sum(shares[k] for k in lost)
        for k in shares:
            if k not in lost and left > 0:
                out[k] = max(out[k], 1.0 / left)
    return out


def certificate(m: PodModel, rows: _Rows, w: _Weights) -> tuple[np.ndarray, np.ndarray]:
    """Per arc, for one class: the worst load its protected sets can put there at the rounded
    splits ``w`` (the tightest allocations of those splits), and the baseline load."""
    reserved = np.zeros(m.n_vars)
    base = np.zeros(m.n_vars)
    for (q, p), d in m.d_qp.items():
        mem = w.tor[(q, p)]
        tot = sum(wi for _pl, wi in mem)
        r = {pl: wi / tot for pl, wi in mem}
        amp = _amplify(r, rows.planes[(q, p)])
        for pl, share in r.items():
            ac = m.a_col[(q, p, pl)]
            reserved[ac] = d * share * amp[pl]
            base[ac] = d * share
    for g, mem in w.leaf.items():
        gac = m.a_col.get(g)
        if gac is None:
            continue
        tot = sum(wi for _arc, wi in mem)
        rho = {arc: wi / tot for arc, wi in mem}
        amp = _amplify(rho, rows.spines[g])
        for arc, share in rho.items():
            gc = m.g_col[(*g, arc)]
            reserved[gc] = reserved[gac] * share * amp[arc]
            base[gc] = base[gac] * share
    return m.loads(reserved), m.loads(base)


def _port(h: NextHop) -> str:
    return h.port


def _plan(intent: Intent, m: PodModel, w: _Weights, loads: np.ndarray, summary: PlanSummary) -> Plan:
    """The device plans of weights ``w`` (routes as :mod:`solver.clos.plan` lays them out) and link loads."""
    fab = m.fab
    names, port, head = fab.names, fab.arc_port, fab.arc_head
    prefix_tor = [(pf.prefix, fab.index[pf.origins[0]]) for pf in intent.prefixes]
    devices: dict[str, DevicePlan] = {}
    n_groups = n_routes = 0
    for v, name in enumerate(names):
        gids: dict[tuple[NextHop, ...], str] = {}

        def gid(members: Iterable[tuple[int, int]], gids: dict[tuple[NextHop, ...], str] = gids) -> str:
            hops = tuple(sorted((NextHop(port[a], names[int(head[a])], wt) for a, wt in members),
                                key=_port))
            return gids.setdefault(hops, f"g{len(gids) + 1}")

        routes: dict[str, str] = {}
        role = intent.devices[v].role
        for prefix, t in prefix_tor:
            p = m.tor_pod[t]
            if role == Role.TOR:
                mem = w.tor.get((m.tor_pod[v], p))
                if t != v and mem:
                    routes[prefix] = gid((m.tor_arc[(v, pl)], wt) for pl, wt in mem)
            elif role == Role.LEAF:
                q, pl = m.leaf_pp[v]
                if p == q:
                    routes[prefix] = gid([(m.down_arc[(v, t)], 1)])
                elif (q, p, pl) in w.leaf:
                    routes[prefix] = gid(w.leaf[(q, p, pl)])
            else:
                arc = m.spine_down.get((v, p))
                if arc is not None:
                    routes[prefix] = gid([(arc, 1)])
        devices[name] = DevicePlan({g: h for h, g in gids.items()}, routes)
        n_groups += len(gids)
        n_routes += len(routes)
    util = loads / fab.arc_cap
    links = tuple(LinkLoad(lk.a, lk.a_port, lk.b, lk.b_port, float(loads[2 * i]), float(loads[2 * i + 1]),
                           float(max(util[2 * i], util[2 * i + 1]))) for i, lk in enumerate(intent.links))
    return Plan(intent.name, dataclasses.replace(summary, groups=n_groups, routes=n_routes), devices, links)


@dataclasses.dataclass
class _Setup:
    """What every grid point of :func:`clos_robust` shares."""

    intent: Intent
    m: PodModel
    ix: _Index
    rows: list[_Rows]  # per class with protected sets
    budgets: tuple[dict[int, int], dict[int, int]]
    used: np.ndarray  # arcs that carry anything
    ecmp_mlu: float
    t0: float


def _setup(intent: Intent, m: PodModel, t0: float) -> _Setup:
    ix = _index(m)
    fams = protected_losses(intent, m, ix)
    rows = [_rows(m, fams[c]) for c in CLASSES if fams[c].planes or fams[c].spines]
    ecmp_mlu = float((m.loads(m.ecmp_x()) / m.fab.arc_cap).max(initial=0.0))
    return _Setup(intent, m, ix, rows, pod_budgets(m), np.diff(m.load_matrix.indptr) > 0, ecmp_mlu, t0)


def _candidate(st: _Setup, t: tuple[float, float], w: _Weights, u: float, excess: float) -> ClosCandidate:
    """The candidate of rounded weights ``w``: its certificate per class, worst over the classes."""
    m, fab = st.m, st.m.fab
    res_load = np.zeros(fab.n_arcs)
    base_load = certificate(m, _rows(m, LossFamily({}, {})), w)[1]
    for r in st.rows:
        np.maximum(res_load, certificate(m, r, w)[0], out=res_load)
    res_util = np.where(st.used, res_load / fab.arc_cap, 0.0)
    reserved = float(res_util.max(initial=0.0))
    baseline = float((base_load / fab.arc_cap).max(initial=0.0))
    extra = {"lp_model": "clos-pods-robust", "t": [t[0], t[1]], "reserved_mlu": round(reserved, 6)}
    summary = PlanSummary(max_utilization=baseline, lp_bound=u, ecmp_max_utilization=st.ecmp_mlu,
                          solve_seconds=time.perf_counter() - st.t0, groups=0, routes=0, extra=extra)
    return ClosCandidate(t, reserved, baseline, excess, functools.partial(_plan, st.intent, m, w, base_load, summary),
                         res_util)


def _grid_point(st: _Setup, t: tuple[float, float], limit: float, derate_rounds: int, backend: str,
                options: RobustOptions) -> list[ClosCandidate]:
    """The candidates of one grid point: the LP, then LPs with the arcs over the limit derated."""
    m = st.m
    classes = [(r, *_kappas(m, r, t[0], t[1])) for r in st.rows]
    cap_res = m.fab.arc_cap.astype(np.float64).copy()
    out: list[ClosCandidate] = []
    for _round_no in range(derate_rounds + 1):
        try:
            x, u, excess = _lp(m, st.ix, classes, limit, cap_res, st.budgets[0], backend, options)
        except Infeasible:
            break
        cand = _candidate(st, t, _round(m, x, st.budgets), u, excess)
        out.append(cand)
        res_util = cand.arc_reserved
        over = res_util > limit
        if not over.any() or excess > options.clos_margin * limit + 1e-6:  # derating cannot help an LP over the limit
            break
        cap_res[over] *= limit / res_util[over] * (1 - options.clos_margin)
    return out


def clos_robust(intent: Intent, limit: float, *, backend: str = DEFAULT_BACKEND,
                grid: Iterable[tuple[float, float]] | None = None, derate_rounds: int | None = None,
                baseline_floor: float | None = None, progress: Progress | None = None,
                options: RobustOptions = RobustOptions()) -> list[ClosCandidate] | None:
    """Robust plans of a clean Clos, best first, or ``None`` when the fabric is not one.

    Parameters
    ----------
    intent : a validated intent (its ``failure_tolerance`` scope and domains set the loss sets).
    limit : the utilization every protected scenario must stay under.
    backend : the LP backend (:func:`solver.core.lp.solve_lp`).
    grid : the ``(t1, t2)`` over-provisioning factors to try (see the module docstring;
        default ``options.clos_grid``).
    derate_rounds : LPs per grid point after the first, with the arcs whose rounded
        certificate exceeds the limit derated (default ``options.clos_derate_rounds``).
    baseline_floor : the min-MLU bound without robustness (the plain plan's LP
        bound), if known: a certified candidate within ``options.clos_floor_slack`` of it
        ends the search, since no grid point can do better.
    progress : called as ``progress(stage, fraction)``.
    options : the robust knobs (:class:`solver.core.options.RobustOptions`).

    Returns
    -------
    One :class:`ClosCandidate` per grid point that solved: those whose
    certificate meets ``limit`` first, by baseline MLU, then the rest by
    certificate. Each plan's ``summary.max_utilization`` is its baseline MLU.

    Raises
    ------
    controller.model.errors.Infeasible : a demand cannot be routed at all.

    Example
    -------
    >>> from controller.gen import clos_document
    >>> from controller.model.intent import validate_intent
    >>> doc = clos_document(pods=2, tors=2, planes=3, spines=3, seed=1)
    >>> doc["policies"].append({"kind": "failure_tolerance", "scope": "all_single", "max_utilization": 1.0})
    >>> best = clos_robust(validate_intent(doc), 1.0)[0]
    >>> best.reserved_mlu <= 1.0, round(best.baseline_mlu, 2)
    (True, 0.5)
    """
    t0 = time.perf_counter()
    say: Progress = progress or (lambda stage, frac: None)
    if not intent.wcmp_enabled or intent.drained_devices or intent.drained_links:
        return None  # the loss families below are those of a drain-free fabric: drains take the generic path
    m = build_pod_model(build_fabric(intent))
    if m is None:
        return None
    st = _setup(intent, m, t0)
    points = list(options.clos_grid if grid is None else grid)
    rounds = options.clos_derate_rounds if derate_rounds is None else derate_rounds
    out: list[ClosCandidate] = []
    for gi, t in enumerate(points):
        say("robust", gi / len(points))
        out += _grid_point(st, t, limit, rounds, backend, options)
        if baseline_floor is not None and any(c.reserved_mlu <= limit and c.baseline_mlu <= baseline_floor *
                                              (1 + options.clos_floor_slack) for c in out):
            break
    say("robust", 1.0)
    ok = sorted((c for c in out if c.reserved_mlu <= limit + 1e-9), key=lambda c: c.baseline_mlu)
    rest = sorted((c for c in out if c.reserved_mlu > limit + 1e-9), key=lambda c: (c.reserved_mlu, c.baseline_mlu))
    return ok + rest
