"""Spark-backed operators through a real ``dag.test()`` and the real ``spark-submit``: secrets
never reach a command line, a log, an XCom, a commit or a file; the job's exit code decides
whether Airflow retries; killing the task stops the whole ``spark-submit`` process tree."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.spark_jobs.submit import STOP_GRACE_SECONDS
from tests.operators.conftest import DAGS, HOME, dag_file, task_states, xcom
from tests.proctree import CmdlineSampler, SubmitWatcher, descendants, survivors
from tests.s3_auth import authenticated_seaweedfs

pytestmark = [pytest.mark.external, pytest.mark.airflow]


def load_dag(name: str, source: str):
    """Write ``source`` as ``<dags>/<name>.py`` and import it: the DAG object, before running it
    (the tests reach the running operator through it)."""
    path = DAGS / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag, path


def load_tasks(name: str, head: str, tasks: str):
    """``load_dag`` of the DAG file ``dag_file`` writes."""
    return load_dag(name, dag_file(name, head, tasks))


def run_loaded(dag, path: Path):
    try:
        return dag.test()
    finally:
        path.unlink()


def run_beside(dag, path: Path, action, timeout: float = 60):
    """``run_loaded`` while ``action`` runs in a thread of its own, waiting for it up to
    ``timeout`` seconds after the run: the run."""
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    run = run_loaded(dag, path)
    thread.join(timeout)
    return run


def assert_none_left(left: list) -> None:
    """No process of a stopped ``spark-submit`` tree is left (``survivors``' answer)."""
    assert left == [], [f"{p.pid} {p.text[:100]}" for p in left]


def tries(run) -> dict[str, int]:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id).all()
        return {ti.task_id: ti.try_number for ti in tis}


def all_xcoms(run) -> list[str]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id).all()
        return [json.dumps(r.value, default=str) if not isinstance(r.value, str) else r.value for r in rows]


def small_files(uri: str, files: int = 3, rows: int = 10, storage_options=None, names: bool = False) -> None:
    for i in range(files):
        ids = list(range(i * rows, (i + 1) * rows))
        data = {"id": pa.array(ids, pa.int64())}
        if names:
            data["name"] = ["abc" if x % 2 else str(x) for x in ids]
        write_table(uri, pa.table(data), mode="append", storage_options=storage_options)


