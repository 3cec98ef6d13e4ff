"""Jobs the fabric carries but the intent does not declare (DESIGN.md, ML workloads: ``GET /v1/jobs/discovered``).

The classifier (:mod:`controller.telemetry.patterns`) finds the communication
groups of the measured traffic; a group is **discovered** when it matched a
collective template (:mod:`controller.telemetry.signatures`), the classifier is
confident of it (the higher of its label's confidence and its template's, as
``GET /v1/telemetry/patterns`` reports them) to at least ``min_confidence``, and
no declared job explains it (no job whose
members overlap the group's by half or more: Jaccard ``>= 0.5``). Each is offered
as a job document ready to adopt:

* ``tors``: the group's members in the order the template numbers them (ring or
  stage order): the permutation whose normalized matrix is nearest the
  template's (all of them up to ``EXACT_ORDER`` members; beyond, following each
  member's heaviest receiver from the quietest sender, or the listed order,
  whichever is nearer);
* ``iter_s``: the period recovered from the group's rate
  (:func:`controller.telemetry.period.recover_period`), else the telemetry
  interval (a rate without a period is offered as one iteration per interval);
* ``bytes_per_iter``: what makes the template's rate equal the measured one
  (``gbps x iter_s / 8e-9`` over the template's bytes per unit of ``B``);
* ``patch``: the JSON patch that adds it to the intent. Adopting it is the
  change any intent edit makes (``POST /v1/changes`` with the patch, then its
  review), as ``loom drain`` does: ``loom jobs adopt NAME``.

Offers the intent refuses (:func:`controller.model.intent.validate_job`) are left out.
"""

from __future__ import annotations

import itertools
import re

import numpy as np

from controller.model import Intent
from controller.model.documents import DiscoveredJobDocument, DiscoveredJobsDocument, OfferedJobDocument
from controller.model.errors import InvalidIntent
from controller.model.intent import validate_job
from controller.telemetry.collector import Method
from controller.telemetry.patterns import Group, Series, classify
from controller.telemetry.period import recover_period
from controller.telemetry.signatures import template_matrix

__all__ = ["EXACT_ORDER", "discovered_jobs", "explaining_jobs", "member_order"]

#: groups up to this size are ordered by trying every permutation (7! = 5,040)
EXACT_ORDER = 7
BYTES_PER_GIGABIT = 1e9 / 8


def _error(measured: np.ndarray, template: np.ndarray, order: tuple[int, ...]) -> float:
    m = measured[np.ix_(order, order)]
    return float(np.abs(m / max(m.sum(), 1e-12) - template / max(template.sum(), 1e-12)).sum())


def _follow(measured: np.ndarray) -> tuple[int, ...]:
    """From the member that receives least, each next member the heaviest receiver of the last not yet taken."""
    k = len(measured)
    order = [int(measured.sum(axis=0).argmin())]
    while len(order) < k:
        row = measured[order[-1]].copy()
        row[order] = -1.0
        order.append(int(row.argmax()))
    return tuple(order)


def member_order(measured: np.ndarray, template: np.ndarray) -> tuple[int, ...]:
    """The order of the members of ``measured`` (a group's ``k x k`` rates) that makes it nearest the
    template's ``k x k`` matrix: ``order[i]`` is the measured member that plays the template's member ``i``.

    >>> ring = np.zeros((3, 3)); ring[0, 2] = ring[2, 1] = ring[1, 0] = 5.0
    >>> member_order(ring, np.roll(np.eye(3), 1, axis=1))
    (0, 2, 1)
    """
    k = len(measured)
    if k <= EXACT_ORDER:
        perms = np.array(list(itertools.permutations(range(k))))
        m = measured / max(float(measured.sum()), 1e-12)
        t = template / max(float(template.sum()), 1e-12)
        err = np.abs(m[perms[:, :, None], perms[:, None, :]] - t[None]).sum(axis=(1, 2))
        return tuple(int(i) for i in perms[int(err.argmin())])
    candidates = [_follow(measured), tuple(range(k))]
    return min(candidates, key=lambda o: _error(measured, template, o))


