"""Every operator through ``dag.test()`` against a real SQLite metadata DB and real tables."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import asset_events, run_tasks, task_states, xcom

pytestmark = pytest.mark.airflow


def landing(directory: Path, batches: int, rows: int = 100) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        ids = list(range(b * rows, (b + 1) * rows))
        pq.write_table(
            pa.table({"id": pa.array(ids, pa.int64()), "day": [f"2026-11-0{1 + i % 3}" for i in ids]}),
            directory / f"batch-{b}.parquet",
        )
    return directory


def load_and_maintain(name: str, table: Path, batches: int, tasks: str):
    """``run_tasks`` of a DAG ``name`` whose ``tasks`` commit files to ``table`` (``T``) and
    maintain it: ``batches`` files of 100 rows in a ``landing`` folder beside it (``S``)."""
    source = landing(table.parent / "landing", batches)
    head = f"""
        from deltaplane.operators.operators.commit import DeltaCommitOperator
        from deltaplane.operators.operators.maintenance import (
            DeltaAutoOptimizeOperator, DeltaCheckpointOperator, DeltaCompactionOperator,
            DeltaManifestOperator, DeltaVacuumOperator,
        )

        T, S = {str(table)!r}, {str(source)!r}
        """
    return run_tasks(name, head, tasks)


def test_commit_then_maintenance(airflow_db, tmp_path):
    table = tmp_path / "events"
    run = load_and_maintain(
        "commit_maintenance",
        table,
        3,
        """
        commits = [
            DeltaCommitOperator(task_id=f"commit_{i}", table_uri=T, source=S + f"/batch-{i}.parquet",
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
    # Data commits on the table's Asset, maintenance on its own (one payload shape for both).
    events = [e["payload"] for e in asset_events(uri)]
    assert [e["operation"] for e in events] == ["CREATE TABLE AS SELECT", "WRITE", "WRITE"]
    assert events[0]["dataChange"] and events[0]["rowsAdded"] == 100 and events[0]["filesAdded"] == 3
    maintenance = [e["payload"] for e in asset_events(f"{uri}/_deltaplane/maintenance")]
    assert maintenance[0]["operation"] == "OPTIMIZE"
    assert maintenance[0]["dataChange"] is False and maintenance[0]["filesRemoved"] == 9
    decision = xcom(run, "auto_optimize")
    assert decision["action"] == "compact" and len(decision["partitions"]) == 3
    dt = DeltaTable(str(table))
    history = dt.history()
    stamps = {h["version"]: h.get("airflow", {}) for h in history}
    assert stamps[0]["task_id"] == "commit_0" and stamps[0]["run_id"] == run.run_id
    work = [xcom(run, f"commit_{i}")["work"] for i in range(3)]  # each batch named by its files
    assert len(set(work)) == 3 and all(w.startswith("deltaplane:files:") for w in work)
    assert all(deltalake.DeltaTable(str(table)).transaction_version(w) == 1 for w in work)
    assert dt.snapshot.num_files == 3 and dt.count() == 300
    assert sorted(deltalake.DeltaTable(str(table)).to_pyarrow_table()["id"].to_pylist()) == list(range(300))
    assert xcom(run, "vacuum")["files"] == 9  # the compacted-away small files
    assert (table / "_symlink_format_manifest").is_dir()
    checkpoint = xcom(run, "checkpoint")["checkpoint"]
    assert checkpoint["version"] == 3  # after the three commits and the OPTIMIZE
    assert (table / checkpoint["key"]).exists()


def test_a_retried_writing_task_commits_once(airflow_db, tmp_path):
    """Try 1 commits, then dies before it can report success; try 2 finds its commit and succeeds
    without writing (so does a DELETE, through the txn every command now carries)."""
    table = tmp_path / "t"
    source = landing(tmp_path / "landing", 1)
    marker = tmp_path / "crashed"
    run = run_tasks(
        "retry_once",
        f"""
        from pathlib import Path
        from deltaplane.operators.operators.commit import DeltaCommitOperator
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        class CrashAfterCommit:
            def publish(self, context, hook, result):
                marker = Path({str(marker)!r} + "-" + self.task_id)
                if not marker.exists():
                    marker.write_text(str(result.get("version")))
                    raise RuntimeError("worker lost after the commit")
                return super().publish(context, hook, result)

        class Commit(CrashAfterCommit, DeltaCommitOperator):
            pass

        class Delete(CrashAfterCommit, DeltaDMLOperator):
            pass

        args = dict(retries=1, retry_delay=datetime.timedelta(seconds=0))
        T = {str(table)!r}
        """,
        f"""
        commit = Commit(task_id="commit", table_uri=T, source={str(source)!r})
        delete = Delete(task_id="delete", table_uri=T, operation="delete", predicate="id < 10")
        commit >> delete
        """,
        dag_args="default_args=args",
    )
    assert task_states(run) == {"commit": "success", "delete": "success"}
    dt = DeltaTable(str(table))
    assert dt.version == 1 and dt.count() == 90  # one WRITE, one DELETE: nothing twice
    assert [h["operation"] for h in dt.history()] == ["DELETE", "CREATE TABLE AS SELECT"]
    assert all(h["airflow"]["try_number"] == 1 for h in dt.history())
    assert xcom(run, "commit")["skipped"] is True and xcom(run, "commit")["version"] == 0
    events = [e["payload"] for e in asset_events(f"file://{table}")]
    assert [e["version"] for e in events] == [0, 1]  # reported by the successful retries


def test_compaction_has_nothing_to_do_when_auto_optimize_says_so(airflow_db, tmp_path):
    table = tmp_path / "t"
    run = load_and_maintain(
        "nothing_to_do",
        table,
        2,
        """
        load = DeltaCommitOperator(task_id="load", table_uri=T, source=S)
        decide = DeltaAutoOptimizeOperator(task_id="auto_optimize", table_uri=T)  # 50 small files by default
        compact = DeltaCompactionOperator(task_id="compact", table_uri=T, decision_task_id="auto_optimize")
        checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=T)
        load >> decide >> compact >> checkpoint
        """,
    )
    states = task_states(run)
    assert set(states.values()) == {"success"}, states  # nothing is skipped, no trigger rule needed
    decision = xcom(run, "auto_optimize")
    assert decision["action"] == "skip" and "fewer than 50 small files" in decision["reasons"][0]
    assert xcom(run, "compact")["nothing_to_do"] is True
    assert DeltaTable(str(table)).version == 0


def test_dml_operators(airflow_db, tmp_path):
    table = tmp_path / "users"
    source = landing(tmp_path / "landing", 1)
    upserts = tmp_path / "upserts.parquet"
    pq.write_table(pa.table({"id": pa.array([5, 500], pa.int64()), "day": ["gdpr", "new"]}), upserts)
    DeltaTable.create(
        str(table),
        pa.schema([("id", pa.int64()), ("day", pa.string())]),
        properties={"delta.enableDeletionVectors": "true"},
    ).append(pq.read_table(source / "batch-0.parquet"))
    run = run_tasks(
        "dml_ops",
        f"""
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        T = {str(table)!r}
        """,
        f"""
        forget = DeltaDMLOperator(task_id="gdpr_delete", table_uri=T, operation="delete", predicate="id IN (1, 2, 3)")
        fix = DeltaDMLOperator(task_id="fix", table_uri=T, operation="update", predicate="id = 4", updates={{"day": "'fixed'"}})
        upsert = DeltaDMLOperator(task_id="upsert", table_uri=T, operation="merge", source={str(upserts)!r},
                                  merge_condition="t.id = s.id")
        forget >> fix >> upsert
        """,
    )
    assert set(task_states(run).values()) == {"success"}
    rows = {r["id"]: r["day"] for r in DeltaTable(str(table)).to_arrow().to_pylist()}
    assert (
        1 not in rows and rows[4] == "fixed" and rows[5] == "gdpr" and rows[500] == "new" and len(rows) == 98
    )
    events = [e["payload"] for e in asset_events(f"file://{table}")]
    assert [e["operation"] for e in events] == ["DELETE", "UPDATE", "MERGE"]
    assert (events[0]["kind"], events[0]["rowsDeleted"], events[0]["rowsAdded"]) == ("delete", 3, 0)
    assert xcom(run, "gdpr_delete")["operationMetrics"]["numDeletionVectorsAdded"] == "1"


def tree_bytes(root: Path, skip: str = "_quarantine") -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and skip not in p.parts
    }


def test_quality_gate_commits_good_batches_and_quarantines_bad_ones(airflow_db, tmp_path):
    from deltaplane.engine import stage_write, write_table
    from deltaplane.engine.commands.staged_manifest import write_manifest

    table = tmp_path / "orders"
    write_table(str(table), pa.table({"id": pa.array([1, 2], pa.int64()), "amount": [5.0, 6.0]}))
    good = stage_write(str(table), pa.table({"id": pa.array([3, 4], pa.int64()), "amount": [7.0, 8.0]}))
    bad = stage_write(
        str(table), pa.table({"id": pa.array([5, None, 7], pa.int64()), "amount": [1.0, -2.0, 3.0]})
    )
    staging = tmp_path / "staging"
    write_manifest(str(staging / "good.json"), good)
    write_manifest(str(staging / "bad.json"), bad)
    expectations = [
        {"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}},
        {"expectation": "expect_column_values_to_be_between", "kwargs": {"column": "amount", "min_value": 0}},
    ]

    def gate(name: str, batch: str, on_failure: str):
        return run_tasks(
            name,
            f"""
            from deltaplane.operators.operators.commit import DeltaCommitOperator
            from deltaplane.operators.operators.quality import DeltaQualityGateOperator

            T, M = {str(table)!r}, {str(staging / batch) + ".json"!r}
            """,
            f"""
            gate = DeltaQualityGateOperator(task_id="gate", table_uri=T, staged_manifest=M,
                                            expectations={expectations!r}, on_failure={on_failure!r})
            commit = DeltaCommitOperator(task_id="commit", table_uri=T, staged_manifest=M)
            gate >> commit
            """,
        )

    run = gate("gate_good", "good", on_failure="fail")
    assert task_states(run) == {"gate": "success", "commit": "success"}
    assert xcom(run, "gate")["success"] and xcom(run, "gate")["rows"] == 2
    assert sorted(DeltaTable(str(table)).to_arrow()["id"].to_pylist()) == [1, 2, 3, 4]

    before = tree_bytes(table)
    run = gate("gate_bad", "bad", on_failure="skip")
    # Rejected: the gate FAILS (no retries) even with on_failure="skip", the commit does not run.
    assert task_states(run) == {"gate": "failed", "commit": "upstream_failed"}
    summary = xcom(run, "gate")
    assert not summary["success"] and {f["expectation"] for f in summary["failed"]} == {
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_between",
    }
    after = tree_bytes(table)
    # Nothing committed, nothing committed touched: the table is byte-identical, minus the
    # bad batch's own (never referenced) files, which moved to the quarantine, and its hold,
    # released with them (VACUUM may reclaim what is left of it).
    bad_files = {a.path for a in bad.adds}
    bad_hold = f"_deltaplane/holds/{bad.spec.hold}.json"
    assert {k: v for k, v in before.items() if k not in bad_files | {bad_hold}} == after
    assert not [k for k in after if k.startswith("_deltaplane/holds/")]
    quarantine = Path(summary["quarantine"])
    assert quarantine == table / "_quarantine" / "bad"
    assert sorted(p.name for p in (quarantine / "data").rglob("*.parquet")) == sorted(
        Path(p).name for p in bad_files
    )
    assert (quarantine / "manifest.json").exists() and not (staging / "bad.json").exists()
    validation = json.loads((quarantine / "validation.json").read_text())
    assert validation["summary"]["failed"][0]["unexpected_count"] == 1
    assert DeltaTable(str(table)).count() == 4
    # A failing gate with on_failure="fail" fails the task (and so the run).
    bad2 = stage_write(str(table), pa.table({"id": pa.array([None], pa.int64()), "amount": [1.0]}))
    write_manifest(str(staging / "bad2.json"), bad2)
    run = gate("gate_fail", "bad2", on_failure="fail")
    assert task_states(run)["gate"] == "failed" and task_states(run)["commit"] in (
        "upstream_failed",
        "None",
        "none",
    )


def test_operators_on_s3_through_a_connection(airflow_db, tmp_path, s3_server, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE",
        json.dumps(
            {
                "conn_type": "deltaplane",
                "host": s3_server.endpoint,
                "login": "test",
                "password": "test",
                "extra": {"region": "us-east-1"},
            }
        ),
    )
    uri = s3_server.uri("airflow-events")
    source = landing(tmp_path / "landing", 3)
    run = run_tasks(
        "on_s3",
        f"""
        from deltaplane.operators.operators.commit import DeltaCommitOperator
        from deltaplane.operators.operators.dml import DeltaDMLOperator
        from deltaplane.operators.operators.maintenance import DeltaCompactionOperator, DeltaVacuumOperator

        T, S = {uri!r}, {str(source)!r}
        """,
        """
        loads = [DeltaCommitOperator(task_id=f"load_{i}", table_uri=T, deltaplane_conn_id="lake",
                                     source=S + f"/batch-{i}.parquet") for i in range(3)]
        compact = DeltaCompactionOperator(task_id="compact", table_uri=T, deltaplane_conn_id="lake")
        delete = DeltaDMLOperator(task_id="delete", table_uri=T, deltaplane_conn_id="lake",
                                  operation="delete", predicate="id >= 290")
        vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=T, deltaplane_conn_id="lake", dry_run=True)
        loads[0] >> loads[1] >> loads[2] >> compact >> delete >> vacuum
        """,
    )
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    rs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options())
    assert sorted(rs.to_pyarrow_table()["id"].to_pylist()) == list(range(290))
    assert [h["operation"] for h in rs.history()][:3] == ["DELETE", "OPTIMIZE", "WRITE"]
    events = [e["payload"] for e in asset_events(uri)]
    assert [e["operation"] for e in events] == ["CREATE TABLE AS SELECT", "WRITE", "WRITE", "DELETE"]
    maintenance = [e["payload"] for e in asset_events(f"{uri}/_deltaplane/maintenance")]
    assert [e["operation"] for e in maintenance] == ["OPTIMIZE"]
    assert xcom(run, "vacuum")["dry_run"] is True


@pytest.mark.external
def test_spark_backed_operators(airflow_db, tmp_path):
    """Above their size threshold, compaction and DML run as spark_jobs through spark-submit;
    DeltaSparkJobOperator stages an ingest that the commit operator then commits."""
    table = tmp_path / "t"
    landing_dir = tmp_path / "landing"
    later_dir = tmp_path / "landing-2"
    for folder in (landing_dir, later_dir):
        folder.mkdir()
        (folder / "a.csv").write_text("id,g\n" + "\n".join(f"{i},{i % 2}" for i in range(40)) + "\n")
    manifest = tmp_path / "staging" / "b1.json"
    run = run_tasks(
        "spark_ops",
        f"""
        from deltaplane.operators.operators.commit import DeltaCommitOperator
        from deltaplane.operators.operators.dml import DeltaDMLOperator
        from deltaplane.operators.operators.maintenance import DeltaCompactionOperator
        from deltaplane.operators.operators.spark import DeltaSparkJobOperator

        T, M = {str(table)!r}, {str(manifest)!r}
        FIRST, LATER = {str(landing_dir)!r} + "/*.csv", {str(later_dir)!r} + "/*.csv"
        """,
        """
        first = DeltaSparkJobOperator(task_id="ingest", table_uri=T, job="ingest", job_args=["--source", FIRST])
        staged = DeltaSparkJobOperator(task_id="ingest_staged", table_uri=T, job="ingest",
                                       job_args=["--source", LATER, "--stage", M])
        again = DeltaSparkJobOperator(task_id="ingest_again", table_uri=T, job="ingest", job_args=["--source", FIRST])
        commit = DeltaCommitOperator(task_id="commit", table_uri=T, staged_manifest=M)
        compact = DeltaCompactionOperator(task_id="compact", table_uri=T, spark_threshold_bytes=0)
        delete = DeltaDMLOperator(task_id="delete", table_uri=T, operation="delete", predicate="id < 5",
                                  spark_threshold_bytes=0)
        first >> staged >> commit >> again >> compact >> delete
        """,
    )
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    assert xcom(run, "compact")["engine"] == "spark" and xcom(run, "delete")["engine"] == "spark"
    dt = DeltaTable(str(table))
    assert dt.count() == 80 - 10
    ops = [h["operation"] for h in dt.history()]
    assert ops == ["DELETE", "OPTIMIZE", "WRITE", "CREATE TABLE AS SELECT"]
    stamps = [h["airflow"]["task_id"] for h in dt.history()]
    assert stamps == ["delete", "compact", "commit", "ingest"]
    assert xcom(run, "ingest_again")["skipped"] is True and xcom(run, "ingest_again")["version"] == 0
    assert xcom(run, "compact")["work"] is None  # OPTIMIZE is idempotent by nature: no work key


def test_gate_sensor_manifest_consumer_and_spark_on_s3(airflow_db, tmp_path, s3_server, monkeypatch):
    """The rest of the operators on SeaweedFS: a staged batch gated and committed, a bad batch
    quarantined on S3, the deferred log-tail sensor, manifests, the consumer, a Spark compaction."""
    from deltaplane.engine import stage_write, write_table
    from deltaplane.engine.commands.staged_manifest import write_manifest

    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE",
        json.dumps(
            {"conn_type": "deltaplane", "host": s3_server.endpoint, "login": "test", "password": "test"}
        ),
    )
    options = s3_server.options()
    uri, copy = s3_server.uri("gated"), s3_server.uri("gated-copy")
    write_table(
        uri,
        pa.table({"id": pa.array([1, 2], pa.int64()), "g": ["a", "b"]}),
        partition_by=["g"],
        storage_options=options,
    )
    good = stage_write(
        uri, pa.table({"id": pa.array([3, 4], pa.int64()), "g": ["a", "b"]}), storage_options=options
    )
    bad = stage_write(
        uri, pa.table({"id": pa.array([None], pa.int64()), "g": ["a"]}), storage_options=options
    )
    manifests = s3_server.uri("staging")
    write_manifest(f"{manifests}/good.json", good, options)
    write_manifest(f"{manifests}/bad.json", bad, options)
    expectations = [{"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}]
    run = run_tasks(
        "s3_rest",
        f"""
        from deltaplane.operators.operators.commit import DeltaCommitOperator
        from deltaplane.operators.operators.consume import DeltaConsumeOperator
        from deltaplane.operators.operators.maintenance import DeltaCompactionOperator, DeltaManifestOperator
        from deltaplane.operators.operators.quality import DeltaQualityGateOperator
        from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor

        T, C, M = {uri!r}, {copy!r}, {manifests!r}
        X = {expectations!r}
        c = dict(deltaplane_conn_id="lake")
        """,
        """
        gate_bad = DeltaQualityGateOperator(task_id="gate_bad", table_uri=T, staged_manifest=M + "/bad.json",
                                            expectations=X, on_failure="skip", **c)
        commit_bad = DeltaCommitOperator(task_id="commit_bad", table_uri=T, staged_manifest=M + "/bad.json", **c)
        gate = DeltaQualityGateOperator(task_id="gate", table_uri=T, staged_manifest=M + "/good.json",
                                        expectations=X, trigger_rule="all_done", **c)
        commit = DeltaCommitOperator(task_id="commit", table_uri=T, staged_manifest=M + "/good.json", **c)
        wait = DeltaLogTailSensor(task_id="wait", table_uri=T, after_version=0, deferrable=True,
                                  poke_interval=0.5, **c)
        consume = DeltaConsumeOperator(task_id="consume", table_uri=C, source_uri=T, **c)
        compact = DeltaCompactionOperator(task_id="compact", table_uri=T, spark_threshold_bytes=0, **c)
        manifest = DeltaManifestOperator(task_id="manifest", table_uri=T, **c)
        gate_bad >> commit_bad >> gate >> commit >> wait >> consume >> compact >> manifest
        """,
    )
    states = task_states(run)
    assert states.pop("gate_bad") == "failed" and states.pop("commit_bad") == "upstream_failed", states
    assert set(states.values()) == {"success"}, states
    assert [c["version"] for c in xcom(run, "wait")["commits"]] == [1]
    assert xcom(run, "compact")["engine"] == "spark"
    quarantine = xcom(run, "gate_bad")["quarantine"]
    assert quarantine == f"{uri}/_quarantine/bad"
    keys = [
        o["Key"]
        for o in s3_server.client().list_objects_v2(
            Bucket=s3_server.bucket, Prefix=quarantine.split("/", 3)[3]
        )["Contents"]
    ]
    assert any(k.endswith("validation.json") for k in keys) and any(k.endswith(".parquet") for k in keys)
    rs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options())
    assert sorted(rs.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3, 4]
    assert [h["operation"] for h in rs.history()][:2] == ["OPTIMIZE", "WRITE"]
    copied = deltalake.DeltaTable(copy, storage_options=s3_server.delta_rs_options()).to_pyarrow_table()
    assert sorted(copied["id"].to_pylist()) == [1, 2, 3, 4]
    assert xcom(run, "manifest")["manifest"]["filesWritten"] == 2
