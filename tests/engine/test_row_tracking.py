"""Row tracking: every row's id and commit version assigned at commit, kept by every rewrite.

Expected ids are worked out by hand from the order of the writes (an append of n rows to a table
whose high-water mark is h gets ids h+1 .. h+n); "kept" means the same logical row (by its
``id`` column) reads back with the same ``_metadata.row_id`` after the rewrite.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.actions import DomainMetadata
from deltaplane.engine.commands.context import WriteContext
from deltaplane.engine.errors import DeltaError, InvalidArgumentError, SchemaError
from deltaplane.engine.row_tracking import ROW_COMMIT_VERSION, ROW_ID, RowTrackingError
from deltaplane.engine.storage import open_store
from tests.workers import run_in_threads

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("part", pa.string())])
TRACKED = {"delta.enableRowTracking": "true"}
WITH_DV = {**TRACKED, "delta.enableDeletionVectors": "true"}


def rows(ids, v: str = "x") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {"id": ids, "v": [v] * len(ids), "part": ["a" if i % 2 else "b" for i in ids]}, schema=SCHEMA
    )


def make(tmp_path, properties=TRACKED, *, batches=3, size=5, partitioned=False) -> DeltaTable:
    t = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, properties=properties, partition_by=["part"] if partitioned else None
    )
    for k in range(batches):
        t.append(rows(range(k * 10, k * 10 + size)))
    return t


def commit(path, version: int) -> list[dict]:
    name = f"{path}/_delta_log/{version:020d}.json"
    with open(name) as f:
        return [json.loads(line) for line in f if line.strip()]


def adds(path, version: int) -> list[dict]:
    return [a["add"] for a in commit(path, version) if "add" in a]


def high_water_mark(path, version: int) -> int | None:
    marks = [
        json.loads(a["domainMetadata"]["configuration"])["rowIdHighWaterMark"]
        for a in commit(path, version)
        if "domainMetadata" in a and a["domainMetadata"]["domain"] == "delta.rowTracking"
    ]
    return marks[0] if marks else None


def lineage(path) -> dict[int, tuple[int, int]]:
    """``id`` -> (row id, row commit version), read by a fresh table object; ids must be unique."""
    table = DeltaTable(str(path)).to_arrow(row_tracking=True)
    out = {}
    for r in table.to_pylist():
        out[r["id"]] = (r[ROW_ID], r[ROW_COMMIT_VERSION])
    row_ids = table.column(ROW_ID).to_pylist()
    assert len(set(row_ids)) == len(row_ids) == table.num_rows, "row ids are not unique"
    return out


def appended_lineage() -> dict[int, tuple[int, int]]:
    """What ``make`` (3 appends of 5 rows, versions 1-3) gives: ids 0-14 in order."""
    return {k * 10 + i: (k * 5 + i, k + 1) for k in range(3) for i in range(5)}


# --- creating -------------------------------------------------------------------------------------


def test_create_gives_delta_sparks_protocol_and_materialized_column_names(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties=TRACKED)
    p = commit(t._store.root, 0)
    protocol = next(a["protocol"] for a in p if "protocol" in a)
    assert protocol == {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["domainMetadata", "rowTracking"],
    }
    config = next(a["metaData"] for a in p if "metaData" in a)["configuration"]
    row_id = config["delta.rowTracking.materializedRowIdColumnName"]
    version = config["delta.rowTracking.materializedRowCommitVersionColumnName"]
    assert row_id.startswith("_row-id-col-") and len(row_id) == len("_row-id-col-") + 36
    assert (
        version.startswith("_row-commit-version-col-")
        and len(version) == len("_row-commit-version-col-") + 36
    )
    assert config["delta.enableRowTracking"] == "true"


def test_supported_but_not_enabled_assigns_fresh_ids_only(tmp_path):
    t = make(tmp_path, {"delta.feature.rowTracking": "supported"}, batches=2)
    assert sorted(t.protocol.writer_features) == ["domainMetadata", "rowTracking"]
    assert [a["baseRowId"] for a in adds(t._store.root, 2)] == [5]
    with pytest.raises(InvalidArgumentError, match="does not enable row tracking"):
        t.to_arrow(row_tracking=True)
    # Copy-on-write still works and gives every new file fresh ids above the high-water mark.
    t.update({"v": "'u'"}, "id = 1")
    assert [a["baseRowId"] for a in adds(t._store.root, 3)] == [10]


def test_suspended_row_tracking_assigns_nothing(tmp_path):
    t = make(
        tmp_path, {"delta.feature.rowTracking": "supported", "delta.rowTrackingSuspended": "true"}, batches=1
    )
    assert all("baseRowId" not in a and "defaultRowCommitVersion" not in a for a in adds(t._store.root, 1))
    assert high_water_mark(t._store.root, 1) is None


def test_enabled_and_suspended_together_is_refused(tmp_path):
    with pytest.raises(RowTrackingError, match="cannot both be true"):
        DeltaTable.create(
            str(tmp_path / "t"), SCHEMA, properties={**TRACKED, "delta.rowTrackingSuspended": "true"}
        )


# --- assigning ------------------------------------------------------------------------------------


def test_appends_assign_consecutive_ids_and_their_commit_version(tmp_path):
    t = make(tmp_path)
    root = t._store.root
    assert [(a["baseRowId"], a["defaultRowCommitVersion"]) for v in (1, 2, 3) for a in adds(root, v)] == [
        (0, 1),
        (5, 2),
        (10, 3),
    ]
    assert [high_water_mark(root, v) for v in (1, 2, 3)] == [4, 9, 14]
    assert lineage(root) == appended_lineage()
    info = commit(root, 3)[0]["commitInfo"]
    assert info["tags"]["delta.rowTracking.preserved"] == "true"


def test_one_commit_of_many_files_gives_disjoint_ranges(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties=TRACKED, partition_by=["part"])
    t.append(rows(range(7)))  # part a: 1,3,5 ; part b: 0,2,4,6
    ranges = sorted((a["baseRowId"], json.loads(a["stats"])["numRecords"]) for a in adds(t._store.root, 1))
    assert ranges == [(0, 3), (3, 4)] or ranges == [(0, 4), (4, 3)]
    assert high_water_mark(t._store.root, 1) == 6
    assert sorted(r for r, _ in lineage(t._store.root).values()) == list(range(7))


def test_a_commit_that_adds_no_rows_does_not_move_the_high_water_mark(tmp_path):
    t = make(tmp_path, batches=1)
    t.append(rows([]))
    assert high_water_mark(t._store.root, 2) is None


# --- keeping ids through rewrites ------------------------------------------------------------------


def test_optimize_keeps_every_rows_id_and_version(tmp_path):
    t = make(tmp_path, partitioned=True)
    before = lineage(t._store.root)
    assert sorted(r for r, _ in before.values()) == list(range(15))  # files split by partition
    t.optimize.compact()
    assert lineage(t._store.root) == before
    new = adds(t._store.root, 4)
    assert new and all(a["dataChange"] is False and a["baseRowId"] > 14 for a in new)
    assert all(a["defaultRowCommitVersion"] == 4 for a in new)
    t.optimize.z_order(["id"])
    assert lineage(t._store.root) == before


def test_deletion_vector_delete_keeps_the_files_ids(tmp_path):
    t = make(tmp_path, WITH_DV)
    t.delete("id = 11")
    dv_add = adds(t._store.root, 4)
    assert len(dv_add) == 1 and dv_add[0]["deletionVector"] is not None
    assert (dv_add[0]["baseRowId"], dv_add[0]["defaultRowCommitVersion"]) == (5, 2)
    assert high_water_mark(t._store.root, 4) is None  # no new ids
    expected = appended_lineage()
    del expected[11]
    assert lineage(t._store.root) == expected
    # Purging the deletion vector keeps the survivors' ids (the deleted row's id is gone).
    t.optimize(purge=True)
    assert not any(a.get("deletionVector") for a in adds(t._store.root, 5))
    assert lineage(t._store.root) == expected


@pytest.mark.parametrize("properties", [TRACKED, WITH_DV], ids=["copy_on_write", "deletion_vectors"])
def test_delete_and_update_keep_ids_updated_rows_get_the_new_version(tmp_path, properties):
    t = make(tmp_path, properties)
    root = t._store.root
    t.delete("id = 12")  # version 4
    t.update({"v": "'u'"}, "id in (1, 21)")  # version 5
    expected = appended_lineage()
    del expected[12]
    expected[1] = (expected[1][0], 5)
    expected[21] = (expected[21][0], 5)
    assert lineage(root) == expected
    assert {r["id"]: r["v"] for r in DeltaTable(root).to_arrow().to_pylist()}[21] == "u"
    # An untouched row copied by the copy-on-write rewrite keeps its version too.
    t.update({"v": "'w'"}, "id = 2", strategy="copy_on_write")  # version 6, file of 0-4 rewritten
    expected[2] = (expected[2][0], 6)
    assert lineage(root) == expected


def test_merge_keeps_ids_of_updated_rows_and_gives_new_rows_fresh_ones(tmp_path):
    t = make(tmp_path)
    root = t._store.root
    source = rows([3, 13, 100, 101], v="m")
    (
        t.merge(source, "target.id = source.id", source_alias="source", target_alias="target")
        .when_matched_update({"v": "source.v"}, "target.id = 3")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .when_not_matched_by_source_update({"v": "'s'"}, "target.id = 24")
        .execute()
    )  # version 4
    expected = appended_lineage()
    expected[3] = (expected[3][0], 4)
    expected[24] = (expected[24][0], 4)
    del expected[13]
    got = lineage(root)
    new = {k: got.pop(k) for k in (100, 101)}
    assert got == expected
    assert len({r for r, _ in new.values()}) == 2
    assert all(r > 14 and v == 4 for r, v in new.values())


def test_overwrite_of_some_rows_keeps_the_others_ids(tmp_path):
    t = make(tmp_path)
    t.overwrite(rows([2], v="o"), predicate="id = 2")  # version 4: the file of 0-4 is rewritten
    got = lineage(t._store.root)
    new_id, new_version = got.pop(2)
    expected = appended_lineage()
    del expected[2]
    assert got == expected
    assert new_id > 14 and new_version == 4


# --- concurrency, reuse, checkpoints ----------------------------------------------------------------


def test_concurrent_appends_never_share_ids(tmp_path):
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties=TRACKED)
    root = t._store.root
    errors = []

    def writer(w: int) -> None:
        try:
            mine = DeltaTable(root)
            for k in range(4):
                mine.append(rows(range(1000 * w + 10 * k, 1000 * w + 10 * k + 3)))
        except Exception as e:  # surfaced below
            errors.append(e)

    run_in_threads(writer, range(5))
    assert not errors
    table = DeltaTable(root)
    assert table.version == 20
    got = lineage(root)
    assert sorted(r for r, _ in got.values()) == list(range(60))
    for version in range(1, 21):  # each commit's rows carry its own version and range
        (add,) = adds(root, version)
        assert add["defaultRowCommitVersion"] == version
        assert high_water_mark(root, version) == add["baseRowId"] + 2


def test_a_commit_that_lost_the_race_takes_the_winners_high_water_mark(tmp_path):
    t = make(tmp_path, batches=1)
    store = open_store(t._store.root)
    snapshot = DeltaTable(t._store.root).snapshot
    first = WriteContext(store, snapshot, {}, target_file_size=None, schema_mode=None)
    second = WriteContext(store, snapshot, {}, target_file_size=None, schema_mode=None)
    first.write_data(rows(range(50, 54)).to_reader())
    second.write_data(rows(range(60, 63)).to_reader())
    assert first.txn.commit().version == 2
    result = second.txn.commit()
    assert (result.version, result.attempts) == (3, 2)
    (add,) = adds(t._store.root, 3)
    assert (add["baseRowId"], add["defaultRowCommitVersion"]) == (9, 3)
    assert high_water_mark(t._store.root, 3) == 11
    got = lineage(t._store.root)
    assert [got[i] for i in (60, 61, 62)] == [(9, 3), (10, 3), (11, 3)]


def test_one_table_object_reused_for_every_command(tmp_path):
    t = make(tmp_path, WITH_DV)
    t.delete("id = 0")
    t.update({"v": "'a'"}, "id = 1")
    merge = t.merge(rows([2, 200]), "t.id = s.id", source_alias="s", target_alias="t")
    merge.when_matched_update_all().when_not_matched_insert_all().execute()
    t.optimize.compact()
    t.append(rows([300]))
    t.delete("id = 21")
    table = t.to_arrow(row_tracking=True)
    row_ids = table.column(ROW_ID).to_pylist()
    assert len(set(row_ids)) == len(row_ids) == 15  # 15 - 1 + 1 + 1 - 1
    got = {r["id"]: (r[ROW_ID], r[ROW_COMMIT_VERSION]) for r in table.to_pylist()}
    base = appended_lineage()
    for i in (3, 4, 10, 11, 12, 13, 14, 20, 22, 23, 24):
        assert got[i] == base[i]
    assert got[1] == (1, 5) and got[2] == (2, 6)
    assert got[300][1] == 8 and got[300][0] > got[200][0] > 14


def test_checkpoint_keeps_ids_and_the_high_water_mark(tmp_path):
    t = make(tmp_path, {**TRACKED, "delta.checkpointInterval": "3"})  # checkpoint at version 3
    root = t._store.root
    checkpoint = pq.read_table(f"{root}/_delta_log/00000000000000000003.checkpoint.parquet")
    add = [a for a in checkpoint.column("add").to_pylist() if a]
    assert sorted((a["baseRowId"], a["defaultRowCommitVersion"]) for a in add) == [(0, 1), (5, 2), (10, 3)]
    domains = [d for d in checkpoint.column("domainMetadata").to_pylist() if d]
    assert [json.loads(d["configuration"]) for d in domains if d["domain"] == "delta.rowTracking"] == [
        {"rowIdHighWaterMark": 14, "domainName": "delta.rowTracking"}
    ]
    for v in (0, 1, 2):  # only the checkpoint remains to read from
        (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
    reloaded = DeltaTable(root)
    assert lineage(root) == appended_lineage()
    reloaded.append(rows([99]))
    assert (adds(root, 4)[0]["baseRowId"], high_water_mark(root, 4)) == (15, 15)


# --- enabling on an existing table --------------------------------------------------------------------


def test_enabling_on_an_existing_table_backfills_ids_in_the_same_commit(tmp_path):
    t = make(tmp_path, {"delta.enableDeletionVectors": "true"})
    t.delete("id = 21")
    t.alter.set_table_properties({"delta.enableRowTracking": "true"})  # version 5
    root = t._store.root
    c = commit(root, 5)
    assert any("protocol" in a and "rowTracking" in a["protocol"]["writerFeatures"] for a in c)
    backfilled = adds(root, 5)
    assert len(backfilled) == 3 and all(a["dataChange"] is False for a in backfilled)
    assert sorted(a["baseRowId"] for a in backfilled) == [0, 5, 10]
    assert any(a.get("deletionVector") for a in backfilled)  # the DV travels with its file
    assert high_water_mark(root, 5) == 14
    got = lineage(root)
    assert sorted(got) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 22, 23, 24]
    assert {v for _, v in got.values()} == {5}
    t.append(rows([7]))
    assert lineage(root)[7] == (15, 6)


# --- hostile input ---------------------------------------------------------------------------------


def test_the_high_water_mark_domain_cannot_be_set_by_hand(tmp_path):
    t = make(tmp_path, batches=1)
    ctx = WriteContext(open_store(t._store.root), t.snapshot, {}, target_file_size=None, schema_mode=None)
    with pytest.raises(InvalidArgumentError, match=r"delta\.rowTracking domain is maintained"):
        ctx.txn.set_domain_metadata(DomainMetadata("delta.rowTracking", '{"rowIdHighWaterMark":-1}'))


def test_materialized_column_names_are_maintained_by_the_table(tmp_path):
    t = make(tmp_path, batches=1)
    with pytest.raises(InvalidArgumentError, match=r"materializedRowIdColumnName is maintained"):
        t.alter.set_table_properties({"delta.rowTracking.materializedRowIdColumnName": "x"})


def test_a_column_named_like_the_read_column_is_reported(tmp_path):
    schema = pa.schema([("id", pa.int64()), (ROW_ID, pa.int64())])
    t = DeltaTable.create(str(tmp_path / "t"), schema, properties=TRACKED)
    t.append(pa.table({"id": [1], ROW_ID: [5]}, schema=schema))
    with pytest.raises(SchemaError, match="name of a row-tracking column"):
        t.to_arrow(row_tracking=True)


def test_adds_without_a_row_count_cannot_get_ids(tmp_path):
    t = make(tmp_path, batches=1)
    ctx = WriteContext(open_store(t._store.root), t.snapshot, {}, target_file_size=None, schema_mode=None)
    ctx.write_data(rows([1]).to_reader())
    import dataclasses

    (add,) = ctx.txn._adds
    ctx.txn._adds = [dataclasses.replace(add, stats=None)]
    with pytest.raises(DeltaError, match="no numRecords statistic"):
        ctx.txn.commit()


def test_distributed_update_and_bin_tasks_keep_ids(tmp_path):
    """The pieces Spark jobs run in tasks (a PortableSnapshot each) keep ids as in-process runs."""
    from deltaplane.engine.commands.dml import change_files, commit_row_level, plan_row_level
    from deltaplane.engine.commands.optimize import bin_tasks, commit_optimize, plan_optimize, run_bin_task
    from deltaplane.engine.portable import PortableSnapshot

    t = make(tmp_path)
    root = t._store.root
    snapshot = DeltaTable(root).snapshot
    plan = plan_row_level(snapshot, predicate="id = 12", updates={"v": "'d'"}, strategy="copy_on_write")
    sets = [change_files(PortableSnapshot.of(snapshot, plan.candidates), plan.for_tasks())]
    version = commit_row_level(snapshot.store, snapshot, plan, sets).version
    expected = appended_lineage()
    expected[12] = (expected[12][0], version)
    assert lineage(root) == expected
    snapshot = DeltaTable(root).snapshot
    optimize = plan_optimize(snapshot)
    added = [a for task in bin_tasks(optimize) for a in run_bin_task(task)]
    commit_optimize(snapshot.store, optimize, added)
    assert lineage(root) == expected


def test_restore_brings_back_the_old_ids(tmp_path):
    t = make(tmp_path, WITH_DV)
    t.update({"v": "'u'"}, "id = 1", strategy="copy_on_write")  # version 4
    t.optimize.compact()  # version 5
    t.restore(3)
    assert lineage(t._store.root) == appended_lineage()
    # The high-water mark stays where version 5 left it: rows appended after the restore get
    # ids no version ever gave (the update and the optimize kept ids, so the mark is still 14).
    ever = {
        rid
        for v in range(t.version() + 1)
        for rid in DeltaTable(t.uri, version=v).to_arrow(row_tracking=True).column(ROW_ID).to_pylist()
    }
    t.append(rows(range(100, 103)))
    new = {r[ROW_ID] for r in t.to_arrow(row_tracking=True).to_pylist() if r["id"] >= 100}
    assert len(new) == 3 and min(new) > max(ever)
