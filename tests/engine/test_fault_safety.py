"""Faults that used to lose or resurrect committed data: a writer outliving the VACUUM retention,
torn commit files. Each test here failed before its fix.

A writer "paused" between writing its files and committing is simulated with a store that runs a
callback (a concurrent VACUUM, say) just before the first commit put: the same moment a real
writer would wake up after a long GC pause or a stalled network.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.context import WriteContext
from deltaplane.engine.commands.dml import execute_delete
from deltaplane.engine.commands.vacuum import execute_vacuum, plan_vacuum
from deltaplane.engine.commands.write import execute_append
from deltaplane.engine.errors import (
    ConcurrentVacuumError,
    CorruptLogError,
    DataFileError,
    DeltaError,
    InvalidTimestampError,
)
from deltaplane.engine.storage import LocalStore
from deltaplane.engine.transaction import Transaction

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(start, start + n), pa.int64()), "name": [f"n{i}" for i in range(n)]}
    )


class PausingStore(LocalStore):
    """A local store that runs ``before_commit`` once, just before the first commit put."""

    def __init__(self, root: str, before_commit):
        super().__init__(root)
        self._before_commit = before_commit

    def put(self, key, data, *, mode="overwrite"):
        if self._before_commit is not None and key.startswith("_delta_log/") and key.endswith(".json"):
            callback, self._before_commit = self._before_commit, None
            callback()
        return super().put(key, data, mode=mode)


def vacuum_with_zero_retention(root: Path) -> None:
    """What an operator does with ``enforce_retention=False``: every untracked file is old."""
    table = DeltaTable(str(root))
    plan = plan_vacuum(table._store, table.snapshot, retention_hours=0, enforce_retention=False)
    execute_vacuum(table._store, plan, snapshot=table.snapshot)


def data_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}


def test_append_whose_files_a_concurrent_vacuum_deleted_fails_and_leaves_the_table_readable(tmp_path):
    root = tmp_path / "t"
    DeltaTable.create(str(root), SCHEMA).append(rows(0, 3))
    store = PausingStore(str(root), lambda: vacuum_with_zero_retention(root))
    with pytest.raises(ConcurrentVacuumError) as caught:
        execute_append(store, DeltaTable(str(root)).snapshot, rows(100, 5))
    assert caught.value.paths and all(p.endswith(".parquet") for p in caught.value.paths)
    assert str(root) in str(caught.value)
    table = DeltaTable(str(root))
    assert [h["operation"] for h in table.history()][:2] == ["VACUUM END", "VACUUM START"]
    assert sorted(table.to_arrow().column("id").to_pylist()) == [0, 1, 2]


def test_delete_with_deletion_vectors_checks_its_new_dv_file(tmp_path):
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    table.append(rows(0, 1000))
    store = PausingStore(str(root), lambda: vacuum_with_zero_retention(root))
    with pytest.raises(ConcurrentVacuumError) as caught:  # a third of the rows: a DV file, not inline
        execute_delete(store, DeltaTable(str(root)).snapshot, "id % 3 = 0")
    assert [p for p in caught.value.paths if "deletion_vector_" in p]
    assert DeltaTable(str(root)).to_arrow().num_rows == 1000


def test_a_vacuum_still_running_among_the_winners_is_a_conflict(tmp_path):
    root = tmp_path / "t"
    DeltaTable.create(str(root), SCHEMA).append(rows(0, 3))

    def start_vacuum():  # VACUUM START committed, deletes not finished: cannot be checked yet
        snapshot = DeltaTable(str(root)).snapshot
        txn = Transaction(
            LocalStore(str(root)),
            snapshot,
            operation="VACUUM START",
            operation_parameters={"retentionCheckEnabled": False, "specifiedRetentionMillis": 0},
        )
        txn.commit({})

    store = PausingStore(str(root), start_vacuum)
    with pytest.raises(ConcurrentVacuumError, match="has not finished"):
        execute_append(store, DeltaTable(str(root)).snapshot, rows(3, 2))
    assert DeltaTable(str(root)).to_arrow().num_rows == 3


def test_a_vacuum_with_the_normal_retention_does_not_stop_a_fresh_writer(tmp_path):
    root = tmp_path / "t"
    DeltaTable.create(str(root), SCHEMA).append(rows(0, 3))

    def vacuum_default():
        table = DeltaTable(str(root))
        execute_vacuum(table._store, plan_vacuum(table._store, table.snapshot), snapshot=table.snapshot)

    store = PausingStore(str(root), vacuum_default)
    result = execute_append(store, DeltaTable(str(root)).snapshot, rows(3, 2))
    table = DeltaTable(str(root))
    assert result.version == table.version and table.history(1)[0]["operation"] == "WRITE"
    assert table.to_arrow().num_rows == 5


def test_a_transaction_open_longer_than_the_retention_checks_its_files_without_a_vacuum_commit(tmp_path):
    # A VACUUM by a writer that records no commits leaves nothing among the winners to see.
    root = tmp_path / "t"
    DeltaTable.create(
        str(root), SCHEMA, properties={"delta.deletedFileRetentionDuration": "interval 1 seconds"}
    )

    write = WriteContext(
        LocalStore(str(root)), DeltaTable(str(root)).snapshot, {}, target_file_size=None, schema_mode=None
    )
    write.write_data(pa.RecordBatchReader.from_batches(SCHEMA, rows(0, 2).to_batches()))
    time.sleep(0.6)  # paused longer than half the retention, meanwhile:
    for name in data_files(root):
        (root / name).unlink()
    with pytest.raises(ConcurrentVacuumError, match="deleted 1 file"):
        write.txn.commit({})
    assert DeltaTable(str(root)).version == 0


# --- torn commit files ------------------------------------------------------------------------


def newest_commit_to_tear(root: Path, *, delete: bool = True) -> Path:
    """A table at ``root`` of rows 0 to 2 (with ``delete``, row 1 then deleted: versions 0 to 2);
    the file of its newest commit."""
    table = DeltaTable.create(str(root), SCHEMA)
    table.append(rows(0, 3))
    if delete:
        table.delete("id = 1")
    return root / "_delta_log" / f"{table.version:020d}.json"


def test_an_empty_commit_file_is_corrupt_not_an_empty_commit(tmp_path):
    root = tmp_path / "t"
    torn = newest_commit_to_tear(root)
    torn.write_bytes(b"")
    for read in (lambda: DeltaTable(str(root)), lambda: DeltaTable(str(root), version=2).history()):
        with pytest.raises(CorruptLogError) as caught:
            read()
        assert caught.value.path.endswith(torn.name) and torn.name in str(caught.value)
    assert DeltaTable(str(root), version=1).to_arrow().num_rows == 3  # earlier versions still read


def test_a_whitespace_only_commit_file_is_corrupt(tmp_path):
    root = tmp_path / "t"
    newest_commit_to_tear(root, delete=False).write_bytes(b"\n\n  \n")
    with pytest.raises(CorruptLogError, match="empty"):
        DeltaTable(str(root))


def test_a_commit_cut_in_the_middle_of_a_line_is_corrupt_and_named(tmp_path):
    root = tmp_path / "t"
    path = newest_commit_to_tear(root)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    with pytest.raises(CorruptLogError) as caught:
        DeltaTable(str(root)).to_arrow()
    assert path.name in str(caught.value)


def test_a_writer_never_commits_over_an_empty_commit_file(tmp_path):
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), SCHEMA)
    (root / "_delta_log" / f"{1:020d}.json").write_bytes(b"")
    with pytest.raises(CorruptLogError):
        table.append(rows(0, 1))


# --- time-travel arguments --------------------------------------------------------------------


@pytest.mark.parametrize("when", ["garbage", "2020-13-45", "", object()])
def test_an_unparseable_time_travel_timestamp_is_a_delta_error(tmp_path, when):
    root = tmp_path / "t"
    DeltaTable.create(str(root), SCHEMA)
    with pytest.raises(InvalidTimestampError) as caught:
        DeltaTable(str(root), timestamp=when)
    assert isinstance(caught.value, DeltaError) and "<class" not in str(caught.value)


# --- bit rot in data files ------------------------------------------------------------------------


def flip_a_bit_in_a_data_page(path: Path, column: str | None = None) -> None:
    """Flip one bit inside a column chunk (the first column of the first row group, or the named
    column of the last one) where the damage is SILENT without checksums: the file still decodes,
    to different values. The bit is found by trial with plain pyarrow, so the test shows that
    verification turns exactly the undetectable kind of rot into an error."""
    import pyarrow.parquet as pq

    original = path.read_bytes()
    expected = pq.read_table(path)
    metadata = pq.ParquetFile(path).metadata
    row_group = metadata.row_group(0 if column is None else metadata.num_row_groups - 1)
    index = 0
    if column is not None:
        names = [row_group.column(i).path_in_schema for i in range(row_group.num_columns)]
        index = names.index(column)
    chunk = row_group.column(index)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    end = start + chunk.total_compressed_size
    for position in range(end - 2, start + (end - start) // 4, -1):
        data = bytearray(original)
        data[position] ^= 0x01
        path.write_bytes(bytes(data))
        try:
            if not pq.read_table(path).equals(expected):
                return  # decodes without complaint, to different values
        except (OSError, pa.ArrowException):
            pass
    path.write_bytes(original)
    raise AssertionError(f"no silently corruptible bit found in {path.name}")


def big_rows(n: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(n), pa.int64()), "name": [f"name-{i * 7919 % n}" for i in range(n)]}
    )


def test_a_flipped_bit_in_a_data_file_is_a_data_file_error_naming_it(tmp_path):
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), SCHEMA)
    table.append(big_rows(50_000))
    (name,) = data_files(root)
    flip_a_bit_in_a_data_page(root / name)
    for read in (
        lambda: DeltaTable(str(root)).to_arrow(),
        lambda: DeltaTable(str(root)).to_batches().read_all(),
        lambda: DeltaTable(str(root)).delete("id = 5"),
    ):
        with pytest.raises(DataFileError, match="CRC") as caught:
            read()
        assert caught.value.path == name and name in str(caught.value)


def test_files_written_by_the_engine_carry_page_checksums(tmp_path):
    import pyarrow.parquet as pq

    root = tmp_path / "t"
    table = DeltaTable.create(str(root), SCHEMA, properties={"delta.checkpointInterval": "2"})
    table.append(big_rows(1000))
    table.append(big_rows(10))
    checkpoint = root / "_delta_log" / f"{2:020d}.checkpoint.parquet"
    for path in [*(root / n for n in data_files(root)), checkpoint]:
        data = bytearray(path.read_bytes())
        if path != checkpoint:
            assert pq.ParquetFile(path, page_checksum_verification=True).read().num_rows
        flip_a_bit_in_a_data_page(path)
        with pytest.raises(OSError, match="CRC"):
            pq.ParquetFile(path, page_checksum_verification=True).read()
        path.write_bytes(bytes(data))


def test_a_corrupt_checkpoint_page_falls_back_to_the_commits(tmp_path, caplog):
    root = tmp_path / "t"
    table = DeltaTable.create(str(root), SCHEMA, properties={"delta.checkpointInterval": "2"})
    table.append(big_rows(1000))
    table.append(big_rows(10))
    flip_a_bit_in_a_data_page(root / "_delta_log" / f"{2:020d}.checkpoint.parquet", "add.path")
    reopened = DeltaTable(str(root))
    assert reopened.to_arrow().num_rows == 1010
    assert "unreadable" in caplog.text


# --- temporary files of killed writers ------------------------------------------------------------

DAY = 86_400_000


def age(path: Path, days: float) -> None:
    import os

    when = time.time() - days * 86_400
    os.utime(path, (when, when))


def plant_temporaries(root: Path) -> dict[str, Path]:
    """What writers killed mid-write leave: a data file's and a commit's temporary files."""
    hex32 = "0123456789abcdef" * 2
    planted = {
        "data_old": root / "part=a" / f".part-00000-x.c000.zstd.parquet.{hex32}.tmp",
        "data_young": root / f".part-00001-y.c000.zstd.parquet.{hex32}.tmp",
        "root_old": root / f".part-00002-z.c000.zstd.parquet.{hex32}.tmp",
        "hidden_old": root / "_other_tool" / f".state.json.{hex32}.tmp",
        "log_old": root / "_delta_log" / f".{5:020d}.json.{hex32}.tmp",
        "log_young": root / "_delta_log" / f".{6:020d}.json.{hex32}.tmp",
    }
    for name, path in planted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a file")
        if name.endswith("_old"):
            age(path, 40)
    return planted


def three_rows_and_temporaries(root: Path) -> tuple[DeltaTable, dict[str, Path]]:
    """A table at ``root`` of rows 0 to 2 among ``plant_temporaries``' files: the table and them."""
    table = DeltaTable.create(str(root), SCHEMA)
    table.append(rows(0, 3))
    return table, plant_temporaries(root)


def test_full_vacuum_removes_expired_temporary_data_files_only(tmp_path):
    root = tmp_path / "t"
    table, planted = three_rows_and_temporaries(root)
    deleted = table.vacuum(dry_run=False)
    assert sorted(deleted) == sorted(["part=a/" + planted["data_old"].name, planted["root_old"].name])
    assert not planted["data_old"].exists() and planted["hidden_old"].exists()
    assert planted["data_young"].exists() and planted["log_old"].exists() and planted["log_young"].exists()
    assert DeltaTable(str(root)).to_arrow().num_rows == 3


def test_log_cleanup_removes_expired_temporary_log_files(tmp_path):
    root = tmp_path / "t"
    table, planted = three_rows_and_temporaries(root)
    plan = table.cleanup_log(dry_run=True)
    assert plan.temporaries == (f"_delta_log/{planted['log_old'].name}",)
    metrics = table.cleanup_log()
    assert metrics.num_deleted_temporary_files == 1
    assert not planted["log_old"].exists() and planted["log_young"].exists()
    assert planted["data_old"].exists()  # VACUUM's to reclaim
    assert DeltaTable(str(root)).to_arrow().num_rows == 3
