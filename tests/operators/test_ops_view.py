"""The ops view inside a real `airflow api-server` on 127.0.0.1 (plugin loaded from its entry
point): anonymous requests are refused, the numbers equal the engine's health(), pages render
with server-side SVG and no outside request; commits written by anyone (injection payloads in
every rendered field, commitInfo shapes of other engines) answer 200 and render inert, in the
HTML and in a real Chromium."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import time
import urllib.error
import urllib.request
import uuid
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.partitions import partition_directory
from deltaplane.engine.transaction import commit_metadata_scope
from deltaplane.operators.utils.runs import asset_uri
from tests.airflow_cli import api_server
from tests.browser import browser, chromium  # noqa: F401 (fixtures)
from tests.operators.conftest import DAGS, asset_events, dag_file, run_tasks
from tests.warm_python import fresh_json

pytestmark = [pytest.mark.slow, pytest.mark.airflow]


def payload(field: str) -> str:
    """Markup that, rendered unescaped, runs script (sets document.title and a global), adds
    elements and attributes, and breaks out of quoted attributes; ``field`` names where it was put."""
    return (
        f'\'"><script>document.title="pwned";window.__pwned="{field}"</script>'
        f"<img src=x onerror=\"document.title='pwned'\">"
        f"<a href=\"javascript:void(document.title='pwned')\">{field}</a>"
    )


# A directory name cannot hold "/": the URI's payload closes no element.
URI_PAYLOAD = '\'"><img src=x onerror="document.title=\'pwned\'"><svg onload="window.__pwned=1">'


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


def _raw_commit(table: str, info: object | None, *, add_txn: bool = False) -> int:
    """Append a commit file written by hand (as another engine would): ``info`` as its
    commitInfo, ``None`` for a commit without one."""
    version = DeltaTable(table).version + 1
    lines = []
    if info is not None:
        lines.append(json.dumps({"commitInfo": info}))  # NaN and Infinity as Python writes them
    if add_txn or info is None:
        lines.append(json.dumps({"txn": {"appId": f"foreign-{version}", "version": version}}))
    Path(table, "_delta_log", f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    return version


# commitInfo as Delta Spark, delta-rs, Databricks or a hostile writer may leave it.
FOREIGN_COMMIT_INFOS = [
    {"operation": "WRITE", "airflow": payload("airflow-as-string")},
    {"operation": "WRITE", "airflow": ["deltaplane_x", payload("airflow-as-list")]},
    {"operation": "WRITE", "airflow": 7},
    {"operation": "WRITE", "airflow": None},
    {"operation": "WRITE", "airflow": {"dag_id": None, "run_id": None}},
    {  # no operation; stamp fields of the wrong types
        "airflow": {
            "dag_id": payload("dag_id-foreign"),
            "run_id": {"nested": payload("run_id-nested")},
            "task_id": ["t"],
            "try_number": "2",
        }
    },
    {  # Delta Spark writes every metric as a string
        "operation": "WRITE",
        "operationMetrics": {"numFiles": "3", "numOutputRows": "12", "numOutputBytes": "1024"},
        "engineInfo": "Apache-Spark/3.5.0 Delta-Lake/3.2.0",
    },
    {"operation": 42, "operationMetrics": "garbage"},
    {"operation": ["MERGE"], "operationMetrics": ["numFiles", 3]},
    {"operation": {"name": "MERGE"}, "operationMetrics": None},
    {"operation": True, "operationMetrics": {"numFiles": True}},
    {
        "operation": "DELETE",
        "operationMetrics": {
            "numFiles": "abc",
            "numRemovedFiles": -1,
            "numOutputBytes": 1.5e300,
            "numDeletedRows": float("nan"),
            "numOutputRows": float("inf"),
            "numAddedFiles": "99999999999999999999999999999",
        },
        "airflow": {"dag_id": "d", "run_id": "r", "task_id": "t", "try_number": float("inf")},
    },
    {"operation": "DELETE", "inCommitTimestamp": "yesterday"},
    {"operation": "X" * 200_000, "airflow": {"dag_id": "D" * 100_000, "run_id": "r", "task_id": "t"}},
    {
        "operation": payload("operation"),
        "airflow": {"dag_id": "d", "run_id": "r", "task_id": "t", "try_number": 2.0},
    },
    None,  # a commit without commitInfo
]


def _stamped_table(path: str) -> None:
    """Commits by this engine whose Airflow stamp and partition values carry payloads."""
    stamp = {
        "airflow": {
            "dag_id": payload("dag_id"),
            "run_id": payload("run_id"),
            "task_id": payload("task_id"),
            "try_number": payload("try_number"),
        }
    }
    with commit_metadata_scope(stamp):
        write_table(path, pa.table({"id": [1, 2], "day": [payload("partition"), "ok"]}), partition_by=["day"])


def _foreign_table(path: str) -> None:
    write_table(path, pa.table({"id": [1]}))
    for info in FOREIGN_COMMIT_INFOS:
        _raw_commit(path, info)


GATE = {
    "success": False,
    "rows": 3,
    "evaluated": 2,
    "batch": payload("batch"),
    "quarantine": payload("quarantine"),
    "failed": [
        {
            "expectation": payload("expectation"),
            "kwargs": {"column": payload("kwargs"), "mostly": 0.9},
            "unexpected_count": 1,
            "unexpected_percent": 33.3,
            "examples": [payload("example"), 7],
        },
        "not an object",
        {"expectation": ["x"], "kwargs": "not an object", "unexpected_count": "many", "examples": "x"},
    ],
}


def _gate_xcom() -> None:
    """The ingest DAG of `stamped` leaves a rejected quality-gate summary with payloads in XCom
    (through a real `dag.test()`, as the gate operator would)."""
    run = run_tasks(
        "deltaplane_stamped_ingest",
        "import json",
        f"""
        @task(task_id="quality_gate")
        def quality_gate():
            return json.loads({json.dumps(GATE)!r})

        quality_gate()
        """,
    )
    assert run.state == "success", run.state


def _gated_history(table: str) -> None:
    """The ingest DAG of `gated`, as its gate and stages leave it: run 1's gate rejects batch
    b1 (XCom and quarantine), run 2's gate passes b2; then a Spark stage refuses b3, which is
    recorded only in the quarantine (its XCom gone: a cleared run), newer than the pass."""
    from deltaplane.engine.quarantine import move_to_quarantine, quarantine_location

    write_table(table, pa.table({"id": [1]}))
    for batch, passed in (("b1", False), ("b2", True)):
        where = quarantine_location(table, batch)
        result = {"success": passed, "rows": 4, "evaluated": 1, "batch": batch, "failed": []}
        if not passed:
            result.update(
                rejected=True,
                message=f"batch {batch} failed 1 of 1 expectations; quarantined at {where}",
                quarantine=where,
            )
        run = run_tasks(
            "deltaplane_gated_ingest",
            """
            import json
            from deltaplane.engine.quarantine import move_to_quarantine
            """,
            f"""
            @task(task_id="quality_gate")
            def quality_gate():
                result = json.loads({json.dumps(result)!r})
                if not result["success"]:
                    move_to_quarantine({where!r}, None, {{"batch": {batch!r}, "message": result["message"],
                                       "rejected_at": {int(time.time() * 1000)}}})
                return result

            quality_gate()
            """,
        )
        assert run.state == "success", run.state
        time.sleep(0.01)  # the next result's time is later
    move_to_quarantine(
        quarantine_location(table, "b3"),
        None,
        {"batch": "b3", "task": "stage", "message": "batch b3 rejected: column 'id' is not a long",
         "rejected_at": int(time.time() * 1000) + 1000},
    )  # fmt: skip


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
    hostile = work / URI_PAYLOAD
    stamped, foreign, unreadable = (
        str(hostile / "stamped"),
        str(hostile / "foreign"),
        str(work / "unreadable"),
    )
    _stamped_table(stamped)
    _foreign_table(foreign)
    # A torn commit (a writer that died without fsync): the table cannot be read at all.
    write_table(unreadable, pa.table({"id": [1]}))
    (Path(unreadable) / "_delta_log" / f"{1:020d}.json").write_text("  \n")
    _gate_xcom()
    trips_out = str(work / "trips_by_day")
    write_table(trips_out, pa.table({"id": [1, 2], "_source_version": [0, 1]}))
    gated = str(work / "gated")
    _gated_history(gated)
    config = work / "tables.yaml"
    config.write_text(  # JSON is YAML: every URI quoted as it is
        json.dumps(
            {
                "tables": {
                    "trips": {
                        "uri": trips,
                        "auto_optimize": {"min_small_files": 2},
                        "consumer": {"target": trips_out},
                    },
                    "gated": {"uri": gated, "ingest": {"landing": str(work / "landing")}},
                    "missing": {"uri": str(hostile / "nope")},
                    "stamped": {"uri": stamped},
                    "foreign": {"uri": foreign},
                    "unreadable": {"uri": unreadable},
                    "broken": {"uri": trips, "auto_optimize": {"min_small_files": 0}},  # invalid
                }
            }
        )
    )
    env = {
        **os.environ,
        "DELTAPLANE_CONFIG": str(config),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
    }
    with api_server(env, work / "api.log", Path(os.environ["AIRFLOW_HOME"])) as (base, password):
        status, body = request(f"{base}/auth/token", data={"username": "admin", "password": password})
        assert status == 201, body
        yield base, json.loads(body)["access_token"], trips


def test_anonymous_requests_are_refused(ops_server):
    base, _, _ = ops_server
    for path in (
        "/deltaplane/api/tables",
        "/deltaplane/api/tables/trips",
        "/deltaplane/",
        "/deltaplane/tables/trips",
        "/deltaplane/dags/deltaplane_trips_ingest",
        "/deltaplane/table?uri=x",
        "/deltaplane/static/ops.js",
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
    assert detail["commits"][-1]["dag_run"] == {
        "dag_id": "deltaplane_trips_ingest",
        "run_id": "r0",
        "task_id": "commit",
        "try_number": 1,
    }
    assert sum(b["num_files"] for b in detail["file_size_histogram"]) == health.num_files
    assert request(base + "/deltaplane/api/tables/nope", token=token)[0] == 404


def test_pages_render_svg_without_outside_requests(ops_server):
    base, token, trips = ops_server
    status, page = request(base + "/deltaplane/tables/trips", token=token)
    # 3 health-over-time lines, 2 commit charts, the file sizes
    assert status == 200 and page.count("<svg") == 6
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing fetched from elsewhere
    health = DeltaTable(trips).health(small_file_size=32 << 20)
    assert (
        f"<div class=v data-k=files>{health.num_files}</div>" in page
        and f"<div class=v data-k=version>{health.version}</div>" in page
    )
    run = _links(page)["/dags/deltaplane_trips_ingest/runs/r0"]
    assert run["target"] == "_top" and "deltaplane_trips_ingest.commit" in run["text"]
    assert _links(page)["/dags/deltaplane_trips_maintenance"]["target"] == "_top"
    status, page = request(base + "/deltaplane/", token=token)
    assert status == 200 and "trips" in page and f"data-k=files>{health.num_files}<" in page


def test_the_plugin_is_registered_with_its_nav_entry(ops_server):
    base, token, _ = ops_server
    status, body = request(base + "/api/v2/plugins", token=token)
    assert status == 200, body
    plugins = {p["name"]: p for p in json.loads(body)["plugins"]}
    views = {v["destination"]: v for v in plugins["deltaplane"]["external_views"]}
    # A top-level nav entry (no category: not under Browse) and a tab on every DAG.
    assert views["nav"]["href"] == "/deltaplane/" and views["nav"].get("category") is None
    assert views["dag"]["href"] == "/deltaplane/dags/{DAG_ID}" and views["dag"]["url_route"]
    status, _ = request(base + views["nav"]["icon"], token=token)
    assert status == 200


WHEN = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def test_every_rejected_batch_is_listed_with_its_quarantine_path(ops_server):
    """Run 1 rejected b1, run 2 passed b2, a stage then refused b3 (recorded only in the
    quarantine): the list says "rejected" (newer than the last pass), the page lists b3 and b1
    with their times, reasons and quarantine paths, and the pass between them."""
    base, token, _ = ops_server
    status, body = request(base + "/deltaplane/api/tables", token=token)
    rows = {r["name"]: r for r in json.loads(body)}
    gate = rows["gated"]["gate"]
    assert gate["status"] == "rejected" and gate["last_rejection"]["batch"] == "b3", gate
    assert gate["last_pass"]["batch"] == "b2" and (gate["rejected"], gate["rejected_since_pass"]) == (2, 1)
    status, body = request(base + "/deltaplane/api/tables/gated", token=token)
    history = json.loads(body)["gate_history"]
    assert [(h["batch"], h["success"]) for h in history] == [("b3", False), ("b2", True), ("b1", False)]
    b3, _, b1 = history
    assert b3["quarantine"].endswith("/_quarantine/b3") and "not a long" in b3["reason"]
    assert b1["quarantine"].endswith("/_quarantine/b1") and b1["run_id"] and b1["quarantine_found"]
    assert all(type(h["time"]) is int for h in history)
    status, page = request(base + "/deltaplane/tables/gated", token=token)
    parsed = assert_inert(page, [b1["quarantine"], b3["quarantine"], b3["reason"]])
    text = "".join(parsed.text)
    assert text.count("rejected") >= 3 and len(WHEN.findall(text)) >= 4
    run = _links(page)[f"/dags/deltaplane_gated_ingest/runs/{quote(b1['run_id'], safe='')}"]
    assert run["target"] == "_top"
    status, page = request(base + "/deltaplane/", token=token)
    assert status == 200
    row = next(r for r in page.split("<tr>") if '/deltaplane/tables/gated"' in r)
    assert "rejected" in row and "b3" in row and "last pass" in row


def test_tables_the_consumer_writes_are_listed(ops_server):
    base, token, _ = ops_server
    status, body = request(base + "/deltaplane/api/tables", token=token)
    rows = {r["name"]: r for r in json.loads(body)}
    target = rows["trips.consumer"]
    assert target["consumer_of"] == "trips" and target["version"] == 0 and target["rows"] == 2
    assert target["dags"] == ["deltaplane_trips_consumer"] and not target["auto_optimize"]["scheduled"]
    status, page = request(base + "/deltaplane/tables/trips.consumer", token=token)
    assert status == 200 and "written by the consumer of" in page
    status, page = request(base + "/deltaplane/", token=token)
    assert 'href="/deltaplane/tables/trips.consumer"' in page


def test_table_page_health_timeline_charts_and_shape(ops_server):
    base, token, trips = ops_server
    health = DeltaTable(trips).health(small_file_size=32 << 20)
    status, body = request(base + "/deltaplane/api/tables/trips", token=token)
    detail = json.loads(body)
    assert detail["dv_hidden_rows"] == health.num_deleted_rows and detail["rows"] == health.num_rows
    assert all(type(c["timestamp"]) is int for c in detail["commits"])
    assert detail["commits"][-1]["parameters"]  # what the writer said it did
    buckets = detail["file_size_buckets"]
    assert sum(b["num_files"] for b in buckets) == health.num_files
    assert all(
        b["min_bytes"] & (b["min_bytes"] - 1) == 0 and b["max_bytes"] == 2 * b["min_bytes"] - 1
        for b in buckets
    )
    assert {f["name"] for f in detail["schema"]} == {"id", "day"} and detail["partition_columns"] == ["day"]
    assert detail["properties"]["delta.enableDeletionVectors"] == "true"
    assert "deletionVectors" in detail["protocol"]["reader_features"]
    status, page = request(base + "/deltaplane/tables/trips", token=token)
    assert status == 200
    parsed = assert_inert(page, [])
    text = "".join(parsed.text)
    for title in ("Rows added per commit", "Data added per commit", "File sizes of the live files"):
        assert text.count(title) >= 2  # the SVG's <title> and its visible heading
    for label in ("rows added", "bytes added", "files", "file size (log scale"):
        assert label in text
    assert len(WHEN.findall(text)) >= len(detail["commits"])  # every commit has its time
    legend = re.findall(
        r'<span class=item data-color="(#[0-9a-f]{6})"><span class=swatch[^>]*></span>([^<]+)<', page
    )
    ops = dict((op, color) for color, op in legend)
    assert {"CREATE TABLE AS SELECT", "WRITE", "DELETE"} <= set(ops) and len(set(ops.values())) == len(ops)
    assert "deletionVectors" in text and "delta.enableDeletionVectors" in text


def test_a_batch_waiting_for_its_commit_is_shown_until_its_hold_is_released(ops_server):
    """A staged batch holds its files (VACUUM keeps them) until its commit: the table page says
    who holds them and since when, so a batch whose gate or commit never ran is seen."""
    from deltaplane.engine.commands.staged import plan_write, release_hold_of

    base, token, trips = ops_server
    note = payload("hold-note")
    schema = pa.schema([("id", pa.int64()), ("day", pa.string())])
    spec = plan_write(trips, schema, app_id="waiting-batch", app_version=1, hold=True, hold_note=note)
    try:
        status, body = request(base + "/deltaplane/api/tables/trips", token=token)
        waiting = json.loads(body)["waiting_batches"]
        assert [(w["note"], w["work"], w["live"]) for w in waiting] == [(note, "waiting-batch", True)]
        assert waiting[0]["expires"] > waiting[0]["since"] and waiting[0]["age_seconds"] >= 0
        status, page = request(base + "/deltaplane/tables/trips", token=token)
        assert status == 200 and "Batches waiting for their commit" in page
        assert_inert(page, [note])
    finally:
        release_hold_of(spec)
    status, body = request(base + "/deltaplane/api/tables/trips", token=token)
    assert json.loads(body)["waiting_batches"] == []
    status, page = request(base + "/deltaplane/tables/trips", token=token)
    assert "None: no staged batch is waiting" in page


def test_dag_tabs_and_asset_events_lead_to_the_table_page(ops_server):
    """The DAG tab's URL (Airflow fills in {DAG_ID}) and the link in a commit's Asset event
    extra both land on the table's page."""
    from deltaplane.operators.utils.runs import commit_event

    base, token, trips = ops_server

    def final(path):
        req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.geturl().removeprefix(base), response.read().decode()

    for dag in ("deltaplane_trips_maintenance", "deltaplane_trips_consumer", "deltaplane_gated_ingest"):
        where, _ = final(f"/deltaplane/dags/{dag}")
        assert where == f"/deltaplane/tables/{dag.split('_')[1]}", (dag, where)
    where, page = final("/deltaplane/dags/" + quote(URI_PAYLOAD, safe=""))
    assert where.startswith("/deltaplane/dags/") and "No Delta table for this DAG" in page
    assert_inert(page, [URI_PAYLOAD])
    extra = commit_event(DeltaTable(trips), 0)
    link = extra["payload"]["ops_view"]
    assert link.startswith("/plugin/deltaplane/deltaplane/table?uri=")
    where, page = final(link.removeprefix("/plugin/deltaplane"))  # what Airflow's frame loads
    assert where == "/deltaplane/tables/trips" and "<h1>trips</h1>" in page


