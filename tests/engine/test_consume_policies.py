"""Every ``on_change`` policy of ``consume_appends`` across every kind of commit a source table
gets after its first rows were consumed: DELETE, UPDATE, MERGE, OPTIMIZE, RESTORE and overwrite,
with and without deletion vectors. The expected target rows are written down here, row by row.

A RESTORE re-adds files whose rows a consumer already copied: those rows are not new, so under
``skip`` the target keeps them once (it used to get them twice), and under ``fail`` a consumer
that meets the RESTORE fails instead of copying them again.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.consume import ChangeNotConsumableError, consume_appends
from deltaplane.engine.tail import IncrementalScan, find_new_commits

OPERATIONS = ("DELETE", "UPDATE", "MERGE", "OPTIMIZE", "RESTORE", "overwrite")


def rows(ids: list[int], v: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.string())})


def source_with(uri: str, operation: str, dv: bool) -> int:
    """v0: ids 0-4, v1: ids 5-9 (two files), then ``operation`` (one or two commits), then an
    append of 100 and 101. Returns the version of the operation's (last) commit."""
    properties = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": str(dv).lower()}
    write_table(uri, rows([0, 1, 2, 3, 4]), properties=properties)
    DeltaTable(uri).append(rows([5, 6, 7, 8, 9]))
    version = None
    if operation == "DELETE":
        version = DeltaTable(uri).delete("id < 3").version
    elif operation == "UPDATE":
        version = DeltaTable(uri).update({"id": "id + 1000"}, "id = 4").version
    elif operation == "MERGE":
        version = (
            DeltaTable(uri)
            .merge(
                pa.table({"id": pa.array([4, 50], pa.int64()), "v": ["y", "z"]}),
                "t.id = s.id",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
            .version
        )
    elif operation == "OPTIMIZE":
        version = DeltaTable(uri).optimize().version
    elif operation == "RESTORE":
        DeltaTable(uri).delete("id < 5")  # v2: the rows of v0 go (the whole file without DVs)
        version = DeltaTable(uri).restore(version=1).version  # v3: they come back
    elif operation == "overwrite":
        version = DeltaTable(uri).overwrite(rows([7, 8])).version
    DeltaTable(uri).append(rows([100, 101]))
    return version


def target_rows(uri: str, *, changes: bool = False) -> list[tuple]:
    got = DeltaTable(uri).to_arrow()
    columns = ["id", "v", "_change_type"] if changes else ["id", "v"]
    return sorted(zip(*(got[c].to_pylist() for c in columns), strict=True))


def first_rows(changes: bool) -> list[tuple]:
    return [(i, "x", "insert") if changes else (i, "x") for i in range(10)]


@pytest.fixture(params=[False, True], ids=["copy-on-write", "deletion-vectors"])
def dv(request):
    return request.param


@pytest.mark.parametrize("operation", OPERATIONS)
def test_skip_copies_each_new_row_once(tmp_path, operation, dv):
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    source_with(source, operation, dv)
    # The consumer copies v0-v1 first, as a consumer that ran before the change did.
    first = consume_appends(source, target, on_change="skip", max_versions=2)
    assert first.source_versions == [0, 1]
    consume_appends(source, target, on_change="skip")
    expected = {
        # Rows the source gained by appends only; nothing it lost or rewrote, nothing twice.
        "DELETE": [*range(10), 100, 101],
        "UPDATE": [*range(10), 100, 101],
        "MERGE": [*range(10), 100, 101],  # a MERGE that updates is skipped whole (its insert of 50 too)
        "OPTIMIZE": [*range(10), 100, 101],
        "RESTORE": [*range(10), 100, 101],  # not 0-4 twice
        "overwrite": [*range(10), 100, 101],
    }[operation]
    assert target_rows(target) == [(i, "x") for i in expected]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_fail_stops_at_the_first_commit_that_is_not_an_append(tmp_path, operation, dv):
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    version = source_with(source, operation, dv)
    consume_appends(source, target, max_versions=2)
    if operation == "OPTIMIZE":  # no rows changed: nothing to fail on
        result = consume_appends(source, target)
        assert result.source_versions == [3]
        assert target_rows(target) == [(i, "x") for i in [*range(10), 100, 101]]
        return
    failing = 2  # the operation's first commit (RESTORE: its DELETE)
    with pytest.raises(ChangeNotConsumableError) as caught:
        consume_appends(source, target)
    assert caught.value.version == failing
    assert target_rows(target) == [(i, "x") for i in range(10)]  # nothing written
    if operation == "RESTORE":
        # A consumer that starts after the DELETE meets the RESTORE first: its rows were there
        # before, so it is not an append either.
        other = str(tmp_path / "other")
        with pytest.raises(ChangeNotConsumableError, match="restore") as caught:
            consume_appends(source, other, after_version=2)
        assert caught.value.version == version == 3


@pytest.mark.parametrize("operation", OPERATIONS)
def test_changes_copies_the_change_feed(tmp_path, operation, dv):
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    source_with(source, operation, dv)
    consume_appends(source, target, on_change="changes", max_versions=2)
    consume_appends(source, target, on_change="changes")
    tail = [(100, "x", "insert"), (101, "x", "insert")]
    expected = {
        "DELETE": [(0, "x", "delete"), (1, "x", "delete"), (2, "x", "delete")],
        "UPDATE": [(4, "x", "update_preimage"), (1004, "x", "update_postimage")],
        "MERGE": [(4, "x", "update_preimage"), (4, "y", "update_postimage"), (50, "z", "insert")],
        "OPTIMIZE": [],
        "RESTORE": [(i, "x", "delete") for i in range(5)] + [(i, "x", "insert") for i in range(5)],
        "overwrite": [(i, "x", "delete") for i in range(10)] + [(7, "x", "insert"), (8, "x", "insert")],
    }[operation]
    assert target_rows(target, changes=True) == sorted(first_rows(True) + expected + tail)


def test_the_issue_scenario_append_delete_restore_under_skip(tmp_path, dv):
    """Append 10 rows, DELETE them (skipped), RESTORE to before the delete: 10 rows, not 20."""
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    write_table(source, rows([]), properties={"delta.enableDeletionVectors": str(dv).lower()})
    DeltaTable(source).append(rows(list(range(10))))
    consume_appends(source, target, on_change="skip")
    DeltaTable(source).delete("id >= 0")
    consume_appends(source, target, on_change="skip")
    DeltaTable(source).restore(version=1)
    result = consume_appends(source, target, on_change="skip")
    # (a run that only skipped wrote nothing, so the target's position is still version 1)
    assert result.skipped_versions == [2, 3] and result.rows == 0
    assert target_rows(target) == [(i, "x") for i in range(10)]


def test_a_restore_is_its_own_kind_for_every_tail_reader(tmp_path, dv):
    """The classification consumers decide on: a RESTORE's re-added files are rows that came
    back (``rowsRestored``), not new rows; ``kinds=["append"]`` does not match it."""
    uri = str(tmp_path / "src")
    source_with(uri, "RESTORE", dv)
    changes = {c.version: c for c in IncrementalScan.of(uri, -1)}
    restore = changes[3]
    assert (restore.operation, restore.kind, restore.rows_added, restore.rows_restored) == (
        "RESTORE",
        "restore",
        0,
        5,
    )
    assert restore.new_files.num_rows == 0
    summary = restore.summary()
    assert (summary["kind"], summary["rowsAdded"], summary["rowsRestored"], summary["newFiles"]) == (
        "restore",
        0,
        5,
        0,
    )
    appends = find_new_commits(uri, -1, kinds=["append"])["commits"]
    assert [c["version"] for c in appends] == [0, 1, 4]
    restores = find_new_commits(uri, -1, kinds="restore")["commits"]
    assert [c["version"] for c in restores] == [3] and restores[0]["files"] == []


def test_a_restore_of_part_of_a_file_counts_the_rows_that_came_back(tmp_path, dv):
    """DELETE 3 of a file's 100 rows, RESTORE: with deletion vectors the same file comes back
    with no deletion vector (3 rows back in place); copy-on-write, the original file comes back
    (100 rows) and the rewritten one (97 rows) goes."""
    uri = str(tmp_path / "src")
    write_table(uri, rows(list(range(100))), properties={"delta.enableDeletionVectors": str(dv).lower()})
    DeltaTable(uri).delete("id < 3")
    DeltaTable(uri).restore(version=0)
    restore = next(iter(IncrementalScan.of(uri, 1)))
    counts = (restore.kind, restore.rows_added, restore.rows_deleted, restore.rows_restored)
    assert counts == (("restore", 0, 0, 3) if dv else ("restore", 0, 97, 100))
    assert find_new_commits(uri, 1, kinds=["append", "delete", "update"])["commits"] == []
