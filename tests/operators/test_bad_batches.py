"""Bad batches through the ingest DAG the factory builds (landing -> stage -> quality gate ->
commit), run for real with ``dag.test()`` against real tables and Great Expectations.

Every bad batch kind must end the same way: a message naming the file (and the line and column
where there is one) in the task log and the XCom; the batch (landing files, any staged data files
and the manifest) moved to ``<table>/_quarantine/<batch>/`` with a JSON report; the landing folder
emptied so the next run is not blocked; the table byte-identical (only ``_quarantine/`` may
change); and the rejecting task FAILED without retries, the commit not run, the run failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import DAGS, HOME, run_dag, task_states, xcom

pytestmark = pytest.mark.airflow

PROJECT = Path(__file__).resolve().parents[2]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("note", pa.string()),
    ]
)
EXPECTATIONS = [
    "{expectation: expect_column_values_to_not_be_null, kwargs: {column: id}}",
    "{expectation: expect_column_values_to_be_between, kwargs: {column: amount, min_value: 0}}",
]


def make_table(path: Path, schema: pa.Schema = SCHEMA, properties: dict | None = None) -> None:
    table = DeltaTable.create(str(path), schema, partition_by=["day"], properties=properties)
    rows = {
        "id": [1, 2, 3],
        "day": ["2026-11-01", "2026-11-02", "2026-11-01"],
        "amount": [1.0, 2.0, 3.0],
        "note": ["a", "b", "c"],
    }
    table.append(pa.table({f.name: rows[list(rows)[i]] for i, f in enumerate(schema)}, schema=schema))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under the table, ``_delta_log`` included, except the quarantine."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "_quarantine" not in p.relative_to(root).parts
    }


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def write_config(
    tmp_path: Path,
    name: str,
    fmt: str,
    *,
    table: tuple[str, ...] = ("partition_by: [day]",),
    quality: tuple[str, ...] = (),
    expectations: list[str] = EXPECTATIONS,
) -> Path:
    """A tables file with one table whose ingest DAG the factory builds."""
    lines = [
        "tables:",
        f"  {name}:",
        f"    uri: lake/{name}",
        f"    ingest: {{landing: landing/{name}, format: {fmt}}}",
        *(f"    {line}" for line in table),
        "    quality:",
        *(f"      {line}" for line in quality),
        "      expectations:",
        *(f"        - {e}" for e in expectations),
    ]
    path = tmp_path / "tables.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def dag_file(dag_id: str, config: Path) -> str:
    return f"""
        # An Airflow DAG file: the factory's ingest DAG (stage -> quality_gate -> commit).
        from deltaplane.operators.factory.config import load_config
        from deltaplane.operators.factory.dags import build_dags

        dag = build_dags(load_config({str(config)!r}), fileloc=__file__)["{dag_id}"]
        """


def try_numbers(run) -> dict[str, int]:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id).all()
        return {ti.task_id: ti.try_number for ti in tis}


def run_state(run) -> str:
    state = run.state
    return str(getattr(state, "value", state))


def csv(header: str, *rows: str) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


GOOD_ROWS = ("10,2026-11-01,1.5,x", "11,2026-11-02,2.5,y", "12,2026-11-01,3.5,z")


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


@dataclass
class Kind:
    name: str
    fmt: str
    files: dict[str, bytes]
    where: str  # the task that rejects it: "stage" or "quality_gate"
    says: list[str]  # fragments the message must contain
    line: int | None = None
    column: str | None = None
    table_config: tuple[str, ...] = ("partition_by: [day]",)
    quality: tuple[str, ...] = ()
    expectations: list[str] = field(default_factory=lambda: list(EXPECTATIONS))
    table_schema: pa.Schema = field(default=SCHEMA)


BAD = [
    Kind(
        "extra_column",
        "csv",
        {"b.csv": csv("id,day,amount,note,color", "10,2026-11-01,1.5,x,red")},
        "stage",
        ["b.csv", "'color'", "not in the table", "schema_mode='merge'"],
        column="color",
    ),
    Kind(
        "missing_not_null_column",
        "csv",
        {"b.csv": csv("day,amount,note", "2026-11-01,1.5,x")},
        "stage",
        ["b.csv", "'id'", "NOT NULL", "missing"],
        column="id",
    ),
    Kind(
        "renamed_column",
        "csv",
        {"b.csv": csv("id,day,amount_usd,note", "10,2026-11-01,1.5,x")},
        "stage",
        ["b.csv", "'amount_usd'", "not in the table", "'amount'", "renamed"],
        column="amount_usd",
    ),
    Kind(
        "wrong_type_csv",
        "csv",
        {"b.csv": csv("id,day,amount,note", "10,2026-11-01,1.5,x", "11,2026-11-01,abc,y")},
        "stage",
        ["b.csv", "line 3", "'amount'", "'abc'", "double"],
        line=3,
        column="amount",
    ),
    Kind(
        "wrong_type_parquet",
        "parquet",
        {
            "b.parquet": parquet_bytes(
                pa.table({"id": [10], "day": ["2026-11-01"], "amount": ["1.5"], "note": ["x"]})
            )
        },
        "stage",
        ["b.parquet", "'amount'", "string", "double"],
        column="amount",
    ),
    Kind("empty_file", "csv", {"b.csv": b""}, "stage", ["b.csv", "empty", "0 bytes"]),
    Kind("header_only_csv", "csv", {"b.csv": b"id,day,amount,note\n"}, "stage", ["b.csv", "no rows"]),
    Kind(
        "unparseable_csv",
        "csv",
        {"b.csv": csv("id,day,amount,note", *GOOD_ROWS[:2], "12,2026-11-01,1.0,x,surplus")},
        "stage",
        ["b.csv", "line 4", "expected 4 columns, got 5"],
        line=4,
    ),
    Kind(
        "non_utf8",
        "csv",
        {"b.csv": csv("id,day,amount,note", GOOD_ROWS[0]).replace(b"x\n", b"x\n11,2026-11-01,2.0,caf\xe9\n")},
        "stage",
        ["b.csv", "line 3", "'note'", "UTF-8"],
        line=3,
        column="note",
    ),
    Kind(
        "unparseable_json",
        "json",
        {
            "b.json": b'{"id": 10, "day": "2026-11-01", "amount": 1.5}\n{"id": 11, "day": "2026-11-01", "amount\n'
        },
        "stage",
        ["b.json", "line 2", "JSON"],
        line=2,
    ),
    Kind(
        "not_parquet",
        "parquet",
        {"b.parquet": b"id,day\n10,2026-11-01\n"},
        "stage",
        ["b.parquet", "not a readable Parquet file"],
    ),
    Kind(
        "duplicate_column_names",
        "csv",
        {"b.csv": csv("id,day,amount,amount", "10,2026-11-01,1.5,2.5")},
        "stage",
        ["b.csv", "line 1", "'amount'", "twice", "columns 3 and 4"],
        line=1,
        column="amount",
    ),
    Kind(
        "names_with_spaces_and_dots",
        "csv",
        {"b.csv": csv("id,day,fare amount,note.text", "10,2026-11-01,1.5,x")},
        "stage",
        ["b.csv", "'fare amount'", "'note.text'", "not in the table"],
        column="fare amount",
    ),
    Kind(
        "null_in_not_null_column",
        "csv",
        {"b.csv": csv("id,day,amount,note", GOOD_ROWS[0], ",2026-11-01,2.0,y")},
        "stage",
        ["b.csv", "line 3", "'id'", "NOT NULL"],
        line=3,
        column="id",
    ),
    Kind(
        "good_and_bad_files",  # one bad file rejects the whole batch, good files included
        "csv",
        {
            "a.csv": csv("id,day,amount,note", *GOOD_ROWS),
            "b.csv": csv("id,day,amount,note", "13,2026-11-02,1.0,x", ",2026-11-02,2.0,y"),
        },
        "stage",
        ["b.csv", "line 3", "'id'", "NOT NULL"],
        line=3,
        column="id",
        # one data file per row group: a.csv's rows are staged (published) before b.csv fails
        table_config=("partition_by: [day]", "target_file_size: 1"),
    ),
    Kind(
        "fails_expectations",
        "csv",
        {"b.csv": csv("id,day,amount,note", GOOD_ROWS[0], "11,2026-11-02,-4.0,y", "12,2026-11-01,-1,z")},
        "quality_gate",
        ["expect_column_values_to_be_between", "amount", "2 unexpected"],
    ),
]


def ingest(tmp_path: Path, kind: Kind) -> tuple[Path, Path, Path]:
    config = write_config(
        tmp_path,
        kind.name,
        kind.fmt,
        table=kind.table_config,
        quality=kind.quality,
        expectations=kind.expectations,
    )
    table = tmp_path / "lake" / kind.name
    make_table(table, kind.table_schema)
    landing = tmp_path / "landing" / kind.name
    landing.mkdir(parents=True)
    for name, data in kind.files.items():
        (landing / name).write_bytes(data)
    return config, table, landing


@pytest.mark.parametrize("kind", BAD, ids=[k.name for k in BAD])
def test_a_bad_batch_is_rejected_quarantined_and_leaves_the_table_alone(airflow_db, tmp_path, capfd, kind):
    config, table, landing = ingest(tmp_path, kind)
    before = tree(table)
    dag_id = f"deltaplane_{kind.name}_ingest"
    capfd.readouterr()
    run = run_dag(f"bad_{kind.name}", dag_file(dag_id, config))
    log = "".join(capfd.readouterr())

    # Visible as rejected: the rejecting task FAILED on its first try, the commit never ran,
    # the run failed.
    states = task_states(run)
    expected = {"stage": "success", "quality_gate": "failed", "commit": "upstream_failed"}
    if kind.where == "stage":
        expected = {"stage": "failed", "quality_gate": "upstream_failed", "commit": "upstream_failed"}
    assert states == expected, (states, log[-4000:])
    assert try_numbers(run)[kind.where] == 1  # AirflowFailException: no retry, although retries=2
    assert run_state(run) == "failed"

    # A clear message, in the XCom and in the task log.
    report = xcom(run, kind.where)
    assert report and report["rejected"] is True, report
    message = report["message"]
    for fragment in kind.says:
        assert fragment in message, (fragment, message)
    assert message in log
    if kind.where == "stage":
        assert report["file"] == f"b.{kind.fmt}", report
        assert report.get("line") == kind.line and report.get("column") == kind.column, report

    # The batch is in the quarantine, with a JSON report of why.
    quarantine = Path(report["quarantine"])
    assert quarantine.parent == table / "_quarantine" and quarantine.name == xcom(run, "stage")["batch"]
    why = json.loads((quarantine / "rejection.json").read_text())
    assert why["message"] == message and why["task"] == kind.where
    for name, data in kind.files.items():
        assert (quarantine / "landing" / name).read_bytes() == data  # the landing files, as landed
    if kind.where == "quality_gate":
        assert (quarantine / "manifest.json").exists() and (quarantine / "validation.json").exists()
        assert list((quarantine / "data").rglob("*.parquet"))
    if kind.name == "good_and_bad_files":
        staged = list((quarantine / "data").rglob("*.parquet"))  # a.csv's rows, staged before b.csv
        assert staged and sum(pq.read_metadata(p).num_rows for p in staged) >= 3
        assert why["staged_files"]

    # The landing folder no longer holds the batch; the table is byte-identical.
    assert files_in(landing) == []
    assert tree(table) == before
    assert DeltaTable(str(table)).count() == 3

    # The next run is not blocked: a good batch lands and commits.
    good = csv("id,day,amount,note", *GOOD_ROWS)
    if kind.fmt == "json":
        rows = [r.split(",") for r in GOOD_ROWS]
        good = "".join(
            json.dumps({"id": int(i), "day": d, "amount": float(a), "note": n}) + "\n" for i, d, a, n in rows
        ).encode()
    if kind.fmt == "parquet":
        types = pa.csv.ConvertOptions(column_types={"day": pa.string(), "note": pa.string()})
        good = parquet_bytes(pa.csv.read_csv(pa.py_buffer(good), convert_options=types))
    (landing / f"next.{kind.fmt}").write_bytes(good)
    run = run_dag(f"next_{kind.name}", dag_file(dag_id, config))
    assert task_states(run) == {"stage": "success", "quality_gate": "success", "commit": "success"}
    assert sorted(DeltaTable(str(table)).to_arrow()["id"].to_pylist()) == [1, 2, 3, 10, 11, 12]


GOOD = [
    Kind(
        "missing_nullable_column",
        "csv",
        {"b.csv": csv("id,day,amount", "10,2026-11-01,1.5", "11,2026-11-02,2.5")},
        "",
        [],
    ),
    Kind(
        "narrower_integers",  # int32 ids into the table's long column: a lossless cast
        "parquet",
        {
            "b.parquet": parquet_bytes(
                pa.table(
                    {
                        "id": pa.array([10, 11], pa.int32()),
                        "day": ["2026-11-01", "2026-11-02"],
                        "amount": pa.array([1.5, 2.5], pa.float32()),
                        "note": ["x", "y"],
                    }
                )
            )
        },
        "",
        [],
    ),
    Kind(
        "case_and_order",  # columns matched by name, case-insensitively, in any order
        "csv",
        {"b.csv": csv("NOTE,Amount,day,ID", "x,1.5,2026-11-01,10", "y,2.5,2026-11-02,11")},
        "",
        [],
    ),
    Kind(
        "spaces_and_dots_the_table_has",
        "csv",
        {"b.csv": csv("id,day,fare amount,note.text", "10,2026-11-01,1.5,x", "11,2026-11-02,2.5,y")},
        "",
        [],
        expectations=[EXPECTATIONS[0], EXPECTATIONS[1].replace("column: amount,", "column: fare amount,")],
        table_schema=pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                pa.field("day", pa.string()),
                pa.field("fare amount", pa.float64()),
                pa.field("note.text", pa.string()),
            ]
        ),
    ),
]


@pytest.mark.parametrize("kind", GOOD, ids=[k.name for k in GOOD])
def test_batches_the_table_can_take_are_not_bad(airflow_db, tmp_path, kind):
    config, table, landing = ingest(tmp_path, kind)
    run = run_dag(f"good_{kind.name}", dag_file(f"deltaplane_{kind.name}_ingest", config))
    assert task_states(run) == {"stage": "success", "quality_gate": "success", "commit": "success"}
    rows = {r["id"]: r for r in DeltaTable(str(table)).to_arrow().to_pylist()}
    assert sorted(rows) == [1, 2, 3, 10, 11]
    if kind.name == "missing_nullable_column":
        assert rows[10]["note"] is None and rows[10]["amount"] == 1.5
    if kind.name == "spaces_and_dots_the_table_has":
        assert rows[11]["fare amount"] == 2.5 and rows[11]["note.text"] == "y"
    assert files_in(landing) == [f"_processed/{xcom(run, 'stage')['batch']}/b.{kind.fmt}"]


def test_extra_columns_land_when_the_stage_may_merge_the_schema(airflow_db, tmp_path):
    """``schema_mode="merge"`` on the stage: an extra column is added to the table (nullable);
    without it the same batch is refused (the default, as before)."""
    table, landing, staging = tmp_path / "t", tmp_path / "landing", tmp_path / "staging"
    make_table(table)
    landing.mkdir()
    (landing / "b.csv").write_bytes(csv("id,day,amount,note,color", "10,2026-11-01,1.5,x,red"))
    run = run_dag(
        "merge_schema",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.commit import DeltaCommitOperator
        from deltaplane.operators.operators.ingest import DeltaStageOperator
        from deltaplane.operators.operators.quality import DeltaQualityGateOperator

        M = "{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}"
        with DAG("merge_schema", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            stage = DeltaStageOperator(task_id="stage", table_uri={str(table)!r}, landing={str(landing)!r},
                                       staging={str(staging)!r}, source_format="csv", schema_mode="merge")
            gate = DeltaQualityGateOperator(task_id="gate", table_uri={str(table)!r}, staged_manifest=M,
                expectations=[{{"expectation": "expect_column_values_to_not_be_null", "kwargs": {{"column": "color"}}}}])
            commit = DeltaCommitOperator(task_id="commit", table_uri={str(table)!r}, staged_manifest=M)
            stage >> gate >> commit
        """,
    )
    assert task_states(run) == {"stage": "success", "gate": "success", "commit": "success"}
    dt = DeltaTable(str(table))
    assert dt.to_arrow().schema.names == ["id", "day", "amount", "note", "color"]
    assert {r["id"]: r["color"] for r in dt.to_arrow().to_pylist()} == {1: None, 2: None, 3: None, 10: "red"}


