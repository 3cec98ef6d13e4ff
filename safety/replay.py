"""Replay a plan under failure scenarios, the way the fabric behaves, and judge it.

This module owns the safety replay (DESIGN.md, Semantics: Safety). Each
scenario is replayed in two stages, both reported:

* ``immediate`` -- the data plane's local repair, before any routing update:
  a device drops the next hops over failed links or toward failed devices and
  renormalizes the remaining weights of each group; a device left with no next
  hop black-holes that traffic.
* ``reconverged`` -- routes recomputed on the surviving topology. Model
  ``withdrawal`` (used for ``routing: bgp`` fabrics of at most three Clos
  tiers): a device whose every next hop for a prefix is gone withdraws the
  route, its upstream neighbors drop it as a next hop, and so on to a fixpoint;
  every surviving next hop keeps the plan's weight, renormalized. In an RFC 7938
  Clos with its ASN plan the valid AS paths are exactly the valley-free ones,
  so a failure can only remove equal-length paths, never make a longer one
  best: this is what BGP converges to (the tests hold it against
  ``solver.core.routing.next_hops`` on failed topologies). Model ``routing`` (every
  other fabric, e.g. ``routing: isis`` or ``ospf`` where a failure can create new shortest
  paths): the solver's ``routing.next_hops`` on the failed topology gives each
  device's next hops; those the plan has keep its weight, new ones get the
  mean weight of the group's survivors (1 if none), renormalized. Model
  ``static`` (the ``fib`` realization, e.g. ``paths: loop_free``): the agent's
  weighted routes are static, nothing withdraws them when a remote link dies;
  the kernel only drops next hops over dead links, so a device keeps its plan's
  surviving next hops, renormalized, and only one left with none falls back to
  the protocol's route (as ``routing``): traffic sent toward a dead end stays
  black-holed or loops, and the replay reports it.

Demands from a failed device, and to a prefix whose origins all failed, are not
counted (that rack is down, not misrouted). Invariants per stage: ``delivery``
(nothing black-holed), ``loop`` (no traffic still moving after as many hops as
devices), ``utilization`` (every link under ``utilization_limit`` in the
baseline and ``failure_tolerance.max_utilization`` under failure; 1.0 where no
policy says) and, in the baseline only since weights never change, the plan's
``group_budget``. Which failures gate the verdict: every one, in both stages,
except black holes of the immediate stage. Those are reported (gbps, prefix,
device) but do not fail the scenario, because no plan can avoid them: weights
are positive on every routed next hop, so a device whose only path down died
(a spine's one link into a pod) drops traffic until the withdrawal reaches its
upstream neighbors, whatever the weights; gating on them would mark every plan
of every Clos unsafe and the verdict could no longer tell a good change from a
bad one. Utilization and loops in the immediate stage do depend on the plan's
weights, and they gate.

Speed: the baseline is propagated once for all destination classes (see
:mod:`safety.forwarding`); a scenario then touches only the transitions over a
failed edge: the changed rows are renormalized in place and the *difference*
flow ``delta = (I - P'^T)^-1 b`` is pushed down from them alone, hop by hop,
over every affected class at once, so a scenario costs what its failure
moves, not what the fabric carries. Classes never mix, so the two stages share
the push of every class that withdrew nothing (only the classes that did are
pushed twice), and a single device or link failing exactly what a declared
domain fails (a spine and its own domain) reuses the domain's stage results.
The withdrawal, the pushes and both stages' sparse loads run as one compiled
call per scenario (:mod:`safety.kernels`) over states laid out device by device
within blocks of classes (``propagate(device_major=True)``), since on a large
fabric a scenario spends its time waiting for memory; Python builds the result.
A sweep of pairs asks a passing pair only for its :meth:`Replayer.verdict`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np

from controller.model import Intent, Role, Routing, WcmpRealization
from controller.model.plan import Plan
from safety import kernels
from safety.forwarding import (
    Flow,
    Table,
    Topology,
    build_topology,
    looped,
    plan_table,
    propagate,
    ranges,
    table_from_routes,
)
from safety.report import (
    DroppedDemand,
    Failure,
    InvariantResult,
    LinkUse,
    SafetyReport,
    ScenarioResult,
    StageResult,
)
from safety.scenarios import Scenario, scenario_scope, scenarios
from solver.core.routing import next_hops  # the routing semantics of the solver, by design

__all__ = ["Peaks", "Replayer", "assemble", "counted", "failures", "limits", "peaks", "replay", "reconverged_as",
           "reconvergence_model", "stage_result"]

EPS_GBPS = 1e-6
_REMEMBERED = ("domain", "domain_pair")  # kinds whose stage results run() keeps for reuse
HOTTEST = 3
Progress = Callable[[int, int], None]


def limits(intent: Intent) -> dict[str, float]:
    """Utilization limits: ``baseline`` and ``failure`` (1.0 where no policy sets one)."""
    ul = intent.policy("utilization_limit")
    ft = intent.policy("failure_tolerance")
    return {"baseline": float(ul.max) if ul is not None else 1.0,
            "failure": float(ft.max_utilization) if ft is not None else 1.0}


def reconvergence_model(intent: Intent) -> str:
    """``static`` under the ``fib`` realization, ``withdrawal`` for BGP Clos fabrics of up to
    three tiers, else ``routing``."""
    if intent.wcmp_enabled and intent.wcmp_realization == WcmpRealization.FIB:
        return "static"
    if intent.routing == Routing.BGP and not any(d.role == Role.SUPERSPINE for d in intent.devices):
        return "withdrawal"
    return "routing"


class _Outcome:
    """A stage's traffic: edge loads, black holes by (class, device), loops.

    The loads are either dense (``load``) or sparse: ``changed`` (distinct edges) at
    ``values`` over the baseline's ``base``, made dense only when asked for.
    """

    __slots__ = ("_load", "base", "changed", "values", "drops", "loops", "loop_gbps")

    def __init__(self, drops: dict[tuple[int, int], float], loops: list[tuple[int, tuple[int, ...]]], *,
                 load: np.ndarray | None = None, base: np.ndarray | None = None,
                 changed: np.ndarray | None = None, values: np.ndarray | None = None,
                 loop_gbps: dict[int, float] | None = None):
        self._load, self.base, self.changed, self.values = load, base, changed, values
        self.drops, self.loops = drops, loops
        # gbps of each looping class that enters its loop (:func:`safety.forwarding.looped`); None where the
        # loops were found by a difference push, which does not weigh them (only a plan whose baseline loops
        # gives those: a failure only takes transitions away), or the walk was too long
        self.loop_gbps = loop_gbps if loop_gbps is not None or not loops else None

    @property
    def looped_gbps(self) -> float | None:
        """The gbps the loops keep, in all (0.0 without a loop; None when not weighed)."""
        if not self.loops:
            return 0.0
        return None if self.loop_gbps is None else float(sum(self.loop_gbps.values()))

    @property
    def load(self) -> np.ndarray:
        if self._load is None:
            assert self.base is not None and self.changed is not None and self.values is not None
            load = self.base.copy()
            load[self.changed] = self.values
            self._load = load
        return self._load


class Replayer:
    """A plan compiled for replay; :meth:`run` replays one scenario.

    >>> # doctest: +SKIP
    >>> r = Replayer(intent, plan); r.run(Scenario("baseline", "baseline")).ok
    """

    def __init__(self, intent: Intent, plan: Plan, *, model: str | None = None, topo: Topology | None = None,
                 table: Table | None = None):
        """``topo``: the intent's topology when the caller has it (:func:`safety.forwarding.build_topology`,
        which drains do not change: a plan around an overlay shares its revision's); ``table``: the plan's
        :func:`~safety.forwarding.plan_table` on it, likewise."""
        self.intent = intent
        self.plan = plan
        self.topo: Topology = topo if topo is not None else build_topology(intent)
        self.table: Table = table if table is not None else plan_table(intent, plan, self.topo)
        self.flow: Flow = propagate(self.table, self.topo, device_major=True)
        self.model = model or reconvergence_model(intent)
        self.limits = limits(intent)
        f = self.flow
        self._scratch()
        self._cls = f.state_class
        self._tcls = self._cls[f.t_src]  # class of each transition
        self._sinks = np.flatnonzero(f.sink)
        self._no_states = np.empty(0, dtype=np.int64)
        self._shift = kernels.hop_shift(self.topo.n_edges)
        self._hop = (f.t_dst << self._shift) | f.t_edge  # a transition's next state and edge, in one read
        by_cls = np.argsort(self._cls, kind="stable")  # per class, its states (CSR)
        self._class_states = by_cls
        self._class_indptr = np.searchsorted(self._cls[by_cls], np.arange(len(self.table.prefixes) + 1))
        self._origin_classes: dict[int, list[int]] = {}
        for c, orig in enumerate(self.table.origins):
            for v in orig:
                self._origin_classes.setdefault(v, []).append(c)
        cap = self.topo.edge_cap
        self._base_util = f.load / cap
        self._base_order = np.argsort(-self._base_util, kind="stable")
        self._base = _Outcome(f.drops(), f.loops, load=f.load,
                              loop_gbps=looped(self.table, self.topo, {c for c, _ in f.loops}) if f.loops else None)
        self._fab = kernels.FlowArrays(
            x=f.x, frac=f.t_frac, hop=self._hop, t_indptr=f.t_indptr, t_src=f.t_src, class_indptr=self._class_indptr,
            class_states=self._class_states, t_class=self._tcls, state_class=self._cls, in_indptr=f.in_indptr,
            in_trans=f.in_trans, base=f.load, base_sinks=self._sinks, shift=self._shift, levels=f.n,
            one=self._one_way(f))
        # stage results of declared domains, by failed parts: a single device or link
        # that fails exactly what a domain does (a spine and its device domain) replays once
        self._known: dict[tuple[frozenset[str], frozenset[str]], tuple[StageResult, StageResult]] = {}

    def _one_way(self, f: Flow) -> np.ndarray:
        """Per state, the packed hop of its only transition where it has one (all of its
        traffic, fraction 1), else -1: a push steps through such a state instead of visiting
        it, unless the scenario changed its row. With no cycle among the transitions, which
        a failure cannot add (it only takes transitions away), no loop can pass through it
        either; a flow with a cycle steps through nothing."""
        first = f.t_indptr[:-1]
        single = np.flatnonzero(np.diff(f.t_indptr) == 1)
        single = single[f.t_frac[first[single]] == 1.0]
        one = np.full(len(f.keys), -1, dtype=np.int64)
        if kernels.acyclic(f.t_indptr, f.t_dst):
            one[single] = self._hop[first[single]]
        return one

    def _scratch(self) -> None:
        """The arrays a scenario writes into (and restores): private to this copy."""
        f = self.flow
        n_states, n_trans = len(f.keys), len(f.t_src)
        self._tflag = np.zeros(n_trans, dtype=bool)
        self._rem = np.ones(n_states)
        self._failed = np.zeros(n_states, dtype=bool)
        self._acc = np.zeros(n_states)
        self._mark = np.zeros(n_states, dtype=bool)
        self._flags = np.where(f.sink, kernels.SINK, 0).astype(np.uint8)
        self._scale = np.empty(n_states)
        self._cur = np.empty(n_states, dtype=np.int64)
        self._nxt = np.empty(n_states, dtype=np.int64)
        self._delta = np.zeros(self.topo.n_edges)
        self._view = f.load.copy()  # the baseline's loads, where kernels.merge sums a stage's (and restores)
        self._etouch = np.empty(self.topo.n_edges, dtype=np.int64)
        self._emark = np.zeros(self.topo.n_edges, dtype=bool)
        self._work = kernels.Scratch(
            acc=self._acc, flags=self._flags, scale=self._scale, tflag=self._tflag, cur=self._cur, nxt=self._nxt,
            delta=self._delta, etouch=self._etouch, rem=self._rem, mark=self._mark, failed=self._failed,
            loads=self._view, emark=self._emark, cmark=np.zeros(len(self.table.prefixes), dtype=bool))

    _SCRATCH = ("_tflag", "_rem", "_failed", "_acc", "_mark", "_flags", "_scale", "_cur", "_nxt", "_delta",
                "_etouch", "_emark", "_view", "_work")

    def __getstate__(self) -> dict[str, object]:
        """Shipped without its scratch arrays (a worker makes its own, writable even when
        the compiled arrays arrive read-only from a shared object store)."""
        return {k: v for k, v in self.__dict__.items() if k not in self._SCRATCH}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._scratch()

    def fork(self) -> Replayer:
        """A copy that shares the compiled fabric (and the remembered domain results) but has
        scratch arrays of its own: one per thread replaying at once."""
        twin = copy.copy(self)
        twin._scratch()
        return twin

    def _loops_of(self, states: np.ndarray) -> list[tuple[int, tuple[int, ...]]]:
        f = self.flow
        by: dict[int, set[int]] = {}
        for k in f.keys[states].tolist():
            by.setdefault(k // f.n, set()).add(k % f.n)
        return [(c, tuple(sorted(v))) for c, v in sorted(by.items())]

    # -- a whole scenario ---------------------------------------------------
    def outcomes(self, sc: Scenario) -> tuple[_Outcome, _Outcome]:
        """The raw (immediate, reconverged) outcomes of one scenario."""
        if sc.is_baseline:
            return self._base, self._base
        f, topo = self.flow, self.topo
        gone: list[int] = []
        if not sc.devices and len(sc.links) == 1:  # most scenarios: one link, its two edges' transitions side by side
            i = 2 * topo.link_index[next(iter(sc.links))]
            fedges = np.array([i, i + 1], dtype=np.int64)
            dead_t = f.e_trans[f.e_indptr[i]:f.e_indptr[i + 2]]
            fst = self._no_states
        else:
            fdev = np.array(sorted(topo.index[d] for d in sc.devices), dtype=np.int64)
            fedges = topo.failed_edges(sc.devices, sc.links)
            it, _ = ranges(f.e_indptr, fedges)
            dead_t = f.e_trans[it]
            fst = f.dev_states[ranges(f.dev_indptr, fdev)[0]] if len(fdev) else self._no_states
            failed_set = set(fdev.tolist())
            gone = sorted({c for v in failed_set for c in self._origin_classes.get(v, ())
                           if self.table.origins[c] <= failed_set})
            if gone:
                keep = ~np.isin(self._tcls[dead_t], gone)
                dead_t = dead_t[keep]
                fst = fst[~np.isin(self._cls[fst], gone)]
        withdrawal = self.model == "withdrawal"
        self._failed[fst] = True
        try:
            same, imm_raw, rec_raw = kernels.stages(
                tuple(self._fab), tuple(self._work), withdrawal, np.ascontiguousarray(dead_t, dtype=np.int64),
                np.asarray(gone, dtype=np.int64), np.ascontiguousarray(fedges, dtype=np.int64), EPS_GBPS)
        finally:
            self._failed[fst] = False
        kept = self._untouched_loops(dead_t, fst, gone)
        imm = self._outcome(*imm_raw, kept=kept)
        if withdrawal:
            return imm, imm if same else self._outcome(*rec_raw, kept=kept)
        rec = self._rerouted(sc, static=self.model == "static")
        rec.load[fedges] = 0.0
        return imm, rec

    def _untouched_loops(self, dead_t: np.ndarray, fst: np.ndarray, gone: list[int]
                         ) -> list[tuple[int, tuple[int, ...]]]:
        """The plan's own loops (its baseline's) in the classes a scenario does not touch (no transition of
        theirs dead, no state of theirs failed, their origins not all gone): they loop as before, and the
        difference push, which sees only the loops its own traffic passes through, would not find them."""
        if not self._base.loops:
            return []
        touched = set(self._tcls[dead_t].tolist()) | set(self._cls[fst].tolist()) | set(gone)
        return [(c, devs) for c, devs in self._base.loops if c not in touched]

    def _outcome(self, changed: np.ndarray, values: np.ndarray, drop_s: np.ndarray, drop_a: np.ndarray,
                 loop_s: np.ndarray, *, kept: list[tuple[int, tuple[int, ...]]] | None = None) -> _Outcome:
        """A pushed stage's outcome; ``kept``: the plan's own loops it leaves as they are (weighed as the
        baseline weighed them when the push found no loop of its own)."""
        f = self.flow
        drops = {(int(k) // f.n, int(k) % f.n): a for k, a in zip(f.keys[drop_s].tolist(), drop_a.tolist(),
                                                                   strict=True)}
        loops = self._loops_of(loop_s) if len(loop_s) else []
        weighed = None
        if kept:
            pushed = {c for c, _ in loops}
            loops = sorted([*loops, *(x for x in kept if x[0] not in pushed)])
            base = self._base.loop_gbps
            if not pushed and base is not None:
                weighed = {c: base[c] for c, _ in kept if c in base}
        return _Outcome(drops, loops, base=f.load, changed=changed, values=values, loop_gbps=weighed)

    def _rerouted(self, sc: Scenario, *, static: bool = False) -> _Outcome:
        routes = next_hops(self.intent, failed_devices=sc.devices, failed_links=sc.links)
        if static:
            routes = self._static_routes(sc, routes)
        tab = counted(table_from_routes(self.intent, self.topo, self.table, routes), self.topo, sc)
        failed = {self.topo.index[d] for d in sc.devices}
        fl = propagate(tab, self.topo)
        drops = {k: v for k, v in fl.drops().items() if k[1] not in failed and v > EPS_GBPS}
        weighed = looped(tab, self.topo, {c for c, _ in fl.loops}) if fl.loops else None
        return _Outcome(drops, fl.loops, load=fl.load, loop_gbps=weighed)

    def _static_routes(self, sc: Scenario, routes: dict[str, dict[str, tuple[tuple[str, str], ...]]]
                       ) -> dict[str, dict[str, tuple[tuple[str, str], ...]]]:
        """``fib``: the agent's static routes stay where a next hop survives (the kernel drops only
        the dead ones); only a device left with none falls back to the protocol's ``routes``."""
        topo, t = self.topo, self.table
        dead = np.zeros(topo.n_edges, dtype=bool)
        dead[topo.failed_edges(sc.devices, sc.links)] = True
        port_of = {e: port for (_u, port), e in topo.port_edge.items()}
        out = {p: dict(per) for p, per in routes.items()}
        for c, prefix in enumerate(t.prefixes):
            row = out.setdefault(prefix, {})
            for v in np.flatnonzero(t.route[c] >= 0).tolist():
                g = int(t.route[c, v])
                live = [e for e in t.g_edge[t.g_indptr[g]:t.g_indptr[g + 1]].tolist() if not dead[e]]
                if live and topo.names[v] not in sc.devices:
                    row[topo.names[v]] = tuple((port_of[e], topo.names[topo.edge_dst[e]]) for e in live)
        return out

    def _sparse(self, out: _Outcome) -> tuple[np.ndarray, np.ndarray]:
        """A stage's loads as (the edges whose load differs from the baseline's, their loads)."""
        if out.changed is not None and out.values is not None:
            return out.changed, out.values
        if out is self._base:
            return np.empty(0, dtype=np.int64), np.empty(0)
        changed = np.flatnonzero(out.load != self.flow.load)
        return changed, out.load[changed]

    def _stage_result(self, stage: str, out: _Outcome, limit: float, baseline: bool) -> StageResult:
        return stage_result(self.topo, self.table, self.flow.load, self._base_order, self._emark, stage, out, limit,
                            baseline, sparse=self._sparse(out))

    def verdict(self, sc: Scenario) -> tuple[bool, bool]:
        """``(ok, transient)``: whether :meth:`run`'s result would be ok, and whether its
        immediate stage black-holes anything, without building the result (what a sweep of
        pairs needs of the passing ones, nearly all of them)."""
        if sc.is_baseline or (sc.devices, sc.links) in self._known:
            res = self.run(sc)
            return res.ok, bool(res.immediate.dropped)
        imm, rec = self.outcomes(sc)
        transient = bool(imm.drops)
        if imm.loops or rec.loops or rec.drops:
            return False, transient
        cap = self.topo.edge_cap
        for out in {id(imm): imm, id(rec): rec}.values():
            top, top_load = kernels.hottest(self.flow.load, cap, *self._sparse(out), self._base_order, 1, self._emark)
            if len(top) and top_load[0] / cap[top[0]] > self.limits["failure"] + 1e-9:
                return False, transient
        return True, transient

    def run(self, sc: Scenario) -> ScenarioResult:
        """Replay one scenario: both stages, every invariant."""
        key = (sc.devices, sc.links)
        known = self._known.get(key)
        if known is None:
            imm, rec = self.outcomes(sc)
            limit = self.limits["baseline"] if sc.is_baseline else self.limits["failure"]
            stages: list[StageResult] = []
            for name, out in (("immediate", imm), ("reconverged", rec)):
                if out is imm and stages:  # nothing withdrew: the same traffic
                    stages.append(reconverged_as(stages[0]))
                    continue
                stages.append(self._stage_result(name, out, limit, sc.is_baseline))
            known = (stages[0], stages[1])
            if sc.kind in _REMEMBERED:
                self._known[key] = known
        return ScenarioResult(sc.name, sc.kind, tuple(sorted(sc.devices)), tuple(sorted(sc.links)), *known)


