"""Safe transitions: the mixed states between two plans, and an update schedule through them.

This module owns the transition model of DESIGN.md (Transitions). The devices
of a change update in *stages*, inside a stage in any order; a *state* is the
set ``S`` of devices already on the new config. In a state, every next hop of
every (destination, device) entry is taken from the side of the device that
*owns* it:

* ``advertised`` (``routing: bgp`` with ``link-bandwidth`` WCMP or plain ECMP):
  the next hop M of device N for prefix P exists because M advertises P to N,
  and its weight is the link-bandwidth M attaches; both are M's config. A hop
  over a link that is drained, added or removed by the change also needs N's
  side (either end's session policy drops it). BGP's own withdrawals follow:
  a device left with no next hop (and not originating P) withdraws P, so its
  upstream neighbors drop it as a next hop, to a fixpoint.
* ``installed`` (``fib`` realization, ``routing: isis`` or ``ospf``): N's own config
  installs N's next hops and weights (static routes nothing withdraws).

A device originates P on its own side. A state is judged as any scenario:
every demand delivered, no forwarding loop, every link under the baseline
``utilization_limit`` (under each intent's demand when they differ; where an
end state is already over it, under that end's utilization: the transition
must make nothing worse, the plans themselves are the safety report's); it is
compiled into a forwarding table (the pair groups below, in the layout of
:class:`safety.forwarding.Table`) and pushed hop by hop as
:func:`safety.forwarding.propagate` does, keeping only the frontier (the tests hold
it against the safety replay of the mixed plan, state by state).

**Stage bound.** A stage ``T`` applied on top of the devices ``B`` already
updated reaches every state ``B + U`` for ``U`` a subset of ``T``. A stage
is judged by a bound that costs one push; small stages the bound declines
are enumerated state by state. Per entry (class c, device v) and next hop h, let a hop be
*possible* when some choice of sides of its owners in ``T`` (the others fixed)
has it, *sure* when every choice has it and (advertised) its next hop is
*surely routed*: an origin on every side, or with a sure hop to a surely routed
device (least fixpoint). Let ``wmax``/``wmin`` be the largest/smallest weight
its weight owner's allowed sides give it and::

    F(h) = wmax(h) / (wmax(h) + sum of wmin over the entry's other sure hops)

The bound graph G+ has every possible hop with fraction F, devices that are
origins on every allowed side deliver. Claims, for every state S of the stage:

1. S's forwarding graph is a subgraph of G+ (withdrawals only remove hops).
2. If the part of G+ reachable from the demand is acyclic, S has no loop.
3. Then x_S(v) <= A(v), where A(v) = d(v) + sum over hops (u, v) of G+ of
   A(u) F(u, v): x_S(v) = d(v) + sum_u x_S(u) f_S(u, v) on the DAG, and
   f_S(h) = w_S(h) / (w_S(h) + the others' present weights) <= F(h) because
   w_S(h) <= wmax, every sure hop is present in S with weight >= wmin, and
   w / (w + a) grows with w and falls with a. By induction in topological
   order of G+, x_S <= A everywhere. (``installed``: an entry's hops all belong to
   its device, so f_S(h) is one side's split ratio and F(h) = the larger of the
   two ratios, a tighter bound by the same argument.)
4. So the load of every edge in S, sum_c x_S(u) f_S(e), is at most
   sum_c A(u) F(e): the propagation of G+ with fractions F, which is what
   :func:`safety.forwarding.propagate` computes on that table.
5. A drop needs a device with x_S(v) > 0, no route, not an origin; a device
   with A(v) > 0 that is surely routed (or surely an origin) has a route in
   every S (by induction on the fixpoint: its sure hop survives because its
   next hop stays routed). So if every device with A(v) > 0 is, nothing drops.

The bound is monotone in ``T`` (fewer free devices: fewer possible hops, more
sure ones, narrower weight ranges), as is the exact set of states, so the
schedule searches for the longest acceptable stage by bisection. Stages are
built greedily, fewest first; when no remaining device can move on its own,
the two plans have no safe order and intermediate plans are tried (split
ratios stepping from the old plan's to the new one's, so load leaves a path
before the path goes, as a drain should), each leg scheduled the same way and
counted in ``intermediate_plans``; when none works under the limit,
:class:`Schedule` names the failing states (device sets) and links, and the
review refuses the commit unless forced. ``test_transition.py`` holds every claim against brute force
over every state of small fabrics.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from controller.model import Intent, Routing, WcmpRealization
from controller.model.plan import DevicePlan, NextHop, Plan
from safety.forwarding import Topology, ranges
from safety.replay import limits

__all__ = ["Schedule", "StateResult", "Transition", "TransitionOptions", "intermediate_plans", "ownership",
           "schedule"]


@dataclass(frozen=True, slots=True)
class TransitionOptions:
    """``exact_limit``: stages of at most this many devices that the bound does not accept are
    enumerated state by state; ``scan_limit``: after bisection, up to this many of the
    remaining devices are each tried in the stage; ``tol``: slack on the utilization limit;
    ``max_intermediate``: at most this many intermediate plans are tried when the two plans
    have no safe order; ``max_pushes``: the search's budget of pushes (states or bounds) per
    pair of plans, past which the rest is one last stage, judged as it is; ``quick_pushes``: the
    direct search first gets this much of it, then intermediate plans are tried, and only when
    none works does the direct search get the whole budget (a direct order that needs a long
    search is usually many small stages; a leg through a plan between costs a few)."""

    exact_limit: int = 6
    scan_limit: int = 8
    tol: float = 1e-9
    max_intermediate: int = 3
    max_pushes: int = 2000
    #: the first direct search's budget: past it, intermediate plans are tried before the rest of the budget
    quick_pushes: int = 250


def ownership(intent: Intent) -> str:
    """``advertised`` when BGP's advertisements carry the next hops and weights, else ``installed``."""
    if intent.routing == Routing.BGP and not (intent.wcmp_enabled
                                             and intent.wcmp_realization == WcmpRealization.FIB):
        return "advertised"
    return "installed"


