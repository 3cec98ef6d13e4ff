"""Where to put a job: the placements of a new job over candidate ToRs, ranked by predicted communication time.

The performance model is :mod:`controller.telemetry.jobperf`'s: a job's
iteration is its template's phases one after another, each as long as its
slowest directed link, ``gigabits / (capacity x (1 - rho))`` with ``rho`` the
utilization of the other traffic on the link. Here the load is the plan's
prediction (the intent's effective demand, declared demands and jobs,
propagated through the plan: :func:`safety.estimate.link_loads`), not the
counters'. For a placement (member ``i`` of the template on ToR ``tors[i]``):

* ``comm_s``: the new job's time per iteration beside all the existing load;
  ``comm_s_idle``: on an idle fabric;
* each declared job's **slowdown**: its time with the new job's mean rate
  added to its other traffic over its time without (1 when unchanged).

:func:`rank` scores placements under one plan (the active one, whose routing
the new job's demand would first meet). Every score is one batched evaluation:
the unit routes of every ordered pair of candidates (a sparse ``edges x C^2``
matrix from the plan's routing matrix) times a sparse matrix of the placements'
member pairs give every placement's gigabits per link and phase at once. The
search:

* **exhaustive** when the placements number at most
  :attr:`PlacementOptions.exhaustive_limit`: every set of candidates when the
  template is order-free (each phase unchanged by any relabelling of the
  members, e.g. all-to-all), else every ordered choice (rings, pipelines,
  trees). The best placement under the model is then the true optimum.
* **heuristic** otherwise: local search (best improvement: replace one
  member by an unused candidate, or, for ordered templates, swap two members;
  until no move improves, or :attr:`PlacementOptions.max_scored` placements are
  scored) from deterministic starts: per pod, the candidates of that pod first
  (the most populous pods first), and greedy chains, from candidates of each
  pod in turn, that add the candidate with the cheapest loaded path to and from
  the last member. The moves include, for ordered templates, moving a member
  to another position. A local optimum, not a proven global one.

Either way the ranking is under the active plan: planned with the job, WCMP
re-balances the fabric, which is why the answer's figures are computed again on
that plan (:func:`on_plan`) and may reorder the best few.

Ties are broken by the ToR names. A set of ToRs is answered once, in its best
order (a ring's rotations and its other orders are not listed as alternatives). A pair of candidates the plan cannot
route between (some of its traffic is not delivered) rules a placement out.
:func:`on_plan` gives the same figures under another plan (the plan compiled
with the job added). Pure: values in, values out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import scipy.sparse as sp

from controller.model import Intent, Job
from controller.model.collectives import traffic
from controller.model.jobs import originated_prefixes
from controller.model.placement import Objective
from controller.model.plan import Plan
from controller.telemetry.jobperf import comm_time, phase_bits
from safety.estimate import RoutingMatrix, link_loads, routing_matrix

__all__ = ["Evaluation", "PlacementOptions", "Ranking", "Scored", "objective_key", "on_plan", "rank"]

GIGABITS_PER_BYTE = 8 / 1e9


@dataclass(frozen=True, slots=True)
class PlacementOptions:
    """The search's knobs: placements enumerated exactly at most; local-search starts by pod and by greedy
    chain, and rounds per start; placements the local search scores at most (it stops there); placements per
    evaluated batch; and the cap on other traffic's utilization (as in :func:`comm_time`)."""

    exhaustive_limit: int = 5000
    starts: int = 4
    chains: int = 16
    max_rounds: int = 64
    max_scored: int = 200_000
    batch: int = 512
    max_utilization: float = 0.99


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A placement's predicted figures under one plan."""

    comm_s: float
    comm_s_idle: float
    max_slowdown_others: float | None  # None: no other job
    slowest_other: str | None
    weighted: float  # the worst slowdown of the others weighted by priority (1 when none)


@dataclass(frozen=True, slots=True)
class Scored:
    tors: tuple[str, ...]
    evaluation: Evaluation
    key: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Ranking:
    """The distinct placements found, best first, how they were searched and how many were scored."""

    search: Literal["exhaustive", "heuristic"]
    evaluated: int
    placements: list[Scored]
    base_s: dict[str, float]  # each other job's time per iteration without the new job, under the plan searched


