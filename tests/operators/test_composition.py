"""Operators that are safe to compose: what a DAG author writes from the README works as written.

* the README's maintenance chain (``auto_optimize >> compact >> checkpoint >> vacuum``, no trigger
  rules) always checkpoints and vacuums, whether or not there was anything to compact;
* a DELETE/UPDATE without a predicate needs ``allow_full_table=True`` (when the DAG is parsed, and
  after templates are rendered), and an empty ``IN ()`` list is an error, not an empty commit;
* wrong argument types and values fail when the DAG file is parsed, naming the operator, the task
  and the argument;
* input errors (bad predicate, schema, configuration, constraint) fail the task once, without
  retries, with the engine's message;
* a compaction sent to Spark does what the auto-optimize decision said (its partitions, its DV
  purge), not a plan of its own.

Everything runs for real: Airflow's ``dag.test()`` on a SQLite metadata DB, real tables, and
``spark-submit`` for the Spark path.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.airflow

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string())])


def rows(ids, p: str) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [p] * len(ids), "v": [f"v{i}" for i in ids]})


def small_files(path: Path, files: dict[str, int], *, properties=None, per_file: int = 100) -> DeltaTable:
    """A table partitioned by ``p`` with ``files[p]`` small files in each partition."""
    dt = DeltaTable.create(str(path), SCHEMA, partition_by=["p"], properties=properties)
    start = 0
    for p, count in files.items():
        for _ in range(count):
            dt.append(rows(range(start, start + per_file), p))
            start += per_file
    return DeltaTable(str(path))


def live_paths(path: Path) -> set[str]:
    return set(DeltaTable(str(path)).snapshot.files.column("path").to_pylist())


def commit_actions(path: Path, version: int) -> list[dict]:
    import json

    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def tries(run, task_id: str) -> tuple[str, int, int]:
    """The task's state, its try number and how many earlier tries Airflow archived."""
    from airflow.models import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = (
            session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id).one()
        )
        history = (
            session.query(TaskInstanceHistory)
            .filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id)
            .count()
        )
        state = ti.state.value if hasattr(ti.state, "value") else str(ti.state)
        return state, ti.try_number, history


MAINTENANCE_IMPORTS = """
    import datetime as dt
    import pendulum
    from airflow.sdk import DAG
    from deltaplane.operators.operators.maintenance import (
        DeltaAutoOptimizeOperator, DeltaCheckpointOperator, DeltaCompactionOperator, DeltaVacuumOperator,
    )
"""


# --- 1. the README's maintenance chain ---------------------------------------------------------


def readme_chain(name: str, table: Path, auto_args: str = "") -> str:
    """The chain exactly as the README shows it: no trigger rules, no decision_task_id."""
    return (
        MAINTENANCE_IMPORTS
        + f"""
    T = {str(table)!r}
    with DAG({name!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        auto_optimize = DeltaAutoOptimizeOperator(task_id="auto_optimize", table_uri=T{auto_args})
        compact = DeltaCompactionOperator(task_id="compact", table_uri=T)
        checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table_uri=T)
        vacuum = DeltaVacuumOperator(task_id="vacuum", table_uri=T, dry_run=False, retention_hours=0,
                                     enforce_retention=False)
        auto_optimize >> compact >> checkpoint >> vacuum
    """
    )


