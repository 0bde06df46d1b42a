"""The Delta Spark side of the reference harness: runs inside the reference virtualenv (pyspark
4.2 + Delta Spark 4.4), never imports deltaplane.

Requests arrive as JSON lines on stdin; each reply is one JSON line on the file descriptor named
by ``DELTA_SPARK_REPLY_FD`` (stdout and stderr belong to the JVM and Spark's logging). The
process exits when stdin closes, or after ``DELTA_SPARK_MAX_SECONDS`` whatever happens.

Requests: ``{"op": "sql", "query": "..."}``, ``{"op": "write", "path", "rows", "schema" (DDL),
"mode", "options", "partition_by"}`` (or ``"query"`` for ``rows``/``schema``: that SELECT's rows),
``{"op": "checkpoint", "path"}``, ``{"op": "ping"}``, and
for benchmarks ``{"op": "noop", "query"}`` and ``{"op": "files_read", "query"}``.
Replies: ``{"ok": true, "rows": [...], "columns": [...], "seconds": t}`` or ``{"ok": false,
"error_class": "...", "error": "..."}``. Values are normalized by ``values.py``, as
``compare.py`` normalizes Arrow values.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import threading
import time

from values import normalize  # this folder is sys.path[0]: the server runs as a script


def session(jars: str):
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("delta-spark-reference")
        .config("spark.jars", jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("DELTA_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.warehouse.dir", os.environ["DELTA_SPARK_WAREHOUSE"])
        .config("spark.driver.extraJavaOptions", os.environ.get("DELTA_SPARK_JAVA_OPTIONS", ""))
    )
    for key, value in json.loads(os.environ.get("DELTA_SPARK_CONF") or "{}").items():
        builder = builder.config(key, value)  # the caller's settings (the suite's fixture has some)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def files_read(plan) -> int:
    """The ``numFiles`` metric of every file scan under an executed JVM plan (after pruning and
    data skipping: the files the scan opened)."""
    name = plan.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":
        return files_read(plan.executedPlan())
    if name.endswith("QueryStageExec"):
        return files_read(plan.plan())
    metrics = plan.metrics()
    total = int(metrics.apply("numFiles").value()) if metrics.contains("numFiles") else 0
    children = plan.children()
    return total + sum(files_read(children.apply(i)) for i in range(children.size()))


def handle(spark, request: dict) -> dict:
    op = request.get("op")
    if op == "ping":
        return {"rows": [], "columns": []}
    if op == "sql":
        df = spark.sql(request["query"])
        rows = df.collect()
        return {"columns": df.columns, "rows": [normalize(r.asDict(recursive=False)) for r in rows]}
    if op == "write":
        if request.get("query"):  # typed values (decimals, timestamps) from SQL literals
            df = spark.sql(request["query"])
        else:
            df = spark.createDataFrame(request["rows"], schema=request["schema"])
        writer = df.write.format("delta").mode(request.get("mode", "append"))
        for key, value in (request.get("options") or {}).items():
            writer = writer.option(key, value)
        if request.get("partition_by"):
            writer = writer.partitionBy(*request["partition_by"])
        writer.save(request["path"])
        return {"rows": [], "columns": []}
    if op == "noop":  # every row decoded into Spark's no-op sink, nothing collected (benchmarks)
        spark.sql(request["query"]).write.format("noop").mode("overwrite").save()
        return {"rows": [], "columns": []}
    if op == "files_read":  # run the query; how many files its scans opened (benchmarks)
        df = spark.sql(request["query"])
        rows = df.collect()
        return {
            "columns": df.columns,
            "rows": [normalize(r.asDict(recursive=False)) for r in rows],
            "files_read": files_read(df._jdf.queryExecution().executedPlan()),
        }
    if op == "checkpoint":
        jvm = spark.sparkContext._jvm
        log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, request["path"])
        log.checkpoint()
        return {"rows": [], "columns": []}
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    reply = os.fdopen(int(os.environ["DELTA_SPARK_REPLY_FD"]), "w", buffering=1)
    limit = float(os.environ.get("DELTA_SPARK_MAX_SECONDS", "3600"))
    threading.Timer(limit, lambda: os._exit(3)).start()  # bounded in time, whatever happens
    jars = ",".join(sorted(glob.glob(os.path.join(os.environ["DELTA_SPARK_JARS"], "*.jar"))))
    started = time.monotonic()
    spark = session(jars)
    reply.write(json.dumps({"ok": True, "ready": True, "seconds": time.monotonic() - started}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        started = time.monotonic()
        try:
            answer = {"ok": True, **handle(spark, request)}
        except Exception as error:  # every failure goes back to the caller, typed by class
            java_class = None
            java = getattr(error, "java_exception", None) or getattr(error, "_java_exception", None)
            if java is not None:
                try:
                    java_class = java.getClass().getName()
                except Exception:
                    java_class = None
            answer = {
                "ok": False,
                "error_class": java_class or type(error).__name__,
                "error": str(error)[:4000],
            }
        answer["seconds"] = time.monotonic() - started
        reply.write(json.dumps(answer) + "\n")
    spark.stop()
    os._exit(0)


if __name__ == "__main__":
    main()