# --- tables only Airflow knows of: the DAGs' tasks and the commits' Asset events ---------------


def _final(base: str, token: str, path: str) -> tuple[str, str]:
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as response:
        return response.geturl().removeprefix(base), response.read().decode()


def _row_at(base: str, token: str, uri: str) -> dict:
    status, body = request(base + "/deltaplane/api/tables", token=token)
    assert status == 200, body[-2000:]
    rows = [r for r in json.loads(body) if r["uri"] == uri]
    assert len(rows) == 1, [r["uri"] for r in json.loads(body)]
    return rows[0]


def test_a_dag_written_from_the_readme_shows_its_tables(ops_server, tmp_path, monkeypatch):
    """The README's DAG files, none of whose tables is in the tables file: after one good and
    one rejected batch of its ingest DAG, the list has the table with its numbers and the
    rejection, the tables of its other DAGs (never run) are there too, and each DAG's tab opens
    its table, or lists its tables when it names two."""
    from tests.operators.test_readme import _land, _load, readme_dags

    base, token, _ = ops_server
    lake = tmp_path / "lake"
    monkeypatch.setenv("LAKE", str(lake))
    sources = readme_dags()
    files = [DAGS / f"readme_{name}.py" for name in sources]
    try:
        ingest = _load("trips_ingest", sources["trips_ingest"]).dag
        for name in ("trips_maintenance", "trips_consumer"):  # parsed by the runs below, never run
            (DAGS / f"readme_{name}.py").write_text(sources[name])
        _land(lake, "good", [(1, 5.0), (2, 6.0), (3, 7.0)])
        assert ingest.test().state == "success"
        _land(lake, "bad", [(4, -1.0)])  # a negative fare: the gate rejects the batch
        assert ingest.test().state == "failed"

        trips = str(lake / "trips")
        row = _row_at(base, token, trips)
        health = DeltaTable(trips).health(small_file_size=32 << 20)
        assert (row["version"], row["rows"], row["files"]) == (health.version, 3, health.num_files)
        assert row["configured"] is False and row["label"] == "trips"
        assert {"trips_ingest", "trips_maintenance", "trips_copy"} <= set(row["dags"])
        gate = row["gate"]  # the README's gate and stage tasks are the table's gate history
        assert gate["status"] == "rejected" and gate["last_pass"] is not None, gate
        assert row["auto_optimize"]["scheduled"]  # trips_maintenance runs auto-optimize on it
        copy = _row_at(base, token, str(lake / "trips_copy"))  # a DAG's table before any run
        assert "error" in copy and copy["dags"] == ["trips_copy"]
        status, page = request(base + "/deltaplane/", token=token)
        assert status == 200 and f'href="/deltaplane/table?uri={quote(trips, safe="")}"' in page

        for dag in ("trips_ingest", "trips_maintenance"):
            where, page = _final(base, token, f"/deltaplane/dags/{dag}")
            assert where == f"/deltaplane/table?uri={quote(trips, safe='')}", (dag, where)
            assert "<h1>trips</h1>" in page and f"data-k=version>{health.version}<" in page
        where, page = _final(base, token, "/deltaplane/dags/trips_copy")  # two tables: their list
        assert where == "/deltaplane/dags/trips_copy" and "<h1>Delta tables of DAG trips_copy</h1>" in page
        links = set(_links(page))
        assert {
            f"/deltaplane/table?uri={quote(str(lake / t), safe='')}" for t in ("trips", "trips_copy")
        } <= links
        # The link in the commit's Asset event opens the same page.
        payloads = [e.get("payload") or {} for e in asset_events(asset_uri(trips))]
        link = next(p["ops_view"] for p in payloads if p.get("table") == trips)
        where, page = _final(base, token, link.removeprefix("/plugin/deltaplane"))
        assert "<h1>trips</h1>" in page
        status, body = request(base + f"/deltaplane/api/table?uri={quote(trips, safe='')}", token=token)
        assert status == 200 and json.loads(body)["commits"][0]["dag_run"]["dag_id"] == "trips_ingest"
    finally:
        for file in files:
            file.unlink(missing_ok=True)


