"""The ops view as an ops person meets it: a real `airflow api-server` (its own AIRFLOW_HOME,
SimpleAuthManager, 127.0.0.1, stopped by PID) whose tables were filled by the factory's real
DAGs (`airflow dags test`: a batch that passes the quality gate and is committed, a batch the gate
rejects into the quarantine, maintenance, the consumer), and headless Chromium driven over the
DevTools protocol: log in through the login form, open "Delta tables" from the navigation, open
the table, follow a DAG-run link (it must leave the frame: no Airflow inside Airflow), open the
table from its DAG's "Delta table" tab and from the link in an Asset event's extra. The table
page is checked in the DOM (times, chart titles and axes, distinct operation colours, the rejected
batch and its quarantine path) and saved as a screenshot under test-artifacts/."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from tests.airflow_cli import AirflowCLI, api_server
from tests.browser import browser, chromium  # noqa: F401 (fixtures)
from tests.readme import python_blocks

pytestmark = [pytest.mark.external, pytest.mark.slow, pytest.mark.airflow]

ROOT = Path(__file__).resolve().parents[2]
WHEN = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")

# Tables with the long names real lakes have, each with a batch a stage rejected.
REGIONS = ("emea", "apac", "americas", "global", "eu_west", "us_east", "latam")
LONG_NAMES = [f"customer_orders_enriched_{k}_snapshot_{r}" for k in ("daily", "hourly") for r in REGIONS]
WIDTHS = ((1400, 900), (1280, 800))  # laptop windows the list must fit

CONFIG = """
    tables:
      trips:
        uri: lake/trips
        partition_by: [day]
        retention_hours: 0
        enforce_retention: false
        auto_optimize: {min_small_files: 2}
        ingest: {landing: landing, format: csv, staging: staging}
        quality:
          expectations:
            - {expectation: expect_column_values_to_not_be_null, kwargs: {column: id}}
        consumer: {target: lake/trips_copy}
      streaming:
        uri: lake/streaming
        schedules: {maintenance: health}
        maintenance: {min_small_files: 3}
      capped:
        uri: lake/capped
        maintenance: {min_small_files: 3, max_bytes_rewritten_per_day: 1KB}
    """


def _land(landing: Path, start: int, *, bad: bool = False) -> None:
    landing.mkdir(parents=True, exist_ok=True)
    for part in range(2):
        rows = [f"{'' if bad and i == 1 else start + part * 10 + i},2026-11-0{1 + i % 2}" for i in range(10)]
        (landing / f"b{start}-{part}.csv").write_text("id,day\n" + "\n".join(rows) + "\n")


def _long_table(path: Path) -> None:
    """A table of a few commits and a batch a stage refused (its record in the quarantine)."""
    import pyarrow as pa

    from deltaplane.engine import write_table
    from deltaplane.engine.quarantine import move_to_quarantine, quarantine_location

    for day in range(3):
        write_table(str(path), pa.table({"id": [day], "day": [f"2026-11-0{day + 1}"]}), mode="append")
    batch = f"landing-2026-11-20T11-00-00-{path.name}-part-0001.csv"
    move_to_quarantine(
        quarantine_location(str(path), batch),
        None,
        {"batch": batch, "task": "stage", "message": f"batch {batch} rejected: column 'id' is not a long",
         "rejected_at": 1795690000000},
    )  # fmt: skip


def _small_appends(path: Path, n: int, start: int = 0) -> None:
    import pyarrow as pa

    from deltaplane.engine import write_table

    for i in range(start, start + n):
        write_table(str(path), pa.table({"id": [i], "day": ["2026-11-20"]}), mode="append")


def _land_readme(lake: Path, name: str, rows: list[tuple[int, float]]) -> None:
    folder = lake / "landing" / "trips"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.csv").write_text("trip_id,fare\n" + "".join(f"{i},{fare}\n" for i, fare in rows))


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    """An Airflow of its own with the factory's DAGs run for real; yields (base URL, password,
    table path)."""
    work = tmp_path_factory.mktemp("ops-ui")
    home, dags = work / "home", work / "dags"
    dags.mkdir()
    config = work / "tables.yaml"
    config.write_text(textwrap.dedent(CONFIG) + "".join(f"  {n}:\n    uri: lake/{n}\n" for n in LONG_NAMES))
    for name in LONG_NAMES:
        _long_table(work / "lake" / name)
    _small_appends(work / "lake" / "streaming", 8)  # small files past its threshold: needs compaction
    _small_appends(work / "lake" / "capped", 4)
    from deltaplane.engine import DeltaTable

    DeltaTable(str(work / "lake" / "capped")).optimize()  # today's budget (1 KB) spent...
    _small_appends(work / "lake" / "capped", 4, start=10)  # ...and compaction due again
    (dags / "deltaplane_tables.py").write_text((ROOT / "dags" / "deltaplane_tables.py").read_text())
    for block in python_blocks(dag_files=True, spark=False):  # the README's DAG files, as a user copies them
        (dags / block.source.splitlines()[0].removeprefix("# dags/")).write_text(block.source)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "DELTAPLANE_CONFIG": str(config),
        "LAKE": str(work / "readme-lake"),  # the README DAGs' lake
    }
    with AirflowCLI(env, work / "cli.log") as airflow_cli:  # one process: Airflow imported once
        airflow_cli("db", "migrate")
        airflow_cli("dags", "reserialize")
        for hour, start in ((9, 0), (10, 100)):  # two batches pass: CREATE TABLE, then WRITE
            _land(work / "landing", start)
            airflow_cli("dags", "test", "deltaplane_trips_ingest", f"2026-11-20T{hour:02d}:00:00+00:00")
        _land(work / "landing", 200, bad=True)  # a null id: the gate rejects the batch
        airflow_cli("dags", "test", "deltaplane_trips_ingest", "2026-11-20T11:00:00+00:00", check=False)
        assert any((work / "lake" / "trips" / "_quarantine").iterdir())
        airflow_cli("dags", "test", "deltaplane_trips_consumer", "2026-11-20T12:30:00+00:00")
        airflow_cli("dags", "test", "deltaplane_trips_maintenance", "2026-11-20T13:00:00+00:00")
        readme_lake = work / "readme-lake"
        _land_readme(readme_lake, "good", [(1, 5.0), (2, 6.5)])
        airflow_cli("dags", "test", "trips_ingest", "2026-11-20T14:00:00+00:00")
        _land_readme(readme_lake, "bad", [(3, -2.0)])  # a negative fare: the README's gate rejects it
        airflow_cli("dags", "test", "trips_ingest", "2026-11-20T15:00:00+00:00", check=False)
        assert any((readme_lake / "trips" / "_quarantine").iterdir())
    with api_server(env, work / "api.log", home) as (base, password):
        yield base, password, str(work / "lake" / "trips"), str(readme_lake / "trips")


class Navigating(Exception):
    """The page navigated while an expression was being evaluated: ask again on the new page."""


class Tab:
    """One page of Chromium over the DevTools protocol, clicked and typed into like a person."""

    def __init__(self, ws):
        self.ws, self.counter = ws, 0

    async def call(self, method: str, **params):
        self.counter += 1
        await self.ws.send(json.dumps({"id": self.counter, "method": method, "params": params}))
        while True:
            message = json.loads(await self.ws.recv())
            if message.get("id") == self.counter:
                error = message.get("error", {}).get("message", "")
                if "navigated or closed" in error or "context was destroyed" in error:
                    raise Navigating(error)
                assert "error" not in message, message
                return message.get("result", {})

    async def js(self, expression: str):
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    async def wait(self, expression: str, what: str, seconds: float = 60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                value = await self.js(
                    f"(() => {{ try {{ return Boolean({expression}); }} catch (e) {{ return false; }} }})()"
                )
            except Navigating:
                value = False  # a page in flight (a login redirect, a link followed): look again
            if value:
                return value
            await asyncio.sleep(0.2)
        html = await self.js("document.documentElement.outerHTML.slice(0, 3000)")
        raise AssertionError(f"timed out waiting for {what} at {await self.js('location.href')}: {html}")

    async def open(self, url: str):
        """Navigate to ``url`` and wait until the tab's document is at its path: until then the
        page before is still there, and a click meant for the new page would land on it (the
        same Delta-table tab link is on every DAG's page)."""
        path = urlsplit(url).path
        await self.call("Page.navigate", url=url)
        await self.wait(f"location.pathname === {json.dumps(path)}", f"the page at {path}")

    async def click(self, locate: str, what: str):
        """A real mouse click in the middle of the element ``locate`` (JS returning it; inside
        the plugin frame when it returns an element of the frame's document)."""
        await self.wait(f"!!({locate})", what)
        point = await self.js(
            f"""(() => {{
                const el = {locate};
                el.scrollIntoView({{block: "center"}});
                const r = el.getClientRects()[0];  // a link wrapped over lines: its first box
                let x = r.left + r.width / 2, y = r.top + r.height / 2;
                const inner = el.ownerDocument.elementFromPoint(x, y);
                const frame = el.ownerDocument.defaultView.frameElement;
                if (frame) {{ const f = frame.getBoundingClientRect(); x += f.left; y += f.top; }}
                const outer = document.elementFromPoint(x, y);
                const visible = inner !== null && el.contains(inner) && (outer === el || outer === frame
                    || el.contains(outer));
                return [x, y, visible, String(inner && inner.outerHTML).slice(0, 200),
                        String(outer && outer.tagName)];
            }})()"""
        )
        assert point[2], (what, point)  # the element itself is under the pointer, not something over it
        for kind in ("mousePressed", "mouseReleased"):
            await self.call(
                "Input.dispatchMouseEvent", type=kind, x=point[0], y=point[1], button="left", clickCount=1
            )

    async def type(self, locate: str, text: str, what: str):
        await self.click(locate, what)
        await self.call("Input.insertText", text=text)


FRAME = "document.querySelector('iframe')"
DOC = f"{FRAME}.contentDocument"
# The list's layout as the window shows it: widths of the page and of the view's frame, where the
# quality-gate column is, and on how many lines each table name is (the distinct tops of its boxes).
LAYOUT = f"""(() => {{
    const frame = {FRAME}, d = frame.contentDocument, w = frame.contentWindow;
    const box = frame.getBoundingClientRect(), gate = d.querySelector('th.gate').getBoundingClientRect();
    return {{
        page: [document.documentElement.scrollWidth, innerWidth],
        frame: [box.left, box.right, d.documentElement.scrollWidth, w.innerWidth],
        gate: [gate.left, gate.right],
        names: [...d.querySelectorAll('a.table-name')].map(a => [a.textContent,
            new Set([...a.getClientRects()].map(r => Math.round(r.top))).size]),  // its lines
    }};
}})()"""


async def _session(ws_url: str, base: str, password: str, artifacts: Path) -> dict:
    import websockets

    seen: dict = {}
    async with websockets.connect(ws_url, max_size=None) as ws:
        tab = Tab(ws)
        await tab.call("Page.enable")
        await tab.call(
            "Emulation.setDeviceMetricsOverride", width=1400, height=2400, deviceScaleFactor=1, mobile=False
        )
        await tab.call("Page.navigate", url=base + "/")
        # The login form a person uses.
        await tab.wait("document.querySelector('input[type=password]')", "the login form")
        await tab.type("document.querySelector('form input:not([type=password])')", "admin", "the user field")
        await tab.type("document.querySelector('input[type=password]')", password, "the password field")
        await tab.click("document.querySelector('button[type=submit]')", "Sign in")
        # The navigation's "Delta tables" entry, top level (not under Browse).
        await tab.click(
            "document.querySelector('a[href$=\"/plugin/deltaplane\"]')", "the Delta tables nav entry"
        )
        await tab.wait(f"{DOC}.querySelector('h1').textContent === 'Delta tables'", "the table list")
        seen["layout"] = {}
        for width, height in WIDTHS:  # a laptop's window: the list fits it
            await tab.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            await tab.wait(
                f"innerWidth === {width} && {FRAME}.getBoundingClientRect().right <= {width}", "the resize"
            )
            seen["layout"][width] = await tab.js(LAYOUT)
            shot = await tab.call("Page.captureScreenshot", format="png")
            (artifacts / f"ops-view-list-{width}.png").write_bytes(base64.b64decode(shot["data"]))
        await tab.call(
            "Emulation.setDeviceMetricsOverride", width=1400, height=2400, deviceScaleFactor=1, mobile=False
        )
        seen["list_text"] = await tab.js(f"{DOC}.body.innerText")
        seen["statuses"] = await tab.js(
            f"""[...{DOC}.querySelectorAll('table.tables tbody tr')].map(r => [
                r.querySelector('.table-name').textContent, r.dataset.status,
                getComputedStyle(r.querySelector('.badge')).backgroundColor,
                r.querySelector('td.status').innerText])"""
        )
        seen["list_gate"] = await tab.js(
            f"[...{DOC}.querySelectorAll('tr')].find(r => r.querySelector('a[href$=\"/tables/trips\"]'))"
            ".querySelector('td.gate').innerText"
        )
        # The table's page, from the list.
        await tab.click(f"{DOC}.querySelector('a[href$=\"/tables/trips\"]')", "the trips link")
        await tab.wait(f"{DOC}.querySelector('h1').textContent === 'trips'", "the trips page")
        # Airflow keeps the frame's page in its own URL: a deep link to the table's page.
        await tab.wait("location.pathname === '/plugin/deltaplane/deltaplane/tables/trips'", "the deep link")
        seen["page"] = await tab.js(
            f"""(() => {{
                const d = {DOC};
                const texts = sel => [...d.querySelectorAll(sel)].map(e => e.textContent.trim());
                return {{
                    text: d.body.innerText,
                    chart_titles: texts('svg text.chart-title'),
                    x_labels: texts('svg text.x-axis-label'),
                    y_labels: texts('svg text.y-axis-label'),
                    y_ticks: texts('svg text.y-tick'),
                    x_ticks: texts('svg text.x-tick'),
                    commit_times: texts('td.commit-time'),
                    legend: [...d.querySelectorAll('.legend .item')].map(e => [e.textContent.trim(),
                        getComputedStyle(e.querySelector('.swatch')).backgroundColor]),
                    rejected: [...d.querySelectorAll('table.gate-history tr.rejected')].map(r => r.innerText),
                    quarantine: texts('table.gate-history tr.rejected td.quarantine'),
                    run_links: [...d.querySelectorAll('table.commits a[target=_top]')]
                        .map(a => a.getAttribute('href')),
                    health: Object.fromEntries([...d.querySelectorAll('[data-k]')].map(e => [e.dataset.k,
                        e.textContent.trim()])),
                }};
            }})()"""
        )
        await tab.js(f"{FRAME}.style.height = {DOC}.documentElement.scrollHeight + 'px'")
        await asyncio.sleep(0.5)
        shot = await tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        (artifacts / "ops-view-table-in-airflow.png").write_bytes(base64.b64decode(shot["data"]))
        await tab.js(f"{FRAME}.style.height = ''")  # back to Airflow's layout for the clicks
        # The health-driven table's page: its plan, health over time, what maintenance bought.
        await tab.call("Page.navigate", url=base + "/plugin/deltaplane/deltaplane/tables/streaming")
        await tab.wait(
            f"{DOC} && {DOC}.querySelector('h1') && {DOC}.querySelector('h1').textContent === 'streaming'",
            "the streaming page",
        )
        seen["streaming"] = await tab.js(
            f"""(() => {{
                const d = {DOC};
                return {{
                    status: d.querySelector('.maintenance-status').innerText,
                    badge: getComputedStyle(d.querySelector('.maintenance-status .badge')).backgroundColor,
                    plan: [...d.querySelectorAll('table.plan tr')].slice(1).map(r => r.innerText),
                    lines: [...d.querySelectorAll('svg polyline.series')].length,
                    charts: [...d.querySelectorAll('svg text.chart-title')].map(e => e.textContent),
                }};
            }})()"""
        )
        await tab.js(f"{FRAME}.style.height = {DOC}.documentElement.scrollHeight + 'px'")
        await asyncio.sleep(0.5)
        shot = await tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        (artifacts / "ops-view-maintenance.png").write_bytes(base64.b64decode(shot["data"]))
        await tab.js(f"{FRAME}.style.height = ''")
        await tab.call("Page.navigate", url=base + "/plugin/deltaplane/deltaplane/tables/trips")
        await tab.wait(
            f"{DOC} && {DOC}.querySelector('h1') && {DOC}.querySelector('h1').textContent === 'trips'",
            "the trips page again",
        )
        # A DAG-run link leaves the frame: Airflow's own page of the run, no Airflow inside Airflow.
        run_link = f"{DOC}.querySelector('table.commits a[href*=\"/runs/\"]')"
        seen["clicked"] = await tab.js(f"{run_link}.getAttribute('href')")
        await tab.click(run_link, "a DAG-run link")
        await tab.wait("location.pathname.includes('/runs/')", "the DAG run page")
        await asyncio.sleep(1)
        seen["after_run_link"] = {
            "path": await tab.js("location.pathname"),
            "frames": await tab.js("document.querySelectorAll('iframe').length"),
            "nested": await tab.js("window.top !== window"),
        }
        # From a DAG's page: its "Delta table" tab.
        await tab.open(base + "/dags/deltaplane_trips_maintenance")
        await tab.click(
            "document.querySelector('a[href$=\"plugin/deltaplane-table\"]')", "the Delta table tab"
        )
        await tab.wait(f"{DOC}.querySelector('h1').textContent === 'trips'", "the trips page in the DAG tab")
        seen["dag_tab"] = {
            "path": await tab.js("location.pathname"),
            "frame": await tab.js(f"{FRAME}.contentWindow.location.pathname"),
        }
        shot = await tab.call("Page.captureScreenshot", format="png")
        (artifacts / "ops-view-dag-tab.png").write_bytes(base64.b64decode(shot["data"]))
        # A DAG written from the README: its tab opens its table (no tables file names it).
        await tab.open(base + "/dags/trips_ingest")
        await tab.click(
            "document.querySelector('a[href$=\"plugin/deltaplane-table\"]')",
            "the README DAG's Delta table tab",
        )
        await tab.wait(
            f"{DOC}.querySelector('h1').textContent === 'trips'", "the README table in the DAG tab"
        )
        seen["readme_tab"] = {
            "path": await tab.js("location.pathname"),
            "frame": await tab.js(
                f"{FRAME}.contentWindow.location.pathname + {FRAME}.contentWindow.location.search"
            ),
            "uri": await tab.js(f"{DOC}.querySelector('h1 + p code').textContent"),
            "version": await tab.js(f"{DOC}.querySelector('[data-k=version]').textContent"),
        }
        cookies = (await tab.call("Network.getCookies", urls=[base]))["cookies"]
        seen["token"] = next(c["value"] for c in cookies if c["name"] == "_token")
    return seen


async def _open_link(ws_url: str, url: str) -> dict:
    import websockets

    async with websockets.connect(ws_url, max_size=None) as ws:
        tab = Tab(ws)
        await tab.call("Page.enable")
        await tab.call("Page.navigate", url=url)
        await tab.wait(
            f"{DOC}.querySelector('h1').textContent === 'trips'", "the trips page from the Asset link"
        )
        # Airflow's URL follows the frame to the page the link redirected to.
        await tab.wait("location.pathname === '/plugin/deltaplane/deltaplane/tables/trips'", "the deep link")
        return {
            "path": await tab.js("location.pathname"),
            "frames": await tab.js("document.querySelectorAll('iframe').length"),
        }


def test_an_ops_person_finds_the_table_from_the_nav_a_dag_and_an_asset_event(airflow, browser):  # noqa: F811
    base, password, table, readme_table = airflow
    artifacts = Path(os.environ.get("DELTAPLANE_ARTIFACTS", ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(f"http://127.0.0.1:{browser}/json", timeout=10) as r:
        ws_url = next(t for t in json.load(r) if t["type"] == "page")["webSocketDebuggerUrl"]
    seen = asyncio.run(_session(ws_url, base, password, artifacts))

    assert "trips.consumer" in seen["list_text"]  # the table the consumer writes
    assert readme_table in seen["list_text"]  # the README DAGs' table, from their tasks
    for width, layout in seen["layout"].items():
        lines = max(n for _, n in layout["names"])
        print(f"list at {width} px: page {layout['page']}, frame (left, right, content, width)")
        print(f"  {layout['frame']}, gate column {layout['gate']}, a name on at most {lines} lines")
        page_width, window = layout["page"]
        _, right, frame_content, frame_width = layout["frame"]
        assert page_width <= window and right <= window, (width, layout)  # no horizontal scrolling
        assert frame_content <= frame_width, (width, layout)  # nor inside the view's frame
        assert layout["gate"][0] >= 0 and layout["gate"][1] <= frame_width, (width, layout)  # in view
        assert len(layout["names"]) >= len(LONG_NAMES) + 3, layout["names"]
        assert all(1 <= lines <= 2 for _, lines in layout["names"]), (width, layout["names"])
    # What needs attention first: the list is sorted by urgency, each status with its colour.
    statuses = [(name, status) for name, status, _, _ in seen["statuses"]]
    order = ["error", "failing", "over_budget", "needs_maintenance", "healthy"]
    ranks = [order.index(status) for _, status in statuses]
    assert ranks == sorted(ranks), statuses
    by_name = {name: (status, color, text) for name, status, color, text in seen["statuses"]}
    # trips: its ingest DAG's newest run failed (the batch the gate rejected)
    trips = [(status, text) for name, status, _, text in seen["statuses"] if name == "trips"]
    assert ("failing", "deltaplane_trips_ingest failed") in [
        (s, t[t.find("deltaplane") :][:30]) for s, t in trips
    ]
    # the README's trips table: its ingest DAG's newest run failed too (the README gate's rejection)
    assert sorted(s for s, _ in trips) == ["failing", "failing"], trips
    assert by_name["streaming"][0] == "needs_maintenance" and "compaction" in by_name["streaming"][2]
    assert "8 small files" in by_name["streaming"][2], by_name["streaming"]
    assert by_name["capped"][0] == "over_budget" and "over budget" in by_name["capped"][2], by_name["capped"]
    assert by_name["trips.consumer"][0] == "healthy"
    colors = {status: color for status, color, _ in by_name.values()}
    assert colors == {
        "error": "rgb(207, 34, 46)",  # the README's consumer targets, not written yet
        "failing": "rgb(207, 34, 46)",
        "over_budget": "rgb(130, 80, 223)",
        "needs_maintenance": "rgb(191, 135, 0)",
        "healthy": "rgb(26, 127, 55)",
    }, colors
    streaming = seen["streaming"]
    assert streaming["status"].startswith("needs maintenance") and "next: compaction" in streaming["status"]
    assert streaming["badge"] == "rgb(191, 135, 0)" and len(streaming["plan"]) == 7  # one row per kind
    assert streaming["plan"][-1].startswith("manifest\tskip") and "disabled" in streaming["plan"][-1]
    assert streaming["plan"][0].startswith("compaction\trun") and "8 small files" in streaming["plan"][0]
    assert streaming["lines"] == 3 and streaming["charts"][:3] == [
        "Small files",
        "Rows hidden by deletion vectors",
        "Checkpoint lag",
    ]
    readme = seen["readme_tab"]
    assert readme["path"] == "/dags/trips_ingest/plugin/deltaplane-table", readme
    assert readme["frame"] == f"/deltaplane/table?uri={quote(readme_table, safe='')}", readme
    assert readme["uri"] == readme_table and readme["version"] == "0", readme  # the one good batch
    # The rejection is newer than the last pass: the list says so, and when the last pass was.
    assert seen["list_gate"].startswith("rejected") and "last pass" in seen["list_gate"], seen["list_gate"]
    page = seen["page"]
    assert page["chart_titles"] == [
        "Small files",
        "Rows hidden by deletion vectors",
        "Checkpoint lag",
        "Rows added per commit",
        "Data added per commit",
        "File sizes of the live files",
    ]
    assert page["y_labels"] == [
        "small files",
        "share of rows",
        "versions since checkpoint",
        "rows added",
        "bytes added",
        "files",
    ]
    assert all(x.startswith(("commit version", "file size (log scale")) for x in page["x_labels"])
    assert any(t.endswith(("KiB", " B")) for t in page["y_ticks"]) and page["x_ticks"]
    assert page["commit_times"] and all(WHEN.fullmatch(t) for t in page["commit_times"])
    colors = dict(page["legend"])
    assert "WRITE" in colors and "OPTIMIZE" in colors and len(set(colors.values())) == len(colors), colors
    assert any(op.startswith("CREATE") for op in colors)
    assert len(page["rejected"]) == 1 and "expect_column_values_to_not_be_null" in page["rejected"][0]
    assert WHEN.search(page["rejected"][0])
    assert page["quarantine"][0].startswith(table + "/_quarantine/"), page["quarantine"]
    assert Path(page["quarantine"][0], "rejection.json").exists()
    assert page["health"]["last_optimize"].startswith("v") and WHEN.fullmatch(
        page["health"]["last_vacuum_time"]
    )
    assert any("/dags/deltaplane_trips_ingest/runs/" in href for href in page["run_links"])
    after = seen["after_run_link"]
    assert after["path"] == seen["clicked"] and after["path"].startswith("/dags/deltaplane_trips_"), after
    assert after["frames"] == 0 and after["nested"] is False, after  # left the frame
    assert seen["dag_tab"]["path"] == "/dags/deltaplane_trips_maintenance/plugin/deltaplane-table"
    assert seen["dag_tab"]["frame"] == "/deltaplane/tables/trips"

    # The link in the table's newest Asset event's extra opens its page inside Airflow's frame.
    status, body = _get(f"{base}/api/v2/assets/events?order_by=-timestamp&limit=100", seen["token"])
    assert status == 200, body
    extras = [(e["extra"] or {}).get("payload") or {} for e in json.loads(body)["asset_events"]]
    link = next(e for e in extras if e.get("table") == table)["ops_view"]  # the factory table's newest
    assert link.startswith("/plugin/deltaplane/deltaplane/table?uri=")
    opened = asyncio.run(_open_link(ws_url, base + link))
    assert opened == {"path": "/plugin/deltaplane/deltaplane/tables/trips", "frames": 1}, opened
