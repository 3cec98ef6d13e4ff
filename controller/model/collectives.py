"""Collectives as data: traffic templates, their registry, and the per-iteration traffic matrix of a job.

A collective (DESIGN.md, ML workloads) is a template written in the intent
document's ``collectives:`` mapping, or one of the built-ins of
:mod:`controller.model.collectives_builtin` (written in the same form, read by
the same parser)::

    collectives:
      NAME:
        params:                      # optional: the job's ``params`` fill them
          PARAM: {kind: number | list | matrix, default: EXPR}   # no default: the job must give it
        where: [EXPR, ...]           # optional: rules on n, B and the params (non-zero = holds)
        phases:                      # one or more, in order within an iteration
          - {from: MEMBER_EXPR, to: MEMBER_EXPR, bytes: EXPR}

Expressions are :mod:`controller.model.expr`'s. In a phase, ``from`` gives the
senders (a member or a list of members; names ``n``, ``B``, the params, ``all``),
``to`` each sender's receivers (``i`` is the sender; ``others`` is ``all``
without it) and ``bytes`` what ``i`` sends ``j`` in that phase (``j`` is the
receiver). Members are ``0 .. n-1``, the job's ``tors`` in order; a member
named twice in one ``to`` receives twice; a member sending to itself crosses
no network and is left out. A parameter's ``default`` is evaluated with ``n`` and
``B``; for a ``list`` once per member ``i``, for a ``matrix`` once per ``i, j``.
Job parameter values are numbers, lists of ``n`` numbers, ``n x n`` matrices.

:func:`traffic` is the matrix of one job: per phase, ``{(i, j): bytes}`` in the
order the template produces the pairs. Pure; the parts of ``bytes``
that do not read ``j`` are evaluated once per sender (:func:`controller.model.expr.bind`), one
:class:`~controller.model.expr.Budget` bounds all the evaluations of one job, and every error is a
:class:`CollectiveError` that carries its location inside the template or the
job (``phases[2].to``, ``params.skew``), for :mod:`controller.model.intent` to
prefix with ``collectives.NAME`` or ``jobs[K]``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from controller.model.expr import Budget, Expr, ExprError, Value, bind, evaluate, parse

__all__ = ["KINDS", "CollectiveError", "Param", "Phase", "Registry", "Template", "parse_template", "traffic",
           "check_params"]

KINDS = ("number", "list", "matrix")
#: the most member pairs one job's matrix may hold (a 4,096-member all-to-all is 16.8 million)
MAX_PAIRS = 1 << 25
_TOP = ("params", "where", "phases")
_PHASE = ("from", "to", "bytes")
_PARAM = ("kind", "default")
_RESERVED = frozenset({"n", "B", "i", "j", "all", "others"})


class CollectiveError(ValueError):
    """An error at ``loc`` (a dotted path inside the template or the job; empty for the whole)."""

    def __init__(self, loc: str, message: str):
        super().__init__(f"{loc}: {message}" if loc else message)
        self.loc = loc
        self.message = message


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str
    default: Expr | None


@dataclass(frozen=True, slots=True)
class Phase:
    src: Expr
    dst: Expr
    size: Expr


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed collective: its parameters, rules and phases (see the module docstring)."""

    name: str
    params: tuple[Param, ...]
    where: tuple[Expr, ...]
    phases: tuple[Phase, ...]

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


