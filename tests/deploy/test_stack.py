"""End to end on `make stack`: SeaweedFS, a Spark standalone cluster and Airflow's api-server,
scheduler, dag-processor and triggerer on 127.0.0.1. DAGs are triggered through Airflow's REST
API and run by the real scheduler; the consumer's log-tail sensor really defers to the
triggerer; the compaction goes to the Spark master through spark-submit; delta-rs checks the
table. Everything started is stopped by PID."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import deltalake
import pytest

from deltaplane.devstack.stack import down, up

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("stack")]


class Api:
    def __init__(self, base: str, token: str | None = None):
        self.base, self.token = base, token

    def call(self, method: str, path: str, body: dict | None = None):
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    @classmethod
    def login(cls, base: str, airflow_home: Path, timeout: float = 180) -> Api:
        """As admin, with the password the api-server generated into ``airflow_home``; waits
        (at most ``timeout`` s) for an api-server still starting: it writes the passwords and
        listens some seconds after the dag-processor has parsed the first DAGs."""
        generated = airflow_home / "simple_auth_manager_passwords.json.generated"
        deadline = time.time() + timeout
        while True:
            try:
                credentials = {"username": "admin", "password": json.loads(generated.read_text())["admin"]}
                status, body = cls(base).call("POST", "/auth/token", credentials)
                break
            except (OSError, ValueError, KeyError) as error:  # URLError is an OSError
                assert time.time() < deadline, f"no api-server answered at {base} in {timeout} s: {error}"
                time.sleep(0.5)
        assert status == 201, body
        return cls(base, body["access_token"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, run = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            if status == 200 and run["state"] in ("success", "failed"):
                return run["state"]
            time.sleep(2)
        raise AssertionError(f"{dag_id} {run_id} did not finish in {timeout} s")

    def trigger(self, dag_id: str) -> str:
        status, run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
        assert status in (200, 201), run
        return run["dag_run_id"]

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        status, ti = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        return ti.get("state") if status == 200 else None


def land(landing: Path, batch: int) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    rows = [f"{batch * 100 + i},2026-11-0{1 + i % 2},zone{i % 3},{i + 1.5}" for i in range(20)]
    (landing / f"batch{batch}.csv").write_text(
        "trip_id,pickup_date,pickup_zone,fare\n" + "\n".join(rows) + "\n"
    )


def test_dags_run_on_the_native_stack(tmp_path):
    landing = tmp_path / "landing"
    config = tmp_path / "tables.yaml"
    config.write_text(
        (Path(__file__).resolve().parents[2] / "config" / "tables.stack.yaml")
        .read_text()
        .replace("../demo/stack/landing/trips", str(landing))
    )
    root = tmp_path / "stack"
    record = up(root, ports_mode="auto", max_minutes=15, config=config)
    try:
        ports = record["ports"]
        api = Api.login(f"http://127.0.0.1:{ports['airflow']}", root / "airflow")
        dags = ["deltaplane_trips_ingest", "deltaplane_trips_consumer", "deltaplane_trips_maintenance"]
        deadline = time.time() + 120
        while not all(api.call("GET", f"/api/v2/dags/{d}")[0] == 200 for d in dags):
            assert time.time() < deadline, "the dag-processor did not parse the DAGs"
            time.sleep(2)
        for d in dags:
            assert api.call("PATCH", f"/api/v2/dags/{d}", {"is_paused": False})[0] == 200
        # The consumer (scheduled hourly: unpausing it starts the current interval's run) comes
        # first: nothing to read yet, so its sensor defers to the triggerer.
        deadline = time.time() + 120
        consumer_run = None
        while (
            consumer_run is None
            or api.task_state("deltaplane_trips_consumer", consumer_run, "wait_for_commits") != "deferred"
        ):
            assert time.time() < deadline, "the log-tail sensor never deferred"
            status, runs = api.call("GET", "/api/v2/dags/deltaplane_trips_consumer/dagRuns")
            if status == 200 and runs["dag_runs"]:
                consumer_run = runs["dag_runs"][0]["dag_run_id"]
            time.sleep(1)
        for batch in (1, 2):
            land(landing, batch)
            run = api.trigger("deltaplane_trips_ingest")
            assert api.wait_run("deltaplane_trips_ingest", run) == "success"
        assert api.wait_run("deltaplane_trips_consumer", consumer_run) == "success"  # the trigger fired
        run = api.trigger("deltaplane_trips_maintenance")
        assert api.wait_run("deltaplane_trips_maintenance", run, timeout=400) == "success"
        status, xcom = api.call(
            "GET",
            f"/api/v2/dags/deltaplane_trips_maintenance/dagRuns/{run}/taskInstances/compact/xcomEntries/return_value",
        )
        assert status == 200 and "spark" in json.dumps(xcom)
        options = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{ports['s3']}",
            "AWS_ACCESS_KEY_ID": "deltaplane",
            "AWS_SECRET_ACCESS_KEY": "deltaplane",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }
        table = deltalake.DeltaTable("s3://lake/trips", storage_options=options)
        assert sorted(table.to_pyarrow_table()["trip_id"].to_pylist()) == [*range(100, 120), *range(200, 220)]
        assert "OPTIMIZE" in [h["operation"] for h in table.history()]
        copy = deltalake.DeltaTable("s3://lake/trips_copy", storage_options=options).to_pyarrow_table()
        assert copy.num_rows >= 20  # the first batch at least, read after the sensor woke up
    finally:
        stopped = down(root)
        assert "scheduler" in stopped and "seaweedfs" in stopped
    assert not (root / "pids.json").exists()
