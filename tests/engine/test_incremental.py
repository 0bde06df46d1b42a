"""The one incremental reader (``IncrementalScan``), the commit filter, watermarks and the consume
API, on real tables."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.commit_filter import FILTER_ARGS, CommitFilter
from deltaplane.engine.consume import ChangeNotConsumableError, consume_appends, consumed_version
from deltaplane.engine.errors import (
    CorruptLogError,
    InvalidArgumentError,
    MissingLogVersionError,
    TableNotFoundError,
)
from deltaplane.engine.storage import open_store
from deltaplane.engine.tail import IncrementalScan, find_new_commits, versions_after
from deltaplane.engine.watermarks import WATERMARK_DIR, read_watermark, write_watermark


def rows(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "part": [part] * n})


def dv_table(uri: str) -> None:
    """v0..v2 appends, v3 a deletion-vector DELETE (files re-added), v4 an ALTER adding a
    column, v5 an append with the new column, v6 OPTIMIZE."""
    write_table(uri, rows(0, 10), partition_by=["part"], properties={"delta.enableDeletionVectors": "true"})
    write_table(uri, rows(10, 10), mode="append")
    write_table(uri, rows(20, 10, "b"), mode="append")
    DeltaTable(uri).delete("id % 5 = 0")
    DeltaTable(uri).alter.add_columns([pa.field("note", pa.string())])
    write_table(
        uri,
        pa.table({"id": pa.array([100], pa.int64()), "part": ["b"], "note": ["new"]}),
        mode="append",
    )
    DeltaTable(uri).optimize(min_num_files=1)


def test_the_scan_follows_metadata_and_gives_only_appended_rows(tmp_path):
    uri = str(tmp_path / "t")
    dv_table(uri)
    scan = IncrementalScan.of(uri, 0)
    changes = list(scan)
    assert [c.version for c in changes] == [1, 2, 3, 4, 5, 6] and scan.last_version == 6
    assert [c.kind for c in changes] == ["append", "append", "delete", "none", "append", "none"]
    # The metadata in effect: the ALTER's from v4 on; the protocol is known at every commit.
    assert [c.table_metadata.schema_string.count('"note"') for c in changes] == [0, 0, 0, 1, 1, 1]
    assert all(c.table_protocol is not None for c in changes)
    assert sorted(scan.appended_rows(changes[0])["id"].to_pylist()) == list(range(10, 20))
    new = scan.appended_rows(changes[4])
    assert new.column_names == ["id", "part", "note"] and new.to_pylist() == [
        {"id": 100, "part": "b", "note": "new"}
    ]
    assert scan.appended_rows(changes[5]).num_rows == 0  # OPTIMIZE: nothing new
    with pytest.raises(InvalidArgumentError, match=r"version 3 .* is a delete"):
        scan.appended_rows(changes[2])  # the DELETE's re-added files are not new rows
    assert scan.file_uris(changes[2]) == [] and len(scan.file_uris(changes[1])) == 1
    assert scan.file_uris(changes[1])[0].startswith(uri) and scan.file_uris(changes[1])[0].endswith(
        ".parquet"
    )
    # Iterated again: the same commits, not read again.
    assert [id(c) for c in scan] == [id(c) for c in changes]


def test_the_range_bounds(tmp_path):
    uri = str(tmp_path / "t")
    dv_table(uri)
    assert IncrementalScan.of(uri, 1, until_version=3).versions == [2, 3]
    assert IncrementalScan.of(uri, -1, max_versions=2).versions == [0, 1]
    assert IncrementalScan.of(uri, 6).versions == [] and IncrementalScan.of(uri, 6).last_version == 6
    first = next(iter(IncrementalScan.of(uri, 3)))  # starting mid-log: config read at that version
    assert first.version == 4 and first.table_metadata.schema_string.count('"note"') == 1
    for bad in (-2, "3", True):
        with pytest.raises(InvalidArgumentError):
            IncrementalScan.of(uri, bad)
    with pytest.raises(InvalidArgumentError):
        IncrementalScan.of(uri, 0, max_versions=0)


def test_a_table_that_disappears_is_an_error_not_nothing_new(tmp_path):
    uri = str(tmp_path / "t")
    write_table(uri, rows(0, 3))
    write_table(uri, rows(3, 3), mode="append")
    shutil.rmtree(tmp_path / "t")
    with pytest.raises(TableNotFoundError, match="had read version 1"):
        versions_after(open_store(uri), 1)
    with pytest.raises(TableNotFoundError):
        find_new_commits(uri, 0)
    # A consumer that never saw the table waits for it to appear.
    assert find_new_commits(uri, -1)["commits"] == []


def test_a_log_cleaned_past_the_position_is_an_error(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(4):
        write_table(uri, rows(i, 1), mode="append")
    (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").unlink()
    with pytest.raises(MissingLogVersionError, match="commit 1"):
        list(IncrementalScan.of(uri, 0))


def test_commit_filter_is_one_definition_checked_with_its_owner():
    assert FILTER_ARGS == ("data_change_only", "kinds", "operations", "partition_filter")
    assert CommitFilter.of({"kinds": "append"}).kinds == ("append",)
    assert CommitFilter.of({"data_change_only": None}).data_change_only is True
    for bad, match in (
        ({"kinds": ["apend"]}, "unknown commit kind"),
        ({"kinds": [1]}, "kinds must be a list of names"),
        ({"data_change_only": "yes"}, "data_change_only"),
        ({"partition_filter": 5}, "partition_filter"),
        ({"kind": ["append"]}, r"unexpected argument\(s\) \['kind'\]"),
    ):
        with pytest.raises(InvalidArgumentError, match=match) as caught:
            CommitFilter.of(bad, owner="S(task_id='w')")
        assert str(caught.value).startswith("S(task_id='w')")


def test_a_partition_filter_follows_a_schema_change(tmp_path):
    uri = str(tmp_path / "t")
    dv_table(uri)
    found = find_new_commits(uri, -1, partition_filter="part = 'b'", kinds=["append"])
    assert [c["version"] for c in found["commits"]] == [2, 5] and found["latest_version"] == 6
    assert found["commits"][1]["files"][0].endswith(".parquet")


def test_watermarks_round_trip_and_refuse_garbage(tmp_path):
    uri = str(tmp_path / "t")
    write_table(uri, rows(0, 1))
    assert read_watermark(uri, "dag.task") is None
    write_watermark(uri, "dag.task", 7)
    write_watermark(uri, "dag.task", 3)  # the last writer wins: the caller decides
    assert read_watermark(uri, "dag.task") == 3
    assert (tmp_path / "t" / WATERMARK_DIR / "dag.task.json").exists()
    assert DeltaTable(uri).count() == 1  # a hidden directory: not data
    for bad in ("3", True, -2):
        with pytest.raises(InvalidArgumentError):
            write_watermark(uri, "k", bad)
    with pytest.raises(InvalidArgumentError):
        read_watermark(uri, "")
    (tmp_path / "t" / WATERMARK_DIR / "broken.json").write_bytes(b'{"version": "x"')
    with pytest.raises(CorruptLogError, match=r"broken\.json"):
        read_watermark(uri, "broken")


def test_consume_appends_exactly_once_in_bounded_steps(tmp_path):
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    dv_table(source)
    with pytest.raises(ChangeNotConsumableError, match=r"version 3 .* is a delete") as caught:
        consume_appends(source, target)
    assert caught.value.version == 3 and not (tmp_path / "dst").exists()
    first = consume_appends(source, target, on_change="skip", max_versions=2)
    assert (first.source_versions, first.watermark, first.rows) == ([0, 1], 1, 20)
    assert consumed_version(target, source) == 1
    rest = consume_appends(source, target, on_change="skip")
    assert (rest.source_versions, rest.skipped_versions, rest.watermark) == ([2, 5], [3], 6)
    again = consume_appends(source, target, on_change="skip")
    assert again.version is None and again.reason == "no new commits" and again.watermark == 6
    got = DeltaTable(target).to_arrow()
    assert sorted(got["id"].to_pylist()) == [*range(30), 100]
    assert sorted(set(got["_source_version"].to_pylist())) == [0, 1, 2, 5]
    with pytest.raises(InvalidArgumentError, match="on_change"):
        consume_appends(source, target, on_change="ignore")
