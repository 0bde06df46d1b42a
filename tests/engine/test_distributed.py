"""The pieces distributed jobs are made of, run here in worker processes: every task gets only
what it can pickle, and the result equals the in-process command's."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import deltalake
import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.commands.dml import change_files, commit_row_level, plan_row_level
from deltaplane.engine.commands.optimize import bin_tasks, commit_optimize, plan_optimize, run_bin_task
from deltaplane.engine.errors import ConcurrentDeleteDeleteError, DeltaError
from deltaplane.engine.portable import PortableSnapshot
from tests.helpers import assert_same_rows


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "part": [i % 2 for i in ids], "v": [i * 1.5 for i in ids]}
    )


def make(uri: str, **props) -> None:
    for start in range(0, 400, 50):
        write_table(uri, rows(start, 50), mode="append", partition_by=["part"], properties=props or None)


def in_workers(fn, items):
    with ProcessPoolExecutor(2) as pool:  # real pickling, real separate processes
        return list(pool.map(fn, items))


def _change(item):
    files, plan = item
    return change_files(files, plan)


def distributed(uri: str, *, predicate: str, updates=None, strategy=None, group_bytes=1):
    table = DeltaTable(uri)
    snapshot = table.snapshot
    plan = plan_row_level(snapshot, predicate=predicate, updates=updates, strategy=strategy)
    groups = (
        PortableSnapshot.of(snapshot, plan.candidates).split(group_bytes) if not plan.partition_only else []
    )
    sets = in_workers(_change, [(g, plan.for_tasks()) for g in groups])
    return commit_row_level(snapshot.store, snapshot, plan, sets)


@pytest.mark.parametrize("strategy", ["deletion_vectors", "copy_on_write"])
def test_distributed_delete_and_update_equal_the_engines(tmp_path, strategy):
    props = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
    ours, reference = str(tmp_path / "a"), str(tmp_path / "b")
    make(ours, **props)
    make(reference, **props)
    result = distributed(ours, predicate="id % 7 = 3", strategy=strategy)
    DeltaTable(reference).delete("id % 7 = 3", strategy=strategy)
    assert result.operation_metrics["numDeletedRows"] == str(len([i for i in range(400) if i % 7 == 3]))
    distributed(ours, predicate="id > 300 AND id < 320", updates={"v": "v * 100", "part": "1 - part"})
    DeltaTable(reference).update({"v": "v * 100", "part": "1 - part"}, "id > 300 AND id < 320")
    assert_same_rows(DeltaTable(ours).to_arrow(), DeltaTable(reference).to_arrow())
    got = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(ours)).execute("select * from t")
    got = pa.RecordBatchReader.from_stream(got).read_all()
    assert_same_rows(got.cast(DeltaTable(reference).to_arrow().schema), DeltaTable(reference).to_arrow())
    history = DeltaTable(ours).history(2)
    assert [h["operation"] for h in history] == ["UPDATE", "DELETE"]
    if strategy == "deletion_vectors":  # one DV file for the whole commit, written by the driver
        assert int(history[1]["operationMetrics"]["numDeletionVectorsAdded"]) > 1
        assert len(list((tmp_path / "a").glob("deletion_vector_*.bin"))) <= 2
    # The change feed of the distributed commits equals the engine's.
    changes = DeltaTable(ours).load_cdf(starting_version=8).read_all().select(["id", "v", "_change_type"])
    expected = (
        DeltaTable(reference).load_cdf(starting_version=8).read_all().select(["id", "v", "_change_type"])
    )
    assert_same_rows(changes, expected)


def test_partition_only_delete_needs_no_task(tmp_path):
    uri = str(tmp_path / "t")
    make(uri)
    plan = plan_row_level(DeltaTable(uri).snapshot, predicate="part = 1")
    assert plan.partition_only
    distributed(uri, predicate="part = 1")
    assert DeltaTable(uri).to_arrow().num_rows == 200


def test_conflicts_are_checked_against_the_plans_version(tmp_path):
    uri = str(tmp_path / "t")
    make(uri, **{"delta.enableDeletionVectors": "true"})
    snapshot = DeltaTable(uri).snapshot
    plan = plan_row_level(snapshot, predicate="id < 10")
    sets = [change_files(PortableSnapshot.of(snapshot, plan.candidates), plan.for_tasks())]
    DeltaTable(uri).delete("id = 5")  # removes a file the plan rewrites
    with pytest.raises(ConcurrentDeleteDeleteError):
        commit_row_level(snapshot.store, snapshot, plan, sets)
    with pytest.raises(DeltaError):
        plan_row_level(snapshot, predicate="nope = 1")


def test_bins_rewritten_in_workers_commit_as_optimize(tmp_path):
    uri = str(tmp_path / "t")
    make(uri)
    before = DeltaTable(uri).to_arrow()
    table = DeltaTable(uri)
    plan = plan_optimize(table.snapshot)
    tasks = bin_tasks(plan)
    assert len(tasks) == 2 and all(len(pickle.dumps(t)) < 100_000 for t in tasks)
    adds = [a for group in in_workers(run_bin_task, tasks) for a in group]
    result = commit_optimize(table.snapshot.store, plan, adds)
    assert result.operation == "OPTIMIZE"
    assert DeltaTable(uri).snapshot.num_files == 2
    assert_same_rows(DeltaTable(uri).to_arrow(), before)
    assert all(not a.data_change for a in adds)
