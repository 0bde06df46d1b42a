"""RENAME COLUMN and DROP COLUMNS on column-mapped tables: no file rewritten, old versions keep
their names, a dropped column's values never come back, and what Delta Spark refuses is refused
(checked against Delta Spark in tests/deltaspark/test_alter_columns.py)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.column_values import generated_column
from deltaplane.engine.errors import (
    ChangeDataSchemaError,
    InvalidArgumentError,
    SchemaError,
    TableReadOnlyError,
)

MAPPED = {"delta.columnMapping.mode": "name", "delta.enableChangeDataFeed": "true"}
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("b", pa.string()),
        ("s", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ("day", pa.string()),
    ]
)


def rows(ids, day="d1"):
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "b": [f"b{i}" for i in ids],
            "s": [{"x": i, "y": f"y{i}"} for i in ids],
            "day": [day] * len(ids),
        },
        schema=SCHEMA,
    )


@pytest.fixture
def table(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties=MAPPED, partition_by=["day"])
    t.append(rows([1, 2]))
    return t


def data_files(t: DeltaTable) -> set[str]:
    return set(t.snapshot.files.column("path").to_pylist())


def test_rename_keeps_files_and_old_versions_keep_old_names(table):
    files = data_files(table)
    result = table.alter.rename_column("b", "label")
    assert data_files(table) == files  # nothing rewritten
    assert table.history(1)[0]["operation"] == "RENAME COLUMN"
    assert table.history(1)[0]["operationParameters"] == {"oldColumnPath": "b", "newColumnPath": "label"}
    assert table.to_arrow().column_names == ["id", "label", "s", "day"]
    assert sorted(table.to_arrow().column("label").to_pylist()) == ["b1", "b2"]
    table.append(rows([3]).rename_columns(["id", "label", "s", "day"]))  # the same object again
    assert sorted(DeltaTable(table.uri).to_arrow().column("label").to_pylist()) == ["b1", "b2", "b3"]
    old = DeltaTable(table.uri, version=result.version - 1).to_arrow()
    assert "b" in old.column_names and "label" not in old.column_names
    assert table.to_arrow(filter="label = 'b2'").column("id").to_pylist() == [2]


def test_rename_nested_field_and_partition_column(table):
    table.alter.rename_column("s.x", "x2")
    table.alter.rename_column("DAY", "Day ü")  # case-insensitive lookup, a spaced unicode name
    fresh = DeltaTable(table.uri)
    assert fresh.metadata.partition_columns == ["Day ü"]
    got = fresh.to_arrow()
    assert got.schema.field("s").type == pa.struct([("x2", pa.int32()), ("y", pa.string())])
    assert sorted(r["x2"] for r in got.column("s").to_pylist()) == [1, 2]
    assert fresh.to_arrow(filter="`Day ü` = 'd1'").num_rows == 2
    fresh.append(pa.table({"id": [9], "Day ü": ["d2"]}))
    assert sorted(DeltaTable(table.uri).to_arrow().column("Day ü").to_pylist()) == ["d1", "d1", "d2"]


def test_drop_then_add_the_same_name_never_brings_the_values_back(table):
    files = data_files(table)
    table.alter.drop_columns(["b"])
    assert data_files(table) == files
    assert table.history(1)[0]["operation"] == "DROP COLUMNS"
    assert "b" not in table.to_arrow().column_names
    table.alter.add_columns(pa.field("b", pa.string()))
    assert table.to_arrow().column("b").to_pylist() == [None, None]  # a new column: new physical name
    table.alter.drop_column("s.y")
    assert table.to_arrow().schema.field("s").type == pa.struct([("x", pa.int32())])


def test_what_is_refused(tmp_path, table):
    plain = DeltaTable.create(str(tmp_path / "plain"), pa.schema([("a", pa.int32()), ("b", pa.int32())]))
    for attempt in (lambda: plain.alter.rename_column("a", "c"), lambda: plain.alter.drop_columns("a")):
        with pytest.raises(TableReadOnlyError, match=r"delta\.columnMapping\.mode"):
            attempt()
    with pytest.raises(SchemaError, match="already has a column named 'ID'"):
        table.alter.rename_column("b", "ID")
    with pytest.raises(InvalidArgumentError, match="no column 'nope'"):
        table.alter.rename_column("nope", "x")
    with pytest.raises(SchemaError, match="cannot drop partition column 'day'"):
        table.alter.drop_columns("day")
    table.alter.add_constraint({"positive": "s.x > 0"})
    with pytest.raises(SchemaError, match="CHECK constraint 'positive' reads it"):
        table.alter.rename_column("s", "t")
    with pytest.raises(SchemaError, match="CHECK constraint 'positive' reads it"):
        table.alter.drop_columns("s.x")
    with pytest.raises(SchemaError, match="every column"):
        one = DeltaTable.create(str(tmp_path / "one"), pa.schema([("a", pa.int32())]), properties=MAPPED)
        one.alter.drop_columns("a")
    gen = DeltaTable.create(
        str(tmp_path / "gen"),
        pa.schema([("a", pa.int32()), generated_column("g", pa.int32(), "a + 1")]),
        properties=MAPPED,
    )
    with pytest.raises(SchemaError, match="generated column 'g'"):
        gen.alter.rename_column("a", "z")
    clustered = DeltaTable.create(
        str(tmp_path / "c"),
        pa.schema([("a", pa.int32()), ("b", pa.int32())]),
        properties=MAPPED,
        cluster_by=["a"],
    )
    with pytest.raises(SchemaError, match="clustering column 'a'"):
        clustered.alter.drop_columns("a")
    clustered.alter.rename_column("a", "a2")  # the domain names physical columns: still clustered
    assert DeltaTable(clustered.uri).clustering_columns == ["a2"]
    assert table.version() == 2  # nothing refused was committed (create, append, constraint)


def test_stats_columns_property_follows(tmp_path):
    t = DeltaTable.create(
        str(tmp_path / "t"),
        SCHEMA,
        properties={**MAPPED, "delta.dataSkippingStatsColumns": "id,s.x"},
    )
    t.alter.rename_column("s.x", "x2")
    assert t.metadata.configuration["delta.dataSkippingStatsColumns"] == "id,s.x2"
    t.alter.drop_columns("id")
    assert t.metadata.configuration["delta.dataSkippingStatsColumns"] == "s.x2"


def test_the_change_feed_refuses_a_range_across_the_rename(table):
    before = table.version()
    table.alter.rename_column("b", "label")
    table.append(rows([3]).rename_columns(["id", "label", "s", "day"]))
    with pytest.raises(ChangeDataSchemaError) as error:
        table.changes(before)
    assert error.value.change_version == before + 1
    assert error.value.ranges == [(before, before), (before + 1, before + 2)]
    labels = table.changes(before + 1).column("label").to_pylist()
    assert labels == ["b3"]
    commit = json.loads(table._store.get(f"_delta_log/{before + 1:020d}.json").decode().splitlines()[0])[
        "commitInfo"
    ]
    assert commit["operation"] == "RENAME COLUMN"


def test_column_mapping_turned_on_for_a_table_with_data_then_renamed(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["day"])
    t.append(rows([1, 2]))
    files = data_files(t)
    t.alter.set_table_properties({"delta.columnMapping.mode": "name"})
    assert data_files(t) == files
    assert (t.protocol.min_reader_version, t.protocol.min_writer_version) >= (2, 5)
    fields = {f["name"]: f for f in json.loads(t.metadata.schema_string)["fields"]}
    assert fields["b"]["metadata"]["delta.columnMapping.physicalName"] == "b"  # the files' names
    nested = fields["s"]["type"]["fields"]
    assert [f["metadata"]["delta.columnMapping.physicalName"] for f in nested] == ["x", "y"]
    ids = [f["metadata"]["delta.columnMapping.id"] for f in [*fields.values(), *nested]]
    assert sorted(ids) == list(range(1, 7))
    assert t.metadata.configuration["delta.columnMapping.maxColumnId"] == "6"
    t.alter.rename_column("b", "label")
    t.alter.add_columns(pa.field("b", pa.string()))  # a new column gets a fresh physical name
    got = DeltaTable(t.uri).to_arrow()
    assert sorted(got.column("label").to_pylist()) == ["b1", "b2"]
    assert got.column("b").to_pylist() == [None, None]
    with pytest.raises(TableReadOnlyError, match="rewrites every data file"):
        t.alter.set_table_properties({"delta.columnMapping.mode": "none"})
    plain = DeltaTable.create(str(tmp_path / "p"), SCHEMA)
    with pytest.raises(TableReadOnlyError, match="only 'name'"):
        plain.alter.set_table_properties({"delta.columnMapping.mode": "id"})
