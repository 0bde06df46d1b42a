"""The platform on several hosts of this machine (devstack/cluster.py, issue 29): network, mount
and UTS namespaces joined by a bridge, each host with its own /tmp, SeaweedFS's master, filer and
S3 gateway on one host and its volume servers on two more, a Spark master and two workers on
three, and a client host the drivers run on. Only S3 is shared, as in production; a test here
fails where a path, a bind address or a local file would only work with every process on one
host."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from deltaplane.devstack.cluster import SPARK_MASTER, Cluster, environment
from deltaplane.devstack.hosts import available

pytestmark = [pytest.mark.slow, pytest.mark.external, pytest.mark.xdist_group("cluster")]

WRITE = """
import json, sys
import numpy as np, pyarrow as pa
from deltaplane.engine import DeltaTable, write_table
uri, batches, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for seed in range(batches):
    ids = np.arange(seed * rows, (seed + 1) * rows, dtype=np.int64)
    batch = pa.table({"id": ids, "a": ids % 100, "g": np.where(ids % 2 == 0, "x", "y")})
    write_table(uri, batch, mode="append", partition_by=["g"])
print(json.dumps({"files": len(DeltaTable(uri).file_uris())}))
"""

# Rows, distinct ids and their bounds: ids 0..n-1 exactly once each when rows == distinct == n,
# min == 0 and max == n - 1.
READ = """
import json, sys
import pyarrow.compute as pc
from deltaplane.engine import DeltaTable
table = DeltaTable(sys.argv[1])
ids = table.to_arrow(columns=["id"]).column("id")
bounds = pc.min_max(ids).as_py()
print(json.dumps({"version": table.version, "files": len(table.file_uris()), "rows": len(ids),
                  "distinct": pc.count_distinct(ids).as_py(), "min": bounds["min"], "max": bounds["max"]}))
"""

VACUUM = """
import json, sys
from deltaplane.engine import DeltaTable
deleted = DeltaTable(sys.argv[1]).vacuum(retention_hours=0, dry_run=False, enforce_retention=False)
print(json.dumps({"deleted": len(deleted)}))
"""

FETCH = """
import sys, time, urllib.request
for _ in range(50):  # the server may still be starting
    try:
        print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())
        break
    except OSError:
        time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def cluster():
    """The whole cluster, once for the module (about 20 s to start). Hosts that this kernel
    refuses to make are a failure, not a skip."""
    reason = available()
    if reason is not None:
        pytest.fail(f"the multi-host suite cannot run here: {reason}")
    root = Path(tempfile.mkdtemp(prefix="deltaplane-cluster-", dir="/var/tmp"))  # not under /tmp
    with Cluster(root, max_minutes=30) as running:
        yield running
    shutil.rmtree(root, ignore_errors=True)


