"""Consumer runs counted with a real Airflow (api-server, dag-processor, scheduler with
LocalExecutor, triggerer; as in ``test_triggerer_crash``): a DAG scheduled on a table's Asset
runs once per data commit and never for maintenance, whether the Asset gets its events from the
writing tasks' outlets only, from an ``AssetWatcher`` only, or from both.

Three tables, each with its consumer DAG:

* ``w`` (watcher only): the consumer's Asset has a ``DeltaCommitEventTrigger`` watcher and the
  writing tasks announce nothing (``emit_asset=False``, as a writer outside Airflow);
* ``o`` (outlets only): the consumer is scheduled on the plain ``table_asset``; the writing
  tasks announce their commits;
* ``b`` (both): a watcher and announcing tasks on the same Asset.

Each step runs alone (a producer DAG run, or a commit from this process: a writer outside
Airflow) and the test waits until the consumers have settled before the next one, so the runs
of each step are counted. Before the Asset model, ``o`` and ``b`` ran for OPTIMIZE and both VACUUM
commits, and ``b`` ran twice per append.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import sqlite3
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.devstack.ports import free_port
from deltaplane.engine import DeltaTable, write_table
from tests.deploy.test_deferred_sensor import _until as _until_default
from tests.deploy.test_stack import Api
from tests.deploy.test_triggerer_crash import _env, _kill, _start, start_airflow

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("stack")]

TABLES = ("w", "o", "b")
SETTLE = 15.0  # seconds without a new consumer run or event before a step counts as done
_until = functools.partial(_until_default, timeout=300)  # seven steps of a busy stack

DAGS = """
import pendulum
from airflow.sdk import DAG, AssetWatcher, task
from deltaplane.operators import (
    DeltaCommitEventTrigger, DeltaCommitOperator, DeltaCompactionOperator, DeltaDMLOperator,
    DeltaVacuumOperator, table_asset,
)

LAKE = {lake!r}
START = pendulum.datetime(2026, 1, 1)
ANNOUNCE = {{"w": False, "o": True, "b": True}}  # the writing tasks' emit_asset


def schedule(name):
    uri = f"{{LAKE}}/{{name}}"
    if name == "o":
        return [table_asset(uri)]
    watcher = AssetWatcher(name=f"watch_{{name}}", trigger=DeltaCommitEventTrigger(
        table_uri=uri, watermark_key=f"consumer_{{name}}", poke_interval=0.2))
    return [table_asset(uri, watchers=[watcher])]


for name in ANNOUNCE:
    with DAG(f"consumer_{{name}}", schedule=schedule(name), start_date=START, catchup=False):

        @task(task_id="record")
        def record(triggering_asset_events=None):
            return sorted(
                e.extra["payload"]["version"] for events in triggering_asset_events.values() for e in events
            )

        record()

steps = {{
    "append": lambda name, uri: DeltaCommitOperator(
        task_id=f"append_{{name}}", table_uri=uri, emit_asset=ANNOUNCE[name],
        source=f"{{LAKE}}/landing/{{name}}/{{{{{{{{ dag_run.conf['batch'] }}}}}}}}"),
    "optimize": lambda name, uri: DeltaCompactionOperator(
        task_id=f"optimize_{{name}}", table_uri=uri, emit_asset=ANNOUNCE[name]),
    "vacuum": lambda name, uri: DeltaVacuumOperator(
        task_id=f"vacuum_{{name}}", table_uri=uri, dry_run=False, retention_hours=0, enforce_retention=False,
        emit_asset=ANNOUNCE[name]),
    "delete": lambda name, uri: DeltaDMLOperator(
        task_id=f"delete_{{name}}", table_uri=uri, operation="delete", predicate="id = 1",
        emit_asset=ANNOUNCE[name]),
}}
for step, make in steps.items():
    with DAG(f"step_{{step}}", schedule=None, start_date=START, catchup=False, max_active_tasks=3):
        for name in ANNOUNCE:
            make(name, f"{{LAKE}}/{{name}}")
