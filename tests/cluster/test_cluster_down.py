"""``cluster down`` and the watchdog stop exactly the processes a cluster recorded, by PID: the
services (each its own session) and the namespaces' holders, inner shell first. Checked on
stand-in processes recorded the way ``Cluster`` records them, so it runs in the fast tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from deltaplane.devstack.cluster import down


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def _gone(process: subprocess.Popen, timeout: float = 30) -> bool:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def _record(root, services, holder, inner, watchdog=None) -> None:
    (root / "cluster.json").write_text(
        json.dumps(
            {
                "root": str(root),
                "hosts": {"a": {"address": "10.0.0.1", "holder": holder.pid, "pid": inner.pid}},
                "switch": {"holder": holder.pid, "pid": inner.pid},
                "services": {name: {"host": "a", "pid": p.pid} for name, p in services.items()},
                "watchdog": watchdog,
            }
        )
    )


def test_down_stops_the_recorded_processes_and_nothing_else(tmp_path):
    services = {"one": _sleeper(), "two": _sleeper()}
    holder, inner, bystander = _sleeper(), _sleeper(), _sleeper()
    try:
        _record(tmp_path, services, holder, inner)
        assert sorted(down(tmp_path)) == ["one", "two"]
        assert all(_gone(p) for p in (*services.values(), holder, inner))
        assert bystander.poll() is None
        assert not (tmp_path / "cluster.json").exists()
        assert down(tmp_path) == []  # nothing recorded: nothing to do
    finally:
        for p in (*services.values(), holder, inner, bystander):
            p.kill()
            p.wait()


def test_the_watchdog_stops_the_cluster_after_its_time_even_with_its_starter_gone(tmp_path):
    services = {"service": _sleeper()}
    holder, inner = _sleeper(), _sleeper()
    try:
        _record(tmp_path, services, holder, inner)
        watchdog = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deltaplane.devstack.cluster",
                "watchdog",
                "--root",
                str(tmp_path),
                "--after",
                "1",
            ],
            start_new_session=True,
            env={**os.environ},
        )
        started = time.time()
        assert _gone(services["service"]) and _gone(holder) and _gone(inner)
        assert time.time() - started >= 1
        assert watchdog.wait(timeout=30) == 0
    finally:
        for p in (*services.values(), holder, inner):
            p.kill()
            p.wait()
