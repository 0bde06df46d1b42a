"""NaN follows Spark SQL: NaN equals NaN and sorts above every other double, +inf included.

The expected rows are Delta Spark 4.4's answers for the same table and the same filters (run
by hand with tests/deltaspark/client.py; tests/deltaspark/test_hostile_stats.py checks them
live). The table mixes NaN with numbers in one file and holds NaN alone in others, so a wrong
skip and a wrong row evaluation both show.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table

NAN, INF = float("nan"), float("inf")
FILES = (
    [(1, 1.0), (2, NAN), (3, INF), (4, -5.0), (5, None)],
    [(6, NAN)],
    [(7, 2.0)],
    [(8, NAN)],
)

# filter -> ids Delta Spark returns
SPARK_ROWS = {
    "x > 0": [1, 2, 3, 6, 7, 8],
    "x = CAST('NaN' AS DOUBLE)": [2, 6, 8],
    "x != x": [],
    "x = x": [1, 2, 3, 4, 6, 7, 8],
    "x < CAST('Infinity' AS DOUBLE)": [1, 4, 7],
    "x > CAST('Infinity' AS DOUBLE)": [2, 6, 8],
    "x >= CAST('NaN' AS DOUBLE)": [2, 6, 8],
    "x < 3": [1, 4, 7],
    "NOT (x < 3)": [2, 3, 6, 8],
    "x IN ('NaN', 7)": [2, 6, 8],
    "x <=> CAST('NaN' AS DOUBLE)": [2, 6, 8],
    "x <> 1.0": [2, 3, 4, 6, 7, 8],
    "x BETWEEN 0 AND CAST('NaN' AS DOUBLE)": [1, 2, 3, 6, 7, 8],
    "greatest(x, 0) > 100": [2, 3, 6, 8],
    "f > 0": [1, 2, 3, 6, 7, 8],
    "f = CAST('NaN' AS FLOAT)": [2, 6, 8],
}


def _file(rows) -> pa.Table:
    ids = [i for i, _ in rows]
    xs = [x for _, x in rows]
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "x": pa.array(xs, pa.float64()), "f": pa.array(xs, pa.float32())}
    )


@pytest.fixture
def nan_table(tmp_path) -> str:
    uri = str(tmp_path / "t")
    for rows in FILES:
        write_table(uri, _file(rows), mode="append")
    return uri


@pytest.mark.parametrize("predicate", list(SPARK_ROWS))
def test_filters_return_spark_sql_rows(nan_table, predicate):
    got = DeltaTable(nan_table).to_arrow(filter=predicate).column("id").to_pylist()
    assert sorted(got) == SPARK_ROWS[predicate]


def test_delete_where_x_greater_than_zero_deletes_nan_rows(nan_table):
    DeltaTable(nan_table).delete("x > 0")
    assert sorted(DeltaTable(nan_table).to_arrow().column("id").to_pylist()) == [4, 5]


def test_delete_where_x_not_equal_x_deletes_nothing(nan_table):
    result = DeltaTable(nan_table).delete("x != x")
    assert int(result.operation_metrics.get("numDeletedRows", 0)) == 0
    assert sorted(DeltaTable(nan_table).to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5, 6, 7, 8]


def _stats(uri: str) -> list[dict]:
    out = []
    for commit in sorted(Path(uri, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            if '"add"' in line:
                out.append(json.loads(json.loads(line)["add"]["stats"]))
    return out


def test_statistics_record_nan_as_spark_does(nan_table):
    """NaN is the largest value (the maximum of a file holding one, the minimum too when it holds
    nothing else); NaN and infinities are JSON strings, as Delta Spark writes them."""
    stats = _stats(nan_table)
    for column in ("x", "f"):
        assert [s["minValues"][column] for s in stats] == [-5.0, "NaN", 2.0, "NaN"]
        assert [s["maxValues"][column] for s in stats] == ["NaN", "NaN", 2.0, "NaN"]
        assert [s["nullCount"][column] for s in stats] == [1, 0, 0, 0]


def test_infinities_are_json_strings(tmp_path):
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"x": [1.0, INF, -INF]}))
    commit = Path(uri, "_delta_log", "00000000000000000000.json").read_text()
    add = next(json.loads(line)["add"] for line in commit.splitlines() if '"add"' in line)
    assert '"minValues":{"x":"-Infinity"}' in add["stats"]
    assert '"maxValues":{"x":"Infinity"}' in add["stats"]


def test_files_are_skipped_by_spark_ordering(nan_table):
    """A file holding only NaN is skipped for ``x < 3`` (its minimum is NaN) and kept for
    ``x > 0``; a file whose maximum is +inf is skipped for ``x > +inf`` only when it holds no
    NaN."""
    table = DeltaTable(nan_table)
    assert len(table.file_uris(filter="x < 3")) == 2  # files 1 and 3
    assert len(table.file_uris(filter="x > 0")) == 4
    assert len(table.file_uris(filter="x > CAST('Infinity' AS DOUBLE)")) == 3  # not file 3
    assert len(table.file_uris(filter="x = CAST('NaN' AS DOUBLE)")) == 3


def test_checkpoint_stats_parsed_keep_nan(tmp_path):
    uri = str(tmp_path / "t")
    write_table(uri, _file(FILES[0]), properties={"delta.checkpoint.writeStatsAsJson": "false"})
    for rows in FILES[1:]:
        write_table(uri, _file(rows), mode="append")
    DeltaTable(uri).create_checkpoint()
    for commit in Path(uri, "_delta_log").glob("*.json"):
        commit.unlink()
    import pyarrow.parquet as pq

    checkpoint = pq.read_table(next(Path(uri, "_delta_log").glob("*.checkpoint.parquet")))
    adds = [a for a in checkpoint.column("add").to_pylist() if a is not None]
    maxima = sorted(
        a["stats_parsed"]["maxValues"]["x"] for a in adds if a["stats_parsed"]["minValues"]["x"] == 2.0
    )
    assert maxima == [2.0]
    assert sum(math.isnan(a["stats_parsed"]["maxValues"]["x"]) for a in adds) == 3
    table = DeltaTable(uri)
    assert len(table.file_uris(filter="x < 3")) == 2
    for predicate, ids in SPARK_ROWS.items():
        assert sorted(table.to_arrow(filter=predicate).column("id").to_pylist()) == ids, predicate


def test_data_files_carry_no_parquet_bounds_that_hide_nan(nan_table):
    """Parquet's float bounds leave NaN out; Delta Spark's Parquet reader prunes row groups on
    them and lost the NaN row of the first file for ``x = NaN``. Float columns get none; the
    others keep theirs."""
    import pyarrow.parquet as pq

    for uri in DeltaTable(nan_table).file_uris():
        metadata = pq.read_metadata(uri)
        for i in range(metadata.num_columns):
            column = metadata.row_group(0).column(i)
            has_bounds = column.statistics is not None and column.statistics.has_min_max
            assert has_bounds == (column.path_in_schema == "id"), column.path_in_schema


# json.loads below 64 files, pyarrow.json above, in 1 MiB blocks on threads beyond 2 MiB of text
@pytest.mark.parametrize("files", [10, 100, 40_000])
def test_statistics_with_non_finite_strings_parse_the_same_for_few_and_many_files(files):
    from deltaplane.engine.schema import PrimitiveType
    from deltaplane.engine.stats import parse_file_stats

    texts = [
        json.dumps(
            {
                "numRecords": 1,
                "minValues": {"x": ["NaN", "-Infinity", 1.5][i % 3], "s": ["NaN", 'a:"NaN"', "b"][i % 3]},
                "maxValues": {"x": ["NaN", "Infinity", 2.5][i % 3], "s": "z"},
            },
            indent=1 if i % 7 == 0 else None,  # a writer that puts newlines between members
        )
        for i in range(files)
    ]
    assert (sum(map(len, texts)) > 2 << 20) == (files == 40_000)
    stats = parse_file_stats(
        pa.table({"stats": texts}), {("x",): PrimitiveType("double"), ("s",): PrimitiveType("string")}
    )
    lows = stats.min_values[("x",)].to_pylist()
    highs = stats.max_values[("x",)].to_pylist()
    for i in range(files):
        expected_low = [NAN, -INF, 1.5][i % 3]
        expected_high = [NAN, INF, 2.5][i % 3]
        assert (math.isnan(lows[i]) and math.isnan(expected_low)) or lows[i] == expected_low
        assert (math.isnan(highs[i]) and math.isnan(expected_high)) or highs[i] == expected_high
    assert stats.min_values[("s",)].to_pylist() == [["NaN", 'a:"NaN"', "b"][i % 3] for i in range(files)]


def test_statistics_of_many_files_parse_in_threaded_blocks_even_with_a_line_longer_than_a_block(monkeypatch):
    """Beyond 2 MiB of text the statistics are parsed in 1 MiB blocks on threads; newlines inside
    a file's JSON and one file's statistics longer than a block (a 1.5 MB string bound) still
    take that path, not the row-by-row one."""
    from deltaplane.engine import stats as stats_module
    from deltaplane.engine.schema import PrimitiveType

    def refuse(*args, **kwargs):
        raise AssertionError("fell back to parsing row by row")

    monkeypatch.setattr(stats_module, "_parse_json_slowly", refuse)
    files = 40_000
    long_bound = "w" * 1_500_000
    texts = [
        json.dumps(
            {
                "numRecords": i,
                "minValues": {"x": i * 0.5, "s": long_bound if i == 777 else f"s{i}"},
                "maxValues": {"x": i * 0.5 + 1, "s": "z"},
                "nullCount": {"x": i % 3},
            },
            indent=1 if i % 11 == 0 else None,
        )
        for i in range(files)
    ]
    assert sum(map(len, texts)) > 2 << 20
    parsed = stats_module.parse_file_stats(
        pa.table({"stats": texts}), {("x",): PrimitiveType("double"), ("s",): PrimitiveType("string")}
    )
    assert parsed.num_records.to_pylist() == list(range(files))
    assert parsed.min_values[("x",)].to_pylist() == [i * 0.5 for i in range(files)]
    assert parsed.max_values[("x",)].to_pylist() == [i * 0.5 + 1 for i in range(files)]
    assert parsed.null_count[("x",)].to_pylist() == [i % 3 for i in range(files)]
    assert parsed.min_values[("s",)][777].as_py() == long_bound
