"""Template signatures: which collective of the registry a measured group's traffic looks like (pure, numpy).

The classifier (:mod:`controller.telemetry.patterns`) reads the same templates
as the planner (:mod:`controller.model.collectives`): each template, filled
for the group's size ``k`` with its parameters' defaults, gives a ``k x k``
matrix (phases summed: counters see an iteration, not its phases), and both
that matrix and the measured one are reduced to a **signature** that does not
depend on the order of the members or on the scale of the traffic:

* the sorted out- and in-degrees over ``k - 1`` of the strong edges (an edge is
  strong at ``Options.edge_floor`` of the heaviest one, so that noise and
  background fall under it);
* reciprocity: the share of strong edges whose reverse is strong too;
* the sorted row and column sums times ``k`` over the total (who sends, who
  receives how much);
* the coefficient of variation of the strong edges' rates.

When most edges are under the floor (a sparse pattern), their mean rate is
taken as the background level and subtracted from every edge first.

:func:`match` answers the template whose signature is nearest (the weighted L1
distance of :func:`distance`), a confidence ``exp(-d / Options.scale)`` and
the other templates at the same distance: matrices that no counter can tell
apart (a ring all-reduce, a reduce-scatter and an all-gather send along the
same ring in the same proportions) are reported as alternatives rather than
guessed between. A template that needs a parameter without a default, or whose
``where`` rules refuse ``k`` members, is not a candidate for a group of ``k``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from controller.model.collectives import CollectiveError, Registry, Template, traffic

__all__ = ["Match", "SignatureOptions", "distance", "match", "signature", "template_matrix"]


@dataclass(frozen=True, slots=True)
class SignatureOptions:
    """``edge_floor``: an edge is strong at this share of the heaviest edge. ``scale``: the distance at
    which the confidence falls to 1/e. ``tie``: distances closer than this are the same answer.
    ``sums_weight``: the weight of the row and column sums in the distance (degrees, reciprocity
    and the rates' spread weigh 1, 1, 1 and 0.5)."""

    edge_floor: float = 0.1
    scale: float = 0.5
    tie: float = 1e-6
    sums_weight: float = 0.25


@dataclass(frozen=True, slots=True)
class Match:
    """The nearest template, its confidence, its distance and the templates equally near."""

    name: str
    confidence: float
    distance: float
    alternatives: tuple[str, ...]


Signature = tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray, float]


def signature(m: np.ndarray, options: SignatureOptions | None = None) -> Signature:
    """The order- and scale-free signature of the square traffic matrix ``m`` (see the module docstring)."""
    o = options or SignatureOptions()
    k = len(m)
    m = np.where(np.eye(k, dtype=bool), 0.0, np.clip(np.asarray(m, dtype=np.float64), 0.0, None))
    total = float(m.sum())
    if k < 2 or total <= 0:
        z = np.zeros(k)
        return z, z, 0.0, z, z, 0.0
    strong = m >= o.edge_floor * float(m.max())
    off = ~np.eye(k, dtype=bool)
    weak = off & ~strong
    if weak.sum() > off.sum() / 2:  # a sparse pattern: what falls under the floor is background, off every edge
        m = np.where(off, np.clip(m - float(m[weak].mean()), 0.0, None), 0.0)
        total = float(m.sum())
    np.fill_diagonal(strong, False)
    count = int(strong.sum())
    out_deg = np.sort(strong.sum(axis=1)) / (k - 1)
    in_deg = np.sort(strong.sum(axis=0)) / (k - 1)
    recip = float((strong & strong.T).sum()) / count if count else 0.0
    rows = np.sort(m.sum(axis=1)) * k / total
    cols = np.sort(m.sum(axis=0)) * k / total
    w = m[strong]
    cv = float(w.std() / w.mean()) if count and w.mean() > 0 else 0.0
    return out_deg, in_deg, recip, rows, cols, min(cv, 2.0)


def distance(a: Signature, b: Signature, options: SignatureOptions | None = None) -> float:
    """The weighted L1 distance of two signatures of the same size."""
    w = (options or SignatureOptions()).sums_weight
    return float(np.abs(a[0] - b[0]).mean() + np.abs(a[1] - b[1]).mean() + abs(a[2] - b[2])
                 + w * np.abs(a[3] - b[3]).mean() + w * np.abs(a[4] - b[4]).mean() + 0.5 * abs(a[5] - b[5]))


def template_matrix(template: Template, k: int) -> np.ndarray | None:
    """``template``'s bytes per iteration among ``k`` members with its defaults (phases summed), or ``None``
    when it cannot be filled for ``k`` members without more parameters."""
    return _matrix(template, k)


@functools.lru_cache(maxsize=4096)
def _matrix(template: Template, k: int) -> np.ndarray | None:
    try:
        phases = traffic(template, k, 1.0)
    except CollectiveError:
        return None
    m = np.zeros((k, k))
    for phase in phases:
        for (i, j), size in phase.items():
            m[i, j] += size
    return m if m.sum() > 0 else None


@functools.lru_cache(maxsize=4096)
def _template_signature(template: Template, k: int, options: SignatureOptions) -> Signature | None:
    m = _matrix(template, k)
    return None if m is None else signature(m, options)


def match(m: np.ndarray, registry: Registry, options: SignatureOptions | None = None) -> Match | None:
    """The template of ``registry`` nearest to the measured group matrix ``m`` (``None`` when no template
    can be filled for its size).

    >>> from controller.model.collectives_builtin import BUILTINS
    >>> ring = np.roll(np.eye(5), 1, axis=1) * 7.0
    >>> found = match(ring, BUILTINS)
    >>> found.name, found.alternatives, round(found.confidence, 3)
    ('ring_allreduce', ('reduce_scatter', 'all_gather'), 1.0)
    """
    o = options or SignatureOptions()
    mine = signature(m, o)
    scored: list[tuple[float, str]] = []
    for name, template in registry.items():
        theirs = _template_signature(template, len(m), o)
        if theirs is not None:
            scored.append((distance(mine, theirs, o), name))
    if not scored:
        return None
    best = min(d for d, _ in scored)
    names = [n for d, n in scored if d - best <= o.tie]
    return Match(names[0], float(np.exp(-best / o.scale)), best, tuple(names[1:]))
