"""Headless Chromium for the UI tests: Debian's `chromium` (installed with apt-get when missing,
once per test run; a test fails, never skips, when it cannot be had), started on a fresh profile
with DevTools on 127.0.0.1 only and stopped by its PID, and a small DevTools-protocol client."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.proctree import stop_group

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
APT_TIMEOUT = 600  # seconds, update and install together; about 35 s on a fresh machine
START_TIMEOUT = 60  # seconds for Chromium to listen; about 1 s when idle


def _find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's `chromium`, installed with apt-get when missing (once per test run, only when a
    browser test runs); the test fails, never skips, if it cannot be had."""
    found = _find_chromium()
    if found is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.fail("Chromium is missing and cannot be installed here (needs root and apt-get): "
                        "apt-get install -y chromium")  # fmt: skip
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        deadline = time.monotonic() + APT_TIMEOUT
        started = time.monotonic()
        for command in (
            ["apt-get", "update"],
            ["apt-get", "-o", "DPkg::Lock::Timeout=120", "install", "-y", "chromium"],
        ):
            try:
                done = subprocess.run(
                    command,
                    env=env,
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                    timeout=max(deadline - time.monotonic(), 1),
                )
            except subprocess.TimeoutExpired:
                pytest.fail(f"{' '.join(command)} took more than {APT_TIMEOUT} s")
            if done.returncode != 0:
                pytest.fail(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-3000:]}")
        print(f"installed chromium in {time.monotonic() - started:.1f} s", file=sys.stderr)
        found = _find_chromium()
    if found is None:
        pytest.fail("apt-get installed chromium but no chromium binary is on PATH")
    return found


def _loopback_listeners(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket that ``pid`` or any process below it listens on.

    By process tree, not process group (a child may leave the group), and through psutil, which
    skips a descriptor closed between listing ``/proc/<pid>/fd`` and reading its link instead of
    the whole process (Chromium opens and closes files busily while it starts)."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return set()
    found = set()
    for process in processes:
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue  # exited meanwhile
        found.update((c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN)
    return found


@pytest.fixture
def browser(chromium, tmp_path):
    """A headless Chromium on a fresh profile, DevTools on 127.0.0.1 only; stopped by its PID."""
    profile = tmp_path / "chromium-profile"
    log = tmp_path / "chromium.log"  # a file, not a pipe nobody reads while the test runs: a full
    stderr = log.open("wb")  # pipe would block Chromium the moment it logs 64 KiB
    process = subprocess.Popen(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1280,1600",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT
        port, listeners = None, set()
        # The file is "<port>\n<browser path>": whole once it has both lines. Then the port must
        # be one the browser's process tree listens on, and every one of its listeners on loopback.
        while port is None or port not in {p for _, p in listeners}:
            if process.poll() is not None or time.monotonic() > deadline:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                pytest.fail(
                    f"Chromium did not start (DevTools port {port}, listeners {sorted(listeners)}): "
                    + log.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.1)
            lines = active.read_text().splitlines() if active.exists() else []
            port = int(lines[0]) if len(lines) >= 2 and lines[0].isdigit() else None
            listeners = _loopback_listeners(process.pid) if port is not None else set()
        assert all(a in ("127.0.0.1", "::ffff:127.0.0.1") for a, _ in listeners), listeners
        yield port
    finally:
        if process.poll() is None:
            stop_group(process, timeout=20)
        stderr.close()
