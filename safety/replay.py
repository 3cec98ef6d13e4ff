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
  other fabric, e.g. ``routing: isis`` where a failure can create new shortest
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
vectorized over every affected class, so a scenario costs what its failure
moves, not what the fabric carries. Classes never mix, so the two stages share
the push of every class that withdrew nothing (only the classes that did are
pushed twice), and a single device or link failing exactly what a declared
domain fails (a spine and its own domain) reuses the domain's stage results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np

from controller.model import Intent, Role, Routing, WcmpRealization
from controller.model.plan import Plan
from safety.forwarding import Flow, Table, Topology, build_topology, plan_table, propagate, ranges
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

__all__ = ["Peaks", "Replayer", "assemble", "failures", "limits", "peaks", "replay", "reconvergence_model"]

EPS_GBPS = 1e-6
_EMPTY = np.empty(0, dtype=np.int64)
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


@dataclass(slots=True)
class _Diff:
    """A push's difference flow: per-edge parts, new black holes, arrivals by state, loops."""

    edges: list[np.ndarray]
    amounts: list[np.ndarray]
    sinks: np.ndarray
    states: list[np.ndarray]
    arrivals: list[np.ndarray]
    loops: list[tuple[int, tuple[int, ...]]]


@dataclass(slots=True)
class _Outcome:
    load: np.ndarray
    drops: dict[tuple[int, int], float]
    loops: list[tuple[int, tuple[int, ...]]]


