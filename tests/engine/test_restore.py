"""RESTORE: the table's rows, schema and files become the target version's, as a new commit.

Expected rows are read from the target version *before* the restore (time travel), expected file
lists and sizes from ``file_uris()`` and the file system, and delta-rs is the independent reader
(and, for the other direction, the independent restorer).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.manifest import MANIFEST_DIR, MANIFEST_PROPERTY, refresh_manifest_after_commit
from deltaplane.engine.commands.restore import (
    execute_restore,
    load_restore_target,
    plan_restore,
    restore_target_version,
)
from deltaplane.engine.errors import (
    CommitConflictError,
    ConcurrentAppendError,
    ConcurrentDeleteReadError,
    FilesMissingError,
    TableReadOnlyError,
    TimestampOutOfRangeError,
    VersionNotFoundError,
)
from deltaplane.engine.snapshot import load_snapshot
from tests.engine.test_write import delta_rs_rows
from tests.helpers import assert_same_rows

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])
DV = {"delta.enableDeletionVectors": "true"}


def rows(start: int, n: int, regions=("eu", "us")) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "region": [regions[i % len(regions)] for i in range(n)],
        }
    )


def restore(table: DeltaTable, version: int | None = None, timestamp=None):
    """What the facade's ``restore`` does: latest snapshot, target, plan, execute."""
    current = DeltaTable(table.uri, storage_options=table.storage_options).snapshot
    store = table._store
    target_version = restore_target_version(store, current, version=version, timestamp=timestamp)
    target = load_restore_target(store, current, target_version)
    return execute_restore(store, plan_restore(store, current, target, timestamp=timestamp))


def commit_versions(path: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (path / "_delta_log").glob("*.json"))


def sizes(uris: list[str]) -> int:
    return sum(os.path.getsize(u) for u in uris)


def last_commit_actions(path: Path) -> list[dict]:
    latest = commit_versions(path)[-1]
    return [
        json.loads(line) for line in (path / "_delta_log" / f"{latest:020d}.json").read_text().splitlines()
    ]


# --- what RESTORE commits -------------------------------------------------------------------------


def by_region(table_dir, *batches: pa.Table) -> tuple[str, DeltaTable]:
    """A new table in ``table_dir`` partitioned by region, one append per batch: its path and it."""
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"])
    for batch in batches:
        table.append(batch)
    return path, table


def test_restore_after_appends_removes_the_newer_files_and_records_delta_spark_metrics(table_dir):
    path, table = by_region(table_dir, rows(0, 10), rows(10, 10), rows(20, 4, regions=("ap",)))
    expected = DeltaTable(path, version=1).to_arrow()
    files_then = DeltaTable(path, version=1).file_uris()
    files_now = DeltaTable(path).file_uris()
    removed = sorted(set(files_now) - set(files_then))

    result = restore(table, 1)
    assert result.version == 4 and result.operation == "RESTORE"
    restored = DeltaTable(path)
    assert_same_rows(restored.to_arrow(), expected)
    assert sorted(restored.file_uris()) == sorted(files_then)

    info = restored.history(1)[0]
    assert info["operation"] == "RESTORE"
    assert info["operationParameters"] == {"version": "1"}
    assert info["operationMetrics"] == {
        "numRestoredFiles": "0",
        "restoredFilesSize": "0",
        "numRemovedFiles": str(len(removed)),
        "removedFilesSize": str(sizes(removed)),
        "numOfFilesAfterRestore": str(len(files_then)),
        "tableSizeAfterRestore": str(sizes(files_then)),
    }
    assert info["isBlindAppend"] is False
    actions = last_commit_actions(table_dir)
    assert {a["remove"]["dataChange"] for a in actions if "remove" in a} == {True}
    assert any("metaData" in a for a in actions) and not any("protocol" in a for a in actions)
    # delta-rs reads the restored table as we do
    assert_same_rows(deltalake.DeltaTable(path).to_pyarrow_table().select(expected.column_names), expected)


