"""VACUUM on real tables: what it deletes, and above all what it must never delete.

Age is simulated without sleeping: ``now_ms`` is moved forward (tombstones written "now" are
then old), and file or commit modification times are set with ``os.utime``. Logs that need
exact deletion timestamps are written by hand (``tests.logbuilder``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.log_cleanup import execute_log_cleanup, plan_log_cleanup
from deltaplane.engine.commands.vacuum import (
    LAST_VACUUM_INFO,
    VacuumLiteUnavailableError,
    execute_vacuum,
    plan_vacuum,
    read_last_vacuum_info,
    vacuumable,
)
from deltaplane.engine.errors import DataFileError, ProtocolError, RetentionTooShortError
from deltaplane.engine.storage import LocalStore
from tests.engine.test_write import delta_rs_rows
from tests.helpers import assert_same_rows
from tests.logbuilder import add, commit_info, metadata, protocol, remove, write_commit, write_parquet

DAY = 86_400_000
HOUR = 3_600_000
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def now_ms() -> int:
    return int(time.time() * 1000)


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "region": [("eu", "us")[i % 2] for i in range(n)],
        }
    )


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def log_contents(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (root / "_delta_log").rglob("*") if p.is_file()}


def live_keys(table: DeltaTable) -> set[str]:
    return set(table.snapshot.files.column("path").to_pylist())


def vacuum(table: DeltaTable, **kwargs):
    """Plan and run, as the facade will: returns (plan, metrics)."""
    plan = plan_vacuum(table._store, table.snapshot, **kwargs)
    return plan, execute_vacuum(table._store, plan, snapshot=table.snapshot)


def sorted_ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


# --- full mode ------------------------------------------------------------------------------------


def test_full_vacuum_deletes_expired_files_and_old_orphans_and_nothing_else(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["region"])
    t.append(rows(0, 10))
    overwritten = live_keys(t)
    t.overwrite(rows(100, 4))
    live = live_keys(t)
    assert overwritten and live and not (overwritten & live)
    now = now_ms() + 8 * DAY  # the overwrite's tombstones are now 8 days old
    (root / "region=eu" / "orphan-old.parquet").write_bytes(b"failed write")
    set_mtime(root / "region=eu" / "orphan-old.parquet", now - 10 * DAY)
    (root / "orphan-fresh.parquet").write_bytes(b"a writer about to commit")
    set_mtime(root / "orphan-fresh.parquet", now - HOUR)
    hidden = ["_checkpoints/offsets/0", ".hidden", "_SUCCESS", "region=eu/.part.crc", "region=eu/_tmp/x"]
    for key in hidden:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b"x")
        set_mtime(root / key, now - 30 * DAY)
    log_before = log_contents(root)
    version_before = t.version

    plan, metrics = vacuum(t, now_ms=now)

    expected = sorted(overwritten | {"region=eu/orphan-old.parquet"})
    assert list(plan.files) == expected and metrics.files == expected
    remaining = files_under(root)
    assert not (set(expected) & remaining)
    assert live <= remaining and "orphan-fresh.parquet" in remaining and set(hidden) <= remaining
    log_after = log_contents(root)
    assert {k: log_after[k] for k in log_before} == log_before  # nothing in the log changed
    new = set(log_after) - set(log_before)
    assert new == {f"{version_before + 1:020d}.json", f"{version_before + 2:020d}.json", "_last_vacuum_info"}
    assert sorted_ids(DeltaTable(str(root)).to_arrow()) == list(range(100, 104))
    assert metrics.num_deleted_files == len(expected) and metrics.status == "COMPLETED"


def test_dry_run_deletes_nothing_and_lists_what_a_run_deletes(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA)
    t.append(rows(0, 5))
    t.append(rows(5, 5))
    t.delete("id < 5")  # removes the first file
    now = now_ms() + 8 * DAY
    before = files_under(root)
    plan = plan_vacuum(t._store, t.snapshot, now_ms=now)
    assert plan.num_files == 1 and list(plan.files) == sorted(plan.files)
    assert files_under(root) == before and t.version == DeltaTable(str(root)).version
    assert read_last_vacuum_info(t._store) is None
    metrics = execute_vacuum(t._store, plan, snapshot=t.snapshot)
    assert metrics.files == list(plan.files)
    assert files_under(root) == (before - set(plan.files)) | {
        f"_delta_log/{t.version + 1:020d}.json",
        f"_delta_log/{t.version + 2:020d}.json",
        LAST_VACUUM_INFO,
    }


def test_untracked_files_survive_until_older_than_the_retention(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA)
    t.append(rows(0, 3))
    now = now_ms()
    for name, age in (("fresh.parquet", 0), ("six-days.parquet", 6 * DAY), ("eight-days.parquet", 8 * DAY)):
        (root / name).write_bytes(b"x")
        set_mtime(root / name, now - age)
    plan, _ = vacuum(t, now_ms=now)
    assert plan.files == ("eight-days.parquet",)
    assert {"fresh.parquet", "six-days.parquet"} <= files_under(root)
    assert "eight-days.parquet" not in files_under(root)


@pytest.mark.parametrize("mode", ["full", "lite"])
def test_a_version_inside_the_retention_keeps_its_files_and_older_ones_fail_clearly(tmp_path, mode):
    """Hand-built log with exact deletion timestamps: a removed 10 days ago, b 2 days ago."""
    root = tmp_path / "t"
    store = LocalStore(str(root))
    now = now_ms()
    for name, ids in (("a.parquet", [1, 2]), ("b.parquet", [3, 4]), ("c.parquet", [5, 6])):
        write_parquet(store, name, pa.table({"id": pa.array(ids, pa.int64()), "part": ["x", "x"]}))
        set_mtime(root / name, now - 20 * DAY)
    write_commit(store, 0, [commit_info(), protocol(), metadata(), add("a.parquet")])
    write_commit(
        store, 1, [commit_info(), remove("a.parquet", deletion_timestamp=now - 10 * DAY), add("b.parquet")]
    )
    write_commit(
        store, 2, [commit_info(), remove("b.parquet", deletion_timestamp=now - 2 * DAY), add("c.parquet")]
    )
    for version, age in ((0, 15 * DAY), (1, 10 * DAY), (2, 2 * DAY)):
        set_mtime(root / "_delta_log" / f"{version:020d}.json", now - age)
    pinned = DeltaTable(str(root), version=1)  # a reader at a version inside the window

    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now, mode=mode)

    assert plan.files == ("a.parquet",)
    assert plan.latest_version_outside_window == 1
    assert sorted_ids(pinned.to_arrow()) == [3, 4]
    assert sorted_ids(DeltaTable(str(root), version=1).to_arrow()) == [3, 4]
    assert sorted_ids(DeltaTable(str(root)).to_arrow()) == [5, 6]
    with pytest.raises(DataFileError, match="VACUUM") as info:
        DeltaTable(str(root), version=0).to_arrow()
    assert info.value.path == "a.parquet" and "a.parquet" in str(info.value)


def test_files_mentioned_by_a_commit_inside_the_window_are_kept_whatever_their_tombstone_says(tmp_path):
    """A writer with a skewed clock stamped a recent remove as 30 days old: the commit's own
    time (inside the window) keeps its files for time travel."""
    root = tmp_path / "t"
    store = LocalStore(str(root))
    now = now_ms()
    for name in ("a.parquet", "b.parquet"):
        write_parquet(store, name, pa.table({"id": pa.array([1], pa.int64()), "part": ["x"]}))
        set_mtime(root / name, now - 40 * DAY)
    write_commit(store, 0, [commit_info(), protocol(), metadata(), add("a.parquet")])
    write_commit(
        store, 1, [commit_info(), remove("a.parquet", deletion_timestamp=now - 30 * DAY), add("b.parquet")]
    )
    set_mtime(root / "_delta_log" / f"{0:020d}.json", now - 40 * DAY)
    plan = plan_vacuum(store, DeltaTable(str(root)).snapshot, now_ms=now)
    assert plan.files == ()
    set_mtime(root / "_delta_log" / f"{1:020d}.json", now - 8 * DAY)  # now both commits are old
    plan = plan_vacuum(store, DeltaTable(str(root)).snapshot, now_ms=now)
    assert plan.files == ("a.parquet",)


def hand_built(
    root: Path, now: int, commits: list[list[dict]], ages: list[int], files=("a", "b")
) -> LocalStore:
    """Data files ``<name>.parquet`` (20 days old) and commits with the given ages."""
    store = LocalStore(str(root))
    for name in files:
        write_parquet(
            store, f"{name}.parquet", pa.table({"id": pa.array([ord(name)], pa.int64()), "part": ["x"]})
        )
        set_mtime(root / f"{name}.parquet", now - 20 * DAY)
    for version, (actions, age) in enumerate(zip(commits, ages, strict=True)):
        head = [protocol(), metadata()] if version == 0 else []
        write_commit(store, version, [commit_info(), *head, *actions])
        set_mtime(root / "_delta_log" / f"{version:020d}.json", now - age)
    return store


def a_replaced_by_b(root: Path, now: int, removed_ago: int) -> LocalStore:
    """``hand_built``: a.parquet added 15 days ago, then removed (its tombstone says
    ``removed_ago``) in a 10-day-old commit that adds b.parquet."""
    tombstone = remove("a.parquet", deletion_timestamp=now - removed_ago)
    return hand_built(root, now, [[add("a.parquet")], [tombstone, add("b.parquet")]], [15 * DAY, 10 * DAY])


@pytest.mark.parametrize("mode", ["full", "lite"])
def test_an_unexpired_tombstone_keeps_its_file_even_when_its_commit_looks_old(tmp_path, mode):
    """The commit's file time says 10 days, its remove says 2 days (a copied log, a skewed
    clock): the tombstone's own timestamp decides, as in Delta Spark."""
    root = tmp_path / "t"
    now = now_ms()
    store = a_replaced_by_b(root, now, removed_ago=2 * DAY)
    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now, mode=mode)
    assert plan.latest_version_outside_window == 1 and plan.files == ()
    assert sorted_ids(DeltaTable(str(root), version=0).to_arrow()) == [ord("a")]
    # the next lite VACUUM must look at version 1 again, when the remove has expired
    assert read_last_vacuum_info(store) == 0


