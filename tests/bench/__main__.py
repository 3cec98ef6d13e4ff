"""The ``make bench`` driver: run benchmark sections and print their tables.

Usage: ``python -m tests.bench [SECTION ...] [--sizes S,M,L,XL] [--backend auto]
[--repetita all|none|NAME,...] [--repetita-dir DIR ...] [--topologies all|none|NAME,...]
[--budgets 128,64] [--pairs-sample N] [--executor-sample N]``.
Sections: solver, safety, executors, transition, labs, southbound, telemetry, patterns, closed_loop, api, reaction,
settle, ha, store_ha, placement, jobs_objective, idle (those whose module exists).
Timings are wall clock on the machine at hand; print them beside the machine's core count.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

SECTIONS = ("solver", "safety", "executors", "transition", "labs", "southbound", "telemetry", "patterns",
            "closed_loop", "api", "reaction", "settle", "ha", "store_ha", "placement", "jobs_objective", "idle")


def _print(console: Console, name: str, result: Any) -> None:
    if isinstance(result, Table):
        console.print(result)
    elif isinstance(result, (list, tuple)) and result and all(isinstance(x, Table) for x in result):
        for t in result:
            console.print(t)
    elif isinstance(result, (list, tuple)):
        table = Table(title=name)
        rows = [r if isinstance(r, (list, tuple)) else [r] for r in result]
        for i in range(max((len(r) for r in rows), default=0)):
            table.add_column(str(i))
        for r in rows:
            table.add_row(*(str(x) for x in r))
        console.print(table)
    else:
        console.print(str(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("sections", nargs="*", help=f"sections to run (default: all of {', '.join(SECTIONS)})")
    parser.add_argument("--sizes", default=None, help="Clos sizes, e.g. S,M,L,XL (default per section)")
    parser.add_argument("--backend", default="auto", help="LP backend for the solver")
    parser.add_argument("--repetita", default="all", help="Repetita networks: all, none, or NAME,NAME")
    parser.add_argument("--repetita-dir", action="append", default=None, metavar="DIR",
                        help="a folder of Repetita .graph and .0000.demands files, e.g. a checkout's "
                             "data/2016TopologyZooUCL_inverseCapacity (repeat for more; "
                             "default ../shared/bench/repetita)")
    parser.add_argument("--topologies", default="all",
                        help="solver: the general topologies of ../shared/bench/topologies: all (Kdl, ASN2k), "
                             "none, or NAME,NAME")
    parser.add_argument("--budgets", default="128,64", help="max_ecmp_entries values for the Clos rows")
    parser.add_argument("--pairs-sample", type=int, default=None, metavar="N",
                        help="safety: pairs of single failures of Clos M replayed to estimate the sweep (default "
                             "2,000, tests.bench.safety.PAIRS_SAMPLE); "
                             "0 replays every pair (exhaustive, minutes)")
    parser.add_argument("--executor-sample", type=int, default=None, metavar="N",
                        help="executors: pairs of single failures of Clos L swept by each executor (default "
                             "100,000, tests.bench.executors.SAMPLE)")
    args = parser.parse_args(argv)
    console = Console(width=220) if not sys.stdout.isatty() else Console()
    console.print(f"loom bench on {os.cpu_count()} cores (shared machine: timings are indicative)")
    wanted = args.sections or list(SECTIONS)
    status = 0
    for name in wanted:
        if name not in SECTIONS:
            console.print(f"[red]unknown section {name!r}[/]")
            status = 2
            continue
        try:
            module = importlib.import_module(f"tests.bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tests.bench.{name}":
                console.print(f"[dim]{name}: no benchmark module yet[/]")
                continue
            raise
        t0 = time.perf_counter()
        _print(console, name, module.run(args))
        console.print(f"[dim]{name}: {time.perf_counter() - t0:.1f} s[/]")
    return status


if __name__ == "__main__":
    sys.exit(main())
