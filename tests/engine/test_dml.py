"""DELETE, UPDATE and MERGE with deletion vectors and copy-on-write; read back by delta-rs."""

from __future__ import annotations

import json

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.commands.merge import MergeError
from deltaplane.engine.deletion_vectors import read_deletion_vector
from deltaplane.engine.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConstraintViolationError,
    DeltaError,
    InvalidPredicateError,
    TableReadOnlyError,
)
from deltaplane.engine.storage import open_store
from tests.engine.test_write import delta_rs_rows
from tests.helpers import assert_same_rows

SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("value", pa.float64()), ("part", pa.string())]
)
DV = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
STRATEGIES = {"dv": DV, "cow": {"delta.enableChangeDataFeed": "true"}}


def rows(ids, part=None) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "name": [f"n{i}" for i in ids],
            "value": [float(i) for i in ids],
            "part": [part or ("a" if i % 2 else "b") for i in ids],
        },
        schema=SCHEMA,
    )


def make(tmp_path, mode: str, n: int = 100, partitioned: bool = True) -> DeltaTable:
    t = DeltaTable.create(
        str(tmp_path / mode),
        SCHEMA,
        partition_by=["part"] if partitioned else None,
        properties=STRATEGIES[mode],
    )
    t.append(rows(range(n)))
    return t


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r["id"], r["name"]))


def assert_delta_rs_reads_every_version(table: DeltaTable) -> None:
    for version in range(table.version + 1):
        ours = DeltaTable(table.uri, version=version).to_arrow()
        theirs = delta_rs_rows(table.uri, version).select(ours.column_names).cast(ours.schema)
        assert_same_rows(ours, theirs)


@pytest.mark.parametrize("mode", ["dv", "cow"])
def test_delete(tmp_path, mode):
    t = make(tmp_path, mode)
    result = t.delete("id % 10 = 3 OR id = 50")
    m = result.operation_metrics
    assert m["numDeletedRows"] == "11"
    if mode == "dv":
        assert (
            m["numDeletionVectorsAdded"] == "2" and m["numCopiedRows"] == "0" and m["numRemovedFiles"] == "0"
        )
    else:
        assert (
            m["numDeletionVectorsAdded"] == "0"
            and int(m["numCopiedRows"]) == 89
            and m["numRemovedFiles"] == "2"
        )
    expected = [r for r in rows(range(100)).to_pylist() if not (r["id"] % 10 == 3 or r["id"] == 50)]
    assert sorted_rows(t.to_arrow()) == sorted(expected, key=lambda r: (r["id"], r["name"]))
    assert t.to_arrow(filter="id = 3").num_rows == 0
    assert_delta_rs_reads_every_version(t)


@pytest.mark.parametrize("mode", ["dv", "cow"])
def test_update(tmp_path, mode):
    t = make(tmp_path, mode)
    result = t.update({"value": "value * 10", "name": "upper(name)"}, "id < 5")
    assert result.operation_metrics["numUpdatedRows"] == "5"
    out = {r["id"]: r for r in t.to_arrow().to_pylist()}
    assert len(out) == 100
    assert out[3] == {"id": 3, "name": "N3", "value": 30.0, "part": "a"}
    assert out[7]["value"] == 7.0
    # updating a partition column moves rows between partitions
    t.update({"part": "'c'"}, "id >= 90")
    assert t.to_arrow(filter="part = 'c'").num_rows == 10
    assert_delta_rs_reads_every_version(t)


