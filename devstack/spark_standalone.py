"""A Spark standalone master and worker on 127.0.0.1: the commands that start them and the master's
count of live workers, shared by ``make stack`` and the tests that run jobs on a real cluster."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path


def master_command(spark_class: str, port: int, ui_port: int) -> list[str]:
    """The master, its RPC on ``port`` and its web UI on ``ui_port``, both on 127.0.0.1."""
    return [
        spark_class,
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        str(ui_port),
    ]


def worker_command(
    spark_class: str, master_port: int, ui_port: int, work_dir: Path, *, cores: int = 2, memory: str = "2g"
) -> list[str]:
    """A worker of the master on 127.0.0.1:``master_port`` with ``cores`` and ``memory``, its
    web UI on ``ui_port`` and its applications' files under ``work_dir``."""
    return [
        spark_class,
        "org.apache.spark.deploy.worker.Worker",
        f"spark://127.0.0.1:{master_port}",
        "--host",
        "127.0.0.1",
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
