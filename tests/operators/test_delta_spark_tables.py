"""deltaplane's Airflow operators maintain the tables Delta Spark 4.4 writes with its writer
features (copies of tests/fixtures/delta_spark_44): auto-optimize -> compaction -> DELETE ->
checkpoint -> vacuum runs in a real Airflow (SQLite metadata DB, ``dag.test()``); clustered tables
are clustered by the compaction, Delta Spark's row ids survive, Delta Spark then reads exactly the
rows deltaplane reads and keeps inserting and optimizing. Clearing the run and running it again
changes nothing. One run compacts with Spark (spark-submit through DeltaSparkSubmitHook)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from deltaplane.engine import DeltaTable
from tests.deltaspark.compare import arrow_rows, sorted_rows
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.airflow

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "delta_spark_44"

# Per table: the column that names a row, the DELETE predicate, Delta Spark's insert afterwards,
# whether it is liquid-clustered, tracks row ids and deletes by deletion vectors.
CASES = {
    "all_features": dict(
        key="k", delete="k = 2", insert="INSERT INTO {t} (k) VALUES (10)", clustered=True, row_ids=True, dvs=True
    ),
    "liquid_clustering": dict(
        key="a", delete="a = 1", insert="INSERT INTO {t} VALUES (7, 70, 'spark')", clustered=True, row_ids=False, dvs=False
    ),
    "row_tracking": dict(
        key="id", delete="id = 1", insert="INSERT INTO {t} VALUES (9, 'i')", clustered=False, row_ids=True, dvs=True
    ),
    "identity_always": dict(
        key="x", delete="x = 'a'", insert="INSERT INTO {t} (x) VALUES ('spark')", clustered=False, row_ids=False, dvs=False
    ),
}

DAG = """
import pendulum
from airflow.sdk import DAG
from deltaplane.operators.operators.dml import DeltaDMLOperator
from deltaplane.operators.operators.maintenance import (
    DeltaAutoOptimizeOperator, DeltaCheckpointOperator, DeltaCompactionOperator, DeltaVacuumOperator,
)

T = {table!r}
with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    # two small files are enough; deleted rows alone never trigger a rewrite
    decide = DeltaAutoOptimizeOperator(task_id="auto_optimize", table_uri=T, min_small_files=2,
                                       max_deleted_rows_ratio=1.0)
    compact = DeltaCompactionOperator(task_id="compact", table_uri=T, spark_threshold_bytes={threshold})
    delete = DeltaDMLOperator(task_id="delete", table_uri=T, operation="delete", predicate={predicate!r})
    checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=T)
    vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=T, dry_run=False, retention_hours=0,
                                 enforce_retention=False)
    decide >> compact >> delete >> checkpoint >> vacuum
