"""Streaming through the `deltaplane` source and sink on real Spark (local[2])."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.utils import CapturedException, StreamingQueryException

from deltaplane.engine import DeltaTable, write_table

pytestmark = pytest.mark.xdist_group("spark")

FAILURES = (CapturedException, PySparkException, StreamingQueryException)


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "part": [i % 3 for i in ids]})


def stream(spark, src: str, **options):
    reader = spark.readStream.format("deltaplane")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(src)


def run_available_now(spark, src, dst, checkpoint, **options) -> list[int]:
    query = (
        stream(spark, src, **options)
        .writeStream.format("deltaplane")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(dst)
    )
    query.awaitTermination(120)
    if query.exception() is not None:
        raise query.exception()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def ids(uri: str) -> Counter:
    return Counter(DeltaTable(uri).to_arrow()["id"].to_pylist())


def test_a_running_query_sees_every_append_once_and_nothing_from_optimize(spark, tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    write_table(src, rows(0, 10), partition_by=["part"])
    query = (
        stream(spark, src, maxFilesPerTrigger=2)
        .writeStream.format("deltaplane")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start(dst)
    )
    appended = 10
    try:

        def writer():
            nonlocal appended
            for i in range(6):
                write_table(src, rows(appended, 7), mode="append")
                appended += 7
                if i == 2:
                    DeltaTable(src).optimize()  # rewrites every small file, dataChange=false
                time.sleep(0.3)
            DeltaTable(src).optimize()

        thread = threading.Thread(target=writer)
        thread.start()
        thread.join(120)
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert any(c["operation"] == "OPTIMIZE" for c in DeltaTable(src).history())
    got = ids(dst)
    assert set(got) == set(range(appended)), sorted(set(range(appended)) - set(got))
    assert max(got.values()) == 1  # exactly once


def test_available_now_honours_limits_and_restarts_where_it_stopped(spark, tmp_path):
    src, dst, ck = str(tmp_path / "src"), str(tmp_path / "dst"), tmp_path / "ck"
    for start in range(0, 40, 10):
        write_table(src, rows(start, 10), mode="append")
    assert run_available_now(spark, src, dst, ck, maxFilesPerTrigger=1) == [10, 10, 10, 10]
    offsets = json.loads((ck / "offsets" / "3").read_text().splitlines()[-1])
    assert offsets["version"] == 4 and offsets["initialSnapshot"] is False and offsets["tableId"]
    write_table(src, rows(40, 5), mode="append")
    DeltaTable(src).optimize()
    write_table(src, rows(45, 5), mode="append")
    assert run_available_now(spark, src, dst, ck, maxFilesPerTrigger=1) == [5, 5]
    assert ids(dst) == Counter(range(50))
    # maxBytesPerTrigger: about two files per batch; nothing new to read after a restart.
    dst2, ck2 = str(tmp_path / "dst2"), tmp_path / "ck2"
    size = (tmp_path / "src" / DeltaTable(src, version=1).get_add_actions()["path"][0].as_py()).stat().st_size
    batches = run_available_now(
        spark, src, dst2, ck2, startingVersion=0, maxBytesPerTrigger=str(2 * size + 10)
    )
    # Six files (four of 10 rows, two of 5): no batch holds more than two, and some hold two.
    assert sum(batches) == 50 and max(batches) <= 20 and 3 <= len(batches) <= 4, batches
    assert run_available_now(spark, src, dst2, ck2) == []


def test_without_limits_a_micro_batch_takes_at_most_1000_files(spark, tmp_path):
    """Delta Spark's default maxFilesPerTrigger (1,000) applies when neither limit is given; an
    explicit maxFilesPerTrigger, or maxBytesPerTrigger alone, replaces it."""
    from pyspark.sql.streaming.datasource import ReadMaxBytes, ReadMaxFiles

    from deltaplane.spark_jobs.options import StreamOptions
    from deltaplane.spark_jobs.streaming import DeltaplaneStreamReader
    from deltaplane.spark_jobs.types import spark_schema

    src = str(tmp_path / "src")
    table = DeltaTable.create(src, pa.schema([pa.field("id", pa.int64())]))
    for i in range(1200):  # 1,200 single-file commits of one row each
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    assert run_available_now(spark, src, str(tmp_path / "dst"), tmp_path / "ck", startingVersion=1) == [
        1000,
        200,
    ]
    assert ids(str(tmp_path / "dst")) == Counter(range(1200))

    schema = spark_schema(table.snapshot.schema)

    def reader(**options) -> DeltaplaneStreamReader:
        return DeltaplaneStreamReader(
            StreamOptions.parse({"path": src, "startingVersion": "1", **options}), schema
        )

    assert reader().getDefaultReadLimit() == ReadMaxFiles(1000)
    assert reader(maxFilesPerTrigger="1100").getDefaultReadLimit() == ReadMaxFiles(1100)
    both = reader(maxFilesPerTrigger="7", maxBytesPerTrigger="1g")
    assert both.getDefaultReadLimit() == ReadMaxFiles(7) and both.options.max_bytes == 1 << 30
    bytes_only = reader(maxBytesPerTrigger="1g")
    assert bytes_only.getDefaultReadLimit() == ReadMaxBytes(1 << 30) and bytes_only.options.max_files is None
    start = bytes_only.initialOffset()
    end = bytes_only.latestOffset(start, bytes_only.getDefaultReadLimit())
    assert end == {**start, "version": 1201, "index": 0}  # all 1,200 files: no hidden file limit


def test_starting_versions(spark, tmp_path):
    src = str(tmp_path / "src")
    for start in range(0, 30, 10):
        write_table(src, rows(start, 10), mode="append")
    run_available_now(spark, src, str(tmp_path / "a"), tmp_path / "cka", startingVersion=1)
    assert ids(str(tmp_path / "a")) == Counter(range(10, 30))
    query = (
        stream(spark, src, startingVersion="latest")
        .writeStream.format("deltaplane")
        .option("checkpointLocation", str(tmp_path / "ckb"))
        .trigger(processingTime="200 milliseconds")
        .start(str(tmp_path / "b"))
    )
    try:
        query.processAllAvailable()
        write_table(src, rows(100, 3), mode="append")
        query.processAllAvailable()
    finally:
        query.stop()
    assert ids(str(tmp_path / "b")) == Counter(range(100, 103))
    with pytest.raises(FAILURES, match="startingVersion 9"):
        run_available_now(spark, src, str(tmp_path / "c"), tmp_path / "ckc", startingVersion=9)


def test_deletes_fail_the_query_unless_change_commits_are_skipped(spark, tmp_path):
    src = str(tmp_path / "src")
    write_table(src, rows(0, 10))
    write_table(src, rows(10, 10), mode="append")
    DeltaTable(src).delete("id < 3")
    write_table(src, rows(20, 5), mode="append")
    with pytest.raises(FAILURES, match=r"version 2 .*DELETE.*skipChangeCommits"):
        run_available_now(spark, src, str(tmp_path / "a"), tmp_path / "cka", startingVersion=0)
    run_available_now(
        spark, src, str(tmp_path / "b"), tmp_path / "ckb", startingVersion=0, skipChangeCommits="true"
    )
    assert ids(str(tmp_path / "b")) == Counter(range(25))  # the delete is not applied downstream


def test_a_restore_is_not_new_data_for_a_stream(spark, tmp_path):
    """DELETE a file's rows, RESTORE to before the DELETE: the re-added file's rows were streamed
    when they were first appended. With skipChangeCommits they are not streamed again (they used
    to be, twice downstream); without it a stream that meets the RESTORE fails naming it."""
    src = str(tmp_path / "src")
    write_table(src, rows(0, 10))
    write_table(src, rows(10, 10), mode="append")
    DeltaTable(src).delete("id < 10")  # v2: the whole first file
    DeltaTable(src).restore(version=1)  # v3: it comes back
    write_table(src, rows(20, 5), mode="append")
    run_available_now(
        spark, src, str(tmp_path / "b"), tmp_path / "ckb", startingVersion=0, skipChangeCommits="true"
    )
    assert ids(str(tmp_path / "b")) == Counter(range(25))
    with pytest.raises(FAILURES, match=r"version 3 .*RESTORE.* is a restore: .*10 row\(s\) that were there"):
        run_available_now(spark, src, str(tmp_path / "a"), tmp_path / "cka", startingVersion=3)


def test_a_query_restarted_across_a_rename_fails_instead_of_relabelling(spark, tmp_path):
    """A query stopped before a RENAME COLUMN, restarted after it: the files it has still to read
    were written under the old name. Reading them under the new one would put old ``part``
    values under ``kind`` silently; the query fails naming the version instead. A query whose
    checkpoint is already past the old files reads on, and a new query from the rename on reads
    everything after it."""
    src = str(tmp_path / "src")
    write_table(src, rows(0, 6), properties={"delta.columnMapping.mode": "name"})
    run_available_now(spark, src, str(tmp_path / "a"), tmp_path / "cka")  # read v0, stopped
    write_table(src, rows(6, 3), mode="append")  # v1: not read by query a yet
    run_available_now(spark, src, str(tmp_path / "b"), tmp_path / "ckb")  # query b is past v1
    DeltaTable(src).alter.rename_column("part", "kind")  # v2
    write_table(src, rows(9, 3).rename_columns(["id", "kind"]), mode="append")  # v3
    with pytest.raises(FAILURES, match=r"checkpoint is at version 1, .*'part' was renamed to 'kind'"):
        run_available_now(spark, src, str(tmp_path / "a"), tmp_path / "cka")
    assert ids(str(tmp_path / "a")) == Counter(range(6))  # nothing relabelled landed
    run_available_now(spark, src, str(tmp_path / "b2"), tmp_path / "ckb")  # b's files are all new
    run_available_now(spark, src, str(tmp_path / "c"), tmp_path / "ckc", startingVersion=2)
    for sink in ("b2", "c"):
        got = DeltaTable(str(tmp_path / sink)).to_arrow().to_pylist()
        assert {r["id"]: r["kind"] for r in got} == {i: i % 3 for i in range(9, 12)}, sink


def test_a_replayed_sink_batch_is_not_committed_twice(spark, tmp_path):
    """The query dies after its batch committed to the table but before Spark recorded the batch
    in its commit log: on restart Spark replays the batch with the same id."""
    src, dst, ck = str(tmp_path / "src"), str(tmp_path / "dst"), tmp_path / "ck"
    write_table(src, rows(0, 10))
    write_table(src, rows(10, 10), mode="append")
    run_available_now(spark, src, dst, ck, maxFilesPerTrigger=1)
    version = DeltaTable(dst).version
    last = max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    (ck / "commits" / str(last)).unlink()  # as if the process died before writing it
    for crc in (ck / "commits").glob(f".{last}.crc"):
        crc.unlink()
    run_available_now(spark, src, dst, ck, maxFilesPerTrigger=1)
    assert (ck / "commits" / str(last)).exists()  # Spark did replay the batch
    assert DeltaTable(dst).version == version
    assert ids(dst) == Counter(range(20))
    info = DeltaTable(dst).history(1)[0]
    assert info["operation"] == "STREAMING UPDATE"
    assert info["streamingBatchId"] == last
    assert DeltaTable(dst).snapshot.app_transaction_version(info["streamingQueryId"]) == last
    first = DeltaTable(dst).history()[-1]  # the batch that created the table is a streaming commit too
    assert first["operation"] == "STREAMING UPDATE" and first["operationParameters"]["epochId"] == "0"


def test_the_initial_offset_does_not_move_with_the_table(tmp_path):
    """Spark asks for it to plan the first batch and again to run it; appends in between must
    not shift the start (they did: the first batch planned one range and read another, empty)."""
    from deltaplane.spark_jobs.options import StreamOptions
    from deltaplane.spark_jobs.streaming import DeltaplaneStreamReader, StreamingSourceError
    from deltaplane.spark_jobs.types import spark_schema

    src = str(tmp_path / "src")
    write_table(src, rows(0, 10))
    reader = DeltaplaneStreamReader(
        StreamOptions.parse({"path": src}), spark_schema(DeltaTable(src).snapshot.schema)
    )
    first = reader.initialOffset()
    write_table(src, rows(10, 5), mode="append")
    assert reader.initialOffset() == first == {**first, "version": 0, "initialSnapshot": True}
    end = reader.latestOffset(first, ReadAllAvailable())
    assert end["version"] == 2 and not end["initialSnapshot"]
    log_dir = tmp_path / "src" / "_delta_log"
    log_dir.rename(tmp_path / "moved")  # planning the batch latestOffset admitted lists no log again
    try:
        assert len(reader.partitions(first, end)) == 1
    finally:
        (tmp_path / "moved").rename(log_dir)
    assert len(reader.partitions(first, end)) == 1
    with pytest.raises(StreamingSourceError, match="ends"):
        reader.partitions(end, first)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens on it once the socket is closed


def test_the_stream_writer_constructor_reads_no_storage(tmp_path):
    """PySpark builds a stream writer for every micro-batch and another one to commit it: neither
    may list the log or load a snapshot. Against storage that cannot answer, building one (directly
    or through the data source) succeeds; the plan is made when the writer is pickled for the
    tasks, and that is where the storage error shows."""
    import pickle

    from deltaplane.engine.errors import DeltaError
    from deltaplane.spark_jobs.datasource import DeltaplaneDataSource
    from deltaplane.spark_jobs.options import WriteOptions
    from deltaplane.spark_jobs.streaming import DeltaplaneStreamWriter
    from deltaplane.spark_jobs.types import spark_schema

    write_table(str(tmp_path / "t"), rows(0, 3))
    schema = spark_schema(DeltaTable(str(tmp_path / "t")).snapshot.schema)
    unreachable = {
        "path": "s3://no-such-bucket/t",
        "storage.endpoint_url": f"http://127.0.0.1:{_closed_port()}",
        "storage.aws_access_key_id": "k",
        "storage.aws_secret_access_key": "s",
        "storage.aws_region": "us-east-1",
        "storage.max_attempts": "1",
        "storage.connect_timeout": "1",
    }
    writer = DeltaplaneStreamWriter(WriteOptions.parse(unreachable), schema, False)
    DeltaplaneDataSource(unreachable).streamWriter(schema, True)
    with pytest.raises(DeltaError):
        pickle.dumps(writer)


def test_a_batch_is_planned_once_and_committed_by_the_plan_its_files_were_written_by(tmp_path):
    """The flow PySpark runs per micro-batch, in-process: a writer is built and pickled for the
    tasks (the one plan), the tasks write by the plan they received, and a second writer, built
    fresh to commit, commits by the plan the messages carry; it plans nothing itself (its own
    options name storage that does not exist), and a replayed batch commits nothing."""
    import pickle

    from deltaplane.spark_jobs.files import FilesWritten
    from deltaplane.spark_jobs.options import WriteOptions
    from deltaplane.spark_jobs.streaming import DeltaplaneStreamWriter
    from deltaplane.spark_jobs.types import spark_schema

    uri = str(tmp_path / "t")
    write_table(uri, rows(0, 3))
    schema = spark_schema(DeltaTable(uri).snapshot.schema)
    planner = DeltaplaneStreamWriter(WriteOptions.parse({"path": uri}), schema, False)
    shipped = pickle.dumps(planner)
    messages = []
    for start in (10, 20):  # two tasks, each with its own unpickled copy
        task = pickle.loads(shipped)
        out = task.write(iter([rows(start, 4).to_batches()[0]]))
        assert out.spec is not None and out.spec.read_version == 0
        messages.append(FilesWritten(out.adds, "query-1", out.spec))
    nowhere = WriteOptions.parse({"path": "nostore://nowhere/t"})  # open_store would refuse it
    committer = DeltaplaneStreamWriter(nowhere, schema, False)
    committer.commit([*messages, None], 0)
    assert ids(uri) == Counter([*range(3), *range(10, 14), *range(20, 24)])
    assert DeltaTable(uri).snapshot.app_transaction_version("query-1") == 0
    DeltaplaneStreamWriter(nowhere, schema, False).commit(messages, 0)  # replayed: nothing new
    assert DeltaTable(uri).version == 1


def test_the_sink_assigns_identity_and_generated_values_in_every_micro_batch(spark, tmp_path):
    """A target with an identity and a generated column: the stream's rows lack both. Each task
    takes identity values from its own block, so no two micro-batches or tasks repeat a value."""
    from deltaplane.engine.column_values import generated_column, identity_column

    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    write_table(src, rows(0, 9), partition_by=["part"])
    target = pa.schema(
        [
            identity_column("key", start=1, step=1),
            pa.field("id", pa.int64()),
            pa.field("part", pa.int64()),
            generated_column("twice", pa.int64(), "id * 2"),
        ]
    )
    DeltaTable.create(dst, target)
    run_available_now(spark, src, dst, tmp_path / "ck", maxFilesPerTrigger=1)
    write_table(src, rows(9, 6), mode="append")
    run_available_now(spark, src, dst, tmp_path / "ck", maxFilesPerTrigger=1)
    got = DeltaTable(dst).to_arrow().to_pylist()
    assert sorted(r["id"] for r in got) == list(range(15))
    assert all(r["twice"] == 2 * r["id"] for r in got)
    keys = [r["key"] for r in got]
    assert len(set(keys)) == 15 and min(keys) >= 1
    mark = DeltaTable(dst).snapshot.schema.find("key").metadata["delta.identity.highWaterMark"]
    assert int(mark) == max(keys)


class _ListingStore:
    """A store that records every listing of ``_delta_log`` (where it starts) and passes the
    calls on to the real one."""

    def __init__(self, store):
        self._store = store
        self.listings: list[str | None] = []

    def list(self, prefix, *, start_after=None, recursive=False):
        if prefix.startswith("_delta_log"):
            self.listings.append(start_after)
        return self._store.list(prefix, start_after=start_after, recursive=recursive)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_query_start_lists_the_log_from_its_checkpoint_and_loads_the_snapshot_once(tmp_path):
    """Starting an availableNow query (the cap, the initial offset, the first batch's offset and
    its tasks) used to list ``_delta_log`` four times, twice from version 0 (every commit file of
    a long log, page by page on an object store). Now: from the last checkpoint, twice at most
    (the cap, then the one snapshot every step reuses), and the offsets are the same."""
    from pyspark.sql.streaming.datasource import ReadMaxFiles

    from deltaplane.engine.storage import open_store
    from deltaplane.spark_jobs.options import StreamOptions
    from deltaplane.spark_jobs.streaming import DeltaplaneStreamReader
    from deltaplane.spark_jobs.types import spark_schema

    src = str(tmp_path / "src")
    write_table(src, rows(0, 3))
    for i in range(11):  # versions 1..11: a checkpoint at 10 (the default interval)
        write_table(src, rows(10 * (i + 1), 3), mode="append")
    assert (tmp_path / "src" / "_delta_log" / "00000000000000000010.checkpoint.parquet").exists()
    schema = spark_schema(DeltaTable(src).snapshot.schema)
    reader = DeltaplaneStreamReader(StreamOptions.parse({"path": src}), schema)
    store = reader._store = _ListingStore(open_store(src))
    reader.prepareForTriggerAvailableNow()
    first = reader.initialOffset()
    table_id = DeltaTable(src).metadata.id
    assert first == {"tableId": table_id, "version": 11, "index": 0, "initialSnapshot": True}
    end = reader.latestOffset(first, ReadMaxFiles(5))
    assert end == {**first, "index": 5}
    (task,) = reader.partitions(first, end)
    assert task.files.num_files == 5
    assert None not in store.listings, store.listings  # nothing listed from version 0
    assert len(store.listings) <= 2, store.listings
    # The rest of the snapshot, then nothing: the cap is version 11.
    end2 = reader.latestOffset(end, ReadMaxFiles(100))
    assert end2 == offset_after(first, 12)
    assert sum(p.files.num_files for p in reader.partitions(end, end2)) == 7
    reader.commit(end2)
    assert reader.latestOffset(end2, ReadMaxFiles(100)) == end2


def offset_after(start: dict, version: int) -> dict:
    return {**start, "version": version, "index": 0, "initialSnapshot": False}


def test_a_batch_already_in_the_declared_schema_is_handed_on_as_it_is():
    """Every batch a read task yields passes ``conform_batch``: one that already has the
    declared types and nullability is no longer rebuilt column by column; one that differs still
    is, to exactly the declared schema."""
    from deltaplane.spark_jobs.types import conform_batch

    target = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    batch = pa.record_batch([pa.array([1, 2], pa.int64()), pa.array(["a", None])], schema=target)
    assert conform_batch(batch, target) is batch
    other = pa.record_batch(
        [pa.array(["b"]), pa.array([3], pa.int32())],
        schema=pa.schema([pa.field("name", pa.large_string()), pa.field("id", pa.int32(), nullable=False)]),
    )
    shaped = conform_batch(other, target)
    assert shaped.schema.equals(target, check_metadata=True)
    assert shaped.to_pylist() == [{"id": 3, "name": "b"}]


def test_past_the_available_now_cap_nothing_is_listed_again(tmp_path):
    """Once an availableNow query has read every commit up to its cap, asking for the next
    offset (Spark does, after the last batch) answers from memory: no listing of ``_delta_log``
    per call. Commits after the cap stay unread."""
    from pyspark.sql.streaming.datasource import ReadMaxFiles

    from deltaplane.engine.storage import open_store
    from deltaplane.spark_jobs.options import StreamOptions
    from deltaplane.spark_jobs.streaming import DeltaplaneStreamReader
    from deltaplane.spark_jobs.types import spark_schema

    src = str(tmp_path / "src")
    write_table(src, rows(0, 3))
    for i in range(4):  # versions 1..4
        write_table(src, rows(10 * (i + 1), 3), mode="append")
    schema = spark_schema(DeltaTable(src).snapshot.schema)
    reader = DeltaplaneStreamReader(StreamOptions.parse({"path": src, "startingVersion": "1"}), schema)
    store = reader._store = _ListingStore(open_store(src))
    reader.prepareForTriggerAvailableNow()
    first = reader.initialOffset()
    assert first == offset_after(first, 1)
    write_table(src, rows(100, 3), mode="append")  # version 5: after the cap
    end = reader.latestOffset(first, ReadMaxFiles(100))
    assert end == offset_after(first, 5)
    assert sum(p.files.num_files for p in reader.partitions(first, end)) == 4
    reader.commit(end)
    listed = len(store.listings)
    for _ in range(3):
        assert reader.latestOffset(end, ReadMaxFiles(100)) == end
    assert len(store.listings) == listed, store.listings[listed:]


def test_a_micro_batch_task_carries_its_files_without_their_statistics(tmp_path):
    """A streaming task reads every row of its files (nothing is skipped), so the files' JSON
    statistics (min, max and null count of up to 32 columns each) no longer travel in the
    pickled partition from the planning process through the JVM to every task: on a wide table
    they were most of the payload. The rows read are the same."""
    import pickle

    from pyspark.sql.streaming.datasource import ReadMaxFiles

    from deltaplane.spark_jobs.options import StreamOptions
    from deltaplane.spark_jobs.streaming import DeltaplaneStreamReader
    from deltaplane.spark_jobs.types import spark_schema

    src = str(tmp_path / "src")

    def wide(start: int) -> pa.Table:
        return pa.table({f"c{i:02d}": pa.array(range(start, start + 5), pa.int64()) for i in range(40)})

    write_table(src, wide(0))
    for i in range(1, 10):
        write_table(src, wide(10 * i), mode="append")
    assert len(DeltaTable(src).snapshot.files["stats"][0].as_py()) > 800  # 32 columns: min, max, nulls
    reader = DeltaplaneStreamReader(
        StreamOptions.parse({"path": src}), spark_schema(DeltaTable(src).snapshot.schema), 2
    )
    first = reader.initialOffset()
    end = reader.latestOffset(first, ReadMaxFiles(10))
    tasks = reader.partitions(first, end)
    assert sum(t.files.num_files for t in tasks) == 10
    for task in tasks:
        payload = len(pickle.dumps(task))
        # The table's schema, then about 270 bytes per file (its statistics took 890 more here).
        assert payload - len(task.files.metadata_json) < 1500 + 300 * task.files.num_files
        assert task.files.files.column("stats").null_count == task.files.num_files
        assert len(pickle.dumps(task)) == payload  # files looked at are not shipped twice
    batches = [b for t in tasks for b in reader.read(pickle.loads(pickle.dumps(t)))]
    got = sorted(v for b in batches for v in b.column("c00").to_pylist())
    assert got == sorted(v for i in range(10) for v in range(10 * i, 10 * i + 5))
