"""PySpark on deltaplane tables: ``read_table`` for batch reads, the ``deltaplane`` data source
for writes and streaming, and the heavy table jobs.

The engine plans and commits; Spark reads and writes Parquet files in tasks. Spark never writes
``_delta_log`` itself.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register the ``deltaplane`` data source on ``spark``."""
    from deltaplane.spark_jobs.datasource import DeltaplaneDataSource

    spark.dataSource.register(DeltaplaneDataSource.for_session(spark))  # carries its parallelism


def __getattr__(name: str):
    # ``read_table`` is the one batch read API; it is loaded on first use, so that importing
    # the package (every Spark Python worker does) stays cheap.
    if name == "read_table":
        from deltaplane.spark_jobs.native import read_table

        return read_table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["read_table", "register"]
