"""``Snapshot -> ScanBuilder -> Scan -> Arrow``: the scan itself, choosing a path per read (see the
package docstring)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import (
    InvalidArgumentError,
    SchemaError,
)
from deltaplane.engine.expressions.bind import bind_predicate
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.expressions.tree import Expr, columns
from deltaplane.engine.log.replay import canonical_path, canonical_paths, plain_paths
from deltaplane.engine.row_tracking import READ_COLUMNS, materialized_columns
from deltaplane.engine.scan.dataset_path import DatasetPath
from deltaplane.engine.scan.file_path import FilePath
from deltaplane.engine.scan.files import (
    BATCH_ROWS,
    READ_WORKERS,
    REMOTE_READ_WORKERS,
    FilePlan,
    ScanMetrics,
    typed_partition_column,
)
from deltaplane.engine.scan.skipping import file_keep_mask
from deltaplane.engine.schema import (
    StructField,
    to_arrow_field,
)
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.values_to_arrow import empty_table

_PYTHON_URIS = 256

# A local scan of at most this many files adding up to less than this many bytes is read file by
# file on the calling thread (the engine's path, ``Scan._small``): for such files the dataset
# scanner's and a thread pool's start-up cost more CPU than the decoding. Measured on 2 cores:
# 2 files of 1,000 rows 0.6 ms of CPU instead of 1.0-1.3 (wall 0.6 instead of 0.9-1.1), 8 such
# files 2.3 instead of 2.9-3.8 (wall 2.3 instead of 1.9-2.4). At the bounds' corner the wall
# time is what is given up: 16 files of 4,000 rows (188 KB) 6.4-6.6 ms of CPU instead of 7.8-8.6,
# but also of wall instead of 4.8-5.4. Larger scans lose more wall time to going one file at a
# time than they save CPU (8 files of 20,000 rows, 450 KB: 9.3 ms instead of 5.9).
SMALL_SCAN_BYTES = 256 << 10
SMALL_SCAN_FILES = 16

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


class Scan(DatasetPath, FilePath):
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
        self._remote = bool(getattr(snapshot.store, "remote", False))
        self._workers = REMOTE_READ_WORKERS if self._remote else READ_WORKERS
        # Files the dataset scanner reads at once: on an object store, enough to cover the
        # round trips; locally Arrow's default (its threads decode what the disk hands over).
        self._file_readahead = REMOTE_READ_WORKERS if self._remote else 4
        self._small = (
            not self._remote
            and files.num_rows <= SMALL_SCAN_FILES
            and (pc.sum(files.column("size")).as_py() or 0) < SMALL_SCAN_BYTES
        )
        self._threads_per_file = not self._small and files.num_rows < self._workers

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

    def _plans(self) -> list[FilePlan]:
        files = self.files
        typed = {name: self._typed_partition_column(name, files) for name in self._partitions_needed}
        root = self.snapshot.store.root
        paths = files.column("path").to_pylist()
        dvs = files.column("deletion_vector").to_pylist()
        tracked = self._lineage_names is not None and "base_row_id" in files.column_names
        base_ids = files.column("base_row_id").to_pylist() if tracked else [None] * len(paths)
        versions = files.column("default_row_commit_version").to_pylist() if tracked else [None] * len(paths)
        sizes = files.column("size").to_pylist()
        return [
            FilePlan(
                location=canonical_path(path, root),
                deletion_vector=dvs[i],
                partition_values={name: arr[i] for name, arr in typed.items()},
                base_row_id=base_ids[i],
                default_row_commit_version=versions[i],
                size=sizes[i],
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

    @property
    def _across_files(self) -> bool:
        """Whether Arrow's dataset scanner may read this scan: two files or more, unless they are
        local and small together (``_small``). One file is read on the engine's path: there is
        nothing to read ahead across, it measured faster (1M rows: 104 vs 139 ms; 100 rows: 0.3
        vs 0.7 ms), and it needs no ``pyarrow.dataset``, whose import loads pandas."""
        return self.files.num_rows > 1 and not self._small

    @property
    def _by_row_group(self) -> bool:
        """Whether files are read row group by row group (a filter on data columns; row ids need
        every row's position and take the whole-file path)."""
        return bool(self._predicate_fields) and self._lineage_names is None

    def to_table(self) -> pa.Table:
        if not self._by_row_group and self._across_files:
            table = self._read_dataset()
            if table is not None:
                return table
        plans = self._plans()
        if not plans:
            return empty_table(self.arrow_schema)
        read = self._read_filtered if self._by_row_group else self._read_whole
        if len(plans) == 1 or self._small:
            tables = [read(plan) for plan in plans]
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
            return empty_table(self.arrow_schema)
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def to_batches(self, batch_size: int = BATCH_ROWS) -> pa.RecordBatchReader:
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
        stream = self._dataset_batches(batch_size) if self._across_files else None
        if stream is not None:
            yield from stream
            return
        for plan in self._plans():
            yield from self._whole_file_batches(plan, batch_size)
