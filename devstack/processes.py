"""Stopping a process this code started: by its PID, never by name."""

from __future__ import annotations

import signal
import subprocess


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