"""


def _query(db: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(db, timeout=30) as con:
        return con.execute(sql, args).fetchall()


def _consumer_runs(db: Path, tables=TABLES) -> dict[str, list[tuple[str, str]]]:
    rows = _query(db, "SELECT dag_id, run_id, state FROM dag_run WHERE dag_id LIKE 'consumer_%' ORDER BY id")
    out: dict[str, list[tuple[str, str]]] = {name: [] for name in tables}
    for dag_id, run_id, state in rows:
        name = dag_id.removeprefix("consumer_")
        if name in out:  # the module's other test has consumers of its own on the same stack
            out[name].append((run_id, state))
    return out


def _events(db: Path, uri: str) -> list[dict]:
    rows = _query(
        db,
        "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ? ORDER BY e.id",
        uri,
    )
    return [json.loads(extra) if isinstance(extra, str) else extra for (extra,) in rows]


def _settle(db: Path, lake: Path, processes, tables=TABLES) -> dict[str, int]:
    """Wait until no consumer run or table event has appeared for ``SETTLE`` seconds and every
    consumer run has finished; the number of consumer runs per table."""

    def snapshot():
        runs = _consumer_runs(db, tables)
        events = {name: len(_events(db, f"file://{lake / name}")) for name in tables}
        return runs, events

    last, since = snapshot(), time.time()
    deadline = time.time() + 300
    while True:
        time.sleep(1)
        now = snapshot()
        if now != last:
            last, since = now, time.time()
            continue
        finished = all(state in ("success", "failed") for runs in now[0].values() for _, state in runs)
        if finished and time.time() - since >= SETTLE:
            failed = [r for runs in now[0].values() for r in runs if r[1] != "success"]
            assert not failed, failed
            return {name: len(runs) for name, runs in now[0].items()}
        for name, process in processes.items():
            assert process.poll() is None, f"{name} exited"
        assert time.time() < deadline, f"the consumers never settled: {now}"


@dataclasses.dataclass
class Stack:
    home: Path
    dags: Path
    port: int
    processes: dict

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """One Airflow (api-server, dag-processor, scheduler, triggerer) for the module's tests: each
    test writes its own tables and DAG file (its own DAG ids and Asset URIs) into it."""
    root = tmp_path_factory.mktemp("asset-events")
    home, dags, logs = root / "airflow", root / "dags", root / "logs"
    for d in (home, dags, logs):
        d.mkdir()
    port = free_port()
    env = _env(home, dags, port)
    processes = start_airflow(env, logs, port)
    processes["triggerer"] = _start("triggerer", ["triggerer", "--skip-serve-logs"], env, logs)
    try:
        yield Stack(home, dags, port, processes)
    finally:
        for process in processes.values():
            _kill(process, signal.SIGTERM)


def _land(lake: Path, batch: str, ids: list[int]) -> None:
    for name in TABLES:
        folder = lake / "landing" / name / batch
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), folder / "part.parquet")


def test_one_consumer_run_per_data_commit_with_watcher_outlets_or_both(stack, tmp_path):
    home, dags, port, processes, db = stack.home, stack.dags, stack.port, stack.processes, stack.db
    lake = tmp_path / "lake"
    lake.mkdir()
    for name in TABLES:  # v0 of each table: written outside Airflow, before the consumers exist
        write_table(str(lake / name), pa.table({"id": pa.array([0, 1, 2], pa.int64())}))
    _land(lake, "b1", [10, 11])
    _land(lake, "b2", [20, 21])
    (dags / "assets.py").write_text(textwrap.dedent(DAGS.format(lake=str(lake))))
    counted: dict[str, dict[str, int]] = {}
    try:
        _until(
            "the DAGs parsed",
            lambda: len(_query(db, "SELECT dag_id FROM dag WHERE dag_id LIKE 'step_%'")) == 4,
            processes,
        )

        @functools.cache
        def api() -> Api:  # the REST API a user's script triggers through (an `airflow` CLI costs 4 CPU-s)
            return Api.login(f"http://127.0.0.1:{port}", home)

        def step(label: str, run_step):
            before = _consumer_runs(db)
            run_step()
            after = _settle(db, lake, processes)
            counted[label] = {name: after[name] - len(before[name]) for name in TABLES}

        def producer(dag_id: str, conf: dict | None = None):
            def run():
                run_id = f"{dag_id}_{len(counted)}"
                body = {"dag_run_id": run_id, "logical_date": None, "conf": conf or {}}
                status, answer = api().call("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
                assert status in (200, 201), answer

                def finished():
                    rows = _query(db, "SELECT state FROM dag_run WHERE run_id = ?", run_id)
                    return rows and rows[0][0] in ("success", "failed") and rows[0][0]

                assert _until(f"{dag_id} ran", finished, processes) == "success"

            return run

        def outside():  # a writer outside Airflow (a script, a Spark job): announced by watchers only
            for name in TABLES:
                DeltaTable(str(lake / name)).append(pa.table({"id": pa.array([99], pa.int64())}))

        step("start (v0 by a script)", lambda: None)
        step("append", producer("step_append", {"batch": "b1"}))
        step("append again", producer("step_append", {"batch": "b2"}))
        step("OPTIMIZE", producer("step_optimize"))
        step("VACUUM START + END", producer("step_vacuum"))
        step("DELETE", producer("step_delete"))
        step("append by a script", outside)
    finally:
        (dags / "assets.py").unlink()  # its watchers stop polling for the module's next test
    print(json.dumps(counted))
    history = {
        name: [h["operation"] for h in reversed(DeltaTable(str(lake / name)).history())] for name in TABLES
    }
    for name in TABLES:
        assert history[name] == [
            "CREATE TABLE AS SELECT",
            "WRITE",
            "WRITE",
            "OPTIMIZE",
            "VACUUM START",
            "VACUUM END",
            "DELETE",
            "WRITE",
        ], history[name]
    # Runs per step, per table: one per data commit, none for maintenance; the outlets-only
    # consumer does not hear of commits made outside deltaplane tasks (nothing announces them).
    assert counted == {
        "start (v0 by a script)": {"w": 1, "o": 0, "b": 1},
        "append": {"w": 1, "o": 1, "b": 1},
        "append again": {"w": 1, "o": 1, "b": 1},
        "OPTIMIZE": {"w": 0, "o": 0, "b": 0},
        "VACUUM START + END": {"w": 0, "o": 0, "b": 0},
        "DELETE": {"w": 1, "o": 1, "b": 1},
        "append by a script": {"w": 1, "o": 0, "b": 1},
    }, counted
    # The events on each table's Asset: each data commit once, from one producer, one shape.
    announced = {}
    for name in TABLES:
        events = _events(db, f"file://{lake / name}")
        assert all(set(e) == {"from_trigger", "payload"} for e in events), events
        announced[name] = [(e["payload"]["version"], e["from_trigger"]) for e in events]
    assert announced == {
        "w": [(0, True), (1, True), (2, True), (6, True), (7, True)],
        "o": [(1, False), (2, False), (6, False)],
        "b": [(0, True), (1, False), (2, False), (6, False), (7, True)],
    }, announced
    maintenance = {
        name: [
            e["payload"]["operation"] for e in _events(db, f"file://{lake / name}/_deltaplane/maintenance")
        ]
        for name in TABLES
    }
    assert maintenance == {"w": [], "o": ["OPTIMIZE", "VACUUM END"], "b": ["OPTIMIZE", "VACUUM END"]}


RESTORE_DAG = """
import pendulum
from airflow.sdk import DAG, AssetWatcher
from deltaplane.operators import DeltaCommitEventTrigger, DeltaConsumeOperator, table_asset

