"""The log-tail sensor (poke and deferred) and the commit triggers, on real tables."""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.tail import find_new_commits
from deltaplane.engine.watermarks import read_watermark
from deltaplane.operators.triggers.commits import DeltaCommitEventTrigger, DeltaCommitTrigger
from tests.operators.conftest import once_deferred, run_dag, task_states, xcom

pytestmark = pytest.mark.airflow


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


def test_sensor_watermark_moves_only_after_the_downstream_work_succeeds(airflow_db, tmp_path):
    """The sensor finds commits; a failing consumer leaves the watermark where it was, so the
    next run sees the same commits; the ack task after a successful consumer moves it."""
    uri = str(tmp_path / "t")
    make_table(uri)
    flag = tmp_path / "consumer-fails"
    flag.write_text("x")
    source = f"""
        import pendulum
        from pathlib import Path
        from airflow.sdk import DAG, task
        from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor, DeltaWatermarkOperator

        @task
        def consume():
            if Path({str(flag)!r}).exists():
                raise RuntimeError("the consumer failed")

        with DAG("tail_poke", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            wait = DeltaLogTailSensor(task_id="wait", table_uri={uri!r}, mode="poke", poke_interval=1,
                                      timeout=3, soft_fail=True)
            wait >> consume() >> DeltaWatermarkOperator(task_id="ack", table_uri={uri!r}, sensor_task_id="wait")
        """
    run = run_dag("tail_poke", source)
    assert task_states(run) == {"wait": "success", "consume": "failed", "ack": "upstream_failed"}
    assert [c["version"] for c in xcom(run, "wait")["commits"]] == [0, 1, 3]  # the OPTIMIZE (v2) is not news
    assert read_watermark(uri, "tail_poke.wait") is None  # nothing acknowledged: nothing lost
    flag.unlink()
    run = run_dag("tail_poke", source)  # the same commits again, handled this time
    assert task_states(run) == {"wait": "success", "consume": "success", "ack": "success"}
    assert [c["version"] for c in xcom(run, "wait")["commits"]] == [0, 1, 3]
    assert read_watermark(uri, "tail_poke.wait") == 3
    run = run_dag("tail_poke", source)  # nothing new: times out, soft-fails to skipped
    assert task_states(run)["wait"] == "skipped"
    write_table(uri, rows(100, 1), mode="append")  # v4
    run = run_dag("tail_poke", source)
    assert [c["version"] for c in xcom(run, "wait")["commits"]] == [4]
    assert read_watermark(uri, "tail_poke.wait") == 4


def test_a_deletion_vector_delete_is_a_delete_not_new_data(tmp_path):
    """The sensor's XCom and the Asset event said rowsAdded: 1200 for a DELETE of 120 rows."""
    uri = str(tmp_path / "t")
    write_table(uri, rows(0, 120), properties={"delta.enableDeletionVectors": "true"})
    for start in range(120, 1200, 120):
        write_table(uri, rows(start, 120), mode="append")
    DeltaTable(uri).delete("id % 10 = 3")
    (commit,) = find_new_commits(uri, 9)["commits"]
    assert (commit["operation"], commit["kind"], commit["rowsAdded"], commit["rowsDeleted"]) == (
        "DELETE",
        "delete",
        0,
        120,
    )
    assert commit["files"] == []  # no new files to read
    assert find_new_commits(uri, 9, kinds=["append"])["commits"] == []
    assert [c["version"] for c in find_new_commits(uri, -1, kinds="append")["commits"]] == list(range(10))


