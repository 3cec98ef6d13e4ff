"""Traffic-matrix estimation from link loads through a plan (tomogravity).

Pure numpy/scipy, no I/O. Given an intent and its plan, :func:`routing_matrix`
builds ``A``: the fraction of a demand (ingress device, destination prefix) that
each directed edge carries, with the plan's WCMP weights, from the same
forwarding table that :mod:`safety.forwarding` propagates demand through
(edge ``2*i`` is ``a -> b`` of link ``i``, ``2*i+1`` is ``b -> a``). Column ``j``
is the pair ``pairs[j]``; pairs whose ingress originates the prefix (local
delivery, never on a fabric link) are left out.

:func:`tomogravity` estimates the matrix from measured edge loads ``y``
(Zhang, Roughan, Duffield, Greenberg, SIGMETRICS 2003):

1. **Edge totals.** At an edge device (one that originates prefixes or is a
   ToR), the traffic its hosts send into the fabric is its links' total
   outgoing load and what the fabric delivers to it the total incoming load:
   edge devices carry no transit (true of a valley-free RFC 7938 Clos; a ToR
   that did transit would be over-counted on both sides).
2. **Gravity prior** (the generalized one: no self pairs):
   ``x_g(i, p) = In(i) * Out(p) / sum of Out(q) over the prefixes q not local to i``,
   where ``Out(p)`` is the incoming total of p's origins, shared evenly among
   the prefixes each origin originates.
3. **Refinement**: the weighted minimum-norm correction that fits the link
   loads, ``x = x_g + W z`` with ``z`` the minimum-norm least-squares solution
   of ``A W z = y - A x_g`` (LSQR) and ``W = diag(x_g)`` (relative changes
   cost the same for large and small entries); negative entries are clipped to
   zero and the fit repeated on the remaining ones (a few rounds), so the
   result is non-negative.

Example
-------
>>> from controller.gen import clos_document
>>> from controller.model.intent import validate_intent
>>> from controller.planning import compile_plan
>>> intent = validate_intent(clos_document(pods=2, tors=2, planes=2, spines=2, scale_to_ecmp=False))
>>> plan = compile_plan(intent)
>>> rm = routing_matrix(intent, plan)
>>> y = link_loads(intent, plan)
>>> est = tomogravity(rm, y)
>>> bool(est.residual < 1e-6 * max(1.0, float(y.sum())))
True
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, aslinearoperator, lsqr

from controller.model import Intent
from controller.model.domain import Demand
from controller.model.plan import Plan
from safety.forwarding import Table, Topology, build_topology, demand_classes, plan_table, propagate, ranges

__all__ = ["Estimate", "Loaded", "RoutingMatrix", "edge_devices", "edge_totals", "gravity", "link_loader", "link_loads",
           "routing_matrix", "routing_operator", "tomogravity", "with_demands"]


@dataclass(frozen=True, slots=True)
class RoutingMatrix:
    """``A`` (edges x pairs, CSR) and what indexes it."""

    topo: Topology
    pairs: tuple[tuple[str, str], ...]  # (ingress device, prefix)
    matrix: sp.csr_matrix | LinearOperator  # explicit (routing_matrix) or matrix-free (routing_operator)
    edge_devices: tuple[str, ...]
    prefix_origins: Mapping[str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class Estimate:
    """An estimated matrix (gbps per pair of ``pairs``), its prior and the fit."""

    pairs: tuple[tuple[str, str], ...]
    gbps: np.ndarray
    prior: np.ndarray
    residual: float  # ||A x - y||_1 over the measured edges

    def demands(self, threshold: float = 1e-9) -> dict[tuple[str, str], float]:
        return {p: float(g) for p, g in zip(self.pairs, self.gbps, strict=True) if g > threshold}


def with_demands(intent: Intent, demands: Mapping[tuple[str, str], float]) -> Intent:
    """``intent`` with its demands replaced, unvalidated: the pairs must name its devices and its prefixes
    (canonical) and the rates be non-negative."""
    ds = tuple(Demand.model_construct(from_=f, to=p, gbps=float(g)) for (f, p), g in demands.items())
    return intent.model_copy(update={"demands": ds})


@dataclass(frozen=True, slots=True)
class Loaded:
    """A plan's forwarding table under an intent's demand, the intent's topology and the plan's directed-edge
    loads (:func:`link_loader`)."""

    topo: Topology
    table: Table
    load: np.ndarray


def link_loads(intent: Intent, plan: Plan, demands: Mapping[tuple[str, str], float] | None = None) -> np.ndarray:
    """Load (gbps) of every directed edge under ``demands`` (the intent's by default), by safety's propagation."""
    return link_loader(intent if demands is None else with_demands(intent, demands))(plan).load


def link_loader(intent: Intent) -> Callable[[Plan], Loaded]:
    """:func:`link_loads` of ``intent`` as a function of the plan, with the plan's table (which
    :func:`routing_matrix` can take), for a caller that weighs many plans of one intent: its topology and
    demand classes are built once."""
    topo, classes = build_topology(intent), demand_classes(intent)

    def load(plan: Plan) -> Loaded:
        table = plan_table(intent, plan, topo, classes)
        return Loaded(topo, table, propagate(table, topo).load)

    return load


def edge_devices(intent: Intent) -> tuple[str, ...]:
    """The devices where traffic enters and leaves the fabric: prefix origins and ToRs."""
    origins = {o for p in intent.prefixes for o in p.origins}
    return tuple(d.name for d in intent.devices if d.name in origins or d.role == "tor")


def _all_prefix_table(intent: Intent, plan: Plan, topo: Topology, prefixes: frozenset[str] | None = None) -> Table:
    """The plan's forwarding table with a class for every prefix (of ``prefixes``, all by default) that has
    a non-origin device."""
    names = [d.name for d in intent.devices]
    unit: dict[tuple[str, str], float] = {}
    for p in intent.prefixes:
        if prefixes is not None and p.prefix not in prefixes:
            continue
        src = next((n for n in names if n not in p.origins), None)
        if src is not None:
            unit[(src, p.prefix)] = 1.0
    return plan_table(with_demands(intent, unit), plan, topo)


def _table(intent: Intent, plan: Plan, wanted: frozenset[str] | None, loaded: Loaded | None
           ) -> tuple[Topology, Table]:
    """The topology and a table of ``plan`` with a class for each prefix of ``wanted`` (every prefix by
    default): ``loaded``'s when it has them all, else one built for them."""
    if loaded is not None and wanted is not None and wanted <= set(loaded.table.prefixes):
        return loaded.topo, loaded.table
    topo = build_topology(intent)
    return topo, _all_prefix_table(intent, plan, topo, wanted)