@dataclass(frozen=True, slots=True)
class StateResult:
    """A state (or a stage's bound): worst utilization, its link, black holes, loops."""

    ok: bool
    worst_utilization: float
    worst_link: str | None
    over: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    loops: tuple[str, ...] = ()

    def to_document(self) -> dict[str, Any]:
        finite = bool(np.isfinite(self.worst_utilization))
        return {"ok": self.ok, "worst_utilization": round(self.worst_utilization, 6) if finite else None,
                "worst_link": self.worst_link, "over_limit": list(self.over), "dropped": list(self.dropped),
                "loops": list(self.loops)}


def _union_topology(old: Intent, new: Intent) -> tuple[Topology, dict[str, int], list[dict[tuple[int, str], int]]]:
    names = tuple(dict.fromkeys([d.name for d in new.devices] + [d.name for d in old.devices]))
    index = {n: i for i, n in enumerate(names)}
    links: dict[str, Any] = {}
    for link in list(new.links) + list(old.links):
        links.setdefault(link.key, link)
    keys = tuple(links)
    m = len(keys)
    src = np.empty(2 * m, dtype=np.int64)
    dst = np.empty(2 * m, dtype=np.int64)
    cap = np.empty(2 * m, dtype=np.float64)
    ports: list[dict[tuple[int, str], int]] = []
    for i, k in enumerate(keys):
        link = links[k]
        a, b = index[link.a], index[link.b]
        src[2 * i], dst[2 * i], src[2 * i + 1], dst[2 * i + 1] = a, b, b, a
        cap[2 * i] = cap[2 * i + 1] = link.capacity_gbps
    link_index = {k: i for i, k in enumerate(keys)}
    for it in (old, new):
        pe: dict[tuple[int, str], int] = {}
        for link in it.links:
            i = link_index[link.key]
            a_is_a = index[link.a] == src[2 * i]
            pe[(index[link.a], link.a_port)] = 2 * i if a_is_a else 2 * i + 1
            pe[(index[link.b], link.b_port)] = 2 * i + 1 if a_is_a else 2 * i
        ports.append(pe)
    ends = np.concatenate([src, dst])
    order = np.argsort(ends, kind="stable")
    indptr = np.zeros(len(names) + 1, dtype=np.int64)
    np.add.at(indptr, ends + 1, 1)
    edges = np.concatenate([np.arange(2 * m), np.arange(2 * m)])
    topo = Topology(names, index, keys, link_index, src, dst, cap, {}, np.cumsum(indptr), edges[order])
    return topo, index, ports


_Loops = list[tuple[int, tuple[int, ...]]]