def test_tables_named_by_template_or_on_s3_with_a_connection_are_found(
    ops_server, tmp_path, monkeypatch, s3_server
):
    """A task whose table_uri is a template counts as the URI Airflow rendered for its run; a
    task on S3 names its connection, and the view opens the table with it."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    base, token, _ = ops_server
    conn_id = f"ops_lake_{uuid.uuid4().hex[:8]}"
    connection = {
        "conn_type": "deltaplane",
        "host": s3_server.endpoint,
        "login": "test",
        "password": "test",
        "extra": json.dumps({"region": "us-east-1"}),
    }
    with create_session() as session:  # where the api-server reads it
        session.add(Connection(conn_id=conn_id, **connection))
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))  # where the run reads it
    remote = s3_server.uri("ops-remote")
    write_table(remote, pa.table({"id": [1, 2, 3]}), storage_options=s3_server.options())
    local = str(tmp_path / "templated")
    write_table(local, pa.table({"id": [1]}))
    dag_id = f"ops_templated_{uuid.uuid4().hex[:8]}"
    path = DAGS / f"{dag_id}.py"
    path.write_text(
        dag_file(
            dag_id,
            "from deltaplane.operators import DeltaCheckpointOperator",
            f"""
            DeltaCheckpointOperator(task_id="local", table_uri="{{{{ params.lake }}}}/templated")
            DeltaCheckpointOperator(task_id="remote", table_uri={remote!r}, deltaplane_conn_id={conn_id!r})
            """,
            dag_args=f"params={{'lake': {str(tmp_path)!r}}}",
        )
    )
    try:
        spec = importlib.util.spec_from_file_location(dag_id, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.dag.test().state == "success"
        row = _row_at(base, token, remote)
        assert "error" not in row, row
        assert (row["version"], row["rows"], row["dags"]) == (0, 3, [dag_id])
        row = _row_at(base, token, local)
        assert "error" not in row and row["dags"] == [dag_id], row
        where, _ = _final(base, token, f"/deltaplane/dags/{dag_id}")  # both tables: the list
        assert where == f"/deltaplane/dags/{dag_id}"
    finally:
        path.unlink()


def test_the_view_works_without_a_tables_file(airflow_db, tmp_path, monkeypatch):
    """No tables file (a team that writes its DAGs by hand): the list says so and shows what
    Airflow knows, instead of failing."""
    from fastapi.testclient import TestClient

    from deltaplane.operators.plugins.ops_view import create_app

    monkeypatch.setenv("DELTAPLANE_CONFIG", str(tmp_path / "no-such-tables.yaml"))
    client = TestClient(create_app(authenticated=False))
    response = client.get("/api/tables")
    assert response.status_code == 200, response.text[-2000:]
    response = client.get("/")
    assert response.status_code == 200 and "no-such-tables.yaml" in response.text
    assert_inert(response.text, ["no such file"])


def test_a_process_that_loads_the_plugin_builds_no_view_until_a_request(airflow_db, tmp_path, monkeypatch):
    """Airflow loads plugins in every task process (macros, listeners): the plugin must not build
    the ops view there. The app builds itself on its first request, as the api-server's are."""
    from fastapi.testclient import TestClient

    from deltaplane.operators.plugins.plugin import DeltaplanePlugin, OpsViewApp

    loaded = fresh_json(
        [
            "-c",
            "import json, sys\nimport deltaplane.operators.plugins.plugin\n"
            "print(json.dumps([m for m in ('fastapi', 'deltaplane.operators.plugins.ops_view') if m in sys.modules]))",
        ]
    )
    assert loaded == []
    assert isinstance(DeltaplanePlugin.fastapi_apps[0]["app"], OpsViewApp)
    monkeypatch.setenv("DELTAPLANE_CONFIG", str(tmp_path / "no-such-tables.yaml"))
    client = TestClient(OpsViewApp(authenticated=False))
    for _ in range(2):  # built once, then the same app answers
        response = client.get("/api/tables")
        assert response.status_code == 200, response.text[-2000:]


