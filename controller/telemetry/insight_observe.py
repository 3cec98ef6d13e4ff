"""What the insight observes of one telemetry interval (DESIGN.md, ML workloads: policy ``insight``).

:func:`observe` reads a :class:`~controller.telemetry.Telemetry` (pure but for
that read, ``now`` a parameter) into the observations
:func:`controller.telemetry.insight.step` takes, over three windows:

* **short** (two telemetry intervals): each job's predicted slowdown and
  bottlenecks (:func:`controller.telemetry.jobperf.job_performance`) and each
  link's utilization (its busier direction), so that a link made hot shows
  within two intervals;
* **rate** (two of the job's declared iterations, at least the short window):
  the job's measured rate, which an iteration's quiet part does not read as a
  stall;
* **long** (``baseline_s``, at most what the collector keeps): the job's
  recovered period and the classifier's label of the group whose members are
  the job's (Jaccard 0.5 or more, at ``MIN_CONFIDENCE``).
"""

from __future__ import annotations

import numpy as np

from controller.model import InsightPolicy, Intent, Job
from controller.model.plan import Plan
from controller.telemetry.collector import Telemetry
from controller.telemetry.insight import Bottleneck, JobObservation, LinkObservation, Thresholds
from controller.telemetry.jobperf import job_performance, phase_bits
from controller.telemetry.patterns import FAMILY, Group, classify

__all__ = ["MIN_CONFIDENCE", "observe", "thresholds"]

#: the least confidence of a classifier's label for it to count as the job's
MIN_CONFIDENCE = 0.8


def thresholds(intent: Intent, tel: Telemetry) -> Thresholds:
    """The insight policy's figures (its defaults when absent), the telemetry interval and the intent's
    utilization limit."""
    p: InsightPolicy = intent.policy("insight") or InsightPolicy.model_validate({"kind": "insight"})
    limit = intent.policy("utilization_limit")
    return Thresholds(baseline_s=p.baseline_s, slowdown_threshold=p.slowdown_threshold,
                      interval_s=tel.options.interval_s, utilization_limit=None if limit is None else limit.max)


def _windows(tel: Telemetry, baseline_s: float) -> tuple[float, float]:
    short = 2 * tel.options.interval_s
    return short, max(short, min(baseline_s, tel.keep_s))


def _names(intent: Intent) -> dict[str, str]:
    return {lk.key: f"{lk.a}–{lk.b}" for lk in intent.links}


def _group_of(job: Job, groups: list[Group]) -> Group | None:
    mine = set(job.tors)
    best, score = None, 0.5
    for g in groups:
        j = len(mine & set(g.members)) / len(mine | set(g.members))
        if j >= score and g.pattern != "background" and g.confidence >= MIN_CONFIDENCE:
            best, score = g, j
    return best


def _job(tel: Telemetry, intent: Intent, plan: Plan, job: Job, now: float, windows: tuple[float, float],
         groups: list[Group], names: dict[str, str]) -> JobObservation:
    short, long = windows
    fast = job_performance(tel, intent, plan, job, now, short)
    rate_w = min(long, max(short, 2 * job.iter_s))
    rate = fast if rate_w == short else job_performance(tel, intent, plan, job, now, rate_w)
    slow = job_performance(tel, intent, plan, job, now, long)
    bits = phase_bits(job, intent, tel.routing(intent, plan))
    crossed = frozenset(intent.links[int(e) // 2].key for e in np.flatnonzero(sum(bits) > 0)) if bits else frozenset()
    group = _group_of(job, groups)
    return JobObservation(
        job=job.name, collective=job.collective, gbps=rate.measured_gbps, period_s=slow.period_s,
        slowdown=fast.slowdown, label=None if group is None else group.pattern,
        label_confidence=None if group is None else round(group.confidence, 4),
        expected_label=FAMILY.get(job.collective),
        bottlenecks=tuple(Bottleneck(b.link, names.get(b.link, b.link), b.utilization, b.job_share)
                          for b in fast.bottlenecks),
        crossed=crossed)


def observe(tel: Telemetry, intent: Intent, plan: Plan, now: float
            ) -> tuple[list[JobObservation], list[LinkObservation]]:
    """The observation of every job of ``intent`` and every link, over the windows of the module docstring."""
    th = thresholds(intent, tel)
    windows = _windows(tel, th.baseline_s)
    names = _names(intent)
    groups: list[Group] = []
    if intent.jobs:
        _method, series = tel.tor_series(intent, plan, now, windows[1])
        groups = classify(series, None, intent.registry)
    jobs = [_job(tel, intent, plan, j, now, windows, groups, names) for j in intent.jobs]
    links = [LinkObservation(lk.key, names[lk.key], v.utilization if v.fresh else None)
             for lk, v in zip(intent.links, tel.links(intent, now, windows[0]), strict=True)]
    return jobs, links
