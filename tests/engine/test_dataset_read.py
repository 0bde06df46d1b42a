"""Whole-file reads of local tables go through Arrow's dataset scanner (engine/scan/dataset_path.py
``_read_dataset``); files that need the engine's conformance are read again on the engine's path
and spliced in at their place. Logs are built by hand, so every expected row is stated here.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import DataFileError
from deltaplane.engine.scan import Scan, ScanBuilder
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage.local import LocalStore
from tests.logbuilder import DV_FEATURES, add, inline_dv, metadata, protocol, struct_schema, write_commit

pytestmark = pytest.mark.usefixtures("dataset_scanner_for_small_scans")

SCHEMA = struct_schema(("id", "long"), ("name", "string"), ("p", "string"))


def parquet(root, name: str, table: pa.Table, **options) -> str:
    pq.write_table(table, os.path.join(root, name), **options)
    return name


@pytest.fixture
def whole_file_reads(monkeypatch):
    """Which files the engine's own whole-file path read (the real method runs)."""
    seen: list[str] = []
    whole, batches = Scan._read_whole, Scan._whole_file_batches

    def read_whole(self, plan, **kwargs):
        seen.append(plan.location)
        return whole(self, plan, **kwargs)

    def whole_file_batches(self, plan, *args, **kwargs):
        seen.append(plan.location)
        return batches(self, plan, *args, **kwargs)

    monkeypatch.setattr(Scan, "_read_whole", read_whole)
    monkeypatch.setattr(Scan, "_whole_file_batches", whole_file_batches)
    return seen


def mixed_table(root) -> LocalStore:
    """Six files in this order: plain; an int column from before a widening (with a DV); plain;
    upper-case column names (Spark matches them); plain with a DV; no rows at all."""
    ids, names = pa.int64(), pa.string()
    files = [
        parquet(root, "a.parquet", pa.table({"id": pa.array([0, 1, 2], ids), "name": ["a0", "a1", "a2"]})),
        parquet(root, "b.parquet", pa.table({"id": pa.array([3, 4], pa.int32()), "name": ["b3", "b4"]})),
        parquet(root, "c.parquet", pa.table({"id": pa.array([5], ids), "name": pa.array(["c5"], names)})),
        parquet(root, "d.parquet", pa.table({"ID": pa.array([6, 7], ids), "NAME": ["d6", "d7"]})),
        parquet(root, "e.parquet", pa.table({"id": pa.array([8, 9], ids), "name": [None, "e9"]})),
        parquet(root, "f.parquet", pa.table({"id": pa.array([], ids), "name": pa.array([], names)})),
    ]
    parts = [{"p": "x"}, {"p": "y"}, {"p": None}, {"p": "x"}, {"p": "é/z"}, {"p": "x"}]
    dvs = [None, inline_dv([0]), None, None, inline_dv([1]), None]
    store = LocalStore(str(root))
    actions = [protocol(3, 7, DV_FEATURES, DV_FEATURES), metadata(schema=SCHEMA, partition_columns=["p"])]
    actions += [add(f, partition_values=v, dv=dv) for f, v, dv in zip(files, parts, dvs, strict=True)]
    write_commit(store, 0, actions)
    return store


EXPECTED = [
    {"id": 0, "name": "a0", "p": "x"},
    {"id": 1, "name": "a1", "p": "x"},
    {"id": 2, "name": "a2", "p": "x"},
    {"id": 4, "name": "b4", "p": "y"},
    {"id": 5, "name": "c5", "p": None},
    {"id": 6, "name": "d6", "p": "x"},
    {"id": 7, "name": "d7", "p": "x"},
    {"id": 8, "name": None, "p": "é/z"},
]


def test_files_needing_conformance_are_read_again_and_keep_their_place(tmp_path, whole_file_reads):
    store = mixed_table(tmp_path)
    scan = ScanBuilder(load_snapshot(store)).build()
    out = scan.to_table()
    assert out.to_pylist() == EXPECTED  # file order, rows in file order
    assert out.schema.field("id").type == pa.int64()
    # Only the widened file and the upper-case one took the engine's per-file path.
    assert sorted(whole_file_reads) == ["b.parquet", "d.parquet"]
    assert (scan.metrics.files_read, scan.metrics.rows_read, scan.metrics.rows_deleted_by_dv) == (6, 10, 2)


def test_projections_and_partition_filters_on_the_dataset_path(tmp_path, whole_file_reads):
    store = mixed_table(tmp_path)
    table = DeltaTable(str(tmp_path))
    assert table.to_arrow(columns=["p", "id"]).to_pylist() == [{"p": r["p"], "id": r["id"]} for r in EXPECTED]
    assert table.to_arrow(columns=["p"]).num_rows == 8
    assert table.to_arrow(columns=[]).num_rows == 8
    only_x = table.to_arrow(filter="p = 'x'")
    assert only_x.to_pylist() == [r for r in EXPECTED if r["p"] == "x"]
    assert table.to_arrow(filter="p IS NULL").to_pylist() == [r for r in EXPECTED if r["p"] is None]
    assert load_snapshot(store).version == 0


