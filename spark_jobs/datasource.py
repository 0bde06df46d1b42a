"""The ``deltaplane`` PySpark data source: Delta tables read and written through the engine.

Spark never touches ``_delta_log``. ``load()`` pins the table version (``schema()`` reads the
snapshot once and remembers its version), so every action on a DataFrame, and the schema Spark
analysed it with, see the same version. For a batch read the driver hands each task a
``PortableSnapshot`` of some of that version's live files (their deletion vectors included);
tasks read them with the engine's scan, which applies the deletion vectors.

Tasks are planned as Spark plans a file scan (``PortableSnapshot.split_for_tasks``): at most
``maxPartitionBytes`` per task, each file counted with ``openCostInBytes``, a small table
spread over ``minPartitions`` tasks, and no more than ``maxPartitionNum`` tasks (by default 3
per ``minPartitions``: a Python task costs PySpark far more than a file task costs Spark, so the
hundreds of tasks Spark's rule makes of many small files would cost more than they read).
PySpark plans a Python data source in a Python worker that cannot ask Spark for its default
parallelism, so ``for_session`` (which ``register(spark)`` uses) records it on the driver in a
subclass that PySpark ships by value; without it the planning machine's cores stand in.

What a task unpickles (the reader, its partition) imports this module, ``files`` and
``options``: each imports only what reading needs at module level, and the writing and
streaming machinery is imported where it is used.

The reader takes no filters from Spark. PySpark 4.3 stores the read it planned (partitions and the
read function) on the data-source object that every DataFrame derived from one ``load()`` shares,
and reuses it for any later scan that pushes no filter and for every side of a self-join: a read
planned with one query's filters (files skipped) would silently serve another query. So the plan
depends on the pinned version only, and Spark applies every filter to the rows itself.

A batch write plans once on the driver (``plan_write``: schema, mode, idempotency), every task
writes Parquet files through the engine's writer and returns their ``add`` actions, and the
driver commits them in one transaction (``commit_write``). A failed job commits nothing; its
files are left for VACUUM. Identity values missing from the data are assigned by each task from
the block its partition id owns (see ``engine/column_values.py``); the commit moves the
high-water marks to the values written, so a retried task attempt repeats only its own values
and only the attempt Spark reports is committed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader

from deltaplane.spark_jobs.files import FilesPartition, FilesWritten, plan_for, read_partition
from deltaplane.spark_jobs.options import DEFAULT_TASKS_PER_CORE, ReadOptions, StreamOptions, WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType as SparkStructType

    from deltaplane.spark_jobs.streaming import DeltaplaneStreamReader, DeltaplaneStreamWriter

log = logging.getLogger(__name__)

FORMAT = "deltaplane"


class DeltaplaneDataSource(DataSource):
    """``spark.read.format("deltaplane").load(uri)`` and ``df.write.format("deltaplane")``."""

    # The session's default parallelism (the default of minPartitions), recorded on the driver by
    # for_session; None: the planning machine's cores.
    default_parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @classmethod
    def for_session(cls, spark) -> type[DeltaplaneDataSource]:
        """The data source to register on ``spark``: a subclass that carries the session's
        default parallelism to the Python workers that plan reads (they cannot ask Spark)."""
        parallelism = session_parallelism(spark)
        if parallelism is None:
            return cls
        # Not importable by name, so PySpark's cloudpickle ships the class by value, attribute
        # included (the methods stay with the base class, imported by name).
        namespace = {"default_parallelism": parallelism, "__module__": cls.__module__, "__doc__": cls.__doc__}
        return type(cls.__name__, (cls,), namespace)

    def schema(self) -> SparkStructType:
        # Called once per load(), on the driver, before PySpark pickles this object for every later
        # step: the version read here is the one every scan of the DataFrame reads.
        from deltaplane.spark_jobs.types import spark_schema

        options = ReadOptions.parse(self.options)
        snapshot = options.open().snapshot
        self.pinned_version = snapshot.version
        return spark_schema(snapshot.schema)

    def reader(self, schema: SparkStructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options)
        pinned = getattr(self, "pinned_version", None)
        if pinned is not None:
            options = options.at_version(pinned)
        return DeltaplaneReader(options, schema, self.min_partitions(options.min_partitions))

    def min_partitions(self, given: int | None) -> int:
        """How many tasks a read at least spreads over: the option, else the session's default
        parallelism, else this machine's cores."""
        return given or self.default_parallelism or os.cpu_count() or 1

    def writer(self, schema: SparkStructType, overwrite: bool) -> DeltaplaneWriter:
        return DeltaplaneWriter(WriteOptions.parse(self.options), schema, overwrite)

    def streamReader(self, schema: SparkStructType) -> DeltaplaneStreamReader:
        from deltaplane.spark_jobs.streaming import DeltaplaneStreamReader

        return DeltaplaneStreamReader(StreamOptions.parse(self.options), schema, self.min_partitions(None))

    def streamWriter(self, schema: SparkStructType, overwrite: bool) -> DeltaplaneStreamWriter:
        from deltaplane.spark_jobs.streaming import DeltaplaneStreamWriter

        return DeltaplaneStreamWriter(WriteOptions.parse(self.options), schema, overwrite)


