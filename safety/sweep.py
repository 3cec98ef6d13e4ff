"""Failure sweeps in chunks: every pair of single failures, and executors that run them.

This module owns two things the plain :func:`safety.replay.replay` does not:

* **The ``single_pairs`` sweep**: the scenarios of ``all_single`` (baseline,
  declared domains, every single link and device) and then every *pair* of
  single links and devices (kind ``pair``, named ``A+B``). This is not the
  intent's ``k2`` scope (DESIGN.md: every pair of declared *domains*); it is what
  ``loom check --scope single_pairs`` offers. A pair whose outcome another
  scenario already gives is not replayed (:func:`inert`): when every part that
  ``B`` fails carries no traffic in either stage of ``A`` (its links load nothing
  there, and a failed device of ``B`` sends no demand and originates no prefix),
  failing ``B`` on top of ``A`` kills only transitions out of states that carry
  nothing or are already dead, so no arrival, withdrawal, load or black hole
  changes: the pair's outcome is ``A``'s, and so is its verdict. A link at an
  end of a failed device, a link or device that ``A`` leaves without traffic,
  are such parts. ``tests/test_safety_sweep.py`` replays every pair of small
  fabrics by brute force and checks every skipped pair against the one that
  implies it. A pair sweep lists the failing pairs in full and counts the
  passing ones (``pair``, ``pairs_replayed``, ``pairs_implied``): a fabric's
  pairs are too many to list.
* **Executors**: the scenarios go out in chunks (:mod:`safety.chunks`) to a
  :class:`LocalExecutor` (this machine: workers forked after the compile, one per
  CPU) or a :class:`~safety.raysweep.RayExecutor` (a Ray cluster: local when no
  address is given, else ``ray://HOST:PORT``; the compiled fabric goes to each
  worker once, results stream back as they complete, a lost worker's chunks run
  again). Both run the same :class:`Sweeper` on the same chunks, and the results
  are reduced by chunk and pair index, never by arrival, so the report is the
  same whichever ran it, in whatever order (only ``seconds`` differs).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from controller.model import Intent
from controller.model.plan import Plan
from safety.chunks import Done, Executor, Progress, Sweeper, Work, in_order
from safety.raysweep import ExecutorUnavailable, RayExecutor, loopback_ray
from safety.replay import Replayer, assemble, replay
from safety.report import SafetyReport, ScenarioResult
from safety.scenarios import Scenario, count_scenarios, pair, scenarios, singles

__all__ = ["SCOPES", "Done", "Executor", "ExecutorUnavailable", "LocalExecutor", "PairTally", "RayExecutor",
           "SweepPolicy", "Sweeper", "check", "Work", "executor_from", "inert", "loopback_ray", "sweep", "sweep_pairs"]

#: Scopes a sweep takes: the intent's three and the pairs of single failures.
SCOPES = ("domains", "all_single", "k2", "single_pairs")
QUIET_GBPS = 1e-9  # a link carrying at most this in a stage carries nothing there
_log = logging.getLogger(__name__)


class LocalExecutor:
    """Every chunk on this machine, on ``workers`` workers (default: one per CPU, at most 8).

    The workers are processes forked from this one after the compile, so they share the
    compiled fabric without copying it, each with scratch arrays of its own; chunks go out
    in order and their results come back in order. A process with other threads running
    (a server, a solver's pool) is not forked, since a fork copies only the calling thread
    and a lock another thread held would stay held in the child: there the workers are
    threads of this process, which overlap one's compiled push (it releases the GIL) with
    another's judging, but only that. One worker, or one chunk: this thread, in order.
    ``fork=False``: threads even where a fork would do. ``mode`` says which the last
    :meth:`map` used.
    """

    name = "local"

    def __init__(self, workers: int | None = None, *, fork: bool = True):
        self._n = max(1, workers if workers is not None else min(8, os.cpu_count() or 1))
        self.fork = fork
        self.mode = "inline"

    def map(self, rp: Replayer, single: Sequence[Scenario], works: Sequence[Work],
            progress: Progress | None = None) -> list[Done]:
        return in_order(self.stream(rp, single, works), len(works), sum(len(w) for w in works), progress)

    def stream(self, rp: Replayer, single: Sequence[Scenario], works: Sequence[Work]) -> Iterator[tuple[int, Done]]:
        """Every chunk's ``(index, Done)``, in order."""
        global _FORKED
        n = min(self._n, len(works))
        results: Iterable[Done]
        closing: Callable[[], None] = lambda: None  # noqa: E731
        if n <= 1:
            sw = Sweeper(rp, single)
            results, self.mode = (sw.run(w) for w in works), "inline"
        elif self.fork and _can_fork():
            _FORKED = (rp, list(single))
            collecting = gc.isenabled()
            # Results are acyclic, and tens of thousands of them arrive: the cyclic collector's
            # full passes over them (and over the compiled fabric) are pure overhead here, and
            # in a worker they would write to every inherited object, copying its pages. So
            # the collector pauses in this (single-threaded) process while the workers run, and
            # the workers leave what they inherit out of their collections.
            gc.disable()
            gc.freeze()
            pool = multiprocessing.get_context("fork").Pool(n, initializer=_forked_init)
            results, self.mode = pool.imap(_forked_run, works), "processes"

            def closing() -> None:
                pool.terminate()
                gc.unfreeze()
                if collecting:
                    gc.enable()
        else:
            local = threading.local()

            def run(w: Work) -> Done:
                if not hasattr(local, "sweeper"):
                    local.sweeper = Sweeper(rp.fork(), single)
                sweeper: Sweeper = local.sweeper
                return sweeper.run(w)

            threads = ThreadPoolExecutor(n, thread_name_prefix="loom-sweep")
            results, self.mode = threads.map(run, works), "threads"
            closing = lambda: threads.shutdown(cancel_futures=True)  # noqa: E731
        try:
            yield from enumerate(results)
        finally:
            closing()
            _FORKED = None

    def workers(self) -> int:
        return self._n

    def close(self) -> None:
        """Nothing to release: each map's workers end with it."""


_FORKED: tuple[Replayer, list[Scenario]] | None = None  # what a forked worker inherits
_SWEEPER: Sweeper | None = None  # a forked worker's own


def _can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _forked_init() -> None:
    global _SWEEPER
    gc.enable()  # for the worker's own objects; what it inherited is frozen
    assert _FORKED is not None
    rp, single = _FORKED
    _SWEEPER = Sweeper(rp.fork(), single)


def _forked_run(work: Work) -> Done:
    assert _SWEEPER is not None
    return _SWEEPER.run(work)


def executor_from(spec: str | None) -> Executor:
    """``local`` (or ``None``), ``ray`` (a local Ray cluster) or ``ray://HOST:PORT``.

    Raises ``ValueError`` for anything else.
    """
    if spec in (None, "", "local"):
        return LocalExecutor()
    if spec == "ray":
        return RayExecutor()
    if spec is not None and spec.startswith("ray://") and len(spec) > len("ray://"):
        return RayExecutor(spec)
    raise ValueError(f"unknown executor '{spec}' (expected local, ray or ray://HOST:PORT)")


@dataclass(frozen=True, slots=True)
class SweepPolicy:
    """Where a review's safety sweep runs (:func:`check`): on ``executor`` (``local``, ``ray``
    or ``ray://HOST:PORT``, as :func:`executor_from` reads it) when it has at least
    ``threshold`` scenarios, else in this thread as :func:`safety.replay.replay` does."""

    executor: str = "local"
    threshold: int = 5_000


def check(intent: Intent, plan: Plan, policy: SweepPolicy = SweepPolicy(), *, scope: str | None = None,
          ) -> SafetyReport:
    """The safety report of ``plan`` as a review and the commit gate make it: ``replay``'s,
    on the configured executor for a scope of ``policy.threshold`` scenarios or more.

    A Ray cluster that cannot be reached, or loses every worker for good, does not fail the
    review (nor so the commit gate that reads its verdict): the sweep runs on this machine
    instead, with a warning in the log naming the executor and the error, and the same
    report. A bad executor spec raises ``ValueError``.
    """
    ex = executor_from(policy.executor)
    if ex.name == "local" or count_scenarios(intent, scope)["total"] < policy.threshold:
        return replay(intent, plan, scope=scope)
    rp = Replayer(intent, plan)
    try:
        return sweep(intent, plan, scope=scope, executor=ex, rp=rp)
    except ExecutorUnavailable as exc:
        _log.warning("safety sweep of %s: the %s executor is unavailable, replaying on this machine instead "
                     "(%s)", intent.name, policy.executor, exc)
        return sweep(intent, plan, scope=scope, executor=LocalExecutor(), rp=rp)


def inert(rp: Replayer, single: Sequence[Scenario]) -> np.ndarray:
    """``I[a, b]``: single ``b`` fails nothing that carries traffic in either stage of
    single ``a`` (so the pair's outcome is ``a``'s; see the module's docstring)."""
    topo, table = rp.topo, rp.table
    n_links = len(topo.link_keys)
    busy_dev = np.zeros(topo.n, dtype=bool)  # sends demand or originates a prefix
    busy_dev[table.demand_device[table.demand_gbps > 0]] = True
    for orig in table.origins:
        busy_dev[list(orig)] = True
    inc_dev = np.concatenate([topo.edge_src[0::2], topo.edge_dst[0::2]])  # device at each end of each link
    inc_link = np.concatenate([np.arange(n_links), np.arange(n_links)])
    link_of = np.array([topo.link_index[next(iter(s.links))] if s.kind == "link" else -1 for s in single])
    dev_of = np.array([topo.index[next(iter(s.devices))] if s.kind == "device" else -1 for s in single])
    out = np.zeros((len(single), len(single)), dtype=bool)
    for a, sc in enumerate(single):
        imm, rec = rp.outcomes(sc)
        load = np.maximum(imm.load, rec.load)
        quiet = np.maximum(load[0::2], load[1::2]) <= QUIET_GBPS  # per link
        loud_ends = np.bincount(inc_dev, weights=~quiet[inc_link], minlength=topo.n)
        dev_quiet = (loud_ends == 0) & ~busy_dev
        row = np.where(link_of >= 0, quiet[np.maximum(link_of, 0)], dev_quiet[np.maximum(dev_of, 0)])
        row[a] = False
        out[a] = row
    return out


#: What a scenario's replay costs beside its failed edges' transitions, in transitions: on
#: Clos L a single link's failure (two thousand transitions) takes about as long as a device
#: whose edges carry five thousand more. A balance for chunks, not a prediction.
_SCENARIO_COST = 5_000
_CHUNKS_PER_WORKER = 8  # chunks of about equal cost per worker: the last to finish waits little


def _singles(rp: Replayer, base: list[Scenario], single: list[Scenario], ex: Executor, chunk: int,
             progress: Progress | None) -> list[ScenarioResult]:
    """Every scenario of ``base`` replayed on ``ex``, in order (``single``: what a worker
    holds for the pairs that may follow).

    Scenarios that fail the same parts (a spine and its device domain) are replayed once.
    Chunks hold at most ``chunk`` scenarios and about equal cost (a device or a domain
    fails many more transitions than a link), and go out the costliest first, so no worker
    is left with a slow chunk at the end.
    """
    first: dict[tuple[frozenset[str], frozenset[str]], int] = {}
    distinct: list[Scenario] = []
    same_as: list[int] = []
    for sc in base:
        key = (sc.devices, sc.links)
        if key not in first:
            first[key] = len(distinct)
            distinct.append(sc)
        same_as.append(first[key])
    cost = _costs(rp, distinct)
    budget = max(float(cost.sum()) / (max(2, ex.workers()) * _CHUNKS_PER_WORKER), 1.0)
    works: list[Work] = []
    spent: list[float] = []
    lo, acc = 0, 0.0
    for i, c in enumerate(cost.tolist()):
        acc += c
        if acc >= budget or i + 1 - lo >= chunk or i + 1 == len(distinct):
            works.append(Work(distinct[lo:i + 1]))
            spent.append(acc)
            lo, acc = i + 1, 0.0
    order = sorted(range(len(works)), key=lambda k: -spent[k])
    done = ex.map(rp, single, [works[k] for k in order], progress)
    by_work: list[list[ScenarioResult]] = [[] for _ in works]
    for k, d in zip(order, done, strict=True):
        by_work[k] = d.results
    if progress is not None:  # the repeats are done too
        progress(len(base), len(base))
    replayed = [r for rs in by_work for r in rs]
    out: list[ScenarioResult] = []
    for sc, k in zip(base, same_as, strict=True):
        r = replayed[k]
        out.append(r if distinct[k] is sc else ScenarioResult(
            sc.name, sc.kind, tuple(sorted(sc.devices)), tuple(sorted(sc.links)), r.immediate, r.reconverged))
    return out


def _costs(rp: Replayer, items: list[Scenario]) -> np.ndarray:
    """An estimate of each scenario's replay cost: transitions on its failed edges, plus
    :data:`_SCENARIO_COST` (a balance for chunks, not a prediction)."""
    topo, f = rp.topo, rp.flow
    per_edge = np.diff(f.e_indptr).astype(np.float64)
    per_link = per_edge[0::2] + per_edge[1::2]
    per_dev = (np.bincount(topo.edge_src, weights=per_edge, minlength=topo.n)
               + np.bincount(topo.edge_dst, weights=per_edge, minlength=topo.n))
    return np.array([_SCENARIO_COST + sum(per_link[topo.link_index[k]] for k in sc.links)
                     + sum(per_dev[topo.index[d]] for d in sc.devices) for sc in items], dtype=np.float64)


class PairTally:
    """The pairs' results reduced as chunks arrive, in any order: the failing pairs by key
    (sorted when read), and the counts; the same whatever order the chunks came in."""

    def __init__(self) -> None:
        self._keyed: list[tuple[tuple[int, int], ScenarioResult]] = []
        self.replayed = 0
        self.transient = 0

    def add(self, d: Done) -> None:
        self._keyed.extend(zip(d.keys, d.results, strict=True))
        self.replayed += d.replayed
        self.transient += d.transient

    @property
    def keyed(self) -> list[tuple[tuple[int, int], ScenarioResult]]:
        return sorted(self._keyed, key=lambda kr: kr[0])


def sweep_pairs(rp: Replayer, single: Sequence[Scenario], pairs: np.ndarray, ex: Executor, chunk: int,
                progress: Progress | None = None) -> PairTally:
    """The pairs ``(i, j)`` of ``single`` (a ``(k, 2)`` array) replayed on ``ex`` in chunks of
    ``chunk``, each chunk's result reduced as it arrives (:class:`PairTally`)."""
    works = [Work(pairs=pairs[k:k + chunk]) for k in range(0, len(pairs), chunk)]
    tally = PairTally()
    for _k, d in ex.stream(rp, single, works):
        tally.add(d)
        if progress is not None:
            progress(tally.replayed, len(pairs))
    if tally.replayed != len(pairs):
        raise RuntimeError(f"the executor replayed {tally.replayed} of {len(pairs)} pairs")
    return tally


def sweep(intent: Intent, plan: Plan, *, scope: str | None = None, executor: Executor | None = None,
          chunk: int = 512, progress: Progress | None = None, rp: Replayer | None = None) -> SafetyReport:
    """Replay ``plan`` under the scenarios of ``scope`` (see :data:`SCOPES`) on ``executor``.

    With ``scope`` other than ``single_pairs`` the report equals :func:`safety.replay.replay`'s.
    ``chunk``: scenarios (or pairs) per chunk. ``rp``: an already compiled replayer.

    Raises ``ValueError`` for an unknown scope, or when the plan does not fit the intent.
    """
    if scope is not None and scope not in SCOPES:
        raise ValueError(f"unknown scope '{scope}' (expected {', '.join(SCOPES)})")
    t0 = time.perf_counter()
    ex = executor or LocalExecutor()
    rp = rp or Replayer(intent, plan)
    try:
        return _sweep(intent, rp, scope, ex, chunk, progress, t0)
    finally:
        ex.close()


def _sweep(intent: Intent, rp: Replayer, scope: str | None, ex: Executor, chunk: int,
           progress: Progress | None, t0: float) -> SafetyReport:
    pairs = scope == "single_pairs"
    base = list(scenarios(intent, "all_single" if pairs else scope))
    single = list(singles(intent)) if pairs else []
    n_pairs = len(single) * (len(single) - 1) // 2
    total = len(base) + n_pairs

    def step(offset: int) -> Progress | None:
        return None if progress is None else (lambda done, _n: progress(offset + done, total))

    results = _singles(rp, base, single, ex, chunk, step(0))
    if not pairs:
        return assemble(intent, rp, results, scope=scope, seconds=time.perf_counter() - t0)
    by_single = {r.name: r for r in results if r.kind in ("link", "device")}
    implied = inert(rp, single)
    ii, jj = np.triu_indices(len(single), k=1)
    by_a, by_b = implied[ii, jj], implied[jj, ii]
    todo = ~(by_a | by_b)
    run = np.stack([ii[todo], jj[todo]], axis=1)
    tally = sweep_pairs(rp, single, run, ex, chunk, step(len(base) + int((~todo).sum())))
    keyed, transient = tally.keyed, tally.transient
    for i, j, a_implies in zip(ii[~todo].tolist(), jj[~todo].tolist(), by_a[~todo].tolist(), strict=True):
        src = by_single[single[i if a_implies else j].name]
        sc = pair(single[i], single[j])
        if not src.ok:
            keyed.append(((i, j), ScenarioResult(sc.name, "pair", tuple(sorted(sc.devices)), tuple(sorted(sc.links)),
                                                 src.immediate, src.reconverged)))
        elif src.immediate.dropped:
            transient += 1
    keyed.sort(key=lambda kr: kr[0])
    listed = results + [r for _k, r in keyed]
    counts = {"scenarios": total, "pair": n_pairs, "pairs_replayed": int(todo.sum()),
              "pairs_implied": int((~todo).sum()),
              "transient_black_holes": transient + sum(
                  1 for r in listed if r.kind not in ("baseline", "pair") and r.immediate.dropped)
              + sum(1 for r in listed if r.kind == "pair" and r.immediate.dropped)}
    return assemble(intent, rp, listed, scope=scope, seconds=time.perf_counter() - t0, counts=counts)
