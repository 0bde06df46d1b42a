"""A Spark Connect client, run by tests/spark/test_connect.py in a process of its own (PySpark
refuses a Connect session in a process that has a classic one, and a Connect session switches the
whole process to Connect mode): ``python -m tests.spark.connect_client SCENARIO URL DIR``.
Prints one JSON line with what it saw."""

from __future__ import annotations

import json
import sys


def datasource(spark, folder: str) -> dict:
    """The ``deltaplane`` source written and read back through Connect."""
    uri = f"{folder}/ds"
    first = spark.createDataFrame([(i, f"g{i % 3}") for i in range(100)], "id long, g string")
    first.write.format("deltaplane").mode("overwrite").option("partitionBy", "g").save(uri)
    more = spark.createDataFrame([(i, f"g{i % 3}") for i in range(100, 130)], "id long, g string")
    for _ in range(2):  # the same application version twice: committed once
        more.write.format("deltaplane").mode("append").options(txnAppId="app", txnVersion="1").save(uri)
    df = spark.read.format("deltaplane").load(uri)
    return {
        "count": df.count(),
        "ids": sorted(r["id"] for r in df.where("g = 'g1'").collect()),
        "v0": spark.read.format("deltaplane").option("versionAsOf", "0").load(uri).count(),
        "columns": df.columns,
    }


def tasks(spark, folder: str) -> dict:
    """``job.run_tasks``: every item in a task of its own, results in order."""
    from deltaplane.spark_jobs import job

    def where(item):
        from pyspark import TaskContext

        return item * 10, TaskContext.get().partitionId()

    results = job.run_tasks(spark, list(range(7)), where)
    return {"values": [v for v, _ in results], "partitions": [p for _, p in results]}


def stream(spark, folder: str) -> dict:
    """A streaming copy through Connect, run twice on one checkpoint with appends in between."""
    from deltaplane.engine import DeltaTable, write_table

    src, dst, checkpoint = f"{folder}/src", f"{folder}/dst", f"{folder}/ck"
    import pyarrow as pa

    batches = []
    for start in (0, 10, 20):
        write_table(src, pa.table({"id": pa.array(range(start, start + 10), pa.int64())}), mode="append")
        query = (
            spark.readStream.format("deltaplane")
            .option("maxFilesPerTrigger", "1")
            .load(src)
            .writeStream.format("deltaplane")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(dst)
        )
        query.awaitTermination(180)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        batches.append(query.id)
    return {"ids": sorted(DeltaTable(dst).to_arrow()["id"].to_pylist()), "queries": batches}


def native(spark, folder: str) -> dict:
    """``read_table`` through Connect: no JVM to reach, so the expression path (Spark's Parquet
    scans of the listed files), with a lookup join for decimal partition values and deletion
    vectors on some files; ``native=True`` refuses rather than fall back to the data source."""
    import decimal

    import pyarrow as pa

    from deltaplane.engine import DeltaTable, write_table
    from deltaplane.spark_jobs import read_table

    uri = f"{folder}/native"
    for start in (0, 40):
        ids = pa.array(range(start, start + 40), pa.int64())
        dec = pa.array([decimal.Decimal(i % 2) / 4 for i in range(start, start + 40)], pa.decimal128(6, 2))
        write_table(
            uri,
            pa.table({"id": ids, "dec": dec}),
            mode="append",
            partition_by=["dec"],
            properties={"delta.enableDeletionVectors": "true"},
        )
    DeltaTable(uri).delete("id < 40 AND id % 3 = 0")
    df = read_table(spark, uri, native=True)
    again = df.where("dec = 0.25")
    return {
        "ids": sorted(r["id"] for r in df.collect()),
        "odd": sorted(r["id"] for r in again.collect()),
        "count": df.count(),
        "expected": sorted(DeltaTable(uri).to_arrow().column("id").to_pylist()),
    }


def main() -> None:
    scenario, url, folder = sys.argv[1:4]
    from deltaplane.spark_jobs.session import get_spark

    spark = get_spark(remote=url)
    kind = type(spark).__module__
    out = {"scenario": scenario, "session": kind, **globals()[scenario](spark, folder)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