def test_deferred_sensor_waits_in_its_trigger(airflow_db, tmp_path):
    uri = str(tmp_path / "t")
    make_table(uri)

    def commit():  # once the sensor waits in its trigger, however long its start took
        DeltaTable(uri).optimize(min_num_files=1)  # not news
        write_table(uri, rows(50, 2, "b"), mode="append")

    with once_deferred(uri, commit) as committed:
        run = run_dag(
            "tail_deferred",
            f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor

        with DAG("tail_deferred", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaLogTailSensor(task_id="wait", table_uri={uri!r}, after_version=3, deferrable=True,
                               poke_interval=0.5, partition_filter="part = 'b'", timeout=600)
        """,
        )
    assert committed == {"acted": True}, committed
    assert task_states(run) == {"wait": "success"}
    result = xcom(run, "wait")
    assert [c["version"] for c in result["commits"]] == [5] and result["commits"][0]["rowsAdded"] == 2
    # The operators' one XCom shape: a sensor commits nothing and says where it waited.
    assert (result["operation"], result["version"], result["committed"], result["engine"]) == (
        "LOG TAIL",
        None,
        False,
        "triggerer",
    )
    assert result["read_version"] == result["latest_version"] == 5 and result["table"] == uri


def test_commit_trigger_serializes_and_fires():
    trigger = DeltaCommitTrigger(table_uri="/x", after_version=3, poke_interval=2)
    classpath, kwargs = trigger.serialize()
    assert (
        classpath == "deltaplane.operators.triggers.commits.DeltaCommitTrigger"
        and kwargs["after_version"] == 3
    )
    assert DeltaCommitTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_event_trigger_without_a_shared_stream_never_moves_its_watermark(tmp_path):
    """``run()`` (no acks from Airflow): the same events again after a restart, never fewer."""
    uri = str(tmp_path / "t")
    make_table(uri)  # latest: v3

    async def scenario():
        trigger = DeltaCommitEventTrigger(table_uri=uri, poke_interval=0.05, watermark_key="w", start_after=3)
        events = trigger.run()
        write_table(uri, rows(20, 3), mode="append")  # v4
        first = await asyncio.wait_for(anext(events), 10)
        DeltaTable(uri).optimize(min_num_files=1)  # v5: no event
        write_table(uri, rows(30, 1), mode="append")  # v6
        second = await asyncio.wait_for(anext(events), 10)
        await events.aclose()
        restarted = DeltaCommitEventTrigger(**trigger.serialize()[1]).run()
        again = [await asyncio.wait_for(anext(restarted), 10) for _ in range(2)]
        await restarted.aclose()
        return first, second, again

    first, second, again = asyncio.run(scenario())
    assert (first.payload["version"], first.payload["rowsAdded"], first.payload["kind"]) == (4, 3, "append")
    assert second.payload["version"] == 6
    assert [e.payload["version"] for e in again] == [4, 6]
    assert read_watermark(uri, "w") == 3


def test_event_producer_advances_only_what_airflow_stored(tmp_path):
    """The ack-mode producer: the watermark moves to the last version of a clean batch; an event
    Airflow did not store rewinds the stream to announce it again; ticks keep the stream moving."""
    from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

    from deltaplane.operators.triggers.commits import CommitLogProducer

    uri = str(tmp_path / "t")
    make_table(uri)  # latest v3
    trigger = DeltaCommitEventTrigger(table_uri=uri, poke_interval=0.05, watermark_key="p", start_after=0)
    assert (
        trigger.shared_stream_key() == DeltaCommitEventTrigger(**trigger.serialize()[1]).shared_stream_key()
    )
    producer = CommitLogProducer(trigger.serialize()[1])
    clean, lost = AdvanceOutcome(acked=1, failed=0), AdvanceOutcome(acked=0, failed=1)

    async def scenario():
        stream = producer.open_stream()
        got = [await anext(stream) for _ in range(3)]  # v1, v2 (OPTIMIZE: no summary), v3
        assert [raw["version"] for raw, _ in got] == [1, 2, 3]
        assert got[1][0]["summary"] is None and got[2][0]["summary"]["kind"] == "append"
        tick, payload = await anext(stream)
        assert tick == {"tick": True}
        await producer.advance([AdvanceItem(got[0][1], clean), AdvanceItem(got[1][1], clean)])
        assert read_watermark(uri, "p") == 2
        # v3's event was never stored: the stream announces v3 again, and the tick is ignored.
        await producer.advance([AdvanceItem(got[2][1], lost), AdvanceItem(payload, clean)])
        assert read_watermark(uri, "p") == 2
        raw, again = await anext(stream)
        assert raw["version"] == 3 and again[0] == got[2][1][0] + 1  # a new generation
        await producer.advance([AdvanceItem(got[2][1], clean)])  # a stale ack of the old broadcast
        assert read_watermark(uri, "p") == 2
        await producer.advance([AdvanceItem(again, clean)])
        assert read_watermark(uri, "p") == 3
        await stream.aclose()

    asyncio.run(scenario())


def test_commit_trigger_reports_its_deadline_and_a_vanished_table_as_events(tmp_path):
    """A timeout event at the deadline (kept in the serialized kwargs, so a triggerer restart does
    not reset the clock); an error event, not an endless wait, when the table disappears."""
    import shutil

    uri = str(tmp_path / "t")
    make_table(uri)  # latest v3

    async def first(trigger):
        return await asyncio.wait_for(anext(trigger.run()), 30)

    deadline = time.time() + 0.5
    trigger = DeltaCommitTrigger(table_uri=uri, after_version=3, poke_interval=0.1, deadline=deadline)
    restarted = DeltaCommitTrigger(**trigger.serialize()[1])
    assert restarted.deadline == deadline
    event = asyncio.run(first(restarted))
    assert event.payload["status"] == "timeout" and "version 3" in event.payload["message"]
    shutil.rmtree(uri)
    event = asyncio.run(first(DeltaCommitTrigger(table_uri=uri, after_version=3, poke_interval=0.1)))
    assert event.payload["status"] == "error" and "TableNotFoundError" in event.payload["message"]


def test_event_trigger_reports_a_vanished_table_once_and_keeps_polling(tmp_path):
    import shutil

    uri = str(tmp_path / "t")
    make_table(uri)

    async def scenario():
        events = DeltaCommitEventTrigger(
            table_uri=uri, poke_interval=0.05, watermark_key="gone", start="latest"
        ).run()
        waiting = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # nothing new yet
        shutil.rmtree(uri)
        error = await asyncio.wait_for(waiting, 10)
        with pytest.raises(TimeoutError):  # reported once, not once per poll
            await asyncio.wait_for(anext(events), 1)
        await events.aclose()
        return error

    error = asyncio.run(scenario())
    assert error.payload["status"] == "error" and error.payload["table"] == uri
    assert "TableNotFoundError" in error.payload["message"]


def test_the_sensor_and_both_triggers_take_one_set_of_filter_arguments(tmp_path):
    from deltaplane.engine.commit_filter import FILTER_ARGS
    from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor

    given = {"data_change_only": False, "kinds": ["append"], "operations": ["WRITE"], "partition_filter": "x"}
    assert set(given) == set(FILTER_ARGS)
    sensor = DeltaLogTailSensor(task_id="w", table_uri="/x", **given)
    commit = DeltaCommitTrigger(table_uri="/x", after_version=0, **given)
    event = DeltaCommitEventTrigger(table_uri="/x", **given)
    assert sensor.commit_filter == commit.commit_filter == event.commit_filter
    for build in (
        lambda **k: DeltaLogTailSensor(task_id="w", table_uri="/x", **k),
        lambda **k: DeltaCommitTrigger(table_uri="/x", after_version=0, **k),
        lambda **k: DeltaCommitEventTrigger(table_uri="/x", **k),
    ):
        with pytest.raises(ValueError, match="unknown commit kind"):
            build(kinds=["apend"])
        with pytest.raises((TypeError, ValueError), match="kind"):
            build(kind=["append"])  # a misspelt filter is refused, never ignored


def test_default_deferrable_comes_from_airflow_config():
    import os
    import subprocess
    import sys

    code = (
        "from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor;"
        "print(DeltaLogTailSensor(task_id='w', table_uri='/x').deferrable)"
    )
    for value, expected in (("True", "True"), ("False", "False")):
        env = {**os.environ, "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.stdout.strip().splitlines()[-1] == expected, out.stderr[-2000:]


def test_deferred_sensor_fails_at_its_timeout_and_soft_fail_skips(airflow_db, tmp_path):
    """``timeout=2``: the deferred sensor ends at its own timeout (a sensor timeout: failed without
    retries; skipped with soft_fail), not after the trigger's default wait."""
    uri = str(tmp_path / "t")
    make_table(uri)
    run = run_dag(
        "tail_timeout",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor

        with DAG("tail_timeout", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaLogTailSensor(task_id="hard", table_uri={uri!r}, after_version=3, deferrable=True,
                               poke_interval=0.5, timeout=2, retries=2)
            DeltaLogTailSensor(task_id="soft", table_uri={uri!r}, after_version=3, deferrable=True,
                               poke_interval=0.5, timeout=2, soft_fail=True)
        """,
    )
    assert task_states(run) == {"hard": "failed", "soft": "skipped"}


def test_deferred_sensor_fails_when_its_table_disappears(airflow_db, tmp_path):
    import shutil

    uri = str(tmp_path / "t")
    make_table(uri)

    with once_deferred(uri, lambda: shutil.rmtree(uri)) as removed:  # under the trigger
        run = run_dag(
            "tail_gone",
            f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor

        with DAG("tail_gone", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
            DeltaLogTailSensor(task_id="wait", table_uri={uri!r}, after_version=3, deferrable=True,
                               poke_interval=0.5, timeout=600)
        """,
        )
    assert removed == {"acted": True}, removed
    assert task_states(run) == {"wait": "failed"}


def test_sensor_and_consumer_name_their_tables_to_openlineage(tmp_path):
    """The sensor reads its table; the consumer reads the source (at its watermark) and writes
    the target: real OpenLineage datasets from the operators' result."""
    from deltaplane.operators.operators.consume import DeltaConsumeOperator
    from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor
    from deltaplane.operators.utils.lineage import operator_lineage

    uri, copy = str(tmp_path / "t"), str(tmp_path / "copy")
    make_table(uri)
    sensor = DeltaLogTailSensor(task_id="wait", table_uri=uri, after_version=2)
    result = sensor._finish(find_new_commits(uri, 2), engine="in-process")
    lineage = sensor.get_openlineage_facets_on_complete(None)
    assert [d.name for d in lineage.inputs] == [uri] and lineage.outputs == []
    assert result["latest_version"] == 3 and result["commits"][0]["version"] == 3
    consume = DeltaConsumeOperator(task_id="consume", table_uri=copy, source_uri=uri)
    lineage = operator_lineage(consume, {"version": 0, "watermark": 3, "rows": 15, "committed": True}, {})
    assert [d.name for d in lineage.inputs] == [uri] and [d.name for d in lineage.outputs] == [copy]


def test_sigterm_stops_a_poking_sensor(airflow_db, tmp_path):
    """Airflow's task runner answers SIGTERM by calling ``on_kill`` and going on: a poking
    sensor kept waiting out its hour. Now the wait ends and the task fails as terminated."""
    import signal
    import subprocess
    import sys
    import textwrap

    from tests.operators.conftest import DAGS

    uri = str(tmp_path / "t")
    make_table(uri)
    path = DAGS / "tail_sigterm.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG
            from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor

            with DAG("tail_sigterm", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
                DeltaLogTailSensor(task_id="wait", table_uri={uri!r}, after_version=3, mode="poke",
                                   poke_interval=1, timeout=3600)

            if __name__ == "__main__":
                dag.test()
            """
        )
    )
    lines: list[str] = []
    process = subprocess.Popen(
        [sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 180
        while not any("matching commit(s) after version 3" in line for line in lines):
            assert process.poll() is None and time.time() < deadline, "".join(lines)[-3000:]
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the poking sensor ignored SIGTERM for a minute")
        reader.join(10)
        assert "SIGTERM while waiting" in "".join(lines), "".join(lines)[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        path.unlink()
