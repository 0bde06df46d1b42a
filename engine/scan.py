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
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.deletion_vectors import keep_mask, read_deletion_vector
from deltaplane.engine.errors import (
    CorruptDeletionVectorError,
    DataFileError,
    DeltaError,
    InvalidArgumentError,
    ObjectNotFoundError,
    SchemaError,
    StorageError,
)
from deltaplane.engine.expressions.arrow import filter_rows
from deltaplane.engine.expressions.bind import bind_predicate
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.expressions.skipping import SkippingContext, files_to_keep
from deltaplane.engine.expressions.tree import Column, Expr, columns
from deltaplane.engine.log.replay import canonical_path, canonical_paths, plain_paths
from deltaplane.engine.partitions import parse_partition_values
from deltaplane.engine.row_tracking import READ_COLUMNS, materialized_columns, stable_values
from deltaplane.engine.schema import (
    PARQUET_FIELD_ID,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    to_arrow_field,
    to_arrow_type,
)
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.stats import FileStats, parquet_leaf_index, parse_file_stats, stats_supported
from deltaplane.engine.storage import resolve_location
from deltaplane.engine.storage.local import LocalStore
from deltaplane.engine.variant import is_shredded, unshred

_BATCH_ROWS = 128 * 1024
_READ_WORKERS = max(2, min(8, (os.cpu_count() or 2) * 2))
_LATE_ROWS = 1 << 16  # rows of a file's selected row groups from which late columns are read apart
_PREFIX_BATCH_ROWS = 1 << 14  # late columns are decoded this many rows at a time, up to the last match
# to_batches streams through Arrow's scanner only where every file is small (many small files is
# where reading ahead across files pays); it then holds at most this many files and batches each
# in flight. Larger files stream one at a time on the engine's path, in memory bounded by a batch.
_STREAM_FILE_BYTES = 16 << 20
_STREAM_FILE_READAHEAD = 8
_STREAM_BATCH_READAHEAD = 2
_REMOTE_READ_WORKERS = 32  # an object store's latency, not the CPU, bounds a read of many files


@dataclass
class ScanMetrics:
    files_in_snapshot: int = 0
    files_selected: int = 0  # after partition pruning and statistics skipping
    files_read: int = 0
    rows_read: int = 0  # physical rows decoded, before deletion vectors and the row filter
    rows_deleted_by_dv: int = 0


_PYTHON_URIS = 256
_URI_CHUNK = 1 << 16


