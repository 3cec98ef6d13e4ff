"""A failure reaction's plan made from the full plan: only the leaf groups a failed leaf-spine link touches move.

A failure reaction plans the active revision around a few failed parts
(:mod:`controller.operations.overlay`). When the parts are leaf-spine links of a
clean Clos whose full plan this process compiled (:class:`~solver.clos.plan.Solved`
kept by :func:`remember`), the plan BGP leaves open around them differs from the
full one in few places: leaf ``(q, l)`` loses a spine toward every other pod, the
spine loses its route to pod ``q`` (its one link down to the pod's plane), so
every other pod's leaf of plane ``l`` loses that spine toward pod ``q``; planes
and ToRs keep every route. :func:`reaction_plan` re-splits just those leaf
groups: a small LP (HiGHS) over their surviving spines, their traffic into the
plane (the full plan's rounded ToR splits) fixed, every other group's load on the
arcs they share fixed as background, minimizing the largest utilization of those
arcs (each spine keeps its least share under link-bandwidth); then integer weights
per group within the leaf's budget (:func:`solver.core.weights.reduce_weights`),
the loads of the rounded splits from the model's load rows, and the plan: the full
plan's devices, groups and link loads with those of the changed leaves, spines and
links replaced. ToRs keep their splits over planes, so the result can be above the
optimum of the degraded fabric (the cold LP also moves traffic between planes);
the full plan's LP optimum stays a lower bound of it (``lp_bound``).

Anything else (a device, a ToR link, a group left without a spine, a plan this
process did not compile cold, the robust or job objectives) returns ``None``: the
caller compiles the reduced intent instead.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from controller.model import Intent
from controller.model.plan import LinkLoad, Plan
from solver.clos.model import PodModel, pod_budgets
from solver.clos.plan import Solved, split_weights
from solver.core.lp import solve_lp_lex
from solver.core.options import ReactOptions
from solver.core.weights import cached_reducer

__all__ = ["KEPT", "Kept", "kept_model", "reaction_plan", "remember"]

log = logging.getLogger("loom.solver.react")


@dataclass
class _Entry:
    intent: Intent  # as written: the plan's
    plan: weakref.ref[Plan]
    solved: Solved
    arcs: dict[tuple[str, str], int] = field(default_factory=dict)  # (tail, port) -> arc, filled on first use
    written: dict[str, int] = field(default_factory=dict)  # link id -> position in plan.links


class Kept:
    """What the cold Clos plans still alive were made of, by plan (thread-safe): an entry goes with its plan
    (a weak reference), and beyond ``size`` plans alive the oldest entries go."""

    def __init__(self, size: int = 8) -> None:
        self._lock = threading.Lock()
        self._size = size
        self._by: OrderedDict[int, _Entry] = OrderedDict()

    def put(self, intent: Intent, plan: Plan, solved: Solved) -> None:
        key = id(plan)

        def gone(_ref: object) -> None:
            with self._lock:
                got = self._by.get(key)
                if got is not None and got.plan() is None:
                    del self._by[key]

        with self._lock:
            self._by[key] = _Entry(intent, weakref.ref(plan, gone), solved)
            self._by.move_to_end(key)
            while len(self._by) > self._size:
                self._by.popitem(last=False)

    def get(self, intent: Intent, plan: Plan) -> _Entry | None:
        """The entry of ``plan`` as compiled from ``intent`` (None when not kept)."""
        with self._lock:
            got = self._by.get(id(plan))
        return got if got is not None and got.plan() is plan and got.intent is intent else None

    def of_plan(self, plan: Plan) -> _Entry | None:
        """The entry of ``plan``, whatever intent it was compiled from (None when not kept)."""
        with self._lock:
            got = self._by.get(id(plan))
        return got if got is not None and got.plan() is plan else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._by)

    def clear(self) -> None:
        with self._lock:
            self._by.clear()


#: this process's cold Clos plans
KEPT = Kept()


def kept_model(intent: Intent, like: Plan) -> PodModel | None:
    """The pod model ``like`` (a cold Clos plan of this process) was made of, when ``intent`` is ``like``'s
    intent but for its links' capacities (the model's routes and demands hold for it: only its arcs'
    capacities are ``intent``'s, :meth:`~solver.clos.model.PodModel.with_fabric`); else None."""
    entry = KEPT.of_plan(like)
    if entry is None or not _capacities_only(entry.intent, intent):
        return None
    return entry.solved.model


