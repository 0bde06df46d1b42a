"""DROP FEATURE and ADD FEATURE. The commit sequences expected here are the ones Delta Spark 4.4
made for the same drops (recorded by hand from its logs; ``tests/deltaspark/test_drop_feature.py``
compares the two engines on the same tables)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.actions import Protocol
from deltaplane.engine.commands.features import drop_feature, normalized_protocol, protocol_without
from deltaplane.engine.errors import CommitConflictError, FeatureDropError, InvalidArgumentError
from deltaplane.engine.storage import LocalStore

DAY_MS = 86_400_000


def operations(path, after: int) -> list[tuple[str, dict]]:
    out = []
    for f in sorted(Path(path, "_delta_log").glob("*.json")):
        version = int(f.name[:20])
        if version <= after:
            continue
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                out.append(
                    (action["commitInfo"]["operation"], action["commitInfo"].get("operationParameters"))
                )
    return out


def checkpoints(path) -> list[int]:
    return sorted(int(p.name[:20]) for p in Path(path, "_delta_log").glob("*.checkpoint*.parquet"))


def age_log(path, days: float) -> None:
    """Every log file older by ``days`` (the log's timestamps are its files' times here)."""
    when = time.time() - days * 86_400
    for p in Path(path, "_delta_log").iterdir():
        if p.is_file():
            os.utime(p, (when, when))


def rows(path) -> list:
    return sorted(DeltaTable(str(path)).to_arrow().column("a").to_pylist())


def features(table: DeltaTable) -> set[str]:
    p = table.protocol()
    legacy = {(1, 2): set(), (1, 1): set()}
    return (
        set(p.reader_features or [])
        | set(p.writer_features or [])
        | legacy.get((p.min_reader_version, p.min_writer_version), set())
    )


BARRIER = [("Empty Commit", {})] * 3


def drop_params(name: str, truncate: bool = False) -> tuple[str, dict]:
    return ("DROP FEATURE", {"featureName": name, "truncateHistory": "true" if truncate else "false"})


# --- the protocol arithmetic ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        # Delta Spark's own examples of normalisation, and the legacy ladder
        ({"appendOnly", "invariants", "checkConstraints"}, Protocol(1, 3)),
        ({"rowTracking", "domainMetadata"}, Protocol(1, 7, None, ["domainMetadata", "rowTracking"])),
        (set(), Protocol(1, 1)),
        ({"appendOnly", "invariants"}, Protocol(1, 2)),
        (
            {
                "appendOnly",
                "invariants",
                "checkConstraints",
                "changeDataFeed",
                "generatedColumns",
                "columnMapping",
            },
            Protocol(2, 5),
        ),
        # column mapping without the rest of the ladder: reader 2, writer 7, no reader list
        (
            {"columnMapping", "checkpointProtection"},
            Protocol(2, 7, None, ["checkpointProtection", "columnMapping"]),
        ),
        (
            {"deletionVectors", "columnMapping"},
            Protocol(3, 7, ["columnMapping", "deletionVectors"], ["columnMapping", "deletionVectors"]),
        ),
        # a gap in the ladder is not legacy: checkConstraints without invariants
        ({"appendOnly", "checkConstraints"}, Protocol(1, 7, None, ["appendOnly", "checkConstraints"])),
    ],
)
def test_normalized_protocol_is_the_weakest_form(features, expected):
    assert normalized_protocol(features) == expected


def test_protocol_without_a_legacy_feature_leaves_table_features():
    # (1, 4) without changeDataFeed: appendOnly, invariants, checkConstraints, generatedColumns
    out = protocol_without(Protocol(1, 4), "changeDataFeed")
    assert out == Protocol(1, 7, None, ["appendOnly", "checkConstraints", "generatedColumns", "invariants"])
    assert protocol_without(Protocol(1, 3), "checkConstraints") == Protocol(1, 2)
    three = Protocol(
        3, 7, ["deletionVectors", "v2Checkpoint"], ["deletionVectors", "v2Checkpoint", "rowTracking"]
    )
    assert protocol_without(three, "deletionVectors") == Protocol(
        3, 7, ["v2Checkpoint"], ["rowTracking", "v2Checkpoint"]
    )


# --- each feature ---------------------------------------------------------------------------------


def _create(path, configuration, schema=None) -> DeltaTable:
    DeltaTable.create(str(path), schema or pa.schema([("a", pa.int64())]), configuration=configuration)
    return DeltaTable(str(path))


def test_drop_deletion_vectors_purges_protects_history_and_the_table_lives_on(tmp_path):
    t = _create(tmp_path, {"delta.enableDeletionVectors": "true"})
    t.append(pa.table({"a": list(range(3000))}))
    t.delete("a % 10 = 0")  # a bitmap too large to inline: a deletion-vector file
    t.delete("a % 10 = 1")  # replaces it: the first DV file is now only in a tombstone
    before = rows(tmp_path)
    start = t.version()
    result = t.alter.drop_feature("deletionVectors")
    assert operations(tmp_path, start) == [
        ("UNSET TBLPROPERTIES", {"properties": '["delta.enableDeletionVectors"]', "ifExists": "true"}),
        ("REORG", {"predicate": "[]", "applyPurge": "true"}),
        ("Deletion Vector Tombstones", {}),
        *BARRIER,
        drop_params("deletionVectors"),
    ]
    drop = result.version
    assert [v for v, _ in result.commits] == list(range(start + 1, drop + 1))
    assert result.checkpoints == (drop - 3, drop - 2, drop - 1, drop)
    assert checkpoints(tmp_path) == [drop - 3, drop - 2, drop - 1, drop]
    assert "deletionVectors" not in features(t) and "checkpointProtection" in features(t)
    assert t.metadata.configuration["delta.requireCheckpointProtectionBeforeVersion"] == str(drop)
    assert rows(tmp_path) == before
    assert DeltaTable(str(tmp_path)).snapshot.files.column("deletion_vector").null_count == 1
    # the tombstones name each replaced DV file by path, with dataChange=false
    tombstones = [
        json.loads(line)["remove"]
        for line in (tmp_path / "_delta_log" / f"{start + 3:020d}.json").read_text().splitlines()
        if "remove" in line
    ]
    assert tombstones and all(
        r["path"].startswith("deletion_vector_") and not r["dataChange"] for r in tombstones
    )
    assert all((tmp_path / r["path"]).exists() for r in tombstones)
    # the same table object keeps working: a delete is now a copy-on-write rewrite
    t.delete("a = 2")
    assert "deletionVectors" not in features(t)
    assert DeltaTable(str(tmp_path)).snapshot.files.column("deletion_vector").null_count == 1
    assert rows(tmp_path) == [a for a in before if a != 2]
    # delta-rs's pyarrow reader, which refuses deletion vectors, reads the table again
    assert sorted(deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table().column("a").to_pylist()) == rows(
        tmp_path
    )
    # enabling DVs again brings the feature back (a new protocol upgrade)
    t.alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    assert "deletionVectors" in features(t)


def test_drop_v2_checkpoint_switches_to_classic_checkpoints(tmp_path):
    t = _create(tmp_path, {"delta.checkpointPolicy": "v2"})
    t.append(pa.table({"a": [1, 2]}))
    t.checkpoint()
    first = checkpoints(tmp_path)[0]
    names = pq.read_schema(tmp_path / "_delta_log" / f"{first:020d}.checkpoint.parquet").names
    assert "checkpointMetadata" in names
    start = t.version()
    result = t.alter.drop_feature("v2Checkpoint")
    assert operations(tmp_path, start) == [
        ("SET TBLPROPERTIES", {"properties": '{"delta.checkpointPolicy":"classic"}'}),
        *BARRIER,
        drop_params("v2Checkpoint"),
    ]
    for v in result.checkpoints:
        names = pq.read_schema(tmp_path / "_delta_log" / f"{v:020d}.checkpoint.parquet").names
        assert "checkpointMetadata" not in names
    assert "v2Checkpoint" not in features(t)
    assert rows(tmp_path) == [1, 2]


def test_drop_type_widening_rewrites_only_files_of_older_types(tmp_path):
    schema = pa.schema(
        [("a", pa.int32()), ("s", pa.struct([("x", pa.int16())])), ("arr", pa.list_(pa.int32()))]
    )
    t = _create(tmp_path, {"delta.enableTypeWidening": "true"}, schema)
    t.append(pa.table({"a": [1], "s": [{"x": 1}], "arr": [[1]]}, schema=schema))
    t.alter.change_column_type("a", "bigint")
    t.alter.change_column_type("s.x", "int")
    t.alter.change_column_type("arr.element", "bigint")
    new = pa.schema([("a", pa.int64()), ("s", pa.struct([("x", pa.int32())])), ("arr", pa.list_(pa.int64()))])
    t.append(pa.table({"a": [2**40], "s": [{"x": 70000}], "arr": [[2**40]]}, schema=new))
    newer = set(t.snapshot.files.column("path").to_pylist()) - {
        p for p in DeltaTable(str(tmp_path), version=1).snapshot.files.column("path").to_pylist()
    }
    start = t.version()
    t.alter.drop_feature("typeWidening")
    ops = operations(tmp_path, start)
    assert [o for o, _ in ops] == [
        "UNSET TBLPROPERTIES",
        "REORG",
        "DROP FEATURE",
        *["Empty Commit"] * 3,
        "DROP FEATURE",
    ]
    changed = json.loads(ops[2][1]["columns"])
    assert [c["name"] for c in changed] == ["a", "s.x", "arr"]
    assert changed[0]["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    schema_string = t.metadata.schema_string
    assert "delta.typeChanges" not in schema_string
    files = set(t.snapshot.files.column("path").to_pylist())
    assert newer <= files  # the file written after the changes was not rewritten
    assert "typeWidening" not in features(t)
    got = DeltaTable(str(tmp_path)).to_arrow()
    assert sorted(got.column("a").to_pylist()) == [1, 2**40]
    for p in files - newer:  # the rewritten file has the current types
        physical = pq.read_schema(tmp_path / p)
        assert physical.field("a").type == pa.int64()
        assert physical.field("s").type.field("x").type == pa.int32()
        assert physical.field("arr").type.value_type == pa.int64()


def test_drop_in_commit_timestamps_and_row_tracking_need_no_protection(tmp_path):
    t = _create(tmp_path / "ict", {"delta.enableInCommitTimestamps": "true"})
    t.append(pa.table({"a": [1]}))
    t.alter.set_table_properties({"delta.enableInCommitTimestamps": "false"})
    t.alter.set_table_properties({"delta.enableInCommitTimestamps": "true"})  # provenance recorded
    assert "delta.inCommitTimestampEnablementVersion" in t.metadata.configuration
    start = t.version()
    result = t.alter.drop_feature("inCommitTimestamp")
    assert operations(tmp_path / "ict", start) == [
        (
            "UNSET TBLPROPERTIES",
            {
                "properties": '["delta.inCommitTimestampEnablementVersion",'
                '"delta.inCommitTimestampEnablementTimestamp","delta.enableInCommitTimestamps"]',
                "ifExists": "true",
            },
        ),
        drop_params("inCommitTimestamp"),
    ]
    # (the property toggles above made the protocol list appendOnly and invariants: legacy (1, 2))
    assert result.checkpoints == () and t.protocol() == Protocol(1, 2)
    assert t.metadata.configuration == {"delta.enableInCommitTimestamps": "false"}
    t.append(pa.table({"a": [2]}))  # writers without ICT can write it
    assert rows(tmp_path / "ict") == [1, 2]

    t = _create(tmp_path / "rt", {"delta.enableRowTracking": "true"})
    t.append(pa.table({"a": [1, 2]}))
    t.append(pa.table({"a": [3]}))
    start = t.version()
    t.alter.drop_feature("rowTracking")
    assert operations(tmp_path / "rt", start) == [
        (
            "SET TBLPROPERTIES",
            {"properties": '{"delta.enableRowTracking":"false","delta.rowTrackingSuspended":"true"}'},
        ),
        ("ROW TRACKING UNBACKFILL", {"batchId": "0"}),
        drop_params("rowTracking"),
    ]
    files = t.snapshot.files
    assert files.column("base_row_id").null_count == files.num_rows == 2
    assert not any(k.startswith("delta.rowTracking") or "RowTracking" in k for k in t.metadata.configuration)
    assert "delta.rowTracking" not in t.snapshot.domains
    assert features(t) == {"domainMetadata"}
    # domainMetadata has no dependent left: it goes too, and the protocol is legacy again
    t.alter.drop_feature("domainMetadata")
    assert t.protocol() == Protocol(1, 1)
    t.append(pa.table({"a": [4]}))
    assert t.snapshot.files.column("base_row_id").null_count == 3
    assert rows(tmp_path / "rt") == [1, 2, 3, 4]


def test_drop_vacuum_protocol_check_and_check_constraints(tmp_path):
    t = _create(tmp_path / "v", {"delta.feature.vacuumProtocolCheck": "supported"})
    t.alter.drop_feature("vacuumProtocolCheck")
    assert [o for o, _ in operations(tmp_path / "v", 0)] == ["Empty Commit"] * 3 + ["DROP FEATURE"]
    assert features(t) == {"checkpointProtection"}

    t = _create(tmp_path / "c", {})
    t.append(pa.table({"a": [1]}))
    t.alter.add_constraint({"positive": "a > 0"})
    with pytest.raises(FeatureDropError) as e:
        t.alter.drop_feature("checkConstraints")
    assert e.value.error_class == "DELTA_CANNOT_DROP_CHECK_CONSTRAINT_FEATURE" and "`positive`" in str(
        e.value
    )
    t.alter.drop_constraint("positive")
    start = t.version()
    t.alter.drop_feature("checkConstraints")
    assert operations(tmp_path / "c", start) == [drop_params("checkConstraints")]
    assert t.protocol() == Protocol(1, 2)


def test_drop_column_mapping_rewrites_every_file_under_its_logical_names(tmp_path):
    schema = pa.schema(
        [("id", pa.int64()), ("b", pa.string()), ("s", pa.struct([("x", pa.int64())])), ("p", pa.string())]
    )
    DeltaTable.create(
        str(tmp_path),
        schema,
        partition_by=["p"],
        configuration={"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"},
    )
    t = DeltaTable(str(tmp_path))
    data = pa.table(
        {
            "id": list(range(40)),
            "b": [f"b{i}" for i in range(40)],
            "s": [{"x": i} for i in range(40)],
            "p": ["one", "two"] * 20,
        },
        schema=schema,
    )
    t.append(data)
    t.alter.rename_column("b", "label")
    t.alter.rename_column("s.x", "y")
    t.alter.rename_column("p", "part")
    t.delete("id = 3")  # a deletion vector: its row stays gone
    expected = sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])
    start = t.version()
    t.alter.drop_feature("columnMapping")
    assert [o for o, _ in operations(tmp_path, start)] == [
        "REMOVE COLUMN MAPPING",
        *["Empty Commit"] * 3,
        "DROP FEATURE",
    ]
    assert "columnMapping" not in features(t)
    assert "delta.columnMapping" not in t.metadata.schema_string
    assert not any(k.startswith("delta.columnMapping") for k in t.metadata.configuration)
    assert sorted(DeltaTable(str(tmp_path)).to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    # the files hold the logical names now, partition values are keyed by them, no DV is left
    files = t.snapshot.files
    assert files.column("deletion_vector").null_count == files.num_rows
    assert {tuple(pv) for pv in files.column("partition_values").to_pylist()} == {("part",)}
    for path in files.column("path").to_pylist():
        physical = pq.read_schema(tmp_path / path)
        assert physical.names == ["id", "label", "s"] and physical.field("s").type.names == ["y"]
    assert '"label"' in files.column("stats").to_pylist()[0]
    # the table is an ordinary one: readers without column mapping read it, writers write it
    theirs = deltalake.DeltaTable(str(tmp_path))
    got = deltalake.QueryBuilder().register("t", theirs).execute("select id, label, s.y from t").read_all()
    assert sorted(got.column("id").to_pylist()) == [r["id"] for r in expected]
    t.append(pa.table({"id": [100], "label": ["new"], "s": [{"y": 1}], "part": ["one"]}, schema=t.schema))
    assert DeltaTable(str(tmp_path)).count() == len(expected) + 1


def test_column_mapping_stays_where_a_name_needs_it(tmp_path):
    t = _create(tmp_path, {"delta.columnMapping.mode": "name"}, pa.schema([("a b", pa.int64())]))
    t.append(pa.table({"a b": [1]}))
    with pytest.raises(FeatureDropError) as e:
        t.alter.drop_feature("columnMapping")
    assert e.value.error_class == "DELTA_INVALID_COLUMN_NAMES_WHEN_REMOVING_COLUMN_MAPPING"
    assert t.version() == 1 == DeltaTable(str(tmp_path)).version()


def test_drop_with_truncated_history_waits_for_the_history_to_expire(tmp_path):
    t = _create(tmp_path, {"delta.enableDeletionVectors": "true"})
    t.append(pa.table({"a": list(range(100))}))
    t.delete("a < 10")
    start = t.version()
    with pytest.raises(FeatureDropError) as e:
        t.alter.drop_feature("deletionVectors", truncate_history=True)
    assert e.value.error_class == "DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD"
    # the traces are gone from the latest version, and a checkpoint on top of it (the tombstones
    # commit is empty: the inline deletion vectors have no file to protect; Delta Spark commits it too)
    assert [o for o, _ in operations(tmp_path, start)] == [
        "UNSET TBLPROPERTIES",
        "REORG",
        "Deletion Vector Tombstones",
        "Empty Commit",
    ]
    assert checkpoints(tmp_path) == [start + 4]
    # again at once: the history still uses the feature
    with pytest.raises(FeatureDropError) as e:
        t.alter.drop_feature("deletionVectors", truncate_history=True)
    assert e.value.error_class == "DELTA_FEATURE_DROP_HISTORICAL_VERSIONS_EXIST"
    assert "deletionVectors" in features(t)
    # once the history is older than the truncation retention (24 hours), it goes
    age_log(tmp_path, 2)
    before = rows(tmp_path)
    result = t.alter.drop_feature("deletionVectors", truncate_history=True)
    assert [op for _, op in result.commits] == ["Deletion Vector Tombstones", "Empty Commit", "DROP FEATURE"]
    assert operations(tmp_path, result.version - 1) == [drop_params("deletionVectors", truncate=True)]
    assert "deletionVectors" not in features(t) and "checkpointProtection" not in features(t)
    assert t.protocol() == Protocol(1, 1)
    commits = sorted(int(p.name[:20]) for p in (tmp_path / "_delta_log").glob("*.json"))
    assert commits[0] == checkpoints(tmp_path)[0]  # the history before the checkpoint was truncated
    assert rows(tmp_path) == before


def test_checkpoint_protection_is_dropped_only_with_its_history(tmp_path):
    t = _create(tmp_path, {"delta.feature.vacuumProtocolCheck": "supported"})
    t.append(pa.table({"a": [1]}))
    protected = t.alter.drop_feature("vacuumProtocolCheck").version
    with pytest.raises(FeatureDropError) as e:
        t.alter.drop_feature("checkpointProtection")
    assert e.value.error_class == "DELTA_FEATURE_CAN_ONLY_DROP_CHECKPOINT_PROTECTION_WITH_HISTORY_TRUNCATION"
    start = t.version()
    with pytest.raises(FeatureDropError) as e:
        t.alter.drop_feature("checkpointProtection", truncate_history=True)
    assert e.value.error_class == "DELTA_FEATURE_DROP_CHECKPOINT_PROTECTION_WAIT_FOR_RETENTION_PERIOD"
    assert [o for o, _ in operations(tmp_path, start)] == ["Empty Commit"]
    # its log cleanup (24 hours) kept the recent history
    assert (tmp_path / "_delta_log" / f"{0:020d}.json").exists()
    age_log(tmp_path, 2)
    start = t.version()
    result = t.alter.drop_feature("checkpointProtection", truncate_history=True)
    # a checkpoint on a new commit, the log cleaned up to it, the property and then the feature
    assert [o for o, _ in operations(tmp_path, start)] == [
        "Empty Commit",
        "UNSET TBLPROPERTIES",
        "DROP FEATURE",
    ]
    assert result.commits[-1][1] == "DROP FEATURE"
    commits = sorted(int(p.name[:20]) for p in (tmp_path / "_delta_log").glob("*.json"))
    assert commits[0] >= protected
    assert "checkpointProtection" not in features(t)
    assert "delta.requireCheckpointProtectionBeforeVersion" not in t.metadata.configuration
    assert rows(tmp_path) == [1]


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("feature", "kwargs", "error_class"),
    [
        ("appendOnly", {}, "DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE"),
        ("generatedColumns", {}, "DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT"),
        ("delta.enableChangeDataFeed", {}, "DELTA_FEATURE_DROP_FEATURE_IS_DELTA_PROPERTY"),
        ("noSuchFeature", {}, "DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE"),
        ("'; DROP TABLE x; --", {}, "DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE"),
        (
            "inCommitTimestamp",
            {"truncate_history": True},
            "DELTA_FEATURE_DROP_HISTORY_TRUNCATION_NOT_ALLOWED",
        ),
        ("domainMetadata", {}, "DELTA_FEATURE_DROP_DEPENDENT_FEATURE"),
    ],
)
def test_refusals_carry_delta_sparks_error_class_and_commit_nothing(tmp_path, feature, kwargs, error_class):
    t = _create(
        tmp_path,
        {
            "delta.appendOnly": "true",
            "delta.enableRowTracking": "true",
            "delta.enableInCommitTimestamps": "true",
            "delta.columnMapping.mode": "name",
        },
    )
    version = t.version()
    with pytest.raises(FeatureDropError) as e:
        t.alter.drop_feature(feature, **kwargs)
    assert e.value.error_class == error_class and e.value.feature == feature
    assert t.version() == version == DeltaTable(str(tmp_path)).version()


def test_clustering_keeps_domain_metadata(tmp_path):
    DeltaTable.create(str(tmp_path), pa.schema([("a", pa.int64())]), cluster_by=["a"])
    with pytest.raises(FeatureDropError, match="clustering") as e:
        DeltaTable(str(tmp_path)).alter.drop_feature("domainMetadata")
    assert e.value.error_class == "DELTA_FEATURE_DROP_DEPENDENT_FEATURE"


def test_drop_feature_argument_errors(tmp_path):
    t = _create(tmp_path, {})
    for bad in ("", "   ", None, 3):
        with pytest.raises(InvalidArgumentError):
            t.alter.drop_feature(bad)


# --- ADD FEATURE ------------------------------------------------------------------------------


def test_add_feature_names_versions_and_reruns(tmp_path):
    t = _create(tmp_path, {})
    assert t.protocol() == Protocol(1, 2)
    with pytest.raises(InvalidArgumentError, match="allow_protocol_versions_increase"):
        t.alter.add_feature("deletionVectors")
    assert t.version() == 0
    result = t.alter.add_feature(
        ["DeletionVectors", "vacuumProtocolCheck"], allow_protocol_versions_increase=True
    )
    assert result.operation == "SET TBLPROPERTIES" and not result.skipped
    assert {"deletionVectors", "vacuumProtocolCheck"} <= features(t)
    again = t.alter.add_feature("deletionVectors")  # already there: nothing committed
    assert again.skipped and t.version() == result.version
    t.alter.add_feature(deltalake.TableFeatures.ChangeDataFeed)  # delta-rs's enum; writer 7 already
    assert "changeDataFeed" in features(t)
    with pytest.raises(InvalidArgumentError, match="no table feature"):
        t.alter.add_feature("nope")
    with pytest.raises(InvalidArgumentError):
        t.alter.add_feature([])


def test_add_feature_matches_delta_rs(tmp_path):
    """delta-rs's add_feature and ours give the table the same features."""
    for name in ("ours", "theirs"):
        _create(tmp_path / name, {})
    DeltaTable(str(tmp_path / "ours")).alter.add_feature(
        deltalake.TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    deltalake.DeltaTable(str(tmp_path / "theirs")).alter.add_feature(
        deltalake.TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    ours, theirs = DeltaTable(str(tmp_path / "ours")), DeltaTable(str(tmp_path / "theirs"))
    assert features(ours) - {"appendOnly", "invariants"} == features(theirs) - {"appendOnly", "invariants"}
    assert ours.protocol().min_reader_version == theirs.protocol().min_reader_version == 3


# --- interruptions and concurrent writers ---------------------------------------------------------


class _BeforeDowngrade(LocalStore):
    """A local store that runs ``callback`` once, just before the downgrade commit is written:
    another writer's commit lands between the traces' removal and the downgrade."""

    def __init__(self, root: str, callback):
        super().__init__(root)
        self._callback = callback

    def put(self, key, data, *, mode="overwrite"):
        if self._callback is not None and key.endswith(".json") and b'"featureName"' in data:
            callback, self._callback = self._callback, None
            callback()
        return super().put(key, data, mode=mode)


def test_a_writer_that_uses_the_feature_again_before_the_downgrade_stops_it(tmp_path):
    t = _create(tmp_path, {"delta.enableDeletionVectors": "true"})
    t.append(pa.table({"a": list(range(100))}))
    t.delete("a < 5")

    def concurrent_writer():  # turns DVs back on and deletes with one
        other = DeltaTable(str(tmp_path))
        other.alter.set_table_properties({"delta.enableDeletionVectors": "true"})
        other.delete("a = 50")

    store = _BeforeDowngrade(str(tmp_path), concurrent_writer)
    with pytest.raises(CommitConflictError):
        drop_feature(store, DeltaTable(str(tmp_path)).snapshot, "deletionVectors")
    again = DeltaTable(str(tmp_path))
    assert "deletionVectors" in features(again)
    assert again.snapshot.files.column("deletion_vector").null_count < again.snapshot.files.num_rows
    assert rows(tmp_path) == [a for a in range(5, 100) if a != 50]
    # run again: the traces the other writer left are removed too, and nothing is lost
    again.alter.drop_feature("deletionVectors")
    assert "deletionVectors" not in features(DeltaTable(str(tmp_path)))
    assert rows(tmp_path) == [a for a in range(5, 100) if a != 50]


def test_a_drop_interrupted_between_its_commits_finishes_when_run_again(tmp_path):
    """A task killed after the REORG (the traces gone, no barrier yet): the rerun does the rest."""
    t = _create(tmp_path, {"delta.enableDeletionVectors": "true"})
    t.append(pa.table({"a": list(range(100))}))
    t.delete("a < 5")
    t.alter.unset_table_properties(["delta.enableDeletionVectors"])
    t.optimize(purge=True)
    start = t.version()
    result = t.alter.drop_feature("deletionVectors")
    assert [op for _, op in result.commits] == [
        "Deletion Vector Tombstones",
        *["Empty Commit"] * 3,
        "DROP FEATURE",
    ]
    assert result.commits[0][0] == start + 1
    assert rows(tmp_path) == list(range(5, 100))
