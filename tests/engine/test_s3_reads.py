"""Reads of tables on a real S3 server (SeaweedFS) as an object store's latency makes them cost:
requests are counted by ``deltaplane.devstack.latency_proxy`` in front of the server, and every
result is checked against the rows written."""

from __future__ import annotations

import json
import random
import uuid
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaplane.devstack.latency_proxy import ProxyProcess
from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import DataFileError
from tests.conftest import S3Server
from tests.helpers import assert_same_rows

pytestmark = pytest.mark.xdist_group("s3")


@pytest.fixture(scope="module")
def counted(s3_server):
    """The same bucket through a counting proxy (no added latency)."""
    with ProxyProcess(urlsplit(s3_server.endpoint).port, 0) as proxy:
        yield proxy, S3Server(f"http://127.0.0.1:{proxy.port}", s3_server.bucket)


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name with space.and dot": [f"n{i}" for i in ids],
            "größe": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


def appended(server: S3Server, files: int, rows_each: int) -> tuple[str, DeltaTable]:
    """A new table on S3 of ``files`` appends of ``rows_each`` rows (ids from 0, in order)."""
    uri = server.uri()
    table = DeltaTable.create(uri, rows(0, 1).schema, storage_options=server.options())
    for i in range(files):
        table.append(rows(i * rows_each, rows_each))
    return uri, table


def test_a_many_file_read_asks_each_file_for_its_footer_once_and_never_for_its_size(counted):
    proxy, server = counted
    uri, _table = appended(server, 12, 100)
    expected = pa.concat_tables([rows(i * 100, 100) for i in range(12)])
    pa.set_io_thread_count(8)  # Arrow's default: the read must raise it for an object store
    proxy.counters(reset=True)
    fresh = DeltaTable(uri, storage_options=server.options())
    opened = proxy.counters(reset=True)
    assert_same_rows(fresh.to_arrow().sort_by("id"), expected)
    read = proxy.counters(reset=True)
    # The log's sizes stand in for HEAD; a small file's footer and its columns take one request each.
    assert read.get("head_requests", 0) == 0, read
    assert read["requests"] <= 2 * 12, read
    assert opened.get("head_requests", 0) == 0, opened
    assert pa.io_thread_count() >= 32  # Arrow's I/O pool covers the requests in flight


def test_an_append_to_an_existing_table_lists_its_log_once(counted):
    proxy, server = counted
    uri = server.uri()
    write_table(uri, rows(0, 10), storage_options=server.options())
    write_table(uri, rows(10, 10), mode="append", storage_options=server.options())
    proxy.counters(reset=True)
    write_table(uri, rows(20, 10), mode="append", storage_options=server.options())
    done = proxy.counters(reset=True)
    assert done.get("list_requests") == 1, done  # the open that finds the table is its check
    assert done.get("put_requests") == 2, done  # the data file, then the commit
    out = DeltaTable(uri, storage_options=server.options()).to_arrow().sort_by("id")
    assert_same_rows(out, rows(0, 30).cast(out.schema))


def test_a_filtered_read_fetches_each_small_file_it_keeps_in_one_request(counted):
    proxy, server = counted
    uri, _table = appended(server, 12, 100)
    fresh = DeltaTable(uri, storage_options=server.options())
    proxy.counters(reset=True)
    out = fresh.to_arrow(filter="id BETWEEN 510 AND 519 OR id = 1105")
    read = proxy.counters(reset=True)
    assert sorted(out.column("id").to_pylist()) == [*range(510, 520), 1105]
    assert read == {**read, "requests": 2, "get_requests": 2}, read  # two files kept, one GET each
    # Reuse: the same table object, a filter on a column whose name needs quoting, then a
    # filter that keeps nothing (no request at all).
    proxy.counters(reset=True)
    named = fresh.to_arrow(filter="`name with space.and dot` = 'n7'")
    assert named.column("id").to_pylist() == [7]
    proxy.counters(reset=True)
    assert fresh.to_arrow(filter="id > 99999").num_rows == 0
    assert proxy.counters()["requests"] == 0


