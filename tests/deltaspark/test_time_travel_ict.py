"""Timestamp time travel on in-commit-timestamp tables, against Delta Spark 4.4: both engines read
the table ``TIMESTAMP AS OF`` every commit's timestamp, one millisecond before and after it, before
the first commit and after the latest, on a table written by both and on one whose in-commit
timestamps were turned on after it had commits (file times before the enablement version, commit
times after). Each probe must give the same rows, or fail on both."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa

from deltaplane.engine import DeltaTable
from tests.deltaspark.client import DeltaSparkError
from tests.deltaspark.compare import arrow_rows, sorted_rows

ICT = {"delta.enableInCommitTimestamps": "true"}


def rows(k: int) -> pa.Table:
    return pa.table({"id": pa.array([k], pa.int64())})


def spark_read(spark, path: str, millis: int):
    when = dt.datetime.fromtimestamp(millis / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        return sorted_rows(spark.sql(f"SELECT * FROM delta.`{path}` TIMESTAMP AS OF '{when}'"))
    except DeltaSparkError as error:
        return f"refused: {error.error_class}: {error.message[:400]}"


def our_read(path: str, millis: int):
    try:
        when = dt.datetime.fromtimestamp(millis / 1000, dt.UTC)
        return sorted_rows(arrow_rows(DeltaTable(path, timestamp=when).to_arrow()))
    except Exception as error:  # any refusal; compared with Delta Spark's below
        return f"refused: {type(error).__name__}"


def probes(path: str) -> list[int]:
    stamps = sorted({int(h["timestamp"]) for h in DeltaTable(path).history()})
    out = [stamps[0] - 1000, stamps[-1] + 60_000]
    for t in stamps:
        out += [t - 1, t, t + 1]
    return out


def assert_same_reads(spark, path: str) -> None:
    for millis in probes(path):
        theirs, ours = spark_read(spark, path, millis), our_read(path, millis)
        if isinstance(theirs, str) or isinstance(ours, str):
            assert isinstance(theirs, str) == isinstance(ours, str), (millis, theirs, ours)
        else:
            assert ours == theirs, millis


def test_timestamp_time_travel_on_in_commit_timestamps_agrees(delta_spark, tmp_path):
    path = str(tmp_path / "ict")
    table = DeltaTable.create(path, pa.schema([("id", pa.int64())]), properties=ICT)
    for k in range(2):
        table.append(rows(k))
    delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES (10)")
    time.sleep(0.01)
    DeltaTable(path).append(rows(11))
    assert_same_reads(delta_spark, path)


def test_timestamp_time_travel_across_the_enablement_of_in_commit_timestamps(delta_spark, tmp_path):
    path = str(tmp_path / "enabled_later")
    table = DeltaTable.create(path, pa.schema([("id", pa.int64())]))
    table.append(rows(0))
    time.sleep(0.01)
    table.alter.set_table_properties(ICT)  # from here on, commit times
    table.append(rows(1))
    delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES (2)")
    assert DeltaTable(path).metadata.configuration["delta.inCommitTimestampEnablementVersion"] == "2"
    assert_same_reads(delta_spark, path)