def test_restore_after_copy_on_write_deletes_re_adds_files_with_their_stats(table_dir):
    path, table = by_region(table_dir, rows(0, 50), rows(50, 50))
    table.delete("id % 3 = 0")
    table.delete("region = 'eu'")
    target = DeltaTable(path, version=2)
    expected = target.to_arrow()
    added_back = sorted(set(target.file_uris()) - set(DeltaTable(path).file_uris()))
    target_adds = {row["path"]: row for row in target.snapshot.files.to_pylist()}

    result = restore(table, 2)
    assert result.operation_metrics["numRestoredFiles"] == str(len(added_back)) != "0"
    assert result.operation_metrics["restoredFilesSize"] == str(sizes(added_back))
    assert_same_rows(DeltaTable(path).to_arrow(), expected)
    readds = [a["add"] for a in last_commit_actions(table_dir) if "add" in a]
    assert len(readds) == len(added_back)
    for add in readds:
        original = target_adds[add["path"]]
        assert add["dataChange"] is True
        assert add["stats"] == original["stats"] and add["size"] == original["size"]
        assert add["partitionValues"] == original["partition_values"]
        assert add["modificationTime"] == original["modification_time"]
    # filtering with the re-added statistics still works
    assert_same_rows(
        DeltaTable(path).to_arrow(filter="id >= 90"),
        expected.filter(pa.compute.greater_equal(expected["id"], 90)),
    )
    assert_same_rows(deltalake.DeltaTable(path).to_pyarrow_table().select(expected.column_names), expected)


def test_restore_with_deletion_vectors_swaps_dvs_on_the_same_file(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA, properties=DV)
    table.append(rows(0, 1000))  # v1
    table.delete("id % 3 = 0")  # v2: a DV on the file
    table.delete("id % 5 = 0")  # v3: a bigger DV on the same file
    table.append(rows(1000, 10))  # v4
    assert table.snapshot.files.column("deletion_vector").null_count == 1

    for version in (2, 1, 3):
        expected = DeltaTable(path, version=version).to_arrow()
        restore(table, version)
        assert_same_rows(DeltaTable(path).to_arrow(), expected)
        assert_same_rows(delta_rs_rows(path).select(expected.column_names).cast(expected.schema), expected)
        if version == 2:
            # the same data file: remove(file, DV of v3) + add(file, DV of v2) in one commit
            actions = last_commit_actions(table_dir)
            removes = [a["remove"] for a in actions if "remove" in a]
            adds = [a["add"] for a in actions if "add" in a]
            assert len(adds) == 1 and len(removes) == 2  # and the file appended at v4 goes
            swapped = [r for r in removes if r["path"] == adds[0]["path"]]
            assert len(swapped) == 1
            assert swapped[0]["deletionVector"]["cardinality"] > adds[0]["deletionVector"]["cardinality"]
    history = [h["operationParameters"]["version"] for h in DeltaTable(path).history(3)]
    assert history == ["3", "1", "2"]


def test_restore_after_overwrite_and_after_a_schema_change(table_dir):
    path, table = by_region(table_dir, rows(0, 20))  # v1
    table.overwrite(rows(100, 5, regions=("us",)))  # v2
    wide = rows(200, 3).append_column("note", pa.array(["x", "y", None]))
    table.append(wide, schema_mode="merge")  # v3: a new column
    assert DeltaTable(path).schema.names == ["id", "region", "note"]
    expected = DeltaTable(path, version=1).to_arrow()

    restore(table, 1)
    restored = DeltaTable(path)
    assert restored.schema == DeltaTable(path, version=1).schema
    assert_same_rows(restored.to_arrow(), expected)
    assert_same_rows(deltalake.DeltaTable(path).to_pyarrow_table().select(expected.column_names), expected)

    restore(table, 3)  # forward again: the schema change comes back with its rows
    assert_same_rows(DeltaTable(path).to_arrow(), DeltaTable(path, version=3).to_arrow())
    assert DeltaTable(path).schema.names == ["id", "region", "note"]
    # and the restored table still takes writes
    DeltaTable(path).append(wide)
    assert DeltaTable(path).to_arrow().num_rows == 5 + 3 + 3


def test_protocol_is_never_downgraded(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA)
    table.append(rows(0, 3))  # v1, protocol (1, 2)
    before = DeltaTable(path).protocol
    ntz = pa.table(
        {"id": pa.array([9], pa.int64()), "region": ["eu"], "at": pa.array([0], pa.timestamp("us"))}
    )
    table.append(ntz, schema_mode="merge")  # v2 needs timestampNtz: protocol upgrade
    upgraded = DeltaTable(path).protocol
    assert upgraded != before and "timestampNtz" in (upgraded.writer_features or [])

    restore(table, 1)
    restored = DeltaTable(path)
    assert restored.protocol == upgraded
    assert restored.schema == DeltaTable(path, version=1).schema
    assert_same_rows(restored.to_arrow(), DeltaTable(path, version=1).to_arrow())