# --- data from anyone: escaped, typed, never a 500 ----------------------------------------------


class _Page(HTMLParser):
    """Every element with its attributes, and the text a reader sees (entities decoded)."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self._open_a: list[dict] = []
        self.links: list[dict] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag == "a":
            link = {**attributes, "text": ""}
            self.links.append(link)
            self._open_a.append(link)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        if tag == "a" and self._open_a:
            self._open_a.pop()

    def handle_data(self, data):
        self.text.append(data)
        for link in self._open_a:
            link["text"] += data


def _links(page: str) -> dict[str, dict]:
    return {link.get("href", ""): link for link in _Page(page).links}


# What the view's own templates emit; an element of any other kind came from data.
OWN_ELEMENTS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "a", "b", "code", "span",
    "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "svg", "line", "rect", "text", "div", "br", "wbr",
    "script", "h3", "polyline", "circle",
}  # fmt: skip
# The one script of the view: its own file, loaded from the Airflow server.
OWN_SCRIPT = '<script src="/deltaplane/static/ops.js" defer></script>'
# hrefs built from data are URL-quoted: nothing but unreserved characters, "%" and "/" (and the
# view's own "?uri=" before a quoted URI).
QUOTED_HREF = re.compile(r"[A-Za-z0-9%/._~-]*(\?uri=[A-Za-z0-9%._~-]*)?")


def assert_inert(page: str, shown: list[str]) -> _Page:
    """No element or attribute of ``page`` comes from a payload, and every string of ``shown``
    is there as text (escaped, so the browser shows it instead of running it)."""
    assert page.count(OWN_SCRIPT) == 1
    page = page.replace(OWN_SCRIPT, "")
    parsed = _Page(page)
    for tag, attributes in parsed.elements:
        assert tag in OWN_ELEMENTS and tag != "script", (tag, attributes)
        for name, value in attributes.items():
            assert not name.startswith("on") and name not in ("src", "srcdoc", "formaction"), (tag, name)
            if name == "href":
                assert QUOTED_HREF.fullmatch(value), value
            else:
                assert "pwned" not in value and "<" not in value and "javascript:" not in value.lower()
    # The markup itself: escaped data reads "&lt;script", a payload that got through "<script".
    assert "<script" not in page.lower()
    text = "".join(parsed.text)
    for expected in shown:
        assert expected in text, expected[:200]
    return parsed


def test_the_api_answers_200_with_typed_rows_for_foreign_commit_infos(ops_server):
    base, token, _ = ops_server
    status, body = request(base + "/deltaplane/api/tables", token=token)
    assert status == 200, body[-2000:]
    rows = {r["name"]: r for r in json.loads(body)}
    assert "error" in rows["unreadable"] and "error" in rows["missing"]
    # One invalid table is a row with its error; the other tables are served as usual.
    assert "auto_optimize.min_small_files" in rows["broken"]["error"] and "version" in rows["trips"]
    assert URI_PAYLOAD in rows["missing"]["error"]  # JSON carries the data as it is
    assert rows["foreign"]["version"] == len(FOREIGN_COMMIT_INFOS)
    status, body = request(base + "/deltaplane/api/tables/foreign", token=token)
    assert status == 200, body[-2000:]
    detail = json.loads(body, parse_constant=lambda c: pytest.fail(f"non-JSON number {c} in the API"))
    commits = detail["commits"]
    assert [c["version"] for c in commits] == list(range(len(FOREIGN_COMMIT_INFOS), -1, -1))
    for c in commits:
        assert isinstance(c["version"], int)
        assert c["timestamp"] is None or type(c["timestamp"]) is int
        assert c["operation"] is None or (isinstance(c["operation"], str) and len(c["operation"]) <= 1000)
        for k in ("files_added", "files_removed", "rows_added", "rows_removed", "bytes_added"):
            assert type(c[k]) is int and c[k] >= 0, (k, c)
        run = c["dag_run"]
        assert run is None or set(run) == {"dag_id", "run_id", "task_id", "try_number"}
        if run:
            assert all(run[k] is None or isinstance(run[k], str) for k in ("dag_id", "run_id", "task_id"))
            assert run["try_number"] is None or type(run["try_number"]) is int
    by_version = {c["version"]: c for c in commits}

    def row(i):  # the commit of FOREIGN_COMMIT_INFOS[i]
        return by_version[i + 1]

    spark = row(6)
    assert (spark["files_added"], spark["rows_added"], spark["bytes_added"]) == (3, 12, 1024)
    assert all(row(i)["dag_run"] is None for i in range(5))  # "airflow" not an object, or empty
    odd = row(5)
    assert odd["operation"] is None and odd["dag_run"]["try_number"] == 2
    assert odd["dag_run"]["dag_id"] == payload("dag_id-foreign") and odd["dag_run"]["run_id"] is None
    assert row(7)["operation"] == "42" and [row(i)["operation"] for i in (8, 9, 10)] == [None] * 3
    assert row(11)["dag_run"]["try_number"] is None and row(11)["rows_removed"] == 0
    assert row(11)["files_added"] == 0  # "abc", and a count beyond a long
    assert type(row(12)["timestamp"]) is int  # "yesterday": the commit file's time instead
    assert row(14)["operation"] == payload("operation") and row(14)["dag_run"]["try_number"] == 2
    status, page = request(base + "/deltaplane/tables/foreign", token=token)
    assert status == 200, page[-2000:]
    assert_inert(page, [payload("operation"), payload("dag_id-foreign"), URI_PAYLOAD])
    assert len(page) < 200_000  # huge strings are cut
    for name in ("unreadable", "missing", "broken"):
        status, page = request(base + f"/deltaplane/tables/{name}", token=token)
        assert status == 200, page[-2000:]
        assert_inert(page, [URI_PAYLOAD] if name == "missing" else [])


def test_every_rendered_field_is_escaped(ops_server):
    base, token, _ = ops_server
    status, body = request(base + "/deltaplane/api/tables/stamped", token=token)
    assert status == 200, body[-2000:]
    detail = json.loads(body)
    assert URI_PAYLOAD in detail["uri"]
    run = detail["commits"][0]["dag_run"]
    assert run["dag_id"] == payload("dag_id") and run["try_number"] is None  # not a number: dropped
    gate = detail["quality_gate"]
    assert gate["success"] is False and gate["failed"][0]["expectation"] == payload("expectation")
    status, page = request(base + "/deltaplane/tables/stamped", token=token)
    assert status == 200, page[-2000:]
    parsed = assert_inert(
        page,
        [
            URI_PAYLOAD,
            payload("dag_id"),
            payload("run_id"),
            payload("task_id"),
            partition_directory(["day"], [payload("partition")]),
            payload("expectation"),
            "column=" + payload("kwargs"),
            payload("example"),
            payload("quarantine"),
            payload("batch"),
        ],
    )
    assert "try_number" not in "".join(parsed.text)  # the stamp's try_number was not a number
    href = f"/dags/{quote(payload('dag_id'), safe='')}/runs/{quote(payload('run_id'), safe='')}"
    link = {link["href"]: link for link in parsed.links}[href]
    assert link["target"] == "_top" and payload("dag_id") in link["text"]
    gate_runs = [
        link for link in parsed.links if link["href"].startswith("/dags/deltaplane_stamped_ingest/runs/")
    ]
    assert gate_runs and all(link["target"] == "_top" for link in gate_runs)
    status, page = request(base + "/deltaplane/", token=token)
    assert status == 200, page[-2000:]
    assert_inert(page, [URI_PAYLOAD])  # in the error row of `missing`
    assert "rejected" in page


def test_fields_the_config_cannot_carry_are_escaped_too():
    """Table names are letters, digits and _ in the configuration; the pages escape them (and
    the rest of a summary) all the same, should a name ever come from elsewhere."""
    from deltaplane.operators.plugins.ops_view import detail_page, list_page

    name = payload("name")
    error_row = {"name": name, "uri": payload("uri"), "error": payload("error")}
    for response in (list_page([error_row]), detail_page(error_row)):
        page = response.body.decode()
        parsed = assert_inert(page, [name, payload("error")])
        if "<h1>Delta tables</h1>" in page:
            assert f"/deltaplane/tables/{quote(name, safe='')}" in {link["href"] for link in parsed.links}
    summary = {
        "name": name,
        "uri": payload("uri"),
        "version": 3,
        "files": 2,
        "bytes": 2048,
        "rows": 5,
        "small_files": 2,
        "small_file_size": 1024,
        "deleted_rows_ratio": 0.25,
        "versions_since_checkpoint": 4,
        "last_checkpoint_version": None,
        "last_optimize": None,
        "last_vacuum": None,
        "auto_optimize": {"action": payload("action"), "reasons": [payload("reason")], "scheduled": False},
        "quality_gate": None,
        "timestamp": 1,
        "consumer_of": payload("source"),
        "dv_hidden_rows": 1,
        "files_with_dvs": 1,
        "gate": {
            "status": "rejected",
            "last_pass": None,
            "last_rejection": {"time": 2, "batch": payload("batch")},
            "rejected": 1,
            "rejected_since_pass": 1,
            "errors": [payload("quarantine-error")],
        },
        "gate_history": [
            {
                "dag_id": payload("gate-dag"),
                "run_id": payload("gate-run"),
                "task_id": payload("gate-task"),
                "time": 2,
                "reason": payload("gate-reason"),
                "success": False,
                "rows": 1,
                "batch": payload("batch"),
                "quarantine": payload("quarantine"),
                "failed": [],
            }
        ],
        "schema": [
            {"name": payload("column"), "type": {"type": payload("type")}, "nullable": None, "comment": None}
        ],
        "partition_columns": [payload("pcol")],
        "properties": {payload("key"): payload("value")},
        "description": payload("description"),
        "created_time": None,
        "protocol": {
            "min_reader_version": 3,
            "min_writer_version": 7,
            "reader_features": [payload("rf")],
            "writer_features": [payload("wf")],
        },
        "file_size_buckets": [{"min_bytes": 1024, "max_bytes": 2047, "num_files": 2}],
        "dags": [payload("dag")],
        "partitions": [
            {
                "partition": payload("partition"),
                "files": 2,
                "bytes": 2048,
                "small_files": 2,
                "rows": 5,
                "dv_hidden_rows": 1,
                "deleted_rows_ratio": 0.25,
            }
        ],
        "file_size_histogram": [{"min_bytes": 0, "num_files": 2, "bytes": 2048}],
        "waiting_batches": [
            {"note": payload("hold"), "work": payload("hold-work"), "since": 1, "expires": 2,
             "age_seconds": 7200, "live": True},
            {"note": None, "work": None, "since": 1, "expires": 2, "age_seconds": 60, "live": False},
        ],
        "commits": [
            {
                "version": 3,
                "timestamp": 1,
                "operation": payload("op"),
                "files_added": 1,
                "files_removed": 0,
                "rows_added": 1,
                "rows_removed": 0,
                "bytes_added": 10,
                "dag_run": {"dag_id": payload("d"), "run_id": payload("r"), "task_id": None, "try_number": 1},
                "parameters": {payload("pk"): payload("pv")},
            }
        ],
    }
    point = {"version": 3, "timestamp": 1, "num_files": 2, "num_small_files": 2, "size_bytes": 9}
    point.update({"deleted_rows_ratio": 0.25, "versions_since_checkpoint": 4})
    summary.update(
        {
            "status": "failing",
            "status_label": payload("status"),
            "urgency": 3,
            "score": 1.5,
            "next_action": {"kind": payload("kind"), "reason": payload("next")},
            "plan": [{"kind": payload("plan-kind"), "run": True, "score": 1.5, "reason": payload("plan")}],
            "failed_runs": [{"dag_id": payload("failed-dag"), "run_id": payload("failed-run"), "when": 1}],
            "rewritten_today": 10,
            "cpu_seconds_today": 1.5,
            "schedule": payload("schedule"),
            "health_history": [
                {**point, "operation": None, "maintenance": False},
                {**point, "operation": payload("maint-op"), "maintenance": True},
            ],
            "maintenance_runs": [
                {
                    "version": 3,
                    "timestamp": 1,
                    "operation": payload("maint-op"),
                    "files": [2, 1],
                    "small_files": [2, 0],
                    "deleted_rows_ratio": [0.25, 0.0],
                    "bytes_written": 10,
                    "dag_run": {"dag_id": payload("maint-dag"), "run_id": payload("maint-run"), "task_id": None},
                }
            ],
        }
    )
    page = detail_page(summary).body.decode()
    shown = ("uri", "action", "reason", "dag", "partition", "op", "d", "source", "quarantine-error")
    shown += ("status", "kind", "next", "plan-kind", "plan", "failed-dag", "failed-run", "schedule", "maint-op")
    shown += ("maint-dag",)
    shown += ("gate-run", "gate-task", "gate-reason", "batch", "quarantine", "column", "pcol", "description")
    shown += ("key", "value", "rf", "wf", "pk", "pv", "hold", "hold-work")
    assert_inert(page, [name, *map(payload, shown)])
    page = list_page([summary]).body.decode()
    assert_inert(page, [name, payload("action"), payload("batch"), payload("source"), payload("next")])


def test_any_commit_info_becomes_a_typed_row():
    """The one place foreign commitInfo is read: any JSON object (and junk that is not one)
    gives a row of typed fields that serializes as strict JSON, and never raises."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from deltaplane.operators.plugins.ops_view import commit_row

    leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
    values = st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=20,
    )
    known = st.sampled_from(
        [
            "operation",
            "operationMetrics",
            "airflow",
            "version",
            "timestamp",
            "inCommitTimestamp",
            "numFiles",
            "numOutputRows",
            "numOutputBytes",
            "dag_id",
            "run_id",
            "task_id",
            "try_number",
        ]
    )
    infos = st.dictionaries(known | st.text(max_size=10), values, max_size=8)
    nested = st.fixed_dictionaries(
        {
            "operationMetrics": st.dictionaries(known, values, max_size=6),
            "airflow": st.dictionaries(known, values),
        }
    )

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(info=infos | nested | values)
    def check(info):
        row = commit_row(info)
        json.dumps(row, allow_nan=False)
        assert row["version"] is None or type(row["version"]) is int
        assert row["timestamp"] is None or type(row["timestamp"]) is int
        assert row["operation"] is None or type(row["operation"]) is str
        for k in ("files_added", "files_removed", "rows_added", "rows_removed", "bytes_added"):
            assert type(row[k]) is int and row[k] >= 0

    check()
    huge = commit_row({"version": 3, "operation": "x" * 10**6, "airflow": {"dag_id": "y" * 10**6}})
    assert len(huge["operation"]) <= 1000 and len(huge["dag_run"]["dag_id"]) <= 1000
    assert commit_row({"version": 1, "operationMetrics": {"numFiles": "7"}})["files_added"] == 7
    assert commit_row({"version": 1, "operationMetrics": {"numFiles": 1e300}})["files_added"] == 0
    assert commit_row({"version": 1, "operationMetrics": {"numFiles": math.nan}})["files_added"] == 0