def test_opening_a_table_with_a_large_checkpoint_fetches_the_checkpoint_in_one_request(counted, tmp_path):
    """A 100,000-file checkpoint (over 8 MB) is read nearly whole by every open: one GET, not a
    HEAD and a range read per column chunk."""
    proxy, server = counted
    local = tmp_path / "t"
    log = local / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    lines = [
        json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
        json.dumps(
            {
                "metaData": {
                    "id": "7",
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps(schema),
                    "partitionColumns": [],
                    "configuration": {},
                }
            }
        ),
    ]
    rng = random.Random(7)  # random paths and statistics: a checkpoint that does not compress away
    for n in range(100_000):
        low = rng.getrandbits(62)
        stats = {
            "numRecords": 10,
            "minValues": {"id": low},
            "maxValues": {"id": low + rng.getrandbits(40)},
            "nullCount": {"id": 0},
        }
        add = {
            "path": f"part-{n:08d}-{uuid.UUID(int=rng.getrandbits(128))}.parquet",
            "partitionValues": {},
            "size": rng.getrandbits(30),
            "modificationTime": 1_700_000_000_000 + n,
            "dataChange": True,
            "stats": json.dumps(stats),
            "tags": {"origin": uuid.UUID(int=rng.getrandbits(128)).hex * 2},
        }
        lines.append(json.dumps({"add": add}))
    (log / f"{0:020d}.json").write_text("\n".join(lines) + "\n")
    DeltaTable(str(local)).create_checkpoint()
    checkpoint = log / f"{0:020d}.checkpoint.parquet"
    assert checkpoint.stat().st_size > 8 << 20  # beyond a small object's single read
    uri = server.uri()
    prefix = urlsplit(uri).path.lstrip("/")
    s3 = server.client()
    for path in log.iterdir():
        s3.upload_file(str(path), server.bucket, f"{prefix}/_delta_log/{path.name}")
    proxy.counters(reset=True)
    table = DeltaTable(uri, storage_options=server.options())
    opened = proxy.counters(reset=True)
    assert len(table.file_uris()) == 100_000
    assert opened.get("head_requests", 0) == 0, opened
    # _last_checkpoint, the listing, the checkpoint: one request each.
    assert opened["requests"] == 3, opened


def test_the_same_table_object_reads_again_after_its_own_append_and_streams_the_same_rows(counted):
    _, server = counted
    _uri, table = appended(server, 3, 10)
    first = table.to_arrow()
    table.append(rows(1_000, 5))
    again = table.to_arrow()
    assert first.num_rows == 30 and again.num_rows == 35
    streamed = pa.Table.from_batches(list(table.scan().to_batches(batch_size=7)), schema=again.schema)
    assert_same_rows(streamed, again)
    assert_same_rows(again.sort_by("id"), pa.concat_tables([rows(0, 30), rows(1_000, 5)]).cast(again.schema))
    only = table.to_arrow(columns=["größe"])
    assert pc.sum(only["größe"]).as_py() == sum(i * 0.5 for i in [*range(30), *range(1_000, 1_005)])


def test_partition_values_that_need_escaping_read_back_from_s3(counted):
    _, server = counted
    uri = server.uri()
    values = ["a b", "100%", "x=y", "ü/ñ", "日本", "", None, "#?&+"]
    data = pa.table({"id": pa.array(range(len(values)), pa.int64()), "part": pa.array(values, pa.string())})
    write_table(uri, data, partition_by=["part"], storage_options=server.options())
    out = DeltaTable(uri, storage_options=server.options()).to_arrow().sort_by("id")
    # An empty string partition value is null in Delta.
    assert out.column("part").to_pylist() == ["a b", "100%", "x=y", "ü/ñ", "日本", None, None, "#?&+"]
    assert out.column("id").to_pylist() == list(range(len(values)))


def test_a_data_file_deleted_behind_the_tables_back_is_named(counted):
    _, server = counted
    uri, table = appended(server, 3, 10)
    victim = urlsplit(table.file_uris()[1]).path.lstrip("/")
    server.client().delete_object(Bucket=server.bucket, Key=victim)
    with pytest.raises(DataFileError, match="is missing") as caught:
        DeltaTable(uri, storage_options=server.options()).to_arrow()
    assert victim.rsplit("/", 1)[1] in str(caught.value)


def test_a_log_that_records_a_wrong_file_size_still_reads_right(counted):
    """Another writer's log may carry a size that is not the object's: the size only saves a
    request, it never decides what is read."""
    _, server = counted
    uri, _ = appended(server, 2, 50)
    s3 = server.client()
    prefix = urlsplit(uri).path.lstrip("/")
    key = f"{prefix}/_delta_log/{1:020d}.json"
    lines = s3.get_object(Bucket=server.bucket, Key=key)["Body"].read().decode().splitlines()
    actions = [json.loads(line) for line in lines]
    for action in actions:
        if "add" in action:
            action["add"]["size"] += 1_000
    s3.put_object(Bucket=server.bucket, Key=key, Body="\n".join(json.dumps(a) for a in actions).encode())
    out = DeltaTable(uri, storage_options=server.options()).to_arrow().sort_by("id")
    assert_same_rows(out, rows(0, 100).cast(out.schema))
