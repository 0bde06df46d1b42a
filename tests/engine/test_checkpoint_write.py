"""Checkpoints we write: found, complete, read by delta-rs, and never the cause of a bad load."""

from __future__ import annotations

import json
import time

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.checkpoint_writer import write_checkpoint
from deltaplane.engine.log.last_checkpoint import checksum
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import open_store
from tests.engine.test_write import SCHEMA, assert_delta_rs_agrees, rows
from tests.helpers import assert_same_rows


def test_checkpoint_every_interval(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(
        path, SCHEMA, partition_by=["region"], properties={"delta.checkpointInterval": "3"}
    )
    written = [table.append(rows(i * 10, 10)).checkpoint_written for i in range(7)]
    assert written == [False, False, True, False, False, True, False]  # versions 3 and 6
    log = tmp_path / "t" / "_delta_log"
    hint = json.loads((log / "_last_checkpoint").read_text())
    assert hint["version"] == 6 and hint["numOfAddFiles"] == 12 and hint["checksum"] == checksum(hint)
    snap = DeltaTable(path).snapshot
    assert snap.segment.checkpoint.version == 6 and [c.version for c in snap.segment.commits] == [7]
    assert table.to_arrow().num_rows == 70
    assert_delta_rs_agrees(path)


def test_checkpoint_content_matches_the_snapshot(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"])
    for i in range(4):
        table.append(rows(i * 10, 10), app_id="job", app_version=i)
    table.overwrite(rows(100, 4, regions=("eu",)), predicate="region = 'eu'")
    info = table.checkpoint()
    assert info.written and info.num_add_files == table.snapshot.num_files
    checkpoint = pq.read_table(
        str(tmp_path / "t" / "_delta_log" / f"{table.version:020d}.checkpoint.parquet")
    )
    adds = [a for a in checkpoint.column("add").to_pylist() if a]
    removes = [r for r in checkpoint.column("remove").to_pylist() if r]
    txns = [t for t in checkpoint.column("txn").to_pylist() if t]
    assert len(adds) == table.snapshot.num_files and len(removes) == 4  # the eu files, unexpired
    assert txns == [{"appId": "job", "version": 3, "lastUpdated": txns[0]["lastUpdated"]}]
    for a in adds:
        stats = json.loads(a["stats"])
        parsed = a["stats_parsed"]
        assert parsed["numRecords"] == stats["numRecords"]
        assert parsed["minValues"]["id"] == stats["minValues"]["id"]
        assert a["partitionValues_parsed"]["region"] == dict(a["partitionValues"])["region"]
        assert a["dataChange"] is False
    # the table reloads from the checkpoint alone to the same state
    (tmp_path / "t" / "_delta_log" / "00000000000000000000.json").unlink()
    assert_same_rows(DeltaTable(path).to_arrow(), table.to_arrow())
    assert deltalake.DeltaTable(path).transaction_version("job") == 3
    assert_same_rows(
        DeltaTable(path).to_arrow(),
        deltalake.DeltaTable(path).to_pyarrow_table().select(SCHEMA.names).cast(SCHEMA),
    )


def test_expired_tombstones_are_dropped(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(
        path, SCHEMA, properties={"delta.deletedFileRetentionDuration": "interval 1 seconds"}
    )
    table.append(rows(0, 5))
    table.overwrite(rows(5, 5))
    time.sleep(1.2)
    table.checkpoint()
    snap = DeltaTable(path).snapshot
    assert snap.tombstones.num_rows == 0 and snap.segment.checkpoint is not None


def test_checkpoint_of_an_older_version_does_not_move_the_hint_back(tmp_path):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA)
    for i in range(3):
        table.append(rows(i, 1))
    store = open_store(path)
    write_checkpoint(store, 3)
    write_checkpoint(store, 1)
    assert json.loads((tmp_path / "t" / "_delta_log" / "_last_checkpoint").read_text())["version"] == 3
    again = write_checkpoint(store, 3)
    assert not again.written  # already there: nothing rewritten
    assert load_snapshot(store, 2).segment.checkpoint.version == 1


def test_column_mapping_and_deletion_vector_tables_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    props = {
        "delta.columnMapping.mode": "name",
        "delta.enableDeletionVectors": "true",
        "delta.checkpointInterval": "2",
    }
    table = DeltaTable.create(path, SCHEMA, partition_by=["region"], properties=props)
    table.append(rows(0, 10))
    table.append(rows(10, 10))
    assert DeltaTable(path).snapshot.segment.checkpoint.version == 2
    checkpoint = pq.read_table(str(tmp_path / "t" / "_delta_log" / "00000000000000000002.checkpoint.parquet"))
    add = next(a for a in checkpoint.column("add").to_pylist() if a)
    assert all(k.startswith("col-") for k in add["stats_parsed"]["minValues"])
    assert all(k.startswith("col-") for k in add["partitionValues_parsed"])
    assert json.loads(add["stats"])["tightBounds"] is True
    assert_delta_rs_agrees(path)


@pytest.mark.parametrize("policy", ["v2"])
def test_v2_checkpoint_tables_get_a_classic_named_v2_checkpoint(tmp_path, policy):
    path = str(tmp_path / "t")
    table = DeltaTable.create(path, SCHEMA, properties={"delta.checkpointPolicy": policy})
    assert "v2Checkpoint" in table.protocol.reader_features
    table.append(rows(0, 5))
    table.checkpoint()
    checkpoint = pq.read_table(str(tmp_path / "t" / "_delta_log" / "00000000000000000001.checkpoint.parquet"))
    assert [m for m in checkpoint.column("checkpointMetadata").to_pylist() if m] == [
        {"version": 1, "tags": None}
    ]
    assert DeltaTable(path).to_arrow().num_rows == 5
    assert (
        pa.RecordBatchReader.from_stream(
            deltalake.QueryBuilder()
            .register("t", deltalake.DeltaTable(path))
            .execute("SELECT count(*) AS n FROM t")
        )
        .read_all()
        .column(0)[0]
        .as_py()
        == 5
    )
