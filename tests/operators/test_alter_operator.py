"""``DeltaAlterOperator``: one ALTER per task, arguments checked when the DAG is parsed, templated
arguments, reruns that find the change already made, refusals that fail without retries. Real
Airflow (``dag.test()``), real tables."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.airflow


def alter_dag(name: str, uri: str) -> str:
    return f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.alter import DeltaAlterOperator

        with DAG({name!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1),
                 params={{"new_name": "label", "kind": "bigint"}}) as dag:
            mapping = DeltaAlterOperator(
                task_id="mapping", table_uri={uri!r}, action="set_table_properties",
                arguments={{"properties": {{"delta.columnMapping.mode": "name",
                                            "delta.enableTypeWidening": "true"}}}})
            rename = DeltaAlterOperator(
                task_id="rename", table_uri={uri!r}, action="rename_column",
                arguments={{"column": "b", "new_name": "{{{{ params.new_name }}}}"}}, retries=3)
            widen = DeltaAlterOperator(
                task_id="widen", table_uri={uri!r}, action="change_column_type",
                arguments={{"column": "a", "new_type": "{{{{ params.kind }}}}"}})
            drop = DeltaAlterOperator(
                task_id="drop", table_uri={uri!r}, action="drop_columns", arguments={{"columns": ["gone"]}})
            mapping >> rename >> widen >> drop
        """


def test_alters_run_once_and_a_rerun_finds_them_made(airflow_db, tmp_path):
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": pa.array([1], pa.int32()), "b": ["x"], "gone": ["y"]}))
    run = run_dag("alters", alter_dag("alters", uri))
    assert set(task_states(run).values()) == {"success"}
    t = DeltaTable(uri)
    assert t.to_arrow().to_pylist() == [{"a": 1, "label": "x"}]
    assert t.to_arrow().schema.field("a").type == pa.int64()
    assert [h["operation"] for h in t.history()[:4]] == [
        "DROP COLUMNS",
        "CHANGE COLUMN",
        "RENAME COLUMN",
        "SET TBLPROPERTIES",
    ]
    assert xcom(run, "rename")["operation"] == "RENAME COLUMN"
    version = t.version()
    again = run_dag("alters", alter_dag("alters", uri))  # a new run of the same DAG
    assert set(task_states(again).values()) == {"success"}
    assert DeltaTable(uri).version() == version  # nothing committed twice
    reasons = {task: xcom(again, task)["reason"] for task in ("mapping", "rename", "widen", "drop")}
    assert reasons["rename"] == "column 'b' is already renamed to 'label'"
    assert reasons["drop"] == "column(s) 'gone' already dropped"
    assert "already" in reasons["mapping"] and "already" in reasons["widen"]


def test_a_refused_alter_fails_without_retries_and_commits_nothing(airflow_db, tmp_path, capfd):
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1], "b": ["x"]}))
    dag = f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.alter import DeltaAlterOperator

        with DAG("refused", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaAlterOperator(task_id="rename", table_uri={uri!r}, action="rename_column",
                               arguments={{"column": "b", "new_name": "c"}}, retries=3)
        """
    run = run_dag("refused", dag)
    assert task_states(run) == {"rename": "failed"}
    assert "without column mapping" in capfd.readouterr().out
    assert DeltaTable(uri).version() == 0


@pytest.mark.parametrize(
    ("action", "arguments", "message"),
    [
        ("rename", {}, "action must be one of"),
        ("rename_column", {"colum": "a", "new_name": "b"}, "do not fit alter.rename_column"),
        ("drop_columns", {"columns": ["a"], "extra": 1}, "do not fit alter.drop_columns"),
        ("set_table_properties", "not a dict", "a dict of the action's keyword arguments"),
        ("drop_feature", {"feature": "deletionVectors", "truncate": True}, "do not fit alter.drop_feature"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(action, arguments, message):
    from deltaplane.operators.operators.alter import DeltaAlterOperator

    with pytest.raises((TypeError, ValueError), match=message):
        DeltaAlterOperator(task_id="t", table_uri="/tmp/t", action=action, arguments=arguments)


def test_hostile_names_are_data_not_code(airflow_db, tmp_path):
    """A column renamed to an injection payload is just a name (no SQL is built from it)."""
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"a": [1], "b": ["x"]}), properties={"delta.columnMapping.mode": "name"})
    payload = "x`; DROP TABLE t; --{{ 7*7 }}"
    dag = f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.alter import DeltaAlterOperator

        with DAG("hostile", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaAlterOperator(task_id="rename", table_uri={uri!r}, action="rename_column",
                               arguments={{"column": "b", "new_name": {json.dumps(payload)} }})
        """
    run = run_dag("hostile", dag)
    assert task_states(run) == {"rename": "success"}
    names = DeltaTable(uri).to_arrow().column_names
    assert names == ["a", payload.replace("{{ 7*7 }}", "49")]  # rendered as a template, stored as a name


def test_feature_drops_and_adds_run_once_and_a_wait_fails_without_retries(airflow_db, tmp_path, capfd):
    """DROP FEATURE from a DAG: its commits land once, a rerun finds the feature gone, and a
    history-truncating drop that must wait 24 hours fails at once instead of retrying."""
    uri, other = str(tmp_path / "t"), str(tmp_path / "u")
    for path in (uri, other):
        write_table(
            path, pa.table({"a": list(range(100))}), properties={"delta.enableDeletionVectors": "true"}
        )
        DeltaTable(path).delete("a < 10")
    dag = f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.alter import DeltaAlterOperator

        with DAG("features", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            drop = DeltaAlterOperator(task_id="drop", table_uri={uri!r}, action="drop_feature",
                                      arguments={{"feature": "deletionVectors"}}, retries=2)
            add = DeltaAlterOperator(task_id="add", table_uri={uri!r}, action="add_feature",
                                     arguments={{"feature": ["changeDataFeed"]}})
            wait = DeltaAlterOperator(task_id="wait", table_uri={other!r}, action="drop_feature",
                                      arguments={{"feature": "deletionVectors", "truncate_history": True}},
                                      retries=3)
            drop >> add
        """
    run = run_dag("features", dag)
    assert task_states(run) == {"drop": "success", "add": "success", "wait": "failed"}
    out = capfd.readouterr().out
    assert "failing without retries" in out and "partially successful" in out
    t = DeltaTable(uri)
    ops = [h["operation"] for h in reversed(t.history())]
    assert ops[-8:] == [
        "UNSET TBLPROPERTIES",
        "REORG",
        "Deletion Vector Tombstones",
        *["Empty Commit"] * 3,
        "DROP FEATURE",
        "SET TBLPROPERTIES",
    ]
    assert xcom(run, "drop")["version"] == t.version() - 1
    assert sorted(t.to_arrow().column("a").to_pylist()) == list(range(10, 100))
    # the waiting drop removed the traces once (no retries repeated it) and kept the feature
    u = DeltaTable(other)
    assert [h["operation"] for h in u.history()[:4]] == [
        "Empty Commit",
        "Deletion Vector Tombstones",
        "REORG",
        "UNSET TBLPROPERTIES",
    ]
    assert "deletionVectors" in (u.protocol().reader_features or [])
    version = t.version()
    again = run_dag("features", dag)
    assert DeltaTable(uri).version() == version
    assert (
        xcom(again, "drop")["reason"]
        == "feature 'deletionVectors' is not in the table's protocol (already dropped)"
    )
    assert "already" in xcom(again, "add")["reason"]
