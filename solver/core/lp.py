"""LP backends: one sparse-matrix LP, solved by the backend the caller names.

This module owns the boundary to the LP solvers. The solver's models are built
as numpy/scipy arrays (never element by element) and handed here as
``min c.x  s.t.  row_lb <= A x <= row_ub,  col_lb <= x <= col_ub``. Backends:
``auto`` (the default: ``glop`` for models up to
:data:`AUTO_PDLP_VARIABLES` variables, ``pdlp`` beyond), ``glop`` (OR-Tools'
simplex), ``pdlp`` (OR-Tools' first-order
method, for very large models), ``highs`` (HiGHS' dual simplex through its own
Python binding, ``highspy``) and ``scipy-highs`` (HiGHS through SciPy: an
independent build, used by tests as a second opinion).

:func:`solve_lp_lex` solves two objectives in lexicographic order (the second
with the first's column held at its optimum). With HiGHS the second stage
starts from the first's optimal basis instead of from nothing: on the
Repetita networks with ``paths: loop_free`` it takes a few simplex pivots
where a cold solve takes as long as the first stage.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from controller.model.errors import Infeasible

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "LexModel", "LpResult", "LpTimeLimit", "solve_lp", "solve_lp_lex",
           "solve_milp", "solve_pdlp"]

#: a column prices into a restricted LP when its reduced cost is below minus this (HiGHS'
#: own dual feasibility tolerance: the restricted optimum is then the full one to that tolerance)
PRICING_TOLERANCE = 1e-7

BACKENDS: tuple[str, ...] = ("auto", "glop", "pdlp", "highs", "scipy-highs")
DEFAULT_BACKEND = "auto"
#: ``auto`` picks ``glop`` up to this many variables and ``pdlp`` beyond (simplex slows down sharply there)
AUTO_PDLP_VARIABLES = 150_000

#: ``solve_lp_lex`` by column generation (``initial`` given): ``auto`` keeps HiGHS up to this many
#: initial columns, whatever the full model's size. The restricted LP is what HiGHS holds: on
#: Repetita's rf1239 (315 nodes, 610k columns of which 254k initial) HiGHS took 65 s where
#: PDLP on the full model had not finished in 10 minutes
AUTO_PRICED_VARIABLES = 1_000_000

#: the tie-break stage's first solve uses HiGHS' interior point method with crossover (a basis for
#: the pricing rounds after it) instead of the primal simplex from the first stage's basis when the
#: restricted LP holds more than this many columns. The tie-break stage in all: on rf1239 (255k) 48 s
#: from the primal simplex (its first solve 45 s, 37k iterations) against 20 s (17 s); on rf6461
#: (48k) 4.2 s against 2.2 s, but on Cogentco (47k) 0.32 s against 0.61 s: below this size, where
#: the measurements disagree, the simplex stays
TIE_BREAK_IPM_COLUMNS = 150_000

#: PDLP's relative and absolute optimality tolerance unless the caller names one
PDLP_TOLERANCE = 1e-7


#: PDLP runs on one thread below this many nonzeros and on two above: on this 2-core machine the
#: Clos L relaxation (0.29M nonzeros) took 1.6 s on one thread against 2.4 s on two, and XL's
#: (4.3M) 28 s against 21 s (the second thread's synchronization costs more than it brings on small models)
PDLP_TWO_THREADS_NNZ = 1_000_000


def _pdlp_params(tolerance: float, nnz: int) -> str:
    threads = 2 if nnz >= PDLP_TWO_THREADS_NNZ and (os.cpu_count() or 1) >= 2 else 1
    return (f"termination_criteria {{ simple_optimality_criteria {{ eps_optimal_relative: {tolerance:g} "
            f"eps_optimal_absolute: {tolerance:g} }} }} num_threads: {threads}")


@dataclass(frozen=True, slots=True)
class LpResult:
    x: np.ndarray
    objective: float
    seconds: float
    backend: str = ""
    y: np.ndarray | None = None  # row duals, where the backend gives them (solve_pdlp)
    iterations: int = 0


def _ortools(backend: str, c: np.ndarray, a: sp.csr_matrix, row_lb: np.ndarray, row_ub: np.ndarray,
             col_lb: np.ndarray, col_ub: np.ndarray, tolerance: float = PDLP_TOLERANCE) -> LpResult:
    from ortools.linear_solver.python import model_builder as mb  # lazy: OR-Tools loads at its first LP
    from ortools.linear_solver.python import model_builder_helper as mbh  # lazy: OR-Tools loads at its first LP

    model = mb.Model()
    model.helper.fill_model_from_sparse_data(col_lb, col_ub, c, row_lb, row_ub, a)  # type: ignore[arg-type]
    helper = mbh.ModelSolverHelper(backend.upper())
    if not helper.solver_is_supported():
        raise ValueError(f"LP backend {backend!r} is not available in this OR-Tools build")
    if backend == "pdlp":
        helper.set_solver_specific_parameters(_pdlp_params(tolerance, a.nnz))
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


def solve_pdlp(c: np.ndarray, a: sp.spmatrix, row_lb: np.ndarray, row_ub: np.ndarray, col_lb: np.ndarray,
               col_ub: np.ndarray, *, tolerance: float = PDLP_TOLERANCE,
               start: tuple[np.ndarray, np.ndarray] | None = None) -> LpResult:
    """:func:`solve_lp` by PDLP (OR-Tools' own interface to it, the same algorithm and parameters as
    ``backend="pdlp"``), returning the row duals too, and started from ``start`` (a primal and a
    dual vector) when given. A cut loop that adds rows to an LP it has solved starts the next
    solve from the last one's answer (the new rows' duals 0), which takes a small fraction of
    a cold solve's iterations.

    Raises ``Infeasible`` when PDLP stops short of an optimum.

    Example
    -------
    >>> import numpy as np, scipy.sparse as sp
    >>> r = solve_pdlp(np.array([1.0, 1.0]), sp.csr_matrix([[1.0, 2.0]]), np.array([2.0]),
    ...                np.array([np.inf]), np.zeros(2), np.full(2, np.inf))
    >>> round(r.objective, 4), r.y is not None
    (1.0, True)
    """
    from google.protobuf import text_format  # lazy: only PDLP's parameters need it
    from ortools.pdlp import solve_log_pb2, solvers_pb2  # lazy: OR-Tools loads at its first LP
    from ortools.pdlp.python import pdlp  # lazy: OR-Tools loads at its first LP

    csc = sp.csc_matrix(a, dtype=np.float64)
    qp = pdlp.QuadraticProgram()
    qp.objective_vector = np.asarray(c, np.float64)
    qp.constraint_matrix = csc
    qp.constraint_lower_bounds = np.asarray(row_lb, np.float64)
    qp.constraint_upper_bounds = np.asarray(row_ub, np.float64)
    qp.variable_lower_bounds = np.asarray(col_lb, np.float64)
    qp.variable_upper_bounds = np.asarray(col_ub, np.float64)
    params = solvers_pb2.PrimalDualHybridGradientParams()
    text_format.Parse(_pdlp_params(tolerance, csc.nnz), params)
    init = None
    if start is not None:
        init = pdlp.PrimalAndDualSolution()
        init.primal_solution = np.asarray(start[0], np.float64)
        init.dual_solution = np.asarray(start[1], np.float64)
    t0 = time.perf_counter()
    res = pdlp.primal_dual_hybrid_gradient(qp, params, initial_solution=init)
    seconds = time.perf_counter() - t0
    reason = res.solve_log.termination_reason
    if reason != solve_log_pb2.TERMINATION_REASON_OPTIMAL:
        name = solve_log_pb2.TerminationReason.Name(reason)
        raise Infeasible(f"the LP backend pdlp stopped with {name}", [{"backend": "pdlp", "status": name}])
    x = np.asarray(res.primal_solution, dtype=np.float64)
    return LpResult(x, float(np.dot(qp.objective_vector, x)), seconds, "pdlp",
                    np.asarray(res.dual_solution, dtype=np.float64), int(res.solve_log.iteration_count))


_HIGHS_BANNER_LOCK = threading.Lock()
_highs_banner_shown = False


def _new_highs() -> Any:
    """A ``highspy.Highs``. HiGHS prints a copyright banner on stdout when the first one is
    built, before any option can silence it; stdout may be a plan document (``loom plan``
    writes JSON there), so the first construction runs with file descriptor 1 on /dev/null."""
    import highspy  # lazy: only the highs backend loads HiGHS

    global _highs_banner_shown
    with _HIGHS_BANNER_LOCK:
        if _highs_banner_shown:
            return highspy.Highs()
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(devnull)
        finally:
            os.close(saved)
        _highs_banner_shown = True
        return h


def _highs_model(c: np.ndarray, a: sp.csr_matrix, row_lb: np.ndarray, row_ub: np.ndarray,
                 col_lb: np.ndarray, col_ub: np.ndarray) -> Any:
    """A HiGHS instance holding the LP, set for its serial dual simplex, quiet."""
    import highspy  # lazy: only the highs backend loads HiGHS

    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = a.shape[1], a.shape[0]
    lp.col_cost_ = c
    lp.col_lower_ = np.where(np.isfinite(col_lb), col_lb, -inf)
    lp.col_upper_ = np.where(np.isfinite(col_ub), col_ub, inf)
    lp.row_lower_ = np.where(np.isfinite(row_lb), row_lb, -inf)
    lp.row_upper_ = np.where(np.isfinite(row_ub), row_ub, inf)
    csc = a.tocsc()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr
    lp.a_matrix_.index_ = csc.indices
    lp.a_matrix_.value_ = csc.data
    h = _new_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("solver", "simplex")
    h.setOptionValue("simplex_strategy", 1)  # dual
    h.setOptionValue("threads", 1)  # the same pivots, hence the same vertex, on any machine
    h.passModel(lp)
    return h


def _highs_run(h: Any, stage: str) -> LpResult:
    import highspy  # lazy: only the highs backend loads HiGHS

    t0 = time.perf_counter()
    h.run()
    seconds = time.perf_counter() - t0
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kTimeLimit:
        raise LpTimeLimit(f"the LP backend highs reached its time limit ({stage})")
    if status != highspy.HighsModelStatus.kOptimal:
        name = h.modelStatusToString(status)
        raise Infeasible(f"the LP backend highs stopped with status {name} ({stage})",
                         [{"backend": "highs", "status": name, "stage": stage}])
    x = np.asarray(h.getSolution().col_value, dtype=np.float64)
    return LpResult(x, float(h.getInfo().objective_function_value), seconds, "highs")


def _scipy(c: np.ndarray, a: sp.csr_matrix, row_lb: np.ndarray, row_ub: np.ndarray,
           col_lb: np.ndarray, col_ub: np.ndarray) -> LpResult:
    from scipy.optimize import linprog  # lazy: scipy.optimize (1 s) serves only scipy-highs

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
    if backend == "highs":
        return _highs_run(_highs_model(*args), "objective")
    res = _scipy(*args) if backend == "scipy-highs" else _ortools(backend, *args, tolerance=tolerance)
    return LpResult(res.x, res.objective, res.seconds, backend)


def solve_lp_lex(c: np.ndarray, then: np.ndarray, fix: int, a: sp.spmatrix, row_lb: np.ndarray,
                 row_ub: np.ndarray, col_lb: np.ndarray, col_ub: np.ndarray, *, backend: str = DEFAULT_BACKEND,
                 slack: float = 1e-6, initial: np.ndarray | None = None, keep: list[LexModel] | None = None
                 ) -> tuple[LpResult, LpResult]:
    """Minimize ``c.x``, then ``then.x`` with column ``fix`` at most its first optimum times ``1 + slack``.

    ``c`` must be the objective of that one column (``c[fix] = 1``, zero elsewhere: the
    min-max utilization and its tie-break). Returns both stages' results; the second's
    ``seconds`` is its own. ``auto`` uses HiGHS, whose second stage starts from the
    first's optimal basis, for models up to :data:`AUTO_PDLP_VARIABLES` variables (with
    ``initial``: whose restricted LP starts with up to :data:`AUTO_PRICED_VARIABLES`), and
    PDLP (two cold solves) beyond; any other backend is solved cold twice as named. A
    restricted LP of over :data:`TIE_BREAK_IPM_COLUMNS` columns starts the second stage by
    HiGHS' interior point method with crossover rather than from the first's basis.

    ``initial`` (HiGHS only; flags per column): solve by column generation, starting from
    these columns and pricing the others in (:func:`_priced_run`) at each stage, so the
    answer is the full LP's optimum while the LP held is often much smaller. A column left
    out must have lower bound 0.

    ``keep`` (HiGHS only): receives the :class:`LexModel`, to solve again without some columns.

    Raises ``ValueError`` (unknown backend, ``c`` not a unit objective) and ``Infeasible``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown LP backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    c = np.asarray(c, np.float64)
    if c[fix] != 1.0 or np.count_nonzero(c) != 1:
        raise ValueError("solve_lp_lex: the first objective must be column `fix` alone")
    csr = sp.csr_matrix(a, dtype=np.float64)
    if backend == "auto":
        held = csr.shape[1] if initial is None else int(np.count_nonzero(initial))
        backend = "highs" if held <= (AUTO_PDLP_VARIABLES if initial is None else AUTO_PRICED_VARIABLES) else "pdlp"
    col_ub = np.array(col_ub, np.float64)
    if backend != "highs":
        first = solve_lp(c, csr, row_lb, row_ub, col_lb, col_ub, backend=backend)
        col_ub[fix] = first.x[fix] * (1 + slack) + 1e-9
        return first, solve_lp(then, csr, row_lb, row_ub, col_lb, col_ub, backend=backend)
    col_lb = np.asarray(col_lb, np.float64)
    then = np.asarray(then, np.float64)
    n = csr.shape[1]
    cols = np.arange(n) if initial is None else np.union1d(np.flatnonzero(initial), [fix])
    left_out = np.ones(n, dtype=bool)
    left_out[cols] = False
    if (col_lb[left_out] != 0).any():
        raise ValueError("solve_lp_lex: a column left out of `initial` must have lower bound 0")
    j = int(np.searchsorted(cols, fix))  # added columns go after the initial ones: fix keeps its place
    csc = csr.tocsc()
    h = _highs_model(c[cols], csc[:, cols].tocsr(), np.asarray(row_lb, np.float64), np.asarray(row_ub, np.float64),
                     col_lb[cols], col_ub[cols])
    lex = LexModel(h, csc, c, then, fix, j, cols, col_lb, col_ub, slack)
    first, second = lex.run(TIE_BREAK_IPM_COLUMNS)
    if keep is not None:
        keep.append(lex)
    return first, second


