"""The API a deltalake (delta-rs) user reaches for: write_table, pandas/Polars/DuckDB data,
commit metadata, ALTER, readers for other tools, the change feed by time, and REPAIR.

delta-rs is the oracle: what these calls write it must read the same, and its own
``get_add_actions`` / ``history`` are compared with ours.
"""

from __future__ import annotations

import datetime as dt
import os
import time

import deltalake
import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import (
    ConstraintViolationError,
    DataFileError,
    InvalidArgumentError,
    ProtocolError,
    SchemaError,
    SchemaMismatchError,
    TableExistsError,
    UnsupportedOperationError,
)
from deltaplane.engine.table_properties import InvalidPropertyError
from tests.helpers import assert_same_rows

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.string())])


def rows(ids, day="2026-01-01") -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids], "day": [day] * len(ids)}
    )


def rs_rows(path) -> pa.Table:
    """All rows as delta-rs reads them (through DataFusion, which applies deletion vectors)."""
    table = deltalake.DeltaTable(str(path))
    result = deltalake.QueryBuilder().register("t", table).execute("select * from t").read_all()
    return pa.table(result)


def sorted_ids(table) -> list:
    return sorted(pa.table(table).column("id").to_pylist(), key=lambda v: (v is None, v))


# --- write_table ------------------------------------------------------------------------------------


def test_write_table_creates_then_honours_each_mode(tmp_path):
    uri = str(tmp_path / "t")
    first = write_table(uri, rows([1, 2]), partition_by="day", properties={"delta.appendOnly": "false"})
    assert first.version == 0 and first.operation == "CREATE TABLE AS SELECT"
    assert first.operation_metrics["numOutputRows"] == "2"
    table = DeltaTable(uri)
    assert table.partition_columns == ["day"] and table.count() == 2
    with pytest.raises(TableExistsError):
        write_table(uri, rows([3]))
    assert write_table(uri, rows([3]), mode="ignore").skipped
    assert write_table(uri, rows([3]), mode="append").version == 1
    assert (
        write_table(uri, rows([9], "2026-01-02"), mode="overwrite", predicate="day = '2026-01-02'").version
        == 2
    )
    assert sorted_ids(DeltaTable(uri).to_arrow()) == [1, 2, 3, 9]
    assert write_table(uri, rows([7]), mode="overwrite").version == 3
    assert sorted_ids(DeltaTable(uri).to_arrow()) == [7]
    assert_same_rows(DeltaTable(uri).to_arrow().select(["id"]), rs_rows(uri).select(["id"]))
    # Creation settings must agree with the existing table rather than being dropped.
    with pytest.raises(SchemaMismatchError, match="partitioned by"):
        write_table(uri, rows([8]), mode="append", partition_by=["name"])
    with pytest.raises(InvalidArgumentError, match="set_table_properties"):
        write_table(uri, rows([8]), mode="append", properties={"delta.appendOnly": "true"})
    with pytest.raises(InvalidArgumentError, match="mode must be one of"):
        write_table(uri, rows([8]), mode="upsert")
    with pytest.raises(InvalidArgumentError, match="mode='overwrite'"):
        write_table(uri, rows([8]), mode="append", predicate="id = 1")


def test_write_table_with_a_predicate_creates_a_missing_table_and_checks_the_rows(tmp_path):
    uri = str(tmp_path / "t")
    result = write_table(
        uri, rows([1, 2]), mode="overwrite", predicate="day = '2026-01-01'", partition_by=["day"]
    )
    assert result.version == 1 and DeltaTable(uri).count() == 2
    with pytest.raises(ConstraintViolationError):
        write_table(uri, rows([5], "2026-01-09"), mode="overwrite", predicate="day = '2026-01-01'")


def test_write_table_idempotent_reruns_and_a_failed_write_leaves_no_table(tmp_path):
    uri = str(tmp_path / "t")
    assert write_table(uri, rows([1]), mode="append", app_id="dag.task", app_version=5).version == 0
    assert write_table(uri, rows([1]), mode="append", app_id="dag.task", app_version=5).skipped
    assert DeltaTable(uri).count() == 1
    bad = str(tmp_path / "bad")
    with pytest.raises(SchemaError, match="unique"):
        write_table(bad, pa.table([pa.array([1]), pa.array([2])], names=["a", "A"]))
    assert not DeltaTable.is_deltatable(bad)


