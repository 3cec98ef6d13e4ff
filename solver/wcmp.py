"""The WCMP linear program and destination-based traffic propagation.

This module owns the traffic engineering of a plan. Each *commodity* is one
route class (all prefixes originated by the same devices share a DAG; their
demands add up), and its flow runs on that DAG toward the origins. Merging the
prefixes of a class loses nothing: with one split per device the loads are
linear in the demand vector, and any per-prefix optimum sums to a class flow
with the same loads. The LP minimizes the maximum link utilization ``U``:

    min U   s.t.  out(c, v) - in(c, v) = demand(c, v)    for every commodity c, non-origin v
                  sum_c flow(c, arc) <= U * capacity(arc)  for every arc
                  flow >= 0

With ``paths: loop_free`` a second solve fixes ``U`` at its optimum and
minimizes the total load weighted by IS-IS metric (a longer path costs more),
so no traffic takes a needless detour
(in shortest-path DAGs every path has the same cost and the term is moot).
Constraints are built as scipy sparse matrices from numpy index arrays, never
element by element. Split ratios are a node's outgoing flow shares.

Propagation (the solver's own, for loads after rounding and for ECMP) solves
``x = b + M x`` on each DAG by summing the nilpotent series exactly.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from controller.model import Intent, Routing
from controller.model.errors import Infeasible
from solver.core.fabric import Fabric
from solver.core.lp import DEFAULT_BACKEND, LexModel, LpTimeLimit, solve_lp, solve_lp_lex
from solver.core.routing import RouteClass

__all__ = ["Commodities", "build_commodities", "ecmp_ratios", "propagate", "solve_wcmp", "solve_without"]


@dataclass(frozen=True, slots=True)
class Commodities:
    """DAG edges of every commodity, indexed for vectorized work.

    A *node* is a (commodity, non-origin device) pair with a route; nodes are
    numbered in construction order and a node's out-edges are contiguous:
    ``edges[node_start[k]:node_start[k+1]]``.
    """

    fab: Fabric
    classes: list[RouteClass]
    commodity_class: np.ndarray  # class index per commodity
    node_c: np.ndarray  # commodity per node
    node_v: np.ndarray  # device per node
    node_demand: np.ndarray  # gbps entering at the node
    node_start: np.ndarray  # len nodes + 1
    e_node: np.ndarray  # tail node per edge
    e_head_node: np.ndarray  # head node per edge, -1 when the head is an origin
    e_arc: np.ndarray
    e_route: np.ndarray  # bool: the edge is one of the routing's equal-cost next hops

    @property
    def n_nodes(self) -> int:
        return len(self.node_c)


def _class_demands(fab: Fabric, classes: list[RouteClass]) -> dict[int, dict[int, float]]:
    """Gbps per route class and source device; raises ``Infeasible`` naming every unroutable demand."""
    intent: Intent = fab.intent
    class_of = {p: ci for ci, rc in enumerate(classes) for p in rc.prefixes}
    per_class: dict[int, dict[int, float]] = {}
    problems: list[dict[str, Any]] = []
    for i, d in enumerate(intent.effective_demands):
        if d.gbps <= 0:
            continue
        ci = class_of.get(d.to)
        s = fab.index.get(d.from_)
        if ci is None or s is None:
            problems.append({"loc": intent.demand_loc(i), "from": d.from_, "to": d.to,
                             "reason": f"no prefix {d.to} is originated" if ci is None else "unknown source"})
            continue
        rc = classes[ci]
        if s in rc.origins:
            continue  # delivered locally
        if not rc.origins:
            problems.append({"loc": intent.demand_loc(i), "from": d.from_, "to": d.to,
                             "reason": f"every origin of {d.to} is down"})
        elif s not in rc.nexthops:
            why = ("it is drained or isolated" if fab.drained[s] or not fab.adj[s] else
                   "no valid path: drains, missing links or AS-path loop prevention withdraw the route there"
                   if intent.routing == Routing.BGP else "no path: drains or missing links cut it off")
            problems.append({"loc": intent.demand_loc(i), "from": d.from_, "to": d.to,
                             "reason": f"{d.from_} has no route to {d.to} ({why})"})
        else:
            per_class.setdefault(ci, {}).setdefault(s, 0.0)
            per_class[ci][s] += d.gbps
    if problems:
        head = problems[0]
        raise Infeasible(f"{len(problems)} demand(s) cannot be routed; first: {head['loc']} "
                         f"{head['from']} -> {head['to']}: {head['reason']}", problems)
    return per_class


def build_commodities(fab: Fabric, classes: list[RouteClass]) -> Commodities:
    """Aggregate the intent's demands per route class and index the DAGs.

    Raises
    ------
    Infeasible : some demand cannot be routed; ``details`` lists each one with the reason.
    """
    per_class = _class_demands(fab, classes)
    n = fab.n
    commodity_class = np.array(sorted(per_class), dtype=np.int64)
    node_c: list[int] = []
    node_v: list[int] = []
    node_demand: list[float] = []
    counts: list[int] = []
    e_arc: list[int] = []
    e_route: list[bool] = []
    for k, ci in enumerate(commodity_class):
        rc = classes[ci]
        dem = per_class[int(ci)]
        for v, arcs in rc.dag.items():
            node_c.append(k)
            node_v.append(v)
            node_demand.append(dem.get(v, 0.0))
            counts.append(len(arcs))
            e_arc.extend(arcs)
            if rc.dag is rc.nexthops:
                e_route.extend([True] * len(arcs))
            else:
                routes = set(rc.nexthops[v])
                e_route.extend(a in routes for a in arcs)
    nc = np.array(node_c, dtype=np.int64)
    nv = np.array(node_v, dtype=np.int64)
    cnt = np.array(counts, dtype=np.int64)
    start = np.zeros(len(cnt) + 1, dtype=np.int64)
    np.cumsum(cnt, out=start[1:])
    arcs_a = np.array(e_arc, dtype=np.int64)
    e_node = np.repeat(np.arange(len(cnt)), cnt)
    # head lookup: (commodity, device) -> node, -1 for origins
    lookup = np.full(len(commodity_class) * n, -1, dtype=np.int64)
    lookup[nc * n + nv] = np.arange(len(nc))
    e_head_node = lookup[nc[e_node] * n + fab.arc_head[arcs_a]] if len(arcs_a) else np.zeros(0, np.int64)
    return Commodities(
        fab=fab, classes=classes, commodity_class=commodity_class, node_c=nc, node_v=nv,
        node_demand=np.array(node_demand, dtype=np.float64), node_start=start, e_node=e_node,
        e_head_node=e_head_node, e_arc=arcs_a, e_route=np.array(e_route, dtype=bool),
    )


def ecmp_ratios(com: Commodities) -> np.ndarray:
    """Equal split over each node's equal-cost next hops (extra DAG edges get 0)."""
    deg = np.bincount(com.e_node, weights=com.e_route.astype(np.float64), minlength=com.n_nodes)
    return np.where(com.e_route, 1.0 / np.maximum(deg[com.e_node], 1.0), 0.0)


