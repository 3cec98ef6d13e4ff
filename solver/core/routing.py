"""Routes: the equal-cost next-hop sets that BGP (RFC 7938), IS-IS or OSPF would install.

This module owns the routing layer of the solver. ``routing: bgp`` simulates
the eBGP path-vector outcome of an RFC 7938 Clos as FRR computes it (each link
an eBGP session; a route is accepted unless its AS path holds the receiver's
ASN, RFC 4271 section 9.1.2; best = shortest AS path; multipath over every
neighbor offering an equal-length path, as with ``bestpath as-path
multipath-relax``; a device advertises its best path with its ASN prepended).
Drained devices originate their own prefixes but re-advertise nothing; drained
and failed links carry no session. The link-state routings (``routing: isis``,
``ospf``) compute shortest paths by link metric (IS-IS metric, OSPF interface
cost) with every equal-cost next hop. A drained IS-IS device is set overloaded:
no transit. A drained OSPF device is a stub router (RFC 6987, as FRR's ``max-metric
router-lsa administrative`` does): every link out of it costs 65535, so it
carries transit only where no other way is left, and its own next hops are
those of least cost past that first hop. ``paths: loop_free`` lets the traffic engineering use every
usable link in either direction; :func:`solver.wcmp.make_loop_free` then
orders the devices so the chosen next hops form a DAG per destination.

Destinations are handled as *route classes*: every prefix originated by the
same set of devices shares one DAG, so work scales with distinct origin sets.
"""

from __future__ import annotations

import heapq
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from controller.model import LINK_STATE, MAX_OSPF_COST, Intent, Routing
from solver.core.fabric import Fabric, build_fabric

__all__ = ["RouteClass", "next_hops", "route_classes"]


@dataclass(slots=True)
class RouteClass:
    """The prefixes sharing one origin set, and their routes.

    ``nexthops[v]``: arcs (out of ``v``) of the routing's equal-cost next hops,
    for every device ``v`` that has a route (origins and withdrawn devices are
    absent). ``dag[v]``: the arcs the traffic engineering may use (equal to
    ``nexthops`` except for ``paths: loop_free``, where it is every usable arc,
    cycles included). ``dist``: IS-IS metric distance to the nearest origin.
    """

    origins: tuple[int, ...]
    prefixes: list[str] = field(default_factory=list)
    nexthops: dict[int, tuple[int, ...]] = field(default_factory=dict)
    dag: dict[int, tuple[int, ...]] = field(default_factory=dict)
    dist: dict[int, int] = field(default_factory=dict)


class PathVector:
    """A fabric's arrays for :func:`_bgp_class`, built once for all its origin sets."""

    __slots__ = ("asn", "rank", "transit", "everyone")

    def __init__(self, fab: Fabric) -> None:
        none = -1 if all(a is None or a >= 0 for a in fab.asn) else min(a for a in fab.asn if a is not None) - 1
        self.asn = np.array([none if a is None else a for a in fab.asn], dtype=np.int64)
        self.rank = np.empty(fab.n, dtype=np.int64)
        self.rank[sorted(range(fab.n), key=fab.names.__getitem__)] = np.arange(fab.n)
        self.transit = ~fab.drained
        self.everyone = np.ones(fab.n, dtype=bool)


def _bgp_class(fab: Fabric, origins: tuple[int, ...], active: np.ndarray | None = None,
               pv: PathVector | None = None) -> dict[int, tuple[int, ...]]:
    """Path-vector outcome toward one origin set: next-hop arcs per device.

    Rounds of advertisements from the origins outward: in round ``k`` every device reached in
    round ``k - 1`` (origins in round 0) offers its best path, with its ASN prepended, over each
    usable link; the receiver rejects it when its own ASN is on the path or it is an origin
    (its prefix is local), and otherwise keeps it when it was first reached in this round.
    Every neighbor whose offer it keeps is a next hop (multipath), and its best path is the
    one from the neighbor whose name is least (deterministic). A drained device re-advertises
    nothing. Compiled in :func:`solver.core.kernels.bgp_rounds`.

    ``active`` (bool per device) leaves the others out entirely; callers use it
    only for devices whose advertisements every neighbor would reject anyway
    (a Clos ToR that is not an origin), so the rest of the outcome is unchanged.
    ``pv``: the fabric's arrays, when the caller computes many classes.
    """
    dev, arc = bgp_hops(fab, origins, active, pv)
    if not len(dev):
        return {}
    cut = np.flatnonzero(np.diff(dev)) + 1
    starts = [0, *cut.tolist()]
    ends = [*cut.tolist(), len(dev)]
    arcs = arc.tolist()
    return {v: tuple(arcs[a:b]) for v, a, b in zip(dev[starts].tolist(), starts, ends, strict=True)}


