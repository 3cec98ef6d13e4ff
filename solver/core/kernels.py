"""Compiled loops of the solver: the eBGP path-vector outcome toward one origin set, and the
water-filling of the Clos weight rounding.

:func:`solver.core.routing._bgp_class` and :func:`solver.clos.batches.water_fill` own the
semantics; these kernels run the same steps over arrays, compiled by numba (compiled once per
machine and kept in ``__pycache__`` where the process may write, see :mod:`solver.core.jit`).
Per destination pod of a 2,688-device Clos, the interpreted path-vector rounds took 17 ms;
the water-filling, written as numpy passes (bisection on a level, then one unit at a time
among each member's next few), took 2 ms per batch of 512 groups, mostly in the calls.
"""

from __future__ import annotations

import numpy as np

from solver.core.jit import compiled

__all__ = ["bgp_rounds", "water_fill_units"]


@compiled(nogil=True)
def bgp_rounds(indptr: np.ndarray, adj_arc: np.ndarray, arc_head: np.ndarray, asn: np.ndarray, rank: np.ndarray,
               transit: np.ndarray, active: np.ndarray, origins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The path-vector rounds toward ``origins``; returns ``(device, arc)`` pairs, one per next hop.

    Device ``u``'s usable arcs are ``adj_arc[indptr[u]:indptr[u + 1]]``, leading to
    ``arc_head``. ``asn`` per device (one shared value for "none"), ``rank``: the order of the
    devices' names (a best path's tie-break: the advertising neighbor whose name is
    least), ``transit``: may re-advertise, ``active``: takes part at all. A device's
    best AS path is kept as the chain of advertisers it was chosen from, so the loop
    check walks that chain (its length is the hop count). The next-hop arc is the
    reverse of the advertising arc (arcs come in pairs ``2i``/``2i + 1``).
    """
    n = len(indptr) - 1
    dist = np.full(n, -1, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)  # the advertiser a device's best path came from
    origin = np.zeros(n, dtype=np.bool_)
    for o in origins:
        origin[o] = True
        dist[o] = 0
    out_dev = np.empty(len(adj_arc), dtype=np.int64)
    out_arc = np.empty(len(adj_arc), dtype=np.int64)
    n_out = 0
    frontier = origins.copy()
    reached = np.empty(n, dtype=np.int64)
    k = 0
    while len(frontier) > 0:
        k += 1
        m = 0
        for u in frontier:
            if not origin[u] and not transit[u]:
                continue  # a drained device advertises only its own prefixes
            for e in range(indptr[u], indptr[u + 1]):
                arc = adj_arc[e]
                w = arc_head[arc]
                if not active[w] or origin[w]:
                    continue
                aw = asn[w]
                x = u
                loop = False
                while x != -1:  # AS-path loop prevention: w's ASN anywhere on u's advertised path
                    if asn[x] == aw:
                        loop = True
                        break
                    x = parent[x]
                if loop:
                    continue
                dw = dist[w]
                if dw == -1:
                    dist[w] = k
                    reached[m] = w
                    m += 1
                elif dw != k:
                    continue
                out_dev[n_out] = w
                out_arc[n_out] = arc ^ 1
                n_out += 1
                if parent[w] == -1 or rank[u] < rank[parent[w]]:
                    parent[w] = u
        frontier = reached[:m].copy()
    return out_dev[:n_out], out_arc[:n_out]


@compiled(nogil=True)
def water_fill_units(a: np.ndarray, slope: np.ndarray, w0: np.ndarray, can: np.ndarray,
                     left: np.ndarray) -> np.ndarray:
    """:func:`solver.clos.batches.water_fill` (which owns the semantics), one unit at a time.

    Each member's next unit's cost is kept and recomputed only when the member takes the
    unit, so a row costs ``left * (members + arcs)`` operations.
    """
    rows, n, r = a.shape
    w = w0.astype(np.int64)
    cost = np.empty(n, dtype=np.float64)
    if n == 0:
        return w
    for i in range(rows):
        for j in range(n):
            cost[j] = _next_cost(a, slope, w, can, i, j, r)
        for _ in range(left[i]):
            best = 0
            for j in range(1, n):
                if cost[j] < cost[best]:
                    best = j  # ties: the lower member
            w[i, best] += 1
            cost[best] = _next_cost(a, slope, w, can, i, best, r)
    return w


@compiled(nogil=True, inline="always")
def _next_cost(a: np.ndarray, slope: np.ndarray, w: np.ndarray, can: np.ndarray, i: int, j: int, r: int) -> float:
    if not can[i, j]:
        return np.inf
    nxt = w[i, j] + 1
    c = -np.inf
    for k in range(r):
        v = a[i, j, k] + slope[i, j, k] * nxt
        if v > c:
            c = v
    return c