def test_readme_chain_with_nothing_to_compact_still_checkpoints_and_vacuums(airflow_db, tmp_path):
    table = tmp_path / "t"
    small_files(table, {"a": 2, "b": 1})
    replaced = live_paths(table)
    dt = DeltaTable(str(table))
    dt.overwrite(rows(range(1000, 1010), "b"), predicate="p = 'b'")  # b's file becomes garbage for VACUUM
    version = DeltaTable(str(table)).version
    gone = replaced - live_paths(table)
    assert len(gone) == 1

    run = run_dag("chain_nothing", readme_chain("chain_nothing", table))

    assert task_states(run) == dict.fromkeys(("auto_optimize", "compact", "checkpoint", "vacuum"), "success")
    decision = xcom(run, "auto_optimize")
    assert decision["compact"] is False and decision["action"] == "skip"
    compact = xcom(run, "compact")
    assert compact["version"] is None and compact["nothing_to_do"] is True
    assert compact["decision_task_id"] == "auto_optimize" and "nothing to compact" in compact["reason"]
    assert xcom(run, "checkpoint")["checkpoint"]["version"] == version
    assert (table / xcom(run, "checkpoint")["checkpoint"]["key"]).exists()
    vacuum = xcom(run, "vacuum")
    assert vacuum["dry_run"] is False and vacuum["files"] == 1
    assert not any((table / p).exists() for p in gone)
    after = DeltaTable(str(table))
    assert after.history(1)[0]["operation"] == "VACUUM END"
    assert "OPTIMIZE" not in {h["operation"] for h in after.history()}


def test_readme_chain_with_something_to_compact_runs_every_task(airflow_db, tmp_path):
    table = tmp_path / "t"
    small_files(table, {"a": 3, "b": 2})
    before = live_paths(table)
    in_b = {p for p in before if p.startswith("p=b/")}

    run = run_dag("chain_compact", readme_chain("chain_compact", table, ", min_small_files=3"))

    assert set(task_states(run).values()) == {"success"}, task_states(run)
    decision = xcom(run, "auto_optimize")
    assert decision["action"] == "compact" and decision["partition_names"] == ["p=a"]
    compact = xcom(run, "compact")
    assert compact["engine"] == "in-process" and compact["num_files_removed"] == 3
    optimize = DeltaTable(str(table)).history()[-(compact["version"] + 1)]
    assert optimize["operation"] == "OPTIMIZE"
    removed = {a["remove"]["path"] for a in commit_actions(table, compact["version"]) if "remove" in a}
    assert removed == before - in_b  # partition a only: b was not chosen by the decision
    assert in_b <= live_paths(table)
    assert xcom(run, "checkpoint")["checkpoint"]["version"] == compact["version"]
    assert xcom(run, "vacuum")["files"] == 3 and not any((table / p).exists() for p in removed)
    assert DeltaTable(str(table)).count() == 500


# --- 2. DML: no predicate means allow_full_table=True; empty IN lists are errors ----------------


