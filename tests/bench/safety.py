"""Benchmark rows for the safety replay: every single link and device failure of
Clos fabrics (``make bench``; not part of the tests).

For each size (S, M, L as the solver's benchmark defines them: 5% of leaf-spine
links missing, 20% heterogeneous) it generates the fabric, plans it with the
solver, and replays every single link and device failure plus the declared
domains (``scope: all_single``), timing the compile of the plan (baseline
propagation included) apart from the scenarios. With M among the sizes, also
the robust WCMP case of :mod:`solver.robust` (:func:`robust_fabric`): the
plain plan's violating scenarios, the robust plan's, the seconds and the
baseline price. Then every pair of single failures (``single_pairs``, :mod:`safety.sweep`):
exhaustive on S; on M estimated from a sample (with the pruning pass in full) unless
``--pairs-sample 0`` asks for the exhaustive run (about 7 minutes on 2 cores), and
``all_single`` on M through the local executor beside a local Ray cluster of 2 CPUs
(scenarios per second per worker). The compile's reference, timed in the same run,
is the compile reading the plan's routes one Mapping lookup at a time (as before);
the replay's is the previous version's figure, and ``loom check``'s sweep on the
local executor's workers runs beside the same scenarios on one thread.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import Any

from rich.table import Table

__all__ = ["SIZES", "run"]

SIZES: dict[str, tuple[int, int, int, int]] = {
    "S": (4, 8, 4, 4),
    "M": (16, 16, 4, 8),
    "L": (64, 32, 8, 16),
}


def _sizes(args: Any) -> list[str]:
    raw = getattr(args, "sizes", None) or "S,M,L"
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return [s.strip().upper() for s in items if s.strip().upper() in SIZES]


def fabric(size: str, *, seed: int = 1) -> Any:
    """The Clos intent of ``size`` with ``failure_tolerance: all_single``."""
    from controller.gen import clos_document
    from controller.model.intent import validate_intent

    pods, tors, planes, spines = SIZES[size]
    doc = clos_document(pods=pods, tors=tors, planes=planes, spines=spines, seed=seed, missing=0.05, hetero=0.2)
    doc["policies"] = [p for p in doc.get("policies", []) if p.get("kind") != "failure_tolerance"]
    doc["policies"].append({"kind": "failure_tolerance", "scope": "all_single", "max_utilization": 1.0})
    return validate_intent(doc)


#: Figures of the version before this one (issue 19, an idle 2-core machine): Clos L's
#: every single failure took 69 s of replay and 7.7 s of compile.
#: the figures before: the issue's (compile + replay, one thread) and the previous version's
#: (compile + replay on one thread; loom check's sweep with its compile), idle machine
PREVIOUS = {"L": {"issue": (7.7, 69.0), "one": (2.24, 28.73), "check": 21.33}}
#: every pair of single failures, exhaustive: seconds of the previous version (session 7, idle machine);
#: before the pruning and the compiled replay it was about 72 minutes on M (estimated)
PAIRS_PREVIOUS = {"M": 445.6}
#: pairs of single failures of Clos M replayed to estimate the exhaustive sweep (``--pairs-sample``; 0: every pair)
PAIRS_SAMPLE = 2000


class _PlainRoutes(Mapping[str, str]):
    """A plan's routes seen only through the Mapping protocol: how the safety compile read
    solver.clos's lazy routes before they handed over their arrays (the compile's reference)."""

    def __init__(self, routes: Mapping[str, str]):
        self._r = routes

    def __getitem__(self, prefix: str) -> str:
        return self._r[prefix]

    def __iter__(self) -> Iterator[str]:
        return iter(self._r)

    def __len__(self) -> int:
        return len(self._r)


def _plain(plan: Any) -> Any:
    from controller.model.plan import DevicePlan

    return dataclasses.replace(plan, devices={k: DevicePlan(groups=v.groups, routes=_PlainRoutes(v.routes))
                                              for k, v in plan.devices.items()})


_PLANS: dict[str, tuple[Any, Any, float]] = {}


def planned(size: str) -> tuple[Any, Any, float]:
    """``(intent, plan, seconds)`` of ``size``, solved once per bench run."""
    from solver import solve

    if size not in _PLANS:
        intent = fabric(size)
        t0 = time.perf_counter()
        plan = solve(intent)
        _PLANS[size] = (intent, plan, time.perf_counter() - t0)
    return _PLANS[size]


def warm_kernels() -> float:
    """Seconds the replay's compiled kernels take to become callable in this process (numba
    compiles them on a machine's first run, then loads them from its cache): every single
    failure of S once through ``Replayer.run`` (forked workers inherit them), before any row is timed,
    so that no row pays it (a cold ``loom check`` process does, once)."""
    from safety.replay import Replayer
    from safety.scenarios import scenarios

    intent, plan, _ = planned("S")
    t0 = time.perf_counter()
    rp = Replayer(intent, plan)
    for sc in scenarios(intent):
        rp.run(sc)
    return time.perf_counter() - t0


def replay_row(size: str) -> list[list[Any]]:
    """Every single failure of ``size``: the compile (beside its reference), the scenarios on one
    thread (``Replayer.run`` in a loop), and ``loom check``'s sweep on the local executor's
    workers (forked processes), whose results must be the one thread's; the previous
    version's figure beside."""
    from safety.replay import Replayer
    from safety.scenarios import scenarios
    from safety.sweep import LocalExecutor, sweep

    intent, plan, t_plan = planned(size)
    t0 = time.perf_counter()
    Replayer(intent, _plain(plan))
    t_ref = time.perf_counter() - t0
    t0 = time.perf_counter()
    rp = Replayer(intent, plan)
    t_compile = time.perf_counter() - t0
    todo = list(scenarios(intent))
    t0 = time.perf_counter()
    one = [rp.run(sc) for sc in todo]
    t_replay = time.perf_counter() - t0
    failing = sum(not r.ok for r in one)
    ex = LocalExecutor()
    t0 = time.perf_counter()
    rep = sweep(intent, plan, scope="all_single", executor=ex, rp=Replayer(intent, plan))
    t_sweep = time.perf_counter() - t0  # its own compile included
    same = list(rep.scenarios) == one
    prev = PREVIOUS.get(size)
    before = f"; issue: {prev['issue'][0]:g} + {prev['issue'][1]:g} s" if prev else ""
    one_before = f"; previous version: {prev['one'][0]:g} + {prev['one'][1]:g} s" if prev else ""
    check_before = f"; previous version: {prev['check']:g} s" if prev else ""
    return [[f"replay Clos {size}, 1 thread", len(intent.links), len(todo), f"{t_plan:.1f}",
             f"{t_compile:.2f} (ref {t_ref:.2f})", f"{t_replay:.2f}", f"{len(todo) / t_replay:.0f}",
             f"{failing} failing; total {t_compile + t_replay:.1f} s{one_before}{before}"],
            [f"loom check Clos {size}, {ex.workers()} {ex.mode}", len(intent.links), len(todo), "",
             "(included)", f"{t_sweep:.2f}", f"{len(todo) / t_sweep:.0f}",
             f"total {t_sweep:.1f} s with compile; results {'identical to' if same else 'DIFFER from'} "
             f"1 thread's{check_before}{before}"]]


