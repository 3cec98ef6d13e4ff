"""Robust WCMP: weights that keep utilization under the limit in every failure scenario.

This module owns the failure-tolerant variant of the WCMP plan, in the spirit
of FFC ("Traffic Engineering with Forward Fault Correction", SIGCOMM 2014).
Under local repair a device renormalizes its surviving weights, so the load a
failure puts on a link is a ratio of split variables, not a linear function of
them. FFC's linearization: give every next hop an *allocation* ``g`` and split
in proportion to it; if, for every next-hop set a scenario can take from a
node, the survivors' allocations still cover all that can arrive there
(``sum(out g) - sum(lost g) >= demand + sum(in g)``), then by induction from the
sources no edge ever carries more than its allocation, in any such scenario and
in both replay stages (local repair and reconvergence only ever remove next
hops of a 3-tier Clos). The LP minimizes the largest allocation utilization
``U``; ``U <= limit`` certifies the plan. The protected sets come from the
scenario scope: each declared domain's lost next hops (and, following
withdrawals, those toward nodes left with none), plus every single next hop
with ``all_single``. The allocation is a sufficient condition and can be
conservative, so the plan is then judged by the exact scenario oracle; while
scenarios still violate, later rounds derate the overloaded links' capacities
in the LP (by ``limit / peak``) and the best plan seen is kept. For plans
too large for the allocation LP on a small machine (more than
``RobustOptions.ffc_max_edges`` DAG edges) a cheaper search moves every split from the
min-MLU plan's toward equal shares (ECMP, the least amplification a failure
can cause) and keeps the least move that holds every scenario. Which
scenarios make the limit *impossible* is proven separately: the min-MLU LP on
the failed topology (the routing's next hops after the failure, any weights)
lower-bounds every plan there; above the limit, no weights can meet it. The
price of robustness is the baseline MLU with and without it
(``summary.extra["robust"]``). Weights come from the splits by the solver's
weight reduction within each device's budget.

On a clean 3-tier Clos (the fabrics :mod:`solver.clos.model` models) the same
allocation idea runs first on the pod-level model instead
(:mod:`solver.clos.robust`: variables per pod pair and plane, where the DAG
LP has one per prefix and edge), pricing the baseline MLU against the
limit; the oracle judges its best candidates. Only when none holds does the
DAG path run, and then without the blend search (built for fabrics the pod
model cannot describe).

The scenario oracle is a parameter (``evaluate``), so the solver does not
import the safety layer; :func:`safety.replay.peaks` is the one to pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from controller.model import Intent
from controller.model.errors import Infeasible
from controller.model.intent import validate_intent
from controller.model.plan import DevicePlan, LinkLoad, NextHop, Plan
from solver.clos.robust import clos_robust
from solver.core.canonical import as_written, canonical_order
from solver.core.lp import DEFAULT_BACKEND, solve_lp
from solver.core.options import RobustOptions
from solver.core.weights import device_budget, reduce_weights
from solver.solve import solve

__all__ = ["Evaluation", "failed_topology_intent", "ffc_ratios", "plan_with_ratios", "solve_robust"]

Progress = Callable[[str, float], None]


class Evaluation(Protocol):
    """What the scenario oracle returns (see :class:`safety.replay.Peaks`)."""

    @property
    def link_peak(self) -> dict[str, float]: ...
    @property
    def violating(self) -> dict[str, float]: ...
    @property
    def baseline_mlu(self) -> float: ...
    @property
    def limits(self) -> dict[str, float]: ...


Evaluate = Callable[[Intent, Plan], Evaluation]


def _real_plan(intent: Intent, plan: Plan, baseline_mlu: float, extra: dict[str, Any], *,
               loads_known: bool = False) -> Plan:
    """``plan`` with its per-link loads recomputed through its integer weights (unless ``loads_known``)."""
    links = plan.links
    if not loads_known:
        load = _loads(intent, plan)
        links = tuple(LinkLoad(link.a, link.a_port, link.b, link.b_port, float(load[2 * i]),
                               float(load[2 * i + 1]),
                               max(float(load[2 * i]), float(load[2 * i + 1])) / link.capacity_gbps)
                      for i, link in enumerate(intent.links))
    summary = dataclasses.replace(plan.summary, max_utilization=baseline_mlu,
                                  extra={**plan.summary.extra, "robust": extra})
    return Plan(plan.fabric, summary, plan.devices, links)


def _loads(intent: Intent, plan: Plan) -> np.ndarray:
    """Directed link loads (``2*i`` a->b) of every demand through ``plan``'s weights."""
    dags = _dags(intent, plan)
    load = np.zeros(2 * len(intent.links))
    names = [d.name for d in intent.devices]
    n = len(dags.out)
    indeg = np.zeros(n, dtype=np.int64)
    for edges in dags.out:
        for _l, nxt, _p in edges:
            if nxt >= 0:
                indeg[nxt] += 1
    x = np.array(dags.demand, dtype=np.float64)
    ready = [k for k in range(n) if indeg[k] == 0]
    while ready:
        k = ready.pop()
        edges = dags.out[k]
        if not edges:
            continue
        hops = {h.port: h.weight for h in plan.devices[names[dags.node_dev[k]]].nexthops(
            dags.prefixes[dags.node_cls[k]])}
        total = sum(hops.values())
        for lid, nxt, port in edges:
            f = x[k] * hops[port] / total
            load[lid] += f
            if nxt >= 0:
                x[nxt] += f
                indeg[nxt] -= 1
                if indeg[nxt] == 0:
                    ready.append(nxt)
    return load