def test_no_secret_in_argv_logs_xcom_commits_or_files(airflow_db, tmp_path, monkeypatch, capfd):
    """A connection whose secret is a unique marker; a Spark compaction of a table on a SeaweedFS
    that checks that secret (so the job really got it), a Spark DELETE on a local table and a
    Spark ingest (the path that hands storage options to Spark's own writer) into another. While
    they run, every process's command line is sampled as ``ps`` would show it; afterwards the task
    logs, XComs, the tables' commitInfo and every file of every table are searched."""
    marker = f"dpsecret-{uuid.uuid4().hex}"
    with authenticated_seaweedfs(tmp_path / "s3", marker) as s3:
        assert s3.connection()["password"] == marker
        monkeypatch.setenv("AIRFLOW_CONN_LAKE_SECRET", json.dumps(s3.connection()))
        remote, local, loaded = s3.uri("secret-scan"), str(tmp_path / "local"), str(tmp_path / "loaded")
        small_files(remote, storage_options=s3.options())
        small_files(local)
        landing = tmp_path / "landing"
        landing.mkdir()
        (landing / "a.csv").write_text("id,g\n" + "\n".join(f"{i},{i % 2}" for i in range(20)) + "\n")
        dag, path = load_tasks(
            "secret_scan",
            """
            from deltaplane.operators.operators.dml import DeltaDMLOperator
            from deltaplane.operators.operators.maintenance import DeltaCompactionOperator
            from deltaplane.operators.operators.spark import DeltaSparkJobOperator

            c = dict(deltaplane_conn_id="lake_secret", spark_threshold_bytes=0)
            """,
            f"""
            compact = DeltaCompactionOperator(task_id="compact_s3", table_uri={remote!r}, **c)
            delete = DeltaDMLOperator(task_id="delete_local", table_uri={local!r}, operation="delete",
                                      predicate="id < 5", **c)
            ingest = DeltaSparkJobOperator(task_id="ingest_local", table_uri={loaded!r}, job="ingest",
                                           deltaplane_conn_id="lake_secret",
                                           job_args=["--source", {str(landing)!r} + "/*.csv"])
            compact >> delete >> ingest
            """,
        )
        started = time.monotonic()
        with CmdlineSampler(marker) as sampler:
            run = run_loaded(dag, path)
        took = time.monotonic() - started
        out, err = capfd.readouterr()
        logs = out + err

        assert set(task_states(run).values()) == {"success"}, task_states(run)
        assert xcom(run, "compact_s3")["engine"] == "spark" and xcom(run, "delete_local")["engine"] == "spark"
        assert xcom(run, "ingest_local")["rows"] == 20
        # The sampler really watched both jobs, and no command line ever held the secret.
        assert sampler.samples > 50, sampler.samples
        assert any("compact.py" in c for c in sampler.commands_seen), sampler.commands_seen
        assert any("dml.py" in c for c in sampler.commands_seen), sampler.commands_seen
        assert any("ingest.py" in c for c in sampler.commands_seen), sampler.commands_seen
        assert sampler.hits == [], sampler.hits[:3]
        # Task logs: dag.test() writes them to the console; anything under $AIRFLOW_HOME/logs too.
        assert "spark: " in logs and "deltaplane.spark_jobs.compact" in logs  # the job's stderr was streamed
        assert marker not in logs
        for file in (HOME / "logs").rglob("*"):
            if file.is_file():
                assert marker.encode() not in file.read_bytes(), file
        # XComs, commitInfo, and every byte of both tables.
        assert not [x for x in all_xcoms(run) if marker in x]
        for uri, options in ((remote, s3.options()), (local, None), (loaded, None)):
            history = DeltaTable(uri, storage_options=options).history()
            assert history[0]["operation"] in ("OPTIMIZE", "DELETE", "CREATE TABLE AS SELECT")
            assert marker not in json.dumps(history, default=str)
        assert DeltaTable(local).count() == 25 and DeltaTable(loaded).count() == 20
        for table in (local, loaded):
            for file in Path(table).rglob("*"):
                if file.is_file():
                    assert marker.encode() not in file.read_bytes(), file
        keys = 0
        for key, body in s3.objects(remote.split("/", 3)[3]):
            keys += 1
            assert marker.encode() not in body, key
        assert keys > 5
    print(f"secret scan: dag.test with three spark-submits took {took:.1f} s, {sampler.samples} samples")


