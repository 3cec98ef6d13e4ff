"""One compile step: an intent becomes a forwarding plan the same way everywhere.

:func:`compile_plan` is what ``loom plan``, ``loom check``, a change's review
and (later) automatic re-tuning call, so that the API and the CLI can never
plan one intent differently. :class:`CompileOptions` says how: the LP backend,
and whether to solve robust WCMP (FFC-style, :func:`solver.robust.solve_robust`)
against the scenarios and limit of the intent's ``failure_tolerance`` policy,
with the safety replay (:func:`safety.replay.peaks`) as the scenario oracle.
The intent asks for robust WCMP itself with ``{kind: wcmp, objective:
robust}``, so that reviews and commits use the robust plan too (DESIGN.md,
Operational state and failure reaction). Robustness is only meaningful under
that policy: without one, a robust request compiles the plain plan. An intent
whose ``auto_te`` policy has ``objective: jobs`` and that has jobs compiles the
plan of least worst priority-weighted job slowdown (:mod:`controller.jobplan`),
so that its reviews, commits and re-tunings all use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from controller.jobplan import plan_for_jobs
from controller.model import Intent
from controller.model.plan import Plan
from solver import solve
from solver.clos.react import reaction_plan
from solver.core.lp import DEFAULT_BACKEND
from solver.core.options import ClosOptions
from solver.solve import collector_paused

__all__ = ["CompileOptions", "compile_plan", "compile_reaction"]


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """How to compile: ``backend`` is one of :data:`solver.BACKENDS`; ``robust`` asks for weights that
    hold the ``failure_tolerance`` limit in every scenario where possible; ``warm_start`` starts a Clos
    LP from the optimum this process found for the same fabric without drains (:mod:`solver.clos.warm`:
    a failure reaction's plan, the active revision planned around failed parts)."""

    backend: str = DEFAULT_BACKEND
    robust: bool = False
    warm_start: bool = False


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
    if _robust(intent, options):
        # lazy: the robust objective only; safety.replay loads the numba kernels (1.7 s on a cold start)
        from safety.replay import peaks
        from solver.robust import solve_robust  # lazy: with safety.replay above

        return solve_robust(intent, peaks, backend=options.backend, progress=progress)
    plan = solve(intent, backend=options.backend, progress=progress, options=ClosOptions(warm_start=options.warm_start))
    if _for_jobs(intent):  # DESIGN.md ML workloads: auto_te objective
        with collector_paused():  # its candidates' forwarding tables and job times allocate as a plan does
            base = plan  # the steered candidates differ from intent in capacities only: its pod model serves
            plan = plan_for_jobs(intent, base, lambda steered: solve(steered, backend=options.backend, like=base))
    return plan


def _robust(intent: Intent, options: CompileOptions) -> bool:
    """Whether ``intent`` compiles to the robust plan (asked for, by the options or the intent, under a
    ``failure_tolerance`` policy)."""
    wcmp = intent.policy("wcmp")
    robust = options.robust or (wcmp is not None and wcmp.objective == "robust")  # the intent may ask for it
    return robust and intent.policy("failure_tolerance") is not None


def _for_jobs(intent: Intent) -> bool:
    te = intent.policy("auto_te")
    return te is not None and te.objective == "jobs" and bool(intent.jobs)


def compile_reaction(intent: Intent, plan: Plan, reduced: Intent, links: frozenset[str], devices: frozenset[str],
                     options: CompileOptions) -> Plan:
    """The plan of ``reduced`` (``intent`` with the failed ``links`` and ``devices`` drained, as
    :func:`controller.operations.overlay.overlay_intent` makes it), ``plan`` being ``intent``'s.

    When only leaf-spine links of a Clos failed and ``plan`` is the plain plan this process compiled for
    ``intent``, the plan is made from it (:func:`solver.clos.react.reaction_plan`: the touched leaf groups
    split again, in well under a second on Clos L); otherwise ``reduced`` is compiled with ``options``."""
    if links and not devices and not _robust(reduced, options) and not _for_jobs(reduced):
        made = reaction_plan(intent, plan, links)
        if made is not None:
            return replace(made, fabric=reduced.name)
    return compile_plan(reduced, options)