@pytest.mark.parametrize("mode", ["full", "lite"])
def test_a_file_removed_long_ago_then_restored_and_removed_again_recently_is_kept(tmp_path, mode):
    root = tmp_path / "t"
    now = now_ms()
    hand_built(
        root,
        now,
        [
            [add("a.parquet")],
            [remove("a.parquet", deletion_timestamp=now - 12 * DAY), add("b.parquet")],
            [add("a.parquet")],  # RESTORE brings a back
            [remove("a.parquet", deletion_timestamp=now - DAY)],
        ],
        [15 * DAY, 12 * DAY, 10 * DAY, DAY],
    )
    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now, mode=mode)
    assert plan.files == ()
    assert sorted_ids(DeltaTable(str(root), version=2).to_arrow()) == [ord("a"), ord("b")]


@pytest.mark.parametrize("mode", ["full", "lite"])
def test_a_fresh_object_is_never_deleted_even_if_the_log_removed_its_path_long_ago(tmp_path, mode):
    root = tmp_path / "t"
    now = now_ms()
    store = a_replaced_by_b(root, now, removed_ago=10 * DAY)
    set_mtime(root / "a.parquet", now - HOUR)  # rewritten an hour ago, by whatever
    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now, mode=mode)
    assert plan.files == () and "a.parquet" in files_under(root)
    assert read_last_vacuum_info(store) == (None if mode == "lite" else 1)  # lite re-reads it later
    set_mtime(root / "a.parquet", now - 8 * DAY)
    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now, mode=mode)
    assert plan.files == ("a.parquet",)