def _capacities_only(a: Intent, b: Intent) -> bool:
    """Whether intents ``a`` and ``b`` differ at most in their links' capacities (a copy of ``a`` with other
    links shares its other fields: those compare by identity first)."""
    for name in type(a).model_fields:
        x, y = getattr(a, name), getattr(b, name)
        if name != "links" and x is not y and x != y:
            return False
    if len(a.links) != len(b.links):
        return False
    return all(la is lb or {**la.__dict__, "capacity_gbps": 0} == {**lb.__dict__, "capacity_gbps": 0}
               for la, lb in zip(a.links, b.links, strict=True))


def remember(intent: Intent, plan: Plan, solved: Solved) -> None:
    """Keep what ``plan`` (of ``intent``, compiled cold) was made of, for :func:`reaction_plan`."""
    KEPT.put(intent, plan, solved)


def _failed_arcs(entry: _Entry, links: Iterable[str]) -> np.ndarray | None:
    """Both arcs of each failed link, or None when one is not a leaf-spine link of the model."""
    s = entry.solved
    fab, m = s.model.fab, s.model
    if not entry.arcs:
        entry.arcs = {(fab.names[int(t)], p): a
                      for a, (t, p) in enumerate(zip(fab.arc_tail.tolist(), fab.arc_port, strict=True))}
    out: list[int] = []
    for lid in links:
        dev, _, port = lid.rpartition(":")
        arc = entry.arcs.get((dev, port))
        if arc is None:
            return None
        ends = (int(fab.arc_tail[arc]), int(fab.arc_head[arc]))
        if sum(v in m.leaf_pp for v in ends) != 1 or any(v in m.tor_pod for v in ends):
            return None  # a ToR's link, or not between a leaf and a spine
        out += [arc, arc ^ 1]
    return np.array(sorted(set(out)), dtype=np.int64)


@dataclass(frozen=True)
class _Scope:
    """What a failure moves: every plane of each pod pair one of whose leaf groups lost a spine (``pairs``),
    their ``a`` columns (``a_cols``), the ``g`` columns of those (``g_cols``, with ``alive``: neither arc
    failed), which ``a`` columns lost a spine (``touched``, whose surviving ``g`` columns are the LP's) and the
    share of every ``g`` column of the others in its ``a`` (``ratio``: the full plan's leaf weights, kept)."""

    pairs: list[tuple[int, int]]
    a_cols: np.ndarray
    g_cols: np.ndarray
    alive: np.ndarray
    touched: np.ndarray  # bool per a column of a_cols
    ratio: np.ndarray  # per g column of g_cols (0 for a touched one's)


def _scope(s: Solved, failed: np.ndarray, every: bool = False) -> _Scope | None:
    """What ``failed`` moves; with ``every``, every leaf group of the pairs is the LP's (not only the touched)."""
    m = s.model
    up, down = m.g_arcs()
    dead = np.isin(up, failed) | np.isin(down, failed)
    keys = list(m.a_col)
    hit = np.unique(m.g_owner()[np.flatnonzero(dead)])
    pairs = sorted({keys[k][:2] for k in hit.tolist()})
    a_cols = np.array(sorted(m.a_col[(q, p, pl)] for q, p in pairs for pl in m.allowed_planes[(q, p)]),
                      dtype=np.int64)
    first, counts = m.g_col.first, m.g_col.counts
    g_cols = np.concatenate([np.arange(first[k], first[k] + counts[k]) for k in a_cols.tolist()] or
                            [np.zeros(0, dtype=np.int64)])
    n_a = len(m.a_col)
    alive = ~dead[g_cols - n_a]
    owner = m.g_owner()[g_cols - n_a]
    if np.setdiff1d(a_cols, owner[alive]).size:
        return None  # a plane left without a spine toward a pod: BGP's routes change (the whole LP)
    touched = np.ones(len(a_cols), dtype=bool) if every else np.isin(a_cols, hit)
    ratio = np.zeros(len(g_cols))
    at = 0
    for k, t in zip(a_cols.tolist(), touched.tolist(), strict=True):
        n = int(counts[k])
        if not t:
            q, p, pl = keys[k]
            w = dict(s.leaf_w.get((m.leaf_at[(q, pl)], p)) or ())
            got = np.array([w.get(int(a), 0) for a in up[g_cols[at:at + n] - n_a]], dtype=np.float64)
            ratio[at:at + n] = got / got.sum() if got.sum() > 0 else 1.0 / n
        at += n
    return _Scope(pairs, a_cols, g_cols, alive, touched, ratio)


