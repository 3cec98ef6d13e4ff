"""Benchmark rows for the safety replay: every single link and device failure of
Clos fabrics (``make bench``; not part of the tests).

For each size (S, M, L as the solver's benchmark defines them: 5% of leaf-spine
links missing, 20% heterogeneous) it generates the fabric, plans it with the
solver, and replays every single link and device failure plus the declared
domains (``scope: all_single``), timing the compile of the plan (baseline
propagation included) apart from the scenarios. Also the robust WCMP case of
:mod:`solver.robust` on Clos M when that module is present.
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
    from controller.intent import validate_intent

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


def robust_row() -> list[Any] | None:
    try:
        from solver import robust
    except ImportError:
        return None
    res = robust.bench_case()
    return ["robust WCMP Clos M", res["links"], res["scenarios"], f"{res['seconds']:.1f}", "", "", "",
            res["summary"]]


def run(args: Any) -> Table:
    table = Table(title="safety: every single link and device failure (2-core shared machine)")
    for col in ("case", "links", "scenarios", "plan s", "compile s", "replay s", "scenarios/s", "result"):
        table.add_column(col, justify="left" if col in ("case", "result") else "right")
    for size in _sizes(args):
        table.add_row(*(str(x) for x in replay_row(size)))
    row = robust_row()
    if row is not None:
        table.add_row(*(str(x) for x in row))
    return table


if __name__ == "__main__":
    import argparse

    from rich.console import Console

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="S,M")
    Console().print(run(ap.parse_args()))
