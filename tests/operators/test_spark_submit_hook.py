"""``DeltaSparkSubmitHook`` and the operators that submit through it, with a real ``dag.test()`` and
the real ``spark-submit``: Spark conf secrets never on a command line; the hook used from a
user's task; what an operator planned is what the job does, even when the table changes in
between; a driver killed with SIGKILL leaves the table consistent and the retry does the work
exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from tests.operators.conftest import HOME, task_states, xcom
from tests.operators.test_spark_operator_safety import (
    all_xcoms,
    assert_none_left,
    load_tasks,
    run_beside,
    run_loaded,
    small_files,
    tries,
)
from tests.proctree import CmdlineSampler, SubmitWatcher, alive, descendants, snapshot, survivors

pytestmark = [pytest.mark.external, pytest.mark.airflow]


class Hold:
    """Freezes (SIGSTOP) the first ``spark-submit`` of ``job`` as soon as it appears, before its
    Python driver starts, runs ``action`` while it is frozen, then lets it go on (SIGCONT): a
    change made by ``action`` lands after the operator planned and before the job could look."""

    def __init__(self, job: str, action):
        self.watcher = SubmitWatcher(job)
        self.action = action
        self.result: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        held: dict = {}
        try:
            self.watcher.wait_for(lambda tree: tree or None, interval=0.005)
            while True:  # stop the tree, and whatever it started meanwhile, until it stands still
                tree = self.watcher.record()
                new = [p for key, p in ((p.pid, p) for p in tree.values()) if key not in held]
                if not new:
                    break
                for proc in new:
                    # A short-lived helper of the launcher script may have exited: nothing to hold.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGSTOP)
                    held[proc.pid] = proc
            self.result["driver_started"] = self.watcher.driver(tree) is not None
            self.result["action"] = self.action()
        except BaseException as e:
            self.result["error"] = repr(e)
        finally:
            for proc in held.values():
                if alive(proc):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGCONT)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.thread.join(30)

    def check(self):
        assert "error" not in self.result, self.result
        assert self.result.get("driver_started") is False, "the job's driver was already running"


def test_spark_conf_secrets_are_never_on_a_command_line(airflow_db, tmp_path, monkeypatch, capfd):
    """A connection whose ``extra.spark_conf`` holds a secret-looking setting with a unique
    marker value: a Spark compaction runs; no process's command line ever holds the marker (every
    process on the machine is sampled, the spark-submit tree among them), nor does the task log or
    an XCom; Spark got the settings (the event log they turn on exists); the properties file that
    carried them is gone."""
    marker = f"dpconf-{uuid.uuid4().hex}"
    events = tmp_path / "events"
    events.mkdir()
    conf = {
        "spark.hadoop.fs.s3a.secret.key": marker,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.dir": events.as_uri(),
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_CONF",
        json.dumps({"conn_type": "deltaplane", "extra": {"spark_master": "local[2]", "spark_conf": conf}}),
    )
    uri = str(tmp_path / "t")
    small_files(uri)
    dag, path = load_tasks(
        "conf_secret",
        "from deltaplane.operators.operators.maintenance import DeltaCompactionOperator",
        f"""
        DeltaCompactionOperator(task_id="compact", table_uri={uri!r}, deltaplane_conn_id="lake_conf",
                                spark_threshold_bytes=0)
        """,
    )
    with CmdlineSampler(marker) as sampler:
        run = run_loaded(dag, path)
    logs = "".join(capfd.readouterr())
    assert task_states(run) == {"compact": "success"}, logs[-3000:]
    assert xcom(run, "compact")["engine"] == "spark"
    assert sampler.samples > 50 and any("compact.py" in c for c in sampler.commands_seen)
    assert sampler.hits == [], sampler.hits[:3]
    assert marker not in logs and not [x for x in all_xcoms(run) if marker in x]
    for file in (HOME / "logs").rglob("*"):
        if file.is_file():
            assert marker.encode() not in file.read_bytes(), file
    assert [f for f in events.rglob("*") if f.is_file()], "the connection's spark_conf did not reach Spark"
    files = re.findall(r"--properties-file (\S+)", logs)
    assert files and not any(Path(f).exists() for f in files), files
    assert "spark.hadoop.fs.s3a.secret.key=***" in logs  # the setting is named, its value masked
    assert DeltaTable(uri).history()[0]["operation"] == "OPTIMIZE"


def test_the_hook_from_a_task_returns_metrics_and_maps_exit_codes(airflow_db, tmp_path, monkeypatch, capfd):
    """A user's own task submits through the hook: the metrics come back as the task's XCom and
    the job's stderr is in the task log; a job that refuses its input (exit code 3) fails the
    task on its first try although it has retries."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_HOOK",
        json.dumps({"conn_type": "deltaplane", "extra": {"spark_master": "local[2]"}}),
    )
    uri = str(tmp_path / "t")
    small_files(uri)
    dag, path = load_tasks(
        "hook_task",
        """
        from deltaplane.operators import DeltaSparkSubmitHook

        r = dict(retries=2, retry_delay=datetime.timedelta(0))
        """,
        f"""
        @task(**r)
        def compact():
            return DeltaSparkSubmitHook(deltaplane_conn_id="lake_hook").submit("compact", ["--table", {uri!r}])

        @task(**r)
        def bad_delete():
            return DeltaSparkSubmitHook("lake_hook").submit("dml", ["--table", {uri!r}, "--delete", "nope = 1"])

        compact() >> bad_delete()
        """,
    )
    run = run_loaded(dag, path)
    logs = "".join(capfd.readouterr())
    assert task_states(run) == {"compact": "success", "bad_delete": "failed"}, logs[-3000:]
    assert tries(run) == {"compact": 1, "bad_delete": 1}
    metrics = xcom(run, "compact")
    assert metrics["job"] == "compact" and metrics["version"] == 3 and metrics["num_files_removed"] == 3
    assert "spark: " in logs and "exit code 3" in logs and "SparkJobInputError" in logs and "nope" in logs
    assert DeltaTable(uri).version == 3


