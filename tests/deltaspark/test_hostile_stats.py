"""Statistics and predicates against Delta Spark 4.4 (issue 24, section 3).

deltaplane writes tables whose column names hold dots, back-quotes, spaces and unicode at every
nesting level (a top-level ``a.b`` beside struct ``a``'s field ``b``: tests/engine/test_stats_paths.py
builds them), and tables holding NaN and infinities (tests/engine/test_nan_semantics.py). Delta
Spark reads them, skips files by the statistics deltaplane wrote, filters and deletes; every
answer is compared with deltaplane's own on the same table. A Delta Spark-written NaN table is
read by deltaplane the same way. Few tests, each covering many predicates: a statement costs
Delta Spark about a second.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import deltalake

from deltaplane.engine import DeltaTable, write_table
from tests.deltaspark.test_cross_read import dp_rows, spark_rows
from tests.engine.test_nan_semantics import FILES, SPARK_ROWS, _file
from tests.engine.test_stats_paths import LEAVES, ROWS, base, quoted, table_of


def _spark_ids(spark, path: str, predicate: str) -> tuple[list[int], int]:
    rows, files, _ = spark.timed_files_read(f"SELECT id FROM delta.`{path}` WHERE {predicate}")
    return sorted(r["id"] for r in rows), files


def _dp_ids(path: str, predicate: str) -> tuple[list[int], int]:
    table = DeltaTable(path)
    ids = sorted(table.to_arrow(filter=predicate).column("id").to_pylist())
    return ids, len(table.file_uris(filter=predicate))


def _hostile_table(path: Path, properties: dict[str, str] | None = None) -> str:
    uri = str(path)
    write_table(uri, table_of([1]), properties=properties)
    for i in range(2, ROWS + 1):
        write_table(uri, table_of([i]), mode="append")
    return uri


def test_hostile_names_are_read_skipped_and_deleted_as_delta_spark_does(delta_spark, tmp_path):
    plain = _hostile_table(tmp_path / "plain")
    # Column mapping, as Delta Spark requires for such names; only stats_parsed in the
    # checkpoint, and no JSON commit before it (Delta Spark needs the checkpoint's own): Delta
    # Spark skips on the typed statistics alone.
    mapped = _hostile_table(
        tmp_path / "mapped",
        {"delta.columnMapping.mode": "name", "delta.checkpoint.writeStatsAsJson": "false"},
    )
    checkpoint = DeltaTable(mapped).create_checkpoint().version
    for commit in Path(mapped, "_delta_log").glob("*.json"):
        if int(commit.stem) < checkpoint:
            commit.unlink()

    for uri in (plain, mapped):
        assert dp_rows(uri) == spark_rows(delta_spark, uri)
        for k, path in enumerate(LEAVES):
            predicate = f"{quoted(path)} >= {base(k) + 2}"
            ours, our_files = _dp_ids(uri, predicate)
            theirs, their_files = _spark_ids(delta_spark, uri, predicate)
            assert ours == [2, 3], (uri, predicate)
            # Delta Spark skips by the statistics deltaplane wrote: a leaf's bounds read under
            # another leaf's name would skip a file holding rows 2 or 3.
            assert their_files == our_files == 2, (uri, predicate)
            if uri == mapped:
                # Without column mapping, Delta Spark's own Parquet reader mixes up the dotted
                # leaf names (its answer for `a.b` is empty there): rows compared on physical names.
                assert theirs == ours, (uri, predicate)

    spark_copy, our_copy = str(tmp_path / "spark_delete"), str(tmp_path / "our_delete")
    shutil.copytree(mapped, spark_copy)
    shutil.copytree(mapped, our_copy)
    for path, row in ((("a.b",), 2), (("a", "in.ner", "b"), 3)):
        predicate = f"{quoted(path)} >= {base(LEAVES.index(path)) + row}"
        delta_spark.sql(f"DELETE FROM delta.`{spark_copy}` WHERE {predicate}")
        DeltaTable(our_copy).delete(predicate)
    assert dp_rows(our_copy) == spark_rows(delta_spark, spark_copy) == dp_rows(spark_copy)
    assert [r["id"] for r in dp_rows(our_copy)] == [1]


def _nan_table_by_spark(spark, path: str) -> None:
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, x DOUBLE, f FLOAT) USING delta")
    for rows in FILES:
        values = ", ".join(
            f"({i}, double('{'NaN' if x != x else x}'), float('{'NaN' if x != x else x}'))"
            if x is not None
            else f"({i}, NULL, NULL)"
            for i, x in rows
        )
        spark.sql(f"INSERT INTO delta.`{path}` VALUES {values}")


def test_nan_filters_skipping_and_deletes_agree_with_delta_spark(delta_spark, tmp_path):
    ours_path = str(tmp_path / "ours")
    for rows in FILES:
        write_table(ours_path, _file(rows), mode="append")
    theirs_path = str(tmp_path / "theirs")
    _nan_table_by_spark(delta_spark, theirs_path)
    # delta-rs leaves NaN out of its Parquet footers' bounds (and +inf out of its log's), and
    # Delta Spark's Parquet reader prunes row groups on those footers: it can miss a NaN row
    # (row 2 for x = NaN). deltaplane gives Spark SQL's rows there, a superset of Delta Spark's.
    rs_path = str(tmp_path / "delta_rs")
    for rows in FILES:
        deltalake.write_deltalake(rs_path, _file(rows), mode="append")

    for uri in (ours_path, theirs_path, rs_path):
        assert dp_rows(uri) == spark_rows(delta_spark, uri)
        for predicate, expected in SPARK_ROWS.items():
            ours, our_files = _dp_ids(uri, predicate)
            theirs, their_files = _spark_ids(delta_spark, uri, predicate)
            assert ours == expected, (uri, predicate)
            if uri == rs_path:
                assert set(theirs) <= set(ours), (uri, predicate)
            else:
                assert theirs == ours, (uri, predicate)
            if uri == ours_path and predicate not in ("x = x", "x != x"):
                # Delta Spark skips on the statistics deltaplane wrote, as deltaplane does (its
                # optimizer rewrites a column compared with itself, reading no file for x != x).
                assert our_files == their_files, (uri, predicate)

    for predicate in ("x > 0", "x != x", "NOT (x < 3)"):
        spark_copy, our_copy = str(tmp_path / "spark_delete"), str(tmp_path / "our_delete")
        shutil.copytree(ours_path, spark_copy)
        shutil.copytree(ours_path, our_copy)
        delta_spark.sql(f"DELETE FROM delta.`{spark_copy}` WHERE {predicate}")
        DeltaTable(our_copy).delete(predicate)
        assert dp_rows(our_copy) == spark_rows(delta_spark, spark_copy), predicate
        shutil.rmtree(spark_copy)
        shutil.rmtree(our_copy)
