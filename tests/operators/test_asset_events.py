"""The Asset model: a consumer scheduled on a table's Asset gets one event per data commit and
none for maintenance, whichever announces it (a task's outlet, the ``AssetWatcher``'s trigger, or
both on one Asset), and every event has one ``extra`` shape; ``start=`` is one option with one
default for the sensor and the event trigger.

Real ``dag.test()`` runs write the commits and store the outlet events; the event trigger reads
the same table. ``tests/deploy/test_asset_events.py`` counts consumer runs with the real
scheduler and triggerer."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import InvalidArgumentError
from deltaplane.operators.triggers.commits import DeltaCommitEventTrigger
from tests.operators.conftest import asset_events, run_dag, task_states

pytestmark = pytest.mark.airflow

# The keys that summarise one commit, in an event's payload and in each of the sensor's
# ``commits``: written down, not read from the code.
COMMIT_SUMMARY_KEYS = {
    "version",
    "timestamp",
    "operation",
    "kind",
    "dataChange",
    "rowsAdded",
    "rowsDeleted",
    "rowsRestored",
    "filesAdded",
    "filesRemoved",
    "newFiles",
}
# The keys of every event's payload, outlet or watcher.
PAYLOAD_KEYS = COMMIT_SUMMARY_KEYS | {"status", "table", "ops_view"}

PRODUCER = """
import pendulum
from airflow.sdk import DAG
from deltaplane.operators import (
    DeltaCommitOperator, DeltaCompactionOperator, DeltaDMLOperator, DeltaVacuumOperator,
)

with DAG("producer", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False) as dag:
    (
        DeltaCommitOperator(task_id="append_a", table_uri={table!r}, source={a!r})
        >> DeltaCommitOperator(task_id="append_b", table_uri={table!r}, source={b!r})
        >> DeltaCompactionOperator(task_id="optimize", table_uri={table!r})
        >> DeltaVacuumOperator(task_id="vacuum", table_uri={table!r}, dry_run=False, retention_hours=0,
                               enforce_retention=False)
        >> DeltaDMLOperator(task_id="delete", table_uri={table!r}, operation="delete", predicate="id = 1")
    )
"""


def land(folder, ids: list[int]) -> str:
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), folder / "part.parquet")
    return str(folder)


def drain(trigger: DeltaCommitEventTrigger, count: int) -> list[dict]:
    """The first ``count`` events of ``trigger.run()`` (fails if they do not come)."""

    async def scenario():
        events = trigger.run()
        try:
            return [(await asyncio.wait_for(anext(events), 15)).payload for _ in range(count)]
        finally:
            await events.aclose()

    return asyncio.run(scenario())


def test_one_event_per_data_commit_whoever_announces_it(airflow_db, tmp_path):
    table = tmp_path / "t"
    uri = str(table)
    a, b = land(tmp_path / "in" / "a", [0, 1, 2]), land(tmp_path / "in" / "b", [3, 4])
    run = run_dag("producer", PRODUCER.format(table=uri, a=a, b=b))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    history = {h["version"]: h["operation"] for h in DeltaTable(uri).history()}
    assert sorted(history.items()) == [
        (0, "CREATE TABLE AS SELECT"),
        (1, "WRITE"),
        (2, "OPTIMIZE"),
        (3, "VACUUM START"),
        (4, "VACUUM END"),
        (5, "DELETE"),
    ]

    # Outlets: the data commits on the table's Asset, maintenance on its maintenance Asset.
    events = asset_events(f"file://{uri}")
    assert [(e["payload"]["version"], e["payload"]["kind"]) for e in events] == [
        (0, "append"),
        (1, "append"),
        (5, "delete"),
    ]
    maintenance = asset_events(f"file://{uri}/_deltaplane/maintenance")
    assert [(e["payload"]["version"], e["payload"]["operation"]) for e in maintenance] == [
        (2, "OPTIMIZE"),
        (4, "VACUUM END"),
    ]
    for extra in events + maintenance:
        assert set(extra) == {"from_trigger", "payload"} and extra["from_trigger"] is False
        assert set(extra["payload"]) == PAYLOAD_KEYS and extra["payload"]["table"] == uri

    # The watcher on the same Asset (from version 0) leaves the tasks' commits to their outlets
    # and announces the commit no task announced, in the same payload shape.
    DeltaTable(uri).append(pa.table({"id": pa.array([9], pa.int64())}))  # v6: a script's commit
    trigger = DeltaCommitEventTrigger(table_uri=uri, watermark_key="both", poke_interval=0.05)
    (payload,) = drain(trigger, 1)
    assert (payload["version"], payload["kind"], payload["rowsAdded"]) == (6, "append", 1)
    assert set(payload) == PAYLOAD_KEYS


def test_a_watcher_alone_announces_every_data_commit_from_version_0(airflow_db, tmp_path):
    """Writers that announce nothing (``emit_asset=False``, a Spark job or script outside
    Airflow): the watcher announces each data commit once, from version 0 by default (it used to
    start at the version current when it first ran: versions 0-2 never produced events)."""
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": pa.array([0, 1], pa.int64())}))  # v0
    DeltaTable(uri).append(pa.table({"id": pa.array([2], pa.int64())}))  # v1
    DeltaTable(uri).optimize(min_num_files=1)  # v2: no event
    DeltaTable(uri).delete("id = 0")  # v3
    got = drain(DeltaCommitEventTrigger(table_uri=uri, watermark_key="w", poke_interval=0.05), 3)
    assert [(p["version"], p["kind"]) for p in got] == [(0, "append"), (1, "append"), (3, "delete")]
    from_v1 = drain(DeltaCommitEventTrigger(table_uri=uri, watermark_key="n", start=1, poke_interval=0.05), 2)
    assert [p["version"] for p in from_v1] == [1, 3]


def test_start_is_one_option_with_one_default_for_the_sensor_and_the_trigger(airflow_db, tmp_path):
    import pendulum
    from airflow.sdk import DAG

    from deltaplane.engine.watermarks import read_watermark
    from deltaplane.operators import DeltaLogTailSensor

    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))  # v0
    DeltaTable(uri).append(pa.table({"id": pa.array([1], pa.int64())}))  # v1
    DeltaTable(uri).append(pa.table({"id": pa.array([2], pa.int64())}))  # v2
    with DAG("starts", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        sensors = {
            name: DeltaLogTailSensor(
                task_id=f"s_{name}", table_uri=uri, **({} if name == "default" else {"start": value})
            )
            for name, value in (("default", None), ("earliest", "earliest"), ("latest", "LATEST"), ("v1", 1))
        }
    assert {name: s._start() for name, s in sensors.items()} == {
        "default": -1,
        "earliest": -1,
        "latest": 2,
        "v1": 0,
    }
    # "latest" is recorded the first time: a later run starts after v2, not after a newer version.
    assert read_watermark(uri, "starts.s_latest") == 2
    DeltaTable(uri).append(pa.table({"id": pa.array([3], pa.int64())}))  # v3
    assert sensors["latest"]._start() == 2
    trigger = DeltaCommitEventTrigger(table_uri=uri, watermark_key="t", poke_interval=0.05, start="latest")
    assert trigger.serialize()[1]["start"] == "latest"
    DeltaTable(uri).append(pa.table({"id": pa.array([4], pa.int64())}))  # v4
    # The trigger's latest is v4 when it first runs: it announces v5 on.

    async def scenario():
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        try:
            while read_watermark(uri, "t") is None:  # until the trigger has taken its start
                await asyncio.sleep(0.02)
            DeltaTable(uri).append(pa.table({"id": pa.array([5], pa.int64())}))  # v5
            return (await asyncio.wait_for(first, 15)).payload
        finally:
            await events.aclose()

    assert asyncio.run(scenario())["version"] == 5
    # Wrong values fail when the DAG file is parsed, naming the task.
    for bad in ("newest", -1, True, 1.5, None):
        with (
            pytest.raises(
                InvalidArgumentError, match=r"s_bad.*start must be 'earliest', 'latest' or a version"
            ),
            DAG("bad_starts", schedule=None, start_date=pendulum.datetime(2026, 1, 1)),
        ):
            DeltaLogTailSensor(task_id="s_bad", table_uri=uri, start=bad)
        with pytest.raises(InvalidArgumentError, match=r"DeltaCommitEventTrigger.*start must be"):
            DeltaCommitEventTrigger(table_uri=uri, start=bad)


# The sensor's XCom, each key written down as the README documents it.
SENSOR_KEYS = {
    "table",
    "operation",
    "version",
    "read_version",
    "committed",
    "already_applied",
    "metrics",
    "reason",
    "engine",
    "work",
    "event",
    "skipped",
    "operationMetrics",
    "after_version",
    "latest_version",
    "commits",
}
COMMIT_KEYS = COMMIT_SUMMARY_KEYS | {"files"}

GUESSES = """
import pendulum
from airflow.sdk import DAG, task
from deltaplane.operators import DeltaLogTailSensor, DeltaWatermarkOperator