def _resplit(s: Solved, sc: _Scope, options: ReactOptions) -> tuple[np.ndarray, float, float]:
    """The variables with ``sc``'s ``a`` columns and touched groups split again (gbps, not rounded): the
    largest utilization of the arcs they load at its least, every other load fixed as background, then the
    ``a`` columns moved as little as that allows (the others keep the full plan's rounding); also that
    utilization and the LP seconds. Capacity rows are added lazily (the hottest arcs first, then any the
    answer overloads)."""
    m = s.model
    cap = m.fab.arc_cap
    n_a, na = len(m.a_col), len(sc.a_cols)
    pos = {int(k): i for i, k in enumerate(sc.a_cols.tolist())}
    g_owner = np.array([pos[int(k)] for k in m.g_owner()[sc.g_cols - n_a].tolist()], dtype=np.int64)
    free = sc.touched[g_owner] & sc.alive  # the LP's g columns
    fixed = ~sc.touched[g_owner]
    live = sc.g_cols[free]
    ng = len(live)
    n = na + ng + 1 + na  # a, g, U, |a - a0|
    u_col = na + ng
    lm = m.load_matrix.tocsc()
    sub = sp.hstack([lm[:, sc.a_cols] + lm[:, sc.g_cols[fixed]] @ sp.csr_matrix(
        (sc.ratio[fixed], (np.arange(int(fixed.sum())), g_owner[fixed])), shape=(int(fixed.sum()), na)),
        lm[:, live]]).tocsr()
    moved = np.concatenate([sc.a_cols, sc.g_cols])
    base = m.loads(s.x_round)
    background = base - m.loads(_only(s.x_round, moved))
    loaded = np.flatnonzero(np.diff(sub.indptr) > 0)
    util0 = base / cap
    rest = float(np.delete(util0, loaded).max(initial=0.0))  # the arcs the LP leaves alone
    owner = g_owner[free]
    fixed_rows = _fixed_rows(s, sc, owner, n)
    rows = np.zeros(m.fab.n_arcs, dtype=bool)
    rows[np.unique(sub[:, na:].tocsc().indices)] = True  # the touched groups' own arcs
    rows[loaded[util0[loaded] >= options.hot_rows * util0[loaded].max(initial=0.0)]] = True
    seconds = 0.0
    while True:
        arcs = np.flatnonzero(rows)
        cap_rows = sp.hstack([sp.diags(1.0 / cap[arcs]) @ sub[arcs], -np.ones((len(arcs), 1)),
                              sp.csr_matrix((len(arcs), na))])
        a = sp.vstack([cap_rows, fixed_rows[0]]).tocsr()
        lo = np.concatenate([np.full(len(arcs), -np.inf), fixed_rows[1]])
        hi = np.concatenate([-background[arcs] / cap[arcs], fixed_rows[2]])
        col_lb = fixed_rows[3].copy()
        col_lb[u_col] = rest  # no arc need end below the ones left alone: the LP leaves those rows slack
        then = np.zeros(n)
        then[u_col + 1:] = 1.0  # then the a columns moved as little as that allows
        c = np.zeros(n)
        c[u_col] = 1.0
        first, second = solve_lp_lex(c, then, u_col, a, lo, hi, col_lb, np.full(n, np.inf), backend="highs",
                                     slack=options.slack)
        u = float(first.x[u_col])
        seconds += first.seconds + second.seconds
        log.debug("reaction LP: %d capacity rows of %d, %d columns", len(arcs), len(loaded), n)
        vals = np.maximum(second.x, 0.0)
        util = (background + sub @ vals[:na + ng]) / cap
        over = ~rows & (util > vals[u_col] * (1 + 1e-9) + 1e-12)
        if not over.any():
            break
        rows |= over | (util >= options.hot_rows * vals[u_col])
    x = s.x_round.copy()
    x[sc.a_cols] = vals[:na]
    x[sc.g_cols] = 0.0
    x[sc.g_cols[fixed]] = vals[g_owner[fixed]] * sc.ratio[fixed]
    x[live] = vals[na:na + ng]
    return x, u, seconds


