"""What the scan's paths share: the plan of one file, the rows of a file read with their positions, the
scan's metrics, and a partition column typed from the log."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import (
    SchemaError,
)
from deltaplane.engine.partitions import parse_partition_values
from deltaplane.engine.schema import (
    StructField,
)

BATCH_ROWS = 128 * 1024

READ_WORKERS = max(2, min(8, (os.cpu_count() or 2) * 2))

REMOTE_READ_WORKERS = 32  # an object store's latency, not the CPU, bounds a read of many files


@dataclass
class ScanMetrics:
    files_in_snapshot: int = 0
    files_selected: int = 0  # after partition pruning and statistics skipping
    files_read: int = 0
    rows_read: int = 0  # physical rows decoded, before deletion vectors and the row filter
    rows_deleted_by_dv: int = 0


@dataclass
class FileRows:
    """One data file's rows as a row-level command sees them."""

    table: pa.Table  # surviving rows (deletion vector applied), logical columns
    positions: np.ndarray  # physical row index of each surviving row
    physical_rows: int  # rows in the Parquet file
    deleted: np.ndarray | None  # the existing deletion vector's rows
    # Row tracking enabled: each row's stable row id and commit version, under the table's
    # materialized column names (what a rewrite hands the writer to keep them).
    lineage: pa.Table | None = None


@dataclass
class FilePlan:
    location: str  # canonical: relative key, or absolute path/URI
    deletion_vector: dict | None
    partition_values: dict[str, pa.Scalar]
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    size: int | None = None  # bytes, as the log says: spares an object store a request


def row_starts(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of ``counts`` rows begins."""
    starts = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=starts[1:])
    return starts


def typed_partition_column(f: StructField, files: pa.Table, table_root: str) -> pa.Array:
    """One partition column of a live-file table, parsed to its type."""
    raw = pc.struct_field(files.column("partition_values"), f.physical_name)
    try:
        return parse_partition_values(raw, f.type)
    except SchemaError as e:
        raise SchemaError(f"{table_root}: partition column {f.name!r}: {e}") from e
