"""``DeltaDMLOperator`` when the statement changes nothing, in a real Airflow (``dag.test()``).

Without a work key (``idempotent=False``) nothing is committed: the task succeeds and reports
``committed`` false, no version, the version it read and why. With a work key (the default) the
key is still recorded, so the work is exactly once: a rerun of the same MERGE source is found
applied, even though the first run changed no row."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import asset_events, dag_file, run_dag, run_tasks, task_states, xcom
from tests.operators.test_xcom_shape import check_shape

pytestmark = pytest.mark.airflow

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def make(path) -> DeltaTable:
    t = DeltaTable.create(str(path), SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    t.append(pa.table({"id": pa.array(range(10), pa.int64()), "day": ["d"] * 10}))
    return t


def test_a_delete_matching_no_row_commits_nothing_and_reports_it(airflow_db, tmp_path):
    table = tmp_path / "users"
    make(table)
    run = run_tasks(
        "empty_delete",
        f"""
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        T = {str(table)!r}
        """,
        """
        nobody = DeltaDMLOperator(task_id="delete", table_uri=T, operation="delete",
                                  predicate="id = 12345", idempotent=False)
        also = DeltaDMLOperator(task_id="update", table_uri=T, operation="update",
                                predicate="id > 100", updates={"day": "'x'"}, idempotent=False)
        nobody >> also
        """,
    )
    assert task_states(run) == {"delete": "success", "update": "success"}
    for task, operation in (("delete", "DELETE"), ("update", "UPDATE")):
        out = xcom(run, task)
        assert check_shape("delete", {**out, "operation": "DELETE"}) == [], out
        assert (out["committed"], out["already_applied"], out["skipped"]) == (False, False, False), out
        assert (out["version"], out["read_version"], out["operation"]) == (None, 1, operation), out
        assert out["metrics"] == {} and out["event"] is None and out["work"] is None, out
        assert out["reason"].startswith(f"nothing to commit: the {operation} changed no row"), out
    t = DeltaTable(str(table))
    assert t.version == 1 and t.count() == 10
    assert [h["operation"] for h in t.history()] == ["WRITE", "CREATE TABLE"]
    assert asset_events(f"file://{table}") == []  # no commit, no Asset event


def test_a_work_key_is_recorded_even_when_the_work_changed_nothing(airflow_db, tmp_path):
    table = tmp_path / "users"
    make(table)
    empty = tmp_path / "empty.parquet"
    pq.write_table(SCHEMA.empty_table(), empty)
    dag = dag_file(
        "empty_merge",
        f"""
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        T = {str(table)!r}
        """,
        f"""
        DeltaDMLOperator(task_id="merge", table_uri=T, operation="merge", source={str(empty)!r},
                         merge_condition="t.id = s.id")
        """,
    )
    first = run_dag("empty_merge", dag)
    assert task_states(first) == {"merge": "success"}
    out = xcom(first, "merge")
    assert check_shape("merge", out) == [], out
    # The key makes the commit: it holds the txn, and MERGE's metrics say no row changed.
    assert (out["committed"], out["version"], out["read_version"]) == (True, 2, 1), out
    assert out["metrics"]["numSourceRows"] == "0" and out["metrics"]["numTargetRowsInserted"] == "0"
    t = DeltaTable(str(table))
    assert t.snapshot.app_transaction_version(out["work"]) == 1

    # A new run with the same source is the same work: found applied, not merged again.
    t.delete("id < 5")
    second = run_dag("empty_merge", dag)
    again = xcom(second, "merge")
    assert check_shape("merge", again) == [], again
    assert (again["committed"], again["already_applied"], again["version"]) == (False, True, 2), again
    assert DeltaTable(str(table)).version == 3
