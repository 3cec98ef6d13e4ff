"""Forwarding state as arrays, and vectorized traffic propagation through it.

This module owns the compiled form of a plan that the safety replay works on.
Devices and directed *edges* are indexed (edge ``2*i`` runs ``a -> b`` of
link ``i``, edge ``2*i+1`` runs ``b -> a``); every prefix that carries demand
is a destination *class*; a forwarding table gives, per class and device, the
weighted next hops as split fractions (weights normalized per group). Demand is
propagated for all classes at once, hop by hop (``x = d + P^T x`` unrolled on
the DAG, numpy scatter-adds over ``(class, device)`` keys): the result is a
:class:`Flow`, the sub-DAG of *active states* (class, device) that carry
traffic, with the arrival at each, every positive-flow *transition* (state,
edge, fraction) indexed by source state, destination state and edge, the load
of every edge and what was black-holed where. Traffic still moving after as
many hops as there are devices is in a forwarding loop.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from controller.model import Intent
from controller.model.plan import DevicePlan, Plan
from safety.kernels import csr

__all__ = ["DemandClasses", "Flow", "Table", "Topology", "build_topology", "demand_classes", "looped", "plan_table",
           "propagate", "ranges"]


@dataclass(frozen=True, slots=True)
class Topology:
    """Index of an intent's devices, links and directed edges."""

    names: tuple[str, ...]
    index: dict[str, int]
    link_keys: tuple[str, ...]
    link_index: dict[str, int]
    edge_src: np.ndarray  # int64 per edge
    edge_dst: np.ndarray  # int64 per edge
    edge_cap: np.ndarray  # float64 per edge (gbps, per direction)
    port_edge: dict[tuple[int, str], int]  # (device, local port) -> outgoing edge
    dev_indptr: np.ndarray  # CSR device -> incident edges (both directions)
    dev_edges: np.ndarray

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def n_edges(self) -> int:
        return len(self.edge_src)

    def failed_edges(self, devices: frozenset[str] | set[str], links: frozenset[str] | set[str]) -> np.ndarray:
        """Directed edges that are down when ``devices`` and ``links`` (keys) fail."""
        parts: list[np.ndarray] = []
        for key in links:
            i = self.link_index[key]
            parts.append(np.array([2 * i, 2 * i + 1], dtype=np.int64))
        for name in devices:
            v = self.index[name]
            parts.append(self.dev_edges[self.dev_indptr[v]:self.dev_indptr[v + 1]])
        if not parts:
            return np.empty(0, dtype=np.int64)
        return np.unique(np.concatenate(parts))


def build_topology(intent: Intent) -> Topology:
    names = tuple(d.name for d in intent.devices)
    index = {n: i for i, n in enumerate(names)}
    m = len(intent.links)
    src = np.empty(2 * m, dtype=np.int64)
    dst = np.empty(2 * m, dtype=np.int64)
    cap = np.empty(2 * m, dtype=np.float64)
    port_edge: dict[tuple[int, str], int] = {}
    for i, link in enumerate(intent.links):
        a, b = index[link.a], index[link.b]
        src[2 * i], dst[2 * i], src[2 * i + 1], dst[2 * i + 1] = a, b, b, a
        cap[2 * i] = cap[2 * i + 1] = link.capacity_gbps
        port_edge[(a, link.a_port)] = 2 * i
        port_edge[(b, link.b_port)] = 2 * i + 1
    ends = np.concatenate([src, dst])
    edges = np.concatenate([np.arange(2 * m), np.arange(2 * m)])
    order = np.argsort(ends, kind="stable")
    indptr = np.zeros(len(names) + 1, dtype=np.int64)
    np.add.at(indptr, ends + 1, 1)
    keys = tuple(link.key for link in intent.links)
    return Topology(names, index, keys, {k: i for i, k in enumerate(keys)}, src, dst, cap, port_edge,
                    np.cumsum(indptr), edges[order])


