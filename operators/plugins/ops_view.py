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

Commits are written by anyone (this engine, Delta Spark, delta-rs, Databricks, a hostile
writer), so their commitInfo is data of any shape: ``commit_row`` turns it into typed fields in
one place and never raises, and a table the engine cannot read is a row with an error. Pages are
Jinja2 templates (``operators/templates``) with autoescaping on for every template, SVG
included: no value reaches the markup unescaped, and data in links is URL-quoted as well.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined

RECENT_COMMITS = 50
MAX_TEXT = 1000  # characters kept of any string from a commit, an XCom or an error
MAX_ITEMS = 20  # failed expectations, kwargs, examples shown per gate result
_LONG = (1 << 63) - 1  # Delta's metrics and versions are longs
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
OTHER_COLOR = "#bdbdbd"


def _auth():
    from airflow.api_fastapi.core_api.security import requires_authenticated

    return [Depends(requires_authenticated())]


def _configured():
    """The valid tables and the invalid ones' errors: one bad table is a row with its error,
    never a page that fails for every table."""
    from deltaplane.operators.factory.config import read_config

    report = read_config()
    return report.config.tables, report.errors


def _invalid(name: str, lines: list[str]) -> dict[str, Any]:
    return {"name": name, "uri": "", "error": "invalid configuration: " + "; ".join(lines)}


def _table(name: str):
    tables, errors = _configured()
    if name in errors:
        return None, _invalid(name, errors[name])
    if name not in tables:
        raise HTTPException(404, f"no table {name!r} in the configuration (tables: {', '.join(tables)})")
    return tables[name], None


def _open(config):
    from deltaplane.operators.hooks.delta import DeltaHook

    return DeltaHook(config.conn_id).get_table(config.uri)


# --- foreign data, typed in one place ------------------------------------------------------------


def _text(value: Any) -> str | None:
    """A string field: a string (cut to MAX_TEXT) or a number's decimal text; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and abs(value) <= _LONG:
        text = str(value)
    elif isinstance(value, float) and math.isfinite(value):
        text = repr(value)
    else:
        return None
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "\u2026"


def _count(value: Any) -> int | None:
    """A long >= 0 from an int, an integral float or a decimal string (Delta Spark writes metrics
    as strings); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer() or abs(value) > _LONG:
            return None
        n = int(value)
    elif isinstance(value, str):
        digits = value.strip()
        if not (0 < len(digits) <= 19 and digits.isascii() and digits.isdigit()):
            return None
        n = int(digits)
    else:
        return None
    return n if 0 <= n <= _LONG else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value) if abs(value) < 1e300 else math.inf
    return number if math.isfinite(number) else None


