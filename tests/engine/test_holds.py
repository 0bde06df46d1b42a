"""A staged write is a pending writer: VACUUM must not delete its files while it waits for its
commit, whatever the retention, and must stop protecting them once the commit landed (or the
hold expired), so they are not kept for ever. Parallel creators of one table: the loser of a
compatible create appends, an incompatible one is a clear error naming both schemas."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.commands.staged import (
    StagedWrite,
    commit_write,
    plan_write,
    stage_write,
    write_files,
)
from deltaplane.engine.errors import StagedSchemaConflictError, TableExistsError
from deltaplane.engine.holds import HOLDS_DIR, list_holds


def rows(start: int, n: int, **more) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), **more})


def data_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    }


def vacuum_now(uri: str) -> list[str]:
    return DeltaTable(uri).vacuum(retention_hours=0, enforce_retention=False, dry_run=False)


def test_vacuum_with_zero_retention_keeps_a_staged_batch_until_it_commits(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 5))
    staged = stage_write(uri, rows(5, 5), app_id="batch-1", app_version=1)
    staged_files = {a.path for a in staged.adds}
    assert staged_files and staged_files <= data_files(table_dir)
    assert [h.app_id for h in list_holds(staged.spec.store())] == ["batch-1"]

    deleted = vacuum_now(uri)
    assert not staged_files & {Path(d).name for d in deleted} | set(deleted)
    assert staged_files <= data_files(table_dir)

    result = staged.commit()
    assert result.version == 1
    assert sorted(DeltaTable(uri).to_arrow()["id"].to_pylist()) == list(range(10))
    assert list_holds(staged.spec.store()) == []  # released with the commit
    assert not (table_dir / HOLDS_DIR).exists() or not any((table_dir / HOLDS_DIR).iterdir())


def test_a_released_batch_is_vacuumed_like_any_file_once_removed(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 5))
    staged = stage_write(uri, rows(5, 5), app_id="batch-1", app_version=1)
    staged.commit()
    DeltaTable(uri).optimize.compact()  # removes the staged file (dataChange=false rewrite)
    time.sleep(0.01)
    deleted = vacuum_now(uri)
    assert {a.path for a in staged.adds} <= set(deleted)


def test_a_hold_whose_work_landed_protects_nothing_after_a_crash_before_release(table_dir):
    """The commit landed but the process died before releasing the hold: the table's own txn
    says the work is in, so VACUUM drops the hold instead of keeping its files for ever."""
    uri = str(table_dir)
    write_table(uri, rows(0, 5))
    spec = plan_write(uri, rows(0, 1).schema, app_id="batch-2", app_version=3, hold=True)
    adds = write_files(spec, rows(5, 5))
    commit_write(spec, adds, release_hold=False)  # the crash: committed, hold not released
    assert [h.app_id for h in list_holds(spec.store())] == ["batch-2"]
    DeltaTable(uri).delete("id >= 5")  # a copy-on-write DELETE removes the staged file
    time.sleep(0.01)
    deleted = vacuum_now(uri)
    assert {a.path for a in adds} <= set(deleted)
    assert list_holds(spec.store()) == []


def test_an_expired_hold_no_longer_protects(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 5))
    spec = plan_write(uri, rows(0, 1).schema, app_id="batch-3", app_version=1, hold=0.0001)  # hours
    adds = write_files(spec, rows(5, 5))
    time.sleep(0.5)
    deleted = vacuum_now(uri)
    assert {a.path for a in adds} <= set(deleted)


def test_temporary_files_of_a_held_write_in_flight_are_kept(table_dir):
    """A staging write still streaming its file (the local store's ``.<name>.<uuid>.tmp``)."""
    uri = str(table_dir)
    write_table(uri, rows(0, 5))
    spec = plan_write(uri, rows(0, 1).schema, app_id="batch-4", app_version=1, hold=True)
    store = spec.store()
    name = f"part-00001-{spec.hold}-abc-c000.zstd.parquet"
    pending = store.open_output(name)
    pending.sink.write(b"PAR1 partial")
    old = time.time() - 3600
    for tmp in table_dir.glob(".*.tmp"):
        os.utime(tmp, (old, old))
    vacuum_now(uri)
    assert list(table_dir.glob(".*.tmp")), "the in-flight file of a held write was vacuumed"
    pending.abort()


def test_a_held_write_on_a_new_table_is_protected_from_the_first_vacuum(table_dir):
    """Two runs: the first creates the table, the second staged before the table existed."""
    uri = str(table_dir)
    late = stage_write(uri, rows(100, 3), app_id="second", app_version=1)
    first = stage_write(uri, rows(0, 3), app_id="first", app_version=1)
    first.commit()
    vacuum_now(uri)
    assert {a.path for a in late.adds} <= data_files(table_dir)
    assert late.commit().version == 1
    assert sorted(DeltaTable(uri).to_arrow()["id"].to_pylist()) == [0, 1, 2, 100, 101, 102]


def test_the_loser_of_a_compatible_create_appends(table_dir):
    uri = str(table_dir)
    a = plan_write(uri, rows(0, 1).schema, app_id="a", app_version=1)
    b = plan_write(uri, rows(0, 1).schema, app_id="b", app_version=1)
    assert a.read_version is None and b.read_version is None
    commit_write(a, write_files(a, rows(0, 100)))
    result = commit_write(b, write_files(b, rows(100, 100)))
    assert result.version == 1
    dt = DeltaTable(uri)
    assert sorted(dt.to_arrow()["id"].to_pylist()) == list(range(200))
    assert dt.history(1)[0]["operation"] == "WRITE"
    # Retrying the loser is the same work: recognised, nothing written twice.
    again = commit_write(b, [])
    assert again.skipped and DeltaTable(uri).version == 1


def test_the_loser_of_a_create_with_another_schema_is_told_both_schemas(table_dir):
    uri = str(table_dir)
    a = plan_write(uri, rows(0, 1, v=["x"]).schema)
    b = plan_write(uri, rows(0, 1, v=[1.5]).schema)
    commit_write(a, write_files(a, rows(0, 2, v=["x", "y"])))
    with pytest.raises(StagedSchemaConflictError) as caught:
        commit_write(b, write_files(b, rows(2, 2, v=[1.5, 2.5])))
    message = str(caught.value)
    assert "v: string" in message and "v: double" in message
    assert "stage" in message and "again" in message
    assert isinstance(caught.value, TableExistsError)  # what callers caught before
    assert DeltaTable(uri).to_arrow().num_rows == 2


def test_the_loser_of_a_create_with_other_partitioning_is_refused(table_dir):
    uri = str(table_dir)
    data = rows(0, 4, p=["a", "b", "a", "b"])
    a = plan_write(uri, data.schema, partition_by=["p"])
    b = plan_write(uri, data.schema)
    commit_write(a, write_files(a, data))
    with pytest.raises(StagedSchemaConflictError, match="partition"):
        commit_write(b, write_files(b, data))


def test_a_manifest_keeps_its_hold_through_json(table_dir):
    uri = str(table_dir)
    staged = stage_write(uri, rows(0, 3), app_id="m", app_version=1)
    back = StagedWrite.loads(staged.dumps())
    assert back.spec.hold == staged.spec.hold and back.spec.hold
    back.commit()
    assert list_holds(staged.spec.store()) == []
