"""Z-order of a partition too large for one task: Spark sorts it on the engine's Z-order key.

The key is the engine's: every column's dense rank over the whole partition, scaled to its bits
(``scale_ranks``), bits interleaved (``interleave``). Spark computes the ranks without holding the
rows anywhere: per column, the distinct values are range-sorted, numbered within each sorted
partition and offset by the sizes of the partitions before it, and joined back (null-safe).
Rows are then range-partitioned on the key into as many partitions as output files and sorted
within each, and each partition is written as one file by the engine's writer. Files therefore
cover contiguous stretches of the curve, as when one process sorts the partition, and
statistics skipping works for every Z-order column.

On a row-tracking table each row is read with its stable row id and row commit version (two
extra columns named as the table's materialized ones), which travel with it through the sort
and are written into the new files, so the rewrite keeps them as the commit says it does.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from deltaplane.engine import (
    BinTask,
    bits_per_column,
    interleave,
    materialized_columns,
    scale_ranks,
    write_rows_for_bin,
)
from deltaplane.spark_jobs.files import FilesPartition, read_partition
from deltaplane.spark_jobs.types import spark_schema

KEY = "__deltaplane_zkey"
RANK = "__deltaplane_rank_{}"
VALUE = "__deltaplane_value"  # a column's distinct values, joined back (never a table column)
READ_GROUP_BYTES = 128 << 20
_SIGN = np.uint64(1 << 63)


def zorder_partition(spark, task: BinTask) -> list[dict]:
    """Rewrite one Z-order bin with Spark; returns the new files' add actions as JSON."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    snapshot = task.files.snapshot()
    lineage = materialized_columns(snapshot.protocol, snapshot.metadata)
    schema = spark_schema(snapshot.schema)
    if lineage is not None:  # each row's row id and commit version go along with it
        schema = StructType([*schema.fields, *(StructField(n, LongType(), False) for n in lineage)])
    groups = task.files.split(READ_GROUP_BYTES)

    def read(batches):
        for batch in batches:
            for g in batch.column(0).to_pylist():
                yield from read_partition(FilesPartition(g, groups[g], None), schema, lineage)

    source = spark.createDataFrame([(i,) for i in range(len(groups))], "g int").repartition(len(groups), "g")
    rows = source.mapInArrow(read, schema).persist()
    columns = list(task.zorder_by)
    bits = bits_per_column(len(columns))
    distinct: list[int] = []
    ranked = rows
    cached = [rows]
    for i, name in enumerate(columns):
        # (renamed: a table column may be called "v", and the join must not touch it)
        table = _dense_ranks(spark, rows, name, RANK.format(i), cached).withColumnRenamed("v", VALUE)
        distinct.append(table.count())
        small = distinct[-1] < 1_000_000
        ranked = ranked.join(
            F.broadcast(table) if small else table, ranked[name].eqNullSafe(table[VALUE]), "left"
        )
        ranked = ranked.drop(VALUE)

    rank_names = [RANK.format(i) for i in range(len(columns))]
    keyed_schema = StructType([*schema.fields, StructField(KEY, LongType(), False)])
    counts = list(distinct)

    def add_key(batches):
        for batch in batches:
            codes = [
                scale_ranks(batch.column(r).to_numpy(zero_copy_only=False).astype(np.uint64), n, bits)
                for r, n in zip(rank_names, counts, strict=True)
            ]
            key = (interleave(codes, bits) ^ _SIGN).view(np.int64)  # signed order == unsigned order
            out = batch.select(list(schema.names)) if hasattr(batch, "select") else batch
            yield pa.RecordBatch.from_arrays(
                [*out.columns, pa.array(key, pa.int64())], names=[*schema.names, KEY]
            )

    keyed = ranked.mapInArrow(add_key, keyed_schema)
    live_fraction = task.bin.num_records / max(task.bin.num_records + task.bin.deleted_rows, 1)
    num_files = max(1, round(task.bin.size * live_fraction / task.target_file_size))

    def write(batches):
        adds = write_rows_for_bin(task, (b.drop_columns([KEY]) for b in batches))
        yield pa.RecordBatch.from_pydict(
            {"add": pa.array([json.dumps(a.to_json()) for a in adds], pa.string())}
        )

    written = (
        keyed.repartitionByRange(num_files, KEY)
        .sortWithinPartitions(KEY)
        .mapInArrow(write, "add string")
        .collect()
    )
    for frame in cached:
        frame.unpersist()
    return [json.loads(r["add"]) for r in written]


def _dense_ranks(spark, rows, name: str, rank: str, cached: list):
    """``(v, rank)``: every distinct value of column ``name`` with its 0-based rank, nulls first.

    The distinct values are range-sorted by Spark; each sorted partition numbers its rows
    (``monotonically_increasing_id`` counts up by one within a partition), and the offsets of the
    partitions (their sizes, summed on the driver) make the numbers global. Everything stays in
    the JVM, and no task holds more than its share of the values.
    """
    from pyspark.sql import functions as F

    ordered = rows.select(F.col(name).alias("v")).distinct().orderBy(F.col("v").asc_nulls_first())
    tagged = ordered.select(
        "v", F.spark_partition_id().alias("pid"), F.monotonically_increasing_id().alias("mid")
    ).persist()
    cached.append(tagged)
    sizes = sorted((r["pid"], r["count"]) for r in tagged.groupBy("pid").count().collect())
    offsets, total = [], 0
    for pid, count in sizes:
        offsets.append((pid, total - (pid << 33)))  # rank = mid + this, as mid = (pid << 33) + row
        total += count
    shift = spark.createDataFrame(offsets or [(0, 0)], "pid int, shift long")
    return tagged.join(F.broadcast(shift), "pid").select("v", (F.col("mid") + F.col("shift")).alias(rank))
