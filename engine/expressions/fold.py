"""Constant folding: the parts of a predicate that name no column, replaced by their value.

``1 = 1 OR id = 5`` is true for every row, ``id = 5 AND NOT false`` is ``id = 5``. Folding
follows SQL's three-valued logic: ``NULL OR x`` stays as it is (it is never true where ``x``
is not), ``TRUE OR x`` is TRUE, ``FALSE AND x`` is FALSE. A comparison of a column with itself
is never folded (``id = id`` is null, so not true, where ``id`` is null), and neither is anything
else that names a column. A column-free part is evaluated by the engine's own binder and Arrow
evaluation on one row, so it means exactly what it means in a filter; one that cannot be
evaluated (``1 / 0``, ``1 = 'a'``) is left as it is.

Used on unbound trees, where the guard against whole-table DELETE/UPDATE looks at them.
"""

from __future__ import annotations

import pyarrow as pa

from deltaplane.engine.errors import DeltaError
from deltaplane.engine.expressions.tree import And, Column, Expr, Literal, Not, Or, columns
from deltaplane.engine.schema import PrimitiveType, StructType

BOOLEAN = PrimitiveType("boolean")


def fold_constants(expr: Expr) -> Expr:
    """``expr`` with every column-free AND/OR/NOT operand replaced by its value."""
    if isinstance(expr, And | Or):
        return _connective(expr)
    if isinstance(expr, Not):
        child = fold_constants(expr.child)
        if isinstance(child, Literal) and (child.value is None or isinstance(child.value, bool)):
            return Literal(None if child.value is None else not child.value, BOOLEAN)
        return Not(child)
    if isinstance(expr, Literal | Column) or columns(expr):
        return expr
    return _value(expr)


def constant_truth(expr: Expr) -> bool | None:
    """True when the predicate is true for every row whatever the data, False when it is true
    for none (false or null), None when it depends on the rows."""
    folded = fold_constants(expr)
    if isinstance(folded, Literal) and (folded.value is None or isinstance(folded.value, bool)):
        return folded.value is True
    return None


def _connective(expr: And | Or) -> Expr:
    """AND/OR over folded items: the absorbing value (FALSE for AND, TRUE for OR) decides,
    the neutral one (TRUE for AND, FALSE for OR) drops out, NULL and the rest stay."""
    absorbing = isinstance(expr, Or)
    kept: list[Expr] = []
    for item in expr.items:
        folded = fold_constants(item)
        if isinstance(folded, Literal) and isinstance(folded.value, bool):
            if folded.value is absorbing:
                return Literal(absorbing, BOOLEAN)
            continue
        kept.append(folded)
    if not kept:
        return Literal(not absorbing, BOOLEAN)
    return kept[0] if len(kept) == 1 else type(expr)(tuple(kept))


def _value(expr: Expr) -> Expr:
    """A column-free expression's value as a literal, or ``expr`` when it cannot be evaluated."""
    from deltaplane.engine.expressions.arrow import evaluate
    from deltaplane.engine.expressions.bind import _type_of, bind

    try:
        bound = bind(expr, StructType(()))
        value = evaluate(pa.table({"row": [0]}), bound).combine_chunks()
    except (DeltaError, pa.ArrowException):
        return expr
    if len(value) != 1:
        return expr
    return Literal(value[0].as_py(), _type_of(bound))
