"""Which files can hold a matching row: partition pruning and min/max/nullCount skipping.

The predicate is first put in negation normal form, so every leaf can be judged on its own:

* a sub-predicate over partition columns only is evaluated exactly on each file's partition
  values (null counts as false: a row whose predicate is null is not selected);
* a comparison of a data column with a literal becomes a question about the file's bounds
  (``x = v`` may match iff ``min <= v <= max``), where missing statistics mean "maybe";
* anything else is "maybe".

The result is a keep-mask with one entry per file; it can keep too much, never too little.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.expressions.arrow import compare, evaluate, literal_scalar, may_be_nan
from deltaplane.engine.expressions.tree import (
    FLIPPED,
    And,
    Column,
    Comparison,
    Expr,
    In,
    IsNull,
    Like,
    Literal,
    Or,
    columns,
    negation_normal_form,
    walk,
)
from deltaplane.engine.stats import FileStats
from deltaplane.engine.values_to_arrow import array_from_values, scalar

Path = tuple[str, ...]


class SkippingContext:
    """What the evaluator may look at, built lazily by the scan."""

    def __init__(
        self,
        num_files: int,
        partition_table: Callable[[list[str]], pa.Table],
        partition_names: set[str],
        stats: Callable[[list[Column]], FileStats],
        physical_path: Callable[[Path], Path],
    ):
        self.num_files = num_files
        self.partition_table = partition_table
        self.partition_names = partition_names
        self.stats_for = stats
        self.physical_path = physical_path
        self._stats: FileStats | None = None
        self._some_values: dict[Path, pa.BooleanArray | None] = {}

    def is_partition(self, col: Column) -> bool:
        return len(col.path) == 1 and col.path[0] in self.partition_names

    def some_values(self, path: Path, stats: FileStats) -> pa.BooleanArray | None:
        """Per file: whether the column holds a non-null value (None: unknown). Computed once
        per column, however many terms of a long predicate ask."""
        if path not in self._some_values:
            counts = stats.null_count.get(self.physical_path(path))
            self._some_values[path] = (
                None if counts is None else pc.invert(pc.equal(counts, stats.num_records))
            )
        return self._some_values[path]


def files_to_keep(predicate: Expr, ctx: SkippingContext) -> pa.BooleanArray:
    """Keep-mask over files (True: the file may contain a row satisfying ``predicate``)."""
    nnf = negation_normal_form(predicate)
    data_columns = [c for c in columns(nnf) if not ctx.is_partition(c)]
    if data_columns:
        ctx._stats = ctx.stats_for(data_columns)
    mask = _evaluate(nnf, ctx)
    return pc.fill_null(mask, scalar(True, pa.bool_()))


def _all(ctx: SkippingContext, value: bool) -> pa.BooleanArray:
    return pa.repeat(scalar(value, pa.bool_()), ctx.num_files)


def _partition_only(expr: Expr, ctx: SkippingContext) -> bool:
    """Whether every column ``expr`` names is a partition column (stops at the first that is
    not: an OR of 20,000 data-column terms is not walked once per level)."""
    return not any(isinstance(node, Column) and not ctx.is_partition(node) for node in walk(expr))


def _evaluate(expr: Expr, ctx: SkippingContext) -> pa.BooleanArray:
    if _partition_only(expr, ctx):
        return _exact(expr, ctx, columns(expr))
    if isinstance(expr, And):
        out = _evaluate(expr.items[0], ctx)
        for item in expr.items[1:]:
            out = pc.and_kleene(out, _evaluate(item, ctx))
        return out
    if isinstance(expr, Or):
        out = _evaluate(expr.items[0], ctx)
        for item in expr.items[1:]:
            out = pc.or_kleene(out, _evaluate(item, ctx))
        return out
    if ctx._stats is None:
        return _all(ctx, True)
    return _from_stats(expr, ctx, ctx._stats)


def _exact(expr: Expr, ctx: SkippingContext, referenced: list[Column]) -> pa.BooleanArray:
    """Evaluate on the partition values; a null result cannot select rows, so it is false."""
    if not referenced and isinstance(expr, Literal):
        return _all(ctx, expr.value is True)
    table = ctx.partition_table(sorted({c.path[0] for c in referenced}))
    result = _as_array(table.num_rows, evaluate(table, expr).combine_chunks())
    return pc.fill_null(result, False)


def _as_array(n: int, arr: pa.Array) -> pa.Array:
    if len(arr) == n:
        return arr
    return pa.repeat(arr[0] if len(arr) else scalar(None, pa.bool_()), n)


def _from_stats(expr: Expr, ctx: SkippingContext, stats: FileStats) -> pa.BooleanArray:
    result = _from_bounds(expr, ctx, stats)
    # A comparison, IN or LIKE is never true on a column whose values are all null.
    child = expr.child if isinstance(expr, (In, Like)) else None
    if isinstance(expr, Comparison):
        operands = [e for e in (expr.left, expr.right) if isinstance(e, Column)]
        if expr.op != "<=>" and len(operands) == 1:
            child = operands[0]
    if isinstance(child, Column) and not ctx.is_partition(child):
        some_values = ctx.some_values(child.path, stats)
        if some_values is not None:
            result = pc.and_kleene(result, some_values)
    return result


def _from_bounds(expr: Expr, ctx: SkippingContext, stats: FileStats) -> pa.BooleanArray:
    if isinstance(expr, Column) and not ctx.is_partition(expr):
        # A bare boolean column used as a predicate: it may be true unless max is false.
        return _from_stats(Comparison("=", expr, Literal(True, expr.dtype)), ctx, stats)
    if isinstance(expr, Comparison):
        left, right, op = expr.left, expr.right, expr.op
        if isinstance(left, Literal) and isinstance(right, Column):
            left, right, op = right, left, FLIPPED[op]
        if not (isinstance(left, Column) and isinstance(right, Literal)):
            return _all(ctx, True)
        if right.value is None:
            if op == "<=>":
                return _from_stats(IsNull(left), ctx, stats)
            return _all(ctx, False)  # a comparison with NULL is never true
        bounds = _bounds(left, ctx, stats)
        if bounds is None:
            return _all(ctx, True)
        low, high = bounds
        value = literal_scalar(right)
        # Bounds are ordered as Spark orders values (NaN above +inf): compare in that order.
        nan = may_be_nan(left), may_be_nan(right)
        if op in ("=", "<=>"):
            return pc.and_kleene(compare("<=", low, value, *nan), compare(">=", high, value, *nan))
        if op == "!=":
            return pc.or_kleene(compare("!=", low, value, *nan), compare("!=", high, value, *nan))
        if op in ("<", "<="):
            return compare(op, low, value, *nan)
        if op in (">", ">="):
            return compare(op, high, value, *nan)
        return _all(ctx, True)
    if isinstance(expr, IsNull) and isinstance(expr.child, Column):
        path = ctx.physical_path(expr.child.path)
        counts = stats.null_count.get(path)
        if counts is None:
            return _all(ctx, True)
        if expr.negated:
            return pc.less(counts, stats.num_records)
        return pc.greater(counts, 0)
    if isinstance(expr, In) and isinstance(expr.child, Column):
        bounds = _bounds(expr.child, ctx, stats)
        values = [v for v in expr.values if v.value is not None]
        if bounds is None:
            return _all(ctx, True)
        low, high = bounds
        nan = may_be_nan(expr.child), may_be_nan(expr.child)
        if expr.negated:
            if len(values) != len(expr.values):
                return _all(ctx, False)  # NOT IN (..., NULL) is never true
            if not values:
                return _all(ctx, True)
            single = compare("=", low, high, *nan)
            listed = pc.is_in(
                low, value_set=array_from_values([literal_scalar(v).as_py() for v in values], low.type)
            )
            return pc.invert(pc.and_kleene(single, listed))
        if not values:
            return _all(ctx, False)
        scalars = [literal_scalar(v) for v in values]
        if len(scalars) <= 64:
            out = None
            for s in scalars:
                hit = pc.and_kleene(compare("<=", low, s, *nan), compare(">=", high, s, *nan))
                out = hit if out is None else pc.or_kleene(out, hit)
            return out
        py = sorted((s.as_py() for s in scalars), key=_spark_order)
        smallest, largest = scalar(py[0], scalars[0].type), scalar(py[-1], scalars[0].type)
        return pc.and_kleene(compare("<=", low, largest, *nan), compare(">=", high, smallest, *nan))
    if isinstance(expr, Like) and isinstance(expr.child, Column) and not expr.negated:
        prefix = _like_prefix(expr.pattern)
        bounds = _bounds(expr.child, ctx, stats)
        if not prefix or bounds is None:
            return _all(ctx, True)
        low, high = bounds
        head = pc.utf8_slice_codeunits(low, 0, len(prefix))
        return pc.and_kleene(pc.greater_equal(high, prefix), pc.less_equal(head, prefix))
    return _all(ctx, True)


def _spark_order(value):
    """Sort key putting NaN above every other value, as Spark orders doubles."""
    return (isinstance(value, float) and value != value, 0.0 if value != value else value)


def _bounds(col: Column, ctx: SkippingContext, stats: FileStats):
    path = ctx.physical_path(col.path)
    low, high = stats.min_values.get(path), stats.max_values.get(path)
    if low is None or high is None:
        return None
    return low, high


def _like_prefix(pattern: str) -> str:
    """The literal text before the first wildcard of a LIKE pattern (backslash escapes)."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
            continue
        if ch in "%_":
            break
        out.append(ch)
        i += 1
    return "".join(out)