def test_the_dml_job_does_the_work_the_operator_planned(airflow_db, tmp_path, capfd):
    """The DML operator plans a DELETE at version 3 (one candidate file: ids 30..39); before its
    Spark job can look at the table, rows matching the predicate are appended (version 4). The
    job carries out the operator's plan: it deletes the planned file's rows, at the plan's version
    (rebased over the blind append, as an in-process DELETE would be), and leaves the new rows,
    which the operator never planned to touch."""
    uri = str(tmp_path / "t")
    small_files(uri, files=4)

    def append():
        write_table(uri, pa.table({"id": pa.array([35, 36], pa.int64())}), mode="append")
        return DeltaTable(uri).version

    dag, path = load_tasks(
        "planned_dml",
        "from deltaplane.operators.operators.dml import DeltaDMLOperator",
        f"""
        DeltaDMLOperator(task_id="delete", table_uri={uri!r}, operation="delete", predicate="id >= 30",
                         spark_threshold_bytes=0)
        """,
    )
    with Hold("dml", append) as hold:
        run = run_loaded(dag, path)
    logs = "".join(capfd.readouterr())
    hold.check()
    assert hold.result["action"] == 4
    assert task_states(run) == {"delete": "success"}, logs[-3000:]
    assert tries(run) == {"delete": 1}
    out = xcom(run, "delete")
    assert out["engine"] == "spark" and out["candidateFiles"] == 1, out
    assert int(out["operationMetrics"]["numDeletedRows"]) == 10
    table = DeltaTable(uri)
    assert sorted(table.to_arrow()["id"].to_pylist()) == [*range(30), 35, 36]
    history = table.history()
    assert [h["operation"] for h in history[:2]] == ["DELETE", "WRITE"]
    assert history[0]["readVersion"] == 3
    assert not list((Path(uri) / "_deltaplane").rglob("*.json"))  # the plan file is removed


def test_the_spark_stage_loads_the_files_the_operator_listed(airflow_db, tmp_path, capfd):
    """``ingest --stage``: the operator lists the landing folder (one file) and decides there is a
    batch; a second file lands before the job starts. The batch is the listed file only: the job
    reads it alone, it alone is claimed (``_staged/<batch>``, until its commit); the late file
    waits for the next run."""
    uri = str(tmp_path / "t")
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text("id,g\n" + "\n".join(f"{i},{i % 2}" for i in range(5)) + "\n")

    def land():
        (landing / "b[1].csv").write_text("id,g\n100,0\n101,1\n")
        return True

    manifest = tmp_path / "staging" / "batch1.json"
    manifest.parent.mkdir()
    dag, path = load_tasks(
        "pinned_stage",
        "from deltaplane.operators.operators.spark import DeltaSparkJobOperator",
        f"""
        DeltaSparkJobOperator(task_id="stage", table_uri={uri!r}, job="ingest",
                              job_args=["--source", {str(landing)!r} + "/*.csv",
                                        "--stage", {str(manifest)!r}])
        """,
    )
    with Hold("ingest", land) as hold:
        run = run_loaded(dag, path)
    logs = "".join(capfd.readouterr())
    hold.check()
    assert task_states(run) == {"stage": "success"}, logs[-3000:]
    out = xcom(run, "stage")
    assert out["rows"] == 5, out
    assert [Path(p).name for p in out["landing_files"]] == ["a.csv"]
    assert sorted(p.name for p in landing.iterdir() if p.is_file()) == ["b[1].csv"]
    assert (landing / "_staged" / "batch1" / "a.csv").exists()


