"""ML jobs as demand: what a training job's collective sends, and where.

This module owns the compile of the intent's ``jobs`` into demand entries
(DESIGN.md, ML workloads). A job names a collective template of the registry
(:mod:`controller.model.collectives`: the built-ins of
:mod:`controller.model.collectives_builtin` and the intent's ``collectives:``);
with its n members, B bytes per iteration and its ``params`` the template gives
the bytes each member sends each other member per iteration (summed over the
phases), and over t seconds per iteration that is a rate. For the three first
collectives, with n members:

* ``ring_allreduce``: 2(n-1)/n x B/t from each member to the next in the listed
  order, the last to the first (the bandwidth-optimal ring all-reduce: a
  reduce-scatter and an all-gather, each moving (n-1)/n of the buffer);
* ``all_to_all``: B/(n t) from each member to each other member;
* ``pipeline``: B/t from each stage to the next (no wrap).

Rates are in gbps (bytes x 8 / 1e9), towards the prefixes the receiving member
originates, split evenly over them. :func:`merge_demands` adds them to the
declared demands (summed where a pair already has demand); it is what
:attr:`controller.model.Intent.effective_demands` returns, so the solver, the
safety replay and every caller of them see the same matrix. Pure: values in,
values out. It sits below :mod:`controller.model.domain` (which calls it): it
reads jobs and intents through the small protocols below, never the classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from controller.model.collectives import Registry, traffic
from controller.model.collectives_builtin import BUILTINS

__all__ = ["job_demands", "job_matrix", "job_member_matrix", "job_pairs", "originated_prefixes", "JobLike",
           "IntentLike"]

GBPS_PER_BYTE_PER_S = 8 / 1e9


class JobLike(Protocol):
    """What the traffic of a job is computed from (:class:`controller.model.Job` is one)."""

    @property
    def tors(self) -> Sequence[str]: ...
    @property
    def collective(self) -> str: ...
    @property
    def bytes_per_iter(self) -> float: ...
    @property
    def iter_s(self) -> float: ...
    @property
    def params(self) -> Mapping[str, Any] | None: ...


class PrefixLike(Protocol):
    @property
    def prefix(self) -> str: ...
    @property
    def origins(self) -> Sequence[str]: ...


class IntentLike(Protocol):
    """The parts of an intent the jobs' matrix reads (:class:`controller.model.Intent` is one)."""

    @property
    def prefixes(self) -> Sequence[PrefixLike]: ...
    @property
    def jobs(self) -> Sequence[JobLike]: ...
    @property
    def registry(self) -> Registry: ...


def job_member_matrix(job: JobLike, registry: Registry = BUILTINS) -> dict[tuple[int, int], float]:
    """Bytes per iteration from member ``i`` to member ``j`` of ``job`` (its template's phases summed), in
    the order the template produces the pairs. Raises
    :class:`~controller.model.collectives.CollectiveError` (located in the template or at ``params``)."""
    phases = traffic(registry.get(job.collective), len(job.tors), job.bytes_per_iter, job.params)
    if len(phases) == 1:
        return phases[0]
    out: dict[tuple[int, int], float] = {}
    for phase in phases:
        for key, size in phase.items():
            out[key] = out.get(key, 0.0) + size
    return out


def job_pairs(job: JobLike, registry: Registry = BUILTINS) -> list[tuple[str, str, float]]:
    """``(from member, to member, gbps)`` of ``job``'s collective, in the template's order.

    >>> from controller.model import Job
    >>> job_pairs(Job(name="j", tors=("a", "b"), collective="pipeline", bytes_per_iter=1e9, iter_s=1))
    [('a', 'b', 8.0)]
    """
    members = list(job.tors)
    t = job.iter_s
    return [(members[i], members[j], size / t * GBPS_PER_BYTE_PER_S)
            for (i, j), size in job_member_matrix(job, registry).items()]


def originated_prefixes(intent: IntentLike) -> dict[str, list[str]]:
    """Each device's originated prefixes, in document order."""
    out: dict[str, list[str]] = {}
    for p in intent.prefixes:
        for o in p.origins:
            out.setdefault(o, []).append(p.prefix)
    return out


def job_demands(job: JobLike, origins: Mapping[str, Sequence[str]],
                registry: Registry = BUILTINS) -> dict[tuple[str, str], float]:
    """``{(from device, to prefix): gbps}`` of ``job``; ``origins`` maps a device to the prefixes it
    originates. A member that originates nothing receives nothing (validation refuses such jobs)."""
    out: dict[tuple[str, str], float] = {}
    for src, dst, gbps in job_pairs(job, registry):
        prefixes = origins.get(dst, ())
        for prefix in prefixes:
            key = (src, prefix)
            out[key] = out.get(key, 0.0) + gbps / len(prefixes)
    return out


def job_matrix(intent: IntentLike) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], int]]:
    """The jobs' demand ``{(from device, to prefix): gbps}`` summed over jobs, in the order the jobs produce
    the pairs, and the index of the first job asking for each pair."""
    origins = originated_prefixes(intent)
    total: dict[tuple[str, str], float] = {}
    first: dict[tuple[str, str], int] = {}
    for j, job in enumerate(intent.jobs):
        for key, gbps in job_demands(job, origins, intent.registry).items():
            total[key] = total.get(key, 0.0) + gbps
            first.setdefault(key, j)
    return total, first
