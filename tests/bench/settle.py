"""Benchmark rows for settling after faults: rounds of :mod:`tests.faults` on clos3-small (``make bench``).

More rounds than the lab test runs (``LOOM_FAULT_ROUNDS``, default 16, four of
each kind: agent SIGKILL, ``bgpd`` SIGKILL, controller SIGKILL, link down, at
a random moment of a commit, restarted 1 to 3 s later), seeded
(``LOOM_FAULT_SEED``) and logged. Per kind: how many rounds ended with every
device on the revision the change's final state names, how the changes ended,
how many rounds a settle document named unsettled devices on the way, in how
many a kernel was left off the plan (revisions are what is held), and the
seconds from the fault's end to a settled fabric (median and worst), beside
the reference measured in the same run: a clean commit of the same change
(the first commit of the lab's intent). Needs root and FRR.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table

__all__ = ["run"]


def run(args: Any) -> Table:
    from labs import runner
    from tests.faults import KINDS, FaultLab

    rounds_wanted = int(os.environ.get("LOOM_FAULT_ROUNDS", "16"))
    seed = int(os.environ.get("LOOM_FAULT_SEED") or random.SystemRandom().randrange(1 << 31))
    table = Table(title=f"settle: faults at a random moment of a commit on clos3-small (seed {seed}, "
                        f"{os.cpu_count()} shared cores)")
    for col in ("fault", "rounds", "settled", "outcomes", "unsettled on the way", "kernels off plan after",
                "settle s median", "settle s worst", "clean commit s (reference)"):
        table.add_column(col, justify="left" if col in ("fault", "outcomes") else "right")
    try:
        runner.check_prerequisites()
    except runner.LabPrerequisiteError as exc:
        table.add_row("skipped", "", "", str(exc), "", "", "", "", "")
        return table
    with tempfile.TemporaryDirectory(prefix="loom-bench-settle-") as tmp:
        lab = FaultLab(Path(tmp), seed, name="bsettle")
        kept = Path(tempfile.gettempdir()) / f"loom-bench-settle-{seed}"  # the rounds and the controller's log
        rounds = []
        try:
            lab.up()
            lab.run_rounds(KINDS, rounds_wanted, rounds)
        finally:
            lab.down()
            kept.mkdir(exist_ok=True)
            for name in ("rounds.jsonl", "serve.log"):
                if (lab.base / name).exists():
                    shutil.copyfile(lab.base / name, kept / name)
        table.caption = f"rounds and the controller's log kept in {kept}"
        for kind in KINDS:
            rs = [r for r in rounds if r.kind == kind]
            times = [r.settle_s for r in rs if r.ok]
            outcomes = Counter(r.state for r in rs)
            table.add_row(kind, str(len(rs)), f"{sum(r.ok for r in rs)}/{len(rs)}",
                          " ".join(f"{k}:{v}" for k, v in sorted(outcomes.items())),
                          str(sum(1 for r in rs if r.unsettled_seen)), str(sum(1 for r in rs if r.kernel_drift)),
                          f"{statistics.median(times):.1f}" if times else "-", f"{max(times):.1f}" if times else "-",
                          f"{lab.commit_estimate:.1f}")
        for r in rounds:
            if not r.ok:
                table.add_row(f"FAILED round {r.index}", r.kind, r.target, r.detail, "", "", "", "", "")
    return table
