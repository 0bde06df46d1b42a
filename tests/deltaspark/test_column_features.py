"""Generated, default and identity columns between Delta Spark 4.4 and deltaplane: tables made by
either are written by both, and each reads what the other wrote. Expected rows come from the
other implementation (or are plain literals), never from deltaplane's own computation."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.column_values import default_column, generated_column, identity_column
from deltaplane.engine.errors import ConstraintViolationError, SchemaMismatchError
from tests.deltaspark.compare import dp_rows, spark_rows


def _high_water_mark(path: str) -> int | None:
    fields = json.loads(DeltaTable(path).metadata.schema_string)["fields"]
    return next(f["metadata"].get("delta.identity.highWaterMark") for f in fields if f["name"] == "id")


def _x(*values) -> pa.Array:
    return pa.array(list(values), pa.int32())


def test_spark_table_written_by_both(delta_spark, tmp_path):
    path = str(tmp_path / "spark_made")
    delta_spark.sql(
        f"CREATE TABLE delta.`{path}` "
        "(id BIGINT GENERATED ALWAYS AS IDENTITY (START WITH 10 INCREMENT BY 5), x INT, "
        "y INT GENERATED ALWAYS AS (x * 2), z STRING DEFAULT 'd') USING delta "
        "TBLPROPERTIES ('delta.feature.allowColumnDefaults'='supported')"
    )
    delta_spark.sql(f"INSERT INTO delta.`{path}` (x) VALUES (1), (2)")
    spark_hwm = _high_water_mark(path)

    dt = DeltaTable(path)
    dt.append(pa.table({"x": _x(3, 4)}))
    dt.append(pa.table({"x": _x(5), "z": ["mine"]}))  # same object again
    assert _high_water_mark(path) > spark_hwm
    with pytest.raises(SchemaMismatchError):
        dt.append(pa.table({"id": [1], "x": _x(6)}))
    with pytest.raises(ConstraintViolationError):
        dt.append(pa.table({"x": _x(6), "y": _x(13)}))

    dt.update({"x": "x + 100"}, "x = 1")
    (
        dt.merge(pa.table({"x": _x(2, 7)}), "t.x = s.x", source_alias="s", target_alias="t")
        .when_matched_update({"x": "s.x + 1000"})
        .when_not_matched_insert({"x": "s.x"})
        .execute()
    )
    ours = dp_rows(path)
    assert ours == spark_rows(delta_spark, path)
    # What Delta Spark computes for the same x values: y = x * 2, z default.
    for row in ours:
        assert row["y"] == row["x"] * 2
    assert sorted(r["z"] for r in ours) == ["d"] * 5 + ["mine"]

    # Delta Spark keeps inserting after deltaplane's high-water mark: no identity value repeats.
    delta_spark.sql(f"INSERT INTO delta.`{path}` (x) VALUES (8), (9)")
    rows = spark_rows(delta_spark, path)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 8
    assert all((i - 10) % 5 == 0 for i in ids)
    assert dp_rows(path) == rows
    DeltaTable(path).append(pa.table({"x": _x(10)}))
    ids = [r["id"] for r in spark_rows(delta_spark, path)]
    assert len(ids) == len(set(ids)) == 9


def test_deltaplane_table_written_by_spark(delta_spark, tmp_path):
    path = str(tmp_path / "dp_made")
    schema = pa.schema(
        [
            identity_column("id", start=100, step=-2),
            pa.field("x", pa.int32()),
            generated_column("y", pa.int64(), "CAST(x AS BIGINT) + 1"),
            default_column("z", pa.string(), "'dflt'"),
        ]
    )
    dt = DeltaTable.create(path, schema, properties={"delta.feature.allowColumnDefaults": "supported"})
    dt.append(pa.table({"x": _x(1, 2)}))
    delta_spark.sql(f"INSERT INTO delta.`{path}` (x) VALUES (3)")
    delta_spark.sql(f"INSERT INTO delta.`{path}` (x, z) VALUES (4, 'spark')")
    dt = DeltaTable(path)
    dt.append(pa.table({"x": _x(5)}))
    rows = spark_rows(delta_spark, path)
    assert rows == dp_rows(path)
    ids = sorted(r["id"] for r in rows)
    assert len(set(ids)) == 5 and all((100 - i) % 2 == 0 and i <= 100 for i in ids)
    assert [(r["x"], r["y"], r["z"]) for r in sorted(rows, key=lambda r: r["x"])] == [
        (1, 2, "dflt"),
        (2, 3, "dflt"),
        (3, 4, "dflt"),
        (4, 5, "spark"),
        (5, 6, "dflt"),
    ]
    # Delta Spark enforces deltaplane's generation expression.
    with pytest.raises(Exception, match=r"(?i)generat|constraint|check"):
        delta_spark.sql(f"INSERT INTO delta.`{path}` (x, y) VALUES (6, 99)")


def test_generated_date_partition_from_spark(delta_spark, tmp_path):
    path = str(tmp_path / "dates")
    delta_spark.sql(
        f"CREATE TABLE delta.`{path}` (ts TIMESTAMP, d DATE GENERATED ALWAYS AS (CAST(ts AS DATE)), "
        "yr INT GENERATED ALWAYS AS (YEAR(ts))) USING delta PARTITIONED BY (d)"
    )
    delta_spark.sql(f"INSERT INTO delta.`{path}` (ts) VALUES (TIMESTAMP '2026-01-02 03:04:05')")
    import datetime as datetime_module

    ts = datetime_module.datetime(2026, 5, 6, 7, 8, tzinfo=datetime_module.UTC)
    DeltaTable(path).append(pa.table({"ts": pa.array([ts], pa.timestamp("us", "UTC"))}))
    assert dp_rows(path) == spark_rows(delta_spark, path)


def test_restore_keeps_the_identity_high_water_mark_as_delta_spark_does(delta_spark, tmp_path):
    """RESTORE to a version from before values were handed out: the next values follow the
    highest mark ever committed, whichever engine restores and whichever inserts next."""
    ours, theirs = str(tmp_path / "restored_here"), str(tmp_path / "restored_by_spark")
    for path in (ours, theirs):
        delta_spark.sql(
            f"CREATE TABLE delta.`{path}` (id BIGINT GENERATED ALWAYS AS IDENTITY, x INT) USING delta"
        )
        delta_spark.sql(f"INSERT INTO delta.`{path}` (x) VALUES (1), (2)")  # v1: ids 1, 2
        delta_spark.sql(f"INSERT INTO delta.`{path}` (x) VALUES (3), (4), (5)")  # v2: mark 5
    DeltaTable(ours).restore(1)
    delta_spark.sql(f"RESTORE TABLE delta.`{theirs}` TO VERSION AS OF 1")
    assert _high_water_mark(ours) == _high_water_mark(theirs)

    delta_spark.sql(f"INSERT INTO delta.`{ours}` (x) VALUES (6)")
    DeltaTable(theirs).append(pa.table({"x": _x(6)}))
    for path in (ours, theirs):
        rows = spark_rows(delta_spark, path)
        assert rows == dp_rows(path)
        new_id = next(r["id"] for r in rows if r["x"] == 6)
        assert new_id > 5, f"{path}: identity value {new_id} was handed out before the restore"
