"""The names a delta-rs user types, differentially: the same calls through ``deltalake`` 1.6.6 and
through deltaplane, on copies of the same table, give the same rows, file lists and versions.
Tables with deletion vectors are read on the delta-rs side through ``QueryBuilder`` (its
pyarrow path refuses them). Hostile input gets typed errors and changes nothing."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import write_deltalake

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import (
    DeltaError,
    InvalidArgumentError,
    InvalidPredicateError,
    RetentionTooShortError,
    UnsupportedOperationError,
)


def rows(table: pa.Table) -> list[dict]:
    out = []
    for row in table.to_pylist():
        out.append(
            {k: (v.isoformat() if isinstance(v, dt.date | dt.datetime) else v) for k, v in row.items()}
        )
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True, default=str))


DATA = pa.table(
    {
        "id": pa.array(range(12), pa.int64()),
        "part": ["a", "b", "c", None] * 3,
        "name": [f"n{i}" for i in range(12)],
        "score": pa.array([i * 1.5 for i in range(12)], pa.float64()),
        "day": pa.array([dt.date(2026, 1, 1 + i % 4) for i in range(12)], pa.date32()),
    }
)


@pytest.fixture
def source(tmp_path) -> Path:
    """A partitioned table written by delta-rs over four commits."""
    path = tmp_path / "source"
    for i in range(4):
        write_deltalake(str(path), DATA.slice(i * 3, 3), partition_by=["part"], mode="append")
        time.sleep(0.003)  # commits in distinct milliseconds, so time travel has one answer
    return path


def copies(source: Path, tmp_path: Path) -> tuple[str, str]:
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    shutil.copytree(source, theirs)
    shutil.copytree(source, ours)
    return str(theirs), str(ours)


FILTERS = [
    [("id", ">", 4)],
    [("id", ">=", 2), ("score", "<", 10.0)],
    [[("id", "=", 1)], [("name", "in", ["n7", "n9"])]],
    [("name", "not in", ("n0", "n1", "n2"))],
    [("part", "=", "a")],
    [("part", "!=", "a")],
    [("part", "in", ["a", "c"]), ("id", "<", 9)],
    [("day", ">", dt.date(2026, 1, 2))],
    [("id", "==", 3)],
    [[("part", "=", "b")], [("part", "=", "c"), ("id", ">", 5)]],
]


@pytest.mark.parametrize("filters", FILTERS, ids=[json.dumps(f, default=str) for f in FILTERS])
def test_to_pyarrow_table_filters_match_deltalake(source, filters):
    theirs = deltalake.DeltaTable(str(source)).to_pyarrow_table(filters=filters)
    ours = DeltaTable(str(source)).to_pyarrow_table(filters=filters)
    assert rows(ours) == rows(theirs)
    assert ours.num_rows > 0
    # with a projection
    theirs = deltalake.DeltaTable(str(source)).to_pyarrow_table(columns=["name", "id"], filters=filters)
    ours = DeltaTable(str(source)).to_pyarrow_table(columns=["name", "id"], filters=filters)
    assert ours.column_names == theirs.column_names == ["name", "id"]
    assert rows(ours) == rows(theirs)


def test_to_pyarrow_table_partitions_and_expressions_match_deltalake(source):
    theirs = deltalake.DeltaTable(str(source))
    ours = DeltaTable(str(source))
    assert rows(ours.to_pyarrow_table()) == rows(theirs.to_pyarrow_table())
    for partitions in ([("part", "=", "a")], [("part", "in", ["a", "b"])], [("part", "=", "")]):
        assert rows(ours.to_pyarrow_table(partitions=partitions)) == rows(
            theirs.to_pyarrow_table(partitions=partitions)
        ), partitions
    expression = (pc.field("id") > 3) & (pc.field("name") != "n5")
    assert rows(ours.to_pyarrow_table(columns=["id"], filters=expression)) == rows(
        theirs.to_pyarrow_table(columns=["id"], filters=expression)
    )
    # reused object, called again: the same answer
    assert rows(ours.to_pyarrow_table(filters=FILTERS[2])) == rows(ours.to_pyarrow_table(filters=FILTERS[2]))


def test_files_and_file_uris_match_deltalake(source):
    theirs = deltalake.DeltaTable(str(source))
    ours = DeltaTable(str(source))
    assert sorted(ours.file_uris()) == sorted(theirs.file_uris())
    assert sorted(ours.files()) == sorted(theirs.get_add_actions(flatten=True).column("path").to_pylist())
    for partition_filters in ([("part", "=", "a")], [("part", "!=", "a")], [("part", "in", ["b", "c"])]):
        expected = sorted(theirs.file_uris(partition_filters=partition_filters))
        assert sorted(ours.file_uris(partition_filters=partition_filters)) == expected
        assert sorted(ours.file_uris(file_pruning_predicate=partition_filters)) == expected
        assert sorted(ours.file_uris(partition_filters)) == expected  # positional, as delta-rs
        relative = sorted(os.path.relpath(u, source) for u in expected)
        assert sorted(ours.files(partition_filters)) == relative
    sql = "part = 'a' OR part = 'c'"
    assert sorted(ours.file_uris(file_pruning_predicate=sql)) == sorted(
        theirs.file_uris(file_pruning_predicate=sql)
    )


def test_file_lists_with_escaped_partition_values_match_deltalake(tmp_path):
    path = str(tmp_path / "escaped")
    data = pa.table({"id": [1, 2, 3, 4], "p": ["a b", "x/y", "é%", None]})
    write_deltalake(path, data, partition_by=["p"])
    theirs, ours = deltalake.DeltaTable(path), DeltaTable(path)
    assert sorted(ours.files()) == sorted(theirs.get_add_actions().column("path").to_pylist())
    assert sorted(ours.file_uris()) == sorted(theirs.file_uris())
    for value in ("a b", "x/y", "é%", ""):
        partition_filters = [("p", "=", value)]
        expected = theirs.file_uris(partition_filters=partition_filters)
        assert ours.file_uris(partition_filters=partition_filters) == expected, value
        assert len(ours.files(partition_filters)) == 1
        assert rows(ours.to_pyarrow_table(partitions=partition_filters)) == rows(
            theirs.to_pyarrow_table(partitions=partition_filters)
        )


def test_load_as_version_matches_deltalake(source):
    theirs = deltalake.DeltaTable(str(source))
    ours = DeltaTable(str(source))
    # Without in-commit timestamps both engines place a commit at its file's modification time
    # (the protocol's rule), not at commitInfo.timestamp, which is taken before the file is
    # written: a later commit's commitInfo can fall before its own file's mtime (CI saw it).
    log = source / "_delta_log"
    times = {v: (log / f"{v:020d}.json").stat().st_mtime_ns // 1_000_000 for v in range(4)}
    assert all(times[v] < times[v + 1] for v in range(3)), times
    for target in (0, 2, 3):
        theirs.load_as_version(target)
        assert ours.load_as_version(target) is ours
        assert ours.version == theirs.version() == target
        assert rows(ours.to_pyarrow_table()) == rows(theirs.to_pyarrow_table())
    for version in (1, 2):
        when = dt.datetime.fromtimestamp(times[version] / 1000, dt.UTC)
        for form in (when, when.isoformat(), when.replace(tzinfo=None)):
            theirs.load_as_version(form)
            ours.load_as_version(form)
            assert ours.version == theirs.version() == version, form
    ours.refresh()
    assert ours.version == 3
    for bad in (True, 1.5, None, [1]):
        with pytest.raises(InvalidArgumentError):
            ours.load_as_version(bad)


def test_create_checkpoint_and_cleanup_metadata_match_deltalake(source, tmp_path):
    theirs_path, ours_path = copies(source, tmp_path)
    theirs, ours = deltalake.DeltaTable(theirs_path), DeltaTable(ours_path)
    theirs.create_checkpoint()
    ours.create_checkpoint()
    for path in (theirs_path, ours_path):
        hint = json.loads((Path(path) / "_delta_log" / "_last_checkpoint").read_text())
        assert hint["version"] == 3
    # each reads the other's checkpointed table
    assert rows(deltalake.DeltaTable(ours_path).to_pyarrow_table()) == rows(
        DeltaTable(theirs_path).to_arrow()
    )
    # Age the first commits past delta.logRetentionDuration (30 days), add commits after the
    # checkpoint, then clean up: both keep the checkpoint and what follows.
    for path in (theirs_path, ours_path):
        write_deltalake(path, DATA.slice(0, 2), partition_by=["part"], mode="append")
        old = time.time() - 40 * 86400
        for name in sorted(os.listdir(Path(path) / "_delta_log")):
            if (name.endswith(".json") or ".checkpoint." in name) and int(name.split(".")[0]) <= 3:
                os.utime(Path(path) / "_delta_log" / name, (old, old))
    deltalake.DeltaTable(theirs_path).cleanup_metadata()
    DeltaTable(ours_path).cleanup_metadata()

    def log(path: str) -> list[str]:
        return sorted(n for n in os.listdir(Path(path) / "_delta_log") if n[0].isdigit() and "crc" not in n)

    assert log(ours_path) == log(theirs_path)
    assert "00000000000000000000.json" not in log(ours_path)
    assert rows(DeltaTable(ours_path).to_arrow()) == rows(
        deltalake.DeltaTable(theirs_path).to_pyarrow_table()
    )


UPDATES = [
    dict(new_values={"name": "renamed", "score": 0.5}, predicate="id > 6"),
    dict(new_values={"name": "z", "id": 100}, predicate="part = 'a'"),
    dict(updates={"score": "score * 2", "name": "concat(name, '!')"}, predicate="id < 4"),
    dict(updates={"id": "id + 1000"}),
]


@pytest.mark.parametrize("kwargs", UPDATES, ids=[json.dumps(u, default=str) for u in UPDATES])
def test_update_matches_deltalake(source, tmp_path, kwargs):
    theirs_path, ours_path = copies(source, tmp_path)
    theirs, ours = deltalake.DeltaTable(theirs_path), DeltaTable(ours_path)
    metrics = theirs.update(**kwargs)
    result = ours.update(**kwargs)
    assert int(result.operation_metrics["numUpdatedRows"]) == metrics["num_updated_rows"] > 0
    assert result.version == theirs.version() == 4
    assert rows(ours.to_arrow()) == rows(theirs.to_pyarrow_table())
    assert rows(deltalake.DeltaTable(ours_path).to_pyarrow_table()) == rows(theirs.to_pyarrow_table())


def test_update_new_values_beyond_deltalake(source, tmp_path):
    """Values delta-rs 1.6.6 refuses (None, dates) or quotes into broken SQL (a quote inside a
    string): typed as the column here."""
    _, ours_path = copies(source, tmp_path)
    ours = DeltaTable(ours_path)
    ours.update(new_values={"name": None, "day": dt.date(2030, 5, 6)}, predicate="id = 3")
    ours.update(new_values={"name": "it's; DROP", "score": 7}, predicate="id = 4")
    got = {r["id"]: r for r in ours.to_arrow().to_pylist()}
    assert got[3]["name"] is None and got[3]["day"] == dt.date(2030, 5, 6)
    assert got[4]["name"] == "it's; DROP" and got[4]["score"] == 7.0
    assert ours.to_arrow().schema == DeltaTable(str(source)).to_arrow().schema
    theirs = {r["id"]: r for r in deltalake.DeltaTable(ours_path).to_pyarrow_table().to_pylist()}
    assert theirs[3]["name"] is None and theirs[4]["name"] == "it's; DROP"


def test_update_positional_order_of_deltalake(source, tmp_path):
    theirs_path, ours_path = copies(source, tmp_path)
    theirs, ours = deltalake.DeltaTable(theirs_path), DeltaTable(ours_path)
    theirs.update(None, {"name": "x"}, "id = 5")
    ours.update(None, {"name": "x"}, "id = 5")
    ours.update({"score": "score + 1"}, "id = 6")  # ours: updates, predicate
    theirs.update({"score": "score + 1"}, predicate="id = 6")
    assert rows(ours.to_arrow()) == rows(theirs.to_pyarrow_table())


def test_optimize_compact_and_z_order_match_deltalake(source, tmp_path):
    theirs_path, ours_path = copies(source, tmp_path)
    theirs, ours = deltalake.DeltaTable(theirs_path), DeltaTable(ours_path)

    def files_per_partition(table) -> dict:
        actions = table.get_add_actions(flatten=True)
        parts = actions.column("partition.part").to_pylist()
        return {p: parts.count(p) for p in set(parts)}

    expected = theirs.optimize.compact(partition_filters=[("part", "=", "a")])
    got = ours.optimize.compact(partition_filters=[("part", "=", "a")])
    for key in ("numFilesAdded", "numFilesRemoved", "partitionsOptimized", "totalConsideredFiles"):
        assert got[key] == expected[key], key
    assert files_per_partition(ours) == files_per_partition(theirs)
    expected = theirs.optimize.compact()
    got = ours.optimize.compact()
    for key in ("numFilesAdded", "numFilesRemoved", "partitionsOptimized"):
        assert got[key] == expected[key], key
    assert files_per_partition(ours) == files_per_partition(theirs)
    assert ours.version == theirs.version()
    expected = theirs.optimize.z_order(["score", "id"])
    got = ours.optimize.z_order(["score", "id"])
    assert got["numFilesAdded"] == expected["numFilesAdded"]
    assert got["numFilesRemoved"] == expected["numFilesRemoved"]
    assert rows(ours.to_arrow()) == rows(theirs.to_pyarrow_table())
    assert [h["operation"] for h in ours.history(2)] == ["OPTIMIZE", "OPTIMIZE"]
    # the old call form keeps working on the same object
    assert ours.optimize(dry_run=True).bins == ()
    with pytest.raises(InvalidArgumentError):
        ours.optimize.z_order("score")  # a string is not a list of columns


@pytest.fixture
def cdf_table(tmp_path) -> str:
    path = str(tmp_path / "cdf")
    write_deltalake(
        path, DATA.slice(0, 6), partition_by=["part"], configuration={"delta.enableChangeDataFeed": "true"}
    )
    table = deltalake.DeltaTable(path)
    table.update(new_values={"name": "changed"}, predicate="id = 1")
    table.delete("id = 2")
    write_deltalake(path, DATA.slice(6, 3), partition_by=["part"], mode="append")
    return path


def change_rows(table: pa.Table) -> list[dict]:
    keep = ["id", "name", "_change_type", "_commit_version"]
    return rows(table.select(keep).cast(pa.schema([(n, table.schema.field(n).type) for n in keep])))


def test_changes_and_load_cdf_agree_with_each_other_and_deltalake(cdf_table):
    theirs = deltalake.DeltaTable(cdf_table)
    ours = DeltaTable(cdf_table)

    def deltalake_cdf(**kwargs) -> pa.Table:
        table = pa.table(theirs.load_cdf(**kwargs))
        return table.cast(
            pa.schema(
                [f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f for f in table.schema]
            )
        )

    for start, end in ((0, None), (1, None), (1, 2), (3, 3)):
        expected = change_rows(deltalake_cdf(starting_version=start, ending_version=end))
        assert change_rows(ours.changes(start, end)) == expected
        assert change_rows(ours.changes(start_version=start, end_version=end)) == expected
        assert change_rows(ours.changes(starting_version=start, ending_version=end)) == expected
        assert change_rows(ours.load_cdf(starting_version=start, ending_version=end).read_all()) == expected
        assert change_rows(ours.load_cdf(start_version=start, end_version=end).read_all()) == expected
        assert change_rows(ours.load_cdf(start, end).read_all()) == expected
    # no start: from version 0, for both (as delta-rs)
    assert (
        change_rows(ours.changes()) == change_rows(ours.load_cdf().read_all()) == change_rows(deltalake_cdf())
    )
    # predicate and columns
    expected = change_rows(deltalake_cdf(starting_version=1, predicate="id < 3"))
    assert change_rows(ours.changes(1, predicate="id < 3")) == expected
    assert change_rows(ours.load_cdf(1, predicate="id < 3").read_all()) == expected
    narrow = ours.changes(1, columns=["id", "name"], predicate="id < 3")
    assert narrow.column_names == ["id", "name", "_change_type", "_commit_version", "_commit_timestamp"]
    assert change_rows(narrow) == expected
    # out of range: both refuse, both allow with allow_out_of_range
    with pytest.raises(Exception):  # noqa: B017 (delta-rs's own error type)
        deltalake_cdf(starting_version=9)
    for call in (lambda: ours.changes(9), lambda: ours.load_cdf(9)):
        with pytest.raises(Exception) as e:
            call()
        assert "9" in str(e.value)
    assert ours.changes(9, allow_out_of_range=True).num_rows == 0
    assert deltalake_cdf(starting_version=9, allow_out_of_range=True).num_rows == 0
    assert change_rows(ours.changes(2, 50, allow_out_of_range=True)) == change_rows(
        deltalake_cdf(starting_version=2, ending_version=50, allow_out_of_range=True)
    )
    # the same argument checks on both names
    for bad in (
        dict(starting_version=-1),
        dict(start_version=True),
        dict(start_version=1, starting_version=1),
    ):
        with pytest.raises(InvalidArgumentError):
            ours.changes(**bad)
        with pytest.raises(InvalidArgumentError):
            ours.load_cdf(**bad)


def test_deletion_vector_tables_read_like_deltalakes_query_builder(tmp_path):
    path = str(tmp_path / "dv")
    DeltaTable.create(
        path, data=DATA, partition_by=["part"], properties={"delta.enableDeletionVectors": "true"}
    )
    table = DeltaTable(path)
    table.delete("id % 3 = 0")
    assert table.protocol.reader_features and "deletionVectors" in table.protocol.reader_features
    with pytest.raises(Exception):  # noqa: B017 delta-rs's pyarrow path refuses deletion vectors
        deltalake.DeltaTable(path).to_pyarrow_table()
    ctx = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(path))
    for filters, where in (
        ([("id", ">", 4)], "id > 4"),
        ([[("part", "=", "a")], [("name", "in", ["n4", "n5"])]], "part = 'a' OR name IN ('n4', 'n5')"),
        ([("part", "=", "")], "part IS NULL"),
    ):
        theirs = pa.RecordBatchReader.from_stream(
            ctx.execute(f"SELECT id, name FROM t WHERE {where}")
        ).read_all()
        theirs = theirs.cast(pa.schema([("id", pa.int64()), ("name", pa.string())]))
        form = dict(partitions=filters) if where == "part IS NULL" else dict(filters=filters)
        ours = table.to_pyarrow_table(columns=["id", "name"], **form)
        assert rows(ours) == rows(theirs), where
    assert sorted(table.files()) == sorted(
        deltalake.DeltaTable(path).get_add_actions().column("path").to_pylist()
    )


def test_hostile_input_gets_typed_errors_and_changes_nothing(source, tmp_path):
    _, ours_path = copies(source, tmp_path)
    ours = DeltaTable(ours_path)
    version = ours.version
    cases = [
        ([("id", "~", 1)], InvalidArgumentError, "unknown operator '~'"),
        ([("id", "like", "n%")], InvalidArgumentError, "unknown operator 'like'"),
        ([("nope", "=", 1)], InvalidPredicateError, "nope"),
        ([("id", "in", 5)], InvalidArgumentError, "takes a list"),
        ([("id", "in", [])], InvalidArgumentError, "at least one value"),
        ([("id", "=")], InvalidArgumentError, "not a (column, op, value) tuple"),
        ([(1, "=", 1)], InvalidArgumentError, "non-empty string"),
        ([], InvalidArgumentError, "non-empty list"),
        ([[("id", "=", 1)], "id = 2"], InvalidArgumentError, "not a (column, op, value) tuple"),
        ([("id", "=", "not a number")], InvalidPredicateError, "cannot be compared"),
    ]
    for filters, error, fragment in cases:
        with pytest.raises(error) as e:
            ours.to_pyarrow_table(filters=filters)
        assert fragment in str(e.value), (filters, str(e.value))
        with pytest.raises(error):
            ours.file_uris(filters)
    with pytest.raises(InvalidArgumentError):
        ours.to_pyarrow_table(filters=42)
    with pytest.raises(InvalidArgumentError):
        ours.to_pyarrow_table(columns="id")
    with pytest.raises(UnsupportedOperationError, match="storage_options"):
        ours.to_pyarrow_table(filesystem=object())
    with pytest.raises(DeltaError, match="unknown column 'nope'"):
        ours.to_pyarrow_table(columns=["nope"])
    bad_updates = [
        (dict(updates={"name": "'x'"}, new_values={"name": "x"}), "not both"),
        (dict(), "needs updates"),
        (dict(new_values={"nope": 1}), "unknown column 'nope'"),
        (dict(new_values={"id": "not a number"}), "cannot be compared"),
        (dict(updates={"name": 5}), "for Python values use new_values"),
        (dict(new_values=[("name", "x")]), "must be a mapping"),
        (dict(new_values={"id": 1.5}), "id"),  # would lose data: refused, not truncated
    ]
    for kwargs, fragment in bad_updates:
        with pytest.raises(DeltaError) as e:
            ours.update(**kwargs)
        assert fragment in str(e.value), (kwargs, str(e.value))
    with pytest.raises(InvalidArgumentError, match="at most 3 positional"):
        ours.update(None, {"name": "x"}, "id = 1", "extra")
    with pytest.raises(DeltaError, match="nope"):
        ours.optimize.compact(partition_filters=[("nope", "=", "a")])
    assert DeltaTable(ours_path).version == version  # nothing was committed
    assert rows(ours.to_arrow()) == rows(DeltaTable(str(source)).to_arrow())


def test_vacuum_restore_and_to_pandas_take_deltalakes_arguments(source, tmp_path):
    theirs_path, ours_path = copies(source, tmp_path)
    for path in (theirs_path, ours_path):
        write_deltalake(path, DATA.slice(0, 4), partition_by=["part"], mode="overwrite")  # v4
    theirs, ours = deltalake.DeltaTable(theirs_path), DeltaTable(ours_path)
    for full in (False, True):
        expected = sorted(theirs.vacuum(retention_hours=0, enforce_retention_duration=False, full=full))
        assert sorted(ours.vacuum(retention_hours=0, enforce_retention_duration=False, full=full)) == expected
        assert sorted(ours.vacuum(0, True, False, full=full)) == expected
        assert expected  # the overwritten files
    with pytest.raises(RetentionTooShortError):
        ours.vacuum(retention_hours=0, enforce_retention_duration=True)
    with pytest.raises(InvalidArgumentError):
        ours.vacuum(retention_hours=0, mode="lite", full=True)
    # restore to a point in time given first, as delta-rs's restore(target)
    when = dt.datetime.fromtimestamp(theirs.history()[-3]["timestamp"] / 1000, dt.UTC)  # version 2
    theirs.restore(when)
    result = ours.restore(when.isoformat())
    assert result.version == theirs.version() == 5
    assert rows(ours.to_arrow()) == rows(theirs.to_pyarrow_table())
    ours.restore(4)
    theirs.restore(4)
    assert rows(ours.to_arrow()) == rows(theirs.to_pyarrow_table())
    # to_pandas with delta-rs's keywords
    for kwargs in (
        dict(filters=[("id", ">", 1)]),
        dict(partitions=[("part", "=", "a")], columns=["id"]),
        dict(filters=pc.field("id") < 3),
    ):
        mine = ours.to_pandas(**kwargs).sort_values("id").reset_index(drop=True)
        expected = theirs.to_pandas(**kwargs).sort_values("id").reset_index(drop=True)
        assert mine["id"].tolist() == expected["id"].tolist(), kwargs
        assert list(mine.columns) == list(expected.columns), kwargs
    with pytest.raises(InvalidArgumentError, match="not both"):
        ours.to_pandas(filter="id > 1", filters=[("id", ">", 1)])


# --- delta-rs habits: version(), PathLike URIs, delta-rs's argument names ----------------------


def test_version_metadata_and_protocol_work_as_attributes_and_as_deltalakes_methods(source, tmp_path):
    theirs_path, ours_path = copies(source, tmp_path)
    theirs, ours = deltalake.DeltaTable(theirs_path), DeltaTable(ours_path)
    assert ours.version() == ours.version == theirs.version() == 3
    assert type(ours.version()) is int and isinstance(ours.version, int)
    assert json.dumps({"v": ours.version}) == '{"v": 3}' and f"{ours.version}" == repr(ours.version) == "3"
    assert ours.version + 1 == 4 and sorted([ours.version, 2]) == [2, 3] and {ours.version: "x"}[3] == "x"
    # the same objects after writes, refreshes and time travel
    for path in (theirs_path, ours_path):
        write_deltalake(path, DATA.slice(0, 2), partition_by=["part"], mode="append")
    theirs.update_incremental()
    ours.update_incremental()
    assert ours.version() == theirs.version() == 4
    ours.append(DATA.slice(2, 1))
    assert ours.version() == ours.version == 5
    theirs.load_as_version(1)
    ours.load_as_version(1)
    assert ours.version() == theirs.version() == 1
    mine, other = ours.metadata(), theirs.metadata()
    assert ours.metadata == mine
    for field in ("id", "name", "description", "partition_columns", "configuration", "created_time"):
        assert getattr(mine, field) == getattr(other, field), field
    mine, other = ours.protocol(), theirs.protocol()
    assert ours.protocol == mine
    for field in ("min_reader_version", "min_writer_version", "reader_features", "writer_features"):
        assert getattr(mine, field) == getattr(other, field), field
    assert ours.table_uri == ours_path
    assert deltalake.DeltaTable(ours.table_uri).version() == DeltaTable(ours.table_uri).version() == 5


class Location:
    """An ``os.PathLike`` that is not a ``pathlib.Path``."""

    def __init__(self, path: Path | bytes):
        self.path = path

    def __fspath__(self) -> str | bytes:
        return self.path if isinstance(self.path, bytes) else str(self.path)


HOSTILE_FOLDERS = ["plain", "a b", "ünï cödé", "dots.and`ticks`", "per%cent#hash"]


@pytest.mark.parametrize("folder", HOSTILE_FOLDERS)
def test_table_uris_may_be_path_like_everywhere(tmp_path, folder):
    from deltaplane.engine import stage_write, write_table
    from deltaplane.engine.cli import main
    from deltaplane.engine.commands.staged_manifest import read_manifest, write_manifest
    from deltaplane.engine.consume import consume_appends, consumed_version
    from deltaplane.engine.tail import IncrementalScan, find_new_commits
    from deltaplane.engine.watermarks import read_watermark, write_watermark

    root = tmp_path / folder
    path = root / "t"
    assert not DeltaTable.is_deltatable(path)
    write_table(path, DATA, partition_by=["part"])
    assert DeltaTable.is_deltatable(path) and DeltaTable.is_deltatable(table_uri=Location(path))
    for given in (path, Location(path), str(path)):
        table = DeltaTable(given)
        assert table.uri == str(path) and type(table.uri) is str
        assert rows(table.to_arrow()) == rows(DATA)
        if "%" not in folder:  # delta-rs 1.6.6 percent-decodes local paths ("%ce" becomes a byte)
            assert rows(table.to_arrow()) == rows(deltalake.DeltaTable(path).to_pyarrow_table())
    assert DeltaTable(table_uri=path, version=0).version() == 0
    created = DeltaTable.create(Location(root / "created"), DATA.schema)
    assert created.uri == str(root / "created") and DeltaTable(root / "created").version == 0
    # the staged-write path
    staged = stage_write(path, DATA.slice(0, 4), mode="append")
    assert staged.spec.uri == str(path)
    write_manifest(root / "manifest.json", staged)
    result = read_manifest(Location(root / "manifest.json")).commit()
    assert result.version == 1 and DeltaTable(path).count() == 16
    # incremental reads and consumers: a Path and its str are the same table and the same app id
    target = root / "copy"
    first = consume_appends(path, target)
    assert first.rows == 16 and consumed_version(target, str(path)) == 1
    again = consume_appends(str(path), Location(target))
    assert again.version is None and again.reason == "no new commits"
    assert [c.version for c in IncrementalScan.of(path, -1)] == [0, 1]
    assert find_new_commits(Location(path), 0)["latest_version"] == 1
    write_watermark(path, "k", 1)
    assert read_watermark(Location(path), "k") == read_watermark(str(path), "k") == 1
    # the command line takes what subprocess takes: str or PathLike arguments
    assert main(["describe", path, "--json"]) == 0
    # still refused, with our message: not a path
    for bad in (None, "", "  ", 42, b"/tmp/t", Location(b"/tmp/t")):
        with pytest.raises(InvalidArgumentError, match=r"str or os\.PathLike"):
            DeltaTable(bad)


def test_write_table_takes_write_deltalakes_arguments(tmp_path):
    from deltalake import CommitProperties, PostCommitHookProperties, Transaction, WriterProperties

    from deltaplane.engine import write_deltalake as ours_write_deltalake
    from deltaplane.engine import write_table

    assert ours_write_deltalake is write_table
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    kwargs = dict(
        partition_by=["part"],
        mode="error",
        name="trips",
        description="hostile: ` . ü",
        configuration={"delta.appendOnly": "false", "delta.enableChangeDataFeed": "true"},
        schema_mode=None,
        storage_options=None,
        predicate=None,
        target_file_size=None,
        writer_properties=None,
        commit_properties=CommitProperties(custom_metadata={"job": "nightly", "n": 1}),
        post_commithook_properties=PostCommitHookProperties(),
    )
    write_deltalake(theirs, DATA, **kwargs)
    write_table(table_or_uri=ours, data=DATA, **kwargs)
    for path in (theirs, ours):  # both read by delta-rs
        table = deltalake.DeltaTable(path)
        assert table.metadata().configuration == kwargs["configuration"]
        assert (table.metadata().name, table.metadata().description) == ("trips", kwargs["description"])
        assert table.history(1)[0]["job"] == "nightly" and table.history(1)[0]["n"] == 1
    # a DeltaTable where delta-rs takes one (table_or_uri), and the same arguments again
    write_table(DeltaTable(ours), DATA.slice(0, 2), mode="append", configuration=kwargs["configuration"])
    write_deltalake(deltalake.DeltaTable(theirs), DATA.slice(0, 2), mode="append")
    assert rows(DeltaTable(ours).to_arrow()) == rows(deltalake.DeltaTable(theirs).to_pyarrow_table())
    version = DeltaTable(ours).version()
    refused = [
        (dict(configuration={}, properties={}), InvalidArgumentError, "configuration is delta-rs's name"),
        (dict(commit_metadata={"a": 1}, commit_properties=CommitProperties()), InvalidArgumentError, "one"),
        (
            dict(writer_properties=WriterProperties(compression="GZIP")),
            UnsupportedOperationError,
            "target_file_size=",
        ),
        (
            dict(post_commithook_properties=PostCommitHookProperties(create_checkpoint=False)),
            UnsupportedOperationError,
            "delta.checkpointInterval",
        ),
        (
            dict(post_commithook_properties=PostCommitHookProperties(cleanup_expired_logs=True)),
            UnsupportedOperationError,
            "cleanup_log()",
        ),
        (
            dict(commit_properties=CommitProperties(app_transactions=[Transaction("app", 1)])),
            UnsupportedOperationError,
            "app_id= and app_version=",
        ),
        (
            dict(commit_properties=CommitProperties(max_commit_retries=3)),
            UnsupportedOperationError,
            "retries",
        ),
        (dict(commit_properties={"job": "x"}), InvalidArgumentError, "commit_metadata={...}"),
    ]
    for extra, error, fragment in refused:
        with pytest.raises(error) as e:
            write_table(ours, DATA.slice(0, 1), mode="append", **extra)
        assert fragment in str(e.value), (extra, str(e.value))
        assert "unexpected keyword" not in str(e.value)
    assert DeltaTable(ours).version() == version  # nothing was committed


@pytest.fixture
def cdf_copy(cdf_table, tmp_path) -> tuple[str, str]:
    theirs, ours = tmp_path / "cdf-theirs", tmp_path / "cdf-ours"
    shutil.copytree(cdf_table, theirs)
    shutil.copytree(cdf_table, ours)
    return str(theirs), str(ours)


def _deltalake_defaults(function) -> dict:
    """delta-rs's keyword arguments with their defaults (what its users pass spelled out)."""
    import inspect

    return {  # some of delta-rs's defaults are sentinels holding the value (to tell omission)
        name: getattr(p.default, "value", p.default)
        for name, p in inspect.signature(function).parameters.items()
        if p.default is not inspect.Parameter.empty and p.kind is not p.VAR_POSITIONAL
    }


