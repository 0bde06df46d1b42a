"""Data files: Arrow batches in, Parquet files out, one ``add`` action with statistics per file.

A batch's rows are grouped by partition (``partition_runs.group_rows``: one stable sort however
many partitions; batches of 64Ki rows or more on a publishing thread, two at once). Then, with
NumPy over the whole batch rather than per partition:

- a partition that brings a quarter of a row group at once, or whose rows held make a row group
  (``row_group_rows`` rows or ``row_group_bytes``) or a file, is *large*: its rows are buffered
  per partition and written as row groups to its file (opened at the first row group, rolled
  over at the target file size);
- the others stay together, a batch at a time, in ``partition_runs.SmallPartitions`` (no object
  per partition and batch); one that becomes large takes its held rows along, ahead of its new
  ones. At ``close()`` or ``roll()`` each becomes one file of one row group, 32 to a job.

So however many partitions and however unsorted the input, a partition that fits the target size
gets one file, its rows in input order. Two bounds hold whatever the input's shape:

- memory: buffered rows, counting the input batches that buffered slices keep alive, the objects
  of each slice and the small partitions' segments. Over the budget, slices of mostly written
  batches are copied out (the batches can go); then buffers of a quarter of a row group or more
  are written as row groups, and the rest, with the segments, spilled to runs: uncompressed Arrow
  IPC files in a private directory under ``spill_directory`` (the temporary directory by default;
  one left by a killed write on this host is deleted by the next that spills), memory-mapped
  back. At roll or close each spilled partition is written in turn, its file finished before the
  next starts, as Spark's writer sorts a task's rows by partition before writing. The runs are
  deleted when the write closes or aborts;
- open files: at most ``max_open_files`` (256, and no more than a quarter of the descriptor
  limit). Opening one more finishes the least recently written file; later rows of its
  partition start a new file. Only partitions filling whole row groups keep files open.

Files become visible only when complete, at most ``MAX_PUBLISHING`` jobs waiting to publish, and
``close()`` makes them durable together (``ObjectStore.sync``: one ``syncfs`` locally) instead of
two fsyncs per file; nothing is committed here (the transaction does that), and files of a failed
write are left for VACUUM, never half-published. Files carry page checksums and page indexes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltaplane.engine.actions import Add
from deltaplane.engine.file_layout import (
    dictionary_columns,
    physical_arrow_field,
    statistics_columns,
    to_physical,
)
from deltaplane.engine.partition_runs import (
    Gathering,
    PartitionBuffer,
    SmallPartitions,
    SourceBatch,
    group_rows,
    new_spill_directory,
    part_bytes,
    write_run,
)
from deltaplane.engine.partitions import partition_directory, serialize_partition_value
from deltaplane.engine.schema import StructField, StructType
from deltaplane.engine.stats import StatsCollector, StatsLeaf, footer_leaves, parquet_leaf_index
from deltaplane.engine.storage.base import ObjectStore, PendingObject

log = logging.getLogger(__name__)

MiB = 1 << 20
DEFAULT_TARGET_FILE_SIZE = 128 * MiB
# Row groups of at most 128Ki rows and 128 MiB of Arrow data: a selective filter on a clustered
# column decodes one 128Ki-row group instead of a whole file (pyarrow cannot skip pages by the
# page index, so the row group is the unit a reader skips), at no measurable cost in file size.
DEFAULT_ROW_GROUP_ROWS = 1 << 17
DEFAULT_ROW_GROUP_BYTES = 128 * MiB
DEFAULT_BUFFER_BUDGET = 256 * MiB
DEFAULT_MAX_OPEN_FILES = 256
PUBLISH_THREADS = 2
MAX_PUBLISHING = 4 * PUBLISH_THREADS
PROGRESS_SECONDS = 60.0
# Memory of the Arrow and Python objects of one buffered piece beyond its data (measured: about
# 1.5 KiB for three columns), so that many small pieces count against the budget too.
PIECE_OVERHEAD = 512
COLUMN_OVERHEAD = 384
GROUP_ON_THREAD_ROWS = 1 << 16  # batches this large are grouped by partition on a thread
WHOLE_FILES_PER_JOB = 32  # small partitions' files encoded by one job of a publishing thread
SPILL_BATCH_ROWS = 1 << 16  # rows of several partitions gathered into one batch of a spilled run


def default_max_open_files() -> int:
    """Files one write keeps open at most: ``DEFAULT_MAX_OPEN_FILES``, and no more than a quarter
    of the process's soft descriptor limit (RLIMIT_NOFILE), leaving the rest to reads, sockets,
    files being published and whatever else the process does."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return DEFAULT_MAX_OPEN_FILES
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return DEFAULT_MAX_OPEN_FILES
    return max(1, min(DEFAULT_MAX_OPEN_FILES, soft // 4))


@dataclass(frozen=True)
class WriterConfig:
    """Everything the writer needs to know about the table, resolved once per write."""

    schema: StructType  # logical
    partition_columns: list[str]
    column_mapping: str = "none"
    stats_leaves: list[StatsLeaf] = field(default_factory=list)
    tight_bounds: bool | None = None
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
    buffer_budget: int = DEFAULT_BUFFER_BUDGET
    max_open_files: int | None = None  # None: default_max_open_files()
    progress_seconds: float | None = PROGRESS_SECONDS  # a progress line this often; None: never
    compression: str = "zstd"
    random_prefix_length: int | None = None
    materialize_partitions: bool = False
    prefix: str = ""  # a directory every file goes under ("_change_data" for CDC files)
    name_tag: str = ""  # carried in every file name (a staged write's hold token: engine/holds.py)
    # Row tracking's hidden (row id, row commit version) columns: written into every file, from
    # the input's columns of those names (rows copied by a rewrite), null where absent.
    row_tracking_columns: tuple[str, str] | None = None
    spill_directory: str | None = None  # where spilled runs go; None: the temporary directory

    @property
    def partition_fields(self) -> list[StructField]:
        return [self.schema[c] for c in self.partition_columns]

    @property
    def data_fields(self) -> list[StructField]:
        skip = set() if self.materialize_partitions else {f.name for f in self.partition_fields}
        return [f for f in self.schema.fields if f.name not in skip]


@dataclass
class _OpenFile:
    values: tuple
    key: str
    pending: PendingObject | None  # these three None until a publishing thread opens it
    writer: pq.ParquetWriter | None
    stats: StatsCollector | None
    partition_values: dict[str, str | None]


class DataFileWriter:
    """Writes conformed Arrow tables into Parquet data files; ``close()`` returns the adds."""

    _failed: BaseException | None = None  # a whole-file job's error: no job starts a file after it

    def __init__(self, store: ObjectStore, config: WriterConfig):
        self.store = store
        self.config = config
        self._data_fields = config.data_fields
        self._file_schema = pa.schema(
            [physical_arrow_field(f, config.column_mapping) for f in self._data_fields]
            + [pa.field(name, pa.int64()) for name in config.row_tracking_columns or ()]
        )
        self._max_open = max(1, config.max_open_files or default_max_open_files())
        self._buffers: dict[tuple, PartitionBuffer] = {}
        self._open: OrderedDict[tuple, _OpenFile] = OrderedDict()  # least recently written first
        self._adds: list[Add] = []
        # Memory held by buffers: input batches that pieces still slice, copies owned by buffers,
        # and an estimate of the Arrow and Python objects of each piece.
        self._pinned = 0  # bytes of those input batches
        self._pinned_live = 0  # bytes of the pieces slicing them
        self._owned = 0
        self._pieces = 0
        self._piece_overhead = PIECE_OVERHEAD + COLUMN_OVERHEAD * len(self._file_schema)
        self._counter = 0
        self._write_id = uuid.uuid4()
        self._dictionary: list[str] | bool | None = None  # chosen from the rows the first file gets
        self._statistics: list[str] | bool | None = None  # statistics_columns of the file schema
        self._from_footer: list[bool] | None = None  # footer_leaves of the statistics' leaves
        self._leaf_index: dict[tuple, int] | None = None  # of the files' Parquet schema
        self.rows_written = 0
        self.bytes_written = 0
        self.files_reopened = 0  # files started for a partition whose earlier file was closed early
        self._closed_early: set[tuple] = set()
        self._publisher: ThreadPoolExecutor | None = None
        self._publishing: deque = deque()
        self._published: list[_OpenFile] = []  # files in place, not yet synced
        self._spill_dir: str | None = None  # created by the first spill
        self._runs: list[pa.Table] = []  # spilled runs, memory-mapped
        self._spilled: dict[tuple, list[tuple[int, int, int]]] = {}  # values -> (run, offset, rows)
        # Partitions by id (in order of first appearance), and the rows of those still small.
        self._ids: dict[tuple, int] = {}
        self._keys: list[tuple] = []
        self._small = SmallPartitions()
        self._grouping: deque[Future] = deque()  # batches being grouped, in input order
        self.runs_spilled = 0
        self.bytes_spilled = 0
        self._started = time.monotonic()
        self._last_progress = self._started

    # --- input ----------------------------------------------------------------------------------

    def write(self, table: pa.Table) -> None:
        """Add rows (already conformed to the table's logical schema)."""
        if table.num_rows == 0:
            return
        if self.config.partition_columns:
            self._group_ahead(table)
        else:
            physical = self._physical_table(table)
            self._buffer((), physical, SourceBatch(physical.nbytes))
        self.rows_written += table.num_rows
        if self.buffered_bytes > self.config.buffer_budget:
            self._relieve()
        self._progress()

    @property
    def buffered_bytes(self) -> int:
        """Memory held by rows not yet written (an estimate that errs on the high side)."""
        return self._pinned + self._owned + self._pieces * self._piece_overhead + self._small.nbytes

    def _relieve(self) -> None:
        """Bring the buffers under the budget: first by copying small pieces out of the input
        batches they keep alive (many partitions, a few rows each per batch), which frees memory
        without writing anything; then by writing out the buffers big enough for a decent row
        group, largest first; then by spilling the rest to a run."""
        budget = self.config.buffer_budget
        extra_pieces = self._pieces - len(self._buffers)
        reclaimable = self._pinned - self._pinned_live + extra_pieces * self._piece_overhead
        if reclaimable > self.buffered_bytes // 2:
            for b in self._buffers.values():
                if len(b.tables) > 1 or b.sources[0] is not None:
                    self._compact(b)
        if self.buffered_bytes > budget:
            # Largest first: buffers big enough to make decent row groups are written out; the
            # small ones are spilled together, so no partition gets a small file early.
            decent = min(self.config.row_group_bytes, self.config.target_file_size) // 4
            for values in sorted(self._buffers, key=lambda v: self._buffers[v].nbytes, reverse=True):
                if self.buffered_bytes <= budget:
                    return
                if self._buffers[values].nbytes < decent:
                    break
                self._flush(values)
            if self.buffered_bytes > budget:
                self._spill()

    def _spill(self) -> None:
        """Append every buffer to a new run, partition after partition (rows gathered into
        batches of about ``SPILL_BATCH_ROWS``), map the run back for the merge, and send the
        small partitions' segments held in memory to a run of their own."""
        if self._spill_dir is None:
            self._spill_dir = new_spill_directory(self.config.spill_directory)
        name = os.path.join(self._spill_dir, f"{{}}-{self.runs_spilled:05d}.arrow")
        if self._buffers:
            run = len(self._runs)
            self._runs.append(write_run(name.format("run"), self._file_schema, self._spilled_buffers(run)))
            self.bytes_spilled += os.path.getsize(name.format("run"))
        self.bytes_spilled += self._small.spill(name.format("small"), self._file_schema)
        self.runs_spilled += 1

    def _spilled_buffers(self, run: int):
        """The buffers' rows, partition after partition, gathered into tables of about
        ``SPILL_BATCH_ROWS`` rows; each partition's place in run ``run`` is noted."""
        offset = 0
        group: list[pa.Table] = []
        grouped = 0
        for values in list(self._buffers):
            b = self._buffers.pop(values)
            group.extend(b.tables)
            grouped += b.num_rows
            self._spilled.setdefault(values, []).append((run, offset, b.num_rows))
            offset += b.num_rows
            self._release(b)
            if grouped >= SPILL_BATCH_ROWS:
                yield pa.concat_tables(group).combine_chunks()
                group, grouped = [], 0
        if group:
            yield pa.concat_tables(group).combine_chunks()

    def _drop_runs(self) -> None:
        self._runs.clear()
        self._spilled.clear()
        self._small.clear()
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None

    def _compact(self, b: PartitionBuffer) -> None:
        """Replace a buffer's pieces by one copy that owns its memory."""
        table = pa.concat_tables(b.tables) if len(b.tables) > 1 else b.tables[0]
        copy = table.take(pa.array(np.arange(table.num_rows)))
        self._release(b)
        b.tables, b.sources, b.sizes = [copy], [None], [copy.nbytes]
        self._owned += b.sizes[0]
        self._pieces += 1

    def _release(self, b: PartitionBuffer) -> None:
        """Stop accounting for a buffer's pieces (written out or copied)."""
        for size, source in zip(b.sizes, b.sources, strict=True):
            if source is None:
                self._owned -= size
                continue
            self._pinned_live -= size
            source.pieces -= 1
            if source.pieces == 0:
                self._pinned -= source.nbytes
        self._pieces -= len(b.tables)

    def _group_ahead(self, table: pa.Table) -> None:
        """Group a batch's rows by partition on a publishing thread (idle until files are
        written) while the caller makes the next batch; a batch is placed once the next one is
        being grouped, so two are grouped at once on two cores. A batch under
        ``GROUP_ON_THREAD_ROWS`` rows is grouped and placed here (a thread costs more)."""
        threaded = table.num_rows >= GROUP_ON_THREAD_ROWS
        if threaded:
            self._grouping.append(self._pool().submit(self._group, table))
        else:
            self._grouping.append(Future())
            self._grouping[-1].set_result(self._group(table))
        while len(self._grouping) > threaded:  # a batch grouped here is placed at once
            self._place(*self._grouping.popleft().result())

    def _group(self, table: pa.Table) -> tuple:
        """A batch's rows grouped by partition, in the file's layout (converted once per batch,
        not once per partition), with each group's row offsets, values and bytes."""
        order, counts, keys = group_rows(table, self.config.partition_columns)
        ordered = self._physical_table(table.take(pa.array(order)))
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return ordered, offsets, keys, part_bytes(ordered, offsets)

    def _place(self, ordered: pa.Table, offsets: np.ndarray, keys: list[tuple], sizes: np.ndarray) -> None:
        """Parts of large partitions (or of partitions that become large with them) are
        buffered partition by partition; the other parts stay together, as one segment of the
        small partitions, with no work per partition."""
        ids = self._ids
        pids = np.array([ids.setdefault(key, len(ids)) for key in keys], dtype=np.int64)
        if len(ids) > len(self._keys):
            self._keys = list(ids)
            self._small.grow(len(ids))
        counts = np.diff(offsets)
        limit = min(self.config.row_group_bytes, self.config.target_file_size)
        large = self._small.too_large(pids, counts, sizes, self.config.row_group_rows, limit)
        if not large.any():
            self._small.add(ordered, pids, counts, sizes)
            return
        source = SourceBatch(ordered.nbytes)
        for i in np.flatnonzero(large).tolist():
            pid = int(pids[i])
            if not self._small.taken[pid]:
                self._promote(pid)
            self._buffer(self._keys[pid], ordered.slice(offsets[i], counts[i]), source)
        small = ~large
        if small.any():
            rows = pa.array(np.repeat(small, counts))
            self._small.add(ordered.filter(rows), pids[small], counts[small], sizes[small])

    def _promote(self, pid: int) -> None:
        """Partition ``pid`` leaves the small partitions: its rows held there (slices of
        segments, perhaps mapped) are copied into its own buffer, ahead of the rows to come."""
        pieces = self._small.take(pid)
        if pieces:
            self._own(self._keys[pid], pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0])

    def _own(self, values: tuple, table: pa.Table) -> None:
        """Buffer a copy of ``table`` that owns its memory, after a partition's buffered rows
        (the rows it was cut from need not stay in memory for its sake)."""
        table = table.take(pa.array(np.arange(table.num_rows)))
        b = self._buffers.get(values)
        if b is None:
            b = self._buffers[values] = PartitionBuffer()
        size = table.nbytes
        b.tables.append(table)
        b.sources.append(None)
        b.sizes.append(size)
        b.nbytes += size
        b.num_rows += table.num_rows
        self._owned += size
        self._pieces += 1

    def _buffer(self, values: tuple, part: pa.Table, source: SourceBatch) -> None:
        # A part larger than a row group is cut into row-group-sized pieces, so that files can
        # roll at the target size even when one call brings a whole partition (OPTIMIZE's
        # Z-order writes a bin at once) and row groups stay whole.
        limit = min(self.config.row_group_bytes, self.config.target_file_size)
        rows = self.config.row_group_rows
        nbytes = part.nbytes
        if part.num_rows > 1 and (nbytes > 2 * limit or part.num_rows > rows):
            pieces = -(-nbytes // limit)
            step = max(1, min(rows, -(-part.num_rows // pieces)))
            for offset in range(0, part.num_rows, step):
                piece = part.slice(offset, step)
                self._buffer_piece(values, piece, source, piece.nbytes)
            return
        self._buffer_piece(values, part, source, nbytes)

    def _buffer_piece(self, values: tuple, physical: pa.Table, source: SourceBatch, nbytes: int) -> None:
        """Buffer one piece (in the file's layout) of ``nbytes``."""
        b = self._buffers.get(values)
        if b is None:
            b = self._buffers[values] = PartitionBuffer()
        b.tables.append(physical)
        b.sources.append(source)
        b.sizes.append(nbytes)
        b.nbytes += nbytes
        b.num_rows += physical.num_rows
        if source.pieces == 0:
            self._pinned += source.nbytes
        source.pieces += 1
        self._pinned_live += nbytes
        self._pieces += 1
        if b.num_rows >= self.config.row_group_rows:
            self._flush(values, whole_row_groups=True)
        elif b.nbytes >= min(self.config.row_group_bytes, self.config.target_file_size):
            self._flush(values)

    def _statistics_columns(self) -> list[str] | bool:
        if self._statistics is None:
            self._statistics = statistics_columns(self._file_schema)
            self._from_footer = footer_leaves(self.config.stats_leaves, self._statistics)
        return self._statistics

    def _physical_table(self, part: pa.Table) -> pa.Table:
        arrays = []
        for f in self._data_fields:
            column = part.column(f.name)
            if self.config.column_mapping != "none":
                column = pa.chunked_array(
                    [to_physical(c, f.type, self.config.column_mapping) for c in column.chunks],
                    type=self._file_schema.field(len(arrays)).type,
                )
            arrays.append(column)
        for name in self.config.row_tracking_columns or ():
            if name in part.column_names:
                arrays.append(part.column(name).cast(pa.int64()))
            else:
                arrays.append(pa.nulls(part.num_rows, pa.int64()))
        return pa.Table.from_arrays(arrays, schema=self._file_schema)

    # --- files ----------------------------------------------------------------------------------

    def _flush(self, values: tuple, *, whole_row_groups: bool = False) -> None:
        """Write a partition's rows (spilled ones first, then buffered ones) to its open file
        (opening one if it has none), in row groups; ``whole_row_groups`` keeps a tail shorter
        than a row group buffered for the next rows."""
        tables = [
            self._runs[run].slice(offset, count) for run, offset, count in self._spilled.pop(values, ())
        ]
        b = self._buffers.pop(values, None)
        if b is not None:
            tables.extend(b.tables)
            self._release(b)
        if not tables:
            return
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        rows = self.config.row_group_rows
        tail = table.num_rows % rows if whole_row_groups else 0
        if tail:
            # Owned, so that the rows written do not stay in memory for the tail's sake.
            self._own(values, table.slice(table.num_rows - tail))
            table = table.slice(0, table.num_rows - tail)
        # Row groups of at most ``row_group_rows`` rows and about the row-group size, so that a
        # partition's spilled rows roll over files at the target size.
        limit = min(self.config.row_group_bytes, self.config.target_file_size)
        step = max(1, min(rows, table.num_rows * limit // max(1, table.nbytes)))
        for start in range(0, table.num_rows, step):
            self._write_rows(values, table.slice(start, step))

    def _write_rows(self, values: tuple, table: pa.Table) -> None:
        """Rows of one partition to its open file (opening one if it has none), finished at the
        target size."""
        rows = self.config.row_group_rows
        f = self._open.get(values)
        if f is None:
            while len(self._open) >= self._max_open:
                # The least recently written file is finished (complete, with its statistics);
                # rows of its partition that come later go to a new file.
                oldest, lru = self._open.popitem(last=False)
                self._closed_early.add(oldest)
                self._finish(lru)
            if values in self._closed_early:
                self._closed_early.discard(values)
                self.files_reopened += 1
            if self._dictionary is None:  # judged on a file's first rows, not on the first batch
                self._dictionary = dictionary_columns(table)
            f = self._open[values] = self._new_file(values)
        else:
            self._open.move_to_end(values)
        f.writer.write_table(table, row_group_size=max(1, min(table.num_rows, rows)))
        f.stats.update(table, parquet_bounds=True)
        if f.pending.sink.tell() >= self.config.target_file_size:
            del self._open[values]
            self._finish(f)

    def _new_file(self, values: tuple) -> _OpenFile:
        return self._open_file(values, *self._name(values))

    def _name(self, values: tuple) -> tuple[str, dict[str, str | None]]:
        """A new file's key and partition values (on the writing thread: it counts files)."""
        config = self.config
        serialized = [
            serialize_partition_value(v, f.type) for v, f in zip(values, config.partition_fields, strict=True)
        ]
        physical_names = [f.physical_name for f in config.partition_fields]
        self._counter += 1
        tag = f"-{config.name_tag}" if config.name_tag else ""
        name = f"part-{self._counter:05d}-{self._write_id}{tag}-c000.{config.compression}.parquet"
        if config.random_prefix_length:
            directory = uuid.uuid4().hex[: config.random_prefix_length]
        elif config.partition_columns:
            directory = partition_directory(physical_names, serialized)
        else:
            directory = ""
        key = "/".join(part for part in (config.prefix, directory, name) if part)
        return key, dict(zip(physical_names, serialized, strict=True))

    def _open_file(self, values: tuple, key: str, partition_values: dict[str, str | None]) -> _OpenFile:
        """Open a file for ``key`` (safe on a publishing thread once ``_statistics_columns()`` and
        the dictionary columns are chosen)."""
        config = self.config
        pending = self.store.open_output(key, durable=False)  # synced together by close()
        try:
            writer = pq.ParquetWriter(
                pending.sink,
                self._file_schema,
                compression=config.compression,
                write_statistics=self._statistics_columns(),
                use_dictionary=True if self._dictionary is None else self._dictionary,
                # A CRC per page: bit rot in a data file becomes an error on read, not wrong rows.
                write_page_checksum=True,
                # Column and offset indexes: readers skip pages, not only row groups.
                write_page_index=True,
            )
        except BaseException:
            pending.abort()
            raise
        return _OpenFile(
            values=values,
            key=key,
            pending=pending,
            writer=writer,
            stats=StatsCollector(
                config.stats_leaves,
                tight_bounds=config.tight_bounds,
                footer_columns=self._statistics_columns(),
                from_footer=self._from_footer,
            ),
            partition_values=partition_values,
        )

    def _finish(self, f: _OpenFile) -> None:
        """Close the file and publish it in the background (a link into place, or an upload),
        overlapping with writing the next one. At most ``MAX_PUBLISHING`` files wait to be
        published, so that neither their descriptors nor (on object stores) their bytes pile up;
        ``close()`` waits for every publication."""
        try:
            f.writer.close()
        except BaseException:
            f.pending.abort()
            raise
        f.stats.update_from_parquet(*self._footer(f.writer))
        self._submit([f], lambda: [f.pending.commit()])

    def _write_small(self, values: tuple, *, alone: bool = False) -> bool:
        """A partition whose rows left (spilled and buffered) make one row group and no more than
        a file, with no file open: written as a whole file on a publishing thread, so that with
        many small partitions Parquet's encoding, the file's creation and its statistics overlap
        with the next partition's (pyarrow releases the GIL for the first two). ``alone``: the
        only file left to write, before any thread was started: written here, since there is
        nothing to overlap with (a small append or compaction starts no thread). False, and
        nothing done, for any other partition."""
        spilled = self._spilled.get(values, ())
        b = self._buffers.get(values)
        rows = sum(count for _, _, count in spilled) + (b.num_rows if b is not None else 0)
        if rows == 0 or rows > self.config.row_group_rows:
            return False
        tables = [self._runs[run].slice(offset, count) for run, offset, count in spilled]
        if b is not None:
            tables.extend(b.tables)
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        if table.nbytes > min(self.config.row_group_bytes, self.config.target_file_size):
            return False
        self._spilled.pop(values, None)
        if self._buffers.pop(values, None) is not None:
            self._release(b)
        self._submit_whole(values, table, alone=alone)
        return True

    def _submit_whole(self, values: tuple, table: pa.Table, *, alone: bool) -> None:
        """``table`` as the whole of a new file of partition ``values``, written on a
        publishing thread (``alone``: on this one)."""
        f = self._whole_file(values, table)
        self._submit([f], self._write_wholes, [(f, table)], here=alone)

    def _whole_file(self, values: tuple, table: pa.Table | None) -> _OpenFile:
        """A new file of partition ``values`` that ``table`` will be the whole of (named here,
        on the writing thread)."""
        if values in self._closed_early:
            self._closed_early.discard(values)
            self.files_reopened += 1
        self._statistics_columns()  # chosen here, not on the publishing threads
        if self._dictionary is None:
            self._dictionary = dictionary_columns(table)
        key, partition_values = self._name(values)
        return _OpenFile(values, key, None, None, None, partition_values)

    def _write_wholes(self, files: list[tuple[_OpenFile, pa.Table]]) -> list[int]:
        """On a publishing thread: several whole files in one job (fewer hand-offs between
        threads for many small partitions); none once a job of the write has failed."""
        sizes = []
        for f, table in files:
            if self._failed is not None:
                raise self._failed
            try:
                sizes.append(self._write_whole(f, table))
            except BaseException as e:
                self._failed = self._failed or e
                raise
        return sizes

    def _write_gathered(
        self, files: list[_OpenFile], offsets: np.ndarray, rows: pa.Table | Gathering
    ) -> list[int]:
        """On a publishing thread: small partitions' whole files, ``files[i]`` holding rows
        ``offsets[i]:offsets[i + 1]`` of ``rows`` (gathered here first, off the writing
        thread, when it is a :class:`Gathering`)."""
        table = rows.table() if isinstance(rows, Gathering) else rows
        bounds = offsets.tolist()
        return self._write_wholes(
            [(f, table.slice(bounds[i], bounds[i + 1] - bounds[i])) for i, f in enumerate(files)]
        )

    def _write_whole(self, f: _OpenFile, table: pa.Table) -> int:
        """On a publishing thread: ``table`` as the whole of file ``f``, published; its size.
        Its chunks, when it has several, are made one first: a copy of a small file's rows costs
        less than encoding and checking many short chunks."""
        if any(c.num_chunks > 1 for c in table.columns):
            table = table.combine_chunks()
        opened = self._open_file(f.values, f.key, f.partition_values)
        f.pending, f.writer, f.stats = opened.pending, opened.writer, opened.stats
        try:
            f.writer.write_table(table, row_group_size=max(1, table.num_rows))
            f.stats.update(table, parquet_bounds=True)
            f.writer.close()
        except BaseException:
            f.pending.abort()
            raise
        f.stats.update_from_parquet(*self._footer(f.writer))
        return f.pending.commit()

    def _footer(self, writer: pq.ParquetWriter) -> tuple:
        """A finished file's metadata and its leaf index, worked out once per write: every
        file of a write has the same schema."""
        metadata = writer.writer.metadata
        if self._leaf_index is None:
            self._leaf_index = parquet_leaf_index(metadata)
        return metadata, self._leaf_index

    def _submit(self, files: list[_OpenFile], job, *args, here: bool = False) -> None:
        """Run ``job(*args)`` on a publishing thread (``here``: on this one, done when this
        returns); its result is the list of ``files``' sizes, collected in order. At most
        ``MAX_PUBLISHING`` are waiting."""
        if here:
            future: Future = Future()
            future.set_result(job(*args))
        else:
            future = self._pool().submit(job, *args)
        self._publishing.append((future, files))
        while len(self._publishing) > MAX_PUBLISHING:
            self._collect_one()

    def _pool(self) -> ThreadPoolExecutor:
        if self._publisher is None:
            self._publisher = ThreadPoolExecutor(PUBLISH_THREADS, thread_name_prefix="deltaplane-publish")
        return self._publisher

    def _collect_one(self) -> None:
        future, files = self._publishing.popleft()
        for f, size in zip(files, future.result(), strict=True):
            self._published.append(f)
            self.bytes_written += size
            self._adds.append(
                Add(
                    path=quote(f.key, safe="/="),
                    partition_values=f.partition_values,
                    size=size,
                    modification_time=int(time.time() * 1000),
                    data_change=True,
                    stats=f.stats.to_json(),
                )
            )

    def _collect(self) -> None:
        while self._publishing:
            self._collect_one()

    def _progress(self, done: bool = False) -> None:
        interval = self.config.progress_seconds
        now = time.monotonic()
        if interval is None or (not done and now - self._last_progress < interval):
            return
        if done and now - self._started < interval:
            return  # a short write says nothing
        self._last_progress = now
        log.info(
            "%s %s: %d rows in %.0f s, %d files written (%.1f MiB), %d open, "
            "%d partitions buffered (%.1f MiB)%s",
            "wrote" if done else "writing",
            self.store.root,
            self.rows_written,
            now - self._started,
            len(self._adds) + len(self._publishing),
            self.bytes_written / MiB,
            len(self._open),
            len(self._buffers) + self._small.partitions,
            self.buffered_bytes / MiB,
            f", {self.files_reopened} files started again for partitions closed early"
            if self.files_reopened
            else "",
        )
        if self.runs_spilled:
            log.info(
                "%s: %d runs spilled (%.1f MiB)", self.store.root, self.runs_spilled, self.bytes_spilled / MiB
            )

    @property
    def adds(self) -> list[Add]:
        """Add actions of the files finished so far."""
        return list(self._adds)

    def roll(self) -> None:
        """Finish every open file now; the next rows start new files (callers that choose file
        boundaries themselves, like Z-order, cut here)."""
        while self._grouping:
            self._place(*self._grouping.popleft().result())
        # Partition by partition, so that this opens at most one file more than is open.
        pending = list(dict.fromkeys([*self._spilled, *self._buffers]))
        alone = len(pending) + self._small.partitions == 1 and not self._open and self._publisher is None
        for values in pending:
            if values not in self._open and self._write_small(values, alone=alone):
                continue
            self._flush(values)
            f = self._open.pop(values, None)
            if f is not None:
                self._finish(f)
        # Partitions still small: each fits one row group of one file (they would have left
        # the small partitions otherwise).
        for pids, offsets, gathering in self._small.drain(WHOLE_FILES_PER_JOB, self.config.row_group_rows):
            table = gathering.table() if self._dictionary is None else None  # judged on the first rows
            files = [self._whole_file(self._keys[pid], table) for pid in pids]
            rows = gathering if table is None else table
            self._submit(files, self._write_gathered, files, offsets, rows, here=alone)
        self._drop_runs()
        while self._open:
            self._finish(self._open.popitem(last=False)[1])
        self._closed_early.clear()

    def close(self) -> list[Add]:
        """Write what is buffered, finish every file, make them durable (one sync for all of
        them, not one per file) and return their add actions."""
        try:
            self.roll()
            self._collect()
            self.store.sync([f.key for f in self._published])
        finally:
            self._drop_runs()
            self._shutdown()
        self._progress(done=True)
        return list(self._adds)

    def _shutdown(self) -> None:
        if self._publisher is not None:
            self._publisher.shutdown(wait=True)
            self._publisher = None

    def abort(self) -> None:
        """Discard open files and buffered rows (already finished files stay, unreferenced, for
        VACUUM)."""
        try:
            for f in self._open.values():
                try:
                    with contextlib.suppress(Exception):  # the file is discarded anyway
                        f.writer.close()
                finally:
                    f.pending.abort()
        finally:
            self._open.clear()
            self._buffers.clear()
            self._grouping.clear()
            self._small.clear()
            self._pinned = self._pinned_live = self._owned = self._pieces = 0
            self._drop_runs()
            self._shutdown()