def test_no_secret_in_quarantine_files_or_ops_pages(airflow_db, tmp_path, monkeypatch, capfd):
    """The in-process paths with the same kind of connection: a batch staged to a table on the
    credential-checking SeaweedFS, rejected by the quality gate and quarantined there; then the
    ops view's JSON and pages for that table. The secret is in none of them, nor in the logs or
    XComs."""
    from deltaplane.operators.plugins.ops_view import (
        Entry,
        detail_page,
        list_page,
        table_detail,
        table_summary,
    )

    marker = f"dpsecret-{uuid.uuid4().hex}"
    with authenticated_seaweedfs(tmp_path / "s3", marker) as s3:
        assert s3.connection()["password"] == marker
        monkeypatch.setenv("AIRFLOW_CONN_LAKE_SECRET", json.dumps(s3.connection()))
        table = s3.uri("gated")
        small_files(table, storage_options=s3.options(), names=True)
        landing = tmp_path / "landing"
        landing.mkdir()
        (landing / "b.csv").write_text("id,name\n1,a\n,b\n3,c\n")  # a null id: the gate rejects it
        dag, path = load_tasks(
            "secret_gate",
            f"""
            from deltaplane.operators.operators.commit import DeltaCommitOperator
            from deltaplane.operators.operators.ingest import DeltaStageOperator
            from deltaplane.operators.operators.quality import DeltaQualityGateOperator

            T, c = {table!r}, dict(deltaplane_conn_id="lake_secret")
            M = "{{{{ ti.xcom_pull(task_ids='stage')['manifest'] }}}}"
            """,
            f"""
            stage = DeltaStageOperator(task_id="stage", table_uri=T, landing={str(landing)!r},
                                       staging=T + "/_deltaplane/staging", source_format="csv", **c)
            gate = DeltaQualityGateOperator(task_id="gate", table_uri=T, staged_manifest=M, **c,
                expectations=[{{"expectation": "expect_column_values_to_not_be_null",
                                "kwargs": {{"column": "id"}}}}])
            stage >> gate >> DeltaCommitOperator(task_id="commit", table_uri=T, staged_manifest=M, **c)
            """,
        )
        run = run_loaded(dag, path)
        assert task_states(run) == {"stage": "success", "gate": "failed", "commit": "upstream_failed"}
        quarantined = [key for key, _ in s3.objects(table.split("/", 3)[3] + "/_quarantine/")]
        assert any(k.endswith("rejection.json") for k in quarantined), quarantined
        assert any(k.endswith("validation.json") for k in quarantined), quarantined
        for key, body in s3.objects(table.split("/", 3)[3]):
            assert marker.encode() not in body, key
        out, err = capfd.readouterr()
        assert marker not in out + err
        assert not [x for x in all_xcoms(run) if marker in x]
        config = tmp_path / "tables.yaml"
        config.write_text(json.dumps({"tables": {"gated": {"uri": table, "conn_id": "lake_secret"}}}))
        monkeypatch.setenv("DELTAPLANE_CONFIG", str(config))
        from deltaplane.operators.factory.config import load_config

        settings = load_config(config).tables["gated"]
        entry = Entry("gated", settings, ("secret_gate",))
        summary, detail = table_summary(entry), table_detail(entry)
        assert "error" not in summary and summary["files"] == 3, summary
        pages = list_page([summary]).body.decode() + detail_page(detail).body.decode()
        assert marker not in json.dumps([summary, detail], default=str) and marker not in pages


def test_bad_input_fails_the_task_without_retries(airflow_db, tmp_path, capfd):
    """Exit code 3 (bad input) from the job: the task fails on its first try although
    ``retries=2``; the error names the exit code and the engine's error."""
    uri = str(tmp_path / "t")
    small_files(uri, names=True)
    dag, path = load_tasks(
        "bad_input",
        """
        from deltaplane.operators.operators.dml import DeltaDMLOperator
        from deltaplane.operators.operators.spark import DeltaSparkJobOperator

        r = dict(retries=2, retry_delay=datetime.timedelta(0))
        """,
        f"""
        DeltaSparkJobOperator(task_id="unknown_column", table_uri={uri!r}, job="dml",
                              job_args=["--delete", "no_such_column = 1"], **r)
        DeltaDMLOperator(task_id="fails_on_the_data", table_uri={uri!r}, operation="delete",
                         predicate="CAST(name AS INT) = 3", spark_threshold_bytes=0, **r)
        """,
    )
    run = run_loaded(dag, path)
    logs = "".join(capfd.readouterr())
    assert task_states(run) == {"unknown_column": "failed", "fails_on_the_data": "failed"}
    assert tries(run) == {"unknown_column": 1, "fails_on_the_data": 1}
    assert "exit code 3" in logs and "InvalidPredicateError" in logs and "no_such_column" in logs
    assert "Failed to parse string: 'abc'" in logs
    assert DeltaTable(uri).version == 2