# --- a real browser --------------------------------------------------------------------------


def test_in_a_real_browser(ops_server, browser):  # noqa: F811 (the fixture)
    """Headless Chromium (Debian's `chromium`) opens the table page with the session of a user
    who logged in through Airflow's auth endpoint; the numbers it renders equal health(); the
    screenshot is kept as a test artifact. Pages with payloads in every field run none of them:
    the document's title and globals are what the view set, read back over DevTools."""
    import asyncio
    import base64

    from airflow.api_fastapi.core_api.security import COOKIE_NAME_JWT_TOKEN

    base, token, trips = ops_server
    artifacts = Path(
        os.environ.get("DELTAPLANE_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
    )
    artifacts.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(f"http://127.0.0.1:{browser}/json", timeout=10) as r:
        page = next(t for t in json.load(r) if t["type"] == "page")
    seen = asyncio.run(
        _browse(
            page["webSocketDebuggerUrl"],
            base,
            [f"{base}/deltaplane/tables/{name}" for name in ("trips", "stamped", "foreign")]
            + [f"{base}/deltaplane/"],
            COOKIE_NAME_JWT_TOKEN,
            token,
        )
    )
    trips_page, stamped, foreign, index = seen
    for name, shot in (("trips", trips_page["png"]), ("stamped", stamped["png"])):
        out = artifacts / f"ops-view-{name}.png"
        out.write_bytes(base64.b64decode(shot))
        assert out.stat().st_size > 10_000
    values = trips_page["values"]
    health = DeltaTable(trips).health(small_file_size=32 << 20)
    assert values["version"] == str(health.version) and values["files"] == str(health.num_files)
    assert values["small_files"] == str(health.num_small_files)
    assert values["versions_since_checkpoint"] == str(health.versions_since_checkpoint)
    assert values["deleted_rows_ratio"] == f"{health.deleted_rows_ratio:.1%}"
    for name, seen_page in (("stamped", stamped), ("foreign", foreign), ("Delta tables", index)):
        assert seen_page["title"] == name, seen_page  # no payload set the title
        assert seen_page["pwned"] == "undefined", seen_page  # nor the global
        assert seen_page["foreign_elements"] == 0, seen_page
    assert 'window.__pwned="run_id"' in stamped["text"]  # the payload is on the page, as text
    assert 'window.__pwned="operation"' in foreign["text"]


async def _browse(ws_url: str, base: str, urls: list[str], cookie: str, token: str) -> list[dict]:
    import asyncio

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

        async def evaluate(expression: str):
            result = await call("Runtime.evaluate", expression=expression, returnByValue=True)
            return result["result"].get("value")

        await call("Network.enable")
        await call("Network.setCookie", name=cookie, value=token, url=base)
        await call("Page.enable")
        seen = []
        for url in urls:
            await call("Page.navigate", url=url)
            # Loaded, not "probably loaded by now": on a slow machine the checks below must not
            # run on the previous page.
            deadline = time.monotonic() + 60
            while not (
                await evaluate("location.href") == url and await evaluate("document.readyState") == "complete"
            ):
                assert time.monotonic() < deadline, f"{url} did not load within 60 s"
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)  # event handlers a payload might have added get their chance
            values = await evaluate(
                "JSON.stringify(Object.fromEntries([...document.querySelectorAll('[data-k]')]"
                ".map(e => [e.dataset.k, e.textContent.trim()])))"
            )
            shot = await call("Page.captureScreenshot", format="png")
            seen.append(
                {
                    "url": url,
                    "title": await evaluate("document.title"),
                    "pwned": await evaluate("String(window.__pwned)"),
                    "foreign_elements": await evaluate(
                        "document.querySelectorAll('script:not([src=\"/deltaplane/static/ops.js\"]), img, iframe, [onerror], [onload]').length"
                    ),
                    "text": await evaluate("document.body.innerText"),
                    "values": json.loads(values),
                    "png": shot["data"],
                }
            )
        return seen


def test_a_clustered_table_is_clustered_not_compacted(airflow_db, tmp_path):
    """OPTIMIZE of a liquid-clustered table clusters it (zorder_by or not), and the ops view says
    so, as the maintenance DAG's decision does."""
    from deltaplane.operators.factory.config import TableConfig
    from deltaplane.operators.plugins.ops_view import Entry, table_summary

    rows = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array(range(10), pa.int64())})
    actions = {}
    for name, cluster_by, zorder_by in (("clustered", ["id"], ["v"]), ("plain", None, ["v"])):
        uri = str(tmp_path / name)
        dt = DeltaTable.create(uri, rows.schema, cluster_by=cluster_by)
        for _ in range(60):  # enough small files for auto-optimize to act
            dt.append(rows)
        config = TableConfig(uri=uri, zorder_by=zorder_by)
        actions[name] = table_summary(Entry(name, config, ()))["auto_optimize"]["action"]
    assert actions == {"clustered": "cluster", "plain": "zorder"}
