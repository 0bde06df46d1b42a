"""One DataFrame, many actions: every action returns the rows the engine reads, whatever ran before.

PySpark 4.3 keeps the planned read (partitions + read function) on the data source object that
every DataFrame derived from one ``load()`` shares, and reuses it for any later scan that pushes no
filter (and for both sides of a self-join). A read plan that depended on the pushed filters
leaked from one action into the next; these tests run the actions in the orders users do.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table

pytestmark = pytest.mark.xdist_group("spark")


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "k": pa.array([i % 7 for i in ids], pa.int64())})


@pytest.fixture
def twenty_thousand(table_dir):
    """20,000 rows in 20 files (one commit each), k = id % 7, partitioned by nothing."""
    uri = str(table_dir)
    for start in range(0, 20_000, 1_000):
        write_table(uri, rows(1_000, start), mode="append")
    return uri


def engine_count(uri: str, where: str | None = None) -> int:
    return DeltaTable(uri).to_arrow(filter=where).num_rows


def test_unfiltered_actions_after_filtered_ones_see_every_row(spark, twenty_thousand):
    uri = twenty_thousand
    df = spark.read.format("deltaplane").load(uri)
    assert df.where("k = 3").count() == engine_count(uri, "k = 3") == 2_857
    assert df.where("id < 10").count() == 10
    assert df.count() == 20_000
    assert len(df.collect()) == 20_000
    assert len(df.toPandas()) == 20_000
    # And the other way round, then alternating.
    assert df.where("id >= 19990").count() == 10
    assert df.where("k = 3").count() == 2_857
    assert df.count() == 20_000
    assert df.where("id < 10").count() == 10


def test_a_cached_dataframe_split_by_complementary_filters(spark, twenty_thousand):
    uri = twenty_thousand
    df = spark.read.format("deltaplane").load(uri)
    df.where("id < 5").count()  # a filtered action before caching
    cached = df.cache()
    try:
        low = cached.where("id < 10000").count()
        high = cached.where("id >= 10000").count()
        assert (low, high) == (10_000, 10_000)
        assert cached.count() == 20_000
    finally:
        cached.unpersist()
    df2 = spark.read.format("deltaplane").load(uri)
    cached2 = df2.where("k = 1").cache()  # the filter is part of what is cached
    try:
        assert cached2.count() == engine_count(uri, "k = 1")
        assert df2.count() == 20_000
        assert cached2.where("id < 100").count() == engine_count(uri, "k = 1 AND id < 100")
    finally:
        cached2.unpersist()


def test_a_self_join_with_one_filtered_side(spark, twenty_thousand):
    uri = twenty_thousand
    df = spark.read.format("deltaplane").load(uri)
    small = df.where("id < 100").select("id")
    joined = df.join(small, "id", "left_outer")
    assert joined.count() == 20_000
    left_semi = df.alias("a").join(df.where("k = 3").alias("b"), "id", "left_semi")
    assert left_semi.count() == 2_857
    # The same join again after an unrelated filtered action on the same DataFrame.
    assert df.where("id > 19995").count() == 4
    assert df.join(df.where("k = 0").select("id"), "id").count() == engine_count(uri, "k = 0")


def test_filtered_rows_equal_the_engines(spark, twenty_thousand):
    uri = twenty_thousand
    df = spark.read.format("deltaplane").load(uri)
    for where in ("k = 3", "id < 10", "id BETWEEN 500 AND 1500 AND k IN (1, 2)", "NOT (k = 6)", None):
        got = (df.where(where) if where else df).toArrow().sort_by("id")
        expected = DeltaTable(uri).to_arrow(filter=where).sort_by("id")
        assert got.column("id").to_pylist() == expected.column("id").to_pylist(), where


def test_a_dataframe_reads_one_version_across_actions(spark, table_dir):
    """``load()`` pins the version: commits landing between actions (or between Spark asking for
    the schema and planning the read) do not change what one DataFrame reads."""
    uri = str(table_dir)
    write_table(uri, rows(100))
    df = spark.read.format("deltaplane").load(uri)
    write_table(uri, rows(50, 100), mode="append")  # lands after load(), before any action
    assert df.count() == 100
    assert df.where("id >= 100").count() == 0
    wider = pa.table({"id": pa.array([1000], pa.int64()), "k": pa.array([0], pa.int64()), "x": ["new"]})
    write_table(uri, wider, mode="append", schema_mode="merge")
    assert df.where("k = 0").count() == engine_count(uri, "k = 0 AND id < 100")
    assert df.columns == ["id", "k"]
    # A new load() sees the new version (and the new column).
    assert spark.read.format("deltaplane").load(uri).count() == 151
    assert spark.read.format("deltaplane").load(uri).columns == ["id", "k", "x"]


def test_the_same_path_streamed_after_batch_actions(spark, twenty_thousand, tmp_path):
    uri = twenty_thousand
    df = spark.read.format("deltaplane").load(uri)
    assert df.where("id < 10").count() == 10
    stream = spark.readStream.format("deltaplane").load(uri)
    query = (
        stream.writeStream.format("memory")
        .queryName("reuse_stream")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert spark.sql("SELECT count(*) AS n FROM reuse_stream").collect()[0]["n"] == 20_000
    assert df.count() == 20_000
    assert df.where("k = 3").count() == 2_857
