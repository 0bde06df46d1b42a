"""The log-tail sensor (poke and deferred) and the commit triggers, on real tables."""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow as pa
import pytest

from engine import DeltaTable, write_table
from operators.conditions import find_new_commits
from operators.triggers import DeltaCommitEventTrigger, DeltaCommitTrigger
from operators.watermarks import read_watermark
from tests.operators.conftest import run_dag, task_states, xcom

pytestmark = pytest.mark.xdist_group("airflow")


def rows(start: int, n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "part": [part] * n})


def make_table(uri: str) -> None:
    write_table(uri, rows(0, 5), partition_by=["part"])  # v0
    write_table(uri, rows(5, 5, "b"), mode="append")  # v1
    DeltaTable(uri).optimize(min_num_files=1)  # v2: no data change
    write_table(uri, rows(10, 5), mode="append")  # v3


def test_condition_filters_rewrites_operations_and_partitions(tmp_path):
    uri = str(tmp_path / "t")
    make_table(uri)
    DeltaTable(uri).delete("id = 0")  # v4
    result = find_new_commits(uri, 0)
    assert [c["version"] for c in result["commits"]] == [1, 3, 4] and result["latest_version"] == 4
    assert result["commits"][0]["rowsAdded"] == 5 and result["commits"][0]["files"][0].endswith(".parquet")
    assert [c["version"] for c in find_new_commits(uri, 0, data_change_only=False)["commits"]] == [1, 2, 3, 4]
    assert [c["version"] for c in find_new_commits(uri, -1, operations=["DELETE"])["commits"]] == [4]
    assert [c["version"] for c in find_new_commits(uri, 0, partition_filter="part = 'b'")["commits"]] == [1]
    assert find_new_commits(uri, 4)["commits"] == []


def test_sensor_pokes_and_keeps_its_watermark_across_runs(airflow_db, tmp_path):
    uri = str(tmp_path / "t")
    make_table(uri)
    source = f"""
        import datetime as dt
        import pendulum
        from airflow.sdk import DAG
        from operators.sensors import DeltaLogTailSensor

        with DAG("tail_poke", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaLogTailSensor(task_id="wait", table_uri={uri!r}, mode="poke", poke_interval=1,
                               timeout=3, soft_fail=True)
        """
    run = run_dag("tail_poke", source)
    assert task_states(run) == {"wait": "success"}
    first = xcom(run, "wait")
    assert [c["version"] for c in first["commits"]] == [0, 1, 3]  # the OPTIMIZE (v2) is not news
    assert read_watermark(uri, "tail_poke.wait") == 3
    run = run_dag("tail_poke", source)  # nothing new: times out, soft-fails to skipped
    assert task_states(run) == {"wait": "skipped"}
    write_table(uri, rows(100, 1), mode="append")  # v4
    run = run_dag("tail_poke", source)
    assert [c["version"] for c in xcom(run, "wait")["commits"]] == [4]


def test_deferred_sensor_waits_in_its_trigger(airflow_db, tmp_path):
    uri = str(tmp_path / "t")
    make_table(uri)

    def later():
        time.sleep(3)
        DeltaTable(uri).optimize(min_num_files=1)  # not news
        write_table(uri, rows(50, 2, "b"), mode="append")

    thread = threading.Thread(target=later)
    thread.start()
    run = run_dag(
        "tail_deferred",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from operators.sensors import DeltaLogTailSensor

        with DAG("tail_deferred", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaLogTailSensor(task_id="wait", table_uri={uri!r}, after_version=3, deferrable=True,
                               poke_interval=0.5, partition_filter="part = 'b'")
        """,
    )
    thread.join()
    assert task_states(run) == {"wait": "success"}
    result = xcom(run, "wait")
    assert [c["version"] for c in result["commits"]] == [5] and result["commits"][0]["rowsAdded"] == 2


def test_commit_trigger_serializes_and_fires():
    trigger = DeltaCommitTrigger(table_uri="/x", after_version=3, poke_interval=2)
    classpath, kwargs = trigger.serialize()
    assert classpath == "operators.triggers.DeltaCommitTrigger" and kwargs["after_version"] == 3
    assert DeltaCommitTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_event_trigger_yields_one_event_per_data_commit_and_survives_restarts(tmp_path):
    uri = str(tmp_path / "t")
    make_table(uri)  # latest: v3

    async def scenario():
        # start_after: the commits it has not announced yet begin after v3 (the default is the
        # latest version at its first start)
        trigger = DeltaCommitEventTrigger(
            table_uri=uri, poke_interval=0.05, watermark_key="watcher", start_after=3
        )
        events = trigger.run()
        write_table(uri, rows(20, 3), mode="append")  # v4
        first = await asyncio.wait_for(anext(events), 10)
        DeltaTable(uri).optimize(min_num_files=1)  # v5: no event
        write_table(uri, rows(30, 1), mode="append")  # v6
        second = await asyncio.wait_for(anext(events), 10)
        # The triggerer hands the event over and resumes the trigger, which records v6 and
        # goes back to polling; then the triggerer stops.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(events), 0.5)
        # A restarted triggerer (a new instance from the same kwargs) continues after v6.
        restarted = DeltaCommitEventTrigger(**trigger.serialize()[1]).run()
        write_table(uri, rows(40, 1), mode="append")  # v7
        third = await asyncio.wait_for(anext(restarted), 10)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(restarted), 0.5)
        return first, second, third

    first, second, third = asyncio.run(scenario())
    assert (first.payload["version"], first.payload["rowsAdded"], first.payload["operation"]) == (
        4,
        3,
        "WRITE",
    )
    assert second.payload["version"] == 6
    assert third.payload["version"] == 7
    assert read_watermark(uri, "watcher") == 7