def test_every_deltalake_call_takes_its_own_names_and_defaults(cdf_copy):
    """Each call of delta-rs's DeltaTable, optimizer, alterer and merger, and write_deltalake,
    made on ours with delta-rs's keyword names spelled out at delta-rs's defaults (and the
    required ones given), runs: no "unexpected keyword argument"."""
    from deltalake.table import TableAlterer, TableMerger, TableOptimizer

    from deltaplane.engine import write_table

    _, path = cdf_copy
    source = DATA.slice(0, 4).set_column(2, "name", pa.array(["m0", "m1", "m2", "m3"]))
    required = {
        "__init__": dict(table_uri=path),
        "create": dict(table_uri=path + "-created", schema=DATA.schema),
        "is_deltatable": dict(table_uri=path),
        "load_as_version": dict(version=2),
        "merge": dict(source=source, predicate="target.id = source.id"),
        "restore": dict(target=2),
        "transaction_version": dict(app_id="nope"),
        "z_order": dict(columns=["id"]),
        "add_columns": dict(fields=[pa.field("extra", pa.int32())]),
        "add_constraint": dict(constraints={"id_positive": "id >= 0"}),
        "add_feature": dict(feature=deltalake.TableFeatures.ChangeDataFeed),
        "drop_constraint": dict(name="id_positive"),
        "set_table_description": dict(description="d"),
        "set_table_name": dict(name="n"),
        "set_table_properties": dict(properties={"delta.logRetentionDuration": "interval 31 days"}),
        "when_matched_update": dict(updates={"name": "source.name"}),
        "when_not_matched_by_source_update": dict(updates={"name": "'gone'"}),
        "when_not_matched_insert": dict(updates={"id": "source.id", "name": "source.name"}),
        "write_deltalake": dict(table_or_uri=path, data=DATA.slice(0, 1), mode="append"),
        "update": dict(new_values={"score": 1.0}, predicate="id = 1"),
        "delete": dict(predicate="id = 2"),
    }
    # cleanup_metadata: nothing old enough (covered above); schema: ours is the attribute holding
    # the pyarrow schema (delta-rs's dt.schema().to_arrow()), which cannot also be called
    skip = {"cleanup_metadata", "schema"}
    assert DeltaTable(path).schema == pa.schema(deltalake.DeltaTable(path).schema().to_arrow())
    called = []

    def call(theirs_function, ours_function):
        name = theirs_function.__name__
        kwargs = {**_deltalake_defaults(theirs_function), **required.get(name, {})}
        ours_function(**kwargs)
        called.append(name)

    table = DeltaTable(path)
    for name in sorted(dir(deltalake.DeltaTable)):
        theirs = getattr(deltalake.DeltaTable, name)
        if name.startswith("_") or name in skip or not callable(theirs) or not hasattr(table, name):
            continue
        call(theirs, getattr(DeltaTable(path), name))
    call(deltalake.DeltaTable.__init__, DeltaTable)
    call(deltalake.write_deltalake, write_table)
    for theirs_class, ours_of in (
        (TableOptimizer, lambda: DeltaTable(path).optimize),
        (TableAlterer, lambda: DeltaTable(path).alter),
    ):
        for name in sorted(vars(theirs_class)):
            if not name.startswith("_") and hasattr(ours_of(), name):
                call(getattr(theirs_class, name), getattr(ours_of(), name))
    source = source.append_column("extra", pa.array([1, 2, 3, 4], pa.int32()))  # added above
    for name in sorted(vars(TableMerger)):
        if name.startswith("when_"):
            merger = DeltaTable(path).merge(source, "target.id = source.id")
            call(getattr(TableMerger, name), getattr(merger, name))
            merger.execute()
    assert {"create", "merge", "restore", "vacuum", "to_pyarrow_dataset", "partitions", "compact"} <= set(
        called
    ), called
    assert {"z_order", "set_table_properties", "when_matched_update_all", "write_deltalake"} <= set(called)
    assert {"__init__", "generate", "update_incremental", "transaction_version", "scan"} <= set(called)


