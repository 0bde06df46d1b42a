"""Compare deltaplane's Arrow output with Delta Spark's rows: both sides normalized to the same
JSON values (values.py), then compared as sorted multisets."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from deltaplane.engine import DeltaTable
from tests.deltaspark.values import normalize


def arrow_rows(table: pa.Table, columns: list[str] | None = None) -> list[dict[str, Any]]:
    if columns is not None:
        table = table.select(columns)
    return [normalize(row) for row in table.to_pylist()]


def sorted_rows(rows: list[dict[str, Any]], columns: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows (restricted to ``columns``) in a canonical order, for multiset comparison."""
    if columns is not None:
        rows = [{c: r.get(c) for c in columns} for r in rows]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def dp_rows(path: str, version: int | None = None) -> list[dict[str, Any]]:
    """deltaplane's rows of ``path`` (at ``version``), normalized and sorted."""
    table = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    return sorted_rows(arrow_rows(table.to_arrow()))


def spark_rows(spark, path: str, version: int | None = None) -> list[dict[str, Any]]:
    """Delta Spark's rows of ``path`` (at ``version``), sorted."""
    return sorted_rows(spark.rows(path, version=version))
