"""Opening a checkpointed table on S3 (SeaweedFS on loopback): a small checkpoint is one GET.

Read through a random-access file, a checkpoint costs a request for the footer and one per
column chunk it decodes, each a round trip; the listing already gives the file's size, so a
small one is fetched whole and decoded from memory.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import open_store

pytestmark = pytest.mark.xdist_group("s3")

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def test_a_small_checkpoint_is_read_with_one_request(s3_server):
    uri = s3_server.uri()
    table = DeltaTable.create(uri, SCHEMA, partition_by=["region"], storage_options=s3_server.options())
    for i in range(3):
        table.append(pa.table({"id": [i, i + 10], "region": ["eu", "us"]}))
    table.delete("id = 10")
    table.create_checkpoint()

    store = open_store(uri, s3_server.options())
    gets: list[str] = []

    def record(request, **kwargs):
        gets.append(request.url.rsplit("/", 1)[1])

    store.client.meta.events.register("before-send.s3.GetObject", record)
    for _ in range(2):  # the same store again: nothing kept from the first open
        gets.clear()
        snapshot = load_snapshot(store)
        checkpoint_gets = [name for name in gets if name.endswith(".checkpoint.parquet")]
        assert checkpoint_gets == [f"{snapshot.version:020d}.checkpoint.parquet"]
        assert sorted(snapshot.files.column("partition_values").to_pylist(), key=str) == [
            {"region": "eu"},
            {"region": "eu"},
            {"region": "eu"},
            {"region": "us"},
            {"region": "us"},
        ]
        assert snapshot.tombstones.num_rows == 1
    fresh = DeltaTable(uri, storage_options=s3_server.options())
    assert sorted(fresh.to_arrow().column("id").to_pylist()) == [0, 1, 2, 11, 12]
