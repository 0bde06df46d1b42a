"""``make run``: the platform on embedded defaults, under ``./demo/``.

A local folder lake (``demo/lake``, the folders ``config/tables.yaml`` names, recreated), a
SQLite Airflow home (``demo/airflow``), the DAGs that
``dags/deltaplane_tables.py`` builds from ``config/tables.yaml``, run with ``dag.test()``:

1. four batches of taxi trips land as CSV files; the **ingest** DAG stages each one, the
   quality gate checks it, the commit makes it visible. The third batch is bad (a missing trip
   id, a negative fare): it is quarantined and the table does not change;
2. each commit task announces its commit on the table's Asset (the event that wakes the
   **consumer** DAG), and the consumer appends the new rows to ``trips_by_zone``;
3. the **maintenance** DAG compacts the small files, checkpoints, vacuums and writes manifests.

Then it prints what happened and how to open the UI (``make airflow``). Each task's log is
written where Airflow's UI reads it (``demo/airflow/logs/dag_id=.../attempt=1.log``, through
``task_logs.task_log_files``); whatever Airflow prints outside a task goes to ``demo/demo.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
from pathlib import Path

from deltaplane.devstack.stack import migrate_airflow_db

ROOT = Path(__file__).resolve().parent.parent


def _environment(demo: Path, config: Path) -> None:
    os.environ.update(
        {
            "AIRFLOW_HOME": str(demo / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "DELTAPLANE_CONFIG": str(config),
        }
    )


@contextlib.contextmanager
def _quiet(log: Path):
    """Send everything written to stdout/stderr (Airflow's task logs) to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _land(landing: Path, batch: int, *, bad: bool = False) -> int:
    """Write one batch of trips as three small CSV files; returns its rows."""
    rng = random.Random(batch)
    zones = ["Midtown", "Harlem", "SoHo", "Astoria", "Flushing"]
    landing.mkdir(parents=True, exist_ok=True)
    rows = 0
    for part in range(3):
        lines = ["trip_id,pickup_date,pickup_zone,fare"]
        for i in range(40):
            trip = batch * 1000 + part * 100 + i
            fare = round(rng.uniform(4, 80), 2)
            trip_id: str = str(trip)
            if bad and i == 7:
                trip_id = ""  # a missing id
            if bad and i == 9:
                fare = -12.5  # a negative fare
            lines.append(f"{trip_id},2026-11-{21 + i % 2:02d},{rng.choice(zones)},{fare}")
            rows += 1
        (landing / f"batch{batch}-part{part}.csv").write_text("\n".join(lines) + "\n")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo", default=str(ROOT / "demo"), help="the demo folder (recreated)")
    p.add_argument("--config", default=str(ROOT / "config" / "tables.yaml"))
    p.add_argument("--keep", action="store_true", help="keep an existing demo folder's Airflow home")
    args = p.parse_args(argv)
    demo = Path(args.demo).resolve()
    config_path = Path(args.config).resolve()
    from deltaplane.operators.factory.config import load_config

    config = load_config(config_path)
    for table in config.tables.values():  # a fresh lake: the configured local folders go
        paths = [table.uri]
        if table.ingest is not None:
            paths += [table.ingest.landing, table.ingest.staging or ""]
        if table.consumer is not None:
            paths.append(table.consumer.target)
        for path in paths:
            if path and "://" not in path:
                shutil.rmtree(path, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(demo / "airflow", ignore_errors=True)
    demo.mkdir(parents=True, exist_ok=True)
    (demo / "demo.log").write_text("")
    _environment(demo, config_path)
    print(f"deltaplane demo under {demo}")
    print("  Airflow home (SQLite):", demo / "airflow")
    try:
        migrate_airflow_db()
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    from deltaplane.devstack.task_logs import task_log_files

    with open(demo / "demo.log", "ab") as other, task_log_files(other):
        return _run(demo, config)


def _run(demo: Path, config) -> int:
    """The DAG runs and the report (``main`` set up the lake, the Airflow home and the logs)."""
    import runpy

    from deltaplane.engine import DeltaTable

    name, table = next(iter(config.tables.items()))
    assert table.ingest is not None and table.consumer is not None
    with _quiet(demo / "demo.log"):
        dags = runpy.run_path(str(ROOT / "dags" / "deltaplane_tables.py"))
    ingest = dags[f"deltaplane_{name}_ingest"]
    consumer = dags[f"deltaplane_{name}_consumer"]
    maintenance = dags[f"deltaplane_{name}_maintenance"]
    landing = Path(table.ingest.landing)
    print(f"\n1. ingest ({table.ingest.format} batches -> stage -> quality gate -> commit)")
    for batch in range(1, 5):
        bad = batch == 3
        rows = _land(landing, batch, bad=bad)
        with _quiet(demo / "demo.log"):
            run = ingest.test()
        gate = _xcom(run, "quality_gate") or {}
        commit = _xcom(run, "commit") or {}
        if gate.get("success"):
            print(
                f"   batch {batch}: {rows} rows passed {gate['evaluated']} expectations"
                f" -> version {commit.get('version')}"
            )
        else:
            failed = ", ".join(
                f"{f['expectation']}({f['kwargs'].get('column')}): {f['unexpected_count']}"
                for f in gate.get("failed", [])
            )
            print(f"   batch {batch}: REJECTED ({failed}); quarantined at {gate.get('quarantine')}")
        # The commit task announced its commit on the table's Asset (its XCom keeps the event):
        # the event that wakes the consumer DAG.
        event = commit.get("event") if not bad else None
        if event is not None:
            with _quiet(demo / "demo.log"):
                consumed = consumer.test()
            result = _xcom(consumed, "consume") or {}
            print(
                f"      Asset event: version {event['payload']['version']}"
                f" ({event['payload']['rowsAdded']} rows) "
                f"-> consumer appended {result.get('rows', 0)} rows to {Path(table.consumer.target).name}"
            )
    trips = DeltaTable(table.uri)
    files_before = trips.snapshot.num_files
    print("\n2. maintenance (auto-optimize -> compact -> checkpoint -> vacuum -> manifest)")
    with _quiet(demo / "demo.log"):
        run = maintenance.test()
    decision = _xcom(run, "auto_optimize") or {}
    compact = _xcom(run, "compact") or {}
    vacuum = _xcom(run, "vacuum") or {}
    trips = DeltaTable(table.uri)
    print(f"   auto-optimize: {decision.get('action')}: {'; '.join(decision.get('reasons', []))}")
    if compact.get("num_files_removed"):
        print(
            f"   compact: {compact['num_files_removed']} files -> {compact['num_files_added']}"
            f" ({compact.get('engine')}, dataChange=false)"
        )
    else:
        print("   compact: skipped, nothing to do")
    print(
        f"   vacuum: deleted {vacuum.get('files')} unreferenced files;"
        f" manifests in {table.uri}/_symlink_format_manifest"
    )
    # OPTIMIZE is announced on the maintenance Asset, never on the table's: no consumer run.
    optimize = (compact.get("event") or {}).get("payload") or {}
    print(f"   the OPTIMIZE fired no consumer run: {'yes' if not optimize.get('dataChange') else 'NO'}")

    target = DeltaTable(table.consumer.target)
    quarantine = Path(table.uri) / "_quarantine"
    print("\n3. what is there now")
    print(
        f"   {name}: version {trips.version}, {trips.count()} rows,"
        f" {files_before} files before maintenance -> {trips.snapshot.num_files} after"
    )
    for h in trips.history(20)[::-1]:
        stamp = h.get("airflow", {})
        print(
            f"     v{h['version']:<3} {h['operation']:<24}"
            f" {stamp.get('dag_id', '')}.{stamp.get('task_id', '')}"
        )
    print(
        f"   {Path(table.consumer.target).name}: version {target.version},"
        f" {target.count()} rows (one per trip, exactly once)"
    )
    print(
        f"   quarantine: "
        f"{', '.join(str(p) for p in sorted(quarantine.iterdir())) if quarantine.exists() else 'none'}"
    )
    print(f"   task logs: {demo / 'airflow' / 'logs'} (a task's Logs tab in the UI)")
    print(f"   other output: {demo / 'demo.log'}")
    print("\nOpen the Airflow UI on these DAGs and tables: make airflow  (then http://127.0.0.1:8080)")
    return 0


def _xcom(run, task_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id, key="return_value")
            .one_or_none()
        )
        if row is None:
            return None
        return json.loads(row.value) if isinstance(row.value, str | bytes) else row.value


if __name__ == "__main__":
    raise SystemExit(main())
