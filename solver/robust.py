"""Robust WCMP: weights that keep utilization under the limit in every failure scenario.

This module owns the failure-tolerant variant of the WCMP plan (the spirit of
FFC, "Traffic Engineering with Forward Fault Correction", SIGCOMM 2014: choose
the traffic split so that the *rescaled* traffic after any protected failure
still fits). Under local repair a device renormalizes its surviving weights, so
the load a failure puts on a link is a ratio of split variables, not a linear
function of them; instead of a bilinear program this module solves a sequence
of ordinary min-MLU LPs on *derated* capacities (a cutting-plane scheme whose
oracle is the exact scenario replay): every round replays the plan under every
scenario (both stages), and each link whose worst scenario utilization exceeds
the limit gets its effective capacity scaled by ``limit / peak`` (with a small
margin) for the next LP, which then keeps baseline load off the links that
failures overload while still minimizing the (derated) maximum utilization.
The best plan seen is kept: fewest violating scenarios, then lowest worst
utilization, then lowest baseline MLU. Which scenarios make the limit
*impossible* is proven separately: the min-MLU LP on the failed topology (the
routing's next hops after the failure, any weights) is a lower bound for every
plan in that scenario's reconverged stage; if it exceeds the limit, no weights
can meet it. The price of robustness is reported as the baseline MLU with and
without it (``summary.extra["robust"]``).

The scenario oracle is a parameter (``evaluate``), so the solver does not
import the safety layer; :func:`safety.replay.peaks` is the one to pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

from controller.errors import Infeasible
from controller.model import Intent
from solver.lp import DEFAULT_BACKEND
from solver.plan import Plan
from solver.solve import solve

__all__ = ["Evaluation", "failed_topology_intent", "solve_robust"]

MARGIN = 0.02  # derate a little below the limit so the next LP lands inside it
Progress = Callable[[str, float], None]


class Evaluation(Protocol):
    """What the scenario oracle returns (see :class:`safety.replay.Peaks`)."""

    link_peak: dict[str, float]
    violating: dict[str, float]
    failing: tuple[str, ...]
    baseline_mlu: float
    limits: dict[str, float]


Evaluate = Callable[[Intent, Plan], Evaluation]


def _derated(intent: Intent, capacity: dict[str, float]) -> Intent:
    links = tuple(link.model_copy(update={"capacity_gbps": capacity[link.key]}) for link in intent.links)
    out = intent.model_copy(update={"links": links})
    for key in ("link_by_end", "content_hash"):
        out.__dict__.pop(key, None)
    return out


def _real_plan(intent: Intent, plan: Plan, baseline_mlu: float, extra: dict[str, Any]) -> Plan:
    """``plan`` (solved on derated capacities) with loads judged on the real ones."""
    cap = {(link.a, link.a_port): link.capacity_gbps for link in intent.links}
    links = tuple(dataclasses.replace(x, utilization=max(x.gbps_ab, x.gbps_ba) / cap[(x.a, x.a_port)])
                  for x in plan.links)
    summary = dataclasses.replace(plan.summary, max_utilization=baseline_mlu,
                                  extra={**plan.summary.extra, "robust": extra})
    return Plan(plan.fabric, summary, plan.devices, links)


def failed_topology_intent(intent: Intent, devices: frozenset[str], links: frozenset[str]) -> Intent:
    """``intent`` with the failed parts removed (and what only they originated or sent)."""
    from controller.intent import validate_intent

    doc = intent.to_document()
    dead_links = set(links)
    for link in intent.links:
        if link.a in devices or link.b in devices:
            dead_links.add(link.key)
    ends = {e for link in intent.links if link.key in dead_links for e in (link.end_a, link.end_b)}
    doc["devices"] = [d for d in doc["devices"] if d["name"] not in devices]
    doc["links"] = [x for x in doc["links"] if min(f"{x['a']}:{x['a_port']}", f"{x['b']}:{x['b_port']}")
                    not in dead_links]
    prefixes = []
    for p in doc.get("prefixes", []):
        origins = [o for o in p["origins"] if o not in devices]
        if origins:
            prefixes.append({**p, "origins": origins})
    kept = {p["prefix"] for p in prefixes}
    doc["prefixes"] = prefixes
    doc["demands"] = [d for d in doc.get("demands", []) if d["from"] not in devices and d["to"] in kept]
    doc["failure_domains"] = []
    doc["policies"] = [p for p in doc.get("policies", []) if p["kind"] != "failure_tolerance"
                       and not (p["kind"] == "drain" and (p["target"] in devices or p["target"] in ends))]
    return validate_intent(doc)


def _impossible(intent: Intent, names: list[str], limit: float, backend: str,
                parts: Callable[[str], tuple[frozenset[str], frozenset[str]]]) -> dict[str, float | None]:
    """Per scenario, the min-MLU bound of its failed topology (None: could not tell)."""
    out: dict[str, float | None] = {}
    for name in names:
        devices, links = parts(name)
        try:
            bound = solve(failed_topology_intent(intent, devices, links), backend=backend).summary.lp_bound
        except Exception:  # noqa: BLE001 - an unroutable or invalid failed topology: no verdict
            out[name] = None
            continue
        out[name] = float(bound)
    return out


def solve_robust(intent: Intent, evaluate: Evaluate, *, backend: str = DEFAULT_BACKEND, max_rounds: int = 12,
                 prove: int = 10, progress: Progress | None = None) -> Plan:
    """A plan whose utilization stays under the limit in every scenario where possible.

    Parameters
    ----------
    intent : a validated intent; its ``failure_tolerance`` policy sets scope and limit.
    evaluate : the scenario oracle, ``evaluate(intent, plan)`` -> :class:`Evaluation`
        (pass :func:`safety.replay.peaks`).
    backend : the LP backend of :func:`solver.solve`.
    max_rounds : derating rounds at most.
    prove : how many still-violating scenarios to test for impossibility.
    progress : called as ``progress(stage, fraction)``.

    Returns
    -------
    A :class:`~solver.plan.Plan` with ``summary.extra["robust"]``: ``robust``
    (every scenario under its limit), ``limit``, ``baseline_mlu_plain`` and
    ``baseline_mlu_robust`` (the price), ``rounds``, ``seconds``, ``violating``
    (scenario -> worst utilization, left after the last round) and
    ``impossible`` (scenario -> the failed topology's min-MLU bound, for those
    whose bound exceeds the limit: no weights meet it there).

    Raises
    ------
    controller.errors.Infeasible : the intent cannot be routed at all.
    """
    t0 = time.perf_counter()
    say: Progress = progress or (lambda stage, frac: None)
    plain = solve(intent, backend=backend)
    ev = evaluate(intent, plain)
    limit = ev.limits["failure"]
    capacity = {link.key: link.capacity_gbps for link in intent.links}
    best: tuple[tuple[int, float, float], Plan, Evaluation] = (_score(ev), plain, ev)
    rounds = 0
    while ev.violating and rounds < max_rounds:
        rounds += 1
        say("robust", rounds / max_rounds)
        for key, peak in ev.link_peak.items():
            if peak > limit:
                capacity[key] *= (limit / peak) * (1 - MARGIN)
        try:
            plan = solve(_derated(intent, capacity), backend=backend)
        except Infeasible:
            break
        ev = evaluate(intent, plan)
        if _score(ev) < best[0]:
            best = (_score(ev), plan, ev)
    _, plan, ev = best
    impossible: dict[str, float] = {}
    if ev.violating:
        worst = sorted(ev.violating, key=lambda n: -ev.violating[n])[:prove]
        bounds = _impossible(intent, worst, limit, backend, _parts_of(intent))
        impossible = {n: round(b, 6) for n, b in bounds.items() if b is not None and b > limit + 1e-9}
    extra = {
        "robust": not ev.violating,
        "limit": limit,
        "baseline_mlu_plain": round(evaluate_baseline(plain, intent), 6),
        "baseline_mlu_robust": round(ev.baseline_mlu, 6),
        "rounds": rounds,
        "seconds": round(time.perf_counter() - t0, 3),
        "violating": {n: round(u, 6) for n, u in sorted(ev.violating.items(), key=lambda kv: -kv[1])[:50]},
        "violating_count": len(ev.violating),
        "impossible": impossible,
    }
    say("robust", 1.0)
    return _real_plan(intent, plan, ev.baseline_mlu, extra)


def _score(ev: Evaluation) -> tuple[int, float, float]:
    return (len(ev.violating), max(ev.violating.values(), default=0.0), ev.baseline_mlu)


def evaluate_baseline(plan: Plan, intent: Intent) -> float:
    """The plain plan's baseline MLU as its summary reports it (after rounding)."""
    return float(plan.summary.max_utilization)


def _parts_of(intent: Intent) -> Callable[[str], tuple[frozenset[str], frozenset[str]]]:
    domains = {fd.name: fd for fd in intent.failure_domains}

    def parts(name: str) -> tuple[frozenset[str], frozenset[str]]:
        if name.startswith("device:"):
            return frozenset({name[len("device:"):]}), frozenset()
        if name.startswith("link:"):
            return frozenset(), frozenset({name[len("link:"):]})
        devices: set[str] = set()
        links: set[str] = set()
        for part in name.split("+"):
            fd = domains.get(part)
            if fd is not None:
                devices |= set(fd.devices)
                links |= {intent.link_by_end[e].key for e in fd.links if e in intent.link_by_end}
        return frozenset(devices), frozenset(links)

    return parts