def objective_key(e: Evaluation, objective: Objective) -> tuple[float, ...]:
    """The sort key of an evaluation under ``objective`` (lower is better): ``balanced`` ranks the new job's
    communication time stretched by the worst priority-weighted slowdown it causes the others, ``job`` its time
    then that slowdown, ``others`` that slowdown then its time."""
    if objective == "job":
        return (e.comm_s, e.weighted)
    if objective == "others":
        return (e.weighted, e.comm_s)
    return (e.comm_s * e.weighted, e.comm_s)


# -- the other jobs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Other:
    """A declared job as the new one's traffic meets it: its gigabits per phase, the capacity left to it by its
    other traffic, and its time without the new job."""

    name: str
    priority: float
    bits: list[np.ndarray]
    other: np.ndarray
    base_s: float


def _others(intent: Intent, rm: RoutingMatrix, cap: np.ndarray, total: np.ndarray, skip: str,
            max_utilization: float) -> list[_Other]:
    out = []
    for job in intent.jobs:
        if job.name == skip:
            continue
        bits = phase_bits(job, intent, rm)
        own = sum(bits) / job.iter_s if bits else np.zeros_like(cap)
        other = np.maximum(total - own, 0.0)
        base = comm_time(bits, cap, other, max_utilization=max_utilization).seconds
        out.append(_Other(job.name, job.priority or 1.0, bits, other, base))
    return out


# -- the batched evaluation ------------------------------------------------------------------------
@dataclass
class _Context:
    """What every evaluation of one search reads: the candidates (sorted by name), the unit routes of their
    ordered pairs restricted to the edges they touch, the capacity and the load there, the new job's phases
    as member pairs, and the other jobs restricted to those edges."""

    names: tuple[str, ...]
    units: sp.csr_matrix  # rows x C^2: the fraction of a pair's traffic on each touched edge
    rows: np.ndarray  # the touched edges
    cap: np.ndarray  # per touched edge
    avail: np.ndarray  # capacity left by the existing load, per touched edge
    unroutable: np.ndarray  # C^2 bools
    phases: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # member i, member j, gigabits
    iter_s: float
    priority: float
    others: list[tuple[_Other, list[float], list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray]] = \
        field(default_factory=list)  # job, its phases' time off the touched edges, (edges, bits) on them, other, cap
    max_utilization: float = 0.99


