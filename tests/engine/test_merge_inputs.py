"""MERGE takes any source a write takes: pyarrow in every layout (large, view, dictionary),
Tables, RecordBatches, RecordBatchReaders, pandas (3, with its Arrow-backed strings) and Polars
DataFrames. A source that cannot be merged is a typed engine error naming the column, never a
raw pyarrow exception. Expected tables are written out by hand.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import DeltaError, SchemaMismatchError

TARGET = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("blob", pa.binary()),
        ("scores", pa.list_(pa.field("element", pa.int64()))),
    ]
)

# Target rows 1, 2; the source updates 2 and inserts 3.
EXPECTED = [
    {"id": 1, "name": "a", "blob": b"x", "scores": [1]},
    {"id": 2, "name": "B", "blob": b"Y", "scores": [20, 21]},
    {"id": 3, "name": "c", "blob": b"z", "scores": []},
]
PARIS = ZoneInfo("Europe/Paris")  # UTC+2 in June
SOURCE = {"id": [2, 3], "name": ["B", "c"], "blob": [b"Y", b"z"], "scores": [[20, 21], []]}


@pytest.fixture
def table(tmp_path) -> DeltaTable:
    t = DeltaTable.create(str(tmp_path / "t"), TARGET)
    t.append(
        pa.table(
            {"id": [1, 2], "name": ["a", "b"], "blob": [b"x", b"y"], "scores": [[1], [2]]}, schema=TARGET
        )
    )
    return t


def upsert(table: DeltaTable, source) -> None:
    (
        table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def rows(table: DeltaTable) -> list[dict]:
    return DeltaTable(table.uri).to_arrow().sort_by("id").to_pylist()


def _with(**types) -> pa.Table:
    """The source with some columns in another Arrow layout."""
    columns = {
        "id": pa.array(SOURCE["id"], types.get("id", pa.int64())),
        "name": pa.array(SOURCE["name"], types.get("name", pa.string())),
        "blob": pa.array(SOURCE["blob"], types.get("blob", pa.binary())),
        "scores": pa.array(SOURCE["scores"], types.get("scores", pa.list_(pa.int64()))),
    }
    return pa.table(columns)


SOURCES = {
    "table": lambda: _with(),
    "large_string": lambda: _with(name=pa.large_string()),
    "string_view": lambda: _with(name=pa.string_view()),
    "large_binary": lambda: _with(blob=pa.large_binary()),
    "binary_view": lambda: _with(blob=pa.binary_view()),
    "large_list": lambda: _with(scores=pa.large_list(pa.int64())),
    "list_view": lambda: _with(scores=pa.list_view(pa.int64())),
    "large_list_of_int32": lambda: _with(scores=pa.large_list(pa.int32())),
    "dictionary": lambda: _with(name=pa.dictionary(pa.int8(), pa.string())),
    "all_large": lambda: _with(
        name=pa.large_string(), blob=pa.large_binary(), scores=pa.large_list(pa.int64())
    ),
    "int32_key": lambda: _with(id=pa.int32()),
    "record_batch": lambda: _with(name=pa.large_string()).to_batches()[0],
    "reader": lambda: _with(name=pa.string_view(), blob=pa.large_binary()).to_reader(),
    "chunked": lambda: pa.concat_tables(
        [_with(name=pa.large_string()).slice(0, 1), _with(name=pa.large_string()).slice(1)]
    ),
    "pandas": lambda: pd.DataFrame(SOURCE),
    "pandas_arrow_dtypes": lambda: pd.DataFrame(SOURCE).convert_dtypes(dtype_backend="pyarrow"),
    "polars": lambda: pl.DataFrame(SOURCE),
    "polars_reordered": lambda: pl.DataFrame(SOURCE).select(["scores", "blob", "name", "id"]),
}


@pytest.mark.parametrize("kind", SOURCES)
def test_merge_accepts_every_source_a_write_accepts(table, kind):
    upsert(table, SOURCES[kind]())
    assert rows(table) == EXPECTED


def test_pandas_3_strings_are_what_the_source_holds():
    """The premise of the pandas case: pandas 3 hands Arrow large strings, not strings."""
    assert pa.Table.from_pandas(pd.DataFrame(SOURCE)).schema.field("name").type == pa.large_string()


def test_clause_conditions_and_assignments_on_a_large_string_source(table):
    source = pa.table(
        {
            "id": pa.array([1, 2, 4], pa.int32()),
            "name": pa.array(["a", "bb", "d"], pa.large_string()),
            "note": pa.array(["same", "changed", "new"], pa.string_view()),
        }
    )
    (
        table.merge(source, "t.id = s.id AND t.name <> 'zzz'", source_alias="s", target_alias="t")
        .when_matched_update({"name": "s.name", "blob": "t.blob"}, "s.name <> t.name")
        .when_not_matched_insert({"id": "s.id", "name": "s.note"}, "s.note = 'new'")
        .execute()
    )
    assert rows(table) == [
        {"id": 1, "name": "a", "blob": b"x", "scores": [1]},
        {"id": 2, "name": "bb", "blob": b"y", "scores": [2]},
        {"id": 4, "name": "new", "blob": None, "scores": None},
    ]


def test_a_string_key_joins_a_large_string_source(tmp_path):
    schema = pa.schema([("key", pa.string()), ("n", pa.int64())])
    t = DeltaTable.create(str(tmp_path / "k"), schema)
    t.append(pa.table({"key": ["a", "b"], "n": [1, 2]}, schema=schema))
    source = pd.DataFrame({"key": ["b", "c"], "n": [20, 30]})
    (
        t.merge(source, "t.key = s.key", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert DeltaTable(t.uri).to_arrow().sort_by("key").to_pylist() == [
        {"key": "a", "n": 1},
        {"key": "b", "n": 20},
        {"key": "c", "n": 30},
    ]


def test_an_int32_target_key_joins_a_pandas_int64_source(tmp_path):
    schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    t = DeltaTable.create(str(tmp_path / "i"), schema)
    t.append(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=schema))
    source = pd.DataFrame({"id": [2, 3, 2**40], "name": ["B", "c", "far"]})
    (
        t.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update({"name": "s.name"})
        .execute()
    )
    assert DeltaTable(t.uri).to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "B"},
    ]


def test_a_timestamp_source_in_another_unit_and_zone(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
    t = DeltaTable.create(str(tmp_path / "ts"), schema)
    t.append(pa.table({"id": [1], "at": [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]}, schema=schema))
    source = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "at": pa.array(
                [dt.datetime(2024, 6, 1, 12, tzinfo=PARIS), dt.datetime(2024, 6, 2, 12, tzinfo=PARIS)],
                pa.timestamp("ns", tz="Europe/Paris"),
            ),
        }
    )
    upsert(t, source)
    assert DeltaTable(t.uri).to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "at": dt.datetime(2024, 6, 1, 10, tzinfo=dt.UTC)},
        {"id": 2, "at": dt.datetime(2024, 6, 2, 10, tzinfo=dt.UTC)},
    ]


# --- sources that cannot be merged: typed errors naming the column ------------------------------


def _raises_naming(table: DeltaTable, source, column: str, error=SchemaMismatchError):
    with pytest.raises(error) as info:
        upsert(table, source)
    assert column in str(info.value)
    assert not isinstance(info.value, pa.ArrowException)
    assert DeltaTable(table.uri).version == 1  # nothing committed


def test_a_key_of_an_incomparable_type_is_a_schema_mismatch(table):
    _raises_naming(table, _with().set_column(0, "id", pa.array(["2", "3"])), "id")


def test_a_key_of_an_incomparable_type_from_pandas(table):
    frame = pd.DataFrame({**SOURCE, "id": ["2", "3"]})
    _raises_naming(table, frame, "id")


def test_a_column_delta_cannot_hold_is_a_schema_mismatch(table):
    source = _with().append_column("elapsed", pa.array([1, 2], pa.duration("s")))
    _raises_naming(table, source, "elapsed")


def test_a_value_column_of_the_wrong_type_is_a_schema_mismatch(table):
    source = _with().set_column(1, "name", pa.array([[1], [2]], pa.large_list(pa.int64())))
    _raises_naming(table, source, "name")


def test_timestamps_that_lose_precision_are_a_schema_mismatch(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
    t = DeltaTable.create(str(tmp_path / "ns"), schema)
    t.append(pa.table({"id": [1], "at": [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)]}, schema=schema))
    source = pa.table({"id": [1], "at": pa.array([1_700_000_000_000_000_001], pa.timestamp("ns", tz="UTC"))})
    with pytest.raises(SchemaMismatchError, match="'at'"):
        upsert(t, source)


def test_pandas_fractions_into_an_integer_key_are_a_schema_mismatch(table):
    frame = pd.DataFrame({**SOURCE, "id": [2.5, 3.0]})
    _raises_naming(table, frame, "id")


def test_an_object_that_is_not_data_is_an_engine_error(table):
    with pytest.raises(DeltaError):
        table.merge({"id": [1]}, "t.id = s.id", source_alias="s", target_alias="t")


@pytest.mark.parametrize("kind", SOURCES)
def test_writes_read_every_source_the_same_way(tmp_path, kind):
    """One normalisation for writes and MERGE: an append of each source gives its rows."""
    t = DeltaTable.create(str(tmp_path / "w"), TARGET)
    t.append(SOURCES[kind]())
    assert rows(t) == EXPECTED[1:]
