"""A write's data files are made durable together, once, before anything can commit them.

Each data file used to be fsynced, and its directory too, as it was linked into place: 60,000
fsyncs for a write into 30,000 partitions. Now the files are linked into place unsynced and the
writer's ``close()`` syncs them all at once (``syncfs`` on Linux for more than a few files, else
each file and directory) before it returns the add actions a commit needs. The calls are counted
by wrapping the real ``os.fsync`` and ``LocalStore.sync`` (both still do their work).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.storage import local
from deltaplane.engine.storage.local import LocalStore

PARTITIONS = 120

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names descriptors via /proc")


def _rows(n: int = PARTITIONS * 3, offset: int = 0) -> pa.Table:
    ids = list(range(offset, offset + n))
    return pa.table({"id": ids, "p": [i % PARTITIONS for i in ids], "v": [f"v{i}" for i in ids]})


@pytest.fixture
def calls(monkeypatch):
    """Every fsync (with the path its descriptor names) and every ``LocalStore.sync`` and log
    put, in order, each passed on to the real call."""
    seen: list[tuple[str, object]] = []
    real_fsync, real_sync, real_put = os.fsync, LocalStore.sync, LocalStore.put

    def fsync(fd):
        seen.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def sync(self, keys):
        seen.append(("sync", sorted(keys)))
        return real_sync(self, keys)

    def put(self, key, data, *, mode="overwrite"):
        seen.append(("put", key))
        return real_put(self, key, data, mode=mode)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(LocalStore, "sync", sync)
    monkeypatch.setattr(LocalStore, "put", put)
    return seen


def _data_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts)


def test_a_partitioned_write_syncs_its_files_once_before_the_commit(tmp_path, calls):
    write_table(tmp_path / "t", _rows(), partition_by=["p"])
    write_table(tmp_path / "t", _rows(offset=10_000), partition_by=["p"], mode="append")

    files = _data_files(tmp_path / "t")
    assert len(files) == 2 * PARTITIONS
    syncs = [i for i, (kind, _) in enumerate(calls) if kind == "sync"]
    puts = [i for i, (kind, key) in enumerate(calls) if kind == "put" and key.startswith("_delta_log/0")]
    assert len(syncs) == 2 and len(puts) == 2, calls[-10:]
    # Each write's sync names exactly its own files, and comes before its commit.
    first, second = calls[syncs[0]][1], calls[syncs[1]][1]
    assert sorted(first + second) == files and not set(first) & set(second)
    assert syncs[0] < puts[0] < syncs[1] < puts[1]
    # No data file or partition directory is fsynced one by one (Linux: one syncfs for all).
    synced_one_by_one = [path for kind, path in calls if kind == "fsync" and "_delta_log" not in path]
    if local._libc() is not None:
        assert synced_one_by_one == []
    assert DeltaTable(tmp_path / "t").to_arrow().num_rows == 2 * len(_rows())


@pytest.mark.parametrize("case", ["no syncfs", "a few files"])
def test_file_by_file_every_file_and_directory_is_fsynced_at_close(tmp_path, calls, monkeypatch, case):
    """Without syncfs(2), and for a write of at most ``SYNC_FILE_BY_FILE`` files (which should not
    wait for other processes' dirty pages, as syncfs would)."""
    if case == "no syncfs":
        monkeypatch.setattr(local, "_libc", lambda: None)
        rows = _rows()
    else:
        rows = _rows().filter(pc.less(_rows().column("p"), local.SYNC_FILE_BY_FILE))
    root = tmp_path / "t"
    write_table(root, rows, partition_by=["p"])

    files = {str(root / f) for f in _data_files(root)}
    (sync_at,) = [i for i, (kind, _) in enumerate(calls) if kind == "sync"]
    before = {path for kind, path in calls[:sync_at] if kind == "fsync"}
    after = [path for kind, path in calls[sync_at:] if kind == "fsync"]
    assert not before & files  # nothing synced as it was published
    assert files <= set(after)
    directories = {str(Path(f).parent) for f in files}
    assert directories | {str(root)} <= set(after)  # the partition directories and the root
    assert DeltaTable(root).to_arrow().num_rows == rows.num_rows


def test_a_failed_write_syncs_nothing_and_commits_nothing(tmp_path, calls):
    def batches():
        yield from _rows().to_batches(max_chunksize=100)
        raise RuntimeError("the source failed midway")

    schema = _rows().schema
    with pytest.raises(RuntimeError, match="midway"):
        write_table(tmp_path / "t", pa.RecordBatchReader.from_batches(schema, batches()), partition_by=["p"])
    assert [c for c in calls if c[0] in ("sync", "put")] == []
    assert not (tmp_path / "t" / "_delta_log").exists() or not any((tmp_path / "t" / "_delta_log").iterdir())


def test_syncfs_errors_are_storage_errors(tmp_path, monkeypatch):
    """A sync that fails (a write-back error the kernel reports) fails the write: the files are
    not known to be on disk, so nothing may commit them."""
    from deltaplane.engine.errors import StorageError

    class Failing:
        @staticmethod
        def syncfs(fd):
            import ctypes

            ctypes.set_errno(5)  # EIO
            return -1

    monkeypatch.setattr(local, "_libc", lambda: Failing)
    with pytest.raises(StorageError, match="Input/output error"):
        write_table(tmp_path / "t", _rows(), partition_by=["p"])
    assert not (tmp_path / "t" / "_delta_log").exists() or not any((tmp_path / "t" / "_delta_log").iterdir())


def test_a_file_that_fails_on_a_publishing_thread_fails_the_write(tmp_path, monkeypatch):
    """Small partitions are written whole on the publishing threads at the end of a write: one
    that cannot be created fails the write (no commit, nothing synced), and no thread is left."""
    import threading

    from deltaplane.engine.errors import StorageError

    real = LocalStore.open_output
    opened = []

    def open_output(self, key, *, durable=True):
        opened.append(key)
        if len(opened) == 50:
            raise StorageError(f"cannot write {key}: the disk went away")
        return real(self, key, durable=durable)

    monkeypatch.setattr(LocalStore, "open_output", open_output)
    with pytest.raises(StorageError, match="the disk went away"):
        write_table(tmp_path / "t", _rows(), partition_by=["p"])
    assert len(opened) < PARTITIONS  # it stopped soon after
    log = tmp_path / "t" / "_delta_log"
    assert not log.exists() or not any(log.iterdir())
    assert not [t for t in threading.enumerate() if t.name.startswith("deltaplane-publish")]
    assert not list((tmp_path / "t").rglob("*.tmp"))  # every temporary file aborted or linked


def test_once_a_publishing_job_fails_no_job_starts_another_file(tmp_path, monkeypatch):
    """The small partitions' files go out in jobs of 32 on two threads: when one file cannot be
    created, the other jobs start no further file (their rows are lost with the write anyway).
    The first file fails; every other open waits until it has, so nothing is won by timing."""
    import threading

    from deltaplane.engine.errors import StorageError

    real = LocalStore.open_output
    failed = threading.Event()
    opened = []
    lock = threading.Lock()

    def open_output(self, key, *, durable=True):
        with lock:
            opened.append(key)
            first = len(opened) == 1
        if first:
            failed.set()
            raise StorageError(f"cannot write {key}: the disk went away")
        assert failed.wait(30)
        return real(self, key, durable=durable)

    monkeypatch.setattr(LocalStore, "open_output", open_output)
    with pytest.raises(StorageError, match="the disk went away"):
        write_table(tmp_path / "t", _rows(), partition_by=["p"])
    # the failing file, and at most the one file the other thread had started meanwhile
    assert len(opened) <= 2, len(opened)
    assert not [t for t in threading.enumerate() if t.name.startswith("deltaplane-publish")]
    assert not list((tmp_path / "t").rglob("*.tmp"))


def test_a_small_append_writes_on_the_calling_thread_and_a_failure_leaves_the_table_usable(
    tmp_path, monkeypatch
):
    """An append whose rows make one small file writes it without starting a thread. If that
    file cannot be created the append fails with the store's error, commits nothing and leaves
    no temporary behind, and the same table object appends again once the store recovers."""
    from deltaplane.engine.errors import StorageError
    from tests.engine.faults import break_data_files, thread_starts

    table = DeltaTable.create(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    started = thread_starts(monkeypatch)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert [n for n in started if n.startswith("deltaplane")] == []
    broken = break_data_files(monkeypatch)
    with pytest.raises(StorageError, match="the disk went away"):
        table.append(pa.table({"id": pa.array([3], pa.int64())}))
    assert table.version == DeltaTable(str(tmp_path / "t")).version == 1
    assert not list((tmp_path / "t").rglob("*.tmp"))
    broken["on"] = False
    table.append(pa.table({"id": pa.array([4], pa.int64())}))
    assert sorted(DeltaTable(str(tmp_path / "t")).to_arrow()["id"].to_pylist()) == [1, 2, 4]
