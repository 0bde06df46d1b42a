"""PySpark on deltaplane tables: the ``deltaplane`` data source and the heavy table jobs.

The engine plans and commits; Spark reads and writes Parquet files in tasks. Spark never writes
``_delta_log`` itself.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register the ``deltaplane`` data source on ``spark``."""
    from deltaplane.spark_jobs.datasource import DeltaplaneDataSource

    spark.dataSource.register(DeltaplaneDataSource.for_session(spark))  # carries its parallelism


__all__ = ["register"]
