"""Benchmark rows for staged transitions: the time to schedule a change on Clos M and L
(``make bench``; not part of the tests).

Two changes per size (the fabrics of :mod:`tests.bench.safety`): the drain of a spine
(the plan re-solved with the drain) and a re-weighting of every group (each group's
weights moved by up to a third, seeded). Each row times the transition's compile
(both plans into mixed-state arrays) and the schedule, and prints beside them, measured
in the same run, the reference: compiling the proposed plan for the safety replay and
propagating its baseline once (what one full replay of the plan costs before any
scenario), and the stages, how they were checked and the worst utilization reached.
"""

from __future__ import annotations

import random
import time
from typing import Any

from rich.table import Table

__all__ = ["run"]


def _sizes(args: Any) -> list[str]:
    raw = getattr(args, "sizes", None) or "M,L"
    return [s.strip().upper() for s in raw.split(",") if s.strip().upper() in ("S", "M", "L")]


def reweighted(plan: Any, seed: int = 7) -> Any:
    """``plan`` with every group's weights moved by up to a third (at least 1)."""
    from controller.model.plan import DevicePlan, NextHop, Plan

    rng = random.Random(seed)
    devices = {}
    for name, dp in sorted(plan.devices.items()):
        groups = {g: tuple(NextHop(h.port, h.neighbor, max(1, h.weight + rng.randint(-(h.weight // 3), h.weight // 3)))
                           for h in hops) for g, hops in sorted(dp.groups.items())}
        devices[name] = DevicePlan(groups, dict(dp.routes))
    return Plan(plan.fabric, plan.summary, devices, plan.links)


def rows(size: str) -> list[list[Any]]:
    from controller.model.intent import validate_intent
    from safety.replay import Replayer
    from safety.transition import Transition, schedule
    from solver import solve
    from tests.bench.safety import fabric

    intent = fabric(size)
    plan = solve(intent)
    doc = intent.to_document()
    doc["policies"] = [*doc["policies"], {"kind": "drain", "target": "spine-0-0"}]
    drained = validate_intent(doc)
    changes = [("drain spine-0-0", drained, solve(drained)), ("re-weight every group", intent, reweighted(plan))]
    out = []
    for name, new_intent, new_plan in changes:
        t0 = time.perf_counter()
        Replayer(new_intent, new_plan)
        t_ref = time.perf_counter() - t0
        t0 = time.perf_counter()
        tr = Transition(intent, plan, new_intent, new_plan)
        t_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        sched = schedule(intent, plan, new_intent, new_plan)
        t_sched = time.perf_counter() - t0
        doc_s = sched.to_document()
        methods = ",".join(sorted({c["method"] for c in doc_s["checks"]}))
        result = (f"{len(doc_s['stages'])} stage(s) [{', '.join(str(len(s['devices'])) for s in doc_s['stages'])}"
                  f" devices], {doc_s['intermediate_plans']} intermediate, by {methods}, worst "
                  f"{max((s['worst_utilization'] or 0.0 for s in doc_s['stages']), default=0):.3f} "
                  f"(limit {doc_s['limit']:g}){'' if doc_s['safe'] else ', NO SAFE ORDER'}")
        out.append([f"Clos {size}: {name}", len(intent.links), len(tr.devices), f"{t_ref:.2f}", f"{t_compile:.2f}",
                    f"{t_sched:.2f}", result])
    return out


def run(args: Any) -> Table:
    table = Table(title="transition: scheduling a change (2-core shared machine)")
    for col in ("case", "links", "devices moving", "ref: replay compile+baseline s", "transition compile s",
                "schedule s", "schedule"):
        table.add_column(col, justify="left" if col in ("case", "schedule") else "right")
    for size in _sizes(args):
        for r in rows(size):
            table.add_row(*(str(x) for x in r))
    return table


if __name__ == "__main__":
    import argparse

    from rich.console import Console

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="M,L")
    Console().print(run(ap.parse_args()))
