"""Filtered reads go row group by row group: groups whose Parquet statistics exclude the filter
are never decoded, the filter's columns are decoded first and the others only for the matching
rows. The rows must be exactly what a reader without any pruning returns: DuckDB over the same
files is the reference (it shares no code with the engine)."""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import os

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from deltalake import WriterProperties, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaplane.engine import DeltaTable
from deltaplane.engine.scan import file_path as scan_module

ROWS = 60_000
GROUP_ROWS = 5_000  # 12 row groups per file


def _data(start: int, rows: int) -> pa.Table:
    rng = np.random.default_rng(start + 7)
    k = np.arange(start, start + rows)
    nullable = pa.array([None if i % 11 == 0 else int(i % 500) for i in k], pa.int32())
    return pa.table(
        {
            "k": pa.array(k, pa.int64()),  # sorted: the clustered column
            "r": pa.array(rng.integers(0, 1_000, rows), pa.int64()),  # random: nothing prunes
            "s": pa.array([f"name-{i // 1000:04d}-é" for i in k]),
            "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(i // 2000)) for i in k], pa.date32()),
            "dec": pa.array([decimal.Decimal(int(i)) / 100 for i in k], pa.decimal128(12, 2)),
            "b": pa.array((k // GROUP_ROWS) % 2 == 0),
            "x": pa.array(rng.random(rows)),
            "n": nullable,
            # null in whole row groups: groups 0-5 have no value at all
            "late": pa.array([None if i < start + 6 * GROUP_ROWS else int(i) for i in k], pa.int64()),
        }
    )


@pytest.fixture(scope="module")
def grouped(tmp_path_factory) -> str:
    """A table of two files of many row groups each, written by delta-rs."""
    path = str(tmp_path_factory.mktemp("grouped") / "t")
    props = WriterProperties(max_row_group_size=GROUP_ROWS)
    write_deltalake(path, _data(0, ROWS), writer_properties=props)
    write_deltalake(path, _data(ROWS, ROWS), writer_properties=props, mode="append")
    return path


def _duckdb(path: str, where: str) -> list[tuple]:
    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    con = duckdb.connect()
    rows = con.execute(f"SELECT k FROM read_parquet({files!r}) WHERE {where} ORDER BY k").fetchall()
    return [r[0] for r in rows]


def _ours(table: DeltaTable, where: str) -> tuple[list[int], int]:
    scan = table.scan(filter=where)
    result = scan.to_table()
    return sorted(result.column("k").to_pylist()), scan.metrics.rows_read


def test_row_groups_the_statistics_exclude_are_not_read(grouped):
    table = DeltaTable(grouped)
    where = "k >= 30100 AND k < 30200"
    keys, rows_read = _ours(table, where)
    assert keys == _duckdb(grouped, where) == list(range(30100, 30200))
    # One file (file statistics) and one row group of it (row-group statistics).
    assert rows_read == GROUP_ROWS


def test_each_kind_of_statistic_prunes(grouped):
    table = DeltaTable(grouped)
    cases = {
        "s = 'name-0031-é'": 1,  # strings (non-ASCII bytes)
        "d = DATE '2024-01-16'": 1,  # dates
        "dec BETWEEN 300.00 AND 301.00": 1,  # decimals
        "late IS NOT NULL AND k < 40000": 2,  # null counts: groups 0-5 are all null
        "n IS NULL AND k < 5000": 1,
    }
    for where, groups in cases.items():
        keys, rows_read = _ours(table, where)
        assert keys == _duckdb(grouped, where), where
        assert rows_read == groups * GROUP_ROWS, where


def test_or_in_and_not_prune_as_file_skipping_does(grouped):
    table = DeltaTable(grouped)
    where = "k IN (7, 70007) OR (k > 119990 AND NOT (k = 119995))"
    keys, rows_read = _ours(table, where)
    assert keys == _duckdb(grouped, where)
    assert rows_read == 3 * GROUP_ROWS


def test_floats_and_unclustered_columns_are_read_whole_and_still_correct(grouped):
    table = DeltaTable(grouped)
    for where in ("x < 0.0001", "r = 999", "x > 2", "b AND r < 3"):
        keys, _ = _ours(table, where)
        assert keys == _duckdb(grouped, where), where


def test_batches_match_the_table(grouped, late_columns):
    table = DeltaTable(grouped)
    where = "k % 1000 = 3 AND k BETWEEN 10000 AND 90000"
    streamed = pa.Table.from_batches(list(table.to_batches(filter=where)))
    whole = table.to_arrow(filter=where)
    assert streamed.schema == whole.schema
    assert sorted(streamed.column("k").to_pylist()) == sorted(whole.column("k").to_pylist())
    assert sorted(whole.column("k").to_pylist()) == _duckdb(grouped, where)
    # every column, not just the key: the late columns line up with the filtered rows
    assert streamed.sort_by("k").equals(whole.sort_by("k"))


@pytest.fixture(params=["late", "late, small batches", "at once"])
def late_columns(request, monkeypatch):
    """Both ways of reading the other columns: after the filter (forced here; by default only
    for large row groups) and together with the filter's columns. Late columns are decoded
    batch by batch up to a group's last match: small batches make that stop inside groups."""
    if request.param.startswith("late"):
        monkeypatch.setattr(scan_module, "_LATE_ROWS", 0)
    if request.param == "late, small batches":
        monkeypatch.setattr(scan_module, "_PREFIX_BATCH_ROWS", 333)
    return request.param


def test_late_columns_line_up_with_their_rows(grouped, late_columns):
    """The columns read after the filter must belong to the rows the filter kept."""
    table = DeltaTable(grouped)
    where = "r < 5 OR k IN (5, 64999, 65000, 119999)"
    ours = table.to_arrow(filter=where).sort_by("k")
    files = sorted(glob.glob(os.path.join(grouped, "*.parquet")))
    query = f"SELECT * FROM read_parquet({files!r}) WHERE {where} ORDER BY k"
    reference = duckdb.connect().sql(query).to_arrow_table()
    assert ours.num_rows == reference.num_rows > 4
    for name in ("k", "r", "s", "d", "dec", "b", "x", "n", "late"):
        assert ours.column(name).to_pylist() == reference.column(name).to_pylist(), name


def test_deletion_vectors_apply_within_the_groups_read(tmp_path, late_columns):
    path = str(tmp_path / "t")
    write_deltalake(path, _data(0, ROWS), writer_properties=WriterProperties(max_row_group_size=GROUP_ROWS))
    table = DeltaTable(path)
    table.alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    table.delete("k % 3 = 0 AND k >= 20000")
    assert table.snapshot.files.column("deletion_vector").null_count == 0  # a DV, not a rewrite
    where = "k >= 24990 AND k < 25020"  # spans the boundary of groups 4 and 5
    keys, rows_read = _ours(table, where)
    assert keys == [k for k in range(24990, 25020) if k % 3 != 0]
    assert rows_read == 2 * GROUP_ROWS
    streamed = pa.Table.from_batches(list(table.to_batches(filter=where)))
    assert sorted(streamed.column("k").to_pylist()) == keys
    # the same object again after another delete: the new deletion vector is applied
    table.delete("k = 25001")
    keys_after, _ = _ours(table, where)
    assert keys_after == [k for k in keys if k != 25001]


def test_reused_table_sees_new_files(grouped, tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _data(0, ROWS), writer_properties=WriterProperties(max_row_group_size=GROUP_ROWS))
    table = DeltaTable(path)
    where = "k BETWEEN 59990 AND 60010"
    assert _ours(table, where)[0] == list(range(59990, 60000))
    table.append(_data(ROWS, 100))
    assert _ours(table, where)[0] == list(range(59990, 60011))


def test_a_column_missing_from_older_files(tmp_path):
    path = str(tmp_path / "t")
    props = WriterProperties(max_row_group_size=GROUP_ROWS)
    first = _data(0, 20_000).drop_columns(["late"])
    write_deltalake(path, first, writer_properties=props)
    second = _data(20_000, 40_000)  # late: null below 50,000
    write_deltalake(path, second, writer_properties=props, mode="append", schema_mode="merge")
    table = DeltaTable(path)
    assert _ours(table, "late IS NULL AND k < 100")[0] == list(range(100))
    keys, rows_read = _ours(table, "late = 55000")
    assert keys == [55000]
    # The old file has no such column (all null) and the new one's first six groups hold only
    # nulls: one group is read.
    assert rows_read == GROUP_ROWS


def test_an_unreadable_filter_names_the_file(grouped):
    table = DeltaTable(grouped)
    with pytest.raises(Exception) as caught:
        table.to_arrow(filter="s / 2 > 1 AND k > 100")
    assert "s" in str(caught.value)


_COMPARISONS = ["=", "!=", "<", "<=", ">", ">="]


@st.composite
def _predicates(draw, depth: int = 0) -> str:
    kinds = ["cmp", "cmp", "in", "null", "between"] + (["and", "or", "not"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "and" or kind == "or":
        return f"({draw(_predicates(depth + 1))} {kind.upper()} {draw(_predicates(depth + 1))})"
    if kind == "not":
        return f"NOT ({draw(_predicates(depth + 1))})"
    column = draw(st.sampled_from(["k", "r", "s", "d", "dec", "n", "late"]))
    values = {
        "k": st.integers(-10, 2 * ROWS + 10).map(str),
        "r": st.integers(-1, 1001).map(str),
        "s": st.integers(0, 125).map(lambda i: f"'name-{i:04d}-é'"),
        "d": st.integers(-2, 62).map(lambda i: f"DATE '{dt.date(2024, 1, 1) + dt.timedelta(days=i)}'"),
        "dec": st.integers(-100, 2 * ROWS + 100).map(lambda i: f"{decimal.Decimal(i) / 100}"),
        "n": st.integers(-1, 501).map(str),
        "late": st.integers(0, 2 * ROWS).map(str),
    }[column]
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == "in":
        items = draw(st.lists(values, min_size=1, max_size=4))
        return f"{column} {draw(st.sampled_from(['', 'NOT ']))}IN ({', '.join(items)})"
    if kind == "between":
        low, high = draw(values), draw(values)
        return f"{column} BETWEEN {low} AND {high}"
    return f"{column} {draw(st.sampled_from(_COMPARISONS))} {draw(values)}"


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(where=_predicates())
def test_any_predicate_returns_what_duckdb_returns(grouped, where):
    table = DeltaTable(grouped)
    keys, rows_read = _ours(table, where)
    assert keys == _duckdb(grouped, where)
    assert rows_read <= 2 * ROWS