class Transition:
    """Two plans of a change, compiled for evaluating every mixed state.

    Entries (class, device) are grouped by the pair (old group, new group) they use: a
    *pair group* holds the union of both groups' next hops with each side's weight, so a
    state costs what the devices' distinct groups cost, not classes times devices.
    ``devices`` are the devices whose side matters (they own a next hop, a weight or an
    origin that differs between the plans). :meth:`evaluate` judges one state exactly,
    :meth:`bound` a whole stage by the module's bound, :meth:`check` a stage either way.
    """

    def __init__(self, old_intent: Intent, old_plan: Plan, new_intent: Intent, new_plan: Plan,
                 *, options: TransitionOptions | None = None, resets: Iterable[tuple[str, str]] = ()):
        self.options = options or TransitionOptions()
        self.pushes = 0
        self.mode = ownership(new_intent)
        self.limit = limits(new_intent)["baseline"]
        self.topo, index, ports = _union_topology(old_intent, new_intent)
        n = self.n = self.topo.n
        prefixes = sorted({dm.to for it in (old_intent, new_intent) for dm in it.effective_demands if dm.gbps > 0})
        self.prefixes = prefixes
        cls = {p: c for c, p in enumerate(prefixes)}
        n_cls = len(prefixes)
        self.origin = np.zeros((2, n_cls, n), dtype=bool)
        for side, it in enumerate((old_intent, new_intent)):
            for p in it.prefixes:
                c = cls.get(p.prefix)
                if c is not None:
                    self.origin[side, c, [index[o] for o in p.origins]] = True
        self.demands: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for it in (new_intent, old_intent):
            total: dict[tuple[int, int], float] = defaultdict(float)
            for dm in it.effective_demands:
                if dm.gbps > 0:
                    total[(cls[dm.to], index[dm.from_])] += dm.gbps
            ks = sorted(total)
            dem = (np.array([k[0] for k in ks], dtype=np.int64), np.array([k[1] for k in ks], dtype=np.int64),
                   np.array([total[k] for k in ks], dtype=np.float64))
            if not self.demands or not all(np.array_equal(a, b) for a, b in zip(self.demands[0], dem, strict=True)):
                self.demands.append(dem)
        sides = [_side_groups(plan, index, ports[s], cls, n_cls, n) for s, plan in enumerate((old_plan, new_plan))]
        self._pair_groups(sides)
        changed_links = self._changed_links(old_intent, new_intent)
        if self.mode == "advertised":
            self.own_w = self.h_next.copy()
            link_changed = np.array([self.topo.link_keys[e // 2] in changed_links for e in self.h_edge.tolist()],
                                    dtype=bool)
            self.own_b = np.where(link_changed, self.h_dev, self.h_next)
        else:
            self.own_w = self.h_dev.copy()
            self.own_b = self.h_dev.copy()
            for arr in (self.w_old, self.w_new):  # a device's own group: only its split ratios matter
                sums = np.bincount(self.h_pg, weights=arr, minlength=self.n_pg)
                arr /= np.where(sums[self.h_pg] > 0, sums[self.h_pg], 1.0)
        self.own_a = self.own_w
        # BGP sessions the change resets (device, port on the old side): only where BGP carries the hops
        links = {ports[0][(index[d], port)] // 2 for d, port in resets
                 if d in index and (index[d], port) in ports[0]} if self.mode == "advertised" else set()
        self.reset_links = np.array(sorted(links), dtype=np.int64)
        self.reset_hop = np.isin(self.h_edge // 2, self.reset_links)
        differs = ~np.isclose(self.w_old, self.w_new, rtol=1e-12, atol=0.0)
        owners = set(self.own_w[differs].tolist()) | set(self.own_b[differs].tolist())
        owners |= set(np.flatnonzero((self.origin[0] != self.origin[1]).any(axis=0)).tolist())
        owners |= set(self.topo.edge_src[2 * self.reset_links].tolist()) | set(
            self.topo.edge_dst[2 * self.reset_links].tolist())
        self.devices = tuple(self.topo.names[v] for v in sorted(owners))
        # a fabric already over the limit (a forced change) is held to what its ends reach:
        # the transition must make nothing worse, not fix what the review of the plans judges
        ends = [self.evaluate(()), self.evaluate(self.devices)]
        self.limit = max(self.limit, *(e.worst_utilization for e in ends))

    def _pair_groups(self, sides: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Entries -> pair groups (``route_pg``), and the pair groups' union hops."""
        (r0, ip0, e0, w0), (r1, ip1, e1, w1) = sides
        g1 = len(ip1) - 1
        pair = (r0.astype(np.int64) + 1) * (g1 + 1) + (r1.astype(np.int64) + 1)
        routed = (r0 >= 0) | (r1 >= 0)
        uniq, inv = np.unique(pair[routed], return_inverse=True)
        self.route_pg = np.full(pair.shape, -1, dtype=np.int64)
        self.route_pg[routed] = inv
        self.n_pg = len(uniq)
        og, ng = uniq // (g1 + 1) - 1, uniq % (g1 + 1) - 1
        parts = []
        for g, ip, e, w, is_new in ((og, ip0, e0, w0, False), (ng, ip1, e1, w1, True)):
            pgs = np.flatnonzero(g >= 0)
            hop, lens = ranges(ip, g[pgs])
            parts.append((np.repeat(pgs, lens), e[hop], w[hop], is_new))
        keys = np.concatenate([p[0] * self.topo.n_edges + p[1] for p in parts])
        hk, hinv = np.unique(keys, return_inverse=True)
        self.h_pg = hk // self.topo.n_edges
        self.h_edge = hk % self.topo.n_edges
        self.w_old = np.zeros(len(hk))
        self.w_new = np.zeros(len(hk))
        self.w_old[hinv[:len(parts[0][0])]] = parts[0][2]
        self.w_new[hinv[len(parts[0][0]):]] = parts[1][2]
        self.h_dev = self.topo.edge_src[self.h_edge]
        self.h_next = self.topo.edge_dst[self.h_edge]

    @staticmethod
    def _changed_links(old: Intent, new: Intent) -> set[str]:
        o, w = {x.key for x in old.links}, {x.key for x in new.links}
        return (o ^ w) | (old.drained_links ^ new.drained_links)

    def _mask(self, devices: Iterable[str]) -> np.ndarray:
        on = np.zeros(self.n, dtype=bool)
        on[[self.topo.index[d] for d in devices]] = True
        return on

    def _pointed(self, bad: np.ndarray, hops: np.ndarray) -> np.ndarray:
        """Of the entries ``bad`` ([class, device] mask), those that some entry of the same class
        reaches over one of ``hops`` (pair-group hops): where a withdrawal would matter."""
        out = np.zeros_like(bad)
        cs, vs = np.nonzero(bad)
        for v in np.unique(vs).tolist():
            pgs = np.unique(self.h_pg[hops[self.h_next[hops] == v]])
            if not len(pgs):
                continue
            rows = cs[vs == v]
            hit = np.isin(self.route_pg[rows], pgs).any(axis=1)
            out[rows[hit], v] = True
        return out

    # -- one state, exactly ---------------------------------------------------------
    def evaluate(self, state: Iterable[str], down: Iterable[int] = ()) -> StateResult:
        """Judge the state where exactly ``state`` runs the new config. A session the change resets is
        down while its two ends run different sides, and so are the reset links ``down`` (indices into
        the topology's links: sessions re-establishing after both ends moved)."""
        on = self._mask(state)
        wo, wn = self.w_old, self.w_new
        side_w = np.where(on[self.own_w], wn, wo)
        pres = (np.where(on[self.own_a], wn > 0, wo > 0) & np.where(on[self.own_b], wn > 0, wo > 0)
                & (side_w > 0))
        if len(self.reset_links):
            gone = self.reset_hop & (on[self.h_dev] != on[self.h_next])
            down = list(down)
            if down:
                gone |= np.isin(self.h_edge // 2, down)
            pres &= ~gone
        origin = np.where(on[None, :], self.origin[1], self.origin[0])
        nonempty = np.bincount(self.h_pg[pres], minlength=self.n_pg) > 0
        rpg = self.route_pg
        usable = (rpg >= 0) & nonempty[np.maximum(rpg, 0)] & ~origin
        extra: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        if self.mode == "advertised":
            unrouted = ~usable & ~origin
            if unrouted.any():
                hit = self._pointed(unrouted, np.flatnonzero(pres))
                for c in np.unique(np.nonzero(hit)[0]).tolist():
                    extra.append(self._withdrawn_class(c, pres, side_w, origin[c]))
        route = np.where(usable, rpg, -1)
        return self._judge(*self._push(route, pres, side_w, origin, extra))

    def _withdrawn_class(self, c: int, pres: np.ndarray, weight: np.ndarray,
                         origin: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """BGP's withdrawals for class ``c``: its entries' hops, expanded, to the fixpoint where
        no device keeps a next hop that has no route. Returns (class, device, edge, weight) rows."""
        devs = np.flatnonzero((self.route_pg[c] >= 0) & ~origin)
        order = np.argsort(self.h_pg, kind="stable")
        starts = np.searchsorted(self.h_pg[order], np.arange(self.n_pg + 1))
        hop, lens = ranges(starts, self.route_pg[c, devs])
        hop = order[hop]
        dev = np.repeat(devs, lens)
        keep = pres[hop]
        while True:
            routed = origin.copy()
            routed[dev[keep]] = True
            nk = keep & routed[self.h_next[hop]]
            if np.array_equal(nk, keep):
                break
            keep = nk
        hop = hop[keep]
        return (np.full(len(hop), c, dtype=np.int64), self.h_dev[hop], self.h_edge[hop], weight[hop])

    def _push(self, route: np.ndarray, pres: np.ndarray, weight: np.ndarray, origin: np.ndarray,
              extra: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], frac: np.ndarray | None = None,
              sure_routed: np.ndarray | None = None) -> tuple[list[np.ndarray], list[tuple[int, int]], _Loops]:
        """Propagate every demand matrix: entries use their pair group's present hops (``route``),
        the classes in ``extra`` their own expanded groups."""
        n = self.n
        self.pushes += 1
        idx = np.flatnonzero(pres)
        pg = self.h_pg[idx]
        w = weight[idx]
        f = frac[idx] if frac is not None else w / np.bincount(pg, weights=w, minlength=self.n_pg)[pg]
        counts = np.bincount(pg, minlength=self.n_pg)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        edges = [self.h_edge[idx]]
        fracs = [f]
        weights = [w]
        route = route.astype(np.int32)
        next_group = self.n_pg
        for cc, dd, ee, ww in extra:
            c = int(cc[0]) if len(cc) else -1
            if c < 0:
                continue
            route[c] = -1
            uniq, start, cnt = np.unique(dd, return_index=True, return_counts=True)
            route[c, uniq] = next_group + np.arange(len(uniq))
            next_group += len(uniq)
            sums = np.add.reduceat(ww, start)
            edges.append(ee)
            weights.append(ww)
            fracs.append(ww / np.repeat(sums, cnt))
            indptr = np.concatenate([indptr, indptr[-1] + np.cumsum(cnt)])
        origin_flat = origin.reshape(-1)
        loads: list[np.ndarray] = []
        drops: list[tuple[int, int]] = []
        loops: _Loops = []
        tab_edge, tab_frac = np.concatenate(edges), np.concatenate(fracs)
        flat_route = route.reshape(-1)
        for dc, dv, dg in self.demands:
            load, reached, lost, moving = _flow(flat_route, indptr, tab_edge, tab_frac, self.topo, n,
                                                dc * n + dv, dg, origin_flat)
            loads.append(load)
            drops += [(int(k // n), int(k % n)) for k in lost.tolist()]
            by: dict[int, set[int]] = {}
            for k in moving.tolist():
                by.setdefault(k // n, set()).add(k % n)
            loops += [(c, tuple(sorted(v))) for c, v in sorted(by.items())]
            if sure_routed is not None:  # the bound also needs every reached device to be surely routed
                flat = sure_routed.reshape(-1)
                drops += [(int(k // n), int(k % n)) for k in reached[~flat[reached]].tolist()]
        return loads, drops, loops

    def _judge(self, loads: list[np.ndarray], drops: list[tuple[int, int]], loops: _Loops) -> StateResult:
        topo, names = self.topo, self.topo.names
        util = np.max(np.stack(loads), axis=0) / topo.edge_cap if loads and len(topo.edge_cap) else np.zeros(0)
        worst = float(util.max()) if len(util) else 0.0
        e = int(np.argmax(util)) if len(util) else -1
        over = [f"{names[topo.edge_src[i]]}->{names[topo.edge_dst[i]]} at {util[i]:.6f}"
                for i in np.flatnonzero(util > self.limit + self.options.tol)[:10].tolist()]
        dropped = sorted({f"{self.prefixes[c]} at {names[v]}" for c, v in drops})
        loop_s = sorted({f"{self.prefixes[c]} via {', '.join(names[v] for v in devs[:6])}" for c, devs in loops})
        link = None if e < 0 else f"{names[topo.edge_src[e]]}->{names[topo.edge_dst[e]]}"
        return StateResult(not over and not dropped and not loop_s, worst, link, tuple(over), tuple(dropped[:10]),
                           tuple(loop_s[:10]))

    # -- a whole stage, by the bound --------------------------------------------------
    def bound(self, base: Iterable[str], stage: Iterable[str]) -> StateResult:
        """An upper bound over every state ``base + U``, ``U`` a subset of ``stage`` (module docstring)."""
        fixed, free = self._mask(base), self._mask(stage)
        wo, wn = self.w_old, self.w_new

        def side(v: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.where(fixed[v], b, a)

        def may(v: np.ndarray) -> np.ndarray:
            return np.where(free[v], (wo > 0) | (wn > 0), side(v, wo > 0, wn > 0))

        def sure(v: np.ndarray) -> np.ndarray:
            return np.where(free[v], (wo > 0) & (wn > 0), side(v, wo > 0, wn > 0))

        fw = free[self.own_w]
        wmax = np.where(fw, np.maximum(wo, wn), side(self.own_w, wo, wn))
        wmin = np.where(fw, np.minimum(wo, wn), side(self.own_w, wo, wn))
        o_fixed = np.where(fixed[None, :], self.origin[1], self.origin[0])
        may_origin = np.where(free[None, :], self.origin[0] | self.origin[1], o_fixed)
        sure_origin = np.where(free[None, :], self.origin[0] & self.origin[1], o_fixed)
        possible = may(self.own_a) & may(self.own_b) & (wmax > 0)
        certain = sure(self.own_a) & sure(self.own_b) & (wmin > 0)
        if len(self.reset_links):  # a reset session: down where its fixed ends differ, never sure near the stage
            touched = free[self.h_dev] | free[self.h_next]
            split = ~touched & (fixed[self.h_dev] != fixed[self.h_next])
            possible &= ~(self.reset_hop & split)
            certain &= ~(self.reset_hop & (touched | split))
        rpg = self.route_pg
        has_certain = np.bincount(self.h_pg[certain], minlength=self.n_pg) > 0
        has_possible = np.bincount(self.h_pg[possible], minlength=self.n_pg) > 0
        # surely routed: an origin on every side, or a pair group with a hop present in every state
        sure_routed = sure_origin | ((rpg >= 0) & has_certain[np.maximum(rpg, 0)] & ~may_origin)
        if self.mode == "advertised":
            # no withdrawal can start if every entry another one may point at is surely routed
            # (then every certain hop is present in every state); else the bound declines
            maybe_unrouted = ~sure_routed
            if maybe_unrouted.any() and self._pointed(maybe_unrouted, np.flatnonzero(possible)).any():
                return StateResult(False, float("inf"), None, ("a withdrawal may start inside the stage",))
        smin = np.bincount(self.h_pg[certain], weights=wmin[certain], minlength=self.n_pg)
        others = smin[self.h_pg] - np.where(certain, wmin, 0.0)
        if self.mode == "installed":  # one owner per entry: its split is one side's, whole
            frac = np.where(possible, wmax, 0.0)
        else:
            frac = np.where(possible, wmax / np.maximum(wmax + others, 1e-300), 0.0)
        route = np.where((rpg >= 0) & has_possible[np.maximum(rpg, 0)] & ~sure_origin, rpg, -1)
        loads, drops, loops = self._push(route, possible, wmax, sure_origin, [], frac, sure_routed)
        drops = [(c, v) for c, v in drops if not sure_origin[c, v]]
        return self._judge(loads, drops, loops)

    def _rejoining(self, moved: frozenset[str], stage: Sequence[str]) -> list[int]:
        """The reset links both of whose ends are in ``moved``, one of them in ``stage``: sessions that may
        still be re-establishing in a state of the stage (those of earlier stages were read back up)."""
        if not len(self.reset_links):
            return []
        names, src, dst = self.topo.names, self.topo.edge_src, self.topo.edge_dst
        inside = set(stage)
        return [int(i) for i in self.reset_links.tolist()
                if names[src[2 * i]] in moved and names[dst[2 * i]] in moved
                and (names[src[2 * i]] in inside or names[dst[2 * i]] in inside)]

    def states(self, base: Iterable[str], stage: Sequence[str]) -> list[tuple[frozenset[str], StateResult]]:
        """Every state of the stage (``base`` itself included), judged exactly; where the change resets
        sessions, each with every subset of the sessions still re-establishing."""
        b = frozenset(base)
        out = []
        for k in range(len(stage) + 1):
            for sub in itertools.combinations(stage, k):
                s = b | frozenset(sub)
                rejoin = self._rejoining(s, stage)
                for j in range(len(rejoin) + 1):
                    for down in itertools.combinations(rejoin, j):
                        out.append((s, self.evaluate(s, down)))
        return out

    def check(self, base: Iterable[str], stage: Sequence[str]) -> tuple[StateResult, str, int]:
        """Judge a stage: by the bound first (a single device whose move resets no session: its two
        states exactly); when the bound declines a stage small enough, state by state (the sessions
        it may leave re-establishing count towards ``exact_limit``). Returns the result (worst over
        the states), the method (``exact`` or ``bound``) and the states covered."""
        base = frozenset(base)
        size = len(stage) + len(self._rejoining(base | frozenset(stage), stage))
        if size > 1:  # the bound costs one propagation: when it accepts, that is enough
            b = self.bound(base, stage)
            if b.ok or size > self.options.exact_limit:
                return b, "bound", 2 ** size
        if size <= self.options.exact_limit or size <= 1:
            results = self.states(base, stage)
            bad = [r for _, r in results if not r.ok]
            worst = max(results, key=lambda sr: sr[1].worst_utilization)[1]
            pick = bad[0] if bad else worst
            return (StateResult(not bad, worst.worst_utilization, worst.worst_link, pick.over, pick.dropped,
                                pick.loops), "exact", len(results))
        return self.bound(base, stage), "bound", 2 ** len(stage)


def _flow(route: np.ndarray, indptr: np.ndarray, edge: np.ndarray, frac: np.ndarray, topo: Topology, n: int,
          keys: np.ndarray, amounts: np.ndarray, origin: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Push demand (state keys ``class * n + device``) hop by hop as :func:`safety.forwarding.propagate`
    does, keeping only what a transition needs: the load per edge, the states reached, those
    that black-hole (no route, not an origin, more than 1e-6 gbps) and those still carrying
    traffic after as many hops as devices (a loop). Memory is one hop's frontier, not the flow."""
    load = np.zeros(topo.n_edges)
    sunk = np.zeros(len(route))
    seen = np.zeros(len(route), dtype=bool)
    uniq, inv = np.unique(keys, return_inverse=True)
    fk, fa = uniq, np.bincount(inv, weights=amounts)
    for _level in range(n + 1):
        keep = fa > 0
        fk, fa = fk[keep], fa[keep]
        if not len(fk):
            break
        seen[fk] = True
        g = route[fk]
        stop = g < 0
        np.add.at(sunk, fk[stop & ~origin[fk]], fa[stop & ~origin[fk]])
        fk, fa, g = fk[~stop], fa[~stop], g[~stop]
        hop, lens = ranges(indptr, g.astype(np.int64))
        amt = np.repeat(fa, lens) * frac[hop]
        e = edge[hop]
        load += np.bincount(e, weights=amt, minlength=topo.n_edges)
        nk = np.repeat(fk // n, lens) * n + topo.edge_dst[e]
        uniq, inv = np.unique(nk, return_inverse=True)
        fk, fa = uniq, np.bincount(inv, weights=amt)
    else:
        fk = fk[fa > 0]
    moving = fk if _level == n else np.empty(0, dtype=np.int64)
    return load, np.flatnonzero(seen), np.flatnonzero(sunk > 1e-6), moving


def _side_groups(plan: Plan, index: dict[str, int], ports: dict[tuple[int, str], int], cls: dict[str, int],
                 n_cls: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One plan's entries: route[class, device] -> group, and the groups' (indptr, edge, weight)."""
    route = np.full((n_cls, n), -1, dtype=np.int64)
    edges: list[int] = []
    weights: list[float] = []
    indptr = [0]
    for name, dp in plan.devices.items():
        u = index[name]
        gmap: dict[str, int] = {}
        for gid, hops in dp.groups.items():
            for h in hops:
                edges.append(ports[(u, h.port)])
                weights.append(float(max(h.weight, 0)))
            gmap[gid] = len(indptr) - 1
            indptr.append(len(edges))
        col = route[:, u]
        for prefix, gid in dp.routes.items():
            c = cls.get(prefix)
            if c is not None:
                col[c] = gmap[gid]
    return route, np.asarray(indptr, dtype=np.int64), np.asarray(edges, dtype=np.int64), np.asarray(weights)


@dataclass(slots=True)
class Schedule:
    """Stages of devices in commit order, each with the worst utilization its states reach
    (exactly, or the bound's), the method, the number of states covered and the plan it moves
    to (0: the proposed plan, k: intermediate plan k); ``safe`` is False when some remaining
    devices could not move safely (``failing`` names the states that fail)."""

    stages: list[tuple[tuple[str, ...], float, str, int]] = field(default_factory=list)
    intermediate_plans: int = 0
    safe: bool = True
    failing: list[dict[str, Any]] = field(default_factory=list)
    limit: float = 1.0
    mode: str = "advertised"
    targets: list[int] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    plans_intent: str = "proposed"  # which revision's intent the intermediate plans run under
    note: str | None = None
    reset_sessions: int = 0  # BGP sessions (links) the change resets, down in the states that model them

    def to_document(self) -> dict[str, Any]:
        targets = self.targets or [0] * len(self.stages)
        return {"stages": [{"devices": list(d), "worst_utilization": round(u, 6) if np.isfinite(u) else None}
                           for d, u, _, _ in self.stages],
                "intermediate_plans": self.intermediate_plans,
                "safe": self.safe, "limit": self.limit, "ownership": self.mode,
                "checks": [{"method": m, "states": k, "plan": t}
                           for (_, _, m, k), t in zip(self.stages, targets, strict=True)],
                "failing": self.failing,
                "intermediate": [p.to_document() for p in self.plans], "intermediate_intent": self.plans_intent,
                "reset_sessions": self.reset_sessions, "note": self.note}


def _largest_prefix(tr: Transition, base: frozenset[str], order: list[str]) -> tuple[int, StateResult | None, str, int]:
    """The longest prefix of ``order`` that passes as one stage (bisection: checks are monotone)."""
    lo, hi = 0, len(order)
    best: tuple[StateResult | None, str, int] = (None, "", 0)
    res, method, k = tr.check(base, order)
    if res.ok:
        return len(order), res, method, k
    hi = len(order) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        res, method, k = tr.check(base, order[:mid])
        if res.ok:
            lo, best = mid, (res, method, k)
        else:
            hi = mid - 1
    return lo, *best


def schedule(old_intent: Intent, old_plan: Plan, new_intent: Intent, new_plan: Plan, *,
             also: Iterable[str] = (), options: TransitionOptions | None = None,
             resets: Iterable[tuple[str, str]] = ()) -> Schedule:
    """Stages that take the fabric from ``old_plan`` to ``new_plan`` with every state safe.

    ``also``: further devices whose config changes without changing forwarding (they join
    the first stage, which adds no forwarding state). Greedy: each stage is the longest
    acceptable prefix of the remaining devices (ordered by how their single move loads the
    fabric), extended by trying each other remaining device. When no device can move alone
    (or the search spends ``quick_pushes``), intermediate plans are tried
    (:func:`intermediate_plans`: 1 to ``max_intermediate`` plans whose split ratios step from
    the old plan's to the new one's, as a drain shifts load off before it removes a path),
    every leg scheduled alike; when none works the direct search goes on to ``max_pushes``,
    and if it too fails the rest form one last stage, the schedule is unsafe and ``failing``
    says why.

    >>> # doctest: +SKIP
    >>> schedule(old_intent, old_plan, new_intent, new_plan).to_document()["stages"][0]["devices"]
    """
    opts = options or TransitionOptions()
    resets = tuple(resets)
    quick = replace(opts, max_pushes=min(opts.max_pushes, opts.quick_pushes))
    direct = _direct(old_intent, old_plan, new_intent, new_plan, also, quick, resets)
    if direct.safe:
        return direct
    for k in range(1, opts.max_intermediate + 1):
        staged = intermediate_plans(old_intent, old_plan, new_intent, new_plan, k)
        if staged is None:
            break
        mid_intent, plans = staged
        legs = [(old_intent, old_plan), *((mid_intent, p) for p in plans), (new_intent, new_plan)]
        out = Schedule(limit=direct.limit, mode=direct.mode, intermediate_plans=k, plans=plans,
                       plans_intent="proposed" if mid_intent is new_intent else "active",
                       reset_sessions=direct.reset_sessions)
        for i in range(len(legs) - 1):
            # the sessions reset where the configs go from the active intent to the proposed one
            leg = _direct(*legs[i], *legs[i + 1], also if i == 0 else (), opts,
                          resets if legs[i][0] is old_intent and legs[i + 1][0] is new_intent else ())
            if not leg.safe:
                break
            out.stages += leg.stages
            out.targets += [i + 1 if i + 1 <= k else 0] * len(leg.stages)
        else:
            return out
    if quick.max_pushes < opts.max_pushes:  # no plan between helped: the direct search gets its whole budget
        direct = _direct(old_intent, old_plan, new_intent, new_plan, also, opts, resets)
    return direct


def intermediate_plans(old_intent: Intent, old_plan: Plan, new_intent: Intent, new_plan: Plan,
                       k: int) -> tuple[Intent, list[Plan]] | None:
    """``k`` plans between two, and the intent they run under; ``None`` when the change has none.

    Plan ``j`` splits each route over the old plan's next hops by ``(1 - a) f_old + a f_new``
    with ``a = j / (k + 1)`` (a next hop the new plan drops keeps a shrinking share), in
    integer weights within the device's budget. They need next hops both intents can carry:
    with the same links and drains any hop of either plan (they run under the new intent);
    otherwise every route's new next hops must be among its old ones (they run under the old
    intent, whose drains are not yet applied: load leaves a path before the path goes).
    Routes only one plan has keep the old plan's state until the last leg.
    """
    same = ({x.key for x in old_intent.links} == {x.key for x in new_intent.links}
            and old_intent.drained_links == new_intent.drained_links
            and old_intent.drained_devices == new_intent.drained_devices)
    for name, dn in new_plan.devices.items():
        was = old_plan.devices.get(name)
        for prefix in dn.routes:
            old_hops = {(h.port, h.neighbor) for h in was.nexthops(prefix)} if was is not None else set()
            if not same and not {(h.port, h.neighbor) for h in dn.nexthops(prefix)} <= old_hops:
                return None
    intent = new_intent if same else old_intent
    lb = intent.wcmp_enabled and intent.wcmp_realization == WcmpRealization.LINK_BANDWIDTH
    plans = []
    for j in range(1, k + 1):
        a = j / (k + 1)
        devices = {}
        for name, do in old_plan.devices.items():
            now = new_plan.devices.get(name)
            budget = intent.max_ecmp_entries(name) if name in intent.device_map else 64
            budget = min(budget, 100) if lb else budget
            groups: dict[tuple[NextHop, ...], str] = {}
            routes: dict[str, str] = {}
            for prefix in do.routes:
                fo = _fractions(do.nexthops(prefix))
                fn = _fractions(now.nexthops(prefix)) if now is not None else {}
                if not fn:
                    mix = fo
                else:
                    mix = {h: (1 - a) * fo.get(h, 0.0) + a * fn.get(h, 0.0) for h in {*fo, *fn}}
                room = max(1, budget - len(mix))
                hops = tuple(NextHop(p, nb, max(1, int(f * room))) for (p, nb), f in sorted(mix.items()) if f > 0)
                routes[prefix] = groups.setdefault(hops, f"g{len(groups) + 1}")
            devices[name] = DevicePlan({g: h for h, g in groups.items()}, routes)
        plans.append(Plan(new_plan.fabric, replace(new_plan.summary, extra={"intermediate": j}), devices, ()))
    return intent, plans


def _fractions(hops: Sequence[NextHop]) -> dict[tuple[str, str], float]:
    total = sum(h.weight for h in hops)
    return {(h.port, h.neighbor): h.weight / total for h in hops} if total > 0 else {}


def _direct(old_intent: Intent, old_plan: Plan, new_intent: Intent, new_plan: Plan, also: Iterable[str],
            options: TransitionOptions, resets: Iterable[tuple[str, str]] = ()) -> Schedule:
    """The schedule straight from one plan to the other (no intermediate plans)."""
    tr = Transition(old_intent, old_plan, new_intent, new_plan, options=options, resets=resets)
    opts = tr.options
    out = Schedule(limit=tr.limit, mode=tr.mode, reset_sessions=len(tr.reset_links))
    remaining = list(tr.devices)
    extra = sorted(set(also) - set(remaining))
    base: frozenset[str] = frozenset()
    if len(remaining) <= 8 * opts.scan_limit:  # lighter single moves first
        single = {d: tr.evaluate([d]) for d in remaining}
        remaining.sort(key=lambda d: (not single[d].ok, single[d].worst_utilization, d))
    while remaining:
        if tr.pushes > opts.max_pushes:
            last, how, states = tr.check(base, remaining)
            out.stages.append((tuple(sorted(remaining)), last.worst_utilization, how, states))
            if not last.ok:
                out.safe = False
                out.note = f"search budget of {opts.max_pushes} pushes spent; the last stage fails its check"
                out.failing.append({"state": sorted(base | set(remaining)), "moving": "+".join(sorted(remaining)),
                                    **last.to_document()})
            break
        k, res, method, count = _largest_prefix(tr, base, remaining)
        if k == 0:
            for i, d in enumerate(remaining):
                if tr.evaluate(base | {d}).ok:
                    one = tr.check(base, [d])  # with the sessions its move resets, if any
                    if one[0].ok:
                        remaining.insert(0, remaining.pop(i))
                        k, (res, method, count) = 1, one
                        break
        if k == 0 or res is None:
            _stuck(tr, out, base, remaining)
            break
        stage = remaining[:k]
        rest = remaining[k:]
        if rest:
            for d in list(rest[:opts.scan_limit]):
                r2, m2, c2 = tr.check(base, stage + [d])
                if r2.ok:
                    stage.append(d)
                    rest.remove(d)
                    res, method, count = r2, m2, c2
        out.stages.append((tuple(sorted(stage)), res.worst_utilization, method, count))
        base = base | frozenset(stage)
        remaining = rest
    if extra:
        if out.stages:
            d, u, m, c = out.stages[0]
            out.stages[0] = (tuple(sorted(d + tuple(extra))), u, m, c)
        else:
            out.stages.append((tuple(extra), 0.0, "exact", 0))
    return out


def _stuck(tr: Transition, out: Schedule, base: frozenset[str], remaining: list[str]) -> None:
    """No remaining device can move alone: record why, and put the rest in one last stage."""
    out.safe = False
    for d in remaining[:20]:
        r = tr.evaluate(base | {d})
        out.failing.append({"state": sorted(base | {d}), "moving": d, **r.to_document()})
    res, method, count = tr.check(base, remaining)
    out.stages.append((tuple(sorted(remaining)), res.worst_utilization, method, count))
