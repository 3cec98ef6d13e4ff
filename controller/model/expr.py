"""The small expression language of collective templates (DESIGN.md, ML workloads): parsing and evaluation.

A template's ``from``, ``to`` and ``bytes`` fields, its ``where`` rules and its
parameters' defaults are expressions of this language, never Python: the
parser below builds a tree of tuples and :func:`evaluate` walks it, so no
text of a document ever reaches ``eval``. Grammar (lowest precedence first)::

    expr    := or
    or      := and ('or' and)*
    and     := not ('and' not)*
    not     := 'not' not | cmp
    cmp     := sum (('==' | '!=' | '<' | '<=' | '>' | '>=') sum)?
    sum     := term (('+' | '-') term)*
    term    := unary (('*' | '/' | '//' | '%') unary)*
    unary   := '-' unary | postfix
    postfix := atom ('[' expr ']')*
    atom    := NUMBER | NAME | NAME '(' [expr (',' expr)*] ')' | '(' expr ')' | '[' [expr (',' expr)*] ']'

Values are numbers and lists (of numbers or of lists). Comparisons and
``and``/``or``/``not`` answer 1 or 0. Names: ``n`` (members), ``B`` (bytes per
iteration), ``i`` (the sender, where one is bound), ``j`` (the receiver, in
``bytes``), the template's parameters, ``all`` (the members ``[0, .., n-1]``) and
``others`` (``all`` without ``i``). Functions: ``range(a, b)``, ``min(x, ..)``,
``max(x, ..)`` (of numbers or of one list), ``sum(list)``, ``len(list)``,
``abs(x)``, ``floor(x)`` and ``if(c, a, b)`` (only the branch taken is
evaluated). ``x[k]`` indexes a list (parameters given per member, a skew
matrix ``skew[i][j]``).

Bounds, so that hostile text is refused with a located error, never a crash or
a hang: :data:`MAX_TEXT` characters, :data:`MAX_DEPTH` levels of nesting,
numbers of magnitude at most :data:`MAX_MAGNITUDE` (literals and every
intermediate result), lists of at most :data:`MAX_LIST` items, and a
:class:`Budget` of :data:`MAX_STEPS` steps for all the evaluations of one job's
traffic. Division and modulo by zero, indexes out of range and type errors are
:class:`ExprError`. :func:`bind` evaluates once the parts of an expression that
do not read a name (a sender's row sum, once per sender rather than per pair).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_LIST", "MAX_MAGNITUDE", "MAX_STEPS", "MAX_TEXT", "Budget", "Expr", "ExprError", "Value",
           "bind", "evaluate", "parse", "names_of"]

MAX_TEXT = 1000
MAX_DEPTH = 40
MAX_MAGNITUDE = 1e30
MAX_LIST = 1 << 16
#: the steps one job's traffic may take to evaluate (see :class:`Budget`)
MAX_STEPS = 50_000_000

Value = int | float | tuple["Value", ...]
Node = tuple[Any, ...]
_FUNCTIONS = ("range", "min", "max", "sum", "len", "abs", "floor", "if")
_KEYWORDS = ("and", "or", "not")
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>//|==|!=|<=|>=|[-+*/%<>()\[\],]))")


class ExprError(ValueError):
    """A parse or evaluation error; the message says what, the caller's location says where."""


@dataclass(frozen=True, slots=True)
class Expr:
    """A parsed expression: its text, its tree and the names it reads."""

    text: str
    tree: Node
    names: frozenset[str]


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos:].lstrip()[:1]!r} at column {pos + 1}")
        kind = m.lastgroup or "op"
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.pos = 0
        self.depth = 0
        self.names: set[str] = set()

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ExprError("unexpected end of expression" + (f" (expected {value!r})" if value else ""))
        if value is not None and tok[1] != value:
            raise ExprError(f"expected {value!r}, found {tok[1]!r}")
        self.pos += 1
        return tok

    def at(self, *values: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[1] in values and (tok[0] == "op" or tok[1] in _KEYWORDS)

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"nested more than {MAX_DEPTH} levels deep")

    def expr(self) -> Node:
        self.nest()
        node = self.binary(0)
        self.depth -= 1
        return node

    _LEVELS: tuple[tuple[str, ...], ...] = (("or",), ("and",), (), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"),
                                            ("*", "/", "//", "%"))

    def binary(self, level: int) -> Node:
        if level == 2:  # 'not'
            if self.at("not"):
                self.take()
                self.nest()
                node: Node = ("not", self.binary(2))
                self.depth -= 1
                return node
            return self.binary(3)
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        ops = self._LEVELS[level]
        while self.at(*ops):
            op = self.take()[1]
            node = ("op", op, node, self.binary(level + 1))
            if level == 3:  # comparisons do not chain
                break
        return node

    def unary(self) -> Node:
        if self.at("-"):
            self.take()
            self.nest()
            node: Node = ("neg", self.unary())
            self.depth -= 1
            return node
        node = self.atom()
        while self.at("["):
            self.take()
            node = ("index", node, self.expr())
            self.take("]")
        return node

    def items(self, close: str) -> list[Node]:
        out: list[Node] = []
        if not self.at(close):
            out.append(self.expr())
            while self.at(","):
                self.take()
                out.append(self.expr())
        self.take(close)
        return out

    def atom(self) -> Node:
        kind, text = self.take()
        if kind == "num":
            value = float(text) if any(c in text for c in ".eE") else int(text)
            return ("num", _bounded(value))
        if kind == "name":
            if text in _KEYWORDS:
                raise ExprError(f"unexpected {text!r}")
            if self.at("("):
                if text not in _FUNCTIONS:
                    raise ExprError(f"unknown function '{text}' (expected one of {', '.join(_FUNCTIONS)})")
                self.take()
                return ("call", text, tuple(self.items(")")))
            self.names.add(text)
            return ("name", text)
        if text == "(":
            node = self.expr()
            self.take(")")
            return node
        if text == "[":
            return ("list", tuple(self.items("]")))
        raise ExprError(f"unexpected {text!r}")