def counted(table: Table, topo: Topology, sc: Scenario) -> Table:
    """``table`` with only the demand scenario ``sc`` counts: none from a failed device, none to a prefix whose
    origins all failed (that rack is down, not misrouted)."""
    failed = {topo.index[d] for d in sc.devices}
    if not failed:
        return table
    gone = np.array([orig <= failed for orig in table.origins], dtype=bool)
    keep = ~np.isin(table.demand_device, list(failed)) & ~gone[table.demand_class]
    return replace(table, demand_class=table.demand_class[keep], demand_device=table.demand_device[keep],
                   demand_gbps=table.demand_gbps[keep])


def reconverged_as(immediate: StageResult) -> StageResult:
    """The reconverged stage of a scenario whose two stages carry the same traffic: the immediate stage's
    result, every invariant gating (its black holes too, which no routing update will end)."""
    return replace(immediate, stage="reconverged",
                   invariants=tuple(replace(inv, gating=True) for inv in immediate.invariants))


def stage_result(topo: Topology, table: Table, base_load: np.ndarray, base_order: np.ndarray, emark: np.ndarray,
                 stage: str, out: _Outcome, limit: float, baseline: bool, *,
                 sparse: tuple[np.ndarray, np.ndarray] | None = None) -> StageResult:
    """One stage's result: its hottest links, black holes, loops and every invariant. ``base_load`` is the
    baseline's loads and ``base_order`` its edges hottest first; ``sparse`` the edges whose load ``out``
    changes and their loads (none: ``out`` is the baseline's traffic); ``emark`` a scratch array of
    ``False`` per edge (left as it came)."""
    names = topo.names
    cap = topo.edge_cap
    changed = sparse if sparse is not None else (np.empty(0, dtype=np.int64), np.empty(0))
    top, top_load = kernels.hottest(base_load, cap, *changed, base_order, HOTTEST, emark)
    mlu = float(top_load[0] / cap[top[0]]) if len(top) else 0.0

    def use(e: int, load: float) -> LinkUse:
        return LinkUse(topo.link_keys[e // 2], names[topo.edge_src[e]], names[topo.edge_dst[e]],
                       load, float(cap[e]), load / float(cap[e]))

    hottest = tuple(use(e, x) for e, x in zip(top.tolist(), top_load.tolist(), strict=True) if x > 0)
    over_detail = ""
    if mlu > limit + 1e-9:  # only then are the loads made dense
        util = out.load / cap
        over = np.flatnonzero(util > limit + 1e-9)
        over = over[np.argsort(-util[over], kind="stable")]
        over_detail = "; ".join(
            f"{names[topo.edge_src[e]]}->{names[topo.edge_dst[e]]} at {util[e]:.6f} > {limit:g}"
            for e in over[:5]) + (f" and {len(over) - 5} more" if len(over) > 5 else "")
    inv: list[InvariantResult] = []
    prefixes = table.prefixes
    dropped = tuple(sorted((DroppedDemand(prefixes[c], names[v], g) for (c, v), g in out.drops.items()),
                           key=lambda d: (-d.gbps, d.prefix, d.device)))
    total = sum(d.gbps for d in dropped)
    detail = "" if not dropped else (
        f"{total:.6g} gbps black-holed: " + "; ".join(f"{d.prefix} at {d.device} ({d.gbps:.6g} gbps)"
                                                      for d in dropped[:5])
        + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""))
    inv.append(InvariantResult("delivery", not dropped, detail, gating=(stage != "immediate" or baseline)))
    loops = tuple(f"{prefixes[c]} via {', '.join(names[v] for v in devs[:6])}" for c, devs in out.loops)
    inv.append(InvariantResult("loop", not loops, "; ".join(loops[:5])))
    inv.append(InvariantResult("utilization", not over_detail, over_detail))
    if baseline:
        errs = table.budget_errors
        inv.append(InvariantResult("group_budget", not errs, "; ".join(errs[:5])))
    return StageResult(stage, tuple(inv), mlu, limit, hottest, dropped, loops, out.looped_gbps)


