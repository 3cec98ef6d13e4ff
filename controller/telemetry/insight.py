"""Baselines and anomalies of the jobs and links (DESIGN.md, ML workloads: policy ``insight``).

Pure: :func:`step` takes the stored :class:`Baselines`, one observation per job
(:class:`JobObservation`: measured rate, period, predicted slowdown, the
classifier's label, bottleneck links) and per link (:class:`LinkObservation`:
utilization), ``now`` and the :class:`Thresholds`, and returns the updated
baselines and the events due (:class:`InsightEvent`). The shell
(:mod:`controller.workflow.insight`) reads the telemetry, persists the
baselines and publishes the events.

* **Baselines** are exponentially weighted means and variances with the time
  constant ``baseline_s`` (West's incremental form: ``a = 1 - exp(-dt/tau)``,
  ``mean += a d``, ``var = (1 - a)(var + a d^2)``), not a window: an observation
  ``baseline_s`` old weighs ``1/e`` of a new one. ``dt`` is capped at one
  telemetry interval, so a gap (a restart, a leader change) does not let one
  observation replace what was learned. A baseline is **learned** once it has
  seen ``baseline_s`` seconds of observations. A quantity is not learned from
  while an episode about it is open (an anomaly does not become the baseline).
* **Events**, each raised once per episode and cleared once (the same kind with
  ``cleared: true`` and the observation back under) after ``CLEAR_AFTER``
  intervals without the condition:

  - ``job.slowdown``: the predicted slowdown above ``slowdown_threshold`` for
    ``SLOWDOWN_INTERVALS`` (2) consecutive intervals, or the measured period
    above its learned mean + ``period_sigma`` sd *and* ``period_rise`` (10%);
  - ``job.stalled``: the measured rate under ``stall_fraction`` (5%) of a
    learned mean of at least ``min_gbps``;
  - ``job.pattern_changed``: for two intervals, the classifier's label of the
    job's group differs from its declared collective's label (when the
    collective has one among the five) or from the label learned for it;
  - ``link.hot``: a link's utilization above ``hot_floor`` and its learned mean
    + ``hot_sigma`` sd, or above the intent's ``utilization_limit``.

  The evidence names the links in words (``leaf-0-1–spine-1-0``) and numbers,
  with the other jobs crossing them; ``links`` lists their ids
  (``device:port`` of the lower end).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from controller.model.documents import InsightEventDocument, JsonObject

__all__ = ["CLEAR_AFTER", "EVENT_KINDS", "SLOWDOWN_INTERVALS", "Baselines", "Bottleneck", "Episode", "InsightEvent",
           "JobBaseline", "JobObservation", "LinkBaseline", "LinkObservation", "Stat", "Thresholds", "step"]

EventKind = Literal["job.slowdown", "job.stalled", "job.pattern_changed", "link.hot"]
EVENT_KINDS: tuple[EventKind, ...] = ("job.slowdown", "job.stalled", "job.pattern_changed", "link.hot")
#: consecutive intervals the predicted slowdown stays above the threshold before ``job.slowdown``
SLOWDOWN_INTERVALS = 2
#: consecutive intervals without its condition that end an episode
CLEAR_AFTER = 2
#: consecutive intervals a changed label holds before ``job.pattern_changed``
LABEL_INTERVALS = 2


# -- baselines ----------------------------------------------------------------------------
@dataclass
class Stat:
    """An exponentially weighted mean and variance; ``learned_s``: the seconds of observations it has seen."""

    mean: float | None = None
    var: float = 0.0
    learned_s: float = 0.0

    @property
    def sd(self) -> float:
        return math.sqrt(max(self.var, 0.0))

    def update(self, x: float, dt: float, tau: float) -> None:
        if self.mean is None:
            self.mean, self.var = x, 0.0
            return
        a = 1.0 - math.exp(-max(dt, 0.0) / tau)
        d = x - self.mean
        self.mean += a * d
        self.var = (1.0 - a) * (self.var + a * d * d)
        self.learned_s += max(dt, 0.0)

    def learned(self, tau: float) -> bool:
        return self.mean is not None and self.learned_s >= tau

    def to_document(self) -> dict[str, float | None]:
        return {"mean": self.mean, "var": self.var, "learned_s": self.learned_s}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any] | None) -> Stat:
        doc = doc or {}
        mean = doc.get("mean")
        return cls(None if mean is None else float(mean), float(doc.get("var") or 0.0),
                   float(doc.get("learned_s") or 0.0))


@dataclass
class Episode:
    """One kind of anomaly of one job or link: open or not, and the run of intervals in the other state."""

    open: bool = False
    run: int = 0

    def see(self, condition: bool, need: int) -> Literal["raised", "cleared"] | None:
        """Count one interval; ``raised`` after ``need`` in a row with the condition, ``cleared`` after
        :data:`CLEAR_AFTER` in a row without it, each once."""
        if condition != self.open:
            self.run += 1
        else:
            self.run = 0
        if not self.open and self.run >= need:
            self.open, self.run = True, 0
            return "raised"
        if self.open and self.run >= CLEAR_AFTER:
            self.open, self.run = False, 0
            return "cleared"
        return None


def _episodes_doc(eps: Mapping[str, Episode]) -> dict[str, list[int]]:
    return {k: [int(e.open), e.run] for k, e in eps.items() if e.open or e.run}


def _episodes(doc: Mapping[str, Any] | None) -> dict[str, Episode]:
    return {k: Episode(bool(v[0]), int(v[1])) for k, v in (doc or {}).items()}


@dataclass
class JobBaseline:
    """A job's learned rate, period and label, and its open episodes."""

    gbps: Stat = field(default_factory=Stat)
    period_s: Stat = field(default_factory=Stat)
    label: str | None = None
    above: int = 0  # consecutive intervals with the predicted slowdown above the threshold
    at: float | None = None
    episodes: dict[str, Episode] = field(default_factory=dict)

    def episode(self, kind: str) -> Episode:
        return self.episodes.setdefault(kind, Episode())

    @property
    def empty(self) -> bool:
        """Nothing learned or open: not worth storing."""
        return (self.gbps.mean is None and self.period_s.mean is None and self.label is None and not self.above
                and not _episodes_doc(self.episodes))

    def to_document(self) -> dict[str, Any]:
        return {"gbps": self.gbps.to_document(), "period_s": self.period_s.to_document(), "label": self.label,
                "above": self.above, "at": self.at, "episodes": _episodes_doc(self.episodes)}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> JobBaseline:
        return cls(Stat.from_document(doc.get("gbps")), Stat.from_document(doc.get("period_s")), doc.get("label"),
                   int(doc.get("above") or 0), doc.get("at"), _episodes(doc.get("episodes")))