with DAG("guesses", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
    wait = DeltaLogTailSensor(task_id="wait", table_uri={uri!r}, watermark_key="g", mode="poke", timeout=5)

    @task
    def commits_only(xcom):
        return xcom["commits"]

    listed = commits_only(wait.output)
    # Two wrong guesses: the sensor's whole XCom as a version, and a list as the sensor's result.
    DeltaLogTailSensor(task_id="after", table_uri={uri!r}, timeout=5, mode="poke",
                       after_version="{{{{ ti.xcom_pull(task_ids='wait') }}}}").set_upstream(wait)
    DeltaWatermarkOperator(task_id="ack", table_uri={uri!r}, sensor_task_id="commits_only").set_upstream(listed)
"""


def test_the_sensor_xcom_has_the_documented_keys_and_wrong_guesses_say_what_they_expected(
    airflow_db, tmp_path, capfd
):
    from tests.operators.conftest import xcom

    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": pa.array([0, 1], pa.int64())}))  # v0
    DeltaTable(uri).optimize(min_num_files=1)  # v1: not a match
    DeltaTable(uri).append(pa.table({"id": pa.array([2], pa.int64())}))  # v2
    run = run_dag("guesses", GUESSES.format(uri=uri))
    states = task_states(run)
    assert states == {"wait": "success", "commits_only": "success", "after": "failed", "ack": "failed"}, (
        states
    )
    out = xcom(run, "wait")
    assert set(out) == SENSOR_KEYS
    assert (
        out["operation"],
        out["version"],
        out["committed"],
        out["after_version"],
        out["latest_version"],
    ) == (
        "LOG TAIL",
        None,
        False,
        -1,
        2,
    )
    assert [c["version"] for c in out["commits"]] == [0, 2]
    assert all(set(c) == COMMIT_KEYS for c in out["commits"])
    assert out["commits"][1]["rowsAdded"] == 1 and out["commits"][1]["files"][0].endswith(".parquet")
    log = capfd.readouterr().out
    assert "after: after_version must render to a version (an int >= -1), got \"{'table'" in log
    assert "ack: 'commits_only' left no log-tail result to acknowledge" in log and "got list" in log
