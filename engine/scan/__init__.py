"""Reading a snapshot's rows: ``Snapshot -> ScanBuilder -> Scan -> Arrow``.

Planning is vectorized over the live-file table: partition pruning and statistics skipping give
a keep-mask, and only the surviving files are opened. Reading a file then:

1. resolves the table's columns to the file's (logical names, physical names under column
   mapping ``name``, Parquet field ids under ``id``; case-insensitively as Spark does);
2. drops the rows of its deletion vector with a boolean mask;
3. conforms every column to the table's type (files written before a type widening or a
   schema change, INT96 and millisecond timestamps, missing columns as nulls);
4. adds partition columns from the log, applies the residual row filter, projects.

``to_table`` reads files in parallel; ``to_batches`` streams row-group batches file by file in
bounded memory.

The package, by concept (each module imports only those before it):

- ``files``: what both read paths share (a file's plan, rows with their positions, metrics);
- ``conform``: a file's columns conformed to the table's types;
- ``skipping``: planning and skipping (files by the log's statistics, row groups by Parquet's);
- ``deleted_rows``: a live file's deletion vector;
- ``file_path``: the engine's path, one file at a time, filter columns first;
- ``dataset_path``: whole-file reads through Arrow's dataset scanner;
- ``core``: ``ScanBuilder`` and ``Scan``, which picks a path per read.
"""

from deltaplane.engine.scan.core import Scan, ScanBuilder
from deltaplane.engine.scan.deleted_rows import (
    StoredDeletionVector,
    read_file_deletion_vector,
    stored_deletion_vector,
)
from deltaplane.engine.scan.files import FileRows, ScanMetrics, typed_partition_column
from deltaplane.engine.scan.skipping import file_keep_mask, row_group_keep_mask

__all__ = [
    "FileRows",
    "Scan",
    "ScanBuilder",
    "ScanMetrics",
    "StoredDeletionVector",
    "file_keep_mask",
    "read_file_deletion_vector",
    "row_group_keep_mask",
    "stored_deletion_vector",
    "typed_partition_column",
]
