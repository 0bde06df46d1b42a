"""The configuration, the DAG factory's DAGs through dag.test() (locally and on S3), DAG import
time, the provider registration and `make run`'s main job."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import deltalake
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.operators.factory.config import ConfigError, load_config
from tests.operators.conftest import asset_events, run_dag, task_states, xcom
from tests.warm_python import fresh_json

pytestmark = pytest.mark.airflow

PROJECT = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "tables.yaml"
    path.write_text(textwrap.dedent(body))
    return path


GOOD = """
    tables:
      trips:
        uri: lake/trips
        partition_by: [day]
        retention_hours: 0
        enforce_retention: false
        auto_optimize: {min_small_files: 2}
        manifest: true
        ingest: {landing: landing, format: csv, staging: staging}
        quality:
          on_failure: skip
          expectations:
            - {expectation: expect_column_values_to_not_be_null, kwargs: {column: id}}
        consumer: {target: lake/copy}
    """


def test_config_errors_name_the_table_and_key(tmp_path):
    config = load_config(write_config(tmp_path, GOOD))
    assert config.tables["trips"].uri == str(tmp_path / "lake" / "trips")
    assert config.tables["trips"].auto_optimize.small_file_size == 32 << 20
    bad = GOOD.replace("min_small_files: 2", "min_small_files: 0").replace(
        "retention_hours: 0", "retention_hours: 1"
    )
    bad = bad.replace("enforce_retention: false", "target_file_size: lots")
    with pytest.raises(ConfigError) as e:
        load_config(write_config(tmp_path, bad))
    message = str(e.value)
    assert "table 'trips': auto_optimize.min_small_files: Input should be greater than 0" in message
    assert (
        "table 'trips': target_file_size:" in message
        and "must be a size" in message
        and "got 'lots'" in message
    )
    with pytest.raises(ConfigError, match="table 'trips': zorder: Extra inputs are not permitted"):
        load_config(write_config(tmp_path, GOOD.replace("manifest: true", "zorder: [a]")))
    with pytest.raises(ConfigError, match="under the 7-day safety limit"):
        load_config(
            write_config(tmp_path, GOOD.replace("enforce_retention: false", "enforce_retention: true"))
        )
    # A table written twice is an error naming both lines, not a silent replacement of the first.
    with pytest.raises(ConfigError, match=r"table 'trips': defined twice \(lines 3 and 16\)"):
        load_config(write_config(tmp_path, GOOD.rstrip() + "\n      trips:\n        uri: lake/other\n"))
    # the command line
    ok = subprocess.run(
        [sys.executable, "-m", "deltaplane.engine.cli", "config", "validate", str(tmp_path / "tables.yaml")],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 2 and "deltaplane: error:" in ok.stderr and "table 'trips'" in ok.stderr
    good = write_config(tmp_path, GOOD)
    ok = subprocess.run(
        [sys.executable, "-m", "deltaplane.engine.cli", "config", "validate", str(good)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "ok: 1 table(s)" in ok.stdout


def dag_file(name: str, config: Path) -> str:
    return f"""
        # An Airflow DAG file (the DAG processor skips files that do not say "airflow" and "dag").
        from deltaplane.operators.factory.config import load_config
        from deltaplane.operators.factory.dags import build_dags

        dags = build_dags(load_config({str(config)!r}), fileloc=__file__)
        dag = dags["{name}"]
        """


def land(landing: Path, start: int, *, bad: bool = False) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for part in range(2):
        rows = [f"{'' if bad and i == 1 else start + part * 10 + i},2026-11-0{1 + i % 2}" for i in range(10)]
        (landing / f"b{start}-{part}.csv").write_text("id,day\n" + "\n".join(rows) + "\n")


def test_factory_dags_ingest_consume_and_maintain(airflow_db, tmp_path):
    config = write_config(tmp_path, GOOD)
    table = tmp_path / "lake" / "trips"
    runs = {}
    for batch, bad in ((0, False), (100, True), (200, False)):
        land(tmp_path / "landing", batch, bad=bad)
        runs[batch] = run_dag(f"ingest_{batch}", dag_file("deltaplane_trips_ingest", config))
    assert task_states(runs[0]) == {"stage": "success", "quality_gate": "success", "commit": "success"}
    # on_failure: skip no longer hides a rejected batch: the gate fails, the commit does not run.
    assert task_states(runs[100]) == {
        "stage": "success",
        "quality_gate": "failed",
        "commit": "upstream_failed",
    }
    assert xcom(runs[100], "quality_gate")["quarantine"].startswith(str(table / "_quarantine"))
    assert DeltaTable(str(table)).count() == 40 and not list((tmp_path / "landing").glob("*.csv"))
    # The consumer: asset-scheduled, one watcher on the table's commits.
    consumer = run_dag("consume", dag_file("deltaplane_trips_consumer", config))
    assert task_states(consumer) == {"consume": "success"}
    assert xcom(consumer, "consume")["source_versions"] == [0, 1]
    copy = DeltaTable(str(tmp_path / "lake" / "copy"))
    assert copy.count() == 40 and copy.snapshot.app_transaction_version(f"consume:{table}") == 1
    again = run_dag("consume_again", dag_file("deltaplane_trips_consumer", config))
    assert (
        xcom(again, "consume")["reason"] == "no new commits"
        and DeltaTable(str(tmp_path / "lake" / "copy")).version == 0
    )
    # Maintenance: compaction of the two batches' small files, checkpoint, vacuum, manifest.
    run = run_dag("maintain", dag_file("deltaplane_trips_maintenance", config))
    states = task_states(run)
    assert set(states.values()) == {"success"}, states
    assert xcom(run, "compact")["num_files_removed"] == 4
    assert sorted(deltalake.DeltaTable(str(table)).to_pyarrow_table()["id"].to_pylist()) == sorted(
        [*range(0, 20), *range(200, 220)]
    )
    # Data commits on the table's Asset; OPTIMIZE and VACUUM on its maintenance Asset only.
    ops = [e["payload"]["operation"] for e in asset_events(f"file://{table}")]
    assert ops == ["CREATE TABLE AS SELECT", "WRITE"]
    maintenance = [e["payload"]["operation"] for e in asset_events(f"file://{table}/_deltaplane/maintenance")]
    assert maintenance == ["OPTIMIZE", "VACUUM END"]


def test_factory_maintenance_on_s3(airflow_db, tmp_path, s3_server, monkeypatch):
    from deltaplane.engine import write_table

    monkeypatch.setenv(
        "AIRFLOW_CONN_S3LAKE",
        json.dumps(
            {"conn_type": "deltaplane", "host": s3_server.endpoint, "login": "test", "password": "test"}
        ),
    )
    uri = s3_server.uri("factory-s3")
    import pyarrow as pa

    for i in range(4):
        write_table(
            uri, pa.table({"id": [i], "g": ["x"]}), mode="append", storage_options=s3_server.options()
        )
    config = write_config(
        tmp_path,
        f"""
        tables:
          remote:
            uri: {uri}
            conn_id: s3lake
            retention_hours: 0
            enforce_retention: false
            auto_optimize: {{min_small_files: 2}}
        """,
    )
    run = run_dag("s3_maintain", dag_file("deltaplane_remote_maintenance", config))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    rs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options())
    assert sorted(rs.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2, 3]
    assert len(rs.file_uris()) == 1
    assert [h["operation"] for h in rs.history(3)] == ["VACUUM END", "VACUUM START", "OPTIMIZE"]


def test_dag_files_import_fast_and_touch_no_table(tmp_path):
    """Measured, not asserted: the time to execute the DAG file once Airflow is imported (what
    the DAG processor pays per parse). No table exists, so touching one would fail."""
    config = write_config(tmp_path, GOOD)
    code = (
        "import time, runpy, airflow.sdk;"
        "t = time.perf_counter();"
        f"d = runpy.run_path({str(PROJECT / 'dags' / 'deltaplane_tables.py')!r});"
        "print(round(time.perf_counter() - t, 3), sorted(k for k in d if k.startswith('deltaplane_')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "DELTAPLANE_CONFIG": str(config)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, dag_ids = done.stdout.strip().split(" ", 1)
    assert "deltaplane_trips_ingest" in dag_ids and "deltaplane_trips_consumer" in dag_ids
    assert not (tmp_path / "lake").exists()
    print(json.dumps({"dag_file_import_seconds": float(seconds)}))


def test_provider_is_listed_by_airflow():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "deltaplane" in manager.providers
    assert "deltaplane" in manager.hooks


@pytest.mark.slow  # `make run` end to end
def test_make_run_main_job(tmp_path):
    """`make run`'s job end to end, on a copy of the configuration pointing into tmp_path."""
    config = (PROJECT / "config" / "tables.yaml").read_text().replace("../demo/", "")
    (tmp_path / "tables.yaml").write_text(config)
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deltaplane.devstack.demo",
            "--demo",
            str(tmp_path / "demo"),
            "--config",
            str(tmp_path / "tables.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.count("passed 3 expectations") == 3 and "batch 3: REJECTED" in out
    assert "consumer appended 120 rows" in out and "the OPTIMIZE fired no consumer run: yes" in out
    assert DeltaTable(str(tmp_path / "lake" / "trips")).count() == 360
    assert DeltaTable(str(tmp_path / "lake" / "trips_by_zone")).count() == 360
    assert list((tmp_path / "lake" / "trips" / "_quarantine").iterdir())
    seconds = round(time.perf_counter() - start, 1)
    # The task logs, read as the Airflow UI reads them (the API's TaskLogReader, from the demo's home)
    logs = demo_task_logs(tmp_path / "demo" / "airflow")
    ran = {(t["dag_id"], t["task_id"]) for t in logs}
    assert {("deltaplane_trips_ingest", "commit"), ("deltaplane_trips_consumer", "consume")} <= ran, ran
    assert ("deltaplane_trips_maintenance", "checkpoint") in ran
    for t in logs:
        assert t["lines"], f"empty task log: {t}"
        assert t["file"] and Path(t["file"]).is_file(), t  # under the home's logs folder
        assert Path(t["file"]).is_relative_to(tmp_path / "demo" / "airflow" / "logs"), t
    own = {  # a line each of these operators logs itself
        ("deltaplane_trips_ingest", "commit"): r"committed \d+ staged files \(120 rows\) as version \d+",
        ("deltaplane_trips_consumer", "consume"): r": 120 rows from \S+ versions \[\d+\] -> version \d+",
        ("deltaplane_trips_maintenance", "checkpoint"): r": checkpoint at version \d+",
    }
    for t in logs:
        key = (t["dag_id"], t["task_id"])
        text = "\n".join(t["lines"])
        for other, line in own.items():
            if other == key and t["state"] == "success":
                assert re.search(line, text), (key, t["run_id"], t["lines"][-30:])
            elif other != key:
                assert not re.search(line, text), (key, "holds the lines of", other)  # each its own
    commits = [t for t in logs if t["task_id"] == "commit" and t["state"] == "success"]
    assert len(commits) == 3, commits  # batch 3 never reached its commit
    print(json.dumps({"make_run_seconds": seconds}))


READ_TASK_LOGS = """
import json
from sqlalchemy import select
from sqlalchemy.orm import joinedload
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.utils.log.log_reader import TaskLogReader
from airflow.utils.session import create_session

out = []
reader = TaskLogReader()
with create_session() as session:
    query = (  # as the API's log route loads a task instance
        select(TaskInstance)
        .join(TaskInstance.dag_run)
        .options(joinedload(TaskInstance.trigger).joinedload(Trigger.triggerer_job))
        .options(joinedload(TaskInstance.dag_model))
        .options(joinedload(TaskInstance.dag_run))
    )
    for ti in session.scalars(query):
        if ti.try_number == 0:
            continue
        messages, _ = reader.read_log_chunks(ti, ti.try_number, {"download_logs": True})
        lines = [m.event for m in messages if not m.event.startswith("::")]
        local = reader.log_handler.local_base + "/" + reader.log_handler._render_filename(ti, ti.try_number)
        out.append(dict(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, state=str(ti.state),
                        lines=[ln for ln in lines if "Could not read served logs" not in ln
                               and "Found local files" not in ln and not ln.strip().startswith("* ")],
                        file=local))
print(json.dumps(out))
"""


def demo_task_logs(home: Path) -> list[dict]:
    """Every task instance of the demo's runs with its log lines as Airflow's log reader serves
    them to the UI (the local log file's messages, without the reader's own source notes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    return fresh_json(["-c", READ_TASK_LOGS], env=env)


def test_factory_spark_ingest_and_sensor_consumer_on_s3(airflow_db, tmp_path, s3_server, monkeypatch):
    """The other DAG shapes, on SeaweedFS: ingest staged by the Spark job, a sensor-driven consumer."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_S3LAKE",
        json.dumps(
            {"conn_type": "deltaplane", "host": s3_server.endpoint, "login": "test", "password": "test"}
        ),
    )
    uri, target = s3_server.uri("spark-ingest"), s3_server.uri("spark-ingest-copy")
    config = write_config(
        tmp_path,
        f"""
        tables:
          events:
            uri: {uri}
            conn_id: s3lake
            ingest: {{landing: landing, format: csv, staging: {s3_server.uri("spark-staging")}, engine: spark}}
            quality:
              expectations:
                - {{expectation: expect_column_values_to_not_be_null, kwargs: {{column: id}}}}
            consumer: {{target: {target}, trigger: sensor, schedule: "@hourly"}}
        """,
    )
    land(tmp_path / "landing", 0)
    run = run_dag("spark_ingest", dag_file("deltaplane_events_ingest", config))
    assert task_states(run) == {"stage": "success", "quality_gate": "success", "commit": "success"}, (
        task_states(run)
    )
    assert xcom(run, "stage")["rows"] == 20
    run = run_dag("sensor_consumer", dag_file("deltaplane_events_consumer", config))
    assert task_states(run) == {"wait_for_commits": "success", "consume": "success", "ack_commits": "success"}
    rs = deltalake.DeltaTable(target, storage_options=s3_server.delta_rs_options())
    assert sorted(rs.to_pyarrow_table()["id"].to_pylist()) == list(range(20))
