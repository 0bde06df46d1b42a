"""No landing batch is ever stranded: real Airflow (``dag.test()``), real tables, the README's
ingest chain (stage -> quality gate -> commit).

* a VACUUM with retention 0 between the stage and the commit (the demo's nightly VACUUM) does
  not delete the staged batch, and its rows land;
* staged files that vanished anyway (a VACUUM that knows nothing of holds: Delta Spark's, an
  older deltaplane) are staged again from the landing files at the commit, and land once;
* landing files move to ``_processed/`` only after the commit holding their rows landed; until
  then they are claimed under ``_staged/<batch>/``;
* two runs staging the first batches of a table that does not exist yet both land (the second
  commit appends); a batch whose schema does not fit the table the other run created goes back
  to the landing folder with a message naming both schemas, and the next run stages it against
  the table.

The expected rows are the landing files' own, written down here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.holds import list_holds
from deltaplane.engine.storage import open_store
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.airflow


def land_csv(folder: Path, name: str, header: str, lines: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(header + "\n" + "".join(line + "\n" for line in lines))
    return path


def ids(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_arrow()["id"].to_pylist())


def landed(folder: Path) -> dict[str, list[str]]:
    """What is where under a landing folder: the folder itself, claimed, processed."""
    out: dict[str, list[str]] = {"landing": [], "_staged": [], "_processed": []}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            rel = p.relative_to(folder).parts
            out[rel[0] if len(rel) > 1 else "landing"].append(p.name)
    return out


STAGE_GATE_COMMIT = """
import pendulum
from airflow.sdk import DAG, task
from deltaplane.operators import (
    DeltaCommitOperator, DeltaQualityGateOperator, DeltaStageOperator, DeltaVacuumOperator,
)

TABLE, LANDING, STAGING = {table!r}, {landing!r}, {staging!r}
M = "{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}"

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    stage = DeltaStageOperator(task_id="stage", table_uri=TABLE, landing=LANDING, staging=STAGING,
                               source_format="csv")
    gate = DeltaQualityGateOperator(task_id="gate", table_uri=TABLE, staged_manifest=M,
        expectations=[{{"expectation": "expect_column_values_to_not_be_null", "kwargs": {{"column": "id"}}}}])
    commit = DeltaCommitOperator(task_id="commit", table_uri=TABLE, staged_manifest=M, retries=1,
                                 retry_delay=0)
    {between}
"""

VACUUM_BETWEEN = """
    vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=TABLE, dry_run=False, retention_hours=0,
                                 enforce_retention=False)

    @task
    def state():
        import os
        return sorted(os.listdir(LANDING + "/_staged"))

    stage >> gate >> vacuum >> state() >> commit
"""

DELETE_STAGED_BETWEEN = """
    @task
    def lose_staged_files(manifest):
        # What a VACUUM that knows nothing of holds (Delta Spark's) does to a staged batch.
        import json, os
        for add in json.load(open(manifest))["adds"]:
            os.unlink(os.path.join(TABLE, add["path"]))

    lost = lose_staged_files(M)
    stage >> gate >> lost >> commit
"""


def run_pipeline(dag_id: str, table: Path, landing: Path, staging: Path, between: str = ""):
    """One run of stage -> gate -> commit; ``between`` adds tasks and their own order."""
    source = STAGE_GATE_COMMIT.format(
        dag_id=dag_id, table=str(table), landing=str(landing), staging=str(staging), between=between
    )
    return run_dag(dag_id, source + ("" if between else "    stage >> gate >> commit\n"))


def test_a_nightly_vacuum_with_zero_retention_does_not_strand_a_staged_batch(airflow_db, tmp_path):
    table, landing, staging = tmp_path / "trips", tmp_path / "landing", tmp_path / "staging"
    land_csv(landing, "a.csv", "id,fare", ["1,2.5", "2,3.0"])
    run_pipeline("nightly_a", table, landing, staging)
    assert ids(table) == [1, 2]
    land_csv(landing, "b.csv", "id,fare", [f"{i},{i}.5" for i in range(3, 403)])
    run = run_pipeline("nightly_b", table, landing, staging, between=VACUUM_BETWEEN)
    assert task_states(run) == {
        "stage": "success",
        "gate": "success",
        "vacuum": "success",
        "state": "success",
        "commit": "success",
    }
    batch = xcom(run, "stage")["batch"]
    assert xcom(run, "state") == [batch]  # claimed, not yet processed, while the commit waited
    assert ids(table) == list(range(1, 403))  # 402 rows: none lost
    assert landed(landing) == {"landing": [], "_staged": [], "_processed": ["a.csv", "b.csv"]}
    assert list_holds(open_store(str(table))) == []


def test_staged_files_that_vanished_are_staged_again_from_the_landing_files(airflow_db, tmp_path):
    table, landing, staging = tmp_path / "trips", tmp_path / "landing", tmp_path / "staging"
    land_csv(landing, "a.csv", "id,fare", ["1,2.5"])
    run_pipeline("vanish_a", table, landing, staging)
    land_csv(landing, "b.csv", "id,fare", [f"{i},1.0" for i in range(2, 402)])
    run = run_pipeline("vanish_b", table, landing, staging, between=DELETE_STAGED_BETWEEN)
    assert task_states(run)["commit"] == "success"
    out = xcom(run, "commit")
    assert out["restaged"] is True and out["rows"] == 400
    assert ids(table) == list(range(1, 402))
    assert landed(landing)["_processed"] == ["a.csv", "b.csv"]
    # The commit recorded the same work key as the first staging: delivering b.csv again is
    # recognised as done.
    history = DeltaTable(str(table)).history()
    assert len(history) == 2


PARALLEL_FIRST = """
import pendulum
from airflow.sdk import DAG
from deltaplane.operators import DeltaCommitOperator, DeltaStageOperator

