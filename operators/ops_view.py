"""The ops view: table health inside the Airflow UI (a FastAPI app the plugin mounts under
``/deltaplane``).

JSON: ``GET /deltaplane/api/tables`` (every configured table: version, files, bytes, small files,
DV-hidden row ratio, versions since the last checkpoint, last OPTIMIZE and VACUUM, the
auto-optimize decision and why, the last quality-gate result) and
``GET /deltaplane/api/tables/{name}`` (per-partition health, the file-size histogram, recent
commits with the DAG run that made each). Pages: ``/deltaplane/`` and
``/deltaplane/tables/{name}``, with charts drawn on the server as SVG (no request leaves the
Airflow server: air-gapped installs work). Every route requires an authenticated Airflow user
(a bearer token or the UI's session cookie): Airflow does not protect plugin routes by itself.
"""

from __future__ import annotations

import html
import json
from typing import Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse

RECENT_COMMITS = 50
COLORS = {
    "WRITE": "#2f80ed",
    "CREATE TABLE AS SELECT": "#2f80ed",
    "STREAMING UPDATE": "#56ccf2",
    "MERGE": "#9b51e0",
    "DELETE": "#eb5757",
    "UPDATE": "#f2994a",
    "OPTIMIZE": "#27ae60",
    "VACUUM START": "#828282",
    "VACUUM END": "#828282",
}


def _auth():
    from airflow.api_fastapi.core_api.security import requires_authenticated

    return [Depends(requires_authenticated())]


def _tables():
    from operators.config import load_config

    return load_config().tables


def _table(name: str):
    tables = _tables()
    if name not in tables:
        raise HTTPException(404, f"no table {name!r} in the configuration (tables: {', '.join(tables)})")
    return tables[name]


def _open(config):
    from operators.hooks import DeltaHook

    return DeltaHook(config.conn_id).get_table(config.uri)


def _last_gate(name: str) -> dict | None:
    """The newest quality-gate XCom of the table's ingest DAG (None if there is none)."""
    try:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            row = (
                session.query(XComModel)
                .filter_by(dag_id=f"deltaplane_{name}_ingest", task_id="quality_gate", key="return_value")
                .order_by(XComModel.timestamp.desc())
                .first()
            )
            if row is None:
                return None
            value = json.loads(row.value) if isinstance(row.value, str | bytes) else row.value
            return {
                "run_id": row.run_id,
                "success": value.get("success"),
                "failed": value.get("failed", []),
                "rows": value.get("rows"),
                "quarantine": value.get("quarantine"),
            }
    except Exception:  # the view must still render without a metadata DB
        return None


def table_summary(name: str, config) -> dict[str, Any]:
    from engine.auto_optimize import AutoOptimizePolicy, decide_auto_optimize

    try:
        table = _open(config)
    except Exception as e:  # a missing or unreachable table is a row with an error, not a 500
        return {"name": name, "uri": config.uri, "error": f"{type(e).__name__}: {e}"}
    policy = AutoOptimizePolicy(
        min_num_small_files=config.auto_optimize.min_small_files,
        small_file_size=config.auto_optimize.small_file_size,
        max_deleted_rows_ratio=config.auto_optimize.max_deleted_rows_ratio,
    )
    health = table.health(small_file_size=policy.small_file_size)
    decision = decide_auto_optimize(health, policy)
    return {
        "name": name,
        "uri": config.uri,
        "version": health.version,
        "files": health.num_files,
        "bytes": health.size_bytes,
        "rows": health.num_rows,
        "small_files": health.num_small_files,
        "small_file_size": health.small_file_size,
        "deleted_rows_ratio": health.deleted_rows_ratio,
        "versions_since_checkpoint": health.versions_since_checkpoint,
        "last_checkpoint_version": health.last_checkpoint_version,
        "last_optimize": _event(health.last_optimize),
        "last_vacuum": _event(health.last_vacuum),
        "auto_optimize": {
            "action": ("zorder" if config.zorder_by else "compact") if decision.compact else "skip",
            "reasons": list(decision.reasons)
            or [f"no partition has {policy.min_num_small_files}+ small files or too many deleted rows"],
        },
        "quality_gate": _last_gate(name),
        "dags": [f"deltaplane_{name}_{kind}" for kind in _kinds(config)],
    }


def _kinds(config) -> list[str]:
    return ["maintenance"] + (["ingest"] if config.ingest else []) + (["consumer"] if config.consumer else [])


def _event(event) -> dict | None:
    return (
        None
        if event is None
        else {"version": event.version, "timestamp": event.timestamp, "operation": event.operation}
    )