class ScanBuilder:
    """Collects projection and filter; ``build()`` plans the scan."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self._columns: list[str] | None = None
        self._filter: Expr | None = None
        self._row_tracking = False

    def select(self, columns: list[str] | None) -> ScanBuilder:
        if isinstance(columns, str):
            columns = [columns]  # one column by name, as people type it
        if columns is not None and not all(isinstance(c, str) for c in columns):
            raise InvalidArgumentError(f"columns must be a list of column names, got {columns!r}")
        self._columns = None if columns is None else list(columns)
        return self

    def where(self, predicate: str | Expr | None) -> ScanBuilder:
        if predicate is None:
            self._filter = None
        elif isinstance(predicate, str):
            self._filter = parse_predicate(predicate)
        elif isinstance(predicate, Expr):
            self._filter = predicate
        else:
            raise InvalidArgumentError(
                f'a filter is a SQL string such as "id > 5", not {type(predicate).__name__}'
            )
        return self

    def with_row_tracking(self, enabled: bool = True) -> ScanBuilder:
        """Add each row's row id and row commit version (``_metadata.row_id``,
        ``_metadata.row_commit_version``): the table must enable row tracking."""
        self._row_tracking = bool(enabled)
        return self

    def build(self) -> Scan:
        tracking = READ_COLUMNS if self._row_tracking else None
        return Scan(self.snapshot, self._columns, self._filter, row_tracking=tracking)


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
class _FilePlan:
    location: str  # canonical: relative key, or absolute path/URI
    deletion_vector: dict | None
    partition_values: dict[str, pa.Scalar]
    base_row_id: int | None = None
    default_row_commit_version: int | None = None


class Scan:
    """A planned read: which files, which columns, which residual filter."""

    def __init__(
        self,
        snapshot: Snapshot,
        columns_: list[str] | None,
        predicate: Expr | None,
        *,
        files: pa.Table | None = None,
        row_tracking: tuple[str, str] | None = None,
    ):
        """Plan a read; ``files`` (rows of the live-file table) restricts it to those files;
        ``row_tracking`` names two extra output columns for each row's row id and row commit
        version (the table must enable row tracking)."""
        self.snapshot = snapshot
        self.schema = snapshot.schema
        self.mode = snapshot.column_mapping_mode
        self.metrics = ScanMetrics(files_in_snapshot=snapshot.num_files)
        self._metrics_lock = threading.Lock()
        self.output_fields = self._resolve_projection(columns_)
        self.predicate = bind_predicate(predicate, self.schema) if predicate is not None else None
        self._partition_fields = {f.name: f for f in snapshot.partition_fields}

        files = snapshot.files if files is None else files
        if self.predicate is not None and files.num_rows:
            mask = file_keep_mask(files, self.predicate, self.schema, snapshot.metadata, snapshot.store.root)
            files = files.filter(mask)
        self.files = files
        self.metrics.files_selected = files.num_rows
        # Parallelism goes where the work is: across files when there are enough of them (a
        # decoder thread pool per small file costs more than it saves), within files otherwise.
        self._workers = _REMOTE_READ_WORKERS if getattr(snapshot.store, "remote", False) else _READ_WORKERS
        self._threads_per_file = files.num_rows < self._workers

        needed = {f.name for f in self.output_fields}
        if self.predicate is not None:
            needed |= {c.path[0] for c in columns(self.predicate)}
        self._read_fields = [
            f for f in self.schema.fields if f.name in needed and f.name not in self._partition_fields
        ]
        self._partitions_needed = [name for name in self._partition_fields if name in needed]
        # Filtered reads go row group by row group: groups whose statistics exclude the predicate
        # are skipped, and the predicate's columns are decoded before the others, which are then
        # read only for the groups holding matching rows (late materialization).
        filtered = {c.path[0] for c in columns(self.predicate)} if self.predicate is not None else set()
        self._predicate_fields = [f for f in self._read_fields if f.name in filtered]
        self._other_fields = [f for f in self._read_fields if f.name not in filtered]
        self._materialized: tuple[str, str] | None = None
        self._lineage_names: tuple[str, str] | None = None
        self.arrow_schema = pa.schema([to_arrow_field(f) for f in self.output_fields])
        if row_tracking is not None:
            self._track_rows(row_tracking)

    def _track_rows(self, names: tuple[str, str]) -> None:
        snapshot = self.snapshot
        materialized = materialized_columns(snapshot.protocol, snapshot.metadata)
        if materialized is None:
            raise InvalidArgumentError(
                f"{snapshot.store.root} does not enable row tracking (delta.enableRowTracking): its "
                "rows have no row ids to read"
            )
        for name in names:
            if self.schema.find(name) is not None:
                raise SchemaError(
                    f"{snapshot.store.root} has a column named {name!r}, the name of a row-tracking column"
                )
        self._materialized, self._lineage_names = materialized, tuple(names)
        self.arrow_schema = pa.schema(
            [*self.arrow_schema, *(pa.field(n, pa.int64(), nullable=False) for n in names)]
        )

    # --- planning ----------------------------------------------------------------------------

    def _resolve_projection(self, names: list[str] | None) -> list[StructField]:
        if names is None:
            return list(self.schema.fields)
        out = []
        for name in names:
            f = self.schema.find(name)
            if f is None:
                raise SchemaError(
                    f"unknown column {name!r} in {self.snapshot.store.root} "
                    f"(columns: {', '.join(self.schema.names)})"
                )
            out.append(f)
        return out

    def _typed_partition_column(self, name: str, files: pa.Table) -> pa.Array:
        return typed_partition_column(self._partition_fields[name], files, self.snapshot.store.root)

    def _plans(self) -> list[_FilePlan]:
        files = self.files
        typed = {name: self._typed_partition_column(name, files) for name in self._partitions_needed}
        root = self.snapshot.store.root
        paths = files.column("path").to_pylist()
        dvs = files.column("deletion_vector").to_pylist()
        tracked = self._lineage_names is not None and "base_row_id" in files.column_names
        base_ids = files.column("base_row_id").to_pylist() if tracked else [None] * len(paths)
        versions = files.column("default_row_commit_version").to_pylist() if tracked else [None] * len(paths)
        return [
            _FilePlan(
                location=canonical_path(path, root),
                deletion_vector=dvs[i],
                partition_values={name: arr[i] for name, arr in typed.items()},
                base_row_id=base_ids[i],
                default_row_commit_version=versions[i],
            )
            for i, path in enumerate(paths)
        ]

    def file_uris(self) -> list[str]:
        """Absolute locations of the files this scan reads (the store's own form of each key)."""
        store = self.snapshot.store
        if self.files.num_rows <= _PYTHON_URIS:  # a few kernels cost more than a short loop
            out = []
            for path in self.files.column("path").to_pylist():
                location = canonical_path(path, store.root)
                absolute = location.startswith("/") or "://" in location
                out.append(location if absolute else store.uri(location))
            return out
        prefix = store.uri("_")[:-1]  # the root as the store writes it, ending in its separator
        out: list[str] = []
        paths = self.files.column("path")
        for start in range(0, len(paths), _URI_CHUNK):  # a chunk at a time: no second full copy
            chunk = paths.slice(start, _URI_CHUNK).combine_chunks()
            if plain_paths(chunk):  # the usual case: relative keys, nothing to decode
                out.extend(pc.binary_join_element_wise(prefix, chunk, "").to_pylist())
                continue
            locations = canonical_paths(chunk, store.root).combine_chunks()
            absolute = pc.or_(pc.starts_with(locations, "/"), pc.match_substring(locations, "://"))
            joined = pc.binary_join_element_wise(prefix, locations, "")
            out.extend(pc.if_else(absolute, locations, joined).to_pylist())
        return out

    # --- reading -----------------------------------------------------------------------------

    @property
    def _by_row_group(self) -> bool:
        """Whether files are read row group by row group (a filter on data columns; row ids need
        every row's position and take the whole-file path)."""
        return bool(self._predicate_fields) and self._lineage_names is None

    def to_table(self) -> pa.Table:
        if not self._by_row_group and self.files.num_rows:
            table = self._read_dataset()
            if table is not None:
                return table
        plans = self._plans()
        if not plans:
            return self.arrow_schema.empty_table()
        read = self._read_filtered if self._by_row_group else self._read_whole
        if len(plans) == 1:
            tables = [read(plans[0])]
        else:
            with ThreadPoolExecutor(min(self._workers, len(plans))) as pool:
                tables = list(pool.map(read, plans))
        return self._concat(tables)

    def read_all(self) -> pa.Table:
        """``to_table()``, by the name of the reader delta-rs's ``dt.scan()`` returns."""
        return self.to_table()

    def _concat(self, tables: list) -> pa.Table:
        """The scan's result from per-file tables (or batches), in order. One chunk per file: no
        second copy of the result just to make it contiguous."""
        if not self.arrow_schema:  # concat_tables drops the rows of tables without columns
            return pa.table({"rows": pa.nulls(sum(t.num_rows for t in tables))}).select([])
        tables = [t if isinstance(t, pa.Table) else pa.Table.from_batches([t]) for t in tables if t.num_rows]
        if not tables:
            return self.arrow_schema.empty_table()
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    # --- whole local files through Arrow's dataset scanner -----------------------------------

    def _read_dataset(self) -> pa.Table | None:
        """The scan read by Arrow's dataset scanner (C++ read-ahead and decoding across files, no
        Python work per file), or ``None`` where the engine's per-file path is needed.

        It applies to local files read whole (no data-column filter, no row ids), without column
        mapping by id. Every file's columns are checked against the table's types after the
        scan (the footers are then cached): a file that would need the engine's conformance (a
        widened type, INT96 or millisecond timestamps, a column name in another case, nested
        physical names) is read again on the engine's path and its rows replace the scanner's.
        Partition values are repeated from the log by each file's row count.

        With deletion vectors the rows are taken from the scanner's batch stream instead, each
        batch's deleted rows dropped as it arrives: the decoded batch is freed as its survivors
        are copied, so the memory touched is about the result's, not twice it (on this machine
        touching fresh pages cost as much as the copy itself).
        """
        prepared = self._dataset_fragments()
        if prepared is None:
            return None
        fragments, expected = prepared
        dvs = self.files.column("deletion_vector")
        if dvs.null_count < len(dvs):
            return self._concat(list(self._dataset_batch_stream(fragments, expected, _BATCH_ROWS)))
        try:
            dataset = ds.FileSystemDataset(fragments, expected, _dataset_format(), _local_filesystem())
            raw = dataset.to_table(columns=expected.names, use_threads=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError):
            return None  # the engine's path names the file and the cause
        redo = self._files_to_conform(fragments, expected)
        if redo and self.predicate is not None:
            return None  # filtered rows no longer line up with files: the engine's path reads all
        self._count(files=len(fragments), rows=raw.num_rows)
        counts = None
        if redo or self._partitions_needed:  # the footers are cached by the scan
            counts = np.fromiter((f.metadata.num_rows for f in fragments), np.int64, len(fragments))
        full = self._dataset_columns(raw, counts)
        if self.predicate is not None:  # a filter on partition columns only
            full = self._apply_filter(full)
        out = self._output(full)
        return self._splice(out, counts, redo) if redo else out

    def _dataset_fragments(self) -> tuple[list, pa.Schema] | None:
        """The planned files as dataset fragments and the file columns to read, or ``None`` when
        the engine's per-file path must read them (not local, row ids, mapping by id, or a first
        file that needs conforming: no scan twice)."""
        if not isinstance(self.snapshot.store, LocalStore) or self._lineage_names is not None:
            return None
        if self.mode == "id":
            return None
        uris = self.file_uris()
        if any(not u.startswith("/") for u in uris):
            return None  # a location on another filesystem
        expected = self._physical_read_schema()
        fmt, filesystem = _dataset_format(), _local_filesystem()
        fragments = [fmt.make_fragment(u, filesystem=filesystem) for u in uris]
        try:
            if not self._plain_file(fragments[0].physical_schema, expected):
                return None
        except (pa.ArrowInvalid, OSError):
            return None  # the engine's path names the file and the cause
        return fragments, expected

    def _physical_read_schema(self) -> pa.Schema:
        """The file columns this scan reads, under their physical names, as the table's types."""
        return pa.schema(
            [
                pa.field(f.physical_name if self.mode == "name" else f.name, to_arrow_type(f.type))
                for f in self._read_fields
            ]
        )

    def _plain_file(self, schema: pa.Schema, expected: pa.Schema) -> bool:
        """Whether a file with ``schema`` reads as the table's columns with no conforming."""
        for f, want in zip(self._read_fields, expected, strict=True):
            match = _match_field(schema, f, self.mode)
            if match is not None and (match.name != want.name or match.type != want.type):
                return False
            if match is not None and len(schema.get_all_field_indices(match.name)) > 1:
                return False  # the engine's path refuses the file
            # Nested fields are matched by physical name: a file type equal to the logical one
            # may hold other fields under those names (renamed, dropped and re-added).
            nested = self.mode == "name" and not isinstance(f.type, PrimitiveType)
            if nested and (match is None or to_arrow_type(f.type, physical=True) != want.type):
                return False
        # A file that also holds a partition column: the log's value is the row's.
        return all(name not in schema.names for name in self._partition_fields)

    def _files_to_conform(self, fragments: list, expected: pa.Schema) -> list[int]:
        bad, seen = [], None
        for i, fragment in enumerate(fragments):
            schema = fragment.physical_schema
            if seen is not None and schema.equals(seen):
                continue
            if self._plain_file(schema, expected):
                seen = schema
            else:
                bad.append(i)
        return bad

    def _dataset_columns(self, raw: pa.Table, counts: np.ndarray | None) -> pa.Table:
        """Every needed column by logical name: the files' columns, then partition values."""
        columns_out = {f.name: raw.column(i) for i, f in enumerate(self._read_fields)}
        if self._partitions_needed:
            owner = np.repeat(np.arange(len(counts)), counts)
            for name in self._partitions_needed:
                values = self._typed_partition_column(name, self.files)
                columns_out[name] = values.take(owner)
        return pa.table(columns_out) if columns_out else pa.table({"__rows": pa.nulls(raw.num_rows)})

    def _splice(self, out: pa.Table, kept: np.ndarray, redo: list[int]) -> pa.Table:
        """``out`` with the rows of files ``redo`` replaced by the engine's reading of them."""
        plans = self._plans()
        with ThreadPoolExecutor(min(self._workers, len(redo))) as pool:
            tables = pool.map(lambda i: self._read_whole(plans[i], count=False), redo)
            again = dict(zip(redo, tables, strict=True))
        starts = _starts(kept)
        pieces, begin = [], 0
        for i in redo:
            if starts[i] > begin:
                pieces.append(out.slice(begin, int(starts[i]) - begin))
            pieces.append(again[i])
            begin = int(starts[i] + kept[i])
        if begin < out.num_rows:
            pieces.append(out.slice(begin))
        return self._concat(pieces)

    def to_batches(self, batch_size: int = _BATCH_ROWS) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.arrow_schema, self._iter_batches(batch_size))

    def __arrow_c_stream__(self, requested_schema=None):
        """The scan's rows as an Arrow C stream (DuckDB, Polars and pyarrow read it directly)."""
        return self.to_batches().__arrow_c_stream__(requested_schema)

    def _iter_batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        if self._by_row_group:
            for plan in self._plans():
                pf = self._open(plan)
                self._count(files=1)
                deleted = False
                for group in self._row_groups(pf, plan):
                    if deleted is False:  # only once some group of the file is read
                        deleted = self._deleted_rows(plan, pf.metadata.num_rows)
                    out = self._read_groups(pf, plan, [group], deleted)
                    for b in out.to_batches(max_chunksize=batch_size):
                        if b.num_rows:
                            yield b
            return
        stream = self._dataset_batches(batch_size) if self.files.num_rows else None
        if stream is not None:
            yield from stream
            return
        for plan in self._plans():
            yield from self._whole_file_batches(plan, batch_size)

    def _whole_file_batches(
        self, plan: _FilePlan, batch_size: int, *, skip: int = 0, count_file: bool = True
    ) -> Iterator[pa.RecordBatch]:
        """One file's rows on the engine's path, batch by batch, from physical row ``skip``."""
        pf = self._open(plan)
        deleted = self._deleted_rows(plan, pf.metadata.num_rows)
        # The bitmap is decoded once per file; each batch takes its slice of one mask.
        keep = keep_mask(pf.metadata.num_rows, deleted) if deleted is not None else None
        offset = 0
        names = self._file_columns(pf)
        if count_file:
            self._count(files=1)
        for batch in self._file_batches(pf, names, batch_size, plan):
            n = batch.num_rows
            if offset + n <= skip:
                offset += n
                continue
            if offset < skip:
                batch, offset = batch.slice(skip - offset), skip
                n = batch.num_rows
            self._count(rows=n)
            mask = keep[offset : offset + n] if keep is not None else None
            out = self._finish(pa.Table.from_batches([batch]), plan, mask, offset)
            offset += n
            for b in out.to_batches():
                if b.num_rows:
                    yield b

    def _dataset_batches(self, batch_size: int) -> Iterator[pa.RecordBatch] | None:
        """``to_batches`` through Arrow's dataset scanner (read-ahead across files in C++), under
        the conditions of ``_read_dataset``; ``None`` where the engine's path reads it all."""
        largest = pc.max(self.files.column("size")).as_py()
        if largest is None or largest > _STREAM_FILE_BYTES:
            return None  # large files: one at a time on the engine's path keeps memory bounded
        prepared = self._dataset_fragments()
        if prepared is None:
            return None
        return self._dataset_batch_stream(*prepared, batch_size)

    def _dataset_batch_stream(
        self, fragments: list, expected: pa.Schema, batch_size: int
    ) -> Iterator[pa.RecordBatch]:
        dataset = ds.FileSystemDataset(fragments, expected, _dataset_format(), _local_filesystem())
        index = {f.path: i for i, f in enumerate(fragments)}
        typed = {name: self._typed_partition_column(name, self.files) for name in self._partitions_needed}
        dvs = self.files.column("deletion_vector")
        with_dv = dvs.null_count < len(dvs)
        paths, root = self.files.column("path"), self.snapshot.store.root
        current, offset, seen, redo = -1, 0, 0, False
        resume = (0, 0)  # where the engine's path would go on: (file, physical row)
        plan, keep = None, None
        scanner = dataset.scanner(
            columns=expected.names,
            batch_size=batch_size,
            batch_readahead=_STREAM_BATCH_READAHEAD,
            fragment_readahead=_STREAM_FILE_READAHEAD,
            use_threads=True,
        )
        batches = iter(scanner.scan_batches())
        while True:
            try:
                tagged = next(batches)
            except StopIteration:
                break
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError):
                # The engine's path goes on from where the stream stands: it reads the rows the
                # scanner did not hand over, and names the file and the cause of the failure.
                plans = self._plans()
                first, skip = resume
                for i in range(first, len(plans)):
                    yield from self._whole_file_batches(plans[i], batch_size, skip=skip if i == first else 0)
                return
            i = index[tagged.fragment.path]
            if i != current:
                current, offset, seen = i, 0, seen + 1
                self._count(files=1)
                plan = _FilePlan(
                    canonical_path(paths[i].as_py(), root),
                    dvs[i].as_py() if with_dv else None,
                    {name: values[i] for name, values in typed.items()},
                )
                redo = not self._plain_file(tagged.fragment.physical_schema, expected)
                if redo:  # read on the engine's path; the scanner's batches of it are passed over
                    resume = (i, 0)
                    yield from self._whole_file_batches(plan, batch_size, count_file=False)
                    resume = (i + 1, 0)
                    continue
                deleted = self._deleted_rows(plan, tagged.fragment.metadata.num_rows)
                keep = keep_mask(tagged.fragment.metadata.num_rows, deleted) if deleted is not None else None
            if redo:
                continue
            batch = tagged.record_batch
            n = batch.num_rows
            self._count(rows=n)
            mask = keep[offset : offset + n] if keep is not None else None
            offset += n
            resume = (i, offset)
            for b in self._finish(pa.Table.from_batches([batch]), plan, mask).to_batches():
                if b.num_rows:
                    yield b
        self._count(files=len(fragments) - seen)  # files without rows hand over no batch

    def _file_batches(self, pf: pq.ParquetFile, names: list[str], batch_size: int, plan: _FilePlan):
        try:
            if names:
                yield from pf.iter_batches(batch_size=batch_size, columns=names, use_threads=True)
            else:
                # Only partition columns (or none) wanted: still honour row counts.
                remaining = pf.metadata.num_rows
                while remaining > 0:
                    n = min(batch_size, remaining)
                    yield pa.RecordBatch.from_arrays([pa.nulls(n)], names=["__rows"])
                    remaining -= n
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e

    def read_files_with_positions(self) -> Iterator[tuple[int, FileRows]]:
        """Each planned file's surviving rows with their physical row positions, in order.

        Row-level commands need positions (to extend a deletion vector) and the existing
        deletion vector; files are read in parallel, results come back in plan order.
        """
        plans = self._plans()
        if not plans:
            return
        if self.predicate is not None:
            raise DeltaError("positions are only meaningful for a scan without a row filter")
        if self._lineage_names is None:
            materialized = materialized_columns(self.snapshot.protocol, self.snapshot.metadata)
            if materialized is not None:  # rewrites must keep each row's row id and version
                self._track_rows(materialized)
                plans = self._plans()
        with ThreadPoolExecutor(min(self._workers, len(plans))) as pool:
            yield from enumerate(pool.map(self._read_with_positions, plans))

    def _read_with_positions(self, plan: _FilePlan) -> FileRows:
        pf = self._open(plan)
        physical_rows = pf.metadata.num_rows
        deleted = self._deleted_rows(plan, physical_rows)
        table = self._read_whole(plan, pf=pf, deleted=deleted)
        if deleted is None:
            positions = np.arange(physical_rows)
        else:
            positions = np.flatnonzero(keep_mask(physical_rows, deleted))
        lineage = None
        if self._lineage_names is not None:
            lineage = table.select(list(self._lineage_names))
            table = table.drop_columns(list(self._lineage_names))
        return FileRows(table, positions.astype(np.int64), physical_rows, deleted, lineage)

    def _read_whole(
        self, plan: _FilePlan, *, pf: pq.ParquetFile | None = None, deleted=False, count: bool = True
    ) -> pa.Table:
        pf = pf if pf is not None else self._open(plan)
        names = self._file_columns(pf)
        try:
            if names:
                table = pf.read(columns=names, use_threads=self._threads_per_file)
            else:
                table = pa.table({"__rows": pa.nulls(pf.metadata.num_rows)})
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e
        if count:
            self._count(files=1, rows=table.num_rows)
        if deleted is False:
            deleted = self._deleted_rows(plan, pf.metadata.num_rows, count=count)
        mask = keep_mask(table.num_rows, deleted) if deleted is not None else None
        return self._finish(table, plan, mask)

    def _read_filtered(self, plan: _FilePlan) -> pa.Table:
        """A file's rows matching the filter, reading only the row groups that can hold them."""
        pf = self._open(plan)
        self._count(files=1)
        groups = self._row_groups(pf, plan)
        if not groups:
            return self.arrow_schema.empty_table()
        deleted = self._deleted_rows(plan, pf.metadata.num_rows)
        return self._read_groups(pf, plan, groups, deleted)

    def _row_groups(self, pf: pq.ParquetFile, plan: _FilePlan) -> list[int]:
        """The file's row groups whose statistics admit the predicate (every group when the
        file has one: the file's own statistics already decided that)."""
        count = pf.metadata.num_row_groups
        if count <= 1 or self.predicate is None:
            return list(range(count))
        mask = row_group_keep_mask(pf.metadata, pf.schema_arrow, self.predicate, self, plan)
        return np.flatnonzero(mask).tolist()

    def _read_groups(
        self, pf: pq.ParquetFile, plan: _FilePlan, groups: list[int], deleted: np.ndarray | None
    ) -> pa.Table:
        """Rows of ``groups`` matching the filter: the predicate's columns first, the others
        only for the groups that hold a match, and only those rows of them."""
        metadata = pf.metadata
        sizes = np.array([metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)])
        starts = np.concatenate([[0], np.cumsum(sizes)])
        positions = np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups])
        # Late materialization pays off on large groups; a small file's columns are read at once
        # (a second read per file would cost more than decoding a few rows it discards).
        late = bool(self._other_fields) and len(positions) >= _LATE_ROWS
        first = self._predicate_fields if late else self._predicate_fields + self._other_fields
        table = self._read_row_groups(pf, plan, groups, first, len(positions))
        self._count(rows=len(positions))
        if deleted is not None:
            keep = keep_mask(int(starts[-1]), deleted)[positions]
            table, positions = table.filter(pa.array(keep)), positions[keep]
        matched = self._conformed(table, plan, first)
        for name in self._partitions_needed:
            matched[name] = pa.repeat(plan.partition_values[name], table.num_rows)
        position_column = _unused_name(matched)
        matched[position_column] = pa.array(positions, pa.int64())
        full = self._apply_filter(pa.table(matched), plan)
        if not full.num_rows:
            return self.arrow_schema.empty_table()
        if late:
            hits = full.column(position_column).to_numpy()
            group_of = np.searchsorted(starts, hits, side="right") - 1
            wanted = np.unique(group_of)  # ascending, as the rows are
            within = hits - starts[group_of]
            # Each wanted group is decoded only up to its last match (the rows after it would
            # be decoded for nothing), and the reads are laid end to end.
            last = np.maximum.reduceat(within, np.searchsorted(group_of, wanted))
            lengths = last + 1
            base = np.concatenate([[0], np.cumsum(lengths)])[:-1]
            index = within + base[np.searchsorted(wanted, group_of)]
            parts = [
                self._read_group_prefix(pf, plan, int(g), self._other_fields, int(n))
                for g, n in zip(wanted, lengths, strict=True)
            ]
            rest = (pa.concat_tables(parts) if len(parts) > 1 else parts[0]).take(pa.array(index))
            for name, column in self._conformed(rest, plan, self._other_fields).items():
                full = full.append_column(name, column)
        return self._output(full)

    def _read_row_groups(
        self, pf: pq.ParquetFile, plan: _FilePlan, groups: list[int], fields: list[StructField], rows: int
    ) -> pa.Table:
        names = self._file_columns(pf, fields)
        if not names:  # none of these columns is in the file: rows only
            return pa.table({"__rows": pa.nulls(rows)})
        try:
            return pf.read_row_groups(groups, columns=names, use_threads=self._threads_per_file)
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e

    def _read_group_prefix(
        self, pf: pq.ParquetFile, plan: _FilePlan, group: int, fields: list[StructField], rows: int
    ) -> pa.Table:
        """The first ``rows`` rows of row group ``group`` (``fields`` only), decoded batch by
        batch and no further than needed."""
        names = self._file_columns(pf, fields)
        if not names:
            return pa.table({"__rows": pa.nulls(rows)})
        batches, got = [], 0
        try:
            for batch in pf.iter_batches(
                batch_size=_PREFIX_BATCH_ROWS,
                row_groups=[group],
                columns=names,
                use_threads=self._threads_per_file,
            ):
                batches.append(batch)
                got += batch.num_rows
                if got >= rows:
                    break
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e
        return pa.Table.from_batches(batches).slice(0, rows)

    def _count(self, *, files: int = 0, rows: int = 0, deleted: int = 0) -> None:
        with self._metrics_lock:  # files are read from several threads
            self.metrics.files_read += files
            self.metrics.rows_read += rows
            self.metrics.rows_deleted_by_dv += deleted

    def _open(self, plan: _FilePlan) -> pq.ParquetFile:
        location = plan.location
        try:
            store, key = resolve_location(self.snapshot.store, location)
            source = store.open_input(key)
            # Pages written with a CRC are checked: a flipped bit is an error, never wrong rows.
            return pq.ParquetFile(source, coerce_int96_timestamp_unit="us", page_checksum_verification=True)
        except ObjectNotFoundError as e:
            raise DataFileError(
                f"data file {location} of {self.snapshot.store.root} "
                f"(version {self.snapshot.version}) is missing; it may have been removed by VACUUM "
                "(versions older than the VACUUM retention cannot be read) or deleted outside Delta",
                location,
            ) from e
        except StorageError as e:
            if getattr(self.snapshot.store, "remote", False):
                raise  # a request that failed, maybe for a moment: the store's error, not the file's
            raise self._unreadable(plan, e) from e  # a directory, no permission
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e

    def _unreadable(self, plan: _FilePlan, error: Exception) -> DataFileError:
        """The error for a data file that is present but cannot be decoded."""
        where = f"data file {plan.location} of {self.snapshot.store.root} (version {self.snapshot.version})"
        if "checksum" in str(error).lower() or "crc" in str(error).lower():
            why = (
                "is corrupt: a page failed its CRC check (the bytes changed after they were written); "
                "restore the file from a backup or a replica"
            )
        else:
            why = "is not readable Parquet"
        return DataFileError(f"{where} {why}: {error}", plan.location)

    def _deleted_rows(self, plan: _FilePlan, physical_rows: int, *, count: bool = True) -> np.ndarray | None:
        if plan.deletion_vector is None:
            return None
        rows = read_file_deletion_vector(self.snapshot, plan.deletion_vector, plan.location)
        if len(rows) and int(rows[-1]) >= physical_rows:
            raise CorruptDeletionVectorError(
                f"the deletion vector of data file {plan.location} of {self.snapshot.store.root} "
                f"(version {self.snapshot.version}) deletes row {int(rows[-1])}, but the file has "
                f"{physical_rows} rows: the deletion vector does not belong to this file",
                plan.location,
            )
        if count:
            self._count(deleted=len(rows))
        return rows

    def _file_columns(self, pf: pq.ParquetFile, fields: list[StructField] | None = None) -> list[str]:
        """Names of the file's top-level columns that hold ``fields`` (by default every field this
        scan needs, row-tracking columns included)."""
        file_schema = pf.schema_arrow
        names = []
        for f in self._read_fields if fields is None else fields:
            match = _match_field(file_schema, f, self.mode)
            if match is not None:
                names.append(match.name)
        if self._materialized is not None and fields is None:
            names += [n for n in self._materialized if n in file_schema.names]
        return names

    def _finish(self, table: pa.Table, plan: _FilePlan, mask: np.ndarray | None, offset: int = 0) -> pa.Table:
        lineage = self._lineage(table, plan, offset) if self._lineage_names is not None else None
        if mask is not None and mask.all():
            mask = None  # nothing deleted here: no copy
        if mask is not None:
            table = table.filter(pa.array(mask))
            if lineage is not None:
                lineage = lineage.filter(pa.array(mask))
        n = table.num_rows
        columns_out = self._conformed(table, plan, self._read_fields)
        for name in self._partitions_needed:
            columns_out[name] = pa.repeat(plan.partition_values[name], n)
        if lineage is not None:
            columns_out.update(zip(lineage.column_names, lineage.columns, strict=True))
        full = pa.table(columns_out) if columns_out else pa.table({"__rows": pa.nulls(n)})
        if self.predicate is not None:
            full = self._apply_filter(full, plan)
        return self._output(full)

    def _output(self, full: pa.Table) -> pa.Table:
        """``full`` (every needed column under its logical name) projected to the scan's schema."""
        if not self.arrow_schema:
            return full.select([])  # no columns, but the rows still count
        extra = [full.column(name) for name in self._lineage_names or ()]
        return pa.Table.from_arrays(
            [_as_type(full.column(f.name), to_arrow_type(f.type)) for f in self.output_fields] + extra,
            schema=self.arrow_schema,
        )

    def _apply_filter(self, table: pa.Table, plan: _FilePlan | None = None) -> pa.Table:
        """The residual filter over ``table``: one file's rows, or (``plan`` None) many files'."""
        root = self.snapshot.store.root
        where = f"data file {plan.location} of {root}" if plan is not None else f"the files of {root}"
        return filter_rows(table, self.predicate, where)

    def _conformed(self, table: pa.Table, plan: _FilePlan, fields: list[StructField]) -> dict:
        """``fields`` read from ``table`` (a file's columns) as the table's types, by logical name;
        a field the file lacks is all nulls."""
        n = table.num_rows
        file_schema = table.schema
        out: dict[str, pa.Array | pa.ChunkedArray] = {}
        for f in fields:
            match = _match_field(file_schema, f, self.mode)
            if match is None:
                out[f.name] = pa.nulls(n, to_arrow_type(f.type))
                continue
            copies = len(file_schema.get_all_field_indices(match.name))
            if copies > 1:  # Spark refuses such a file too: which one is the column?
                raise DataFileError(
                    f"data file {plan.location} of {self.snapshot.store.root} has {copies} columns "
                    f"named {match.name!r}: it cannot be read as column {f.name!r}",
                    plan.location,
                )
            try:
                out[f.name] = _conform_chunked(table.column(match.name), match, f.type, self.mode)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise DataFileError(
                    f"column {f.name!r} of data file {plan.location} has type {match.type}, "
                    f"which cannot be read as {f.type.to_json()}: {e}",
                    plan.location,
                ) from e
        return out

    def _lineage(self, table: pa.Table, plan: _FilePlan, offset: int) -> pa.Table:
        """Stable row ids and commit versions of a file's rows (``table``: consecutive physical
        rows from ``offset``, before the deletion vector)."""
        assert self._materialized is not None and self._lineage_names is not None
        ids_name, versions_name = self._materialized
        ids, versions = stable_values(
            table.num_rows,
            offset,
            plan.base_row_id,
            plan.default_row_commit_version,
            table.column(ids_name) if ids_name in table.column_names else None,
            table.column(versions_name) if versions_name in table.column_names else None,
            f"data file {plan.location} of {self.snapshot.store.root}",
        )
        return pa.table(dict(zip(self._lineage_names, (ids, versions), strict=True)))