@pytest.mark.parametrize("mode", ["dv", "cow"])
def test_merge_upsert_and_delete(tmp_path, mode):
    t = make(tmp_path, mode)
    source = pa.table(
        {
            "id": [2, 3, 150, 151],
            "name": ["X2", "DEL", "X150", "X151"],
            "value": [20.0, 0.0, 1.0, 2.0],
            "part": ["b", "a", "a", "b"],
        }
    )
    result = (
        t.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete("s.name = 'DEL'")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    m = result.operation_metrics
    assert (
        m["numTargetRowsMatchedDeleted"],
        m["numTargetRowsMatchedUpdated"],
        m["numTargetRowsInserted"],
    ) == ("1", "1", "2")
    out = {r["id"]: r for r in t.to_arrow().to_pylist()}
    assert 3 not in out and out[2]["name"] == "X2" and out[150]["value"] == 1.0 and len(out) == 101
    assert_delta_rs_reads_every_version(t)


@pytest.mark.parametrize("mode", ["dv", "cow"])
def test_merge_not_matched_by_source(tmp_path, mode):
    t = make(tmp_path, mode, n=10)
    source = pa.table({"id": [1, 2, 3]})
    (
        t.merge(source, "target.id = source.id")
        .when_not_matched_by_source_delete("target.id > 7")
        .when_not_matched_by_source_update({"name": "'orphan'"})
        .execute()
    )
    out = {r["id"]: r["name"] for r in t.to_arrow().to_pylist()}
    assert out == {0: "orphan", 1: "n1", 2: "n2", 3: "n3", 4: "orphan", 5: "orphan", 6: "orphan", 7: "orphan"}
    assert_delta_rs_reads_every_version(t)


def test_merge_errors(tmp_path):
    t = make(tmp_path, "dv", n=10)
    dup = pa.table({"id": [1, 1], "name": ["a", "b"]})
    with pytest.raises(MergeError, match="more than one source row"):
        t.merge(dup, "t.id = s.id", source_alias="s", target_alias="t").when_matched_update(
            {"name": "s.name"}
        ).execute()
    # an unconditional delete may match several source rows (Delta Spark allows it)
    t.merge(dup, "t.id = s.id", source_alias="s", target_alias="t").when_matched_delete().execute()
    assert t.to_arrow(filter="id = 1").num_rows == 0
    src = pa.table({"id": [5], "name": ["x"]})
    with pytest.raises(MergeError, match="ambiguous"):
        t.merge(src, "t.id = s.id", source_alias="s", target_alias="t").when_matched_update(
            {"name": "name"}
        ).execute()
    with pytest.raises(MergeError, match="no equality"):
        t.merge(src, "t.id > s.id", source_alias="s", target_alias="t").when_matched_delete().execute()
    with pytest.raises(MergeError, match="no source row"):
        (
            t.merge(src, "t.id = s.id", source_alias="s", target_alias="t")
            .when_not_matched_by_source_update({"name": "s.name"})
            .execute()
        )
    with pytest.raises(InvalidPredicateError):
        t.merge(src, "t.id = s.nope", source_alias="s", target_alias="t").when_matched_delete().execute()
    assert t.version == 2  # only the delete above committed


def test_deletion_vectors_share_one_file_and_small_ones_go_inline(tmp_path):
    t = make(tmp_path, "dv", n=2000, partitioned=True)
    t.delete("id % 3 = 0")  # ~330 rows per file: file-stored DVs
    descriptors = [
        json.loads(line)["add"]["deletionVector"]
        for line in (tmp_path / "dv" / "_delta_log" / "00000000000000000002.json").read_text().splitlines()
        if '"add"' in line
    ]
    assert len(descriptors) == 2
    assert {d["storageType"] for d in descriptors} == {"u"}
    assert len({d["pathOrInlineDv"] for d in descriptors}) == 1  # the same file...
    assert len({d["offset"] for d in descriptors}) == 2  # ...at two offsets
    assert len(list((tmp_path / "dv").glob("deletion_vector_*.bin"))) == 1
    t.delete("id = 1001")  # one more row in the odd-id file: its DV is the union of old and new
    adds = [
        json.loads(line)["add"]
        for line in (tmp_path / "dv" / "_delta_log" / "00000000000000000003.json").read_text().splitlines()
        if '"add"' in line
    ]
    dv = DeletionVectorDescriptor.from_json(adds[0]["deletionVector"])
    deleted = read_deletion_vector(open_store(t.uri), dv)
    expected = len([i for i in range(1, 2000, 2) if i % 3 == 0]) + 1
    assert len(deleted) == dv.cardinality == expected
    assert json.loads(adds[0]["stats"])["tightBounds"] is False
    assert t.to_arrow().num_rows == 2000 - len(range(0, 2000, 3)) - 1
    assert_delta_rs_reads_every_version(t)


def test_deletion_vectors_survive_checkpoints(tmp_path):
    t = make(tmp_path, "dv")
    t.delete("id < 10")
    t.checkpoint()
    reloaded = DeltaTable(t.uri)
    assert reloaded.snapshot.segment.checkpoint is not None
    assert reloaded.to_arrow().num_rows == 90
    t.delete("id < 20")  # extends the DV found through the checkpoint
    assert DeltaTable(t.uri).to_arrow().num_rows == 80
    checkpoint = pq.read_table(
        str(tmp_path / "dv" / "_delta_log" / "00000000000000000002.checkpoint.parquet")
    )
    assert any(a and a["deletionVector"] for a in checkpoint.column("add").to_pylist())
    assert_delta_rs_reads_every_version(t)


def test_heavily_deleted_files_are_rewritten(tmp_path):
    t = make(tmp_path, "dv")
    result = t.delete("id < 80", rewrite_threshold=0.5)
    m = result.operation_metrics
    assert m["numDeletionVectorsAdded"] == "0" and m["numRemovedFiles"] == "2" and m["numCopiedRows"] == "20"
    result = t.delete("id = 85", strategy="copy_on_write")
    assert result.operation_metrics["numDeletionVectorsAdded"] == "0"
    assert t.to_arrow().num_rows == 19


def test_whole_partitions_are_removed_without_reading(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["part"])
    t.append(rows(range(10)))
    result = t.delete("part = 'a'")
    assert (
        result.operation_metrics["numRemovedFiles"] == "1"
        and result.operation_metrics["numDeletedRows"] == "5"
    )
    assert t.to_arrow().column("part").to_pylist() == ["b"] * 5
    t.delete()
    assert t.to_arrow().num_rows == 0


def test_strategy_and_table_rules(tmp_path):
    t = make(tmp_path, "cow", n=10)
    with pytest.raises(DeltaError, match="does not enable deletion vectors"):
        t.delete("id = 1", strategy="deletion_vectors")
    with pytest.raises(ValueError):
        t.delete("id = 1", strategy="fast")
    ro = DeltaTable.create(str(tmp_path / "ro"), SCHEMA, properties={"delta.appendOnly": "true"})
    ro.append(rows(range(3)))
    with pytest.raises(TableReadOnlyError):
        ro.delete("id = 1")
    checked = DeltaTable.create(
        str(tmp_path / "ck"), SCHEMA, properties={"delta.constraints.v": "value < 100"}
    )
    checked.append(rows(range(3)))
    with pytest.raises(ConstraintViolationError):
        checked.update({"value": "value + 1000"}, "id = 1")
    assert checked.version == 1


def test_table_properties_choose_the_strategy_and_threshold(tmp_path):
    forced = DeltaTable.create(
        str(tmp_path / "forced"), SCHEMA, properties={**DV, "deltaplane.dml.strategy": "copy_on_write"}
    )
    forced.append(rows(range(10)))
    m = forced.delete("id = 1").operation_metrics
    assert m["numDeletionVectorsAdded"] == "0" and m["numRemovedFiles"] == "1"
    # the command's argument wins over the table property
    assert (
        forced.delete("id = 2", strategy="deletion_vectors").operation_metrics["numDeletionVectorsAdded"]
        == "1"
    )

    low = DeltaTable.create(
        str(tmp_path / "low"), SCHEMA, properties={**DV, "deltaplane.dml.rewriteThreshold": "0.05"}
    )
    low.append(rows(range(10)))
    m = low.delete("id = 1").operation_metrics  # 10% of the file passes a 5% threshold
    assert m["numDeletionVectorsAdded"] == "0" and m["numCopiedRows"] == "9"
    assert sorted(forced.to_arrow().column("id").to_pylist()) == [0, *range(3, 10)]
    assert sorted(low.to_arrow().column("id").to_pylist()) == [0, *range(2, 10)]


def test_merge_source_may_be_a_record_batch_reader(tmp_path):
    t = make(tmp_path, "dv", n=10)
    source = rows([1, 2, 30, 31]).set_column(2, "value", pa.array([-1.0, -2.0, 30.0, 31.0]))
    reader = pa.RecordBatchReader.from_batches(source.schema, source.to_batches(max_chunksize=1))
    (
        t.merge(reader, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    out = {r["id"]: r["value"] for r in t.to_arrow().to_pylist()}
    assert len(out) == 12 and out[1] == -1.0 and out[2] == -2.0 and out[31] == 31.0 and out[5] == 5.0
    assert_delta_rs_reads_every_version(t)


def test_change_data_feed(tmp_path):
    t = make(tmp_path, "dv", n=10)
    t.delete("id = 1")
    t.update({"value": "-value"}, "id = 2")
    (
        t.merge(
            pa.table({"id": [3, 20], "value": [33.0, 20.0]}),
            "t.id = s.id",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_update({"value": "s.value"})
        .when_not_matched_insert({"id": "s.id", "value": "s.value"})
        .execute()
    )
    feed = t.changes(1).select(["id", "value", "_change_type", "_commit_version"]).to_pylist()
    by_version = {}
    for r in feed:
        by_version.setdefault(r["_commit_version"], []).append((r["_change_type"], r["id"], r["value"]))
    assert len(by_version[1]) == 10 and all(c == "insert" for c, _, _ in by_version[1])
    assert by_version[2] == [("delete", 1, 1.0)]
    assert sorted(by_version[3]) == [("update_postimage", 2, -2.0), ("update_preimage", 2, 2.0)]
    assert sorted(by_version[4]) == [
        ("insert", 20, 20.0),
        ("update_postimage", 3, 33.0),
        ("update_preimage", 3, 3.0),
    ]
    assert t.changes(2, 2).num_rows == 1
    assert pa.types.is_timestamp(t.changes(4).schema.field("_commit_timestamp").type)
    with pytest.raises(DeltaError, match="not enabled"):
        DeltaTable.create(str(tmp_path / "plain"), SCHEMA).changes(0)


def _drop_cdc_actions(table_dir, version: int) -> None:
    """Rewrite a commit without its cdc actions, as a writer that leaves the feed to DVs does."""
    commit = table_dir / "_delta_log" / f"{version:020d}.json"
    lines = [line for line in commit.read_text().splitlines() if '"cdc"' not in line[:8]]
    commit.write_text("\n".join(lines) + "\n")


def test_change_feed_without_cdc_files_is_derived_from_deletion_vectors(tmp_path):
    t = make(tmp_path, "dv", n=20)
    before = sorted_rows(t.to_arrow())
    t.delete("id IN (3, 4, 5)")  # v2: DVs on both partition files
    t.delete("id = 7")  # v3: extends the DV of part a
    t.update({"value": "value * 10"}, "id = 8")  # v4: DV + a new file with the updated row
    for version in (2, 3, 4):
        _drop_cdc_actions(tmp_path / "dv", version)
    feed = DeltaTable(t.uri).changes(2).to_pylist()
    got = sorted((r["_commit_version"], r["_change_type"], r["id"], r["value"]) for r in feed)
    by_id = {r["id"]: r for r in before}
    expected = sorted(
        [(2, "delete", i, by_id[i]["value"]) for i in (3, 4, 5)]
        + [(3, "delete", 7, by_id[7]["value"])]
        + [(4, "delete", 8, by_id[8]["value"]), (4, "insert", 8, by_id[8]["value"] * 10)]
    )
    assert got == expected


def test_concurrent_deletes_of_the_same_file_conflict(tmp_path):
    a = make(tmp_path, "dv")
    read_by_b = DeltaTable(a.uri).snapshot  # both read version 1
    from deltaplane.engine.commands.dml import execute_delete

    first = execute_delete(a._store, a.snapshot, "id = 1")
    assert first.version == 2
    with pytest.raises(ConcurrentDeleteDeleteError):
        execute_delete(a._store, read_by_b, "id = 3")  # the same file (part a)


def test_a_concurrent_append_into_the_deleted_range_conflicts_under_serializable(tmp_path):
    from deltaplane.engine.commands.dml import execute_delete

    strict = DeltaTable.create(
        str(tmp_path / "strict"),
        SCHEMA,
        partition_by=["part"],
        properties={**DV, "delta.isolationLevel": "Serializable"},
    )
    strict.append(rows(range(100)))
    snapshot = strict.snapshot
    DeltaTable(strict.uri).append(rows([300], part="b"))  # outside the delete's partition
    assert execute_delete(strict._store, snapshot, "part = 'a' AND id < 50").version == 3
    snapshot = DeltaTable(strict.uri).snapshot
    DeltaTable(strict.uri).append(rows([45], part="a"))  # lands in the range the delete reads
    with pytest.raises(ConcurrentAppendError):
        execute_delete(strict._store, snapshot, "part = 'a' AND id < 90")

    # under WriteSerializable (the default) a blind append does not conflict
    a = make(tmp_path, "dv")
    snapshot = a.snapshot
    DeltaTable(a.uri).append(rows([201], part="a"))
    result = execute_delete(a._store, snapshot, "part = 'a' AND id > 0")
    assert result.version == 3
    assert DeltaTable(a.uri).to_arrow(filter="id = 201").num_rows == 1  # the append survived


def test_we_read_tables_delta_rs_modified(tmp_path):
    path = str(tmp_path / "rs")
    deltalake.write_deltalake(path, rows(range(50)), partition_by=["part"])
    rs = deltalake.DeltaTable(path)
    rs.delete("id < 5")
    rs.update(updates={"name": "'changed'"}, predicate="id > 40")
    (
        rs.merge(rows([1, 2, 60]), predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    for version in range(deltalake.DeltaTable(path).version() + 1):
        ours = DeltaTable(path, version=version).to_arrow()
        theirs = deltalake.DeltaTable(path, version=version).to_pyarrow_table().select(ours.column_names)
        assert_same_rows(ours, theirs.cast(ours.schema))
    assert pc.sum(pc.equal(DeltaTable(path).to_arrow()["name"], "changed")).as_py() == 9


def test_small_deletion_vectors_are_inline(tmp_path):
    t = make(tmp_path, "dv", n=10)
    t.delete("id = 4")
    adds = [
        json.loads(line)["add"]
        for line in (tmp_path / "dv" / "_delta_log" / "00000000000000000002.json").read_text().splitlines()
        if '"add"' in line
    ]
    assert adds[0]["deletionVector"]["storageType"] == "i"
    assert not list((tmp_path / "dv").glob("deletion_vector_*.bin"))
    assert t.to_arrow(filter="id = 4").num_rows == 0
    assert_delta_rs_reads_every_version(t)
