"""Exactly once under every way Airflow runs a task: different batches always land, the same batch
lands once, whatever the order, retries, clears, reruns with a new run id, backfills or mapped
tasks. Real Airflow (``dag.test()``), real tables; the expected rows are the landing files'."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import asset_events, run_dag, task_states, xcom

pytestmark = pytest.mark.airflow


def land(folder: Path, ids: range, name: str = "part.parquet") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(list(ids), pa.int64())}), folder / name)
    return folder


def ids(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_arrow()["id"].to_pylist())


COMMIT_DAG = """
import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable
from deltaplane.operators.operators.commit import DeltaCommitOperator

with DAG("{dag_id}", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
         start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    DeltaCommitOperator(task_id="commit", table_uri={table!r}, source={source!r})
"""


def test_two_runs_in_one_schedule_interval_both_land(airflow_db, tmp_path):
    """Two manual triggers on the same day (same data interval) commit different folders."""
    table = tmp_path / "t"
    land(tmp_path / "morning", range(0, 10))
    land(tmp_path / "evening", range(10, 20))
    source = str(tmp_path) + "/{{ dag_run.conf['folder'] }}"
    code = COMMIT_DAG.format(dag_id="two_a_day", table=str(table), source=source)
    first = run_dag(
        "two_a_day",
        code,
        logical_date=dt.datetime(2026, 3, 1, 9, tzinfo=dt.UTC),
        run_conf={"folder": "morning"},
    )
    second = run_dag(
        "two_a_day",
        code,
        logical_date=dt.datetime(2026, 3, 1, 18, tzinfo=dt.UTC),
        run_conf={"folder": "evening"},
    )
    assert first.data_interval_end == second.data_interval_end  # the clock-based key collided
    assert task_states(first) == task_states(second) == {"commit": "success"}
    assert ids(table) == list(range(20))
    assert xcom(second, "commit")["version"] == 1 and not xcom(second, "commit").get("skipped")


def test_out_of_order_backfill_and_rerun_land_each_day_once(airflow_db, tmp_path):
    """03-02, then 03-01, then 03-01 again as a new run: each day's batch once."""
    table = tmp_path / "t"
    land(tmp_path / "2026-03-01", range(0, 5))
    land(tmp_path / "2026-03-02", range(100, 105))
    code = COMMIT_DAG.format(dag_id="backfill", table=str(table), source=str(tmp_path) + "/{{ ds }}")
    day = {d: dt.datetime(2026, 3, d, tzinfo=dt.UTC) for d in (1, 2)}
    runs = []
    for logical in (day[2], day[1], day[1]):  # dag.test replaces a run of the same date by a new one
        runs.append(run := run_dag("backfill", code, logical_date=logical))
        assert task_states(run) == {"commit": "success"}
    _, earlier, rerun = runs
    assert rerun.run_id != earlier.run_id
    assert ids(table) == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104]
    assert DeltaTable(str(table)).version == 1
    again = xcom(rerun, "commit")
    assert again["skipped"] is True and again["version"] == 1  # the version holding the batch
    assert again["work"].startswith("deltaplane:files:")
    events = asset_events(f"file://{table}")
    assert [e["payload"]["version"] for e in events][-1] == 1  # the rerun published the version it found