def test_on_failure_skip_no_longer_hides_a_rejected_batch(airflow_db, tmp_path, capfd):
    """``quality.on_failure: skip`` (the shipped config/tables.yaml uses it) used to leave the gate
    green and the commit skipped, so a run with a rejected batch counted no failure. Now the
    rejection fails the gate whatever ``on_failure`` says; ``skip`` is accepted and logged."""
    kind = next(k for k in BAD if k.name == "fails_expectations")
    kind = Kind("skip_mode", kind.fmt, kind.files, kind.where, kind.says, quality=("on_failure: skip",))
    config, table, _ = ingest(tmp_path, kind)
    before = tree(table)
    capfd.readouterr()
    run = run_dag("skip_mode", dag_file("deltaplane_skip_mode_ingest", config))
    log = "".join(capfd.readouterr())
    assert task_states(run) == {"stage": "success", "quality_gate": "failed", "commit": "upstream_failed"}
    assert run_state(run) == "failed" and try_numbers(run)["quality_gate"] == 1
    assert "on_failure='skip'" in log and "no longer" in log
    assert xcom(run, "quality_gate")["rejected"] is True and tree(table) == before


def test_the_gate_validates_a_large_batch_chunk_by_chunk(tmp_path):
    """Above ``max_batch_rows`` the gate validates record batch by record batch and adds up the
    row-level expectations' results: the same counts as one whole-batch validation, examples
    with their row numbers in the batch. Expectations that need a whole column at once are
    refused with a clear message."""
    from deltaplane.engine import stage_write, validate_staged, write_table

    table = tmp_path / "t"
    write_table(str(table), pa.table({"id": pa.array([0], pa.int64()), "v": [0.0]}))
    n = 1000
    ids = [i if i % 97 else None for i in range(n)]
    values = [float(i % 50) - 1 for i in range(n)]  # 2% below 0
    staged = stage_write(str(table), pa.table({"id": pa.array(ids, pa.int64()), "v": values}))
    row_level = [
        {"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}},
        {"expectation": "expect_column_values_to_be_between", "kwargs": {"column": "v", "min_value": 0}},
        *(
            {
                "expectation": "expect_column_values_to_be_between",
                "kwargs": {"column": "v", "min_value": 0, "mostly": m},
            }
            for m in (0.97, 0.99)
        ),
    ]
    whole = validate_staged(staged, row_level)
    chunked = validate_staged(staged, row_level, max_batch_rows=100, chunk_rows=64)
    assert whole["summary"]["chunks"] == 1 and chunked["summary"]["chunks"] == 16
    assert whole["summary"]["success"] is chunked["summary"]["success"] is False
    for a, b in zip(whole["summary"]["results"], chunked["summary"]["results"], strict=True):
        assert (a["success"], a["unexpected_count"], a["element_count"]) == (
            b["success"],
            b["unexpected_count"],
            b["element_count"],
        ), (a, b)
        assert a["unexpected_percent"] == pytest.approx(b["unexpected_percent"])
    assert [r["success"] for r in chunked["summary"]["results"]] == [False, False, True, False]
    nulls = chunked["summary"]["failed"][0]
    assert nulls["unexpected_count"] == len([i for i in ids if i is None])
    assert nulls["rows"][:3] == [0, 97, 194]  # row numbers in the batch, across chunks

    unique = [{"expectation": "expect_column_values_to_be_unique", "kwargs": {"column": "id"}}]
    refused = validate_staged(staged, [*row_level[:1], *unique], max_batch_rows=100, chunk_rows=64)
    summary = refused["summary"]
    assert summary["success"] is False and summary["refused"] == ["expect_column_values_to_be_unique"]
    assert "1000 rows" in summary["reason"] and "max_batch_rows=100" in summary["reason"]
    assert "whole column" in summary["reason"]


def test_a_gate_that_cannot_validate_a_batch_rejects_it(airflow_db, tmp_path):
    """A batch too large for the whole-column expectations it is given is rejected (quarantined,
    the gate FAILED) rather than committed unchecked or loaded whole."""
    unique = "{expectation: expect_column_values_to_be_unique, kwargs: {column: id}}"
    kind = Kind(
        "too_large",
        "csv",
        {"b.csv": csv("id,day,amount,note", *GOOD_ROWS)},
        "quality_gate",
        [],
        quality=("max_batch_rows: 2", "chunk_rows: 2"),
        expectations=[*EXPECTATIONS, unique],
    )
    config, table, landing = ingest(tmp_path, kind)
    before = tree(table)
    run = run_dag("too_large", dag_file("deltaplane_too_large_ingest", config))
    assert task_states(run) == {"stage": "success", "quality_gate": "failed", "commit": "upstream_failed"}
    report = xcom(run, "quality_gate")
    assert report["refused"] == ["expect_column_values_to_be_unique"]
    assert "max_batch_rows=2" in report["message"] and "3 rows" in report["message"]
    assert (Path(report["quarantine"]) / "validation.json").exists()
    assert tree(table) == before and files_in(landing) == []


# --- a batch larger than memory --------------------------------------------------------------

MEMORY_RUN = r"""
import json, os, resource, sys, time

def vm():
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: int(status[k].split()[0]) * 1024 for k in ("VmSize", "VmPeak", "VmHWM")}

dag_file, headroom = sys.argv[1], int(sys.argv[2])
# Everything the run needs, imported before the limit is set: what is measured is the run.
import pandas, pyarrow.csv, pyarrow.dataset, pyarrow.parquet  # noqa
import airflow.sdk
from airflow.models import DagRun  # noqa
import importlib.util
import deltaplane.operators.operators.ingest, deltaplane.operators.operators.quality, deltaplane.operators.operators.commit  # noqa
from deltaplane.engine import import_great_expectations as _gx
_gx()
spec = importlib.util.spec_from_file_location("memory_dag", dag_file)  # a DAG file in the dags folder
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dag = module.dag
baseline = vm()
limit = baseline["VmSize"] + headroom
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    bytearray(headroom + (256 << 20))  # the limit is real: more than the headroom cannot be had
    print("LIMIT NOT ENFORCED", file=sys.stderr)
    sys.exit(3)
except MemoryError:
    pass
started = time.monotonic()
run = dag.test()
from airflow.models import TaskInstance
from airflow.utils.session import create_session
with create_session() as session:
    states = {ti.task_id: str(ti.state) for ti in session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id)}
print("RESULT " + json.dumps({"states": states, "baseline": baseline, "limit": limit, "after": vm(),
                              "seconds": round(time.monotonic() - started, 1)}))
"""


@pytest.mark.slow
def test_a_batch_larger_than_memory_is_staged_and_validated_in_bounded_memory(airflow_db, tmp_path):
    """The factory's ingest DAG, run with ``dag.test()`` in a process whose address space
    (``RLIMIT_AS``) is what the interpreter, pyarrow, pandas, Airflow and GX take once imported
    plus 640 MiB: the whole limit is well below the batch's decoded size (48M rows of eight
    int64 columns, 3 GiB decoded, from a 1 GiB CSV). The stage streams the CSV into staged files
    and the gate validates them chunk by chunk (the batch is far above ``max_batch_rows``).

    Arrow's allocator is the system one in that process: mimalloc (the default) reserves 1 GiB of
    address space when pyarrow is imported, which RLIMIT_AS counts although it is not memory, and
    which would let the limit sit above the batch. Today's stage (``pa.concat_tables`` of every
    file) runs out of memory here."""
    import numpy as np
    import pyarrow.csv as pcsv

    headroom = 640 << 20
    rows, chunk = 48_000_000, 2_000_000
    name = "big"
    config = write_config(
        tmp_path,
        name,
        "csv",
        table=(),
        expectations=[
            "{expectation: expect_column_values_to_not_be_null, kwargs: {column: c3}}",
            "{expectation: expect_column_values_to_be_between, kwargs: {column: c1, min_value: 0}}",
        ],
    )
    table = tmp_path / "lake" / name
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), *(pa.field(f"c{i}", pa.int64()) for i in range(7))]
    )
    DeltaTable.create(str(table), schema)
    landing = tmp_path / "landing" / name
    landing.mkdir(parents=True)
    small = pa.array(np.arange(chunk, dtype=np.int64) % 10)
    with pcsv.CSVWriter(landing / "big.csv", schema) as out:
        for start in range(0, rows, chunk):
            ids = pa.array(np.arange(start, start + chunk, dtype=np.int64))
            out.write_table(pa.table([ids, *([small] * 7)], schema=schema))
    csv_bytes = (landing / "big.csv").stat().st_size
    decoded = rows * 8 * 8  # eight int64 columns
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT),
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MiB of address space per thread arena
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW_HOME": str(HOME),
    }
    script = tmp_path / "memory_run.py"  # a file: GX (through PySpark) exits a `python -c` process
    script.write_text(MEMORY_RUN)
    dag_path = DAGS / "memory_big.py"
    dag_path.write_text(textwrap.dedent(dag_file(f"deltaplane_{name}_ingest", config)))
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(dag_path), str(headroom)],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )
    finally:
        dag_path.unlink()
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout[-3000:], done.stderr[-5000:])
    result = json.loads(lines[-1][len("RESULT ") :])
    print(
        json.dumps(
            {
                "rows": rows,
                "csv_bytes": csv_bytes,
                "decoded_bytes": decoded,
                "baseline_vm": result["baseline"]["VmSize"],
                "baseline_rss": result["baseline"]["VmHWM"],
                "rlimit_as": result["limit"],
                "peak_vm": result["after"]["VmPeak"],
                "peak_rss": result["after"]["VmHWM"],
                "seconds": result["seconds"],
            }
        )
    )
    assert result["states"] == {"stage": "success", "quality_gate": "success", "commit": "success"}, result
    assert decoded > 2 * result["limit"] and decoded > 4 * headroom
    dt = DeltaTable(str(table))
    assert dt.count() == rows and dt.version == 1
