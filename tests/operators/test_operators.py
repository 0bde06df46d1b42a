"""Every operator through ``dag.test()`` against a real SQLite metadata DB and real tables."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine import DeltaTable
from tests.operators.conftest import asset_events, run_dag, task_states, xcom

pytestmark = pytest.mark.xdist_group("airflow")


def landing(directory: Path, batches: int, rows: int = 100) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        ids = list(range(b * rows, (b + 1) * rows))
        pq.write_table(
            pa.table({"id": pa.array(ids, pa.int64()), "day": [f"2026-11-0{1 + i % 3}" for i in ids]}),
            directory / f"batch-{b}.parquet",
        )
    return directory


def test_commit_then_maintenance(airflow_db, tmp_path):
    table = tmp_path / "events"
    source = landing(tmp_path / "landing", 3)
    run = run_dag(
        "commit_maintenance",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from operators.commit import DeltaCommitOperator
        from operators.maintenance import (
            DeltaAutoOptimizeOperator, DeltaCheckpointOperator, DeltaCompactionOperator,
            DeltaManifestOperator, DeltaVacuumOperator,
        )

        T = {str(table)!r}
        with DAG("commit_maintenance", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            commits = [
                DeltaCommitOperator(task_id=f"commit_{{i}}", table_uri=T, source={str(source)!r} + f"/batch-{{i}}.parquet",
                                    partition_by=["day"])
                for i in range(3)
            ]
            decide = DeltaAutoOptimizeOperator(task_id="auto_optimize", table_uri=T, min_small_files=2)
            compact = DeltaCompactionOperator(task_id="compact", table_uri=T, decision_task_id="auto_optimize")
            checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=T, trigger_rule="none_failed")
            vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=T, dry_run=False, retention_hours=0,
                                         enforce_retention=False)
            manifest = DeltaManifestOperator(task_id="manifest", table_uri=T)
            commits[0] >> commits[1] >> commits[2] >> decide >> compact >> checkpoint >> vacuum >> manifest
        """,
    )
    states = task_states(run)
    assert set(states.values()) == {"success"}, states
    uri = f"file://{table}"
    events = asset_events(uri)
    assert [e["operation"] for e in events][:4] == ["CREATE TABLE AS SELECT", "WRITE", "WRITE", "OPTIMIZE"]
    assert events[0]["dataChange"] and events[0]["rowsAdded"] == 100 and events[0]["filesAdded"] == 3
    assert events[3]["dataChange"] is False and events[3]["filesRemoved"] == 9
    decision = xcom(run, "auto_optimize")
    assert decision["action"] == "compact" and len(decision["partitions"]) == 3
    dt = DeltaTable(str(table))
    history = dt.history()
    stamps = {h["version"]: h.get("airflow", {}) for h in history}
    assert stamps[0]["task_id"] == "commit_0" and stamps[0]["run_id"] == run.run_id
    assert deltalake.DeltaTable(str(table)).transaction_version("commit_maintenance.commit_0") is not None
    assert dt.snapshot.num_files == 3 and dt.count() == 300
    assert sorted(deltalake.DeltaTable(str(table)).to_pyarrow_table()["id"].to_pylist()) == list(range(300))
    assert xcom(run, "vacuum")["files"] == 9  # the compacted-away small files
    assert (table / "_symlink_format_manifest").is_dir()
    checkpoint = xcom(run, "checkpoint")["checkpoint"]
    assert checkpoint["version"] == 3  # after the three commits and the OPTIMIZE
    assert (table / checkpoint["key"]).exists()
