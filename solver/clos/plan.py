"""The whole plan of a clean 3-tier RFC 7938 Clos, at pod granularity.

This module owns the fast path whose work grows with pods and planes, not
with ToR prefixes. A Clos is *clean* when every ToR links once to
every leaf of its pod, each pod has at most one leaf per plane, leaves link
only to spines of their plane, nothing is drained, every prefix has exactly
one ToR origin and every demand enters at a ToR. Then the ToRs of a pod are
interchangeable in BGP (swapping two of them is an automorphism of the fabric
and its ASN plan), so the path-vector simulation of :mod:`solver.core.routing` runs
once per destination pod, and every device's route to any ToR of pod ``p`` is
its route to pod ``p``'s representative (leaves of pod ``p`` itself deliver
straight to the ToR). The LP is the pod-level model of :mod:`solver.clos.model`,
its capacity rows added lazily (leaf-spine arcs first; ToR arcs only when the
solution overloads one, which keeps it exact). A model PDLP would solve is
solved through its spine-transport relaxation instead (:mod:`solver.clos.relax`:
one column per arc instead of per leaf group and spine), the routing recovered
from it by matrix scaling and checked against the relaxation's optimum; weights
are chosen once per (pod pair) and (leaf, destination pod) by the load-aware rounding of
:mod:`solver.clos.rounding` (on small fabrics also by the per-group optimum of
:mod:`solver.core.weights`; the lower MLU wins); loads (after rounding, and for
ECMP) are the LP's own linear load rows evaluated at the rounded splits.
Routes are a lazy :class:`Mapping` per device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from controller.model import Intent, Role, WcmpRealization
from controller.model.plan import DevicePlan, LinkLoad, NextHop, Plan, PlanSummary
from solver.clos.model import PodModel, build_pod_model, pod_budgets
from solver.clos.relax import Relaxation, decompose, relaxation
from solver.clos.repair import repair_weights
from solver.clos.rounding import carry_round, integral_plane_split
from solver.clos.warm import STARTS, signature
from solver.core.fabric import Fabric, build_fabric
from solver.core.lp import AUTO_PDLP_VARIABLES, LpResult, solve_lp, solve_pdlp
from solver.core.options import ClosOptions
from solver.core.weights import cached_reducer, device_budget

__all__ = ["Assembly", "Solved", "clos_plan", "split_weights"]

Progress = Callable[[str, float], None]


class _Routes(Mapping[str, str]):
    """prefix -> group id, computed from per-pod tables (``prefix_pod``/``prefix_tor`` shared)."""

    __slots__ = ("_by_pod", "_by_tor", "_index", "_prefixes", "_pods", "_tors", "_n")

    def __init__(self, prefixes: list[str], index: dict[str, int], pods: np.ndarray, tors: np.ndarray,
                 by_pod: dict[int, str], by_tor: dict[int, str], own: int | None) -> None:
        self._prefixes, self._index, self._pods, self._tors = prefixes, index, pods, tors
        self._by_pod, self._by_tor = by_pod, by_tor
        keep = np.isin(pods, np.fromiter(by_pod, dtype=np.int64, count=len(by_pod)))
        if by_tor:
            keep |= np.isin(tors, np.fromiter(by_tor, dtype=np.int64, count=len(by_tor)))
        if own is not None:
            keep &= tors != own
        self._n = keep

    def __getitem__(self, prefix: str) -> str:
        i = self._index.get(prefix)
        if i is None or not self._n[i]:
            raise KeyError(prefix)
        gid = self._by_tor.get(int(self._tors[i]))
        return gid if gid is not None else self._by_pod[int(self._pods[i])]

    def __iter__(self) -> Iterator[str]:
        for i in np.flatnonzero(self._n):
            yield self._prefixes[i]

    def __len__(self) -> int:
        return int(self._n.sum())

    def coded(self) -> tuple[list[str], np.ndarray, list[str]]:
        """The whole mapping as arrays, for readers that compile every route at once:
        ``(prefixes, code, gids)`` where prefix ``prefixes[i]`` routes to group
        ``gids[code[i]]`` (``code[i] == -1``: no route). ``prefixes`` is the list
        every device of the plan shares, so a reader can index it once."""
        gids = list(dict.fromkeys([*self._by_pod.values(), *self._by_tor.values()]))
        pos = {g: i for i, g in enumerate(gids)}
        code = np.full(len(self._prefixes), -1, dtype=np.int64)
        _fill(code, self._pods, self._by_pod, pos)
        _fill(code, self._tors, self._by_tor, pos)  # a ToR's own route overrides its pod's
        code[~self._n] = -1
        return self._prefixes, code, gids


def _fill(code: np.ndarray, labels: np.ndarray, by: dict[int, str], pos: dict[str, int]) -> None:
    """``code[i] = pos[by[labels[i]]]`` wherever ``by`` has ``labels[i]`` (labels maybe far apart)."""
    if not by:
        return
    keys = np.array(sorted(by), dtype=np.int64)
    vals = np.array([pos[by[int(k)]] for k in keys], dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, labels), len(keys) - 1)
    hit = keys[at] == labels
    code[hit] = vals[at[hit]]


@dataclass(frozen=True)
class Solved:
    """What a Clos plan was made of, kept for a failure reaction made from it (:mod:`solver.clos.react`):
    the model, the rounded weights and variables (``x_round``, gbps, ``a`` then ``g``), ECMP's variables,
    the LP's optimum and each device's assembly."""

    model: PodModel
    fib: bool
    share: np.ndarray | None
    tor_w: dict[tuple[int, int], tuple[tuple[int, int], ...]]
    leaf_w: dict[tuple[int, int], tuple[tuple[int, int], ...]]
    x_round: np.ndarray
    ecmp_x: np.ndarray
    lp_bound: float
    assembly: Assembly


def clos_plan(intent: Intent, *, backend: str, progress: Progress, t0: float,
              options: ClosOptions = ClosOptions(), keep: Callable[[Solved], None] | None = None,
              reuse: PodModel | None = None) -> Plan | None:
    """The plan of a clean 3-tier Clos, or ``None`` when the fabric is not one (use the generic path);
    ``keep`` is given what it was made of (:class:`Solved`) when WCMP planned it; ``reuse``: the pod model
    of an intent that differs from ``intent`` in its links' capacities only (its routes and demands are
    not built again, :meth:`PodModel.with_fabric`)."""
    fab = build_fabric(intent)
    model = reuse.with_fabric(fab) if reuse is not None else None
    if model is None:
        model = build_pod_model(fab)
    if model is None:
        return None
    progress("routes", 1.0)
    extra: dict[str, Any] = {"backend": backend, "lp_model": "clos-pods"}
    fib = intent.wcmp_realization == WcmpRealization.FIB
    ecmp_x = model.ecmp_x()
    ecmp_loads = model.loads(ecmp_x)
    ecmp_mlu = float((ecmp_loads / fab.arc_cap).max()) if fab.n_arcs else 0.0
    share = None if fib else np.array([1.0 / device_budget(intent, n) for n in fab.names])
    if intent.wcmp_enabled and model.n_vars:
        progress("lp", 0.0)
        xv, seconds, info = _lp_lazy(model, share, backend, ecmp_loads, options)
        lp_bound = float(xv[-1])
        x_lp = np.maximum(xv[:-1], 0.0) * model.scale
        extra["lp_seconds"] = round(seconds, 3)
        extra.update(info)
        progress("lp", 1.0)
    else:
        x_lp, lp_bound = ecmp_x, ecmp_mlu
        if not intent.wcmp_enabled:
            extra["wcmp"] = False
    progress("weights", 0.0)
    if intent.wcmp_enabled:
        tor_w, leaf_w, x_round, how = _rounded(model, x_lp, fib, share, lp_bound, options)
        extra.update(how)
    else:
        tor_w, leaf_w, x_round = _weights(model, x_lp, fib)
    loads = model.loads(x_round)
    util = loads / fab.arc_cap
    mlu = float(util.max()) if len(util) else 0.0
    if intent.wcmp_enabled and mlu > ecmp_mlu:  # the LP gained less than rounding lost: equal weights
        tor_w, leaf_w, x_round = _weights(model, ecmp_x, fib)
        loads = model.loads(x_round)
        util = loads / fab.arc_cap
        mlu = float(util.max()) if len(util) else 0.0
        extra["rounding"] = "ecmp"
    progress("loads", 1.0)
    asm = Assembly(intent, fab, model)
    devices, n_groups, n_routes = _device_plans(asm, tor_w, leaf_w)
    links = tuple(
        LinkLoad(link.a, link.a_port, link.b, link.b_port, float(loads[2 * i]), float(loads[2 * i + 1]),
                 float(max(util[2 * i], util[2 * i + 1])))
        for i, link in enumerate(intent.links)
    )
    summary = PlanSummary(max_utilization=mlu, lp_bound=lp_bound, ecmp_max_utilization=ecmp_mlu,
                          solve_seconds=time.perf_counter() - t0, groups=n_groups, routes=n_routes, extra=extra)
    if keep is not None and intent.wcmp_enabled:
        keep(Solved(model, fib, share, tor_w, leaf_w, x_round, ecmp_x, lp_bound, asm))
    return Plan(fabric=intent.name, summary=summary, devices=devices, links=links)


_Members = tuple[tuple[int, int], ...]  # (arc, weight)


def _cut_bounds(m: PodModel, ecmp_loads: np.ndarray, spine_layer: np.ndarray) -> tuple[float, float]:
    """Two utilizations no split can beat: the most loaded ToR cut (a ToR's traffic up, or down,
    over its links to its pod's leaves) and the most loaded pod cut (a pod's traffic to other pods,
    out or in, over its leaves' links to spines). ECMP delivers everything, so its loads summed
    over a cut are the traffic that must cross it. ``spine_layer`` flags the leaf-spine arcs."""
    head, tail = m.fab.arc_head, m.fab.arc_tail
    n_dev = m.fab.n
    groups = np.full(m.fab.n_arcs, -1, dtype=np.int64)
    for (t, _pl), arc in m.tor_arc.items():
        groups[arc] = t  # up from ToR t
        groups[arc ^ 1] = n_dev + t  # down to ToR t
    pod_ix = {p: i for i, p in enumerate(m.pods)}  # pods are numbered freely: index by position
    pod_of = {v: pod_ix[q] for v, (q, _pl) in m.leaf_pp.items()}
    for arc in np.flatnonzero(spine_layer).tolist():
        up = int(tail[arc]) in pod_of
        groups[arc] = 2 * n_dev + 2 * (pod_of[int(tail[arc])] if up else pod_of[int(head[arc])]) + (0 if up else 1)
    keep = groups >= 0
    size = 2 * n_dev + 2 * len(m.pods)
    load = np.bincount(groups[keep], weights=ecmp_loads[keep], minlength=size)
    cap = np.bincount(groups[keep], weights=m.fab.arc_cap[keep], minlength=size)
    util = load / np.where(cap > 0, cap, np.inf)
    return float(util[:2 * n_dev].max(initial=0.0)), float(util[2 * n_dev:].max(initial=0.0))


def _lp_lazy(m: PodModel, share: np.ndarray | None, backend: str, ecmp_loads: np.ndarray, options: ClosOptions
             ) -> tuple[np.ndarray, float, dict[str, Any]]:
    """The pod model's LP with capacity rows added lazily: first only the leaf-spine arcs (where
    a Clos's splits bind), then every arc the solution overloads (and those near ``U``), until
    the solution keeps every arc under ``U`` (so it is optimal for the full LP) or, after
    ``options.lp_rounds``, with every row. Models PDLP would solve go through the spine-transport
    relaxation (:mod:`solver.clos.relax`; ToR rows of the hottest ToR arcs from the first round when a
    ToR cut is near the pods' cut bound; each round's PDLP starts from the last one's answer, the first
    from a kept optimum under ``options.warm_start``) as long as its fitted routing meets the
    relaxation's optimum; otherwise the full model. Returns ``[a, g, U]``, seconds and the ``extra``."""
    cap = m.fab.arc_cap
    used = np.flatnonzero(np.diff(m.load_matrix.indptr) > 0)
    spine_layer = np.zeros(m.fab.n_arcs, dtype=bool)
    spine_layer[m.load_matrix[:, len(m.a_col):].tocsc().indices] = True
    rows = spine_layer[used]
    relax: Relaxation | None = None
    least = m.least_shares(share)
    up_agg, dn_agg = m.aggregate_columns(least[0], 0)
    columns = m.n_vars + 1 + len(up_agg) + len(dn_agg)  # the full model's, as solve_lp counts them for auto
    if backend == "pdlp" or (backend == "auto" and columns > AUTO_PDLP_VARIABLES):
        relax = relaxation(m, least)
        if (relax.n_spines_a * relax.phi_a > 1 + 1e-12).any():
            relax = None  # a group with more spines than weights: its margins go negative (the full model says why)
    tor_cut, pod_cut = _cut_bounds(m, ecmp_loads, spine_layer)
    if tor_cut >= options.tor_rows_at * pod_cut:  # ToR arcs are likely to bind: their rows from the start
        if relax is not None:  # the hot ones: the others join when overloaded, the next round warm
            rows |= _hot_tor_rows(ecmp_loads[used] / cap[used], spine_layer[used], options.hot_tor_rows)
        else:
            rows[:] = True
    info: dict[str, Any] = {}
    seconds = 0.0
    k = 0
    warm: _Warm | None = None
    a_loads: sp.csr_matrix | None = None
    sig = signature(m.fab.names, m.fab.arc_tail, m.fab.arc_head, cap, m.d_qp, share) if relax is not None else ""
    while True:
        k += 1
        full = k > options.lp_rounds or rows.all()
        arcs = used if full else used[rows]
        if relax is not None:
            lp = relax.lp(arcs)
            start = warm.start(arcs) if warm else _kept_start(relax, arcs, sig, options, info)
            res = solve_pdlp(*lp, tolerance=options.pdlp_tolerance, start=start)
            warm = _Warm(arcs, res, lp[1].shape[0] - len(arcs))
            info["pdlp_iterations"] = info.get("pdlp_iterations", 0) + res.iterations
            seconds += res.seconds
            if not full:  # the rows left out are ToR rows, whose loads are the a columns' alone:
                # no fit is needed to find them overloaded
                if a_loads is None:
                    a_loads = m.load_matrix[used][:, :len(m.a_col)].tocsr()
                u = float(res.x[relax.u_col])
                util = (a_loads @ np.maximum(res.x[:len(m.a_col)], 0.0)) * m.scale / cap[used]
                if _join_overloaded(rows, util, u, options):
                    info.update(backend=res.backend, lp_rounds=k)
                    continue
            if not info.get("warm_start") and res.y is not None:  # a cold optimum: the start of nearby LPs
                STARTS.put(sig, relax.layout(arcs), res.x, res.y)
            t0 = time.perf_counter()
            xv, fit, sweeps = decompose(relax, res.x, options)
            seconds += time.perf_counter() - t0
            u = float(xv[-1])
            util = m.loads(np.maximum(xv[:-1], 0.0) * m.scale) / cap
            info.update(lp_model_solved="spine-transport", fit_error=float(f"{fit:.3g}"), fit_sweeps=sweeps)
            if float(util[spine_layer].max(initial=0.0)) > u * (1 + options.fit_above):
                relax = None  # the margins admit no table close enough: solve the full model instead
                rows = spine_layer[used]
                info = {"lp_model_solved": "pod-groups",
                        "spine_transport_missed": round(float(util[spine_layer].max(initial=0.0)), 6)}
                k = 0
                continue
            util = util[used]
        else:
            res = solve_lp(*m.lp(share, arcs), backend=backend, tolerance=options.pdlp_tolerance)
            seconds += res.seconds
            xv = m.lp_values(res.x)
            u = float(xv[-1])
            util = m.loads(np.maximum(xv[:-1], 0.0) * m.scale)[used] / cap[used]
        info.update(backend=res.backend, lp_rounds=k)
        if full or not _join_overloaded(rows, util, u, options):
            return xv, seconds, info


def _kept_start(relax: Relaxation, arcs: np.ndarray, sig: str, options: ClosOptions, info: dict[str, Any]
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """The first PDLP's start under ``options.warm_start``: the kept cold optimum of the same LP less drains
    (:mod:`solver.clos.warm`), if any; ``info["warm_start"]`` says whether there was one."""
    if not options.warm_start:
        return None
    start = STARTS.start(sig, relax.layout(arcs))
    info["warm_start"] = start is not None
    return start


def _join_overloaded(rows: np.ndarray, util: np.ndarray, u: float, options: ClosOptions) -> bool:
    """Whether an arc whose row is left out (``~rows``) is overloaded at ``util`` over the LP's
    ``U``; if so its row joins ``rows`` (in place), with those of every arc near ``U``."""
    over = ~rows & (util > u * (1 + options.lazy_overload) + 1e-9)
    if not over.any():
        return False
    rows |= over | (util > options.lazy_near * u)
    return True


def _hot_tor_rows(ecmp_util: np.ndarray, spine_layer: np.ndarray, fraction: float) -> np.ndarray:
    """The ToR arcs whose rows the relaxed LP starts with when ToR arcs are likely to bind: those
    whose ECMP utilization is at least ``fraction`` of the hottest ToR arc's. ECMP splits a ToR's
    traffic evenly over its planes, the split that meets its cut bound, so these are the arcs
    that a ToR near the bound cannot unload; any other ToR row the optimum overloads joins in
    the next round (per arc of ``used``; ``spine_layer`` flags the leaf-spine ones)."""
    tor = ~spine_layer
    top = float(ecmp_util[tor].max(initial=0.0))
    return tor & (ecmp_util >= fraction * top)


@dataclass(frozen=True)
class _Warm:
    """The last PDLP solve of the lazy loop, to start the next one from: its rows are the fixed
    rows (``fixed`` of them, the same in every round) and then one capacity row per arc of ``arcs``."""

    arcs: np.ndarray
    res: LpResult
    fixed: int

    def start(self, arcs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The primal and dual vectors for the LP over ``arcs`` (a superset): the rows kept
        keep their duals, the new capacity rows start at 0."""
        assert self.res.y is not None
        y = np.zeros(self.fixed + len(arcs))
        y[:self.fixed] = self.res.y[:self.fixed]
        at = np.searchsorted(arcs, self.arcs)
        y[self.fixed + at] = self.res.y[self.fixed:]
        return self.res.x, y


_Rounded = tuple[dict[tuple[int, int], _Members], dict[tuple[int, int], _Members], np.ndarray]



def _rounded(m: PodModel, x: np.ndarray, fib: bool, share: np.ndarray | None,
             lp_bound: float, options: ClosOptions
             ) -> tuple[dict[tuple[int, int], _Members], dict[tuple[int, int], _Members], np.ndarray, dict[str, Any]]:
    """Integer weights for the LP's splits: load-aware rounding (:mod:`solver.clos.rounding`), and on small
    fabrics the per-group optimum too, each polished by :func:`repair_weights`; the lower MLU wins."""
    fab = m.fab
    tor_budget, leaf_budget = pod_budgets(m)
    tries: dict[str, _Rounded] = {"load-aware": carry_round(m, x, tor_budget, leaf_budget, fib, options=options)}
    if len(m.allowed_spines) < options.small_groups:
        tries["per-group"] = _weights(m, x, fib)
    if len(m.g_col) <= options.milp_max_weights:
        x2 = integral_plane_split(m, x, share, tor_budget, tries["load-aware"][0], nodes=options.milp_nodes)
        if x2 is not None:
            tries["integral-planes"] = carry_round(m, x2, tor_budget, leaf_budget, fib, options=options)
    best: tuple[float, str, _Rounded, int] | None = None
    for name, (tor_w, leaf_w, x_round) in tries.items():
        mlu = float((m.loads(x_round) / fab.arc_cap).max()) if fab.n_arcs else 0.0
        moves = 0
        if mlu > lp_bound * (1 + options.repair_above):
            tor_w, leaf_w, x_round, moves = repair_weights(m, tor_w, leaf_w, x_round.copy(),
                                                           max_moves=options.repair_moves,
                                                           max_tries=options.repair_tries // len(tries))
            mlu = float((m.loads(x_round) / fab.arc_cap).max()) if fab.n_arcs else 0.0
        if best is None or mlu < best[0] - 1e-12:
            best = (mlu, name, (tor_w, leaf_w, x_round), moves)
    assert best is not None
    return (*best[2], {"rounding": best[1], "repair_moves": best[3]})


def _weights(m: PodModel, x: np.ndarray, fib: bool
             ) -> tuple[dict[tuple[int, int], _Members], dict[tuple[int, int], _Members], np.ndarray]:
    """Integer weights per (source pod, destination pod) for ToRs and per (leaf, destination pod),
    and the variables (``a`` then ``g``) implied by the rounded splits."""
    reduce = cached_reducer()

    tor_budget, leaf_budget = pod_budgets(m)
    x_round = np.zeros_like(x)
    tor_w: dict[tuple[int, int], _Members] = {}
    for (q, p), planes in m.allowed_planes.items():
        if not planes:
            continue
        d = m.d_qp.get((q, p), 0.0)
        cols = [m.a_col.get((q, p, pl)) for pl in planes]
        w = split_weights(reduce, np.array([x[c] if c is not None else 0.0 for c in cols]), tor_budget[q], fib, d > 0)
        tot = sum(w)
        for c, wi in zip(cols, w, strict=True):
            if c is not None:
                x_round[c] = d * wi / tot
        tor_w[(q, p)] = tuple((pl, wi) for pl, wi in zip(planes, w, strict=True) if wi > 0)
    leaf_w: dict[tuple[int, int], _Members] = {}
    for (q, p, pl), arcs in m.allowed_spines.items():
        leaf = m.leaf_at[(q, pl)]
        ac = m.a_col.get((q, p, pl))
        if ac is None:  # no such group: no column, nothing flows
            w = split_weights(reduce, np.zeros(len(arcs)), leaf_budget[leaf], fib, False)
        else:  # the group's columns follow one another, in the order of its spines
            lo, n = m.g_col.span(ac)
            a_r = x_round[ac]
            w = split_weights(reduce, x[lo:lo + n], leaf_budget[leaf], fib, a_r > 0)
            x_round[lo:lo + n] = a_r * np.asarray(w, dtype=np.float64) / sum(w)
        leaf_w[(leaf, p)] = tuple((arc, wi) for arc, wi in zip(arcs, w, strict=True) if wi > 0)
    return tor_w, leaf_w, x_round


def split_weights(reduce: Callable[[np.ndarray, int], tuple[int, ...]], vals: np.ndarray, budget: int, fib: bool,
           carries: bool) -> tuple[int, ...]:
    """Weights for one group: equal where nothing flows; zero-share members dropped under ``fib``."""
    total = float(vals.sum()) if carries and len(vals) > 1 else 0.0
    if total <= 0:
        return (1,) * len(vals)
    r = vals / total
    if not fib:
        return reduce(np.maximum(r, 0.0), budget)
    keep = r > 1e-9
    full = np.zeros(len(r), dtype=np.int64)
    full[keep] = reduce(np.maximum(r[keep], 0.0), budget)
    return tuple(full.tolist())


_Hops = tuple[tuple[int, int], ...]  # a group as (arc, weight) pairs in port order: its identity on a device
_Shared = tuple[dict[str, tuple[NextHop, ...]], dict[int, str]]  # a ToR's groups and its group per pod


class _Groups:
    """Group ids of one device, numbered in the order its groups first appear."""

    def __init__(self, port: tuple[str, ...]) -> None:
        self.port = port
        self.ids: dict[_Hops, str] = {}

    def __call__(self, members: list[tuple[int, int]]) -> str:
        if len(members) == 1:  # a leaf's group down to a ToR of its pod, a spine's down to a pod: most groups
            h: _Hops = (members[0],)
        else:
            port = self.port
            h = tuple(sorted(members, key=lambda aw: port[aw[0]]))
        g = self.ids.get(h)
        if g is None:
            g = self.ids[h] = f"g{len(self.ids) + 1}"
        return g


class _NextHops(dict[tuple[int, int], NextHop]):
    """``NextHop`` objects per (arc, weight), shared by every device of the plan."""

    def __init__(self, fab: Fabric) -> None:
        super().__init__()
        self.port = fab.arc_port
        self.head = [fab.names[v] for v in fab.arc_head.tolist()]

    def __missing__(self, key: tuple[int, int]) -> NextHop:
        a, w = key
        h = self[key] = NextHop(self.port[a], self.head[a], w)
        return h

    def groups(self, gids: _Groups) -> dict[str, tuple[NextHop, ...]]:
        get = self.__getitem__
        return {g: tuple(map(get, h)) for h, g in gids.ids.items()}


def _tor_groups(v: int, m: PodModel, tor_w: dict[tuple[int, int], _Members],
                tor_arcs: dict[int, list[tuple[int, int]]], nexthops: _NextHops,
                shared: dict[tuple[Any, ...], _Shared]) -> _Shared:
    """A ToR's groups and its group per destination pod. ToRs of a pod with the same port and leaf
    per plane have the same groups: they are built once and shared."""
    port, head = m.fab.arc_port, m.fab.arc_head
    q = m.tor_pod[v]
    look = (q, tuple((pl, port[a], int(head[a])) for pl, a in tor_arcs.get(v, ())))
    hit = shared.get(look)
    if hit is not None:
        return hit
    gid = _Groups(port)
    by_pod: dict[int, str] = {}
    for p in m.pods:
        mem = tor_w.get((q, p))
        if mem:
            by_pod[p] = gid([(m.tor_arc[(v, pl)], w) for pl, w in mem])
    shared[look] = (nexthops.groups(gid), by_pod)
    return shared[look]


def _leaf_groups(v: int, m: PodModel, leaf_w: dict[tuple[int, int], _Members], gid: _Groups
                 ) -> tuple[dict[int, str], dict[int, str]]:
    """A leaf's group per destination pod (its split over spines) and per ToR of its own pod."""
    q, _pl = m.leaf_pp[v]
    by_pod: dict[int, str] = {}
    by_tor: dict[int, str] = {}
    for p in m.pods:
        if p == q:
            for t in m.tors_of[q]:
                by_tor[t] = gid([(m.down_arc[(v, t)], 1)])
        else:
            mem = leaf_w.get((v, p))
            if mem:
                by_pod[p] = gid(list(mem))
    return by_pod, by_tor


class Assembly:
    """What every device's plan is built from (the prefix tables all devices share, the next hops, each
    ToR's arcs up): a failure reaction (:mod:`solver.clos.react`) builds the few devices it changes from
    the full plan's."""

    def __init__(self, intent: Intent, fab: Fabric, m: PodModel) -> None:
        self.intent, self.fab, self.m = intent, fab, m
        self.prefixes = [p.prefix for p in intent.prefixes]
        self.index = {p: i for i, p in enumerate(self.prefixes)}
        self.ptor = np.array([fab.index[p.origins[0]] for p in intent.prefixes], dtype=np.int64)
        self.ppod = np.array([m.tor_pod[int(t)] for t in self.ptor], dtype=np.int64)
        self.nexthops = _NextHops(fab)
        self.tor_arcs: dict[int, list[tuple[int, int]]] = {}  # ToR -> (plane, arc up)
        for (t, pl), a in sorted(m.tor_arc.items()):
            self.tor_arcs.setdefault(t, []).append((pl, a))
        self.shared: dict[tuple[Any, ...], _Shared] = {}

    def device(self, v: int, tor_w: dict[tuple[int, int], _Members], leaf_w: dict[tuple[int, int], _Members],
               lost: frozenset[tuple[int, int]] = frozenset(), shared: dict[tuple[Any, ...], _Shared] | None = None
               ) -> DevicePlan:
        """Device ``v``'s groups and (lazy) routes; ``lost`` holds the (spine, pod) pairs whose spine has no
        route to the pod (its one link down to the pod's leaf of its plane failed); ``shared`` the ToR groups
        already built for these weights (the assembly's own by default: the full plan's)."""
        m = self.m
        role = self.intent.devices[v].role
        by_tor: dict[int, str] = {}
        own: int | None = None
        if role == Role.TOR:
            own = v
            groups, by_pod = _tor_groups(v, m, tor_w, self.tor_arcs, self.nexthops,
                                         self.shared if shared is None else shared)
        else:
            gid = _Groups(self.fab.arc_port)
            if role == Role.LEAF:
                by_pod, by_tor = _leaf_groups(v, m, leaf_w, gid)
            else:
                by_pod = {p: gid([(m.spine_down[(v, p)], 1)]) for p in m.pods
                          if (v, p) in m.spine_down and (v, p) not in lost}
            groups = self.nexthops.groups(gid)
        return DevicePlan(groups=groups, routes=_Routes(self.prefixes, self.index, self.ppod, self.ptor, by_pod,
                                                        by_tor, own))


def _device_plans(asm: Assembly, tor_w: dict[tuple[int, int], _Members], leaf_w: dict[tuple[int, int], _Members]
                  ) -> tuple[dict[str, DevicePlan], int, int]:
    """Every device's groups and (lazy) routes; also the number of groups and routes."""
    devices: dict[str, DevicePlan] = {}
    n_groups = n_routes = 0
    for v, name in enumerate(asm.fab.names):
        devices[name] = dp = asm.device(v, tor_w, leaf_w)
        n_groups += len(dp.groups)
        n_routes += len(dp.routes)
    return devices, n_groups, n_routes
