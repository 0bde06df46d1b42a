"""The DAG author's guide works as written: its four DAG files are taken from docs/dag-authors.md
verbatim and run with real Airflow (``dag.test()``) on a lake in a temporary folder, the way a new
user would try them: several runs, a run with nothing landed, a bad batch, reruns."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.operators.conftest import DAGS, task_states
from tests.readme import python_blocks

pytestmark = pytest.mark.airflow

_NAME = re.compile(r"# dags/(\w+)\.py\n")


def readme_dags() -> dict[str, str]:
    """``{file name: source}`` of every block of the README and the docs site that starts with
    ``# dags/<name>.py``."""
    return {_NAME.match(b.source).group(1): b.source for b in python_blocks(dag_files=True)}


def _load(name: str, source: str):
    path = DAGS / f"readme_{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"readme_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _land(lake: Path, name: str, rows: list[tuple[int, float]]) -> None:
    folder = lake / "landing" / "trips"
    folder.mkdir(parents=True, exist_ok=True)
    body = "trip_id,fare\n" + "".join(f"{i},{fare}\n" for i, fare in rows)
    (folder / f"{name}.csv").write_text(body)


def _rows(uri: Path, column: str = "trip_id") -> list:
    from deltaplane.engine import DeltaTable

    return sorted(DeltaTable(str(uri)).to_arrow(columns=[column]).column(column).to_pylist())


def test_the_readme_has_the_four_dags():
    assert set(readme_dags()) == {
        "trips_ingest",
        "trips_maintenance",
        "trips_health_maintenance",
        "trips_consumer",
    }


def test_the_readme_dags_run_as_written(airflow_db, tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    monkeypatch.setenv("LAKE", str(lake))
    sources = readme_dags()
    ingest = _load("trips_ingest", sources["trips_ingest"]).dag
    maintenance = _load("trips_maintenance", sources["trips_maintenance"]).dag
    consumer = _load("trips_consumer", sources["trips_consumer"])

    # Ingest: one batch per run, a run with nothing landed, a bad batch, a clean batch after it.
    for batch in range(5):
        _land(lake, f"b{batch}", [(batch * 10 + i, 5.0 + i) for i in range(3)])
        run = ingest.test()
        assert set(task_states(run).values()) == {"success"}, task_states(run)
    assert _rows(lake / "trips") == sorted(b * 10 + i for b in range(5) for i in range(3))
    run = ingest.test()  # nothing landed
    assert task_states(run) == {"stage": "success", "quality_gate": "skipped", "commit": "skipped"}
    _land(lake, "bad", [(100, 1.0), (101, -3.0)])  # a negative fare breaks an expectation
    run = ingest.test()
    assert task_states(run)["quality_gate"] == "failed" and task_states(run)["commit"] != "success"
    assert list((lake / "trips" / "_quarantine").glob("*/rejection.json"))
    assert 100 not in _rows(lake / "trips")
    _land(lake, "b5", [(50, 9.0)])
    assert set(task_states(ingest.test()).values()) == {"success"}  # the next run is not blocked

    # Maintenance: six small files are compacted, checkpointed; vacuum keeps the retention.
    from deltaplane.engine import DeltaTable

    before = DeltaTable(str(lake / "trips"))
    run = maintenance.test()
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    after = DeltaTable(str(lake / "trips"))
    assert len(after.file_uris()) < len(before.file_uris())
    assert "OPTIMIZE" in [c.get("operation") for c in after.history(10)]
    run = maintenance.test()  # again: nothing to compact, still green
    assert set(task_states(run).values()) == {"success"}

    # Consumers: the sensor-driven copy and the event-driven copy get every row once.
    expected = _rows(lake / "trips")
    run = consumer.dag.test()
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    assert _rows(lake / "trips_copy") == expected
    run = consumer.events_dag.test()
    assert set(task_states(run).values()) == {"success"}
    assert _rows(lake / "trips_events") == expected

    # A quiet hour: nothing new. The sensor gives up at its timeout (the README's 50 minutes,
    # shortened here) and the run is green with its work skipped; it used to fail red every hour.
    wait = consumer.dag.get_task("wait_for_commits")
    assert wait.soft_fail and wait.timeout < 3600 and wait.deferrable  # as the README deploys it
    wait.timeout = 2
    run = consumer.dag.test()
    assert task_states(run) == {"wait_for_commits": "skipped", "consume": "skipped", "ack_commits": "skipped"}
    assert run.state == "success"
    assert _rows(lake / "trips_copy") == expected

    _land(lake, "b6", [(60, 3.0), (61, 4.0)])
    ingest.test()
    consumer.dag.test()
    consumer.events_dag.test()
    consumer.events_dag.test()  # a repeated event copies nothing twice
    assert _rows(lake / "trips_copy") == _rows(lake / "trips_events") == sorted([*expected, 60, 61])

    # The health-driven maintenance DAG: scheduled on the health Asset, run by hand here (its
    # trigger's part is tests/operators/test_health_trigger.py and the stack test's).
    health = _load("trips_health_maintenance", sources["trips_health_maintenance"]).dag
    (asset,) = health.timetable.asset_condition.objects
    assert asset.uri.endswith("/trips/_deltaplane/health") and asset.watchers
    for batch in range(7, 11):
        _land(lake, f"b{batch}", [(batch * 10, 1.0)])
        ingest.test()
    files = len(DeltaTable(str(lake / "trips")).file_uris())
    run = health.test()
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    assert len(DeltaTable(str(lake / "trips")).file_uris()) == 1 < files  # compacted
    run = health.test()  # again: nothing is due, every task says why
    assert set(task_states(run).values()) == {"success"}