def failed_topology_intent(intent: Intent, devices: frozenset[str], links: frozenset[str]) -> Intent:
    """``intent`` with the failed parts removed (and what only they originated or sent)."""
    doc: dict[str, Any] = intent.to_document()  # taken apart section by section below
    dead_links = set(links)
    for link in intent.links:
        if link.a in devices or link.b in devices:
            dead_links.add(link.key)
    ends = {e for link in intent.links if link.key in dead_links for e in (link.end_a, link.end_b)}
    doc["devices"] = [d for d in doc["devices"] if d["name"] not in devices]
    doc["links"] = [x for x in doc["links"] if min(f"{x['a']}:{x['a_port']}", f"{x['b']}:{x['b_port']}")
                    not in dead_links]
    prefixes = []
    for p in doc.get("prefixes", []):
        origins = [o for o in p["origins"] if o not in devices]
        if origins:
            prefixes.append({**p, "origins": origins})
    kept = {p["prefix"] for p in prefixes}
    doc["prefixes"] = prefixes
    doc["demands"] = [d for d in doc.get("demands", []) if d["from"] not in devices and d["to"] in kept]
    doc["failure_domains"] = []
    doc["policies"] = [p for p in doc.get("policies", []) if p["kind"] != "failure_tolerance"
                       and not (p["kind"] == "drain" and (p["target"] in devices or p["target"] in ends))]
    return validate_intent(doc)


def _impossible(intent: Intent, names: list[str], backend: str,
                parts: Callable[[str], tuple[frozenset[str], frozenset[str]]],
                options: RobustOptions) -> dict[str, float | None]:
    """Per scenario, the min-MLU bound of its failed topology (None: could not tell)."""
    out: dict[str, float | None] = {}
    for name in names:
        devices, links = parts(name)
        try:
            bound = solve(failed_topology_intent(intent, devices, links), backend=backend,
                          options=options.plan).summary.lp_bound
        except Exception:  # noqa: BLE001 - an unroutable or invalid failed topology: no verdict
            out[name] = None
            continue
        out[name] = float(bound)
    return out


@dataclasses.dataclass(slots=True)
class _Dags:
    """The plan's forwarding DAG per demanded prefix, restricted to what carries traffic.

    Node ``k`` is (prefix, device); its out-edges ``out[k]`` are (edge index, next
    node or -1 for delivery at an origin, directed link id ``2*i`` a->b / ``2*i+1``).
    """

    prefixes: list[str]
    node_dev: list[int]
    node_cls: list[int]
    demand: list[float]
    out: list[list[tuple[int, int, str]]]  # (link id, next node or -1, port)
    n_edges: int


