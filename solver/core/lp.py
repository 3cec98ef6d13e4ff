"""LP backends: one sparse-matrix LP, solved by the backend the caller names.

This module owns the boundary to the LP solvers. The solver's models are built
as numpy/scipy arrays (never element by element) and handed here as
``min c.x  s.t.  row_lb <= A x <= row_ub,  col_lb <= x <= col_ub``. Backends:
``auto`` (the default: ``glop`` for models up to
:data:`AUTO_PDLP_VARIABLES` variables, ``pdlp`` beyond), ``glop`` (OR-Tools'
simplex), ``pdlp`` (OR-Tools' first-order
method, for very large models), ``highs`` (HiGHS through OR-Tools'
``ModelBuilder``) and ``scipy-highs`` (HiGHS through SciPy: an independent
build, used by tests as a second opinion).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from controller.model.errors import Infeasible

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "LpResult", "solve_lp", "solve_milp"]

BACKENDS: tuple[str, ...] = ("auto", "glop", "pdlp", "highs", "scipy-highs")
DEFAULT_BACKEND = "auto"
#: ``auto`` picks ``glop`` up to this many variables and ``pdlp`` beyond (simplex slows down sharply there)
AUTO_PDLP_VARIABLES = 150_000

#: PDLP's relative and absolute optimality tolerance unless the caller names one
PDLP_TOLERANCE = 1e-7


def _pdlp_params(tolerance: float) -> str:
    return (f"termination_criteria {{ simple_optimality_criteria {{ eps_optimal_relative: {tolerance:g} "
            f"eps_optimal_absolute: {tolerance:g} }} }} num_threads: 2")


@dataclass(frozen=True, slots=True)
class LpResult:
    x: np.ndarray
    objective: float
    seconds: float
    backend: str = ""


def _ortools(backend: str, c: np.ndarray, a: sp.csr_matrix, row_lb: np.ndarray, row_ub: np.ndarray,
             col_lb: np.ndarray, col_ub: np.ndarray, tolerance: float = PDLP_TOLERANCE) -> LpResult:
    from ortools.linear_solver.python import model_builder as mb
    from ortools.linear_solver.python import model_builder_helper as mbh

    model = mb.Model()
    model.helper.fill_model_from_sparse_data(col_lb, col_ub, c, row_lb, row_ub, a)  # type: ignore[arg-type]
    helper = mbh.ModelSolverHelper(backend.upper())
    if not helper.solver_is_supported():
        raise ValueError(f"LP backend {backend!r} is not available in this OR-Tools build")
    if backend == "pdlp":
        helper.set_solver_specific_parameters(_pdlp_params(tolerance))
    elif backend == "highs":
        helper.set_solver_specific_parameters("output_flag=false")
    t0 = time.perf_counter()
    helper.solve(model.helper)
    seconds = time.perf_counter() - t0
    status = helper.status()
    if status not in (mb.SolveStatus.OPTIMAL,):
        if status == mb.SolveStatus.FEASIBLE and backend == "pdlp":
            pass  # PDLP stops at its tolerance; its iterate is the answer
        else:
            raise Infeasible(f"the LP backend {backend} stopped with status {status.name}",
                             [{"backend": backend, "status": status.name}])
    return LpResult(np.asarray(helper.variable_values(), dtype=np.float64),
                    float(helper.objective_value()), seconds)


def _scipy(c: np.ndarray, a: sp.csr_matrix, row_lb: np.ndarray, row_ub: np.ndarray,
           col_lb: np.ndarray, col_ub: np.ndarray) -> LpResult:
    from scipy.optimize import linprog

    eq = row_lb == row_ub
    ub_rows = ~eq & np.isfinite(row_ub)
    lb_rows = ~eq & np.isfinite(row_lb)
    a_ub = sp.vstack([a[ub_rows], -a[lb_rows]]).tocsr()
    b_ub = np.concatenate([row_ub[ub_rows], -row_lb[lb_rows]])
    t0 = time.perf_counter()
    res = linprog(c, A_ub=a_ub if a_ub.shape[0] else None, b_ub=b_ub if a_ub.shape[0] else None,
                  A_eq=a[eq] if eq.any() else None, b_eq=row_lb[eq] if eq.any() else None,
                  bounds=np.column_stack([col_lb, np.where(np.isfinite(col_ub), col_ub, np.inf)]),
                  method="highs")
    if res.status != 0:
        raise Infeasible(f"the LP backend scipy-highs stopped: {res.message}",
                         [{"backend": "scipy-highs", "status": int(res.status)}])
    return LpResult(np.asarray(res.x, dtype=np.float64), float(res.fun), time.perf_counter() - t0)


def solve_lp(c: np.ndarray, a: sp.spmatrix, row_lb: np.ndarray, row_ub: np.ndarray,
             col_lb: np.ndarray, col_ub: np.ndarray, *, backend: str = DEFAULT_BACKEND,
             tolerance: float = PDLP_TOLERANCE) -> LpResult:
    """Minimize ``c.x`` subject to ``row_lb <= A x <= row_ub`` and ``col_lb <= x <= col_ub``.

    Parameters
    ----------
    c, col_lb, col_ub : per variable (use ``np.inf`` for no upper bound).
    a : the constraint matrix (any scipy sparse format).
    row_lb, row_ub : per row (``-np.inf``/``np.inf`` for a free side; equal for an equality).
    backend : one of :data:`BACKENDS`.
    tolerance : PDLP's relative optimality tolerance (the simplex backends solve to their own).

    Returns
    -------
    :class:`LpResult` with the optimal ``x``.

    Raises
    ------
    ValueError : an unknown backend.
    Infeasible : the backend found no optimum (infeasible, unbounded, numerical trouble).

    Example
    -------
    >>> import numpy as np, scipy.sparse as sp
    >>> r = solve_lp(np.array([1.0, 1.0]), sp.csr_matrix([[1.0, 2.0]]), np.array([2.0]),
    ...              np.array([np.inf]), np.zeros(2), np.full(2, np.inf))
    >>> round(r.objective, 6)
    1.0
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown LP backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    csr = sp.csr_matrix(a, dtype=np.float64)
    if backend == "auto":
        backend = "glop" if csr.shape[1] <= AUTO_PDLP_VARIABLES else "pdlp"
    args = (np.asarray(c, np.float64), csr, np.asarray(row_lb, np.float64), np.asarray(row_ub, np.float64),
            np.asarray(col_lb, np.float64), np.asarray(col_ub, np.float64))
    res = _scipy(*args) if backend == "scipy-highs" else _ortools(backend, *args, tolerance=tolerance)
    return LpResult(res.x, res.objective, res.seconds, backend)