def bgp_hops(fab: Fabric, origins: tuple[int, ...], active: np.ndarray | None = None, pv: PathVector | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_bgp_class` as arrays: ``(device, arc)`` per next hop, sorted by device, then arc."""
    from solver.core.kernels import bgp_rounds  # lazy: numba loads at the first solve, not with the package

    if pv is None:
        pv = PathVector(fab)
    dev, arc = bgp_rounds(fab.adj_indptr, fab.adj_arc, fab.arc_head, pv.asn, pv.rank, pv.transit,
                          pv.everyone if active is None else active, np.asarray(sorted(origins), dtype=np.int64))
    order = np.lexsort((arc, dev))
    return dev[order], arc[order]


def _cost(fab: Fabric, arc: int, tail: int, stub: bool) -> int:
    """What ``arc`` (out of ``tail``) costs: its metric, or with ``stub`` (OSPF) 65535 out of a drained
    device."""
    return MAX_OSPF_COST if stub and fab.drained[tail] else int(fab.arc_metric[arc])


def _isis_distances(fab: Fabric, origins: tuple[int, ...], stub: bool = False) -> dict[int, int]:
    """Metric distance to the nearest origin. Drained devices are not transit, or with ``stub`` (OSPF)
    their links cost 65535 (links are symmetric: ``w``'s arc to ``u`` costs what ``u``'s to ``w`` does,
    but a drained ``w``'s)."""
    dist: dict[int, int] = {o: 0 for o in origins}
    heap = [(0, o) for o in origins]
    origin_set = set(origins)
    done: set[int] = set()
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        if u not in origin_set and fab.drained[u] and not stub:
            continue
        for arc, w, _port in fab.adj[u]:
            nd = d + _cost(fab, arc, w, stub)
            if nd < dist.get(w, 1 << 62):
                dist[w] = nd
                heapq.heappush(heap, (nd, w))
    return dist


_Arcs = dict[int, tuple[int, ...]]


def _isis_class(fab: Fabric, origins: tuple[int, ...], loop_free: bool,
                dist: dict[int, int], stub: bool = False) -> tuple[_Arcs, _Arcs]:
    """Each device's equal-cost next hops and (``loop_free``) every arc TE may use: never into a drained
    device, but for a stub router's (OSPF) last-resort shortest path."""
    origin_set = set(origins)
    nh: dict[int, tuple[int, ...]] = {}
    dag: dict[int, tuple[int, ...]] = {}
    for v, dv in dist.items():
        if v in origin_set:
            continue
        best: list[int] = []
        wide: list[int] = []
        for arc, w, _port in fab.adj[v]:
            dw = dist.get(w)
            transit = w in origin_set or not fab.drained[w]
            if dw is None or not (transit or stub):
                continue
            if dw + _cost(fab, arc, v, stub) == dv:
                best.append(arc)
            if loop_free and transit:
                wide.append(arc)
        if best:
            nh[v] = tuple(sorted(best))
            dag[v] = tuple(sorted(set(wide) | set(best))) if loop_free else nh[v]
    return nh, dag


def route_classes(fab: Fabric) -> list[RouteClass]:
    """Group the intent's prefixes by live origin set and compute each class's routes.

    A prefix whose origins have all failed is in a class with no origins and no routes.
    """
    intent = fab.intent
    by_origins: dict[tuple[int, ...], RouteClass] = {}
    for p in intent.prefixes:
        origins = tuple(sorted(fab.index[o] for o in p.origins if fab.alive[fab.index[o]]))
        rc = by_origins.get(origins)
        if rc is None:
            rc = by_origins[origins] = RouteClass(origins=origins)
        rc.prefixes.append(p.prefix)
    loop_free = intent.routing in LINK_STATE and intent.paths_mode == "loop_free"
    stub = intent.routing == Routing.OSPF
    pv = PathVector(fab) if intent.routing == Routing.BGP else None
    for origins, rc in by_origins.items():
        if not origins:
            continue
        if intent.routing == Routing.BGP:
            rc.nexthops = _bgp_class(fab, origins, pv=pv)
            rc.dag = rc.nexthops
        else:
            rc.dist = _isis_distances(fab, origins, stub)
            rc.nexthops, rc.dag = _isis_class(fab, origins, loop_free, rc.dist, stub)
    return list(by_origins.values())


def next_hops(
    intent: Intent,
    *,
    failed_devices: AbstractSet[str] = frozenset(),
    failed_links: AbstractSet[str] = frozenset(),
) -> dict[str, dict[str, tuple[tuple[str, str], ...]]]:
    """The routing's equal-cost next hops: prefix -> device -> ((port, neighbor), ...).

    Parameters
    ----------
    intent : a validated intent (``routing: bgp``, ``isis`` or ``ospf``); drains are honoured.
    failed_devices : names of devices that are down (no routes, no sessions).
    failed_links : :attr:`Link.key` strings of links that are down.

    Returns
    -------
    For each prefix, every device holding a route to it with its next hops as
    ``(local port, neighbor)`` pairs sorted by port. Origins are absent (they
    deliver locally) and so are devices where the route is withdrawn.

    Example
    -------
    >>> from controller.model.intent import validate_intent
    >>> it = validate_intent({"name": "x", "routing": "isis",
    ...     "devices": [{"name": "r1"}, {"name": "r2"}],
    ...     "links": [{"a": "r1", "a_port": "e1", "b": "r2", "b_port": "e1"}],
    ...     "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["r2"]}]})
    >>> next_hops(it)["10.0.0.0/24"]
    {'r1': (('e1', 'r2'),)}
    """
    fab = build_fabric(intent, failed_devices=failed_devices, failed_links=failed_links)
    out: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {}
    names, port, head = fab.names, fab.arc_port, fab.arc_head
    for rc in route_classes(fab):
        view = {
            names[v]: tuple(sorted((port[a], names[int(head[a])]) for a in arcs))
            for v, arcs in rc.nexthops.items()
        }
        for p in rc.prefixes:
            out[p] = dict(view)
    return out
