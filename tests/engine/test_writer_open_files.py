"""A write to any number of partitions keeps a bounded number of files open.

The writes run in a child process whose descriptor limit (RLIMIT_NOFILE) is lowered far below the
number of partitions written, so a writer holding one open file per partition fails there with
"Too many open files". The tables are then checked here, by the engine and by delta-rs: every row
exactly once, each file's rows belonging to the partition its add action names, and each file's
statistics agreeing with the rows read back from that file with pyarrow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.writer import MAX_PUBLISHING, PUBLISH_THREADS

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2003  # prime: ids spread over every partition
ROWS_PER_PARTITION = 12
BATCHES = 6
DESCRIPTOR_LIMIT = 256

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="lowers RLIMIT_NOFILE and counts descriptors in /proc (Linux)"
)

# Shared by the child processes: the rows, shuffled so that each partition's rows are spread
# over every input batch, and a descriptor limit lowered below the number of partitions.
CHILD_PRELUDE = textwrap.dedent(
    f"""
    import os, resource, sys
    import numpy as np
    import pyarrow as pa

    def batches(partitions={PARTITIONS}, rows_per_partition={ROWS_PER_PARTITION}, count={BATCHES},
                offset=0, pad=0, fail_after=None):
        n = partitions * rows_per_partition
        ids = np.random.default_rng(7).permutation(n).astype(np.int64) + offset
        schema = pa.schema(
            [("id", pa.int64()), ("name", pa.string()), ("p", pa.int64()), ("pad", pa.string())]
        )
        def gen():
            for i, chunk in enumerate(np.array_split(ids, count)):
                if fail_after is not None and i == fail_after:
                    raise RuntimeError("the source failed midway")
                yield pa.record_batch(
                    [
                        pa.array(chunk),
                        pa.array([f"n{{x:07d}}" for x in chunk]),
                        pa.array(chunk % partitions),
                        pa.array([f"{{x}}" + "-" * pad for x in chunk]),
                    ],
                    schema=schema,
                )
        return pa.RecordBatchReader.from_batches(schema, gen())

    def open_descriptors():
        return len(os.listdir("/proc/self/fd"))

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, ({DESCRIPTOR_LIMIT}, hard))
    """
)


def run_child(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def expected_ids(offsets=(0,), partitions=PARTITIONS, rows_per_partition=ROWS_PER_PARTITION) -> list[int]:
    n = partitions * rows_per_partition
    return sorted(i + offset for offset in offsets for i in range(n))


def check_rows(rows: pa.Table, ids: list[int], partitions: int = PARTITIONS) -> None:
    assert sorted(rows.column("id").to_pylist()) == ids  # every row exactly once
    for row in rows.select(["id", "name", "p", "pad"]).to_pylist():
        assert row["p"] == row["id"] % partitions
        assert row["name"] == f"n{row['id']:07d}"
        assert row["pad"].startswith(f"{row['id']}-") or row["pad"] == str(row["id"])


def check_files(path: Path, partitions: int = PARTITIONS) -> dict[int, int]:
    """Each file's rows against its add action (the log as delta-rs reads it); returns the
    number of files of each partition."""
    actions = pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
    files_per_partition: dict[int, int] = {}
    for action in actions:
        partition = int(action["partition.p"])
        files_per_partition[partition] = files_per_partition.get(partition, 0) + 1
        data = pq.read_table(path / action["path"])
        assert "p" not in data.column_names  # partition values live in the log only
        ids = data.column("id")
        assert pc.all(pc.equal(pc.remainder(ids, partitions), partition)).as_py()
        assert action["num_records"] == data.num_rows
        assert action["min.id"] == pc.min(ids).as_py()
        assert action["max.id"] == pc.max(ids).as_py()
        assert action["null_count.id"] == 0
        assert action["min.name"] == pc.min(data.column("name")).as_py()
        assert action["max.name"] == pc.max(data.column("name")).as_py()
        assert action["size_bytes"] == os.path.getsize(path / action["path"])
    return files_per_partition


@pytest.mark.slow  # thousands of partitions
def test_one_write_to_more_partitions_than_descriptors(tmp_path):
    path = tmp_path / "t"
    out = run_child(
        f"""
        from deltaplane.engine import write_table
        before = open_descriptors()
        result = write_table({str(path)!r}, batches(), partition_by="p")
        print(result.version, before, open_descriptors())
        """
    )
    version, before, after = out.split()
    assert version == "0"
    assert before == after  # no descriptor left behind
    ids = expected_ids()
    check_rows(DeltaTable(str(path)).to_arrow(), ids)
    check_rows(deltalake.DeltaTable(str(path)).to_pyarrow_table(), ids)
    # Every partition's rows fit in the write's buffer: one file each, none reopened.
    assert check_files(path) == dict.fromkeys(range(PARTITIONS), 1)


_SMALL_BUDGET_WRITE = """
    import dataclasses
    from deltaplane.engine import DeltaTable
    from deltaplane.engine.commands.context import writer_config
    from deltaplane.engine.transaction import Transaction
    from deltaplane.engine.writer import DataFileWriter

    table = DeltaTable.create({path!r}, batches().schema, partition_by=["p"])
    snapshot = table.snapshot
    config = dataclasses.replace(
        writer_config(snapshot.metadata, snapshot.protocol, snapshot.schema),
        buffer_budget=3 * 1024 * 1024,
        max_open_files=16,
        spill_directory={spill!r},
    )
    writer = DataFileWriter(snapshot.store, config)
    before = open_descriptors()
    peak = 0
    runs_seen = set()
    for batch in batches(offset=10**6, **{shape!r}):
        writer.write(pa.Table.from_batches([batch]))
        peak = max(peak, open_descriptors() - before)
        runs_seen.update(os.listdir({spill!r}))