def replay(intent: Intent, plan: Plan, *, scope: str | None = None,
           only: Iterable[Scenario] | None = None, progress: Progress | None = None,
           model: str | None = None) -> SafetyReport:
    """Replay ``plan`` under every scenario of ``intent`` and build the report.

    Parameters
    ----------
    intent : the validated intent the plan was made for.
    plan : the forwarding plan to judge.
    scope : override the ``failure_tolerance`` scope (``domains``, ``all_single``, ``k2``).
    only : replay these scenarios instead of the intent's.
    progress : called with ``(done, total)`` now and then.
    model : force the reconvergence model (``withdrawal`` or ``routing``).

    Raises ``ValueError`` when the plan does not fit the intent's topology.
    """
    t0 = time.perf_counter()
    rp = Replayer(intent, plan, model=model)
    todo = list(only) if only is not None else list(scenarios(intent, scope))
    total = len(todo)
    results: list[ScenarioResult] = []
    step = max(1, total // 100)
    for i, sc in enumerate(todo):
        results.append(rp.run(sc))
        if progress is not None and (i % step == 0 or i == total - 1):
            progress(i + 1, total)
    return assemble(intent, rp, results, scope=scope, seconds=time.perf_counter() - t0)


def failures(res: ScenarioResult) -> list[Failure]:
    """The gating invariants ``res`` fails, in stage and invariant order."""
    return [Failure(res.name, st.stage, inv.name, inv.detail)
            for st in res.stages() for inv in st.invariants if inv.gating and not inv.ok]


def assemble(intent: Intent, rp: Replayer, results: list[ScenarioResult], *, scope: str | None,
             seconds: float, counts: dict[str, int] | None = None) -> SafetyReport:
    """The report of ``results`` (in scenario order). ``counts`` adds to or overrides
    the per-kind counts (a sweep that lists only some of its scenarios, see
    :mod:`safety.sweep`, passes every kind's total and ``scenarios``)."""
    failing = [f for res in results for f in failures(res)]
    kinds: dict[str, int] = {"scenarios": len(results), "failing_scenarios": len({f.scenario for f in failing})}
    for r in results:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    kinds["transient_black_holes"] = sum(1 for r in results if r.kind != "baseline" and r.immediate.dropped)
    kinds.update(counts or {})
    sc_scope = scope or (scenario_scope(intent) or "domains")
    return SafetyReport(intent.name, "unsafe" if failing else "safe", str(sc_scope), rp.limits, rp.model,
                        kinds, tuple(results), tuple(failing), seconds)


@dataclass(frozen=True, slots=True)
class Peaks:
    """Worst utilizations of a plan over scenarios (what robust WCMP steers by).

    ``link_peak``: per link key, the highest utilization (either direction, either
    stage) over every scenario; ``violating``: scenario name -> its worst
    utilization, for scenarios over their limit; ``failing``: scenarios failing any
    other invariant (black holes, loops), which weights cannot fix;
    ``baseline_mlu``: the plan's maximum utilization with nothing failed; ``failure_mlu``: the worst
    utilization of any failure scenario (either stage), what a review shows with and without robust WCMP.
    """

    link_peak: dict[str, float]
    violating: dict[str, float]
    failing: tuple[str, ...]
    baseline_mlu: float
    limits: dict[str, float]
    failure_mlu: float = 0.0


def peaks(intent: Intent, plan: Plan, *, scope: str | None = None,
          only: Iterable[Scenario] | None = None) -> Peaks:
    """Replay every scenario and collect the worst utilization per link (see :class:`Peaks`)."""
    rp = Replayer(intent, plan)
    cap = rp.topo.edge_cap
    worst = np.zeros(rp.topo.n_edges)
    violating: dict[str, float] = {}
    failing: list[str] = []
    baseline_mlu = failure_mlu = 0.0
    for sc in (list(only) if only is not None else scenarios(intent, scope)):
        limit = rp.limits["baseline"] if sc.is_baseline else rp.limits["failure"]
        imm, rec = rp.outcomes(sc)
        top = 0.0
        for out in (imm, rec):
            util = out.load / cap
            np.maximum(worst, util, out=worst)
            top = max(top, float(util.max()) if len(util) else 0.0)
            if out.loops or (out is rec and out.drops):
                failing.append(sc.name)
        if sc.is_baseline:
            baseline_mlu = top
        else:
            failure_mlu = max(failure_mlu, top)
        if top > limit + 1e-9:
            violating[sc.name] = top
    link_peak = {k: float(max(worst[2 * i], worst[2 * i + 1])) for i, k in enumerate(rp.topo.link_keys)}
    return Peaks(link_peak, violating, tuple(dict.fromkeys(failing)), baseline_mlu, rp.limits, failure_mlu)