def test_empty_partition_directories_are_removed_on_local_tables(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["region"])
    t.append(rows(0, 4))
    t.overwrite(rows(10, 2).filter(pc.equal(rows(10, 2)["region"], "eu")))
    _, metrics = vacuum(t, now_ms=now_ms() + 8 * DAY)
    assert metrics.num_deleted_files == 2 and metrics.num_vacuumed_directories == 1
    assert not (root / "region=us").exists() and (root / "region=eu").is_dir()
    end = DeltaTable(str(root)).history(1)[0]
    assert end["operationMetrics"]["numVacuumedDirectories"] == "1"


# --- deletion vectors -----------------------------------------------------------------------------


def dv_files(root: Path) -> set[str]:
    return {p.name for p in root.glob("deletion_vector_*.bin")}


@pytest.mark.parametrize("mode", ["full", "lite"])
def test_deletion_vector_files_of_live_rows_and_unexpired_removes_survive(tmp_path, mode):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    t.append(rows(0, 1000))
    t.delete("id % 7 = 0")  # DV 1, in a file of its own (too large to be inline)
    first = dv_files(root)
    t.delete("id % 11 = 0")  # DV 2 = DV 1 + more: remove(f, dv1) + add(f, dv2)
    second = dv_files(root) - first
    assert len(first) == 1 and len(second) == 1
    expected = [i for i in range(1000) if i % 7 and i % 11]
    start = now_ms()

    plan = plan_vacuum(t._store, t.snapshot, now_ms=start + 6 * DAY, mode=mode)
    assert plan.files == ()  # dv1 is only referenced by a remove, but it has not expired

    plan, _ = vacuum(t, now_ms=start + 8 * DAY, mode=mode)
    assert plan.files == tuple(first)
    assert dv_files(root) == second
    latest = DeltaTable(str(root))
    assert sorted_ids(latest.to_arrow()) == expected
    assert_same_rows(latest.to_arrow(), delta_rs_rows(str(root)).select(SCHEMA.names).cast(SCHEMA))
    with pytest.raises(
        DataFileError, match=r"deletion vector file .* may have been removed by VACUUM"
    ) as info:
        DeltaTable(str(root), version=2).to_arrow()  # read through dv1
    assert info.value.path == next(iter(first))