@dataclass
class LinkBaseline:
    """A link's learned utilization (its busier direction) and its open episode."""

    utilization: Stat = field(default_factory=Stat)
    at: float | None = None
    episodes: dict[str, Episode] = field(default_factory=dict)

    def episode(self, kind: str) -> Episode:
        return self.episodes.setdefault(kind, Episode())

    @property
    def empty(self) -> bool:
        """Nothing learned or open: not worth storing."""
        return self.utilization.mean is None and not _episodes_doc(self.episodes)

    def to_document(self) -> dict[str, Any]:
        return {"utilization": self.utilization.to_document(), "at": self.at,
                "episodes": _episodes_doc(self.episodes)}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> LinkBaseline:
        return cls(Stat.from_document(doc.get("utilization")), doc.get("at"), _episodes(doc.get("episodes")))


@dataclass
class Baselines:
    """Every job's and link's baseline, by name and link id; stored as one document per key
    (``job:NAME``, ``link:ID``: :meth:`to_documents`)."""

    jobs: dict[str, JobBaseline] = field(default_factory=dict)
    links: dict[str, LinkBaseline] = field(default_factory=dict)

    def to_documents(self) -> dict[str, JsonObject]:
        out: dict[str, JsonObject] = {f"job:{k}": v.to_document() for k, v in self.jobs.items()}
        out.update({f"link:{k}": v.to_document() for k, v in self.links.items()})
        return out

    @classmethod
    def from_documents(cls, docs: Mapping[str, Mapping[str, Any]]) -> Baselines:
        b = cls()
        for key, doc in docs.items():
            kind, _, name = key.partition(":")
            if kind == "job":
                b.jobs[name] = JobBaseline.from_document(doc)
            elif kind == "link":
                b.links[name] = LinkBaseline.from_document(doc)
        return b