def _dags(intent: Intent, plan: Plan) -> _Dags:
    index = {d.name: i for i, d in enumerate(intent.devices)}
    port_link: dict[tuple[int, str], tuple[int, int]] = {}
    for i, link in enumerate(intent.links):
        port_link[(index[link.a], link.a_port)] = (2 * i, index[link.b])
        port_link[(index[link.b], link.b_port)] = (2 * i + 1, index[link.a])
    origins = {p.prefix: {index[o] for o in p.origins} for p in intent.prefixes}
    dem: dict[str, dict[int, float]] = {}
    for d in intent.effective_demands:
        if d.gbps > 0 and index[d.from_] not in origins.get(d.to, ()):
            dem.setdefault(d.to, {}).setdefault(index[d.from_], 0.0)
            dem[d.to][index[d.from_]] += d.gbps
    names = [d.name for d in intent.devices]
    dp = [plan.devices.get(n) for n in names]
    dags = _Dags([], [], [], [], [], 0)
    for ci, prefix in enumerate(sorted(dem)):
        dags.prefixes.append(prefix)
        node_of: dict[int, int] = {}
        todo = sorted(dem[prefix])
        for v in todo:
            node_of[v] = len(dags.node_dev)
            dags.node_dev.append(v)
            dags.node_cls.append(ci)
            dags.demand.append(dem[prefix][v])
            dags.out.append([])
        while todo:
            v = todo.pop()
            k = node_of[v]
            here = dp[v]
            hops = here.nexthops(prefix) if here is not None and v not in origins[prefix] else ()
            for h in hops:
                lid, w = port_link[(v, h.port)]
                if w in origins[prefix]:
                    nxt = -1
                else:
                    nxt = node_of.get(w, -2)
                    if nxt == -2:
                        nxt = node_of[w] = len(dags.node_dev)
                        dags.node_dev.append(w)
                        dags.node_cls.append(ci)
                        dags.demand.append(0.0)
                        dags.out.append([])
                        todo.append(w)
                dags.out[k].append((lid, nxt, h.port))
                dags.n_edges += 1
    return dags


