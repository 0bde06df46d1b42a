"""Partitions that stay small are held as whole sorted batches (engine/partition_runs.py) and get
one file each at the end; a partition that becomes large on the way leaves them with its rows, in
input order, for a file of its own. Checked on the files the writer produces, read back with
pyarrow."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltaplane.engine.partition_runs import part_bytes
from deltaplane.engine.schema import from_arrow_schema
from deltaplane.engine.stats import stats_leaves
from deltaplane.engine.storage.memory import MemoryStore
from deltaplane.engine.writer import DataFileWriter, WriterConfig

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("pad", pa.string())])


def writer(store, **config) -> DataFileWriter:
    schema = from_arrow_schema(SCHEMA)
    leaves = stats_leaves([f for f in schema.fields if f.name != "p"])
    return DataFileWriter(
        store, WriterConfig(schema=schema, partition_columns=["p"], stats_leaves=leaves, **config)
    )


def batch(keys: list, start: int, pad: int = 0) -> pa.Table:
    ids = np.arange(start, start + len(keys), dtype=np.int64)
    return pa.table({"id": ids, "p": keys, "pad": ["x" * pad] * len(keys)}, schema=SCHEMA)


def files(store: MemoryStore, adds) -> dict:
    """Partition value -> the ids of each of its files, in file order."""
    out: dict = {}
    for add in adds:
        data = pq.read_table(pa.BufferReader(store.get(add.path)))
        ids = data.column("id")
        assert json.loads(add.stats)["numRecords"] == data.num_rows
        assert json.loads(add.stats)["minValues"]["id"] == pc.min(ids).as_py()
        assert json.loads(add.stats)["maxValues"]["id"] == pc.max(ids).as_py()
        out.setdefault(add.partition_values["p"], []).append(ids.to_pylist())
    return out


@pytest.mark.parametrize("budget", [256 << 20, 16 << 10], ids=["in-memory", "spilled"])
def test_a_partition_that_grows_large_leaves_the_small_ones_with_its_rows_in_input_order(tmp_path, budget):
    """``g`` brings 5 rows twice (held small, with 50 partitions of 3 rows), then 300 rows (a
    quarter of a row group and more: it gets a buffer of its own, and its 10 held rows go first),
    then 800 and 400. With a 16 KiB budget the held rows are spilled first and copied back from
    the mapped run."""
    store = MemoryStore()
    w = writer(store, row_group_rows=1000, buffer_budget=budget, spill_directory=str(tmp_path))
    small = [f"s{i:02d}" for i in range(50)]
    start, expected = 0, {}
    rng = np.random.default_rng(3)
    for grown in (5, 5, 300, 800, 400):
        keys = np.array(small * 3 + ["g"] * grown)
        rng.shuffle(keys)
        t = batch(keys.tolist(), start, pad=20)
        for key, i in zip(keys.tolist(), t.column("id").to_pylist(), strict=True):
            expected.setdefault(key, []).append(i)
        w.write(t)
        start += len(keys)
    adds = w.close()
    assert (w.runs_spilled > 0) == (budget < 1 << 20)
    assert os.listdir(tmp_path) == []  # the runs are gone
    got = files(store, adds)
    assert got == {key: [ids] for key, ids in expected.items()}  # one file each, in input order
    (grown,) = [a for a in adds if a.partition_values["p"] == "g"]
    meta = pq.read_metadata(pa.BufferReader(store.get(grown.path)))
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000, 510]


def test_partitions_seen_in_another_order_than_the_batch_codes_keep_their_rows(tmp_path):
    """Partition ids are numbered by first appearance in the write; a later batch whose values
    come in another order (and a null partition value) is re-sorted into id order."""
    store = MemoryStore()
    w = writer(store)
    w.write(batch(["b", "a", "b", None], 0))
    w.write(batch(["c", None, "a", "c", "b"], 10))
    w.write(batch(["a"], 20))
    got = files(store, w.close())
    assert got == {"a": [[1, 12, 20]], "b": [[0, 2, 14]], "c": [[10, 13]], None: [[3, 11]]}


def test_the_same_writer_after_a_roll_starts_new_files(tmp_path):
    """``roll()`` (Z-order's cut) writes the small partitions held so far; rows after it start
    new files, also for a partition that had left the small ones."""
    store = MemoryStore()
    w = writer(store, row_group_rows=8)
    w.write(batch(["a", "b", "b"] + ["big"] * 2, 0))
    w.write(batch(["big"] * 9, 5))  # big leaves the small partitions
    w.roll()
    w.write(batch(["a", "big"], 20))
    got = files(store, w.close())
    assert got == {"a": [[0], [20]], "b": [[1, 2]], "big": [[3, 4, *range(5, 14)], [21]]}


def test_a_partition_of_few_but_wide_rows_is_not_held_as_small():
    """Sizes come from the strings' offsets, not a batch's average row: 10 rows of 10 KB among
    10,000 narrow rows are over a quarter of the 64 KiB file size, so that partition is written
    as files that roll at the target size, not as one 300 KB file at the end."""
    store = MemoryStore()
    w = writer(store, target_file_size=64 << 10)
    for k in range(3):
        narrow = batch([f"n{i % 100}" for i in range(10_000)], k * 20_000)
        wide = batch(["wide"] * 10, k * 20_000 + 10_000)
        noise = pa.array([os.urandom(5_000).hex() for _ in range(10)])  # 10 KB that zstd keeps
        wide = wide.set_column(2, "pad", noise)
        w.write(pa.concat_tables([narrow, wide]))
    adds = w.close()
    wide_files = [a for a in adds if a.partition_values["p"] == "wide"]
    assert len(wide_files) > 1
    assert all(a.size < 3 * (64 << 10) for a in wide_files)
    assert sum(json.loads(a.stats)["numRecords"] for a in wide_files) == 30
    assert len(adds) == 100 + len(wide_files)


def test_part_bytes_counts_string_data_and_fixed_widths():
    strings = pa.array(["a", "bb", "", None, "c" * 100, "dd"])
    table = pa.table(
        {"s": strings, "n": pa.array(range(6), pa.int32()), "l": strings.cast(pa.large_binary())}
    )
    offsets = np.array([0, 2, 4, 6])
    sizes = part_bytes(table, offsets)
    # string data + a 4-byte offset a row; 4 bytes of int32; data + an 8-byte offset a row.
    assert sizes.tolist() == [3 + 8 + 8 + 3 + 16, 0 + 8 + 8 + 0 + 16, 102 + 8 + 8 + 102 + 16]
    sliced = table.slice(2)  # a chunk that starts at an offset
    assert part_bytes(sliced, np.array([0, 2, 4])).tolist() == sizes[1:].tolist()


def test_batches_grouped_on_threads_are_placed_in_input_order():
    """Batches of 64Ki rows or more are grouped on the publishing threads, two at once; each
    partition still gets its rows in input order, and ``roll()`` places the batch still being
    grouped before it cuts (the same writer then takes more)."""
    store = MemoryStore()
    w = writer(store, row_group_rows=1 << 20)
    rng = np.random.default_rng(11)
    expected: dict = {}
    start = 0
    for rows in (70_000, 100_000, 65_536, 80_000):
        keys = rng.choice(["a", "b", "c", None], size=rows).tolist()
        w.write(batch(keys, start))
        for key, i in zip(keys, range(start, start + rows), strict=True):
            expected.setdefault(key, []).append(i)
        start += rows
    w.roll()
    w.write(batch(["a"] * 70_000, start))
    got = files(store, w.close())
    assert got == {
        "a": [expected["a"], list(range(start, start + 70_000))],
        "b": [expected["b"]],
        "c": [expected["c"]],
        None: [expected[None]],
    }


def test_a_nan_partition_value_is_one_partition_across_batches():
    """NaN is not equal to itself, so NaN keys from different batches must still name one
    partition: one file each for NaN, infinity, null and 1.5 however many batches bring them,
    with the values spelled as Delta Spark writes them (Java's ``Double.toString``)."""
    schema = pa.schema([("id", pa.int64()), ("p", pa.float64())])
    store = MemoryStore()
    w = DataFileWriter(store, WriterConfig(schema=from_arrow_schema(schema), partition_columns=["p"]))
    values = [float("nan"), None, 1.5, float("inf"), float("-inf")]
    for i in range(3):
        w.write(pa.table({"id": [5 * i + k for k in range(5)], "p": values}, schema=schema))
    ids = {
        a.partition_values["p"]: pq.read_table(pa.BufferReader(store.get(a.path))).column("id").to_pylist()
        for a in w.close()
    }
    assert ids == {
        "NaN": [0, 5, 10],
        None: [1, 6, 11],
        "1.5": [2, 7, 12],
        "Infinity": [3, 8, 13],
        "-Infinity": [4, 9, 14],
    }


def test_memory_beyond_the_budget_is_two_batches_being_grouped(tmp_path):
    """Batches grouped on threads are not counted until placed: at most two of them (and their
    copies sorted by partition) are held beyond the budget, however many batches come."""
    store = MemoryStore()
    budget = 8 << 20
    w = writer(store, buffer_budget=budget, spill_directory=str(tmp_path))
    rows, batches = 100_000, 20
    baseline = pa.total_allocated_bytes()
    peak = size = 0
    for i in range(batches):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        t = pa.table(
            {
                "id": ids,
                "p": pa.array((ids % 50).astype(str)),
                "pad": pa.array(np.char.add("x" * 40, ids.astype(str))),
            },
            schema=SCHEMA,
        )
        size = t.nbytes
        w.write(t)
        del t, ids
        peak = max(peak, pa.total_allocated_bytes() - baseline)
    adds = w.close()
    assert w.runs_spilled > 0
    assert peak < budget + 4 * size, (peak, size)  # far below the 20 batches (6 MB each) written
    assert len(adds) == 50
    assert sum(json.loads(a.stats)["numRecords"] for a in adds) == rows * batches


@pytest.mark.parametrize("spilled", [False, True], ids=["in-memory", "spilled"])
def test_drain_gathers_groups_partition_after_partition_in_input_order(tmp_path, spilled):
    """``drain`` hands out the partitions held in id order, in groups of at most ``files``
    partitions closed at ``rows`` rows; a group's table holds its partitions one after the other,
    each partition's rows in input order across the segments (batches) that brought them, and
    nothing of a partition taken out; also from a segment of several chunks. Expected rows come
    from the input, not from the code."""
    from deltaplane.engine.partition_runs import SmallPartitions

    small = SmallPartitions()
    small.grow(40)
    rng = np.random.default_rng(5)
    expected: dict[int, list[int]] = {}
    start = 0
    for k in range(3):  # three segments, each holding some of the 40 partitions in its own order
        pids = rng.permutation(40)[: rng.integers(20, 40)]
        counts = rng.integers(1, 4, size=len(pids))
        ids = np.arange(start, start + counts.sum(), dtype=np.int64)
        table = pa.table({"id": ids, "pad": ["x"] * len(ids)})
        if k == 1:  # a segment of two chunks (gathered by slices, not by one take)
            table = pa.concat_tables([table.slice(0, 7), table.slice(7)])
        offset = 0
        for pid, count in zip(pids.tolist(), counts.tolist(), strict=True):
            expected.setdefault(pid, []).extend(ids[offset : offset + count].tolist())
            offset += count
        small.add(table, pids, counts, counts * 9)
        start += len(ids)
    small.take(7)  # went to a file of its own: not drained
    expected.pop(7, None)
    if spilled:
        small.spill(str(tmp_path / "small.arrow"), pa.schema([("id", pa.int64()), ("pad", pa.string())]))
    groups = list(small.drain(files=8, rows=12))
    drained = [pid for pids, _, _ in groups for pid in pids]
    assert drained == sorted(expected)
    for pids, offsets, gathering in groups:
        table = gathering.table()
        bounds = offsets.tolist()
        assert len(pids) <= 8 and bounds[0] == 0 and bounds[-1] == table.num_rows
        assert bounds[-2] < 12 or len(pids) == 1  # closed once it reached 12 rows
        for i, pid in enumerate(pids):
            rows = table.column("id").slice(bounds[i], bounds[i + 1] - bounds[i]).to_pylist()
            assert rows == expected[pid], pid
    assert small.nbytes == 0 and list(small.drain(files=8, rows=12)) == []
