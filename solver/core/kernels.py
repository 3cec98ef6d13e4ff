"""Compiled loops of the routing layer: the eBGP path-vector outcome toward one origin set.

:func:`solver.core.routing._bgp_class` owns the semantics (RFC 7938 as FRR computes it,
see :mod:`solver.core.routing`); this kernel runs the same rounds over arrays, compiled by
numba (``cache=True``: compiled once per machine, kept in ``__pycache__``). Per destination
pod of a 2,688-device Clos, the interpreted rounds took 17 ms.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["bgp_rounds"]


@njit(cache=True, nogil=True)
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
