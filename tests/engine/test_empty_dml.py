"""A DELETE or UPDATE that matches no row, or a MERGE that changes nothing, commits nothing (as
Delta Spark's ``commitIfNeeded``): no new version, ``CommitResult.committed`` false with the
version read. Inside an ``app_transaction_scope`` the work key is still recorded, so the work
stays exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.dml import change_files, commit_row_level, plan_row_level
from deltaplane.engine.errors import ConcurrentTransactionError
from deltaplane.engine.portable import PortableSnapshot
from deltaplane.engine.transaction import app_transaction_scope
from deltaplane.engine.work import WorkKey, find_applied
from tests.warm_python import fresh_json

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("part", pa.string())])

TABLES = {
    "plain": {},
    "dv": {"delta.enableDeletionVectors": "true"},
    "cdf": {"delta.enableChangeDataFeed": "true"},
    "dv-cdf": {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
}


def rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "part": ["a" if i % 2 else "b" for i in ids]},
        schema=SCHEMA,
    )


def make(tmp_path: Path, properties: dict, partitioned: bool = True) -> DeltaTable:
    t = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, partition_by=["part"] if partitioned else None, properties=properties
    )
    t.append(rows(range(10)))
    t.append(rows(range(10, 20)))
    return t


def log_files(table: DeltaTable) -> list[str]:
    return sorted(p.name for p in (Path(table.uri.removeprefix("file://")) / "_delta_log").iterdir())


def commit_actions(table: DeltaTable, version: int) -> list[dict]:
    path = Path(table.uri.removeprefix("file://")) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def merge(t: DeltaTable, source: pa.Table):
    return t.merge(source, "t.id = s.id", source_alias="s", target_alias="t")


NO_CHANGE = {
    "delete": lambda t: t.delete("id > 1000"),
    "delete-partition": lambda t: t.delete("part = 'zzz'"),  # the whole-file path: no file read
    "update": lambda t: t.update({"name": "'x'"}, "id > 1000"),
    "merge-empty-source": lambda t: (
        merge(t, rows([])).when_matched_update_all().when_not_matched_insert_all().execute()
    ),
    "merge-no-match-delete": lambda t: merge(t, rows([500, 501])).when_matched_delete().execute(),
    "merge-all-present-insert": lambda t: merge(t, rows([3, 4])).when_not_matched_insert_all().execute(),
}
ROW_METRIC = {"delete": "numDeletedRows", "update": "numUpdatedRows", "merge": "numTargetRowsInserted"}


@pytest.mark.parametrize("kind", sorted(TABLES))
@pytest.mark.parametrize("command", sorted(NO_CHANGE))
def test_a_command_that_changes_nothing_commits_nothing(tmp_path, kind, command):
    t = make(tmp_path, TABLES[kind])
    before, files = t.version, log_files(t)
    result = NO_CHANGE[command](t)
    assert (result.committed, result.skipped, result.version) == (False, False, before)
    assert result.operation == command.split("-")[0].upper()
    assert result.operation_metrics[ROW_METRIC[command.split("-")[0]]] == "0"
    assert log_files(t) == files  # not a byte written to the log
    assert t.version == before and len(t.history()) == before + 1
    assert DeltaTable(t.uri).version == before
    # The same object goes on working: a real change commits the next version.
    changed = t.delete("id = 3")
    assert changed.committed and changed.version == before + 1
    assert sorted(t.to_arrow().column("id").to_pylist()) == [i for i in range(20) if i != 3]
    assert t.history()[0]["operation"] == "DELETE"
    if "delta.enableChangeDataFeed" in TABLES[kind]:  # the feed holds only the real change
        feed = t.load_cdf(starting_version=before + 1).read_all().to_pylist()
        assert [(r["id"], r["_change_type"], r["_commit_version"]) for r in feed] == [
            (3, "delete", before + 1)
        ]


def test_a_whole_table_delete_of_an_empty_table_commits_nothing(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    result = t.delete()
    assert not result.committed and result.version == 0 == t.version
    assert t.append(rows([1])).version == 1


def test_a_distributed_delete_or_update_that_matches_nothing_commits_nothing(tmp_path):
    t = make(tmp_path, TABLES["dv"], partitioned=False)
    before = t.version
    for predicate, updates in (("id > 1000", None), ("name = 'nobody'", {"name": "'x'"})):
        snapshot = t.snapshot
        plan = plan_row_level(snapshot, predicate=predicate, updates=updates)
        sets = []
        if plan.candidates.num_rows:
            portable = PortableSnapshot.of(snapshot, plan.candidates, uri=t.uri)
            sets = [change_files(group, plan.for_tasks()) for group in portable.split(1 << 30)]
        result = commit_row_level(snapshot.store, snapshot, plan, sets)
        assert (result.committed, result.version) == (False, before)
    assert DeltaTable(t.uri).version == before


def test_a_work_key_is_recorded_even_when_the_work_changed_nothing(tmp_path):
    """Exactly once: a DELETE under a work key that matched no row still records the key, so a
    rerun of the same work (a retry, a clear) after matching rows arrived does not apply it to
    them. Delta Spark drops the txn of an empty DML; deltaplane keeps it (see the README)."""
    t = make(tmp_path, TABLES["dv"])
    before = t.version
    key = WorkKey.named("dml", {"operation": "delete", "predicate": "id >= 100", "run": "r1"})
    with app_transaction_scope(*key.as_txn()):
        result = t.delete("id >= 100")
    assert result.committed and result.version == before + 1
    actions = commit_actions(t, result.version)
    assert sorted(next(iter(a)) for a in actions) == ["commitInfo", "txn"]
    assert actions[1]["txn"]["appId"] == key.app_id
    assert result.operation_metrics["numDeletedRows"] == "0"
    applied = find_applied(t.snapshot, key)
    assert applied is not None and applied.version == result.version

    t.append(rows([100, 101]))  # rows the statement would match now
    # The rerun: the check the operators make finds the work ...
    assert find_applied(DeltaTable(t.uri).snapshot, key).version == result.version
    # ... and running it anyway (a racing try) is refused, not applied a second time.
    with pytest.raises(ConcurrentTransactionError), app_transaction_scope(*key.as_txn()):
        t.delete("id >= 100")
    assert sorted(t.to_arrow().column("id").to_pylist())[-2:] == [100, 101]
    assert t.version == before + 2

    # A different run of the statement is new work: it applies to the rows there now.
    other = WorkKey.named("dml", {"operation": "delete", "predicate": "id >= 100", "run": "r2"})
    with app_transaction_scope(*other.as_txn()):
        again = t.delete("id >= 100")
    assert again.committed and again.operation_metrics["numDeletedRows"] == "2"
    assert t.count() == 20


def test_a_merge_of_an_empty_source_under_a_work_key_records_the_key_once(tmp_path):
    t = make(tmp_path, TABLES["plain"])
    key = WorkKey.named("merge", {"source": [], "condition": "t.id = s.id"})

    def merge():
        with app_transaction_scope(*key.as_txn()):
            return (
                t.merge(rows([]), "t.id = s.id", source_alias="s", target_alias="t")
                .when_not_matched_insert_all()
                .execute()
            )

    first = merge()
    assert first.committed and t.snapshot.app_transaction_version(key.app_id) == key.version
    with pytest.raises(ConcurrentTransactionError):
        merge()
    assert t.version == first.version


def test_inside_a_scope_only_the_first_commit_records_the_key(tmp_path):
    """After the scope's commit recorded the key, a later command in the same scope that
    changes nothing commits nothing."""
    t = make(tmp_path, TABLES["plain"])
    before = t.version
    with app_transaction_scope("deltaplane:test", 7):
        assert t.delete("id = 1").version == before + 1
        nothing = t.delete("id > 1000")
    assert not nothing.committed and nothing.version == before + 1 == t.version


def test_a_concurrent_commit_does_not_disturb_a_command_that_changes_nothing(tmp_path):
    t = make(tmp_path, TABLES["dv"])
    other = DeltaTable(t.uri)
    before = t.version
    other.append(rows([50]))
    result = t.delete("id > 1000")  # plans on the latest version, which now holds the append
    assert not result.committed and result.version == before + 1 == t.version
    assert t.count() == 21


def test_the_dml_job_reports_a_delete_that_matched_nothing(tmp_path):
    """``python -m deltaplane.spark_jobs.dml`` (no Spark starts: statistics prune every file)."""
    t = make(tmp_path, TABLES["dv"], partitioned=False)
    before = t.version
    out = fresh_json(["-m", "deltaplane.spark_jobs.dml", "--table", t.uri, "--delete", "id > 1000"])
    assert out["status"] == "ok", out
    assert (out["version"], out["committed"], out["candidateFiles"], out["tasks"]) == (None, False, 0, 0)
    assert out["reason"] == f"nothing to commit: the DELETE changed no row (table at version {before})"
    assert out["operationMetrics"]["numDeletedRows"] == "0"
    assert DeltaTable(t.uri).version == before
