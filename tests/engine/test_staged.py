"""Staged writes: plan, write files in pieces (as Spark tasks do), commit once; delta-rs reads the result."""

from __future__ import annotations

import json
import pickle

import deltalake
import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.commands.staged import (
    StagedWrite,
    WriteSpec,
    commit_write,
    plan_write,
    stage_write,
    write_files,
)
from deltaplane.engine.errors import (
    CommitConflictError,
    ConstraintViolationError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableExistsError,
)
from tests.helpers import assert_same_rows


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": [("eu", "us", "ap")[i % 3] for i in ids],
            "v": [i * 0.5 for i in ids],
        }
    )


def delta_rs(path) -> pa.Table:
    return deltalake.DeltaTable(str(path)).to_pyarrow_table()


def test_pieces_written_apart_commit_as_one_new_table(table_dir):
    data = rows(0, 300)
    spec = plan_write(str(table_dir), data.schema, partition_by=["region"])
    # The spec travels (pickled to executors, JSON in manifests) and comes back equal.
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert WriteSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    adds = []
    for piece in (data.slice(0, 100), data.slice(100, 100), data.slice(200)):
        adds += write_files(pickle.loads(pickle.dumps(spec)), piece.to_batches(max_chunksize=40))
    assert not (table_dir / "_delta_log").exists()  # nothing committed yet
    result = commit_write(spec, [a.to_json() for a in adds])
    assert result.version == 0
    assert_same_rows(delta_rs(table_dir).select(data.column_names), data)
    info = DeltaTable(str(table_dir)).history(1)[0]
    assert info["operation"] == "CREATE TABLE AS SELECT"
    assert info["operationMetrics"]["numOutputRows"] == "300"
    assert DeltaTable(str(table_dir)).metadata.partition_columns == ["region"]


def test_staged_rows_are_readable_before_the_commit_and_invisible_to_readers(table_dir):
    write_table(str(table_dir), rows(0, 10))
    staged = stage_write(str(table_dir), rows(10, 5))
    assert_same_rows(staged.read(), rows(10, 5))
    assert all(uri.startswith(str(table_dir)) for uri in staged.data_uris())
    assert DeltaTable(str(table_dir)).to_arrow().num_rows == 10
    again = StagedWrite.loads(staged.dumps())
    assert again.adds == staged.adds and again.spec == staged.spec
    result = again.commit(commit_metadata={"run": "r1"})
    assert result.version == 1
    assert_same_rows(delta_rs(table_dir), rows(0, 15))
    assert DeltaTable(str(table_dir)).history(1)[0]["run"] == "r1"


def test_manifest_does_not_carry_credentials(table_dir):
    write_table(str(table_dir), rows(0, 3))
    spec = plan_write(str(table_dir), rows(0, 1).schema, storage_options={"aws_secret_access_key": "s3cr3t"})
    assert "s3cr3t" not in json.dumps(spec.to_json())
    with pytest.raises(InvalidArgumentError, match="manifest"):
        StagedWrite.loads(b'{"adds": []}')


def test_overwrite_modes(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 30), partition_by=["region"])
    # replaceWhere on a partition: only 'eu' rows are replaced; rows outside the predicate refused.
    spec = plan_write(uri, rows(0, 1).schema, mode="overwrite", replace_where="region = 'eu'")
    with pytest.raises(ConstraintViolationError, match="do not match"):
        write_files(spec, rows(100, 3))
    eu = rows(100, 9).filter(pa.compute.equal(rows(100, 9)["region"], "eu"))
    commit_write(spec, write_files(spec, eu))
    expected = pa.concat_tables([rows(0, 30).filter(pa.compute.not_equal(rows(0, 30)["region"], "eu")), eu])
    assert_same_rows(delta_rs(uri).select(expected.column_names), expected)
    # replaceWhere on a data column: partially matching files are rewritten.
    spec = plan_write(uri, rows(0, 1).schema, mode="overwrite", replace_where="id < 10")
    result = commit_write(spec, write_files(spec, rows(0, 2)))
    before = expected
    expected = pa.concat_tables([before.filter(pa.compute.greater_equal(before["id"], 10)), rows(0, 2)])
    assert_same_rows(delta_rs(uri).select(expected.column_names), expected)
    assert int(DeltaTable(uri).history(1)[0]["operationMetrics"]["numCopiedRows"]) > 0
    assert result.version == 2
    # Dynamic partition overwrite: only the partitions written are replaced.
    spec = plan_write(uri, rows(0, 1).schema, mode="overwrite", dynamic_partitions=True)
    us = pa.table({"id": pa.array([999], pa.int64()), "region": ["us"], "v": [1.0]})
    commit_write(spec, write_files(spec, us))
    expected = pa.concat_tables([expected.filter(pa.compute.not_equal(expected["region"], "us")), us])
    assert_same_rows(delta_rs(uri).select(expected.column_names), expected)
    # Full overwrite.
    spec = plan_write(uri, rows(0, 1).schema, mode="overwrite")
    commit_write(spec, write_files(spec, rows(500, 4)))
    assert_same_rows(delta_rs(uri).select(["id", "region", "v"]), rows(500, 4))