def _confidence(group: Group) -> float:
    """The classifier's confidence in a group: its label's, or its template's when that is higher (a
    template's confidence is lowered more by a period that falls between whole intervals)."""
    return max(group.confidence if group.pattern != "background" else 0.0, group.collective_confidence)


def explaining_jobs(members: tuple[str, ...] | list[str], intent: Intent) -> list[str]:
    """The declared jobs that explain a group of ``members``: those whose ToRs overlap its by half or more
    (Jaccard ``>= 0.5``), the nearest first (then by name).

    >>> from controller.model.intent import validate_intent
    >>> from controller.gen import clos_document
    >>> doc = clos_document(pods=1, tors=4, planes=1, spines=1, seed=0)
    >>> doc["jobs"] = [{"name": "r", "tors": ["tor-0-0", "tor-0-1", "tor-0-2"], "collective": "ring_allreduce",
    ...                 "bytes_per_iter": 1e6, "iter_s": 1.0}]
    >>> intent = validate_intent(doc)
    >>> explaining_jobs(("tor-0-0", "tor-0-1"), intent), explaining_jobs(("tor-0-3",), intent)
    (['r'], [])
    """
    mine = set(members)
    overlap = ((len(mine & set(j.tors)) / len(mine | set(j.tors)), j.name) for j in intent.jobs)
    return [name for share, name in sorted(overlap, key=lambda x: (-x[0], x[1])) if share >= 0.5]


def _explained(group: Group, intent: Intent) -> bool:
    return bool(explaining_jobs(group.members, intent))


def _name(collective: str, first: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{collective}-{first}")
    name, k = base, 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    taken.add(name)
    return name


def _offer(group: Group, series: Series, intent: Intent, taken: set[str]) -> DiscoveredJobDocument | None:
    assert group.collective is not None
    k = len(group.members)
    template = template_matrix(intent.registry.get(group.collective), k)
    if template is None or group.gbps <= 0:
        return None
    idx = [series.tors.index(m) for m in group.members]
    order = member_order(series.mean()[np.ix_(idx, idx)], template)
    rate = series.rates[:, idx][:, :, idx].sum(axis=(1, 2))
    fit = recover_period(rate, series.interval_s) if len(series.rates) > 1 else None
    iter_s = fit.period_s if fit is not None and fit.period_s is not None else series.interval_s
    bytes_per_iter = group.gbps * BYTES_PER_GIGABIT * iter_s / float(template.sum())
    tors = [group.members[i] for i in order]
    spec = {"name": _name(group.collective, tors[0], taken), "tors": tors, "collective": group.collective,
            "bytes_per_iter": float(f"{bytes_per_iter:.6g}"), "iter_s": round(iter_s, 3)}
    try:
        validate_job(spec, intent)
    except InvalidIntent:
        return None
    patch = ([{"op": "add", "path": "/jobs/-", "value": spec}] if intent.jobs
             else [{"op": "add", "path": "/jobs", "value": [spec]}])
    return DiscoveredJobDocument(
        members=list(group.members), pattern=group.pattern, collective=group.collective,
        confidence=round(_confidence(group), 4), gbps=round(group.gbps, 6),
        period_s=None if fit is None or fit.period_s is None else round(fit.period_s, 3),
        job=OfferedJobDocument.model_validate(spec), patch=patch)  # type: ignore[arg-type]


def discovered_jobs(intent: Intent, method: Method, series: Series, window_s: float, *,
                    min_confidence: float = 0.8) -> DiscoveredJobsDocument:
    """The groups of ``series`` (the measured ToR-to-ToR traffic, :meth:`Telemetry.tor_series`) that match a
    template with ``min_confidence`` and that no job of ``intent`` explains, each offered as a job."""
    taken = {j.name for j in intent.jobs}
    found = []
    for g in classify(series, None, intent.registry):
        if g.collective is None or _confidence(g) < min_confidence or _explained(g, intent):
            continue
        offer = _offer(g, series, intent, taken)
        if offer is not None:
            found.append(offer)
    return DiscoveredJobsDocument(window_s=window_s, method=method, min_confidence=min_confidence, jobs=found)
