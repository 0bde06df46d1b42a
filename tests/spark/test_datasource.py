"""The `deltaplane` data source on real Spark (local[2]): reads equal the engine's, writes are read
identically by delta-rs, failures commit nothing, reruns write nothing."""

from __future__ import annotations

import csv
import datetime as dt
import json

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import CapturedException

from deltaplane.engine import DeltaTable, write_table
from tests.conftest import CONFORMANCE, conformance_golden
from tests.helpers import assert_same_rows

pytestmark = pytest.mark.xdist_group("spark")

GOLDEN = CONFORMANCE / "golden"


def spark_rows(spark, uri: str, **options) -> pa.Table:
    reader = spark.read.format("deltaplane")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(uri).toArrow()


def same(actual: pa.Table, expected: pa.Table) -> None:
    assert_same_rows(actual, expected.cast(actual.schema) if expected.schema != actual.schema else expected)


def _compare_tables() -> list[str]:
    manifest = GOLDEN / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with open(manifest) as f:
        return [row["name"] for row in csv.DictReader(f, delimiter="\t") if row["kind"] == "compare"]


@pytest.mark.conformance
def test_spark_reads_every_conformance_table_as_the_engine_does(spark):
    """Deletion vectors, column mapping, V2 and multi-part checkpoints, partitions, every type."""
    conformance_golden()
    names = _compare_tables()
    features = {
        "dv-with-columnmapping",
        "dv-partitioned-with-checkpoint",
        "v2-checkpoint-parquet",
        "multi-part-checkpoint",
    }
    assert features <= set(names)
    for name in names:
        root = GOLDEN / name / "delta"
        uri = str(root if root.is_dir() else GOLDEN / name)
        try:
            same(spark_rows(spark, uri), DeltaTable(uri).to_arrow())
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def events(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": [("eu", "us", "ap")[i % 3] for i in ids],
            "at": pa.array(
                [dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "tags": [{"k": str(i)} if i % 4 else None for i in ids],
            "score": [None if i % 7 == 0 else i / 3 for i in ids],
        }
    )


def test_time_travel_and_deletion_vectors(spark, table_dir):
    uri = str(table_dir)
    write_table(uri, events(0, 50), properties={"delta.enableDeletionVectors": "true"})
    write_table(uri, events(50, 50), mode="append")
    table = DeltaTable(uri)
    table.delete("id % 10 = 3")
    stamp = table.history(1)[0]["timestamp"]
    same(spark_rows(spark, uri), DeltaTable(uri).to_arrow())
    assert spark_rows(spark, uri).num_rows == 90
    assert spark_rows(spark, uri, versionAsOf=1).num_rows == 100
    same(spark_rows(spark, uri, versionAsOf=0), events(0, 50))
    when = dt.datetime.fromtimestamp(stamp / 1000, dt.UTC).isoformat()
    assert spark_rows(spark, uri, timestampAsOf=when).num_rows == 90


def test_filtered_reads_equal_the_engines(spark, table_dir):
    """Partition, IN, prefix and timestamp filters: Spark's rows are the engine's (the reader
    takes no filters; see spark_jobs/datasource.py for why)."""
    uri = str(table_dir)
    for start in range(0, 300, 30):  # ten commits: each region partition gets ten files
        write_table(uri, events(start, 30), mode="append", partition_by=["region"])
    table = DeltaTable(uri)
    expected = table.to_arrow(filter="region = 'eu' AND id < 60")
    expected_2 = table.to_arrow(filter="region = 'eu' AND id < 60 AND at < '2026-01-02T12:00:00Z'")
    assert 0 < expected_2.num_rows < expected.num_rows
    got = spark.read.format("deltaplane").load(uri).where("region = 'eu' AND id < 60").toArrow()
    same(got, expected)
    got = (
        spark.read.format("deltaplane")
        .load(uri)
        .where("region IN ('eu') AND id <= 59 AND at < timestamp'2026-01-02 12:00:00' AND region LIKE 'e%'")
        .toArrow()
    )
    same(got, expected_2)


def test_filters_are_reapplied_by_spark(spark, table_dir):
    """Null-aware and negated filters: the pruning only ever widens, Spark decides the rows."""
    uri = str(table_dir)
    write_table(uri, events(0, 40), partition_by=["region"])
    df = spark.read.format("deltaplane").load(uri)
    expected = events(0, 40).to_pylist()
    cases = {
        "score IS NULL": lambda r: r["score"] is None,
        "NOT (score > 5)": lambda r: r["score"] is not None and not r["score"] > 5,
        "NOT (region <=> 'eu')": lambda r: r["region"] != "eu",
        "id IN (1, 2, 39) OR region = 'ap'": lambda r: r["id"] in (1, 2, 39) or r["region"] == "ap",
        "NOT (region IN ('eu', 'us'))": lambda r: r["region"] not in ("eu", "us"),
    }
    for where, keep in cases.items():
        got = sorted(r["id"] for r in df.where(where).select("id").collect())
        assert got == sorted(r["id"] for r in expected if keep(r)), where


def delta_rs(uri: str, **kw) -> pa.Table:
    return deltalake.DeltaTable(uri, **kw).to_pyarrow_table()


def test_spark_writes_are_read_identically_by_delta_rs(spark, tmp_path):
    uri = str(tmp_path / "t")
    first = events(0, 60)
    df = spark.createDataFrame(first.drop_columns(["tags"]))
    df.write.format("deltaplane").mode("append").option("partitionBy", "region").save(uri)
    assert deltalake.DeltaTable(uri).metadata().partition_columns == ["region"]
    same(delta_rs(uri), DeltaTable(uri).to_arrow())
    same(DeltaTable(uri).to_arrow().select(["id", "region", "at", "score"]), first.drop_columns(["tags"]))
    # Append.
    spark.createDataFrame(events(60, 30).drop_columns(["tags"])).write.format("deltaplane").mode(
        "append"
    ).save(uri)
    assert delta_rs(uri).num_rows == 90
    # replaceWhere: only the 'eu' partition is replaced.
    eu = events(1000, 9).drop_columns(["tags"]).filter(pc.equal(events(1000, 9)["region"], "eu"))
    (
        spark.createDataFrame(eu)
        .write.format("deltaplane")
        .mode("overwrite")
        .option("replaceWhere", "region = 'eu'")
        .option("userMetadata", "backfill eu")
        .save(uri)
    )
    got = delta_rs(uri)
    assert sorted(got.filter(pc.equal(got["region"], "eu"))["id"].to_pylist()) == eu["id"].to_pylist()
    assert got.filter(pc.not_equal(got["region"], "eu")).num_rows == 60
    assert deltalake.DeltaTable(uri).history(1)[0]["userMetadata"] == "backfill eu"
    # Overwrite, with a merged column.
    wider = spark.createDataFrame(events(0, 5).drop_columns(["tags"])).selectExpr("*", "'n' AS note")
    wider.write.format("deltaplane").mode("overwrite").option("mergeSchema", "true").save(uri)
    got = delta_rs(uri)
    assert got.num_rows == 5 and "note" in got.column_names
    same(got, DeltaTable(uri).to_arrow())
    # delta-rs reads every version as we do.
    for version in range(DeltaTable(uri).version + 1):
        same(delta_rs(uri, version=version), DeltaTable(uri, version=version).to_arrow())


def test_a_failed_task_commits_nothing(spark, table_dir):
    uri = str(table_dir)
    write_table(uri, pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]}))
    DeltaTable(uri).alter.add_constraint({"positive": "id > 0"})
    version = DeltaTable(uri).version
    df = spark.range(0, 1000, numPartitions=4).selectExpr("id - 500 AS id", "CAST(id AS STRING) AS name")
    with pytest.raises((CapturedException, PySparkException), match="positive"):
        df.write.format("deltaplane").mode("append").save(uri)
    assert DeltaTable(uri).version == version
    assert DeltaTable(uri).to_arrow().num_rows == 1