def _fixed_rows(s: Solved, sc: _Scope, owner: np.ndarray, n: int
                ) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray]:
    """The LP's rows other than capacity (each pair's planes carry its demand, each touched ``a`` its surviving
    spines, least shares under link-bandwidth, ``d >= |a - a0|``) with their bounds, and the columns' least
    values."""
    m = s.model
    na, ng = len(sc.a_cols), len(owner)
    keys = list(m.a_col)
    a_keys = [keys[k] for k in sc.a_cols.tolist()]
    pair_of = {pr: i for i, pr in enumerate(sc.pairs)}
    pair_rows = sp.csr_matrix((np.ones(na), ([pair_of[k[:2]] for k in a_keys], np.arange(na))),
                              shape=(len(sc.pairs), n))
    demand = np.bincount([pair_of[k[:2]] for k in a_keys], weights=s.x_round[sc.a_cols], minlength=len(sc.pairs))
    t = np.flatnonzero(sc.touched)
    t_pos = np.full(na, -1, dtype=np.int64)
    t_pos[t] = np.arange(len(t))
    grp_rows = sp.csr_matrix((np.concatenate([np.ones(ng), -np.ones(len(t))]),
                              (np.concatenate([t_pos[owner], np.arange(len(t))]),
                               np.concatenate([na + np.arange(ng), t]))), shape=(len(t), n))
    a0 = s.x_round[sc.a_cols]
    dev = sp.vstack([sp.hstack([sp.identity(na), sp.csr_matrix((na, ng + 1)), sp.identity(na)]),
                     sp.hstack([-sp.identity(na), sp.csr_matrix((na, ng + 1)), sp.identity(na)])])
    rows = [pair_rows, grp_rows, dev]
    hi = [demand, np.zeros(len(t)), np.full(2 * na, np.inf)]
    lo = [demand, np.zeros(len(t)), np.concatenate([a0, -a0])]
    col_lb = np.zeros(n)
    if s.share is not None:  # link-bandwidth: least shares of planes, and of spines in groups of two or more
        col_lb[:na] = _least_planes(s, sc)
        many = np.bincount(owner, minlength=na) >= 2
        phi = np.array([s.share[m.leaf_at[(k[0], k[2])]] for k in a_keys])
        idx = np.flatnonzero(many[owner])
        rows.append(sp.csr_matrix((np.concatenate([np.ones(len(idx)), -phi[owner[idx]]]),
                                   (np.concatenate([np.arange(len(idx))] * 2), np.concatenate([na + idx, owner[idx]]))),
                                  shape=(len(idx), n)))
        lo.append(np.zeros(len(idx)))
        hi.append(np.full(len(idx), np.inf))
    return sp.vstack(rows).tocsr(), np.concatenate(lo), np.concatenate(hi), col_lb


def _least_planes(s: Solved, sc: _Scope) -> np.ndarray:
    """Each ``a`` column's least gbps (a ToR pod's least share of the pair's demand, with two or more planes)."""
    m = s.model
    assert s.share is not None
    keys = list(m.a_col)
    out = np.zeros(len(sc.a_cols))
    for i, k in enumerate(sc.a_cols.tolist()):
        q, p, _pl = keys[k]
        if len(m.allowed_planes[(q, p)]) >= 2:
            out[i] = max(s.share[t] for t in m.tors_of[q]) * m.d_qp.get((q, p), 0.0)
    return out


