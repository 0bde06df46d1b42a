"""A real triggerer killed with SIGKILL again and again while commits land: every data commit still
reaches a consumer DAG run, and a table's health-scheduled maintenance DAG still fires by itself.

Airflow's api-server (127.0.0.1), dag-processor, scheduler (LocalExecutor) and triggerer run as
separate processes on a temporary SQLite home (the scheduler and triggerer skip their log
servers). A DAG is scheduled on a table's Asset watched by ``DeltaCommitEventTrigger`` and
copies new rows with ``DeltaConsumeOperator``. A writer commits appends (and OPTIMIZEs, which are
not news) while the test kills the triggerer's whole process group with SIGKILL at random
moments once it is running the watcher, and starts a new one. At the end every data commit must
be the payload of a stored Asset event, a consumer run must have read it (its ``consume`` XCom
lists the version) and its rows must be in the target once. Repeated events are allowed (at least
once); losses are not.

Airflow links an event to a DAG run by the time the run was queued: events stored while a run is
already queued (``max_active_runs`` holding it back) wake that run but are not listed among its
consumed events. The run still starts after them, and the consumer reads every commit since its
own watermark, so the data-level check is the one that must hold; the number of such unlisted
events is reported.

Beside it, a second table (``events``, partitioned, deletion vectors) is configured with
``schedules: {maintenance: health}`` in a ``tables.yaml`` and its DAGs come from the factory, as a
user's would. The same writer streams small appends into it and runs a DELETE every few commits;
nothing runs its maintenance but its ``DeltaHealthEventTrigger`` (in the triggerer being killed).
The maintenance DAG must fire by itself and compact the table, every DELETE must succeed (one that
loses to the compaction is planned again: a user's write never fails because of maintenance), and
the table must hold exactly the rows written and not deleted.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.devstack.ports import free_port
from deltaplane.devstack.stack import migrate_airflow_db
from deltaplane.engine import DeltaTable, write_table
from tests.proctree import stop_group

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("stack")]

DATA_COMMITS = 59


def _env(home: Path, dags: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__TRIGGERER__SHARED_STREAM_ACK_TIMEOUT": "30",
            # A killed triggerer's trigger goes to the next one within seconds, not 30 s.
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "4",
            "AIRFLOW__API_AUTH__JWT_SECRET": "deltaplane-test-secret",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        }
    )
    return env


def _wait_for_watcher(log: Path, offset: int, process: subprocess.Popen, timeout: float = 120) -> None:
    """Until the triggerer started at ``offset`` of its log runs the watcher."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, log.read_text()[-5000:]
        with open(log, "rb") as f:
            f.seek(offset)
            if re.search(rb"trigger ID \d+ starting", f.read()):
                return
        time.sleep(0.2)
    raise AssertionError(f"the triggerer did not start the watcher in {timeout} s")


def _start(name: str, args: list[str], env: dict, logs: Path) -> subprocess.Popen:
    with open(logs / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed whole, by our PID
        )


def start_airflow(env: dict, logs: Path, port: int) -> dict[str, subprocess.Popen]:
    """``airflow db migrate``, then the api-server (on 127.0.0.1:``port``), the dag-processor and
    the scheduler (no log server), each its own process group; the caller starts the triggerer."""
    migrate_airflow_db(env, timeout=300)
    return {
        "api-server": _start(
            "api-server", ["api-server", "--host", "127.0.0.1", "--port", str(port)], env, logs
        ),
        "dag-processor": _start("dag-processor", ["dag-processor"], env, logs),
        "scheduler": _start("scheduler", ["scheduler", "--skip-serve-logs"], env, logs),
    }


