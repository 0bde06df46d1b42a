"""docker-compose.yml cannot be started here (no Docker engine), so its wiring is checked by
reading it: every service the DAGs need, connection URIs and ports that point at the services
that serve them, pinned images, health checks, named volumes, every variable in .env.example."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import yaml

from deltaplane.operators.factory.config import load_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
ENV_EXAMPLE = dict(
    line.split("=", 1)
    for line in (ROOT / ".env.example").read_text().splitlines()
    if line.strip() and not line.startswith("#")
)


def substitute(value: str) -> str:
    """Compose's ${VAR} substitution with the example environment (an unknown name fails)."""
    return string.Template(value).substitute(ENV_EXAMPLE)


def env(service: str) -> dict[str, str]:
    return {k: substitute(str(v)) for k, v in (SERVICES[service].get("environment") or {}).items()}


def test_every_service_the_platform_needs_is_there():
    assert {
        "postgres",
        "seaweedfs",
        "seaweedfs-init",
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "spark-master",
        "spark-worker",
    } <= set(SERVICES)


def test_images_are_pinned_and_platform_services_use_the_projects_image():
    for name, service in SERVICES.items():
        image = substitute(service["image"])
        assert ":" in image and not image.endswith(":latest"), f"{name}: unpinned image {image}"
    ours = {n for n, s in SERVICES.items() if s.get("build")}
    assert {
        "airflow-apiserver",
        "airflow-scheduler",
        "spark-master",
        "spark-worker",
        "seaweedfs-init",
    } <= ours
    assert len({substitute(SERVICES[n]["image"]) for n in ours}) == 1  # one wheel everywhere
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11\.\d+-slim", dockerfile, re.M)
    assert 'pip install ".[airflow,spark,quality]"' in dockerfile and "openjdk-17" in dockerfile


def test_connections_point_at_the_services_and_ports_that_serve_them():
    airflow = env("airflow-scheduler")
    # metadata DB -> postgres
    db = re.match(
        r"postgresql\+psycopg2://([^:]+):([^@]+)@([^:/]+):(\d+)/(\w+)",
        airflow["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"],
    )
    assert db and db.group(3) == "postgres" and db.group(4) == "5432"
    assert (db.group(1), db.group(2), db.group(5)) == (
        env("postgres")["POSTGRES_USER"],
        env("postgres")["POSTGRES_PASSWORD"],
        env("postgres")["POSTGRES_DB"],
    )
    # the lake connection -> the SeaweedFS S3 port, Spark master -> the master's port
    conn = json.loads(airflow["AIRFLOW_CONN_LAKE"])
    assert conn["conn_type"] == "deltaplane"
    s3_port = ENV_EXAMPLE["S3_PORT"]
    assert conn["host"] == f"http://seaweedfs:{s3_port}"
    assert f"-s3.port={s3_port}" in substitute(SERVICES["seaweedfs"]["command"])
    assert (conn["login"], conn["password"]) == (
        env("seaweedfs")["AWS_ACCESS_KEY_ID"],
        env("seaweedfs")["AWS_SECRET_ACCESS_KEY"],
    )
    master = SERVICES["spark-master"]["command"]
    assert conn["extra"]["spark_master"] == f"spark://spark-master:{master[master.index('--port') + 1]}"
    assert "spark://spark-master:7077" in SERVICES["spark-worker"]["command"]
    # tasks reach the execution API on the api-server's port
    api_port = SERVICES["airflow-apiserver"]["command"][-1]
    assert (
        airflow["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
        == f"http://airflow-apiserver:{api_port}/execution/"
    )
    assert any(
        p.endswith(f":{api_port}") for p in (substitute(p) for p in SERVICES["airflow-apiserver"]["ports"])
    )
    # the init service creates the bucket the tables live in
    init = env("seaweedfs-init")
    assert init["AWS_ENDPOINT_URL"] == conn["host"] and init["LAKE_BUCKET"] == ENV_EXAMPLE["LAKE_BUCKET"]


def test_the_deployed_tables_live_on_the_lake_and_use_the_connection():
    airflow = env("airflow-scheduler")
    config_path = airflow["DELTAPLANE_CONFIG"].replace("/opt/deltaplane/", str(ROOT) + "/")
    config = load_config(config_path)
    bucket = ENV_EXAMPLE["LAKE_BUCKET"]
    for name, table in config.tables.items():
        assert table.uri.startswith(f"s3://{bucket}/"), name
        assert table.conn_id == "lake" and "AIRFLOW_CONN_" + table.conn_id.upper() in airflow
        if table.consumer:
            assert table.consumer.target.startswith(f"s3://{bucket}/")
        if table.ingest and table.ingest.engine == "spark":
            # Spark executors read the landing files: the worker mounts the same volume.
            landing_mounts = {v for v in SERVICES["spark-worker"]["volumes"] if v.startswith("landing:")}
            assert landing_mounts and all(
                v in SERVICES["airflow-scheduler"]["volumes"] for v in landing_mounts
            )
            assert table.ingest.landing.startswith("/opt/deltaplane/landing")


def test_health_checks_dependencies_and_volumes():
    for name in (
        "postgres",
        "seaweedfs",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-triggerer",
        "spark-master",
        "spark-worker",
    ):
        assert "healthcheck" in SERVICES[name], name
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        deps = SERVICES[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["airflow-init"]["condition"] == "service_completed_successfully"
        assert deps["seaweedfs-init"]["condition"] == "service_completed_successfully"
    named = set(COMPOSE["volumes"])
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert source in named, f"{name}: {source} is not a named volume"
    # published ports stay on the host's loopback
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert substitute(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_every_variable_is_in_the_example_environment():
    text = (ROOT / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{(\w+)", text))
    assert used <= set(ENV_EXAMPLE), sorted(used - set(ENV_EXAMPLE))
