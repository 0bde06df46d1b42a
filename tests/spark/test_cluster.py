"""A real standalone Spark cluster on 127.0.0.1 (master + worker from the wheel's spark-class, started
and stopped by this fixture by PID) runs `compact` and `dml` through `spark-submit` against a table
on the SeaweedFS S3 server; delta-rs reads the result."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pytest

from deltaplane.devstack.ports import free_port
from deltaplane.devstack.processes import stop
from deltaplane.devstack.spark_standalone import alive_workers, master_command, worker_command
from deltaplane.engine import DeltaTable, write_table
from deltaplane.spark_jobs.submit import spark_home, submit

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


def _start(command: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _stop(process: subprocess.Popen) -> None:
    stop(process, timeout=20)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """Master and one worker bound to 127.0.0.1 (their web UIs too, through SPARK_LOCAL_IP)."""
    work = tmp_path_factory.mktemp("spark-cluster")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work),
        "SPARK_WORKER_DIR": str(work / "worker"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    spark_class = str(spark_home() / "bin" / "spark-class")
    master = _start(master_command(spark_class, port, ui), work / "master.log", env)
    url = f"spark://127.0.0.1:{port}"
    worker = _start(worker_command(spark_class, port, worker_ui, work / "worker"), work / "worker.log", env)
    try:
        deadline = time.time() + 90
        while True:
            with contextlib.suppress(OSError):
                if alive_workers(ui, timeout=2) >= 1:
                    break
            if time.time() > deadline or master.poll() is not None or worker.poll() is not None:
                logs = "\n".join(p.read_text()[-2000:] for p in work.glob("*.log"))
                pytest.fail(f"the Spark cluster did not come up:\n{logs}")
            time.sleep(0.5)
        yield url, env
    finally:
        _stop(worker)
        _stop(master)


def table_data(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {"id": np.arange(seed * n, (seed + 1) * n), "a": rng.integers(0, 100, n), "g": ["x", "y"] * (n // 2)}
    )


def test_compact_and_dml_on_a_standalone_cluster_against_s3(spark_cluster, s3_server):
    master, env = spark_cluster
    uri = s3_server.uri()
    options = s3_server.options()
    for seed in range(8):
        write_table(
            uri,
            table_data(500, seed),
            mode="append",
            partition_by=["g"],
            storage_options=options,
            properties={"delta.enableDeletionVectors": "true"} if seed == 0 else None,
        )
    expected = DeltaTable(uri, storage_options=options).to_arrow()
    storage = [x for k, v in options.items() for x in ("--storage-option", f"{k}={v}")]
    metadata = ["--commit-metadata", json.dumps({"run": "cluster-test"})]

    result = submit("compact", ["--table", uri, *storage, *metadata], master=master, env=env, timeout=600)
    assert result.ok, result.stderr[-4000:]
    assert result.metrics["status"] == "ok" and result.metrics["num_files_removed"] == 16
    assert result.metrics["num_files_added"] == 2

    result = submit(
        "dml",
        ["--table", uri, "--delete", "a < 10", *storage, *metadata],
        master=master,
        env=env,
        timeout=600,
    )
    assert result.ok, result.stderr[-4000:]
    assert result.metrics["operationMetrics"]["numDeletionVectorsAdded"] == "2"

    rs = deltalake.DeltaTable(uri, storage_options=s3_server.delta_rs_options())
    got = pa.RecordBatchReader.from_stream(
        deltalake.QueryBuilder().register("t", rs).execute("select id, a, g from t")
    ).read_all()
    want = expected.filter(pa.compute.greater_equal(expected["a"], 10))
    assert sorted(got["id"].to_pylist()) == sorted(want["id"].to_pylist())
    history = rs.history(2)
    assert [h["operation"] for h in history] == ["DELETE", "OPTIMIZE"]
    assert all(h.get("run") == "cluster-test" for h in history)
