"""Benchmark rows for the southbound transaction (``make bench``).

Two rows. ``clos3-small``: an intent change (plain ECMP to WCMP link-bandwidth
on the skewed clos3-small fabric of the lab tests) timed end to end from the
new intent to every kernel holding the plan's weights: solve, render, Prepare,
Commit, read back until the kernels agree, Confirm. Needs root and FRR; the
lab is torn down even when the push fails. ``200 dry agents``: one
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
    from tests.serving import stop_processes
    from tests.test_transaction_dry import fabric_configs, spawn_fleet

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


def lab_row() -> list[str]:
    from labs import runner
    from solver import solve
    from southbound.driver import AgentDriver
    from southbound.transaction import commit_plan
    from tests.test_agent_lab import LabAgents, bring_up, with_wcmp

    if os.geteuid() != 0 or not (runner.FRR_BIN / "zebra").exists():
        return ["clos3-small intent change", "-", "-", "-", "-", "-", "-", "-", "skipped: needs root and FRR"]
    lab = "sbbench"
    base = Path(tempfile.mkdtemp(prefix="loom-bench-sb-"))
    nodes: list[str] = []
    agents = LabAgents(lab, nodes)
    try:
        topo, doc = bring_up(base, lab)
        nodes += [n.name for n in topo.nodes]
        agents.start_all()

        async def go() -> list[str]:
            async with AgentDriver(agents.endpoints(), timeout=30, commit_timeout=120) as drv:
                ecmp = with_wcmp(doc, enabled=False)
                first = await commit_plan(drv, ecmp, solve(ecmp), confirm_within=120, verify_timeout=60)
                if not first.ok:
                    return _row("clos3-small (ECMP baseline)", len(nodes), 0.0, None, first)
                t0 = time.perf_counter()
                wcmp = with_wcmp(doc, enabled=True, realization="link-bandwidth")
                plan = solve(wcmp)
                solved = time.perf_counter() - t0
                r = await commit_plan(drv, wcmp, plan, confirm_within=120, verify_timeout=60, verify_interval=0.2)
                return _row("clos3-small intent change to kernel weights", len(nodes), time.perf_counter() - t0,
                            solved, r)

        return asyncio.run(go())
    finally:
        agents.stop_all()
        runner.down(lab, nodes)
        shutil.rmtree(base, ignore_errors=True)


def run(args: Any) -> Table:
    table = Table(title="southbound: one network-wide transaction (seconds)")
    for c in COLUMNS:
        table.add_column(c)
    table.add_row(*lab_row())
    table.add_row(*dry_fleet_row())
    return table
