"""Comparison helpers for tests: multiset equality of Arrow tables, independent of the engine; and
the random rows the clustering tests write."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa


def _canon(value):
    if isinstance(value, float):
        return ("float", "NaN") if math.isnan(value) else ("float", value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return ("ts", value.isoformat())
    if isinstance(value, Decimal):
        return ("dec", str(value.normalize()) if value == value else "NaN")
    if isinstance(value, dict):
        return ("struct", tuple((k, _canon(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(_canon(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_canon(v) for v in value))
    return (type(value).__name__, value)


def canonical_rows(table: pa.Table) -> list:
    """Rows as hashable canonical tuples, sorted: a multiset representation."""
    rows = [tuple(_canon(v) for v in row.values()) for row in table.to_pylist()]
    return sorted(rows, key=repr)


def assert_same_rows(actual: pa.Table, expected: pa.Table, *, ignore_columns: tuple[str, ...] = ()) -> None:
    assert actual.column_names == expected.column_names, (
        actual.column_names,
        expected.column_names,
    )
    keep = [c for c in actual.column_names if c not in ignore_columns]
    a, e = actual.select(keep), expected.select(keep)
    assert a.num_rows == e.num_rows, f"row count {a.num_rows} != {e.num_rows}"
    if _arrow_equal(a, e):
        return
    ca, ce = canonical_rows(a), canonical_rows(e)
    if ca != ce:
        diff = [(x, y) for x, y in zip(ca, ce, strict=True) if x != y][:3]
        raise AssertionError(f"rows differ; first differences (actual, expected): {diff}")


def _sortable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_null(t))


def _arrow_equal(a: pa.Table, e: pa.Table) -> bool:
    """Fast path for big flat tables: sort both on every column and compare in Arrow.

    A False here is not a verdict: the caller then compares canonical Python rows, which also
    treats NaN as equal to NaN and reports the differing rows.
    """
    if a.num_rows == 0 or not all(_sortable(f.type) for f in a.schema):
        return False
    try:
        e = e.cast(a.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    keys = [(name, "ascending") for name in a.column_names]
    return a.sort_by(keys).equals(e.sort_by(keys))


CLUSTERING_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])


def clustering_rows(seed: int, n: int) -> pa.Table:
    """``n`` random rows, the same for the same ``seed``: ``a`` below 1000, ``b`` one of 300 keys
    (``k000`` to ``k299``), ``c`` in [0, 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "a": rng.integers(0, 1000, n),
            "b": [f"k{int(v):03d}" for v in rng.integers(0, 300, n)],
            "c": rng.random(n),
        },
        schema=CLUSTERING_SCHEMA,
    )


def clustering_values_sql(seed: int, n: int = 200) -> str:
    """The rows of ``clustering_rows(seed, n)`` as SQL VALUES."""
    return ", ".join(f"({r['a']}, '{r['b']}', {r['c']!r})" for r in clustering_rows(seed, n).to_pylist())


def spark_clustered_table(spark, path: str, seeds) -> None:
    """A table at ``path`` that Delta Spark creates clustered by (a, b), then fills with one
    INSERT of ``clustering_rows(seed, 200)`` per seed."""
    spark.sql(f"CREATE TABLE delta.`{path}` (a BIGINT, b STRING, c DOUBLE) USING delta CLUSTER BY (a, b)")
    for seed in seeds:
        spark.sql(f"INSERT INTO delta.`{path}` VALUES {clustering_values_sql(seed)}")
