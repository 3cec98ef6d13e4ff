"""Bench section ``jobs_objective``: ``auto_te`` ``objective: jobs`` against ``objective: mlu`` (#34 item 4).

Clos S (4 pods of 8 ToRs, 4 planes of 4 spines) and Clos M (16 pods of 16 ToRs, 4 planes of 8 spines), each with
even leaf-spine capacities and with 30 % of them halved or doubled (``hetero``), a gravity background demand
(ECMP's maximum utilization scaled to 0.6) and five generated jobs (8 members each, ring all-reduce, all-to-all and
pipeline in turn, priorities 1, 2 and 4, 10 Gb per iteration of one second; their members drawn from the whole
fabric with a fixed seed). Per fabric, the two objectives side by side: the worst priority-weighted predicted
slowdown (:func:`controller.jobplan.worst_slowdown`: 1 plus the priority times the slowdown beyond 1), the worst
plain slowdown, the plan's maximum utilization and the compile seconds. The reference, the ``mlu`` plan, is
compiled in the same run. Wall clock on the machine at hand.
"""

from __future__ import annotations

import random
import time
from typing import Any

from rich.table import Table

from controller.gen import clos_document
from controller.jobplan import job_times, worst_slowdown
from controller.model.intent import validate_intent
from controller.planning import compile_plan

GB = 1e9 / 8
FABRICS = {"S": (4, 8, 4, 4), "M": (16, 16, 4, 8)}


def fabric(size: str, objective: str, hetero: float = 0.0) -> dict[str, Any]:
    pods, tors, planes, spines = FABRICS[size]
    doc = clos_document(pods=pods, tors=tors, planes=planes, spines=spines, seed=7, demand="gravity", load=0.6,
                        hetero=hetero)
    rng = random.Random(7)
    names = [d["name"] for d in doc["devices"] if d["role"] == "tor"]
    collectives = ("ring_allreduce", "all_to_all", "pipeline")
    doc["jobs"] = [{"name": f"job{k}", "tors": rng.sample(names, 8), "collective": collectives[k % 3],
                    "bytes_per_iter": 10 * GB, "iter_s": 1.0, "priority": (1, 2, 4)[k % 3]} for k in range(5)]
    doc["policies"].append({"kind": "auto_te", "enabled": False, "objective": objective})
    return doc


def run(args: Any) -> Table:
    sizes = [s for s in (args.sizes.split(",") if args.sizes else ["S", "M"]) if s in FABRICS]
    table = Table(title="auto_te objective: jobs against mlu (five jobs, predicted per iteration)")
    for col in ("fabric", "objective", "worst weighted slowdown", "worst slowdown", "max utilization",
                "compile s"):
        table.add_column(col)
    for size in sizes:
        for hetero, objective in ((h, o) for h in (0.0, 0.3) for o in ("mlu", "jobs")):
            intent = validate_intent(fabric(size, objective, hetero))
            t0 = time.perf_counter()
            plan = compile_plan(intent)
            seconds = time.perf_counter() - t0
            times = job_times(intent, plan)
            label = f"Clos {size}" + (f" hetero {hetero:g}" if hetero else "")
            table.add_row(label, objective, f"{worst_slowdown(times):.4f}",
                          f"{max(t.slowdown for t in times.values()):.4f}",
                          f"{plan.summary.max_utilization:.4f}", f"{seconds:.2f}")
    return table