def test_a_table_whose_first_file_needs_conforming_is_read_on_the_engine_path(tmp_path, whole_file_reads):
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
    ts = pa.array([when, None], pa.timestamp("us"))
    old = parquet(tmp_path, "old.parquet", pa.table({"ts": ts}), use_deprecated_int96_timestamps=True)
    new = parquet(tmp_path, "new.parquet", pa.table({"ts": pa.array([when], pa.timestamp("us", tz="UTC"))}))
    field = {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}}
    schema = {"type": "struct", "fields": [field]}
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [protocol(), metadata(schema=schema), add(old), add(new)])
    out = ScanBuilder(load_snapshot(store)).build().to_table()
    utc = when.replace(tzinfo=dt.UTC)
    assert out.column("ts").to_pylist() == [utc, None, utc]
    assert whole_file_reads == ["old.parquet", "new.parquet"]  # no scan of the files twice


def test_column_mapping_by_name_reads_physical_columns_under_logical_names(tmp_path, whole_file_reads):
    schema = {
        "type": "struct",
        "fields": [
            {
                "name": "renamed",
                "type": "long",
                "nullable": True,
                "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1"},
            },
            {
                "name": "added later",
                "type": "string",
                "nullable": True,
                "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-2"},
            },
        ],
    }
    first = parquet(tmp_path, "1.parquet", pa.table({"col-1": [1, 2]}))
    second = parquet(tmp_path, "2.parquet", pa.table({"col-1": [3], "col-2": ["three"]}))
    store = LocalStore(str(tmp_path))
    config = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"}
    write_commit(
        store,
        0,
        [protocol(2, 5), metadata(schema=schema, configuration=config), add(first), add(second)],
    )
    out = ScanBuilder(load_snapshot(store)).build().to_table()
    assert out.to_pylist() == [
        {"renamed": 1, "added later": None},
        {"renamed": 2, "added later": None},
        {"renamed": 3, "added later": "three"},
    ]
    assert whole_file_reads == []


def test_a_missing_or_corrupt_file_is_the_engines_typed_error(tmp_path):
    store = mixed_table(tmp_path)
    os.remove(tmp_path / "c.parquet")
    with pytest.raises(DataFileError, match=r"c\.parquet.*missing.*VACUUM"):
        ScanBuilder(load_snapshot(store)).build().to_table()
    (tmp_path / "c.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataFileError, match=r"c\.parquet.*not readable Parquet"):
        ScanBuilder(load_snapshot(store)).build().to_table()


def flip_a_bit(path: Path, marker: bytes, offset: int) -> None:
    """Flip the lowest bit of the byte ``offset`` bytes into the first ``marker`` in the file."""
    data = bytearray(path.read_bytes())
    data[data.index(marker) + offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_page_with_a_crc_is_an_error_not_wrong_rows(tmp_path):
    rows = pa.table({"id": pa.array(range(1000), pa.int64()), "name": [f"n{i}" for i in range(1000)]})
    name = parquet(tmp_path, "crc.parquet", rows, write_page_checksum=True, compression="none")
    flip_a_bit(tmp_path / name, b"n500", 1)  # inside a data page of the name column
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [protocol(), metadata(schema=SCHEMA), add(name, partition_values={"p": "x"})])
    with pytest.raises(DataFileError, match="CRC"):
        ScanBuilder(load_snapshot(store)).build().to_table()


def test_the_same_table_object_reads_right_after_appends_and_deletes(tmp_path):
    path = str(tmp_path / "t")
    first = pa.table({"id": pa.array(range(1000), pa.int64()), "g": pa.array([i % 3 for i in range(1000)])})
    table = DeltaTable.create(
        path, data=first, partition_by=["g"], properties={"delta.enableDeletionVectors": "true"}
    )
    assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(1000))
    table.append(pa.table({"id": pa.array(range(1000, 1500), pa.int64()), "g": pa.array([7] * 500)}))
    table.delete("id % 10 = 0")
    expected = [i for i in range(1500) if i % 10]
    got = table.to_arrow()
    assert sorted(got.column("id").to_pylist()) == expected
    assert all(r["g"] == (7 if r["id"] >= 1000 else r["id"] % 3) for r in got.to_pylist())
    assert table.to_arrow(columns=["g"]).num_rows == len(expected)
    table.delete("g = 7")
    assert sorted(table.to_arrow().column("id").to_pylist()) == [i for i in expected if i < 1000]


def test_a_read_of_no_columns_still_counts_the_rows_on_both_paths(tmp_path):
    from deltaplane.engine.storage import MemoryStore
    from tests.logbuilder import simple_table

    memory = MemoryStore()  # the engine's per-file path
    simple_table(memory, versions=3)
    assert ScanBuilder(load_snapshot(memory)).select([]).build().to_table().num_rows == 9
    store = mixed_table(tmp_path)  # the dataset path, with two files spliced in
    assert ScanBuilder(load_snapshot(store)).select([]).build().to_table().num_rows == 8
    assert DeltaTable(str(tmp_path)).to_arrow(columns=[]).num_rows == 8


