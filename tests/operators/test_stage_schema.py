"""Schemas are the DAG author's, not the first file's: ``DeltaStageOperator(schema=...,
partition_by=..., cluster_by=..., properties=...)`` and the same keys in ``config/tables.yaml``.
Real Airflow (``dag.test()``), real tables; expected values written down here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.airflow


def land(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


STAGE_COMMIT = """
import pendulum
from airflow.sdk import DAG
from deltaplane.operators import DeltaCommitOperator, DeltaStageOperator

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    stage = DeltaStageOperator(task_id="stage", table_uri={table!r}, landing={landing!r},
                               staging={staging!r}, source_format="csv", {args})
    commit = DeltaCommitOperator(task_id="commit", table_uri={table!r},
                                 staged_manifest="{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}")
    stage >> commit
"""


def dag(tmp_path: Path, dag_id: str, args: str) -> str:
    return STAGE_COMMIT.format(
        dag_id=dag_id,
        table=str(tmp_path / "trips"),
        landing=str(tmp_path / "landing"),
        staging=str(tmp_path / "staging"),
        args=args,
    )


ARGS = (
    'schema="trip_id BIGINT NOT NULL, zip STRING, fare DECIMAL(8, 2), day DATE", '
    'partition_by=["day"], properties={"delta.enableChangeDataFeed": "true"}'
)


def test_the_declared_schema_is_the_tables_not_the_first_files(airflow_db, tmp_path):
    landing = tmp_path / "landing"
    # Read by inference, zip would be a number (02134 -> 2134) and fare a double.
    land(landing, "a.csv", "trip_id,zip,fare,day\n1,02134,12.50,2026-11-01\n2,10001,7.25,2026-11-02\n")
    run = run_dag("declared", dag(tmp_path, "declared", ARGS))
    assert task_states(run) == {"stage": "success", "commit": "success"}
    table = DeltaTable(str(tmp_path / "trips"))
    fields = {
        f.name: (f.type.to_json() if hasattr(f.type, "to_json") else f.type.name, f.nullable)
        for f in table.snapshot.schema.fields
    }
    assert fields == {
        "trip_id": ("long", False),
        "zip": ("string", True),
        "fare": ("decimal(8,2)", True),
        "day": ("date", True),
    }
    assert table.partition_columns == ["day"]
    assert table.metadata.configuration["delta.enableChangeDataFeed"] == "true"
    rows = table.to_arrow().sort_by("trip_id").to_pydict()
    assert rows["zip"] == ["02134", "10001"]
    assert [str(v) for v in rows["fare"]] == ["12.50", "7.25"]

    # A later batch whose zips are not numbers lands too; the same settings on the existing
    # table are not an error.
    land(landing, "b.csv", "trip_id,zip,fare,day\n3,A1234,1.00,2026-11-03\n")
    run = run_dag("declared_2", dag(tmp_path, "declared_2", ARGS))
    assert task_states(run) == {"stage": "success", "commit": "success"}
    assert sorted(DeltaTable(str(tmp_path / "trips")).to_arrow()["zip"].to_pylist()) == [
        "02134",
        "10001",
        "A1234",
    ]


def test_a_value_that_does_not_fit_the_declared_type_names_file_line_and_column(airflow_db, tmp_path, capfd):
    land(tmp_path / "landing", "a.csv", "trip_id,zip,fare,day\n1,02134,12.50,2026-11-01\n2,x,cheap,2026-11-02\n")
    capfd.readouterr()
    run = run_dag("declared_bad", dag(tmp_path, "declared_bad", ARGS))
    log = "".join(capfd.readouterr())
    assert task_states(run)["stage"] == "failed"
    out = xcom(run, "stage")
    assert out["file"] == "a.csv" and out["line"] == 3 and out["column"] == "fare", out
    assert "'cheap' is not a decimal(8,2)" in out["message"], out["message"]
    assert "a.csv line 3, column 'fare'" in log
    assert not (tmp_path / "trips" / "_delta_log").exists()  # the table was not created


def test_settings_that_disagree_with_the_existing_table_are_refused_by_name(airflow_db, tmp_path, capfd):
    land(tmp_path / "landing", "a.csv", "trip_id,zip,fare,day\n1,02134,12.50,2026-11-01\n")
    run_dag("declared_once", dag(tmp_path, "declared_once", ARGS))
    land(tmp_path / "landing", "b.csv", "trip_id,zip,fare,day\n2,02135,1.50,2026-11-01\n")
    other = ARGS.replace('"delta.enableChangeDataFeed": "true"', '"delta.appendOnly": "true"')
    capfd.readouterr()
    run = run_dag("declared_other", dag(tmp_path, "declared_other", other))
    log = "".join(capfd.readouterr())
    assert task_states(run)["stage"] == "failed"
    assert "delta.appendOnly" in log and "dt.alter" in log
    # The batch was not at fault: not quarantined, its file back in the landing folder.
    assert sorted(p.name for p in (tmp_path / "landing").iterdir() if p.is_file()) == ["b.csv"]
    assert not (tmp_path / "trips" / "_quarantine").exists()
    changed = ARGS.replace("zip STRING", "zip BIGINT")
    capfd.readouterr()
    run = run_dag("declared_type", dag(tmp_path, "declared_type", changed))
    log = "".join(capfd.readouterr())
    assert task_states(run)["stage"] == "failed"
    assert "zip" in log and "string" in log and "long" in log


def test_cluster_by_creates_a_clustered_table(airflow_db, tmp_path):
    land(tmp_path / "landing", "a.csv", "trip_id,zip\n1,02134\n2,10001\n")
    args = 'schema="trip_id BIGINT, zip STRING", cluster_by=["zip"]'
    run = run_dag("clustered", dag(tmp_path, "clustered", args))
    assert task_states(run) == {"stage": "success", "commit": "success"}
    assert DeltaTable(str(tmp_path / "trips")).clustering_columns == ["zip"]


def test_tables_yaml_gives_the_in_process_ingest_its_schema_and_properties(airflow_db, tmp_path):
    from deltaplane.operators.factory.config import load_config
    from deltaplane.operators.factory.dags import build_dags

    config = tmp_path / "tables.yaml"
    config.write_text(
        "tables:\n"
        "  trips:\n"
        f"    uri: {tmp_path / 'trips'}\n"
        "    partition_by: [day]\n"
        "    properties: {delta.enableChangeDataFeed: 'true'}\n"
        f"    ingest: {{landing: {tmp_path / 'landing'}, format: csv, "
        "schema: 'trip_id BIGINT, zip STRING, day DATE'}\n"
    )
    stage = build_dags(load_config(str(config)))["deltaplane_trips_ingest"].get_task("stage")
    assert stage.schema == "trip_id BIGINT, zip STRING, day DATE"
    assert stage.properties == {"delta.enableChangeDataFeed": "true"}
    assert stage.partition_by == ["day"]
