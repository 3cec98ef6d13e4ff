"""Benchmark rows for the southbound transaction (``make bench``).

``clos3-small`` (12 nodes) and ``clos3-40`` (a generated 3-tier Clos of 40
nodes with two thin links): two intent changes, plain ECMP to WCMP
link-bandwidth and then a re-weighting (the heaviest demand halves, the
lightest doubles), each timed end to end from the new intent to every kernel
holding the plan's weights: solve, render, Prepare, Commit, read back until the
kernels agree, Confirm. Each is measured twice in the same run: with agents
that send FRR only the difference through ``vtysh``
(:mod:`southbound.device.frr_delta`), and, as the reference, with agents that run
``frr-reload.py`` on every device (``LOOM_FRR_DELTA=0``). Needs root and FRR;
the lab is torn down even when the push fails. ``200 dry agents``: one
transaction over 200 ``--dry-frr`` agents (each its own gRPC server and state
directory, in one child process) on unix sockets. Wall-clock seconds on the
machine at hand.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["run"]

COLUMNS = ("case", "devices", "total s", "solve s", "prepare s", "commit s", "verify s", "confirm s", "ok")


def _row(case: str, devices: int, total: float, solve: float | None, result: Any) -> list[str]:
    sec = result.seconds
    return [case, str(devices), f"{total:.2f}", "-" if solve is None else f"{solve:.2f}",
            *(f"{sec.get(s, 0.0):.2f}" for s in ("prepare", "commit", "verify", "confirm")),
            "yes" if result.ok else f"no: {result.error[:80]}"]


def dry_fleet_row(n: int = 200) -> list[str]:
    from southbound.driver import AgentDriver
    from southbound.transaction import commit
    from tests.component.test_transaction_dry import fabric_configs, spawn_fleet
    from tests.serving import stop_processes

    names = [f"sw{i:03d}" for i in range(n)]
    base = Path(tempfile.mkdtemp(prefix="loom-bench-fleet-"))
    fleet = spawn_fleet(base, names)
    try:
        async def go() -> list[str]:
            async with AgentDriver({m: f"unix:{base / m / 'agent.sock'}" for m in names}, timeout=60,
                                   commit_timeout=120) as drv:
                first = await commit(drv, fabric_configs(names, 1), confirm_within=120, verify_timeout=120)
                if not first.ok:
                    return _row(f"{n} dry agents (first push)", n, 0.0, None, first)
                t0 = time.perf_counter()
                r = await commit(drv, fabric_configs(names, 2), confirm_within=120, verify_timeout=120)
                return _row(f"{n} dry agents", n, time.perf_counter() - t0, None, r)

        return asyncio.run(go())
    finally:
        stop_processes([fleet], 30)
        shutil.rmtree(base, ignore_errors=True)


def clos3_40_doc(name: str) -> dict[str, Any]:
    """The generated 40-node 3-tier Clos (4 pods x 4 ToRs, 2 planes x 8 spines) with two thin leaf-spine
    links, so that its WCMP plan is not ECMP."""
    from labs.gen import clos3_document

    doc = clos3_document(name, pods=4, tors=4, planes=2, spines=8)
    for lk in doc["links"]:
        if (lk["a"], lk["b"]) in (("leaf-0-0", "spine-0-0"), ("leaf-1-1", "spine-1-3")):
            lk["capacity_gbps"] = 25.0
    return doc


def lab_rows(case: str = "clos3-small") -> list[list[str]]:
    from labs import runner
    from solver import solve
    from southbound.driver import AgentDriver
    from southbound.transaction import commit_plan
    from tests.lab.test_agent_lab import shifted_demand, wcmp_intent_doc, with_wcmp
    from tests.labkit import LabAgents, lab_up

    if os.geteuid() != 0 or not (runner.FRR_BIN / "zebra").exists():
        return [[f"{case} intent change", "-", "-", "-", "-", "-", "-", "-", "skipped: needs root and FRR"]]
    lab = "sbbench" if case == "clos3-small" else "sb40"
    doc = wcmp_intent_doc(lab) if case == "clos3-small" else clos3_40_doc(lab)
    base = Path(tempfile.mkdtemp(prefix="loom-bench-sb-"))
    nodes: list[str] = []
    agents = LabAgents(lab, nodes)
    try:
        topo = lab_up(base, lab, doc, timeout=300)
        nodes += [n.name for n in topo.nodes]
        agents.start_all()

        async def go() -> list[list[str]]:
            rows: list[list[str]] = []
            for delta in (False, True):  # the reference first: every device through frr-reload.py
                os.environ["LOOM_FRR_DELTA"] = "1" if delta else "0"
                agents.stop_all()
                agents.start_all()
                how = "difference through vtysh" if delta else "frr-reload.py (reference)"
                async with AgentDriver(agents.endpoints(), timeout=30, commit_timeout=120) as drv:
                    ecmp = with_wcmp(doc, enabled=False)
                    first = await commit_plan(drv, ecmp, solve(ecmp), confirm_within=120, verify_timeout=60)
                    if not first.ok:
                        rows.append(_row(f"{case}: ECMP baseline, {how}", len(nodes), 0.0, None, first))
                        continue
                    for what, target in (("ECMP to WCMP", doc), ("re-weight", shifted_demand(doc))):
                        t0 = time.perf_counter()
                        intent = with_wcmp(target, enabled=True, realization="link-bandwidth")
                        plan = solve(intent)
                        solved = time.perf_counter() - t0
                        r = await commit_plan(drv, intent, plan, confirm_within=120, verify_timeout=60,
                                              verify_interval=0.2)
                        rows.append(_row(f"{case}: {what} ({len(r.changed_devices())} devices change), {how}",
                                         len(nodes), time.perf_counter() - t0, solved, r))
            return rows

        return asyncio.run(go())
    finally:
        agents.stop_all()
        runner.down(lab, nodes)
        shutil.rmtree(base, ignore_errors=True)


def run(args: Any) -> Table:
    table = Table(title="southbound: one network-wide transaction (seconds)")
    for c in COLUMNS:
        table.add_column(c)
    for case in ("clos3-small", "clos3-40"):
        for row in lab_rows(case):
            table.add_row(*row)
    table.add_row(*dry_fleet_row())
    return table
