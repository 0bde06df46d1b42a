"""String predicates in SQL syntax, parsed into the engine's expression tree.

Airflow users template filters as strings (``"id > 5 AND date = '{{ ds }}'"``), so the accepted
syntax is Spark SQL's: comparisons (``= == != <> < <= > >= <=>``), ``AND``/``OR``/``NOT``,
``IS [NOT] NULL``, ``[NOT] IN (...)``, ``BETWEEN``, ``[NOT] LIKE``, typed literals
(``DATE '...'``, ``TIMESTAMP '...'``), ``CAST``, backquoted and nested column names. Anything else
is refused with ``InvalidPredicateError`` that quotes the input, rather than guessed at.

The parsing itself (sqlglot, ``sql.py``) loads on the first parse: importing this module, as
every scan and write does, costs nothing until a string needs parsing.
"""

from __future__ import annotations

import contextlib
import functools
import gc

from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions.tree import MAX_NESTING, Expr

__all__ = ["MAX_NESTING", "parse_expression", "parse_predicate"]


def parse_expression(text: str) -> Expr:
    """Parse a SQL scalar expression (an UPDATE ``SET`` value, for example)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidPredicateError(f"an expression must be a non-empty string, got {text!r}")
    return _parse(text, "expression", lambda converter, tree: converter.value(tree))


def parse_predicate(text: str) -> Expr:
    """Parse a SQL boolean expression; ``InvalidPredicateError`` for anything unsupported.

    The same text gives the same tree, so the last few hundred parses are kept (keyed on the
    text alone; trees are immutable): a query repeated on a schedule, or a filter checked and
    then scanned, skips sqlglot's ~0.3 ms. Errors are not kept.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidPredicateError(f"a predicate must be a non-empty string, got {text!r}")
    return _parse_predicate(str(text))


@functools.lru_cache(maxsize=256)
def _parse_predicate(text: str) -> Expr:
    return _parse(text, "predicate", lambda converter, tree: converter.convert(tree))


@contextlib.contextmanager
def _collector_paused():
    """The cyclic garbage collector off while a parse allocates its many short-lived objects:
    on a 20,000-term OR its repeated passes over every live object took more than half the time.
    Restored to the state it had (a caller that disabled it keeps it disabled)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _parse(text: str, what: str, convert) -> Expr:
    from deltaplane.engine.expressions.sql import parse_sql  # sqlglot: on the first parse only

    with _collector_paused():
        return parse_sql(text, what, convert)