def test_a_changed_folder_is_new_work_and_an_identical_one_is_not(airflow_db, tmp_path):
    table = tmp_path / "t"
    folder = land(tmp_path / "in", range(0, 3))
    code = COMMIT_DAG.format(dag_id="changes", table=str(table), source=str(folder))
    run_dag("changes", code, logical_date=dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    run_dag("changes", code, logical_date=dt.datetime(2026, 3, 2, tzinfo=dt.UTC))  # same files
    assert ids(table) == [0, 1, 2]
    land(folder, range(3, 5), name="late.parquet")  # a file arrives late: the folder is a new batch
    run_dag("changes", code, logical_date=dt.datetime(2026, 3, 3, tzinfo=dt.UTC))
    assert ids(table) == [0, 0, 1, 1, 2, 2, 3, 4]  # documented: the set of files is the work


def test_mapped_tasks_commit_each_distinct_batch_once(airflow_db, tmp_path):
    table = tmp_path / "t"
    a = land(tmp_path / "a", range(0, 3))
    b = land(tmp_path / "b", range(10, 13))
    run = run_dag(
        "mapped",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.commit import DeltaCommitOperator

        with DAG("mapped", schedule=None, start_date=pendulum.datetime(2026, 1, 1), max_active_tasks=1) as dag:
            DeltaCommitOperator.partial(task_id="commit", table_uri={str(table)!r}).expand(
                source=[{str(a)!r}, {str(b)!r}, {str(a)!r}]
            )
        """,
    )
    assert set(task_states(run).values()) == {"success"}
    assert ids(table) == [0, 1, 2, 10, 11, 12]
    history = DeltaTable(str(table)).history()
    assert len(history) == 2
    assert {h["airflow"]["map_index"] for h in history} <= {0, 1, 2}


def test_stage_gate_commit_twice_a_day_and_redelivered_files(airflow_db, tmp_path):
    """The staged path: two runs in one interval with different landings both land; a rerun with
    nothing new commits nothing; the same files delivered again are recognised."""
    table = tmp_path / "t"
    landing = tmp_path / "landing"
    staging = tmp_path / "staging"
    code = f"""
    import pendulum
    from airflow.sdk import DAG, CronDataIntervalTimetable
    from deltaplane.operators.operators.commit import DeltaCommitOperator
    from deltaplane.operators.operators.ingest import DeltaStageOperator
    from deltaplane.operators.operators.quality import DeltaQualityGateOperator

    M = "{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}"
    with DAG("staged", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
             start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
        stage = DeltaStageOperator(task_id="stage", table_uri={str(table)!r}, landing={str(landing)!r},
                                   staging={str(staging)!r})
        gate = DeltaQualityGateOperator(task_id="gate", table_uri={str(table)!r}, staged_manifest=M,
            expectations=[{{"expectation": "expect_column_values_to_not_be_null", "kwargs": {{"column": "id"}}}}])
        commit = DeltaCommitOperator(task_id="commit", table_uri={str(table)!r}, staged_manifest=M)
        stage >> gate >> commit
    """
    land(landing, range(0, 4), "first.parquet")
    keep = tmp_path / "first-copy.parquet"
    shutil.copy2(landing / "first.parquet", keep)  # the same file, delivered again later
    r1 = run_dag("staged", code, logical_date=dt.datetime(2026, 3, 1, 8, tzinfo=dt.UTC))
    land(landing, range(4, 8), "second.parquet")
    r2 = run_dag("staged", code, logical_date=dt.datetime(2026, 3, 1, 20, tzinfo=dt.UTC))
    assert r1.data_interval_end == r2.data_interval_end
    assert ids(table) == list(range(8))
    r3 = run_dag("staged", code, logical_date=dt.datetime(2026, 3, 2, tzinfo=dt.UTC))  # nothing landed
    assert task_states(r3)["stage"] == "success" and task_states(r3)["commit"] == "skipped"
    shutil.copy2(keep, landing / "first.parquet")  # same path, size and modification time
    r4 = run_dag("staged", code, logical_date=dt.datetime(2026, 3, 3, tzinfo=dt.UTC))
    assert xcom(r4, "stage")["already_committed"] is True
    assert xcom(r4, "commit")["skipped"] is True and xcom(r4, "commit")["version"] == 0
    assert ids(table) == list(range(8)) and DeltaTable(str(table)).version == 1


def test_a_retried_update_applies_once_and_a_new_run_applies_again(airflow_db, tmp_path):
    """An UPDATE that is not idempotent by nature (x = x + 1): a retry after the commit (the
    worker died before reporting) finds its work; a new run is new work."""
    table = tmp_path / "t"
    from deltaplane.engine import write_table

    write_table(str(table), pa.table({"id": pa.array([1, 2], pa.int64()), "x": pa.array([0, 0], pa.int64())}))
    marker = tmp_path / "crashed"
    code = f"""
    import datetime as dt
    from pathlib import Path
    import pendulum
    from airflow.sdk import DAG
    from deltaplane.operators.operators.dml import DeltaDMLOperator

    class Update(DeltaDMLOperator):
        def publish(self, context, hook, result):
            marker = Path({str(marker)!r})
            if not marker.exists():
                marker.write_text("x")
                raise RuntimeError("worker lost after the commit")
            return super().publish(context, hook, result)

    with DAG("bump", schedule=None, start_date=pendulum.datetime(2026, 1, 1),
             default_args=dict(retries=1, retry_delay=dt.timedelta(seconds=0))) as dag:
        Update(task_id="bump", table_uri={str(table)!r}, operation="update", updates={{"x": "x + 1"}},
               predicate="id = 1")
    """
    first = run_dag("bump", code)
    assert task_states(first) == {"bump": "success"}
    rows = DeltaTable(str(table)).to_arrow().sort_by("id")["x"].to_pylist()
    assert rows == [1, 0]
    assert xcom(first, "bump")["skipped"] is True and xcom(first, "bump")["version"] == 1
    second = run_dag("bump", code)
    assert second.run_id != first.run_id
    assert DeltaTable(str(table)).to_arrow().sort_by("id")["x"].to_pylist() == [2, 0]