watcher = AssetWatcher(name="watch_r", trigger=DeltaCommitEventTrigger(
    table_uri={uri!r}, watermark_key="consumer_r", poke_interval=0.2))
with DAG("consumer_r", schedule=[table_asset({uri!r}, watchers=[watcher])],
         start_date=pendulum.datetime(2026, 1, 1), catchup=False, max_active_runs=1):
    DeltaConsumeOperator(task_id="consume", table_uri={target!r}, source_uri={uri!r}, on_change="skip")
"""


def test_a_restore_through_the_real_watcher_is_not_copied_twice(stack, tmp_path):
    """The issue's scenario end to end: 10 rows, DELETE them (skipped), RESTORE to before the
    DELETE, then 110 more rows: the copy holds 120 rows, each once (it held 130)."""
    dags, processes, db, lake = stack.dags, stack.processes, stack.db, tmp_path / "lake"
    lake.mkdir()
    uri, target = str(lake / "r"), str(lake / "copy")
    write_table(uri, pa.table({"id": pa.array(range(10), pa.int64())}))  # v0
    (dags / "restore.py").write_text(textwrap.dedent(RESTORE_DAG.format(uri=uri, target=target)))
    runs = []

    def copied() -> list[int]:
        # The copy's folder holds its first data files before its first commit: a table only then.
        return (
            sorted(DeltaTable(target).to_arrow(columns=["id"])["id"].to_pylist())
            if DeltaTable.is_deltatable(target)
            else []
        )

    try:
        _until("the first copy", lambda: len(copied()) == 10, processes)
        runs.append(_settle(db, lake, processes, tables=("r",))["r"])
        DeltaTable(uri).delete("id >= 0")  # v1
        runs.append(_settle(db, lake, processes, tables=("r",))["r"])
        DeltaTable(uri).restore(version=0)  # v2: the 10 rows come back
        runs.append(_settle(db, lake, processes, tables=("r",))["r"])
        DeltaTable(uri).append(pa.table({"id": pa.array(range(10, 120), pa.int64())}))  # v3
        runs.append(_settle(db, lake, processes, tables=("r",))["r"])
    finally:
        (dags / "restore.py").unlink()
    print(json.dumps({"consumer_runs_after_each_step": runs}))
    assert runs == [1, 2, 3, 4]  # the DELETE and the RESTORE woke the consumer too: it skipped them
    assert copied() == list(range(120))
    kinds = [e["payload"]["kind"] for e in _events(db, f"file://{uri}")]
    assert kinds == ["append", "delete", "restore", "append"]