class LpTimeLimit(Exception):
    """HiGHS stopped at the time limit it was given (:meth:`LexModel.without`)."""


@dataclass(slots=True)
class LexModel:
    """A lexicographic LP kept in HiGHS after :func:`solve_lp_lex` (``keep``), to be solved again
    without some columns (:meth:`without`) from the basis it ended on."""

    h: Any
    csc: sp.csc_matrix
    c: np.ndarray
    then: np.ndarray
    fix: int
    j: int  # the place of column ``fix`` in the HiGHS model
    cols: np.ndarray  # the full LP's columns the HiGHS model holds, in its order
    col_lb: np.ndarray
    col_ub: np.ndarray
    slack: float

    def run(self, ipm_columns: int | None = None) -> tuple[LpResult, LpResult]:
        """Minimize ``c`` (column ``fix``), then ``then`` with ``fix`` held at its optimum (plus slack);
        the second stage starts by the interior point method when the model holds over ``ipm_columns``."""
        h = self.h
        first, self.cols = _priced_run(h, self.c, self.csc, self.cols, self.col_lb, self.col_ub, "objective")
        self.col_ub[self.fix] = first.x[self.fix] * (1 + self.slack) + 1e-9
        h.changeColBounds(self.j, float(self.col_lb[self.fix]), float(self.col_ub[self.fix]))
        h.changeColsCost(len(self.cols), np.arange(len(self.cols), dtype=np.int32), self.then[self.cols])
        h.setOptionValue("simplex_strategy", 4)  # primal: the basis stays feasible
        second, self.cols = _priced_run(h, self.then, self.csc, self.cols, self.col_lb, self.col_ub, "tie-break",
                                        interior_first=ipm_columns is not None and len(self.cols) > ipm_columns)
        return first, second

    def without(self, columns: np.ndarray, seconds: float = float("inf")) -> tuple[LpResult, LpResult]:
        """Both stages again with ``columns`` (indices of the full LP, lower bound 0) held at 0, from
        the current basis: the tie-break alone while ``fix`` can keep its optimum, else both stages.
        Raises :class:`LpTimeLimit` past ``seconds`` in all (the model is then left as it stopped)."""
        h = self.h
        h.setOptionValue("time_limit", float(seconds))
        try:
            return self._without(columns)
        finally:
            h.setOptionValue("time_limit", float("inf"))

    def _without(self, columns: np.ndarray) -> tuple[LpResult, LpResult]:
        h = self.h
        columns = np.asarray(columns, dtype=np.int64)
        self.col_ub[columns] = 0.0
        place = np.full(self.csc.shape[1], -1, dtype=np.int64)
        place[self.cols] = np.arange(len(self.cols))
        held = place[columns]
        held = held[held >= 0].astype(np.int32)
        if held.size:
            h.changeColsBounds(len(held), held, np.zeros(len(held)), np.zeros(len(held)))
        # what stood in for them: every column sharing a row with them but ``fix``'s (by pricing alone
        # the restricted LP may have no feasible point left)
        csr = self.csc.tocsr()
        rows = np.setdiff1d(np.unique(self.csc[:, columns].indices), self.csc[:, self.fix].indices)
        self._add(np.unique(csr[rows].indices), self.then)  # the model holds the tie-break's costs
        h.setOptionValue("simplex_strategy", 1)  # dual: only bounds changed, the basis stays dual feasible
        try:  # the tie-break alone, ``fix`` still held at its optimum: if that stays feasible, so does the optimum
            # by the interior point method first: on ASN2k the dual simplex from the old basis ran for minutes
            second, self.cols = _priced_run(h, self.then, self.csc, self.cols, self.col_lb, self.col_ub, "tie-break",
                                            interior_first=True)
            return LpResult(second.x, float(second.x[self.fix]), 0.0, "highs"), second
        except Infeasible:
            pass
        self.col_ub[self.fix] = np.inf
        h.changeColBounds(self.j, float(self.col_lb[self.fix]), float("inf"))
        try:
            return self._rerun()
        except Infeasible:  # a way around needs columns farther off: hold every column
            self._add(np.arange(self.csc.shape[1]), self.c)
            return self._rerun()

    def _rerun(self) -> tuple[LpResult, LpResult]:
        self.h.changeColsCost(len(self.cols), np.arange(len(self.cols), dtype=np.int32), self.c[self.cols])
        self.h.setOptionValue("simplex_strategy", 1)  # dual: from the old basis, whose bounds changed
        return self.run()

    def _add(self, candidates: np.ndarray, cost: np.ndarray) -> None:
        """Hold the ``candidates`` the HiGHS model does not hold yet (and that may be positive), at
        ``cost``: the objective the model holds now."""
        out = np.ones(self.csc.shape[1], dtype=bool)
        out[self.cols] = False
        enter = candidates[out[candidates] & (self.col_ub[candidates] > self.col_lb[candidates])]
        self.cols = _add_columns(self.h, self.csc, cost, self.col_lb, self.col_ub, self.cols, enter)


