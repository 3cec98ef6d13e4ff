"""Bench section ``placement``: where to put a job (``POST /v1/jobs/placement``) on Clos M.

Clos M (16 pods of 16 ToRs, 4 planes of 8 spines) with its generated demand and
five declared 8-member ring all-reduce jobs (each across two pods, 40 gbps of
buffer per second). A new 8-member job chooses among 32 candidate ToRs (4 in
each even pod). Per collective (a ring, order-sensitive; an all-to-all,
order-free), the row gives the search's kind, the placements it scored, the
seconds of the ranking under the active plan (the routing matrix of the
candidates included), and the whole answer's seconds with the three best
placements each planned and replayed. A second search from every start (the 8
pods with candidates and a greedy chain from each of the 32 candidates, against
the default 4 pods and 16 chains) says whether more starts find a better
placement (``same`` when the best is the same). Wall clock on the machine at
hand.
"""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

from controller.gen import clos_document
from controller.model.intent import validate_intent
from controller.model.placement import validate_placement
from controller.planning import compile_plan
from controller.telemetry.placement import PlacementOptions, rank
from controller.workflow.jobs import placement

GB = 1e9 / 8
CANDIDATES = [f"tor-{p}-{t}" for p in range(0, 16, 2) for t in (8, 9, 10, 11)]


def fabric() -> dict[str, Any]:
    doc = clos_document(pods=16, tors=16, planes=4, spines=8)  # Clos M
    doc["jobs"] = [{"name": f"j{k}", "tors": [f"tor-{pod}-{t}" for pod in (k, k + 8) for t in range(4)],
                    "collective": "ring_allreduce", "bytes_per_iter": 40 * GB, "iter_s": 1.0} for k in range(5)]
    return doc


def row(intent: Any, plan: Any, collective: str) -> list[str]:
    body = {"job": {"name": "new", "members": 8, "collective": collective, "bytes_per_iter": 50 * GB,
                    "iter_s": 1.0}, "candidates": CANDIDATES}
    request = validate_placement(body, intent)
    t0 = time.perf_counter()
    ranked = rank(intent, plan, request.job, request.candidates, limit=1)
    search_s = time.perf_counter() - t0
    more = rank(intent, plan, request.job, request.candidates, limit=1, options=PlacementOptions(starts=8, chains=32))
    better = "same" if more.placements[0].key >= ranked.placements[0].key else \
        f"{more.placements[0].key[0] / ranked.placements[0].key[0]:.3f}x"
    t0 = time.perf_counter()
    answer = placement(intent, plan, request)
    total_s = time.perf_counter() - t0
    best = answer.placements[0]
    return [collective, ranked.search, f"{ranked.evaluated:,}", f"{search_s:.2f}", better, f"{total_s:.1f}",
            f"{best.comm_s:.4f}", "-" if best.max_slowdown_others is None else f"{best.max_slowdown_others:.3f}"]


def run(args: Any) -> Table:
    intent = validate_intent(fabric())
    plan = compile_plan(intent)
    table = Table(title="placement: Clos M, 5 jobs, 32 candidate ToRs, an 8-member job (shared machine)")
    for col in ("collective", "search", "scored", "ranking s", "all starts", "answer s (3 what-ifs)", "best comm s",
                "others' slowdown"):
        table.add_column(col)
    for collective in ("ring_allreduce", "all_to_all"):
        table.add_row(*row(intent, plan, collective))
    return table
