"""From a validated intent to a forwarding plan: routes, LP, integer weights, loads.

This module owns the orchestration of one solve and the assembly of the
:class:`~controller.model.plan.Plan` (DESIGN.md, contract 2). Stages: route classes
(:mod:`solver.core.routing`), commodities and the WCMP LP (:mod:`solver.wcmp`),
integer weights per next-hop group within the device's budget
(:mod:`solver.core.weights`; ``min(max_ecmp_entries, 100)`` where the realization
is BGP link-bandwidth, since FRR scales bandwidths to kernel weights out of
100), deduplication of identical weighted groups per device, and the loads
after rounding, recomputed by propagating every demand through the integer
weights. The ECMP baseline is propagated the same way. With ``wcmp: enabled:
false`` the plan *is* the ECMP plan (every weight 1) and no LP is solved.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from controller.model import Intent, WcmpRealization
from controller.model.errors import Infeasible
from controller.model.plan import DevicePlan, LinkLoad, NextHop, Plan, PlanSummary
from solver.clos.model import PodModel
from solver.clos.plan import Solved, clos_plan
from solver.clos.react import kept_model, remember
from solver.core.canonical import as_written, canonical_links, canonical_order
from solver.core.fabric import Fabric, build_fabric
from solver.core.lp import BACKENDS, DEFAULT_BACKEND
from solver.core.options import ClosOptions
from solver.core.routing import route_classes
from solver.core.weights import device_budget, reduce_weights
from solver.flowround import round_by_flow
from solver.wcmp import (
    Commodities,
    WcmpSolution,
    build_commodities,
    ecmp_ratios,
    make_loop_free,
    propagate,
    solve_wcmp,
    solve_without,
)

__all__ = ["collector_paused", "solve"]

Progress = Callable[[str, float], None]


class _Weights:
    """``reduce_weights`` with a cache on (rounded ratios, budget): groups repeat a lot."""

    def __init__(self) -> None:
        self.cache: dict[tuple[tuple[float, ...], int], tuple[int, ...]] = {}

    def __call__(self, ratios: np.ndarray, budget: int) -> tuple[int, ...]:
        if len(ratios) == 1:
            return (1,)
        r = ratios / ratios.sum()
        key = (tuple(np.round(r, 9).tolist()), budget)
        hit = self.cache.get(key)
        if hit is None:
            if np.allclose(r, r[0], rtol=0, atol=1e-12):
                hit = (1,) * len(r)
            else:
                hit = tuple(reduce_weights(r, max(budget, len(r))))
            self.cache[key] = hit
        return hit


def _budgets(intent: Intent) -> list[int]:
    return [device_budget(intent, d.name) for d in intent.devices]


def _link_loads(fab: Fabric, loads: np.ndarray) -> tuple[tuple[LinkLoad, ...], float]:
    util = loads / fab.arc_cap
    out = []
    for i, link in enumerate(fab.intent.links):
        out.append(LinkLoad(link.a, link.a_port, link.b, link.b_port, float(loads[2 * i]), float(loads[2 * i + 1]),
                            float(max(util[2 * i], util[2 * i + 1]))))
    return tuple(out), float(util.max()) if len(util) else 0.0


def _groups(
    fab: Fabric, com: Commodities, lp_ratio: np.ndarray | None, fib: bool, budgets: list[int], progress: Progress,
    fallback: dict[int, tuple[int, ...]], fixed: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
) -> tuple[dict[str, DevicePlan], np.ndarray, int]:
    """Weighted groups and routes per device, and the rounded ratio per commodity edge.

    A device without LP flow splits equally over ``fallback[node]`` if given
    (``paths: loop_free``), else over the routing's next hops. ``fixed``: per node, member
    edges and weights rounded already (:func:`solver.flowround.round_by_flow`)."""
    names, port, head = fab.names, fab.arc_port, fab.arc_head
    weigh = _Weights()
    group_ids: list[dict[tuple[tuple[str, str, int], ...], str]] = [{} for _ in names]
    routes: list[dict[str, str]] = [{} for _ in names]
    rounded = np.zeros(len(com.e_arc))
    node_of: dict[tuple[int, int], int] = {}
    for kk in range(com.n_nodes):
        node_of[(int(com.commodity_class[com.node_c[kk]]), int(com.node_v[kk]))] = kk
    n_routes = 0

    def group_id(v: int, members: tuple[tuple[str, str, int], ...]) -> str:
        ids = group_ids[v]
        gid = ids.get(members)
        if gid is None:
            gid = ids[members] = f"g{len(ids) + 1}"
        return gid

    # per-edge arrays as Python lists: a node has a handful of edges, where numpy's per-call cost dominates
    starts = com.node_start.tolist()
    e_arc = com.e_arc.tolist()
    e_route = com.e_route.tolist()
    ratio = lp_ratio.tolist() if lp_ratio is not None else None
    port_l, head_l = list(port), head.tolist()
    for ci, rc in enumerate(com.classes):
        if ci % 64 == 0:
            progress("weights", ci / max(len(com.classes), 1))
        for v, arcs in rc.nexthops.items():
            k = node_of.get((ci, v))
            members: tuple[tuple[str, str, int], ...]
            hop_arcs: tuple[int, ...]
            weights: tuple[int, ...]
            if fixed is not None and k is not None and k in fixed:
                hop_arcs, weights = tuple(e_arc[j] for j in fixed[k][0]), fixed[k][1]
            elif k is None or ratio is None or ratio[starts[k]] != ratio[starts[k]]:  # NaN: no LP flow
                hop_arcs = arcs if k is None else fallback.get(k, arcs)
                weights = (1,) * len(hop_arcs)
            else:
                s, e = starts[k], starts[k + 1]
                r = ratio[s:e]
                if fib:
                    idx = [j for j, x in enumerate(r) if x > 1e-9]
                else:
                    idx = [j for j, x in enumerate(r) if e_route[s + j] and x >= 0]
                if not idx or sum(r[j] for j in idx) <= 0:
                    idx = [j for j in range(e - s) if e_route[s + j]]
                    r = [1.0] * (e - s)
                hop_arcs = tuple(e_arc[s + j] for j in idx)
                weights = (1,) if len(idx) == 1 else weigh(np.array([max(r[j], 0.0) for j in idx]), budgets[v])
            if k is not None:
                s = starts[k]
                pos = {a: j for j, a in enumerate(e_arc[s:starts[k + 1]])}
                tot = float(sum(weights))
                for a, w in zip(hop_arcs, weights, strict=True):
                    rounded[s + pos[a]] = w / tot
            members = tuple(sorted((port_l[a], names[head_l[a]], w) for a, w in zip(hop_arcs, weights, strict=True)))
            gid = group_id(v, members)
            for p in rc.prefixes:
                routes[v][p] = gid
            n_routes += len(rc.prefixes)
    devices: dict[str, DevicePlan] = {}
    for v, name in enumerate(names):
        groups = {gid: tuple(NextHop(p, nb, w) for p, nb, w in members) for members, gid in group_ids[v].items()}
        devices[name] = DevicePlan(groups=groups, routes=routes[v])
    return devices, rounded, n_routes


def solve(intent: Intent, *, backend: str = DEFAULT_BACKEND, progress: Progress | None = None,
          method: str = "auto", options: ClosOptions = ClosOptions(), like: Plan | None = None) -> Plan:
    """Compile ``intent`` into a forwarding plan.

    Parameters
    ----------
    intent : a validated intent.
    backend : the LP backend, one of :data:`solver.BACKENDS`.
    progress : called as ``progress(stage, fraction)`` while solving.
    method : ``auto`` uses the pod-level LP of :mod:`solver.clos.model` on a clean
        3-tier Clos with demand and the route-class LP otherwise; ``generic`` always the latter.
    options : the tuning knobs of the Clos pipeline (:class:`solver.core.options.ClosOptions`).
    like : a plan this process compiled for an intent that differs from ``intent`` in its links'
        capacities only (as auto-TE's steered candidates do): a Clos's pod model is taken from it instead
        of built again (the same plan, sooner; ignored when ``intent`` differs in more).

    Returns
    -------
    The :class:`~controller.model.plan.Plan`: groups and routes per device, loads per
    link, and a summary with ``max_utilization`` after rounding, the LP optimum
    ``lp_bound`` and ECMP's ``ecmp_max_utilization``. The same whatever the order of the
    intent's lists (the intent is solved in :func:`solver.core.canonical.canonical_order`).

    Raises
    ------
    controller.model.errors.Infeasible : a demand cannot be routed (``details`` names each).
    ValueError : an unknown backend.

    Example
    -------
    >>> from controller.model.intent import validate_intent
    >>> it = validate_intent({"name": "x", "routing": "isis",
    ...     "devices": [{"name": "r1"}, {"name": "r2"}],
    ...     "links": [{"a": "r1", "a_port": "e1", "b": "r2", "b_port": "e1", "capacity_gbps": 10}],
    ...     "prefixes": [{"prefix": "10.0.0.0/24", "origins": ["r2"]}],
    ...     "demands": [{"from": "r1", "to": "10.0.0.0/24", "gbps": 5}]})
    >>> solve(it).summary.max_utilization
    0.5
    """
    with collector_paused():
        reuse = kept_model(intent, like) if like is not None else None
        # like's canonical intent but for the links: the other lists are the same, so their order is too
        canonical = canonical_order(intent) if reuse is None else \
            reuse.fab.intent.model_copy(update={"links": canonical_links(intent)})
        kept: list[Solved] = []
        plan = as_written(_solve(canonical, backend=backend, progress=progress, method=method, options=options,
                                 keep=kept.append, reuse=reuse), intent)
        if kept and not options.warm_start:  # a cold plan: a failure reaction may start from it (solver.clos.react)
            remember(intent, plan, kept[0])
        return plan


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a plan is built. A plan allocates
    millions of small objects that stay alive (its groups, next hops, the model's tables), and
    each collection they trigger walks every live object of the process: on Clos L that was
    0.6 s of 3.8. Reference counting still frees everything else at once. The switch is
    process-wide: a collection another thread would have triggered meanwhile waits, and with
    overlapping solves the collector is back on when the one that found it on ends."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _solve(intent: Intent, *, backend: str, progress: Progress | None, method: str, options: ClosOptions,
           keep: Callable[[Solved], None] | None = None, reuse: PodModel | None = None) -> Plan:
    t0 = time.perf_counter()
    say: Progress = progress or (lambda stage, frac: None)
    if backend not in BACKENDS:
        raise ValueError(f"unknown LP backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    say("routes", 0.0)
    if method not in ("auto", "generic"):
        raise ValueError(f"unknown method {method!r}: auto or generic")
    if method == "auto" and intent.effective_demands:  # with no demand there is nothing to balance: plain routes
        plan = clos_plan(intent, backend=backend, progress=say, t0=t0, options=options, keep=keep, reuse=reuse)
        if plan is not None:
            return plan
    return _generic_plan(intent, backend, say, t0)


def _route_class_lp(intent: Intent, com: Commodities, backend: str, say: Progress
                    ) -> tuple[np.ndarray, float, dict[int, tuple[int, ...]], dict[str, Any], WcmpSolution]:
    """The route-class LP's split ratios, its optimum, the ``loop_free`` fallback next hops and what
    the plan's ``extra`` says about the solve."""
    say("lp", 0.0)
    fib = intent.wcmp_realization == WcmpRealization.FIB
    share = None if fib else 1.0 / np.asarray(_budgets(intent), dtype=np.float64)
    extra: dict[str, Any] = {"backend": backend, "lp_model": "route-classes"}
    sol = solve_wcmp(com, backend=backend, min_share=share)
    lp_ratio = sol.ratio
    fallback: dict[int, tuple[int, ...]] = {}
    if intent.paths_mode == "loop_free":
        lp_ratio, fallback = make_loop_free(com, sol)
    extra["lp_seconds"] = round(sol.seconds, 3)
    if sol.backend:
        extra["backend"] = sol.backend
    say("lp", 1.0)
    return lp_ratio, sol.mlu, fallback, extra, sol


#: how many times the LP is solved again without the members rounding left out (:func:`_by_flow`)
PRUNE_ROUNDS = 3
#: and in all for at most this many times the first solve's seconds (HiGHS' time limit)
PRUNE_SECONDS_FACTOR = 1.0

_Chosen = tuple[np.ndarray, dict[int, tuple[int, ...]], dict[int, tuple[tuple[int, ...], tuple[int, ...]]]]


def _by_flow(com: Commodities, sol: WcmpSolution, lp_ratio: np.ndarray, fallback: dict[int, tuple[int, ...]],
             budgets: list[int], mlu: float, extra: dict[str, Any]) -> _Chosen | None:
    """Groups rounded in flow order (:func:`solver.flowround.round_by_flow`) when that beats ``mlu``:
    the split ratios, fallback next hops and members to build the groups from, or None.

    A member the rounding leaves out, or whose share is under half an entry of its group, is one
    the budget cannot write. Where the rounded plan stays above the LP's optimum, the LP is solved
    again without those members (from its basis), so that upstream the traffic is sent where
    it can be split, and the new split is rounded; up to :data:`PRUNE_ROUNDS` times, within
    :data:`PRUNE_SECONDS_FACTOR` times the first solve's time."""
    best: _Chosen | None = None
    dropped = np.zeros(len(com.e_arc), dtype=bool)
    current = sol
    ratio, fb = lp_ratio, fallback
    edge_budget = np.asarray(budgets, dtype=np.float64)[com.node_v[com.e_node]]
    allowed = PRUNE_SECONDS_FACTOR * sol.seconds + 1.0  # the re-solves may cost at most about the LP once more
    for attempt in range(PRUNE_ROUNDS + 1):
        fr = round_by_flow(com, ratio, budgets, current.mlu)
        _, loads = propagate(com, fr.ratio)
        util = float((loads / com.fab.arc_cap).max())
        if util < mlu:
            mlu, best = util, (ratio, fb, fr.members)
            extra.update(rounding="by flow", lp_pruned_edges=int(dropped.sum()))
        # members the rounding left out, and shares finer than half an entry of their group
        lp_share = np.nan_to_num(ratio)
        left_out = (lp_share > 1e-9) & ((fr.ratio == 0) | (lp_share * edge_budget < 0.5))
        if util <= sol.mlu * (1 + 1e-3) or attempt == PRUNE_ROUNDS or not left_out.any():
            break
        dropped |= left_out
        try:
            again = solve_without(com, current, np.flatnonzero(dropped), max(allowed, 0.0))
        except Infeasible:  # the edges left out were needed: keep the best so far
            break
        if again is None:
            break
        current = again
        extra["lp_seconds"] = round(extra.get("lp_seconds", 0.0) + current.seconds, 3)
        allowed -= current.seconds
        ratio, fb = make_loop_free(com, current)
    return best


def _generic_plan(intent: Intent, backend: str, say: Progress, t0: float) -> Plan:
    """The plan through route classes: routes, commodities, ECMP, the LP (if WCMP), weights, loads."""
    fab = build_fabric(intent)
    classes = route_classes(fab)
    say("routes", 1.0)
    com = build_commodities(fab, classes)
    _, ecmp_loads = propagate(com, ecmp_ratios(com))
    ecmp_mlu = float((ecmp_loads / fab.arc_cap).max()) if fab.n_arcs else 0.0
    lp_ratio: np.ndarray | None = None
    fallback: dict[int, tuple[int, ...]] = {}
    sol: WcmpSolution | None = None
    if intent.wcmp_enabled:
        lp_ratio, lp_bound, fallback, extra, sol = _route_class_lp(intent, com, backend, say)
    else:
        lp_bound = ecmp_mlu
        extra = {"backend": backend, "wcmp": False}
    fib = intent.wcmp_realization == WcmpRealization.FIB
    budgets = _budgets(intent)
    devices, rounded, n_routes = _groups(fab, com, lp_ratio, fib, budgets, say, fallback)
    say("loads", 0.0)
    _, loads = propagate(com, rounded)
    links, mlu = _link_loads(fab, loads)
    if fib and sol is not None and lp_ratio is not None and mlu > lp_bound * (1 + 1e-6):
        # the rounding of each group alone overloads a link downstream of it
        chosen = _by_flow(com, sol, lp_ratio, fallback, budgets, mlu, extra)
        if chosen is not None:
            devices, rounded, n_routes = _groups(fab, com, chosen[0], fib, budgets, say, chosen[1],
                                                 chosen[2])
            _, loads = propagate(com, rounded)
            links, mlu = _link_loads(fab, loads)
    sol = None  # the LP's model is freed with it
    if lp_ratio is not None and mlu > ecmp_mlu:  # the LP gained less than rounding lost: equal weights
        devices, rounded, n_routes = _groups(fab, com, None, fib, budgets, say, {})
        _, loads = propagate(com, rounded)
        links, mlu = _link_loads(fab, loads)
        extra["rounding"] = "ecmp"
    say("loads", 1.0)
    n_groups = sum(len(dp.groups) for dp in devices.values())
    summary = PlanSummary(max_utilization=mlu, lp_bound=lp_bound, ecmp_max_utilization=ecmp_mlu,
                          solve_seconds=time.perf_counter() - t0, groups=n_groups, routes=n_routes, extra=extra)
    return Plan(fabric=intent.name, summary=summary, devices=devices, links=links)
