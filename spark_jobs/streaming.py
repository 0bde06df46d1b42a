"""Streaming with Spark: a table's log as a source, and a table as an exactly-once sink.

**Source** (as Delta Spark's): without ``startingVersion`` a query first reads the table as of
its current version, then every later commit; with ``startingVersion=N`` it reads the commits
from N (``latest``: only commits after the current one). Offsets are JSON:
``{"tableId", "version", "index", "initialSnapshot"}``, the position of the next file to read
(files of the initial snapshot sorted by path, then each commit's added files in log order), so
a restarted query resumes exactly where its checkpoint says. ``maxFilesPerTrigger`` and
``maxBytesPerTrigger`` bound each micro-batch (at least one file is always admitted, so a batch
never stalls), and ``trigger(availableNow=True)`` reads what existed when the query started, in
as many bounded batches as it takes.

Only data changes are read: commits whose files carry ``dataChange=false`` (OPTIMIZE, ZORDER)
add nothing to the stream. A commit that removes rows (DELETE, UPDATE, MERGE, overwrite) fails
the query with an error naming the version and operation, unless ``skipChangeCommits=true``, which
skips such commits entirely. A schema change fails the query (restart it to pick the new schema
up); a query restarted from a checkpoint written under a schema the current one cannot read (a
column renamed or dropped, a type widened, a column made NOT NULL since) fails naming the versions
instead of relabelling rows.

**Sink**: each micro-batch's tasks write files; ``commit(messages, batchId)`` on the driver
commits them with ``txn(appId=<query id>, version=<batch id>)`` and the operation ``STREAMING
UPDATE``. A batch Spark replays after a crash (written and committed to the table, but not yet
recorded in the query's commit log) finds its txn already there and commits nothing.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from deltaplane.engine import DeltaError
from deltaplane.spark_jobs.files import FilesPartition, FilesWritten, plan_for, read_partition
from deltaplane.spark_jobs.options import DEFAULT_TASKS_PER_CORE, StreamOptions, WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType as SparkStructType

    from deltaplane.engine import CommitChanges, IncrementalScan, Snapshot, WriteSpec

log = logging.getLogger(__name__)


class StreamingSourceError(DeltaError):
    """A commit the stream cannot follow (rows removed, schema changed, table replaced)."""


def offset(table_id: str, version: int, index: int, initial: bool) -> dict:
    return {"tableId": table_id, "version": version, "index": index, "initialSnapshot": initial}


class DeltaplaneStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: StreamOptions, schema: SparkStructType, min_partitions: int = 1):
        self.options = options
        self.schema = schema
        self.min_partitions = min_partitions  # a micro-batch's files spread over this many tasks
        self._reset()

    def _reset(self) -> None:
        self._store = None
        self._config = None  # (protocol, metadata) the stream currently reads under
        self._changes: dict[int, CommitChanges] = {}
        self._snapshots: dict[int, Snapshot] = {}
        self._available_now: int | None = None
        self._initial: dict | None = None
        self._schema_checked = False  # the start offset's schema against the query's (once)

    # The reader is pickled to the tasks that call read(): caches and the store stay behind.
    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "schema": self.schema, "min_partitions": self.min_partitions}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    # --- plumbing ----------------------------------------------------------------------------

    @property
    def store(self):
        if self._store is None:
            from deltaplane.engine import open_store

            self._store = open_store(self.options.uri, self.options.storage_options)
        return self._store

    def _table_config(self):
        if self._config is None:
            from deltaplane.engine import load_table_config

            self._config = load_table_config(self.store)
        return self._config

    def _commits(self, from_version: int) -> IncrementalScan:
        """The commits from ``from_version`` on (up to the ``availableNow`` cap): the engine's
        incremental reader, reusing the commits this reader already holds."""
        from deltaplane.engine import IncrementalScan

        return IncrementalScan(
            self.store,
            from_version - 1,
            until_version=self._available_now,
            config=self._table_config(),
            known=self._changes,
        )

    def _changes_from(self, version: int, end: dict | None):
        """Each commit from ``version`` on (up to ``end``) with the protocol and metadata in effect
        after it. A range this reader has already walked (a micro-batch's ``partitions`` after its
        ``latestOffset``; every commit up to the availableNow cap) comes from memory: no second
        listing of the log per micro-batch, none at all once an availableNow query is drained."""
        last = self._available_now  # past the availableNow cap there is nothing to find
        if end is not None:
            # The commits before the (exclusive) end: none when it is inside the initial snapshot.
            last = -1 if end.get("initialSnapshot") else int(end["version"]) - (0 if int(end["index"]) else 1)
        if last is not None:
            wanted = range(version, last + 1)
            if all(v in self._changes for v in wanted):
                config = self._table_config()
                for v in wanted:
                    change = self._changes[v]
                    config = (change.table_protocol or config[0], change.table_metadata)
                    yield change, config
                return
        commits = self._commits(version)
        for change in commits:
            yield change, commits.config

    def _snapshot(self, version: int | None) -> Snapshot:
        """The snapshot at ``version`` (``None``: the latest), loaded once: the initial offset,
        every batch's offsets and tasks read the same one. The first one loaded also gives the
        table's protocol and metadata, so no second listing reads them."""
        from deltaplane.engine import TableNotFoundError, load_snapshot

        snapshot = self._snapshots.get(version) if version is not None else None
        if snapshot is None:
            try:
                snapshot = load_snapshot(self.store, version)
            except TableNotFoundError:
                raise StreamingSourceError(f"no Delta table at {self.options.uri}") from None
            self._snapshots = {snapshot.version: snapshot}
            if self._config is None:
                self._config = (snapshot.protocol, snapshot.metadata)
        return snapshot

    def _snapshot_files(self, version: int) -> pa.Table:
        from deltaplane.engine import FILE_COLUMNS

        files = self._snapshot(version).files.select(list(FILE_COLUMNS))
        return files.sort_by("path") if files.num_rows else files

    def _latest_version(self) -> int:
        """The table's latest version, listed from its last checkpoint (not from version 0)."""
        from deltaplane.engine import TableNotFoundError, build_log_segment

        try:
            return build_log_segment(self.store).version
        except TableNotFoundError:
            raise StreamingSourceError(f"no Delta table at {self.options.uri}") from None

    def _table_id(self) -> str:
        return self._table_config()[1].id

    # --- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        # Spark may ask more than once (to plan the first batch, then to run it); the answer must
        # not move with the table in between, or the first batch would plan one range and read
        # another (found as a lost first batch when appends landed at query start).
        if self._initial is None:
            self._initial = self._compute_initial_offset()
        return dict(self._initial)

    def _compute_initial_offset(self) -> dict:
        if not self.options.starting_latest and self.options.starting_version is None:
            # The table as it is (as of the availableNow cap when there is one), then what follows:
            # one snapshot load, which the first batches' offsets and tasks reuse.
            snapshot = self._snapshot(self._available_now)
            return offset(self._table_id(), snapshot.version, 0, True)
        latest = self._available_now if self._available_now is not None else self._latest_version()
        table_id = self._table_id()
        if self.options.starting_latest:
            return offset(table_id, latest + 1, 0, False)
        if self.options.starting_version > latest:
            raise StreamingSourceError(
                f"startingVersion {self.options.starting_version} is after the latest version "
                f"{latest} of {self.options.uri}"
            )
        return offset(table_id, self.options.starting_version, 0, False)

    def getDefaultReadLimit(self):
        if self.options.max_files is not None:
            return ReadMaxFiles(self.options.max_files)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest_version()
        log.info("availableNow: reading %s up to version %s", self.options.uri, self._available_now)

    def latestOffset(self, start: dict, limit) -> dict:
        self._check_table(start)
        max_files = max_bytes = None
        if not isinstance(limit, ReadAllAvailable):
            max_files = limit.max_files if isinstance(limit, ReadMaxFiles) else self.options.max_files
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes
        files = size = 0
        end = dict(start)
        for position, file_size in self._walk(start, None):
            if position is None:  # a commit (or the snapshot) fully passed: move past it
                end = file_size
                continue
            full = (max_files is not None and files >= max_files) or (
                max_bytes is not None and files and size + file_size > max_bytes
            )
            if full:
                return end
            files += 1
            size += file_size
            end = {**position, "index": position["index"] + 1}
        return end

    def _check_table(self, start: dict) -> None:
        if start.get("tableId") != self._table_id():
            raise StreamingSourceError(
                f"the table at {self.options.uri} is not the one this query started on "
                f"(table id {self._table_id()}, checkpoint says {start.get('tableId')}); "
                "start a new query with a new checkpoint"
            )
        self._check_schema_at(start)

    def _check_schema_at(self, start: dict) -> None:
        """A query (re)started from an offset written under an older schema would read those
        files under today's: a column renamed or dropped since (column mapping), a type widened
        or a column made NOT NULL would relabel or mistype rows. Refused, naming the version, as
        Delta Spark refuses it (without a schema tracking location). Checked once per query
        start (later commits that change the schema fail in ``_follow``), with no listing of the
        log when the start is the snapshot already loaded or past the availableNow cap."""
        from deltaplane.engine import load_table_config, read_incompatibility

        if self._schema_checked:
            return
        self._schema_checked = True
        read = self._table_config()[1]
        at = int(start["version"])  # its files (and the later ones) were written under this or newer
        if start.get("initialSnapshot"):
            written = self._snapshot(at).metadata
        elif self._available_now is not None and at > self._available_now:
            return  # nothing to read
        else:
            try:
                written = load_table_config(self.store, at)[1]
            except DeltaError:  # not committed yet: the commits to come are checked as they come
                return
        problem = read_incompatibility(written, read)
        if problem:
            raise StreamingSourceError(
                f"this query reads {self.options.uri} under its current schema, but its checkpoint is at "
                f"version {at}, written under an older schema: since then {problem}. Reading on would "
                "mislabel or mistype rows. Start a new query (new checkpoint) with a startingVersion "
                "after that change, and read the versions before it separately"
            )

    def _walk(self, start: dict, end: dict | None):
        """Positions of files from ``start`` (up to ``end``), each with its size; between
        commits ``(None, <offset after it>)``."""
        table_id = start["tableId"]
        version, index = int(start["version"]), int(start["index"])
        if start.get("initialSnapshot"):
            files = self._snapshot_files(version)
            sizes = files.column("size").to_pylist()
            for i in range(index, len(sizes)):
                position = offset(table_id, version, i, True)
                if end is not None and not _before(position, end):
                    return
                yield position, sizes[i]
            version, index = version + 1, 0
            yield None, offset(table_id, version, 0, False)
        for change, config in self._changes_from(version, end):
            v, self._config = change.version, config
            if end is not None and not _before(offset(table_id, v, 0, False), end):
                return
            changes = self._follow(change)
            sizes = changes.new_files.column("size").to_pylist() if changes is not None else []
            for i in range(index if v == version else 0, len(sizes)):
                position = offset(table_id, v, i, False)
                if end is not None and not _before(position, end):
                    return
                yield position, sizes[i]
            yield None, offset(table_id, v + 1, 0, False)

    def _follow(self, changes: CommitChanges) -> CommitChanges | None:
        """The commit's changes if the stream reads them, ``None`` if it skips the commit."""
        from deltaplane.engine import describe_change
        from deltaplane.spark_jobs.types import spark_schema

        version = changes.version
        if changes.metadata is not None and spark_schema(changes.metadata_schema()) != self.schema:
            raise StreamingSourceError(
                f"version {version} of {self.options.uri} changed the table schema; restart the query "
                "to read with the new schema"
            )
        if changes.appends_only:
            return changes
        if self.options.skip_change_commits:
            log.info("skipping version %d (%s): skipChangeCommits", version, changes.operation)
            return None
        raise StreamingSourceError(
            f"version {version} of {self.options.uri} ({changes.operation or 'unknown operation'}) is a "
            f"{changes.kind}: {describe_change(changes)}; a streaming read "
            "only follows appends. Set the option skipChangeCommits=true to ignore such commits, or "
            "restart the query from a later startingVersion"
        )

    # --- planning and reading ----------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[FilesPartition]:
        import pyarrow as pa

        from deltaplane.engine import PortableSnapshot, files_snapshot

        if _before(end, start):
            raise StreamingSourceError(
                f"{self.options.uri}: the batch ends ({end}) before it starts ({start})"
            )
        pieces: list[pa.Table] = []
        run: tuple[Any, int, int] | None = None  # (source key, first, last) of consecutive files

        def flush():
            if run is None:
                return
            key, first, last = run
            table = self._snapshot_files(key[1]) if key[0] == "snapshot" else self._changes[key[1]].new_files
            pieces.append(table.slice(first, last - first + 1))

        for position, _ in self._walk(start, end):
            if position is None:
                continue
            key = ("snapshot" if position["initialSnapshot"] else "commit", position["version"])
            if run is not None and run[0] == key and run[2] + 1 == position["index"]:
                run = (key, run[1], position["index"])
            else:
                flush()
                run = (key, position["index"], position["index"])
        flush()
        if not pieces:
            return []
        files = pa.concat_tables([p.cast(pieces[0].schema) for p in pieces])
        if "stats" in files.schema.names:
            # The tasks read every row of their files (nothing to skip): the files' JSON statistics
            # would only swell every task's pickled payload (on wide tables, most of it).
            i = files.schema.get_field_index("stats")
            files = files.set_column(i, files.field(i), pa.nulls(files.num_rows, files.field(i).type))
        protocol, metadata = self._table_config()
        snapshot = files_snapshot(self.store, int(end["version"]), protocol, metadata, files)
        portable = PortableSnapshot.of(
            snapshot, uri=self.options.uri, storage_options=self.options.storage_options
        )
        groups = portable.split_for_tasks(
            min_partitions=self.min_partitions, max_partitions=DEFAULT_TASKS_PER_CORE * self.min_partitions
        )
        return [FilesPartition(i, group, None) for i, group in enumerate(groups)]

    def read(self, partition: FilesPartition):
        yield from read_partition(partition, self.schema)

    def commit(self, end: dict) -> None:
        done = int(end["version"])
        self._changes = {v: c for v, c in self._changes.items() if v >= done}
        if not end.get("initialSnapshot"):
            self._snapshots = {}


