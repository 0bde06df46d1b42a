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
