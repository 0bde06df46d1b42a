"""A Spark standalone master and worker: the commands that start them (on 127.0.0.1, or on a host
of ``make cluster``) and the master's count of live workers, shared by ``make stack``,
``make cluster`` and the tests that run jobs on a real cluster."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path


def master_command(spark_class: str, port: int, ui_port: int, host: str = "127.0.0.1") -> list[str]:
    """The master, its RPC on ``host``:``port`` and its web UI on ``ui_port`` (bound where
    ``SPARK_LOCAL_IP`` says)."""
    return [
        spark_class,
        "org.apache.spark.deploy.master.Master",
        "--host",
        host,
        "--port",
        str(port),
        "--webui-port",
        str(ui_port),
    ]


def worker_command(
    spark_class: str,
    master_port: int,
    ui_port: int,
    work_dir: Path | str,
    *,
    cores: int = 2,
    memory: str = "2g",
    host: str = "127.0.0.1",
    master_host: str = "127.0.0.1",
) -> list[str]:
    """A worker on ``host`` of the master on ``master_host``:``master_port`` with ``cores`` and
    ``memory``, its web UI on ``ui_port`` and its applications' files under ``work_dir``."""
    return [
        spark_class,
        "org.apache.spark.deploy.worker.Worker",
        f"spark://{master_host}:{master_port}",
        "--host",
        host,
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--webui-port",
        str(ui_port),
        "--work-dir",
        str(work_dir),
    ]


def alive_workers(ui_port: int, timeout: float = 3) -> int:
    """How many workers the master whose web UI is on ``ui_port`` counts as alive (``OSError``
    while it is not answering)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=timeout) as response:
        return int(json.load(response).get("aliveworkers", 0))
