"""Z-order of a partition too large for one task: Spark sorts it on the engine's Z-order key.

The key is the engine's: every column's dense rank over the whole partition, scaled to its bits
(``scale_ranks``), bits interleaved (``interleave``). Spark computes the ranks without holding the
rows anywhere: per column, the distinct values are range-sorted and numbered
(``zipWithIndex``) and joined back (null-safe). Rows are then range-partitioned on the key into
as many partitions as output files and sorted within each, and each partition is written as one
file by the engine's writer. Files therefore cover contiguous stretches of the curve, as when
one process sorts the partition, and statistics skipping works for every Z-order column.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from engine.commands.optimize import BinTask, write_rows_for_bin
from engine.commands.zorder import bits_per_column, interleave, scale_ranks
from spark_jobs.datasource import FilesPartition, read_partition
from spark_jobs.types import spark_schema

KEY = "__deltaplane_zkey"
RANK = "__deltaplane_rank_{}"
READ_GROUP_BYTES = 128 << 20
_SIGN = np.uint64(1 << 63)


def zorder_partition(spark, task: BinTask) -> list[dict]:
    """Rewrite one Z-order bin with Spark; returns the new files' add actions as JSON."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    snapshot = task.files.snapshot()
    schema = spark_schema(snapshot.schema)
    groups = task.files.split(READ_GROUP_BYTES)

    def read(batches):
        for batch in batches:
            for g in batch.column(0).to_pylist():
                yield from read_partition(FilesPartition(g, groups[g], None), schema)

    source = spark.createDataFrame([(i,) for i in range(len(groups))], "g int").repartition(len(groups), "g")
    rows = source.mapInArrow(read, schema).persist()
    columns = list(task.zorder_by)
    bits = bits_per_column(len(columns))
    distinct: list[int] = []
    ranked = rows
    for i, name in enumerate(columns):
        values = rows.select(F.col(name).alias("v")).distinct()
        numbered = (
            values.orderBy(F.col("v").asc_nulls_first()).rdd.zipWithIndex().map(lambda x: (x[0][0], x[1]))
        )
        value_type = schema[name].dataType
        table = spark.createDataFrame(
            numbered,
            StructType([StructField("v", value_type), StructField(RANK.format(i), LongType(), False)]),
        )
        distinct.append(table.count())
        ranked = ranked.join(
            F.broadcast(table) if distinct[-1] < 1_000_000 else table,
            ranked[name].eqNullSafe(table["v"]),
            "left",
        ).drop("v")

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
    rows.unpersist()
    return [json.loads(r["add"]) for r in written]
