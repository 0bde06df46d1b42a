"""``make stack``: the docker-compose topology started natively on 127.0.0.1 from the virtualenv.

SeaweedFS (``weed mini``, the lake's S3), a Spark standalone master and worker (the pyspark
wheel's ``spark-class``), and Airflow's api-server, scheduler (LocalExecutor, low parallelism),
dag-processor and triggerer, with a SQLite metadata DB under ``<root>/airflow``. Everything
listens on 127.0.0.1 (the scheduler and triggerer start with ``--skip-serve-logs``, so no log
server binds 0.0.0.0), is recorded in ``<root>/pids.json`` and stopped by exactly those PIDs
(``make stack-down``); a watchdog stops the stack after ``--max-minutes``.

    python -m deltaplane.devstack.stack up [--root demo/stack] [--ports auto] [--max-minutes 240]
    python -m deltaplane.devstack.stack down [--root demo/stack]

``airflow`` (``make airflow``) starts only Airflow, the same way and on 127.0.0.1, in the
foreground, on a home of its own (``--root`` is the ``AIRFLOW_HOME``; default ``demo/airflow``,
which ``make run`` fills): the api-server, the scheduler and triggerer with
``--skip-serve-logs``, and the dag-processor, where ``airflow standalone`` would bind its log
servers to 0.0.0.0:8793/8794. Ctrl-C, SIGTERM, ``--max-minutes`` or any component exiting stops
them all by the PIDs recorded in ``<root>/pids.json`` (``down --root`` does the same from
another shell):

    python -m deltaplane.devstack.stack airflow [--root demo/airflow] [--port 8080]
        [--dags dags] [--config config/tables.yaml] [--max-minutes 240]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from deltaplane.devstack.ports import SEAWEEDFS_GRPC_OFFSET, free_port, free_ports
from deltaplane.devstack.seaweedfs import mini_command
from deltaplane.devstack.spark_standalone import alive_workers, master_command, worker_command

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "lake"
DEFAULT_PORTS = {"s3": 8333, "spark": 7077, "spark_ui": 8090, "worker_ui": 8091, "airflow": 8080}


def _ports(mode: str) -> dict[str, int]:
    if mode != "auto":
        return dict(DEFAULT_PORTS)
    return free_ports(DEFAULT_PORTS, offsets=(0, SEAWEEDFS_GRPC_OFFSET))


def _wait(what: str, check, timeout: float, processes: dict) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            if check():
                return
        except Exception:
            pass
        dead = [name for name, p in processes.items() if p.poll() is not None]
        if dead or time.time() > deadline:
            raise RuntimeError(f"{what} did not come up (exited: {dead or 'none'}); see the logs")
        time.sleep(0.5)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=3) as response:
        return response.status == 200


# Airflow's components start as ``python -m airflow`` wherever the launcher runs (the repository
# root under make), and ``-m`` puts the working directory first on sys.path. There, every editable
# install leaves setuptools' ``deltaplane.egg-info``: a second "deltaplane" distribution, whose
# ``airflow.plugins`` entry point made Airflow register the plugin twice and show "Plugin
# 'deltaplane' already registered" as a plugin import error. Python 3.11's safe-path mode keeps
# the working directory off sys.path in the components and every process they start.
SAFE_PATH = {"PYTHONSAFEPATH": "1"}


def environment(root: Path, ports: dict[str, int], config: Path) -> dict[str, str]:
    """The settings every Airflow component of the stack runs with (also for ``airflow`` CLI calls)."""
    s3 = f"http://127.0.0.1:{ports['s3']}"
    return {
        **SAFE_PATH,
        "AIRFLOW_HOME": str(root / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{ports['airflow']}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(ports["airflow"]),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{ports['airflow']}",
        "AIRFLOW__API_AUTH__JWT_SECRET": "deltaplane-stack-local-secret",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__TRIGGERER__CAPACITY": "50",
        "DELTAPLANE_CONFIG": str(config),
        "AIRFLOW_CONN_LAKE": json.dumps(
            {
                "conn_type": "deltaplane",
                "host": s3,
                "login": "deltaplane",
                "password": "deltaplane",
                "extra": {"region": "us-east-1", "spark_master": f"spark://127.0.0.1:{ports['spark']}"},
            }
        ),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }


def airflow_environment(
    home: Path, port: int, config: Path, dags: Path, *, parallelism: int = 2, jwt_secret: str
) -> dict[str, str]:
    """Airflow alone (``make airflow``): the components of :func:`airflow_up`, on 127.0.0.1."""
    return {
        **SAFE_PATH,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret,  # shared by the components, new per start
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "DELTAPLANE_CONFIG": str(config),
    }


def migrate_airflow_db(env: dict[str, str] | None = None, timeout: float = 600) -> None:
    """``airflow db migrate`` for the Airflow home ``env`` names, in a child interpreter (it loads
    all of Airflow); ``RuntimeError`` with the end of its output when it fails."""
    migrate = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if migrate.returncode:
        raise RuntimeError(f"airflow db migrate failed: {migrate.stderr[-3000:]}")


def _start(root: Path, logs: Path, record: dict, processes: dict, env: dict, name: str, command: list[str]):
    with open(logs / f"{name}.log", "ab") as log:
        processes[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    record["pids"][name] = processes[name].pid
    (root / "pids.json").write_text(json.dumps(record, indent=1))


def _start_watchdog(root: Path, record: dict, max_minutes: float) -> None:
    watchdog = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deltaplane.devstack.stack",
            "watchdog",
            "--root",
            str(root),
            "--after",
            str(max_minutes * 60),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    record["pids"]["watchdog"] = watchdog.pid
    (root / "pids.json").write_text(json.dumps(record, indent=1))


def airflow_up(
    root: Path,
    *,
    port: int | str = DEFAULT_PORTS["airflow"],
    config: Path | None = None,
    dags: Path | None = None,
    max_minutes: float = 240,
    parallelism: int = 2,
) -> dict:
    """Start Airflow's api-server, scheduler, dag-processor and triggerer with ``root`` as their
    ``AIRFLOW_HOME``, every socket on 127.0.0.1 (no log servers), recorded in ``root/pids.json``
    and stopped by :func:`down` (a watchdog calls it after ``max_minutes``). ``port="auto"``
    picks a free port. Returns the record (``ports``, ``pids``)."""
    root = root.resolve()
    if (root / "pids.json").exists():
        raise RuntimeError(
            f"an Airflow is already recorded in {root / 'pids.json'}; stop it first: "
            f"python -m deltaplane.devstack.stack down --root {root}"
        )
    root.mkdir(parents=True, exist_ok=True)
    logs = root / "launcher-logs"
    logs.mkdir(exist_ok=True)
    port = free_port() if port == "auto" else int(port)
    config = (config or ROOT / "config" / "tables.yaml").resolve()
    dags = (dags or ROOT / "dags").resolve()
    from deltaplane.operators.factory.config import read_config

    read_config(config)  # a file that is not a tables file fails here (invalid tables show in the UI)
    secret = secrets.token_urlsafe(32)
    env = {
        **os.environ,
        **airflow_environment(root, port, config, dags, parallelism=parallelism, jwt_secret=secret),
    }
    processes: dict[str, subprocess.Popen] = {}
    record = {"root": str(root), "ports": {"airflow": port}, "pids": {}, "started": time.time()}
    (root / "pids.json").write_text(json.dumps(record, indent=1))
    try:
        migrate_airflow_db(env)
        airflow = [sys.executable, "-m", "airflow"]
        start = functools.partial(_start, root, logs, record, processes, env)
        start(
            "api-server",
            [*airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        )
        start("scheduler", [*airflow, "scheduler", "--skip-serve-logs"])
        start("dag-processor", [*airflow, "dag-processor"])
        start("triggerer", [*airflow, "triggerer", "--skip-serve-logs"])
        _start_watchdog(root, record, max_minutes)
        _wait("Airflow", lambda: _http_ok(f"http://127.0.0.1:{port}/api/v2/monitor/health"), 180, processes)
    except BaseException:
        down(root)
        raise
    return record


def airflow_foreground(root: Path, **options) -> int:
    """``make airflow``: :func:`airflow_up`, then wait for Ctrl-C, SIGTERM, the time limit or a
    component that exits; everything started is stopped by PID on the way out."""
    max_minutes = options.get("max_minutes", 240)

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    status = 0
    try:
        record = airflow_up(root, **options)
        port = record["ports"]["airflow"]
        passwords = root.resolve() / "simple_auth_manager_passwords.json.generated"
        print(f"Airflow on http://127.0.0.1:{port} (user admin, password in {passwords})", flush=True)
        print(
            f"  home {record['root']}; logs in {record['root']}/launcher-logs; every socket on 127.0.0.1",
            flush=True,
        )
        print(f"  Ctrl-C stops it (it stops itself after {max_minutes:g} minutes)", flush=True)
        deadline = time.time() + max_minutes * 60
        watched = {k: v for k, v in record["pids"].items() if k != "watchdog"}
        while time.time() < deadline:
            gone = [name for name, pid in watched.items() if not _alive(pid)]
            if gone:
                print(f"stopping: {', '.join(gone)} exited (see {record['root']}/launcher-logs)", flush=True)
                status = 1
                break
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stopped = down(root)
        signal.signal(signal.SIGTERM, previous)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"), flush=True)
    return status


def _reap(pid: int) -> bool:
    """Collect ``pid``'s exit status if it is an exited child of this process."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # not our child (or already collected)
        return False


