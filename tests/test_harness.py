"""The test harness's own helpers, under the conditions that made them fail by chance: a browser
fixture must find the DevTools listener of the Chromium it started whichever process of its tree
owns the socket and however busily that process opens and closes files meanwhile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.browser import _loopback_listeners

# A process listening on 127.0.0.1 whose socket sits at a high descriptor while it opens and
# closes low ones as fast as it can (Chromium's browser process does the same at start-up: a
# descriptor listed by /proc/<pid>/fd is often gone when its link is read).
CHURN = """
    import os, socket, sys
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    os.dup2(s.fileno(), 300)
    s.close()
    print(port, flush=True)
    while True:
        fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(40)]
        for fd in fds:
            os.close(fd)
"""

# A process whose child leaves the process group (setsid) and owns the listening socket.
DETACHED_CHILD = """
    import os, socket, sys, time
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        os.write(write, str(s.getsockname()[1]).encode() + b"\\n")
        time.sleep(600)
        os._exit(0)
    print(os.read(read, 100).decode().strip(), flush=True)
    time.sleep(600)
"""


def _start(source: str) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(source)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, int(process.stdout.readline())


def _stop(process: subprocess.Popen) -> None:
    from tests import proctree

    for child in proctree.descendants(process.pid).values():
        os.kill(child.pid, signal.SIGKILL)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    process.stdout.close()


@pytest.mark.parametrize("source", [CHURN, DETACHED_CHILD], ids=["fd-churn", "detached-child"])
def test_the_listener_of_a_started_process_is_always_found(source):
    process, port = _start(source)
    try:
        misses = [n for n in range(200) if ("127.0.0.1", port) not in _loopback_listeners(process.pid)]
        assert misses == [], f"missed the listener in {len(misses)} of 200 looks"
    finally:
        _stop(process)


def test_ports_for_servers_are_never_ones_outgoing_connections_take():
    """A server a test starts gets a port below the kernel's ephemeral range: between the pick
    and the server's bind, no outgoing connection of any process can be given it (a port from
    binding port 0 is one of those). SeaweedFS's gRPC twin (+10000) is free and below it too,
    and the ports of one start are distinct."""
    from deltaplane.devstack.ports import SEAWEEDFS_GRPC_OFFSET, ephemeral_range, free_ports

    low, _ = ephemeral_range()
    for _ in range(20):
        ports = free_ports(("master", "volume", "filer", "s3", "admin"), offsets=(0, SEAWEEDFS_GRPC_OFFSET))
        every = [p + offset for p in ports.values() for offset in (0, SEAWEEDFS_GRPC_OFFSET)]
        assert len(set(every)) == len(every) and all(p < low for p in every), ports


def test_grouped_tests_collect_in_one_process_without_xdist():
    """The inner loop `pytest -p no:xdist <file>` (one process, no workers) collects the files
    whose tests name an xdist group, and the ones the conftest groups (Delta Spark's): under
    `--strict-markers` an undeclared `xdist_group` was an internal error."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = ["tests/deltaspark/test_differential.py", "tests/deploy/test_asset_events.py"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--co", "-q", *files],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_generated_sequences_agree" in done.stdout and "test_asset_events.py::" in done.stdout


def test_a_missing_conformance_corpus_fails_the_tests_that_read_it(monkeypatch, tmp_path):
    """Under CI a missing component is a failure: the corpus's tests used to skip without it, so a
    checkout beside no corpus passed by running less."""
    from tests import conftest

    monkeypatch.setattr(conftest, "CONFORMANCE", tmp_path / "nowhere")
    with pytest.raises(pytest.fail.Exception, match="DELTAPLANE_CONFORMANCE"):
        conftest.conformance_golden()
    (tmp_path / "nowhere" / "golden").mkdir(parents=True)  # a folder without its listing is not it
    with pytest.raises(pytest.fail.Exception, match="not at"):
        conftest.conformance_golden()
    monkeypatch.undo()
    assert (conftest.conformance_golden() / "MANIFEST.tsv").is_file()