def pairs_row(size: str, sample: int = 0) -> list[Any]:
    """Every pair of single failures (``single_pairs``) on ``size``: exhaustive (``sample``
    0), or the pruning pass in full and the replay of ``sample`` random replayed pairs,
    whose rate gives the estimate printed (marked as one)."""
    import numpy as np

    from safety.replay import Replayer
    from safety.scenarios import pair, singles
    from safety.sweep import LocalExecutor, Work, inert, sweep

    intent, plan, _ = planned(size)
    t0 = time.perf_counter()
    rp = Replayer(intent, plan)
    if not sample:
        rep = sweep(intent, plan, scope="single_pairs", rp=rp)
        seconds = time.perf_counter() - t0
        c = rep.counts
        prev = PAIRS_PREVIOUS.get(size)
        return [f"pairs of singles Clos {size}", len(intent.links), c["scenarios"], "", "",
                f"{seconds:.1f}", f"{c['scenarios'] / seconds:.0f}",
                f"{c['pair']} pairs: {c['pairs_implied']} implied, {c['pairs_replayed']} replayed; "
                f"{c['failing_scenarios']} failing (exhaustive)"
                + (f"; previous version: {prev:g} s, ratio {seconds / prev:.2f}; before: ~72 min" if prev else "")]
    single = list(singles(intent))
    implied = inert(rp, single)
    t_prune = time.perf_counter() - t0
    ii, jj = np.triu_indices(len(single), k=1)
    todo = np.flatnonzero(~(implied[ii, jj] | implied[jj, ii]))
    pick = np.random.default_rng(1).choice(todo, min(sample, len(todo)), replace=False)
    t0 = time.perf_counter()
    for k in pick.tolist():
        rp.run(pair(single[ii[k]], single[jj[k]]))
    rate = len(pick) / (time.perf_counter() - t0)
    ex = LocalExecutor()  # the same sample as loom check runs it: chunks on the executor's workers
    works = [Work(pairs=np.stack([ii[c], jj[c]], axis=1)) for c in np.array_split(pick, 8)]
    t0 = time.perf_counter()
    ex.map(rp, single, works)
    rate_ex = len(pick) / (time.perf_counter() - t0)
    est = t_prune + len(todo) / rate_ex
    return [f"pairs of singles Clos {size}", len(intent.links), len(ii), "", f"{t_prune:.1f} (pruning)",
            f"~{est / 60:.0f} min (est.)", f"{rate_ex:.0f}",
            f"{len(ii)} pairs: {len(ii) - len(todo)} implied, {len(todo)} to replay; estimate from "
            f"{len(pick)} sampled pairs on {ex.workers()} {ex.mode} ({rate:.0f}/s on one; before: ~72 min)"]


