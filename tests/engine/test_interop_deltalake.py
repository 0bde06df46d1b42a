"""Interop: tables written and modified by delta-rs (``deltalake``) read identically here.

For every version of every table, our read must equal delta-rs's own read of the same version
(as a multiset of rows), so the expected values come from another implementation.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from decimal import Decimal

import deltalake
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltaplane.engine import DeltaTable
from tests.helpers import assert_same_rows


def assert_every_version_matches(path: str) -> int:
    latest = deltalake.DeltaTable(path).version()
    for version in range(latest + 1):
        theirs = deltalake.DeltaTable(path, version=version).to_pyarrow_table()
        ours = DeltaTable(path, version=version).to_arrow()
        assert ours.num_rows == theirs.num_rows, f"version {version}"
        theirs = theirs.select(ours.column_names)
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
            theirs = theirs.cast(ours.schema)  # delta-rs may use view types or other units
        assert_same_rows(ours, theirs)
    return latest


def rich_batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "small": pa.array([i % 100 for i in ids], pa.int16()),
            "name": pa.array([None if i % 7 == 0 else f"name-{i}" for i in ids], pa.string()),
            "score": pa.array([i * 0.5 for i in ids], pa.float64()),
            "flag": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
            "day": pa.array([dt.date(2026, 1, 1 + i % 28) for i in ids], pa.date32()),
            "at": pa.array(
                [dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array([Decimal(i) / 100 for i in ids], pa.decimal128(12, 2)),
            "tags": pa.array([[f"t{i % 3}", f"u{i % 5}"] for i in ids], pa.list_(pa.string())),
            "info": pa.array(
                [{"a": i, "b": str(i)} for i in ids], pa.struct([("a", pa.int64()), ("b", pa.string())])
            ),
        }
    )


def test_partitioned_with_special_characters_and_nulls(tmp_path):
    path = str(tmp_path / "t")
    values = ["a b", "x/y", "100%", "é=ü", "", None, "tab\tnew"]
    for round_ in range(2):
        batch = rich_batch(round_ * 70, 70).append_column(
            "region", pa.array([values[i % len(values)] for i in range(70)], pa.string())
        )
        write_deltalake(path, batch, partition_by=["region"], mode="append")
    assert assert_every_version_matches(path) == 1
    ours = DeltaTable(path)
    assert ours.partition_columns == ["region"]
    nulls = ours.to_arrow(filter="region IS NULL")
    assert nulls.num_rows == 40  # "" and None both serialize to null
    assert ours.to_arrow(filter="region = 'x/y'").num_rows == 20


def test_typed_partition_columns(tmp_path):
    path = str(tmp_path / "t")
    table = rich_batch(0, 60)
    write_deltalake(path, table, partition_by=["day", "flag"], mode="append")
    assert_every_version_matches(path)
    ours = DeltaTable(path)
    assert ours.to_arrow(filter="day = '2026-01-03' AND flag").num_rows == len(
        [i for i in range(60) if 1 + i % 28 == 3 and i % 2 == 0]
    )
    day3_flags = {i % 2 == 0 for i in range(60) if 1 + i % 28 == 3}
    assert len(ours.file_uris(filter="day = '2026-01-03'")) == len(day3_flags)  # one per flag value
    late = {(1 + i % 28, i % 2 == 0) for i in range(60) if 1 + i % 28 >= 27}
    assert len(ours.file_uris(filter="day >= '2026-01-27'")) == len(late)


def test_checkpoints_and_many_versions(tmp_path):
    path = str(tmp_path / "t")
    for i in range(14):
        write_deltalake(path, rich_batch(i * 10, 10), mode="append")
        if i == 9:
            deltalake.DeltaTable(path).create_checkpoint()
    ours = DeltaTable(path)
    assert ours.snapshot.segment.checkpoint is not None
    assert ours.snapshot.segment.checkpoint.version == 9
    assert [c.version for c in ours.snapshot.segment.commits] == [10, 11, 12, 13]
    assert assert_every_version_matches(path) == 13


def test_schema_evolution_and_time_travel(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64())}), mode="append")
    write_deltalake(
        path,
        pa.table({"id": pa.array([3], pa.int64()), "extra": pa.array(["x"])}),
        mode="append",
        schema_mode="merge",
    )
    assert_every_version_matches(path)
    assert DeltaTable(path, version=0).schema.names == ["id"]
    latest = DeltaTable(path)
    assert latest.schema.names == ["id", "extra"]
    assert sorted(latest.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "extra": None},
        {"id": 2, "extra": None},
        {"id": 3, "extra": "x"},
    ]


def test_deletes_updates_and_overwrites(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, rich_batch(0, 100), mode="append")
    write_deltalake(path, rich_batch(100, 100), mode="append")
    dt_ = deltalake.DeltaTable(path)
    dt_.delete("id % 3 = 0")
    dt_.update(updates={"name": "'renamed'"}, predicate="id < 50")
    write_deltalake(path, rich_batch(1000, 10), mode="overwrite", predicate="id >= 150")  # replaceWhere
    deltalake.DeltaTable(path).delete("id = 1")
    latest = assert_every_version_matches(path)
    ours = DeltaTable(path)
    assert ours.snapshot.tombstones.num_rows > 0
    operations = [h.get("operation") for h in ours.history()]
    theirs = [h.get("operation") for h in deltalake.DeltaTable(path).history()]
    assert operations == theirs and len(operations) == latest + 1


def test_full_overwrite_then_read_old_version(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, rich_batch(0, 20), mode="append")
    write_deltalake(path, rich_batch(500, 5), mode="overwrite")
    assert DeltaTable(path).to_arrow().num_rows == 5
    assert DeltaTable(path, version=0).to_arrow().num_rows == 20
    assert_every_version_matches(path)


@pytest.mark.parametrize(
    "predicate",
    [
        "id > 150",
        "name IS NULL",
        "score BETWEEN 10 AND 20.5",
        "day = '2026-01-05'",
        "at >= '2026-01-01 00:01:00'",
        "amount < 0.5",
        "NOT flag AND id IN (1, 2, 3, 4, 199)",
        "name LIKE 'name-1%'",
        "info.a = 7",
    ],
)
def test_filters_agree_with_delta_rs(tmp_path, predicate):
    path = str(tmp_path / "t")
    for i in range(4):
        write_deltalake(path, rich_batch(i * 50, 50), mode="append")
    ours = DeltaTable(path).to_arrow(filter=predicate)
    ctx = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(path))
    theirs = pa.RecordBatchReader.from_stream(ctx.execute(f"SELECT * FROM t WHERE {predicate}")).read_all()
    theirs = theirs.select(ours.column_names).cast(ours.schema)
    assert_same_rows(ours, theirs)