def _driver_kill_dag(name: str, uri: str):
    return load_tasks(
        name,
        "from deltaplane.operators.operators.dml import DeltaDMLOperator",
        f"""
        DeltaDMLOperator(task_id="delete", table_uri={uri!r}, operation="delete", predicate="id >= 15",
                         spark_threshold_bytes=0, retries=1, retry_delay=datetime.timedelta(0))
        """,
    )


def test_kill_9_of_the_driver_mid_job_then_the_retry_deletes_once(airflow_db, tmp_path, capfd):
    """While the DELETE's Spark tasks run (held with SIGSTOP until then, so the kill surely comes
    before the commit), the job's Python driver is killed with SIGKILL. The try fails (retryable), nothing is
    committed, no process of that submit is left (the held workers included); the retry deletes
    the rows, in exactly one DELETE commit."""
    uri = str(tmp_path / "t")
    small_files(uri, files=3)
    watcher = SubmitWatcher("dml")
    result: dict = {}

    def kill_driver():
        held = []
        try:
            daemons = watcher.wait_for(
                lambda tree: [p for p in tree.values() if "pyspark.daemon" in p.text] or None, timeout=180
            )
            held = [daemons[0], *descendants(daemons[0].pid).values()]
            for proc in held:
                os.kill(proc.pid, signal.SIGSTOP)
            tree = watcher.record()
            result["version_at_kill"] = DeltaTable(uri).version
            driver = watcher.driver(tree)
            os.kill(driver.pid, signal.SIGKILL)
            for proc in held:  # the workers go on, as they would had they not been held
                if alive(proc):
                    os.kill(proc.pid, signal.SIGCONT)
            result["first_tree"] = list(tree.values())
            result["left"] = survivors(result["first_tree"], within=15)
        except BaseException as e:
            result["error"] = repr(e)
        finally:
            for proc in held:
                if alive(proc):
                    os.kill(proc.pid, signal.SIGKILL)

    dag, path = _driver_kill_dag("driver_kill", uri)
    run = run_beside(dag, path, kill_driver)
    logs = "".join(capfd.readouterr())
    assert "error" not in result, result
    assert result["version_at_kill"] == 2
    assert_none_left(result["left"])
    assert task_states(run) == {"delete": "success"}, logs[-3000:]
    assert tries(run) == {"delete": 2}
    assert "deltaplane.spark_jobs.dml failed with exit code" in logs or "killed by" in logs
    table = DeltaTable(uri)
    assert sorted(table.to_arrow()["id"].to_pylist()) == list(range(15))
    operations = [h["operation"] for h in table.history()]
    assert operations.count("DELETE") == 1 and table.version == 3, operations


def test_kill_9_after_the_commit_then_the_retry_commits_nothing_more(airflow_db, tmp_path, capfd):
    """The DELETE's commit lands, then spark-submit (the driver JVM) is killed with SIGKILL before
    the task hears of it: the try fails, and the retry finds the work committed (its work key)
    and commits nothing: one DELETE."""
    uri = str(tmp_path / "t")
    small_files(uri, files=3)
    watcher = SubmitWatcher("dml")
    result: dict = {}
    commit = Path(uri) / "_delta_log" / f"{3:020d}.json"

    def kill_after_commit():
        try:
            watcher.wait_for(lambda tree: tree or None, timeout=180)
            deadline = time.monotonic() + 180
            while not commit.exists() and time.monotonic() < deadline:
                watcher.record()
                time.sleep(0.002)
            tree = watcher.record()
            top = watcher.submits(snapshot())[0]  # spark-submit: by now the driver JVM itself
            result["alive_at_kill"] = alive(top)
            os.kill(top.pid, signal.SIGKILL)
            result["left"] = survivors(list(tree.values()), within=15)
        except BaseException as e:
            result["error"] = repr(e)

    dag, path = _driver_kill_dag("commit_kill", uri)
    run = run_beside(dag, path, kill_after_commit)
    logs = "".join(capfd.readouterr())
    assert "error" not in result, result
    assert result["alive_at_kill"], "spark-submit had already ended: the kill came too late"
    assert_none_left(result["left"])
    assert task_states(run) == {"delete": "success"}, logs[-3000:]
    assert tries(run) == {"delete": 2}
    assert "killed by SIGKILL" in logs
    out = xcom(run, "delete")
    assert out["skipped"] is True and out["version"] == 3, out
    table = DeltaTable(uri)
    assert sorted(table.to_arrow()["id"].to_pylist()) == list(range(15))
    assert [h["operation"] for h in table.history()].count("DELETE") == 1 and table.version == 3