def executor_rows(size: str = "M") -> list[list[Any]]:
    """``all_single`` on ``size`` through the local executor and through a local Ray
    cluster of 2 CPUs: scenarios per second per worker, reports compared."""
    from safety.replay import Replayer
    from safety.sweep import LocalExecutor, RayExecutor, loopback_ray, sweep

    loopback_ray()
    import ray

    intent, plan, _ = planned(size)
    rp = Replayer(intent, plan)
    local_ex = LocalExecutor()
    t0 = time.perf_counter()
    local = sweep(intent, plan, scope="all_single", executor=local_ex, rp=rp)
    t_local = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    t_init = time.perf_counter() - t0
    try:
        ex = RayExecutor()
        t0 = time.perf_counter()
        remote = sweep(intent, plan, scope="all_single", executor=ex, rp=rp, chunk=256)
        t_ray = time.perf_counter() - t0
    finally:
        ray.shutdown()
    same = {**local.to_document(), "seconds": 0} == {**remote.to_document(), "seconds": 0}
    n = local.counts["scenarios"]
    return [[f"local executor Clos {size}", len(intent.links), n, "", "", f"{t_local:.1f}",
             f"{n / t_local:.0f} ({n / t_local / local_ex.workers():.0f} per worker, "
             f"{local_ex.workers()} {local_ex.mode})",
             "the reference"],
            [f"ray executor Clos {size}", len(intent.links), n, "", f"{t_init:.1f} (ray.init)", f"{t_ray:.1f}",
             f"{n / t_ray / ex.workers():.0f} per worker ({ex.workers()})",
             f"report {'identical to' if same else 'DIFFERS from'} the local executor's"]]


