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

The second table is the template matching (:mod:`controller.telemetry.signatures`)
on generated mixtures of the collective templates: per class, ``CASES`` cases of
one job of the template (every built-in, and ``parameter_server``, a template
that only the bench's intent defines) on 4-8 random ToRs, with the same second
job, background and noise; ``all_to_all_v`` gets a random skew (lognormal expert
popularity times lognormal per-pair noise), the others their defaults; the
``background`` class is gravity traffic among the group. The predicted class is
the ``collective`` of the group with most members in common with the truth
(``none`` when it has none); a prediction is right when it is the truth or the
truth is among its ``alternatives`` (templates with the same matrix shape: a
ring all-reduce, a reduce-scatter and an all-gather move data along the same
ring in the same proportions, which no counter can tell apart; the table folds
them into ``ring*``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.table import Table

from controller.model.collectives_builtin import BUILTINS
from controller.telemetry.patterns import PATTERNS, classify
from tests.pattern_synth import Job, background, synth

#: a collective that only the bench's intent defines: workers push to a server (member 0), which pushes back
PARAMETER_SERVER = {"phases": [{"from": "range(1, n)", "to": 0, "bytes": "B"},
                               {"from": 0, "to": "range(1, n)", "bytes": "B"}]}
REGISTRY = BUILTINS.extended({"parameter_server": PARAMETER_SERVER})
TEMPLATES = (*REGISTRY.names(), "background")
_RING = ("ring_allreduce", "reduce_scatter", "all_gather")

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


def template_case(name: str, seed: int) -> tuple[str, float]:
    """(the predicted class, seconds to classify) of one random case of template ``name``."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 5)) * 2  # 4, 6 or 8: hierarchical all-reduce's groups of 2 fit
    perm = [int(x) for x in rng.permutation(TORS)]
    members, other = tuple(perm[:size]), tuple(perm[size:size + int(rng.integers(3, 9))])
    gbps = float(rng.uniform(2.0, 20.0))
    jobs = [Job(str(rng.choice([p for p in _JOBS if p != "incast"])), other, float(rng.uniform(2.0, 20.0)),
                period=int(rng.integers(3, 8)), phase=int(rng.integers(0, 8)))]
    bg = background(rng, TORS, gbps * float(rng.uniform(0.5, 3.0)))
    if name == "background":
        bg = bg + background(rng, TORS, gbps * size, members)
    else:
        params = None
        if name == "all_to_all_v":
            skew = rng.lognormal(0.0, 0.5, size)[None, :] * rng.lognormal(0.0, 0.15, (size, size))
            params = {"skew": skew.tolist()}
        jobs.append(Job(name, members, gbps, period=int(rng.integers(3, 8)), phase=int(rng.integers(0, 8)),
                        params=params))
    series = synth(TORS, jobs, noise=float(rng.uniform(0.05, 0.25)), bg=bg, seed=seed, registry=REGISTRY)
    t0 = time.perf_counter()
    found = classify(series, registry=REGISTRY)
    dt = time.perf_counter() - t0
    truth = {series.tors[i] for i in members}
    best = max(found, key=lambda g: (len(truth & set(g.members)), g.collective is not None), default=None)
    if best is None or not truth & set(best.members) or best.collective is None:
        return "none", dt
    if name in (best.collective, *best.alternatives):
        return name, dt
    return best.collective, dt


def _fold(name: str) -> str:
    return "ring*" if name in _RING else name


def templates_table(cases: int = CASES) -> Table:
    """The template matching's confusion table (see the module docstring)."""
    classes = list(dict.fromkeys(_fold(t) for t in TEMPLATES if t != "background"))
    columns = [*classes, "none"]
    counts: dict[str, dict[str, int]] = {}
    times: list[float] = []
    for k, name in enumerate(TEMPLATES):
        row = counts.setdefault(name, dict.fromkeys(columns, 0))
        for i in range(cases):
            got, dt = template_case(name, 50_000 + 1000 * k + i)
            row[_fold(got) if got != "none" else "none"] += 1
            times.append(dt)
    table = Table(title=f"collective templates: confusion over {cases} random cases per template ({TORS} ToRs, "
                        f"group 4-8 ToRs, a second job, background, 5-25 % noise, 30 intervals; classify "
                        f"{1e3 * float(np.median(times)):.1f} ms median)")
    table.add_column("truth \\ found")
    for c in columns:
        table.add_column(c, justify="right")
    table.add_column("accuracy", justify="right")
    right = 0
    for name in TEMPLATES:
        want = "none" if name == "background" else _fold(name)
        ok = counts[name][want]
        right += ok
        table.add_row(name, *(str(counts[name][c]) for c in columns), f"{ok / cases:.0%}")
    table.add_row("all", *("" for _ in columns), f"{right / (cases * len(TEMPLATES)):.1%}")
    return table


def run(args: Any = None, cases: int = CASES) -> list[Table]:
    return [labels_table(cases), templates_table(cases)]


def labels_table(cases: int = CASES) -> Table:
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
