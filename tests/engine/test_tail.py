"""Tailing the log: which versions follow, and what each commit changed for a consumer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import MissingLogVersionError
from deltaplane.engine.scan import Scan
from deltaplane.engine.storage import open_store
from deltaplane.engine.tail import commit_changes, versions_after


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "p": ["a", "b"] * (n // 2)})


def test_commit_changes_tell_appends_from_rewrites_and_removals(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 4), partition_by=["p"])
    write_table(uri, rows(4, 4), mode="append")
    DeltaTable(uri).optimize()
    DeltaTable(uri).delete("id = 1")
    DeltaTable(uri).alter.add_columns([pa.field("note", pa.string())])
    store = open_store(uri)
    metadata = DeltaTable(uri, version=0).metadata
    assert versions_after(store, 0) == [1, 2, 3, 4]
    assert versions_after(store, 1, until=2) == [2]
    assert versions_after(store, 4) == []
    append = commit_changes(store, 1, metadata)
    assert append.data_change and append.appends_only and append.operation == "WRITE"
    assert append.added_rows() == 4 and append.added.num_rows == 2 and append.added_bytes > 0
    # The added files read as the table reads them.
    snapshot = DeltaTable(uri, version=1).snapshot
    got = Scan(snapshot, None, None, files=append.added).to_table()
    assert sorted(got["id"].to_pylist()) == [4, 5, 6, 7]
    assert sorted(got["p"].to_pylist()) == ["a", "a", "b", "b"]
    optimize = commit_changes(store, 2, metadata)
    assert optimize.operation == "OPTIMIZE" and not optimize.data_change
    delete = commit_changes(store, 3, metadata)
    assert delete.data_change and not delete.appends_only and delete.removed.num_rows >= 1
    alter = commit_changes(store, 4, metadata)
    assert not alter.data_change and alter.metadata_schema().names == ["id", "p", "note"]
    assert alter.timestamp > 0


def test_a_cleaned_up_gap_is_an_error(table_dir):
    uri = str(table_dir)
    for i in range(4):
        write_table(uri, rows(i * 2, 2), mode="append")
    (table_dir / "_delta_log" / f"{2:020d}.json").unlink()
    with pytest.raises(MissingLogVersionError, match="commit 2"):
        versions_after(open_store(uri), 0)


def ids(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "g": pa.array([i % 10 for i in range(n)], pa.int64()),
        }
    )


@pytest.mark.parametrize("dv", [True, False])
def test_commits_are_classified_by_what_they_do_to_rows(table_dir, dv):
    """1,200 rows in 10 files; a DELETE of 120 rows (one in ten) is a delete of 120 rows, not an
    append of the re-added files' 1,080 or 1,200 rows; with and without deletion vectors."""
    uri = str(table_dir)
    write_table(uri, ids(0), properties={"delta.enableDeletionVectors": str(dv).lower()})  # empty create
    for start in range(0, 1200, 120):
        DeltaTable(uri).append(ids(120, start))
    DeltaTable(uri).delete("g = 3")  # 12 rows in each of the 10 files
    DeltaTable(uri).update({"id": "id + 100000"}, "id = 5")
    DeltaTable(uri).optimize()
    DeltaTable(uri).alter.set_table_properties({"team.owner": "ops"})
    DeltaTable(uri).overwrite(ids(7, 50_000))
    changes = {c.version: c for c in DeltaTable(uri).changes_between(0)}
    kinds = [(c.version, c.operation, c.kind, c.rows_added, c.rows_deleted) for c in changes.values()]
    assert kinds[:10] == [(v, "WRITE", "append", 120, 0) for v in range(1, 11)]
    assert kinds[10] == (11, "DELETE", "delete", 0, 120)
    # Rows written and removed: with deletion vectors the one updated row; copy-on-write rewrites
    # the file that held it (the DELETE merged the survivors into one file of 1,080 rows).
    assert kinds[11] == ((12, "UPDATE", "update", 1, 1) if dv else (12, "UPDATE", "update", 1080, 1080))
    rest = [k[1:] for k in kinds[12:]]
    if dv:  # copy-on-write left one file: nothing to OPTIMIZE
        assert rest.pop(0) == ("OPTIMIZE", "none", 0, 0)
    assert rest == [("SET TBLPROPERTIES", "none", 0, 0), ("WRITE", "update", 7, 1200 - 120)]
    delete = changes[11]
    assert delete.data_change and delete.new_files.num_rows == (0 if dv else 1)  # survivors rewritten
    assert delete.summary()["rowsAdded"] == 0 and delete.summary()["kind"] == "delete"
    if dv:  # the same files re-added with deletion vectors: counted as removed and re-added
        assert delete.added.num_rows == 10 and delete.removed.num_rows == 10
    # The new files of the UPDATE read as exactly the updated row.
    snapshot = DeltaTable(uri, version=12).snapshot
    got = Scan(snapshot, None, None, files=changes[12].new_files).to_table()
    assert 100005 in got["id"].to_pylist() and got.num_rows == (1 if dv else 1080)


def test_an_insert_only_merge_is_an_append_and_a_cdc_only_commit_is_not_none(table_dir):
    uri = str(table_dir)
    write_table(uri, ids(10), properties={"delta.enableChangeDataFeed": "true"})
    source = ids(5, 100)
    (
        DeltaTable(uri)
        .merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_not_matched_insert_all()
        .execute()
    )
    (change,) = DeltaTable(uri).changes_between(0)
    assert (change.operation, change.kind, change.rows_added, change.rows_deleted) == (
        "MERGE",
        "append",
        5,
        0,
    )