def test_a_rerun_with_the_same_txn_writes_nothing(spark, table_dir):
    uri = str(table_dir)
    write_table(uri, events(0, 3).drop_columns(["tags"]))
    df = spark.createDataFrame(events(3, 10).drop_columns(["tags"]))

    def run():
        df.write.format("deltaplane").mode("append").option("txnAppId", "daily").option(
            "txnVersion", 20261122
        ).save(uri)

    run()
    version = DeltaTable(uri).version
    files = sorted(p.name for p in table_dir.glob("*.parquet"))
    run()
    assert DeltaTable(uri).version == version
    assert sorted(p.name for p in table_dir.glob("*.parquet")) == files
    assert DeltaTable(uri).to_arrow().num_rows == 13
    assert deltalake.DeltaTable(uri).transaction_version("daily") == 20261122


def test_bad_options_fail_clearly(spark, table_dir):
    uri = str(table_dir)
    write_table(uri, events(0, 3).drop_columns(["tags"]))
    with pytest.raises((CapturedException, PySparkException), match="versionAsOf"):
        spark.read.format("deltaplane").option("versionAsOf", "x").load(uri).collect()
    with pytest.raises((CapturedException, PySparkException), match="txnVersion"):
        spark.range(1).write.format("deltaplane").mode("append").option("txnAppId", "a").save(uri)
    with pytest.raises((CapturedException, PySparkException), match=r"[Nn]o Delta table|not a Delta table"):
        spark.read.format("deltaplane").load(str(table_dir / "missing")).collect()


@pytest.mark.xdist_group("spark")
def test_s3_read_and_write_through_storage_options(spark, s3_server):
    uri = s3_server.uri()
    options = {f"storage.{k}": v for k, v in s3_server.options().items()}
    write_table(uri, events(0, 20).drop_columns(["tags"]), storage_options=s3_server.options())
    reader = spark.read.format("deltaplane").options(**options)
    assert reader.load(uri).where("id < 5").count() == 5
    spark.createDataFrame(events(20, 5).drop_columns(["tags"])).write.format("deltaplane").options(
        **options
    ).mode("append").save(uri)
    got = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options()).to_pyarrow_table()
    assert sorted(got["id"].to_pylist()) == list(range(25))
    print(json.dumps({"s3": uri}))
