"""Creating tables and appending to them; every table written here is read back by delta-rs."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import (
    ConstraintViolationError,
    ProtocolError,
    SchemaError,
    SchemaMismatchError,
    TableExistsError,
    TableReadOnlyError,
)
from tests.helpers import assert_same_rows

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("region", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)


def rows(start: int, n: int, regions=("eu", "us")) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "name": [None if i % 5 == 0 else f"name-{i}" for i in ids],
            "region": [regions[i % len(regions)] for i in ids],
            "amount": [Decimal(i) / 4 for i in ids],
            "at": [dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids],
        },
        schema=SCHEMA,
    )


def delta_rs_rows(path: str, version: int | None = None) -> pa.Table:
    """delta-rs's read, through its query engine (the only path with column mapping and DVs)."""
    table = deltalake.DeltaTable(path, version=version) if version is not None else deltalake.DeltaTable(path)
    query = deltalake.QueryBuilder().register("t", table)
    return pa.RecordBatchReader.from_stream(query.execute("SELECT * FROM t")).read_all()


def assert_delta_rs_agrees(path: str) -> None:
    """delta-rs reads every version of the table as we do, and sees the same history."""
    latest = DeltaTable(path).version
    for version in range(latest + 1):
        ours = DeltaTable(path, version=version).to_arrow()
        theirs = delta_rs_rows(path, version).select(ours.column_names).cast(ours.schema)
        assert_same_rows(ours, theirs)
    ours_history = [(h["version"], h.get("operation")) for h in DeltaTable(path).history()]
    theirs_history = [(h["version"], h.get("operation")) for h in deltalake.DeltaTable(path).history()]
    assert ours_history == theirs_history


# --- create ---------------------------------------------------------------------------------------


def test_create_is_version_zero_and_refuses_an_existing_table(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"], name="sales", description="d")
    assert table.version == 0 and table.partition_columns == ["region"]
    assert (table.protocol.min_reader_version, table.protocol.min_writer_version) == (1, 2)
    assert table.metadata.name == "sales" and table.schema == SCHEMA
    assert delta_rs_rows(path).num_rows == 0
    with pytest.raises(TableExistsError):
        DeltaTable.create(path, SCHEMA)


@pytest.mark.parametrize(
    ("properties", "schema", "protocol"),
    [
        ({}, SCHEMA, (1, 2, None, None)),
        ({"delta.appendOnly": "true"}, SCHEMA, (1, 2, None, None)),
        ({"delta.constraints.pos": "id >= 0"}, SCHEMA, (1, 3, None, None)),
        ({"delta.enableChangeDataFeed": "true"}, SCHEMA, (1, 4, None, None)),
        ({"delta.columnMapping.mode": "name"}, SCHEMA, (2, 5, None, None)),
        ({"delta.enableDeletionVectors": "true"}, SCHEMA, (3, 7, ["deletionVectors"], ["deletionVectors"])),
        ({"delta.enableInCommitTimestamps": "true"}, SCHEMA, (1, 7, None, ["inCommitTimestamp"])),
        ({}, pa.schema([("t", pa.timestamp("us"))]), (3, 7, ["timestampNtz"], ["timestampNtz"])),
        (
            {"delta.enableDeletionVectors": "true", "delta.appendOnly": "true"},
            SCHEMA,
            (3, 7, ["deletionVectors"], ["appendOnly", "deletionVectors"]),
        ),
    ],
)
def test_create_picks_the_minimal_protocol(tmp_path, properties, schema, protocol):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, schema, properties=properties)
    p = table.protocol
    assert (p.min_reader_version, p.min_writer_version, p.reader_features, p.writer_features) == protocol
    deltalake.DeltaTable(path)  # delta-rs accepts the protocol


