"""A plain-Python reference for SQL predicate semantics (three-valued logic), used as the oracle
for property tests of parsing, binding, row filtering and file skipping."""

from __future__ import annotations

import re

from hypothesis import strategies as st

from deltaplane.engine.expressions.tree import (
    And,
    BinaryOp,
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


def evaluate(expr: Expr, row: dict):
    """True, False or None (SQL NULL) for one row given as {column: python value}."""
    if isinstance(expr, Column):
        value = row
        for part in expr.path:
            value = None if value is None else value.get(part)
        return value
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, Comparison):
        a, b = evaluate(expr.left, row), evaluate(expr.right, row)
        if expr.op == "<=>":
            return a == b if a is not None and b is not None else (a is None and b is None)
        if a is None or b is None:
            return None
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[expr.op]
    if isinstance(expr, And):
        values = [evaluate(i, row) for i in expr.items]
        if any(v is False for v in values):
            return False
        return None if any(v is None for v in values) else True
    if isinstance(expr, Or):
        values = [evaluate(i, row) for i in expr.items]
        if any(v is True for v in values):
            return True
        return None if any(v is None for v in values) else False
    if isinstance(expr, Not):
        v = evaluate(expr.child, row)
        return None if v is None else not v
    if isinstance(expr, IsNull):
        v = evaluate(expr.child, row)
        return (v is not None) if expr.negated else (v is None)
    if isinstance(expr, In):
        v = evaluate(expr.child, row)
        values = [x.value for x in expr.values]
        if v is None:
            result = None
        elif v in [x for x in values if x is not None]:
            result = True
        elif None in values:
            result = None
        else:
            result = False
        if expr.negated:
            return None if result is None else not result
        return result
    if isinstance(expr, Like):
        v = evaluate(expr.child, row)
        if v is None:
            return None
        hit = re.fullmatch(_like_regex(expr.pattern), v, flags=re.S) is not None
        return not hit if expr.negated else hit
    if isinstance(expr, Cast):
        return evaluate(expr.child, row)
    if isinstance(expr, BinaryOp):
        a, b = evaluate(expr.left, row), evaluate(expr.right, row)
        if a is None or b is None:
            return None
        if expr.op == "%":
            return (
                int(a - b * int(a / b)) if isinstance(a, int) and isinstance(b, int) else a - b * int(a / b)
            )
        return {"+": a + b, "-": a - b, "*": a * b, "/": a / b, "||": f"{a}{b}"}[expr.op]
    raise TypeError(type(expr))


def _like_regex(pattern: str) -> str:
    """SQL LIKE: % any run, _ one character, backslash escapes the next character."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return "".join(out)


def sql_predicates(atom, max_leaves: int):
    """SQL predicate strings: ``atom`` leaves combined with AND, OR and NOT."""
    return st.recursive(
        atom,
        lambda inner: st.one_of(
            st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
            st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
            st.builds(lambda a: f"NOT ({a})", inner),
        ),
        max_leaves=max_leaves,
    )
