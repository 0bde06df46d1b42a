"""``spark_jobs.dml --plan``: the job carries out the operator's plan or refuses it with a typed
error (exit code 3, bad input; 2 for a contradicting flag), never planning again. These cases are
refused before any Spark session starts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.commands.dml import plan_row_level
from deltaplane.engine.plans import save_plan
from deltaplane.spark_jobs import dml, job
from deltaplane.spark_jobs.dml_plan import job_arguments


def _table(uri: str) -> DeltaTable:
    for i in range(3):
        write_table(uri, pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}), mode="append")
    return DeltaTable(uri)


def _run(argv, capsys) -> tuple[int, dict]:
    code = job.run("dml", dml.build_parser(), dml.main, argv)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return code, json.loads(lines[-1])


@pytest.fixture
def planned(tmp_path):
    uri = str(tmp_path / "t")
    table = _table(uri)
    plan = plan_row_level(table.snapshot, predicate="id >= 15")
    store = table.snapshot.store
    location = store.uri(save_plan(plan, store))
    return uri, plan, location


def test_a_plan_for_another_statement_is_refused(planned, capsys):
    uri, _, location = planned
    code, out = _run(["--table", uri, "--delete", "id >= 16", "--plan", location], capsys)
    assert code == job.EXIT_INPUT and "the plan at" in out["message"], out
    code, out = _run(["--table", uri, "--update", "id >= 15", "--set", "id=1", "--plan", location], capsys)
    assert code == job.EXIT_INPUT, out
    assert DeltaTable(uri).version == 2


def test_a_plan_naming_files_the_version_does_not_hold_is_refused(planned, capsys):
    uri, plan, location = planned
    path = Path(location.removeprefix("file://"))
    doc = json.loads(path.read_text())
    doc["candidates"][0] = "part-00000-not-there.parquet"
    path.write_text(json.dumps(doc))
    code, out = _run(["--table", uri, *job_arguments(plan), "--plan", location], capsys)
    assert code == job.EXIT_INPUT and "does not hold" in out["message"], out
    assert DeltaTable(uri).version == 2


def test_a_plan_for_another_table_or_a_contradicting_flag_is_refused(planned, tmp_path, capsys):
    uri, plan, location = planned
    other = str(tmp_path / "other")
    _table(other)
    code, out = _run(["--table", other, *job_arguments(plan), "--plan", location], capsys)
    assert code == job.EXIT_INPUT and "was made for" in out["message"], out
    args = ["--table", uri, *job_arguments(plan), "--strategy", "deletion_vectors", "--plan", location]
    code, out = _run(args, capsys)
    assert plan.strategy == "copy_on_write" and code == job.EXIT_USAGE, out
    code, out = _run(["--table", uri, *job_arguments(plan), "--plan", location + ".missing"], capsys)
    assert code == job.EXIT_INPUT and "no DELETE/UPDATE plan" in out["message"], out
