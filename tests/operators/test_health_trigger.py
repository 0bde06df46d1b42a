"""``DeltaHealthEventTrigger``: one event per maintenance need (not one per poll), again once
maintenance ran or another kind of work is wanted; in ack mode the need's version is written
beside the table only once Airflow stored the event, and a restarted triggerer neither loses a
need nor repeats one whose run is still coming. Real tables, the real producer loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.watermarks import read_watermark
from deltaplane.operators.triggers.health import DeltaHealthEventTrigger, HealthProducer

pytestmark = pytest.mark.airflow

POLICY = {"small_file_size": 1 << 20, "min_small_files": 5, "max_versions_since_checkpoint": 1000}


def appends(uri: str, n: int) -> None:
    t = DeltaTable(uri)
    for i in range(n):
        t.append(pa.table({"id": [i]}))


def make(tmp_path) -> str:
    uri = str(tmp_path / "t")
    DeltaTable.create(
        uri, pa.schema([("id", pa.int64())]), configuration={"delta.checkpointInterval": "1000"}
    )
    return uri


def trigger(uri, **kwargs) -> DeltaHealthEventTrigger:
    return DeltaHealthEventTrigger(
        table_uri=uri, policy=kwargs.pop("policy", POLICY), poke_interval=0.01, **kwargs
    )


def test_one_event_per_need_and_again_after_maintenance_or_a_new_kind(tmp_path):
    uri = make(tmp_path)
    producer = HealthProducer(trigger(Path(uri), watermark_key="w").serialize()[1])

    async def scenario():
        stream = producer.open_stream()
        assert (await anext(stream))[0] == {"tick": True}  # a new table: nothing to do
        appends(uri, 6)
        raw, payload = await anext(stream)
        assert [d["kind"] for d in raw["announce"]["decisions"]] == ["compaction"]
        assert raw["announce"]["version"] == 6 and payload[1] == 6
        assert raw["announce"]["reasons"][0].startswith("compaction: 6 small files (< 1.0 MiB) in")
        appends(uri, 3)  # the same need grows: no second event
        assert (await anext(stream))[0] == {"tick": True}
        DeltaTable(uri).optimize()  # maintenance ran...
        assert (await anext(stream))[0] == {"tick": True}  # ...and the need is gone
        appends(uri, 5)  # a new need
        raw, _ = await anext(stream)
        assert raw["announce"]["version"] == 15
        producer.policy = producer.policy.__class__(**{**POLICY, "max_versions_since_checkpoint": 10})
        raw, _ = await anext(stream)  # a kind not announced before: announced at once
        assert sorted(d["kind"] for d in raw["announce"]["decisions"]) == ["checkpoint", "compaction"]
        await stream.aclose()

    asyncio.run(scenario())


def test_stale_manifests_are_a_need_and_regenerating_them_answers_it(tmp_path):
    """The ``manifest`` kind through the trigger: no commit answers it (manifests are not
    commits), so the trigger looks at the manifests again on every poll."""
    uri = make(tmp_path)
    policy = {**POLICY, "enabled": ["manifest"]}
    producer = HealthProducer(trigger(Path(uri), watermark_key="m", policy=policy).serialize()[1])

    async def scenario():
        stream = producer.open_stream()
        raw, _ = await anext(stream)  # no manifest yet
        assert raw["announce"]["reasons"][0].startswith("manifest: no symlink manifest yet")
        DeltaTable(uri).generate_manifest()
        assert (await anext(stream))[0] == {"tick": True}
        await asyncio.sleep(0.01)  # the next commit in a later clock tick than the manifests
        appends(uri, 1)
        raw, payload = await anext(stream)
        assert raw["announce"]["reasons"][0].startswith("manifest: the manifests are 1 commit(s) behind v1")
        assert payload[1] == 1

    asyncio.run(scenario())


def test_a_need_still_there_after_reannounce_after_is_announced_again(tmp_path):
    """A maintenance run that yielded to writers (or failed) did nothing: the need is not
    forgotten, it comes back once ``reannounce_after`` has passed, and not before."""
    uri = make(tmp_path)
    appends(uri, 6)
    producer = HealthProducer(trigger(uri, watermark_key="r", reannounce_after=0.5).serialize()[1])

    async def scenario():
        stream = producer.open_stream()
        first, _ = await anext(stream)
        assert first["announce"]["version"] == 6
        assert (await anext(stream))[0] == {"tick": True}  # at once: quiet
        await asyncio.sleep(0.6)
        again, _ = await anext(stream)
        assert again["announce"]["version"] == 6
        assert (await anext(stream))[0] == {"tick": True}
        await stream.aclose()

    asyncio.run(scenario())
    assert trigger(uri).serialize()[1]["reannounce_after"] == 3600.0


def test_ack_mode_stores_the_need_and_a_restart_neither_loses_nor_repeats_it(tmp_path):
    from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

    uri = make(tmp_path)
    appends(uri, 6)
    kwargs = trigger(uri, watermark_key="k").serialize()[1]
    clean, lost = AdvanceOutcome(acked=1, failed=0), AdvanceOutcome(acked=0, failed=1)

    async def first():
        producer = HealthProducer(kwargs)
        stream = producer.open_stream()
        raw, payload = await anext(stream)
        assert raw["announce"]["version"] == 6
        await producer.advance([AdvanceItem(payload, lost)])  # Airflow did not store it
        assert read_watermark(uri, "health-k") is None
        raw, again = await anext(stream)  # announced again, in a new generation
        assert raw["announce"]["version"] == 6 and again[0] == payload[0] + 1
        await producer.advance([AdvanceItem(payload, clean)])  # a stale ack of the lost one
        assert read_watermark(uri, "health-k") is None
        await producer.advance([AdvanceItem(again, clean)])
        assert read_watermark(uri, "health-k") == 6
        await stream.aclose()

    asyncio.run(first())

    async def restarted():
        producer = HealthProducer(kwargs)  # a triggerer killed and started again
        stream = producer.open_stream()
        raw, _ = await anext(stream)
        await stream.aclose()
        return raw

    # stored and nothing done since: its maintenance run is still coming, no second event
    assert asyncio.run(restarted()) == {"tick": True}
    # maintenance ran, then the table degraded again: a restart announces the new need
    DeltaTable(uri).optimize()
    appends(uri, 5)
    assert asyncio.run(restarted())["announce"]["version"] == 12


def test_a_triggerer_killed_before_airflow_stored_the_event_announces_it_again(tmp_path):
    uri = make(tmp_path)
    appends(uri, 6)
    kwargs = trigger(uri, watermark_key="killed").serialize()[1]

    async def once():
        stream = HealthProducer(kwargs).open_stream()
        raw, _ = await anext(stream)
        await stream.aclose()  # killed: no advance ever came
        return raw

    assert asyncio.run(once())["announce"]["version"] == 6
    assert asyncio.run(once())["announce"]["version"] == 6  # not lost


def test_run_without_a_shared_stream_and_errors_as_events(tmp_path):
    uri = make(tmp_path)
    appends(uri, 6)

    async def first_event(t):
        events = t.run()
        try:
            return (await asyncio.wait_for(anext(events), 15)).payload
        finally:
            await events.aclose()

    event = asyncio.run(first_event(trigger(uri)))
    assert event["status"] == "needs_maintenance" and event["table"] == uri and event["version"] == 6
    missing = asyncio.run(first_event(trigger(str(tmp_path / "nothing"))))
    assert missing["status"] == "error" and "TableNotFoundError" in missing["message"]


@pytest.mark.parametrize(
    "policy",
    [{"min_small_file": 3}, {"max_deleted_rows_ratio": 2}, {"enabled": ["compaction", "defrag"]}],
)
def test_a_wrong_policy_fails_when_the_dag_is_parsed(tmp_path, policy):
    with pytest.raises(ValueError):
        DeltaHealthEventTrigger(table_uri=str(tmp_path), policy=policy)


def test_serialization_round_trips_and_keys_the_stream(tmp_path):
    t = trigger(tmp_path / "t", policy={**POLICY, "enabled": ("compaction", "vacuum")})
    path, kwargs = t.serialize()
    assert path == "deltaplane.operators.triggers.health.DeltaHealthEventTrigger"
    again = DeltaHealthEventTrigger(**kwargs)
    assert again.serialize() == (path, kwargs) and again.shared_stream_key() == t.shared_stream_key()
    assert kwargs["table_uri"] == str(tmp_path / "t") and kwargs["policy"]["enabled"] == [
        "compaction",
        "vacuum",
    ]
