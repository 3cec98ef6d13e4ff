"""Rounding a general network's split ratios with an eye on the links downstream.

The weight reduction of a group (:func:`solver.core.weights.reduce_weights`) looks at one group
alone: it keeps every member and minimizes the worst oversubscription of any of them. On a
general network with hubs that is not enough. A hub forwarding 60 Gb/s of one destination
splits it in units of 60/128 Gb/s; a member whose LP share is 0.19 Gb/s, toward a 0.25 Gb/s
link, gets 0.47 Gb/s whatever the group's oversubscription says, and the errors of many upstream
groups add up at a downstream node (ASN2k: 0.90 optimal, 2.98 after rounding).

Here every group is rounded in flow order, the upstream ones first, each with the throughput
that the groups already rounded really send it, and each unit of weight goes where it hurts
least: the excess a member receives is measured against the spare capacity of the links it
leads to (its own link, and the tightest spare capacity downstream of its head scaled by the
head's shares, computed once from the LP's loads). Members may be left out (weight 0), never
added, so the rounded forwarding is a sub-DAG of the LP's, loop-free when it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np

from solver.wcmp import Commodities, propagate

__all__ = ["FlowRounding", "round_by_flow"]

#: the spare capacity of a link is counted up to this much above the LP's optimum utilization
HEADROOM = 0.02


@dataclass(frozen=True, slots=True)
class FlowRounding:
    """Per node with LP flow: its member edges and their integer weights; and the rounded split per edge."""

    members: dict[int, tuple[tuple[int, ...], tuple[int, ...]]]  # node -> (edges, weights)
    ratio: np.ndarray  # per edge, the rounded share (0 where not a member)


def _flow_order(com: Commodities, flow_edge: np.ndarray) -> list[int]:
    """Nodes with every flow predecessor before them (Kahn's order over the flow edges)."""
    heads = com.e_head_node
    inner = flow_edge & (heads >= 0)
    indeg = np.bincount(heads[inner], minlength=com.n_nodes)
    succ_start = com.node_start.tolist()
    head_l, flow_l = heads.tolist(), flow_edge.tolist()
    ready = np.flatnonzero(indeg == 0).tolist()
    deg = indeg.tolist()
    order: list[int] = []
    while ready:
        k = ready.pop()
        order.append(k)
        for e in range(succ_start[k], succ_start[k + 1]):
            h = head_l[e]
            if flow_l[e] and h >= 0:
                deg[h] -= 1
                if deg[h] == 0:
                    ready.append(h)
    return order


def _tolerance(com: Commodities, ratio: np.ndarray, flow_edge: np.ndarray, order: list[int],
               slack: np.ndarray) -> np.ndarray:
    """Per edge: the extra Gb/s it can carry before a link on it or after it passes the target,
    the extra spreading downstream by the LP's shares (``min(own slack, head's) `` per edge)."""
    starts = com.node_start.tolist()
    heads = com.e_head_node.tolist()
    edge_slack = slack[com.e_arc].tolist()
    r = ratio.tolist()
    fl = flow_edge.tolist()
    node_tol = [np.inf] * com.n_nodes
    edge_tol = list(edge_slack)
    for k in reversed(order):  # heads before tails
        best = np.inf
        for e in range(starts[k], starts[k + 1]):
            h = heads[e]
            t = edge_slack[e] if h < 0 else min(edge_slack[e], node_tol[h])
            edge_tol[e] = t
            if fl[e]:
                best = min(best, t / r[e])
        node_tol[k] = best
    return np.asarray(edge_tol)


def _weights(r: list[float], tol: list[float], through: float, budget: int) -> list[int]:
    """Integer weights summing to ``budget`` for shares ``r``: the floor of each share, then each
    unit left to the member whose excess over its share, per its tolerance, stays least."""
    w = [int(budget * x) for x in r]
    for _ in range(budget - sum(w)):
        j = min(range(len(r)), key=lambda i: (through * ((w[i] + 1) / budget - r[i])) / max(tol[i], 1e-12))
        w[j] += 1
    g = 0
    for x in w:
        g = gcd(g, x)
    return [x // g for x in w] if g > 1 else w


def round_by_flow(com: Commodities, lp_ratio: np.ndarray, budgets: list[int], target: float,
                  min_share: float = 1e-9) -> FlowRounding:
    """Round ``lp_ratio`` (NaN where a node has no LP flow) node by node in flow order.

    ``budgets`` per device; ``target``: the utilization the LP reached (the links' spare
    capacity is counted up to ``target * (1 + HEADROOM)``). Members are the edges whose share
    exceeds ``min_share``."""
    fab = com.fab
    ratio = np.nan_to_num(lp_ratio, nan=0.0)
    flow_edge = ratio > min_share
    _, loads = propagate(com, np.where(flow_edge, ratio, 0.0))
    cap = fab.arc_cap
    slack = np.maximum(target * (1 + HEADROOM) * cap - loads, 1e-6 * cap)
    order = _flow_order(com, flow_edge)
    tol = _tolerance(com, ratio, flow_edge, order, slack).tolist()
    through = com.node_demand.astype(np.float64).tolist()
    starts, heads, rl = com.node_start.tolist(), com.e_head_node.tolist(), ratio.tolist()
    fl, node_v = flow_edge.tolist(), com.node_v.tolist()
    out = np.zeros(len(ratio))
    members: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for k in order:
        edges = [e for e in range(starts[k], starts[k + 1]) if fl[e]]
        if not edges:
            continue
        if len(edges) == 1:
            w = [1]
        else:
            tot = sum(rl[e] for e in edges)
            w = _weights([rl[e] / tot for e in edges], [tol[e] for e in edges], through[k], budgets[node_v[k]])
        wsum = sum(w)
        kept = [(e, x) for e, x in zip(edges, w, strict=True) if x > 0]
        members[k] = (tuple(e for e, _ in kept), tuple(x for _, x in kept))
        for e, x in kept:
            out[e] = x / wsum
            if heads[e] >= 0:
                through[heads[e]] += through[k] * x / wsum
    return FlowRounding(members, out)