def test_deltalake_names_deltaplane_lacks_say_what_to_use(cdf_copy):
    """Every public name of delta-rs's DeltaTable, optimizer, alterer and merger is ours too, or
    its AttributeError names deltaplane's way."""
    from deltalake.table import TableAlterer, TableMerger, TableOptimizer

    _, path = cdf_copy
    table = DeltaTable(path)
    pairs = [
        (deltalake.DeltaTable, table),
        (TableOptimizer, table.optimize),
        (TableAlterer, table.alter),
        (TableMerger, table.merge(DATA, "target.id = source.id")),
    ]
    missing = []
    for theirs, ours in pairs:
        for name in sorted(n for n in dir(theirs) if not n.startswith("_")):
            try:
                getattr(ours, name)
            except AttributeError as e:
                missing.append(name)
                assert "delta-rs" in str(e) and "deltaplane" in str(e), (name, str(e))
    assert {"compact_logs", "deletion_vectors", "create_write_transaction"} <= set(missing)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_thing'"):
        table.no_such_thing  # noqa: B018 an ordinary typo keeps Python's message


def test_deltalake_arguments_for_what_deltaplane_does_differently_name_its_way(cdf_copy):
    from deltalake import WriterProperties

    _, path = cdf_copy
    table = DeltaTable(path)
    version = table.version()
    source = DATA.slice(0, 2)
    cases = [
        (lambda: table.vacuum(keep_versions=[1]), "retention_hours"),
        (lambda: table.restore(1, ignore_missing_files=True), "repair()"),
        (lambda: table.restore(1, protocol_downgrade_allowed=True), "never downgrades"),
        (lambda: table.merge(source, "target.id = source.id", merge_schema=True), "add_columns"),
        (lambda: table.update(new_values={"name": "x"}, error_on_type_mismatch=False), "does not fit"),
        (lambda: table.delete("id = 1", writer_properties=WriterProperties()), "target_file_size="),
        (lambda: table.optimize.compact(min_commit_interval=60), "one commit"),
        (lambda: table.optimize.z_order(["id"], writer_properties=WriterProperties()), "target_file_size="),
        (lambda: table.alter.set_table_properties({"a.b": "c"}, raise_if_not_exists=False), "delta.*"),
        (lambda: DeltaTable(path, skip_stats=True), "statistics"),
        (lambda: DeltaTable.create(path, DATA.schema, mode="overwrite"), "schema_mode='overwrite'"),
        (lambda: DeltaTable.create(path, DATA.schema, mode="append"), "write_table"),
        (lambda: table.to_pyarrow_dataset(as_large_types=True), "cast"),
        (lambda: table.to_pyarrow_dataset(filesystem=object()), "storage_options"),
        (lambda: table.to_pandas(filesystem=object()), "storage_options"),
        (
            lambda: table.merge(source, "target.id = source.id").when_matched_update_all(except_cols=["x"]),
            "when_matched_update(",
        ),
        (
            lambda: table.merge(source, "target.id = source.id").when_not_matched_insert_all(
                except_cols=["x"]
            ),
            "when_not_matched_insert(",
        ),
    ]
    for call, fragment in cases:
        with pytest.raises(UnsupportedOperationError) as e:
            call()
        assert fragment in str(e.value), str(e.value)
    assert DeltaTable(path).version() == version  # nothing was committed


