"""RENAME COLUMN and DROP COLUMNS against Delta Spark 4.4: deltaplane's commits must read in Delta
Spark as Delta Spark's own do (same names, rows, history, properties), Delta Spark must keep
writing the result, and the same ALTER made by each engine on identical tables must leave the same
schema and operation parameters. Expected values come from Delta Spark's answers."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa

from deltaplane.engine import DeltaTable
from tests.deltaspark.compare import dp_rows, spark_rows


def last_commit(spark, path: str) -> dict:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1")[0]


def twin_tables(spark, tmp_path, create: str, values: str) -> tuple[str, str]:
    """The same table twice, ``ours`` and ``theirs`` (a copy), as Delta Spark writes it:
    ``CREATE TABLE <path> <create>`` then ``INSERT INTO <path> VALUES <values>``."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    spark.sql(f"CREATE TABLE delta.`{ours}` {create}")
    spark.sql(f"INSERT INTO delta.`{ours}` VALUES {values}")
    shutil.copytree(ours, theirs)
    return ours, theirs


def alter_both(spark, ours: str, theirs: str, steps):
    """Each step's ALTER made by each engine: ``alter(table)`` by deltaplane on ``ours`` (the same
    table object each time, one ALTER after another), ``ALTER TABLE <theirs> <sql>`` by Delta
    Spark. Yields, after each step, its SQL and the last commit of each table, ours first."""
    table = DeltaTable(ours)
    for alter, sql in steps:
        alter(table)
        spark.sql(f"ALTER TABLE delta.`{theirs}` {sql}")
        yield sql, last_commit(spark, ours), last_commit(spark, theirs)


def logical_schema(path: str) -> list:
    """Names, types and nullability at every level, plus physical names (which must not move)."""

    def strip(t):
        if isinstance(t, dict) and t.get("type") == "struct":
            return [
                (
                    f["name"],
                    strip(f["type"]),
                    f["nullable"],
                    f["metadata"].get("delta.columnMapping.physicalName"),
                )
                for f in t["fields"]
            ]
        return t

    return strip(json.loads(DeltaTable(path).metadata.schema_string))


def test_renames_and_drops_read_and_written_by_delta_spark(delta_spark, tmp_path):
    ours, theirs = twin_tables(
        delta_spark,
        tmp_path,
        "(id BIGINT, b STRING, s STRUCT<x: INT, y: STRING>, day STRING) "
        "USING delta PARTITIONED BY (day) TBLPROPERTIES ('delta.columnMapping.mode'='name', "
        "'delta.dataSkippingStatsColumns'='id,b,s.x', 'delta.enableChangeDataFeed'='true')",
        "(1, 'b1', named_struct('x', 1, 'y', 'y1'), 'd1'), (2, 'b2', named_struct('x', 2, 'y', 'y2'), 'd2')",
    )
    alters = [
        (lambda t: t.alter.rename_column("b", "label"), "RENAME COLUMN b TO label"),
        (lambda t: t.alter.rename_column("s.x", "x_2"), "RENAME COLUMN s.x TO x_2"),
        (lambda t: t.alter.rename_column("day", "Dag"), "RENAME COLUMN day TO Dag"),
        (lambda t: t.alter.drop_columns(["s.y"]), "DROP COLUMN s.y"),
        (lambda t: t.alter.drop_columns(["label", "id"]), "DROP COLUMNS (label, id)"),
    ]
    for sql, mine, spark in alter_both(delta_spark, ours, theirs, alters):
        assert (mine["operation"], mine["operationParameters"]) == (
            spark["operation"],
            spark["operationParameters"],
        ), sql
        assert logical_schema(ours) == logical_schema(theirs), sql
        assert spark_rows(delta_spark, ours) == spark_rows(delta_spark, theirs) == dp_rows(ours), sql
    for key in ("delta.dataSkippingStatsColumns", "delta.columnMapping.maxColumnId"):
        assert DeltaTable(ours).metadata.configuration.get(key) == DeltaTable(
            theirs
        ).metadata.configuration.get(key), key
    assert DeltaTable(ours).metadata.partition_columns == DeltaTable(theirs).metadata.partition_columns

    # Delta Spark keeps writing the result; deltaplane reads it, and the other way round.
    delta_spark.sql(f"INSERT INTO delta.`{ours}` VALUES (named_struct('x_2', 3), 'd3')")
    DeltaTable(ours).append(
        pa.table({"s": pa.array([{"x_2": 4}], pa.struct([("x_2", pa.int32())])), "Dag": ["d4"]})
    )
    assert spark_rows(delta_spark, ours) == dp_rows(ours)
    assert len(dp_rows(ours)) == 4
    # A column added back under a dropped name is a new column: the old values stay gone.
    DeltaTable(ours).alter.add_columns(pa.field("b", pa.string()))
    assert {r["b"] for r in spark_rows(delta_spark, ours)} == {None}