def table_detail(name: str, config) -> dict[str, Any]:
    summary = table_summary(name, config)
    if "error" in summary:
        return summary
    table = _open(config)
    health = table.health(small_file_size=config.auto_optimize.small_file_size)
    commits = []
    for info in table.history(RECENT_COMMITS):
        metrics = info.get("operationMetrics", {}) or {}
        stamp = info.get("airflow") or {}
        commits.append(
            {
                "version": info["version"],
                "timestamp": info.get("timestamp"),
                "operation": info.get("operation"),
                "files_added": _int(metrics, "numFiles", "numAddedFiles"),
                "files_removed": _int(metrics, "numRemovedFiles"),
                "rows_added": _int(metrics, "numOutputRows", "numTargetRowsInserted"),
                "rows_removed": _int(metrics, "numDeletedRows", "numTargetRowsDeleted"),
                "bytes_added": _int(metrics, "numOutputBytes", "numAddedBytes"),
                "dag_run": {k: stamp.get(k) for k in ("dag_id", "run_id", "task_id", "try_number")}
                if stamp
                else None,
            }
        )
    summary["partitions"] = [
        {
            "partition": p.partition or "(table)",
            "files": p.num_files,
            "bytes": p.size_bytes,
            "small_files": p.num_small_files,
            "rows": p.num_rows,
            "deleted_rows_ratio": p.deleted_rows_ratio,
        }
        for p in health.partitions
    ]
    summary["file_size_histogram"] = health.file_size_histogram
    summary["commits"] = commits
    return summary


def _int(metrics: dict, *names: str) -> int:
    for n in names:
        if metrics.get(n) not in (None, ""):
            return int(metrics[n])
    return 0


# --- SVG, drawn here ---------------------------------------------------------------------------


def bar_chart(
    values: list[tuple[str, float, str]], *, width: int = 720, height: int = 180, title: str
) -> str:
    """A bar chart as an SVG string: ``(label, value, color)`` per bar."""
    top = max((v for _, v, _ in values), default=0) or 1
    n = max(len(values), 1)
    bar = (width - 40) / n
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 40}" role="img" '
        f'aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>',
        f'<line x1="30" y1="{height}" x2="{width - 10}" y2="{height}" stroke="#999"/>',
    ]
    for i, (label, value, color) in enumerate(values):
        h = (value / top) * (height - 20)
        x = 30 + i * bar
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{height - h:.1f}" width="{max(bar - 2, 1):.1f}" height="{h:.1f}" '
            f'fill="{color}"><title>{html.escape(label)}: {value:g}</title></rect>'
        )
        if n <= 24:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{height + 14}" font-size="9" text-anchor="middle">'
                f"{html.escape(label[:10])}</text>"
            )
    parts.append(f'<text x="30" y="12" font-size="11">max {top:g}</text></svg>')
    return "".join(parts)


