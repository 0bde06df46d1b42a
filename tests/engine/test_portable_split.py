"""Tasks planned as Spark plans a file scan (``pack_files``, ``PortableSnapshot.split_for_tasks``).

Expected counts are worked out by hand from Spark's rule (``FilePartition``): the split size is
``min(maxPartitionBytes, max(openCost, (bytes + files * openCost) / minPartitions))``, files go
largest first into the current task until the next would pass it, each counted as its size plus
the open cost.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import InvalidArgumentError
from deltaplane.engine.portable import PortableSnapshot, pack_files, split_bytes
from deltaplane.engine.scan import Scan

MIB = 1024 * 1024
SPARK = {"max_partition_bytes": 128 * MIB, "open_cost_bytes": 4 * MIB}


def test_many_small_files_fill_tasks_by_their_open_cost():
    # 9,970 files of 10 KiB on 2 cores: (about 99 MB + 9,970 x 4 MiB) / 2 is far above 128 MiB, so
    # the split is 128 MiB, and each file counts 10 KiB + 4 MiB: 32 fit (31 x 4,204,544 + 10,240
    # = 130,351,104 <= 134,217,728; a 33rd would make 134,555,648), so 312 tasks (311 of 32, one
    # of 18), where a split by bytes alone made one.
    groups = pack_files([10 * 1024] * 9970, min_partitions=2, **SPARK)
    assert len(groups) == 312
    assert [len(g) for g in groups[:-1]] == [32] * 311 and len(groups[-1]) == 18
    assert sorted(i for g in groups for i in g) == list(range(9970))


def test_too_many_tasks_are_packed_again_into_about_max_partitions():
    # Spark's maxPartitionNum rule: 312 tasks > 6, so pack again with a split of the counted bytes
    # over 6: ceil(9,970 x 4,204,544 / 6) = 6,986,550,614, which holds 1,662 files of 10 KiB
    # (1,661 x 4,204,544 + 10,240 = 6,983,757,824): five tasks of 1,662 and one of 1,660.
    groups = pack_files([10 * 1024] * 9970, min_partitions=2, max_partitions=6, **SPARK)
    assert [len(g) for g in groups] == [1662] * 5 + [1660]
    # Under the cap nothing changes.
    assert len(pack_files([10 * 1024] * 9970, min_partitions=2, max_partitions=312, **SPARK)) == 312
    with pytest.raises(InvalidArgumentError, match="max_partitions"):
        pack_files([1], min_partitions=1, max_partitions=0, **SPARK)


def test_ten_big_files_make_three_tasks_on_two_cores_as_spark_does():
    # 10 files of 25 MB: (250,000,000 + 10 x 4 MiB) / 2 = 145,971,520 > 128 MiB, so the split is
    # 128 MiB; each file counts 29,194,304, four fit (3 x 29,194,304 + 25,000,000 = 112,582,912;
    # a fifth would need 141,777,216): tasks of 4, 4 and 2 files.
    groups = pack_files([25_000_000] * 10, min_partitions=2, **SPARK)
    assert [len(g) for g in groups] == [4, 4, 2]


def test_a_small_table_spreads_over_min_partitions():
    # 8 files of 10 MB, 8 cores: (80,000,000 + 8 x 4 MiB) / 8 = 14,194,304 is the split: one file
    # and its open cost fill it, so one file per task.
    assert split_bytes(80_000_000, 8, min_partitions=8, **SPARK) == 14_194_304
    assert [len(g) for g in pack_files([10_000_000] * 8, min_partitions=8, **SPARK)] == [1] * 8
    # One core: everything fits one 128 MiB task.
    assert [len(g) for g in pack_files([10_000_000] * 8, min_partitions=1, **SPARK)] == [8]


def test_largest_first_and_a_file_above_the_split_alone():
    # Split min(100, max(0, 151 / 1)) = 100: 100 alone, then 50 and 1 together; ties keep their order.
    assert pack_files([1, 100, 50], max_partition_bytes=100, open_cost_bytes=0, min_partitions=1) == [
        [1],
        [2, 0],
    ]
    assert pack_files([7, 7, 7], max_partition_bytes=14, open_cost_bytes=0, min_partitions=1) == [[0, 1], [2]]
    assert pack_files([500 * MIB], min_partitions=4, **SPARK) == [[0]]
    assert pack_files([None, 0, 3], max_partition_bytes=10, open_cost_bytes=0, min_partitions=1) == [
        [2, 0, 1]
    ]
    assert pack_files([], min_partitions=2, **SPARK) == []


def test_the_split_never_drops_below_the_open_cost():
    # 4 tiny files on 64 cores: (4 + 4 x 4 MiB) / 64 is below 4 MiB, so the split is 4 MiB.
    assert split_bytes(4, 4, min_partitions=64, **SPARK) == 4 * MIB


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_partition_bytes": 0, "open_cost_bytes": 0, "min_partitions": 1}, "max_partition_bytes"),
        ({"max_partition_bytes": 10, "open_cost_bytes": -1, "min_partitions": 1}, "open_cost_bytes"),
        ({"max_partition_bytes": 10, "open_cost_bytes": 0, "min_partitions": 0}, "min_partitions"),
    ],
)
def test_bad_planning_arguments_are_refused(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        pack_files([1, 2], **kwargs)


def test_split_for_tasks_covers_every_file_once_and_reads_the_same_rows(tmp_path):
    uri = str(tmp_path / "t")
    for start in range(0, 60, 10):  # six files of different sizes
        write_table(
            uri,
            pa.table({"id": list(range(start, start + 10 + start)), "k": ["x" * start] * (10 + start)}),
            mode="append",
        )
    snapshot = DeltaTable(uri).snapshot
    portable = PortableSnapshot.of(snapshot)
    groups = portable.split_for_tasks(max_partition_bytes=1, open_cost_bytes=0, min_partitions=1)
    assert len(groups) == 6  # a split of one byte: every file its own task
    sizes = [g.num_bytes for g in groups]
    assert sizes == sorted(sizes, reverse=True)  # largest first
    assert sorted(p for g in groups for p in g.files.column("path").to_pylist()) == sorted(
        snapshot.files.column("path").to_pylist()
    )
    together = portable.split_for_tasks(min_partitions=3)  # small files: 3 tasks of 2
    assert [g.num_files for g in together] == [2, 2, 2]
    # The same group object read twice gives the same rows, and all groups give the table.
    read = [Scan(g.snapshot(), None, None).to_table() for g in together]
    assert Scan(together[0].snapshot(), None, None).to_table().equals(read[0])
    ids = sorted(i for t in read for i in t.column("id").to_pylist())
    assert ids == sorted(DeltaTable(uri).to_arrow().column("id").to_pylist())
    empty = PortableSnapshot.of(snapshot, snapshot.files.slice(0, 0))
    assert empty.split_for_tasks(min_partitions=2) == []
