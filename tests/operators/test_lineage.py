"""OpenLineage through Airflow's own provider: real DAGs run with ``dag.test()`` in an Airflow
whose ``[openlineage] transport`` is the file transport, and the events it wrote are read back.

Each run is a separate Python process with its own ``AIRFLOW_HOME``: Airflow loads its plugins
(the OpenLineage listener among them) once per process, from the configuration it finds then,
as a worker would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.devstack.stack import migrate_airflow_db
from deltaplane.engine import DeltaTable, write_table
from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.xdist_group("lineage")


@pytest.fixture(scope="module")
def ol_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("ol-airflow")
    (home / "dags").mkdir()
    migrate_airflow_db(_env(home, home / "unused.jsonl"), timeout=300)
    return home


def _env(home: Path, events: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
            {"type": "file", "log_file_path": str(events), "append": True}
        ),
        AIRFLOW__OPENLINEAGE__NAMESPACE="deltaplane-tests",
        PYTHONPATH=str(PROJECT_ROOT),
        **extra,
    )
    return env


def run_with_lineage(home: Path, name: str, body: str, **env: str) -> tuple[dict, list[dict]]:
    """Run the DAG ``body`` defines (``dag``) with ``dag.test()`` in a new process: the task
    states, and the OpenLineage events written for this run."""
    events = home / f"{name}-{uuid.uuid4().hex}.jsonl"
    path = home / "dags" / f"{name}.py"
    states = home / f"{name}-states.json"
    path.write_text(
        textwrap.dedent(body)
        + textwrap.dedent(
            f"""
            if __name__ == "__main__":
                import json
                run = dag.test()
                from airflow.models import TaskInstance
                from airflow.utils.session import create_session
                with create_session() as session:
                    tis = session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id)
                    states = {{ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in tis}}
                open({str(states)!r}, "w").write(json.dumps(states))
            """
        )
    )
    try:
        done = subprocess.run(
            [sys.executable, str(path)],
            env=_env(home, events, **env),
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        path.unlink()
    assert done.returncode == 0, done.stderr[-5000:]
    assert events.exists(), done.stdout[-5000:] + done.stderr[-5000:]
    lines = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    return json.loads(states.read_text()), lines


def task_event(events: list[dict], dag_id: str, task: str, kind: str = "COMPLETE") -> dict:
    found = [e for e in events if e["eventType"] == kind and e["job"]["name"] == f"{dag_id}.{task}"]
    assert len(found) == 1, (task, kind, [(e["eventType"], e["job"]["name"]) for e in events])
    return found[0]


def only(datasets: list[dict]) -> dict:
    assert len(datasets) == 1, datasets
    return datasets[0]


def fields(dataset: dict) -> list[tuple[str, str]]:
    return [(f["name"], f["type"]) for f in dataset["facets"]["schema"]["fields"]]


LOCAL_DAG = """
import pendulum
from airflow.sdk import DAG, chain
from deltaplane.operators.operators.commit import DeltaCommitOperator
from deltaplane.operators.operators.dml import DeltaDMLOperator
from deltaplane.operators.operators.ingest import DeltaStageOperator
from deltaplane.operators.operators.maintenance import (
    DeltaAutoOptimizeOperator, DeltaCheckpointOperator, DeltaCompactionOperator, DeltaVacuumOperator,
)
from deltaplane.operators.operators.quality import DeltaQualityGateOperator


class BrokenLineage(DeltaDMLOperator):
    # A team's subclass whose lineage code fails: the task must not.
    def lineage_datasets(self, result, facts):
        raise RuntimeError("lineage bug")