def test_column_mapping_turned_on_as_delta_spark_turns_it_on(delta_spark, tmp_path):
    ours, theirs = twin_tables(
        delta_spark,
        tmp_path,
        "(id BIGINT, s STRUCT<x: INT, y: STRING>) USING delta",
        "(1, named_struct('x', 1, 'y', 'a'))",
    )
    DeltaTable(ours).alter.set_table_properties({"delta.columnMapping.mode": "name"})
    delta_spark.sql(
        f"ALTER TABLE delta.`{theirs}` SET TBLPROPERTIES ('delta.columnMapping.mode'='name', "
        "'delta.minReaderVersion'='2', 'delta.minWriterVersion'='5')"
    )
    assert logical_schema(ours) == logical_schema(theirs)
    for key in ("delta.columnMapping.mode", "delta.columnMapping.maxColumnId"):
        assert DeltaTable(ours).metadata.configuration[key] == DeltaTable(theirs).metadata.configuration[key]
    # Delta Spark renames in deltaplane's upgraded table and reads the old file under the new name.
    delta_spark.sql(f"ALTER TABLE delta.`{ours}` RENAME COLUMN s.y TO z")
    delta_spark.sql(f"INSERT INTO delta.`{ours}` VALUES (2, named_struct('x', 2, 'z', 'b'))")
    assert spark_rows(delta_spark, ours) == dp_rows(ours)
    assert sorted(r["s"]["z"] for r in dp_rows(ours)) == ["a", "b"]


def parameters(commit: dict) -> dict:
    """operationParameters with JSON values parsed (deltaplane's JSON is not always as compact)."""
    out = {}
    for key, value in commit["operationParameters"].items():
        try:
            out[key] = json.loads(value)
        except (TypeError, ValueError):
            out[key] = value
    return out


def full_schema(path: str) -> dict:
    return json.loads(DeltaTable(path).metadata.schema_string)


def test_type_widening_nullability_comments_and_positions_as_delta_spark_writes_them(delta_spark, tmp_path):
    ours, theirs = twin_tables(
        delta_spark,
        tmp_path,
        "(a INT, b STRING, s STRUCT<x: SMALLINT, y: STRING>, arr ARRAY<INT>, "
        "m MAP<STRING, INT>, d DECIMAL(5,2), n INT NOT NULL) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening'='true')",
        "(1, 'x', named_struct('x', 1, 'y', 'q'), array(1), map('k', 1), 1.25, 1)",
    )
    steps = [
        (lambda t: t.alter.change_column_type("a", "bigint"), "ALTER COLUMN a TYPE BIGINT"),
        (lambda t: t.alter.change_column_type("s.x", "int"), "ALTER COLUMN s.x TYPE INT"),
        (
            lambda t: t.alter.change_column_type("arr.element", "bigint"),
            "ALTER COLUMN arr.element TYPE BIGINT",
        ),
        (lambda t: t.alter.change_column_type("m.value", "bigint"), "ALTER COLUMN m.value TYPE BIGINT"),
        (lambda t: t.alter.change_column_type("d", "decimal(7,3)"), "ALTER COLUMN d TYPE DECIMAL(7,3)"),
        (lambda t: t.alter.drop_not_null("n"), "ALTER COLUMN n DROP NOT NULL"),
        (lambda t: t.alter.set_column_comment("b", "the b"), "ALTER COLUMN b COMMENT 'the b'"),
        (lambda t: t.alter.move_column("b", first=True), "ALTER COLUMN b FIRST"),
        (lambda t: t.alter.move_column("a", after="s"), "ALTER COLUMN a AFTER s"),
        (lambda t: t.alter.move_column("s.y", first=True), "ALTER COLUMN s.y FIRST"),
        (lambda t: t.alter.add_columns(pa.field("c", pa.int32()), first=True), "ADD COLUMNS (c INT FIRST)"),
        (
            lambda t: t.alter.add_columns(pa.field("e", pa.string()), after="n"),
            "ADD COLUMNS (e STRING AFTER n)",
        ),
    ]
    for sql, mine, spark in alter_both(delta_spark, ours, theirs, steps):
        assert full_schema(ours) == full_schema(theirs), sql
        assert mine["operation"] == spark["operation"], sql
        assert parameters(mine) == parameters(spark), sql
    assert DeltaTable(ours).protocol == DeltaTable(theirs).protocol
    assert spark_rows(delta_spark, ours) == spark_rows(delta_spark, theirs) == dp_rows(ours)
    delta_spark.sql(
        f"INSERT INTO delta.`{ours}` (b, a, s, arr, m, d, n, c, e) VALUES ('z', {2**40}, "
        "named_struct('y', 'w', 'x', 70000), array(5000000000), map('k', 5000000000), 12.345, NULL, 7, 'e')"
    )
    assert spark_rows(delta_spark, ours) == dp_rows(ours)
