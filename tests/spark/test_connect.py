"""The jobs and the ``deltaplane`` data source through a real Spark Connect server: the wheel's
``SparkConnectServer`` started by ``spark-submit`` on 127.0.0.1 by this module's fixture and stopped
by PID. Clients run in processes of their own (PySpark allows no Connect session in a process that
has a classic one): the jobs with ``--remote``, the rest through ``tests/spark/connect_client.py``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from deltaplane.devstack.ports import free_port
from deltaplane.devstack.processes import stop
from deltaplane.engine import DeltaTable, write_table
from deltaplane.spark_jobs.submit import spark_home
from tests.warm_python import fresh_json

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark-connect")]

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 180


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    work = tmp_path_factory.mktemp("spark-connect")
    port = free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_REMOTE", None)
    command = [str(spark_home() / "bin" / "spark-submit"), "--class"]
    command += ["org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]"]
    for key, value in {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.pyspark.python": sys.executable,
        "spark.sql.shuffle.partitions": "4",
    }.items():
        command += ["--conf", f"{key}={value}"]
    log = work / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            command, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop(server, timeout=30)


def client(scenario: str, url: str, folder: Path) -> dict:
    out = fresh_json(["-m", "tests.spark.connect_client", scenario, url, folder], cwd=ROOT, timeout=600)
    assert out["session"].startswith("pyspark.sql.connect")  # really a Connect session
    return out


def job(name: str, argv: list[str], url: str | None = None) -> dict:
    """What ``python -m deltaplane.spark_jobs.NAME ARGV`` prints, which must exit 0."""
    remote = ["--remote", url] if url else []
    return fresh_json(["-m", f"deltaplane.spark_jobs.{name}", *argv, *remote], cwd=ROOT, timeout=600)


def test_the_data_source_reads_and_writes_through_connect(connect_url, tmp_path):
    out = client("datasource", connect_url, tmp_path)
    assert out["count"] == 130 and out["v0"] == 100
    assert out["ids"] == [i for i in range(130) if i % 3 == 1]
    assert out["columns"] == ["id", "g"]
    table = DeltaTable(str(tmp_path / "ds"))
    assert table.version == 1 and table.snapshot.partition_columns == ["g"]  # the rerun committed nothing
    assert table.snapshot.app_transaction_version("app") == 1


def test_read_table_through_connect_reads_natively_with_expressions(connect_url, tmp_path):
    """A Connect client has no JVM of its own: ``read_table`` reads through Spark's Parquet
    reader with expressions (no deltaplane classes), deletion vectors and partition values from
    the log applied, pinned to its version."""
    out = client("native", connect_url, tmp_path)
    expected = [i for i in range(80) if not (i < 40 and i % 3 == 0)]
    assert out["expected"] == expected  # the engine's own reading, checked against the rows made
    assert out["ids"] == expected and out["count"] == len(expected)
    assert out["odd"] == [i for i in expected if i % 2 == 1]


def test_each_item_runs_in_a_task_of_its_own_through_connect(connect_url, tmp_path):
    out = client("tasks", connect_url, tmp_path)
    assert out["values"] == [i * 10 for i in range(7)]
    assert sorted(out["partitions"]) == list(range(7))


def test_a_stream_is_written_exactly_once_through_connect(connect_url, tmp_path):
    out = client("stream", connect_url, tmp_path)
    assert out["ids"] == list(range(30))  # each row once, across three runs of one checkpoint
    assert len(set(out["queries"])) == 1  # one query id, kept by the checkpoint
    history = DeltaTable(str(tmp_path / "dst")).history()
    assert [c["operation"] for c in history] == ["STREAMING UPDATE"] * 3  # one file per batch
    assert DeltaTable(str(tmp_path / "dst")).snapshot.app_transaction_version(out["queries"][0]) == 2


def test_compact_and_dml_jobs_through_connect(connect_url, tmp_path):
    uri = str(tmp_path / "t")
    rng = np.random.default_rng(7)
    for i in range(6):
        n = 500
        write_table(
            uri,
            pa.table(
                {
                    "id": np.arange(i * n, (i + 1) * n),
                    "a": rng.integers(0, 100, n),
                    "g": ["x", "y"] * (n // 2),
                }
            ),
            mode="append",
            partition_by=["g"] if i == 0 else None,
        )
    before = sorted(DeltaTable(uri).to_arrow()["id"].to_pylist())
    once = ["--app-id", "compact.t", "--app-version", "1"]
    out = job("compact", ["--table", uri, *once], connect_url)
    assert out["status"] == "ok", out
    assert out["version"] == 6 and out["num_files_removed"] == 12 and out["num_files_added"] == 2, out
    assert sorted(DeltaTable(uri).to_arrow()["id"].to_pylist()) == before
    again = job("compact", ["--table", uri, *once], connect_url)
    assert again["skipped"] and DeltaTable(uri).version == 6
    out = job("dml", ["--table", uri, "--delete", "a < 30", "--task-bytes", "4k"], connect_url)
    assert out["status"] == "ok" and out["tasks"] >= 2, out
    got = DeltaTable(uri).to_arrow()
    assert got.num_rows > 0 and min(got["a"].to_pylist()) >= 30
    out = job("dml", ["--table", uri, "--update", "a >= 90", "--set", "a=a-90"], connect_url)
    assert out["status"] == "ok", out
    assert max(DeltaTable(uri).to_arrow()["a"].to_pylist()) < 90


HOSTILE_NAMES = ["a b.csv", "p%41.csv", "x[1].csv", "ü.csv", "h#ash.csv", "empty.csv"]


def landing_files(folder: Path) -> Path:
    folder.mkdir()
    for i, name in enumerate(HOSTILE_NAMES):
        (folder / name).write_text("id,v\n" if name == "empty.csv" else f"id,v\n{i},{name}\n")
    (folder / "sub dir").mkdir()
    (folder / "sub dir" / "in.csv").write_text("id,v\n99,sub\n")
    return folder


def test_ingest_keys_the_same_files_the_same_way_through_connect(connect_url, tmp_path):
    """Hostile file names (space, %, [], #, non-ASCII, an empty file, a folder with a space): a
    Connect ingest records the same work key as a classic one (run here with --master local[1]),
    and a rerun loads nothing."""
    landing = landing_files(tmp_path / "landing")
    sources = ["--source", str(landing / "*.csv"), "--source", str(landing / "sub dir")]
    keys = {}
    for name, mode in (("connect", ["--remote", connect_url]), ("classic", ["--master", "local[1]"])):
        uri = str(tmp_path / name)
        argv = ["--table", uri, *sources]
        out = job("ingest", [*argv, *mode])
        assert out["status"] == "ok" and out["rows"] == 6, out
        again = job("ingest", [*argv, *mode])
        assert again["skipped"] and again["version"] == 0, again
        assert Counter(DeltaTable(uri).to_arrow()["id"].to_pylist()) == Counter([0, 1, 2, 3, 4, 99])
        keys[name] = sorted(DeltaTable(uri).snapshot.txns)
    assert keys["connect"] == keys["classic"] and len(keys["connect"]) == 1
