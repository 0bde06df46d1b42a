"""Filters in disjunctive normal form, as delta-rs and pyarrow take them, turned into the
engine's expression tree.

``[("year", "=", 2021), ("month", ">", 6)]`` is an AND of its tuples; ``[[...], [...]]`` is an OR
of such ANDs. Operators: ``=`` (and ``==``), ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``,
``not in`` (the last two take a list, tuple or set). Values are Python values; the binder types
them against the column they are compared with, as it does for SQL literals.

``partition_strings=True`` is delta-rs's partition-filter form (its ``partitions=`` and
``partition_filters=``): an empty string means a null partition value (``("p", "=", "")`` is
``p IS NULL``). For row filters (``filters=``) an empty string is an ordinary string.

Anything else (an unknown operator, a tuple of the wrong length, a column that is not a string,
an empty list) raises ``InvalidArgumentError`` naming the offending filter; unknown column names
are found when the expression is bound to a table, with the binder's own error.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from deltaplane.engine.errors import InvalidArgumentError
from deltaplane.engine.expressions.tree import And, Column, Comparison, Expr, In, IsNull, Literal, Or

OPERATORS = ("=", "==", "!=", "<", "<=", ">", ">=", "in", "not in")


def is_dnf(value: Any) -> bool:
    """Whether ``value`` looks like a DNF filter (a list or tuple of tuples/lists), rather than a
    SQL string or an expression."""
    return isinstance(value, list | tuple) and not isinstance(value, str)


def dnf_to_expr(filters: Any, *, partition_strings: bool = False, what: str = "filters") -> Expr:
    """The expression of a DNF filter (see the module's docstring)."""
    if not isinstance(filters, list | tuple) or not filters:
        raise InvalidArgumentError(
            f"{what} must be a non-empty list of (column, op, value) tuples, or a list of such "
            f"lists (OR of ANDs), got {filters!r}"
        )
    if all(_is_term(f) for f in filters):
        groups = [list(filters)]
    elif all(isinstance(f, list | tuple) and f and all(_is_term(t) for t in f) for f in filters):
        groups = [list(f) for f in filters]
    else:
        bad = next(
            (f for f in filters if not _is_term(f) and not (isinstance(f, list | tuple) and f)), filters
        )
        raise InvalidArgumentError(
            f"{what}: {bad!r} is not a (column, op, value) tuple; write a list of tuples (AND) "
            "or a list of lists of tuples (OR of ANDs)"
        )
    ands = [_and([_term(t, partition_strings, what) for t in group]) for group in groups]
    return ands[0] if len(ands) == 1 else Or(tuple(ands))


def _is_term(value: Any) -> bool:
    return isinstance(value, tuple | list) and len(value) == 3 and isinstance(value[1], str)


def _and(items: list[Expr]) -> Expr:
    return items[0] if len(items) == 1 else And(tuple(items))


def _term(term, partition_strings: bool, what: str) -> Expr:
    name, op, value = term
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"{what}: the column of {tuple(term)!r} must be a non-empty string")
    op_name = op.strip().lower()
    if op_name not in OPERATORS:
        raise InvalidArgumentError(
            f"{what}: unknown operator {op!r} in {tuple(term)!r}; use one of {', '.join(OPERATORS)}"
        )
    column = Column((name,))  # one name, as pyarrow's filters_to_expression reads it
    if op_name in ("in", "not in"):
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple | Set):
            raise InvalidArgumentError(
                f"{what}: {op!r} takes a list, tuple or set of values, got {value!r} in {tuple(term)!r}"
            )
        values = list(value)
        if not values:
            raise InvalidArgumentError(f"{what}: {op!r} needs at least one value in {tuple(term)!r}")
        negated = op_name == "not in"
        nulls = partition_strings and any(v == "" or v is None for v in values)
        kept = [v for v in values if not (partition_strings and (v == "" or v is None))]
        parts: list[Expr] = []
        if kept:
            parts.append(In(column, tuple(Literal(v) for v in kept), negated=negated))
        if nulls:
            parts.append(IsNull(column, negated=negated))
        if len(parts) == 1:
            return parts[0]
        return And(tuple(parts)) if negated else Or(tuple(parts))
    comparison = "=" if op_name == "==" else op_name
    if partition_strings and (value == "" or value is None) and comparison in ("=", "!="):
        return IsNull(column, negated=comparison == "!=")
    if isinstance(value, list | tuple | Set | dict):
        raise InvalidArgumentError(f"{what}: {op!r} compares with one value, got {value!r}")
    return Comparison(comparison, column, Literal(value))