def _lost_sets(intent: Intent, dags: _Dags, all_single: bool) -> list[list[frozenset[int]]]:
    """Per node, the sets of its out-edges (positions) that some scenario takes at once.

    Declared domains: the next hops over failed links or toward failed devices,
    then, as routing reconverges, toward nodes that withdrew (all their next hops
    gone), to a fixpoint. ``all_single`` adds every single next hop of every node.
    """
    index = {d.name: i for i, d in enumerate(intent.devices)}
    link_ids = {link.key: i for i, link in enumerate(intent.links)}
    ends = [(index[link.a], index[link.b]) for link in intent.links]
    sets: list[set[frozenset[int]]] = [set() for _ in dags.out]
    dev_nodes: dict[int, list[int]] = {}
    inn: list[list[tuple[int, int]]] = [[] for _ in dags.out]
    for k, edges in enumerate(dags.out):
        dev_nodes.setdefault(dags.node_dev[k], []).append(k)
        for j, (_l, nxt, _p) in enumerate(edges):
            if nxt >= 0:
                inn[nxt].append((k, j))
    adjacent: dict[int, set[int]] = {}
    for a, b in ends:
        adjacent.setdefault(a, set()).add(b)
        adjacent.setdefault(b, set()).add(a)
    for fd in intent.failure_domains:
        dead_dev = {index[d] for d in fd.devices}
        dead_links = {link_ids[intent.link_by_end[e].key] for e in fd.links if e in intent.link_by_end}
        tails = {v for i in dead_links for v in ends[i]} | {w for v in dead_dev for w in adjacent.get(v, ())}
        lost: dict[int, set[int]] = {}
        for v in tails - dead_dev:
            for k in dev_nodes.get(v, ()):
                gone = {j for j, (lid, _n, _p) in enumerate(dags.out[k])
                        if lid // 2 in dead_links or ends[lid // 2][(lid % 2) ^ 1] in dead_dev}
                if gone:
                    lost[k] = gone
        todo = [k for k, g in lost.items() if len(g) == len(dags.out[k])]
        while todo:
            k = todo.pop()
            for k2, j in inn[k]:
                if dags.node_dev[k2] in dead_dev:
                    continue
                g = lost.setdefault(k2, set())
                if j not in g:
                    g.add(j)
                    if len(g) == len(dags.out[k2]):
                        todo.append(k2)
        for k, g in lost.items():
            if len(g) < len(dags.out[k]):
                sets[k].add(frozenset(g))
    if all_single:
        for k, edges in enumerate(dags.out):
            if len(edges) >= 2:
                sets[k] |= {frozenset({j}) for j in range(len(edges))}
    return [sorted(x, key=sorted) for x in sets]


def ffc_ratios(intent: Intent, plan: Plan, *, backend: str = DEFAULT_BACKEND,
               capacity: dict[str, float] | None = None) -> tuple[_Dags, list[np.ndarray], float]:
    """The FFC-style allocation LP over the plan's DAGs.

    Variables: an *allocation* ``g(e) >= 0`` per DAG edge and ``U``. Rows: for
    every node ``k`` and every next hop (or declared domain's set of next hops)
    it can lose, the allocations of the survivors cover everything that can
    arrive, ``sum(out g) - sum(lost g) - sum(in g) >= demand(k)``; per link,
    ``sum g <= U * capacity``. Minimize ``U`` (plus a tiny total-allocation term).
    Splits are ``g / sum(out g)``. When a scenario removes at most the
    protected next hops of each node, traffic on every edge stays at most its
    allocation (induction from the sources, as in FFC): the link loads of every
    such scenario, in both stages, are at most ``U * capacity``.

    ``capacity`` overrides link capacities by key (derated rounds). Returns the
    DAGs, each node's split ratios and ``U`` (relative to those capacities).
    """
    dags = _dags(intent, plan)
    pol = intent.policy("failure_tolerance")
    lost = _lost_sets(intent, dags, pol is not None and str(pol.scope) != "domains")
    n_nodes = len(dags.out)
    edge_start = np.zeros(n_nodes + 1, dtype=np.int64)
    edge_start[1:] = np.cumsum([len(e) for e in dags.out])
    n_g = int(edge_start[-1])
    u_col = n_g
    e_lid = np.array([lid for edges in dags.out for lid, _n, _p in edges], dtype=np.int64)
    e_head = np.array([nxt for edges in dags.out for _l, nxt, _p in edges], dtype=np.int64)
    inn: list[list[int]] = [[] for _ in range(n_nodes)]
    for e, h in enumerate(e_head.tolist()):
        if h >= 0:
            inn[h].append(e)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lb: list[float] = []
    r = 0
    for k in range(n_nodes):
        lo, hi = int(edge_start[k]), int(edge_start[k + 1])
        d = hi - lo
        if d == 0:
            continue
        cover = [frozenset(), *lost[k]]
        for gone in cover:
            for j in range(d):
                if j not in gone:
                    rows.append(r)
                    cols.append(lo + j)
                    vals.append(1.0)
            for e in inn[k]:
                rows.append(r)
                cols.append(e)
                vals.append(-1.0)
            lb.append(dags.demand[k])
            r += 1
    n_prot = r
    used, link_row = np.unique(e_lid, return_inverse=True)
    caps = capacity or {}
    cap = np.array([caps.get(intent.links[int(i) // 2].key, intent.links[int(i) // 2].capacity_gbps) for i in used])
    scale = float(np.median(cap)) if len(cap) else 1.0
    rows_a = np.concatenate([np.asarray(rows, dtype=np.int64), n_prot + link_row, n_prot + np.arange(len(used))])
    cols_a = np.concatenate([np.asarray(cols, dtype=np.int64), np.arange(n_g), np.full(len(used), u_col)])
    vals_a = np.concatenate([np.asarray(vals), np.ones(n_g), -cap / scale])
    a = sp.csr_matrix((vals_a, (rows_a, cols_a)), shape=(n_prot + len(used), n_g + 1))
    row_lb = np.concatenate([np.asarray(lb) / scale, np.full(len(used), -np.inf)])
    row_ub = np.concatenate([np.full(n_prot, np.inf), np.zeros(len(used))])
    c = np.zeros(n_g + 1)
    c[u_col] = 1.0
    res = solve_lp(c, a, row_lb, row_ub, np.zeros(n_g + 1), np.full(n_g + 1, np.inf), backend=backend)
    g = np.maximum(res.x[:n_g], 0.0)
    ratios = []
    for k in range(n_nodes):
        gk = g[edge_start[k]:edge_start[k + 1]]
        tot = gk.sum()
        ratios.append(gk / tot if tot > 0 else np.full(len(gk), 1.0 / max(len(gk), 1)))
    return dags, ratios, float(res.x[u_col])


def plan_with_ratios(intent: Intent, plan: Plan, dags: _Dags, ratios: list[np.ndarray]) -> Plan:
    """``plan`` with the groups of every demanded (prefix, device) re-weighted to ``ratios``
    (integer weights by :func:`solver.core.weights.reduce_weights`); identical groups merged."""
    names = [d.name for d in intent.devices]
    per_dev: dict[str, dict[str, tuple[NextHop, ...]]] = {}
    for k, edges in enumerate(dags.out):
        if len(edges) < 2:
            continue
        dev = names[dags.node_dev[k]]
        hops = plan.devices[dev].nexthops(dags.prefixes[dags.node_cls[k]])
        by_port = {h.port: h for h in hops}
        ws = reduce_weights(ratios[k].tolist(), max(device_budget(intent, dev), len(edges)))
        per_dev.setdefault(dev, {})[dags.prefixes[dags.node_cls[k]]] = tuple(
            NextHop(p, by_port[p].neighbor, w) for (_l, _n, p), w in zip(edges, ws, strict=True))
    devices = {}
    for name, dp in plan.devices.items():
        new = per_dev.get(name, {})
        groups: dict[tuple[tuple[str, str, int], ...], str] = {}
        out_groups: dict[str, tuple[NextHop, ...]] = {}
        routes: dict[str, str] = {}
        for prefix, gid in dp.routes.items():
            hops = new.get(prefix, dp.groups[gid])
            key = tuple((h.port, h.neighbor, h.weight) for h in hops)
            g = groups.get(key)
            if g is None:
                g = groups[key] = f"g{len(groups) + 1}"
                out_groups[g] = hops
            routes[prefix] = g
        devices[name] = DevicePlan(out_groups, routes)
    return Plan(plan.fabric, plan.summary, devices, plan.links)


@dataclasses.dataclass
class _Search:
    """The robust search's state: the best plan so far (by :func:`_score`) and what found it."""

    best: tuple[tuple[int, float, float], Plan, Evaluation]
    rounds: int = 0  # FFC rounds run
    bound: float | None = None  # the allocation bound of the winning LP path
    clos: tuple[Plan, dict[str, Any]] | None = None  # the pod-level plan, when it was the best at some point
    clean: bool = False  # the fabric is a clean Clos (the pod-level path ran)
    blend: tuple[Plan, float] | None = None

    def offer(self, plan: Plan, ev: Evaluation) -> bool:
        """Keep ``plan`` if it scores better than the best so far."""
        if _score(ev) < self.best[0]:
            self.best = (_score(ev), plan, ev)
            return True
        return False


def _try_clos(intent: Intent, evaluate: Evaluate, plain: Plan, limit: float, search: _Search, backend: str,
              oracle_tries: int, say: Progress, options: RobustOptions) -> None:
    """The pod-level candidates of :mod:`solver.clos.robust`, best first, judged by the oracle."""
    cands = clos_robust(intent, limit, backend=backend, baseline_floor=float(plain.summary.lp_bound),
                        progress=say, options=options)
    search.clean = cands is not None
    for cand in (cands or [])[:oracle_tries]:
        plan = cand.plan()
        ev_c = evaluate(intent, plan)
        if search.offer(plan, ev_c):
            search.clos = (plan, {"t": list(cand.t), "certificate": round(cand.reserved_mlu, 6)})
            search.bound = cand.reserved_mlu
        if not ev_c.violating:
            break


def _try_ffc(intent: Intent, evaluate: Evaluate, plain: Plan, ev: Evaluation, limit: float, search: _Search,
             backend: str, max_rounds: int, say: Progress, options: RobustOptions) -> _Dags | None:
    """FFC rounds on the plan's DAGs, the first on real capacities, later ones with the links the
    last round's plan overloaded derated. Returns the DAGs of the last round."""
    capacity = {link.key: link.capacity_gbps for link in intent.links}
    dags = None
    while search.best[2].violating and search.rounds < max_rounds:
        if search.rounds:
            for key, peak in ev.link_peak.items():
                if peak > limit:
                    capacity[key] *= (limit / peak) * (1 - options.derate_margin)
        search.rounds += 1
        say("robust", search.rounds / max_rounds)
        try:
            dags, ratios, u = ffc_ratios(intent, plain, backend=backend, capacity=capacity)
        except Infeasible:
            break
        search.bound = u if search.rounds == 1 and search.clos is None else search.bound
        plan = plan_with_ratios(intent, plain, dags, ratios)
        ev = evaluate(intent, plan)
        search.offer(plan, ev)
    return dags


def _failure_mlu(ev: Evaluation) -> float | None:
    """The worst utilization of any failure scenario, where the oracle says (:class:`safety.replay.Peaks`)."""
    got = getattr(ev, "failure_mlu", None)
    return None if got is None else round(float(got), 6)


def _report(intent: Intent, plain: Plan, search: _Search, limit: float, backend: str, prove: int,
            t0: float, options: RobustOptions, plain_ev: Evaluation) -> Plan:
    """The best plan with ``summary.extra["robust"]`` (see :func:`solve_robust`)."""
    _, plan, ev = search.best
    impossible: dict[str, float] = {}
    if ev.violating:
        worst = sorted(ev.violating, key=lambda n: -ev.violating[n])[:prove]
        bounds = _impossible(intent, worst, backend, _parts_of(intent), options)
        impossible = {n: round(b, 6) for n, b in bounds.items() if b is not None and b > limit + 1e-9}
    clos = search.clos
    extra = {
        "robust": not ev.violating,
        "limit": limit,
        "baseline_mlu_plain": round(float(plain.summary.max_utilization), 6),
        "baseline_mlu_robust": round(ev.baseline_mlu, 6),
        "failure_mlu_plain": _failure_mlu(plain_ev),  # the worst post-failure utilization without robust WCMP
        "failure_mlu_robust": _failure_mlu(ev),  # and with it
        "rounds": search.rounds,
        "method": _method(plan, plain, clos, search.blend),
        "ffc_bound": None if search.bound is None else round(search.bound, 6),
        "seconds": round(time.perf_counter() - t0, 3),
        "violating": {n: round(u, 6) for n, u in sorted(ev.violating.items(), key=lambda kv: -kv[1])[:50]},
        "violating_count": len(ev.violating),
        "impossible": impossible,
    }
    if clos is not None and plan is clos[0]:
        extra["clos"] = clos[1]
    return _real_plan(intent, plan, ev.baseline_mlu, extra, loads_known=clos is not None and plan is clos[0])


def solve_robust(intent: Intent, evaluate: Evaluate, *, backend: str = DEFAULT_BACKEND, max_rounds: int = 4,
                 prove: int = 10, method: str = "auto", oracle_tries: int = 2,
                 progress: Progress | None = None, options: RobustOptions = RobustOptions()) -> Plan:
    """A plan whose utilization stays under the limit in every scenario where possible.

    Parameters
    ----------
    intent : a validated intent; its ``failure_tolerance`` policy sets scope and limit.
    evaluate : the scenario oracle, ``evaluate(intent, plan)`` -> :class:`Evaluation`
        (pass :func:`safety.replay.peaks`).
    backend : the LP backend of :func:`solver.solve`.
    max_rounds : FFC rounds at most (the first on real capacities, then derated).
    method : ``clos`` (the pod-level allocation LP of :mod:`solver.clos.robust`,
        clean Clos fabrics only), ``ffc`` (the allocation LP on the plan's DAGs),
        ``blend`` (the search between the min-MLU splits and ECMP) or ``auto``:
        ``clos`` on a clean Clos, then (if scenarios still violate) FFC when the
        plan's DAGs have at most ``options.ffc_max_edges`` edges, then the blend
        search unless the fabric is a clean Clos.
    oracle_tries : how many of the pod-level candidates (best first) the oracle judges at most.
    prove : how many still-violating scenarios to test for impossibility.
    progress : called as ``progress(stage, fraction)``.
    options : the robust knobs and those of the plain plans solved on the way
        (:class:`solver.core.options.RobustOptions`).

    Returns
    -------
    A :class:`~controller.model.plan.Plan` with ``summary.extra["robust"]``: ``robust``
    (every scenario under its limit), ``limit``, ``baseline_mlu_plain`` and
    ``baseline_mlu_robust`` (the price), ``method`` (``plain``, ``clos``, ``ffc``
    or ``blend ALPHA``: which plan won), ``rounds``, ``ffc_bound`` (the
    allocation bound of the winning LP path), ``seconds``, ``violating``
    (scenario -> worst utilization, left after the last round),
    ``impossible`` (scenario -> the failed topology's min-MLU bound, for those
    whose bound exceeds the limit: no weights meet it there) and, when the
    pod-level plan won, ``clos`` (its grid point ``t`` and ``certificate``, the
    worst utilization its allocations allow in any protected scenario).

    Raises
    ------
    controller.model.errors.Infeasible : the intent cannot be routed at all.
    """
    t0 = time.perf_counter()
    say: Progress = progress or (lambda stage, frac: None)
    written, intent = intent, canonical_order(intent)  # the same plan whatever the order of the lists
    plain = solve(intent, backend=backend, options=options.plan)
    ev = evaluate(intent, plain)
    limit = ev.limits["failure"]
    search = _Search((_score(ev), plain, ev))
    if ev.violating and method in ("auto", "clos"):
        _try_clos(intent, evaluate, plain, limit, search, backend, oracle_tries, say, options)
    dags = _dags(intent, plain) if search.best[2].violating and method != "clos" else None
    use_ffc = method == "ffc" or (method == "auto" and dags is not None and dags.n_edges <= options.ffc_max_edges)
    if use_ffc and dags is not None:
        dags = _try_ffc(intent, evaluate, plain, ev, limit, search, backend, max_rounds, say, options) or dags
    if dags is not None and search.best[2].violating and (method == "blend" or (method == "auto" and not search.clean)):
        search.blend, found = _blend_search(intent, plain, dags, evaluate, options.blend_steps)
        search.offer(*found)
    plan = _report(intent, plain, search, limit, backend, prove, t0, options, ev)
    say("robust", 1.0)
    return as_written(plan, written)


def _method(plan: Plan, plain: Plan, clos: tuple[Plan, dict[str, Any]] | None,
            blend: tuple[Plan, float] | None) -> str:
    if plan is plain:
        return "plain"
    if clos is not None and plan is clos[0]:
        return "clos"
    return f"blend {blend[1]:g}" if blend is not None and plan is blend[0] else "ffc"


def _blend(intent: Intent, plain: Plan, dags: _Dags, alpha: float) -> Plan:
    """Every split moved ``alpha`` of the way from the min-MLU plan's toward equal (ECMP)."""
    names = [d.name for d in intent.devices]
    ratios = []
    for k, edges in enumerate(dags.out):
        hops = {h.port: h.weight for h in plain.devices[names[dags.node_dev[k]]].nexthops(
            dags.prefixes[dags.node_cls[k]])}
        w = np.array([hops[p] for _l, _n, p in edges], dtype=np.float64)
        ratios.append((1 - alpha) * w / max(w.sum(), 1e-12) + alpha / max(len(w), 1))
    return plan_with_ratios(intent, plain, dags, ratios)


def _blend_search(intent: Intent, plain: Plan, dags: _Dags, evaluate: Evaluate,
                  steps: int = 3) -> tuple[tuple[Plan, float], tuple[Plan, Evaluation]]:
    """The least ``alpha`` (closest to the min-MLU splits) whose blend holds every
    scenario: try 1/4, 1/2, 3/4, 1, then bisect below the first that holds."""
    best: tuple[Plan, float, Evaluation] | None = None
    lo = 0.0
    for alpha in (0.25, 0.5, 0.75, 1.0):
        plan = _blend(intent, plain, dags, alpha)
        ev = evaluate(intent, plan)
        if best is None or _score(ev) < _score(best[2]):
            best = (plan, alpha, ev)
        if not ev.violating:
            break
        lo = alpha
    assert best is not None
    if not best[2].violating:
        hi = best[1]
        for _ in range(steps):
            mid = (lo + hi) / 2
            plan = _blend(intent, plain, dags, mid)
            ev = evaluate(intent, plan)
            if ev.violating:
                lo = mid
            else:
                hi = mid
                best = (plan, mid, ev)
    return (best[0], best[1]), (best[0], best[2])


def _score(ev: Evaluation) -> tuple[int, float, float]:
    return (len(ev.violating), max(ev.violating.values(), default=0.0), ev.baseline_mlu)


def _parts_of(intent: Intent) -> Callable[[str], tuple[frozenset[str], frozenset[str]]]:
    domains = {fd.name: fd for fd in intent.failure_domains}

    def parts(name: str) -> tuple[frozenset[str], frozenset[str]]:
        if name.startswith("device:"):
            return frozenset({name[len("device:"):]}), frozenset()
        if name.startswith("link:"):
            return frozenset(), frozenset({name[len("link:"):]})
        devices: set[str] = set()
        links: set[str] = set()
        for part in name.split("+"):
            fd = domains.get(part)
            if fd is not None:
                devices |= set(fd.devices)
                links |= {intent.link_by_end[e].key for e in fd.links if e in intent.link_by_end}
        return frozenset(devices), frozenset(links)

    return parts