def test_rerun_with_the_same_app_version_writes_nothing(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 5))
    first = plan_write(uri, rows(0, 1).schema, app_id="ingest", app_version=7)
    commit_write(first, write_files(first, rows(5, 5)))
    files_before = sorted(p.name for p in table_dir.glob("*.parquet"))
    rerun = plan_write(uri, rows(0, 1).schema, app_id="ingest", app_version=7)
    assert rerun.skip
    assert write_files(rerun, rows(5, 5)) == []
    assert sorted(p.name for p in table_dir.glob("*.parquet")) == files_before
    assert commit_write(rerun, []).skipped
    # Planned before the first commit landed: files are written, the commit still skips.
    early = plan_write(uri, rows(0, 1).schema, app_id="ingest", app_version=8)
    late = plan_write(uri, rows(0, 1).schema, app_id="ingest", app_version=8)
    commit_write(early, write_files(early, rows(10, 1)))
    assert commit_write(late, write_files(late, rows(10, 1))).skipped
    assert DeltaTable(uri).to_arrow().num_rows == 11
    assert deltalake.DeltaTable(uri).transaction_version("ingest") == 8


def test_merge_schema_and_mismatch(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 3))
    wider = rows(3, 2).append_column("note", pa.array(["a", "b"]))
    with pytest.raises(SchemaMismatchError):
        spec = plan_write(uri, wider.schema)
        write_files(spec, wider)
    spec = plan_write(uri, wider.schema, schema_mode="merge")
    assert spec.metadata_changed
    commit_write(spec, write_files(spec, wider))
    got = delta_rs(uri)
    assert got.column_names == ["id", "region", "v", "note"]
    assert got.num_rows == 5


def test_bad_plans_fail_before_any_file_is_written(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 3), partition_by=["region"])
    schema = rows(0, 1).schema
    with pytest.raises(InvalidArgumentError, match="partitioned by"):
        plan_write(uri, schema, partition_by=["id"])
    with pytest.raises(InvalidArgumentError, match="mode"):
        plan_write(uri, schema, mode="upsert")
    with pytest.raises(InvalidArgumentError, match="overwrite"):
        plan_write(uri, schema, replace_where="id > 1")
    with pytest.raises(InvalidArgumentError, match="created"):
        plan_write(uri, schema, properties={"delta.appendOnly": "true"})
    with pytest.raises(Exception, match="nope"):
        plan_write(uri, schema, mode="overwrite", replace_where="nope > 1")
    assert len(list(table_dir.rglob("*.parquet"))) == 3


def test_commit_detects_conflicts_with_what_landed_since_the_plan(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0, 6))
    spec = plan_write(uri, rows(0, 1).schema, mode="overwrite")
    adds = write_files(spec, rows(100, 2))
    DeltaTable(uri).delete("id < 3")  # removes a file the staged overwrite removes too
    with pytest.raises(CommitConflictError):
        commit_write(spec, adds)
    # A blind append planned at the same version commits on top of anything.
    spec = plan_write(uri, rows(0, 1).schema)
    adds = write_files(spec, rows(200, 2))
    DeltaTable(uri).delete("id = 4")
    assert commit_write(spec, adds).version == 3


def test_concurrent_creators(table_dir):
    """The loser of a create with the same schema appends (Delta Spark's create-or-append); one
    with another schema is refused (tests/engine/test_holds.py has the details)."""
    uri = str(table_dir)
    a = plan_write(uri, rows(0, 1).schema)
    b = plan_write(uri, rows(0, 1).schema)
    c = plan_write(uri, rows(0, 1).drop_columns(["v"]).schema)
    commit_write(a, write_files(a, rows(0, 2)))
    assert commit_write(b, write_files(b, rows(2, 2))).version == 1
    with pytest.raises(TableExistsError, match="stage the batch again"):
        commit_write(c, write_files(c, rows(4, 2).drop_columns(["v"])))
    assert DeltaTable(uri).to_arrow().num_rows == 4


def test_app_transaction_scope_stamps_the_first_commit_of_any_command(table_dir):
    from deltaplane.engine.errors import ConcurrentTransactionError
    from deltaplane.engine.transaction import app_transaction_scope

    uri = str(table_dir)
    write_table(uri, rows(0, 20), properties={"delta.enableDeletionVectors": "true"})
    table = DeltaTable(uri)
    with app_transaction_scope("dag.delete_task", 5):
        table.delete("id < 3")
        table.delete("id = 10")  # a second commit in the same scope carries no txn
    assert deltalake.DeltaTable(uri).transaction_version("dag.delete_task") == 5
    log = sorted((table_dir / "_delta_log").glob("*.json"))
    assert '"txn"' in log[1].read_text() and '"txn"' not in log[2].read_text()
    # A concurrent commit of the same application conflicts.
    from deltaplane.engine.commands.dml import execute_delete

    other = DeltaTable(uri)
    stale = other.snapshot
    DeltaTable(uri).append(rows(100, 1), app_id="dag.delete_task", app_version=6)  # lands first
    with app_transaction_scope("dag.delete_task", 6), pytest.raises(ConcurrentTransactionError):
        execute_delete(other._store, stale, "id = 11")
    with pytest.raises(InvalidArgumentError), app_transaction_scope("", 1):
        pass