def _top(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest ``values``, largest first, ties by position (what
    a stable argsort of ``-values`` starts with), without sorting them all."""
    if len(values) > 4 * k:
        kth = np.partition(values, len(values) - k)[len(values) - k]
        idx = np.flatnonzero(values >= kth)
        return idx[np.argsort(-values[idx], kind="stable")[:k]]
    return np.argsort(-values, kind="stable")[:k]


class _Scratch:
    """Dense per-state scratch arrays: sum amounts by state without sorting."""

    def __init__(self, n_states: int):
        self.acc = np.zeros(n_states)
        self.pos = np.zeros(n_states, dtype=np.int64)

    def agg(self, keys: np.ndarray, amounts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct ``keys`` (in no particular order) and the amounts summed per key."""
        if len(keys) < 2:
            return keys, amounts
        np.add.at(self.acc, keys, amounts)
        ar = np.arange(len(keys))
        self.pos[keys] = ar
        uniq = keys[self.pos[keys] == ar]
        out = self.acc[uniq]
        self.acc[uniq] = 0.0
        return uniq, out

    def distinct(self, keys: np.ndarray) -> np.ndarray:
        ar = np.arange(len(keys))
        self.pos[keys] = ar
        return keys[self.pos[keys] == ar]


class Replayer:
    """A plan compiled for replay; :meth:`run` replays one scenario.

    >>> # doctest: +SKIP
    >>> r = Replayer(intent, plan); r.run(Scenario("baseline", "baseline")).ok
    """

    def __init__(self, intent: Intent, plan: Plan, *, model: str | None = None):
        self.intent = intent
        self.topo: Topology = build_topology(intent)
        self.table: Table = plan_table(intent, plan, self.topo)
        self.flow: Flow = propagate(self.table, self.topo)
        self.model = model or reconvergence_model(intent)
        self.limits = limits(intent)
        f = self.flow
        self._scratch()
        self._cls = f.state_class
        self._tcls = self._cls[f.t_src].astype(np.int32)  # class of each transition
        self._sinks = np.flatnonzero(f.sink)
        self._state_lo = np.searchsorted(f.keys, np.arange(len(self.table.prefixes) + 1) * f.n)
        self._origin_classes: dict[int, list[int]] = {}
        for c, orig in enumerate(self.table.origins):
            for v in orig:
                self._origin_classes.setdefault(v, []).append(c)
        cap = self.topo.edge_cap
        self._base_util = f.load / cap
        self._base_order = np.argsort(-self._base_util, kind="stable")
        self._base = _Outcome(f.load, f.drops(), f.loops)
        # stage results of declared domains, by failed parts: a single device or link
        # that fails exactly what a domain does (a spine and its device domain) replays once
        self._known: dict[tuple[frozenset[str], frozenset[str]], tuple[StageResult, StageResult]] = {}

    def _scratch(self) -> None:
        """The arrays a scenario writes into (and restores): private to this copy."""
        f = self.flow
        n_states, n_trans = len(f.keys), len(f.t_src)
        self._tdead = np.zeros(n_trans, dtype=bool)
        self._tflag = np.zeros(n_trans, dtype=bool)
        self._mfrac = f.t_frac.copy()  # the fractions of the scenario being replayed
        self._rem = np.ones(n_states)
        self._failed = np.zeros(n_states, dtype=bool)
        self._sc = _Scratch(n_states)
        self._edges = _Scratch(self.topo.n_edges)

    _SCRATCH = ("_tdead", "_tflag", "_mfrac", "_rem", "_failed", "_sc", "_edges")

    def __getstate__(self) -> dict[str, object]:
        """Shipped without its scratch arrays (a worker makes its own, writable even when
        the compiled arrays arrive read-only from a shared object store)."""
        return {k: v for k, v in self.__dict__.items() if k not in self._SCRATCH}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._scratch()

    # -- one stage ----------------------------------------------------------
    def _push(self, dead_t: np.ndarray, gone: list[int]) -> _Diff:
        """The difference flow of killing ``dead_t`` (and removing the ``gone`` classes).

        Classes never mix, so pushes over disjoint sets of classes add up: the
        stages of a scenario share the push of every class they treat alike.
        """
        f = self.flow
        x, frac, mfrac = f.x, f.t_frac, self._mfrac
        e_parts: list[np.ndarray] = []
        v_parts: list[np.ndarray] = []
        b_keys: list[np.ndarray] = []
        b_amt: list[np.ndarray] = []
        for c in gone:
            lo, hi = f.t_indptr[self._state_lo[c]], f.t_indptr[self._state_lo[c + 1]]
            e_parts.append(f.t_edge[lo:hi])
            v_parts.append(-x[f.t_src[lo:hi]] * frac[lo:hi])
        ch = _EMPTY
        deadrow = np.empty(0, dtype=bool)
        tt_ch = ch
        take = np.take  # faster than fancy indexing on these long arrays
        if len(dead_t):
            ch, deadfrac = self._sc.agg(take(f.t_src, dead_t), take(frac, dead_t))
            alive = 1.0 - deadfrac
            deadrow = alive <= 1e-9
            tt_ch, lens = ranges(f.t_indptr, ch)
            old = take(frac, tt_ch)
            new = old * np.repeat(np.where(deadrow, 0.0, 1.0 / np.where(deadrow, 1.0, alive)), lens)
            isdead = self._tflag
            isdead[dead_t] = True
            new[take(isdead, tt_ch)] = 0.0
            isdead[dead_t] = False
            mfrac[tt_ch] = new
            diff = np.repeat(take(x, ch), lens) * (new - old)
            e_parts.append(take(f.t_edge, tt_ch))
            v_parts.append(diff)
            b_keys.append(take(f.t_dst, tt_ch))
            b_amt.append(diff)
        rec_s: list[np.ndarray] = []
        rec_a: list[np.ndarray] = []
        loops: list[tuple[int, tuple[int, ...]]] = []
        if b_keys:
            fk, fa = self._sc.agg(np.concatenate(b_keys), np.concatenate(b_amt))
            for _level in range(f.n + 1):
                keep = fa != 0
                fk, fa = fk[keep], fa[keep]
                if not len(fk):
                    break
                rec_s.append(fk)
                rec_a.append(fa)
                tt, lens = ranges(f.t_indptr, fk)
                if not len(tt):
                    break
                contrib = np.repeat(fa, lens) * take(mfrac, tt)
                e_parts.append(take(f.t_edge, tt))
                v_parts.append(contrib)
                fk, fa = self._sc.agg(take(f.t_dst, tt), contrib)
            else:
                loops = self._loops_of(fk)
        if len(tt_ch):
            mfrac[tt_ch] = old
        return _Diff(e_parts, v_parts, ch[deadrow] if len(ch) else ch, rec_s, rec_a, loops)

    def _outcome(self, diffs: list[_Diff], gone: list[int]) -> _Outcome:
        """Baseline plus the class-disjoint ``diffs``: loads, black holes, loops."""
        f = self.flow
        e_parts = [e for d in diffs for e in d.edges]
        if e_parts:
            amounts = np.concatenate([v for d in diffs for v in d.amounts])
            load = f.load + np.bincount(np.concatenate(e_parts), weights=amounts, minlength=self.topo.n_edges)
        else:
            load = f.load.copy()
        # black holes: baseline sinks and rows left without a next hop
        sinks = np.concatenate([self._sinks, *(d.sinks for d in diffs)])
        drops: dict[tuple[int, int], float] = {}
        if len(sinks):
            amount = f.x[sinks].copy()
            rec_s = [s for d in diffs for s in d.states]
            if rec_s:
                acc, ks = self._sc.acc, np.concatenate(rec_s)
                np.add.at(acc, ks, np.concatenate([a for d in diffs for a in d.arrivals]))
                amount += acc[sinks]
                acc[ks] = 0.0
            gone_set = set(gone)
            for s, a in zip(sinks.tolist(), amount.tolist(), strict=True):
                if a > EPS_GBPS and not self._failed[s] and int(self._cls[s]) not in gone_set:
                    k = int(f.keys[s])
                    drops[(k // f.n, k % f.n)] = a
        loops = [lp for d in diffs for lp in d.loops]
        if len(diffs) > 1:
            loops.sort()
        return _Outcome(load, drops, loops)

    def _loops_of(self, states: np.ndarray) -> list[tuple[int, tuple[int, ...]]]:
        f = self.flow
        by: dict[int, set[int]] = {}
        for k in f.keys[states].tolist():
            by.setdefault(k // f.n, set()).add(k % f.n)
        return [(c, tuple(sorted(v))) for c, v in sorted(by.items())]

    def _withdraw(self, dead_t: np.ndarray) -> np.ndarray:
        """``dead_t`` plus every transition into a state that withdrew its route."""
        f = self.flow
        tdead, rem = self._tdead, self._rem
        if not len(dead_t):
            return dead_t
        tdead[dead_t] = True
        src = f.t_src[dead_t]
        np.subtract.at(rem, src, f.t_frac[dead_t])
        touched = [src]
        cand = self._sc.distinct(src)
        w = cand[(rem[cand] <= 1e-9) & ~self._failed[cand]]
        extra: list[np.ndarray] = []
        while len(w):
            it, _ = ranges(f.in_indptr, w)
            tr = f.in_trans[it]
            tr = tr[~tdead[tr]]
            if not len(tr):
                break
            tdead[tr] = True
            extra.append(tr)
            s = f.t_src[tr]
            np.subtract.at(rem, s, f.t_frac[tr])
            touched.append(s)
            cs = self._sc.distinct(s)
            w = cs[rem[cs] <= 1e-9]
        tdead[dead_t] = False
        for tr in extra:
            tdead[tr] = False
        for s in touched:
            rem[s] = 1.0
        return np.concatenate([dead_t, *extra]) if extra else dead_t

    # -- a whole scenario ---------------------------------------------------
    def outcomes(self, sc: Scenario) -> tuple[_Outcome, _Outcome]:
        """The raw (immediate, reconverged) outcomes of one scenario."""
        if sc.is_baseline:
            return self._base, self._base
        f, topo = self.flow, self.topo
        fdev = np.array(sorted(topo.index[d] for d in sc.devices), dtype=np.int64)
        fedges = topo.failed_edges(sc.devices, sc.links)
        it, _ = ranges(f.e_indptr, fedges)
        dead_t = f.e_trans[it]
        fst = f.dev_states[ranges(f.dev_indptr, fdev)[0]] if len(fdev) else np.empty(0, dtype=np.int64)
        failed_set = set(fdev.tolist())
        gone = sorted({c for v in failed_set for c in self._origin_classes.get(v, ())
                       if self.table.origins[c] <= failed_set})
        if gone:
            keep = ~np.isin(self._tcls[dead_t], gone)
            dead_t = dead_t[keep]
            fst = fst[~np.isin(self._cls[fst], gone)]
        self._failed[fst] = True
        try:
            if self.model == "withdrawal":
                imm, rec = self._stages(dead_t, gone)
            else:
                imm = self._outcome([self._push(dead_t, gone)], gone)
                rec = self._rerouted(sc, static=self.model == "static")
        finally:
            self._failed[fst] = False
        for out in (imm, rec):
            out.load[fedges] = 0.0
        return imm, rec

    def _stages(self, dead_t: np.ndarray, gone: list[int]) -> tuple[_Outcome, _Outcome]:
        """Both stages of the withdrawal model. Only the classes that withdrew a route
        differ between them; every other class's push is made once and shared."""
        dead_r = self._withdraw(dead_t)
        if len(dead_r) == len(dead_t):
            imm = self._outcome([self._push(dead_t, gone)], gone)
            return imm, imm
        cls_t = self._tcls
        moved = np.zeros(len(self.table.prefixes), dtype=bool)
        moved[cls_t[dead_r[len(dead_t):]]] = True
        in_moved = moved[cls_t[dead_t]]
        gone_moved = [c for c in gone if moved[c]]
        shared = self._push(dead_t[~in_moved], [c for c in gone if not moved[c]])
        imm = self._outcome([shared, self._push(dead_t[in_moved], gone_moved)], gone)
        rec = self._outcome([shared, self._push(dead_r[moved[cls_t[dead_r]]], gone_moved)], gone)
        return imm, rec

    def _rerouted(self, sc: Scenario, *, static: bool = False) -> _Outcome:
        from safety.forwarding import table_from_routes
        from solver.core.routing import next_hops  # the routing semantics of the solver, by design

        routes = next_hops(self.intent, failed_devices=sc.devices, failed_links=sc.links)
        if static:
            routes = self._static_routes(sc, routes)
        tab = table_from_routes(self.intent, self.topo, self.table, routes)
        failed = {self.topo.index[d] for d in sc.devices}
        keep = np.array([v not in failed and not (self.table.origins[c] <= failed)
                         for c, v in zip(tab.demand_class.tolist(), tab.demand_device.tolist(), strict=True)],
                        dtype=bool)
        tab.demand_class, tab.demand_device, tab.demand_gbps = (
            tab.demand_class[keep], tab.demand_device[keep], tab.demand_gbps[keep])
        fl = propagate(tab, self.topo)
        drops = {k: v for k, v in fl.drops().items() if k[1] not in failed and v > EPS_GBPS}
        return _Outcome(fl.load, drops, fl.loops)

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

    def _stage_result(self, stage: str, out: _Outcome, limit: float, baseline: bool,
                      changed: np.ndarray | None) -> StageResult:
        topo, names = self.topo, self.topo.names
        cap = topo.edge_cap
        if changed is None or out is self._base:
            cand = self._base_order[:HOTTEST]
        else:
            cand = self._edges.distinct(np.concatenate([changed, self._base_order[:HOTTEST + len(changed)]]))
        top = cand[_top(out.load[cand] / cap[cand], HOTTEST)]
        mlu = float(out.load[top[0]] / cap[top[0]]) if len(top) else 0.0
        util = out.load / cap if mlu > limit + 1e-9 else None

        def use(e: int) -> LinkUse:
            return LinkUse(topo.link_keys[e // 2], names[topo.edge_src[e]], names[topo.edge_dst[e]],
                           float(out.load[e]), float(cap[e]), float(out.load[e] / cap[e]))

        hottest = tuple(use(int(e)) for e in top if out.load[e] > 0)
        over = np.empty(0, dtype=np.int64)
        if util is not None:
            over = np.flatnonzero(util > limit + 1e-9)
            over = over[np.argsort(-util[over], kind="stable")]
        inv: list[InvariantResult] = []
        prefixes = self.table.prefixes
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
        inv.append(InvariantResult(
            "utilization", not len(over),
            "" if not len(over) else "; ".join(
                f"{names[topo.edge_src[e]]}->{names[topo.edge_dst[e]]} at {out.load[e] / cap[e]:.6f} > {limit:g}"
                for e in over[:5]) + (f" and {len(over) - 5} more" if len(over) > 5 else "")))
        if baseline:
            errs = self.table.budget_errors
            inv.append(InvariantResult("group_budget", not errs, "; ".join(errs[:5])))
        return StageResult(stage, tuple(inv), mlu, limit, hottest, dropped, loops)

    def run(self, sc: Scenario) -> ScenarioResult:
        """Replay one scenario: both stages, every invariant."""
        key = (sc.devices, sc.links)
        known = self._known.get(key)
        if known is None:
            imm, rec = self.outcomes(sc)
            limit = self.limits["baseline"] if sc.is_baseline else self.limits["failure"]
            stages: list[StageResult] = []
            for name, out in (("immediate", imm), ("reconverged", rec)):
                if out is imm and stages:  # nothing withdrew: the same traffic, every invariant gating
                    stages.append(replace(stages[0], stage=name, invariants=tuple(
                        replace(inv, gating=True) for inv in stages[0].invariants)))
                    continue
                changed = None if out is self._base else np.flatnonzero(out.load != self.flow.load)
                stages.append(self._stage_result(name, out, limit, sc.is_baseline, changed))
            known = (stages[0], stages[1])
            if sc.kind in _REMEMBERED:
                self._known[key] = known
        return ScenarioResult(sc.name, sc.kind, tuple(sorted(sc.devices)), tuple(sorted(sc.links)), *known)


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
    ``baseline_mlu``: the plan's maximum utilization with nothing failed.
    """

    link_peak: dict[str, float]
    violating: dict[str, float]
    failing: tuple[str, ...]
    baseline_mlu: float
    limits: dict[str, float]


def peaks(intent: Intent, plan: Plan, *, scope: str | None = None,
          only: Iterable[Scenario] | None = None) -> Peaks:
    """Replay every scenario and collect the worst utilization per link (see :class:`Peaks`)."""
    rp = Replayer(intent, plan)
    cap = rp.topo.edge_cap
    worst = np.zeros(rp.topo.n_edges)
    violating: dict[str, float] = {}
    failing: list[str] = []
    baseline_mlu = 0.0
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
        if top > limit + 1e-9:
            violating[sc.name] = top
    link_peak = {k: float(max(worst[2 * i], worst[2 * i + 1])) for i, k in enumerate(rp.topo.link_keys)}
    return Peaks(link_peak, violating, tuple(dict.fromkeys(failing)), baseline_mlu, rp.limits)