def _units(intent: Intent, rm: RoutingMatrix, names: Sequence[str]) -> tuple[sp.csc_matrix, np.ndarray]:
    """Edges x C^2: 1 gbps from candidate a to candidate b (spread over b's prefixes), and whether it is lost."""
    origins = originated_prefixes(intent)
    index = {pair: j for j, pair in enumerate(rm.pairs)}
    c = len(names)
    rows, cols, vals = [], [], []
    for a, src in enumerate(names):
        for b, dst in enumerate(names):
            prefixes = origins.get(dst, []) if a != b else []
            for prefix in prefixes:
                j = index.get((src, prefix))
                if j is not None:
                    rows.append(j)
                    cols.append(a * c + b)
                    vals.append(1.0 / len(prefixes))
    select = sp.csc_matrix((vals, (rows, cols)), shape=(len(rm.pairs), c * c))
    units = sp.csc_matrix(rm.matrix @ select)
    dst_of_col = np.array([rm.topo.index[names[col % c]] for col in range(c * c)], dtype=np.int64)
    coo = units.tocoo()
    arrives = rm.topo.edge_dst[coo.row] == dst_of_col[coo.col]  # the last hop, into the receiving candidate
    delivered = np.bincount(coo.col[arrives], weights=coo.data[arrives], minlength=c * c)
    lost = (delivered < 1 - 1e-6) & (np.arange(c * c) // c != np.arange(c * c) % c)
    return units, lost


def _context(intent: Intent, plan: Plan, job: Job, candidates: Iterable[str], others_of: Intent,
             opts: PlacementOptions) -> _Context:
    names = tuple(sorted(candidates))
    members = {t for j in others_of.jobs if j.name != job.name for t in j.tors}
    rm = routing_matrix(intent, plan, ingresses=sorted(set(names) | members))
    cap_all = rm.topo.edge_cap.astype(np.float64)
    total = link_loads(others_of, plan)
    units, lost = _units(intent, rm, names)
    rows = np.unique(units.indices)
    units = sp.csr_matrix(units)[rows]
    cap = cap_all[rows]
    rho = np.clip(total[rows] / np.where(cap > 0, cap, 1.0), 0.0, opts.max_utilization)
    phases = []
    for ph in traffic(intent.registry.get(job.collective), len(job.tors), job.bytes_per_iter, job.params):
        pairs = list(ph.items())
        phases.append((np.array([p[0][0] for p in pairs], dtype=np.int64),
                       np.array([p[0][1] for p in pairs], dtype=np.int64),
                       np.array([p[1] * GIGABITS_PER_BYTE for p in pairs])))
    ctx = _Context(names, units, rows, cap, cap * (1.0 - rho), lost, phases, job.iter_s, job.priority or 1.0,
                   max_utilization=opts.max_utilization)
    on = np.zeros(len(cap_all), dtype=bool)
    on[rows] = True
    for o in _others(others_of, rm, cap_all, total, job.name, opts.max_utilization):
        off_avail = cap_all * (1.0 - np.clip(o.other / np.where(cap_all > 0, cap_all, 1.0), 0.0, opts.max_utilization))
        fixed, touched = [], []
        for b in o.bits:
            off = np.where(~on & (b > 0), b / np.where(off_avail > 0, off_avail, np.nan), 0.0)
            fixed.append(float(np.nan_to_num(off, nan=np.inf).max(initial=0.0)))
            sel = np.flatnonzero(b[rows] > 0)
            touched.append((sel, b[rows][sel]))
        ctx.others.append((o, fixed, touched, o.other[rows], cap))
    return ctx


def _evaluate(ctx: _Context, placements: np.ndarray) -> list[Evaluation]:
    """Every placement of ``placements`` (B x n candidate indices) evaluated at once."""
    b = len(placements)
    c = len(ctx.names)
    comm, idle = np.zeros(b), np.zeros(b)
    rate = np.zeros((len(ctx.rows), b))
    bad = np.zeros(b, dtype=bool)
    for ii, jj, gb in ctx.phases:
        cols = placements[:, ii] * c + placements[:, jj]  # B x pairs
        bad |= ctx.unroutable[cols].any(axis=1)
        weights = sp.csc_matrix((np.tile(gb, b), (cols.ravel(), np.repeat(np.arange(b), len(ii)))),
                                shape=(c * c, b))
        bits = np.asarray((ctx.units @ weights).toarray())
        comm += (bits / ctx.avail[:, None]).max(axis=0, initial=0.0)
        idle += (bits / ctx.cap[:, None]).max(axis=0, initial=0.0)
        rate += bits
    rate /= ctx.iter_s
    worst = np.ones(b)
    weighted = np.ones(b)
    who = np.full(b, -1)
    for k, (o, fixed, touched, other, cap) in enumerate(ctx.others):
        t = np.zeros(b)
        for f, (sel, bits_o) in zip(fixed, touched, strict=True):
            if not len(sel):
                t += f
                continue
            load = (other[sel, None] + rate[sel]) / cap[sel, None]
            avail = cap[sel, None] * (1.0 - np.clip(load, 0.0, ctx.max_utilization))
            t += np.maximum(f, (bits_o[:, None] / avail).max(axis=0))
        slow = t / o.base_s if o.base_s > 0 else np.ones(b)
        w = 1.0 + (slow - 1.0) * o.priority / ctx.priority
        better = (who < 0) | (slow > worst)
        who = np.where(better, k, who)
        worst = np.where(better, slow, worst)
        weighted = np.maximum(weighted, w)
    comm = np.where(bad, np.inf, comm)
    return [Evaluation(float(comm[i]), float(idle[i]), float(worst[i]) if who[i] >= 0 else None,
                       ctx.others[who[i]][0].name if who[i] >= 0 else None, float(weighted[i])) for i in range(b)]


# -- the search ------------------------------------------------------------------------------------
def order_free(ctx: _Context, n: int) -> bool:
    """Whether every phase of the new job is unchanged by any relabelling of its members (then only the set of
    ToRs matters): checked on the transpositions of neighbours, which generate every permutation."""
    for ii, jj, gb in ctx.phases:
        pairs = dict(zip(zip(ii.tolist(), jj.tolist(), strict=True), gb.tolist(), strict=True))
        for m in range(n - 1):
            def swap(x: int, m: int = m) -> int:
                return m + 1 if x == m else m if x == m + 1 else x
            moved = {(swap(i), swap(j)): v for (i, j), v in pairs.items()}
            if moved.keys() != pairs.keys() or any(abs(moved[k] - pairs[k]) > 1e-9 * max(1.0, abs(pairs[k]))
                                                   for k in pairs):
                return False
    return True


class _Scorer:
    """Scores placements (tuples of candidate indices) in batches, each once; keeps every score."""

    def __init__(self, ctx: _Context, objective: Objective, batch: int):
        self.ctx, self.objective, self.batch = ctx, objective, batch
        self.seen: dict[tuple[int, ...], tuple[tuple[float, ...], Evaluation]] = {}

    def key(self, p: tuple[int, ...]) -> tuple[tuple[float, ...], tuple[str, ...]]:
        return self.seen[p][0], tuple(self.ctx.names[i] for i in p)

    def score(self, placements: Iterable[tuple[int, ...]]) -> None:
        todo = [p for p in dict.fromkeys(placements) if p not in self.seen]
        for k in range(0, len(todo), self.batch):
            chunk = todo[k:k + self.batch]
            for p, e in zip(chunk, _evaluate(self.ctx, np.array(chunk, dtype=np.int64)), strict=True):
                # 12 significant digits: placements equal but for rounding tie, and the names decide
                self.seen[p] = (tuple(float(f"{x:.12g}") for x in objective_key(e, self.objective)), e)


def _starts(ctx: _Context, pods: dict[str, object], n: int, count: int, chains: int) -> list[tuple[int, ...]]:
    """Deterministic starts: for ``count`` pods (the most populous first), that pod's candidates then the next
    pods'; and from ``chains`` candidates (taken from the pods in turn) a greedy chain that adds the candidate
    with the cheapest loaded path to and from the last member."""
    groups: dict[object, list[int]] = {}
    for i, name in enumerate(ctx.names):
        groups.setdefault(pods.get(name, name), []).append(i)
    order = sorted(groups.values(), key=lambda g: (-len(g), ctx.names[g[0]]))
    starts = []
    for first in order[:count]:
        seq = first + [i for g in order if g is not first for i in g]
        starts.append(tuple(seq[:n]))
    c = len(ctx.names)
    per = np.zeros(c * c)
    if ctx.units.shape[0]:  # the unit route's slowest edge under the existing load
        per = np.asarray(sp.csc_matrix(ctx.units.multiply(1.0 / ctx.avail[:, None])).max(axis=0).toarray()).ravel()
    cost = np.where(ctx.unroutable, np.inf, per).reshape(c, c)
    heads = [g[k] for k in range(max(map(len, order), default=0)) for g in order if k < len(g)][:chains]
    for head in heads:  # round robin over the pods
        chain = [head]
        while len(chain) < n:
            free = [i for i in range(c) if i not in chain]
            chain.append(min(free, key=lambda i: (cost[chain[-1], i] + cost[i, chain[-1]], i)))
        starts.append(tuple(chain))
    return starts


def _neighbours(p: tuple[int, ...], c: int, ordered: bool) -> list[tuple[int, ...]]:
    used = set(p)
    out = []
    for pos in range(len(p)):
        for x in range(c):
            if x not in used:
                q = (*p[:pos], x, *p[pos + 1:])
                out.append(q if ordered else tuple(sorted(q)))
    if ordered:
        for i, j in itertools.combinations(range(len(p)), 2):
            s = list(p)
            s[i], s[j] = s[j], s[i]
            out.append(tuple(s))
        for i, j in itertools.permutations(range(len(p)), 2):  # move member i to position j
            if abs(i - j) > 1:  # next to each other it is a swap
                s = [x for k, x in enumerate(p) if k != i]
                s.insert(j, p[i])
                out.append(tuple(s))
    return out


def _local_search(scorer: _Scorer, start: tuple[int, ...], ordered: bool, rounds: int, budget: int) -> None:
    cur = start if ordered else tuple(sorted(start))
    scorer.score([cur])
    for _ in range(rounds):
        if len(scorer.seen) >= budget:
            return
        moves = _neighbours(cur, len(scorer.ctx.names), ordered)
        scorer.score(moves)
        best = min(moves, key=scorer.key, default=cur)
        if scorer.key(best) >= scorer.key(cur):
            return
        cur = best


def rank(intent: Intent, plan: Plan, job: Job, candidates: Sequence[str], *, objective: Objective = "balanced",
         options: PlacementOptions | None = None, limit: int | None = None) -> Ranking:
    """The placements of ``job`` (its ``tors`` give only its member count) over ``candidates`` under ``plan``,
    the active plan of ``intent``, best first by ``objective`` (see the module docstring). A job of
    ``intent`` with ``job``'s name is left out (a placement of a declared job replaces it). Every distinct
    placement scored is returned (the ``limit`` best when given); those ruled out (unroutable) are not."""
    opts = options or PlacementOptions()
    base = intent.model_copy(update={"jobs": tuple(j for j in intent.jobs if j.name != job.name)})
    ctx = _context(intent, plan, job, candidates, base, opts)
    n, c = len(job.tors), len(ctx.names)
    ordered = not order_free(ctx, n)
    scorer = _Scorer(ctx, objective, opts.batch)
    count = math.perm(c, n) if ordered else math.comb(c, n)
    search: Literal["exhaustive", "heuristic"] = "exhaustive" if count <= opts.exhaustive_limit else "heuristic"
    if search == "exhaustive":
        enum = itertools.permutations(range(c), n) if ordered else itertools.combinations(range(c), n)
        scorer.score(enum)
    else:
        pods = {d.name: d.pod for d in intent.devices if d.pod is not None}
        for start in _starts(ctx, dict(pods), n, opts.starts, opts.chains):
            _local_search(scorer, start, ordered, opts.max_rounds, opts.max_scored)
    out: list[Scored] = []
    sets: set[frozenset[str]] = set()
    for p in sorted(scorer.seen, key=scorer.key):
        if limit is not None and len(out) >= limit:
            break
        key, e = scorer.seen[p]
        tors = tuple(ctx.names[i] for i in p)
        if not math.isfinite(e.comm_s) or frozenset(tors) in sets:
            continue
        sets.add(frozenset(tors))
        out.append(Scored(tors, e, key))
    return Ranking(search, len(scorer.seen), out, {o[0].name: o[0].base_s for o in ctx.others})


def on_plan(intent: Intent, plan: Plan, job: Job, base_s: dict[str, float], *,
            max_utilization: float = 0.99) -> Evaluation:
    """``job``, a job of ``intent``, and the others under ``plan`` (compiled with it): its time beside the
    plan's predicted load of the rest, idle, and the others' worst slowdown against ``base_s`` (their times
    without the job, :attr:`Ranking.base_s`)."""
    members = sorted({t for j in intent.jobs for t in j.tors})
    rm = routing_matrix(intent, plan, ingresses=members)
    cap = rm.topo.edge_cap.astype(np.float64)
    total = link_loads(intent, plan)
    bits = phase_bits(job, intent, rm)
    own = sum(bits) / job.iter_s
    comm = comm_time(bits, cap, np.maximum(total - own, 0.0), max_utilization=max_utilization).seconds
    worst, who, weighted = 1.0, None, 1.0
    for o in _others(intent, rm, cap, total, job.name, max_utilization):
        before = base_s.get(o.name, 0.0)
        slow = o.base_s / before if before > 0 else 1.0
        if who is None or slow > worst:
            worst, who = slow, o.name
        weighted = max(weighted, 1.0 + (slow - 1.0) * o.priority / (job.priority or 1.0))
    return Evaluation(comm, comm_time(bits, cap).seconds, worst if who is not None else None, who, weighted)
