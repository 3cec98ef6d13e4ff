"""A declared job's performance from counters alone (DESIGN.md, ML workloads: ``GET /v1/jobs/{name}/performance``).

No application visibility: what a job does is read from its members' per-prefix
(AFT) counters, the fabric's link counters and its declared collective.

* **Measured traffic**: the mean rate over the window of every (member, prefix
  of another member) pair the job's template sends on, summed (the measured
  demand of ``/v1/telemetry/demand``: AFT counters, else tomogravity). Other
  traffic between the same ToRs and prefixes counts too: counters cannot tell
  it apart. **Expected**: the template's bytes per iteration over ``iter_s``.
* **Period**: :func:`controller.telemetry.period.recover_period` on the job's
  per-interval rate (the same pairs, per interval; AFT counters only), with
  what the telemetry interval allows said there.
* **Communication time per iteration** (:func:`comm_time`): the template's
  phases, each routed by the active plan (its routing matrix: WCMP splits
  included) to gigabits per directed link; a phase lasts as long as its slowest
  link, ``bits / (capacity x (1 - rho))``, where ``rho`` is the utilization of
  the *other* traffic on the link (the link's measured load less the job's own,
  capped at ``max_utilization``): a link shared in processor-sharing fashion
  with a load ``rho`` serves a transfer ``1 / (1 - rho)`` times slower. The
  phases run one after another. ``comm_s_idle`` is the same with ``rho = 0``;
  the slowdown is their ratio. Host links and the application's compute are not
  modelled: the network's part only.
* **Bottlenecks**: the links the job crosses, by the time they take per
  iteration under the measured load (the busier direction of each link), with
  the link's utilization and the job's share of its load.

Pure but for reading the :class:`~controller.telemetry.Telemetry` handed in; ``now`` is a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.model import Intent, Job
from controller.model.collectives import traffic
from controller.model.documents import JobBottleneckDocument, JobPerformanceDocument
from controller.model.jobs import job_demands, originated_prefixes
from controller.model.plan import Plan
from controller.telemetry.collector import Telemetry
from controller.telemetry.period import recover_period
from safety.estimate import RoutingMatrix

__all__ = ["CommTime", "comm_time", "job_performance", "job_rate_history", "phase_bits"]

GIGABITS_PER_BYTE = 8 / 1e9


@dataclass(frozen=True, slots=True)
class CommTime:
    """Seconds per iteration, each phase's, and each directed edge's own time summed over the phases."""

    seconds: float
    phases: tuple[float, ...]
    per_edge: np.ndarray


def comm_time(bits: Sequence[np.ndarray], capacity: np.ndarray, other: np.ndarray | None = None, *,
              max_utilization: float = 0.99) -> CommTime:
    """The communication time of one iteration whose phase ``k`` puts ``bits[k][e]`` gigabits on directed
    edge ``e`` of ``capacity[e]`` gbps, beside ``other[e]`` gbps of other traffic (``None``: an idle
    fabric). Each phase lasts as long as its slowest edge; the phases add up.

    >>> cap = np.array([10.0, 10.0])
    >>> comm_time([np.array([5.0, 1.0]), np.array([0.0, 2.0])], cap).seconds  # 0.5 s then 0.2 s
    0.7
    >>> round(comm_time([np.array([5.0, 1.0])], cap, np.array([5.0, 0.0])).seconds, 6)  # half the first left
    1.0
    """
    rho = np.zeros_like(capacity) if other is None else np.clip(other / np.where(capacity > 0, capacity, 1.0),
                                                                0.0, max_utilization)
    avail = capacity * (1.0 - rho)
    per_edge = np.zeros_like(capacity)
    phases = []
    for b in bits:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(b > 0, b / np.where(avail > 0, avail, np.nan), 0.0)
        t = np.where(np.isnan(t), np.inf, t)
        per_edge = per_edge + t
        phases.append(float(t.max()) if len(t) else 0.0)
    return CommTime(float(sum(phases)), tuple(phases), per_edge)


def _pair_vector(rm: RoutingMatrix, flows: Mapping[tuple[str, str], float]) -> np.ndarray:
    """``flows`` ((ingress, prefix) -> value) as a vector over ``rm``'s pairs (pairs it lacks, local ones, dropped)."""
    index = {p: j for j, p in enumerate(rm.pairs)}
    x = np.zeros(len(rm.pairs))
    for key, v in flows.items():
        j = index.get(key)
        if j is not None:
            x[j] += v
    return x


