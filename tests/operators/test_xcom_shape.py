"""Every operator's XCom has one shape (``deltaplane.operators.utils.results``), whatever the
outcome: a commit, a rerun that finds its work already applied, nothing to do, a dry run, a
rejected batch. The shape is written out here, not taken from the code under test; real Airflow
(``dag.test()``) runs every operator on real tables, four times over changing landing batches."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.airflow

NoneType = type(None)

# The one shape: key -> the types its value may have. Every key is always present.
COMMON = {
    "table": (str,),
    "operation": (str,),
    "version": (int, NoneType),
    "read_version": (int, NoneType),
    "committed": (bool,),
    "already_applied": (bool,),
    "metrics": (dict,),
    "reason": (str, NoneType),
    "engine": (str,),
    "work": (str, NoneType),
    "event": (dict, NoneType),
    "skipped": (bool,),  # deprecated alias of already_applied
    "operationMetrics": (dict,),  # deprecated alias of metrics
}
# Operator-specific keys the documentation promises, per task of the DAG below.
SPECIFIC = {
    "write": {"files": (int,), "rows": (int,)},
    "stage": {"batch": (str,), "files": (int, list)},
    "gate": {"success": (bool,), "batch": (str,)},
    "commit_staged": {"files": (int,), "rows": (int,), "bytes": (int,)},
    "delete": {},
    "merge": {},
    "auto_optimize": {"compact": (bool,), "action": (str,), "reasons": (list,)},
    "compact": {"nothing_to_do": (bool,)},
    "checkpoint": {"checkpoint": (dict,)},
    "vacuum_dry": {"dry_run": (bool,), "files": (int,), "sample": (list,)},
    "vacuum": {"dry_run": (bool,), "files": (int,), "sample": (list,)},
    "manifest": {"manifest": (dict,)},
    "consume": {"source_versions": (list,), "watermark": (int,)},
}
OPERATIONS = {
    "write": {"WRITE", "CREATE TABLE AS SELECT"},
    "stage": {"STAGE"},
    "gate": {"QUALITY GATE"},
    "commit_staged": {"WRITE"},
    "delete": {"DELETE"},
    "merge": {"MERGE"},
    "auto_optimize": {"AUTO OPTIMIZE"},
    "compact": {"OPTIMIZE"},
    "checkpoint": {"CHECKPOINT"},
    "vacuum_dry": {"VACUUM"},
    "vacuum": {"VACUUM", "VACUUM END"},
    "manifest": {"GENERATE MANIFEST"},
    "consume": {"WRITE", "CREATE TABLE AS SELECT", "CONSUME"},
}


def check_shape(task: str, value) -> list[str]:
    """Everything wrong with one XCom value (empty: it has the shape)."""
    if not isinstance(value, dict):
        return [f"{task}: not an object: {value!r}"]
    wrong = []
    # A task that found its work already applied before running reports the common keys only.
    specific = {} if value.get("already_applied") and value.get("version") is not None else SPECIFIC[task]
    for key, types in {**COMMON, **specific}.items():
        if key not in value:
            wrong.append(f"{task}: no {key!r}")
        elif not isinstance(value[key], types) or (bool not in types and isinstance(value[key], bool)):
            wrong.append(f"{task}: {key}={value[key]!r} is not {types}")
    if wrong:
        return wrong
    v = value
    if v["operation"] not in OPERATIONS[task]:
        wrong.append(f"{task}: operation {v['operation']!r}")
    if v["committed"] and v["already_applied"]:
        wrong.append(f"{task}: committed and already applied")
    if v["committed"]:
        if v["version"] is None or v["reason"] is not None:
            wrong.append(f"{task}: a commit with version {v['version']} and reason {v['reason']!r}")
        if not v["metrics"] or not all(isinstance(x, str) for x in v["metrics"].values()):
            wrong.append(f"{task}: a commit's metrics must be Delta's operationMetrics: {v['metrics']!r}")
        if v["event"] is not None and v["event"]["payload"].get("version") != v["version"]:
            wrong.append(f"{task}: Asset event of another version: {v['event']!r}")
    elif not v["reason"]:
        wrong.append(f"{task}: nothing committed and no reason")
    if v["version"] is None and v["metrics"]:
        wrong.append(f"{task}: metrics without a commit: {v['metrics']!r}")
    if v["already_applied"] is not v["skipped"] or v["metrics"] != v["operationMetrics"]:
        wrong.append(f"{task}: an alias differs from its key")
    if v["engine"] not in ("in-process", "spark"):
        wrong.append(f"{task}: engine {v['engine']!r}")
    if "operation_metrics" in v:
        wrong.append(f"{task}: a second spelling of the metrics")
    return wrong


def test_check_shape_refuses_what_the_operators_used_to_return():
    """The check can fail: the pre-shape return values of a DML task and a checkpoint."""
    assert check_shape("delete", {"version": 3, "engine": "in-process", "operationMetrics": {"a": "1"}})
    old_checkpoint = {"version": None, "checkpoint": {"version": 12}}
    assert check_shape("checkpoint", old_checkpoint)


DAG = """
import pendulum
from airflow.sdk import DAG, chain
from deltaplane.operators.operators.commit import DeltaCommitOperator
from deltaplane.operators.operators.consume import DeltaConsumeOperator
from deltaplane.operators.operators.dml import DeltaDMLOperator
from deltaplane.operators.operators.ingest import DeltaStageOperator
from deltaplane.operators.operators.maintenance import (
    DeltaAutoOptimizeOperator, DeltaCheckpointOperator, DeltaCompactionOperator, DeltaManifestOperator,
    DeltaVacuumOperator,
)
from deltaplane.operators.operators.quality import DeltaQualityGateOperator

