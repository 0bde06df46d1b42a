"""Spark's pushed filters as engine predicates, for partition pruning and statistics skipping.

Only planning uses them: the reader returns every filter to Spark, which evaluates them again on
the rows, so a translation only needs to be *implied* by the filter (never narrower). Filters
with no translation are simply not used for skipping.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import datasource as ds

from engine.expressions.tree import And, Column, Comparison, Expr, In, IsNull, Like, Literal, Not

_COMPARISONS = {
    ds.EqualTo: "=",
    ds.GreaterThan: ">",
    ds.GreaterThanOrEqual: ">=",
    ds.LessThan: "<",
    ds.LessThanOrEqual: "<=",
}


def to_expr(f: Any) -> Expr | None:
    """One Spark filter as an engine predicate, or ``None`` when it has no translation."""
    if isinstance(f, tuple(_COMPARISONS)):
        if f.value is None:
            return None
        return Comparison(_COMPARISONS[type(f)], Column(tuple(f.attribute)), Literal(f.value))
    if isinstance(f, ds.EqualNullSafe):
        column = Column(tuple(f.attribute))
        return IsNull(column) if f.value is None else Comparison("=", column, Literal(f.value))
    if isinstance(f, ds.In):
        values = tuple(Literal(v) for v in f.value if v is not None)
        return In(Column(tuple(f.attribute)), values) if values else None
    if isinstance(f, ds.IsNull):
        return IsNull(Column(tuple(f.attribute)))
    if isinstance(f, ds.IsNotNull):
        return IsNull(Column(tuple(f.attribute)), negated=True)
    if isinstance(f, ds.StringStartsWith):
        return Like(Column(tuple(f.attribute)), _escape(f.value) + "%")
    if isinstance(f, ds.Not):
        if isinstance(f.child, ds.EqualNullSafe):
            return None  # NOT (x <=> v) holds for null x too; NOT (x = v) never does
        child = to_expr(f.child)
        return Not(child) if child is not None else None
    return None


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def combine(filters: list[Any]) -> Expr | None:
    """The conjunction of the translatable filters (Spark splits AND; OR is never pushed)."""
    exprs = [e for e in (to_expr(f) for f in filters) if e is not None]
    if not exprs:
        return None
    return exprs[0] if len(exprs) == 1 else And(tuple(exprs))