def _human(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}table{border-collapse:collapse}
td,th{padding:.3rem .6rem;border-bottom:1px solid #ddd;text-align:left;font-size:.9rem}
.num{text-align:right}.bad{color:#b00020}.ok{color:#1b7f3b}h1,h2{font-weight:600}
"""


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def list_page(rows: list[dict]) -> HTMLResponse:
    out = [
        "<h1>Delta tables</h1><table><tr><th>table</th><th>version</th><th class=num>files</th>"
        "<th class=num>size</th><th class=num>small files</th><th class=num>DV-hidden rows</th>"
        "<th class=num>versions since checkpoint</th><th>auto-optimize</th><th>quality gate</th></tr>"
    ]
    for r in rows:
        name = html.escape(r["name"])
        if "error" in r:
            out.append(
                f"<tr><td><a href='tables/{name}'>{name}</a></td><td colspan=8 class=bad>{html.escape(r['error'])}</td></tr>"
            )
            continue
        gate = r.get("quality_gate")
        gate_cell = (
            "-"
            if gate is None
            else ("<span class=ok>passed</span>" if gate["success"] else "<span class=bad>rejected</span>")
        )
        out.append(
            f"<tr><td><a href='tables/{name}'>{name}</a></td><td data-k=version>{r['version']}</td>"
            f"<td class=num data-k=files>{r['files']}</td><td class=num data-k=bytes title='{r['bytes']}'>{_human(r['bytes'])}</td>"
            f"<td class=num data-k=small_files>{r['small_files']}</td>"
            f"<td class=num data-k=deleted_rows_ratio>{r['deleted_rows_ratio']:.1%}</td>"
            f"<td class=num data-k=versions_since_checkpoint>{r['versions_since_checkpoint']}</td>"
            f"<td>{html.escape(r['auto_optimize']['action'])}</td><td>{gate_cell}</td></tr>"
        )
    out.append("</table>")
    return _page("Delta tables", "".join(out))


def detail_page(d: dict) -> HTMLResponse:
    name = html.escape(d["name"])
    if "error" in d:
        return _page(d["name"], f"<h1>{name}</h1><p class=bad>{html.escape(d['error'])}</p>")
    commits = list(reversed(d["commits"]))
    ops = bar_chart(
        [
            (
                f"v{c['version']} {c['operation']}",
                max(c["files_added"], 1),
                COLORS.get(c["operation"], "#bdbdbd"),
            )
            for c in commits
        ],
        title="commits: files added per version, colored by operation",
    )
    size = bar_chart(
        [(f"v{c['version']}", c["bytes_added"], COLORS.get(c["operation"], "#bdbdbd")) for c in commits],
        title="bytes added per version",
    )
    hist = bar_chart(
        [
            (_human(b["min_bytes"]), b["num_files"], "#2f80ed")
            for b in d["file_size_histogram"]
            if b["num_files"]
        ],
        title="file-size histogram (files per size bucket)",
    )
    legend = " ".join(
        f"<span style='color:{c}'>&#9632;</span> {html.escape(o)}"
        for o, c in COLORS.items()
        if o in {x["operation"] for x in commits}
    )
    parts = [
        f"<p><a href='../'>&larr; all tables</a></p><h1>{name}</h1><p><code>{html.escape(d['uri'])}</code></p>",
        f"<p>version <b data-k=version>{d['version']}</b>, <b data-k=files>{d['files']}</b> files, "
        f"<span data-k=bytes title='{d['bytes']}'>{_human(d['bytes'])}</span>, <span data-k=small_files>{d['small_files']}</span> small, "
        f"<span data-k=deleted_rows_ratio>{d['deleted_rows_ratio']:.1%}</span> rows hidden by deletion vectors, "
        f"<span data-k=versions_since_checkpoint>{d['versions_since_checkpoint']}</span> versions since the last checkpoint</p>",
        f"<p>auto-optimize: <b>{html.escape(d['auto_optimize']['action'])}</b> &mdash; {html.escape('; '.join(d['auto_optimize']['reasons']))}</p>",
        "<p>DAGs: "
        + ", ".join(f"<a href='/dags/{html.escape(g)}'>{html.escape(g)}</a>" for g in d["dags"])
        + "</p>",
        f"<h2>Commits</h2><p>{legend}</p>{ops}{size}<h2>File sizes</h2>{hist}",
        "<h2>Partitions</h2><table><tr><th>partition</th><th class=num>files</th><th class=num>size</th>"
        "<th class=num>small</th><th class=num>rows</th><th class=num>DV-hidden</th></tr>",
    ]
    for p in d["partitions"]:
        parts.append(
            f"<tr><td>{html.escape(p['partition'])}</td><td class=num>{p['files']}</td><td class=num>{_human(p['bytes'])}</td>"
            f"<td class=num>{p['small_files']}</td><td class=num>{p['rows']}</td><td class=num>{p['deleted_rows_ratio']:.1%}</td></tr>"
        )
    parts.append(
        "</table><h2>Recent commits</h2><table><tr><th>version</th><th>operation</th><th class=num>files +/-</th>"
        "<th class=num>rows +/-</th><th>DAG run</th></tr>"
    )
    for c in d["commits"]:
        run = c["dag_run"]
        who = (
            "-"
            if not run
            else (
                f"<a href='/dags/{html.escape(str(run['dag_id']))}/runs/{html.escape(str(run['run_id']))}'>"
                f"{html.escape(str(run['dag_id']))}.{html.escape(str(run['task_id']))}</a> (try {run['try_number']})"
            )
        )
        parts.append(
            f"<tr><td>{c['version']}</td><td>{html.escape(str(c['operation']))}</td>"
            f"<td class=num>+{c['files_added']} / -{c['files_removed']}</td>"
            f"<td class=num>+{c['rows_added']} / -{c['rows_removed']}</td><td>{who}</td></tr>"
        )
    parts.append("</table>")
    return _page(d["name"], "".join(parts))


def create_app(*, authenticated: bool = True) -> FastAPI:
    """The app; ``authenticated=False`` only for unit tests that run it outside Airflow."""
    app = FastAPI(title="deltaplane ops view", dependencies=_auth() if authenticated else [])

    @app.get("/api/tables")
    def api_tables() -> list[dict[str, Any]]:
        return [table_summary(name, config) for name, config in _tables().items()]

    @app.get("/api/tables/{name}")
    def api_table(name: str) -> dict[str, Any]:
        return table_detail(name, _table(name))

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return list_page(api_tables())

    @app.get("/tables/{name}", response_class=HTMLResponse)
    def table_page(name: str) -> HTMLResponse:
        return detail_page(api_table(name))

    return app
