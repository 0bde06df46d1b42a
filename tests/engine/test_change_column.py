"""ALTER COLUMN / CHANGE COLUMN: type widening without rewriting files (recorded in
``delta.typeChanges``, also when a write widens a type by schema evolution), DROP NOT NULL,
comments and positions, nested fields; what Delta Spark refuses is refused. Checked against
Delta Spark in tests/deltaspark/test_alter_columns.py."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import InvalidArgumentError, SchemaError

WIDENING = {"delta.enableTypeWidening": "true"}
SCHEMA = pa.schema(
    [
        pa.field("a", pa.int32()),
        pa.field("s", pa.struct([("x", pa.int16()), ("y", pa.string())])),
        pa.field("arr", pa.list_(pa.int32())),
        pa.field("m", pa.map_(pa.string(), pa.int32())),
        pa.field("d", pa.decimal128(5, 2)),
        pa.field("n", pa.int32(), nullable=False),
    ]
)


def rows(k: int) -> pa.Table:
    import decimal

    return pa.table(
        {
            "a": pa.array([k], pa.int32()),
            "s": pa.array([{"x": k, "y": f"y{k}"}], SCHEMA.field("s").type),
            "arr": pa.array([[k]], pa.list_(pa.int32())),
            "m": pa.array([[("k", k)]], pa.map_(pa.string(), pa.int32())),
            "d": pa.array([decimal.Decimal(f"{k}.25")], pa.decimal128(5, 2)),
            "n": pa.array([k], pa.int32()),
        },
        schema=SCHEMA,
    )


def fields(t: DeltaTable) -> dict:
    return {f["name"]: f for f in json.loads(t.metadata.schema_string)["fields"]}


@pytest.fixture
def table(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties=WIDENING)
    t.append(rows(1))
    return t


def files(t: DeltaTable) -> set[str]:
    return set(t.snapshot.files.column("path").to_pylist())


def test_widening_rewrites_nothing_and_records_each_change(table):
    before = files(table)
    table.alter.change_column_type("a", "bigint")
    table.alter.change_column_type("s.x", pa.int32())
    table.alter.change_column_type("arr.element", "long")
    table.alter.change_column_type("m.value", "bigint")
    table.alter.change_column_type("d", "decimal(7,3)")
    table.alter.change_column_type("a", "decimal(20,0)")  # a second widening of the same column
    assert files(table) == before
    f = fields(table)
    assert f["a"]["type"] == "decimal(20,0)"
    assert f["a"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long"},
        {"fromType": "long", "toType": "decimal(20,0)"},
    ]
    assert f["s"]["type"]["fields"][0]["metadata"]["delta.typeChanges"] == [
        {"fromType": "short", "toType": "integer"}
    ]
    assert f["arr"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "element"}
    ]
    assert f["m"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "integer", "toType": "long", "fieldPath": "value"}
    ]
    assert f["d"]["metadata"]["delta.typeChanges"] == [{"fromType": "decimal(5,2)", "toType": "decimal(7,3)"}]
    assert "typeWidening" in table.protocol.writer_features
    got = DeltaTable(table.uri).to_arrow()  # the old file read under the wider types
    assert got.schema.field("a").type == pa.decimal128(20, 0) and str(got.column("a")[0].as_py()) == "1"
    assert got.schema.field("arr").type == pa.list_(pa.int64())
    assert str(got.column("d")[0].as_py()) == "1.250"
    assert table.history(1)[0]["operation"] == "CHANGE COLUMN"


def test_a_write_that_widens_records_the_change_too(table):
    wider = rows(2).set_column(0, "a", pa.array([2**40], pa.int64()))
    table.append(wider, schema_mode="merge")
    f = fields(table)
    assert f["a"]["type"] == "long"
    assert f["a"]["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert sorted(DeltaTable(table.uri).to_arrow().column("a").to_pylist()) == [1, 2**40]


def test_what_is_refused(tmp_path, table):
    plain = DeltaTable.create(str(tmp_path / "p"), SCHEMA)
    with pytest.raises(SchemaError, match=r"delta\.enableTypeWidening=true"):
        plain.alter.change_column_type("a", "bigint")
    with pytest.raises(SchemaError, match="only widenings"):
        table.alter.change_column_type("a", "smallint")
    table.alter.change_column_type("a", "double")  # int -> double is one
    with pytest.raises(SchemaError, match="from double to long"):
        table.alter.change_column_type("a", "bigint")
    with pytest.raises(SchemaError, match="only widenings"):
        table.alter.change_column_type("s.y", "int")
    with pytest.raises(SchemaError, match="NOT NULL"):
        table.alter.change_column("a", nullable=False)
    with pytest.raises(InvalidArgumentError, match="only its type"):
        table.alter.change_column("arr.element", comment="no")
    with pytest.raises(InvalidArgumentError, match="not a column type"):
        table.alter.change_column_type("a", "huge")
    with pytest.raises(InvalidArgumentError, match="no column 'zz'"):
        table.alter.change_column_type("zz", "bigint")
    with pytest.raises(InvalidArgumentError, match="no such column beside it"):
        table.alter.move_column("s.x", after="a")
    assert table.version() == 2


def test_not_null_dropped_comment_and_positions(table):
    table.alter.drop_not_null("n")
    table.append(rows(2).set_column(5, pa.field("n", pa.int32()), pa.array([None], pa.int32())))
    assert sorted(DeltaTable(table.uri).to_arrow().column("n").to_pylist(), key=str) == [1, None]
    table.alter.set_column_comment("s.y", "the y")
    assert fields(table)["s"]["type"]["fields"][1]["metadata"]["comment"] == "the y"
    table.alter.move_column("n", first=True)
    table.alter.move_column("a", after="d")
    table.alter.move_column("s.y", first=True)
    assert list(fields(table)) == ["n", "s", "arr", "m", "d", "a"]
    assert [f["name"] for f in fields(table)["s"]["type"]["fields"]] == ["y", "x"]
    assert table.history(1)[0]["operationParameters"]["position"] == "FIRST"
    got = DeltaTable(table.uri).to_arrow()
    assert got.column_names == ["n", "s", "arr", "m", "d", "a"]
    assert sorted(got.column("a").to_pylist()) == [1, 2]
    assert table.alter.change_column("a", comment=None).version == table.version()  # nothing to do


def test_columns_added_first_or_after_a_column(table):
    table.alter.add_columns(pa.field("z", pa.string()), first=True)
    table.alter.add_columns([pa.field("p", pa.int32()), pa.field("q", pa.int32())], after="A")
    assert list(fields(table)) == ["z", "a", "p", "q", "s", "arr", "m", "d", "n"]
    assert table.history(1)[0]["operationParameters"]["columns"].count('"position": "AFTER a"') == 2
    got = DeltaTable(table.uri).to_arrow()
    assert got.column_names == ["z", "a", "p", "q", "s", "arr", "m", "d", "n"]
    assert got.column("p").to_pylist() == [None] and got.column("a").to_pylist() == [1]
    with pytest.raises(InvalidArgumentError, match="no such column"):
        table.alter.add_columns(pa.field("r", pa.int32()), after="nope")
