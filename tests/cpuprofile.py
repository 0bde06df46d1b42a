"""CPU seconds per test, for finding what makes the suite slow on a busy machine.

``--durations`` ranks tests by wall time, which on a shared machine mostly measures the neighbours.
This plugin charges each test with the CPU its worker's process tree used while it ran: the worker,
every live descendant (a Delta Spark JVM, an Airflow component, a spark-submit) and every descendant
that exited and was reaped inside the tree. A shared server started by the worker (the Delta Spark
JVM) is charged to the test that made it work. Use::

    DELTAPLANE_CPU_PROFILE=/tmp/cpu pytest -p tests.cpuprofile -n 3 --dist loadgroup
    python -m tests.cpuprofile /tmp/cpu   # the 40 most expensive tests and files

Each worker appends JSON lines to ``<prefix>.<worker>``: nodeid, wall and CPU seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests import proctree


def tree_cpu(root: int | None = None) -> float:
    """CPU seconds used so far by ``root`` (this process) and everything below it."""
    root = os.getpid() if root is None else root
    return sum(proctree.cpu_seconds(pid) for pid in (root, *proctree.descendants(root)))


def _record(item) -> None:
    if _START not in item.stash:
        return
    cpu0, wall0 = item.stash[_START]
    del item.stash[_START]
    cpu, wall = tree_cpu() - cpu0, time.monotonic() - wall0
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{os.environ['DELTAPLANE_CPU_PROFILE']}.{worker}", "a") as f:
        f.write(json.dumps({"test": item.nodeid, "wall": round(wall, 2), "cpu": round(cpu, 2)}) + "\n")


_START = pytest.StashKey[tuple]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if os.environ.get("DELTAPLANE_CPU_PROFILE"):
        item.stash[_START] = (tree_cpu(), time.monotonic())
    yield
    _record(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    # The last test's teardown ends the session's servers; a server that exits without being
    # reaped inside the tree (a JVM outliving its parent) takes its CPU seconds out of the sum.
    if nextitem is None:
        _record(item)
    yield


def report(prefix: str, top: int = 40) -> str:
    rows = []
    for path in Path(prefix).parent.glob(Path(prefix).name + ".*"):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])  # cpu, wall, tests
    for row in rows:
        entry = by_file[row["test"].split("::")[0]]
        entry[0] += row["cpu"]
        entry[1] += row["wall"]
        entry[2] += 1
    cpu, wall = sum(r["cpu"] for r in rows), sum(r["wall"] for r in rows)
    lines = [f"{len(rows)} tests, {cpu:.0f} CPU-s, {wall:.0f} s"]
    lines.append(f"\n{'CPU-s':>8} {'wall-s':>8}  test")
    for row in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        lines.append(f"{row['cpu']:8.1f} {row['wall']:8.1f}  {row['test']}")
    lines.append(f"\n{'CPU-s':>8} {'wall-s':>8} {'tests':>5}  file")
    for name, (cpu, wall, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {n:5d}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))
