"""Tuning options of the solver: the knobs a user or a bench may turn, with their defaults.

This module owns the frozen option objects that :func:`solver.solve` and
:func:`solver.robust.solve_robust` pass down to every stage (CONVENTIONS.md,
item 19), so that no stage reads a module-level tuning constant. Every field
is a bound on work or a tolerance; the defaults are the values the plans of
the bench fabrics were tuned with, and the same options give the same plan on
any machine (no bound here is a time limit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ClosOptions", "ReactOptions", "RobustOptions"]


@dataclass(frozen=True, slots=True)
class ClosOptions:
    """Knobs of the clean-Clos pipeline (:mod:`solver.clos`).

    Lazy LP (:mod:`solver.clos.plan`)
        ``lp_rounds``: LPs with lazily added capacity rows before every row is in;
        ``lazy_overload``: relative excess over ``U`` that makes an arc's row join;
        ``lazy_near``: arcs at least this fraction of ``U`` join with them;
        ``tor_rows_at``: the relaxed LP has every ToR row from its first round when some ToR's
        cut bound is at least this fraction of the pods' cut bound: first those ToR arcs whose
        ECMP utilization is at least ``hot_tor_rows`` of the hottest ToR arc's, then, as with
        every lazy row, those the optimum overloads (each round's PDLP starts from the last
        one's primal and dual);
        ``fit_above``: the spine-transport relaxation's fitted routing is kept when its
        leaf-spine arcs end within this (relative) of the relaxation's optimum, else the full
        model is solved (PDLP's own tolerance leaves about 1e-4);
        ``pdlp_tolerance``: PDLP's relative gap and residual on the Clos LPs;
        ``warm_start``: the first PDLP of the lazy loop starts from the cold optimum this process
        last found for the same LP less drains (:mod:`solver.clos.warm`; a failure reaction's plan),
        when it has one; cold optima are kept either way.
    Fit of the relaxation (:mod:`solver.clos.relax`)
        ``fit_tolerance``: IPF stops once no arc's fitted load is further than this from its
        margin (in utilization), or once ten sweeps shrink that by less than ``fit_progress``
        (relative: the margins of an LP solved to a tolerance need not fit exactly, and on
        Clos L the fit sat at 2.6e-7 from its tenth sweep to its 400th); ``fit_sweeps``: and
        after at most this many sweeps.
    Rounding (:mod:`solver.clos.rounding`, :mod:`solver.clos.repair`)
        ``small_groups``: below this many leaf groups the per-group (EuroSys) rounding is
        tried too and the better plan kept; ``rounding_passes``: most passes of the load-aware
        rounding; ``descent_max_weights``: fabrics with at most this many leaf weights finish
        the rounding by best-response descent (:mod:`solver.clos.descent`), ``descent_rounds``
        rounds of it at most, each group free to take its budget or one of ``descent_totals - 1``
        totals just below, a local optimum (or ``descent_patience`` rounds without a lower
        maximum) kicked by lowering the hottest arcs' capacities by ``descent_kick`` (0: stop
        there); ``milp_max_weights``, ``milp_nodes``: on fabrics with at most this many leaf
        weights, an integer program (this many branch-and-bound nodes; 0, the default: none)
        restricts the LP's ToR splits to whole weight units, and the rounding of its solution
        competes (on S it cost 5 to 10 s for a gap at most 0.15 point lower, so it is opt-in);
        ``repair_above``: the unit-move repair runs only when rounding
        left the MLU this far (relative) above the LP optimum; ``repair_tries``: candidate
        moves it may price, shared by the roundings it polishes; ``repair_moves``: most moves
        per rounding.
    """

    lp_rounds: int = 4
    lazy_overload: float = 1e-6
    lazy_near: float = 0.98
    tor_rows_at: float = 0.9
    hot_tor_rows: float = 0.9
    fit_above: float = 1e-3
    pdlp_tolerance: float = 1e-5
    warm_start: bool = False
    fit_tolerance: float = 1e-7
    fit_progress: float = 0.01
    fit_sweeps: int = 400
    small_groups: int = 5_000
    rounding_passes: int = 3
    milp_max_weights: int = 4_000
    milp_nodes: int = 0
    descent_max_weights: int = 4_000
    descent_rounds: int = 20
    descent_totals: int = 8
    descent_kick: float = 0.05
    descent_patience: int = 3
    repair_above: float = 0.002
    repair_tries: int = 20_000
    repair_moves: int = 2_000


#: the (t1, t2) over-provisioning grid of the pod-level robust LP (t = 1, equal splits, never won)
ROBUST_GRID: tuple[tuple[float, float], ...] = ((1.2, 1.0), (1.1, 1.0), (1.3, 1.0), (1.2, 1.1), (1.45, 1.0),
                                                (1.3, 1.2))


@dataclass(frozen=True, slots=True)
class RobustOptions:
    """Knobs of robust WCMP (:mod:`solver.robust`, :mod:`solver.clos.robust`).

    ``plan``: the options of the plain plans solved on the way;
    ``ffc_max_edges``: the DAG allocation LP runs on plans with at most this many DAG edges
    (larger ones search blends instead); ``derate_margin``: derated capacities land this far
    (relative) below the limit; ``blend_steps``: bisection steps of the blend search;
    ``clos_grid``: the ``(t1, t2)`` grid of the pod-level LP; ``clos_derate_rounds``: its LPs
    per grid point after the first; ``clos_margin``: its allocation rows aim this far
    (relative) under the limit, for the rounding of weights; ``clos_penalty``: the objective
    weight of their excess over the limit; ``clos_floor_slack``: a certified candidate this
    close (relative) to the plain plan's LP bound ends the grid search.
    """

    plan: ClosOptions = field(default_factory=ClosOptions)
    ffc_max_edges: int = 60_000
    derate_margin: float = 0.02
    blend_steps: int = 3
    clos_grid: tuple[tuple[float, float], ...] = ROBUST_GRID
    clos_derate_rounds: int = 2
    clos_margin: float = 0.01
    clos_penalty: float = 100.0
    clos_floor_slack: float = 0.01


@dataclass(frozen=True, slots=True)
class ReactOptions:
    """Knobs of a failure reaction made from the full plan (:mod:`solver.clos.react`).

    ``hot_rows``: the LP starts with the capacity rows of the touched leaf groups' arcs and of every arc
    its columns load whose utilization is at least this fraction of the hottest one's (the others join when
    the answer overloads them, with those at least this fraction of its utilization); ``slack``: the second
    LP (the ``a`` columns moved as little as possible) may end this much (relative) above the first's
    utilization, or the utilization of the arcs it leaves alone if that is higher; ``within``: the plan is
    made so only when its utilization (after rounding) is at most this much (relative) above the full plan's
    LP optimum, a lower bound of the degraded fabric's, hence of its cold plan's (else the caller compiles);
    ``every_group``: when the touched leaf groups alone do not get there, every leaf group of the pod pairs
    is split again too, if they have at most this many spine columns.
    """

    hot_rows: float = 0.98
    slack: float = 1e-4
    within: float = 0.01
    every_group: int = 4000