T = {table!r}
M = "{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}"
with DAG("lineage", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    chain(
        DeltaCommitOperator(task_id="write", table_uri=T, source={source!r}),
        DeltaStageOperator(task_id="stage", table_uri=T, landing={landing!r}, staging={staging!r},
                           source_format="csv"),
        DeltaQualityGateOperator(task_id="gate", table_uri=T, staged_manifest=M, expectations=[
            {{"expectation": "expect_column_values_to_not_be_null", "kwargs": {{"column": "id"}}}}]),
        DeltaCommitOperator(task_id="commit_staged", table_uri=T, staged_manifest=M),
        DeltaDMLOperator(task_id="delete", table_uri=T, operation="delete", predicate="id = 2"),
        DeltaDMLOperator(task_id="merge", table_uri=T, operation="merge", source={merge!r},
                         merge_condition="t.id = s.id"),
        DeltaAutoOptimizeOperator(task_id="auto_optimize", table_uri=T, min_small_files=2),
        DeltaCompactionOperator(task_id="compact", table_uri=T),
        DeltaCheckpointOperator(task_id="checkpoint", table_uri=T),
        DeltaVacuumOperator(task_id="vacuum", table_uri=T, dry_run=False, retention_hours=0,
                            enforce_retention=False),
        BrokenLineage(task_id="broken", table_uri=T, operation="delete", predicate="id = 3"),
    )
"""


def test_every_operator_reports_datasets_schema_versions_and_counts(ol_home, tmp_path):
    table, landing, staging, source = (tmp_path / n for n in ("t", "landing", "staging", "source"))
    for folder in (landing, staging, source):
        folder.mkdir()
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("tags", pa.list_(pa.string()))])
    pq.write_table(
        pa.table({"id": [1, 2, 3], "name": list("abc"), "tags": [["x"], [], None]}, schema),
        source / "s.parquet",
    )
    merge = tmp_path / "merge.parquet"
    pq.write_table(pa.table({"id": [3, 40], "name": ["C", "d"], "tags": [None, ["y"]]}, schema), merge)
    (landing / "b.csv").write_text("id,name\n10,x\n11,y\n")
    code = LOCAL_DAG.format(
        table=str(table), source=str(source), landing=str(landing), staging=str(staging), merge=str(merge)
    )

    states, events = run_with_lineage(ol_home, "lineage", code)

    assert set(states.values()) == {"success"}, states
    history = {h["version"]: h for h in DeltaTable(str(table)).history()}
    version_of = {h["airflow"]["task_id"]: v for v, h in history.items() if "airflow" in h}

    # The first write: the source folder in, the table out, its schema, version 0, 3 rows in 1 file.
    start = task_event(events, "lineage", "write", "START")
    assert (only(start["outputs"])["namespace"], only(start["outputs"])["name"]) == ("file", str(table))
    assert "version" not in only(start["outputs"]).get("facets", {})  # nothing committed yet
    write = task_event(events, "lineage", "write")
    out = only(write["outputs"])
    assert (out["namespace"], out["name"]) == ("file", str(table))
    assert fields(out) == [("id", "long"), ("name", "string"), ("tags", "array")]
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"][2]["fields"]] == [
        ("_element", "string")
    ]
    assert out["facets"]["version"]["datasetVersion"] == str(version_of["write"]) == "0"
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 3
    assert out["outputFacets"]["outputStatistics"]["fileCount"] == 1
    assert out["outputFacets"]["outputStatistics"]["size"] > 0
    assert out["facets"]["deltaplane"]["committed"] is True
    assert (only(write["inputs"])["namespace"], only(write["inputs"])["name"]) == ("file", str(source))

    # Stage: landing folder in (1 file, 2 rows), the staging area out, versioned by the batch.
    stage = task_event(events, "lineage", "stage")
    landed, staged = only(stage["inputs"]), only(stage["outputs"])
    assert landed["name"] == str(landing) and landed["inputFacets"]["inputStatistics"] == {
        "rowCount": 2,
        "fileCount": 1,
        **{k: v for k, v in landed["inputFacets"]["inputStatistics"].items() if k.startswith("_")},
    }
    assert staged["name"] == str(staging) and staged["outputFacets"]["outputStatistics"]["rowCount"] == 2
    batch = staged["facets"]["version"]["datasetVersion"]

    # The gate reads that batch, with its expectations as assertions; the commit reads it too.
    gate = task_event(events, "lineage", "gate")
    checked = only(gate["inputs"])
    assert (checked["name"], checked["facets"]["version"]["datasetVersion"]) == (str(staging), batch)
    assertions = checked["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(a["assertion"], a["success"], a["column"]) for a in assertions] == [
        ("expect_column_values_to_not_be_null", True, "id")
    ]
    assert gate["outputs"] == []
    commit = task_event(events, "lineage", "commit_staged")
    assert (
        only(commit["inputs"])["name"],
        only(commit["inputs"])["facets"]["version"]["datasetVersion"],
    ) == (
        str(staging),
        batch,
    )
    out = only(commit["outputs"])
    assert out["facets"]["version"]["datasetVersion"] == str(version_of["commit_staged"])
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 2

    # DELETE: one row deleted at its version; MERGE: the source file in.
    out = only(task_event(events, "lineage", "delete")["outputs"])
    assert out["facets"]["version"]["datasetVersion"] == str(version_of["delete"])
    assert (out["facets"]["deltaplane"]["rowsDeleted"], out["facets"]["deltaplane"]["operation"]) == (
        1,
        "DELETE",
    )
    merge_event = task_event(events, "lineage", "merge")
    assert (only(merge_event["inputs"])["namespace"], only(merge_event["inputs"])["name"]) == (
        "file",
        str(merge),
    )
    out = only(merge_event["outputs"])
    assert out["facets"]["version"]["datasetVersion"] == str(version_of["merge"])
    written = int(history[version_of["merge"]]["operationMetrics"]["numOutputRows"])
    assert out["facets"]["deltaplane"]["rowsAdded"] == written >= 2  # id 3 updated, id 40 inserted

    # OPTIMIZE: files rewritten, no rows changed; auto-optimize and checkpoint read the table.
    out = only(task_event(events, "lineage", "compact")["outputs"])
    assert out["facets"]["version"]["datasetVersion"] == str(version_of["compact"])
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 0
    assert out["facets"]["deltaplane"]["filesRemoved"] > out["facets"]["deltaplane"]["filesAdded"] >= 1
    decided = only(task_event(events, "lineage", "auto_optimize")["inputs"])
    assert decided["name"] == str(table) and fields(decided)[0] == ("id", "long")
    checkpoint = only(task_event(events, "lineage", "checkpoint")["outputs"])
    assert checkpoint["facets"]["version"]["datasetVersion"] == str(version_of["compact"])  # the one read
    assert checkpoint["facets"]["deltaplane"]["committed"] is False
    vacuum = only(task_event(events, "lineage", "vacuum")["outputs"])
    assert vacuum["facets"]["deltaplane"]["operation"] == "VACUUM END"

    # A failing lineage method: the task succeeded, its events carry none of our facets (the
    # provider falls back to the Asset the commit published, by name only).
    broken = task_event(events, "lineage", "broken")
    assert states["broken"] == "success" and broken["inputs"] == []
    assert all(not d.get("facets") and not d.get("outputFacets") for d in broken["outputs"]), broken
    assert DeltaTable(str(table)).history(1)[0]["operation"] == "DELETE"


S3_DAG = """
import pendulum
from airflow.sdk import DAG, chain
from deltaplane.operators.operators.commit import DeltaCommitOperator
from deltaplane.operators.operators.dml import DeltaDMLOperator
from deltaplane.operators.operators.maintenance import DeltaCompactionOperator

c = dict(deltaplane_conn_id="lake_secret")
with DAG("lineage_s3", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    chain(
        DeltaCommitOperator(task_id="write", table_uri={table!r}, source={source!r}, **c),
        DeltaDMLOperator(task_id="delete", table_uri={table!r}, operation="delete", predicate="id < 2", **c),
        DeltaCompactionOperator(task_id="compact", table_uri={table!r}, **c),
    )
"""


def test_s3_tables_are_named_by_bucket_and_key_and_no_secret_reaches_an_event(ol_home, tmp_path):
    """A table on a SeaweedFS that checks a unique secret: the events name it ``s3://bucket`` +
    key, and the secret is nowhere in them (nor the access key: storage options never travel)."""
    from tests.s3_auth import authenticated_seaweedfs

    marker = f"dpsecret-{uuid.uuid4().hex}"
    with authenticated_seaweedfs(tmp_path / "s3", marker) as s3:
        table = f"s3://{s3.bucket}/lineage/trips"
        source = tmp_path / "source"
        source.mkdir()
        pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), source / "a.parquet")
        write_table(table, pa.table({"id": pa.array([0], pa.int64())}), storage_options=s3.options())
        connection = s3.connection()
        assert connection["password"] == marker
        states, events = run_with_lineage(
            ol_home,
            "lineage_s3",
            S3_DAG.format(table=table, source=str(source)),
            AIRFLOW_CONN_LAKE_SECRET=json.dumps(connection),
        )
    assert set(states.values()) == {"success"}, states
    raw = json.dumps(events)
    assert marker not in raw
    for task in ("write", "delete", "compact"):
        out = only(task_event(events, "lineage_s3", task)["outputs"])
        assert (out["namespace"], out["name"]) == (f"s3://{s3.bucket}", "lineage/trips"), out
        assert fields(out) == [("id", "long")]
    delete = only(task_event(events, "lineage_s3", "delete")["outputs"])
    assert delete["facets"]["deltaplane"]["rowsDeleted"] == 2  # ids 0 and 1
    write = only(task_event(events, "lineage_s3", "write")["outputs"])
    assert write["facets"]["version"]["datasetVersion"] == "1"
    assert write["outputFacets"]["outputStatistics"]["rowCount"] == 3


SPARK_DAG = """
import pendulum
from airflow.sdk import DAG, chain
from deltaplane.operators import DeltaSparkJobOperator

T = {table!r}
with DAG("lineage_spark", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    chain(
        DeltaSparkJobOperator(task_id="ingest", table_uri=T, job="ingest",
                              job_args=["--source", {source!r}, "--format", "csv"]),
        DeltaSparkJobOperator(task_id="compact", table_uri=T, job="compact"),
    )
"""


def test_spark_jobs_report_their_sources_and_the_table(ol_home, tmp_path):
    """A Spark ingest names the files it loaded as its input and the table it committed as its
    output (with the version); a Spark compaction reads and writes the table."""
    table, landing = tmp_path / "t", tmp_path / "landing"
    landing.mkdir()
    for i in range(3):
        (landing / f"part{i}.csv").write_text("id,name\n" + "".join(f"{i * 10 + j},n{j}\n" for j in range(4)))
    source = f"{landing}/*.csv"
    states, events = run_with_lineage(
        ol_home, "lineage_spark", SPARK_DAG.format(table=str(table), source=source)
    )
    assert set(states.values()) == {"success"}, states
    ingest = task_event(events, "lineage_spark", "ingest")
    (read,) = ingest["inputs"]
    assert read["name"] == source and read["namespace"] == "file"
    out = only(ingest["outputs"])
    assert out["name"] == str(table)
    assert out["facets"]["version"]["datasetVersion"] == "0"
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 12
    compact = task_event(events, "lineage_spark", "compact")
    assert only(compact["outputs"])["name"] == str(table)
    assert DeltaTable(str(table)).to_arrow().num_rows == 12