def _alive(pid: int) -> bool:
    """Whether the process ``pid`` still runs (a zombie child of ours counts as gone)."""
    if _reap(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def up(
    root: Path, *, ports_mode: str = "fixed", max_minutes: float = 240, config: Path | None = None
) -> dict:
    root = root.resolve()
    if (root / "pids.json").exists():
        raise RuntimeError(
            f"a stack is already recorded in {root / 'pids.json'}; run `make stack-down` first"
        )
    root.mkdir(parents=True, exist_ok=True)
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    ports = _ports(ports_mode)
    used = {p + offset for p in ports.values() for offset in (0, SEAWEEDFS_GRPC_OFFSET)}
    weed_ports = free_ports(("master", "volume", "filer", "admin"), used, offsets=(0, SEAWEEDFS_GRPC_OFFSET))
    config = config or ROOT / "config" / "tables.stack.yaml"
    from deltaplane.operators.factory.config import load_config

    load_config(config)  # a bad tables file fails here, not in the dag-processor's log
    env = {**os.environ, **environment(root, ports, config)}
    from deltaplane.spark_jobs.submit import spark_home

    spark_class = str(spark_home() / "bin" / "spark-class")
    weed_command = mini_command(root / "weed", {**weed_ports, "s3": ports["s3"]})  # checks it is installed
    processes: dict[str, subprocess.Popen] = {}
    record = {"root": str(root), "ports": ports, "pids": {}, "started": time.time()}

    def start(name: str, command: list[str], cwd: Path | None = None) -> None:
        with open(logs / f"{name}.log", "ab") as log:
            processes[name] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
            )
        record["pids"][name] = processes[name].pid
        (root / "pids.json").write_text(json.dumps(record, indent=1))

    try:
        (root / "weed").mkdir(exist_ok=True)
        start(
            "seaweedfs",
            weed_command,
            cwd=root / "weed",
        )
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{ports['s3']}",
            aws_access_key_id="deltaplane",
            aws_secret_access_key="deltaplane",
            region_name="us-east-1",
        )
        _wait("SeaweedFS", lambda: s3.list_buckets() is not None, 60, processes)
        if BUCKET not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
            s3.create_bucket(Bucket=BUCKET)
        start("spark-master", master_command(spark_class, ports["spark"], ports["spark_ui"]))
        start(
            "spark-worker",
            worker_command(spark_class, ports["spark"], ports["worker_ui"], root / "spark-work"),
        )
        _wait(
            "Spark",
            lambda: alive_workers(ports["spark_ui"]) >= 1,
            90,
            processes,
        )
        migrate_airflow_db(env)
        airflow = [sys.executable, "-m", "airflow"]
        start(
            "api-server",
            [
                *airflow,
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(ports["airflow"]),
                "--workers",
                "1",
            ],
        )
        start("scheduler", [*airflow, "scheduler", "--skip-serve-logs"])
        start("dag-processor", [*airflow, "dag-processor"])
        start("triggerer", [*airflow, "triggerer", "--skip-serve-logs"])
        _wait(
            "Airflow",
            lambda: _http_ok(f"http://127.0.0.1:{ports['airflow']}/api/v2/monitor/health"),
            180,
            processes,
        )
        _start_watchdog(root, record, max_minutes)
    except BaseException:
        down(root)
        raise
    return record


