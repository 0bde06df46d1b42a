"""The log-tail sensor's deferrable contract with a real Airflow: api-server, dag-processor,
scheduler (LocalExecutor) and triggerer as separate processes (as in ``test_triggerer_crash``).

With ``[operators] default_deferrable = True`` and no ``deferrable`` argument, three sensors
wait in the triggerer:

* ``timeout`` (``timeout=10``, no new commits): fails as a sensor timeout, from its own
  trigger's timeout event, instead of staying deferred;
* ``gone``: its table is deleted while it waits: the trigger's error event fails it
  (``DeltaTriggerError``) instead of a wait that never ends;
* ``long`` (an hour): still deferred at the end, when the triggerer gets SIGTERM and must exit.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.devstack.ports import free_port
from deltaplane.engine import write_table
from tests.deploy.test_stack import Api
from tests.deploy.test_triggerer_crash import _env, _kill, _start, start_airflow

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("stack")]


def _states(db: Path) -> dict[str, str]:
    with sqlite3.connect(db, timeout=30) as con:
        rows = con.execute("SELECT task_id, state FROM task_instance WHERE dag_id = 'tails'").fetchall()
    return {task: state for task, state in rows}


DONE = ("failed", "success", "up_for_retry", "skipped")  # a resumed task passes through running first


def _until(what, check, processes, timeout: float = 240):
    deadline = time.time() + timeout
    while True:
        got = check()
        if got:
            return got
        for name, process in processes.items():
            assert process.poll() is None, f"{name} exited"
        assert time.time() < deadline, f"{what}: not after {timeout} s"
        time.sleep(1)


def _task_log(home: Path, task: str) -> str:
    files = sorted((home / "logs").rglob(f"task_id={task}/**/*.log"))
    return "\n".join(f.read_text(errors="replace") for f in files)


def test_deferred_sensors_time_out_fail_on_a_vanished_table_and_the_triggerer_stops(tmp_path):
    home, dags, logs = tmp_path / "airflow", tmp_path / "dags", tmp_path / "logs"
    for d in (home, dags, logs):
        d.mkdir()
    quiet, gone = str(tmp_path / "quiet"), str(tmp_path / "gone")
    for uri in (quiet, gone):
        write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))  # v0, nothing after it
    (dags / "tails.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG
            from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor

            with DAG("tails", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False,
                     default_args={{"retries": 0}}):
                DeltaLogTailSensor(task_id="timeout", table_uri={quiet!r}, after_version=0, timeout=10,
                                   poke_interval=1)
                DeltaLogTailSensor(task_id="gone", table_uri={gone!r}, after_version=0, timeout=3600,
                                   poke_interval=1)
                DeltaLogTailSensor(task_id="long", table_uri={quiet!r}, after_version=0, timeout=3600,
                                   poke_interval=1)
            """
        )
    )
    port = free_port()
    env = {**_env(home, dags, port), "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True"}
    db = home / "airflow.db"
    processes = start_airflow(env, logs, port)
    processes["triggerer"] = _start("triggerer", ["triggerer", "--skip-serve-logs"], env, logs)
    try:

        def parsed():
            with sqlite3.connect(db, timeout=30) as con:
                return con.execute("SELECT 1 FROM dag WHERE dag_id = 'tails'").fetchone()

        _until("the DAG parsed", parsed, processes)
        # through the REST API, as a user's script would (an `airflow dags trigger` costs 4 CPU-s)
        Api.login(f"http://127.0.0.1:{port}", home).trigger("tails")
        _until("every sensor deferred", lambda: set(_states(db).values()) == {"deferred"}, processes)
        shutil.rmtree(gone)
        states = _until(
            "the timeout and the vanished table ended their sensors",
            lambda: (s := _states(db))["timeout"] in DONE and s["gone"] in DONE and s,
            processes,
        )
        assert states == {"timeout": "failed", "gone": "failed", "long": "deferred"}, states
        timed_out = _task_log(home, "timeout")
        assert "deferring to the triggerer" in timed_out
        assert "DeltaTriggerTimeout" in timed_out or "AirflowSensorTimeout" in timed_out, timed_out[-3000:]
        vanished = _task_log(home, "gone")
        assert "DeltaTriggerError" in vanished and "TableNotFoundError" in vanished, vanished[-3000:]
        # SIGTERM while a trigger waits: the triggerer stops (its trigger goes back to the queue).
        triggerer = processes.pop("triggerer")
        triggerer.send_signal(signal.SIGTERM)
        try:
            code = triggerer.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the triggerer ignored SIGTERM for two minutes")
        with sqlite3.connect(db, timeout=30) as con:
            durations = dict(con.execute("SELECT task_id, duration FROM task_instance").fetchall())
        print({"triggerer_exit": code, "task_seconds": durations})
    finally:
        for process in processes.values():
            _kill(process, signal.SIGTERM)
