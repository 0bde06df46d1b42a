"""``deltaplane.spark_jobs.submit`` with the real ``spark-submit``: a time limit stops the whole process tree
(the JVM, the Python driver, PySpark's daemon and workers), storage options travel in the
environment, never on the command line."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.spark_jobs import job
from deltaplane.spark_jobs.submit import spark_submit_command, submit
from tests.proctree import CmdlineSampler, SubmitWatcher, alive, survivors

pytestmark = pytest.mark.xdist_group("spark")


def small_files(uri: str, files: int = 3) -> None:
    for i in range(files):
        write_table(uri, pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}), mode="append")


def test_a_timed_out_submit_leaves_no_process_of_it_behind(tmp_path):
    """The driver hangs (stopped with SIGSTOP, as a driver stuck on a dead connection would be):
    the time limit must stop the spark-submit JVM and every process under it, not only the
    direct child."""
    uri = str(tmp_path / "t")
    small_files(uri)
    watcher = SubmitWatcher("compact")
    frozen = []

    def freeze_driver():
        driver = watcher.wait_for(watcher.driver, timeout=120)
        os.kill(driver.pid, signal.SIGSTOP)
        frozen.append(driver)
        watcher.start_recording()

    thread = threading.Thread(target=freeze_driver, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            submit("compact", ["--table", uri], master="local[2]", timeout=25)
        took = time.monotonic() - started
        thread.join(5)
        watcher.stop_recording()
        assert frozen, "the driver was never seen"
        assert len(watcher.seen) >= 2
        left = survivors(watcher.seen.values(), within=5)
        assert not left, [f"{p.pid} {p.state} {p.text[:120]}" for p in left]
        assert took < 25 + 15  # the limit, then SIGTERM, a grace period and SIGKILL
    finally:
        watcher.stop_recording()
        for proc in watcher.seen.values():  # never leave a stopped process behind
            if alive(proc):
                os.kill(proc.pid, signal.SIGKILL)
    assert DeltaTable(uri).version == 2  # nothing committed


def test_storage_options_reach_the_job_through_the_environment_not_argv(tmp_path, capsys):
    """``submit(storage_options=...)`` hands them to the job in ``$DELTAPLANE_STORAGE_OPTIONS``:
    no ``--storage-option`` on the command line; ``--storage-option`` flags still win."""
    marker = f"not-on-argv-{os.getpid()}-{time.time_ns()}"
    uri = str(tmp_path / "t")
    small_files(uri)
    command = spark_submit_command("compact", ["--table", uri], master="local[2]")
    assert marker not in " ".join(command)
    with CmdlineSampler(marker) as sampler:
        result = submit(
            "compact",
            ["--table", uri],
            master="local[2]",
            timeout=300,
            storage_options={"aws_secret_access_key": marker, "endpoint_url": "http://127.0.0.1:1"},
        )
    assert result.ok, result.stderr[-3000:]
    assert sampler.samples > 10 and any("compact.py" in c for c in sampler.commands_seen)
    assert sampler.hits == []
    assert marker not in result.stdout and marker not in result.stderr
    assert DeltaTable(uri).version == 3


def test_job_storage_options_from_environment_and_flags(monkeypatch):
    import json

    p = job.parser("x", "")
    monkeypatch.setenv(job.STORAGE_OPTIONS_ENV, json.dumps({"a": "1", "b": "2"}))
    args = p.parse_args(["--table", "t", "--storage-option", "b=3"])
    assert job.storage_options(args) == {"a": "1", "b": "3"}
    monkeypatch.setenv(job.STORAGE_OPTIONS_ENV, "[1]")
    with pytest.raises(job.JobError) as e:
        job.storage_options(args)
    assert e.value.code == job.EXIT_USAGE


def test_redacted_command_lines():
    from deltaplane.spark_jobs.submit import redact_command

    command = [
        "spark-submit",
        "--conf",
        "spark.hadoop.fs.s3a.secret.key=V4LUE1",
        "--conf",
        "spark.executor.memory=4g",
        "x.py",
        "--storage-option",
        "aws_secret_access_key=V4LUE1",
        "--storage-option",
        "endpoint_url=http://h",
        "--storage-option=aws_session_token=V4LUE2",
    ]
    out = redact_command(command)
    assert "V4LUE" not in " ".join(out)
    assert "spark.executor.memory=4g" in out and "endpoint_url=http://h" in out
    assert "aws_secret_access_key=***" in out


def test_spark_conf_travels_in_a_private_properties_file_never_on_a_command_line(tmp_path):
    """Every ``conf`` setting (a secret-looking one with a unique marker value among them) reaches
    Spark through a ``--properties-file`` readable only by this user: no process of the submit's
    tree ever has the value on its command line (``/proc/<pid>/cmdline``, sampled while the job
    runs); the file is mode 0600 in a private folder while the job runs and gone afterwards; Spark
    really got the settings (its event log, which the conf turns on, holds the probe value with
    its awkward characters intact)."""
    marker = f"conf-secret-{os.getpid()}-{time.time_ns()}"
    probe = "a=b:c\\d #e !f é\tg"
    events = tmp_path / "events"
    events.mkdir()
    uri = str(tmp_path / "t")
    small_files(uri)
    watcher = SubmitWatcher("compact")
    seen: dict = {}

    def look():
        try:
            top = watcher.wait_for(
                lambda tree: next((p for p in tree.values() if "--properties-file" in p.cmdline), None)
            )
            path = Path(top.cmdline[top.cmdline.index("--properties-file") + 1])
            seen["path"] = path
            seen["mode"] = stat.S_IMODE(path.stat().st_mode)
            seen["folder_mode"] = stat.S_IMODE(path.parent.stat().st_mode)
            watcher.start_recording()
        except BaseException as e:
            seen["error"] = repr(e)

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    conf = {
        "spark.hadoop.fs.s3a.secret.key": marker,
        "spark.deltaplane.probe": probe,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.compress": "false",
        "spark.eventLog.dir": events.as_uri(),
    }
    try:
        with CmdlineSampler(marker) as sampler:
            result = submit("compact", ["--table", uri], master="local[2]", timeout=300, conf=conf)
    finally:
        thread.join(5)
        watcher.stop_recording()
    assert result.ok, result.stderr[-3000:]
    assert "error" not in seen, seen
    assert sampler.samples > 10 and any("compact.py" in c for c in sampler.commands_seen)
    assert sampler.hits == [], sampler.hits[:3]
    assert len(watcher.seen) >= 2  # the JVM and the Python driver at least were watched
    assert not [p for p in watcher.seen.values() if marker in p.text]
    assert seen["mode"] == 0o600 and seen["folder_mode"] == 0o700, seen
    assert not seen["path"].exists() and not seen["path"].parent.exists()
    assert marker not in result.stdout and marker not in result.stderr
    # Spark applied the settings: the event log exists and records the probe value exactly.
    logs = [f for f in events.rglob("*") if f.is_file()]
    assert logs, "spark.eventLog.enabled did not reach Spark"
    environment = [
        json.loads(line)
        for f in logs
        for line in f.read_text().splitlines()
        if '"SparkListenerEnvironmentUpdate"' in line
    ]
    assert environment and dict(environment[0]["Spark Properties"])["spark.deltaplane.probe"] == probe
    assert DeltaTable(uri).version == 3
