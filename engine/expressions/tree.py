"""The engine's expression tree for predicates.

Small and explicit on purpose: the nodes are the ones partition pruning, statistics skipping and
row filtering understand. Parsing (``parser.py``) produces unbound nodes; binding (``bind.py``)
resolves columns against a table schema and types every literal; visitors (``skipping.py``,
``arrow.py``) consume bound trees.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from deltaplane.engine.schema import DataType

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=", "<=>")
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}
NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}

# How deeply a parsed predicate may nest: parentheses, CASE, and runs of NOT / unary minus.
# sqlglot's parser recurses about 20 Python frames per level, so this keeps a parse within
# Python's default recursion limit with room for the caller's stack. Long flat chains (``a OR b
# OR ...``) are not nesting: any length parses, and every visitor handles AND/OR as n-ary nodes.
MAX_NESTING = 32


class Expr:
    """Base of every node."""

    def children(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True)
class Column(Expr):
    """A (possibly nested) column; ``dtype`` is set once bound."""

    path: tuple[str, ...]
    dtype: DataType | None = None

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def __str__(self) -> str:
        return ".".join(p if p.isidentifier() else "`" + p.replace("`", "``") + "`" for p in self.path)


@dataclass(frozen=True)
class Literal(Expr):
    """A constant; ``dtype`` is None for an untyped literal (a bare number or string)."""

    value: Any
    dtype: DataType | None = None

    def __str__(self) -> str:
        return "NULL" if self.value is None else repr(self.value)


@dataclass(frozen=True)
class Comparison(Expr):
    op: str
    left: Expr
    right: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class And(Expr):
    items: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.items

    def __str__(self) -> str:
        return "(" + " AND ".join(map(str, self.items)) + ")"


@dataclass(frozen=True)
class Or(Expr):
    items: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.items

    def __str__(self) -> str:
        return "(" + " OR ".join(map(str, self.items)) + ")"


@dataclass(frozen=True)
class Not(Expr):
    child: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.child,)

    def __str__(self) -> str:
        return f"(NOT {self.child})"


@dataclass(frozen=True)
class IsNull(Expr):
    child: Expr
    negated: bool = False  # IS NOT NULL

    def children(self) -> tuple[Expr, ...]:
        return (self.child,)

    def __str__(self) -> str:
        return f"({self.child} IS {'NOT ' if self.negated else ''}NULL)"


@dataclass(frozen=True)
class In(Expr):
    child: Expr
    values: tuple[Literal, ...]
    negated: bool = False  # NOT IN

    def children(self) -> tuple[Expr, ...]:
        return (self.child, *self.values)

    def __str__(self) -> str:
        vals = ", ".join(map(str, self.values))
        return f"({self.child} {'NOT ' if self.negated else ''}IN ({vals}))"


@dataclass(frozen=True)
class Like(Expr):
    child: Expr
    pattern: str
    negated: bool = False

    def children(self) -> tuple[Expr, ...]:
        return (self.child,)

    def __str__(self) -> str:
        return f"({self.child} {'NOT ' if self.negated else ''}LIKE {self.pattern!r})"


@dataclass(frozen=True)
class Cast(Expr):
    child: Expr
    dtype: DataType

    def children(self) -> tuple[Expr, ...]:
        return (self.child,)

    def __str__(self) -> str:
        return f"CAST({self.child} AS {self.dtype.to_json()})"


@dataclass(frozen=True)
class BinaryOp(Expr):
    """Arithmetic (``+ - * / %``) or string concatenation (``||``); ``dtype`` set once bound."""

    op: str
    left: Expr
    right: Expr
    dtype: DataType | None = None

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True)
class Func(Expr):
    """A scalar function call (``upper(name)``, ``coalesce(a, 0)``, ...)."""

    name: str
    args: tuple[Expr, ...]
    dtype: DataType | None = None

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def __str__(self) -> str:
        return f"{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Case(Expr):
    """``CASE WHEN c1 THEN v1 ... ELSE d END``."""

    branches: tuple[tuple[Expr, Expr], ...]
    default: Expr | None = None
    dtype: DataType | None = None

    def children(self) -> tuple[Expr, ...]:
        out: list[Expr] = [e for branch in self.branches for e in branch]
        return (*out, self.default) if self.default is not None else tuple(out)

    def __str__(self) -> str:
        whens = " ".join(f"WHEN {c} THEN {v}" for c, v in self.branches)
        return f"CASE {whens}{' ELSE ' + str(self.default) if self.default is not None else ''} END"


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node, parents before children, left to right (an explicit stack: no recursion)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children()))


def columns(expr: Expr) -> list[Column]:
    """Every column the expression references, first occurrence order, no duplicates."""
    seen: dict[tuple[str, ...], Column] = {}
    for node in walk(expr):
        if isinstance(node, Column) and node.path not in seen:
            seen[node.path] = node
    return list(seen.values())


def conjuncts(expr: Expr) -> list[Expr]:
    if isinstance(expr, And):
        return [c for item in expr.items for c in conjuncts(item)]
    return [expr]


def and_(*items: Expr) -> Expr:
    flat = [c for item in items for c in conjuncts(item)]
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def negation_normal_form(expr: Expr, negate: bool = False) -> Expr:
    """Push every NOT down to the leaves (De Morgan), valid under SQL's three-valued logic.

    Leaves negate into their own negated forms (``<`` into ``>=``, ``IN`` into ``NOT IN``), so
    the result has no ``Not`` above a comparison and skipping can treat leaves independently.
    """
    if isinstance(expr, Not):
        return negation_normal_form(expr.child, not negate)
    if isinstance(expr, And | Or):
        items = tuple(negation_normal_form(i, negate) for i in expr.items)
        flip = isinstance(expr, And) == negate
        return Or(items) if flip else And(items)
    if not negate:
        return expr
    if isinstance(expr, Comparison) and expr.op in NEGATED:
        return Comparison(NEGATED[expr.op], expr.left, expr.right)
    if isinstance(expr, IsNull):
        return IsNull(expr.child, not expr.negated)
    if isinstance(expr, In):
        return In(expr.child, expr.values, not expr.negated)
    if isinstance(expr, Like):
        return Like(expr.child, expr.pattern, not expr.negated)
    if isinstance(expr, Literal) and isinstance(expr.value, bool):
        return Literal(not expr.value, expr.dtype)
    return Not(expr)


def transform(expr: Expr, fn) -> Expr:
    """Rebuild ``expr`` bottom-up, replacing each node by ``fn(node)`` (children first)."""
    import dataclasses

    if isinstance(expr, And | Or):
        expr = type(expr)(tuple(transform(i, fn) for i in expr.items))
    elif isinstance(expr, Not):
        expr = Not(transform(expr.child, fn))
    elif isinstance(expr, Comparison | BinaryOp):
        expr = dataclasses.replace(expr, left=transform(expr.left, fn), right=transform(expr.right, fn))
    elif isinstance(expr, (IsNull | Like | Cast, In)):
        expr = dataclasses.replace(expr, child=transform(expr.child, fn))
    elif isinstance(expr, Func):
        expr = dataclasses.replace(expr, args=tuple(transform(a, fn) for a in expr.args))
    elif isinstance(expr, Case):
        branches = tuple((transform(c, fn), transform(v, fn)) for c, v in expr.branches)
        default = transform(expr.default, fn) if expr.default is not None else None
        expr = dataclasses.replace(expr, branches=branches, default=default)
    return fn(expr)
