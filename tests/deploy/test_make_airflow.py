"""`make airflow`: Airflow's api-server, scheduler, dag-processor and triggerer started by the
Makefile's own target (through ``make``), every listening socket of every process they start on
127.0.0.1 (``airflow standalone`` put its log servers on 0.0.0.0:8793/8794), the UI answering and
the repository's DAGs parsed; Ctrl-C, or a component that dies, stops all of them by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from deltaplane.devstack.ports import free_port
from deltaplane.devstack.stack import airflow_environment, airflow_up, down, environment
from tests.warm_python import fresh_json

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("stack")]

PROJECT = Path(__file__).resolve().parents[2]


def start_make(root: Path, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("DELTAPLANE_CONFIG", None)
    for key in [k for k in env if k.startswith("AIRFLOW")]:  # nothing from the test run leaks in
        env.pop(key)
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                "make",
                "--no-print-directory",
                "-C",
                str(PROJECT),
                "-o",
                ".venv/.installed-stamp",  # the virtualenv is there: never reinstall from a test
                "airflow",
                f"AIRFLOW_ROOT={root}",
                f"AIRFLOW_PORT={port}",
                "AIRFLOW_MINUTES=20",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own group: a Ctrl-C to it reaches nothing else
        )


def wait_for(what: str, check, timeout: float, make: subprocess.Popen, log: Path):
    deadline = time.time() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            pass
        assert make.poll() is None, f"make airflow exited ({make.returncode}):\n{log.read_text()[-3000:]}"
        assert time.time() < deadline, f"{what} not within {timeout} s:\n{log.read_text()[-3000:]}"
        time.sleep(1)


def get(url: str, token: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return r.status, r.read()


def listening_sockets(pids: dict[str, int]) -> list[tuple[str, int, str, int]]:
    """(component, pid, address, port) of every listening TCP socket of the started processes
    and all their descendants."""
    found = []
    for name, pid in pids.items():
        try:
            root = psutil.Process(pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in processes:
            try:
                connections = process.net_connections(kind="inet")
            except psutil.NoSuchProcess:
                continue
            for c in connections:
                if c.status == psutil.CONN_LISTEN:
                    found.append((name, process.pid, c.laddr.ip, c.laddr.port))
    return found


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop_everything(make: subprocess.Popen, root: Path) -> None:
    """Cleanup if the test failed half-way: the recorded PIDs, then make's own group."""
    down(root)
    if make.poll() is None:
        os.killpg(make.pid, signal.SIGKILL)
        make.wait(30)


