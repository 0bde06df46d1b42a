"""Delta Spark 4.4 reads what deltaplane writes, identically, at every version; then Delta Spark
writes on the same tables and deltaplane reads the result identically.

Every comparison is between the two implementations' own answers (rows, change data feed,
DESCRIBE HISTORY / DETAIL); nothing expected is computed by deltaplane alone. The helpers at the
top are shared with test_cross_write.py and test_concurrency.py."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.describe import describe_snapshot
from deltaplane.engine.errors import ConstraintViolationError
from tests.deltaspark.client import DeltaSparkError
from tests.deltaspark.compare import arrow_rows, dp_rows, sorted_rows, spark_rows

# --- shared helpers -----------------------------------------------------------------------------

CDF_META = ("_commit_timestamp",)


def assert_same_now(spark, path: str) -> list[dict[str, Any]]:
    """Both read the latest version identically."""
    ours, theirs = dp_rows(path), spark_rows(spark, path)
    assert ours == theirs, f"latest version {DeltaTable(path).version} differs"
    return ours


def assert_same_every_version(spark, path: str, first: int = 0) -> int:
    """Both read every version from ``first`` to the latest identically; returns the latest."""
    latest = DeltaTable(path).version
    for version in range(first, latest + 1):
        ours, theirs = dp_rows(path, version), spark_rows(spark, path, version)
        assert ours == theirs, f"version {version} differs"
    return latest


def dp_changes(path: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
    table = DeltaTable(path).changes(start, end)
    return sorted_rows([{k: v for k, v in row.items() if k not in CDF_META} for row in arrow_rows(table)])


def spark_changes(spark, path: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
    bounds = f"{start}" if end is None else f"{start}, {end}"
    rows = spark.sql(f"SELECT * FROM table_changes_by_path('{path}', {bounds})")
    return sorted_rows([{k: v for k, v in row.items() if k not in CDF_META} for row in rows])


def assert_same_changes(spark, path: str, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
    ours, theirs = dp_changes(path, start, end), spark_changes(spark, path, start, end)
    assert ours == theirs
    return ours


def assert_history_agrees(spark, path: str, *, timestamps: bool = False) -> list[dict[str, Any]]:
    """DESCRIBE HISTORY and deltaplane's history() agree on every commit's essentials (and, for
    in-commit timestamp tables, on its timestamp)."""
    theirs = spark.sql(f"DESCRIBE HISTORY delta.`{path}`")
    ours = DeltaTable(path).history()
    assert [h["version"] for h in theirs] == [h["version"] for h in ours]
    for spark_commit, commit in zip(theirs, ours, strict=True):
        assert spark_commit["operation"] == commit["operation"], commit["version"]
        assert spark_commit["isBlindAppend"] == commit.get("isBlindAppend"), commit["version"]
        assert spark_commit["readVersion"] == commit.get("readVersion"), commit["version"]
        assert spark_commit["operationMetrics"] == (commit.get("operationMetrics") or {}), commit["version"]
        parameters = {  # Delta Spark shows a map of strings: JSON text for other values
            k: v if v is None or isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in (commit.get("operationParameters") or {}).items()
        }
        assert spark_commit["operationParameters"] == parameters, commit["version"]
        if timestamps:
            millis = int(
                dt.datetime.fromisoformat(spark_commit["timestamp"]).replace(tzinfo=dt.UTC).timestamp() * 1000
            )
            assert millis == commit["timestamp"], commit["version"]
    return theirs


def assert_detail_agrees(spark, path: str) -> dict[str, Any]:
    """DESCRIBE DETAIL and deltaplane's describe agree on the table's essentials."""
    theirs = spark.sql(f"DESCRIBE DETAIL delta.`{path}`")[0]
    ours = describe_snapshot(DeltaTable(path).snapshot)
    protocol = ours["protocol"]
    features = set(protocol["reader_features"] or ()) | set(protocol["writer_features"] or ())
    assert theirs["id"] == ours["id"]
    assert theirs["name"] == ours["name"]
    assert theirs["description"] == ours["description"]
    assert theirs["partitionColumns"] == ours["partition_columns"]
    assert theirs["numFiles"] == ours["num_files"]
    assert theirs["sizeInBytes"] == ours["size_bytes"]
    assert theirs["properties"] == ours["properties"]
    assert theirs["minReaderVersion"] == protocol["min_reader_version"]
    assert theirs["minWriterVersion"] == protocol["min_writer_version"]
    if protocol["min_writer_version"] == 7:
        assert set(theirs["tableFeatures"]) == features
    return theirs


def copy_without_commits_before(path: str, dest: str, checkpoint_version: int) -> str:
    """A copy of the table without the commits before ``checkpoint_version``: whoever reads
    its latest version must read that checkpoint."""
    shutil.copytree(path, dest)
    log = Path(dest) / "_delta_log"
    for entry in log.iterdir():
        name = entry.name
        if name.endswith(".json") and name[:20].isdigit() and int(name[:20]) < checkpoint_version:
            entry.unlink()
        if name.endswith(".crc"):
            entry.unlink()
    return dest


def checkpoint_versions(path: str) -> list[int]:
    log = Path(path) / "_delta_log"
    return sorted({int(p.name[:20]) for p in log.glob("*.checkpoint*") if p.suffix in (".parquet", ".json")})


# --- deltaplane writes, Delta Spark reads -------------------------------------------------------


def _rows(ids, part=None, extra: int = 0) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "p": pa.array([part if part is not None else ("a" if i % 2 else "b") for i in ids], pa.string()),
            "v": pa.array([i * 10 + extra for i in ids], pa.int64()),
        }
    )


def test_deletion_vectors_and_cdf_both_ways(delta_spark, tmp_path):
    """DV DELETE / UPDATE / MERGE and copy-on-write DELETE by deltaplane with CDF on: Delta Spark
    reads each version and the change feed identically; then Delta Spark writes (INSERT, MERGE,
    OPTIMIZE, DELETE, UPDATE) and deltaplane reads every version and the feed identically."""
    path = str(tmp_path / "dv_cdf")
    table = DeltaTable.create(
        path,
        data=_rows(range(20)),
        partition_by=["p"],
        properties={
            "delta.enableDeletionVectors": "true",
            "delta.enableChangeDataFeed": "true",
        },
    )
    table.append(_rows(range(20, 30)))
    table.delete("id IN (3, 4, 25)")  # deletion vectors
    table.update({"v": "v + 1000"}, "id % 5 = 0")  # DV + new files
    source = _rows([1, 2, 40, 41], extra=7)
    (
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update({"v": "s.v"}, "s.id = 1")
        .when_matched_delete("s.id = 2")
        .when_not_matched_insert_all()
        .execute()
    )
    table.delete("id >= 28 AND id < 30", strategy="copy_on_write")
    table.checkpoint()
    table.delete("id = 7")  # after the checkpoint: a tail commit over it
    latest = assert_same_every_version(delta_spark, path)
    assert latest == 6
    changes = assert_same_changes(delta_spark, path, 0)
    assert {c["_change_type"] for c in changes} == {"insert", "delete", "update_preimage", "update_postimage"}
    assert_same_changes(delta_spark, path, 3, 5)
    assert_history_agrees(delta_spark, path)
    assert_detail_agrees(delta_spark, path)

    # Delta Spark writes on the same table; deltaplane reads every version.
    delta_spark.sql(f"INSERT INTO delta.`{path}` (id, p, v) VALUES (100, 'a', 1), (101, 'c', 2)")
    delta_spark.sql(
        f"MERGE INTO delta.`{path}` t USING (SELECT 5 AS id, 'c' AS p, 55 AS v UNION ALL "
        "SELECT 102, 'a', 3) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")
    delta_spark.sql(f"DELETE FROM delta.`{path}` WHERE id IN (8, 100)")
    delta_spark.sql(f"UPDATE delta.`{path}` SET v = -v WHERE id < 3")
    assert_same_every_version(delta_spark, path, latest + 1)
    assert_same_changes(delta_spark, path, 0)
    assert_history_agrees(delta_spark, path)
    assert_detail_agrees(delta_spark, path)
    # ...and deltaplane writes on top of Delta Spark's commits (its DVs, its OPTIMIZE).
    table = DeltaTable(path)
    table.delete("id IN (9, 101)")
    table.update({"v": "v * 2"}, "id = 102")
    assert_same_now(delta_spark, path)
    assert_same_changes(delta_spark, path, latest + 1)


@pytest.mark.parametrize("policy", ["classic", "v2"])
def test_checkpoints_and_in_commit_timestamps(delta_spark, tmp_path, policy):
    """deltaplane's checkpoints (classic or v2, written every checkpointInterval commits) on an
    in-commit-timestamp table: Delta Spark reads every version, reads the latest from the
    checkpoint alone, agrees on every commit's timestamp, and its own next checkpoint is read
    by deltaplane (also alone)."""
    path = str(tmp_path / f"cp_{policy}")
    properties = {
        "delta.checkpointInterval": "2",
        "delta.enableInCommitTimestamps": "true",
        "delta.enableDeletionVectors": "true",
    }
    if policy == "v2":
        properties["delta.checkpointPolicy"] = "v2"
    table = DeltaTable.create(path, data=_rows(range(5)), partition_by=["p"], properties=properties)
    for start in range(5, 20, 5):
        table.append(_rows(range(start, start + 5)))
    table.delete("id % 7 = 0")
    ours_cp = checkpoint_versions(path)
    assert ours_cp, "no checkpoint was written"
    if policy == "v2":
        assert "v2Checkpoint" in DeltaTable(path).protocol.reader_features
    seen = assert_same_every_version(delta_spark, path)
    assert_history_agrees(delta_spark, path, timestamps=True)
    assert_detail_agrees(delta_spark, path)

    # The latest version read from deltaplane's checkpoint alone (no commit before it left).
    table.checkpoint()
    alone = copy_without_commits_before(path, str(tmp_path / f"cp_{policy}_alone"), table.version)
    assert spark_rows(delta_spark, alone) == dp_rows(path)
    delta_spark.sql(f"INSERT INTO delta.`{alone}` (id, p, v) VALUES (1000, 'z', 1)")
    assert spark_rows(delta_spark, alone) == dp_rows(alone)

    # Delta Spark's own checkpoint, read by deltaplane (also alone).
    delta_spark.sql(f"INSERT INTO delta.`{path}` (id, p, v) VALUES (2000, 'a', 2)")
    delta_spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 11")
    delta_spark.checkpoint(path)
    spark_version = DeltaTable(path).version
    assert spark_version in checkpoint_versions(path)
    if policy == "v2":  # Delta Spark writes v2 checkpoints UUID-named, with sidecars
        assert list((Path(path) / "_delta_log").glob(f"{spark_version:020d}.checkpoint.*-*.*"))
    alone = copy_without_commits_before(path, str(tmp_path / f"cp_{policy}_spark_alone"), spark_version)
    assert dp_rows(alone) == spark_rows(delta_spark, path)
    assert_same_every_version(delta_spark, path, seen + 1)
    assert_history_agrees(delta_spark, path, timestamps=True)
    # deltaplane writes after Delta Spark's checkpoint; its next checkpoint is read by Spark.
    table = DeltaTable(path)
    table.append(_rows([3000, 3001]))
    table.checkpoint()
    alone = copy_without_commits_before(path, str(tmp_path / f"cp_{policy}_after"), table.version)
    assert spark_rows(delta_spark, alone) == dp_rows(path)


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_rename_and_drop(delta_spark, tmp_path, mode):
    """A column-mapped table deltaplane created (nested struct included): Delta Spark reads it,
    renames and drops columns; deltaplane reads every version, then writes on the renamed schema
    (append, DV delete, update) and Delta Spark reads that identically."""
    path = str(tmp_path / f"cm_{mode}")
    data = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "name": ["x", "y", None],
            "info": pa.array(
                [{"a": 1, "b": "p"}, {"a": None, "b": "q"}, None],
                pa.struct([("a", pa.int32()), ("b", pa.string())]),
            ),
            "day": pa.array([dt.date(2026, 1, 1), dt.date(2026, 1, 2), None], pa.date32()),
        }
    )
    table = DeltaTable.create(
        path,
        data=data,
        partition_by=["day"],
        properties={"delta.columnMapping.mode": mode, "delta.enableDeletionVectors": "true"},
    )
    more = pa.table(
        {
            "id": pa.array([4], pa.int64()),
            "name": ["w"],
            "info": pa.array([{"a": 4, "b": "r"}], pa.struct([("a", pa.int32()), ("b", pa.string())])),
            "day": pa.array([dt.date(2026, 1, 1)], pa.date32()),
        }
    )
    table.append(more)
    table.delete("id = 2")
    seen = assert_same_every_version(delta_spark, path)
    assert_detail_agrees(delta_spark, path)

    delta_spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN name TO label")
    delta_spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN info.b TO bee")
    delta_spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (extra STRING)")
    delta_spark.sql(
        f"INSERT INTO delta.`{path}` (id, label, info, day, extra) VALUES "
        "(5, 'v', named_struct('a', 5, 'bee', 's'), DATE'2026-01-03', 'e')"
    )
    delta_spark.sql(f"ALTER TABLE delta.`{path}` DROP COLUMN info.a")
    seen = assert_same_every_version(delta_spark, path, seen + 1)
    assert [f.name for f in DeltaTable(path).schema] == ["id", "label", "info", "day", "extra"]

    table = DeltaTable(path)
    table.append(
        pa.table(
            {
                "id": pa.array([6], pa.int64()),
                "label": ["six"],
                "info": pa.array([{"bee": "t"}], pa.struct([("bee", pa.string())])),
                "day": pa.array([dt.date(2026, 1, 2)], pa.date32()),
                "extra": ["f"],
            }
        )
    )
    table.delete("label = 'x'")
    table.update({"extra": "upper(label)"}, "id >= 5")
    assert_same_every_version(delta_spark, path, seen + 1)
    delta_spark.sql(f"ALTER TABLE delta.`{path}` DROP COLUMN label")
    table = DeltaTable(path)
    table.append(
        pa.table(
            {
                "id": pa.array([7], pa.int64()),
                "info": pa.array([None], pa.struct([("bee", pa.string())])),
                "day": pa.array([None], pa.date32()),
                "extra": ["g"],
            }
        )
    )
    assert_same_now(delta_spark, path)
    assert_detail_agrees(delta_spark, path)


SPECIALS = ["plain", "a b", "x/y", "100%", "ünï", "k=v", "c:d", "#h", "[br]", "", None]


def test_partition_values_and_types(delta_spark, tmp_path):
    """Partitions by string (null, empty, special characters), date and timestamp; data columns
    of nested types, decimals, timestamp_ntz, binary, floats: Delta Spark reads what deltaplane
    wrote, then appends the same kinds of value, and both read every version identically."""
    path = str(tmp_path / "types")
    n = len(SPECIALS)
    struct_t = pa.struct([("x", pa.int32()), ("tags", pa.list_(pa.string()))])
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "p": pa.array(SPECIALS, pa.string()),
            "d": pa.array([dt.date(2026, 1, 1 + i % 3) if i % 4 else None for i in range(n)], pa.date32()),
            "ts": pa.array(
                [
                    dt.datetime(2026, 3, 1, 12, 30, i, 123456, tzinfo=dt.UTC) if i % 5 else None
                    for i in range(n)
                ],
                pa.timestamp("us", "UTC"),
            ),
            "ntz": pa.array([dt.datetime(1999, 12, 31, 23, 59, i) for i in range(n)], pa.timestamp("us")),
            "amount": pa.array(
                [decimal.Decimal(f"{i}.{i:02d}") * (-1 if i % 2 else 1) for i in range(n)],
                pa.decimal128(12, 2),
            ),
            "big": pa.array(
                [
                    decimal.Decimal("12345678901234567890.123456789012345678") if i == 1 else None
                    for i in range(n)
                ],
                pa.decimal128(38, 18),
            ),
            "f": pa.array([float(i) / 3 for i in range(n)], pa.float64()),
            "b": pa.array([bytes([i, 255 - i]) for i in range(n)], pa.binary()),
            "nested": pa.array(
                [{"x": i, "tags": ["t", None] if i % 2 else []} if i != 2 else None for i in range(n)],
                struct_t,
            ),
            "m": pa.array(
                [[("k", i)] if i % 3 else None for i in range(n)], pa.map_(pa.string(), pa.int64())
            ),
            "arr": pa.array([[{"x": i, "tags": None}] for i in range(n)], pa.list_(struct_t)),
        }
    )
    table = DeltaTable.create(path, data=data, partition_by=["p", "d", "ts"])
    table.append(data.slice(0, 3))
    table.delete("p IS NULL OR p = 'x/y'")
    seen = assert_same_every_version(delta_spark, path)
    for condition in ["p IS NULL", "p = 'a b'", "d = DATE'2026-01-02'", "ts IS NULL", "p = '100%'"]:
        ours = sorted_rows(arrow_rows(DeltaTable(path).to_arrow(columns=["id"], filter=condition)))
        theirs = sorted_rows(delta_spark.sql(f"SELECT id FROM delta.`{path}` WHERE {condition}"))
        assert ours == theirs, condition
    assert_detail_agrees(delta_spark, path)

    delta_spark.sql(
        f"INSERT INTO delta.`{path}` VALUES (100, 'sp ace/%=', NULL, TIMESTAMP'2026-03-01 00:00:00', "
        "TIMESTAMP_NTZ'2000-01-01 00:00:00.5', -0.01, 1.000000000000000001, 0.5, X'00FF', "
        "named_struct('x', 1, 'tags', array('u')), map('k', 9), array()), "
        "(101, NULL, DATE'2026-01-01', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    )
    delta_spark.sql(f"DELETE FROM delta.`{path}` WHERE p = 'a b'")
    assert_same_every_version(delta_spark, path, seen + 1)
    table = DeltaTable(path)
    table.append(data.slice(3, 4))
    table.update({"amount": "amount * 2"}, "p = 'sp ace/%='")
    assert_same_now(delta_spark, path)


def test_schema_evolution_and_constraints(delta_spark, tmp_path):
    """Columns added by a merge-schema append and by ALTER, a widened table read by both; CHECK
    constraints and NOT NULL set by either side are enforced by the other."""
    path = str(tmp_path / "evolve")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int32())])
    table = DeltaTable.create(path, schema=schema)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([1, 2], pa.int32())}))
    table.append(
        pa.table({"id": pa.array([3], pa.int64()), "v": pa.array([3], pa.int32()), "note": ["n"]}),
        schema_mode="merge",
    )
    table.alter.add_columns([pa.field("score", pa.float64())])
    table.alter.add_constraint({"positive_v": "v > 0"})
    table.append(pa.table({"id": pa.array([4], pa.int64()), "v": pa.array([4], pa.int32()), "score": [0.5]}))
    seen = assert_same_every_version(delta_spark, path)
    assert_detail_agrees(delta_spark, path)
    assert_history_agrees(delta_spark, path)

    with pytest.raises(DeltaSparkError) as caught:
        delta_spark.sql(f"INSERT INTO delta.`{path}` (id, v) VALUES (5, -1)")
    assert "positive_v" in str(caught.value)
    with pytest.raises(DeltaSparkError):
        delta_spark.sql(f"INSERT INTO delta.`{path}` (id, v) VALUES (NULL, 1)")
    delta_spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT small_id CHECK (id < 100)")
    delta_spark.sql(f"INSERT INTO delta.`{path}` (id, v, note) VALUES (5, 5, 'spark')")
    delta_spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (tail STRING)")
    table = DeltaTable(path)
    with pytest.raises(ConstraintViolationError, match="small_id"):
        table.append(pa.table({"id": pa.array([500], pa.int64()), "v": pa.array([1], pa.int32())}))
    table.append(pa.table({"id": pa.array([6], pa.int64()), "v": pa.array([6], pa.int32()), "tail": ["t"]}))
    assert_same_every_version(delta_spark, path, seen + 1)
    assert_detail_agrees(delta_spark, path)