def _starts(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of ``counts`` rows begins."""
    starts = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=starts[1:])
    return starts


@functools.cache
def _dataset_format() -> ds.ParquetFileFormat:
    # As the engine opens a file: INT96 as microseconds, and pages written with a CRC checked.
    return ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"),
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True),
    )


@functools.cache
def _local_filesystem() -> pafs.LocalFileSystem:
    return pafs.LocalFileSystem()


def read_file_deletion_vector(snapshot: Snapshot, dv: dict, location: str) -> np.ndarray:
    """The deleted row positions of one live file (``dv``: its ``deletion_vector`` entry of the
    live-file table); a deletion-vector file that is gone is a ``DataFileError`` naming both."""
    descriptor = DeletionVectorDescriptor(
        storage_type=dv["storageType"],
        path_or_inline_dv=dv["pathOrInlineDv"],
        size_in_bytes=dv["sizeInBytes"],
        cardinality=dv["cardinality"],
        offset=dv.get("offset"),
    )
    try:
        return read_deletion_vector(snapshot.store, descriptor, data_file=location)
    except CorruptDeletionVectorError as e:
        if not isinstance(e.__cause__, ObjectNotFoundError):
            raise
        raise DataFileError(
            f"deletion vector file {e.path} of data file {location} of "
            f"{snapshot.store.root} (version {snapshot.version}) is missing; it may have "
            "been removed by VACUUM (versions older than the VACUUM retention cannot be read) "
            "or deleted outside Delta",
            e.path,
        ) from e


def typed_partition_column(f: StructField, files: pa.Table, table_root: str) -> pa.Array:
    """One partition column of a live-file table, parsed to its type."""
    raw = pc.struct_field(files.column("partition_values"), f.physical_name)
    try:
        return parse_partition_values(raw, f.type)
    except SchemaError as e:
        raise SchemaError(f"{table_root}: partition column {f.name!r}: {e}") from e


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
    metadata: pq.FileMetaData, file_schema: pa.Schema, predicate: Expr, scan: Scan, plan: _FilePlan
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
        out = FileStats(num_records=pa.array(rows, pa.int64()))
        for col in cols:
            field = scan.schema.find(col.path[0]) if len(col.path) == 1 else None
            if field is None or not _prunable_type(field.type):
                continue  # nested fields and floats (NaN ordering) prune nothing
            match = _match_field(file_schema, field, scan.mode)
            if match is None:  # the file predates the column: every value is null
                out.null_count[col.path] = pa.array(rows, pa.int64())
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
        low = pa.array(lows, file_type).cast(target)
        high = pa.array(highs, file_type).cast(target)
    except (
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
        pa.ArrowTypeError,
        TypeError,
        ValueError,
        OverflowError,
    ):
        return None
    return low, high, pa.array(nulls, pa.int64())


def _unused_name(columns_: dict) -> str:
    name = "__deltaplane_row"
    while name in columns_:
        name += "_"
    return name


def _as_type(column, typ: pa.DataType):
    return column if column.type == typ else column.cast(typ)


# --- column resolution and conformance -------------------------------------------------------


def _field_id(f: pa.Field) -> int | None:
    if f.metadata and PARQUET_FIELD_ID in f.metadata:
        return int(f.metadata[PARQUET_FIELD_ID])
    return None


def _match_field(fields, target: StructField, mode: str) -> pa.Field | None:
    """The file field holding ``target``: by field id (mode id), physical name, or name."""
    candidates = list(fields)
    if mode == "id" and target.field_id is not None:
        for f in candidates:
            if _field_id(f) == target.field_id:
                return f
    name = target.physical_name if mode != "none" else target.name
    for f in candidates:
        if f.name == name:
            return f
    lowered = name.lower()
    for f in candidates:
        if f.name.lower() == lowered:
            return f
    return None


def _conform_chunked(column: pa.ChunkedArray, file_field: pa.Field, target: DataType, mode: str):
    chunks = [_conform(chunk, file_field.type, target, mode) for chunk in column.chunks]
    return pa.chunked_array(chunks, type=to_arrow_type(target))


def _conform(arr: pa.Array, file_type: pa.DataType, target: DataType, mode: str) -> pa.Array:
    """Reshape one file column to the table's type, recursively."""
    target_type = to_arrow_type(target)
    if isinstance(target, StructType):
        if not pa.types.is_struct(file_type):
            raise pa.ArrowInvalid(f"expected a struct, found {file_type}")
        file_fields = [file_type.field(i) for i in range(file_type.num_fields)]
        children = []
        for child in target.fields:
            match = _match_field(file_fields, child, mode)
            if match is None:
                children.append(pa.nulls(len(arr), to_arrow_type(child.type)))
            else:
                index = file_type.get_field_index(match.name)
                children.append(_conform(arr.field(index), match.type, child.type, mode))
        return pa.StructArray.from_arrays(
            children, fields=list(target_type), mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(target, ArrayType):
        if not (pa.types.is_list(file_type) or pa.types.is_large_list(file_type)):
            raise pa.ArrowInvalid(f"expected a list, found {file_type}")
        values = _conform(arr.values, file_type.value_type, target.element_type, mode)
        offsets = arr.offsets.cast(pa.int32()) if pa.types.is_large_list(file_type) else arr.offsets
        return pa.ListArray.from_arrays(
            offsets, values, type=target_type, mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(target, MapType):
        if not pa.types.is_map(file_type):
            raise pa.ArrowInvalid(f"expected a map, found {file_type}")
        keys = _conform(arr.keys, file_type.key_type, target.key_type, mode)
        items = _conform(arr.items, file_type.item_type, target.value_type, mode)
        return pa.MapArray.from_arrays(
            arr.offsets,
            keys,
            items,
            type=target_type,
            mask=arr.is_null() if arr.null_count else None,
        )
    if arr.type == target_type:
        return arr
    if isinstance(target, PrimitiveType) and target.name == "variant" and is_shredded(file_type):
        return unshred(arr)
    if pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(target_type):
        # Units differ (INT96 as ns, TIMESTAMP_MILLIS); a zone-less INT96 value is a UTC instant.
        return arr.cast(pa.timestamp("us", tz=arr.type.tz)).cast(target_type)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr.cast(target_type)