# --- change data ----------------------------------------------------------------------------------


def test_change_data_files_are_vacuumed_unless_a_commit_inside_the_window_needs_them(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, properties={"delta.enableChangeDataFeed": "true"})
    t.append(rows(0, 10))
    t.update({"region": "'ap'"}, "id < 3")
    cdc = {k for k in files_under(root) if k.startswith("_change_data/")}
    assert cdc
    now = now_ms()
    for key in cdc:  # the files are old, but the commit that references them is not
        set_mtime(root / key, now - 30 * DAY)
    (root / "_change_data" / "orphan.snappy.parquet").write_bytes(b"x")
    set_mtime(root / "_change_data" / "orphan.snappy.parquet", now - 30 * DAY)
    plan, _ = vacuum(t, now_ms=now)
    assert plan.files == ("_change_data/orphan.snappy.parquet",)
    assert cdc <= files_under(root)
    assert DeltaTable(str(root)).changes(2, 2).num_rows == 6  # pre- and post-images of 3 rows

    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now + 8 * DAY)  # now the update is old too
    assert cdc <= set(plan.files)
    assert not any(k.startswith("_change_data/") for k in files_under(root))


def test_lite_mode_deletes_change_data_of_old_commits(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, properties={"delta.enableChangeDataFeed": "true"})
    t.append(rows(0, 10))
    t.delete("id < 3")
    cdc = {k for k in files_under(root) if k.startswith("_change_data/")}
    assert cdc
    plan, _ = vacuum(t, now_ms=now_ms() + 8 * DAY, mode="lite")
    assert cdc <= set(plan.files) and not (cdc & files_under(root))
    assert sorted_ids(DeltaTable(str(root)).to_arrow()) == list(range(3, 10))


# --- what is hidden -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("part-0.parquet", True),
        ("p=1/part-0.parquet", True),
        ("ab/deletion_vector_0b4c.bin", True),
        ("_change_data/cdc-0.parquet", True),
        ("_change_data/p=1/cdc-0.parquet", True),
        ("_p=1/part-0.parquet", True),  # partition column "_p"
        ("_delta_log/00000000000000000000.json", False),
        ("_delta_log/_sidecars/x.parquet", False),
        ("_checkpoints/offsets/1", False),
        ("_change_data", False),  # a file, not the directory
        ("p=1/_tmp/part-0.parquet", False),
        ("p=1/.part-0.parquet.crc", False),
        ("_SUCCESS", False),
        ("_q=1/part-0.parquet", False),  # not a partition column
        ("metadata/v1.metadata.json", True),
        ("dir/", False),
    ],
)
def test_hidden_paths(key, expected):
    assert vacuumable(key, ("_p=",)) is expected


def test_iceberg_metadata_is_hidden_when_uniform_is_on():
    assert vacuumable("metadata/v1.metadata.json", iceberg=True) is False
    assert vacuumable("metadata.parquet", iceberg=True) is True


