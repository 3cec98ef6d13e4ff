"""``make bench`` closed loop: what an ML job's what-if costs on Clos M, and the closed loop in a lab.

**What-if** (any machine): the bench fabric M (352 devices, uniform demand at 0.9 of
ECMP) plus one job, as ``POST /v1/jobs/what-if`` answers it (:func:`controller.workflow.jobs.what_if`:
compile, then replay every failure scenario), beside the same compile with the
previous default (ToR capacity rows added lazily round by round, ``tor_rows_at=inf``)
measured in the same run.

**Closed loop** (root with FRR, as the lab tests): clos3-hosts with two half-capacity
ToR uplinks and ``auto_te`` (interval 3 s, window 4 s, mean, headroom 1.1, min_gain
0.05, two confirmations); skewed UDP traffic from the hosts; the time from the
traffic shift (or from the resume, for the first) to the committed re-tuning, and
the busiest link's observed utilization (counters, 4 s window) under the plan
before and after, beside what the trigger predicted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["run"]


def _whatif_rows() -> list[list[str]]:
    from ortools.linear_solver.python import model_builder  # noqa: F401  (a one-time import)

    from controller.gen import clos_document
    from controller.model.intent import validate_intent
    from controller.planning import compile_plan
    from controller.workflow.jobs import what_if
    from solver.core.options import ClosOptions
    from solver.solve import solve

    doc = clos_document(pods=16, tors=16, planes=4, spines=8, seed=1, missing=0.05, hetero=0.2, demand="uniform",
                        load=0.9, max_ecmp_entries=128)
    tors = [d["name"] for d in doc["devices"] if d["role"] == "tor"]
    intent = validate_intent(doc)
    compile_plan(intent)  # warm
    jobs = {"ring all-reduce, 16 ToRs (one per pod)": {"collective": "ring_allreduce", "tors": tors[::16][:16]},
            "all-to-all, 4 ToRs": {"collective": "all_to_all", "tors": tors[:64:16]},
            "pipeline, 8 stages": {"collective": "pipeline", "tors": tors[::32][:8]}}
    rows = []
    for label, spec in jobs.items():
        job = {"name": "bench", "bytes_per_iter": 4e10, "iter_s": 1.0, **spec}
        t0 = time.perf_counter()
        ans = what_if(intent, job)
        total = time.perf_counter() - t0
        with_job = validate_intent({**doc, "jobs": [job]})
        t0 = time.perf_counter()
        plan = compile_plan(with_job)
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        lazy = solve(with_job, options=ClosOptions(tor_rows_at=float("inf")))
        lazy_s = time.perf_counter() - t0
        rows.append([label, f"{total:.2f}", f"{compile_s:.2f}", f"{lazy_s:.2f}",
                     f"{plan.summary.max_utilization:.4f}", f"{lazy.summary.max_utilization:.4f}",
                     f"{plan.summary.lp_bound:.4f}", ans.verdict])
    return rows


def _lab_rows() -> list[list[str]] | str:
    if os.geteuid() != 0 or shutil.which("zebra") is None and not Path("/usr/lib/frr/zebra").exists():
        return "skipped: the closed-loop lab needs root and FRR (make test installs them)"
    from labs import runner
    from tests.lab.test_closed_loop_lab import WINDOW_S, A, B, Lab, committed_after

    rows: list[list[str]] = []
    base = Path(tempfile.mkdtemp(prefix="loom-bench-cl-"))
    lab = Lab(base)
    try:
        report = runner.up(lab.topo, timeout=90)
        if not report.converged:
            return f"the lab did not converge: {report.problems}"
        lab.server.start()
        lab.server("POST", "/v1/auto-te/pause", json={"reason": "bench set-up"})
        lab.apply(lab.doc)
        known: set[int] = set()
        for label, matrix, resume in (("A (from resume)", A, True), ("A -> B (from the shift)", B, False)):
            lab.traffic.run(matrix)
            time.sleep(WINDOW_S + 3)
            before = lab.observed_mlu()
            t0 = time.monotonic()
            if resume:
                lab.server("POST", "/v1/auto-te/resume")
            ch = committed_after(lab, known)
            took = time.monotonic() - t0 + (0 if resume else WINDOW_S + 3)
            known.add(ch["id"])
            time.sleep(WINDOW_S + 2)
            after = lab.observed_mlu()
            t = ch["trigger"]
            rows.append([label, f"{took:.1f}", f"{before:.3f}", f"{after:.3f}",
                         f"{t['active_predicted'] / t['headroom']:.3f}",
                         f"{t['candidate_predicted'] / t['headroom']:.3f}", f"{t['gain']:.3f}"])
    finally:
        lab.traffic.stop()
        lab.server.stop()
        runner.down(lab.topo.name, [n.name for n in lab.topo.nodes])
        shutil.rmtree(base, ignore_errors=True)
    return rows


def run(args: Any = None) -> list[Table]:
    out: list[Table] = []
    t = Table(title="jobs what-if on Clos M (352 devices; compile + replay of every scenario), beside the "
                    "previous default (lazy ToR rows) in the same run")
    for col in ("job", "what-if s", "compile s", "compile s, lazy rows (before)", "planned MLU",
                "MLU, lazy rows", "LP bound", "verdict"):
        t.add_column(col, justify="left" if col in ("job", "verdict") else "right")
    for row in _whatif_rows():
        t.add_row(*row)
    out.append(t)
    lab = _lab_rows()
    if isinstance(lab, str):
        out.append(Table(title=f"closed loop in the lab: {lab}"))
    else:
        t = Table(title="closed loop in the lab (clos3-hosts, two half uplinks; auto_te every 3 s on a 4 s window, "
                        "2 confirmations): time to the committed re-tuning, busiest link before and after")
        for col in ("traffic", "to commit s", "observed MLU before", "observed after", "predicted before",
                    "predicted after", "predicted gain (x1.1)"):
            t.add_column(col, justify="left" if col == "traffic" else "right")
        for row in lab:
            t.add_row(*row)
        out.append(t)
    return out
