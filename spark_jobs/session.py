"""A SparkSession set up for deltaplane, locally or against a cluster."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

DEFAULT_MASTER = "local[2]"


def get_spark(
    master: str | None = None,
    *,
    app_name: str = "deltaplane",
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
):
    """A session with the ``deltaplane`` data source registered.

    ``remote`` (default ``$SPARK_REMOTE`` when no ``master`` is given), e.g.
    ``sc://127.0.0.1:15002``, is a Spark Connect server: the session is a Connect client with
    the session time zone set to UTC and ``conf`` applied as session settings; the server's own
    configuration (its master, its Python workers, which must import pyarrow and deltaplane) is
    the server's. ``deltaplane`` is registered on that session (a Python data source is
    registered per Connect session, and the server's Python workers import it by name).

    ``master`` defaults to ``$SPARK_MASTER`` or ``local[2]``. deltaplane's Spark classes (``jar``)
    join ``spark.jars``, so native reads plan from the log and apply deletion vectors in the
    Parquet reader. Python workers run this
    interpreter (``PYSPARK_PYTHON``), so they can import pyarrow and the project; the session
    time zone is UTC (timestamps leave Spark as UTC instants); in local mode the driver binds to
    127.0.0.1 and the UI is off.
    """
    from pyspark.sql import SparkSession

    remote = remote or (None if master else os.environ.get("SPARK_REMOTE"))
    if remote:
        builder = SparkSession.builder.remote(remote)
        for key, value in {"spark.sql.session.timeZone": "UTC", **(conf or {})}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        from deltaplane.spark_jobs import register

        register(spark)
        return spark
    # Under spark-submit the JVM is already up with spark-submit's master and settings: keep them.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ and master is None
    master = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if master.startswith("local") and not submitted:
        settings.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.shuffle.partitions": "4",
            }
        )
    settings.update(conf or {})
    if not submitted:  # (a submitted job's JVM has its jars already)
        jars = with_deltaplane_jar(settings.get("spark.jars"))
        if jars:
            settings["spark.jars"] = jars
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from deltaplane.spark_jobs import register

    register(spark)
    return spark


def with_deltaplane_jar(jars: str | None) -> str:
    """A ``spark.jars`` value with deltaplane's jar added (unchanged where it cannot be built)."""
    from deltaplane.spark_jobs import jar

    built = jar.path()
    listed = [j for j in (jars or "").split(",") if j.strip()]
    if built is not None and str(built) not in listed:
        listed.append(str(built))
    return ",".join(listed)
