"""How a batch read through `deltaplane` is cut into Spark tasks: by bytes and per-file cost, spread
over at least the session's default parallelism (local[2]: 2), as Spark's own file reader does."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import CapturedException

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import InvalidArgumentError
from deltaplane.spark_jobs.options import ReadOptions
from tests.helpers import assert_same_rows

FAILURES = (CapturedException, PySparkException)


def commits(uri: str, n: int, rows: int = 3) -> None:
    for i in range(n):
        ids = list(range(i * rows, (i + 1) * rows))
        write_table(
            uri, pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{x}" for x in ids]}), mode="append"
        )


def assert_tasks(df, tasks: int, expected: pa.Table) -> None:
    """``df`` is cut into ``tasks`` Spark tasks and reads the rows of ``expected``."""
    assert df.rdd.getNumPartitions() == tasks
    assert_same_rows(df.toArrow(), expected)


def test_read_options_parse_the_split_settings():
    parsed = ReadOptions.parse(
        {
            "path": "/t",
            "maxPartitionBytes": "64m",
            "openCostInBytes": "0",
            "MINPARTITIONS": "6",
            "maxPartitionNum": "9",
        }
    )
    assert (
        parsed.max_partition_bytes,
        parsed.open_cost_bytes,
        parsed.min_partitions,
        parsed.max_partitions,
    ) == (
        64 << 20,
        0,
        6,
        9,
    )
    defaults = ReadOptions.parse({"path": "/t"})
    assert (defaults.max_partition_bytes, defaults.open_cost_bytes) == (128 << 20, 4 << 20)
    assert defaults.min_partitions is None and defaults.max_partitions is None


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("maxPartitionBytes", "0", "option maxPartitionBytes must be a positive size"),
        ("maxPartitionBytes", "lots", "option maxPartitionBytes must be a size"),
        ("openCostInBytes", "-1", "option openCostInBytes must be a size"),
        ("minPartitions", "0", "option minPartitions must be at least 1"),
        ("minPartitions", "two", "option minPartitions must be an integer"),
        ("maxPartitionNum", "0", "option maxPartitionNum must be at least 1"),
    ],
)
def test_bad_split_options_are_refused_by_name(name, value, message):
    with pytest.raises(InvalidArgumentError, match=message):
        ReadOptions.parse({"path": "/t", name: value})


@pytest.mark.xdist_group("spark")
def test_many_small_files_spread_over_tasks_and_read_every_row(spark, tmp_path):
    uri = str(tmp_path / "t")
    commits(uri, 80)
    expected = DeltaTable(uri).to_arrow()
    df = spark.read.format("deltaplane").load(uri)
    # 80 tiny files, each counted as 4 MiB: 128 MiB holds 32 of them, so 3 tasks (a split by bytes
    # alone put them all in one).
    assert_tasks(df, 3, expected)
    assert_same_rows(df.toArrow(), expected)  # the same DataFrame read again

    def small():
        return spark.read.format("deltaplane").option("maxPartitionBytes", "20m")

    # 20 MiB tasks: after four files (4 x (4 MiB + about 1 KB)) a fifth still fits (its open cost
    # is counted once it is in), a sixth does not: 5 files per task, 16 tasks...
    assert_tasks(small().option("maxPartitionNum", 100).load(uri), 16, expected)
    # ... which is more than the default most, 3 per core: packed again into 6 (14 files a task).
    assert_tasks(small().load(uri), 6, expected)


@pytest.mark.xdist_group("spark")
def test_a_small_table_gets_a_task_per_core(spark, tmp_path):
    uri = str(tmp_path / "t")
    commits(uri, 4)
    expected = DeltaTable(uri).to_arrow()
    # The session's default parallelism is 2 (local[2]): (4 files x 4 MiB) / 2 per task.
    assert_tasks(spark.read.format("deltaplane").load(uri), 2, expected)
    assert_tasks(spark.read.format("deltaplane").option("minPartitions", 4).load(uri), 4, expected)


@pytest.mark.xdist_group("spark")
def test_the_parallelism_register_finds_reaches_the_planning_worker(spark, tmp_path):
    """The planning Python worker cannot ask Spark; ``register`` records what Spark's own file
    reader would use (here ``spark.sql.leafNodeDefaultParallelism``) on the class it registers."""
    from deltaplane.spark_jobs import register

    uri = str(tmp_path / "t")
    commits(uri, 6)
    key = "spark.sql.leafNodeDefaultParallelism"
    spark.conf.set(key, "3")
    try:
        register(spark)
        assert_tasks(spark.read.format("deltaplane").load(uri), 3, DeltaTable(uri).to_arrow())
    finally:
        spark.conf.unset(key)
        register(spark)
    assert spark.read.format("deltaplane").load(uri).rdd.getNumPartitions() == 2


@pytest.mark.xdist_group("spark")
def test_bad_split_options_fail_the_read_clearly(spark, tmp_path):
    uri = str(tmp_path / "t")
    commits(uri, 1)
    with pytest.raises(FAILURES, match="option minPartitions must be at least 1"):
        spark.read.format("deltaplane").option("minPartitions", "0").load(uri).collect()
    with pytest.raises(FAILURES, match="option maxPartitionBytes must be a size"):
        spark.read.format("deltaplane").option("maxPartitionBytes", "big").load(uri).collect()