def robust_fabric(limit: float = 1.0, small_plane_spines: int = 2) -> Any:
    """Clos M with heterogeneous planes: plane 3 keeps ``small_plane_spines`` of its
    eight spines, ToR uplinks are 400 gbps, ``failure_tolerance: all_single`` at
    ``limit``. Losing one spine of the small plane halves it (with two left), so the
    robust split puts less into it than the min-MLU plan does, and the plain plan
    overloads it; losing a leaf or a whole plane bounds the limit from below at about
    0.9 (the others must carry the pod's traffic). Two spines, not four: with four
    the plain plan's violations come only from its choice among equally good min-MLU
    splits and robustness costs nothing (baseline MLU 0.577 -> 0.572 measured), so
    the case would not show the price; with two it is a real trade-off."""
    from controller.gen import clos_document
    from controller.model.intent import validate_intent

    doc = clos_document(pods=16, tors=16, planes=4, spines=8, seed=1)
    gone = {f"spine-3-{s}" for s in range(small_plane_spines, 8)}
    doc["devices"] = [d for d in doc["devices"] if d["name"] not in gone]
    doc["links"] = [x for x in doc["links"] if x["a"] not in gone and x["b"] not in gone]
    for x in doc["links"]:
        if x["a"].startswith("tor") or x["b"].startswith("tor"):
            x["capacity_gbps"] = 400.0
    ends = {f"{x[s]}:{x[s + '_port']}" for x in doc["links"] for s in ("a", "b")}
    domains = [dict(fd, devices=[d for d in fd.get("devices", []) if d not in gone],
                    links=[e for e in fd.get("links", []) if e in ends]) for fd in doc["failure_domains"]]
    doc["failure_domains"] = [fd for fd in domains if fd["devices"] or fd["links"]]
    doc["policies"] = [{"kind": "failure_tolerance", "scope": "all_single", "max_utilization": limit}]
    return validate_intent(doc)


def robust_row(limit: float = 1.0) -> list[Any]:
    from safety.replay import peaks
    from safety.scenarios import count_scenarios
    from solver import solve
    from solver.robust import solve_robust

    intent = robust_fabric(limit)
    plain = peaks(intent, solve(intent))
    t0 = time.perf_counter()
    plan = solve_robust(intent, peaks)
    seconds = time.perf_counter() - t0
    info = plan.summary.extra["robust"]
    result = (f"plain: {len(plain.violating)} scenarios over {limit:g}; robust: "
              + ("all hold" if info["robust"] else f"{info['violating_count']} over")
              + f"; baseline MLU {info['baseline_mlu_plain']:.3f} -> {info['baseline_mlu_robust']:.3f}"
              + f" (method {info['method']})")
    return [f"robust WCMP Clos M (limit {limit:g})", len(intent.links), count_scenarios(intent)["total"],
            "", "", f"{seconds:.1f}", "", result]


def run(args: Any) -> Table:
    table = Table(title="safety: every single link and device failure (2-core shared machine)")
    for col in ("case", "links", "scenarios", "plan s", "compile s", "replay/solve s", "scenarios/s", "result"):
        table.add_column(col, justify="left" if col in ("case", "result") else "right")
    table.add_row("replay kernels' one-time load", "", "", "", "", f"{warm_kernels():.2f}", "",
                  "numba: compiled on a machine's first run, else read from its cache; paid once per process, "
                  "outside the rows below")
    for size in _sizes(args):
        for row in replay_row(size):
            table.add_row(*(str(x) for x in row))
    if getattr(args, "pairs", True):
        if "S" in _sizes(args):
            table.add_row(*(str(x) for x in pairs_row("S")))
        if "M" in _sizes(args):
            sample = getattr(args, "pairs_sample", None)
            table.add_row(*(str(x) for x in pairs_row("M", sample=PAIRS_SAMPLE if sample is None else sample)))
            for row in executor_rows("M"):
                table.add_row(*(str(x) for x in row))
    if getattr(args, "robust", True) and "M" in _sizes(args):
        table.add_row(*(str(x) for x in robust_row()))
    return table


if __name__ == "__main__":
    import argparse

    from rich.console import Console

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="S,M")
    ap.add_argument("--no-robust", dest="robust", action="store_false")
    ap.add_argument("--no-pairs", dest="pairs", action="store_false")
    ap.add_argument("--pairs-sample", type=int, default=PAIRS_SAMPLE, help="pairs sampled on M; 0: every pair")
    Console().print(run(ap.parse_args()))