def test_make_airflow_binds_loopback_answers_and_stops_by_pid(tmp_path):
    root = tmp_path / "airflow"
    port = free_port({8793, 8794})
    log = tmp_path / "make-airflow.log"
    make = start_make(root, port, log)
    try:
        wait_for("the UI", lambda: "Airflow on http://127.0.0.1" in log.read_text(), 300, make, log)
        record = json.loads((root / "pids.json").read_text())
        components = {k: v for k, v in record["pids"].items() if k != "watchdog"}
        assert set(components) == {"api-server", "scheduler", "dag-processor", "triggerer"}
        base = f"http://127.0.0.1:{port}"
        status, page = get(base + "/")
        assert status == 200 and b"<html" in page.lower()

        def healthy():
            health = json.loads(get(base + "/api/v2/monitor/health")[1])
            parts = ("metadatabase", "scheduler", "dag_processor", "triggerer")
            return all(health[p]["status"] == "healthy" for p in parts)

        wait_for("every component healthy", healthy, 180, make, log)
        passwords = json.loads((root / "simple_auth_manager_passwords.json.generated").read_text())
        request = urllib.request.Request(
            base + "/auth/token",
            data=json.dumps({"username": "admin", "password": passwords["admin"]}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            token = json.loads(r.read())["access_token"]
        # the home page's "Plugin Import Error" banner reads this: nothing, and deltaplane loaded once
        errors = json.loads(get(base + "/api/v2/plugins/importErrors", token)[1])
        assert errors["total_entries"] == 0, errors
        plugins = json.loads(get(base + "/api/v2/plugins?limit=100", token)[1])["plugins"]
        assert [p["name"] for p in plugins].count("deltaplane") == 1, plugins
        # the repository's DAGs (config/tables.yaml), parsed by the dag-processor
        wait_for(
            "the repository's DAGs",
            lambda: b"deltaplane_trips_maintenance" in get(base + "/api/v2/dags?limit=100", token)[1],
            180,
            make,
            log,
        )
        # Every listening socket of every started process (and its children) is on loopback.
        sockets = listening_sockets(components)
        assert ("api-server", port) in {(name, p) for name, _, _, p in sockets}, sockets
        assert all(address == "127.0.0.1" for _, _, address, _ in sockets), sockets
        assert not {8793, 8794} & {p for *_, p in sockets}, sockets
        # the same seen from the kernel's table: nothing of ours on a wildcard address
        ours = {pid for pid in components.values()} | {
            c.pid for pid in components.values() for c in psutil.Process(pid).children(recursive=True)
        }
        ss = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
        for line in ss.splitlines():
            if any(f"pid={pid}," in line for pid in ours):
                assert "127.0.0.1:" in line.split()[3], line
        # Ctrl-C (SIGINT to make's process group) stops every component by its PID
        os.killpg(make.pid, signal.SIGINT)
        make.wait(120)
        for name, pid in record["pids"].items():
            deadline = time.time() + 30
            while not gone(pid):
                assert time.time() < deadline, f"{name} ({pid}) still runs after Ctrl-C"
                time.sleep(0.5)
        assert not (root / "pids.json").exists()
        assert "stopped: " in log.read_text()
    finally:
        stop_everything(make, root)

    # Rerun on the same home: it starts again; a component that dies stops the rest.
    log2 = tmp_path / "make-airflow-2.log"
    make = start_make(root, port, log2)
    try:
        wait_for("the UI again", lambda: "Airflow on http://127.0.0.1" in log2.read_text(), 300, make, log2)
        record = json.loads((root / "pids.json").read_text())
        os.kill(record["pids"]["triggerer"], signal.SIGKILL)
        assert make.wait(120) != 0
        text = log2.read_text()
        assert "triggerer exited" in text and "stopped: " in text
        for name, pid in record["pids"].items():
            deadline = time.time() + 30
            while not gone(pid):
                assert time.time() < deadline, f"{name} ({pid}) outlived the triggerer"
                time.sleep(0.5)
        assert not (root / "pids.json").exists()
    finally:
        stop_everything(make, root)


def test_a_recorded_airflow_is_not_started_twice(tmp_path):
    (tmp_path / "pids.json").write_text(json.dumps({"root": str(tmp_path), "pids": {}}))
    with pytest.raises(RuntimeError, match=r"already recorded.*stack down --root"):
        airflow_up(tmp_path, port="auto")
    assert (tmp_path / "pids.json").exists()  # the other launcher's record is left alone


PLUGIN_REPORT = """
import json
from airflow import plugins_manager
plugins_manager.ensure_plugins_loaded()
names = [p.name for p in plugins_manager._get_plugins()[0]]
print(json.dumps({"errors": plugins_manager.get_import_errors(), "names": names}))
"""


@pytest.mark.parametrize("launcher", ["airflow", "stack"])
def test_airflow_components_load_the_plugin_once_from_a_source_checkout(tmp_path, launcher):
    """`make airflow` and `make stack` start Airflow's components as ``python -m airflow`` from
    the repository root, where every editable install leaves setuptools' ``deltaplane.egg-info``:
    with the working directory on ``sys.path`` that is a second deltaplane distribution, Airflow
    registers the plugin's entry point twice and the home page shows "1 Plugin Import Error"
    ("Plugin 'deltaplane' already registered"). The components' environment keeps the working
    directory off ``sys.path``."""
    import importlib.metadata as md

    checkout = tmp_path / "checkout"  # a source tree as an editable install leaves it
    metadata = checkout / "deltaplane.egg-info"
    metadata.mkdir(parents=True)
    dist = md.distribution("deltaplane")
    metadata.joinpath("PKG-INFO").write_text(dist.read_text("METADATA") or dist.read_text("PKG-INFO"))
    metadata.joinpath("entry_points.txt").write_text(dist.read_text("entry_points.txt"))
    home = tmp_path / "home"
    if launcher == "airflow":
        settings = airflow_environment(
            home, 8080, PROJECT / "config" / "tables.yaml", PROJECT / "dags", jwt_secret="x"
        )
    else:
        settings = environment(tmp_path, {"s3": 8333, "spark": 7077, "airflow": 8080}, PROJECT / "config")
        settings["AIRFLOW_HOME"] = str(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | settings
    env.pop("PYTHONPATH", None)
    # ``-c`` puts the working directory on sys.path exactly as the launchers' ``-m airflow`` does
    report = fresh_json(["-c", PLUGIN_REPORT], cwd=checkout, env=env)
    assert report["errors"] == {}, report
    assert report["names"].count("deltaplane") == 1, report