def test_deltalake_spellings_give_deltalakes_answers(cdf_copy, tmp_path):
    from deltalake import CommitProperties, Transaction

    theirs_path, ours_path = cdf_copy
    for path in (theirs_path, ours_path):
        write_deltalake(
            path,
            DATA.slice(0, 2),
            partition_by=["part"],
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction("loader", 7)]),
        )
    theirs, ours = deltalake.DeltaTable(theirs_path), DeltaTable(ours_path)
    assert ours.transaction_version("loader") == theirs.transaction_version("loader") == 7
    assert ours.transaction_version("nope") is theirs.transaction_version("nope") is None

    def key(d: dict) -> str:
        return json.dumps(d, sort_keys=True)

    for kwargs in ({}, dict(partition_filters=[("part", "=", "a")]), dict(file_pruning_predicate="id > 10")):
        assert sorted(map(key, ours.partitions(**kwargs))) == sorted(map(key, theirs.partitions(**kwargs)))
    for columns, predicate in ((None, "id > 3"), (["name", "id"], "part = 'b'"), (None, None)):
        mine = ours.scan(columns=columns, predicate=predicate).read_all()
        other = pa.table(theirs.scan(columns=columns, predicate=predicate).read_all())
        assert mine.column_names == other.column_names
        assert rows(mine) == rows(other.cast(mine.schema))
    dataset = ours.to_pyarrow_dataset(partitions=[("part", "=", "a")])
    expected = theirs.to_pyarrow_dataset(partitions=[("part", "=", "a")]).to_table()
    assert rows(dataset.to_table()) == rows(expected)
    dataset = ours.to_pyarrow_dataset(file_pruning_predicate="part = 'b'")
    assert set(dataset.to_table().column("part").to_pylist()) == {"b"}
    # positional forms of delta-rs: DeltaTable(uri, version, storage_options), merge(..., aliases)
    assert DeltaTable(ours_path, None, {"some": "option"}).storage_options == {"some": "option"}
    result = (
        ours.merge(DATA.slice(0, 2), "t.id = s.id", "s", "t")
        .when_matched_update({"name": "'merged'"})
        .execute()
    )
    theirs.merge(DATA.slice(0, 2), "t.id = s.id", "s", "t").when_matched_update(
        {"name": "'merged'"}
    ).execute()
    assert result.version == theirs.version()
    assert rows(ours.to_arrow()) == rows(DeltaTable(theirs_path).to_arrow())
    # create: mode="ignore" returns the table that is there; "error" (the default) refuses
    created = DeltaTable.create(table_uri=ours_path, schema=DATA.schema, mode="ignore", configuration={})
    assert created.version() == ours.version()
    with pytest.raises(DeltaError, match="already exists"):
        DeltaTable.create(ours_path, DATA.schema, "error")
    new = DeltaTable.create(
        tmp_path / "new", DATA.schema, configuration={"delta.enableChangeDataFeed": "true"}
    )
    assert new.metadata().configuration == {"delta.enableChangeDataFeed": "true"}
    # generate() is delta-rs's generate_manifest()
    ours.generate()
    assert (Path(ours_path) / "_symlink_format_manifest").is_dir()
