"""Bad batches through the factory's ingest DAG with ``engine: spark`` (stage = ``deltaplane.spark_jobs.ingest
--stage`` through spark-submit -> quality gate -> commit), run for real with ``dag.test()``.

The Spark stage must end a bad batch the way the in-process stage does
(``tests/operators/test_bad_batches.py``): the batch's landing files moved, byte for byte, to
``<table>/_quarantine/<batch>/landing/`` with a ``rejection.json``, the landing folder emptied so
the next run is not blocked, the table byte-identical, and the rejecting task FAILED on its first
try (no retries). A good batch leaves the landing folder too (``landing/_processed/<batch>/``),
is committed once, and the same files delivered again commit nothing.

The tables' ``day`` column holds words, not dates: the Spark job infers CSV types, and an ISO
date would be inferred as a date, which a string column refuses.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.operators.operators.ingest import batch_id
from tests.operators.conftest import run_dag, task_states, xcom
from tests.operators.test_bad_batches import csv, dag_file, files_in, run_state, tree, try_numbers

pytestmark = [pytest.mark.external, pytest.mark.airflow]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("note", pa.string()),
    ]
)
HEADER = "id,day,amount,note"
GOOD_ROWS = ("10,mon,1.5,x", "11,tue,2.5,y", "12,mon,3.5,z")


def setup(tmp_path: Path, name: str) -> tuple[Path, Path, Path, str]:
    """A table of 3 rows, its landing folder, a tables file whose ingest runs on Spark, and the
    ingest DAG's id."""
    table, landing = tmp_path / "lake" / name, tmp_path / "landing" / name
    DeltaTable.create(str(table), SCHEMA, partition_by=["day"]).append(
        pa.table(
            {
                "id": [1, 2, 3],
                "day": ["mon", "tue", "mon"],
                "amount": [1.0, 2.0, 3.0],
                "note": ["a", "b", "c"],
            },
            schema=SCHEMA,
        )
    )
    landing.mkdir(parents=True)
    config = tmp_path / "tables.yaml"
    config.write_text(
        "\n".join(
            [
                "tables:",
                f"  {name}:",
                f"    uri: lake/{name}",
                "    partition_by: [day]",
                f"    ingest: {{landing: landing/{name}, format: csv, engine: spark}}",
                "    quality:",
                "      expectations:",
                "        - {expectation: expect_column_values_to_not_be_null, kwargs: {column: id}}",
                "        - {expectation: expect_column_values_to_be_between, kwargs: {column: amount, min_value: 0}}",
            ]
        )
        + "\n"
    )
    return table, landing, config, f"deltaplane_{name}_ingest"


def ids(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_arrow()["id"].to_pylist())


def test_a_batch_the_spark_job_refuses_is_quarantined_and_the_next_run_lands(airflow_db, tmp_path, capfd):
    table, landing, config, dag_id = setup(tmp_path, "spark_wrong_type")
    bad = csv(HEADER, GOOD_ROWS[0], "11,tue,abc,y")  # 'abc' in the double column 'amount'
    (landing / "b.csv").write_bytes(bad)
    before = tree(table)
    capfd.readouterr()
    run = run_dag("spark_wrong_type", dag_file(dag_id, config))
    log = "".join(capfd.readouterr())

    # Rejected by the stage, on its first try although the factory gives every task retries=2.
    assert task_states(run) == {
        "stage": "failed",
        "quality_gate": "upstream_failed",
        "commit": "upstream_failed",
    }, log[-4000:]
    assert try_numbers(run)["stage"] == 1 and run_state(run) == "failed"
    report = xcom(run, "stage")
    assert report and report["rejected"] is True, report
    batch = batch_id(run.run_id)  # the name the gate gives the batch of the same manifest
    quarantine = table / "_quarantine" / batch
    assert report["batch"] == batch and report["quarantine"] == str(quarantine)
    assert "'amount'" in report["message"] and str(quarantine) in report["message"]
    assert "refused b.csv" in report["message"]
    assert report["message"] in log

    # The landing file, as it landed, is in the quarantine with the reason; the landing folder
    # is empty; the table is byte-identical.
    assert (quarantine / "landing" / "b.csv").read_bytes() == bad
    why = json.loads((quarantine / "rejection.json").read_text())
    assert why["message"] == report["message"] and why["task"] == "stage" and why["batch"] == batch
    assert why["exit_code"] == 3 and why["error"] == "SchemaMismatchError"
    assert why["column"] == "amount" and "'amount'" in why["job_message"]
    assert why["files"] == ["b.csv"] and why["landing_files"] == [str(landing / "b.csv")]
    assert files_in(landing) == []
    assert tree(table) == before

    # The next run is not blocked: a good batch lands and commits.
    (landing / "next.csv").write_bytes(csv(HEADER, *GOOD_ROWS))
    run = run_dag("spark_wrong_type_next", dag_file(dag_id, config))
    assert task_states(run) == {"stage": "success", "quality_gate": "success", "commit": "success"}
    assert ids(table) == [1, 2, 3, 10, 11, 12]
    assert files_in(landing) == [f"_processed/{batch_id(run.run_id)}/next.csv"]