def _before(position: dict, end: dict) -> bool:
    """Whether ``position`` comes before the (exclusive) ``end`` offset."""

    def key(o: dict) -> tuple:
        # The initial snapshot at version V comes before the commits after V.
        return (int(o["version"]) + (0 if o.get("initialSnapshot") else 1), int(o["index"]))

    return key(position) < key(end)


class DeltaplaneStreamWriter(DataSourceStreamArrowWriter):
    """Append (or, in complete mode, overwrite) each micro-batch exactly once.

    PySpark builds a writer for every micro-batch, and another one to commit it, so the
    constructor reads nothing. The plan (``plan_write``: the log listed, the snapshot loaded) is
    made once per batch, on the driver, when the writer is pickled for the batch's tasks; every
    task writes by it and hands it back with its files, and the commit follows the plan the files
    were written by instead of planning again.
    """

    def __init__(self, options: WriteOptions, schema: SparkStructType, overwrite: bool):
        self.options = options
        self.schema = schema
        self.overwrite = overwrite
        self._spec: WriteSpec | None = None

    @property
    def spec(self) -> WriteSpec:
        if self._spec is None:
            self._spec = plan_for(self.options, self.schema, self.overwrite)
        return self._spec

    def __getstate__(self) -> dict[str, Any]:
        # Leaving the driver for the tasks: plan here, once, rather than in every task.
        return {**self.__dict__, "_spec": self.spec}

    def write(self, iterator) -> FilesWritten:
        from pyspark import TaskContext

        from deltaplane.engine import write_files

        context = TaskContext.get()
        query_id = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
        task = context.partitionId() if context is not None else 0  # its block of identity values
        adds = write_files(self.spec, iterator, task=task)
        return FilesWritten([a.to_json() for a in adds], query_id, self.spec)

    def commit(self, messages, batchId: int) -> None:
        from deltaplane.engine import commit_write

        written = [m for m in messages if m is not None]
        adds = [a for m in written for a in m.adds]
        query_id = next((m.query_id for m in written if m.query_id), None)
        if not adds and not self.overwrite:
            return  # an empty micro-batch: nothing to make visible
        if query_id is None:
            raise DeltaError(f"streaming write to {self.options.uri}: the tasks did not see the query id")
        planned = next((m.spec for m in written if m.spec is not None), None) or self.spec
        spec = replace(planned, app_id=query_id, app_version=int(batchId), skip=False)
        result = commit_write(
            spec,
            adds,
            commit_metadata={"streamingQueryId": query_id, "streamingBatchId": int(batchId)},
            operation="STREAMING UPDATE",
            operation_parameters={
                "outputMode": "Complete" if self.overwrite else "Append",
                "queryId": query_id,
                "epochId": str(batchId),
            },
        )
        if result.skipped:
            log.info(
                "batch %s of query %s is already in %s: not committed again",
                batchId,
                query_id,
                self.options.uri,
            )

    def abort(self, messages, batchId: int) -> None:
        log.warning("streaming batch %s to %s failed: nothing committed", batchId, self.options.uri)