def _only(x: np.ndarray, cols: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    out[cols] = x[cols]
    return out


_Weights = dict[tuple[int, int], tuple[tuple[int, int], ...]]


def _round(s: Solved, sc: _Scope, x: np.ndarray) -> tuple[np.ndarray, _Weights, _Weights]:
    """Integer weights within the budgets for the pod pairs whose planes' split moved (ToRs) and for the
    touched leaf groups (their surviving spines); every other group keeps the full plan's weights. The
    rounded variables and the changed ToR and leaf groups."""
    m = s.model
    tor_budget, leaf_budget = pod_budgets(m)
    reduce = cached_reducer()

    n_a = len(m.a_col)
    out = s.x_round.copy()
    tor_w: _Weights = {}
    for q, p in sc.pairs:
        planes = m.allowed_planes[(q, p)]
        a_cols = np.array([m.a_col[(q, p, pl)] for pl in planes], dtype=np.int64)
        d = float(s.x_round[a_cols].sum())
        if np.abs(x[a_cols] - s.x_round[a_cols]).max(initial=0.0) <= 1e-9 * max(d, 1e-12):
            continue  # its planes' split did not move: the full plan's weights
        w = split_weights(reduce, x[a_cols], tor_budget[q], s.fib, d > 0)
        tot = sum(w)
        out[a_cols] = [d * wi / tot for wi in w]
        tor_w[(q, p)] = tuple((pl, wi) for pl, wi in zip(planes, w, strict=True) if wi > 0)
    up, _down = m.g_arcs()
    keys = list(m.a_col)
    leaf_w: _Weights = {}
    counts = m.g_col.counts
    at = 0
    for k, t in zip(sc.a_cols.tolist(), sc.touched.tolist(), strict=True):
        n = int(counts[k])
        cols, ratio, alive = sc.g_cols[at:at + n], sc.ratio[at:at + n], sc.alive[at:at + n]
        at += n
        a_r = float(out[k])
        if not t:
            out[cols] = a_r * ratio  # the full plan's leaf weights
            continue
        q, p, pl = keys[k]
        ok = cols[alive]
        leaf = m.leaf_at[(q, pl)]
        w = split_weights(reduce, x[ok], leaf_budget[leaf], s.fib, a_r > 0)
        tot = sum(w)
        out[cols] = 0.0
        out[ok] = [a_r * wi / tot for wi in w]
        leaf_w[(leaf, p)] = tuple((int(up[c - n_a]), wi) for c, wi in zip(ok.tolist(), w, strict=True) if wi > 0)
    return out, tor_w, leaf_w


def _ecmp_mlu(s: Solved, sc: _Scope) -> float:
    """ECMP's largest utilization on the degraded fabric: each moved ``a`` column even over its surviving spines."""
    m = s.model
    n_a = len(m.a_col)
    x = s.ecmp_x.copy()
    x[sc.g_cols] = 0.0
    live = sc.g_cols[sc.alive]
    owner = m.g_owner()[live - n_a]
    x[live] = x[owner] / np.bincount(owner, minlength=n_a)[owner]
    return float((m.loads(x) / m.fab.arc_cap).max(initial=0.0))


def _links(entry: _Entry, loads: np.ndarray, old: np.ndarray) -> tuple[LinkLoad, ...]:
    """The full plan's link loads with those of the links whose load moved replaced (in the plan's order and
    directions)."""
    plan, fab = entry.plan(), entry.solved.model.fab
    assert plan is not None  # the caller holds it
    if not entry.written:
        entry.written = {min(f"{x.a}:{x.a_port}", f"{x.b}:{x.b_port}"): j for j, x in enumerate(plan.links)}
    util = loads / fab.arc_cap
    out = list(plan.links)
    for i in np.unique(np.flatnonzero(np.abs(loads - old) > 1e-12) // 2).tolist():
        lk = fab.intent.links[i]
        j = entry.written.get(lk.key)
        if j is None:
            continue
        x = LinkLoad(lk.a, lk.a_port, lk.b, lk.b_port, float(loads[2 * i]), float(loads[2 * i + 1]),
                     float(max(util[2 * i], util[2 * i + 1])))
        if (out[j].a, out[j].a_port) != (lk.a, lk.a_port):
            x = LinkLoad(x.b, x.b_port, x.a, x.a_port, x.gbps_ba, x.gbps_ab, x.utilization)
        out[j] = x
    return tuple(out)


def reaction_plan(intent: Intent, plan: Plan, links: Iterable[str], options: ReactOptions = ReactOptions()
                  ) -> Plan | None:
    """The plan of ``intent`` with the leaf-spine ``links`` (link ids) drained, made from ``plan`` (``intent``'s,
    compiled cold in this process; see the module docstring), or None when it cannot be made so."""
    t0 = time.perf_counter()
    entry = KEPT.get(intent, plan)
    if entry is None:
        return None
    s = entry.solved
    m = s.model
    links = sorted(links)
    failed = _failed_arcs(entry, links)
    if failed is None or not len(failed):
        return None
    sc = _scope(s, failed)
    if sc is None:
        return None
    x, u, lp_s = _resplit(s, sc, options)
    if u > s.lp_bound * (1 + options.within) and len(sc.g_cols) <= options.every_group:
        sc = _scope(s, failed, every=True)  # the other planes' spines may take the load too
        assert sc is not None
        x, u, more = _resplit(s, sc, options)
        lp_s += more
    x, tor_moved, leaf_moved = _round(s, sc, x)
    worst = float((m.loads(x) / m.fab.arc_cap).max(initial=0.0))
    if worst > s.lp_bound * (1 + options.within):
        log.info("reaction of %s: %.4f over the full plan's optimum %.4f: compiled instead", links, worst,
                 s.lp_bound)
        return None
    tor_w, leaf_w = {**s.tor_w, **tor_moved}, {**s.leaf_w, **leaf_moved}
    old = m.loads(s.x_round)
    loads = m.loads(x)
    lost = frozenset((int(m.fab.arc_tail[a]), m.leaf_pp[int(m.fab.arc_head[a])][0]) for a in failed.tolist()
                     if int(m.fab.arc_head[a]) in m.leaf_pp)  # (spine, pod): the spine's one way down to the pod
    devices = dict(plan.devices)
    n_groups, n_routes = plan.summary.groups, plan.summary.routes
    srcs = {q for q, _p in tor_moved}
    moved = {t for t, q in m.tor_pod.items() if q in srcs} | {leaf for leaf, _p in leaf_moved}
    moved |= {spine for spine, _p in lost}
    shared: dict[tuple[object, ...], tuple[object, ...]] = {}  # the ToRs' groups under the new weights
    for v in sorted(moved):
        name = m.fab.names[v]
        was, devices[name] = devices[name], s.assembly.device(v, tor_w, leaf_w, lost, shared)  # type: ignore[arg-type]
        n_groups += len(devices[name].groups) - len(was.groups)
        n_routes += len(devices[name].routes) - len(was.routes)
    mlu = float((loads / m.fab.arc_cap).max(initial=0.0))
    extra = {**plan.summary.extra, "backend": "highs", "lp_model": "clos-reaction", "lp_seconds": round(lp_s, 3),
             "reaction_pairs": len(sc.pairs), "reaction_lp_utilization": round(u, 6)}
    for k in ("pdlp_iterations", "warm_start", "fit_error", "fit_sweeps", "lp_rounds", "repair_moves",
              "lp_model_solved", "rounding"):
        extra.pop(k, None)
    summary = replace(plan.summary, max_utilization=mlu, ecmp_max_utilization=_ecmp_mlu(s, sc),
                      solve_seconds=time.perf_counter() - t0, groups=n_groups, routes=n_routes, extra=extra)
    return Plan(fabric=plan.fabric, summary=summary, devices=devices, links=_links(entry, loads, old))