T = {table!r}
with DAG("xcom_shape", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    stage = DeltaStageOperator(task_id="stage", table_uri=T, landing={landing!r}, staging={staging!r},
                               source_format="csv")
    gate = DeltaQualityGateOperator(
        task_id="gate", table_uri=T, staged_manifest="{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}",
        expectations=[{{"expectation": "expect_column_values_to_not_be_null", "kwargs": {{"column": "id"}}}}],
    )
    commit = DeltaCommitOperator(
        task_id="commit_staged", table_uri=T,
        staged_manifest="{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}",
    )
    write = DeltaCommitOperator(task_id="write", table_uri=T, source={source!r})
    chain(write, stage, gate, commit)
    chain(  # beside the ingest: a rejected or empty batch must not stop the reruns below
        write,
        DeltaDMLOperator(task_id="delete", table_uri=T, operation="delete", predicate="id = 2"),
        DeltaDMLOperator(task_id="merge", table_uri=T, operation="merge", source={merge!r},
                         merge_condition="t.id = s.id"),
        consume := DeltaConsumeOperator(task_id="consume", table_uri={target!r}, source_uri=T,
                                        on_change="skip", trigger_rule="all_done"),
        DeltaAutoOptimizeOperator(task_id="auto_optimize", table_uri=T, min_small_files=2),
        DeltaCompactionOperator(task_id="compact", table_uri=T),
        DeltaCheckpointOperator(task_id="checkpoint", table_uri=T),
        DeltaVacuumOperator(task_id="vacuum_dry", table_uri=T, dry_run=True, retention_hours=0,
                            enforce_retention=False),
        DeltaVacuumOperator(task_id="vacuum", table_uri=T, dry_run=False, retention_hours=0,
                            enforce_retention=False),
        DeltaManifestOperator(task_id="manifest", table_uri=T),
    )
    # The consumer reads the staged commit before the VACUUM (retention 0) below deletes the
    # files compaction replaced: otherwise the next run's consumer finds them gone.
    commit >> consume
"""


def test_every_operator_xcom_has_the_one_shape(airflow_db, tmp_path):
    table, target = tmp_path / "t", tmp_path / "target"
    landing, staging, source = tmp_path / "landing", tmp_path / "staging", tmp_path / "source"
    for folder in (landing, staging, source):
        folder.mkdir()
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema), source / "s.parquet")
    merge = tmp_path / "merge.parquet"
    pq.write_table(pa.table({"id": [3, 40], "name": ["C", "d"]}, schema), merge)
    code = DAG.format(
        table=str(table),
        landing=str(landing),
        staging=str(staging),
        source=str(source),
        merge=str(merge),
        target=str(target),
    )
    landings = [
        "id,name\n10,x\n11,y\n",  # a good batch: staged, passed, committed
        "id,name\n,x\n12,y\n",  # a null id: the gate rejects the batch
        None,  # nothing landed: the stage has nothing to do, gate and commit skip
        "id,name\nnot a number,x\n",  # the stage refuses the batch
    ]
    seen: dict[str, list[dict]] = {}
    for i, text in enumerate(landings):
        if text is not None:
            (landing / f"b{i}.csv").write_text(text)
        run = run_dag("xcom_shape", code)
        states = task_states(run)
        for task in SPECIFIC:
            value = xcom(run, task)
            if value is None:
                assert states[task] in ("skipped", "upstream_failed"), (i, task, states[task])
                continue
            assert check_shape(task, value) == [], (i, value)
            seen.setdefault(task, []).append(value)
        if i == 0:
            assert set(states.values()) == {"success"}, states
        if i == 1:
            assert states["gate"] == "failed" and seen["gate"][-1].get("rejected") is True
        if i == 3:
            assert states["stage"] == "failed" and xcom(run, "stage")["rejected"] is True

    # First run: every writing task committed; the reruns found the same work already applied.
    write, merged = seen["write"], seen["merge"]
    assert write[0]["committed"] and [w["already_applied"] for w in write[1:]] == [True] * 3
    assert {w["version"] for w in write} == {write[0]["version"]}
    assert write[1]["metrics"] == write[0]["metrics"]  # read from the commit itself, both times
    assert write[0]["metrics"]["numOutputRows"] == "3" and write[0]["rows"] == 3
    assert (
        merged[0]["committed"]
        and [(m["already_applied"], m["version"]) for m in merged[1:]] == [(True, merged[0]["version"])] * 3
    )
    staged = seen["commit_staged"][0]
    assert staged["committed"] and staged["metrics"]["numOutputRows"] == "2" and staged["rows"] == 2
    delete = seen["delete"][0]
    assert delete["committed"] and delete["metrics"]["numDeletedRows"] == "1"
    assert delete["read_version"] == delete["version"] - 1
    assert seen["stage"][2]["version"] is None and seen["stage"][2]["files"] == 0
    assert not seen["stage"][2]["committed"] and "no csv files" in seen["stage"][2]["reason"]
    assert seen["stage"][0]["manifest"]  # the DAG factory's template reads it
    checkpoint = seen["checkpoint"][0]
    assert checkpoint["version"] is None and checkpoint["read_version"] == checkpoint["checkpoint"]["version"]
    assert all(v["version"] is None and not v["committed"] for v in seen["vacuum_dry"])
    assert DeltaTable(str(target)).count() > 0 and seen["consume"][0]["committed"]
    for compact in seen["compact"]:
        assert compact["committed"] is not compact["nothing_to_do"]
        if compact["committed"]:
            assert compact["metrics"]["numRemovedFiles"] == str(compact["num_files_removed"])
    assert json.dumps(seen)  # JSON as XCom stores it
    assert Path(table).exists()
