"""Benchmark rows for the southbound transaction (``make bench``).

``clos3-small``: two intent changes (plain ECMP to WCMP link-bandwidth on the
skewed clos3-small fabric of the lab tests, then a re-weighting for 1.3 times
the demand) timed end to end from the new intent to every kernel holding the
plan's weights: solve, render, Prepare, Commit, read back until the kernels
agree, Confirm. Each is measured twice in the same run: with agents that send
FRR only the difference through ``vtysh`` (:mod:`southbound.frr_delta`), and,
as the reference, with agents that run ``frr-reload.py`` on every device
(``LOOM_FRR_DELTA=0``). Needs root and FRR; the
lab is torn down even when the push fails. ``200 dry agents``: one
transaction over 200 ``--dry-frr`` agents (each its own gRPC server and state
directory, in one child process) on unix sockets. Wall-clock seconds on the
machine at hand.
"""

from __future__ import annotations

import asyncio
import json
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


def lab_rows() -> list[list[str]]:
    from labs import runner
    from solver import solve
    from southbound.driver import AgentDriver
    from southbound.transaction import commit_plan
    from tests.test_agent_lab import LabAgents, bring_up, with_wcmp

    if os.geteuid() != 0 or not (runner.FRR_BIN / "zebra").exists():
        return [["clos3-small intent change", "-", "-", "-", "-", "-", "-", "-", "skipped: needs root and FRR"]]
    lab = "sbbench"
    base = Path(tempfile.mkdtemp(prefix="loom-bench-sb-"))
    nodes: list[str] = []
    agents = LabAgents(lab, nodes)
    try:
        topo, doc = bring_up(base, lab)
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
                        rows.append(_row(f"ECMP baseline, {how}", len(nodes), 0.0, None, first))
                        continue
                    t0 = time.perf_counter()
                    wcmp = with_wcmp(doc, enabled=True, realization="link-bandwidth")
                    plan = solve(wcmp)
                    solved = time.perf_counter() - t0
                    r = await commit_plan(drv, wcmp, plan, confirm_within=120, verify_timeout=60,
                                          verify_interval=0.2)
                    rows.append(_row(f"ECMP to WCMP, {how}", len(nodes), time.perf_counter() - t0, solved, r))
                    t0 = time.perf_counter()
                    heavier = json.loads(json.dumps(doc))
                    for d in heavier.get("demands", []):
                        d["gbps"] = round(float(d["gbps"]) * 1.3, 3)
                    skewed = with_wcmp(heavier, enabled=True, realization="link-bandwidth")
                    plan2 = solve(skewed)
                    solved = time.perf_counter() - t0
                    r = await commit_plan(drv, skewed, plan2, confirm_within=120, verify_timeout=60,
                                          verify_interval=0.2)
                    rows.append(_row(f"re-weight (demand x1.3), {how}", len(nodes), time.perf_counter() - t0,
                                     solved, r))
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
    for row in lab_rows():
        table.add_row(*row)
    table.add_row(*dry_fleet_row())
    return table
