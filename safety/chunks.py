"""What executors carry: chunks of scenarios, their results, and the worker that replays them.

This module owns the unit of work of a sweep (:mod:`safety.sweep`) and the protocol every
executor follows. A :class:`Work` is a list of scenarios or an array of pairs of single
failures; a :class:`Sweeper` (what a worker holds: the compiled
:class:`~safety.replay.Replayer` and the single failures) turns it into a :class:`Done`.
An :class:`Executor` streams ``(index, Done)`` as chunks complete, in any order: the
caller reduces them by index, so the report does not depend on which worker finished
first (:func:`in_order` when the caller wants the list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from safety.replay import Replayer
from safety.report import ScenarioResult
from safety.scenarios import Scenario, pair

__all__ = ["Done", "Executor", "Progress", "Sweeper", "Work", "in_order"]

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class Work:
    """One chunk: a list of scenarios, or pairs of single indexes (``(k, 2)`` array)."""

    scenarios: list[Scenario] = field(default_factory=list)
    pairs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.pairs) if self.pairs is not None else len(self.scenarios)


@dataclass(slots=True)
class Done:
    """A chunk's results: every scenario's result, or for pairs only the failing ones
    (with their ``(i, j)``), how many were replayed and how many of those passed
    with a transient black hole (they count, but are not listed)."""

    results: list[ScenarioResult]
    keys: list[tuple[int, int]]
    replayed: int
    transient: int


class Sweeper:
    """Replays chunks against one compiled plan (what a worker holds)."""

    def __init__(self, rp: Replayer, single: Sequence[Scenario]):
        self.rp = rp
        self.singles = list(single)

    def run(self, work: Work) -> Done:
        if work.pairs is None:
            return Done([self.rp.run(sc) for sc in work.scenarios], [], len(work.scenarios), 0)
        kept: list[ScenarioResult] = []
        keys: list[tuple[int, int]] = []
        transient = 0
        for i, j in work.pairs.tolist():
            sc = pair(self.singles[i], self.singles[j])
            ok, dropped = self.rp.verdict(sc)
            if not ok:
                kept.append(self.rp.run(sc))
                keys.append((i, j))
            elif dropped:
                transient += 1
        return Done(kept, keys, len(work.pairs), transient)


class Executor(Protocol):
    """Runs :class:`Work` chunks with a :class:`Sweeper`: :meth:`stream` answers ``(index, Done)``
    as each chunk completes (any order, every index once), :meth:`map` the results in order."""

    name: str

    def stream(self, rp: Replayer, single: Sequence[Scenario], works: Sequence[Work]) -> Iterator[tuple[int, Done]]:
        ...

    def map(self, rp: Replayer, single: Sequence[Scenario], works: Sequence[Work],
            progress: Progress | None = None) -> list[Done]: ...

    def workers(self) -> int: ...

    def close(self) -> None: ...


def in_order(stream: Iterator[tuple[int, Done]], n: int, total: int, progress: Progress | None) -> list[Done]:
    """The ``n`` results of ``stream`` by index, ``progress`` told ``(replayed, total)`` as they arrive."""
    out: list[Done | None] = [None] * n
    done = 0
    for k, d in stream:
        out[k] = d
        done += d.replayed
        if progress is not None:
            progress(done, total)
    missing = [k for k, d in enumerate(out) if d is None]
    if missing:
        raise RuntimeError(f"the executor answered no result for chunks {missing[:10]}")
    return [d for d in out if d is not None]