# --- which version --------------------------------------------------------------------------------


def test_restore_by_timestamp(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA)
    for i in range(3):
        table.append(rows(i * 10, 10))
    for version in range(4):  # commit times 1000 s, 2000 s, ... (file times: no in-commit timestamps)
        os.utime(table_dir / "_delta_log" / f"{version:020d}.json", (1000 * (version + 1),) * 2)
    table = DeltaTable(path)
    expected = DeltaTable(path, version=1).to_arrow()

    result = restore(table, timestamp=2_500_000)  # between v1 (2000 s) and v2 (3000 s)
    assert_same_rows(DeltaTable(path).to_arrow(), expected)
    parameters = DeltaTable(path).history(1)[0]["operationParameters"]
    assert parameters == {"version": "1", "timestamp": "1970-01-01T00:41:40+00:00"}
    assert result.version == 4

    with pytest.raises(TimestampOutOfRangeError):
        restore(table, timestamp="1970-01-01T00:00:01+00:00")
    # after the latest commit: the latest version, which is a no-op
    later = restore(DeltaTable(path), timestamp="2100-01-01")
    assert later.skipped and later.version == 4 and commit_versions(table_dir)[-1] == 4


def test_restore_to_the_current_version_commits_nothing_and_newer_versions_are_refused(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA)
    table.append(rows(0, 3))
    result = restore(table, 1)
    assert result.skipped and result.version == 1
    assert commit_versions(table_dir) == [0, 1]
    with pytest.raises(VersionNotFoundError):
        restore(table, 2)
    with pytest.raises(ValueError):
        restore(table, -1)
    with pytest.raises(ValueError):
        restore(table)


def test_restore_to_an_earlier_identical_state_still_commits(table_dir):
    """Delta Spark commits a RESTORE even when no file changes (the metadata action is written)."""
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA)
    table.append(rows(0, 3))
    restore(table, 0)
    assert DeltaTable(path).to_arrow().num_rows == 0
    result = restore(table, 1)
    assert result.version == 3
    assert_same_rows(DeltaTable(path).to_arrow(), DeltaTable(path, version=1).to_arrow())
    again = restore(table, 1)  # version 3 already holds version 1's files
    assert not again.skipped and again.operation_metrics["numRestoredFiles"] == "0"
    assert again.operation_metrics["numRemovedFiles"] == "0"


# --- refusals -------------------------------------------------------------------------------------


def test_vacuumed_data_files_fail_the_restore_and_nothing_is_committed(table_dir):
    path, table = by_region(table_dir, rows(0, 10))
    table.overwrite(rows(100, 10))
    gone = sorted(set(DeltaTable(path, version=1).file_uris()) - set(DeltaTable(path).file_uris()))
    os.remove(gone[0])

    with pytest.raises(FilesMissingError, match="VACUUM") as info:
        restore(table, 1)
    assert len(info.value.paths) == 1 and info.value.paths[0].endswith(os.path.basename(gone[0]))
    assert commit_versions(table_dir) == [0, 1, 2]
    assert_same_rows(DeltaTable(path).to_arrow(), DeltaTable(path, version=2).to_arrow())


def test_missing_deletion_vector_file_fails_the_restore(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA, properties=DV)
    table.append(rows(0, 1000))
    table.delete("id % 3 = 0")  # v2: a DV big enough to be stored in a file
    table.delete("id % 5 = 0")  # v3: another DV file replaces it
    dv_files = sorted(table_dir.glob("deletion_vector_*.bin"), key=os.path.getmtime)
    assert len(dv_files) == 2
    os.remove(dv_files[0])  # version 2's DV file
    with pytest.raises(FilesMissingError, match=dv_files[0].name) as info:
        restore(table, 2)
    assert info.value.paths == [dv_files[0].name]
    assert commit_versions(table_dir) == [0, 1, 2, 3]


def test_append_only_tables_refuse_a_restore_that_removes_files(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA, properties={"delta.appendOnly": "true"})
    table.append(rows(0, 3))
    table.append(rows(3, 3))
    with pytest.raises(TableReadOnlyError, match="append-only"):
        restore(table, 1)
    assert commit_versions(table_dir) == [0, 1, 2]