def phase_bits(job: Job, intent: Intent, rm: RoutingMatrix) -> list[np.ndarray]:
    """Gigabits per directed edge in each phase of one iteration of ``job``, routed by ``rm``."""
    origins = originated_prefixes(intent)
    members = list(job.tors)
    out = []
    for phase in traffic(intent.registry.get(job.collective), len(members), job.bytes_per_iter, job.params):
        flows: dict[tuple[str, str], float] = {}
        for (i, j), size in phase.items():
            prefixes = origins.get(members[j], [])
            for p in prefixes:
                flows[(members[i], p)] = flows.get((members[i], p), 0.0) + size * GIGABITS_PER_BYTE / len(prefixes)
        out.append(np.asarray(rm.matrix @ _pair_vector(rm, flows), dtype=np.float64))
    return out


def _capacity(intent: Intent) -> np.ndarray:
    return np.repeat(np.array([lk.capacity_gbps for lk in intent.links], dtype=np.float64), 2)


@dataclass(frozen=True, slots=True)
class _Measured:
    method: str | None
    job_gbps: float | None
    job_load: np.ndarray | None  # gbps per directed edge: the job's measured pairs through the plan
    total_load: np.ndarray | None  # gbps per directed edge: the counters' where fresh, else the plan's prediction


def _measure(tel: Telemetry, intent: Intent, plan: Plan, rm: RoutingMatrix, keys: set[tuple[str, str]],
             now: float, window_s: float) -> _Measured:
    view = tel.demand(intent, plan, now, window_s)
    if not view.demands:
        return _Measured(None, None, None, None)
    mine = {k: g for k, g in view.demands.items() if k in keys}
    job_load = np.asarray(rm.matrix @ _pair_vector(rm, mine), dtype=np.float64)
    total = np.asarray(rm.matrix @ _pair_vector(rm, view.demands), dtype=np.float64)
    for i, v in enumerate(tel.links(intent, now, window_s)):
        if v.fresh and v.gbps_ab is not None:
            total[2 * i] = v.gbps_ab
        if v.fresh and v.gbps_ba is not None:
            total[2 * i + 1] = v.gbps_ba
    return _Measured(view.method, float(sum(mine.values())), job_load, np.maximum(total, job_load))


def _rate_series(tel: Telemetry, intent: Intent, keys: set[tuple[str, str]], now: float, window_s: float
                 ) -> np.ndarray | None:
    """The job's rate per interval (its pairs summed; NaN where none reported), or None without AFT counters."""
    all_keys, rates, _step = tel.demand_series(intent, now, window_s)
    cols = [c for c, k in enumerate(all_keys) if k in keys]
    if not cols:
        return None
    sub = rates[:, cols]
    known = ~np.isnan(sub).all(axis=1)
    out: np.ndarray = np.where(known, np.nansum(sub, axis=1), np.nan)
    return out


