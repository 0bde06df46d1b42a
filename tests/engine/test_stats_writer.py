"""Statistics written for every file: truncation rules, timestamps, NaN, column selection."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from deltaplane.engine.schema import from_arrow_schema
from deltaplane.engine.stats import StatsCollector, stats_json, stats_leaves, truncate_max_string


def collect(table: pa.Table, **kwargs) -> dict:
    leaves = stats_leaves(list(from_arrow_schema(table.schema).fields), **kwargs)
    collector = StatsCollector(leaves)
    for batch in table.to_batches(max_chunksize=2):  # several updates per file
        collector.update(batch)
    return json.loads(collector.to_json())


def test_numbers_strings_nulls_across_batches():
    t = pa.table({"i": [5, None, -3, 9], "s": ["b", "a", None, "c"], "f": [1.5, 0.5, None, 2.0]})
    stats = collect(t)
    assert stats == {
        "numRecords": 4,
        "minValues": {"i": -3, "s": "a", "f": 0.5},
        "maxValues": {"i": 9, "s": "c", "f": 2.0},
        "nullCount": {"i": 1, "s": 1, "f": 1},
    }


def test_long_strings_are_truncated_with_a_tie_breaker():
    long_ascii = "x" * 40
    long_high = "y" * 32 + "é" + "z"
    t = pa.table({"s": ["a" * 35, long_ascii, long_high]})
    stats = collect(t)
    assert stats["minValues"]["s"] == "a" * 32
    assert stats["maxValues"]["s"] == "y" * 32 + "\U0010ffff"  # next char is above ASCII
    assert truncate_max_string(long_ascii, 32) == "x" * 32 + "\x7f"
    assert truncate_max_string("short", 32) == "short"
    assert stats["maxValues"]["s"] >= long_high


def test_timestamps_are_truncated_to_milliseconds():
    t = pa.table(
        {
            "ts": pa.array(
                [
                    dt.datetime(2026, 1, 1, 0, 0, 0, 123999, tzinfo=dt.UTC),
                    dt.datetime(2026, 1, 2, 0, 0, 0, 999, tzinfo=dt.UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "ntz": pa.array([dt.datetime(2026, 1, 1, 12, 0, 0, 500)], pa.timestamp("us")).take([0, 0]),
        }
    )
    stats = collect(t)
    assert stats["minValues"]["ts"] == "2026-01-01T00:00:00.123Z"
    assert stats["maxValues"]["ts"] == "2026-01-02T00:00:00.000Z"
    assert stats["minValues"]["ntz"] == "2026-01-01T12:00:00.000"


def test_nan_is_the_maximum_and_decimals_stay_exact():
    t = pa.table(
        {
            "f": [1.0, float("nan")],
            "d": pa.array([Decimal("12345678901234567.89"), Decimal("-1.00")], pa.decimal128(20, 2)),
        }
    )
    stats = collect(t)
    # Spark's order: NaN above every number (Delta Spark writes the same).
    assert stats["minValues"]["f"] == 1.0 and stats["maxValues"]["f"] == "NaN"
    assert stats["nullCount"]["f"] == 0
    text = StatsCollector(stats_leaves(list(from_arrow_schema(t.schema).fields)))
    text.update(t)
    assert '"d":12345678901234567.89' in text.to_json()
    assert stats_json({"x": Decimal("1.10")}) == '{"x":1.10}'


def test_booleans_and_binary_get_null_counts_only_and_nested_fields_are_leaves():
    t = pa.table({"b": [True, None], "bin": [b"x", b"y"], "st": [{"a": 1, "z": "q"}, {"a": None, "z": "r"}]})
    stats = collect(t)
    assert "b" not in stats["minValues"] and stats["nullCount"]["b"] == 1
    assert stats["minValues"]["st"] == {"a": 1, "z": "q"} and stats["nullCount"]["st"] == {"a": 1, "z": 0}


def test_indexed_column_limits():
    t = pa.table({"a": [1], "b": [2], "st": [{"x": 1, "y": 2}], "c": [3]})
    assert set(collect(t, num_indexed=3)["minValues"]) == {"a", "b", "st"}
    assert collect(t, num_indexed=3)["minValues"]["st"] == {"x": 1}  # nested leaves count one by one
    assert set(collect(t, num_indexed=-1)["minValues"]) == {"a", "b", "st", "c"}
    assert set(collect(t, stats_columns=["c", "st.y"])["minValues"]) == {"c", "st"}
    assert collect(t, stats_columns=["c", "st.y"])["minValues"]["st"] == {"y": 2}


def test_statistics_from_parquet_metadata_equal_those_computed_from_arrow():
    """The writer takes bounds from Parquet's own column statistics; they must agree with a
    direct computation over the same rows, for every type with bounds."""
    from deltaplane.engine.storage import MemoryStore
    from deltaplane.engine.writer import DataFileWriter, WriterConfig

    t = pa.table(
        {
            "i": pa.array([5, None, -3, 9], pa.int16()),
            "s": ["b" * 40, "a", None, "c"],
            "f": [1.5, 0.5, None, float("nan")],
            "d": pa.array([Decimal("1.10"), None, Decimal("-2.00"), Decimal("3.33")], pa.decimal128(5, 2)),
            "day": pa.array([dt.date(2026, 1, 2), dt.date(2026, 1, 1), None, None]),
            "ts": pa.array(
                [dt.datetime(2026, 1, 1, 0, 0, 0, 999, tzinfo=dt.UTC), None, None, None],
                pa.timestamp("us", tz="UTC"),
            ),
            "st": [{"a": 1}, None, {"a": None}, {"a": 4}],
            "arr": [[1], None, [], None],
        }
    )
    schema = from_arrow_schema(t.schema)
    leaves = stats_leaves(list(schema.fields))
    writer = DataFileWriter(
        MemoryStore(),
        WriterConfig(schema=schema, partition_columns=[], stats_leaves=leaves, row_group_bytes=1),
    )  # a row group per batch
    for batch in t.to_batches(max_chunksize=2):
        writer.write(pa.Table.from_batches([batch]))
    (add,) = writer.close()
    assert json.loads(add.stats) == collect(t)


def test_stats_json_reads_back_as_written_for_every_kind_of_value(monkeypatch):
    """Plain values take one json.dumps; decimals, non-finite floats and strings holding the
    words NaN or Infinity the value-by-value path, with the same result."""
    from deltaplane.engine import stats as stats_module

    plain = {
        "numRecords": 3,
        "minValues": {"größe": -1.5, "a.b": "plain", "s": 'q"uote\n', "n": None, "t": True},
        "maxValues": {"größe": 2.25, "a.b": "text", "s": "\u65e5", "n": None, "t": False},
        "nullCount": {"größe": 0, "a.b": 1, "s": 0, "n": 3, "t": 0},
    }
    by_value = stats_module._stats_json_by_value
    monkeypatch.setattr(stats_module, "_stats_json_by_value", None)  # the one-call path only
    assert json.loads(stats_json(plain)) == plain
    monkeypatch.setattr(stats_module, "_stats_json_by_value", by_value)
    words = {"minValues": {"a.b": "NaN inside"}, "maxValues": {"a.b": "Infinity"}}
    assert json.loads(stats_json(words)) == words
    special = {
        "minValues": {"x": float("nan"), "d": Decimal("-0.000123450")},
        "maxValues": {"x": float("inf")},
    }
    text = stats_json(special)
    assert json.loads(text) == {"minValues": {"x": "NaN", "d": -0.00012345}, "maxValues": {"x": "Infinity"}}
    assert '"d":-0.000123450' in text  # the decimal's own digits, not a float's


@pytest.mark.parametrize("chunked", [False, True], ids=["one-chunk", "chunked"])
@pytest.mark.parametrize(
    ("values", "low", "high"),
    [
        ([1.5, float("nan"), -3.0], -3.0, "NaN"),
        ([float("nan"), float("nan")], "NaN", "NaN"),
        ([float("nan"), None], "NaN", "NaN"),
        ([None, 2.5, float("nan"), None], 2.5, "NaN"),
        ([float("inf"), 0.0, float("-inf")], "-Infinity", "Infinity"),
        ([None, 4.0, 1.0], 1.0, 4.0),
    ],
)
@pytest.mark.parametrize("dtype", [pa.float64(), pa.float32()])
def test_float_bounds_put_nan_on_top_with_or_without_nulls(values, low, high, chunked, dtype):
    """Float bounds are computed from the rows (Parquet's leave NaN out): NaN is the maximum of a
    file holding one, and the minimum too when it holds nothing else; nulls are counted, not
    compared; the same whether the column comes in one chunk or several."""
    array = pa.array(values, dtype)
    column = pa.chunked_array([array.slice(0, 1), array.slice(1)]) if chunked else pa.chunked_array([array])
    table = pa.table({"x": column})
    collector = StatsCollector(stats_leaves(list(from_arrow_schema(table.schema).fields)))
    collector.update(table, parquet_bounds=True)
    stats = json.loads(collector.to_json())
    assert stats["minValues"]["x"] == low
    assert stats["maxValues"]["x"] == high
    assert stats["nullCount"]["x"] == values.count(None)
