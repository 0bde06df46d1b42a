"""Measuring in a child process of its own, so that one run's imports, caches and memory peak
do not reach the next: a benchmark script runs itself with ``--measure`` and prints its figures
as JSON on its last line."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def peak_rss() -> int:
    """This process's peak RSS. VmHWM belongs to the current address space, so unlike
    ``ru_maxrss`` it does not inherit the parent's peak through fork+exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_measure(script: str, *args: str) -> dict:
    """Run ``script --measure ARGS`` in a new Python with the repository on its path: the JSON
    object its last line prints."""
    out = subprocess.run(
        [sys.executable, script, "--measure", *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_run(runs: list[dict]) -> dict:
    """The fastest of ``runs`` (their ``seconds``), with the highest ``peak_bytes`` any reached."""
    best = min(runs, key=lambda r: r["seconds"])
    best["peak_bytes"] = max(r["peak_bytes"] for r in runs)
    return best