def _plain(value: Any, depth: int = 0) -> Any:
    """Any value as strict JSON (no NaN), strings and collections cut, nesting bounded."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) <= _LONG else None
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return _text(value)
    if depth >= 4:
        return None
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value[:MAX_ITEMS]]
    if isinstance(value, Mapping):
        return {_text(str(k)): _plain(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    return None


def _metric(metrics: Mapping, *names: str) -> int:
    for name in names:
        n = _count(metrics.get(name))
        if n is not None:
            return n
    return 0


def _dag_run(stamp: Any) -> dict[str, Any] | None:
    """The Airflow stamp of a commit (``commitInfo.airflow``); None unless an object with at
    least one usable field."""
    if not isinstance(stamp, Mapping):
        return None
    run = {
        "dag_id": _text(stamp.get("dag_id")),
        "run_id": _text(stamp.get("run_id")),
        "task_id": _text(stamp.get("task_id")),
        "try_number": _count(stamp.get("try_number")),
    }
    return run if any(v is not None for v in run.values()) else None


def commit_row(info: Any) -> dict[str, Any]:
    """The view's row for one history entry (commitInfo plus ``version`` and ``timestamp``), of
    any shape any writer left: every field typed (version, timestamp: int or None; operation:
    str or None; counts: int >= 0; dag_run: None or str/None ids and an int/None try number),
    strings cut to MAX_TEXT, strict JSON. Never raises."""
    if not isinstance(info, Mapping):
        info = {}
    metrics = info.get("operationMetrics")
    if not isinstance(metrics, Mapping):
        metrics = {}
    return {
        "version": _count(info.get("version")),
        "timestamp": _count(info.get("timestamp")),
        "operation": _text(info.get("operation")),
        "files_added": _metric(metrics, "numFiles", "numAddedFiles"),
        "files_removed": _metric(metrics, "numRemovedFiles"),
        "rows_added": _metric(metrics, "numOutputRows", "numTargetRowsInserted"),
        "rows_removed": _metric(metrics, "numDeletedRows", "numTargetRowsDeleted"),
        "bytes_added": _metric(metrics, "numOutputBytes", "numAddedBytes"),
        "dag_run": _dag_run(info.get("airflow")),
    }


def gate_result(dag_id: str, run_id: Any, value: Any) -> dict[str, Any] | None:
    """A quality-gate XCom (``DeltaQualityGateOperator``'s summary) typed like ``commit_row``."""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    failed = value.get("failed")
    success = value.get("success")
    return {
        "dag_id": dag_id,
        "run_id": _text(run_id),
        "success": success if isinstance(success, bool) else None,
        "rows": _count(value.get("rows")),
        "batch": _text(value.get("batch")),
        "quarantine": _text(value.get("quarantine")),
        "failed": [
            _failure(f)
            for f in (failed if isinstance(failed, list) else [])[:MAX_ITEMS]
            if isinstance(f, Mapping)
        ],
    }


def _failure(failure: Mapping) -> dict[str, Any]:
    kwargs, examples = failure.get("kwargs"), failure.get("examples")
    return {
        "expectation": _text(failure.get("expectation")),
        "kwargs": _plain(kwargs) if isinstance(kwargs, Mapping) else {},
        "unexpected_count": _count(failure.get("unexpected_count")),
        "unexpected_percent": _number(failure.get("unexpected_percent")),
        "examples": _plain(examples) if isinstance(examples, list) else [],
    }


def _last_gate(name: str) -> dict | None:
    """The newest quality-gate XCom of the table's ingest DAG (None if there is none)."""
    dag_id = f"deltaplane_{name}_ingest"
    try:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            row = (
                session.query(XComModel)
                .filter_by(dag_id=dag_id, task_id="quality_gate", key="return_value")
                .order_by(XComModel.timestamp.desc())
                .first()
            )
            return None if row is None else gate_result(dag_id, row.run_id, row.value)
    except Exception:  # the view must still render without a metadata DB
        return None


# --- the JSON ----------------------------------------------------------------------------------


def _error_row(name: str, config, error: Exception) -> dict[str, Any]:
    return {"name": name, "uri": config.uri, "error": _text(f"{type(error).__name__}: {error}")}


def _read(config, *, history: bool):
    table = _open(config)
    health = table.health(small_file_size=config.auto_optimize.small_file_size)
    return health, (table.history(RECENT_COMMITS) if history else [])


def table_summary(name: str, config) -> dict[str, Any]:
    try:
        health, _ = _read(config, history=False)
    except Exception as e:  # missing, unreachable or unreadable: a row with an error, not a 500
        return _error_row(name, config, e)
    return _summary(name, config, health)


def _summary(name: str, config, health) -> dict[str, Any]:
    from deltaplane.engine.auto_optimize import AutoOptimizePolicy, decide_auto_optimize

    policy = AutoOptimizePolicy(
        min_num_small_files=config.auto_optimize.min_small_files,
        small_file_size=config.auto_optimize.small_file_size,
        max_deleted_rows_ratio=config.auto_optimize.max_deleted_rows_ratio,
    )
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
    try:
        health, history = _read(config, history=True)
    except Exception as e:
        return _error_row(name, config, e)
    detail = _summary(name, config, health)
    detail["partitions"] = [
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
    detail["file_size_histogram"] = health.file_size_histogram
    detail["commits"] = [commit_row(info) for info in history]
    return detail


# --- the pages ---------------------------------------------------------------------------------


def bar_chart(
    values: list[tuple[str, float, str]], *, width: int = 720, height: int = 180, title: str
) -> dict[str, Any]:
    """A bar chart's geometry, ``(label, value, color)`` per bar; ``charts.html`` draws it as SVG
    (labels and title escaped there like every other value)."""
    top = max((v for _, v, _ in values), default=0) or 1
    n = max(len(values), 1)
    bar = (width - 40) / n
    bars = []
    for i, (label, value, color) in enumerate(values):
        h = (value / top) * (height - 20)
        x = 30 + i * bar
        bars.append(
            {
                "x": f"{x + 1:.1f}",
                "y": f"{height - h:.1f}",
                "width": f"{max(bar - 2, 1):.1f}",
                "height": f"{h:.1f}",
                "color": color,
                "tip": f"{label}: {value:g}",
                "label": label[:10] if n <= 24 else None,
                "label_x": f"{x + bar / 2:.1f}",
            }
        )
    return {"width": width, "height": height, "title": title, "bars": bars, "top": f"{top:g}"}


def _human(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def _shown(value: Any) -> str:
    """A JSON value as a reader sees it: strings as they are, the rest as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "\u2026"


def _templates() -> Environment:
    env = Environment(
        loader=PackageLoader("deltaplane.operators.plugins", "templates"),
        autoescape=True,  # every template, whatever its name: HTML and SVG alike
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        human=_human,
        pct=lambda ratio: "?" if ratio is None else f"{ratio:.1%}",
        urlpart=lambda value: quote(str(value), safe=""),  # one path segment; HTML-escaped after
        shown=_shown,
    )
    return env


TEMPLATES = _templates()


def _render(template: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(TEMPLATES.get_template(template).render(**context))


def list_page(rows: list[dict]) -> HTMLResponse:
    return _render("tables.html", rows=rows)


def detail_page(d: dict) -> HTMLResponse:
    if "error" in d:
        return _render("table.html", d=d, charts=[], legend=[])
    commits = list(reversed(d["commits"]))

    def color(c: dict) -> str:
        return COLORS.get(c["operation"] or "", OTHER_COLOR)

    charts = [
        bar_chart(
            [
                (f"v{c['version']} {c['operation'] or '?'}", max(c["files_added"], 1), color(c))
                for c in commits
            ],
            title="commits: files added per version, colored by operation",
        ),
        bar_chart(
            [(f"v{c['version']}", c["bytes_added"], color(c)) for c in commits],
            title="bytes added per version",
        ),
    ]
    histogram = bar_chart(
        [
            (_human(b["min_bytes"]), b["num_files"], "#2f80ed")
            for b in d["file_size_histogram"]
            if b["num_files"]
        ],
        title="file-size histogram (files per size bucket)",
    )
    seen = {c["operation"] for c in commits}
    legend = [(op, c) for op, c in COLORS.items() if op in seen]
    return _render("table.html", d=d, charts=charts, histogram=histogram, legend=legend)


def create_app(*, authenticated: bool = True) -> FastAPI:
    """The app; ``authenticated=False`` only for unit tests that run it outside Airflow."""
    app = FastAPI(title="deltaplane ops view", dependencies=_auth() if authenticated else [])

    @app.get("/api/tables")
    def api_tables() -> list[dict[str, Any]]:
        tables, errors = _configured()
        rows = [table_summary(name, config) for name, config in tables.items()]
        return rows + [_invalid(name, lines) for name, lines in errors.items()]

    @app.get("/api/tables/{name}")
    def api_table(name: str) -> dict[str, Any]:
        config, invalid = _table(name)
        return invalid if invalid is not None else table_detail(name, config)

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return list_page(api_tables())

    @app.get("/tables/{name}", response_class=HTMLResponse)
    def table_page(name: str) -> HTMLResponse:
        return detail_page(api_table(name))

    return app