@dataclass(slots=True)
class Table:
    """A forwarding table over destination classes.

    ``prefixes[c]`` and ``origins[c]`` (device indexes) describe class ``c``;
    ``route[c, v]`` is the group index device ``v`` uses for class ``c`` (-1:
    no route; origins always -1, they deliver); group ``g`` splits over
    ``g_edge[g_indptr[g]:g_indptr[g+1]]`` with fractions ``g_frac`` (summing
    to 1); ``demand`` is ``(class, device, gbps)`` arrays. ``budget_errors``
    lists groups over their device's budget or with non-positive weights.
    """

    prefixes: list[str]
    origins: list[frozenset[int]]
    route: np.ndarray  # int32 [classes, devices]
    g_indptr: np.ndarray
    g_edge: np.ndarray
    g_frac: np.ndarray
    g_weight: np.ndarray
    demand_class: np.ndarray
    demand_device: np.ndarray
    demand_gbps: np.ndarray
    budget_errors: list[str]


#: an intent's destination classes: prefixes, their origins (device indexes), class by prefix, and the
#: demand ``{(class, device): gbps}``
DemandClasses = tuple[list[str], list[frozenset[int]], dict[str, int], dict[tuple[int, int], float]]


def demand_classes(intent: Intent) -> DemandClasses:
    """The destination classes of ``intent``'s demand (the same for every plan of the intent)."""
    index = {d.name: i for i, d in enumerate(intent.devices)}
    total: dict[tuple[str, int], float] = defaultdict(float)
    for dm in intent.effective_demands:
        if dm.gbps > 0:
            total[(dm.to, index[dm.from_])] += dm.gbps
    origins_of = {p.prefix: frozenset(index[o] for o in p.origins) for p in intent.prefixes}
    prefixes = sorted({p for p, _ in total})
    cls = {p: c for c, p in enumerate(prefixes)}
    demand = {(cls[p], v): g for (p, v), g in total.items()}
    return prefixes, [origins_of[p] for p in prefixes], cls, demand


def _coded_row(route: np.ndarray, u: int, coded: tuple[list[str], np.ndarray, list[str]],
               gmap: dict[str, int], cls: dict[str, int],
               at_cache: dict[int, tuple[list[str], np.ndarray, np.ndarray]]) -> None:
    """Fill device ``u``'s column of ``route`` from a route mapping's ``coded()`` arrays
    (``prefixes, code, gids``: prefix ``i`` uses group ``gids[code[i]]``, -1 none). The
    class -> position map of a shared prefix list is computed once (``at_cache``)."""
    prefixes, code, gids = coded
    hit = at_cache.get(id(prefixes))
    if hit is None or hit[0] is not prefixes:
        pos = {p: i for i, p in enumerate(prefixes)}
        ordered = sorted(cls.items(), key=lambda kv: kv[1])
        where = np.array([pos.get(p, -1) for p, _c in ordered], dtype=np.int64)
        have = np.flatnonzero(where >= 0)
        hit = at_cache[id(prefixes)] = (prefixes, have, where[have])
    _, have, where = hit
    lut = np.array([gmap.get(g, -1) for g in gids] + [-1], dtype=np.int32)  # code -1 -> last (-1)
    route[have, u] = lut[code[where]]


class _Groups:
    """The groups of a table as they are compiled: CSR rows of edges and weights, and the budget errors."""

    def __init__(self, topo: Topology, like: Table | None = None):
        self.edges: list[int] = [] if like is None else like.g_edge.tolist()
        self.weights: list[float] = [] if like is None else like.g_weight.tolist()
        self.indptr: list[int] = [0] if like is None else like.g_indptr.tolist()
        self.errors: list[str] = []
        self.ports_of: list[dict[str, tuple[int, str]]] = [{} for _ in range(topo.n)]  # port -> (edge, neighbor)
        dst = topo.edge_dst.tolist()
        for (v, port), e in topo.port_edge.items():
            self.ports_of[v][port] = (e, topo.names[dst[e]])

    def device(self, name: str, u: int, dp: DevicePlan, budget: int) -> dict[str, int]:
        """Add device ``name``'s (index ``u``) groups; their indexes by group id."""
        gmap: dict[str, int] = {}
        ports = self.ports_of[u]
        for gid, hops in dp.groups.items():
            total = 0
            for h in hops:
                hit = ports.get(h.port)
                if hit is None:
                    raise ValueError(f"plan: device '{name}' group {gid}: no link on port '{h.port}'")
                e, behind = hit
                if behind != h.neighbor:
                    raise ValueError(f"plan: device '{name}' group {gid}: port '{h.port}' leads to "
                                     f"'{behind}', not '{h.neighbor}'")
                w = h.weight
                if w <= 0:
                    self.errors.append(f"{name} group {gid}: weight {w} on {h.port} is not positive")
                    w = 0
                self.edges.append(e)
                self.weights.append(w)
                total += h.weight
            if total > budget:
                self.errors.append(f"{name} group {gid}: weights sum to {total} > max_ecmp_entries {budget}")
            gmap[gid] = len(self.indptr) - 1
            self.indptr.append(len(self.edges))
        return gmap


