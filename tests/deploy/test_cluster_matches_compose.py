"""The multi-host harness (devstack/cluster.py) and docker-compose.yml describe the same platform:
the same host names, ports, bucket and endpoints, so the compose file is exercised by its twin,
which runs (tests/cluster). Where they differ on purpose, the difference is named here."""

from __future__ import annotations

import json

from deltaplane.devstack import cluster
from deltaplane.devstack.hosts import Host
from tests.deploy.test_compose import ENV_EXAMPLE, SERVICES, env, substitute


def _command(service: str) -> list[str]:
    return [substitute(str(part)) for part in SERVICES[service]["command"]]


def _after(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_the_harness_names_its_hosts_as_compose_names_its_services():
    """Clients reach S3 at ``seaweedfs`` and Spark at ``spark-master`` in both; compose's one
    ``spark-worker`` is two hosts in the harness, and its ``weed mini`` is a master, a filer
    with the S3 gateway and two volume servers on hosts of their own."""
    assert {"seaweedfs", "spark-master"} <= set(SERVICES) & set(cluster.HOSTS)
    assert "spark-worker" in SERVICES
    assert [h for h in cluster.HOSTS if h.startswith("spark-worker-")] == ["spark-worker-1", "spark-worker-2"]


def test_ports_bucket_and_endpoints_are_the_same():
    master = _command("spark-master")
    assert (_after(master, "--host"), _after(master, "--port")) == ("spark-master", str(cluster.SPARK_PORT))
    assert _after(master, "--webui-port") == str(cluster.SPARK_UI)
    worker = _command("spark-worker")
    assert cluster.SPARK_MASTER in worker
    assert _after(worker, "--webui-port") == str(cluster.WORKER_UI)
    assert ENV_EXAMPLE["S3_PORT"] == str(cluster.S3_PORT)
    assert ENV_EXAMPLE["LAKE_BUCKET"] == cluster.BUCKET
    airflow = env("airflow-scheduler")
    assert airflow["AWS_ENDPOINT_URL"] == cluster.S3_ENDPOINT
    connection = json.loads(airflow["AIRFLOW_CONN_LAKE"])
    assert connection["host"] == cluster.S3_ENDPOINT
    assert connection["extra"]["spark_master"] == cluster.SPARK_MASTER
    assert env("spark-worker")["AWS_ENDPOINT_URL"] == cluster.S3_ENDPOINT


def test_the_harness_gives_spark_processes_what_compose_gives_them():
    """Both run Spark's daemons in the foreground and hand the workers the lake's endpoint and
    region; the harness binds each to its host's address (``SPARK_LOCAL_IP``), which compose
    leaves to the container's one interface."""
    worker = Host("spark-worker-1", "10.0.0.1", holder=None, pid=0, link="", directory=None)
    harness = cluster.environment(worker)
    for key in ("SPARK_NO_DAEMONIZE", "AWS_REGION"):
        assert harness[key] == env("spark-worker")[key], key
    assert harness["SPARK_LOCAL_IP"] == "10.0.0.1"