# -- observations and thresholds -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Bottleneck:
    """A link a job crosses: its id, its name in words, its utilization and the job's share of its load."""

    link: str
    name: str
    utilization: float | None
    job_share: float | None


@dataclass(frozen=True, slots=True)
class JobObservation:
    """One interval of a job: ``None`` where the telemetry could not tell. ``expected_label``: its declared
    collective's label among the classifier's five (None: the collective has none); ``crossed``: the ids of
    every link its traffic crosses (to name the jobs sharing a link)."""

    job: str
    collective: str
    gbps: float | None = None
    period_s: float | None = None
    slowdown: float | None = None
    label: str | None = None
    label_confidence: float | None = None
    expected_label: str | None = None
    bottlenecks: tuple[Bottleneck, ...] = ()
    crossed: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class LinkObservation:
    """One interval of a link: its busier direction's utilization (None: no fresh counters)."""

    link: str
    name: str
    utilization: float | None


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The policy's figures (``baseline_s``, ``slowdown_threshold``), the telemetry interval, the intent's
    ``utilization_limit`` (None: none) and the rules' constants (see the module docstring)."""

    baseline_s: float = 300.0
    slowdown_threshold: float = 1.2
    interval_s: float = 10.0
    utilization_limit: float | None = None
    period_sigma: float = 3.0
    period_rise: float = 0.10
    stall_fraction: float = 0.05
    min_gbps: float = 0.01
    hot_sigma: float = 4.0
    hot_floor: float = 0.5


@dataclass(frozen=True, slots=True)
class InsightEvent:
    """An event due: its kind, the job or link, and its document (the event stream's data)."""

    kind: EventKind
    subject: str
    document: InsightEventDocument

    @property
    def cleared(self) -> bool:
        return self.document.cleared


# -- the rules ---------------------------------------------------------------------------------
def _pct(u: float | None) -> str:
    return "?" if u is None else f"{u:.0%}"


def _sharing(link: str, job: str, jobs: Sequence[JobObservation]) -> list[str]:
    return sorted(o.job for o in jobs if o.job != job and link in o.crossed)


def _crossing(o: JobObservation, jobs: Sequence[JobObservation], top: int = 2) -> tuple[str, list[str]]:
    """Words for the job's busiest bottlenecks (with the jobs sharing them) and their ids."""
    shown = [b for b in o.bottlenecks if b.utilization is not None][:top] or list(o.bottlenecks[:1])
    parts = []
    for b in shown:
        others = _sharing(b.link, o.job, jobs)
        share = "" if b.job_share is None else f" (its share {b.job_share:.0%})"
        with_ = f", shared with job{'s' if len(others) > 1 else ''} {', '.join(others)}" if others else ""
        parts.append(f"{b.name} at {_pct(b.utilization)}{share}{with_}")
    text = f"; its {o.collective} crosses " + "; ".join(parts) if parts else ""
    return text, [b.link for b in shown]