def test_delete_guards_after_rendering_and_full_table_deletes_when_asked(airflow_db, tmp_path):
    table = tmp_path / "users"
    DeltaTable.create(str(table), SCHEMA).append(rows(range(10), "x"))
    run = run_dag(
        "dml_guards",
        f"""
        import datetime as dt
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        T = {str(table)!r}
        args = dict(retries=2, retry_delay=dt.timedelta(seconds=0))
        with DAG("dml_guards", schedule=None, start_date=pendulum.datetime(2026, 1, 1), default_args=args,
                 params={{"ids": [], "blank": "  "}}) as dag:
            empty_in = DeltaDMLOperator(task_id="empty_in", table_uri=T, operation="delete",
                                        predicate="id IN ({{{{ params.ids | join(', ') }}}})")
            not_in = DeltaDMLOperator(task_id="not_in", table_uri=T, operation="delete",
                                      predicate="id NOT IN ({{{{ params.ids | join(', ') }}}})")
            blank = DeltaDMLOperator(task_id="blank", table_uri=T, operation="delete",
                                     predicate="{{{{ params.blank }}}}")
            blank_update = DeltaDMLOperator(task_id="blank_update", table_uri=T, operation="UPDATE",
                                            predicate="{{{{ params.blank }}}}", updates={{"v": "'x'"}})
        """,
    )
    states = task_states(run)
    assert states == dict.fromkeys(("empty_in", "not_in", "blank", "blank_update"), "failed"), states
    for task_id in states:
        assert tries(run, task_id)[1] == 1, task_id  # input errors are not retried
    after = DeltaTable(str(table))
    assert after.version == 1 and after.count() == 10  # nothing committed, not even an empty DELETE

    run = run_dag(
        "dml_full",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        with DAG("dml_full", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaDMLOperator(task_id="truncate", table_uri={str(table)!r}, operation="Delete", allow_full_table=True)
        """,
    )
    assert task_states(run) == {"truncate": "success"}
    assert xcom(run, "truncate")["operationMetrics"]["numDeletedRows"] == "10"
    assert DeltaTable(str(table)).count() == 0


# --- 3. arguments are checked when the DAG is parsed --------------------------------------------


def construct(operator: str, **kwargs):
    import pendulum
    from airflow.sdk import DAG

    import deltaplane.operators

    cls = getattr(deltaplane.operators, operator)
    with DAG("args", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        return cls(task_id="t", **{"table_uri": "/lake/t", **kwargs})


BAD_ARGUMENTS = [
    # (operator, kwargs, error, the argument the message names)
    ("DeltaDMLOperator", {"operation": "delete"}, ValueError, "allow_full_table"),
    ("DeltaDMLOperator", {"operation": "delete", "predicate": ""}, ValueError, "allow_full_table"),
    ("DeltaDMLOperator", {"operation": "delete", "predicate": "   "}, ValueError, "allow_full_table"),
    ("DeltaDMLOperator", {"operation": "delete", "predicate": "true"}, ValueError, "allow_full_table"),
    ("DeltaDMLOperator", {"operation": "delete", "predicate": " (1 = 1) "}, ValueError, "allow_full_table"),
    ("DeltaDMLOperator", {"operation": "update", "updates": {"v": "'x'"}}, ValueError, "allow_full_table"),
    ("DeltaDMLOperator", {"operation": 5, "predicate": "id = 1"}, TypeError, "operation"),
    ("DeltaDMLOperator", {"operation": "truncate", "predicate": "id = 1"}, ValueError, "operation"),
    ("DeltaDMLOperator", {"operation": "delete", "predicate": 5}, TypeError, "predicate"),
    ("DeltaDMLOperator", {"operation": "delete", "predicate": ["id = 1"]}, TypeError, "predicate"),
    ("DeltaDMLOperator", {"operation": "delete", "allow_full_table": "yes"}, TypeError, "allow_full_table"),
    ("DeltaDMLOperator", {"operation": "update", "predicate": "id = 1"}, ValueError, "updates"),
    (
        "DeltaDMLOperator",
        {"operation": "update", "predicate": "id = 1", "updates": "v = 'x'"},
        TypeError,
        "updates",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "update", "predicate": "id = 1", "updates": {"v": 1}},
        TypeError,
        "updates",
    ),
    ("DeltaDMLOperator", {"operation": "merge", "merge_condition": "t.id = s.id"}, ValueError, "source"),
    (
        "DeltaDMLOperator",
        {"operation": "merge", "source": 5, "merge_condition": "t.id = s.id"},
        TypeError,
        "source",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "merge", "source": ["/a.parquet", 5], "merge_condition": "t.id = s.id"},
        TypeError,
        "source",
    ),
    ("DeltaDMLOperator", {"operation": "merge", "source": "/a.parquet"}, ValueError, "merge_condition"),
    (
        "DeltaDMLOperator",
        {
            "operation": "merge",
            "source": "/a.parquet",
            "merge_condition": "t.id = s.id",
            "when_matched": "upsert",
        },
        ValueError,
        "when_matched",
    ),
    (
        "DeltaDMLOperator",
        {
            "operation": "merge",
            "source": "/a.parquet",
            "merge_condition": "t.id = s.id",
            "when_not_matched": True,
        },
        TypeError,
        "when_not_matched",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "delete", "predicate": "id = 1", "strategy": "fast"},
        ValueError,
        "strategy",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "delete", "predicate": "id = 1", "spark_threshold_bytes": "eight gigs"},
        ValueError,
        "spark_threshold_bytes",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "delete", "predicate": "id = 1", "spark_threshold_bytes": -1},
        ValueError,
        "spark_threshold_bytes",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "delete", "predicate": "id = 1", "spark_timeout": "1h"},
        TypeError,
        "spark_timeout",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "delete", "predicate": "id = 1", "table_uri": None},
        TypeError,
        "table_uri",
    ),
    (
        "DeltaDMLOperator",
        {"operation": "delete", "predicate": "id = 1", "table_uri": " "},
        ValueError,
        "table_uri",
    ),
    ("DeltaCompactionOperator", {"zorder_by": ["user_id", 7]}, TypeError, "zorder_by"),
    ("DeltaCompactionOperator", {"zorder_by": 7}, TypeError, "zorder_by"),
    ("DeltaCompactionOperator", {"zorder_by": ["a", ""]}, ValueError, "zorder_by"),
    ("DeltaCompactionOperator", {"zorder_by": "a, a"}, ValueError, "zorder_by"),
    ("DeltaCompactionOperator", {"target_file_size": "128 apples"}, ValueError, "target_file_size"),
    ("DeltaCompactionOperator", {"target_file_size": "0MiB"}, ValueError, "target_file_size"),
    ("DeltaAutoOptimizeOperator", {"small_file_size": "-5m"}, ValueError, "small_file_size"),
    ("DeltaCompactionOperator", {"target_file_size": True}, TypeError, "target_file_size"),
    ("DeltaCompactionOperator", {"target_file_size": 0}, ValueError, "target_file_size"),
    ("DeltaCompactionOperator", {"partition_filter": 5}, TypeError, "partition_filter"),
    ("DeltaCompactionOperator", {"decision_task_id": 5}, TypeError, "decision_task_id"),
    ("DeltaCompactionOperator", {"spark_threshold_bytes": 1.5}, TypeError, "spark_threshold_bytes"),
    ("DeltaCompactionOperator", {"spark_timeout": 0}, ValueError, "spark_timeout"),
    ("DeltaAutoOptimizeOperator", {"min_small_files": "3"}, TypeError, "min_small_files"),
    ("DeltaAutoOptimizeOperator", {"min_small_files": 0}, ValueError, "min_small_files"),
    ("DeltaAutoOptimizeOperator", {"small_file_size": 2.5}, TypeError, "small_file_size"),
    ("DeltaAutoOptimizeOperator", {"max_deleted_rows_ratio": "0.2"}, TypeError, "max_deleted_rows_ratio"),
    ("DeltaAutoOptimizeOperator", {"max_deleted_rows_ratio": 1.5}, ValueError, "max_deleted_rows_ratio"),
    ("DeltaAutoOptimizeOperator", {"zorder_by": {"a": 1}}, TypeError, "zorder_by"),
    ("DeltaCheckpointOperator", {"cleanup_log": "false"}, TypeError, "cleanup_log"),
    ("DeltaVacuumOperator", {"dry_run": "false"}, TypeError, "dry_run"),
    ("DeltaVacuumOperator", {}, TypeError, "dry_run"),
    ("DeltaVacuumOperator", {"dry_run": True, "retention_hours": "168"}, TypeError, "retention_hours"),
    ("DeltaVacuumOperator", {"dry_run": True, "retention_hours": -1}, ValueError, "retention_hours"),
    ("DeltaVacuumOperator", {"dry_run": True, "enforce_retention": "no"}, TypeError, "enforce_retention"),
    ("DeltaVacuumOperator", {"dry_run": True, "mode": "quick"}, ValueError, "mode"),
    ("DeltaManifestOperator", {"table_uri": 42}, TypeError, "table_uri"),
]


@pytest.mark.parametrize(("operator", "kwargs", "error", "argument"), BAD_ARGUMENTS)
def test_wrong_arguments_fail_when_the_dag_is_parsed(operator, kwargs, error, argument):
    with pytest.raises(error) as caught:
        construct(operator, **kwargs)
    message = str(caught.value)
    assert message.startswith(f"{operator}(task_id='t'): "), message
    assert argument in message, message


def test_arguments_are_normalized():
    assert construct("DeltaCompactionOperator", zorder_by="user_id").zorder_by == ["user_id"]
    assert construct("DeltaCompactionOperator", zorder_by=" a, b ").zorder_by == ["a", "b"]
    assert construct("DeltaCompactionOperator", zorder_by=("a",)).zorder_by == ["a"]
    assert construct("DeltaAutoOptimizeOperator", zorder_by="user_id").zorder_by == ["user_id"]
    assert construct("DeltaCompactionOperator", target_file_size=128 << 20).target_file_size == 128 << 20
    for spelling in ("128MiB", "128m", "128 MB", "0.125g"):  # the CLI's and the config's sizes
        assert construct("DeltaCompactionOperator", target_file_size=spelling).target_file_size == 128 << 20
    assert construct("DeltaAutoOptimizeOperator", small_file_size="32MiB").small_file_size == 32 << 20
    for spelling in ("DELETE", "Delete", " delete "):
        assert construct("DeltaDMLOperator", operation=spelling, predicate="id = 1").operation == "delete"
    merge = construct(
        "DeltaDMLOperator",
        operation="MERGE",
        source="/a.parquet",
        merge_condition="t.id = s.id",
        when_matched="Delete",
        when_not_matched="INSERT_ALL",
        strategy="Copy_On_Write",
    )
    assert (merge.operation, merge.when_matched, merge.when_not_matched, merge.strategy) == (
        "merge",
        "delete",
        "insert_all",
        "copy_on_write",
    )
    assert construct("DeltaVacuumOperator", dry_run=True, mode="LITE").mode == "lite"
    assert construct("DeltaVacuumOperator", dry_run=True, retention_hours=168).retention_hours == 168
    # Templated values are checked after rendering, not when the DAG is parsed.
    templated = construct("DeltaDMLOperator", operation="delete", predicate="id IN ({{ params.ids }})")
    assert templated.predicate == "id IN ({{ params.ids }})"
    assert construct("DeltaDMLOperator", operation="delete", allow_full_table=True).predicate is None


def test_path_like_locations_become_strings_when_the_operator_is_built(tmp_path):
    """A ``pathlib.Path`` wherever an operator takes a location (table, source, landing,
    staging, quarantine, manifest) is a ``str`` once the operator exists: templates render it and
    the task serializes."""
    import pendulum
    from airflow.sdk import DAG

    import deltaplane.operators as dpo

    lake = tmp_path / "lake ü"
    cases = [
        ("DeltaCompactionOperator", {}),
        ("DeltaCheckpointOperator", {}),
        ("DeltaVacuumOperator", {"dry_run": True}),
        ("DeltaManifestOperator", {}),
        ("DeltaAutoOptimizeOperator", {}),
        ("DeltaConsumeOperator", {"source_uri": lake / "source"}),
        (
            "DeltaStageOperator",
            {"landing": lake / "landing", "staging": lake / "staging", "quarantine_uri": lake / "q"},
        ),
        ("DeltaCommitOperator", {"staged_manifest": lake / "staging" / "b.json"}),
        ("DeltaCommitOperator", {"source": [lake / "in" / "a.parquet", str(lake / "in" / "b.parquet")]}),
        (
            "DeltaDMLOperator",
            {"operation": "merge", "source": lake / "s.parquet", "merge_condition": "t.id = s.id"},
        ),
        ("DeltaDMLOperator", {"operation": "delete", "predicate": "id = 1"}),
        (
            "DeltaQualityGateOperator",
            {
                "staged_manifest": lake / "m.json",
                "expectations": [
                    {"expectation": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}}
                ],
                "quarantine_uri": lake / "q",
            },
        ),
        ("DeltaSparkJobOperator", {"job": "ingest", "quarantine_uri": lake / "q"}),
        ("DeltaLogTailSensor", {}),
        ("DeltaWatermarkOperator", {"sensor_task_id": "wait"}),
    ]
    for operator, kwargs in cases:
        task = construct(operator, **{"table_uri": lake / "t", **kwargs})
        for name in task.template_fields:
            value = getattr(task, name)
            values = value if isinstance(value, list) else [value]
            assert not any(isinstance(v, Path) for v in values), (operator, name, value)
        assert task.table_uri == str(lake / "t"), operator
        for name, given in kwargs.items():
            if isinstance(given, Path):
                assert getattr(task, name) == str(given), (operator, name)
    commit = construct("DeltaCommitOperator", source=[lake / "a.parquet", lake / "b.parquet"])
    assert commit.source == [str(lake / "a.parquet"), str(lake / "b.parquet")]
    for trigger in (
        dpo.DeltaCommitTrigger(table_uri=lake / "t", after_version=0),
        dpo.DeltaCommitEventTrigger(table_uri=lake / "t"),
    ):
        assert trigger.serialize()[1]["table_uri"] == str(lake / "t")
    dag = DAG("paths", schedule=None, start_date=pendulum.datetime(2026, 1, 1))
    with dag, pytest.raises(TypeError, match="table_uri must be a string"):
        dpo.DeltaCompactionOperator(task_id="t", table_uri=b"/lake/t")


def test_a_dag_written_with_paths_runs(airflow_db, tmp_path):
    source, target = tmp_path / "src ü", tmp_path / "dst"
    DeltaTable.create(str(source), SCHEMA).append(rows(range(10), "x"))
    run = run_dag(
        "path_args",
        f"""
        from pathlib import Path
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators import DeltaCheckpointOperator, DeltaConsumeOperator

        with DAG("path_args", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaConsumeOperator(
                task_id="consume", table_uri=Path({str(target)!r}), source_uri=Path({str(source)!r})
            ) >> DeltaCheckpointOperator(task_id="checkpoint", table_uri=Path({str(target)!r}))
        """,
    )
    assert task_states(run) == {"consume": "success", "checkpoint": "success"}, task_states(run)
    assert xcom(run, "consume")["rows"] == 10
    assert DeltaTable(str(target)).count() == 10


def test_a_dagbag_reports_a_wrong_argument_as_the_files_import_error(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    folder = tmp_path / "dags"
    folder.mkdir()
    path = folder / "bad_maintenance.py"
    path.write_text(
        textwrap.dedent(
            """
            import pendulum
            from airflow.sdk import DAG
            from deltaplane.operators.operators.maintenance import DeltaCompactionOperator

            with DAG("bad_maintenance", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
                DeltaCompactionOperator(task_id="compact", table_uri="/lake/t", zorder_by=["user_id", 7])
            """
        )
    )
    bag = DagBag(dag_folder=str(folder), safe_mode=False)
    assert bag.dag_ids == [] and list(bag.import_errors) == [str(path)]
    error = bag.import_errors[str(path)]
    assert "DeltaCompactionOperator(task_id='compact'): zorder_by" in error, error
    assert "7" in error


# --- 4. input errors fail once, with the engine's message -------------------------------------


@pytest.mark.external
def test_input_errors_fail_the_task_without_retries(airflow_db, tmp_path):
    table = tmp_path / "t"
    DeltaTable.create(str(table), SCHEMA).append(rows(range(10), "x"))
    failures = tmp_path / "failures"
    failures.mkdir()
    run = run_dag(
        "input_errors",
        f"""
        import datetime as dt
        from pathlib import Path
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.dml import DeltaDMLOperator
        from deltaplane.operators.operators.maintenance import DeltaCompactionOperator
        from deltaplane.operators.operators.spark import DeltaSparkJobOperator

        def remember(context):
            from airflow.sdk.exceptions import AirflowFailException

            error = context["exception"]
            final = isinstance(error, AirflowFailException)
            Path({str(failures)!r}, context["ti"].task_id).write_text(f"{{final}} {{type(error).__name__}}: {{error}}")

        T = {str(table)!r}
        args = dict(retries=3, retry_delay=dt.timedelta(seconds=0), on_failure_callback=remember)
        with DAG("input_errors", schedule=None, start_date=pendulum.datetime(2026, 1, 1), default_args=args) as dag:
            DeltaDMLOperator(task_id="bad_predicate", table_uri=T, operation="delete", predicate="nope = 1")
            DeltaDMLOperator(task_id="bad_update", table_uri=T, operation="update", predicate="id = 1",
                             updates={{"id": "'not a number'"}})
            DeltaCompactionOperator(task_id="bad_zorder", table_uri=T, zorder_by="missing")
            DeltaSparkJobOperator(task_id="bad_spark_input", table_uri=T, job="dml",
                                  job_args=["--delete", "nope = 1"])
        """,
    )
    states = task_states(run)
    assert states == dict.fromkeys(("bad_predicate", "bad_update", "bad_zorder", "bad_spark_input"), "failed")
    for task_id in states:
        _, try_number, archived = tries(run, task_id)
        assert (try_number, archived) == (1, 0), (task_id, try_number, archived)
        message = (failures / task_id).read_text()
        assert message.startswith("True "), message  # an AirflowFailException (or a subclass)
    failed = {task_id: (failures / task_id).read_text() for task_id in states}
    assert failed["bad_predicate"].startswith("True AirflowFailException: InvalidPredicateError: ")
    assert "unknown column 'nope'" in failed["bad_predicate"]
    assert "SchemaMismatchError: column 'id'" in failed["bad_update"]
    assert "OptimizeError: cannot Z-order by 'missing'" in failed["bad_zorder"]
    assert "3" in failed["bad_spark_input"] and "unknown column 'nope'" in failed["bad_spark_input"]
    assert DeltaTable(str(table)).version == 1  # nothing committed


# --- 5. a compaction sent to Spark keeps the decision -------------------------------------------


@pytest.mark.external
def test_spark_compaction_rewrites_only_what_the_decision_chose_and_purges(airflow_db, tmp_path):
    """Partition a has 3 small files (chosen: >= 3), b has 2 (not chosen), c has one file whose
    deletion vector hides 3% of its rows (chosen, with a purge: the ratio is over 1%). Spark must
    rewrite a's files and purge c's, and leave b alone; re-planning on its own it would compact
    b (2 files make a bin) and keep c (3% is under OPTIMIZE's own 5%)."""
    table = tmp_path / "t"
    small_files(table, {"a": 3, "b": 2, "c": 1}, properties={"delta.enableDeletionVectors": "true"})
    DeltaTable(str(table)).delete("p = 'c' AND id IN (500, 501, 502)")
    before = live_paths(table)
    in_b = {p for p in before if p.startswith("p=b/")}
    run = run_dag(
        "spark_decision",
        MAINTENANCE_IMPORTS
        + f"""
    T = {str(table)!r}
    with DAG("spark_decision", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        auto_optimize = DeltaAutoOptimizeOperator(task_id="auto_optimize", table_uri=T, min_small_files=3,
                                                  max_deleted_rows_ratio=0.01)
        compact = DeltaCompactionOperator(task_id="compact", table_uri=T, spark_threshold_bytes=0)
        auto_optimize >> compact
    """,
    )
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    decision = xcom(run, "auto_optimize")
    assert decision["partition_names"] == ["p=a", "p=c"] and decision["purge"] is True
    compact = xcom(run, "compact")
    assert compact["engine"] == "spark", compact
    actions = commit_actions(table, compact["version"])
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE"
    removes = [a["remove"] for a in actions if "remove" in a]
    assert {r["path"] for r in removes} == before - in_b
    assert sum(r.get("deletionVector") is not None for r in removes) == 1  # c's file, purged
    adds = [a["add"] for a in actions if "add" in a]
    assert {a["partitionValues"]["p"] for a in adds} == {"a", "c"}
    assert all(a.get("deletionVector") is None and a["dataChange"] is False for a in adds)
    assert in_b <= live_paths(table)
    assert DeltaTable(str(table)).count() == 600 - 3
    plans = table / "_deltaplane" / "optimize-plans"  # the plan file the job read is gone
    assert not plans.exists() or not any(plans.iterdir())