@pytest.mark.parametrize("batch_size", [1, 2, 1000])
def test_batches_stream_the_same_rows_in_file_order(tmp_path, whole_file_reads, batch_size):
    store = mixed_table(tmp_path)
    scan = ScanBuilder(load_snapshot(store)).build()
    batches = list(scan.to_batches(batch_size=batch_size))
    assert all(0 < b.num_rows <= batch_size for b in batches)
    assert pa.Table.from_batches(batches).to_pylist() == EXPECTED
    assert sorted(whole_file_reads) == ["b.parquet", "d.parquet"]
    assert (scan.metrics.files_read, scan.metrics.rows_read, scan.metrics.rows_deleted_by_dv) == (6, 10, 2)
    table = DeltaTable(str(tmp_path))
    assert sum(b.num_rows for b in table.to_batches(columns=[])) == 8
    only_x = pa.Table.from_batches(list(table.to_batches(filter="p = 'x'")))
    assert only_x.to_pylist() == [r for r in EXPECTED if r["p"] == "x"]


def test_a_stream_that_meets_a_missing_file_hands_over_the_rows_before_it_then_the_error(tmp_path):
    store = mixed_table(tmp_path)
    os.remove(tmp_path / "e.parquet")
    got: list[dict] = []
    with pytest.raises(DataFileError, match=r"e\.parquet.*missing"):
        for batch in ScanBuilder(load_snapshot(store)).build().to_batches(batch_size=1):
            got.extend(batch.to_pylist())
    assert got == [r for r in EXPECTED if r["p"] != "é/z"]  # every row of the files before it, once


def test_a_stream_that_meets_a_corrupt_row_group_hands_over_each_row_before_it_once(tmp_path):
    rows = pa.table({"id": pa.array(range(1000), pa.int64()), "name": [f"n{i:04}" for i in range(1000)]})
    first = parquet(tmp_path, "first.parquet", rows.slice(0, 10), write_page_checksum=True)
    name = parquet(
        tmp_path, "crc.parquet", rows, write_page_checksum=True, compression="none", row_group_size=500
    )
    flip_a_bit(tmp_path / name, b"n0700", 2)  # a data page of the second row group
    store = LocalStore(str(tmp_path))
    adds = [add(first, partition_values={"p": "a"}), add(name, partition_values={"p": "b"})]
    write_commit(store, 0, [protocol(), metadata(schema=SCHEMA), *adds])
    got: list[int] = []
    with pytest.raises(DataFileError, match=r"crc\.parquet.*CRC"):
        for batch in ScanBuilder(load_snapshot(store)).build().to_batches(batch_size=100):
            got.extend(batch.column("id").to_pylist())
    assert got == list(range(10)) + list(range(500))  # the first file, then the good row group


@pytest.mark.parametrize("where", ["first", "second"])
def test_a_file_with_two_columns_of_one_name_is_a_typed_error_on_both_paths(tmp_path, where):
    good = parquet(tmp_path, "good.parquet", pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]}))
    doubled = pa.Table.from_arrays(
        [pa.array([5]), pa.array([6]), pa.array(["x"])], names=["id", "id", "name"]
    )
    bad = parquet(tmp_path, "bad.parquet", doubled)
    files = [bad, good] if where == "first" else [good, bad]
    store = LocalStore(str(tmp_path))
    write_commit(
        store, 0, [protocol(), metadata(schema=SCHEMA), *(add(f, partition_values={"p": "a"}) for f in files)]
    )
    with pytest.raises(DataFileError, match=r"bad\.parquet.*2 columns named 'id'") as info:
        ScanBuilder(load_snapshot(store)).build().to_table()
    assert info.value.path == "bad.parquet"
    with pytest.raises(DataFileError, match=r"bad\.parquet.*2 columns named 'id'"):
        list(ScanBuilder(load_snapshot(store)).build().to_batches())


def test_a_data_file_path_that_is_a_directory_is_a_typed_error(tmp_path):
    store = mixed_table(tmp_path)
    os.remove(tmp_path / "c.parquet")
    os.mkdir(tmp_path / "c.parquet")
    with pytest.raises(DataFileError, match=r"c\.parquet") as info:
        ScanBuilder(load_snapshot(store)).build().to_table()
    assert info.value.path == "c.parquet"
    with pytest.raises(DataFileError, match=r"c\.parquet"):
        list(ScanBuilder(load_snapshot(store)).build().to_batches())


def test_a_stream_over_large_files_reads_them_one_at_a_time_on_the_engine_path(
    tmp_path, whole_file_reads, monkeypatch
):
    """Reading ahead across files is for small files; a stream over large ones must stay within
    a batch's memory (the quality gate validates staged batches larger than memory this way)."""
    import deltaplane.engine.scan.dataset_path as scan_module

    store = mixed_table(tmp_path)
    monkeypatch.setattr(scan_module, "_STREAM_FILE_BYTES", 99)  # every file of the table is larger
    scan = ScanBuilder(load_snapshot(store)).build()
    assert pa.Table.from_batches(list(scan.to_batches(batch_size=2))).to_pylist() == EXPECTED
    assert whole_file_reads == [f"{c}.parquet" for c in "abcdef"]
