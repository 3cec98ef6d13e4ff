"""Bench section ``patterns``: the traffic pattern classifier's confusion table.

For each pattern, ``CASES`` random synthetic cases on a fabric of ``TORS`` ToRs:
one group of random size 3-8 on random ToRs (a job of the pattern with
periodic on/off rates for the collectives, random period and phase; for
``background``, gravity traffic among the group with lognormal masses), a
second job of a random other collective on other ToRs, gravity background
everywhere at a random share of the job's rate, and multiplicative noise of
random level (5-25 %) per interval. The predicted class of a case is the
pattern of the group found with the most members in common with the truth
(``background`` when none). Accuracy per class, the share of cases whose group
also has exactly the true members (for ``background``: the true gravity ToRs
inside the one background group), and the classifier's time per case (30
intervals) are printed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.table import Table

from controller.telemetry.patterns import PATTERNS, classify
from tests.pattern_synth import Job, background, synth

CASES = 50
TORS = 32
_JOBS = ("ring_allreduce", "all_to_all", "pipeline", "incast")


def case(pattern: str, seed: int) -> tuple[str, bool, float]:
    """(predicted class, whether that group's members are exactly the truth's, seconds to classify)
    of one random case of ``pattern``."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(3, 9))
    perm = [int(x) for x in rng.permutation(TORS)]
    members, other = tuple(perm[:size]), tuple(perm[size:size + int(rng.integers(3, 9))])
    gbps = float(rng.uniform(2.0, 20.0))
    jobs = [Job(str(rng.choice([p for p in _JOBS if p != "incast"])), other, float(rng.uniform(2.0, 20.0)),
                period=int(rng.integers(3, 8)), phase=int(rng.integers(0, 8)))]
    bg = background(rng, TORS, gbps * float(rng.uniform(0.5, 3.0)))
    if pattern == "background":
        bg = bg + background(rng, TORS, gbps * size, members)
    else:
        period = 0 if pattern == "incast" else int(rng.integers(3, 8))
        jobs.append(Job(pattern, members, gbps, period=period, phase=int(rng.integers(0, 8))))
    series = synth(TORS, jobs, noise=float(rng.uniform(0.05, 0.25)), bg=bg, seed=seed)
    t0 = time.perf_counter()
    found = classify(series)
    dt = time.perf_counter() - t0
    truth = {series.tors[i] for i in members}
    best = max(found, key=lambda g: (len(truth & set(g.members)), g.pattern != "background"), default=None)
    if best is None or not truth & set(best.members):
        return "background", False, dt
    same = truth <= set(best.members) if pattern == "background" else set(best.members) == truth
    return best.pattern, same, dt


def run(args: Any = None, cases: int = CASES) -> Table:
    counts = {p: dict.fromkeys(PATTERNS, 0) for p in PATTERNS}
    exact = dict.fromkeys(PATTERNS, 0)
    times: list[float] = []
    for k, pattern in enumerate(PATTERNS):
        for i in range(cases):
            got, same, dt = case(pattern, 1000 * k + i)
            counts[pattern][got] += 1
            exact[pattern] += int(same and got == pattern)
            times.append(dt)
    table = Table(title=f"traffic patterns: confusion over {cases} random cases per class ({TORS} ToRs, group "
                        f"3-8 ToRs, a second job, background, 5-25 % noise, 30 intervals; "
                        f"classify {1e3 * float(np.median(times)):.1f} ms median)")
    table.add_column("truth \\ found")
    for p in PATTERNS:
        table.add_column(p, justify="right")
    table.add_column("accuracy", justify="right")
    table.add_column("right class, exact members", justify="right")
    for p in PATTERNS:
        table.add_row(p, *(str(counts[p][q]) for q in PATTERNS), f"{counts[p][p] / cases:.0%}",
                      f"{exact[p] / cases:.0%}")
    n = cases * len(PATTERNS)
    table.add_row("all", *("" for _ in PATTERNS), f"{sum(counts[p][p] for p in PATTERNS) / n:.0%}",
                  f"{sum(exact.values()) / n:.0%}")
    return table