def test_partition_directories_of_underscore_columns_are_vacuumed(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(
        str(root), pa.schema([("id", pa.int64()), ("_p", pa.string())]), partition_by=["_p"]
    )
    t.append(pa.table({"id": pa.array([1, 2], pa.int64()), "_p": ["a", "b"]}))
    now = now_ms()
    for key in ("_p=a/orphan.parquet", "_other/orphan.parquet"):
        (root / key).parent.mkdir(exist_ok=True)
        (root / key).write_bytes(b"x")
        set_mtime(root / key, now - 30 * DAY)
    plan, _ = vacuum(t, now_ms=now)
    assert plan.files == ("_p=a/orphan.parquet",)
    assert "_other/orphan.parquet" in files_under(root)
    assert sorted_ids(DeltaTable(str(root)).to_arrow()) == [1, 2]


# --- retention ------------------------------------------------------------------------------------


def test_a_retention_shorter_than_the_table_s_needs_an_explicit_override(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA)
    t.append(rows(0, 3))
    t.overwrite(rows(3, 3))
    with pytest.raises(RetentionTooShortError) as info:
        plan_vacuum(t._store, t.snapshot, retention_hours=1)
    message = str(info.value)
    assert "1 hours" in message and "168 hours" in message and "enforce_retention=False" in message
    plan, metrics = vacuum(t, retention_hours=0, enforce_retention=False)
    assert plan.num_files == 1 and metrics.num_deleted_files == 1
    start = DeltaTable(str(root)).history(2)[1]
    assert start["operation"] == "VACUUM START"
    assert start["operationParameters"] == {
        "retentionCheckEnabled": "false",
        "defaultRetentionMillis": str(7 * DAY),
        "specifiedRetentionMillis": "0",
    }


def test_the_table_property_sets_the_default_retention(tmp_path):
    root = tmp_path / "t"
    props = {"delta.deletedFileRetentionDuration": "interval 1 hours"}
    t = DeltaTable.create(str(root), SCHEMA, properties=props)
    t.append(rows(0, 3))
    t.overwrite(rows(3, 3))
    later = now_ms() + 90 * 60_000  # the overwrite was 90 minutes ago
    assert plan_vacuum(t._store, t.snapshot, now_ms=later - HOUR).files == ()
    assert plan_vacuum(t._store, t.snapshot, now_ms=later).num_files == 1
    plan = plan_vacuum(t._store, t.snapshot, retention_hours=2, now_ms=later)  # longer is fine
    assert plan.files == () and plan.specified_retention_ms == 2 * HOUR


# --- commits --------------------------------------------------------------------------------------


def test_start_and_end_commits_record_delta_spark_s_parameters_and_metrics(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA)
    t.append(rows(0, 3))
    t.append(rows(3, 3))
    t.delete("id < 3")
    plan, metrics = vacuum(t, now_ms=now_ms() + 8 * DAY)
    end, start = DeltaTable(str(root)).history(2)
    assert (start["version"], end["version"]) == (metrics.start_version, metrics.end_version) == (4, 5)
    assert start["operation"] == "VACUUM START" and end["operation"] == "VACUUM END"
    assert start["operationParameters"] == {
        "retentionCheckEnabled": "true",
        "defaultRetentionMillis": str(7 * DAY),
    }
    assert start["operationMetrics"] == {"numFilesToDelete": "1", "sizeOfDataToDelete": str(plan.sizes[0])}
    assert end["operationParameters"] == {"status": "COMPLETED"}
    assert end["operationMetrics"] == {"numDeletedFiles": "1", "numVacuumedDirectories": "0"}
    assert start["isolationLevel"] == end["isolationLevel"] == "SnapshotIsolation"
    commit = json.loads((root / "_delta_log" / f"{4:020d}.json").read_text().splitlines()[0])
    assert list(commit) == ["commitInfo"]  # nothing but commitInfo: the table state is unchanged
    assert sorted_ids(DeltaTable(str(root), version=5).to_arrow()) == sorted_ids(
        DeltaTable(str(root), version=3).to_arrow()
    )
    # delta-rs reads the history with the VACUUM commits in it
    assert [h["operation"] for h in deltalake.DeltaTable(str(root)).history(2)] == [
        "VACUUM END",
        "VACUUM START",
    ]


def test_nothing_to_delete_commits_nothing(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA)
    t.append(rows(0, 3))
    _, metrics = vacuum(t, now_ms=now_ms() + 8 * DAY)
    assert metrics.files == [] and metrics.start_version is None
    assert DeltaTable(str(root)).version == 1


def test_a_concurrent_append_neither_conflicts_nor_loses_its_file(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA)
    t.append(rows(0, 3))
    t.overwrite(rows(3, 3))
    plan = plan_vacuum(t._store, t.snapshot, now_ms=now_ms() + 8 * DAY)
    other = DeltaTable(str(root))
    other.append(rows(100, 2))  # lands between the plan and the VACUUM START commit
    metrics = execute_vacuum(t._store, plan, snapshot=t.snapshot)
    assert (metrics.start_version, metrics.end_version) == (4, 5)
    assert sorted_ids(DeltaTable(str(root)).to_arrow()) == [3, 4, 5, 100, 101]
    assert live_keys(DeltaTable(str(root))) <= files_under(root)


# --- protocol -------------------------------------------------------------------------------------


def test_vacuum_protocol_check_refuses_a_table_whose_writer_protocol_is_not_supported(tmp_path):
    root = tmp_path / "t"
    store = LocalStore(str(root))
    now = now_ms()
    features = protocol(3, 7, ["vacuumProtocolCheck"], ["vacuumProtocolCheck", "icebergCompatV1"])
    write_parquet(store, "a.parquet", pa.table({"id": pa.array([1], pa.int64()), "part": ["x"]}))
    write_commit(store, 0, [commit_info(), features, metadata(), add("a.parquet")])
    (root / "orphan.parquet").write_bytes(b"x")
    set_mtime(root / "orphan.parquet", now - 30 * DAY)
    table = DeltaTable(str(root))
    assert sorted_ids(table.to_arrow()) == [1]  # readable
    with pytest.raises(ProtocolError, match=r"vacuumProtocolCheck.*icebergCompatV1"):
        plan_vacuum(store, table.snapshot, now_ms=now)
    assert "orphan.parquet" in files_under(root)


def test_without_the_check_a_readable_table_is_vacuumed_but_its_log_is_not_written(tmp_path):
    root = tmp_path / "t"
    store = LocalStore(str(root))
    now = now_ms()
    write_parquet(store, "a.parquet", pa.table({"id": pa.array([1], pa.int64()), "part": ["x"]}))
    write_commit(
        store, 0, [commit_info(), protocol(1, 7, None, ["icebergCompatV1"]), metadata(), add("a.parquet")]
    )
    (root / "orphan.parquet").write_bytes(b"x")
    set_mtime(root / "orphan.parquet", now - 30 * DAY)
    plan, metrics = vacuum(DeltaTable(str(root)), now_ms=now)
    assert plan.files == ("orphan.parquet",) and not plan.record_commits
    assert metrics.num_deleted_files == 1 and metrics.start_version is None
    assert DeltaTable(str(root)).version == 0 and "a.parquet" in files_under(root)


def test_a_table_with_vacuum_protocol_check_deltaplane_can_write_is_vacuumed(tmp_path):
    root = tmp_path / "t"
    created = DeltaTable.create(
        str(root),
        pa.schema([("id", pa.int64())]),
        properties={"delta.feature.vacuumProtocolCheck": "supported"},
    )
    created.append(pa.table({"id": pa.array(range(50), pa.int64())}))
    created.append(pa.table({"id": pa.array(range(50, 100), pa.int64())}))
    table = DeltaTable(str(root))
    assert "vacuumProtocolCheck" in table.protocol.reader_features
    (root / "orphan.parquet").write_bytes(b"x")
    set_mtime(root / "orphan.parquet", now_ms() - 30 * DAY)
    plan, metrics = vacuum(table)
    assert plan.files == ("orphan.parquet",) and metrics.end_version == 4
    assert sorted_ids(DeltaTable(str(root)).to_arrow()) == list(range(100))
    assert DeltaTable(str(root)).history(1)[0]["operation"] == "VACUUM END"


# --- lite mode ------------------------------------------------------------------------------------


def overwritten(root: Path) -> tuple[DeltaTable, set[str]]:
    """A table at ``root`` of rows 0 to 2, then overwritten with rows 3 to 5 (versions 0 to 2);
    the table and the keys of the files the overwrite removed."""
    t = DeltaTable.create(str(root), SCHEMA)
    t.append(rows(0, 3))
    first = live_keys(t)
    t.overwrite(rows(3, 3))
    return t, first


def test_lite_mode_finds_removed_files_but_not_untracked_ones(tmp_path):
    root = tmp_path / "t"
    t, first = overwritten(root)
    now = now_ms() + 8 * DAY
    (root / "orphan.parquet").write_bytes(b"x")
    set_mtime(root / "orphan.parquet", now - 30 * DAY)
    plan, _ = vacuum(t, now_ms=now, mode="lite")
    assert plan.files == tuple(sorted(first))
    assert (plan.eligible_start_version, plan.eligible_end_version) == (0, 2)
    assert "orphan.parquet" in files_under(root)
    assert read_last_vacuum_info(t._store) == 2
    # the next lite run starts after what this one covered (its own START/END commits)
    again = plan_vacuum(t._store, DeltaTable(str(root)).snapshot, now_ms=now, mode="lite")
    assert (again.eligible_start_version, again.eligible_end_version) == (3, 4) and again.files == ()
    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now, mode="full")
    assert plan.files == ("orphan.parquet",)