def parse(text: str | int | float) -> Expr:
    """Parse ``text`` (a number stands for itself).

    >>> parse("(i + 1) % n").names == {"i", "n"}
    True
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ExprError("expected an expression (a string or a number)")
    if not isinstance(text, str):
        if isinstance(text, float) and not math.isfinite(text):
            raise ExprError("expected a finite number")
        return Expr(str(text), ("num", _bounded(text)), frozenset())
    if len(text) > MAX_TEXT:
        raise ExprError(f"longer than {MAX_TEXT} characters")
    p = _Parser(text)
    if p.peek() is None:
        raise ExprError("empty expression")
    tree = p.expr()
    if p.peek() is not None:
        raise ExprError(f"unexpected {p.peek()[1]!r} after the expression")  # type: ignore[index]
    return Expr(text, tree, frozenset(p.names))


def names_of(exprs: Mapping[str, Expr]) -> frozenset[str]:
    return frozenset().union(*(e.names for e in exprs.values())) if exprs else frozenset()


def _bounded(x: Any) -> Any:
    if isinstance(x, int) and not isinstance(x, bool):
        if abs(x) > int(MAX_MAGNITUDE):
            raise ExprError(f"number of magnitude above {MAX_MAGNITUDE:g}")
    elif isinstance(x, float):
        if not math.isfinite(x) or abs(x) > MAX_MAGNITUDE:
            raise ExprError(f"number of magnitude above {MAX_MAGNITUDE:g}")
    return x


def _number(x: Value, what: str) -> int | float:
    if isinstance(x, tuple):
        raise ExprError(f"{what} must be a number, not a list")
    return x


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda p, q: p + q, "-": lambda p, q: p - q, "*": lambda p, q: p * q, "/": lambda p, q: p / q,
    "//": lambda p, q: p // q, "%": lambda p, q: p % q, "==": lambda p, q: int(p == q),
    "!=": lambda p, q: int(p != q), "<": lambda p, q: int(p < q), "<=": lambda p, q: int(p <= q),
    ">": lambda p, q: int(p > q), ">=": lambda p, q: int(p >= q)}


def _arith(op: str, a: Value, b: Value) -> Value:
    if isinstance(a, tuple) or isinstance(b, tuple):
        side = "left" if isinstance(a, tuple) else "right"
        raise ExprError(f"the {side} side of '{op}' must be a number, not a list")
    x, y = a, b
    if y == 0 and op in ("/", "//", "%"):
        raise ExprError(f"division by zero ('{op}')")
    return _bounded(_OPS[op](x, y))  # type: ignore[no-any-return]


def _seq(x: Value, what: str) -> tuple[Value, ...]:
    if not isinstance(x, tuple):
        raise ExprError(f"{what} needs a list")
    return x


def _int(x: Value, what: str) -> int:
    v = _number(x, what)
    if isinstance(v, float):
        if not v.is_integer():
            raise ExprError(f"{what} must be a whole number, not {v:g}")
        v = int(v)
    return v


class Budget:
    """How many steps an evaluation may still take (a node, or an item of a list a function reads): a
    template over thousands of members must not become a hang."""

    __slots__ = ("left",)

    def __init__(self, steps: int = MAX_STEPS):
        self.left = steps

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise ExprError(f"too costly to evaluate (more than {MAX_STEPS:,} steps)")


def _call(name: str, args: tuple[Node, ...], env: Mapping[str, Value], budget: Budget) -> Value:
    if name == "if":
        if len(args) != 3:
            raise ExprError("if(c, a, b) takes 3 arguments")
        taken = args[1] if _number(evaluate_node(args[0], env, budget), "if's condition") else args[2]
        return evaluate_node(taken, env, budget)
    vals = [evaluate_node(a, env, budget) for a in args]
    if name == "range":
        if len(vals) != 2:
            raise ExprError("range(a, b) takes 2 arguments")
        lo, hi = _int(vals[0], "range's start"), _int(vals[1], "range's end")
        if hi - lo > MAX_LIST:
            raise ExprError(f"range of more than {MAX_LIST} members")
        budget.spend(max(hi - lo, 0))
        return tuple(range(lo, hi))
    if name in ("min", "max"):
        items = list(_seq(vals[0], name)) if len(vals) == 1 else vals
        if not items:
            raise ExprError(f"{name} of nothing")
        budget.spend(len(items))
        nums = [_number(v, f"{name}'s argument") for v in items]
        return min(nums) if name == "min" else max(nums)
    if len(vals) != 1:
        raise ExprError(f"{name}(x) takes 1 argument")
    if name == "sum":
        row = _seq(vals[0], "sum")
        budget.spend(len(row))
        return _bounded(math.fsum(_number(v, "sum's item") for v in row))
    if name == "len":
        return len(_seq(vals[0], "len"))
    x = _number(vals[0], f"{name}'s argument")
    return abs(x) if name == "abs" else math.floor(x)


def evaluate_node(node: Node, env: Mapping[str, Value], budget: Budget) -> Value:
    budget.spend(1)
    kind = node[0]
    if kind == "num":
        return node[1]  # type: ignore[no-any-return]
    if kind == "name":
        if node[1] not in env:
            raise ExprError(f"unknown name '{node[1]}'")
        return env[node[1]]
    if kind == "op":
        op = node[1]
        if op in ("and", "or"):
            left = _number(evaluate_node(node[2], env, budget), f"'{op}'")
            if (op == "and" and not left) or (op == "or" and left):
                return int(bool(left))
            return int(bool(_number(evaluate_node(node[3], env, budget), f"'{op}'")))
        return _arith(op, evaluate_node(node[2], env, budget), evaluate_node(node[3], env, budget))
    if kind == "not":
        return int(not _number(evaluate_node(node[1], env, budget), "'not'"))
    if kind == "neg":
        return -_number(evaluate_node(node[1], env, budget), "'-'")
    if kind == "index":
        seq = _seq(evaluate_node(node[1], env, budget), "indexing")
        k = _int(evaluate_node(node[2], env, budget), "an index")
        if not 0 <= k < len(seq):
            raise ExprError(f"index {k} out of range 0..{len(seq) - 1}")
        return seq[k]
    if kind == "list":
        if len(node[1]) > MAX_LIST:
            raise ExprError(f"list of more than {MAX_LIST} items")
        return tuple(evaluate_node(a, env, budget) for a in node[1])
    return _call(node[1], node[2], env, budget)


def _free(node: Node) -> frozenset[str]:
    kind = node[0]
    if kind == "num":
        return frozenset()
    if kind == "name":
        return frozenset((node[1],))
    if kind == "op":
        return _free(node[2]) | _free(node[3])
    if kind in ("not", "neg"):
        return _free(node[1])
    if kind == "index":
        return _free(node[1]) | _free(node[2])
    return frozenset().union(*(_free(a) for a in (node[1] if kind == "list" else node[2])))


def bind(expr: Expr, env: Mapping[str, Value], free: str, budget: Budget) -> Expr:
    """``expr`` with every part that does not read ``free`` evaluated once in ``env`` (a part whose
    evaluation fails is kept, to fail only if it is reached): what a template evaluates once per sender
    before it evaluates ``bytes`` for each receiver.

    >>> e = bind(parse("B * w[j] / sum(w)"), {"B": 6, "w": (1, 2)}, "j", Budget())
    >>> e.tree[1], e.tree[3]
    ('/', ('num', 3))
    """
    return Expr(expr.text, _bind(expr.tree, env, free, budget), expr.names)


def _bind(node: Node, env: Mapping[str, Value], free: str, budget: Budget) -> Node:
    kind = node[0]
    if kind == "num":
        return node
    if free not in _free(node):
        if kind == "name" and isinstance(env.get(node[1]), (int, float)):
            return ("num", env[node[1]])
        try:
            return ("num", evaluate_node(node, env, budget))
        except ExprError:
            if budget.left < 0:
                raise
            return node
    if kind == "op":
        return ("op", node[1], _bind(node[2], env, free, budget), _bind(node[3], env, free, budget))
    if kind in ("not", "neg"):
        return (kind, _bind(node[1], env, free, budget))
    if kind == "index":
        return ("index", _bind(node[1], env, free, budget), _bind(node[2], env, free, budget))
    if kind == "list":
        return ("list", tuple(_bind(a, env, free, budget) for a in node[1]))
    if kind == "call":
        return ("call", node[1], tuple(_bind(a, env, free, budget) for a in node[2]))
    return node


def evaluate(expr: Expr, env: Mapping[str, Value], budget: Budget | None = None) -> Value:
    """The value of ``expr`` with the names of ``env``.

    >>> evaluate(parse("if(i == n - 1, 0, i + 1)"), {"i": 3, "n": 4})
    0
    """
    try:
        return evaluate_node(expr.tree, env, Budget() if budget is None else budget)
    except (OverflowError, RecursionError) as exc:  # defensive: the bounds above should make these unreachable
        raise ExprError(f"cannot evaluate ({type(exc).__name__})") from None