def _kill(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    stop_group(process, sig)


def _events(db: Path, uri: str) -> tuple[list[int], set[int]]:
    """Versions announced by the watcher (every stored event, repeats included) and the ids of
    the events some DAG run consumed."""
    with sqlite3.connect(db, timeout=30) as con:
        rows = con.execute(
            "SELECT e.id, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ?",
            (uri,),
        ).fetchall()
        consumed = {r[0] for r in con.execute("SELECT event_id FROM dagrun_asset_event").fetchall()}
    versions, consumed_versions = [], set()
    for event_id, extra in rows:
        payload = (json.loads(extra) if isinstance(extra, str) else extra or {}).get("payload") or {}
        if "version" in payload:
            versions.append(int(payload["version"]))
            if event_id in consumed:
                consumed_versions.add(int(payload["version"]))
    return versions, consumed_versions


def _consumed_versions(db: Path) -> set[int]:
    """The source versions the consumer runs read (their ``consume`` XComs)."""
    with sqlite3.connect(db, timeout=30) as con:
        rows = con.execute(
            "SELECT value FROM xcom WHERE task_id = 'consume' AND key = 'return_value'"
        ).fetchall()
    out: set[int] = set()
    for (value,) in rows:
        parsed = json.loads(value) if isinstance(value, str | bytes) else value
        out |= set((parsed or {}).get("source_versions") or [])
    return out


def _maintenance_runs(db: Path) -> list[tuple[str, str, dict | None]]:
    """(run type, state, compact XCom) of each run of the health-scheduled maintenance DAG."""
    with sqlite3.connect(db, timeout=30) as con:
        runs = con.execute(
            "SELECT run_id, run_type, state FROM dag_run WHERE dag_id = 'deltaplane_events_maintenance'"
        ).fetchall()
        out = []
        for run_id, run_type, state in runs:
            row = con.execute(
                "SELECT value FROM xcom WHERE dag_id = 'deltaplane_events_maintenance' AND run_id = ? "
                "AND task_id = 'compact' AND key = 'return_value'",
                (run_id,),
            ).fetchone()
            value = None if row is None else row[0]
            out.append((run_type, state, json.loads(value) if isinstance(value, str | bytes) else value))
    return out


def test_every_data_commit_reaches_a_consumer_run_while_the_triggerer_is_killed(tmp_path):
    home, dags, logs = tmp_path / "airflow", tmp_path / "dags", tmp_path / "logs"
    for d in (home, dags, logs):
        d.mkdir()
    uri, target = str(tmp_path / "table"), str(tmp_path / "copy")
    asset_uri = f"file://{uri}"
    write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))  # v0: before the watcher starts
    (dags / "watched.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG, Asset, AssetWatcher
            from deltaplane.operators.operators.consume import DeltaConsumeOperator
            from deltaplane.operators.triggers.commits import DeltaCommitEventTrigger

            table = Asset({asset_uri!r}, watchers=[AssetWatcher(name="commits",
                trigger=DeltaCommitEventTrigger(table_uri={uri!r}, watermark_key="crash", start_after=0,
                                                poke_interval=0.2))])

            with DAG("consumer", schedule=[table], start_date=pendulum.datetime(2026, 1, 1), catchup=False,
                     max_active_runs=1, default_args={{"retries": 3, "retry_delay": 1}}):
                DeltaConsumeOperator(task_id="consume", table_uri={target!r}, source_uri={uri!r})
            """
        )
    )
    events = str(tmp_path / "events")
    events_schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    DeltaTable.create(
        events, events_schema, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"}
    )
    (tmp_path / "tables.yaml").write_text(
        textwrap.dedent(
            f"""
            tables:
              events:
                uri: {events}
                schedules: {{maintenance: health}}
                maintenance: {{min_small_files: 8, kinds: [compaction], poll_seconds: 0.5, yield_minutes: 0}}
            """
        )
    )
    (dags / "deltaplane_tables.py").write_text(
        textwrap.dedent(
            f"""
            # An Airflow DAG file: the factory's DAGs, as dags/deltaplane_tables.py makes them.
            from deltaplane.operators.factory.config import read_config
            from deltaplane.operators.factory.dags import build_dags

            for _id, _dag in build_dags(read_config({str(tmp_path / "tables.yaml")!r}).config,
                                        fileloc=__file__).items():
                globals()[_id] = _dag
            """
        )
    )
    events_ids: set[int] = set()
    dml_failures: list[str] = []
    port = free_port()
    env = _env(home, dags, port)
    db = home / "airflow.db"
    processes = start_airflow(env, logs, port)
    log = logs / "triggerer.log"
    triggerer = _start("triggerer", ["triggerer", "--skip-serve-logs"], env, logs)
    data_versions: list[int] = []
    kills = 0
    try:
        _wait_for_watcher(log, 0, triggerer, timeout=240)
        done = threading.Event()

        def write():
            rng = random.Random(7)
            try:
                for i in range(1, DATA_COMMITS + 1):
                    result = DeltaTable(uri).append(pa.table({"id": pa.array([i], pa.int64())}))
                    data_versions.append(result.version)
                    part = "ab"[i % 2]
                    DeltaTable(events).append(
                        pa.table({"id": [i, 1000 + i], "p": [part, part]}, events_schema)
                    )
                    events_ids.update((i, 1000 + i))
                    if i % 4 == 0:  # a user's DELETE, racing the maintenance DAG's compaction
                        try:
                            DeltaTable(events).delete(f"id = {1000 + i - 2} OR id = {1000 + i - 1}")
                            events_ids.difference_update((1000 + i - 2, 1000 + i - 1))
                        except Exception as e:  # counted, never hidden
                            dml_failures.append(repr(e))
                    if i % 10 == 0:
                        DeltaTable(uri).optimize(min_num_files=2)  # not news
                    time.sleep(rng.uniform(0.5, 2.0))
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()
        rng = random.Random(11)
        while not done.is_set():
            time.sleep(rng.uniform(0.3, 3.0))  # anywhere: between a yield and the store, too
            _kill(triggerer)
            kills += 1
            offset = log.stat().st_size
            triggerer = _start("triggerer", ["triggerer", "--skip-serve-logs"], env, logs)
            _wait_for_watcher(log, offset, triggerer)
        writer.join()
        assert len(data_versions) == DATA_COMMITS
        deadline = time.time() + 120
        while not set(data_versions) <= set(_events(db, asset_uri)[0]):
            assert time.time() < deadline, (
                f"lost: {sorted(set(data_versions) - set(_events(db, asset_uri)[0]))} after {kills} kills"
            )
            time.sleep(1)
        deadline = time.time() + 300
        while True:
            read = _consumed_versions(db)
            copied = (
                DeltaTable(target).to_arrow()["id"].to_pylist() if DeltaTable.is_deltatable(target) else []
            )
            if set(data_versions) <= read and set(range(1, DATA_COMMITS + 1)) <= set(copied):
                break
            assert time.time() < deadline, (
                f"never read by a consumer run: {sorted(set(data_versions) - read)}, rows missing: "
                f"{sorted(set(range(1, DATA_COMMITS + 1)) - set(copied))}"
            )
            time.sleep(2)
        deadline = time.time() + 300
        while not any(
            s == "success" and (x or {}).get("num_files_removed") for _, s, x in _maintenance_runs(db)
        ):
            assert time.time() < deadline, f"the maintenance DAG never compacted: {_maintenance_runs(db)}"
            time.sleep(2)
    finally:
        _kill(triggerer, signal.SIGTERM)
        for process in processes.values():
            _kill(process, signal.SIGTERM)
    announced, consumed = _events(db, asset_uri)
    optimize = {h["version"] for h in DeltaTable(uri).history() if h["operation"] == "OPTIMIZE"}
    assert not optimize & set(announced)  # OPTIMIZE is not news
    copied = DeltaTable(target).to_arrow()["id"].to_pylist()
    assert len(copied) == len(set(copied))  # repeated events never copy a row twice
    assert kills >= 5
    assert dml_failures == []
    runs = _maintenance_runs(db)
    assert {t for t, _, _ in runs} == {"asset_triggered"}, runs  # it fired by itself, only
    assert "OPTIMIZE" in [h["operation"] for h in DeltaTable(events).history()]
    assert sorted(DeltaTable(events).to_arrow()["id"].to_pylist()) == sorted(events_ids)
    print(
        json.dumps(
            {
                "data_commits": DATA_COMMITS,
                "kills": kills,
                "events": len(announced),
                "repeats": len(announced) - len(set(announced)),
                "lost": len(set(data_versions) - set(announced)),
                "events_not_listed_by_a_run": len(set(data_versions) - consumed),
                "maintenance_runs": [(t, s, (x or {}).get("num_files_removed")) for t, s, x in runs],
            }
        )
    )