def plan_table(intent: Intent, plan: Plan, topo: Topology, classes: DemandClasses | None = None, *,
               like: tuple[Plan, Table] | None = None) -> Table:
    """Compile ``plan`` (for ``intent``'s topology) into a :class:`Table`; ``classes``:
    :func:`demand_classes` of ``intent`` when the caller has them (it compiles many plans of one intent).
    ``like``: another plan on the same topology and its table (a failure reaction and the plan in force):
    where the demand is the same, a device whose :class:`DevicePlan` is the very object of that plan keeps
    its column of routes and its groups (their rows kept as they are, unused ones included), and only the
    other devices are compiled (on Clos L, a reaction made from the full plan changes a quarter of them).

    Raises ``ValueError`` when the plan names an unknown device, a port the
    device does not have, or a neighbor that is not behind that port.
    """
    prefixes, origins, cls, demand = demand_classes(intent) if classes is None else classes
    dkeys = sorted(demand)
    d_class = np.array([k[0] for k in dkeys], dtype=np.int64)
    d_device = np.array([k[1] for k in dkeys], dtype=np.int64)
    d_gbps = np.array([demand[k] for k in dkeys], dtype=np.float64)
    prev_plan, prev = like if like is not None else (None, None)
    route = np.full((len(prefixes), topo.n), -1, dtype=np.int32)
    if prev is not None and not (prev.prefixes == prefixes and prev.origins == origins
                                 and np.array_equal(prev.demand_class, d_class)
                                 and np.array_equal(prev.demand_device, d_device)
                                 and np.array_equal(prev.demand_gbps, d_gbps)):
        prev_plan = prev = None
    groups = _Groups(topo, prev)
    kept: set[str] = set()
    if prev_plan is not None and prev is not None:
        kept = {name for name, dp in plan.devices.items() if prev_plan.devices.get(name) is dp}
        route = prev.route.copy()  # whole, then the columns not kept cleared: a gather of columns is slower
        fresh = np.ones(topo.n, dtype=bool)
        fresh[[topo.index[name] for name in kept if name in topo.index]] = False
        route[:, fresh] = -1
        groups.errors = [e for e in prev.budget_errors if e.split(" ", 1)[0] in kept]
        order = {name: i for i, name in enumerate(plan.devices)}
    at_cache: dict[int, tuple[list[str], np.ndarray, np.ndarray]] = {}
    for name, dp in plan.devices.items():
        u = topo.index.get(name)
        if u is None:
            raise ValueError(f"plan: unknown device '{name}'")
        if name in kept:
            continue
        gmap = groups.device(name, u, dp, intent.max_ecmp_entries(name))
        coded = getattr(dp.routes, "coded", None)
        if coded is not None:  # a lazy mapping that hands over its arrays (solver.clos)
            _coded_row(route, u, coded(), gmap, cls, at_cache)
            continue
        row = route[:, u]
        for prefix, gid in dp.routes.items():
            c = cls.get(prefix)
            if c is not None and gid in gmap:
                row[c] = gmap[gid]
    for c, orig in enumerate(origins):
        route[c, list(orig)] = -1
    if kept:  # in the plan's device order, as compiled from scratch
        groups.errors.sort(key=lambda e: order.get(e.split(" ", 1)[0], -1))
    indptr = np.asarray(groups.indptr, dtype=np.int64)
    weight = np.asarray(groups.weights, dtype=np.float64)
    sums = np.add.reduceat(weight, indptr[:-1]) if len(weight) else np.empty(0)
    lens = np.diff(indptr)
    frac = weight / np.repeat(np.where(sums > 0, sums, 1.0), lens) if len(weight) else weight
    return Table(prefixes, origins, route, indptr, np.asarray(groups.edges, dtype=np.int64), frac, weight,
                 d_class, d_device, d_gbps, groups.errors)


