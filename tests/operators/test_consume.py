"""``DeltaConsumeOperator``: only rows actually added, one explicit policy for deletes and updates,
exactly once across reruns. Real Airflow (``dag.test()``), real tables."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.airflow


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(n)]})


def source_table(uri: str) -> dict[str, int]:
    """Appends, then a deletion-vector DELETE, an OPTIMIZE, an UPDATE and another append."""
    write_table(
        uri,
        rows(0, 100),
        properties={"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
    )
    write_table(uri, rows(100, 100), mode="append")  # v1
    DeltaTable(uri).delete("id % 10 = 3")  # v2: 20 rows, files re-added with deletion vectors
    DeltaTable(uri).optimize(min_num_files=2)  # v3: no data change
    DeltaTable(uri).update({"v": "'changed'"}, "id = 5")  # v4
    write_table(uri, rows(500, 3), mode="append")  # v5
    return {"delete": 2, "update": 4, "last": 5}


def consume_dag(name: str, source: str, target: str, on_change: str) -> str:
    return f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.consume import DeltaConsumeOperator

        with DAG({name!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaConsumeOperator(task_id="consume", table_uri={target!r}, source_uri={source!r},
                                 on_change={on_change!r})
        """


def test_fail_is_the_default_and_names_the_version(airflow_db, tmp_path, capfd):
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    versions = source_table(source)
    run = run_dag("consume_fail", consume_dag("consume_fail", source, target, "fail"))
    assert task_states(run) == {"consume": "failed"}
    assert not (tmp_path / "dst").exists()  # nothing half-consumed
    log = capfd.readouterr().out  # dag.test() logs the task's exception to stdout
    assert f"version {versions['delete']} (DELETE) is a delete: 20 row(s) removed" in log


def test_skip_consumes_only_rows_actually_added(airflow_db, tmp_path):
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    versions = source_table(source)
    run = run_dag("consume_skip", consume_dag("consume_skip", source, target, "skip"))
    assert task_states(run) == {"consume": "success"}
    out = xcom(run, "consume")
    assert out["source_versions"] == [0, 1, 5] and out["skipped_versions"] == [
        versions["delete"],
        versions["update"],
    ]
    got = DeltaTable(target).to_arrow()
    # The DELETE's re-added files and the OPTIMIZE's rewrites are not new rows.
    assert sorted(got["id"].to_pylist()) == [*range(200), 500, 501, 502]
    assert DeltaTable(target).snapshot.app_transaction_version(f"consume:{source}") == versions["last"]
    assert (out["operation"], out["committed"], out["already_applied"], out["watermark"]) == (
        "CREATE TABLE AS SELECT",  # the first consume creates the target
        True,
        False,
        versions["last"],
    )
    again = run_dag("consume_skip", consume_dag("consume_skip", source, target, "skip"))  # a rerun
    rerun = xcom(again, "consume")
    assert rerun["version"] is None and DeltaTable(target).count() == 203
    assert (rerun["operation"], rerun["committed"], rerun["reason"]) == ("CONSUME", False, "no new commits")


def test_changes_consumes_the_change_feed(airflow_db, tmp_path):
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    versions = source_table(source)
    run = run_dag("consume_changes", consume_dag("consume_changes", source, target, "changes"))
    assert task_states(run) == {"consume": "success"}
    got = DeltaTable(target).to_arrow()
    kinds = {}
    for version, kind in zip(
        got["_source_version"].to_pylist(), got["_change_type"].to_pylist(), strict=True
    ):
        kinds.setdefault(version, []).append(kind)
    assert kinds[0].count("insert") == 100 and kinds[1].count("insert") == 100
    assert kinds[versions["delete"]] == ["delete"] * 20
    assert sorted(kinds[versions["update"]]) == ["update_postimage", "update_preimage"]
    assert kinds[versions["last"]] == ["insert"] * 3
    assert versions["delete"] + 1 not in kinds  # the OPTIMIZE


def test_a_new_commit_after_a_consumed_range_is_read_once(airflow_db, tmp_path):
    """Reuse: the same operator run again after more work on the source."""
    source, target = str(tmp_path / "src"), str(tmp_path / "dst")
    write_table(source, rows(0, 10))
    code = consume_dag("consume_again", source, target, "fail")
    run_dag("consume_again", code)
    write_table(source, rows(10, 5), mode="append")
    DeltaTable(source).optimize(min_num_files=2)
    run = run_dag("consume_again", code)
    assert xcom(run, "consume")["source_versions"] == [1]
    run_dag("consume_again", code)
    assert sorted(DeltaTable(target).to_arrow()["id"].to_pylist()) == list(range(15))