"""


@pytest.mark.slow  # thousands of partitions
def test_beyond_the_buffer_budget_small_partitions_spill_and_get_one_file_each(tmp_path):
    """A buffer far too small for the data spills partitions to runs instead of writing them out
    early: every partition still gets one file, none is reopened, descriptors stay within the cap
    and the runs are gone after the commit."""
    path, spill = tmp_path / "t", tmp_path / "spill"
    spill.mkdir()
    # 2,003 partitions of 12 rows, about 10 MB in all: three times the budget.
    code = _SMALL_BUDGET_WRITE.format(path=str(path), spill=str(spill), shape={"pad": 400})
    out = run_child(
        code
        + """
    txn = Transaction(snapshot.store, snapshot, operation="WRITE")
    txn.add_files(writer.close())
    result = txn.commit()
    # The same table object, used again after the write.
    left = open_descriptors() - before
    print(result.version, table.refresh().version, writer.files_reopened, writer.runs_spilled, peak, left,
          len(runs_seen), len(os.listdir({spill!r})))
    """.replace("{spill!r}", repr(str(spill)))
    )
    version, refreshed, reopened, runs, peak, left, dirs_seen, dirs_left = map(int, out.split())
    assert version == refreshed == 1
    assert runs > 1 and dirs_seen == 1  # the small budget did spill, into one private directory
    assert reopened == 0
    # The cap, files waiting to be published, and a file and its directory being fsynced per
    # publishing thread (a spilled run holds no descriptor: it is mapped and closed).
    assert peak <= 16 + MAX_PUBLISHING + 2 * PUBLISH_THREADS
    assert left == 0 and dirs_left == 0
    ids = expected_ids((10**6,))
    check_rows(DeltaTable(str(path)).to_arrow(), ids)
    check_rows(deltalake.DeltaTable(str(path)).to_pyarrow_table(), ids)
    assert check_files(path) == dict.fromkeys(range(PARTITIONS), 1)


def test_an_aborted_write_leaves_no_spilled_run(tmp_path):
    path, spill = tmp_path / "t", tmp_path / "spill"
    spill.mkdir()
    shape = {"partitions": 300, "rows_per_partition": 120, "pad": 200, "fail_after": 4}
    code = _SMALL_BUDGET_WRITE.format(path=str(path), spill=str(spill), shape=shape)
    out = run_child(
        "try:\n"
        + textwrap.indent(textwrap.dedent(code), "    ")
        + "\nexcept RuntimeError as e:\n    writer.abort()\n"
        + "    print(e, writer.runs_spilled, open_descriptors() - before)\n"
    )
    message, runs, left = out.rsplit(" ", 2)
    assert message == "the source failed midway"
    assert int(runs) > 0 and int(left) == 0
    assert list(spill.iterdir()) == []
    assert DeltaTable(str(path)).version() == 0  # created, nothing committed


def test_a_write_failing_midway_commits_nothing_and_leaks_no_descriptor(tmp_path):
    """The source fails after files were finished (evicted, or rolled at a small target size):
    nothing is committed, no descriptor or temporary file is left, and the same table object
    takes the next write."""
    path = tmp_path / "t"
    partitions, rows = 400, 60
    out = run_child(
        f"""
        from deltaplane.engine import DeltaTable, write_table
        shape = dict(partitions={partitions}, rows_per_partition={rows}, pad=120)
        write_table({str(path)!r}, batches(**shape), partition_by="p")
        table = DeltaTable({str(path)!r})
        before = open_descriptors()
        try:
            table.append(batches(offset=10**6, fail_after=4, **shape), target_file_size=4 * 1024)
        except RuntimeError as e:
            print("failed:", e)
        print(table.refresh().version, before, open_descriptors())
        print(table.append(batches(offset=2 * 10**6, **shape)).version)
        """
    )
    failure, state, retried = out.splitlines()
    assert failure == "failed: the source failed midway"
    version, before, after = state.split()
    assert version == "0"
    assert before == after
    assert retried == "1"
    on_disk = [p for p in path.rglob("*") if p.is_file() and "_delta_log" not in p.parts]
    assert not [p for p in on_disk if p.name.endswith(".tmp")]
    actions = pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True))
    referenced = {path / a for a in actions.column("path").to_pylist()}
    assert len(on_disk) > len(referenced)  # files published before the failure, left for VACUUM
    ids = expected_ids((0, 2 * 10**6), partitions, rows)
    check_rows(DeltaTable(str(path)).to_arrow(), ids, partitions)
    check_rows(deltalake.DeltaTable(str(path)).to_pyarrow_table(), ids, partitions)
    check_files(path, partitions)
    assert DeltaTable(str(path)).load_version(0).count() == partitions * rows


def test_runs_of_a_killed_write_are_removed_by_the_next_write_that_spills(tmp_path):
    """kill -9 after a spill leaves the runs (nothing is committed); the next spilling write on
    this host deletes them, and leaves a live process's and another host's directories alone."""
    path, spill = tmp_path / "t", tmp_path / "spill"
    spill.mkdir()
    shape = {"partitions": 300, "rows_per_partition": 120, "pad": 200}
    code = _SMALL_BUDGET_WRITE.format(path=str(path), spill=str(spill), shape=shape)
    killed = code.replace(
        "        runs_seen.update(",
        "        if writer.runs_spilled:\n            os.kill(os.getpid(), 9)\n        runs_seen.update(",
    )
    result = subprocess.run(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(killed)],
        capture_output=True,
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == -9, result.stderr[-2000:]
    (left,) = spill.iterdir()
    assert list(left.iterdir())  # the killed write's run
    live = spill / f"{left.name.rsplit('-', 2)[0]}-{os.getpid()}-live"
    other_host = spill / "deltaplane-spill-elsewhere-1-x"
    live.mkdir(), other_host.mkdir()
    assert DeltaTable(str(path)).version() == 0  # created, nothing committed

    again = tmp_path / "again"
    out = run_child(
        code.replace(repr(str(path)), repr(str(again)))
        + "\n    print(writer.runs_spilled, len(writer.close()))\n"
    )
    runs, files = map(int, out.split())
    assert runs > 0 and files == 300
    assert sorted(p.name for p in spill.iterdir()) == sorted([live.name, other_host.name])


@pytest.mark.parametrize("bound", [3, 70_000, 5_000_000_000])
def test_rows_are_grouped_in_input_order_whatever_the_number_of_partition_codes(bound):
    """The writer's stable order sorts 16 bits at a time: one pass, two, or NumPy's own sort."""
    from deltaplane.engine.partition_runs import stable_order as _stable_order

    rng = np.random.default_rng(bound)
    codes = rng.integers(0, bound, 200_000, dtype=np.int64)
    codes[:50] = bound - 1  # the largest code is there
    assert np.array_equal(_stable_order(codes, bound), np.argsort(codes, kind="stable"))


def test_two_partition_columns_with_many_combinations_keep_each_rows_partition(tmp_path):
    """257 values of each key: combined codes beyond 16 bits (the two-pass order), in 600 rows of
    random order (600 partitions, not 66,049: a file each)."""
    rng = np.random.default_rng(5)
    n = 600
    i = rng.permutation(n)
    a, b = i % 257, (i * 11) % 257
    data = pa.table({"id": i, "a": a, "b": pa.array([f"k{v}" for v in b])})
    write_table(str(tmp_path / "t"), data, partition_by=["a", "b"])
    out = DeltaTable(str(tmp_path / "t")).to_arrow().sort_by("id")
    order = np.argsort(i)
    assert out.column("id").to_pylist() == list(range(n))
    assert out.column("a").to_pylist() == a[order].tolist()
    assert out.column("b").to_pylist() == [f"k{v}" for v in b[order]]