def ranges(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``arange(indptr[r], indptr[r+1])`` for each row, and each row's length."""
    starts = indptr[rows]
    lens = indptr[rows + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64), lens
    offs = np.repeat(starts - (np.cumsum(lens) - lens), lens)
    return offs + np.arange(total, dtype=np.int64), lens


def _aggregate(keys: np.ndarray, amounts: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` (ascending, each below ``n_keys``) and the sums of their
    ``amounts``, summed in the order given. Where the keys are many, one pass over a dense
    array of every key is faster than sorting them."""
    if len(keys) * 16 >= n_keys:
        total = np.bincount(keys, weights=amounts, minlength=n_keys)
        hit = np.bincount(keys, minlength=n_keys)
        uniq = np.flatnonzero(hit)
        return uniq, total[uniq]
    uniq, inv = np.unique(keys, return_inverse=True)
    return uniq, np.bincount(inv, weights=amounts, minlength=len(uniq))


@dataclass(slots=True)
class Flow:
    """Traffic of a table: active states, transitions, edge loads, drops, loops.

    States are ``key = class * n + device`` with positive arrival, sorted by
    key (so by class), or by (class block, device, class) when propagated
    ``device_major``. Transitions are sorted by source state; ``t_indptr``
    indexes them per state, ``in_indptr``/``in_trans`` per destination state,
    ``e_indptr``/``e_trans`` per edge.
    """

    n: int
    keys: np.ndarray
    x: np.ndarray  # arrival per state (gbps)
    d: np.ndarray  # demand entering at the state
    sink: np.ndarray  # bool: no route and not an origin (black hole)
    t_src: np.ndarray
    t_dst: np.ndarray
    t_edge: np.ndarray
    t_frac: np.ndarray
    t_indptr: np.ndarray
    in_indptr: np.ndarray
    in_trans: np.ndarray
    e_indptr: np.ndarray
    e_trans: np.ndarray
    dev_indptr: np.ndarray  # CSR device -> states
    dev_states: np.ndarray
    load: np.ndarray  # per edge
    loops: list[tuple[int, tuple[int, ...]]]  # (class, devices still carrying traffic)

    @property
    def state_class(self) -> np.ndarray:
        return self.keys // self.n

    def drops(self) -> dict[tuple[int, int], float]:
        """Black-holed gbps by (class, device)."""
        idx = np.flatnonzero(self.sink)
        return {(int(k // self.n), int(k % self.n)): float(a)
                for k, a in zip(self.keys[idx], self.x[idx], strict=True) if a > 0}


def _csr(rows: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows' positions by row (CSR): a compiled counting sort, where a stable argsort of
    millions of transitions took a second or more."""
    return csr(np.ascontiguousarray(rows, dtype=np.int64), n_rows)


#: Classes per block of a ``device_major`` state order: (block, device, class). A single class's
#: states stay within its block's stretch of memory, and one device's states of many classes side by
#: side; 64 measured best on Clos L's failures (16 and 256 were slower).
BLOCK = 64


def propagate(table: Table, topo: Topology, *, device_major: bool = False) -> Flow:
    """Push every demand of ``table`` through it; see :class:`Flow`.

    ``device_major``: order the states by (class block, device, class) rather than by key
    (see :data:`BLOCK`). A failure's difference flow then finds the states it walks at one
    device side by side in memory, which is what the replay's scenarios spend their time on
    in large fabrics: waiting for memory.
    """
    n, n_cls = topo.n, len(table.prefixes)
    route = table.route.reshape(-1)
    acc = np.zeros(n_cls * n, dtype=np.float64)
    fk, fa = _aggregate(table.demand_class * n + table.demand_device, table.demand_gbps, n_cls * n)
    loops: list[tuple[int, tuple[int, ...]]] = []
    for _level in range(n + 1):
        keep = fa != 0
        fk, fa = fk[keep], fa[keep]
        if not len(fk):
            break
        acc[fk] += fa
        g = route[fk]
        routed = g >= 0
        fk, fa, g = fk[routed], fa[routed], g[routed]
        hop, lens = ranges(table.g_indptr, g.astype(np.int64))
        cls = np.repeat(fk // n, lens)
        nk = cls * n + topo.edge_dst[table.g_edge[hop]]
        fk, fa = _aggregate(nk, np.repeat(fa, lens) * table.g_frac[hop], n_cls * n)
    else:
        by_class: dict[int, list[int]] = defaultdict(list)
        for k in fk:
            by_class[int(k // n)].append(int(k % n))
        loops = [(c, tuple(sorted(v))) for c, v in sorted(by_class.items())]
    skeys = np.flatnonzero(acc > 0).astype(np.int64)  # sorted: every lookup by key goes through it
    d_acc = np.zeros(n_cls * n)
    np.add.at(d_acc, table.demand_class * n + table.demand_device, table.demand_gbps)
    order: np.ndarray | None = None
    new_of: np.ndarray | None = None
    if device_major:
        cls_, dev_ = skeys // n, skeys % n
        order = np.argsort(((cls_ // BLOCK) * n + dev_) * BLOCK + cls_ % BLOCK, kind="stable")
        new_of = np.empty(len(order), dtype=np.int64)
        new_of[order] = np.arange(len(order))
        keys = skeys[order]
    else:
        keys = skeys
    x = acc[keys]
    d = d_acc[keys]
    del acc, d_acc
    g = route[keys].astype(np.int64)
    routed = np.flatnonzero(g >= 0)
    hop, lens = ranges(table.g_indptr, g[routed])
    t_src = np.repeat(routed, lens)
    t_edge = table.g_edge[hop]
    t_frac = table.g_frac[hop]
    nk = (keys[t_src] // n) * n + topo.edge_dst[t_edge]
    pos = _positions(skeys, nk, n_cls * n)
    found = pos >= 0
    t_src, t_edge, t_frac, t_dst = t_src[found], t_edge[found], t_frac[found], pos[found]
    if new_of is not None:
        t_dst = new_of[t_dst]
    origin = np.zeros(len(skeys), dtype=bool)
    st_cls, st_dev = skeys // n, skeys % n
    for c, orig in enumerate(table.origins):
        lo, hi = np.searchsorted(skeys, [c * n, (c + 1) * n])
        if hi > lo and orig:
            origin[lo:hi] = np.isin(st_dev[lo:hi], list(orig))
    if order is not None:
        origin, st_dev = origin[order], st_dev[order]
    sink = (g < 0) & ~origin
    t_indptr = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(np.bincount(t_src, minlength=len(keys)), out=t_indptr[1:])
    in_indptr, in_trans = _csr(t_dst, len(keys))
    e_indptr, e_trans = _csr(t_edge, topo.n_edges)
    dev_indptr, dev_states = _csr(st_dev, n)
    load = np.bincount(t_edge, weights=x[t_src] * t_frac, minlength=topo.n_edges)
    del st_cls
    return Flow(n, keys, x, d, sink, t_src, t_dst, t_edge, t_frac, t_indptr, in_indptr, in_trans,
                e_indptr, e_trans, dev_indptr, dev_states, load, loops)


def _positions(skeys: np.ndarray, keys: np.ndarray, n_keys: int) -> np.ndarray:
    """Where each of ``keys`` sits in the sorted ``skeys`` (-1: not there), every key below ``n_keys``: a
    gather from a dense array of every key, where a binary search of Clos L's 7 million transitions among
    its 750,000 states took 0.55 s (the dense array is no larger than the one :func:`propagate` sums into)."""
    at = np.full(n_keys, -1, dtype=np.int32 if len(skeys) < 2**31 else np.int64)
    at[skeys] = np.arange(len(skeys), dtype=at.dtype)
    return at[keys].astype(np.int64)


def table_from_routes(intent: Intent, topo: Topology, base: Table,
                      routes: Mapping[str, Mapping[str, tuple[tuple[str, str], ...]]]) -> Table:
    """A table with ``routes`` (prefix -> device -> ((port, neighbor), ...), as the
    solver's ``routing.next_hops`` returns) and the weights of ``base``: next hops
    that ``base`` has keep their planned weight; new ones get the mean weight of
    the group's surviving members (1 when none survive)."""
    n = topo.n
    route = np.full_like(base.route, -1)
    g_edges: list[int] = []
    g_weights: list[float] = []
    g_indptr = [0]
    memo: dict[tuple[int, int, tuple[int, ...]], int] = {}
    for c, prefix in enumerate(base.prefixes):
        for name, hops in routes.get(prefix, {}).items():
            u = topo.index[name]
            if u in base.origins[c]:
                continue
            edges = tuple(sorted(topo.port_edge[(u, port)] for port, _nb in hops))
            g0 = int(base.route[c, u])
            key = (u, g0, edges)
            gi = memo.get(key)
            if gi is None:
                planned: dict[int, float] = {}
                if g0 >= 0:
                    lo, hi = base.g_indptr[g0], base.g_indptr[g0 + 1]
                    planned = dict(zip(base.g_edge[lo:hi].tolist(), base.g_weight[lo:hi].tolist(), strict=True))
                kept = [planned[e] for e in edges if e in planned]
                fill = float(np.mean(kept)) if kept else 1.0
                g_edges.extend(edges)
                g_weights.extend(planned.get(e, fill) for e in edges)
                gi = memo[key] = len(g_indptr) - 1
                g_indptr.append(len(g_edges))
            route[c, u] = gi
    indptr = np.asarray(g_indptr, dtype=np.int64)
    weight = np.asarray(g_weights, dtype=np.float64)
    lens = np.diff(indptr)
    sums = np.add.reduceat(weight, indptr[:-1]) if len(weight) else np.empty(0)
    frac = weight / np.repeat(sums, lens) if len(weight) else weight
    del n
    return Table(base.prefixes, base.origins, route, indptr, np.asarray(g_edges, dtype=np.int64), frac, weight,
                 base.demand_class, base.demand_device, base.demand_gbps, [])


def looped(table: Table, topo: Topology, classes: set[int], *, max_steps: int = 200_000) -> dict[int, float] | None:
    """Per class of ``classes``, the gbps of its demand that enters a forwarding loop, or None when the
    walk would take more than ``max_steps`` steps.

    A switch hashes a flow to one next hop, the same each time the flow comes by, so a flow that comes back
    to a device it went through takes the same way again and loops until its TTL runs out: what loops is
    the traffic whose path reaches a device a second time (:func:`propagate`'s hop-by-hop split instead
    splits it again at each pass, which is right for its loads and not for what a loop keeps). Each demand
    is walked along its paths, split by the group fractions, until it is delivered, black-holed or back
    at a device it has seen.
    """
    out: dict[int, float] = {}
    steps = 0
    dst, g_indptr, g_edge, g_frac = topo.edge_dst, table.g_indptr, table.g_edge, table.g_frac
    for c, v0, gbps in zip(table.demand_class.tolist(), table.demand_device.tolist(), table.demand_gbps.tolist(),
                           strict=True):
        if c not in classes or gbps <= 0:
            continue
        route, origins = table.route[c], table.origins[c]
        stack: list[tuple[int, float, frozenset[int]]] = [(v0, gbps, frozenset({v0}))]
        while stack:
            steps += 1
            if steps > max_steps:
                return None
            v, amount, seen = stack.pop()
            g = int(route[v])
            if v in origins or g < 0:
                continue
            for h in range(int(g_indptr[g]), int(g_indptr[g + 1])):
                nxt, part = int(dst[g_edge[h]]), amount * float(g_frac[h])
                if nxt in seen:
                    out[c] = out.get(c, 0.0) + part
                else:
                    stack.append((nxt, part, seen | {nxt}))
    return out