def test_create_with_column_mapping_writes_physical_names(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(
        path, SCHEMA, partition_by=["region"], properties={"delta.columnMapping.mode": "name"}
    )
    fields = table.delta_schema.fields
    assert all(f.physical_name.startswith("col-") and f.field_id for f in fields)
    assert table.properties.raw["delta.columnMapping.maxColumnId"] == str(len(fields))
    table.append(rows(0, 20))
    assert table.to_arrow().num_rows == 20
    assert table.to_arrow(filter="region = 'eu' AND id > 10").num_rows == 4
    import pyarrow.parquet as pq

    uri = table.file_uris()[0]
    assert all(n.startswith("col-") for n in pq.read_schema(uri).names)
    assert_delta_rs_agrees(path)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"partition_by": ["nope"]}, SchemaError, "partition column 'nope'"),
        ({"partition_by": ["id", "name", "region", "amount", "at"]}, SchemaError, "all of its columns"),
        ({"properties": {"delta.checkpointInterval": "often"}}, Exception, "checkpointInterval"),
        ({"properties": {"delta.enableIcebergCompatV2": "true"}}, ProtocolError, "icebergCompatV2"),
        ({"properties": {"delta.constraints.c": "id +"}}, ConstraintViolationError, "cannot be evaluated"),
    ],
)
def test_create_rejects_bad_requests(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        DeltaTable.create(str(tmp_path / "t"), SCHEMA, **kwargs)
    assert not (tmp_path / "t" / "_delta_log" / "00000000000000000000.json").exists()


# --- append ---------------------------------------------------------------------------------------


def test_append_round_trips_and_delta_rs_agrees(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"])
    result = table.append(rows(0, 100))
    assert result.version == 1 and not result.skipped
    assert result.operation_metrics == {
        "numFiles": "2",
        "numOutputRows": "100",
        "numOutputBytes": result.operation_metrics["numOutputBytes"],
    }
    table.append(rows(100, 50))
    assert table.version == 2
    assert_same_rows(table.to_arrow(), pa.concat_tables([rows(0, 100), rows(100, 50)]))
    assert_delta_rs_agrees(path)


def test_partition_values_with_special_characters_and_nulls(tmp_path):
    path = str(tmp_path / "t")
    regions = ("a b", "x/y", "100%", "é=ü", "", None, "2021-01-01", "a:b", "#hash", "tab\there")
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"])
    data = rows(0, 40, regions=regions)
    table.append(data)
    expected = data.set_column(2, "region", pc.if_else(pc.equal(data["region"], ""), None, data["region"]))
    assert_same_rows(table.to_arrow(), expected)
    assert table.to_arrow(filter="region = '2021-01-01'").num_rows == 4  # a string, not a date
    assert table.to_arrow(filter="region IS NULL").num_rows == 8
    assert_delta_rs_agrees(path)
    assert len({u.rsplit("/", 2)[-2] for u in table.file_uris()}) == 9  # "" and None share a directory


def test_typed_partitions(tmp_path):
    path = str(tmp_path / "t")
    schema = pa.schema(
        [
            ("v", pa.int64()),
            ("d", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("n", pa.int32()),
            ("b", pa.bool_()),
            ("dec", pa.decimal128(5, 2)),
        ]
    )
    data = pa.table(
        {
            "v": [1, 2, 3],
            "d": [dt.date(2026, 1, 1), None, dt.date(2026, 1, 2)],
            "ts": [dt.datetime(2026, 1, 1, 1, 2, 3, 456789, tzinfo=dt.UTC)] * 3,
            "n": [1, -5, None],
            "b": [True, False, None],
            "dec": [Decimal("1.50"), Decimal("-2.25"), None],
        },
        schema=schema,
    )
    table = DeltaTable.create(path, schema, partition_by=["d", "ts", "n", "b", "dec"])
    table.append(data)
    assert_same_rows(table.to_arrow(), data)
    assert_delta_rs_agrees(path)


def test_streamed_input_is_split_into_files_of_the_target_size(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA)
    batches = [rows(i * 1000, 1000).to_batches()[0] for i in range(30)]
    reader = pa.RecordBatchReader.from_batches(SCHEMA, iter(batches))
    result = table.append(reader, target_file_size=50_000)
    assert int(result.operation_metrics["numOutputRows"]) == 30_000
    files = table.snapshot.files
    assert files.num_rows > 1
    assert table.to_arrow().num_rows == 30_000
    assert_delta_rs_agrees(path)


def test_statistics_match_the_data(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"])
    data = rows(0, 60)
    table.append(data)
    actions = pa.table(deltalake.DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    assert len(actions) == 2
    for a in actions:
        part = data.filter(pc.equal(data["region"], a["partition.region"]))
        assert a["num_records"] == part.num_rows
        assert a["min.id"] == pc.min(part["id"]).as_py() and a["max.id"] == pc.max(part["id"]).as_py()
        assert a["null_count.name"] == part["name"].null_count
        assert a["min.name"] == pc.min(part["name"]).as_py()
        assert Decimal(str(a["max.amount"])) == pc.max(part["amount"]).as_py()


def test_schema_enforcement(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA)
    with pytest.raises(SchemaMismatchError, match="extra"):
        table.append(rows(0, 3).append_column("extra", pa.array([1, 2, 3])))
    with pytest.raises(
        SchemaMismatchError, match=r"column 'id': the table has type long, the data has string"
    ):
        table.append(rows(0, 3).set_column(0, "id", pa.array(["a", "b", "c"])))
    # narrower ints, reordered and missing nullable columns, other string encodings are fine
    narrow = pa.table({"name": pa.array(["x"], pa.large_string()), "id": pa.array([7], pa.int32())})
    table.append(narrow)
    assert table.to_arrow().to_pylist() == [
        {"id": 7, "name": "x", "region": None, "amount": None, "at": None}
    ]
    with pytest.raises(SchemaMismatchError):
        table.append(pa.table({"id": pa.array([1.5])}))  # a double does not fit a long
    assert table.version == 1  # the failed appends committed nothing


def test_not_null_columns(tmp_path):
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("v", pa.string()),
            pa.field("s", pa.struct([pa.field("x", pa.int32(), nullable=False)])),
        ]
    )
    table = DeltaTable.create(str(tmp_path / "t"), schema)
    with pytest.raises(ConstraintViolationError, match="'id'"):
        table.append(
            pa.table(
                {"id": [1, None], "v": ["a", "b"], "s": [{"x": 1}, {"x": 2}]},
                schema=pa.schema([("id", pa.int64()), ("v", pa.string()), schema.field("s")]),
            )
        )
    with pytest.raises(ConstraintViolationError, match=r"'s\.x'"):
        table.append(pa.table({"id": [1], "v": ["a"], "s": pa.array([{"x": None}], schema.field("s").type)}))
    with pytest.raises(SchemaMismatchError, match="missing"):
        table.append(pa.table({"v": ["a"]}))
    table.append(pa.table({"id": [1], "v": [None], "s": pa.array([None], schema.field("s").type)}))
    assert table.version == 1


def test_check_constraints_and_invariants(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(
        path, SCHEMA, properties={"delta.constraints.positive": "id >= 0 AND amount < 1000"}
    )
    with pytest.raises(ConstraintViolationError, match=r"positive .* 1 row"):
        table.append(rows(-1, 3))
    table.append(rows(0, 3))
    assert table.version == 1
    assert_delta_rs_agrees(path)
    schema = pa.schema(
        [
            pa.field(
                "x",
                pa.int64(),
                metadata={"delta.invariants": json.dumps({"expression": {"expression": "x < 10"}})},
            )
        ]
    )
    from deltaplane.engine.schema import StructField, StructType, from_arrow_schema

    delta = from_arrow_schema(schema)
    delta = StructType(
        (
            StructField(
                "x",
                delta.fields[0].type,
                True,
                {"delta.invariants": json.dumps({"expression": {"expression": "x < 10"}})},
            ),
        )
    )
    inv = DeltaTable.create(str(tmp_path / "inv"), delta)
    assert inv.protocol.min_writer_version == 2
    with pytest.raises(ConstraintViolationError, match="invariant"):
        inv.append(pa.table({"x": [1, 99]}))
    inv.append(pa.table({"x": [1, 9]}))


def test_schema_merge_adds_columns(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA)
    table.append(rows(0, 5))
    wider = rows(5, 2).append_column("note", pa.array(["n1", "n2"]))
    table.append(wider, schema_mode="merge")
    assert table.schema.names == [*SCHEMA.names, "note"]
    out = table.to_arrow()
    assert out.filter(pc.is_valid(out["note"])).num_rows == 2
    assert_delta_rs_agrees(path)
    with pytest.raises(SchemaMismatchError, match=r"delta\.enableTypeWidening"):
        table.append(pa.table({"id": pa.array(["x"])}), schema_mode="merge")


def test_type_widening_on_merge(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(
        path, pa.schema([("n", pa.int32())]), properties={"delta.enableTypeWidening": "true"}
    )
    table.append(pa.table({"n": pa.array([1], pa.int32())}))
    table.append(pa.table({"n": pa.array([2**40], pa.int64())}), schema_mode="merge")
    assert table.schema.field("n").type == pa.int64()
    assert sorted(table.to_arrow().column("n").to_pylist()) == [1, 2**40]  # the old file is read widened


def test_idempotent_app_transactions(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA)
    first = table.append(rows(0, 5), app_id="dag.task", app_version=3)
    again = table.append(rows(0, 5), app_id="dag.task", app_version=3)
    older = table.append(rows(0, 5), app_id="dag.task", app_version=2)
    assert not first.skipped and again.skipped and older.skipped
    assert again.version == first.version == table.version
    assert table.to_arrow().num_rows == 5
    newer = table.append(rows(5, 5), app_id="dag.task", app_version=4)
    assert newer.version == first.version + 1
    assert deltalake.DeltaTable(path).transaction_version("dag.task") == 4
    assert_delta_rs_agrees(path)
    with pytest.raises(ValueError):
        table.append(rows(0, 1), app_id="only-id")


def test_commit_info(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"])
    r1 = table.append(rows(0, 4))
    r2 = table.append(rows(4, 4))
    history = table.history()
    latest = history[0]
    assert latest["operation"] == "WRITE"
    assert latest["operationParameters"] == {"mode": "Append", "partitionBy": '["region"]'}
    assert latest["readVersion"] == 1 and latest["isBlindAppend"] is True
    assert latest["isolationLevel"] == "WriteSerializable"
    assert latest["engineInfo"].startswith("deltaplane/")
    assert latest["operationMetrics"]["numOutputRows"] == "4"
    assert r1.txn_id != r2.txn_id and latest["txnId"] == r2.txn_id
    assert history[-1]["operation"] == "CREATE TABLE"
    assert [h["operation"] for h in deltalake.DeltaTable(path).history()] == [h["operation"] for h in history]


def test_in_commit_timestamps(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, properties={"delta.enableInCommitTimestamps": "true"})
    for i in range(3):
        table.append(rows(i, 1))
    stamps = []
    for v in range(4):
        first_line = (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").read_text().splitlines()[0]
        info = json.loads(first_line)["commitInfo"]  # commitInfo must come first
        stamps.append(info["inCommitTimestamp"])
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    assert DeltaTable(path).snapshot.timestamp == stamps[-1]
    assert DeltaTable(path, timestamp=stamps[1]).version == 1


def test_append_only_tables_refuse_overwrites(tmp_path):
    table = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties={"delta.appendOnly": "true"})
    table.append(rows(0, 3))
    with pytest.raises(TableReadOnlyError, match="append-only"):
        table.overwrite(rows(0, 1))
    assert table.version == 1


def test_writing_needs_the_latest_version(tmp_path):
    path = str(tmp_path / "t")
    DeltaTable.create(path, SCHEMA).append(rows(0, 1))
    from deltaplane.engine.errors import DeltaError

    with pytest.raises(DeltaError, match="fixed version"):
        DeltaTable(path, version=0).append(rows(1, 1))


def test_tables_with_unsupported_writer_features_stay_read_only(tmp_path):
    path = str(tmp_path / "t")
    from deltalake import write_deltalake

    write_deltalake(path, rows(0, 2))
    log = tmp_path / "t" / "_delta_log"
    (log / "00000000000000000001.json").write_text(
        json.dumps(
            {
                "protocol": {
                    "minReaderVersion": 1,
                    "minWriterVersion": 7,
                    "writerFeatures": ["identityColumns", "icebergCompatV1"],
                }
            }
        )
        + "\n"
    )
    table = DeltaTable(path)
    assert table.to_arrow().num_rows == 2
    with pytest.raises(ProtocolError, match="icebergCompatV1"):
        table.append(rows(2, 1))


def test_dictionary_encoding_only_for_repetitive_columns(tmp_path):
    path = str(tmp_path / "t")
    data = pa.table(
        {
            "id": pa.array(range(5000), pa.int64()),
            "kind": pa.array([("a", "b", "c")[i % 3] for i in range(5000)]),
        }
    )
    table = DeltaTable.create(path, data.schema)
    table.append(data)
    (uri,) = table.file_uris()
    meta = pq.ParquetFile(uri.removeprefix("file://")).metadata.row_group(0)
    column = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in column["kind"]
    assert "RLE_DICTIONARY" not in column["id"] and "PLAIN_DICTIONARY" not in column["id"]
    assert_same_rows(table.to_arrow(), data)


def test_dictionary_choice_on_a_full_sample_of_mixed_columns():
    """Distinct columns are let go on their first rows; a column of 20,000 values in random order
    (82% distinct in its first 8,192 rows, 30% over 65,536) is still judged on the whole sample
    and chosen, as are the plainly repetitive ones."""
    from deltaplane.engine.file_layout import dictionary_columns

    rng = np.random.default_rng(1)
    n = 65_536
    sample = pa.table(
        {
            "id": np.arange(n),
            "v": rng.normal(size=n),
            "k": rng.integers(0, 100, n).astype(np.int32),
            "day": ["2026-11-01"] * n,
            "user": [f"user-{i}" for i in rng.integers(0, 20_000, n)],
        }
    )
    assert dictionary_columns(sample) == ["k", "day", "user"]


def _encodings(uri: str) -> dict[str, list[str]]:
    meta = pq.ParquetFile(uri.removeprefix("file://")).metadata.row_group(0)
    return {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}


def test_dictionary_encoding_is_judged_on_the_rows_a_file_gets_not_the_first_batch(tmp_path):
    """Rows that come in batches too small to judge (a stream of 500-row batches, or OPTIMIZE
    reading small files one by one) are judged once a file's rows are together: the first batch
    alone used to decide, and too small to judge meant dictionary for every column, ids too."""
    data = pa.table(
        {
            "id": pa.array(range(5000), pa.int64()),
            "kind": pa.array([("a", "b", "c")[i % 3] for i in range(5000)]),
        }
    )
    streamed = DeltaTable.create(str(tmp_path / "streamed"), data.schema)
    streamed.append(pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=500)))
    compacted = DeltaTable.create(str(tmp_path / "compacted"), data.schema)
    for start in range(0, 5000, 500):
        compacted.append(data.slice(start, 500))
    assert compacted.optimize().num_files_added == 1
    for table in (streamed, compacted):
        (uri,) = table.file_uris()
        column = _encodings(uri)
        assert "RLE_DICTIONARY" in column["kind"], table.uri
        assert "RLE_DICTIONARY" not in column["id"] and "PLAIN_DICTIONARY" not in column["id"], table.uri
        assert_same_rows(table.to_arrow(), data)