"""
TASKS = {"auto_optimize", "compact", "delete", "checkpoint", "vacuum"}


def _both_read_the_same(delta_spark, path: str) -> list[dict]:
    ours = sorted_rows(arrow_rows(DeltaTable(path).to_arrow()))
    assert ours == sorted_rows(delta_spark.rows(path))
    return ours


def _row_ids(delta_spark, path: str, key: str) -> dict:
    rows = delta_spark.sql(
        f"SELECT {key} AS key, _metadata.row_id AS row_id, _metadata.row_commit_version AS version "
        f"FROM delta.`{path}`"
    )
    return {r["key"]: (r["row_id"], r["version"]) for r in rows}


def _adds(path: str, version: int) -> list[dict]:
    log = Path(path, "_delta_log", f"{version:020d}.json")
    return [a["add"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a]


def _maintain(delta_spark, tmp_path: Path, name: str, *, threshold: int, dag_id: str):
    case = CASES[name]
    path = str(tmp_path / name)
    shutil.copytree(CORPUS / name, path)
    before = _both_read_the_same(delta_spark, path)
    ids_before = _row_ids(delta_spark, path, case["key"]) if case["row_ids"] else {}
    source = DAG.format(table=path, dag_id=dag_id, threshold=threshold, predicate=case["delete"])
    logical = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
    run = run_dag(dag_id, source, logical_date=logical, run_after=logical)
    states = task_states(run)
    assert states == dict.fromkeys(TASKS, "success"), states

    compact = xcom(run, "compact")
    assert compact["nothing_to_do"] is False and compact["version"] is not None, compact
    decision = xcom(run, "auto_optimize")
    assert decision["action"] == ("cluster" if case["clustered"] else "compact"), decision
    adds = _adds(path, compact["version"])
    assert adds and all(a["dataChange"] is False for a in adds)
    if case["clustered"]:  # the compaction clustered: Delta Spark's ZCube tags on every new file
        assert all(a.get("clusteringProvider") == "liquid" for a in adds), adds
    else:
        assert all("clusteringProvider" not in a for a in adds), adds
    assert xcom(run, "delete")["metrics"]["numDeletedRows"] == "1"
    assert xcom(run, "vacuum")["files"] >= 1  # the compacted-away files

    rows = _both_read_the_same(delta_spark, path)
    key = case["key"]
    deleted = [r for r in before if r not in rows]
    assert len(rows) == len(before) - 1 and len(deleted) == 1
    assert delta_spark.sql(f"SELECT count(*) AS n FROM delta.`{path}` WHERE {case['delete']}") == [{"n": 0}]
    if ids_before:  # OPTIMIZE and a DV delete keep every surviving row's id and commit version
        ids_after = _row_ids(delta_spark, path, key)
        assert ids_after == {k: v for k, v in ids_before.items() if k != deleted[0][key]}
        ours = DeltaTable(path).to_arrow(columns=[key], row_tracking=True).to_pylist()
        assert {r[key]: (r["_metadata.row_id"], r["_metadata.row_commit_version"]) for r in ours} == ids_after
    version = DeltaTable(path).version

    # Cleared and run again (the same run): the DELETE is not repeated, nothing is left to do.
    # Only a clustered table without deletion vectors has work left once: its copy-on-write
    # DELETE rewrote a ZCube's rows into a new, unclustered file, which the next OPTIMIZE
    # clusters (as Delta Spark's incremental clustering would); the run after that is a no-op.
    for attempt in range(2):
        again = run_dag(dag_id, source, logical_date=logical, run_after=logical)
        assert again.run_id == run.run_id
        assert task_states(again) == dict.fromkeys(TASKS, "success"), task_states(again)
        delete = xcom(again, "delete")
        assert delete["skipped"] is True and delete["version"] == xcom(run, "delete")["version"]
        assert _both_read_the_same(delta_spark, path) == rows
        if xcom(again, "compact")["nothing_to_do"]:
            break
        assert attempt == 0 and case["clustered"] and not case["dvs"], xcom(again, "compact")
        assert all(a.get("clusteringProvider") == "liquid" for a in _adds(path, xcom(again, "compact")["version"]))
        version = DeltaTable(path).version
    assert xcom(again, "vacuum")["files"] == 0
    assert DeltaTable(path).version == version

    # Delta Spark keeps writing and optimizing the table the operators maintained.
    delta_spark.sql(case["insert"].format(t=f"delta.`{path}`"))
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")
    final = _both_read_the_same(delta_spark, path)
    assert len(final) == len(rows) + 1
    keys = [r[key] for r in final]
    assert len(keys) == len(set(keys)), keys
    if name in ("all_features", "identity_always"):  # identity values still never repeat
        assert len({r["id"] for r in final}) == len(final)
    if ids_before:
        ids_final = _row_ids(delta_spark, path, key)
        assert {k: ids_final[k] for k in ids_after} == ids_after
        assert len({v[0] for v in ids_final.values()}) == len(ids_final)
    return run, compact


@pytest.mark.parametrize("name", sorted(CASES))
def test_operators_maintain_a_delta_spark_table(airflow_db, delta_spark, tmp_path, name):
    _, compact = _maintain(delta_spark, tmp_path, name, threshold=8 << 30, dag_id=f"ds_maintain_{name}")
    assert compact["engine"] == "in-process"


def test_spark_compaction_of_a_clustered_row_tracking_table(airflow_db, delta_spark, tmp_path):
    """The compaction above its threshold: deltaplane.spark_jobs.compact through spark-submit."""
    _, compact = _maintain(delta_spark, tmp_path, "all_features", threshold=0, dag_id="ds_maintain_spark")
    assert compact["engine"] == "spark"


INGEST_DAG = """
import pendulum
from airflow.sdk import DAG
from deltaplane.operators.operators.commit import DeltaCommitOperator
from deltaplane.operators.operators.ingest import DeltaStageOperator

M = "{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}"
with DAG("ingest_identity", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    stage = DeltaStageOperator(task_id="stage", table_uri={table!r}, landing={landing!r}, staging={staging!r})
    commit = DeltaCommitOperator(task_id="commit", table_uri={table!r}, staged_manifest=M)
    stage >> commit
"""


def test_the_ingest_path_assigns_identity_values_delta_spark_continues(airflow_db, delta_spark, tmp_path):
    """Landing files without the identity column, staged and committed by the operators into
    Delta Spark's identity table (start 10, step 5, mark 20): values continue past the mark, and
    Delta Spark's next insert continues past ours."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "identity_always"
    shutil.copytree(CORPUS / "identity_always", table)
    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(pa.table({"x": ["d", "e"]}), landing / "batch.parquet")
    source = INGEST_DAG.format(table=str(table), landing=str(landing), staging=str(tmp_path / "staging"))
    run = run_dag("ingest_identity", source, logical_date=dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    assert task_states(run) == {"stage": "success", "commit": "success"}
    delta_spark.sql(f"INSERT INTO delta.`{table}` (x) VALUES ('spark')")
    theirs = {r["x"]: r["id"] for r in delta_spark.rows(str(table))}
    assert theirs == {"a": 10, "b": 15, "c": 20, "d": 25, "e": 30, "spark": 35}
    assert sorted_rows(arrow_rows(DeltaTable(str(table)).to_arrow())) == sorted_rows(delta_spark.rows(str(table)))
