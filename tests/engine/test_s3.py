"""Tables on a real S3 server (SeaweedFS on loopback), with injected faults.

Faults are injected with botocore's ``before-send`` event, which sees each HTTP request before it
goes out and may answer it instead: a 409, a 500, or the real write followed by a dropped
connection (the classic lost response).
"""

from __future__ import annotations

import uuid

import botocore.awsrequest
import botocore.exceptions
import deltalake
import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import CommitOutcomeUnknownError, StorageError, TableNotFoundError
from deltaplane.engine.storage import open_store
from deltaplane.engine.storage.s3 import _PROBED
from tests.engine.test_concurrency import assert_exactly_once, run_concurrent_appends
from tests.helpers import assert_same_rows

pytestmark = pytest.mark.xdist_group("s3")

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def data(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "region": [("eu", "us")[i % 2] for i in range(n)],
        }
    )


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **kwargs):
        yield self._body


def fake_response(request, status: int, code: str) -> botocore.awsrequest.AWSResponse:
    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    return botocore.awsrequest.AWSResponse(request.url, status, {}, _Raw(body))


def is_commit_put(request) -> bool:
    return request.method == "PUT" and "_delta_log/" in request.url and request.url.endswith(".json")


def _answering(matches, status: int, code: str, times: int | None = None):
    """A before-send hook: requests that ``matches`` answer ``status`` with the S3 error ``code``
    (``times`` times, or forever) and never reach the store. Returns the hook and the list of the
    statuses it answered."""
    answered: list = []

    def hook(request, **kwargs):
        if matches(request) and (times is None or len(answered) < times):
            answered.append(status)
            return fake_response(request, status, code)
        return None

    return hook, answered


def _failing_reads(of: str, times: int | None):
    """A before-send hook: GETs of keys containing ``of`` answer 503 (``times`` times, or forever)."""
    return _answering(lambda request: request.method == "GET" and of in request.url, 503, "SlowDown", times)


def _land_commit(s3_server, fired: list, then):
    """A before-send hook: the first commit PUT lands (through a side client), then ``then(request)``
    stands in for the store's answer, so the writer never learns it succeeded."""
    side = s3_server.client()

    def hook(request, **kwargs):
        if is_commit_put(request) and not fired:
            fired.append(request.url)
            bucket, key = request.url.split(f"{s3_server.endpoint}/", 1)[1].split("/", 1)
            side.put_object(Bucket=bucket, Key=key, Body=request.body, IfNoneMatch="*")
            return then(request)
        return None

    return hook


def _drop_connection(request):
    raise botocore.exceptions.ConnectionClosedError(endpoint_url=request.url)


def _land_then_drop(s3_server, fired: list):
    """The commit PUT lands, then the connection drops: the classic lost response."""
    return _land_commit(s3_server, fired, _drop_connection)


def _lose_the_response_of_commit_1(s3_server, table: DeltaTable, read_failures: int | None):
    """Commit 1 lands and its response is lost; reading it back then fails ``read_failures``
    times (or forever). Returns the commit PUTs that landed and the reads that failed."""
    fired: list = []
    events = table._store.client.meta.events
    events.register("before-send.s3.PutObject", _land_then_drop(s3_server, fired))
    reads, failed = _failing_reads("00000000000000000001.json", times=read_failures)
    events.register("before-send.s3.GetObject", reads)
    return fired, failed


def _one_attempt_table(s3_server) -> tuple[str, DeltaTable]:
    """A new table's URI and the table, its client trying each request once: the store, not
    botocore, decides what is retried."""
    uri = s3_server.uri()
    return uri, DeltaTable.create(uri, SCHEMA, storage_options={**s3_server.options(), "max_attempts": "1"})


def test_table_lifecycle_on_s3_and_delta_rs_reads_it(s3_server):
    uri = s3_server.uri()
    table = DeltaTable.create(uri, SCHEMA, partition_by=["region"], storage_options=s3_server.options())
    for i in range(11):
        table.append(data(i * 10, 10))
    assert DeltaTable(uri, storage_options=s3_server.options()).snapshot.segment.checkpoint.version == 10
    new_eu = data(500, 4).filter(pa.compute.equal(data(500, 4)["region"], "eu"))
    table.overwrite(new_eu, predicate="region = 'eu'")
    ours = DeltaTable(uri, storage_options=s3_server.options())
    assert ours.to_arrow(filter="region = 'eu'").num_rows == 2
    theirs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options()).to_pyarrow_table()
    assert_same_rows(ours.to_arrow(), theirs.select(SCHEMA.names).cast(SCHEMA))
    assert ours.file_uris()[0].startswith(uri)
    assert DeltaTable(uri, version=3, storage_options=s3_server.options()).to_arrow().num_rows == 30