def test_a_commit_conflict_is_retried_and_then_lands(airflow_db, tmp_path, capfd):
    """A real conflict: after the Spark compaction planned its bins and before it commits, a
    DELETE commits a rewrite of one of their files. The job plans before it starts its Spark
    session, whose first PySpark worker process is held with SIGSTOP for the moment of that
    commit, so the order is certain. The job exits 4; Airflow retries; the second try compacts."""
    uri = str(tmp_path / "t")
    small_files(uri, files=4)
    watcher = SubmitWatcher("compact")
    done: dict = {}

    def interfere():
        try:

            def workers(tree):
                daemons = [p for p in tree.values() if "pyspark.daemon" in p.text]
                return daemons if daemons else None

            daemon = watcher.wait_for(workers, timeout=180)[0]
            held = [daemon, *descendants(daemon.pid).values()]
            for proc in held:
                os.kill(proc.pid, signal.SIGSTOP)
            try:
                done["delete"] = DeltaTable(uri).delete("id = 0").version
            finally:
                for proc in held:
                    os.kill(proc.pid, signal.SIGCONT)
        except BaseException as e:  # reported by the test
            done["error"] = repr(e)

    dag, path = load_tasks(
        "conflict",
        "from deltaplane.operators.operators.spark import DeltaSparkJobOperator",
        f"""
        DeltaSparkJobOperator(task_id="compact", table_uri={uri!r}, job="compact",
                              retries=1, retry_delay=datetime.timedelta(0))
        """,
    )
    run = run_beside(dag, path, interfere, timeout=30)
    logs = "".join(capfd.readouterr())
    assert "error" not in done, done
    assert done["delete"] == 4
    assert task_states(run) == {"compact": "success"}
    assert tries(run) == {"compact": 2}
    assert "exit code 4" in logs and "Concurrent" in logs
    history = DeltaTable(uri).history()
    assert [h["operation"] for h in history[:2]] == ["OPTIMIZE", "DELETE"]
    assert history[0]["airflow"]["try_number"] == 2
    assert DeltaTable(uri).count() == 39 and len(DeltaTable(uri).file_uris()) == 1


def _kill_while_running(dag, path, kill) -> tuple[object, SubmitWatcher, dict]:
    """Run the DAG; once the job's Spark tasks run (PySpark's daemon is up), ``kill()``; then
    record which processes of that submit are left."""
    watcher = SubmitWatcher("compact")
    result: dict = {}

    def killer():
        try:
            watcher.wait_for(lambda tree: any("pyspark.daemon" in p.text for p in tree.values()), timeout=180)
            watcher.record()
            started = time.monotonic()
            kill()
            result["kill_seconds"] = time.monotonic() - started
            # The stop is SIGTERM, then SIGKILL after STOP_GRACE_SECONDS: a SIGTERM to the task
            # returns at once and a JVM may take the whole grace to exit, so look past it.
            result["left"] = survivors(list(watcher.seen.values()), within=STOP_GRACE_SECONDS + 10)
        except BaseException as e:
            result["error"] = repr(e)

    run = run_beside(dag, path, killer)
    return run, watcher, result


def test_on_kill_stops_the_spark_submit_and_everything_under_it(airflow_db, tmp_path, capfd):
    uri = str(tmp_path / "t")
    small_files(uri)
    dag, path = load_tasks(
        "on_kill",
        "from deltaplane.operators.operators.spark import DeltaSparkJobOperator",
        f"""
        DeltaSparkJobOperator(task_id="job", table_uri={uri!r}, job="compact")
        """,
    )
    run, watcher, result = _kill_while_running(dag, path, dag.get_task("job").on_kill)
    logs = "".join(capfd.readouterr())
    assert "error" not in result, result
    kinds = {("java" if "java" in p.text.split(" ")[0] else "python") for p in watcher.seen.values()}
    assert kinds == {"java", "python"} and len(watcher.seen) >= 3, watcher.seen
    assert_none_left(result["left"])
    assert task_states(run) == {"job": "failed"}
    assert "SIGTERM" in logs
    assert DeltaTable(uri).version == 2
    print(f"on_kill: {len(watcher.seen)} processes stopped in {result['kill_seconds']:.2f} s")


def test_sigterm_stops_the_spark_job_of_any_operator(airflow_db, tmp_path, capfd):
    """What Airflow's supervisor does to a task it kills (SIGTERM to the task process), here for
    the compaction operator: its Spark job is stopped too."""
    uri = str(tmp_path / "t")
    small_files(uri)
    dag, path = load_tasks(
        "sigterm",
        "from deltaplane.operators.operators.maintenance import DeltaCompactionOperator",
        f"""
        DeltaCompactionOperator(task_id="compact", table_uri={uri!r}, spark_threshold_bytes=0)
        """,
    )
    run, watcher, result = _kill_while_running(dag, path, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert "error" not in result, result
    assert len(watcher.seen) >= 3
    assert_none_left(result["left"])
    assert task_states(run) == {"compact": "failed"}
    assert DeltaTable(uri).version == 2