def _json(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


def _exactly_once(read: dict, n: int) -> bool:
    """Ids 0..n-1, each once (READ's summary)."""
    return (read["rows"], read["distinct"], read["min"], read["max"]) == (n, n, 0, n - 1)


def test_each_host_has_its_own_name_tmp_and_srv(cluster):
    """A file written to /tmp or /srv on one host is not on another, nor on this machine; each
    host answers to its own name, and names the others through the shared hosts file."""
    one, two = cluster.host("spark-worker-1"), cluster.host("spark-worker-2")
    one.run(["sh", "-c", "echo one > /tmp/marker && echo one > /srv/marker"])
    assert two.run(["sh", "-c", "ls /tmp/marker /srv/marker 2>&1 || true"]).stdout.count("No such file") == 2
    assert not Path("/tmp/marker").exists()
    assert (one.directory / "marker").read_text() == "one\n"
    assert one.run(["hostname"]).stdout.strip() == "spark-worker-1"
    resolved = cluster.python("client", "import socket; print(socket.gethostbyname('spark-master'))")
    assert resolved.stdout.strip() == cluster.host("spark-master").address


def test_a_service_on_a_host_is_reached_from_another_host_and_not_from_this_machine(cluster):
    """The hosts meet only on their switch: this machine's namespace has no interface on their
    network, so a request to a host's address from here never reaches the host (this sandbox
    hands unknown addresses to a proxy of its own, so the check is the content served, not a
    refused connection)."""
    import secrets
    import urllib.request

    token = secrets.token_hex(8)
    server = cluster.host("spark-worker-2")
    (server.directory / "www").mkdir(exist_ok=True)
    (server.directory / "www" / "token").write_text(token)
    log = cluster.logs / "token-server.log"
    process = server.popen([sys.executable, "-m", "http.server", "8765", "--bind", server.address,
                            "--directory", "/srv/www"], log)  # fmt: skip
    try:
        got = cluster.python("client", FETCH, "http://spark-worker-2:8765/token").stdout.strip()
        assert got == token
        try:
            here = urllib.request.urlopen(f"http://{server.address}:8765/token", timeout=3).read().decode()
        except OSError:
            here = None
        assert here != token
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_every_service_listens_on_its_host_address(cluster):
    """No listener on a wildcard address anywhere; the only loopback listeners are SeaweedFS's
    own on its host (it adds them beside ``-ip.bind``), which no other host can reach."""
    for name, host in cluster.network.hosts.items():
        listening = host.run(["ss", "-ltnH"]).stdout.split("\n")
        addresses = {
            line.split()[3].rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
            for line in listening
            if line
        }
        assert not addresses & {"0.0.0.0", "*", "::"}, (name, addresses)
        allowed = {host.address, "127.0.0.1"} if name == "seaweedfs" else {host.address}
        assert addresses <= allowed, (name, addresses)
    assert cluster.host("client").run(["ss", "-ltnH"]).stdout.strip() == ""


def test_a_compaction_runs_on_both_worker_hosts_against_s3(cluster):
    """The client writes a partitioned table (16 small files) to S3, then submits OPTIMIZE to the
    master in client mode: its executors run on both worker hosts (each keeps the application's
    folder under its own /srv), the table ends with one file per partition and the same rows,
    and the objects landed on both volume hosts."""
    uri = "s3://lake/compact-across-hosts"
    written = _json(cluster.python("client", WRITE, uri, "8", "2000"))
    assert written["files"] == 16
    client = cluster.host("client")
    submitted = client.run(
        [
            sys.executable,
            "-m",
            "deltaplane.spark_jobs.submit",
            "compact",
            "--master",
            SPARK_MASTER,
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            "spark.executor.cores=1",
            "--timeout",
            "600",
            "--",
            "--table",
            uri,
        ],
        env=environment(client),
        timeout=660,
        check=False,
    )
    assert submitted.returncode == 0, submitted.stderr[-4000:]
    metrics = _json(submitted)
    assert metrics["status"] == "ok", metrics
    assert (metrics["num_files_removed"], metrics["num_files_added"]) == (16, 2)
    for worker in ("spark-worker-1", "spark-worker-2"):
        apps = list((cluster.host(worker).directory / "work").glob("app-*"))
        assert apps, f"no executor ran on {worker}"
    read = _json(cluster.python("client", READ, uri))
    assert read["files"] == 2 and _exactly_once(read, 16_000)
    for volume in ("volume-1", "volume-2"):
        stored = sum(f.stat().st_size for f in (cluster.host(volume).directory / "volume").glob("*.dat"))
        assert stored > 0, f"nothing stored on {volume}"


def _submit_compact(cluster, uri: str, log: Path, *conf: str) -> subprocess.Popen:
    client = cluster.host("client")
    settings = ["spark.executor.memory=512m", "spark.executor.cores=1", *conf]
    command = [sys.executable, "-m", "deltaplane.spark_jobs.submit", "compact", "--master", SPARK_MASTER]
    command += [x for setting in settings for x in ("--conf", setting)]
    command += ["--timeout", "600", "--", "--table", uri]
    with open(log, "ab") as out:  # Spark's INFO lines: a file, not a pipe to fill
        return subprocess.Popen(
            client.argv(command),
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            env=environment(client),
            start_new_session=True,
        )


def _tasks_running(worker: Path) -> int:
    """Tasks an executor on this worker started and has not finished, from its log."""
    started = finished = 0
    for log in worker.glob("work/app-*/*/stderr"):
        text = log.read_text(errors="replace")
        started += text.count("Running task")
        finished += text.count("Finished task")
    return started - finished


def _compact_through(cluster, name: str, worker: str, fault, heal=None) -> str:
    """A 6M-row table of 16 files compacted by a job that ``fault()`` strikes once a task runs
    on ``worker`` (``heal()`` after the job); checks the job ends well, every row is there
    exactly once, and a VACUUM with no retention then removes the replaced files and whatever
    the struck task left, never a file the table needs. The driver's log, for more checks."""
    uri = f"s3://lake/{name}"
    assert _json(cluster.python("client", WRITE, uri, "8", "750000", timeout=300))["files"] == 16
    directory = cluster.host(worker).directory
    before = {p.parent for p in directory.glob("work/app-*/*/stderr")}
    timeouts = (
        "spark.network.timeout=20s",
        "spark.network.timeoutInterval=5s",
        "spark.executor.heartbeatInterval=2s",
    )
    log = cluster.logs / f"{name}-driver.log"
    job = _submit_compact(cluster, uri, log, *timeouts)
    struck = False
    try:
        deadline = time.time() + 240
        while time.time() < deadline and job.poll() is None:
            if {p.parent for p in directory.glob("work/app-*/*/stderr")} - before and _tasks_running(
                directory
            ) > 0:
                fault()
                struck = True
                break
            time.sleep(0.1)
        assert struck, f"no task ran on {worker} before the job ended"
        stdout, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
        if heal is not None:
            heal()
    driver = log.read_text(errors="replace")
    assert job.returncode == 0, driver[-4000:]
    metrics = json.loads(stdout.strip().splitlines()[-1])
    assert metrics["status"] == "ok" and metrics["num_files_removed"] == 16
    assert _exactly_once(_json(cluster.python("client", READ, uri)), 6_000_000)
    assert _json(cluster.python("client", VACUUM, uri))["deleted"] >= 16
    assert _exactly_once(_json(cluster.python("client", READ, uri)), 6_000_000)
    return driver


def test_a_worker_host_cut_off_in_the_middle_of_a_compaction_loses_and_duplicates_nothing(cluster):
    """spark-worker-2's link goes down while it runs a compaction task: the driver declares its
    executor lost after the network timeout, runs the task again on spark-worker-1, and commits
    once."""
    driver = _compact_through(
        cluster,
        "compact-cut-worker",
        "spark-worker-2",
        lambda: cluster.network.cut("spark-worker-2"),
        lambda: cluster.network.restore("spark-worker-2"),
    )
    assert "lost executor" in driver.lower(), driver[-4000:]


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (through /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


def test_an_executor_killed_in_the_middle_of_a_compaction_loses_and_duplicates_nothing(cluster):
    """The executor JVM on spark-worker-1 (a child of the worker this cluster started, found by
    that PID) gets SIGKILL while it runs a compaction task: the worker reports it gone, the
    driver runs the task again, and commits once."""
    worker_pid = cluster.processes["spark-worker-1"][1].pid

    def kill_executor() -> None:
        executors = [
            pid for pid in _descendants(worker_pid) if b"CoarseGrainedExecutorBackend" in _cmdline(pid)
        ]
        assert executors, "no executor process under spark-worker-1"
        for pid in executors:
            os.kill(pid, signal.SIGKILL)

    driver = _compact_through(cluster, "compact-kill-executor", "spark-worker-1", kill_executor)
    assert "lost executor" in driver.lower(), driver[-4000:]


APPEND_THROUGH = """
import json, sys, time
import numpy as np, pyarrow as pa
from deltaplane.engine import write_table
uri, first, last, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
errors, deadline = [], time.time() + 240
for k in range(first, last):
    ids = np.arange(k * rows, (k + 1) * rows, dtype=np.int64)
    batch = pa.table({"id": ids, "a": ids % 100, "g": np.where(ids % 2 == 0, "x", "y")})
    while True:  # as a task retried by Airflow would: the same app id and version each time
        try:
            write_table(uri, batch, mode="append", partition_by=["g"], app_id="outage", app_version=k)
            break
        except Exception as e:
            errors.append(type(e).__name__ + ": " + str(e)[:200])
            if time.time() > deadline:
                raise
            time.sleep(1)
    time.sleep(1)
print(json.dumps({"errors": errors}))
"""


def test_a_volume_host_cut_off_fails_reads_clearly_and_appends_land_exactly_once(cluster):
    """volume-1 is cut off for at least 30 s. The table's first 6 appends put commits and data
    files on both volume hosts (one in 7 volumes' chance each to miss volume-1: about 1e-7 that
    all 18 do), so a read during the outage fails, with a StorageError that names the object,
    not a hang. Meanwhile the client appends a batch a second, each retried until it commits
    with the same app id and version (as Airflow retries a task). After the link is back, every
    batch is in the table once: a failed attempt left no commit behind, and a retry of an
    attempt that did commit was skipped, not applied twice."""
    uri = "s3://lake/appends-through-outage"
    rows = 10_000
    first = cluster.python("client", APPEND_THROUGH, uri, "0", "6", str(rows), timeout=300)
    assert _json(first)["errors"] == []
    client = cluster.host("client")
    cluster.network.cut("volume-1")
    try:
        command = [sys.executable, "-c", APPEND_THROUGH, uri, "6", "30", str(rows)]
        appends = subprocess.Popen(
            client.argv(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(client),
        )
        started = time.time()
        during = cluster.python("client", READ, uri, timeout=180, check=False)
        time.sleep(max(0.0, 30 - (time.time() - started)))
    finally:
        cluster.network.restore("volume-1")
    assert (
        during.returncode != 0
        and "StorageError: cannot read s3://lake/appends-through-outage/" in during.stderr
    )
    _, stderr = appends.communicate(timeout=300)
    assert appends.returncode == 0, stderr[-4000:]
    # The volume server is back once it has sent the master a heartbeat: a reader retries
    # until then (the appends' own retries covered it for them).
    deadline = time.time() + 90
    while (
        after := cluster.python("client", READ, uri, check=False)
    ).returncode != 0 and time.time() < deadline:
        time.sleep(2)
    assert after.returncode == 0, after.stderr[-2000:]
    assert _exactly_once(_json(after), 30 * rows)
