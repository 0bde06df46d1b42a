"""Partition values: every type, nulls, both timestamp forms."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from deltaplane.engine.errors import SchemaError
from deltaplane.engine.partitions import parse_partition_values
from deltaplane.engine.schema import DecimalType, PrimitiveType


@pytest.mark.parametrize(
    ("type_name", "raw", "expected"),
    [
        ("string", ["a b", "", None, "x=y/%"], ["a b", None, None, "x=y/%"]),
        ("long", ["-5", "", "9223372036854775807"], [-5, None, 9223372036854775807]),
        ("integer", ["7", None], [7, None]),
        ("short", ["-3"], [-3]),
        ("byte", ["127"], [127]),
        ("double", ["1.5", "NaN", ""], [1.5, "nan", None]),
        ("float", ["0.25"], [0.25]),
        ("boolean", ["true", "false", "TRUE", ""], [True, False, True, None]),
        ("date", ["2021-09-08", "2021-09-08 00:00:00", ""], [dt.date(2021, 9, 8)] * 2 + [None]),
        ("binary", ["\u0001\u0002"], [b"\x01\x02"]),
        (
            "timestamp",
            ["2021-09-08 11:11:11", "1970-01-01T00:00:00.123456Z", "2021-09-08T04:11:11.000-07:00", ""],
            [
                dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC),
                dt.datetime(1970, 1, 1, 0, 0, 0, 123456, tzinfo=dt.UTC),
                dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC),
                None,
            ],
        ),
        ("timestamp_ntz", ["2021-09-08 11:11:11.5"], [dt.datetime(2021, 9, 8, 11, 11, 11, 500000)]),
    ],
)
def test_parse(type_name, raw, expected):
    out = parse_partition_values(pa.array(raw, pa.string()), PrimitiveType(type_name)).to_pylist()
    if "nan" in expected:
        assert out[1] != out[1]  # NaN
        out[1] = expected[1] = None
    assert out == expected


def test_decimal_and_all_null_input():
    out = parse_partition_values(pa.array(["-1.23", ""]), DecimalType(5, 2))
    assert out.to_pylist() == [Decimal("-1.23"), None]
    nulls = parse_partition_values(pa.nulls(3), PrimitiveType("long"))
    assert nulls.type == pa.int64() and nulls.null_count == 3


@pytest.mark.parametrize(("type_name", "raw"), [("long", "abc"), ("boolean", "yes"), ("date", "09/08/2021")])
def test_unparseable_values_are_schema_errors(type_name, raw):
    with pytest.raises(SchemaError):
        parse_partition_values(pa.array([raw]), PrimitiveType(type_name))