def session_parallelism(spark) -> int | None:
    """What Spark would spread a file scan over (``spark.sql.files.minPartitionNum``, else
    ``spark.sql.leafNodeDefaultParallelism``, else the default parallelism), as known on the
    driver now; ``None`` when it cannot be known here (a Connect client with none of them set)."""
    for key in ("spark.sql.files.minPartitionNum", "spark.sql.leafNodeDefaultParallelism"):
        value = spark.conf.get(key, None)
        if value:
            return int(value)
    context = getattr(spark, "sparkContext", None)  # a Connect session has none
    if context is not None:
        return int(context.defaultParallelism)
    value = spark.conf.get("spark.default.parallelism", None)
    return int(value) if value else None


# --- reading ----------------------------------------------------------------------------------


class DeltaplaneReader(DataSourceReader):
    """Plans one version's live files into tasks; takes no filters (see the module docstring)."""

    def __init__(self, options: ReadOptions, schema: SparkStructType, min_partitions: int = 1):
        self.options = options
        self.schema = schema
        self.min_partitions = min_partitions

    def partitions(self) -> list[FilesPartition]:
        from deltaplane.engine import PortableSnapshot

        snapshot = self.options.open().snapshot
        portable = PortableSnapshot.of(
            snapshot, uri=self.options.uri, storage_options=self.options.storage_options
        )
        groups = portable.split_for_tasks(
            max_partition_bytes=self.options.max_partition_bytes,
            open_cost_bytes=self.options.open_cost_bytes,
            min_partitions=self.min_partitions,
            max_partitions=self.options.max_partitions or DEFAULT_TASKS_PER_CORE * self.min_partitions,
        ) or [portable]
        log.info(
            "deltaplane read of %s version %d: %d files in %d partitions",
            self.options.uri,
            snapshot.version,
            snapshot.num_files,
            len(groups),
        )
        return [FilesPartition(i, group, None) for i, group in enumerate(groups)]

    def read(self, partition: FilesPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(partition, self.schema)


# --- writing ----------------------------------------------------------------------------------


class DeltaplaneWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: SparkStructType, overwrite: bool):
        if options.replace_where is not None and not overwrite:
            from deltaplane.engine import DeltaError

            raise DeltaError("option replaceWhere needs mode('overwrite')")
        self.options = options
        # The tasks' files are held until the driver commits them (or the batch staged for a
        # gate is committed later): a VACUUM meanwhile keeps them, whatever its retention.
        self.spec = plan_for(
            options,
            schema,
            overwrite,
            app_id=options.app_id,
            app_version=options.app_version,
            hold=True,
            hold_note=f"Spark write to be committed from {options.stage_manifest or 'the driver'}",
        )
        if self.spec.skip:
            log.info(
                "%s already has txn %s version >= %s: this write is skipped",
                options.uri,
                options.app_id,
                options.app_version,
            )

    def write(self, iterator) -> FilesWritten:
        from pyspark import TaskContext

        from deltaplane.engine import write_files

        context = TaskContext.get()  # the partition id picks the task's block of identity values
        adds = write_files(self.spec, iterator, task=context.partitionId() if context is not None else 0)
        return FilesWritten([a.to_json() for a in adds])

    def commit(self, messages) -> None:
        from deltaplane.engine import Add, StagedWrite, commit_write, write_manifest

        adds = [a for m in messages if m is not None for a in m.adds]
        if self.options.stage_manifest is not None:
            staged = StagedWrite(self.spec, tuple(Add.from_json(a) for a in adds))
            write_manifest(self.options.stage_manifest, staged, self.options.storage_options)
            log.info(
                "staged %d files for %s in %s (not committed)",
                len(adds),
                self.options.uri,
                self.options.stage_manifest,
            )
            return
        result = commit_write(self.spec, adds, commit_metadata=self.options.commit_metadata)
        if result.skipped:
            log.info("write to %s skipped: already committed by this application version", self.options.uri)
        else:
            log.info("committed %d files to %s as version %d", len(adds), self.options.uri, result.version)

    def abort(self, messages) -> None:
        from deltaplane.engine import release_hold_of

        release_hold_of(self.spec)  # nothing will be committed: VACUUM may reclaim the files
        written = sum(len(m.adds) for m in messages if m is not None)
        log.warning(
            "write to %s failed: nothing committed; %d file(s) already written are left for VACUUM",
            self.options.uri,
            written,
        )
