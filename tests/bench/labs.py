"""Benchmark rows for lab bring-up: ``loom lab up`` to converged (``make bench``).

For the shipped ``clos3-small`` (12 nodes) and a generated 3-tier Clos of 40
nodes (4 pods x 4 ToRs, 2 planes x 8 spines), it brings the lab up in network
namespaces with real FRR, waits until every BGP session is established and
every prefix the solver expects is in every kernel, and reports the seconds
that took, the FRR daemons' resident memory per node and the time ``down``
takes. Each lab is torn down even when bring-up fails. Needs root and FRR.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["CASES", "run"]

REPO = Path(__file__).resolve().parents[2]
#: name -> None (a shipped lab) or the clos3_document arguments of a generated one
CASES: dict[str, dict[str, int] | None] = {
    "clos3-small": None,
    "clos3-40": {"pods": 4, "tors": 4, "planes": 2, "spines": 8},
}


def lab_row(name: str, spec: dict[str, int] | None, workdir: Path) -> list[Any]:
    from controller.cli.lab import expected_prefixes
    from controller.model.intent import validate_intent
    from labs import runner
    from labs.clab import load_topology
    from labs.gen import clos3_document, generate_lab

    if spec is None:
        path = REPO / "labs" / name
    else:
        path = workdir / name
        generate_lab(validate_intent(clos3_document(name, **spec)), path)
    topo = load_topology(path)
    nodes = [n.name for n in topo.nodes]
    try:
        report = runner.up(topo, expected=expected_prefixes(path), timeout=180)
        memory = runner.memory_per_node(topo.name)
    finally:
        t0 = time.monotonic()
        runner.down(topo.name, nodes)
        t_down = time.monotonic() - t0
    est, total = report.sessions
    mb = sum(memory.values()) / max(1, len(memory)) / 2**20
    return [name, len(topo.nodes), len(topo.links), f"{est}/{total}", f"{report.routes}/{report.expected_routes}",
            f"{report.seconds:.1f}" + ("" if report.converged else " (NOT converged)"), f"{mb:.1f}",
            f"{t_down:.1f}"]


def run(args: Any) -> Table:
    """The lab bring-up table (``args`` unused beyond an optional ``labs`` list)."""
    table = Table(title="labs: loom lab up to converged, real FRR in namespaces (2-core shared machine)")
    for col in ("lab", "nodes", "links", "sessions", "routes", "seconds to converged", "MB per node", "down s"):
        table.add_column(col, justify="left" if col == "lab" else "right")
    from labs import runner

    try:
        runner.check_prerequisites()
    except runner.LabPrerequisiteError as exc:
        table.add_row("skipped", "", "", "", "", str(exc), "", "")
        return table
    wanted = getattr(args, "labs", None) or list(CASES)
    with tempfile.TemporaryDirectory(prefix="loom-bench-labs-") as tmp:
        for name in wanted:
            if name in CASES:
                table.add_row(*[str(c) for c in lab_row(name, CASES[name], Path(tmp))])
    return table


if __name__ == "__main__":
    from rich.console import Console

    os.environ.setdefault("COLUMNS", "140")
    Console().print(run(None))