def down(root: Path) -> list[str]:
    """Stop exactly the processes ``up`` recorded (SIGTERM to each one's process group, then
    SIGKILL after a grace period); never by name."""
    path = root.resolve() / "pids.json"
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    stopped = []
    order = [
        "watchdog",
        "triggerer",
        "dag-processor",
        "scheduler",
        "api-server",
        "spark-worker",
        "spark-master",
        "seaweedfs",
    ]
    for name in sorted(record["pids"], key=lambda n: order.index(n) if n in order else -1):
        pid = record["pids"][name]
        if name == "watchdog" and pid == os.getpid():
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.time() + 20
        while time.time() < deadline:
            _reap(pid)  # a child of this process (``make airflow``) stays a zombie until reaped
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        stopped.append(name)
    path.unlink(missing_ok=True)
    return stopped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="deltaplane.devstack.stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("command", choices=("up", "down", "status", "watchdog", "airflow"))
    p.add_argument("--root", help="the stack's folder (default demo/stack; airflow: demo/airflow)")
    p.add_argument("--ports", choices=("fixed", "auto"), default="fixed")
    p.add_argument("--port", default=str(DEFAULT_PORTS["airflow"]), help="airflow: the UI's port, or auto")
    p.add_argument("--dags", help="airflow: the DAGs folder (default dags/)")
    p.add_argument("--parallelism", type=int, default=2, help="airflow: tasks at once")
    p.add_argument("--max-minutes", type=float, default=240)
    p.add_argument(
        "--config",
        help="tables file (default config/tables.stack.yaml; airflow: config/tables.yaml)",
    )
    p.add_argument("--after", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.command == "airflow":
        return airflow_foreground(
            Path(args.root or ROOT / "demo" / "airflow"),
            port=args.port,
            config=Path(args.config) if args.config else None,
            dags=Path(args.dags) if args.dags else None,
            max_minutes=args.max_minutes,
            parallelism=args.parallelism,
        )
    root = Path(args.root or ROOT / "demo" / "stack")
    if args.command == "up":
        record = up(
            root,
            ports_mode=args.ports,
            max_minutes=args.max_minutes,
            config=Path(args.config) if args.config else None,
        )
        ports = record["ports"]
        print(f"stack up under {record['root']} (stops itself after {args.max_minutes:g} minutes)")
        passwords = root / "airflow" / "simple_auth_manager_passwords.json.generated"
        print(f"  Airflow  http://127.0.0.1:{ports['airflow']}  (user admin, password in {passwords})")
        print(f"  S3       http://127.0.0.1:{ports['s3']}  bucket {BUCKET}")
        print(f"  Spark    spark://127.0.0.1:{ports['spark']}  (UI http://127.0.0.1:{ports['spark_ui']})")
        print("  stop it: make stack-down")
        return 0
    if args.command == "down":
        stopped = down(root)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    if args.command == "watchdog":
        time.sleep(args.after or 0)
        down(root)
        return 0
    path = root / "pids.json"
    print(path.read_text() if path.exists() else "no stack recorded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