def _job_doc(o: JobObservation, jb: JobBaseline, evidence: str, links: list[str], cleared: bool
             ) -> InsightEventDocument:
    def r(x: float | None, nd: int = 6) -> float | None:
        return None if x is None else round(x, nd)
    baseline: dict[str, float | str | None] = {
        "gbps": r(jb.gbps.mean), "gbps_sd": r(jb.gbps.sd), "period_s": r(jb.period_s.mean, 4),
        "period_s_sd": r(jb.period_s.sd, 4), "label": jb.label}
    observed: dict[str, float | str | None] = {
        "gbps": r(o.gbps), "period_s": r(o.period_s, 4), "slowdown": r(o.slowdown, 4), "label": o.label}
    return InsightEventDocument(job=o.job, link=None, baseline=baseline, observed=observed, evidence=evidence,
                                links=links, cleared=cleared)


def _period_past(o: JobObservation, jb: JobBaseline, th: Thresholds) -> bool:
    p = jb.period_s
    if o.period_s is None or p.mean is None or not p.learned(th.baseline_s):
        return False
    return o.period_s > p.mean + th.period_sigma * p.sd and o.period_s > p.mean * (1 + th.period_rise)


def _slowdown(o: JobObservation, jb: JobBaseline, jobs: Sequence[JobObservation], th: Thresholds
              ) -> InsightEvent | None:
    jb.above = jb.above + 1 if o.slowdown is not None and o.slowdown > th.slowdown_threshold else 0
    past = _period_past(o, jb, th)
    change = jb.episode("job.slowdown").see(jb.above >= SLOWDOWN_INTERVALS or past, 1)
    if change is None:
        return None
    words = []
    if o.slowdown is not None and (jb.above or change == "cleared"):
        words.append(f"{o.job}'s predicted network slowdown is {o.slowdown:.2f} (threshold "
                     f"{th.slowdown_threshold:g}{f', {jb.above} intervals' if jb.above else ''})")
    if o.period_s is not None and jb.period_s.mean is not None and (past or change == "cleared"):
        whose = "its" if words else f"{o.job}'s"
        words.append(f"{whose} iteration period rose from {jb.period_s.mean:.2f} s to {o.period_s:.2f} s" if past
                     else f"{whose} iteration period is {o.period_s:.2f} s (baseline {jb.period_s.mean:.2f} s)")
    crossing, links = _crossing(o, jobs)
    head = "; ".join(words) or f"{o.job}'s slowdown"
    evidence = (f"back under: {head}" if change == "cleared" else head) + crossing
    return InsightEvent("job.slowdown", o.job, _job_doc(o, jb, evidence, links, change == "cleared"))


def _stalled(o: JobObservation, jb: JobBaseline, th: Thresholds) -> InsightEvent | None:
    g = jb.gbps
    if o.gbps is None or g.mean is None or not g.learned(th.baseline_s) or g.mean < th.min_gbps:
        return None
    change = jb.episode("job.stalled").see(o.gbps < th.stall_fraction * g.mean, 1)
    if change is None:
        return None
    if change == "raised":
        evidence = (f"{o.job}'s measured rate fell to {o.gbps:.3g} Gb/s from a baseline of {g.mean:.3g} Gb/s "
                    f"(sd {g.sd:.3g}): under {th.stall_fraction:.0%} of it")
    else:
        evidence = f"back under: {o.job}'s measured rate is {o.gbps:.3g} Gb/s again (baseline {g.mean:.3g} Gb/s)"
    return InsightEvent("job.stalled", o.job, _job_doc(o, jb, evidence, [], change == "cleared"))


def _pattern(o: JobObservation, jb: JobBaseline) -> InsightEvent | None:
    if o.label is None:
        return None
    differs_declared = o.expected_label is not None and o.label != o.expected_label
    differs_learned = jb.label is not None and o.label != jb.label
    ep = jb.episode("job.pattern_changed")
    change = ep.see(differs_declared or differs_learned, LABEL_INTERVALS)
    if not ep.open and change is None and jb.label is None and not differs_declared:
        jb.label = o.label  # the label it is learned with: the first that agrees with its declaration
    if change is None:
        return None
    conf = "" if o.label_confidence is None else f" (confidence {o.label_confidence:.2f})"
    if change == "raised":
        against = (f"not {o.expected_label} as its collective {o.collective} declares" if differs_declared
                   else f"not {jb.label} as before")
        evidence = f"{o.job}'s traffic now reads as {o.label}{conf}, {against}"
    else:
        evidence = f"back under: {o.job}'s traffic reads as {o.label}{conf} again"
    return InsightEvent("job.pattern_changed", o.job, _job_doc(o, jb, evidence, [], change == "cleared"))


