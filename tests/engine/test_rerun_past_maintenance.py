"""A DELETE, UPDATE or MERGE that loses its commit to table maintenance (OPTIMIZE, a DV purge:
files rewritten without changing their rows) is planned again on the new version and succeeds;
one that loses to a real data change still fails. The interleaving is exact: the user's change is
planned on the snapshot read before maintenance committed, as a task that started first would."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.dml import execute_delete, execute_update
from deltaplane.engine.commands.merge import _Clause as MergeClause
from deltaplane.engine.commands.merge import execute_merge
from deltaplane.engine.errors import ConcurrentDeleteDeleteError
from deltaplane.engine.transaction import rerun_past_rearrangements
from tests.engine.test_dml import make, rows, sorted_rows


def _small_files(t: DeltaTable, batches: int = 4) -> None:
    for b in range(batches):  # more files in each partition, so OPTIMIZE has work
        t.append(rows(range(1000 + 10 * b, 1000 + 10 * b + 10)))


def _expected(before: list[dict], keep) -> list[dict]:
    return sorted((r for r in before if keep(r)), key=lambda r: (r["id"], r["name"]))


@pytest.mark.parametrize("mode", ["dv", "cow"])
def test_a_delete_planned_before_an_optimize_is_planned_again_and_commits(tmp_path, mode):
    t = make(tmp_path, mode)
    _small_files(t)
    before = t.to_arrow().to_pylist()
    read = DeltaTable(t.uri).snapshot  # the user's DELETE starts here
    optimized = DeltaTable(t.uri).optimize()  # maintenance commits first
    assert optimized.num_files_removed > 0

    # Without the rerun the DELETE loses, and the error says the winner changed no rows.
    with pytest.raises(ConcurrentDeleteDeleteError) as lost:
        execute_delete(t._store, read, "id = 3 OR id = 1004")
    assert lost.value.rearranged and "without changing their rows" in str(lost.value)

    result, planned_on = rerun_past_rearrangements(
        lambda snap: execute_delete(t._store, snap, "id = 3 OR id = 1004"), read
    )
    assert result.committed and planned_on.version == read.version + 1
    assert sorted_rows(DeltaTable(t.uri).to_arrow()) == _expected(before, lambda r: r["id"] not in (3, 1004))
    ops = [h["operation"] for h in DeltaTable(t.uri).history(2)]
    assert ops == ["DELETE", "OPTIMIZE"]


def test_update_and_merge_are_planned_again_too(tmp_path):
    t = make(tmp_path, "dv")
    _small_files(t)
    before = t.to_arrow().to_pylist()
    read = DeltaTable(t.uri).snapshot
    DeltaTable(t.uri).optimize()
    from deltaplane.engine.commands.dml import update_assignments

    updates = update_assignments({"value": "value + 0.5"}, None, read.schema)
    execute = lambda snap: execute_update(t._store, snap, updates, "id = 7")  # noqa: E731
    result, _ = rerun_past_rearrangements(execute, read)
    assert result.committed

    _small_files(DeltaTable(t.uri), 2)
    read = DeltaTable(t.uri).snapshot
    DeltaTable(t.uri).optimize()
    source = pa.table({"id": [9, 5000], "name": ["m9", "m5000"], "value": [90.0, 5.0], "part": ["a", "b"]})
    clauses = [
        MergeClause("matched", "update", None, {"name": "s.name"}),
        MergeClause("not_matched", "insert_all"),
    ]
    merge = lambda snap: execute_merge(  # noqa: E731
        t._store,
        snap,
        source.cast(t.schema),
        "t.id = s.id",
        clauses,
        source_alias="s",
        target_alias="t",
        strategy=None,
        threshold=None,
    )
    result, _ = rerun_past_rearrangements(merge, read)
    assert result.committed
    got = {r["id"]: r for r in DeltaTable(t.uri).to_arrow().to_pylist()}
    assert got[7]["value"] == 7.5 and got[9]["name"] == "m9" and got[5000]["value"] == 5.0
    assert len(got) == len(before) + 1


def test_a_loss_to_a_real_data_change_is_still_a_conflict(tmp_path):
    t = make(tmp_path, "dv")
    read = DeltaTable(t.uri).snapshot
    DeltaTable(t.uri).delete("id = 1")  # a user's change to the same file
    calls = []

    def delete(snap):
        calls.append(snap.version)
        return execute_delete(t._store, snap, "id = 3")

    with pytest.raises(ConcurrentDeleteDeleteError) as lost:
        rerun_past_rearrangements(delete, read)
    assert not lost.value.rearranged and calls == [read.version]  # planned once, not again


def test_the_reruns_are_bounded(tmp_path):
    t = make(tmp_path, "dv")
    _small_files(t)
    read = DeltaTable(t.uri).snapshot
    DeltaTable(t.uri).optimize()
    calls = []

    def always_stale(snap):
        calls.append(snap.version)
        return execute_delete(t._store, read, "id = 3")  # keeps planning on the old version

    with pytest.raises(ConcurrentDeleteDeleteError):
        rerun_past_rearrangements(always_stale, read, reruns=2)
    assert len(calls) == 3
