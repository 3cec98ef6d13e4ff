"""One compile step: an intent becomes a forwarding plan the same way everywhere.

:func:`compile_plan` is what ``loom plan``, ``loom check``, a change's review
and (later) automatic re-tuning call, so that the API and the CLI can never
plan one intent differently. :class:`CompileOptions` says how: the LP backend,
and whether to solve robust WCMP (FFC-style, :func:`solver.robust.solve_robust`)
against the scenarios and limit of the intent's ``failure_tolerance`` policy,
with the safety replay (:func:`safety.replay.peaks`) as the scenario oracle.
Robustness is only meaningful under that policy: without one, a robust
request compiles the plain plan.

The plan depends on what the intent says, not on the order of its lists: the
solver sees the intent in :func:`canonical_order` (an LP with several optimal
weightings may otherwise pick another one for a permuted input, and every
switch's weights would change for a reordered document).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, replace

from controller.model import Intent, Link
from controller.model.plan import LinkLoad, Plan
from solver.core.lp import DEFAULT_BACKEND

__all__ = ["CompileOptions", "canonical_order", "compile_plan"]


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """How to compile: ``backend`` is one of :data:`solver.BACKENDS`; ``robust`` asks for weights that
    hold the ``failure_tolerance`` limit in every scenario where possible."""

    backend: str = DEFAULT_BACKEND
    robust: bool = False


def canonical_order(intent: Intent) -> Intent:
    """``intent`` with its lists in one order whatever the document's: devices by name, links by their
    lower end (each turned to run from its lower end), failure domains by name, prefixes by address,
    demands by ingress and destination, jobs by name (policies keep theirs; a prefix's origins and a
    job's members are meanings, not order)."""
    def net(prefix: str) -> tuple[int, int]:
        n = ipaddress.IPv4Network(prefix)
        return int(n.network_address), n.prefixlen

    def turned(lk: Link) -> Link:
        if lk.end_a <= lk.end_b:
            return lk
        return lk.model_copy(update={"a": lk.b, "a_port": lk.b_port, "b": lk.a, "b_port": lk.a_port})

    return intent.model_copy(update={
        "devices": tuple(sorted(intent.devices, key=lambda d: d.name)),
        "links": tuple(sorted((turned(lk) for lk in intent.links), key=lambda lk: lk.key)),
        "failure_domains": tuple(sorted(intent.failure_domains, key=lambda f: f.name)),
        "prefixes": tuple(sorted(intent.prefixes, key=lambda p: net(p.prefix))),
        "demands": tuple(sorted(intent.demands, key=lambda x: (x.from_, net(x.to), x.gbps))),
        "jobs": tuple(sorted(intent.jobs, key=lambda j: j.name)),
    })


def compile_plan(intent: Intent, options: CompileOptions = CompileOptions(), *,
                 progress: Callable[[str, float], None] | None = None) -> Plan:
    """The forwarding plan of a validated ``intent``.

    Parameters
    ----------
    intent : a validated intent.
    options : the backend and whether the plan is robust (see :class:`CompileOptions`).
    progress : called as ``progress(stage, fraction)`` while solving.

    Returns
    -------
    The :class:`~controller.model.plan.Plan` (DESIGN.md, contract 2).

    Raises
    ------
    controller.model.errors.Infeasible
        When a demand cannot be routed.

    Examples
    --------
    >>> from controller.gen import clos_document
    >>> from controller.model.intent import validate_intent
    >>> plan = compile_plan(validate_intent(clos_document(pods=2, tors=2, planes=2, spines=2)))
    >>> 0 < plan.summary.max_utilization <= plan.summary.ecmp_max_utilization + 1e-9
    True
    """
    canonical = canonical_order(intent)
    if options.robust and intent.policy("failure_tolerance") is not None:
        from safety.replay import peaks
        from solver.robust import solve_robust

        plan = solve_robust(canonical, peaks, backend=options.backend, progress=progress)
    else:
        from solver import solve

        plan = solve(canonical, backend=options.backend, progress=progress)
    return _as_written(plan, intent)


def _as_written(plan: Plan, intent: Intent) -> Plan:
    """``plan`` (of the canonical intent) with its devices and links in ``intent``'s order and each
    link's direction as ``intent`` writes it."""
    loads = {min(f"{x.a}:{x.a_port}", f"{x.b}:{x.b_port}"): x for x in plan.links}
    links: list[LinkLoad] = []
    for lk in intent.links:
        x = loads.get(lk.key)
        if x is None:
            continue
        if (x.a, x.a_port) != (lk.a, lk.a_port):
            x = LinkLoad(x.b, x.b_port, x.a, x.a_port, x.gbps_ba, x.gbps_ab, x.utilization)
        links.append(x)
    devices = {d.name: plan.devices[d.name] for d in intent.devices if d.name in plan.devices}
    devices.update((name, dp) for name, dp in plan.devices.items() if name not in devices)
    return replace(plan, devices=devices, links=tuple(links))