def _learn_job(o: JobObservation, jb: JobBaseline, now: float, th: Thresholds) -> None:
    dt = min(th.interval_s, now - jb.at) if jb.at is not None else 0.0
    quiet = not any(jb.episode(k).open for k in ("job.slowdown", "job.stalled"))
    if quiet and o.gbps is not None:
        jb.gbps.update(o.gbps, dt, th.baseline_s)
    if quiet and o.period_s is not None:
        jb.period_s.update(o.period_s, dt, th.baseline_s)
    jb.at = now


def _link_hot(o: LinkObservation, lb: LinkBaseline, jobs: Sequence[JobObservation], th: Thresholds
              ) -> InsightEvent | None:
    u, s = o.utilization, lb.utilization
    if u is None:
        return None
    over_limit = th.utilization_limit is not None and u > th.utilization_limit
    over_baseline = (s.mean is not None and s.learned(th.baseline_s) and u > th.hot_floor
                     and u > s.mean + th.hot_sigma * s.sd)
    change = lb.episode("link.hot").see(over_limit or over_baseline, 1)
    if change is None:
        return None
    crossing = sorted(j.job for j in jobs if o.link in j.crossed)
    base = "no baseline yet" if s.mean is None else f"its baseline {_pct(s.mean)} (sd {s.sd:.1%})"
    limit = "" if th.utilization_limit is None else f", the intent's utilization limit {_pct(th.utilization_limit)}"
    evidence = (f"{'back under: ' if change == 'cleared' else ''}link {o.name} ({o.link}) is at {_pct(u)}; "
                f"{base}{limit}")
    if crossing:
        evidence += f"; jobs crossing it: {', '.join(crossing)}"
    doc = InsightEventDocument(
        job=None, link=o.link, baseline={"utilization": None if s.mean is None else round(s.mean, 6),
                               "utilization_sd": round(s.sd, 6), "limit": th.utilization_limit},
        observed={"utilization": round(u, 6)}, evidence=evidence, links=[o.link], cleared=change == "cleared")
    return InsightEvent("link.hot", o.link, doc)


def step(prev: Baselines, jobs: Sequence[JobObservation], links: Sequence[LinkObservation], now: float,
         th: Thresholds) -> tuple[Baselines, list[InsightEvent]]:
    """One telemetry interval: the events due against ``prev`` (each episode raised once and cleared once),
    then the baselines updated with what was observed (not from a quantity whose episode is open). ``prev`` is
    not changed; jobs and links no longer observed, or that never showed a figure, are left out of the result."""
    old = Baselines.from_documents(prev.to_documents())  # a copy
    new = Baselines()
    events: list[InsightEvent] = []
    for o in jobs:
        jb = old.jobs.get(o.job) or JobBaseline()
        for ev in (_slowdown(o, jb, jobs, th), _stalled(o, jb, th), _pattern(o, jb)):
            if ev is not None:
                events.append(ev)
        _learn_job(o, jb, now, th)
        if not jb.empty:
            new.jobs[o.job] = jb
    for lo in links:
        lb = old.links.get(lo.link) or LinkBaseline()
        ev = _link_hot(lo, lb, jobs, th)
        if ev is not None:
            events.append(ev)
        if lo.utilization is not None and not lb.episode("link.hot").open:
            dt = min(th.interval_s, now - lb.at) if lb.at is not None else 0.0
            lb.utilization.update(lo.utilization, dt, th.baseline_s)
        lb.at = now
        if not lb.empty:
            new.links[lo.link] = lb
    return new, events
