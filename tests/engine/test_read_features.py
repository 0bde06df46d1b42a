"""Reader features exercised end to end on small hand-built or copied tables."""

from __future__ import annotations

import json
import shutil
import uuid

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.deletion_vectors import encode_uuid, frame_dv, serialize_bitmap
from deltaplane.engine.errors import CorruptDeletionVectorError
from deltaplane.engine.scan import ScanBuilder
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import LocalStore, MemoryStore
from tests.conftest import conformance_golden
from tests.logbuilder import (
    CHECKPOINT_TYPES,
    add,
    metadata,
    protocol,
    struct_schema,
    write_checkpoint,
    write_commit,
    write_parquet,
)

DV_FEATURES = ["deletionVectors"]


def _dv_file(path, rows: list[int]) -> tuple[str, int]:
    bitmap = serialize_bitmap(rows)
    with open(path, "wb") as f:
        f.write(b"\x01" + frame_dv(bitmap))
    return path, len(bitmap)


def test_absolute_path_deletion_vector(tmp_path):
    store = LocalStore(str(tmp_path / "t"))
    write_parquet(store, "f.parquet", pa.table({"id": pa.array(range(6), pa.int64())}))
    elsewhere = tmp_path / "dvs with space"
    elsewhere.mkdir()
    dv_path, size = _dv_file(str(elsewhere / "my.bin"), [1, 4])
    dv = {
        "storageType": "p",
        "pathOrInlineDv": "file://" + dv_path.replace(" ", "%20"),
        "offset": 1,
        "sizeInBytes": size,
        "cardinality": 2,
    }
    write_commit(store, 0, [protocol(3, 7, DV_FEATURES, DV_FEATURES), metadata(), add("f.parquet", dv=dv)])
    assert sorted(DeltaTable(store.root).to_arrow().column("id").to_pylist()) == [0, 2, 3, 5]


def test_relative_deletion_vector_with_random_prefix(tmp_path):
    store = LocalStore(str(tmp_path / "t"))
    write_parquet(store, "f.parquet", pa.table({"id": pa.array(range(4), pa.int64())}))
    u = uuid.uuid4()
    (tmp_path / "t" / "ab").mkdir()
    _, size = _dv_file(str(tmp_path / "t" / "ab" / f"deletion_vector_{u}.bin"), [0])
    dv = {
        "storageType": "u",
        "pathOrInlineDv": "ab" + encode_uuid(u),
        "offset": 1,
        "sizeInBytes": size,
        "cardinality": 1,
    }
    write_commit(store, 0, [protocol(3, 7, DV_FEATURES, DV_FEATURES), metadata(), add("f.parquet", dv=dv)])
    assert sorted(DeltaTable(store.root).to_arrow().column("id").to_pylist()) == [1, 2, 3]


def test_corrupt_deletion_vector_in_a_spark_table_names_the_file(tmp_path):
    source = conformance_golden() / "dv-partitioned-with-checkpoint" / "delta"
    table = tmp_path / "t"
    shutil.copytree(source, table)
    live = DeltaTable(str(table)).snapshot.files.column("deletion_vector").to_pylist()
    descriptor = next(d for d in live if d is not None)
    from deltaplane.engine.actions import DeletionVectorDescriptor
    from deltaplane.engine.deletion_vectors import dv_file_key

    dv_file = table / dv_file_key(DeletionVectorDescriptor.from_json(descriptor))
    data = bytearray(dv_file.read_bytes())
    data[-1] ^= 0xFF
    dv_file.write_bytes(bytes(data))
    with pytest.raises(CorruptDeletionVectorError) as info:
        DeltaTable(str(table)).to_arrow()
    assert info.value.path == dv_file.name


def test_stats_parsed_is_used_when_stats_json_is_absent():
    """A checkpoint written with writeStatsAsJson=false carries only typed stats."""
    store = MemoryStore()
    write_parquet(store, "low.parquet", pa.table({"id": pa.array([1, 2], pa.int64())}))
    write_parquet(store, "high.parquet", pa.table({"id": pa.array([100, 200], pa.int64())}))
    ids = pa.struct([("id", pa.int64())])
    stats_type = pa.struct(
        [("numRecords", pa.int64()), ("minValues", ids), ("maxValues", ids), ("nullCount", ids)]
    )
    add_type = pa.struct([*CHECKPOINT_TYPES["add"], ("stats_parsed", stats_type)])
    add_type = pa.struct([f for f in add_type if f.name != "stats"])

    def typed(path: str, lo: int, hi: int) -> dict:
        stats = {"numRecords": 2, "minValues": {"id": lo}, "maxValues": {"id": hi}, "nullCount": {"id": 0}}
        return {"add": dict(add(path)["add"], stats_parsed=stats)}

    actions = [protocol(), metadata(), typed("low.parquet", 1, 2), typed("high.parquet", 100, 200)]
    write_checkpoint(store, 0, actions, types={"add": add_type})
    store.put("_delta_log/00000000000000000000.json", b"")
    scan = ScanBuilder(load_snapshot(store)).where("id > 50").build()
    assert scan.files.column("path").to_pylist() == ["high.parquet"]
    assert scan.to_table().column("id").to_pylist() == [100, 200]


def test_variant_columns_read_as_their_struct_encoding():
    store = MemoryStore()
    variant = pa.struct(
        [pa.field("value", pa.binary(), nullable=False), pa.field("metadata", pa.binary(), nullable=False)]
    )
    write_parquet(
        store,
        "f.parquet",
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "v": pa.array([{"value": b"\x0c\x01", "metadata": b"\x01\x00"}], variant),
            }
        ),
    )
    schema = struct_schema(("id", "long"), ("v", "variant"))
    features = ["variantType"]
    write_commit(store, 0, [protocol(3, 7, features, features), metadata(schema=schema), add("f.parquet")])
    out = ScanBuilder(load_snapshot(store)).build().to_table()
    assert out.column("v").to_pylist() == [{"value": b"\x0c\x01", "metadata": b"\x01\x00"}]


def test_column_mapping_by_field_id_ignores_names():
    """In id mode a renamed column is found by its Parquet field id, whatever the file calls it."""
    store = MemoryStore()
    field = pa.field("old_physical_name", pa.int64(), metadata={b"PARQUET:field_id": b"7"})
    write_parquet(store, "f.parquet", pa.table([pa.array([10, 20], pa.int64())], schema=pa.schema([field])))
    schema = {
        "type": "struct",
        "fields": [
            {
                "name": "amount",
                "type": "long",
                "nullable": True,
                "metadata": {"delta.columnMapping.id": 7, "delta.columnMapping.physicalName": "col-renamed"},
            }
        ],
    }
    features = ["columnMapping"]
    write_commit(
        store,
        0,
        [
            protocol(3, 7, features, features),
            metadata(
                schema=schema,
                configuration={"delta.columnMapping.mode": "id", "delta.columnMapping.maxColumnId": "7"},
            ),
            add(
                "f.parquet",
                stats={"numRecords": 2, "minValues": {"col-renamed": 10}, "maxValues": {"col-renamed": 20}},
            ),
        ],
    )
    table = ScanBuilder(load_snapshot(store)).build().to_table()
    assert table.to_pylist() == [{"amount": 10}, {"amount": 20}]
    assert ScanBuilder(load_snapshot(store)).where("amount > 25").build().files.num_rows == 0
    assert json.loads(load_snapshot(store).metadata.schema_string)["fields"][0]["name"] == "amount"