# --- data from pandas, Polars, DuckDB ----------------------------------------------------------------


def test_pandas_nullable_integers_arriving_as_floats_are_cast_when_lossless(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    frame = pd.DataFrame({"id": [1, None, 3], "name": ["a", "b", "c"], "day": ["d"] * 3}, index=[7, 8, 9])
    assert frame["id"].dtype == "float64"
    table.append(frame)
    out = table.to_arrow()
    assert out.schema.field("id").type == pa.int64() and out.column_names == ["id", "name", "day"]
    assert sorted_ids(out) == [1, 3, None]
    with pytest.raises(SchemaMismatchError, match=r"column 'id'.*e.g. 2.5"):
        table.append(pd.DataFrame({"id": [2.5], "name": ["x"], "day": ["d"]}))
    with pytest.raises(SchemaMismatchError, match="column 'id'"):
        table.append(pd.DataFrame({"id": [1e30], "name": ["x"], "day": ["d"]}))
    table.append(
        pd.DataFrame({"id": pd.array([4, None], dtype="Int64"), "name": ["x", "y"], "day": ["d", "d"]})
    )
    assert sorted_ids(table.to_arrow()) == [1, 3, 4, None, None]
    assert_same_rows(table.to_arrow(), rs_rows(table.uri).cast(SCHEMA))


def test_polars_and_duckdb_data_are_written_through_the_arrow_stream(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    table.append(pl.DataFrame({"id": [1, 2], "name": ["a", "b"], "day": ["d", "d"]}))
    table.append(duckdb.sql("select 3::bigint as id, 'c' as name, 'd' as day"))
    (
        table.merge(
            pl.DataFrame({"id": [2, 4], "name": ["B", "D"], "day": ["d", "d"]}),
            "t.id = s.id",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    out = table.to_arrow()
    assert dict(zip(out.column("id").to_pylist(), out.column("name").to_pylist(), strict=True)) == {
        1: "a",
        2: "B",
        3: "c",
        4: "D",
    }


def test_create_with_data_or_a_dataframe_where_the_schema_belongs(tmp_path):
    with pytest.raises(SchemaError, match=r"not data \(DataFrame\).*write_table"):
        DeltaTable.create(str(tmp_path / "t"), pd.DataFrame({"a": [1]}))
    with pytest.raises(SchemaError, match=r"pyarrow\.Schema"):
        DeltaTable.create(str(tmp_path / "t"), {"a": "int"})
    table = DeltaTable.create(str(tmp_path / "u"), data=pd.DataFrame({"a": [1, 2]}), partition_by=[])
    assert table.version == 0 and table.count() == 2
    with pytest.raises(InvalidArgumentError, match="cannot write data of type object"):
        table.append(object())


# --- commit metadata -------------------------------------------------------------------------------


def test_commit_metadata_on_every_writing_command_reaches_history_and_delta_rs(tmp_path):
    uri = str(tmp_path / "t")
    meta = lambda step: {"airflow_run_id": "manual__2026-11-22", "step": step}  # noqa: E731
    table = DeltaTable.create(
        uri, SCHEMA, properties={"delta.enableDeletionVectors": "true"}, commit_metadata=meta("create")
    )
    table.append(rows(range(10)), commit_metadata=meta("append"))
    table.append(rows(range(10, 20)), commit_metadata=meta("append2"))
    table.overwrite(rows([5]), "id = 5", commit_metadata=meta("overwrite"))
    table.delete("id = 1", commit_metadata=meta("delete"))
    table.update({"name": "'x'"}, "id = 2", commit_metadata=meta("update"))
    table.merge(
        rows([3, 30]), "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_delete().when_not_matched_insert_all().execute(commit_metadata=meta("merge"))
    table.optimize(commit_metadata=meta("optimize"))
    table.restore(2, commit_metadata=meta("restore"))
    table.alter.set_table_description("d", commit_metadata=meta("alter"))
    os.remove(os.path.join(uri, table.snapshot.files.column("path")[0].as_py()))
    table.repair(dry_run=False, commit_metadata=meta("repair"))
    table.vacuum(retention_hours=0, enforce_retention=False, dry_run=False, commit_metadata=meta("vacuum"))
    steps = {h["version"]: h.get("step") for h in table.history()}
    assert [steps[v] for v in sorted(steps)] == [
        "create",
        "append",
        "append2",
        "overwrite",
        "delete",
        "update",
        "merge",
        "optimize",
        "restore",
        "alter",
        "repair",
        "vacuum",
        "vacuum",
    ]
    theirs = {h["version"]: h.get("airflow_run_id") for h in deltalake.DeltaTable(uri).history()}
    assert set(theirs.values()) == {"manual__2026-11-22"}


def test_commit_metadata_cannot_replace_the_commit_s_own_fields(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    for bad, message in (
        ({"operation": "HACK"}, "cannot set 'operation'"),
        ({"txnId": "x"}, "cannot set 'txnId'"),
        ({"when": dt.datetime(2026, 1, 1)}, "not a JSON value"),
        ("run-1", "must be a dict"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            table.append(rows([1]), commit_metadata=bad)
    assert table.refresh().version == 0
    table.append(rows([1]), commit_metadata={"userMetadata": "nightly load"})
    assert table.history(1)[0]["userMetadata"] == "nightly load"


# --- ALTER and table properties ----------------------------------------------------------------------


def test_unknown_delta_properties_are_refused_at_create_and_alter_with_a_suggestion(tmp_path):
    uri = str(tmp_path / "t")
    for key, suggestion in (
        ("delta.enableDeletionVector", "delta.enableDeletionVectors"),
        ("delta.apendOnly", "delta.appendOnly"),
        ("delta.logretentionduration", "delta.logRetentionDuration"),
        ("deltaplane.dml.stratgy", "deltaplane.dml.strategy"),
    ):
        with pytest.raises(InvalidPropertyError, match=f"did you mean '{suggestion}'"):
            DeltaTable.create(uri, SCHEMA, properties={key: "true"})
    assert not DeltaTable.is_deltatable(uri)
    table = DeltaTable.create(
        uri, SCHEMA, properties={"team.owner": "ops", "delta.constraints.pos": "id > 0"}
    )
    with pytest.raises(InvalidPropertyError, match=r"delta\.checkpointInterval"):
        table.alter.set_table_properties({"delta.checkpointIntervall": "5"})
    with pytest.raises(ProtocolError, match="no table feature is named 'deletionVector'"):
        table.alter.set_table_properties({"delta.feature.deletionVector": "supported"})
    assert table.refresh().version == 0


def test_enabling_features_upgrades_the_protocol_and_the_engine_uses_them(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA)
    table.append(rows(range(100)))
    assert table.protocol.min_writer_version == 2
    table.alter.set_table_properties(
        {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
    )
    assert "deletionVectors" in table.protocol.reader_features
    assert {"deletionVectors", "changeDataFeed"} <= set(table.protocol.writer_features)
    assert table.history(1)[0]["operation"] == "SET TBLPROPERTIES"
    result = table.delete("id % 10 = 0")
    assert int(result.operation_metrics["numDeletionVectorsAdded"]) == 1
    changes = table.changes(table.version)
    assert sorted(changes.column("id").to_pylist()) == list(range(0, 100, 10))
    assert_same_rows(table.to_arrow(), rs_rows(uri).cast(SCHEMA))
    table.alter.unset_table_properties(["delta.enableChangeDataFeed"])
    assert "delta.enableChangeDataFeed" not in table.metadata.configuration
    assert "changeDataFeed" in table.protocol.writer_features  # features are never dropped this way
    features = DeltaTable.create(
        str(tmp_path / "f"), SCHEMA, properties={"delta.feature.timestampNtz": "supported"}
    )
    assert features.protocol.writer_features == ["timestampNtz"] and features.metadata.configuration == {}


def test_add_constraint_checks_existing_rows_and_then_every_write(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA)
    table.append(rows([1, 2, 3]))
    with pytest.raises(ConstraintViolationError, match=r"existing rows violate it.*small"):
        table.alter.add_constraint({"small": "id < 3"})
    assert table.refresh().version == 1 and "delta.constraints.small" not in table.metadata.configuration
    table.alter.add_constraint({"positive": "id > 0"})
    assert table.metadata.configuration["delta.constraints.positive"] == "id > 0"
    theirs = deltalake.DeltaTable(uri).protocol()
    assert theirs.min_writer_version >= 3 or "checkConstraints" in (theirs.writer_features or [])
    with pytest.raises(ConstraintViolationError, match=f"cannot write to {uri}.*positive"):
        table.append(rows([-1]))
    with pytest.raises(InvalidArgumentError, match="already has a CHECK constraint"):
        table.alter.add_constraint({"positive": "id > 1"})
    table.alter.drop_constraint("positive")
    table.append(rows([-1]))
    with pytest.raises(InvalidArgumentError, match="no CHECK constraint named 'nope'"):
        table.alter.drop_constraint("nope")
    assert table.alter.drop_constraint("nope", raise_if_not_exists=False).skipped
    assert [h["operation"] for h in table.history(3)] == ["WRITE", "DROP CONSTRAINT", "ADD CONSTRAINT"]


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_add_columns_and_description(tmp_path, mapping):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA, properties={"delta.columnMapping.mode": mapping})
    table.append(rows([1]))
    table.alter.add_columns([pa.field("score", pa.float64()), pa.field("tags", pa.list_(pa.string()))])
    with pytest.raises(SchemaError, match="already has a column named 'SCORE'"):
        table.alter.add_columns(pa.field("SCORE", pa.int32()))
    with pytest.raises(SchemaError, match="must be nullable"):
        table.alter.add_columns(pa.field("required", pa.int32(), nullable=False))
    table.append(pa.table({"id": [2], "name": ["b"], "day": ["d"], "score": [0.5], "tags": [["x"]]}))
    table.alter.set_table_description("daily users")
    out = table.to_arrow().sort_by("id")
    assert out.column("score").to_pylist() == [None, 0.5] and out.column("tags").to_pylist() == [None, ["x"]]
    theirs = deltalake.DeltaTable(uri)
    assert theirs.metadata().description == "daily users"
    assert [f.name for f in theirs.schema().fields] == ["id", "name", "day", "score", "tags"]
    assert sorted(rs_rows(uri).column("score").to_pylist(), key=lambda v: (v is None, v)) == [0.5, None]


# --- reading for other tools -------------------------------------------------------------------------


@pytest.fixture
def dv_table(tmp_path) -> DeltaTable:
    table = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, partition_by=["day"], properties={"delta.enableDeletionVectors": "true"}
    )
    table.append(rows(range(100), "2026-01-01"))
    table.append(rows(range(100, 150), "2026-01-02"))
    table.delete("id % 4 = 0")
    return table


def test_count_to_pandas_and_the_arrow_stream_apply_deletion_vectors(dv_table):
    expected = sorted(i for i in range(150) if i % 4)
    assert dv_table.count() == len(expected) == dv_table.snapshot_row_count()
    assert dv_table.count("day = '2026-01-02'") == len([i for i in expected if i >= 100])
    assert sorted(dv_table.to_pandas(columns=["id"])["id"]) == expected
    assert sorted(r[0] for r in duckdb.sql("select id from dv_table").fetchall()) == expected
    assert sorted(pl.DataFrame(dv_table)["id"].to_list()) == expected
    assert sorted(pa.table(dv_table.scan(["id"], "id < 10")).column("id").to_pylist()) == [
        1,
        2,
        3,
        5,
        6,
        7,
        9,
    ]


def test_count_falls_back_to_reading_when_statistics_are_missing(tmp_path):
    from deltaplane.engine.storage import LocalStore
    from tests.logbuilder import add, commit_info, metadata, protocol, write_commit, write_parquet

    store = LocalStore(str(tmp_path / "t"))
    write_parquet(store, "a.parquet", pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    write_commit(store, 0, [commit_info(), protocol(), metadata(schema), add("a.parquet")])
    table = DeltaTable(str(tmp_path / "t"))
    assert table.snapshot_row_count() is None and table.count() == 3


def test_get_add_actions_matches_delta_rs(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table(
        {
            "id": pa.array([3, 1, None, 7], pa.int64()),
            "price": pa.array([1.5, None, 2.5, 0.5]),
            "when": pa.array([dt.date(2026, 1, d) for d in (3, 1, 2, 9)], pa.date32()),
            "day": ["a", "a", "b", "b"],
        }
    )
    deltalake.write_deltalake(uri, data, partition_by=["day"])
    ours = DeltaTable(uri).get_add_actions(flatten=True).sort_by("path")
    theirs = pa.table(deltalake.DeltaTable(uri).get_add_actions(flatten=True)).sort_by("path")
    for column in ("path", "size_bytes", "num_records", "partition.day", "null_count.id", "min.id", "max.id"):
        assert ours.column(column).to_pylist() == theirs.column(column).to_pylist(), column
    for column in ("min.when", "max.when", "min.price", "max.price"):
        assert (
            ours.column(column).to_pylist()
            == theirs.column(column).cast(ours.schema.field(column).type).to_pylist()
        )
    nested = DeltaTable(uri).get_add_actions().sort_by("path")
    assert nested.column("min").type == pa.struct(
        [("id", pa.int64()), ("price", pa.float64()), ("when", pa.date32())]
    )
    assert nested.column("partition_values").to_pylist() == [{"day": "a"}, {"day": "b"}]


def test_to_pyarrow_dataset_lets_duckdb_push_filters_down(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA, partition_by=["day"])
    table.append(rows(range(10), "2026-01-01"))
    table.append(rows(range(10, 15), "2026-01-02"))
    dataset = table.to_pyarrow_dataset()
    assert dataset.to_table(filter=pc.field("day") == "2026-01-02").num_rows == 5
    assert duckdb.sql("select count(*) from dataset where day = '2026-01-01' and id >= 5").fetchall() == [
        (5,)
    ]
    assert len(list(dataset.get_fragments(filter=pc.field("day") == "2026-01-02"))) == 1


def test_to_pyarrow_dataset_is_refused_with_deletion_vectors_or_column_mapping(dv_table, tmp_path):
    with pytest.raises(UnsupportedOperationError, match="deletion vectors"):
        dv_table.to_pyarrow_dataset()
    mapped = DeltaTable.create(str(tmp_path / "m"), SCHEMA, properties={"delta.columnMapping.mode": "name"})
    with pytest.raises(UnsupportedOperationError, match="column mapping"):
        mapped.to_pyarrow_dataset()


def test_is_deltatable(tmp_path):
    assert not DeltaTable.is_deltatable(str(tmp_path / "missing"))
    (tmp_path / "file").write_text("x")
    assert not DeltaTable.is_deltatable(str(tmp_path / "file"))
    DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    assert DeltaTable.is_deltatable(str(tmp_path / "t"))


# --- change data feed by time, columns, stream ----------------------------------------------------------


def test_changes_by_timestamp_with_columns_and_as_a_stream(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA, properties={"delta.enableChangeDataFeed": "true"})
    times = []
    for batch in ([1, 2], [3], [4, 5]):
        table.append(rows(batch))
        times.append(table.history(1)[0]["timestamp"])
        time.sleep(0.01)
    by_version = table.changes(2, 3)
    by_time = table.changes(starting_timestamp=times[1], ending_timestamp=times[2])
    assert_same_rows(by_time, by_version)
    after_first = table.changes(starting_timestamp=times[0] + 1)  # the first commit after it
    assert sorted(after_first.column("id").to_pylist()) == [3, 4, 5]
    everything = table.changes(starting_timestamp="2000-01-01T00:00:00Z", ending_timestamp="2999-01-01")
    assert sorted(everything.column("id").to_pylist()) == [1, 2, 3, 4, 5]
    narrow = table.changes(1, columns=["ID"])
    assert narrow.column_names == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    reader = table.load_cdf(starting_version=1)
    assert isinstance(reader, pa.RecordBatchReader)
    batches = list(reader)
    assert len(batches) >= 3 and sum(b.num_rows for b in batches) == 5
    with pytest.raises(InvalidArgumentError, match="no column 'nope'"):
        table.changes(1, columns=["nope"])
    with pytest.raises(InvalidArgumentError, match="not both"):
        table.changes(1, starting_timestamp=times[0])


# --- repair ------------------------------------------------------------------------------------------------


def test_repair_removes_entries_for_files_that_are_gone(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA, partition_by=["day"])
    table.append(rows([1, 2], "a"))
    table.append(rows([3], "b"))
    lost = next(p for p in table.snapshot.files.column("path").to_pylist() if p.startswith("day=a"))
    os.remove(os.path.join(uri, lost))
    with pytest.raises(DataFileError, match="missing"):
        DeltaTable(uri).to_arrow()
    plan = table.repair()
    assert plan.missing_files == (lost,) and table.refresh().version == 2  # a dry run by default
    result = table.repair(dry_run=False)
    assert result.operation == "FSCK" and result.operation_metrics["numMissingFiles"] == "1"
    assert sorted_ids(DeltaTable(uri).to_arrow()) == [3]
    assert sorted_ids(rs_rows(uri)) == [3]
    assert table.repair(dry_run=False).skipped  # nothing left to repair
