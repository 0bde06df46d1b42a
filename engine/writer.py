"""Data files: Arrow batches in, Parquet files out, one ``add`` action with statistics per file.

Rows are split by partition values (a stable sort on the combined partition codes, so any number
of partitions costs one pass), buffered per partition up to a row-group size, and written to a
file per partition that is rolled over at the target file size. Buffered bytes are bounded
across all partitions: when the budget is exceeded the largest buffers are written out early, so
memory stays bounded however the input is shaped. Files are streamed to the object store and
become visible only when complete; nothing is committed here (the transaction does that), and
files of a failed write are left for VACUUM, never half-published.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaplane.engine.actions import Add
from deltaplane.engine.partitions import partition_directory, serialize_partition_value
from deltaplane.engine.schema import (
    ArrayType,
    DataType,
    MapType,
    StructField,
    StructType,
    to_arrow_type,
)
from deltaplane.engine.stats import StatsCollector, StatsLeaf
from deltaplane.engine.storage.base import ObjectStore, PendingObject

MiB = 1 << 20
DEFAULT_TARGET_FILE_SIZE = 128 * MiB
DEFAULT_ROW_GROUP_BYTES = 64 * MiB
DEFAULT_BUFFER_BUDGET = 256 * MiB


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
    buffer_budget: int = DEFAULT_BUFFER_BUDGET
    compression: str = "zstd"
    random_prefix_length: int | None = None
    materialize_partitions: bool = False
    prefix: str = ""  # a directory every file goes under ("_change_data" for CDC files)
    # Row tracking's hidden (row id, row commit version) columns: written into every file, from
    # the input's columns of those names (rows copied by a rewrite), null where absent.
    row_tracking_columns: tuple[str, str] | None = None

    @property
    def partition_fields(self) -> list[StructField]:
        return [self.schema[c] for c in self.partition_columns]

    @property
    def data_fields(self) -> list[StructField]:
        skip = set() if self.materialize_partitions else {f.name for f in self.partition_fields}
        return [f for f in self.schema.fields if f.name not in skip]


def physical_arrow_field(f: StructField, mode: str) -> pa.Field:
    """The Parquet field for a table field: physical names and field ids under column mapping."""
    name = f.physical_name if mode != "none" else f.name
    metadata = (
        {b"PARQUET:field_id": str(f.field_id).encode()} if mode != "none" and f.field_id is not None else None
    )
    return pa.field(name, _physical_type(f.type, mode), nullable=f.nullable, metadata=metadata)


def _physical_type(t: DataType, mode: str) -> pa.DataType:
    if isinstance(t, StructType):
        return pa.struct([physical_arrow_field(f, mode) for f in t.fields])
    if isinstance(t, ArrayType):
        return pa.list_(pa.field("element", _physical_type(t.element_type, mode), t.contains_null))
    if isinstance(t, MapType):
        return pa.map_(
            _physical_type(t.key_type, mode),
            pa.field("value", _physical_type(t.value_type, mode), t.value_contains_null),
        )
    return to_arrow_type(t)


def _to_physical(arr: pa.Array, t: DataType, mode: str) -> pa.Array:
    """Rename (nested) struct fields to physical names; values untouched."""
    if mode == "none":
        return arr
    if isinstance(t, StructType):
        children = [_to_physical(arr.field(i), f.type, mode) for i, f in enumerate(t.fields)]
        fields = [physical_arrow_field(f, mode) for f in t.fields]
        return pa.StructArray.from_arrays(
            children, fields=fields, mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(t, ArrayType):
        values = _to_physical(arr.values, t.element_type, mode)
        return pa.ListArray.from_arrays(
            arr.offsets, values, type=_physical_type(t, mode), mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(t, MapType):
        keys = _to_physical(arr.keys, t.key_type, mode)
        items = _to_physical(arr.items, t.value_type, mode)
        return pa.MapArray.from_arrays(
            arr.offsets,
            keys,
            items,
            type=_physical_type(t, mode),
            mask=arr.is_null() if arr.null_count else None,
        )
    return arr


DICTIONARY_SAMPLE_ROWS = 65_536
DICTIONARY_MAX_DISTINCT = 0.5


def dictionary_columns(sample: pa.Table) -> list[str] | bool:
    """Columns worth dictionary encoding, judged on the first rows a writer sees.

    Parquet writers try a dictionary for every column and fall back to plain encoding once it
    grows too big; for columns of mostly distinct values (ids, timestamps, measurements, free
    text) that attempt costs a fifth of the write time and saves nothing. Nested columns keep the
    default (all), as do samples too small to judge.
    """
    rows = min(sample.num_rows, DICTIONARY_SAMPLE_ROWS)
    if rows < 1000 or any(pa.types.is_nested(f.type) for f in sample.schema):
        return True
    head = sample.slice(0, rows)
    chosen = []
    for name in sample.column_names:
        column = head.column(name)
        distinct = pc.count_distinct(column, mode="all").as_py()
        if distinct <= DICTIONARY_MAX_DISTINCT * rows:
            chosen.append(name)
    return chosen


@dataclass
class _OpenFile:
    values: tuple
    key: str
    pending: PendingObject
    writer: pq.ParquetWriter
    stats: StatsCollector
    partition_values: dict[str, str | None]
    buffered: list[pa.Table] = field(default_factory=list)
    buffered_bytes: int = 0


class DataFileWriter:
    """Writes conformed Arrow tables into Parquet data files; ``close()`` returns the adds."""

    def __init__(self, store: ObjectStore, config: WriterConfig):
        self.store = store
        self.config = config
        self._data_fields = config.data_fields
        self._file_schema = pa.schema(
            [physical_arrow_field(f, config.column_mapping) for f in self._data_fields]
            + [pa.field(name, pa.int64()) for name in config.row_tracking_columns or ()]
        )
        self._open: dict[tuple, _OpenFile] = {}
        self._adds: list[Add] = []
        self._buffered_total = 0
        self._counter = 0
        self._write_id = uuid.uuid4()
        self._dictionary: list[str] | bool | None = None  # chosen from the first rows written
        self.rows_written = 0
        self.bytes_written = 0
        self._publisher: ThreadPoolExecutor | None = None
        self._publishing: list = []

    # --- input ----------------------------------------------------------------------------------

    def write(self, table: pa.Table) -> None:
        """Add rows (already conformed to the table's logical schema)."""
        if table.num_rows == 0:
            return
        for values, part in self._split(table):
            self._buffer(values, part)
        self.rows_written += table.num_rows
        while self._buffered_total > self.config.buffer_budget:
            largest = max(self._open.values(), key=lambda f: f.buffered_bytes)
            self._flush(largest)

    def _split(self, table: pa.Table):
        columns = self.config.partition_columns
        if not columns:
            yield (), table
            return
        codes = np.zeros(table.num_rows, dtype=np.int64)
        for name in columns:
            encoded = pc.dictionary_encode(table.column(name).combine_chunks())
            size = len(encoded.dictionary) + 1  # the extra code is null
            indices = pc.fill_null(encoded.indices, size - 1).to_numpy().astype(np.int64)
            # Re-densify after each column so the combined code can never overflow.
            codes = np.unique(codes * size + indices, return_inverse=True)[1].astype(np.int64)
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        starts = np.flatnonzero(np.concatenate(([True], sorted_codes[1:] != sorted_codes[:-1])))
        ends = np.append(starts[1:], len(order))
        ordered = table.take(pa.array(order))
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            part = ordered.slice(start, end - start)
            values = tuple(part.column(name)[0].as_py() for name in columns)
            yield values, part

    def _buffer(self, values: tuple, part: pa.Table) -> None:
        # A part larger than a row group is cut, so that files can roll at the target size even
        # when one call brings a whole partition (OPTIMIZE's Z-order writes a bin at once).
        limit = min(self.config.row_group_bytes, self.config.target_file_size)
        if part.num_rows > 1 and part.nbytes > 2 * limit:
            pieces = -(-part.nbytes // limit)
            step = max(1, -(-part.num_rows // pieces))
            for offset in range(0, part.num_rows, step):
                self._buffer_piece(values, part.slice(offset, step))
            return
        self._buffer_piece(values, part)

    def _buffer_piece(self, values: tuple, part: pa.Table) -> None:
        physical = self._physical_table(part)
        if self._dictionary is None:
            self._dictionary = dictionary_columns(physical)
        f = self._open.get(values)
        if f is None:
            f = self._open[values] = self._new_file(values)
        f.buffered.append(physical)
        f.buffered_bytes += physical.nbytes
        self._buffered_total += physical.nbytes
        if f.buffered_bytes >= min(self.config.row_group_bytes, self.config.target_file_size):
            self._flush(f)

    def _physical_table(self, part: pa.Table) -> pa.Table:
        arrays = []
        for f in self._data_fields:
            column = part.column(f.name)
            if self.config.column_mapping != "none":
                column = pa.chunked_array(
                    [_to_physical(c, f.type, self.config.column_mapping) for c in column.chunks],
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

    def _new_file(self, values: tuple) -> _OpenFile:
        config = self.config
        serialized = [
            serialize_partition_value(v, f.type) for v, f in zip(values, config.partition_fields, strict=True)
        ]
        physical_names = [f.physical_name for f in config.partition_fields]
        self._counter += 1
        name = f"part-{self._counter:05d}-{self._write_id}-c000.{config.compression}.parquet"
        if config.random_prefix_length:
            directory = uuid.uuid4().hex[: config.random_prefix_length]
        elif config.partition_columns:
            directory = partition_directory(physical_names, serialized)
        else:
            directory = ""
        key = "/".join(part for part in (config.prefix, directory, name) if part)
        pending = self.store.open_output(key)
        writer = pq.ParquetWriter(
            pending.sink,
            self._file_schema,
            compression=config.compression,
            write_statistics=True,
            use_dictionary=True if self._dictionary is None else self._dictionary,
            # A CRC per page: bit rot in a data file becomes an error on read, not wrong rows.
            write_page_checksum=True,
        )
        return _OpenFile(
            values=values,
            key=key,
            pending=pending,
            writer=writer,
            stats=StatsCollector(config.stats_leaves, tight_bounds=config.tight_bounds),
            partition_values=dict(zip(physical_names, serialized, strict=True)),
        )

    def _flush(self, f: _OpenFile) -> None:
        if not f.buffered:
            return
        table = pa.concat_tables(f.buffered) if len(f.buffered) > 1 else f.buffered[0]
        f.writer.write_table(table, row_group_size=max(table.num_rows, 1))
        f.stats.update(table, parquet_bounds=True)
        self._buffered_total -= f.buffered_bytes
        f.buffered, f.buffered_bytes = [], 0
        if f.pending.sink.tell() >= self.config.target_file_size:
            self._finish(f)
            del self._open[f.values]

    def _finish(self, f: _OpenFile) -> None:
        """Close the file and publish it in the background (fsync and link, or an upload),
        overlapping with writing the next one; ``close()`` waits for every publication."""
        f.writer.close()
        f.stats.update_from_parquet(f.writer.writer.metadata)
        if self._publisher is None:
            self._publisher = ThreadPoolExecutor(2, thread_name_prefix="deltaplane-publish")
        self._publishing.append((self._publisher.submit(f.pending.commit), f))

    def _collect(self) -> None:
        for future, f in self._publishing:
            size = future.result()
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
        self._publishing = []

    @property
    def adds(self) -> list[Add]:
        """Add actions of the files finished so far."""
        return list(self._adds)

    def roll(self) -> None:
        """Finish every open file now; the next rows start new files (callers that choose file
        boundaries themselves, like Z-order, cut here)."""
        for f in list(self._open.values()):
            self._flush(f)
        for f in list(self._open.values()):
            self._finish(f)
        self._open.clear()

    def close(self) -> list[Add]:
        """Write what is buffered, finish every file, and return their add actions."""
        for f in list(self._open.values()):
            self._flush(f)
        for f in list(self._open.values()):
            self._finish(f)
        self._open.clear()
        try:
            self._collect()
        finally:
            self._shutdown()
        return list(self._adds)

    def _shutdown(self) -> None:
        if self._publisher is not None:
            self._publisher.shutdown(wait=True)
            self._publisher = None

    def abort(self) -> None:
        """Discard open files (already finished files stay, unreferenced, for VACUUM)."""
        for f in self._open.values():
            try:
                f.writer.close()
            finally:
                f.pending.abort()
        self._open.clear()
        self._shutdown()
