"""README.md's Spark snippets run as written: the data source block (batch read with time travel,
an idempotent replaceWhere write, a stream between two tables) and the spark-submit block, on
tables in a temporary folder (their ``s3://lake/...`` locations become folders of the test; the
cluster's master URL becomes local[2])."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from tests.readme import python_blocks

pytestmark = pytest.mark.xdist_group("spark")


def _trips(first: int, count: int, day: str) -> pa.Table:
    return pa.table(
        {
            "trip_id": pa.array(range(first, first + count), pa.int64()),
            "fare": pa.array([20.0 + i for i in range(count)]),
            "pickup_date": pa.array([day] * count),
        }
    )


def _block(marker: str):
    (block,) = [b for b in python_blocks(spark=True) if marker in b.source]
    return block


def test_the_spark_blocks_are_these_two():
    assert len(python_blocks(spark=True)) == 2


def test_data_source_block(spark, tmp_path):
    trips = tmp_path / "s3lake" / "trips"
    for version, day in enumerate(["2026-01-01", "2026-01-02", "2026-01-02", "2026-01-03", "2026-01-04"]):
        write_table(str(trips), _trips(version * 100, 50, day), mode="append", partition_by=["pickup_date"])
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_table(str(src), _trips(0, 30, "2026-01-05"))
    block = _block('format("deltaplane")')
    namespace = {"src": str(src), "dst": str(dst), "ck": str(tmp_path / "checkpoint")}
    source = block.source.replace('"s3://lake/', f'"{tmp_path}/s3lake/')
    exec(compile(source, str(block), "exec"), namespace)
    for query in spark.streams.active:  # the block starts a stream and leaves it running
        query.processAllAvailable()
        query.stop()
    written = DeltaTable(str(trips))
    assert written.history(1)[0]["operation"] == "WRITE"
    day = written.to_arrow(filter="pickup_date = '2026-01-02'").column("fare").to_pylist()
    # Version 3 held two appends of Jan 2 with fares 20..69; those above 40 replaced the day.
    assert sorted(day) == sorted([float(f) for f in range(41, 70)] * 2)
    assert DeltaTable(str(dst)).to_arrow().num_rows == 30
    exec(compile(source, str(block), "exec"), namespace)  # a rerun: txnVersion makes it a no-op
    for query in spark.streams.active:
        query.processAllAvailable()
        query.stop()
    assert DeltaTable(str(trips)).version == written.version
    assert DeltaTable(str(dst)).to_arrow().num_rows == 30  # the stream resumed from its checkpoint


def test_submit_block(tmp_path):
    trips = tmp_path / "s3lake" / "trips"
    for first in range(0, 400, 100):
        write_table(str(trips), _trips(first, 100, "2026-01-01"), mode="append")
    block = _block("spark_submit_command, submit")
    source = block.source.replace('"s3://lake/', f'"{tmp_path}/s3lake/')
    source = source.replace('"spark://10.0.0.5:7077"', '"local[2]"')
    namespace: dict = {}
    exec(compile(source, str(block), "exec"), namespace)
    result = namespace["result"]
    assert result.returncode == 0, result
    assert DeltaTable(str(trips)).history(1)[0]["operation"] == "OPTIMIZE"
    assert DeltaTable(str(trips)).to_arrow().num_rows == 400