TABLE = {table!r}
with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    stage_a = DeltaStageOperator(task_id="stage_a", table_uri=TABLE, landing={a!r}, staging={staging!r},
                                 source_format="csv")
    stage_b = DeltaStageOperator(task_id="stage_b", table_uri=TABLE, landing={b!r}, staging={staging!r},
                                 source_format="csv")
    commit_a = DeltaCommitOperator(task_id="commit_a", table_uri=TABLE,
        staged_manifest="{{{{ ti.xcom_pull(task_ids='stage_a')['manifest'] }}}}")
    commit_b = DeltaCommitOperator(task_id="commit_b", table_uri=TABLE,
        staged_manifest="{{{{ ti.xcom_pull(task_ids='stage_b')['manifest'] }}}}")
    [stage_a, stage_b] >> commit_a >> commit_b
"""


def parallel_dag(tmp_path: Path, dag_id: str) -> str:
    return PARALLEL_FIRST.format(
        dag_id=dag_id,
        table=str(tmp_path / "t"),
        a=str(tmp_path / "a"),
        b=str(tmp_path / "b"),
        staging=str(tmp_path / "staging"),
    )


def test_two_first_batches_staged_before_the_table_existed_both_land(airflow_db, tmp_path):
    land_csv(tmp_path / "a", "a.csv", "id,fare", [f"{i},1.5" for i in range(100)])
    land_csv(tmp_path / "b", "b.csv", "id,fare", [f"{i},2.5" for i in range(100, 200)])
    run = run_dag("first_two", parallel_dag(tmp_path, "first_two"))
    assert task_states(run) == {name: "success" for name in ("stage_a", "stage_b", "commit_a", "commit_b")}
    assert ids(tmp_path / "t") == list(range(200))
    assert xcom(run, "commit_b")["version"] == 1
    assert DeltaTable(str(tmp_path / "t")).history(1)[0]["operation"] == "WRITE"


def test_a_first_batch_that_does_not_fit_the_winner_goes_back_to_landing(airflow_db, tmp_path, capfd):
    # a.csv's fares parse as doubles, b.csv's as integers: b's staged files hold longs.
    land_csv(tmp_path / "a", "a.csv", "id,fare", [f"{i},1.5" for i in range(100)])
    land_csv(tmp_path / "b", "b.csv", "id,fare", [f"{i},2" for i in range(100, 200)])
    capfd.readouterr()
    run = run_dag("first_misfit", parallel_dag(tmp_path, "first_misfit"))
    log = "".join(capfd.readouterr())  # dag.test() logs the task's exception to stdout
    states = task_states(run)
    assert states["commit_a"] == "success" and states["commit_b"] == "failed"
    assert ids(tmp_path / "t") == list(range(100))
    assert "fare: double" in log and "fare: long" in log, log[-3000:]
    assert "b.csv" in log and "next run" in log
    assert landed(tmp_path / "b") == {"landing": ["b.csv"], "_staged": [], "_processed": []}
    # The next run stages b.csv in the table's types (its integers as doubles) and lands it.
    b_only = (
        parallel_dag(tmp_path, "misfit_next")
        .replace("[stage_a, stage_b] >> commit_a >> commit_b", "stage_b >> commit_b")
    )
    again = run_dag("misfit_next", b_only)
    assert task_states(again)["commit_b"] == "success"
    assert ids(tmp_path / "t") == list(range(200))
    fares = DeltaTable(str(tmp_path / "t")).to_arrow().sort_by("id")["fare"].to_pylist()
    assert fares == [1.5] * 100 + [2.0] * 100


COMMITTED_BEFORE_THE_TASK = """
    @task
    def commit_and_die(manifest):
        # The commit task's first try: its commit landed, then it was killed (kill -9) before it
        # moved the landing files or released the hold.
        from deltaplane.engine.commands.staged import commit_write
        from deltaplane.engine.commands.staged_manifest import read_manifest

        staged = read_manifest(manifest)
        commit_write(staged.spec, staged.adds, release_hold=False)

    died = commit_and_die(M)
    stage >> gate >> died >> commit
"""


def test_a_commit_task_killed_after_its_commit_finishes_the_batch_on_its_retry(airflow_db, tmp_path):
    table, landing, staging = tmp_path / "trips", tmp_path / "landing", tmp_path / "staging"
    land_csv(landing, "a.csv", "id,fare", [f"{i},1.0" for i in range(5)])
    run = run_pipeline("killed_after_commit", table, landing, staging, between=COMMITTED_BEFORE_THE_TASK)
    assert task_states(run)["commit"] == "success"
    out = xcom(run, "commit")
    assert out["already_applied"] is True and out["version"] == 0
    assert ids(table) == list(range(5)) and DeltaTable(str(table)).version == 0  # landed once
    assert landed(landing) == {"landing": [], "_staged": [], "_processed": ["a.csv"]}
    assert list_holds(open_store(str(table))) == []