def solve_milp(c: np.ndarray, a: sp.spmatrix, row_lb: np.ndarray, row_ub: np.ndarray, col_lb: np.ndarray,
               col_ub: np.ndarray, integer: np.ndarray, *, hint: np.ndarray | None = None,
               nodes: int = 2000, lp_iterations: int = 100_000) -> LpResult | None:
    """A mixed-integer program in the form of :func:`solve_lp` (``integer`` flags columns), by SCIP
    started from ``hint``: the best solution found within ``nodes`` branch-and-bound nodes, or ``None``.

    Every bound is on work, never on time, so the same input gives the same answer on any machine
    however busy: ``nodes`` bounds the search and ``lp_iterations`` (simplex iterations per LP
    solve, the root's included) is the safety net against a pathological model. A wall-clock
    limit here would make a loaded machine (CI) return a different plan for the same intent."""
    from ortools.linear_solver.python import model_builder as mb
    from ortools.linear_solver.python import model_builder_helper as mbh

    if nodes <= 0 or lp_iterations <= 0:
        return None
    model = mb.Model()
    csr = sp.csr_matrix(a, dtype=np.float64)
    args = (np.asarray(col_lb, np.float64), np.asarray(col_ub, np.float64), np.asarray(c, np.float64),
            np.asarray(row_lb, np.float64), np.asarray(row_ub, np.float64))
    model.helper.fill_model_from_sparse_data(*args, csr)  # type: ignore[arg-type]
    for j in np.flatnonzero(integer).tolist():
        model.helper.set_var_integrality(j, True)
    if hint is not None:
        for j, v in enumerate(np.asarray(hint, np.float64).tolist()):
            if np.isfinite(v):  # NaN: no hint for that column
                model.helper.add_hint(j, v)
    helper = mbh.ModelSolverHelper("SCIP")
    if not helper.solver_is_supported():
        return None
    helper.set_solver_specific_parameters(f"limits/nodes = {int(nodes)}\nlp/iterlim = {int(lp_iterations)}\n"
                                          f"lp/rootiterlim = {int(lp_iterations)}")
    t0 = time.perf_counter()
    helper.solve(model.helper)
    if helper.status() not in (mb.SolveStatus.OPTIMAL, mb.SolveStatus.FEASIBLE) or not helper.has_solution():
        return None
    return LpResult(np.asarray(helper.variable_values(), dtype=np.float64), float(helper.objective_value()),
                    time.perf_counter() - t0, "scip")
