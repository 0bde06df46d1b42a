"""Time travel by version and by timestamp, with Delta Spark's rules."""

from __future__ import annotations

import datetime as dt
import uuid

import numpy as np
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import TimestampOutOfRangeError, VersionNotFoundError
from deltaplane.engine.log.timestamps import monotonize, to_millis, version_at_timestamp
from deltaplane.engine.storage import open_store
from deltaplane.engine.table_properties import TableProperties
from tests.logbuilder import add, commit_info, metadata, protocol, write_commit


def fresh_store():
    uri = f"memory://tt-{uuid.uuid4().hex}"
    return uri, open_store(uri)


def build(store, mtimes: list[int], *, ict: list[int | None] | None = None, configuration=None):
    for v, mtime in enumerate(mtimes):
        info = commit_info(**({"inCommitTimestamp": ict[v]} if ict and ict[v] is not None else {}))
        head = [protocol(1, 7 if ict else 2), metadata(configuration=configuration)] if v == 0 else []
        key = write_commit(store, v, [info, *head, add(f"f{v}")])
        store.set_modification_time(key, mtime)


def test_monotonize():
    assert monotonize(np.array([1000, 2000, 2000, 1500, 5000])).tolist() == [1000, 2000, 2001, 2002, 5000]
    assert monotonize(np.array([], dtype=np.int64)).tolist() == []


@pytest.mark.parametrize(
    ("when", "version"),
    [(1000, 0), (1999, 0), (2000, 1), (2001, 2), (2002, 3), (4999, 3), (5000, 4)],
)
def test_latest_commit_at_or_before_with_monotonized_file_times(when, version):
    uri, store = fresh_store()
    build(store, [1000, 2000, 2000, 1500, 5000])
    assert version_at_timestamp(store, when, TableProperties({})) == version
    assert DeltaTable(uri, timestamp=when).version == version


def test_before_first_and_after_last_are_errors():
    uri, store = fresh_store()
    build(store, [1000, 2000])
    with pytest.raises(TimestampOutOfRangeError, match="before the earliest"):
        DeltaTable(uri, timestamp=999)
    with pytest.raises(TimestampOutOfRangeError, match="after the latest"):
        DeltaTable(uri, timestamp=2001)


def test_timestamp_forms():
    assert to_millis(dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)) == 1000
    assert to_millis(dt.datetime(1970, 1, 1, 0, 0, 1)) == 1000  # zone-less means UTC
    assert to_millis("1970-01-01T01:00:01+01:00") == 1000
    assert to_millis("1970-01-01 00:00:02") == 2000
    assert to_millis(dt.date(1970, 1, 2)) == 86_400_000
    with pytest.raises(ValueError):
        to_millis("yesterday")
    uri, store = fresh_store()
    build(store, [1_700_000_000_000, 1_700_000_100_000])
    assert DeltaTable(uri, timestamp="2023-11-14T22:14:00Z").version == 0
    assert DeltaTable(uri, timestamp=dt.datetime(2023, 11, 14, 22, 15, tzinfo=dt.UTC)).version == 1


def test_in_commit_timestamps_win_over_file_times():
    uri, store = fresh_store()
    # File times run backwards; ICTs are what count.
    build(
        store,
        [9000, 8000, 7000],
        ict=[100, 200, 300],
        configuration={"delta.enableInCommitTimestamps": "true"},
    )
    assert DeltaTable(uri, timestamp=150).version == 0
    assert DeltaTable(uri, timestamp=200).version == 1
    assert DeltaTable(uri, timestamp=300).version == 2
    assert DeltaTable(uri).snapshot.timestamp == 300
    with pytest.raises(TimestampOutOfRangeError):
        DeltaTable(uri, timestamp=99)
    with pytest.raises(TimestampOutOfRangeError):
        DeltaTable(uri, timestamp=301)


def test_in_commit_timestamps_enabled_later():
    uri, store = fresh_store()
    for v, (mtime, ict) in enumerate([(1000, None), (2000, None), (50_000, 3000), (40_000, 4000)]):
        info = commit_info(**({"inCommitTimestamp": ict} if ict else {}))
        head = [protocol(), metadata()] if v == 0 else []
        if v == 2:
            head = [
                protocol(1, 7),
                metadata(
                    configuration={
                        "delta.enableInCommitTimestamps": "true",
                        "delta.inCommitTimestampEnablementVersion": "2",
                        "delta.inCommitTimestampEnablementTimestamp": "3000",
                    }
                ),
            ]
        store.set_modification_time(write_commit(store, v, [info, *head, add(f"f{v}")]), mtime)
    assert DeltaTable(uri, timestamp=1500).version == 0
    assert DeltaTable(uri, timestamp=2999).version == 1  # before enablement: file times
    assert DeltaTable(uri, timestamp=3500).version == 2  # after: in-commit timestamps
    assert DeltaTable(uri, timestamp=4000).version == 3


def test_version_and_timestamp_are_exclusive_and_versions_checked():
    uri, store = fresh_store()
    build(store, [1000, 2000])
    with pytest.raises(ValueError):
        DeltaTable(uri, version=0, timestamp=1000)
    with pytest.raises(VersionNotFoundError):
        DeltaTable(uri, version=2)
    assert [DeltaTable(uri, version=v).snapshot.num_files for v in (0, 1)] == [1, 2]


def test_turning_in_commit_timestamps_on_records_where_the_timeline_switches(tmp_path):
    import json

    import pyarrow as pa

    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    result = table.alter.set_table_properties({"delta.enableInCommitTimestamps": "true"})
    config = DeltaTable(uri).metadata.configuration
    assert config["delta.inCommitTimestampEnablementVersion"] == str(result.version) == "2"
    lines = table._store.get(f"_delta_log/{result.version:020d}.json").decode().splitlines()
    ict = json.loads(lines[0])["commitInfo"]["inCommitTimestamp"]
    assert config["delta.inCommitTimestampEnablementTimestamp"] == str(ict)
    table.append(pa.table({"id": pa.array([2], pa.int64())}))  # later commits leave them alone
    assert DeltaTable(uri).metadata.configuration["delta.inCommitTimestampEnablementVersion"] == "2"
    assert DeltaTable(uri, timestamp=ict).version() == 2
    fresh = DeltaTable.create(
        str(tmp_path / "f"),
        pa.schema([("id", pa.int64())]),
        properties={"delta.enableInCommitTimestamps": "true"},
    )
    assert "delta.inCommitTimestampEnablementVersion" not in fresh.metadata.configuration  # on from v0
