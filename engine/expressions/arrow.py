"""Bound predicates to ``pyarrow.compute`` expressions, for filtering rows after a scan.

Arrow's ``and``/``or`` are Kleene (three-valued), and a filter drops rows whose predicate is
null, which is SQL's WHERE. The two places where Arrow differs from SQL are handled here:
``NOT IN`` must be null (so dropped) for a null input, and ``<=>`` is null-safe equality.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import InvalidPredicateError
from engine.expressions.tree import (
    And,
    Cast,
    Column,
    Comparison,
    Expr,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
)
from engine.schema import to_arrow_type

_OPS = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def literal_scalar(lit: Literal) -> pa.Scalar:
    if lit.dtype is None:
        return pa.scalar(lit.value)
    return pa.scalar(lit.value, to_arrow_type(lit.dtype))


def to_arrow_expression(expr: Expr) -> pc.Expression:
    if isinstance(expr, Column):
        return pc.field(*expr.path)
    if isinstance(expr, Literal):
        return pc.scalar(literal_scalar(expr))
    if isinstance(expr, Comparison):
        left, right = to_arrow_expression(expr.left), to_arrow_expression(expr.right)
        if expr.op == "<=>":
            both_null = left.is_null() & right.is_null()
            return both_null | pc.coalesce(left == right, pc.scalar(False))
        return _OPS[expr.op](left, right)
    if isinstance(expr, And):
        out = to_arrow_expression(expr.items[0])
        for item in expr.items[1:]:
            out = out & to_arrow_expression(item)
        return out
    if isinstance(expr, Or):
        out = to_arrow_expression(expr.items[0])
        for item in expr.items[1:]:
            out = out | to_arrow_expression(item)
        return out
    if isinstance(expr, Not):
        return ~to_arrow_expression(expr.child)
    if isinstance(expr, IsNull):
        child = to_arrow_expression(expr.child)
        return child.is_valid() if expr.negated else child.is_null()
    if isinstance(expr, In):
        # SQL: NULL IN (...) is NULL, and x IN (..., NULL) is NULL when x is not listed;
        # Arrow's is_in answers false in both cases, so the nulls are put back.
        child = to_arrow_expression(expr.child)
        values = [v for v in expr.values if v.value is not None]
        typ = to_arrow_type(values[0].dtype) if values and values[0].dtype else None
        member = child.isin(pa.array([v.value for v in values], type=typ))
        unknown = pc.scalar(pa.scalar(None, pa.bool_()))
        if len(values) != len(expr.values):
            member = pc.if_else(member, pc.scalar(True), unknown)
        result = pc.if_else(child.is_valid(), member, unknown)
        return ~result if expr.negated else result
    if isinstance(expr, Like):
        matched = pc.match_like(to_arrow_expression(expr.child), pattern=expr.pattern)
        return ~matched if expr.negated else matched
    if isinstance(expr, Cast):
        return to_arrow_expression(expr.child).cast(to_arrow_type(expr.dtype))
    raise InvalidPredicateError(f"cannot evaluate {type(expr).__name__} on rows")


def evaluate(table: pa.Table, expr: Expr) -> pa.ChunkedArray:
    """The predicate's value (true/false/null) for every row of ``table``."""
    import pyarrow.dataset as ds

    return ds.dataset(table).to_table(columns={"value": to_arrow_expression(expr)}).column("value")
