"""An indexed, array-backed view of one intent's fabric for the solver.

This module owns the translation from the domain model (names) to the
integer indexes the solver's vectorized code works on: devices by index, links
by index, *arcs* (a link in one direction: arc ``2*i`` runs ``a -> b``, arc
``2*i+1`` runs ``b -> a``) with their capacities, and per-device adjacency
lists that honour drains and failures. It is pure and built once per solve.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from controller.model import Intent

__all__ = ["Fabric", "build_fabric"]


@dataclass(frozen=True, slots=True)
class Fabric:
    """Indexes of one fabric under given failures.

    ``adj[v]`` lists ``(arc, neighbor, local_port)`` for every usable link of
    ``v`` (not drained, not failed, neighbor alive); ``arc`` runs ``v -> neighbor``.
    """

    intent: Intent
    names: tuple[str, ...]
    index: dict[str, int]
    asn: tuple[int | None, ...]
    alive: np.ndarray  # bool per device
    drained: np.ndarray  # bool per device (drain policy)
    arc_tail: np.ndarray  # int per arc
    arc_head: np.ndarray  # int per arc
    arc_cap: np.ndarray  # float per arc (gbps)
    arc_metric: np.ndarray  # int per arc
    arc_port: tuple[str, ...]  # the tail's port per arc
    adj: tuple[tuple[tuple[int, int, str], ...], ...]
    adj_indptr: np.ndarray  # ``adj`` as arrays: device v's usable arcs are adj_arc[adj_indptr[v]:adj_indptr[v + 1]]
    adj_arc: np.ndarray

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def n_arcs(self) -> int:
        return len(self.arc_tail)


def build_fabric(
    intent: Intent,
    *,
    failed_devices: AbstractSet[str] = frozenset(),
    failed_links: AbstractSet[str] = frozenset(),
) -> Fabric:
    """Index ``intent``'s devices and links; drained or failed links get no adjacency."""
    names = tuple(d.name for d in intent.devices)
    index = {n: i for i, n in enumerate(names)}
    alive = np.array([n not in failed_devices for n in names], dtype=bool)
    drained = np.array([n in intent.drained_devices for n in names], dtype=bool)
    n_links = len(intent.links)
    tail = np.empty(2 * n_links, dtype=np.int64)
    head = np.empty(2 * n_links, dtype=np.int64)
    cap = np.empty(2 * n_links, dtype=np.float64)
    metric = np.empty(2 * n_links, dtype=np.int64)
    ports: list[str] = []
    adj: list[list[tuple[int, int, str]]] = [[] for _ in names]
    drained_links = intent.drained_links
    for i, link in enumerate(intent.links):
        a, b = index[link.a], index[link.b]
        tail[2 * i], head[2 * i], tail[2 * i + 1], head[2 * i + 1] = a, b, b, a
        cap[2 * i] = cap[2 * i + 1] = link.capacity_gbps
        metric[2 * i] = metric[2 * i + 1] = link.metric
        ports.extend((link.a_port, link.b_port))
        key = link.key
        if key in drained_links or key in failed_links or not (alive[a] and alive[b]):
            continue
        adj[a].append((2 * i, b, link.a_port))
        adj[b].append((2 * i + 1, a, link.b_port))
    adj_arc = np.fromiter((arc for x in adj for arc, _w, _port in x), dtype=np.int64)
    adj_indptr = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in adj], out=adj_indptr[1:])
    return Fabric(
        intent=intent, names=names, index=index, asn=tuple(d.asn for d in intent.devices),
        alive=alive, drained=drained, arc_tail=tail, arc_head=head, arc_cap=cap,
        arc_metric=metric, arc_port=tuple(ports), adj=tuple(tuple(x) for x in adj),
        adj_indptr=adj_indptr, adj_arc=adj_arc,
    )