def _add_columns(h: Any, csc: sp.csc_matrix, cost: np.ndarray, col_lb: np.ndarray, col_ub: np.ndarray,
                 cols: np.ndarray, enter: np.ndarray) -> np.ndarray:
    """Add the full LP's columns ``enter`` to the HiGHS model ``h`` (after ``cols``, the ones it holds);
    returns the columns it now holds, in its order."""
    if not enter.size:
        return cols
    sub = csc[:, enter]
    h.addCols(len(enter), cost[enter], col_lb[enter], col_ub[enter], sub.nnz,
              sub.indptr[:-1].astype(np.int32), sub.indices.astype(np.int32), sub.data)
    return np.concatenate([cols, enter])


def _priced_run(h: Any, cost: np.ndarray, csc: sp.csc_matrix, cols: np.ndarray, col_lb: np.ndarray,
                col_ub: np.ndarray, stage: str, interior_first: bool = False) -> tuple[LpResult, np.ndarray]:
    """Solve the restricted LP held by ``h`` (the columns ``cols`` of the full one, in that order),
    adding every left-out column whose reduced cost under the restricted duals is below
    ``-PRICING_TOLERANCE`` and solving again from the current basis, until none is: the
    restricted duals are then feasible for the full LP, so the restricted optimum is the full
    optimum. Returns it with ``x`` over all columns, and the columns the LP now holds.

    ``interior_first``: the first solve by the interior point method with crossover (its basis
    starts the simplex rounds after it); should it stop short of an optimum, the primal simplex
    solves the same LP instead."""
    n = csc.shape[1]
    seconds = 0.0
    csr_t = csc.T.tocsr()  # rows of A^T: one per column, for pricing
    if interior_first:
        h.setOptionValue("solver", "ipm")
        h.setOptionValue("run_crossover", "on")
        t0 = time.perf_counter()
        h.run()
        seconds += time.perf_counter() - t0
        h.setOptionValue("solver", "simplex")
    while True:
        res = _highs_run(h, stage)
        seconds += res.seconds
        if len(cols) == n:
            break
        y = np.asarray(h.getSolution().row_dual, dtype=np.float64)
        reduced = cost - csr_t @ y
        out = np.ones(n, dtype=bool)
        out[cols] = False
        # a left-out column sits at its lower bound (0 here); it improves the LP if its cost falls
        enter = np.flatnonzero(out & (reduced < -PRICING_TOLERANCE) & (col_ub > col_lb))
        if not enter.size:
            break
        cols = _add_columns(h, csc, cost, col_lb, col_ub, cols, enter)
        h.setOptionValue("simplex_strategy", 4)  # primal: the basis stays feasible
    x = np.zeros(n)
    x[cols] = res.x
    return LpResult(x, res.objective, seconds, "highs"), cols


def solve_milp(c: np.ndarray, a: sp.spmatrix, row_lb: np.ndarray, row_ub: np.ndarray, col_lb: np.ndarray,
               col_ub: np.ndarray, integer: np.ndarray, *, hint: np.ndarray | None = None,
               nodes: int = 2000, lp_iterations: int = 100_000) -> LpResult | None:
    """A mixed-integer program in the form of :func:`solve_lp` (``integer`` flags columns), by SCIP
    started from ``hint``: the best solution found within ``nodes`` branch-and-bound nodes, or ``None``.

    Every bound is on work, never on time, so the same input gives the same answer on any machine
    however busy: ``nodes`` bounds the search and ``lp_iterations`` (simplex iterations per LP
    solve, the root's included) is the safety net against a pathological model. A wall-clock
    limit here would make a loaded machine (CI) return a different plan for the same intent."""
    from ortools.linear_solver.python import model_builder as mb  # lazy: OR-Tools loads at its first LP
    from ortools.linear_solver.python import model_builder_helper as mbh  # lazy: OR-Tools loads at its first LP

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