def routing_matrix(intent: Intent, plan: Plan, *, ingresses: Iterable[str] | None = None,
                   prefixes: Iterable[str] | None = None, loaded: Loaded | None = None) -> RoutingMatrix:
    """``A[e, j]``: the fraction of pair ``j``'s demand on directed edge ``e`` under ``plan``.

    ``ingresses`` defaults to the edge devices (prefix origins and ToRs), ``prefixes`` to every prefix
    of ``intent`` (fewer make it faster: each prefix's columns are computed alone, so they are the same
    as the full matrix's for the same pairs). ``loaded``: :func:`link_loader`'s answer for ``plan`` under
    ``intent`` when the caller has it (its table is taken where it has every prefix asked for: the same
    numbers). Traffic in a forwarding loop is cut after as many hops as there are devices.
    """
    wanted = None if prefixes is None else frozenset(prefixes)
    topo, table = _table(intent, plan, wanted, loaded)
    n, n_edges = topo.n, topo.n_edges
    sources = list(ingresses) if ingresses is not None else list(edge_devices(intent))
    src_idx = np.array([topo.index[s] for s in sources], dtype=np.int64)
    to_dst = sp.csr_matrix((np.ones(n_edges), (np.arange(n_edges), topo.edge_dst)), shape=(n_edges, n))
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    pairs: list[tuple[str, str]] = []
    for c, prefix in enumerate(table.prefixes):
        if wanted is not None and prefix not in wanted:
            continue
        keep = ~np.isin(src_idx, list(table.origins[c]))
        si = src_idx[keep]
        if not len(si):
            continue
        g = table.route[c].astype(np.int64)
        routed = np.flatnonzero(g >= 0)
        hop, lens = ranges(table.g_indptr, g[routed])
        split = sp.csr_matrix((table.g_frac[hop], (np.repeat(routed, lens), table.g_edge[hop])), shape=(n, n_edges))
        step = (split @ to_dst).tocsc()  # device -> device fractions
        front = np.zeros((len(si), n))
        front[np.arange(len(si)), si] = 1.0
        reach = np.zeros_like(front)
        for _ in range(n):
            reach += front
            front = np.asarray((step.T @ front.T).T)
            if not front.any():
                break
        load = sp.csr_matrix(reach) @ split  # sources x edges
        coo = load.tocoo()
        base = len(pairs)
        rows.append(coo.col.astype(np.int64))
        cols.append(coo.row.astype(np.int64) + base)
        vals.append(coo.data)
        pairs.extend((topo.names[i], prefix) for i in si)
    matrix = sp.csr_matrix((np.concatenate(vals) if vals else np.empty(0),
                            (np.concatenate(rows) if rows else np.empty(0, dtype=np.int64),
                             np.concatenate(cols) if cols else np.empty(0, dtype=np.int64))),
                           shape=(n_edges, len(pairs)))
    origins = {p.prefix: frozenset(p.origins) for p in intent.prefixes}
    return RoutingMatrix(topo, tuple(pairs), matrix, tuple(sources), origins)