def propagate(com: Commodities, ratio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Push every demand through the DAGs with per-edge split ``ratio``.

    Returns ``(throughput per node, gbps per arc)``. Ratios of a node must sum
    to 1 wherever traffic reaches it.
    """
    inner = com.e_head_node >= 0
    m = sp.csr_matrix((ratio[inner], (com.e_head_node[inner], com.e_node[inner])),
                      shape=(com.n_nodes, com.n_nodes))
    x = com.node_demand.copy()
    term = x
    for _ in range(com.n_nodes + 1):
        term = m @ term
        if not term.any():
            break
        x += term
    flow = ratio * x[com.e_node]
    loads = np.bincount(com.e_arc, weights=flow, minlength=com.fab.n_arcs)
    return x, loads


@dataclass(frozen=True, slots=True)
class WcmpSolution:
    """The LP's edge flows, its optimum ``U``, and the split ratios (NaN where no flow)."""

    flow: np.ndarray
    mlu: float
    ratio: np.ndarray
    seconds: float
    backend: str = ""
    model: LexModel | None = None  # the HiGHS model, kept to solve again without some edges
    scale: float = 1.0


def _min_share_rows(com: Commodities, min_share: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Rows ``flow(e) - share(node) * out(node) >= 0`` for each equal-cost next hop of a
    node with several (a next hop that must keep weight >= 1 out of the budget)."""
    deg = np.diff(com.node_start)
    route_deg = np.bincount(com.e_node, weights=com.e_route.astype(np.float64), minlength=com.n_nodes)
    phi = min_share[com.node_v]
    sel = np.flatnonzero(com.e_route & (route_deg[com.e_node] >= 2) & (phi[com.e_node] > 0))
    if not sel.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), 0
    k = com.e_node[sel]
    d = deg[k]
    r = np.arange(len(sel))
    within = np.arange(int(d.sum())) - np.repeat(np.cumsum(d) - d, d)
    rows = np.concatenate([r, np.repeat(r, d)])
    cols = np.concatenate([sel, np.repeat(com.node_start[k], d) + within])
    vals = np.concatenate([np.ones(len(sel)), -np.repeat(phi[k], d)])
    return rows, cols, vals, len(sel)


def _downhill(com: Commodities) -> np.ndarray:
    """Per edge: the routing's own next hop, or an arc to a device nearer the destination. Where
    the DAG is every usable arc (``paths: loop_free``) these are the columns the LP starts from;
    the others (sideways and uphill arcs, which the optimum rarely uses) are priced in."""
    n_c = len(com.commodity_class)
    dist = np.full((n_c, com.fab.n), np.inf)
    for c in range(n_c):
        d = com.classes[int(com.commodity_class[c])].dist
        if d:
            dist[c, np.fromiter(d.keys(), np.int64, len(d))] = np.fromiter(d.values(), np.float64, len(d))
    c_e = com.node_c[com.e_node]
    tail = dist[c_e, com.node_v[com.e_node]]
    head = dist[c_e, com.fab.arc_head[com.e_arc]]
    return com.e_route | (head < tail)


def solve_wcmp(com: Commodities, *, backend: str = DEFAULT_BACKEND, detours: bool | None = None,
               min_share: np.ndarray | None = None) -> WcmpSolution:
    """The min-max-utilization LP over all commodities (see the module docstring).

    ``detours``: run the second, total-load stage (default: only for ``paths: loop_free``).
    ``min_share``: per device, the least share each of a node's equal-cost next
    hops must carry (``1/budget`` where every BGP multipath next hop keeps a
    weight >= 1, as with link-bandwidth); the LP then models that rule exactly.
    """
    fab = com.fab
    n_e = len(com.e_arc)
    if n_e == 0 or not com.node_demand.any():
        return WcmpSolution(np.zeros(n_e), 0.0, np.full(n_e, np.nan), 0.0)
    used, arc_row = np.unique(com.e_arc, return_inverse=True)
    scale = float(np.median(fab.arc_cap[used]))
    cap = fab.arc_cap[used] / scale
    n_nodes, n_arc_rows = com.n_nodes, len(used)
    inner = com.e_head_node >= 0
    ie = np.arange(n_e)
    rows = np.concatenate([com.e_node, com.e_head_node[inner], n_nodes + arc_row, n_nodes + np.arange(n_arc_rows)])
    cols = np.concatenate([ie, ie[inner], ie, np.full(n_arc_rows, n_e)])
    vals = np.concatenate([np.ones(n_e), -np.ones(int(inner.sum())), np.ones(n_e), -cap])
    n_rows = n_nodes + n_arc_rows
    n_share = 0
    if min_share is not None:
        s_rows, s_cols, s_vals, n_share = _min_share_rows(com, min_share)
        rows = np.concatenate([rows, n_rows + s_rows])
        cols = np.concatenate([cols, s_cols])
        vals = np.concatenate([vals, s_vals])
    a = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows + n_share, n_e + 1))
    dem = com.node_demand / scale
    row_lb = np.concatenate([dem, np.full(n_arc_rows, -np.inf), np.zeros(n_share)])
    row_ub = np.concatenate([dem, np.zeros(n_arc_rows), np.full(n_share, np.inf)])
    col_lb = np.zeros(n_e + 1)
    col_ub = np.full(n_e + 1, np.inf)
    c = np.zeros(n_e + 1)
    c[n_e] = 1.0
    if detours is None:
        detours = fab.intent.paths_mode == "loop_free"
    kept: list[LexModel] = []
    if detours:
        c2 = np.zeros(n_e + 1)
        c2[:n_e] = fab.arc_metric[com.e_arc] / float(np.mean(fab.arc_metric[used]))
        first, second = solve_lp_lex(c, c2, n_e, a, row_lb, row_ub, col_lb, col_ub, backend=backend,
                                     initial=np.append(_downhill(com), True), keep=kept)
        mlu = float(first.x[n_e])
        x, seconds = second.x, first.seconds + second.seconds
    else:
        first = solve_lp(c, a, row_lb, row_ub, col_lb, col_ub, backend=backend)
        x, seconds = first.x, first.seconds
        mlu = float(x[n_e])
    return _solution(com, x, mlu, seconds, first.backend, scale, kept[0] if kept else None)


def _solution(com: Commodities, x: np.ndarray, mlu: float, seconds: float, backend: str, scale: float,
              model: LexModel | None) -> WcmpSolution:
    n_e = len(com.e_arc)
    flow = np.maximum(x[:n_e], 0.0) * scale
    out = np.bincount(com.e_node, weights=flow, minlength=com.n_nodes)
    tot = out[com.e_node]
    tiny = 1e-9 * max(float(com.node_demand.max()), 1e-12)
    ratio = np.where(tot > tiny, flow / np.where(tot > tiny, tot, 1.0), np.nan)
    return WcmpSolution(flow, mlu, ratio, seconds, backend, model, scale)


def solve_without(com: Commodities, sol: WcmpSolution, edges: np.ndarray,
                  seconds: float = float("inf")) -> WcmpSolution | None:
    """The LP of ``sol`` solved again with ``edges`` carrying nothing (from its last basis), or None
    when its model was not kept (another backend than HiGHS, or no second stage) or the solve
    passed ``seconds``."""
    if sol.model is None:
        return None
    try:
        first, second = sol.model.without(edges, seconds)
    except LpTimeLimit:
        return None
    n_e = len(com.e_arc)
    return _solution(com, second.x, float(first.x[n_e]), first.seconds + second.seconds, "highs", sol.scale,
                     sol.model)


def _cancel_cycles(succ: dict[int, dict[int, float]], edge_of: dict[tuple[int, int], int], flow: np.ndarray) -> None:
    """Remove every flow cycle among nodes (``succ[k][k2]`` = flow on edge k -> k2), lowering loads only."""
    while True:
        state: dict[int, int] = {}
        cycle: list[int] | None = None
        for root in list(succ):
            if state.get(root):
                continue
            path = [root]
            iters = [iter(list(succ[root]))]
            state[root] = 1
            while iters and cycle is None:
                nxt = next(iters[-1], None)
                if nxt is None:
                    state[path.pop()] = 2
                    iters.pop()
                    continue
                if nxt not in succ or state.get(nxt) == 2:
                    continue
                if state.get(nxt) == 1:
                    cycle = path[path.index(nxt):] + [nxt]
                    break
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(list(succ[nxt])))
            if cycle is not None:
                break
        if cycle is None:
            return
        pairs = list(zip(cycle, cycle[1:], strict=False))
        m = min(succ[a][b] for a, b in pairs)
        for a, b in pairs:
            succ[a][b] -= m
            flow[edge_of[(a, b)]] -= m
            if succ[a][b] <= 0:
                del succ[a][b]
                flow[edge_of[(a, b)]] = 0.0


def make_loop_free(com: Commodities, sol: WcmpSolution) -> tuple[np.ndarray, dict[int, tuple[int, ...]]]:
    """Turn a ``paths: loop_free`` LP flow into loop-free forwarding.

    Per commodity: cancel any flow cycle (loads only fall), then place devices
    one by one from the origins outward, a device once all its flow successors
    are placed, nearest (IS-IS distance) first. Every next hop used descends
    this order, so forwarding stays loop-free even when safety removes next
    hops. Returns the split ratios (NaN where no flow) and, for devices without
    flow, fallback next hops: the placed neighbors nearest the destination.
    """
    fab = com.fab
    flow = sol.flow.copy()
    tol = 1e-9 * max(float(com.node_demand.max(initial=0.0)), 1e-12)
    flow[flow <= tol] = 0.0
    fallback: dict[int, tuple[int, ...]] = {}
    bounds = np.searchsorted(com.node_c, np.arange(len(com.commodity_class) + 1))
    for c in range(len(com.commodity_class)):
        k0, k1 = int(bounds[c]), int(bounds[c + 1])
        e0, e1 = int(com.node_start[k0]), int(com.node_start[k1])
        dist = com.classes[int(com.commodity_class[c])].dist
        succ: dict[int, dict[int, float]] = {k: {} for k in range(k0, k1)}
        edge_of: dict[tuple[int, int], int] = {}
        for e in range(e0, e1):
            h = int(com.e_head_node[e])
            if h >= 0 and flow[e] > 0:
                succ[int(com.e_node[e])][h] = float(flow[e])
                edge_of[(int(com.e_node[e]), h)] = e
        _cancel_cycles(succ, edge_of, flow)
        preds: dict[int, list[tuple[int, int]]] = {}  # head node -> (tail node, edge)
        for e in range(e0, e1):
            preds.setdefault(int(com.e_head_node[e]), []).append((int(com.e_node[e]), e))
        waiting = {k: len(succ[k]) for k in range(k0, k1)}
        placed: dict[int, int] = {}
        heap: list[tuple[int, int]] = [(-1, -1)]  # the origins (head node -1) first
        rank = -1
        while heap:
            _, u = heapq.heappop(heap)
            if u in placed or (u >= 0 and waiting[u] != 0):
                continue
            placed[u] = rank
            rank += 1
            for w, e in preds.get(u, ()):
                if w in placed:
                    continue
                if flow[e] > 0:
                    waiting[w] -= 1
                if waiting[w] == 0:  # a placed neighbor and all flow successors placed
                    heapq.heappush(heap, (dist.get(int(com.node_v[w]), 0), w))
        for k in range(k0, k1):
            s, e = int(com.node_start[k]), int(com.node_start[k + 1])
            if k not in placed or flow[s:e].sum() > 0:
                continue
            down = [j for j in range(s, e) if placed.get(int(com.e_head_node[j]), 1 << 60) < placed[k]]
            if down:
                cost = [dist.get(int(fab.arc_head[com.e_arc[j]]), 0) + int(fab.arc_metric[com.e_arc[j]]) for j in down]
                best = min(cost)
                fallback[k] = tuple(int(com.e_arc[j]) for j, x in zip(down, cost, strict=True) if x == best)
    out = np.bincount(com.e_node, weights=flow, minlength=com.n_nodes)
    tot = out[com.e_node]
    ratio = np.where(tot > 0, flow / np.where(tot > 0, tot, 1.0), np.nan)
    return ratio, fallback
