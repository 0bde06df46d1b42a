"""What the data source's tasks read and write, shared by batch (``datasource``) and streaming
(``streaming``) reads and writes: one task's files to read, what one task wrote, and the write
plan every task of a write follows. Both modules import this one, and neither imports the other
back (an import-linter contract keeps it so).

Every read task unpickles a ``FilesPartition``, which imports this module: it imports the
engine's reading parts when a partition is read, and its writing parts only where a write plans.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition, WriterCommitMessage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType as SparkStructType

    from deltaplane.engine import Expr, PortableSnapshot, WriteSpec
    from deltaplane.spark_jobs.options import WriteOptions


class FilesPartition(InputPartition):
    """One task's files: a portable snapshot of them and the pushed predicate."""

    def __init__(self, index: int, files: PortableSnapshot, predicate: Expr | None):
        super().__init__(index)
        self.files = files
        self.predicate = predicate


def read_partition(
    partition: FilesPartition, schema: SparkStructType, row_tracking: tuple[str, str] | None = None
) -> Iterator[pa.RecordBatch]:
    """The rows of one partition's files, shaped exactly as ``schema`` (deletion vectors applied).

    ``row_tracking`` names two columns of ``schema`` that are not table columns: they get each
    row's stable row id and row commit version (``Scan``'s ``row_tracking``), which a rewrite
    hands to the writer so the rows keep them."""
    from deltaplane.engine import Scan
    from deltaplane.spark_jobs.types import arrow_schema, conform_batch

    if partition.files.num_files == 0:
        return
    snapshot = partition.files.snapshot()
    columns = [n for n in schema.names if not row_tracking or n not in row_tracking]
    scan = Scan(snapshot, columns, partition.predicate, row_tracking=row_tracking)
    target = arrow_schema(schema)
    for batch in scan.to_batches():
        if batch.num_rows:
            yield conform_batch(batch, target)


@dataclass
class FilesWritten(WriterCommitMessage):
    """What one task wrote: ``add`` actions as JSON; for a streaming write, the query it belongs to
    and the plan it wrote by."""

    adds: list[dict]
    query_id: str | None = None
    spec: WriteSpec | None = None  # a streaming batch's plan, which its commit follows


def plan_for(options: WriteOptions, schema: SparkStructType, overwrite: bool, **extra) -> WriteSpec:
    """The write plan (``plan_write``: reads the table's log) for data of ``schema``."""
    from deltaplane.engine import plan_write
    from deltaplane.spark_jobs.types import arrow_schema, as_nullable

    schema_mode = (
        "overwrite" if overwrite and options.overwrite_schema else "merge" if options.merge_schema else None
    )
    return plan_write(
        options.uri,
        as_nullable(arrow_schema(schema)),
        mode="overwrite" if overwrite else "append",
        partition_by=options.partition_by,
        schema_mode=schema_mode,
        replace_where=options.replace_where if overwrite else None,
        dynamic_partitions=options.dynamic_partitions if overwrite else False,
        target_file_size=options.target_file_size,
        user_metadata=options.user_metadata,
        storage_options=options.storage_options,
        properties=options.properties,
        cluster_by=options.cluster_by,
        **extra,
    )