def test_lite_mode_refuses_when_the_log_no_longer_holds_what_it_needs(tmp_path):
    root = tmp_path / "t"
    t, first = overwritten(root)
    t.append(rows(6, 3))
    t.checkpoint()
    t.append(rows(9, 3))
    now = now_ms() + 40 * DAY
    cleanup = execute_log_cleanup(t._store, plan_log_cleanup(t._store, t.snapshot, now_ms=now))
    assert cleanup.earliest_version == 3 and not (root / "_delta_log" / f"{0:020d}.json").exists()
    with pytest.raises(VacuumLiteUnavailableError, match="mode='full'"):
        plan_vacuum(t._store, DeltaTable(str(root)).snapshot, now_ms=now, mode="lite")
    plan, _ = vacuum(DeltaTable(str(root)), now_ms=now, mode="full")
    assert plan.files == tuple(sorted(first))
    assert read_last_vacuum_info(t._store) == 4
    again = plan_vacuum(t._store, DeltaTable(str(root)).snapshot, now_ms=now, mode="lite")  # works again
    assert again.files == () and again.eligible_start_version == 5


# --- interop and S3 -------------------------------------------------------------------------------


def test_delta_rs_reads_the_vacuumed_table_as_we_do(tmp_path):
    root = tmp_path / "t"
    t = DeltaTable.create(str(root), SCHEMA, partition_by=["region"])
    for i in range(3):
        t.append(rows(i * 10, 10))
    t.delete("id % 3 = 0")
    replacement = rows(5, 10)
    t.overwrite(replacement.filter(pc.equal(replacement["region"], "eu")), predicate="region = 'eu'")
    _, metrics = vacuum(t, now_ms=now_ms() + 8 * DAY)
    assert metrics.num_deleted_files > 0
    ours = DeltaTable(str(root)).to_arrow()
    theirs = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    assert_same_rows(ours, theirs.select(SCHEMA.names).cast(SCHEMA))


@pytest.mark.xdist_group("s3")
def test_full_vacuum_on_s3_deletes_the_old_unreferenced_file_and_keeps_live_ones(s3_server):
    uri = s3_server.uri()
    options = s3_server.options()
    t = DeltaTable.create(uri, SCHEMA, storage_options=options)
    t.append(rows(0, 5))
    replaced = live_keys(t)
    t.overwrite(rows(5, 5))
    live = live_keys(t)
    t._store.put("orphan.parquet", b"failed write")
    t._store.put("_checkpoints/state", b"kept")
    plan, metrics = vacuum(t, now_ms=now_ms() + 8 * DAY)
    assert plan.files == tuple(sorted(replaced | {"orphan.parquet"}))
    keys = {m.key for m in t._store.list("", recursive=True)}
    assert live <= keys and "_checkpoints/state" in keys and not (set(plan.files) & keys)
    assert metrics.end_version == 4
    theirs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options()).to_pyarrow_table()
    assert_same_rows(
        DeltaTable(uri, storage_options=options).to_arrow(), theirs.select(SCHEMA.names).cast(SCHEMA)
    )
