"""The layout of the files the writer produces: row groups of at most 128Ki rows whatever the input
batches, page indexes on every column, and which file a partition's rows go to when the cap on
open files is reached."""

from __future__ import annotations

import logging

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltaplane.engine import DeltaTable
from deltaplane.engine.schema import from_arrow_schema
from deltaplane.engine.storage.local import LocalStore
from deltaplane.engine.storage.memory import MemoryStore
from deltaplane.engine.writer import DataFileWriter, WriterConfig

MiB = 1 << 20
ROWS = 3_000_000


def writer_by_p(store, schema: pa.Schema, **config) -> DataFileWriter:
    """A data file writer into ``store`` for ``schema``, partitioned by its column ``p``."""
    return DataFileWriter(
        store, WriterConfig(schema=from_arrow_schema(schema), partition_columns=["p"], **config)
    )


def narrow_table(rows: int) -> pa.Table:
    ids = np.arange(rows, dtype=np.int64)
    return pa.table({"id": ids, "bucket": (ids % 97).astype(np.int32)})


def file_layout(table: DeltaTable) -> list[list[int]]:
    layouts = []
    for uri in table.file_uris():
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
        layouts.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        for i in range(meta.num_row_groups):
            for j in range(meta.num_columns):
                chunk = meta.row_group(i).column(j)
                assert chunk.has_column_index and chunk.has_offset_index, (uri, i, j)
    return layouts


def test_row_groups_of_128ki_rows_from_one_large_batch(tmp_path):
    data = narrow_table(ROWS)
    table = DeltaTable.create(str(tmp_path / "t"), data.schema, data=data)
    assert file_layout(table) == [[131_072] * 22 + [116_416]]
    assert table.to_arrow().sort_by("id").equals(data)


def test_row_groups_stay_whole_when_batches_do_not_divide_them(tmp_path):
    """Input in 100,000-row batches: the rows past a whole row group wait for the next batch
    instead of becoming a small row group of their own."""
    data = narrow_table(ROWS)
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=100_000))
    table = DeltaTable.create(str(tmp_path / "t"), data.schema, data=reader)
    assert file_layout(table) == [[131_072] * 22 + [116_416]]
    assert pa.table(deltalake.DeltaTable(table.uri).to_pyarrow_table()).sort_by("id").equals(data)
    # Page checksums are still written beside the page indexes.
    (uri,) = table.file_uris()
    verified = pq.ParquetFile(uri.removeprefix("file://"), page_checksum_verification=True)
    assert verified.read().num_rows == ROWS


def test_the_least_recently_written_file_is_the_one_closed(tmp_path):
    """Two files open at most, every batch written at once: partition a, written again before c
    arrives, keeps its file; b, the least recently written, is closed for c."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    store = MemoryStore()
    writer = writer_by_p(store, schema, row_group_bytes=1, max_open_files=2)
    for i, p in enumerate(["a", "b", "a", "c", "a", "b"]):
        writer.write(pa.table({"id": [i], "p": [p]}, schema=schema))
    adds = writer.close()
    files = sorted(
        (a.partition_values["p"], pq.read_table(pa.BufferReader(store.get(a.path))).column("id").to_pylist())
        for a in adds
    )
    # b was closed for c and came back: a new file; a kept one file throughout.
    assert files == [("a", [0, 2, 4]), ("b", [1]), ("b", [5]), ("c", [3])]
    assert writer.files_reopened == 1


def test_progress_of_a_long_write_is_logged(caplog):
    schema = pa.schema([("id", pa.int64()), ("p", pa.int64())])
    store = MemoryStore()
    writer = writer_by_p(store, schema, progress_seconds=0)  # every batch counts as long
    with caplog.at_level(logging.INFO, logger="deltaplane.engine.writer"):
        for start in (0, 500):
            ids = np.arange(start, start + 500, dtype=np.int64)
            writer.write(pa.table({"id": ids, "p": ids % 50}))
        adds = writer.close()
    assert len(adds) == 50
    messages = [r.getMessage() for r in caplog.records if r.name == "deltaplane.engine.writer"]
    assert any(m.startswith(f"writing {store.root}: 500 rows") for m in messages), messages
    assert any(m.startswith(f"writing {store.root}: 1000 rows") for m in messages), messages
    assert messages[-1].startswith(f"wrote {store.root}: 1000 rows"), messages
    assert "50 files written" in messages[-1]


def test_a_small_partition_in_every_batch_does_not_keep_the_batches_alive(tmp_path):
    """Buffered rows are slices of their input batch: a partition with one row per batch, never
    large enough to be written before the end, would keep every batch in memory. Memory held by
    the writer (Arrow's allocator, measured) stays within the budget, and the small partition
    still gets a single file."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("pad", pa.string())])
    budget = 4 * MiB
    writer = writer_by_p(
        LocalStore(str(tmp_path)),
        schema,
        row_group_bytes=1 * MiB,
        target_file_size=2 * MiB,
        buffer_budget=budget,
    )
    rows, batches = 20_000, 60
    baseline = pa.total_allocated_bytes()
    peak = 0
    for i in range(batches):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        kinds = np.where(ids % rows == 0, "small", "large")
        pad = np.char.add("row-", ids.astype(str))
        writer.write(pa.table({"id": ids, "p": kinds, "pad": np.char.ljust(pad, 40)}, schema=schema))
        del ids, kinds, pad
        peak = max(peak, pa.total_allocated_bytes() - baseline)
    adds = writer.close()
    # The budget, plus the batch being split (a copy sorted by partition) and what the Parquet
    # writer of the open file holds: far below the 60 batches (1.2 MB each) written.
    assert peak < budget + 4 * MiB, peak
    small = [a for a in adds if a.partition_values == {"p": "small"}]
    assert len(small) == 1
    data = pq.read_table(tmp_path / small[0].path)
    assert data.column("id").to_pylist() == [i * rows for i in range(batches)]
    total = sum(pq.read_metadata(tmp_path / a.path).num_rows for a in adds)
    assert total == rows * batches
