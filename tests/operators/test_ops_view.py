"""The ops view inside a real `airflow api-server` on 127.0.0.1 (plugin loaded from its entry
point): anonymous requests are refused, the numbers equal the engine's health(), pages render
with server-side SVG and no outside request."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

from engine import DeltaTable, write_table
from engine.transaction import commit_metadata_scope

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("airflow")]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url: str, *, token: str | None = None, data: dict | None = None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def ops_server(airflow_db, tmp_path_factory):
    work = tmp_path_factory.mktemp("ops")
    trips = str(work / "trips")
    for day in ("2026-11-01", "2026-11-02"):
        for i in range(3):
            with commit_metadata_scope(
                {
                    "airflow": {
                        "dag_id": "deltaplane_trips_ingest",
                        "run_id": f"r{i}",
                        "task_id": "commit",
                        "try_number": 1,
                    }
                }
            ):
                write_table(
                    trips,
                    pa.table({"id": [i], "day": [day]}),
                    mode="append",
                    partition_by=["day"],
                    properties={"delta.enableDeletionVectors": "true"}
                    if i == 0 and day.endswith("1")
                    else None,
                )
    DeltaTable(trips).delete("id = 0")
    config = work / "tables.yaml"
    config.write_text(
        f"tables:\n  trips:\n    uri: {trips}\n    auto_optimize: {{min_small_files: 2}}\n"
        f"  missing:\n    uri: {work / 'nope'}\n"
    )
    port = _port()
    env = {
        **os.environ,
        "DELTAPLANE_CONFIG": str(config),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
    }
    with open(work / "api.log", "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "airflow",
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                if request(f"{base}/api/v2/monitor/health")[0] == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.time() > deadline:
                pytest.fail("api-server did not start: " + (work / "api.log").read_text()[-3000:])
            time.sleep(0.5)
        passwords = json.loads(
            (Path(os.environ["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated").read_text()
        )
        status, body = request(
            f"{base}/auth/token", data={"username": "admin", "password": passwords["admin"]}
        )
        assert status == 201, body
        yield base, json.loads(body)["access_token"], trips
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_anonymous_requests_are_refused(ops_server):
    base, _, _ = ops_server
    for path in (
        "/deltaplane/api/tables",
        "/deltaplane/api/tables/trips",
        "/deltaplane/",
        "/deltaplane/tables/trips",
    ):
        status, _ = request(base + path)
        assert status in (401, 403), path
    status, _ = request(base + "/deltaplane/api/tables", token="not-a-token")
    assert status in (401, 403)


def test_api_numbers_equal_the_engines_health(ops_server):
    base, token, trips = ops_server
    status, body = request(base + "/deltaplane/api/tables", token=token)
    assert status == 200, body
    rows = {r["name"]: r for r in json.loads(body)}
    assert "error" in rows["missing"]  # an unreachable table is reported, not a 500
    health = DeltaTable(trips).health(small_file_size=32 << 20)
    got = rows["trips"]
    assert (got["version"], got["files"], got["bytes"], got["small_files"]) == (
        health.version,
        health.num_files,
        health.size_bytes,
        health.num_small_files,
    )
    assert got["deleted_rows_ratio"] == pytest.approx(health.deleted_rows_ratio)
    assert got["versions_since_checkpoint"] == health.versions_since_checkpoint
    assert got["auto_optimize"]["action"] == "compact" and got["auto_optimize"]["reasons"]
    status, body = request(base + "/deltaplane/api/tables/trips", token=token)
    detail = json.loads(body)
    assert [p["partition"] for p in detail["partitions"]] == sorted(p.partition for p in health.partitions)
    assert detail["commits"][0]["operation"] == "DELETE"
    assert detail["commits"][-1]["dag_run"]["dag_id"] == "deltaplane_trips_ingest"
    assert sum(b["num_files"] for b in detail["file_size_histogram"]) == health.num_files
    assert request(base + "/deltaplane/api/tables/nope", token=token)[0] == 404


def test_pages_render_svg_without_outside_requests(ops_server):
    base, token, trips = ops_server
    status, page = request(base + "/deltaplane/tables/trips", token=token)
    assert status == 200 and page.count("<svg") == 3
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing fetched from elsewhere
    health = DeltaTable(trips).health(small_file_size=32 << 20)
    assert (
        f"<b data-k=files>{health.num_files}</b>" in page
        and f"<b data-k=version>{health.version}</b>" in page
    )
    status, page = request(base + "/deltaplane/", token=token)
    assert status == 200 and "trips" in page and f"data-k=files>{health.num_files}<" in page


def test_the_plugin_is_registered_with_its_nav_entry(ops_server):
    base, token, _ = ops_server
    status, body = request(base + "/api/v2/plugins", token=token)
    assert status == 200, body
    plugins = {p["name"]: p for p in json.loads(body)["plugins"]}
    views = plugins["deltaplane"]["external_views"]
    assert views[0]["href"] == "/deltaplane/" and views[0]["destination"] == "nav"


def test_in_a_real_browser(ops_server, tmp_path):
    """Headless Chromium (Debian's `chromium`) opens the table page with the session of a user
    who logged in through Airflow's auth endpoint; the numbers it renders equal health(); the
    screenshot is kept as a test artifact."""
    import asyncio
    import base64
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from airflow.api_fastapi.core_api.security import COOKIE_NAME_JWT_TOKEN

    base, token, trips = ops_server
    artifacts = Path(
        os.environ.get("DELTAPLANE_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
    )
    artifacts.mkdir(parents=True, exist_ok=True)
    profile = tmp_path / "chromium-profile"
    browser = subprocess.Popen(
        [
            chromium,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1280,1600",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.time() + 30
        while not active.exists() or not active.read_text().strip():
            assert time.time() < deadline and browser.poll() is None, "Chromium did not start"
            time.sleep(0.2)
        port = int(active.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        values, png = asyncio.run(
            _browse(
                page["webSocketDebuggerUrl"],
                base,
                f"{base}/deltaplane/tables/trips",
                COOKIE_NAME_JWT_TOKEN,
                token,
            )
        )
    finally:
        os.killpg(browser.pid, signal.SIGTERM)
        browser.wait(timeout=20)
    shot = artifacts / "ops-view-trips.png"
    shot.write_bytes(base64.b64decode(png))
    assert shot.stat().st_size > 10_000
    health = DeltaTable(trips).health(small_file_size=32 << 20)
    assert values["version"] == str(health.version) and values["files"] == str(health.num_files)
    assert values["small_files"] == str(health.num_small_files)
    assert values["versions_since_checkpoint"] == str(health.versions_since_checkpoint)
    assert values["deleted_rows_ratio"] == f"{health.deleted_rows_ratio:.1%}"


async def _browse(ws_url: str, base: str, url: str, cookie: str, token: str):
    import websockets

    async with websockets.connect(ws_url, max_size=None) as ws:
        counter = 0

        async def call(method: str, **params):
            nonlocal counter
            counter += 1
            await ws.send(json.dumps({"id": counter, "method": method, "params": params}))
            while True:
                message = json.loads(await ws.recv())
                if message.get("id") == counter:
                    assert "error" not in message, message
                    return message.get("result", {})

        await call("Network.enable")
        await call("Network.setCookie", name=cookie, value=token, url=base)
        await call("Page.enable")
        await call("Page.navigate", url=url)
        for _ in range(200):
            state = await call("Runtime.evaluate", expression="document.readyState", returnByValue=True)
            if state["result"]["value"] == "complete":
                break
            await asyncio_sleep(0.1)
        script = (
            "JSON.stringify(Object.fromEntries([...document.querySelectorAll('[data-k]')]"
            ".map(e => [e.dataset.k, e.textContent.trim()])))"
        )
        result = await call("Runtime.evaluate", expression=script, returnByValue=True)
        shot = await call("Page.captureScreenshot", format="png")
        return json.loads(result["result"]["value"]), shot["data"]


async def asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
