"""Headless Chromium for the UI tests: Debian's `chromium` (installed with apt-get when missing,
once per test run; a test fails, never skips, when it cannot be had), started on a fresh profile
with DevTools on 127.0.0.1 only and stopped by its PID, and a small DevTools-protocol client."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def _loopback_listeners(pgid: int) -> list[str]:
    """Local addresses of the TCP sockets that processes of group ``pgid`` listen on."""
    inodes = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (OSError, ValueError, IndexError):
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address = fields[1].split(":")[0]
                if len(address) == 8:
                    found.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(address)[::-1]))
                else:
                    words = bytes.fromhex(address)
                    raw = b"".join(words[i : i + 4][::-1] for i in range(0, 16, 4))
                    found.append(socket.inet_ntop(socket.AF_INET6, raw))
    return found


@pytest.fixture
def browser(chromium, tmp_path):
    """A headless Chromium on a fresh profile, DevTools on 127.0.0.1 only; stopped by its PID."""
    profile = tmp_path / "chromium-profile"
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
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.time() + 30
        while not active.exists() or not active.read_text().strip():
            if process.poll() is not None or time.time() > deadline:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                pytest.fail(
                    "Chromium did not start: " + process.stderr.read().decode(errors="replace")[-3000:]
                )
            time.sleep(0.2)
        port = int(active.read_text().splitlines()[0])
        listeners = _loopback_listeners(process.pid)
        assert listeners and all(a in ("127.0.0.1", "::ffff:127.0.0.1") for a in listeners), listeners
        yield port
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        process.stderr.close()
