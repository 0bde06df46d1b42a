"""Log replay and snapshot loading on hand-built logs: reconciliation rules, protocol gates,
and every kind of bad input giving a typed error that names the file."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import (
    CorruptCheckpointError,
    CorruptLogError,
    MissingLogVersionError,
    ProtocolError,
    TableNotFoundError,
    VersionNotFoundError,
)
from deltaplane.engine.log.last_checkpoint import render_last_checkpoint
from deltaplane.engine.snapshot import load_snapshot, load_table_config
from deltaplane.engine.storage import LocalStore, MemoryStore
from tests.logbuilder import (
    add,
    commit_info,
    metadata,
    protocol,
    remove,
    simple_table,
    write_checkpoint,
    write_commit,
)


def paths(snapshot) -> list[str]:
    return sorted(snapshot.files.column("path").to_pylist())


@pytest.fixture
def store():
    return MemoryStore()


def test_newest_action_wins_per_path(store):
    write_commit(store, 0, [commit_info(), protocol(), metadata(), add("a"), add("b"), add("c")])
    write_commit(store, 1, [remove("a"), add("d")])
    write_commit(store, 2, [add("a"), remove("b")])  # a comes back
    snap = load_snapshot(store)
    assert snap.version == 2
    assert paths(snap) == ["a", "c", "d"]
    assert sorted(snap.tombstones.column("path").to_pylist()) == ["b"]
    assert snap.files.filter(pa.compute.equal(snap.files.column("path"), "a")).column(
        "version"
    ).to_pylist() == [2]
    assert paths(load_snapshot(store, 1)) == ["b", "c", "d"]


def test_files_are_keyed_by_path_and_deletion_vector(store):
    dv1 = {"storageType": "i", "pathOrInlineDv": "abc", "sizeInBytes": 10, "cardinality": 1}
    dv2 = {"storageType": "i", "pathOrInlineDv": "xyz", "sizeInBytes": 10, "cardinality": 2}
    write_commit(store, 0, [protocol(3, 7, ["deletionVectors"], ["deletionVectors"]), metadata(), add("f")])
    write_commit(store, 1, [remove("f"), add("f", dv=dv1)])
    write_commit(store, 2, [remove("f", dv=dv1), add("f", dv=dv2)])
    snap = load_snapshot(store)
    assert paths(snap) == ["f"]
    assert snap.files.column("deletion_vector").to_pylist()[0]["pathOrInlineDv"] == "xyz"
    assert snap.tombstones.num_rows == 2  # (f, none) and (f, dv1)


def test_paths_spelled_differently_cancel(tmp_path):
    store = LocalStore(str(tmp_path))
    root = store.root
    write_commit(
        store, 0, [protocol(), metadata(), add("a%20b.parquet"), add("c.parquet"), add("/abs/x.parquet")]
    )
    write_commit(
        store, 1, [remove("a b.parquet"), remove(f"file://{root}/c.parquet"), remove("file:/abs/x.parquet")]
    )
    assert paths(load_snapshot(store)) == []


def test_latest_protocol_metadata_txn_and_domains_win(store):
    write_commit(
        store,
        0,
        [
            protocol(),
            metadata(configuration={"k": "1"}),
            {"txn": {"appId": "job", "version": 3}},
            {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": False}},
            {"domainMetadata": {"domain": "d2", "configuration": "{}", "removed": False}},
        ],
    )
    write_commit(
        store,
        1,
        [
            metadata(configuration={"k": "2"}),
            {"txn": {"appId": "job", "version": 5}},
            {"txn": {"appId": "other", "version": 1}},
            {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": True}},
        ],
    )
    snap = load_snapshot(store)
    assert snap.metadata.configuration == {"k": "2"}
    assert snap.app_transaction_version("job") == 5 and snap.app_transaction_version("other") == 1
    assert snap.app_transaction_version("missing") is None
    assert set(snap.domains) == {"d2"}
    assert load_table_config(store)[1].configuration == {"k": "2"}


def test_unknown_actions_and_fields_are_ignored(store):
    write_commit(
        store, 0, [protocol(), metadata(), {"someFutureAction": {"x": 1}}, add("a", futureField=[1, "two"])]
    )
    assert paths(load_snapshot(store)) == ["a"]


@pytest.mark.parametrize(
    ("proto", "feature"),
    [
        (protocol(4, 7), None),
        (protocol(3, 7, ["catalogManaged"], ["catalogManaged", "inCommitTimestamp"]), "catalogManaged"),
        (protocol(3, 7, ["someNewFeature"], ["someNewFeature"]), "someNewFeature"),
    ],
)
def test_unsupported_protocols_are_refused_by_name(store, proto, feature):
    write_commit(store, 0, [proto, metadata()])
    with pytest.raises(ProtocolError) as info:
        load_snapshot(store)
    assert info.value.feature == feature
    if feature:
        assert feature in str(info.value)


def test_readable_features_load(store):
    features = [
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "variantType-preview",
    ]
    write_commit(store, 0, [protocol(3, 7, features, features), metadata()])
    assert load_snapshot(store).protocol.reader_features == features


def test_missing_table_and_empty_log(tmp_path):
    with pytest.raises(TableNotFoundError):
        DeltaTable(str(tmp_path / "nothing-here"))
    (tmp_path / "t" / "_delta_log").mkdir(parents=True)
    with pytest.raises(TableNotFoundError):
        DeltaTable(str(tmp_path / "t"))


def test_gap_in_versions_names_the_missing_commit(store):
    write_commit(store, 0, [protocol(), metadata(), add("a")])
    write_commit(store, 2, [add("b")])
    with pytest.raises(MissingLogVersionError, match=r"00000000000000000001\.json") as info:
        load_snapshot(store)
    assert info.value.path == "_delta_log/00000000000000000001.json"
    assert paths(load_snapshot(store, 0)) == ["a"]  # versions before the gap still load


def test_corrupt_commit_line_names_the_file(store):
    write_commit(store, 0, [protocol(), metadata(), add("a")])
    store.put(
        "_delta_log/00000000000000000001.json", b'{"add":{"path":"b","size":1}}\n{"remove": {"path": \n'
    )
    with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json") as info:
        load_snapshot(store)
    assert info.value.path == "_delta_log/00000000000000000001.json"


@pytest.mark.parametrize(
    "body",
    [
        b'{"add":{"path":"b","partitionValues":{},"size":"big","modificationTime":1,"dataChange":true}}\n',
        b'{"add":{"partitionValues":{},"size":1,"modificationTime":1,"dataChange":true}}\n',
        b'{"add":{"path":"b","stats":{"numRecords":1}}}\n',
        b"[1,2,3]\n",
        b'{"metaData":{"id":"x"}}\n{"metaData":{"id":"y"}}\n',
    ],
)
def test_malformed_actions_are_corrupt_log_errors(store, body):
    write_commit(store, 0, [protocol(), metadata(), add("a")])
    store.put("_delta_log/00000000000000000001.json", body)
    with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json"):
        load_snapshot(store)


def test_missing_protocol_or_metadata(store):
    write_commit(store, 0, [metadata(), add("a")])
    with pytest.raises(CorruptLogError, match="no protocol"):
        load_snapshot(store)
    other = MemoryStore()
    write_commit(other, 0, [protocol(), add("a")])
    with pytest.raises(CorruptLogError, match="no metaData"):
        load_snapshot(other)


def test_time_travel_by_version_bounds(store):
    simple_table(store, versions=3)
    assert DeltaTable.__name__  # the facade is exercised elsewhere; here the snapshot API
    assert load_snapshot(store, 0).version == 0
    with pytest.raises(VersionNotFoundError, match="latest version is 2"):
        load_snapshot(store, 5)
    with pytest.raises(VersionNotFoundError):
        load_snapshot(store, -1)


# --- checkpoints and the _last_checkpoint hint ----------------------------------------------------


def _checkpointed_table(store):
    write_commit(store, 0, [protocol(), metadata(), add("a"), add("b")])
    write_commit(store, 1, [remove("a"), add("c")])
    md = metadata()["metaData"]
    write_checkpoint(store, 1, [protocol(), {"metaData": md}, add("b"), add("c"), remove("a")])
    write_commit(store, 2, [add("d"), remove("b")])
    store.put("_delta_log/_last_checkpoint", render_last_checkpoint({"version": 1, "size": 5}))


def test_checkpoint_plus_tail(store):
    _checkpointed_table(store)
    snap = load_snapshot(store)
    assert snap.segment.checkpoint.version == 1
    assert [c.version for c in snap.segment.commits] == [2]
    assert paths(snap) == ["c", "d"]
    assert sorted(snap.tombstones.column("path").to_pylist()) == ["a", "b"]


def test_checkpoint_lets_old_commits_go(store):
    _checkpointed_table(store)
    store.delete("_delta_log/00000000000000000000.json")
    assert paths(load_snapshot(store)) == ["c", "d"]
    assert paths(load_snapshot(store, 1)) == ["b", "c"]
    with pytest.raises(VersionNotFoundError, match=r"earliest available version is 1"):
        load_snapshot(store, 0)


@pytest.mark.parametrize(
    "hint", [b"garbage", b'{"version": 1, "size"', b'{"version": 7, "size": 1}', b'{"version": 0, "size": 1}']
)
def test_unusable_or_stale_hints_fall_back_to_listing(store, hint):
    _checkpointed_table(store)
    store.put("_delta_log/_last_checkpoint", hint)
    snap = load_snapshot(store)
    assert paths(snap) == ["c", "d"] and snap.segment.checkpoint.version == 1


def test_incomplete_multipart_checkpoint_is_ignored(store):
    _checkpointed_table(store)
    store.delete("_delta_log/_last_checkpoint")
    store.put("_delta_log/00000000000000000002.checkpoint.0000000001.0000000002.parquet", b"half of it")
    snap = load_snapshot(store)
    assert snap.segment.checkpoint.version == 1 and paths(snap) == ["c", "d"]


def test_truncated_checkpoint_falls_back_loudly(store, caplog):
    _checkpointed_table(store)
    key = "_delta_log/00000000000000000001.checkpoint.parquet"
    store.put(key, store.get(key)[:50])
    with caplog.at_level(logging.WARNING):
        snap = load_snapshot(store)
    assert paths(snap) == ["c", "d"]
    assert snap.segment.checkpoint is None  # rebuilt from the JSON commits
    assert any("00000000000000000001.checkpoint.parquet" in r.getMessage() for r in caplog.records)


def test_truncated_checkpoint_without_fallback_names_the_file(store):
    _checkpointed_table(store)
    store.delete("_delta_log/00000000000000000000.json")
    key = "_delta_log/00000000000000000001.checkpoint.parquet"
    store.put(key, store.get(key)[:50])
    with pytest.raises(CorruptCheckpointError) as info:
        load_snapshot(store)
    assert info.value.path == key


def test_checkpoint_without_metadata_is_an_error_not_a_fallback(store):
    _checkpointed_table(store)
    write_checkpoint(store, 1, [protocol(), add("b"), add("c")])
    with pytest.raises(CorruptLogError, match="no metaData"):
        load_snapshot(store)


def test_v2_json_checkpoint_with_sidecar(store):
    write_commit(store, 0, [protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"]), metadata(), add("a")])
    import io

    side = pa.table(
        {
            "add": pa.array(
                [{"path": "s1", "partitionValues": [], "size": 1, "modificationTime": 1, "dataChange": True}],
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("partitionValues", pa.map_(pa.string(), pa.string())),
                        ("size", pa.int64()),
                        ("modificationTime", pa.int64()),
                        ("dataChange", pa.bool_()),
                    ]
                ),
            )
        }
    )
    buf = io.BytesIO()
    pq.write_table(side, buf)
    store.put("_delta_log/_sidecars/0001-side.parquet", buf.getvalue())
    manifest = [
        {"checkpointMetadata": {"version": 0}},
        protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"]),
        metadata(),
        {"sidecar": {"path": "0001-side.parquet", "sizeInBytes": 1, "modificationTime": 1}},
        add("inline"),
    ]
    store.put(
        "_delta_log/00000000000000000000.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json",
        "\n".join(json.dumps(a) for a in manifest).encode(),
    )
    store.delete("_delta_log/00000000000000000000.json")
    snap = load_snapshot(store)
    assert paths(snap) == ["inline", "s1"]


def test_incremental_update_matches_a_full_load(store):
    from deltaplane.engine.snapshot import update_snapshot

    _checkpointed_table(store)
    old = load_snapshot(store, 1)
    write_commit(store, 3, [add("e"), remove("c")])
    write_commit(store, 4, [{"txn": {"appId": "job", "version": 9}}, metadata(configuration={"k": "v"})])
    updated = update_snapshot(old)
    full = load_snapshot(store)
    assert updated.version == full.version == 4
    assert paths(updated) == paths(full) == ["d", "e"]
    assert sorted(updated.tombstones.column("path").to_pylist()) == sorted(
        full.tombstones.column("path").to_pylist()
    )
    assert updated.metadata == full.metadata and updated.app_transaction_version("job") == 9
    assert update_snapshot(updated) is updated  # nothing new: the same snapshot
    assert update_snapshot(old, 2).version == 2


def test_a_long_lived_writers_state_stays_in_few_chunks(tmp_path):
    """Each commit a writer makes adds its files to the state it keeps as a new chunk; past a
    few, chunks of few rows are combined (each costs every later commit some work). The bound
    used to be checked on a column a replay adds whole, so it never applied: after 300 appends
    one table object held 300 one-row chunks, and its appends slowed as they went."""
    table = DeltaTable.create(str(tmp_path), pa.schema([("id", pa.int64())]))
    for i in range(300):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    files = table.snapshot.files
    assert files.num_rows == 300
    assert max(column.num_chunks for column in files.columns) <= 10
    assert sorted(files.column("path").to_pylist()) == sorted(
        load_snapshot(LocalStore(str(tmp_path))).files.column("path").to_pylist()
    )
