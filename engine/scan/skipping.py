"""Planning and skipping: which files (partition values and statistics in the log) and which row groups
(their Parquet statistics) a filter keeps."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltaplane.engine.expressions.skipping import SkippingContext, files_to_keep
from deltaplane.engine.expressions.tree import Column, Expr
from deltaplane.engine.scan.conform import match_field
from deltaplane.engine.scan.files import FilePlan, typed_partition_column
from deltaplane.engine.schema import (
    DataType,
    PrimitiveType,
    StructType,
    to_arrow_type,
)
from deltaplane.engine.stats import FileStats, parquet_leaf_index, parse_file_stats, stats_supported
from deltaplane.engine.values_to_arrow import array_from_values


def file_keep_mask(
    files: pa.Table, predicate: Expr, schema: StructType, metadata, table_root: str
) -> pa.Array:
    """Which of ``files`` may hold rows satisfying the bound ``predicate`` (pruning + skipping).

    ``files`` is shaped like a snapshot's live-file table (partition values keyed by physical
    name); scans use it to plan and commits use it to test a concurrent writer's new files.
    """
    from deltaplane.engine.table_properties import TableProperties

    mode = TableProperties(metadata.configuration).column_mapping_mode
    partitions = {f.name: f for f in (schema[c] for c in metadata.partition_columns)}

    def physical_path(path: tuple[str, ...]) -> tuple[str, ...]:
        if mode == "none":
            return path
        out, current = [], schema
        for part in path:
            f = current[part]
            out.append(f.physical_name)
            current = f.type
        return tuple(out)

    def partition_table(names: list[str]) -> pa.Table:
        if not names:
            return pa.table({"_": pa.nulls(files.num_rows)})
        return pa.table({n: typed_partition_column(partitions[n], files, table_root) for n in names})

    def stats(cols: list[Column]) -> FileStats:
        return parse_file_stats(files, {physical_path(c.path): c.dtype for c in cols})

    context = SkippingContext(files.num_rows, partition_table, set(partitions), stats, physical_path)
    return files_to_keep(predicate, context)


def row_group_keep_mask(
    metadata: pq.FileMetaData, file_schema: pa.Schema, predicate: Expr, scan: Any, plan: FilePlan
) -> pa.Array:
    """Which row groups of one file may hold rows satisfying the bound ``predicate``: the file
    skipping evaluator run over the row groups' Parquet statistics instead of the log's."""
    count = metadata.num_row_groups
    leaves = parquet_leaf_index(metadata)

    def partition_table(names: list[str]) -> pa.Table:
        if not names:
            return pa.table({"_": pa.nulls(count)})
        return pa.table({n: pa.repeat(plan.partition_values[n], count) for n in names})

    def stats(cols: list[Column]) -> FileStats:
        rows = [metadata.row_group(g).num_rows for g in range(count)]
        out = FileStats(num_records=array_from_values(rows, pa.int64()))
        for col in cols:
            field = scan.schema.find(col.path[0]) if len(col.path) == 1 else None
            if field is None or not _prunable_type(field.type):
                continue  # nested fields and floats (NaN ordering) prune nothing
            match = match_field(file_schema, field, scan.mode)
            if match is None:  # the file predates the column: every value is null
                out.null_count[col.path] = array_from_values(rows, pa.int64())
                continue
            index = leaves.get((match.name,))
            if index is None:
                continue
            bounds = _row_group_bounds(metadata, index, match.type, to_arrow_type(field.type))
            if bounds is not None:
                out.min_values[col.path], out.max_values[col.path], out.null_count[col.path] = bounds
        return out

    context = SkippingContext(count, partition_table, set(scan._partition_fields), stats, lambda path: path)
    return files_to_keep(predicate, context)


def _prunable_type(dtype: DataType) -> bool:
    return stats_supported(dtype) and not (
        isinstance(dtype, PrimitiveType) and dtype.name in ("float", "double")
    )


def _row_group_bounds(metadata: pq.FileMetaData, index: int, file_type: pa.DataType, target: pa.DataType):
    """Minima, maxima and null counts of one column over the row groups, as ``target``; a group
    without statistics has nulls (unknown). ``None`` when the values cannot be typed."""
    lows, highs, nulls = [], [], []
    for g in range(metadata.num_row_groups):
        st = metadata.row_group(g).column(index).statistics
        known = st is not None and st.has_min_max
        lows.append(st.min if known else None)
        highs.append(st.max if known else None)
        nulls.append(st.null_count if st is not None and st.has_null_count else None)
    if pa.types.is_dictionary(file_type):
        file_type = file_type.value_type
    try:
        low = array_from_values(lows, file_type).cast(target)
        high = array_from_values(highs, file_type).cast(target)
    except (
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
        pa.ArrowTypeError,
        TypeError,
        ValueError,
        OverflowError,
    ):
        return None
    return low, high, array_from_values(nulls, pa.int64())
