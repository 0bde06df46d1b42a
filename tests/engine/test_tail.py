"""Tailing the log: which versions follow, and what each commit changed for a consumer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from engine import DeltaTable, write_table
from engine.errors import MissingLogVersionError
from engine.scan import Scan
from engine.storage import open_store
from engine.tail import commit_changes, versions_after


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