def test_a_spark_staged_batch_the_gate_rejects_takes_its_landing_files_to_the_quarantine(
    airflow_db, tmp_path
):
    table, landing, config, dag_id = setup(tmp_path, "spark_expectations")
    bad = csv(HEADER, GOOD_ROWS[0], "11,tue,-4.0,y", "12,mon,-1,z")  # amounts below 0
    (landing / "b.csv").write_bytes(bad)
    before = tree(table)
    run = run_dag("spark_expectations", dag_file(dag_id, config))

    assert task_states(run) == {"stage": "success", "quality_gate": "failed", "commit": "upstream_failed"}
    assert try_numbers(run)["quality_gate"] == 1 and run_state(run) == "failed"
    report = xcom(run, "quality_gate")
    quarantine = Path(report["quarantine"])
    assert quarantine == table / "_quarantine" / batch_id(run.run_id)
    assert "expect_column_values_to_be_between" in report["message"]
    # The landing file went with the staged files, the manifest and the validation result.
    assert (quarantine / "landing" / "b.csv").read_bytes() == bad
    assert files_in(landing) == []
    assert xcom(run, "stage")["batch"] == quarantine.name
    assert list((quarantine / "data").rglob("*.parquet"))
    assert (quarantine / "manifest.json").exists() and (quarantine / "validation.json").exists()
    why = json.loads((quarantine / "rejection.json").read_text())
    assert [Path(p).name for p in why["landing_files"]] == ["b.csv"]
    assert tree(table) == before


def test_a_good_spark_batch_commits_once_and_leaves_the_landing_folder(airflow_db, tmp_path):
    table, landing, config, dag_id = setup(tmp_path, "spark_good")
    good = csv(HEADER, *GOOD_ROWS)
    (landing / "a.csv").write_bytes(good)
    run = run_dag("spark_good", dag_file(dag_id, config))
    assert task_states(run) == {"stage": "success", "quality_gate": "success", "commit": "success"}
    version = DeltaTable(str(table)).version
    assert ids(table) == [1, 2, 3, 10, 11, 12] and xcom(run, "commit")["version"] == version
    batch = batch_id(run.run_id)
    processed = landing / "_processed" / batch / "a.csv"
    assert files_in(landing) == [f"_processed/{batch}/a.csv"] and processed.read_bytes() == good
    stage = xcom(run, "stage")
    assert stage["batch"] == batch and stage["rows"] == 3
    manifest = json.loads(Path(stage["manifest"]).read_text())
    # Where the gate finds them (claimed while the batch waited), and how to stage them again.
    claimed = landing / "_staged" / batch / "a.csv"
    assert manifest["landing"] == {"files": [str(claimed)], "recipe": {"format": "csv"}}

    # A run with nothing landed stages nothing, runs no Spark, commits nothing, fails nothing.
    run = run_dag("spark_good_empty", dag_file(dag_id, config))
    assert task_states(run) == {"stage": "success", "quality_gate": "skipped", "commit": "skipped"}
    assert xcom(run, "stage")["files"] == 0 and DeltaTable(str(table)).version == version

    # The same file delivered again (same name, size and modification time): nothing committed.
    shutil.copy2(processed, landing / "a.csv")
    run = run_dag("spark_good_again", dag_file(dag_id, config))
    assert task_states(run) == {"stage": "success", "quality_gate": "success", "commit": "success"}
    assert xcom(run, "stage")["skipped"] is True and xcom(run, "commit")["skipped"] is True
    assert DeltaTable(str(table)).version == version and ids(table) == [1, 2, 3, 10, 11, 12]
    assert files_in(landing) == sorted(
        [f"_processed/{batch}/a.csv", f"_processed/{batch_id(run.run_id)}/a.csv"]
    )