def edge_totals(rm: RoutingMatrix, y: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    """Traffic entering (``In``) and leaving (``Out``) the fabric at each edge device, from edge loads."""
    topo = rm.topo
    out = np.bincount(topo.edge_src, weights=y, minlength=topo.n)
    inn = np.bincount(topo.edge_dst, weights=y, minlength=topo.n)
    return ({d: float(out[topo.index[d]]) for d in rm.edge_devices},
            {d: float(inn[topo.index[d]]) for d in rm.edge_devices})


def gravity(rm: RoutingMatrix, ingress: Mapping[str, float], egress: Mapping[str, float]) -> np.ndarray:
    """The generalized gravity prior over ``rm.pairs`` (see the module docstring)."""
    per_origin: dict[str, int] = defaultdict(int)
    for origins in rm.prefix_origins.values():
        for o in origins:
            per_origin[o] += 1
    out_p = {p: sum(egress.get(o, 0.0) / per_origin[o] for o in origins) for p, origins in rm.prefix_origins.items()}
    total = sum(out_p.values())
    local: dict[str, float] = defaultdict(float)
    for p, origins in rm.prefix_origins.items():
        for o in origins:
            local[o] += out_p[p]
    x = np.empty(len(rm.pairs))
    for j, (i, p) in enumerate(rm.pairs):
        rest = total - local.get(i, 0.0)
        x[j] = ingress.get(i, 0.0) * out_p.get(p, 0.0) / rest if rest > 0 else 0.0
    return x


def _weighted(a: LinearOperator, w: np.ndarray, rows: np.ndarray) -> LinearOperator:
    """``A[rows] @ diag(w)`` as an operator."""
    n_edges = a.shape[0]

    def matvec(z: np.ndarray) -> np.ndarray:
        out: np.ndarray = (a @ (w * np.ravel(z)))[rows]
        return out

    def rmatvec(r: np.ndarray) -> np.ndarray:
        full = np.zeros(n_edges)
        full[rows] = np.ravel(r)
        out: np.ndarray = w * (a.T @ full)
        return out

    return LinearOperator((len(rows), a.shape[1]), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)


def tomogravity(rm: RoutingMatrix, y: np.ndarray, *, measured: np.ndarray | None = None, rounds: int = 3,
                tol: float = 1e-8, iter_lim: int = 300) -> Estimate:
    """Estimate the pairs' demands from directed edge loads ``y`` (gbps per edge).

    ``measured`` (bool per edge) marks the edges whose load is known (all by
    default); unknown edges are left out of the fit and of the edge totals
    (whose devices then under-count). ``rounds`` bounds the clip-and-refit
    rounds, ``tol`` and ``iter_lim`` each LSQR solve. See the module docstring.
    """
    y = np.asarray(y, dtype=np.float64)
    known = np.ones(len(y), dtype=bool) if measured is None else np.asarray(measured, dtype=bool)
    ingress, egress = edge_totals(rm, np.where(known, y, 0.0))
    prior = gravity(rm, ingress, egress)
    a = aslinearoperator(rm.matrix)
    rows = np.flatnonzero(known)
    target = y[rows]
    x = prior.copy()
    active = prior > 0
    for _ in range(max(1, rounds)):
        if not active.any():
            break
        w = np.where(active, prior, 0.0)  # W = diag(prior) on the active pairs, 0 elsewhere
        aw = _weighted(a, w, rows)
        r = target - (a @ w)[rows]
        z = lsqr(aw, r, atol=tol, btol=tol, iter_lim=iter_lim)[0]
        x = w + w * z
        negative = x < 0
        if not negative.any():
            break
        x[negative] = 0.0
        active &= ~negative
    residual = float(np.abs((a @ x)[rows] - target).sum())
    return Estimate(rm.pairs, x, prior, residual)


def routing_operator(intent: Intent, plan: Plan, *, ingresses: Iterable[str] | None = None) -> RoutingMatrix:
    """:func:`routing_matrix` without materializing ``A``: its ``matrix`` is a
    ``LinearOperator`` that propagates a pair vector
    through the plan's forwarding (states ``(class, device)``, level by level)
    and back (its adjoint), for fabrics whose ``A`` would not fit in memory.
    Memory is linear in the forwarding table (classes x routed next hops), not
    in pairs x path lengths."""
    topo = build_topology(intent)
    table = _all_prefix_table(intent, plan, topo)
    n, n_edges, n_cls = topo.n, topo.n_edges, len(table.prefixes)
    sources = list(ingresses) if ingresses is not None else list(edge_devices(intent))
    src_idx = np.array([topo.index[s] for s in sources], dtype=np.int64)
    route = table.route.reshape(-1).astype(np.int64)
    routed = np.flatnonzero(route >= 0)
    hop, lens = ranges(table.g_indptr, route[routed])
    state = np.repeat(routed, lens)
    edge = table.g_edge[hop]
    frac = table.g_frac[hop]
    n_states = n_cls * n
    emit = sp.csr_matrix((frac, (state, edge)), shape=(n_states, n_edges))  # state -> edge fractions
    step = sp.csr_matrix((frac, (state, (state // n) * n + topo.edge_dst[edge])), shape=(n_states, n_states))
    del hop, lens, state, edge, frac
    pair_state: list[np.ndarray] = []
    pairs: list[tuple[str, str]] = []
    for c, prefix in enumerate(table.prefixes):
        si = src_idx[~np.isin(src_idx, list(table.origins[c]))]
        pair_state.append(c * n + si)
        pairs.extend((topo.names[i], prefix) for i in si)
    cols = np.concatenate(pair_state) if pair_state else np.empty(0, dtype=np.int64)
    step_t = step.T.tocsr()

    def matvec(x: np.ndarray) -> np.ndarray:
        front = np.zeros(n_states)
        front[cols] = np.ravel(x)
        reach = np.zeros(n_states)
        for _ in range(n):
            reach += front
            front = step_t @ front
            if not front.any():
                break
        out: np.ndarray = emit.T @ reach
        return out

    def rmatvec(r: np.ndarray) -> np.ndarray:
        value = emit @ np.ravel(r)  # expected measured load downstream of each state
        total = value.copy()
        for _ in range(n):
            value = step @ value
            if not value.any():
                break
            total += value
        out: np.ndarray = total[cols]
        return out

    op = LinearOperator((n_edges, len(pairs)), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    origins = {p.prefix: frozenset(p.origins) for p in intent.prefixes}
    return RoutingMatrix(topo, tuple(pairs), op, tuple(sources), origins)
