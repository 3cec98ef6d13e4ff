"""Benchmark tables of what an idle controller costs (``make bench`` section ``idle``).

**A look at the store after a sleep.** The commit queue's look (:func:`controller.store.workflow_repo.
committing_change` in a session of its own, on SQLite), timed in CPU seconds of its thread: hot (looked at again
at once, the reference) and after 0.1 to 5 s asleep. On this machine (a VM) a thread that wakes after a sleep
pays for the memory it touches again, up to about a hundred times the hot cost, which is what a polling loop pays
at every turn; the last column is that loop's share of a core at the interval.

**An idle ``loom serve``** on SQLite with the example fabric and no agents: its CPU over 30 s once started,
beside a Python process that only sleeps in the same 30 s (the floor).

Wall-clock and CPU figures on a shared machine: indicative.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table

from controller.store import workflow_repo as wrepo
from tests.apps import seeded_store
from tests.serving import LoomServer

GAPS = (0.1, 0.5, 2.0, 5.0)
IDLE_S = 30.0


def _cpu_of(fn: Callable[[], object]) -> float:
    t = time.thread_time()
    fn()
    return time.thread_time() - t


def _look_table() -> Table:
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        db, _ = seeded_store(f"sqlite:///{Path(tmp) / 'idle.db'}")

        def look() -> None:
            with db.session() as s:
                wrepo.committing_change(session=s)
        try:
            for _ in range(5):
                look()
            hot = sorted(_cpu_of(look) for _ in range(21))[10]
            rows = []
            for gap in GAPS:
                xs = []
                for _ in range(3 if gap >= 2 else 7):
                    time.sleep(gap)
                    xs.append(_cpu_of(look))
                cold = sorted(xs)[len(xs) // 2]
                rows.append((gap, cold))
        finally:
            db.dispose()
    table = Table(title="the commit queue's look at the store, CPU of its thread (median)")
    for col in ("asleep before (s)", "CPU of the look (ms)", "hot look, reference (ms)", "x hot",
                "a loop at that interval (share of a core)"):
        table.add_column(col, justify="right")
    for gap, cold in rows:
        table.add_row(f"{gap:g}", f"{cold * 1e3:.2f}", f"{hot * 1e3:.2f}", f"{cold / hot:.0f}",
                      f"{cold / gap:.1%}")
    return table


def _ticks(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _idle_server_table() -> Table:
    with tempfile.TemporaryDirectory() as tmp:
        server = LoomServer(Path(tmp), ["--example", "--db", f"sqlite:///{Path(tmp) / 'loom.db'}"],
                            "Zq8-" + secrets.token_urlsafe(32), cwd=Path(tmp))
        floor = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({IDLE_S + 15})"])
        try:
            server.start()
            assert server.proc is not None
            time.sleep(10)  # the startup's own work done
            t0 = (_ticks(server.proc.pid), _ticks(floor.pid))
            time.sleep(IDLE_S)
            served, slept = _ticks(server.proc.pid) - t0[0], _ticks(floor.pid) - t0[1]
        finally:
            server.stop()
            floor.terminate()
            floor.wait(30)
    table = Table(title=f"an idle process over {IDLE_S:g} s: CPU")
    for col in ("process", "CPU (s)", "share of a core"):
        table.add_column(col, justify="right")
    table.add_row("loom serve, SQLite, example fabric, no agents", f"{served:.2f}", f"{served / IDLE_S:.1%}")
    table.add_row("python sleeping (reference)", f"{slept:.2f}", f"{slept / IDLE_S:.1%}")
    return table


def run(_args: Any) -> list[Table]:
    return [_look_table(), _idle_server_table()]
