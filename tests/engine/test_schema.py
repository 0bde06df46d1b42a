"""Delta schema JSON <-> model <-> Arrow."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltaplane.engine.errors import SchemaError
from deltaplane.engine.schema import (
    ArrayType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    from_arrow_schema,
    parse_schema,
    physical_schema,
    to_arrow_schema,
)

EVERY_TYPE = {
    "type": "struct",
    "fields": [
        {"name": "s", "type": "string", "nullable": True, "metadata": {}},
        {"name": "l", "type": "long", "nullable": False, "metadata": {}},
        {"name": "i", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "sh", "type": "short", "nullable": True, "metadata": {}},
        {"name": "b", "type": "byte", "nullable": True, "metadata": {}},
        {"name": "f", "type": "float", "nullable": True, "metadata": {}},
        {"name": "d", "type": "double", "nullable": True, "metadata": {}},
        {"name": "bo", "type": "boolean", "nullable": True, "metadata": {}},
        {"name": "bi", "type": "binary", "nullable": True, "metadata": {}},
        {"name": "dt", "type": "date", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "ntz", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
        {"name": "dec", "type": "decimal(38,18)", "nullable": True, "metadata": {}},
        {
            "name": "arr",
            "type": {"type": "array", "elementType": "integer", "containsNull": False},
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "m",
            "type": {
                "type": "map",
                "keyType": "string",
                "valueType": {
                    "type": "struct",
                    "fields": [{"name": "x", "type": "double", "nullable": True, "metadata": {}}],
                },
                "valueContainsNull": True,
            },
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "st",
            "type": {
                "type": "struct",
                "fields": [{"name": "inner", "type": "date", "nullable": True, "metadata": {"comment": "c"}}],
            },
            "nullable": True,
            "metadata": {},
        },
    ],
}

EXPECTED_ARROW = pa.schema(
    [
        pa.field("s", pa.string()),
        pa.field("l", pa.int64(), nullable=False),
        pa.field("i", pa.int32()),
        pa.field("sh", pa.int16()),
        pa.field("b", pa.int8()),
        pa.field("f", pa.float32()),
        pa.field("d", pa.float64()),
        pa.field("bo", pa.bool_()),
        pa.field("bi", pa.binary()),
        pa.field("dt", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ntz", pa.timestamp("us")),
        pa.field("dec", pa.decimal128(38, 18)),
        pa.field("arr", pa.list_(pa.field("element", pa.int32(), nullable=False))),
        pa.field("m", pa.map_(pa.string(), pa.field("value", pa.struct([("x", pa.float64())])))),
        pa.field("st", pa.struct([("inner", pa.date32())])),
    ]
)


def test_every_type_to_arrow():
    schema = parse_schema(json.dumps(EVERY_TYPE))
    assert to_arrow_schema(schema) == EXPECTED_ARROW
    assert schema.find("st").type.fields[0].metadata == {"comment": "c"}


def test_json_round_trip_is_exact():
    schema = parse_schema(json.dumps(EVERY_TYPE))
    assert schema.to_json() == EVERY_TYPE
    assert parse_schema(schema.to_json_string()) == schema


def test_from_arrow_round_trip():
    back = from_arrow_schema(EXPECTED_ARROW)
    assert to_arrow_schema(back) == EXPECTED_ARROW
    assert back.find("ntz").type == PrimitiveType("timestamp_ntz")
    assert back.find("ts").type == PrimitiveType("timestamp")
    assert from_arrow_schema(pa.schema([("x", pa.large_string())])).fields[0].type == PrimitiveType("string")


def test_types_delta_cannot_store():
    with pytest.raises(SchemaError):
        from_arrow_schema(pa.schema([("x", pa.uint64())]))
    with pytest.raises(SchemaError):
        from_arrow_schema(pa.schema([("x", pa.decimal256(50, 2))]))


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        '{"type":"array","elementType":"long"}',
        '{"type":"struct","fields":[{"name":"x","type":"uuid"}]}',
        '{"type":"struct","fields":[{"name":"x","type":"decimal(39,2)"}]}',
    ],
)
def test_bad_schemas_are_schema_errors(bad):
    with pytest.raises(SchemaError):
        parse_schema(bad)


def test_case_insensitive_find_prefers_exact():
    schema = StructType(
        (StructField("Id", PrimitiveType("long")), StructField("id", PrimitiveType("string")))
    )
    assert schema.find("id").type == PrimitiveType("string")
    assert schema.find("ID").name == "Id"
    assert schema.find("missing") is None


def test_physical_schema_uses_column_mapping_names():
    def cm(name, physical, fid, typ="long"):
        return {
            "name": name,
            "type": typ,
            "nullable": True,
            "metadata": {"delta.columnMapping.physicalName": physical, "delta.columnMapping.id": fid},
        }

    schema = parse_schema(
        json.dumps(
            {
                "type": "struct",
                "fields": [
                    cm("a", "col-1", 1),
                    cm("s", "col-2", 2, {"type": "struct", "fields": [cm("b", "col-3", 3)]}),
                    cm(
                        "arr",
                        "col-4",
                        4,
                        {
                            "type": "array",
                            "containsNull": True,
                            "elementType": {"type": "struct", "fields": [cm("c", "col-5", 5)]},
                        },
                    ),
                ],
            }
        )
    )
    phys = physical_schema(schema)
    assert phys.names == ["col-1", "col-2", "col-4"]
    assert phys.fields[1].type.names == ["col-3"]
    assert phys.fields[2].type.element_type.names == ["col-5"]
    assert schema.fields[0].field_id == 1


def test_decimal_and_nested_model():
    assert parse_schema('{"type":"struct","fields":[{"name":"d","type":"decimal","nullable":true}]}').fields[
        0
    ].type == DecimalType(10, 0)
    t = parse_schema(json.dumps(EVERY_TYPE))
    assert isinstance(t.find("arr").type, ArrayType) and isinstance(t.find("m").type, MapType)