# --- concurrency ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("concurrent", "error"),
    [
        (lambda t: t.append(rows(100, 2)), ConcurrentAppendError),
        (lambda t: t.delete("id < 10"), ConcurrentDeleteReadError),  # a whole file goes,
    ],
    ids=["append", "delete"],
)
def test_a_concurrent_change_between_plan_and_commit_is_a_conflict(table_dir, concurrent, error):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA)
    table.append(rows(0, 10))
    table.append(rows(10, 10))
    store = table._store
    current = DeltaTable(path).snapshot
    plan = plan_restore(store, current, load_snapshot(store, 1))

    concurrent(DeltaTable(path))  # version 3, committed after the plan was made
    with pytest.raises(error):
        execute_restore(store, plan)
    assert issubclass(error, CommitConflictError)
    assert commit_versions(table_dir) == [0, 1, 2, 3]


def test_a_concurrent_commit_without_data_changes_does_not_block_the_restore(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA)
    table.append(rows(0, 10))
    table.append(rows(10, 10))
    store = table._store
    plan = plan_restore(store, DeltaTable(path).snapshot, load_snapshot(store, 1))
    # an idempotent-write marker with no rows: a commit holding only a txn action
    DeltaTable(path).append(rows(0, 0), app_id="job", app_version=7)
    result = execute_restore(store, plan)
    assert result.version == 4
    assert_same_rows(DeltaTable(path).to_arrow(), DeltaTable(path, version=1).to_arrow())


# --- interoperability with delta-rs --------------------------------------------------------------


def test_a_table_restored_by_delta_rs_reads_identically_here(table_dir):
    path, table = by_region(table_dir, rows(0, 20), rows(20, 20))
    table.delete("id % 4 = 0")
    expected = DeltaTable(path, version=1).to_arrow()

    deltalake.DeltaTable(path).restore(1)
    ours = DeltaTable(path)
    assert ours.version == 4
    assert_same_rows(ours.to_arrow(), expected)
    assert ours.history(1)[0]["operation"] == "RESTORE"
    # and we can restore forward again over delta-rs's restore
    restore(ours, 3)
    assert_same_rows(DeltaTable(path).to_arrow(), DeltaTable(path, version=3).to_arrow())
    theirs = deltalake.DeltaTable(path).to_pyarrow_table().select(expected.column_names)
    assert_same_rows(theirs, DeltaTable(path, version=3).to_arrow())


# --- with a symlink manifest ----------------------------------------------------------------------


def test_restore_then_the_manifest_hook_lists_the_restored_files(table_dir):
    path = str(table_dir)
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"], properties={MANIFEST_PROPERTY: "true"})
    table.append(rows(0, 4))
    table.append(rows(4, 4, regions=("ap",)))
    refresh_manifest_after_commit(table._store, None, table.overwrite(rows(100, 2, regions=("us",))))
    described = DeltaTable(path).snapshot  # version 3: what the manifests on disk describe

    metrics = refresh_manifest_after_commit(table._store, described, restore(table, 1))
    assert not metrics.full and metrics.manifests_written == 2  # region=eu is back, region=us changed
    lines = sorted(
        line[len("file:") :]
        for manifest in (table_dir / MANIFEST_DIR).rglob("manifest")
        for line in manifest.read_text().splitlines()
    )
    assert lines == sorted(DeltaTable(path).file_uris()) == sorted(DeltaTable(path, version=1).file_uris())
    dirs = sorted(p.parent.name for p in (table_dir / MANIFEST_DIR).rglob("manifest"))
    assert dirs == ["region=eu", "region=us"]


def test_restore_puts_back_the_clustering_columns_and_keeps_other_domains(tmp_path):
    table = DeltaTable.create(
        str(tmp_path / "t"), pa.schema([("a", pa.int32()), ("b", pa.string())]), cluster_by=["a"]
    )
    table.append(pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}))  # v1
    table.alter.cluster_by(["b"])  # v2
    table.alter.cluster_by(None)  # v3: CLUSTER BY NONE
    table.restore(2)
    assert table.clustering_columns == ["b"]
    table.restore(1)  # the same object again
    assert DeltaTable(table.uri).clustering_columns == ["a"]
    table.restore(4)  # back to ["b"]: two restores commit two domain changes, in order
    assert DeltaTable(table.uri).clustering_columns == ["b"]
    restored = table.restore(2)  # to a version with the same columns: no domain written
    last = [
        json.loads(line)
        for line in table._store.get(f"_delta_log/{restored.version:020d}.json").decode().splitlines()
    ]
    assert not any("domainMetadata" in action for action in last)
