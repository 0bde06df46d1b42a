"""Scans: projection, streaming, conformance of old files to the table schema, and errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import DataFileError, InvalidPredicateError, SchemaError
from deltaplane.engine.scan import ScanBuilder
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import MemoryStore
from tests.logbuilder import add, metadata, protocol, simple_table, struct_schema, write_commit, write_parquet


@pytest.fixture
def table_path(tmp_path):
    path = str(tmp_path / "t")
    for i in range(5):
        batch = pa.table(
            {
                "id": pa.array(range(i * 1000, (i + 1) * 1000), pa.int64()),
                "part": pa.array([f"p{i % 2}"] * 1000),
                "value": pa.array([float(x) for x in range(1000)]),
            }
        )
        write_deltalake(path, batch, partition_by=["part"], mode="append")
    return path


def test_projection_and_order(table_path):
    t = DeltaTable(table_path)
    assert t.to_arrow().column_names == ["id", "part", "value"]
    only = t.to_arrow(columns=["value", "part"])
    assert only.column_names == ["value", "part"] and only.num_rows == 5000
    assert t.to_arrow(columns=["part"]).column("part").to_pylist().count("p0") == 3000
    with pytest.raises(SchemaError, match="unknown column 'nope'"):
        t.to_arrow(columns=["nope"])


def test_filter_on_unprojected_column(table_path):
    t = DeltaTable(table_path)
    out = t.to_arrow(columns=["value"], filter="id >= 4990 AND part = 'p0'")
    assert out.column_names == ["value"] and out.column("value").to_pylist() == [
        float(x) for x in range(990, 1000)
    ]


def test_streaming_batches_are_bounded(table_path):
    reader = DeltaTable(table_path).scan().to_batches(batch_size=300)
    sizes = [b.num_rows for b in reader]
    assert sum(sizes) == 5000 and max(sizes) <= 300
    assert len(sizes) >= 5000 // 300


def test_to_batches_matches_to_arrow(table_path):
    t = DeltaTable(table_path)
    streamed = t.to_batches(filter="value < 10").read_all()
    assert streamed.schema == t.schema
    assert sorted(streamed.column("id").to_pylist()) == sorted(
        t.to_arrow(filter="value < 10").column("id").to_pylist()
    )


def test_small_local_scans_read_file_by_file_on_the_calling_thread(table_path, monkeypatch):
    """Five local files of 1,000 rows are far below ``SMALL_SCAN_BYTES``: a whole read, a stream
    and a row-level command's read take them one by one on the calling thread, without Arrow's
    dataset scanner or a thread pool. Past the bound the same scan goes to the scanner."""
    from deltaplane.engine.scan import core, file_path

    scanner_calls: list[str] = []
    pool = core.ThreadPoolExecutor

    def no_pool(*args, **kwargs):
        raise AssertionError("a small scan started a thread pool")

    for module in (core, file_path):
        monkeypatch.setattr(module, "ThreadPoolExecutor", no_pool)
    for method in ("_read_dataset", "_dataset_batches"):
        monkeypatch.setattr(core.Scan, method, lambda self, *a, **k: scanner_calls.append("scanner"))
    t = DeltaTable(table_path)
    rows = t.to_arrow()
    streamed = pa.Table.from_batches(list(t.scan().to_batches(batch_size=300)))
    positions = list(t.scan().read_files_with_positions())
    assert scanner_calls == []
    for got in (rows, streamed, pa.concat_tables([r.table for _, r in positions])):
        assert sorted(got.column("id").to_pylist()) == list(range(5000))
        assert sorted(got.column("value").to_pylist()) == sorted([float(x) for x in range(1000)] * 5)
    assert [len(r.positions) for _, r in positions] == [1000] * 5

    monkeypatch.setattr(core, "SMALL_SCAN_BYTES", 1)
    for module in (core, file_path):
        monkeypatch.setattr(module, "ThreadPoolExecutor", pool)
    assert t.to_arrow().num_rows == 5000
    assert scanner_calls == ["scanner"]


def test_empty_results_keep_the_schema(table_path):
    t = DeltaTable(table_path)
    empty = t.to_arrow(filter="id < 0")
    assert empty.num_rows == 0 and empty.schema == t.schema
    assert t.to_batches(filter="id < 0").read_all().num_rows == 0


def test_old_files_conform_to_evolved_and_widened_schema():
    store = MemoryStore()
    # File written when "id" was an int and "extra" did not exist; the table now says long + extra.
    write_parquet(store, "old.parquet", pa.table({"id": pa.array([1, 2], pa.int32())}))
    write_parquet(
        store,
        "new.parquet",
        pa.table(
            {"id": pa.array([3], pa.int64()), "extra": ["x"], "ts": pa.array([1_000_000], pa.timestamp("ns"))}
        ),
    )
    schema = struct_schema(("id", "long"), ("extra", "string"), ("ts", "timestamp"))
    write_commit(store, 0, [protocol(), metadata(schema=schema), add("old.parquet"), add("new.parquet")])
    out = ScanBuilder(load_snapshot(store)).build().to_table()
    assert out.schema.field("id").type == pa.int64()
    assert out.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert sorted(out.to_pylist(), key=lambda r: r["id"])[0] == {"id": 1, "extra": None, "ts": None}


def test_missing_data_file_is_a_typed_error_naming_it():
    store = MemoryStore()
    simple_table(store, versions=2)
    store.delete("part-00001.parquet")
    with pytest.raises(DataFileError, match=r"part-00001\.parquet") as info:
        ScanBuilder(load_snapshot(store)).build().to_table()
    assert info.value.path == "part-00001.parquet"


def test_corrupt_data_file_is_a_typed_error():
    store = MemoryStore()
    simple_table(store, versions=1)
    store.put("part-00000.parquet", b"not parquet at all")
    with pytest.raises(DataFileError, match=r"part-00000\.parquet"):
        ScanBuilder(load_snapshot(store)).build().to_table()


def test_incompatible_column_type_is_a_typed_error():
    store = MemoryStore()
    write_parquet(store, "f.parquet", pa.table({"id": pa.array([[1]], pa.list_(pa.int64()))}))
    write_commit(store, 0, [protocol(), metadata(), add("f.parquet")])
    with pytest.raises(DataFileError, match="column 'id'"):
        ScanBuilder(load_snapshot(store)).build().to_table()


def test_bad_filter_is_a_typed_error(table_path):
    with pytest.raises(InvalidPredicateError):
        DeltaTable(table_path).to_arrow(filter="id >")


def test_file_uris_are_absolute_and_pruned(table_path):
    t = DeltaTable(table_path)
    uris = t.file_uris()
    assert len(uris) == 5 and all(u.startswith(table_path) for u in uris)
    assert len(t.file_uris(filter="part = 'p1'")) == 2
    assert len(t.file_uris(filter="id >= 4000")) == 1


def test_rows_with_deletion_vectors_are_dropped():
    from deltaplane.engine.deletion_vectors import serialize_bitmap, z85_encode

    store = MemoryStore()
    write_parquet(store, "f.parquet", pa.table({"id": pa.array(range(10), pa.int64())}))
    bitmap = serialize_bitmap([0, 3, 9])
    dv = {
        "storageType": "i",
        "pathOrInlineDv": z85_encode(bitmap),
        "sizeInBytes": len(bitmap),
        "cardinality": 3,
    }
    stats = {
        "numRecords": 10,
        "minValues": {"id": 0},
        "maxValues": {"id": 9},
        "nullCount": {"id": 0},
        "tightBounds": False,
    }
    features = ["deletionVectors"]
    write_commit(
        store, 0, [protocol(3, 7, features, features), metadata(), add("f.parquet", dv=dv, stats=stats)]
    )
    scan = ScanBuilder(load_snapshot(store)).build()
    assert sorted(scan.to_table().column("id").to_pylist()) == [1, 2, 4, 5, 6, 7, 8]
    assert scan.metrics.rows_deleted_by_dv == 3
    batches = ScanBuilder(load_snapshot(store)).build().to_batches(batch_size=4)
    assert sorted(batches.read_all().column("id").to_pylist()) == [1, 2, 4, 5, 6, 7, 8]


def test_where_a_deletion_vector_is_stored():
    """What a reader that decodes deletion vectors itself is told: the inline bitmap, or the file
    (relative to the root for ``u``, absolute for ``p``) and the frame's offset (1 when the log
    gives none)."""
    from deltaplane.engine import CorruptDeletionVectorError, stored_deletion_vector
    from deltaplane.engine.deletion_vectors import serialize_bitmap, z85_encode

    bitmap = serialize_bitmap([0, 3, 9])
    inline = stored_deletion_vector(
        {
            "storageType": "i",
            "pathOrInlineDv": z85_encode(bitmap),
            "sizeInBytes": len(bitmap),
            "cardinality": 3,
        }
    )
    assert inline.inline == bitmap and inline.location is None and inline.cardinality == 3
    uuid_dv = {"storageType": "u", "pathOrInlineDv": "ab" + "vCsfx6CJ%<SD+UrQyVi@", "sizeInBytes": 40}
    stored = stored_deletion_vector({**uuid_dv, "cardinality": 5, "offset": 17})
    assert stored.location.startswith("ab/deletion_vector_") and stored.location.endswith(".bin")
    assert (stored.offset, stored.size, stored.cardinality, stored.inline) == (17, 40, 5, None)
    assert stored_deletion_vector({**uuid_dv, "cardinality": 5}).offset == 1
    absolute = {
        "storageType": "p",
        "pathOrInlineDv": "s3://b/t/dv%20x.bin",
        "sizeInBytes": 9,
        "cardinality": 1,
    }
    assert stored_deletion_vector(absolute).location == "s3://b/t/dv x.bin"
    with pytest.raises(CorruptDeletionVectorError):
        stored_deletion_vector({**uuid_dv, "pathOrInlineDv": "short", "cardinality": 1})


def test_describe_counts_rows_and_deletions():
    from deltaplane.engine.describe import describe_snapshot

    store = MemoryStore()
    simple_table(store, versions=3, rows_per_file=4)
    info = describe_snapshot(load_snapshot(store))
    assert (info["num_files"], info["num_rows"], info["version"]) == (3, 12, 2)
    assert json.dumps(info)  # JSON-serializable for the CLI
