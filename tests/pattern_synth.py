"""Synthetic ToR-to-ToR traffic for the pattern classifier's tests and bench: jobs of each collective
(periodic on/off rates, multiplicative noise) laid over gravity-like background traffic, as a
:class:`controller.telemetry.patterns.Series` or as per-interval AFT demands of an intent. A job's
pattern is one of the classifier's four shapes or the name of a collective template of a registry
(the built-ins by default), filled with the job's ``params``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.model.collectives import Registry, traffic
from controller.model.collectives_builtin import BUILTINS
from controller.telemetry.patterns import Series

__all__ = ["Job", "background", "edges", "synth", "weighted_edges"]


@dataclass(frozen=True)
class Job:
    """``pattern`` on ``members`` (indices of ToRs; for incast the last is the receiver) at ``gbps``
    per edge while on; on for ``duty`` of every ``period`` intervals (``period`` 0: always on)."""

    pattern: str
    members: tuple[int, ...]
    gbps: float = 10.0
    period: int = 4
    duty: float = 0.5
    phase: int = 0
    params: Mapping[str, Any] | None = None


def edges(pattern: str, members: Sequence[int]) -> list[tuple[int, int]]:
    """The directed edges of ``pattern`` on ``members`` in their listed order."""
    m = list(members)
    k = len(m)
    if pattern == "ring_allreduce":
        return [(m[i], m[(i + 1) % k]) for i in range(k)]
    if pattern == "all_to_all":
        return [(a, b) for a in m for b in m if a != b]
    if pattern == "pipeline":
        return list(zip(m, m[1:], strict=False))
    if pattern == "incast":
        return [(a, m[-1]) for a in m[:-1]]
    raise ValueError(pattern)


_SHAPES = ("ring_allreduce", "all_to_all", "pipeline", "incast")


def weighted_edges(job: Job, registry: Registry = BUILTINS) -> list[tuple[int, int, float]]:
    """``(from, to, gbps while on)`` of ``job``: its shape's edges at ``job.gbps``, or its template's
    matrix (phases summed) scaled so that its heaviest edge carries ``job.gbps``."""
    if job.pattern in _SHAPES:
        return [(a, b, job.gbps) for a, b in edges(job.pattern, job.members)]
    total: dict[tuple[int, int], float] = {}
    for phase in traffic(registry.get(job.pattern), len(job.members), 1.0, job.params):
        for key, size in phase.items():
            total[key] = total.get(key, 0.0) + size
    top = max(total.values())
    return [(job.members[i], job.members[j], job.gbps * size / top) for (i, j), size in total.items()]


def background(rng: np.random.Generator, n: int, gbps: float, members: Sequence[int] | None = None,
               sigma: float = 1.0) -> np.ndarray:
    """A gravity matrix among ``members`` (all ToRs by default) with lognormal masses, ``gbps`` in total."""
    idx = np.arange(n) if members is None else np.asarray(members)
    mass = np.zeros(n)
    mass[idx] = rng.lognormal(0.0, sigma, len(idx))
    g = np.outer(mass, mass)
    np.fill_diagonal(g, 0.0)
    return g * (gbps / g.sum()) if g.sum() > 0 else g


def synth(n: int, jobs: Sequence[Job], *, intervals: int = 30, noise: float = 0.15, bg: np.ndarray | None = None,
          seed: int = 0, interval_s: float = 10.0, tors: Sequence[str] | None = None,
          registry: Registry = BUILTINS) -> Series:
    """The series of ``n`` ToRs carrying ``jobs`` plus ``bg`` (a mean matrix, per-interval noise too),
    every entry times ``1 + noise x N(0, 1)`` (clipped at zero) in each interval."""
    rng = np.random.default_rng(seed)
    rates = np.zeros((intervals, n, n))
    t = np.arange(intervals)
    for job in jobs:
        on = np.ones(intervals) if job.period <= 0 else \
            (((t + job.phase) % job.period) < max(1, round(job.duty * job.period))).astype(float)
        for a, b, gbps in weighted_edges(job, registry):
            rates[:, a, b] += gbps * on
    if bg is not None:
        rates += bg[None, :, :]
    rates *= np.clip(1.0 + noise * rng.standard_normal(rates.shape), 0.0, None)
    names = tuple(tors) if tors is not None else tuple(f"tor-{i:02d}" for i in range(n))
    return Series(names, rates, interval_s)
