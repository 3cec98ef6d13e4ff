"""Traffic pattern classification: which ToRs talk to which, and in what shape (pure, no I/O).

From the measured matrix between ToRs and its time series (one matrix per
collector interval over the window; a single matrix when the demand was
estimated by tomogravity), :func:`classify` finds the **communication groups**
(sets of ToRs exchanging most of their traffic with each other) and names the
structure of each: ``ring_allreduce`` (each member sends to exactly one next
member, in one cycle, at near-equal rates), ``all_to_all`` (every ordered pair,
near-equal rates), ``pipeline`` (a chain: a path, not a cycle), ``incast`` (many
senders to one receiver) or ``background`` (none of those: gravity-like or
random traffic). DESIGN.md, Telemetry: ``GET /v1/telemetry/patterns``.

Each group is also matched against the collective templates of a registry
(the built-ins and an intent's ``collectives:``, the templates the planner
reads; :mod:`controller.telemetry.signatures`): ``collective`` names the
nearest template, with the templates no counter can tell from it as
``alternatives``. A group that none of the five labels fits but a template
does (a tree all-reduce, a KV-cache transfer, a template of the intent) is
reported as a group of its own, under the label of its template's family
(:data:`FAMILY`) or ``background``, with ``collective`` saying which.

Method. Groups are the connected components of the symmetric traffic graph
``W = M + M^T`` keeping an edge only when it is *mutually* strong: at least
``Options.edge_ratio`` of each end's heaviest edge (background noise towards a
busy ToR is cut at the busy end). In each group, every pattern is fitted on the
mean submatrix (the pattern's edges: the successor of each member for the ring,
the chain with the quietest member as its end for the pipeline, every sender
towards the busiest receiver for incast, all pairs for all-to-all) and scored as
``fit x uniformity``: the fraction of the group's traffic on the pattern's edges
times ``1 - CV / Options.max_cv`` of their rates (clipped to [0, 1]).
Periodicity is the highest autocorrelation peak of the group's total rate over
the intervals (training iterations make rates periodic), with its period in
seconds; over a long enough series its absence lowers a collective's
confidence (``Options.period_weight``), so that steady uniform background
among a few ToRs is not taken for an all-to-all job. The best pattern names the
group when its confidence reaches ``Options.min_score``, else ``background``.

Example
-------
>>> import numpy as np
>>> m = np.zeros((1, 4, 4)); m[0, 0, 1] = m[0, 1, 2] = m[0, 2, 3] = m[0, 3, 0] = 10.0
>>> [(g.members, g.pattern) for g in classify(Series(("a", "b", "c", "d"), m, 10.0))]
[(('a', 'b', 'c', 'd'), 'ring_allreduce')]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from controller.model import Intent
from controller.model.collectives import Registry
from controller.model.collectives_builtin import BUILTINS
from controller.model.documents import PatternGroupDocument
from controller.telemetry.signatures import SignatureOptions, match

__all__ = ["FAMILY", "PATTERNS", "Group", "Options", "Series", "classify", "matrix_series", "periodicity",
           "tor_series"]

PATTERNS = ("ring_allreduce", "all_to_all", "pipeline", "incast", "background")
PatternName = Literal["ring_allreduce", "all_to_all", "pipeline", "incast", "background"]
_COLLECTIVES = ("ring_allreduce", "all_to_all", "pipeline")
#: the label of each built-in collective among the five (those without one are labelled by the five's fit)
FAMILY: dict[str, PatternName] = {"ring_allreduce": "ring_allreduce", "reduce_scatter": "ring_allreduce",
                                  "all_gather": "ring_allreduce", "all_to_all": "all_to_all",
                                  "all_to_all_v": "all_to_all", "pipeline": "pipeline"}


@dataclass(frozen=True, slots=True)
class Options:
    """Knobs of :func:`classify`.

    ``edge_ratio``: an edge joins a group when it carries at least this share of
    the heaviest edge of both its ends. ``max_cv``: the coefficient of variation
    of a pattern's edge rates at which its uniformity falls to zero.
    ``min_score``: below this confidence a group is ``background``. ``min_gbps``: ToRs
    exchanging less in total are ignored. ``min_periodicity``: the autocorrelation
    peak above which a period is reported. ``period_weight``: how much an absent
    period lowers a collective's confidence (when the series is long enough,
    ``min_intervals``). ``min_members``: smaller groups (a pair is any of the
    patterns) are ``background``. ``signature``: the template matching's knobs; a
    template's confidence, lowered by an absent period as a collective's is (by
    ``template_period_weight``: a template is an iteration's traffic, and dense
    gravity background resembles a skewed all-to-all but for its period), must
    reach ``min_score`` too.
    """

    edge_ratio: float = 0.25
    max_cv: float = 0.6
    min_score: float = 0.5
    min_gbps: float = 1e-6
    min_periodicity: float = 0.5
    period_weight: float = 0.4
    min_intervals: int = 8
    min_members: int = 3
    signature: SignatureOptions = SignatureOptions()
    template_period_weight: float = 0.8


@dataclass(frozen=True, slots=True)
class Series:
    """Traffic between ToRs: ``rates[t, i, j]`` gbps from ``tors[i]`` to ``tors[j]`` in interval ``t``
    (oldest first; intervals of ``interval_s`` seconds)."""

    tors: tuple[str, ...]
    rates: np.ndarray
    interval_s: float

    def mean(self) -> np.ndarray:
        m = np.nan_to_num(self.rates).mean(axis=0) if len(self.rates) else np.zeros((len(self.tors),) * 2)
        out: np.ndarray = np.where(np.eye(len(self.tors), dtype=bool), 0.0, m)
        return out


@dataclass(frozen=True, slots=True)
class Group:
    """One communication group and its evidence."""

    members: tuple[str, ...]
    pattern: str
    confidence: float
    gbps: float
    score: float  # fit x uniformity of the chosen pattern (0 for background)
    fit: float  # share of the group's traffic on the pattern's edges
    uniformity: float  # 1 - CV / max_cv of the pattern edges' rates, clipped
    internal: float  # share of the members' traffic that stays inside the group
    periodicity: float  # autocorrelation peak of the group's total rate (0: none found)
    period_s: float | None
    scores: dict[str, float] = field(default_factory=dict)  # every pattern's score
    collective: str | None = None  # the nearest template, when its confidence reaches min_score
    collective_confidence: float = 0.0
    alternatives: tuple[str, ...] = ()  # templates whose traffic matrix is the same shape

    def to_model(self, jobs: Sequence[str] = ()) -> PatternGroupDocument:
        """As the API reports it; ``jobs``: the declared jobs it is tied to
        (:func:`~controller.telemetry.discovery.explaining_jobs`)."""
        return PatternGroupDocument(
            members=list(self.members), pattern=cast(PatternName, self.pattern), confidence=round(self.confidence, 4),
            gbps=round(self.gbps, 6), score=round(self.score, 4), fit=round(self.fit, 4),
            uniformity=round(self.uniformity, 4), internal=round(self.internal, 4),
            periodicity=round(self.periodicity, 4), period_s=None if self.period_s is None else round(self.period_s, 3),
            scores={k: round(v, 4) for k, v in self.scores.items()}, collective=self.collective,
            collective_confidence=round(self.collective_confidence, 4) if self.collective else None,
            alternatives=list(self.alternatives) if self.collective else None, jobs=list(jobs))

    @property
    def is_background(self) -> bool:
        """Background and matching no template: traffic no job is made of."""
        return self.pattern == "background" and self.collective is None


# -- from the measured matrix to ToR-to-ToR series ---------------------------------------------
def tor_series(intent: Intent, keys: Sequence[tuple[str, str]], rates: np.ndarray, interval_s: float) -> Series:
    """The ToR-to-ToR series of measured demands ``keys`` (ingress device, prefix) with ``rates``
    (intervals x keys, gbps; NaN where unknown): each prefix's rate is split evenly over the devices
    that originate it. Devices that neither send nor originate are left out."""
    origins = {p.prefix: tuple(p.origins) for p in intent.prefixes}
    cols: list[tuple[str, tuple[str, ...]]] = [(dev, origins.get(prefix, ())) for dev, prefix in keys]
    names = sorted({d for d, o in cols if o} | {x for _d, o in cols for x in o})
    index = {n: i for i, n in enumerate(names)}
    if not keys:  # nothing measured: no ToR, no interval
        return Series((), np.zeros((0, 0, 0)), interval_s)
    r = np.nan_to_num(np.asarray(rates, dtype=np.float64).reshape(-1, len(keys)))
    out = np.zeros((len(r), len(names), len(names)))
    for c, (dev, dst) in enumerate(cols):
        for o in dst:
            out[:, index[dev], index[o]] += r[:, c] / len(dst)
    return Series(tuple(names), out, interval_s)


def matrix_series(intent: Intent, demands: Mapping[tuple[str, str], float], interval_s: float) -> Series:
    """A one-interval series from a single measured matrix (tomogravity's)."""
    keys = sorted(demands)
    return tor_series(intent, keys, np.array([[demands[k] for k in keys]]), interval_s)


# -- the classifier ---------------------------------------------------------------------------------
def classify(series: Series, options: Options | None = None, registry: Registry = BUILTINS) -> list[Group]:
    """The communication groups of ``series``, the busiest first.

    Parameters
    ----------
    series : the ToR-to-ToR traffic (:func:`tor_series`).
    options : thresholds (:class:`Options`).
    registry : the collective templates groups are matched against (an intent's
        :attr:`~controller.model.Intent.registry`; the built-ins by default).

    Returns
    -------
    One :class:`Group` per recognized collective or incast, and at most one
    ``background`` group holding every other ToR that carries traffic.
    """
    o = options or Options()
    m = series.mean()
    groups = _components(m, o)
    total = m.sum(axis=0) + m.sum(axis=1)
    found: list[Group] = []
    rest: list[int] = []
    for members in groups:
        g = _classify_group(series, m, members, total, o, registry) if len(members) >= o.min_members else None
        if g is None or (g.pattern == "background" and g.collective is None):
            rest += members
        else:
            found.append(g)
    if rest:
        rest.sort()
        found.append(_background(series, m, rest, total, o))
    return sorted(found, key=lambda g: (g.pattern == "background", -g.gbps, g.members))


def _components(m: np.ndarray, o: Options) -> list[list[int]]:
    """Connected components of the mutually strong edges of ``m + m^T`` (ToRs with traffic only)."""
    w = m + m.T
    busy = w.sum(axis=1) > o.min_gbps
    top = w.max(axis=1) if len(w) else np.zeros(0)
    strong = (w >= o.edge_ratio * top[:, None]) & (w >= o.edge_ratio * top[None, :]) & (w > 0)
    strong &= busy[:, None] & busy[None, :]
    n, labels = connected_components(csr_matrix(strong), directed=False)
    comps: dict[int, list[int]] = {}
    for i in np.flatnonzero(busy):
        comps.setdefault(int(labels[i]), []).append(int(i))
    del n
    return sorted(comps.values())


def _classify_group(series: Series, m: np.ndarray, members: list[int], total: np.ndarray,
                    o: Options, registry: Registry) -> Group:
    sub = m[np.ix_(members, members)]
    gbps = float(sub.sum())
    scores: dict[str, tuple[float, float, float]] = {}
    for name, edges in _candidates(sub).items():
        scores[name] = _score(sub, edges, gbps, o)
    best = max(scores, key=lambda k: scores[k][0])
    score, fit, uni = scores[best]
    per, period = periodicity(series.rates[:, members][:, :, members].sum(axis=(1, 2)), series.interval_s, o)
    internal = gbps / max(float(total[members].sum()) / 2, 1e-12)
    confidence = _confidence(best, score, per if period is not None else 0.0, len(series.rates), o)
    pattern = best if confidence >= o.min_score else "background"
    if pattern == "background":
        confidence = _confidence(pattern, score, per, len(series.rates), o)
    found = match(sub, registry, o.signature)
    collective: str | None = None
    c_conf, alternatives = 0.0, cast(tuple[str, ...], ())
    if found is not None:
        c_conf = _periodic(found.confidence, per if period is not None else 0.0, len(series.rates), o,
                           o.template_period_weight)
        if c_conf >= o.min_score:
            collective, alternatives = found.name, found.alternatives
            if pattern == "background" and collective in FAMILY:
                pattern, confidence = FAMILY[collective], c_conf
    return Group(tuple(series.tors[i] for i in members), pattern, confidence, gbps,
                 score if pattern != "background" else 0.0, fit, uni, min(internal, 1.0), per, period,
                 {k: v[0] for k, v in scores.items()}, collective, c_conf, alternatives)


def _confidence(pattern: str, score: float, per: float, intervals: int, o: Options) -> float:
    if pattern == "background":
        return float(np.clip(1.0 - score / o.min_score * 0.5, 0.0, 1.0))
    return _periodic(score, per, intervals, o) if pattern in _COLLECTIVES else float(np.clip(score, 0.0, 1.0))


def _periodic(score: float, per: float, intervals: int, o: Options, weight: float | None = None) -> float:
    """A collective's confidence: its score, lowered over a long enough series when no period shows
    (by ``weight``, ``o.period_weight`` by default)."""
    w = o.period_weight if weight is None else weight
    c = score * (1.0 - w * (1.0 - per)) if intervals >= o.min_intervals else score
    return float(np.clip(c, 0.0, 1.0))


def _background(series: Series, m: np.ndarray, rest: list[int], total: np.ndarray, o: Options) -> Group:
    sub = m[np.ix_(rest, rest)]
    gbps = float(sub.sum())
    per, period = periodicity(series.rates[:, rest][:, :, rest].sum(axis=(1, 2)), series.interval_s, o)
    internal = gbps / max(float(total[rest].sum()) / 2, 1e-12)
    return Group(tuple(series.tors[i] for i in rest), "background", 1.0, gbps, 0.0, 0.0, 0.0,
                 min(internal, 1.0), per, period, {})


# -- fitting each pattern ---------------------------------------------------------------------------
Edges = list[tuple[int, int]]


def _candidates(sub: np.ndarray) -> dict[str, Edges]:
    """Each pattern's best-fitting edges in the group's submatrix (empty when the shape cannot fit)."""
    k = len(sub)
    out = np.where(np.eye(k, dtype=bool), -1.0, sub)
    succ = out.argmax(axis=1)
    cands: dict[str, Edges] = {"all_to_all": [(i, j) for i in range(k) for j in range(k) if i != j]}
    cands["ring_allreduce"] = _ring(succ) if k >= 3 else []
    sink = int(sub.sum(axis=1).argmin())
    cands["pipeline"] = _chain(succ, sink)
    recv = int(sub.sum(axis=0).argmax())
    cands["incast"] = [(i, recv) for i in range(k) if i != recv] if k >= 3 else []
    return cands


def _ring(succ: np.ndarray) -> Edges:
    """The successor map as one cycle through every member, or nothing."""
    k, seen, i = len(succ), set(), 0
    while i not in seen:
        seen.add(i)
        i = int(succ[i])
    return [(j, int(succ[j])) for j in range(k)] if i == 0 and len(seen) == k else []


def _chain(succ: np.ndarray, sink: int) -> Edges:
    """The successor map with ``sink`` as the end, as one path through every member, or nothing."""
    k = len(succ)
    nxt = {i: int(succ[i]) for i in range(k) if i != sink}
    preds = set(nxt.values())
    heads = [i for i in range(k) if i not in preds]
    if len(heads) != 1 or len(preds) != k - 1:
        return []
    path, i = [heads[0]], heads[0]
    while i != sink and len(path) <= k:
        i = nxt[i]
        path.append(i)
    return list(zip(path, path[1:], strict=False)) if len(path) == k and path[-1] == sink else []


def _score(sub: np.ndarray, edges: Edges, gbps: float, o: Options) -> tuple[float, float, float]:
    """(fit x uniformity, fit, uniformity) of ``edges`` in ``sub``."""
    if not edges or gbps <= 0:
        return 0.0, 0.0, 0.0
    rates = np.array([sub[i, j] for i, j in edges])
    fit = min(float(rates.sum()) / gbps, 1.0)
    cv = float(rates.std() / rates.mean()) if rates.mean() > 0 else np.inf
    uni = float(np.clip(1.0 - cv / o.max_cv, 0.0, 1.0))
    return fit * uni, fit, uni


def periodicity(rate: np.ndarray, interval_s: float, options: Options | None = None) -> tuple[float, float | None]:
    """(peak, period in seconds) of the autocorrelation of ``rate`` over lags 2 .. len/2, at a local
    maximum; (0, None) for a series too short or without a peak above ``min_periodicity``.

    >>> peak, period = periodicity(np.tile([1.0, 1.0, 0.0, 0.0], 6), 10.0)
    >>> round(peak, 2), period
    (0.83, 40.0)
    """
    o = options or Options()
    x = np.asarray(rate, dtype=np.float64)
    n = len(x)
    if n < 6:
        return 0.0, None
    x = x - x.mean()
    var = float((x * x).sum())
    if var <= 1e-12 * max(1.0, float(np.abs(rate).max()) ** 2):
        return 0.0, None
    ac = np.array([float((x[:-lag] * x[lag:]).sum()) / var for lag in range(1, n // 2 + 1)])
    best, lag_best = 0.0, 0
    for lag in range(2, len(ac) + 1):
        a = ac[lag - 1]
        left = ac[lag - 2]
        right = ac[lag] if lag < len(ac) else -np.inf
        if a >= left and a >= right and a > best:
            best, lag_best = float(a), lag
    if best < o.min_periodicity:
        return max(best, 0.0), None
    return best, lag_best * interval_s
