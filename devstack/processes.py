"""Stopping processes this code started: by their PIDs, never by name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def stop(process: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, ``timeout`` seconds to exit, then SIGKILL; reaped either way."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_groups(named: list[tuple[str, int]], grace: float = 20) -> list[str]:
    """Stop processes recorded by PID, each the leader of its own session: SIGTERM to every
    group at once, SIGKILL to those still there after ``grace`` seconds (SeaweedFS's volume
    servers take about 20 s to stop on SIGTERM). The names of those that were running."""
    stopped, waiting = [], []
    for name, pid in named:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        stopped.append(name)
        waiting.append(pid)
    deadline = time.time() + grace
    while waiting and time.time() < deadline:
        for pid in list(waiting):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # a child of this process stays a zombie until reaped
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                waiting.remove(pid)
        time.sleep(0.2)
    for pid in waiting:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return stopped