def _mapping(value: Any, loc: str, allowed: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CollectiveError(loc, "must be a mapping")
    for key in value:
        if key not in allowed:
            raise CollectiveError(f"{loc}.{key}" if loc else str(key),
                                  f"unknown field (expected one of {', '.join(allowed)})")
    return value


def _expr(value: Any, loc: str, names: frozenset[str]) -> Expr:
    try:
        e = parse(value)
    except ExprError as exc:
        raise CollectiveError(loc, str(exc)) from None
    unknown = sorted(e.names - names)
    if unknown:
        raise CollectiveError(loc, f"unknown name '{unknown[0]}' (known here: {', '.join(sorted(names))})")
    return e


def parse_template(name: str, doc: Any) -> Template:
    """Check and parse one template document; raises the first :class:`CollectiveError`, located
    relative to the template (``phases[2].to``)."""
    return _parse_cached(name, json.dumps(doc, sort_keys=True, default=str))


@functools.lru_cache(maxsize=256)
def _parse_cached(name: str, text: str) -> Template:
    return _parse(name, json.loads(text))


def _parse(name: str, doc: Any) -> Template:
    doc = _mapping(doc, "", _TOP)
    raw_params = _mapping(doc.get("params") or {}, "params", tuple(doc.get("params") or {}))
    params: list[Param] = []
    for pname, spec in raw_params.items():
        if not isinstance(pname, str) or not pname.isidentifier() or pname in _RESERVED:
            raise CollectiveError(f"params.{pname}", f"a parameter is a name other than {', '.join(sorted(_RESERVED))}")
        spec = _mapping(spec, f"params.{pname}", _PARAM)
        kind = spec.get("kind", "number")
        if kind not in KINDS:
            raise CollectiveError(f"params.{pname}.kind", f"unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
        scope = {"number": {"n", "B"}, "list": {"n", "B", "i"}, "matrix": {"n", "B", "i", "j"}}[kind]
        default = _expr(spec["default"], f"params.{pname}.default", frozenset(scope)) if "default" in spec else None
        params.append(Param(pname, kind, default))
    pnames = frozenset(p.name for p in params)
    base = pnames | {"n", "B", "all"}
    where = doc.get("where") or []
    if not isinstance(where, list):
        raise CollectiveError("where", "must be a list of expressions")
    rules = tuple(_expr(w, f"where[{k}]", base) for k, w in enumerate(where))
    raw_phases = doc.get("phases")
    if not isinstance(raw_phases, list) or not raw_phases:
        raise CollectiveError("phases", "required: a list of one or more phases")
    phases = []
    for k, ph in enumerate(raw_phases):
        ph = _mapping(ph, f"phases[{k}]", _PHASE)
        for field in _PHASE:
            if field not in ph:
                raise CollectiveError(f"phases[{k}].{field}", "required field missing")
        phases.append(Phase(_expr(ph["from"], f"phases[{k}].from", base),
                            _expr(ph["to"], f"phases[{k}].to", base | {"i", "others"}),
                            _expr(ph["bytes"], f"phases[{k}].bytes", base | {"i", "j"})))
    return Template(name, tuple(params), rules, tuple(phases))


# -- parameters --------------------------------------------------------------------------------
def _numbers(value: Any, length: int, what: str) -> tuple[float, ...]:
    if not isinstance(value, list) or len(value) != length:
        raise ValueError(what)
    out = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or abs(x) > 1e30:
            raise ValueError(what)
        out.append(x)
    return tuple(out)


def _given(p: Param, value: Any, n: int) -> Value:
    if p.kind == "number":
        return _numbers([value], 1, "expected a number")[0]
    if p.kind == "list":
        return _numbers(value, n, f"expected a list of {n} numbers (one per member)")
    what = f"expected a {n} x {n} matrix of numbers (a list of {n} rows)"
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(what)
    return tuple(_numbers(row, n, what) for row in value)


def _default(p: Param, env: dict[str, Value], n: int, budget: Budget) -> Value:
    assert p.default is not None
    if p.kind == "number":
        return evaluate(p.default, env, budget)
    if p.kind == "list":
        return tuple(evaluate(p.default, {**env, "i": i}, budget) for i in range(n))
    rows = []
    for i in range(n):
        row_env = {**env, "i": i}
        row = bind(p.default, row_env, "j", budget)
        rows.append(tuple(evaluate(row, {**row_env, "j": j}, budget) for j in range(n)))
    return tuple(rows)


def check_params(template: Template, params: Mapping[str, Any] | None, n: int, B: float,
                 budget: Budget | None = None) -> dict[str, Value]:
    """The names a job's expressions read: ``n``, ``B``, ``all`` and every parameter (given, else its default).
    Raises :class:`CollectiveError` at ``params.NAME`` (an unknown, missing or malformed parameter) or at
    ``where[k]`` (a rule that does not hold)."""
    env: dict[str, Value] = {"n": n, "B": B, "all": tuple(range(n))}
    budget = budget or Budget()
    params = params or {}
    for key in params:
        if template.param(key) is None:
            known = ", ".join(p.name for p in template.params) or "none"
            raise CollectiveError(f"params.{key}", f"unknown parameter of '{template.name}' (it has {known})")
    for p in template.params:
        try:
            if p.name in params:
                env[p.name] = _given(p, params[p.name], n)
            elif p.default is None:
                raise CollectiveError(f"params.{p.name}", f"required by collective '{template.name}' ({p.kind})")
            else:
                env[p.name] = _default(p, env, n, budget)
        except (ValueError, ExprError) as exc:
            if isinstance(exc, CollectiveError):
                raise
            raise CollectiveError(f"params.{p.name}", str(exc)) from None
    for k, rule in enumerate(template.where):
        try:
            ok = evaluate(rule, env, budget)
        except ExprError as exc:
            raise CollectiveError(f"where[{k}]", str(exc)) from None
        if not ok:
            raise CollectiveError(f"where[{k}]", f"collective '{template.name}' needs {rule.text} (n = {n})")
    return env


# -- the matrix ----------------------------------------------------------------------------------
def _members(value: Value, n: int, what: str) -> tuple[int, ...]:
    items = value if isinstance(value, tuple) else (value,)
    if items and all(type(x) is int for x in items):
        ints = cast(tuple[int, ...], items)
        if 0 <= min(ints) and max(ints) < n:
            return ints
    out = []
    for x in items:
        if isinstance(x, tuple):
            raise ExprError(f"{what} must be members or a list of members, not a list of lists")
        if isinstance(x, float):
            if not x.is_integer():
                raise ExprError(f"{what} gave {x:g}, not a member")
            x = int(x)
        if not 0 <= x < n:
            raise ExprError(f"{what} gave member {x}, outside 0..{n - 1}")
        out.append(x)
    return tuple(out)


def _phase_pairs(phase: Phase, env: dict[str, Value], n: int, budget: Budget) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    const = None if phase.size.names & {"i", "j"} else _bytes(phase.size, env, "bytes", budget)
    wants_others = "others" in phase.dst.names
    senders = _wrap(lambda: _members(evaluate_at(phase.src, env, "from", budget), n, "from"), "from")
    fresh = len(set(senders)) == len(senders)  # each sender's pairs are new to the phase
    for i in senders:
        local = {**env, "i": i}
        if wants_others:
            local["others"] = (*range(i), *range(i + 1, n))
        receivers = evaluate_at(phase.dst, local, "to", budget)
        to = [j for j in _wrap(lambda: _members(receivers, n, "to"), "to") if j != i]  # noqa: B023
        budget.spend(len(to))
        if const is not None and fresh and len(set(to)) == len(to):
            out.update(dict.fromkeys([(i, j) for j in to], const))
        elif const is not None:
            for j in to:
                out[i, j] = out.get((i, j), 0.0) + const
        else:
            size = _wrap(lambda: bind(phase.size, local, "j", budget), "bytes")  # noqa: B023
            for j in to:
                out[i, j] = out.get((i, j), 0.0) + _bytes(size, {**local, "j": j}, "bytes", budget)
        if len(out) > MAX_PAIRS:
            raise CollectiveError("", f"more than {MAX_PAIRS} member pairs")
    return out


def _wrap(f: Any, where: str) -> Any:
    try:
        return f()
    except ExprError as exc:
        raise CollectiveError(where, str(exc)) from None


def evaluate_at(e: Expr, env: Mapping[str, Value], where: str, budget: Budget) -> Value:
    try:
        return evaluate(e, env, budget)
    except ExprError as exc:
        raise CollectiveError(where, str(exc)) from None


def _bytes(e: Expr, env: Mapping[str, Value], where: str, budget: Budget) -> float:
    v = evaluate_at(e, env, where, budget)
    if isinstance(v, tuple):
        raise CollectiveError(where, "must be a number of bytes, not a list")
    if v < 0:
        raise CollectiveError(where, f"gave {v:g} bytes (negative)")
    return float(v)


def traffic(template: Template, n: int, B: float, params: Mapping[str, Any] | None = None
            ) -> list[dict[tuple[int, int], float]]:
    """Bytes from member ``i`` to member ``j`` in each phase of one iteration, in the order the template
    produces the pairs.

    >>> from controller.model.collectives_builtin import BUILTINS
    >>> traffic(BUILTINS.get("pipeline"), 3, 100.0)
    [{(0, 1): 100.0, (1, 2): 100.0}]
    """
    budget = Budget()
    env = check_params(template, params, n, B, budget)
    out = []
    for k, phase in enumerate(template.phases):
        try:
            out.append(_phase_pairs(phase, env, n, budget))
        except CollectiveError as exc:
            raise CollectiveError(f"phases[{k}].{exc.loc}" if exc.loc else f"phases[{k}]", exc.message) from None
    return out


class Registry:
    """Templates by name: the built-ins and, over them, an intent's own (an intent may not redefine a
    built-in; :mod:`controller.model.intent` refuses it)."""

    def __init__(self, templates: Mapping[str, Template]):
        self._templates = dict(templates)

    def get(self, name: str) -> Template:
        try:
            return self._templates[name]
        except KeyError:
            raise CollectiveError("", f"unknown collective '{name}' (expected one of "
                                      f"{', '.join(self._templates)})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._templates

    def names(self) -> tuple[str, ...]:
        return tuple(self._templates)

    def items(self) -> list[tuple[str, Template]]:
        return list(self._templates.items())

    def extended(self, docs: Mapping[str, Any]) -> Registry:
        """This registry with the templates ``docs`` (name to document; raises the first error)."""
        extra = {}
        for name, doc in docs.items():
            try:
                extra[name] = parse_template(name, doc)
            except CollectiveError as exc:
                raise CollectiveError(f"{name}.{exc.loc}" if exc.loc else name, exc.message) from None
        return Registry({**self._templates, **extra})