def _bottlenecks(intent: Intent, bits: Sequence[np.ndarray], timing: CommTime, m: _Measured, cap: np.ndarray,
                 top: int) -> list[JobBottleneckDocument]:
    crossed = np.flatnonzero(sum(bits) > 0) if bits else np.zeros(0, dtype=np.int64)
    best: dict[int, int] = {}  # link -> its direction the job takes longest on
    for edge in crossed.tolist():
        i = edge // 2
        if i not in best or timing.per_edge[edge] > timing.per_edge[best[i]]:
            best[i] = edge
    ranked = sorted(best.items(), key=lambda ie: (-timing.per_edge[ie[1]], intent.links[ie[0]].key))[:top]
    out = []
    for i, e in ranked:
        util = share = None
        if m.total_load is not None and m.job_load is not None:
            util = round(float(m.total_load[e] / cap[e]), 6) if cap[e] > 0 else None
            share = round(float(m.job_load[e] / m.total_load[e]), 6) if m.total_load[e] > 0 else None
        out.append(JobBottleneckDocument(link=intent.links[i].key, utilization=util, job_share=share))
    return out


def job_performance(tel: Telemetry, intent: Intent, plan: Plan, job: Job, now: float, window_s: float, *,
                    top: int = 3) -> JobPerformanceDocument:
    """``job``'s performance document over the window ending at ``now`` (see the module docstring)."""
    rm = tel.routing(intent, plan)
    demands = job_demands(job, originated_prefixes(intent), intent.registry)
    keys, expected = set(demands), sum(demands.values())
    bits = phase_bits(job, intent, rm)
    cap = _capacity(intent)
    idle = comm_time(bits, cap)
    m = _measure(tel, intent, plan, rm, keys, now, window_s)
    reasons: dict[str, str] = {}
    interval = tel.options.interval_s
    if m.total_load is None or m.job_load is None:
        why = "no telemetry yet: no demand measured in the window (counters neither from AFT entries nor links)"
        reasons.update(measured_gbps=why, comm_s=why, slowdown=why, period_s=why)
        timing = idle
        comm = slowdown = None
    else:
        timing = comm_time(bits, cap, np.maximum(m.total_load - m.job_load, 0.0))
        comm = timing.seconds
        slowdown = comm / idle.seconds if idle.seconds > 0 else None
        if m.method == "tomogravity":
            reasons["measured_gbps"] = "estimated from link loads (tomogravity): the fabric serves no AFT counters"
    period = strength = None
    if "period_s" not in reasons:
        series = _rate_series(tel, intent, keys, now, window_s)
        if series is None:
            reasons["period_s"] = "the period needs the job's own rate per interval: its members' AFT counters"
        else:
            fit = recover_period(series, interval)
            period, strength = fit.period_s, fit.strength
            if fit.reason is not None:
                reasons["period_s"] = fit.reason
    if idle.seconds == 0:
        reasons["comm_s_idle"] = "the job's traffic crosses no fabric link (its members share a device)"
    return JobPerformanceDocument(
        job=job.name, window_s=window_s, interval_s=interval, method=m.method,  # type: ignore[arg-type]
        measured_gbps=_r(m.job_gbps), expected_gbps=round(expected, 6), period_s=_r(period, 3), iter_s=job.iter_s,
        periodicity=_r(strength, 4), comm_s=_r(comm), comm_s_idle=round(idle.seconds, 6),
        slowdown=_r(slowdown, 4), bottlenecks=_bottlenecks(intent, bits, timing, m, cap, top), reasons=reasons)


def job_rate_history(tel: Telemetry, intent: Intent, job: Job, now: float, window_s: float
                     ) -> tuple[float, list[tuple[float, float | None]] | None]:
    """``job``'s expected rate, and its measured rate per telemetry interval over the window ending at ``now``
    (oldest first: each interval's end and the job's pairs summed, None where none reported), or None when its
    members serve no AFT counters."""
    demands = job_demands(job, originated_prefixes(intent), intent.registry)
    series = _rate_series(tel, intent, set(demands), now, window_s)
    expected = round(sum(demands.values()), 6)
    if series is None:
        return expected, None
    step = tel.options.interval_s
    n = len(series)
    return expected, [(now - (n - 1 - i) * step, None if np.isnan(g) else _r(float(g)))
                      for i, g in enumerate(series)]


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)