def test_row_level_changes_on_s3_with_deletion_vectors(s3_server):
    uri = s3_server.uri()
    props = {"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
    table = DeltaTable.create(uri, SCHEMA, properties=props, storage_options=s3_server.options())
    table.append(data(0, 2000))
    assert table.delete("id % 100 = 0").operation_metrics["numDeletionVectorsAdded"] == "1"
    table.update({"region": "'ap'"}, "id < 10")
    (
        table.merge(data(1990, 20), "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )
    ours = DeltaTable(uri, storage_options=s3_server.options())
    ids = ours.to_arrow().column("id").to_pylist()
    expected = [i for i in range(1990) if i % 100] + list(range(2000, 2010))
    assert sorted(ids) == expected
    assert ours.to_arrow(filter="region = 'ap'").num_rows == 9  # id 0 was deleted first
    dv_files = [k for k in open_store(uri, s3_server.options()).list("") if "deletion_vector_" in k.key]
    assert dv_files  # the DVs live in S3 objects next to the data
    rs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options())
    query = deltalake.QueryBuilder().register("t", rs)
    theirs = pa.RecordBatchReader.from_stream(query.execute("SELECT * FROM t")).read_all()
    assert_same_rows(ours.to_arrow(), theirs.select(SCHEMA.names).cast(SCHEMA))
    feed = ours.changes(2, 2)
    assert sorted(feed.column("id").to_pylist()) == list(range(0, 2000, 100))


def test_optimize_and_zorder_on_s3(s3_server):
    uri = s3_server.uri()
    table = DeltaTable.create(uri, SCHEMA, partition_by=["region"], storage_options=s3_server.options())
    for i in range(5):
        table.append(data(i * 10, 10))
    before = table.to_arrow()
    m = table.optimize()
    assert m.num_files_removed == 10 and m.num_files_added == 2
    m = table.optimize(zorder_by=["id"])
    assert m.num_files_added == 2
    ours = DeltaTable(uri, storage_options=s3_server.options())
    assert_same_rows(ours.to_arrow(), before)
    theirs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options()).to_pyarrow_table()
    assert_same_rows(ours.to_arrow(), theirs.select(SCHEMA.names).cast(SCHEMA))


def test_a_lost_response_after_a_successful_commit_is_a_success(s3_server):
    """The PUT lands but the response never arrives; the retry sees 412 and recognises itself."""
    uri, table = _one_attempt_table(s3_server)
    fired: list = []
    table._store.client.meta.events.register("before-send.s3.PutObject", _land_then_drop(s3_server, fired))
    result = table.append(data(0, 5))
    assert fired and result.version == 1 and result.attempts == 1
    fresh = DeltaTable(uri, storage_options=s3_server.options())
    assert fresh.version == 1 and fresh.to_arrow().num_rows == 5  # committed exactly once


def test_409_conflicts_are_retried_on_the_same_version(s3_server):
    uri = s3_server.uri()
    table = DeltaTable.create(uri, SCHEMA, storage_options=s3_server.options())
    conflict_twice, answered = _answering(is_commit_put, 409, "ConditionalRequestConflict", times=2)
    table._store.client.meta.events.register("before-send.s3.PutObject", conflict_twice)
    result = table.append(data(0, 3))
    assert answered == [409, 409] and result.version == 1


def test_500_after_the_write_landed_is_resolved_by_reading(s3_server):
    uri, table = _one_attempt_table(s3_server)
    fired: list = []
    land_then_fail = _land_commit(
        s3_server, fired, lambda request: fake_response(request, 500, "InternalError")
    )
    table._store.client.meta.events.register("before-send.s3.PutObject", land_then_fail)
    assert table.append(data(0, 3)).version == 1 and fired
    assert DeltaTable(uri, storage_options=s3_server.options()).to_arrow().num_rows == 3


def test_500_before_the_write_is_retried(s3_server):
    _, table = _one_attempt_table(s3_server)
    fail_first, failures = _answering(is_commit_put, 503, "SlowDown", times=2)
    table._store.client.meta.events.register("before-send.s3.PutObject", fail_first)
    assert table.append(data(0, 3)).version == 1 and failures == [503, 503]


def test_an_outcome_that_cannot_be_settled_is_reported_not_guessed(s3_server):
    uri, table = _one_attempt_table(s3_server)
    always_fail, _ = _answering(is_commit_put, 500, "InternalError")
    table._store.client.meta.events.register("before-send.s3.PutObject", always_fail)
    with pytest.raises(CommitOutcomeUnknownError):
        table.append(data(0, 3))
    assert DeltaTable(uri, storage_options=s3_server.options()).version == 0


def test_a_store_that_ignores_conditional_put_is_refused(s3_server):
    uri = s3_server.uri()
    options = {**s3_server.options(), "endpoint_url": s3_server.endpoint + "/"}  # a distinct probe cache key
    store = open_store(uri, options)

    def drop_condition(request, **kwargs):
        request.headers.pop("If-None-Match", None)

    store.client.meta.events.register("before-send.s3.PutObject", drop_condition)
    _PROBED.pop((store.endpoint, store.bucket), None)
    with pytest.raises(StorageError, match="ignores conditional PUT"):
        store.put("_delta_log/00000000000000000000.json", b"{}", mode="create")
    single = open_store(uri, {**options, "allow_unsafe_single_writer": "true"})
    single.put("_delta_log/00000000000000000000.json", b"{}", mode="create")  # the caller vouches
    _PROBED.pop((store.endpoint, store.bucket), None)


@pytest.mark.slow
def test_eight_writers_on_s3(s3_server):
    uri = s3_server.uri()
    DeltaTable.create(
        uri, pa.schema([("id", pa.int64()), ("worker", pa.int64())]), storage_options=s3_server.options()
    )
    versions = run_concurrent_appends(uri, workers=8, appends=25, storage_options=s3_server.options())
    assert_exactly_once(uri, 8, 25, versions, storage_options=s3_server.options())


def test_a_lost_response_whose_read_back_fails_for_a_while_is_still_one_commit(s3_server):
    uri, table = _one_attempt_table(s3_server)
    fired, failed = _lose_the_response_of_commit_1(s3_server, table, read_failures=3)
    result = table.append(data(0, 5))
    assert fired and len(failed) == 3 and result.version == 1
    fresh = DeltaTable(uri, storage_options=s3_server.options())
    assert fresh.version == 1 and fresh.to_arrow().num_rows == 5


def test_a_lost_response_whose_read_back_keeps_failing_is_an_unknown_outcome_never_a_failure(s3_server):
    """Before the fix this was a plain StorageError: a caller retrying wrote the batch twice."""
    uri, table = _one_attempt_table(s3_server)
    fired, failed = _lose_the_response_of_commit_1(s3_server, table, read_failures=None)
    with pytest.raises(CommitOutcomeUnknownError, match="may have succeeded"):
        table.append(data(0, 5), app_id="job", app_version=1)
    assert fired and len(failed) >= 2
    # The commit did land once; a retry of the same idempotent write commits nothing more.
    again = DeltaTable(uri, storage_options=s3_server.options())
    assert again.version == 1
    assert again.append(data(0, 5), app_id="job", app_version=1).skipped
    assert DeltaTable(uri, storage_options=s3_server.options()).to_arrow().num_rows == 5


def test_an_unreachable_endpoint_is_a_storage_error_that_says_so(s3_server):
    options = {**s3_server.options(), "endpoint_url": "http://127.0.0.1:9", "max_attempts": "1"}
    for call in (
        lambda: DeltaTable(s3_server.uri(), storage_options=options),
        lambda: DeltaTable.create(s3_server.uri(), SCHEMA, storage_options=options),
    ):
        with pytest.raises(StorageError, match=r"cannot reach the S3 endpoint http://127.0.0.1:9") as caught:
            call()
        assert not isinstance(caught.value, CommitOutcomeUnknownError)


def test_a_missing_bucket_is_table_not_found(s3_server):
    uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/t"
    with pytest.raises(TableNotFoundError, match=r"bucket .* does not exist") as caught:
        DeltaTable(uri, storage_options=s3_server.options())
    assert uri.split("/")[2] in str(caught.value)
    with pytest.raises(StorageError, match="does not exist"):
        DeltaTable.create(uri, SCHEMA, storage_options=s3_server.options())


def test_missing_credentials_are_a_storage_error_that_says_so(s3_server, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = {"endpoint_url": s3_server.endpoint, "aws_region": "us-east-1", "max_attempts": "1"}
    with pytest.raises(StorageError, match="no AWS credentials found"):
        DeltaTable(s3_server.uri(), storage_options=options)


def test_access_denied_is_a_storage_error_that_says_so(s3_server):
    uri = s3_server.uri()
    DeltaTable.create(uri, SCHEMA, storage_options=s3_server.options())
    table = DeltaTable(uri, storage_options=s3_server.options())

    def deny(request, **kwargs):
        return fake_response(request, 403, "AccessDenied")

    table._store.client.meta.events.register("before-send.s3", deny)
    with pytest.raises(StorageError, match="access denied") as caught:
        table.refresh()
    assert uri in str(caught.value)
