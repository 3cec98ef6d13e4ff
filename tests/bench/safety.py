"""Benchmark rows for the safety replay: every single link and device failure of
Clos fabrics (``make bench``; not part of the tests).

For each size (S, M, L as the solver's benchmark defines them: 5% of leaf-spine
links missing, 20% heterogeneous) it generates the fabric, plans it with the
solver, and replays every single link and device failure plus the declared
domains (``scope: all_single``), timing the compile of the plan (baseline
propagation included) apart from the scenarios. With M among the sizes, also
the robust WCMP case of :mod:`solver.robust` (:func:`robust_fabric`): the
plain plan's violating scenarios, the robust plan's, the seconds and the
baseline price.
"""

from __future__ import annotations

import time
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


def replay_row(size: str) -> list[Any]:
    from safety.replay import Replayer
    from safety.scenarios import scenarios
    from solver import solve

    intent = fabric(size)
    t0 = time.perf_counter()
    plan = solve(intent)
    t_plan = time.perf_counter() - t0
    t0 = time.perf_counter()
    rp = Replayer(intent, plan)
    t_compile = time.perf_counter() - t0
    todo = list(scenarios(intent))
    t0 = time.perf_counter()
    failing = 0
    for sc in todo:
        failing += not rp.run(sc).ok
    t_replay = time.perf_counter() - t0
    return [f"replay Clos {size}", len(intent.links), len(todo), f"{t_plan:.1f}", f"{t_compile:.2f}",
            f"{t_replay:.2f}", f"{len(todo) / t_replay:.0f}", f"{failing} failing"]


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
    for size in _sizes(args):
        table.add_row(*(str(x) for x in replay_row(size)))
    if getattr(args, "robust", True) and "M" in _sizes(args):
        table.add_row(*(str(x) for x in robust_row()))
    return table


if __name__ == "__main__":
    import argparse

    from rich.console import Console

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="S,M")
    ap.add_argument("--no-robust", dest="robust", action="store_false")
    Console().print(run(ap.parse_args()))
