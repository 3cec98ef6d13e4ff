"""The pod-level WCMP model of a clean 3-tier RFC 7938 Clos.

This module owns the decomposition that makes WCMP scale with pods instead of
prefixes. In a 3-tier Clos (ToRs linked to every leaf of their pod, one leaf
per plane per pod, leaves linked to spines of their plane) each plane is a
two-stage leaf-spine network, and the choices BGP leaves open are the ToR's
split over planes and the leaf's split over its plane's spines. Variables:

* ``a[q, p, l]``: traffic from pod ``q`` to pod ``p`` sent into plane ``l``;
  every ToR of pod ``q`` splits its traffic for any ToR of pod ``p`` in the
  proportions ``a[q, p, :] / D[q, p]`` (one split per pod pair: a restriction
  of per-ToR splits; the LP bound is the optimum *of this model*);
* ``g[q, p, l, j]``: the part of ``a[q, p, l]`` that leaf ``(q, l)`` sends via
  spine ``j``; a leaf's split is per destination pod, which loses nothing,
  since every destination in pod ``p`` leaves plane ``l`` at the same leaf.

Load rows cover all four arc kinds (ToR up, leaf down to a ToR, leaf up, spine
down) with each ToR's exact load as a linear function of ``a``, so the same
matrix gives the LP's capacity rows and the loads of any split (rounded, or
ECMP). Which planes and spines a pod pair may use is read off the BGP routes
(one path-vector simulation per destination pod, :mod:`solver.core.routing`), so
the model never uses a path BGP lacks. :func:`build_pod_model` returns
``None`` when the fabric is not such a clean Clos.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import chain
from typing import Any

import numpy as np
import scipy.sparse as sp

from controller.model import Role
from controller.model.errors import Infeasible
from solver.core.fabric import Fabric
from solver.core.routing import PathVector, bgp_hops
from solver.core.weights import device_budget

__all__ = ["PodModel", "build_pod_model", "pod_budgets"]


class GColumns(Mapping[tuple[int, int, int, int], int]):
    """``(q, p, l, spine arc) -> column`` of the ``g`` variables, computed rather than stored (Clos XL
    has 3.9M): a leaf group's columns follow one another in the order of their ``a`` columns, its
    members in the order of ``allowed_spines``."""

    __slots__ = ("_a_col", "_spines", "counts", "first", "_first", "_n")

    def __init__(self, a_col: dict[tuple[int, int, int], int],
                 allowed_spines: dict[tuple[int, int, int], list[int]]) -> None:
        self._a_col, self._spines = a_col, allowed_spines
        #: per ``a`` column, how many ``g`` columns (spines of its leaf group) it has, and the first of them
        self.counts = np.fromiter((len(allowed_spines.get(k) or ()) for k in a_col), dtype=np.int64,
                                  count=len(a_col))
        self.first = len(a_col) + np.cumsum(self.counts) - self.counts
        self._first: list[int] = self.first.tolist()
        self._n = int(self.counts.sum())

    def span(self, a: int) -> tuple[int, int]:
        """The first ``g`` column of ``a`` column ``a``'s leaf group and how many it has (one per spine of
        ``allowed_spines``, in its order)."""
        return self._first[a], int(self.counts[a])

    def __getitem__(self, key: tuple[int, int, int, int]) -> int:
        group = key[:3]
        a = self._a_col.get(group)  # type: ignore[arg-type]
        arcs = self._spines.get(group)  # type: ignore[arg-type]
        if a is None or not arcs or key[3] not in arcs:
            raise KeyError(key)
        return self._first[a] + arcs.index(key[3])

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        for k in self._a_col:
            for arc in self._spines.get(k) or ():
                yield (*k, arc)

    def __len__(self) -> int:
        return self._n


@dataclass
class PodModel:
    """Structure, routes and the linear load model of a clean Clos (see the module docstring)."""

    fab: Fabric
    pods: list[int]
    tor_pod: dict[int, int]
    tors_of: dict[int, list[int]]
    leaf_at: dict[tuple[int, int], int]
    leaf_pp: dict[int, tuple[int, int]]
    tor_arc: dict[tuple[int, int], int]  # (ToR, plane) -> arc up to its leaf
    down_arc: dict[tuple[int, int], int]  # (leaf, ToR) -> arc down
    spine_down: dict[tuple[int, int], int]  # (spine, destination pod) -> arc, where the spine has a route
    allowed_planes: dict[tuple[int, int], list[int]]  # (q, p) -> planes BGP offers ToRs of q toward p
    allowed_spines: dict[tuple[int, int, int], list[int]]  # (q, p, l) -> arcs leaf (q, l) -> spine, toward p
    d_qp: dict[tuple[int, int], float]
    a_col: dict[tuple[int, int, int], int]
    g_col: GColumns  # (q, p, l, spine arc) -> column
    load_matrix: sp.csr_matrix  # arcs x variables: gbps on each arc
    scale: float
    _shift: sp.csr_matrix | None = None  # LP columns -> variables, when least shares are substituted
    _g_a: np.ndarray | None = None  # g_owner's cache
    _g_arcs: tuple[np.ndarray, np.ndarray] | None = None  # g_arcs' cache

    def with_fabric(self, fab: Fabric) -> PodModel | None:
        """This model on ``fab``, the same fabric but for its arcs' capacities (routes, columns and load rows
        do not depend on them), or None when ``fab`` differs in more than its capacities."""
        old = self.fab
        if (old.names != fab.names or old.arc_port != fab.arc_port or old.asn != fab.asn
                or not all(np.array_equal(getattr(old, k), getattr(fab, k))
                           for k in ("alive", "drained", "arc_tail", "arc_head", "arc_metric", "adj_indptr",
                                     "adj_arc"))):
            return None
        return replace(self, fab=fab, scale=_scale(fab), _shift=None, _g_a=None, _g_arcs=None)

    def g_owner(self) -> np.ndarray:
        """Per ``g`` column (in column order), its ``a`` column: a leaf group's columns follow one
        another in the order of their ``a`` columns (as :func:`build_pod_model` numbers them)."""
        if self._g_a is None:
            self._g_a = np.repeat(np.arange(len(self.a_col), dtype=np.int64), self.g_col.counts)
        return self._g_a

    def g_arcs(self) -> tuple[np.ndarray, np.ndarray]:
        """Per ``g`` column (in column order), its arc up (leaf to spine) and its arc down (spine to
        the destination pod's leaf): the two load rows of the column."""
        if self._g_arcs is None:
            n_a, n_g = len(self.a_col), len(self.g_col)
            csc = self.load_matrix[:, n_a:].tocsc()
            csc.sort_indices()
            ends = csc.indices.reshape(n_g, 2) if n_g else np.zeros((0, 2), dtype=np.int64)
            leaf = np.zeros(self.fab.n, dtype=bool)
            leaf[list(self.leaf_pp)] = True
            first_up = leaf[self.fab.arc_tail[ends[:, 0]]]
            self._g_arcs = (np.where(first_up, ends[:, 0], ends[:, 1]).astype(np.int64),
                            np.where(first_up, ends[:, 1], ends[:, 0]).astype(np.int64))
        return self._g_arcs

    def lp_values(self, x_lp: np.ndarray) -> np.ndarray:
        """The variables ``[a, g, U]`` from an LP solution of :meth:`pl` (undoing the substitution)."""
        return np.asarray(self._shift @ x_lp) if self._shift is not None else x_lp

    @property
    def n_vars(self) -> int:
        return len(self.a_col) + len(self.g_col)

    def loads(self, x: np.ndarray) -> np.ndarray:
        """Gbps per arc for variable values ``x`` (``a`` columns then ``g`` columns, in gbps)."""
        return np.asarray(self.load_matrix @ x) if self.n_vars else np.zeros(self.fab.n_arcs)

    def ecmp_x(self) -> np.ndarray:
        """ECMP's variables: each pod pair's demand split evenly over its planes, and each
        leaf group's over its spines."""
        x = np.zeros(self.n_vars)
        for (q, p), d in self.d_qp.items():
            planes = self.allowed_planes[(q, p)]
            for pl in planes:
                x[self.a_col[(q, p, pl)]] = d / len(planes)
        n_a = len(self.a_col)
        g_a = self.g_owner()
        x[n_a:] = x[g_a] / self.g_col.counts[g_a]
        return x

    def least_shares(self, min_share: np.ndarray | None) -> tuple[dict[tuple[int, int, int], float], np.ndarray]:
        """Least shares of a split: ``phi[(q, p, l)]``, the share every spine of a leaf group must get
        (its leaf's ``min_share``, for groups of two or more spines), and the least ``a`` per column
        (a ToR pod's least ``min_share`` of the pair's demand, where it has two or more planes; scaled)."""
        phi: dict[tuple[int, int, int], float] = {}
        a_lb = np.zeros(len(self.a_col))
        if min_share is None:
            return phi, a_lb
        for (q, p), planes in self.allowed_planes.items():
            if len(planes) >= 2 and (q, p) in self.d_qp:
                least = max(min_share[t] for t in self.tors_of[q])
                for pl in planes:
                    a_lb[self.a_col[(q, p, pl)]] = least * self.d_qp[(q, p)] / self.scale
        for k, spines in self.allowed_spines.items():
            if len(spines) >= 2 and k[:2] in self.d_qp:
                phi[k] = float(min_share[self.leaf_at[(k[0], k[2])]])
        return phi, a_lb

    @staticmethod
    def aggregate_columns(phi: dict[tuple[int, int, int], float], first: int
                          ) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
        """Columns from ``first`` on for each leaf's least-share traffic up (by (q, l)) and toward it (by (p, l))."""
        up_keys = sorted({(q, pl) for (q, _p, pl) in phi})
        dn_keys = sorted({(p, pl) for (_q, p, pl) in phi})
        up_col = {k: first + i for i, k in enumerate(up_keys)}
        dn_col = {k: first + len(up_keys) + i for i, k in enumerate(dn_keys)}
        return up_col, dn_col

    def aggregate_rows(self, phi: dict[tuple[int, int, int], float], up_col: dict[tuple[int, int], int],
                       dn_col: dict[tuple[int, int], int], width: int) -> sp.csr_matrix:
        """Rows defining the aggregates: ``up[q, l] = sum_p share * a[q, p, l]``, ``down[p, l] = sum_q ...``."""
        keys = list(phi)
        shares = np.array([phi[k] for k in keys])
        a_of = [self.a_col[k] for k in keys]
        n_up = len(up_col)
        up_row = {k: i for i, k in enumerate(up_col)}
        dn_row = {k: n_up + i for i, k in enumerate(dn_col)}
        agg_rows = np.arange(n_up + len(dn_col))
        agg_cols = np.array(list(up_col.values()) + list(dn_col.values()), dtype=np.int64)
        return sp.csr_matrix((np.concatenate([shares, shares, -np.ones(len(agg_rows))]),
                              (np.concatenate([[up_row[(q, pl)] for (q, _p, pl) in keys],
                                               [dn_row[(p, pl)] for (_q, p, pl) in keys], agg_rows]),
                               np.concatenate([a_of, a_of, agg_cols]))),
                             shape=(len(agg_rows), width))

    def demand_rows(self, width: int) -> sp.csr_matrix:
        """``sum_l a[q, p, l]`` per pod pair (in :attr:`d_qp` order): equal to ``D[q, p]``."""
        pair_row = {pq: i for i, pq in enumerate(self.d_qp)}
        a_keys = list(self.a_col)
        return sp.csr_matrix((np.ones(len(a_keys)), ([pair_row[(q, p)] for (q, p, _l) in a_keys],
                                                     [self.a_col[k] for k in a_keys])), shape=(len(pair_row), width))

    def lp(self, min_share: np.ndarray | None, arcs: np.ndarray | None = None
           ) -> tuple[np.ndarray, sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``min U`` over ``[a, g, U]`` (scaled by :attr:`scale`): conservation, capacity, least shares.

        ``arcs`` limits the capacity rows to those arcs (every arc that carries anything by
        default): a relaxation, exact when its solution keeps the other arcs under ``U``.
        With ``min_share``, a ToR's least share is a bound on ``a`` and a leaf's is
        substituted (``g = g' + share * a``, ``g' >= 0``); the loads that the substituted
        least shares put on leaf-spine arcs go through two aggregate columns per leaf (its
        least-share traffic up, and down toward it) minus the few groups that lack an arc,
        instead of one entry per group and arc. Map solutions back with :meth:`lp_values`."""
        self._shift = None
        n_a, n_g = len(self.a_col), len(self.g_col)
        n = n_a + n_g
        s = self.scale
        g_a = self.g_owner()
        split = sorted(k for k, c in zip(self.a_col, self.g_col.counts.tolist(), strict=True) if c)  # leaf groups
        phi, a_lb = self.least_shares(min_share)
        col_lb = np.zeros(n + 1)
        col_lb[:n_a] = a_lb
        # aggregate columns: per leaf (q, l) its least-share traffic up; per leaf (p, l) toward it
        up_col, dn_col = self.aggregate_columns(phi, n + 1)
        width = n + 1 + len(up_col) + len(dn_col)
        blocks: list[sp.spmatrix] = [self.demand_rows(width)]
        dem = np.array([d / s for d in self.d_qp.values()])
        lbs: list[np.ndarray] = [dem]
        ubs: list[np.ndarray] = [dem]
        # 2. sum_j g'[q, p, l, j] = (1 - n * share) * a[q, p, l] where the leaf splits
        split_a = np.array([self.a_col[k] for k in split], dtype=np.int64)
        srow = np.full(n_a, -1, dtype=np.int64)
        srow[split_a] = np.arange(len(split))
        rows = np.concatenate([srow[g_a], np.arange(len(split))])
        cols = np.concatenate([np.arange(n_a, n), split_a])
        vals = np.concatenate([np.ones(n_g),
                               [-(1.0 - len(self.allowed_spines[k]) * phi.get(k, 0.0)) for k in split]])
        blocks.append(sp.csr_matrix((vals, (rows, cols)), shape=(len(split), width)))
        lbs.append(np.zeros(len(split)))
        ubs.append(np.zeros(len(split)))
        # 3. the aggregates: up[q, l] = sum_p share * a[q, p, l]; down[p, l] = sum_q share * a[q, p, l]
        if phi:
            blocks.append(self.aggregate_rows(phi, up_col, dn_col, width))
            lbs.append(np.zeros(len(up_col) + len(dn_col)))
            ubs.append(np.zeros(len(up_col) + len(dn_col)))
        # 4. loads <= U * capacity on the chosen arcs
        used = np.flatnonzero(np.diff(self.load_matrix.indptr) > 0) if arcs is None else np.asarray(arcs)
        base = self.load_matrix[used]
        load = sp.hstack([base, sp.csr_matrix((len(used), width - n))]).tocsr()
        if phi:
            load = (load + self._least_share_loads(phi, used, up_col, dn_col, width)).tocsr()
        cap_rows = (load + sp.csr_matrix((-self.fab.arc_cap[used] / s, (np.arange(len(used)),
                                                                         np.full(len(used), n))),
                                         shape=(len(used), width))).tocsr()
        blocks.append(cap_rows)
        lbs.append(np.full(len(used), -np.inf))
        ubs.append(np.zeros(len(used)))
        if phi:  # map [a, g', U, aggregates] back to [a, g, U]: g = g' + share * a
            phi_a = np.full(n_a, np.nan)
            phi_a[[self.a_col[k] for k in phi]] = list(phi.values())
            floored = np.flatnonzero(~np.isnan(phi_a[g_a]))  # g columns (less n_a) of groups with a least share
            shift = sp.csr_matrix((phi_a[g_a[floored]], (n_a + floored, g_a[floored])), shape=(n + 1, width))
            self._shift = (sp.eye(n + 1, width, format="csr") + shift).tocsr()
        c = np.zeros(width)
        c[n] = 1.0
        col_lb = np.concatenate([col_lb, np.zeros(width - n - 1)])
        return (c, sp.vstack(blocks).tocsr(), np.concatenate(lbs), np.concatenate(ubs), col_lb,
                np.full(width, np.inf))

    def _least_share_loads(self, phi: dict[tuple[int, int, int], float], used: np.ndarray,
                           up_col: dict[tuple[int, int], int], dn_col: dict[tuple[int, int], int],
                           width: int) -> sp.csr_matrix:
        """Rows ``used`` of the loads the least shares put on leaf-spine arcs: each leaf's aggregate
        on every arc up from it or down to it, less the groups that do not use that arc."""
        tail, head = self.fab.arc_tail, self.fab.arc_head
        n_arcs = self.fab.n_arcs
        row_of = np.full(n_arcs, -1, dtype=np.int64)
        row_of[used] = np.arange(len(used))
        g_a = self.g_owner()
        g_up, g_dn = self.g_arcs()

        def per_leaf(arcs: np.ndarray, leaf_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """The distinct ``arcs`` grouped by their leaf, in arc order: (indptr by device, arcs)."""
            arcs = np.sort(arcs)  # sorting, not np.unique: numpy's hash-based unique is slower here
            arcs = arcs[np.concatenate([[True], arcs[1:] != arcs[:-1]])]
            arcs = arcs[np.argsort(leaf_of[arcs], kind="stable")]
            return np.concatenate([[0], np.cumsum(np.bincount(leaf_of[arcs], minlength=self.fab.n))]), arcs

        def fan(indptr: np.ndarray, arcs: np.ndarray, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """For each of ``leaves``, each of its arcs: (position in ``leaves``, arc)."""
            counts = indptr[leaves + 1] - indptr[leaves]
            who = np.repeat(np.arange(len(leaves)), counts)
            at = indptr[leaves][who] + np.arange(len(who)) - np.repeat(np.cumsum(counts) - counts, counts)
            return who, arcs[at]

        up_ptr, up_arcs = per_leaf(g_up, tail)  # leaf (q, l) -> its arcs up that groups use
        dn_ptr, dn_arcs = per_leaf(g_dn, head)  # leaf (p, l) -> spine arcs down to it that groups use
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (arcs, columns, values)
        for agg, ptr, arcs in ((up_col, up_ptr, up_arcs), (dn_col, dn_ptr, dn_arcs)):
            leaves = np.array([self.leaf_at[k] for k in agg], dtype=np.int64)
            who, arc = fan(ptr, arcs, leaves)
            parts.append((arc, np.fromiter(agg.values(), dtype=np.int64, count=len(agg))[who], np.ones(len(arc))))
        # exceptions: the arcs of a leaf that a group with a least share does not use
        keys = list(phi)
        ac = np.array([self.a_col[k] for k in keys], dtype=np.int64)
        share = np.array(list(phi.values()), dtype=np.float64)
        for leaf_of_key, ptr, arcs, own in ((lambda k: (k[0], k[2]), up_ptr, up_arcs, g_up),
                                            (lambda k: (k[1], k[2]), dn_ptr, dn_arcs, g_dn)):
            leaves = np.array([self.leaf_at[leaf_of_key(k)] for k in keys], dtype=np.int64)
            who, arc = fan(ptr, arcs, leaves)
            mine = np.sort(g_a * n_arcs + own)  # (a column, arc) of every group's own arcs
            probe = ac[who] * n_arcs + arc
            unused = mine[np.minimum(np.searchsorted(mine, probe), len(mine) - 1)] != probe
            parts.append((arc[unused], ac[who][unused], -share[who][unused]))
        r = row_of[np.concatenate([p[0] for p in parts])]
        keep = r >= 0
        return sp.csr_matrix((np.concatenate([p[2] for p in parts])[keep],
                              (r[keep], np.concatenate([p[1] for p in parts])[keep])), shape=(len(used), width))


class _NotClean(Exception):
    pass


def _structure(fab: Fabric) -> dict[str, Any]:
    intent = fab.intent
    if intent.routing.value != "bgp" or not fab.alive.all():
        raise _NotClean("not a BGP fabric without failures")
    spine_names = {d.name for d in intent.devices if d.role == Role.SPINE}
    if not intent.drained_devices <= spine_names:  # a drained spine carries no transit: routing skips it
        raise _NotClean("a drained device that is not a spine")
    for end in intent.drained_link_ends:  # a drained leaf-spine link is a missing one (no adjacency)
        link = intent.link_by_end.get(end)
        if link is not None and not ({link.a, link.b} & spine_names):
            raise _NotClean("a drained link that is not a leaf-spine link")
    tor_pod: dict[int, int] = {}
    leaf_at: dict[tuple[int, int], int] = {}
    leaf_pp: dict[int, tuple[int, int]] = {}
    spines: dict[int, int] = {}
    for i, d in enumerate(intent.devices):
        if d.role == Role.TOR and d.pod is not None:
            tor_pod[i] = d.pod
        elif d.role == Role.LEAF and d.pod is not None and d.plane is not None and (d.pod, d.plane) not in leaf_at:
            leaf_at[(d.pod, d.plane)] = i
            leaf_pp[i] = (d.pod, d.plane)
        elif d.role == Role.SPINE and d.plane is not None:
            spines[i] = d.plane
        else:
            raise _NotClean(f"{d.name} does not fit a clean 3-tier Clos")
    tor_asns = [fab.asn[t] for t in tor_pod]
    if len(set(tor_asns)) != len(tor_asns) or set(tor_asns) & {fab.asn[v] for v in list(leaf_pp) + list(spines)}:
        raise _NotClean("ToR ASNs are not unique")
    tors_of: dict[int, list[int]] = defaultdict(list)
    for t, p in tor_pod.items():
        tors_of[p].append(t)
    planes_of: dict[int, list[int]] = defaultdict(list)
    for (p, pl) in sorted(leaf_at):
        planes_of[p].append(pl)
    tor_arc: dict[tuple[int, int], int] = {}
    down_arc: dict[tuple[int, int], int] = {}
    for t, p in tor_pod.items():
        ups = {}
        for arc, w, _port in fab.adj[t]:
            if w not in leaf_pp or leaf_pp[w][0] != p or leaf_pp[w][1] in ups:
                raise _NotClean("a ToR link that is not one uplink per leaf of its pod")
            ups[leaf_pp[w][1]] = arc
        if sorted(ups) != planes_of[p]:
            raise _NotClean("a ToR without a link to every leaf of its pod")
        for pl, arc in ups.items():
            tor_arc[(t, pl)] = arc
            down_arc[(leaf_at[(p, pl)], t)] = arc ^ 1
    for v, (p, pl) in leaf_pp.items():
        if fab.asn[v] != fab.asn[leaf_at[(p, planes_of[p][0])]]:
            raise _NotClean("the leaves of a pod do not share one ASN")
        for _arc, w, _port in fab.adj[v]:
            if w in spines and spines[w] != pl:
                raise _NotClean("a leaf linked to a spine of another plane")
    return {"tor_pod": tor_pod, "leaf_at": leaf_at, "leaf_pp": leaf_pp, "spines": spines,
            "tors_of": dict(tors_of), "planes_of": dict(planes_of), "tor_arc": tor_arc, "down_arc": down_arc}


def _origins(fab: Fabric, tor_pod: dict[int, int]) -> dict[str, int] | None:
    """Each prefix's one ToR origin, or ``None`` when some prefix has another kind of origin."""
    origin: dict[str, int] = {}
    for pf in fab.intent.prefixes:
        if len(pf.origins) != 1 or fab.index[pf.origins[0]] not in tor_pod:
            return None
        origin[pf.prefix] = fab.index[pf.origins[0]]
    return origin


_Routes = tuple[dict[tuple[int, int], list[int]], dict[tuple[int, int, int], list[int]], dict[tuple[int, int], int]]


def _pod_routes(fab: Fabric, st: dict[str, Any], pods: list[int]) -> _Routes | None:
    """The planes and spines BGP offers each pod pair, and each spine's arc down to each pod: one
    path-vector simulation per destination pod; ``None`` when BGP does not match the structure."""
    tor_pod: dict[int, int] = st["tor_pod"]
    leaf_at: dict[tuple[int, int], int] = st["leaf_at"]
    tors_of: dict[int, list[int]] = st["tors_of"]
    head = fab.arc_head
    allowed_planes: dict[tuple[int, int], list[int]] = {}
    allowed_spines: dict[tuple[int, int, int], list[int]] = {}
    spine_down: dict[tuple[int, int], int] = {}
    # A ToR that is not the origin never re-advertises usefully: its best path holds its pod's
    # leaf ASN and it only talks to those leaves. So the simulation leaves out all ToRs but the
    # origin and one probe per pod (the ToRs of a pod are interchangeable).
    base = np.ones(fab.n, dtype=bool)
    base[list(tor_pod)] = False
    for p in pods:
        base[tors_of[p][0]] = True
        if len(tors_of[p]) > 1:
            base[tors_of[p][1]] = True
    is_spine = np.zeros(fab.n, dtype=bool)
    is_spine[list(st["spines"])] = True
    spines = np.flatnonzero(is_spine)
    is_leaf = np.zeros(fab.n, dtype=bool)
    leaf_pod = np.zeros(fab.n, dtype=np.int64)
    for v, (q, _pl) in st["leaf_pp"].items():
        is_leaf[v], leaf_pod[v] = True, q
    pv = PathVector(fab)
    for p in pods:
        rep = tors_of[p][0]
        dev, arc = bgp_hops(fab, (rep,), base, pv)
        if (~is_spine[head[arc]] & is_leaf[dev] & (leaf_pod[dev] != p)).any():
            return None  # a leaf of another pod routes other than up to a spine
        at = np.searchsorted(dev, np.arange(fab.n + 1))  # device v's next hops: arc[at[v]:at[v + 1]]
        width = at[1:] - at[:-1]
        if (width[spines] > 1).any():
            return None
        arcs_l: list[int] = arc.tolist()
        at_l: list[int] = at.tolist()
        for q in pods:
            probe = tors_of[q][0] if q != p else (tors_of[p][1] if len(tors_of[p]) > 1 else None)
            planes = []
            for pl in st["planes_of"][q]:
                leaf = leaf_at[(q, pl)]
                lo, hi = at_l[leaf], at_l[leaf + 1]
                if q == p:
                    if arcs_l[lo:hi] != [st["down_arc"][(leaf, rep)]]:
                        return None
                    planes.append(pl)
                elif hi > lo:
                    allowed_spines[(q, p, pl)] = arcs_l[lo:hi]
                    planes.append(pl)
            if probe is not None:
                got = sorted(st["leaf_pp"][int(head[a])][1] for a in arcs_l[at_l[probe]:at_l[probe + 1]])
                if got != planes:
                    return None  # BGP does not match the structure: let the generic path handle it
            allowed_planes[(q, p)] = planes
        for sv in spines[width[spines] == 1].tolist():
            spine_down[(sv, p)] = arcs_l[at_l[sv]]
    return allowed_planes, allowed_spines, spine_down


def _tor_demands(fab: Fabric, tor_pod: dict[int, int], origin: dict[str, int],
                 allowed_planes: dict[tuple[int, int], list[int]]) -> dict[tuple[int, int], float] | None:
    """Demands per (source ToR, destination ToR); ``None`` when a demand does not enter at a ToR.

    Raises ``Infeasible`` for demands between pods BGP offers no plane."""
    d_st: dict[tuple[int, int], float] = defaultdict(float)
    problems: list[dict[str, Any]] = []
    for i, d in enumerate(fab.intent.effective_demands):
        if d.gbps <= 0:
            continue
        s, t = fab.index.get(d.from_), origin.get(d.to)
        if s is None or s not in tor_pod or t is None:
            return None
        if s == t:
            continue
        if not allowed_planes[(tor_pod[s], tor_pod[t])]:
            problems.append({"loc": fab.intent.demand_loc(i), "from": d.from_, "to": d.to,
                             "reason": f"{d.from_} has no route to {d.to} (no valid path: missing links or AS-path "
                                       "loop prevention withdraw the route there)"})
            continue
        d_st[(s, t)] += d.gbps
    if problems:
        h = problems[0]
        raise Infeasible(f"{len(problems)} demand(s) cannot be routed; first: {h['loc']} {h['from']} -> {h['to']}: "
                         f"{h['reason']}", problems)
    return d_st


def _load_matrix(fab: Fabric, st: dict[str, Any], pods: list[int], d_st: dict[tuple[int, int], float],
                 d_qp: dict[tuple[int, int], float], allowed_planes: dict[tuple[int, int], list[int]],
                 allowed_spines: dict[tuple[int, int, int], list[int]], spine_down: dict[tuple[int, int], int]
                 ) -> tuple[dict[tuple[int, int, int], int], GColumns, sp.csr_matrix]:
    """The ``a`` and ``g`` columns and the load rows over them (see the module docstring)."""
    tor_pod: dict[int, int] = st["tor_pod"]
    head = fab.arc_head
    d_sp: dict[tuple[int, int], float] = defaultdict(float)
    d_qt: dict[tuple[int, int], float] = defaultdict(float)
    for (s, t), x in d_st.items():
        d_sp[(s, tor_pod[t])] += x
        d_qt[(tor_pod[s], t)] += x
    a_col: dict[tuple[int, int, int], int] = {}
    for (q, p) in d_qp:
        for pl in allowed_planes[(q, p)]:
            a_col[(q, p, pl)] = len(a_col)
    n_a = len(a_col)
    pod_ix = {p: i for i, p in enumerate(pods)}
    g_col = GColumns(a_col, allowed_spines)
    n_g = len(g_col)
    g_arc = np.fromiter(chain.from_iterable(allowed_spines.get(k) or () for k in a_col), dtype=np.int64,
                        count=n_g)  # per g column: its arc up to the spine
    g_pod = np.repeat(np.fromiter((pod_ix[p] for (_q, p, _pl) in a_col), dtype=np.int64, count=n_a),
                      g_col.counts)  # and the destination pod's position
    # the ToR rows, vectorized over planes: (q, p)'s k-th allowed plane is a column a_start[k] + j
    qp_ix = {qp: k for k, qp in enumerate(d_qp)}
    a_start = np.array([a_col[(q, p, allowed_planes[(q, p)][0])] if allowed_planes[(q, p)] else 0
                        for (q, p) in d_qp], dtype=np.int64)
    plane_ix = {pl: i for i, pl in enumerate(sorted({pl for (_t, pl) in st["tor_arc"]}))}
    width = max((len(allowed_planes[qp]) for qp in d_qp), default=0)
    qp_planes = np.full((len(d_qp), max(width, 1)), -1, dtype=np.int64)  # (q, p) -> its planes' positions
    for k, qp in enumerate(d_qp):
        qp_planes[k, :len(allowed_planes[qp])] = [plane_ix[pl] for pl in allowed_planes[qp]]
    tor_up = np.full((fab.n, max(len(plane_ix), 1)), -1, dtype=np.int64)  # (ToR, plane position) -> arc up
    for (t, pl), arc in st["tor_arc"].items():
        tor_up[t, plane_ix[pl]] = arc
    leaf_plane = {leaf: pl for (_p, pl), leaf in st["leaf_at"].items()}
    tor_down = np.full_like(tor_up, -1)  # (ToR, plane position) -> the arc down to it from its pod's leaf
    for (leaf, t), arc in st["down_arc"].items():
        if leaf in leaf_plane and leaf_plane[leaf] in plane_ix:
            tor_down[t, plane_ix[leaf_plane[leaf]]] = arc
    d_qp_v = np.array(list(d_qp.values()), dtype=np.float64)

    def tor_rows(ends: np.ndarray, k: np.ndarray, x: np.ndarray, arcs: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows, columns and values of a ToR's share ``x`` of (q, p)'s ``a`` columns on its arcs ``arcs``."""
        j = np.nonzero(qp_planes[k] >= 0)
        return arcs[ends[j[0]], qp_planes[k][j]], a_start[k[j[0]]] + j[1], (x / d_qp_v[k])[j[0]]

    sp_keys = list(d_sp)
    up_r, up_c, up_v = tor_rows(np.array([s for s, _p in sp_keys], dtype=np.int64),
                                np.array([qp_ix[(tor_pod[s], p)] for s, p in sp_keys], dtype=np.int64),
                                np.array(list(d_sp.values()), dtype=np.float64), tor_up)  # ToR up
    qt_keys = list(d_qt)
    dn_r, dn_c, dn_v = tor_rows(np.array([t for _q, t in qt_keys], dtype=np.int64),
                                np.array([qp_ix[(q, tor_pod[t])] for q, t in qt_keys], dtype=np.int64),
                                np.array(list(d_qt.values()), dtype=np.float64), tor_down)  # leaf down
    rows = np.concatenate([up_r, dn_r])
    cols = np.concatenate([up_c, dn_c])
    vals = np.concatenate([up_v, dn_v])
    down = np.full((fab.n, len(pods)), -1, dtype=np.int64)  # (spine, destination pod position) -> arc
    for (sp_, p), arc in spine_down.items():
        down[sp_, pod_ix[p]] = arc
    g_cols = np.arange(n_a, n_a + n_g, dtype=np.int64)
    # ToR up and leaf down, then each g column's leaf up and spine down
    all_rows = np.concatenate([np.asarray(rows, dtype=np.int64), g_arc, down[head[g_arc], g_pod]])
    all_cols = np.concatenate([np.asarray(cols, dtype=np.int64), g_cols, g_cols])
    all_vals = np.concatenate([np.asarray(vals, dtype=np.float64), np.ones(2 * n_g)])
    load_matrix = sp.csr_matrix((all_vals, (all_rows, all_cols)), shape=(fab.n_arcs, n_a + len(g_col)))
    return a_col, g_col, load_matrix


def build_pod_model(fab: Fabric) -> PodModel | None:
    """Routes and the load model of a clean Clos, or ``None`` (use the generic path).

    Raises
    ------
    Infeasible : a demand whose source has no route to its destination.
    """
    try:
        st = _structure(fab)
    except _NotClean:
        return None
    tor_pod: dict[int, int] = st["tor_pod"]
    pods = sorted(st["tors_of"])
    origin = _origins(fab, tor_pod)
    routes = _pod_routes(fab, st, pods) if origin is not None else None
    if origin is None or routes is None:
        return None
    allowed_planes, allowed_spines, spine_down = routes
    d_st = _tor_demands(fab, tor_pod, origin, allowed_planes)
    if d_st is None:
        return None
    d_qp: dict[tuple[int, int], float] = defaultdict(float)
    for (s, t), x in d_st.items():
        d_qp[(tor_pod[s], tor_pod[t])] += x
    a_col, g_col, load_matrix = _load_matrix(fab, st, pods, d_st, d_qp, allowed_planes, allowed_spines, spine_down)
    return PodModel(
        fab=fab, pods=pods, tor_pod=tor_pod, tors_of=st["tors_of"], leaf_at=st["leaf_at"], leaf_pp=st["leaf_pp"],
        tor_arc=st["tor_arc"], down_arc=st["down_arc"], spine_down=spine_down, allowed_planes=allowed_planes,
        allowed_spines=allowed_spines, d_qp=dict(d_qp), a_col=a_col, g_col=g_col, load_matrix=load_matrix,
        scale=_scale(fab),
    )


def _scale(fab: Fabric) -> float:
    """The gbps the LP's variables are counted in: the median arc capacity."""
    return float(np.median(fab.arc_cap)) if fab.n_arcs else 1.0


def pod_budgets(m: PodModel) -> tuple[dict[int, int], dict[int, int]]:
    """Weight budgets of ``m``'s groups: per source pod its ToRs' least, and per leaf its own."""
    intent, names = m.fab.intent, m.fab.names
    tor: dict[int, int] = {}
    for t, q in m.tor_pod.items():
        b = device_budget(intent, names[t])
        tor[q] = min(tor.get(q, b), b)
    leaf = {v: device_budget(intent, names[v]) for v in m.leaf_pp}
    return tor, leaf
