"""The ops view: where an ops person looks first, inside Airflow's own UI.

A FastAPI app the plugin mounts under ``/deltaplane``, shown by Airflow 3's external views: a
top-level nav entry ("Delta tables", ``/plugin/deltaplane``) and a "Delta table" tab on every
DAG (``/deltaplane/dags/{dag_id}`` sends the table's DAGs to the table's page). An Asset event's
``extra["payload"]["ops_view"]`` links the commit's table (``/deltaplane/table?uri=...``).

Per table (every table ``catalog`` finds: the tables file's and their consumers' targets, and
every table the deltaplane tasks of Airflow's DAGs or the commits' Asset events name): health
now (rows, files, bytes, small files, rows hidden by deletion vectors, checkpoint lag, last
OPTIMIZE and VACUUM with their times), the commit timeline (time, operation, parameters, the DAG run that made
it), titled charts with axes and units (file sizes on a log scale), schema, properties and
protocol, and the quality-gate history: every result of the gate's XComs and every rejected
batch found in the table's ``_quarantine/<batch>/rejection.json`` with its time, reason and path.

JSON: ``GET /deltaplane/api/tables``, ``GET /deltaplane/api/tables/{name}`` (a configured table)
and ``GET /deltaplane/api/table?uri=...`` (any). Pages: ``/deltaplane/``,
``/deltaplane/tables/{name}`` and ``/deltaplane/table?uri=...``, server-rendered (Jinja2,
autoescaped for every template, SVG included; data in links URL-quoted) with charts drawn as SVG:
no request leaves the Airflow server. Every route requires an authenticated Airflow user (a bearer token or
the UI's session cookie): Airflow does not protect plugin routes by itself.

The pages run inside Airflow's iframe, whose sandbox has no ``allow-top-navigation``: links to
Airflow's own pages (DAGs, runs) carry ``target="_top"`` (right when the page is opened on its
own) and ``static/ops.js`` moves Airflow's own router to them, so they leave the frame instead
of opening a second Airflow inside the first.

Commits are written by anyone (this engine, Delta Spark, delta-rs, a hostile writer), so their
commitInfo is data of any shape: ``commit_row`` turns it into typed fields in one place and never
raises; XComs and ``rejection.json`` records are typed the same way, and a table the engine
cannot read is a row with an error.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined

from deltaplane.operators.plugins import catalog
from deltaplane.operators.plugins.catalog import Entry, GateTask
from deltaplane.operators.plugins.charts import (
    Bar,
    Marker,
    bar_chart,
    line_chart,
    log_size_buckets,
    size_label,
)

RECENT_COMMITS = 50
MAX_TEXT = 1000  # characters kept of any string from a commit, an XCom or an error
MAX_ITEMS = 20  # failed expectations, kwargs, examples shown per gate result
_LONG = (1 << 63) - 1  # Delta's metrics and versions are longs
# One colour per operation, every one distinct (a colour-blind-safe palette first); operations
# not named here take the next free colour of EXTRA_COLORS in the order they appear.
COLORS = {
    "CREATE TABLE": "#e69f00",
    "CREATE TABLE AS SELECT": "#d55e00",
    "WRITE": "#0072b2",
    "STREAMING UPDATE": "#56b4e9",
    "MERGE": "#cc79a7",
    "DELETE": "#c0392b",
    "UPDATE": "#f0c419",
    "OPTIMIZE": "#009e73",
    "VACUUM START": "#7f8c8d",
    "VACUUM END": "#34495e",
    "RESTORE": "#8e44ad",
}
EXTRA_COLORS = ("#16a085", "#a0522d", "#2c3e50", "#ff6f61", "#6b8e23", "#4b0082", "#b8860b", "#708090")
OTHER_COLOR = "#bdbdbd"  # once EXTRA_COLORS are used up, and for commits without an operation
GATE_HISTORY = 200  # XComs read per table


def operation_colors(operations) -> dict[str, str]:
    """A distinct colour for each of ``operations`` (in their order)."""
    out: dict[str, str] = {}
    spare = [c for c in EXTRA_COLORS]
    for op in operations:
        if op is None or op in out:
            continue
        out[op] = COLORS.get(op) or (spare.pop(0) if spare else OTHER_COLOR)
    return out


def _auth():
    from airflow.api_fastapi.core_api.security import requires_authenticated

    return [Depends(requires_authenticated())]


def _invalid(name: str, lines: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "uri": "",
        "error": "invalid configuration: " + "; ".join(lines),
        "status": "error",
        "status_label": "invalid",
        "urgency": 4,
    }


def _open(config):
    from deltaplane.operators.hooks.delta import DeltaHook

    return DeltaHook(config.conn_id).get_table(config.uri)


# --- foreign data, typed in one place ------------------------------------------------------------


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` at most ``limit`` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


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
    return _cut(text)


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
        "parameters": _parameters(info.get("operationParameters")),
    }


def _parameters(value: Any) -> dict[str, Any]:
    """``operationParameters``: an object of any values (Delta Spark writes them as JSON text)."""
    if not isinstance(value, Mapping):
        return {}
    out = _plain(value)
    return {k: v for k, v in out.items() if k is not None}


def gate_result(
    dag_id: str, run_id: Any, value: Any, *, task_id: Any = None, time: Any = None
) -> dict[str, Any] | None:
    """A quality-gate XCom (``DeltaQualityGateOperator``'s summary, or a stage's rejection
    report) typed like ``commit_row``; ``time`` in ms."""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    failed = value.get("failed")
    success = value.get("success")
    if not isinstance(success, bool) and value.get("rejected") is True:
        success = False  # a stage's rejection report
    reason = value.get("message")
    if reason is None:
        reason = value.get("reason")
    return {
        "dag_id": dag_id,
        "run_id": _text(run_id),
        "task_id": _text(task_id),
        "time": _count(time),
        "reason": _text(reason),
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


# --- the quality gate's history ----------------------------------------------------------------


def _ms(when: Any) -> int | None:
    if isinstance(when, datetime):
        return int(when.timestamp() * 1000)
    return None


def _gate_xcoms(tasks: tuple[GateTask, ...]) -> list[dict]:
    """Every quality-gate result and stage rejection in the XComs of ``tasks``, newest first
    (empty without a metadata DB: the view still renders)."""
    if not tasks:
        return []
    stages = {(t.dag_id, t.task_id) for t in tasks if t.stage}
    try:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import and_, or_

        with create_session() as session:
            rows = (
                session.query(XComModel)
                .filter(
                    or_(*(and_(XComModel.dag_id == t.dag_id, XComModel.task_id == t.task_id) for t in tasks)),
                    XComModel.key == "return_value",
                )
                .order_by(XComModel.timestamp.desc())
                .limit(GATE_HISTORY)
                .all()
            )
            found = [(r.dag_id, r.run_id, r.task_id, r.timestamp, r.value) for r in rows]
    except Exception:
        return []
    out = []
    for dag_id, run_id, task_id, when, value in found:
        result = gate_result(dag_id, run_id, value, task_id=task_id, time=_ms(when))
        if result is None or ((dag_id, task_id) in stages and result["success"] is not False):
            continue  # a stage's XCom is a gate result only when it rejected the batch
        out.append(result)
    return out


def _quarantined(uri: str, options) -> list[dict]:
    """Every ``rejection.json`` under the table's ``_quarantine/`` (records anyone may have
    written: typed here), or one row with the error when the folder cannot be listed."""
    from deltaplane.engine import list_rejections

    try:
        records = list_rejections(uri, options)
    except Exception as e:
        return [{"error": _text(f"cannot list the quarantine: {type(e).__name__}: {e}")}]
    out = []
    for r in records:
        if not isinstance(r, Mapping):
            continue
        reason = r.get("message")
        if reason is None:
            reason = r.get("reason") if r.get("reason") is not None else r.get("error")
        out.append(
            {
                "batch": _text(r.get("batch")),
                "quarantine": _text(r.get("location")),
                "time": _count(r.get("rejected_at")),
                "reason": _text(reason),
                "task_id": _text(r.get("task")),
            }
        )
    return out


def gate_history(entry: Entry, options) -> dict[str, Any]:
    """The gate's results (XComs) and every rejected batch (XComs and the quarantine, one row
    per batch), newest first; ``status`` is the newest result's, so a rejection newer than the
    last pass shows as ``rejected``."""
    # The gate and stage tasks of the table (a configured table's ingest DAG, even when the
    # configuration no longer has an ingest: history stays; every DAG's that names the table).
    results = _gate_xcoms(entry.gate_tasks)
    dag_id = entry.gate_tasks[0].dag_id if entry.gate_tasks else None
    quarantined = _quarantined(entry.config.uri, options)
    errors = [q["error"] for q in quarantined if "error" in q]
    by_batch = {r["batch"]: r for r in results if r["success"] is False and r["batch"] is not None}
    for q in quarantined:
        if "error" in q:
            continue
        known = by_batch.get(q["batch"])
        if known is not None:  # the XCom and the record of one rejection
            for key in ("quarantine", "reason", "time"):
                if known[key] is None:
                    known[key] = q[key]
            known["quarantine_found"] = True
            continue
        row = {
            "dag_id": dag_id,
            "run_id": None,
            "success": False,
            "rows": None,
            "failed": [],
            "quarantine_found": True,
            **q,
        }
        results.append(row)
    results.sort(key=lambda r: -1 if r["time"] is None else r["time"], reverse=True)
    rejections = [r for r in results if r["success"] is False]
    last_pass = next((r for r in results if r["success"] is True), None)
    newest = results[0] if results else None
    return {
        "status": None if newest is None else ("passed" if newest["success"] else "rejected"),
        "last_pass": last_pass,
        "last_rejection": rejections[0] if rejections else None,
        "rejected": len(rejections),
        "rejected_since_pass": sum(
            1 for r in rejections if last_pass is None or (r["time"] or 0) > (last_pass["time"] or 0)
        ),
        "history": results,
        "rejections": rejections,
        "errors": errors,
    }


# --- the JSON ----------------------------------------------------------------------------------


def _identity(entry: Entry) -> dict[str, Any]:
    """Which table a row is: its name, where the view found it, its page and its DAGs."""
    return {
        "name": entry.name,
        "label": entry.label,
        "uri": entry.config.uri,
        "configured": entry.configured,
        "link": entry.link,
        "consumer_of": entry.consumer_of,
        "dags": list(entry.dags),
    }


def _error_row(entry: Entry, error: Exception) -> dict[str, Any]:
    label, urgency = STATUSES["error"]
    return {
        **_identity(entry),
        "error": _text(f"{type(error).__name__}: {error}"),
        "status": "error",
        "status_label": label,
        "urgency": urgency,
    }


def _policy(entry: Entry):
    from deltaplane.operators.factory.config import maintenance_policy

    return maintenance_policy(entry.config, entry.maintenance)


def table_summary(entry: Entry, runs: Mapping[str, dict] | None = None) -> dict[str, Any]:
    try:
        table = _open(entry.config)
        seen = _look(entry, table)
    except Exception as e:  # missing, unreachable or unreadable: a row with an error, not a 500
        return _error_row(entry, e)
    return _summary(entry, table, seen, runs)


def _look(entry: Entry, table):
    """The table as the maintenance planner sees it (health, removed files, manifests, spending)."""
    from deltaplane.engine import look

    return look(_policy(entry), snapshot=table.snapshot)


STATUSES = {  # status -> (label, urgency: the list puts the highest first)
    "error": ("unreadable", 4),
    "failing": ("failing", 3),
    "over_budget": ("over budget", 2),
    "needs_maintenance": ("needs maintenance", 1),
    "healthy": ("healthy", 0),
}


def maintenance_status(entry: Entry, seen, runs: Mapping[str, dict] | None) -> dict[str, Any]:
    """The table's place in the "what needs attention" list: its status (failing: the newest run
    of one of its DAGs failed; over budget: work is due but its daily budget is spent; needs
    maintenance: the health-driven plan wants a run; healthy), the next action with its reason,
    and every decision of the plan (``deltaplane maintenance plan`` says the same)."""
    from deltaplane.engine import plan_table, rank

    policy = _policy(entry)
    ranked = rank(plan_table(entry.name, seen, policy), {})
    failed = [
        (dag_id, run)
        for dag_id in entry.dags
        if (run := (runs or {}).get(dag_id)) and run["state"] == "failed"
    ]
    due = [d for d in ranked if d.run]
    over = [d for d in ranked if not d.run and d.reason.startswith("over budget")]
    if failed:
        status = "failing"
        dag_id, run = failed[0]
        next_action = {"kind": None, "reason": f"the newest run of {dag_id} failed ({run['run_id']})"}
    elif over:
        status = "over_budget"
        next_action = {"kind": over[0].kind, "reason": over[0].reason}
    elif due:
        status = "needs_maintenance"
        next_action = {"kind": due[0].kind, "reason": due[0].reason}
    else:
        status = "healthy"
        compaction = next((d for d in ranked if d.kind == "compaction"), None)
        why = compaction.reason if compaction is not None else "nothing is due"
        next_action = {"kind": None, "reason": f"nothing due ({why})"}
    label, urgency = STATUSES[status]
    return {
        "status": status,
        "status_label": label,
        "urgency": urgency,
        "score": round(max((d.score for d in due), default=0.0), 3),
        "next_action": next_action,
        "plan": [d.to_dict() for d in ranked],
        "failed_runs": [{"dag_id": d, **r} for d, r in failed],
        "rewritten_today": seen.spending.bytes_rewritten if seen.spending else 0,
        "cpu_seconds_today": round(seen.spending.cpu_seconds, 1) if seen.spending else 0,
        "schedule": entry.config.schedules.maintenance if entry.configured else None,
    }


def urgency_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The list's order: most urgent first (unreadable, failing, over budget, needs maintenance
    by the plan's score, healthy), then by name."""

    def key(row):
        urgency = row.get("urgency", STATUSES["error"][1] if "error" in row else 0)
        return (-urgency, -(row.get("score") or 0.0), str(row.get("label", row.get("name", ""))))

    return sorted(rows, key=key)


def _summary(entry: Entry, table, seen, runs: Mapping[str, dict] | None = None) -> dict[str, Any]:
    from deltaplane.engine import AutoOptimizePolicy, decide_auto_optimize

    health = seen.health
    config = entry.config
    policy = AutoOptimizePolicy(
        min_num_small_files=config.auto_optimize.min_small_files,
        small_file_size=config.auto_optimize.small_file_size,
        max_deleted_rows_ratio=config.auto_optimize.max_deleted_rows_ratio,
    )
    decision = decide_auto_optimize(health, policy)
    # OPTIMIZE clusters a liquid-clustered table, whatever zorder_by says (as maintenance reports)
    kind = "cluster" if table.clustering_columns else "zorder" if config.zorder_by else "compact"
    gate = gate_history(entry, table.storage_options)
    history = gate["history"]
    return {
        **_identity(entry),
        "version": health.version,
        "timestamp": health.timestamp,
        "files": health.num_files,
        "bytes": health.size_bytes,
        "rows": health.num_rows,
        "small_files": health.num_small_files,
        "small_file_size": health.small_file_size,
        "dv_hidden_rows": health.num_deleted_rows,
        "files_with_dvs": health.num_files_with_deletion_vectors,
        "deleted_rows_ratio": health.deleted_rows_ratio,
        "versions_since_checkpoint": health.versions_since_checkpoint,
        "last_checkpoint_version": health.last_checkpoint_version,
        "last_optimize": _event(health.last_optimize),
        "last_vacuum": _event(health.last_vacuum),
        "auto_optimize": {
            "action": kind if decision.compact else "skip",
            "reasons": list(decision.reasons)
            or [f"no partition has {policy.min_num_small_files}+ small files or too many deleted rows"],
            "scheduled": entry.maintained,  # a DAG runs auto-optimize or compaction on the table
        },
        "quality_gate": history[0] if history else None,  # the newest result
        "gate": {k: v for k, v in gate.items() if k not in ("history", "rejections")},
        **maintenance_status(entry, seen, runs),
    }


def waiting_batches(table, now_ms: int | None = None) -> list[dict[str, Any]]:
    """Staged batches (and Spark writes) whose files are held for their commit, oldest first:
    who holds, since when, until when, and whether the hold still protects (an expired one, or
    one whose work the table holds, is VACUUM's to drop). An old one is a batch that needs a
    look: its gate or commit never ran, or failed for good."""
    import time

    from deltaplane.engine import WorkKey, hold_is_live, list_holds

    snapshot = table.snapshot
    now = int(time.time() * 1000) if now_ms is None else now_ms

    def done(app_id: str, version: int | None) -> bool:
        return WorkKey(app_id, version if version is not None else 0).done_in(snapshot)

    return [
        {
            "note": _text(h.note),
            "work": _text(h.app_id),
            "since": h.created_at,
            "expires": h.expires_at,
            "age_seconds": max(0, (now - h.created_at) // 1000),
            "live": hold_is_live(h, done, now),
        }
        for h in list_holds(snapshot.store)
    ]


def _event(event) -> dict | None:
    return (
        None
        if event is None
        else {"version": event.version, "timestamp": event.timestamp, "operation": event.operation}
    )


def _schema(schema_string: Any) -> list[dict[str, Any]]:
    """The top-level fields of Delta's schema JSON (of any shape: another writer's)."""
    try:
        schema = json.loads(schema_string) if isinstance(schema_string, str) else None
    except ValueError:
        return []
    fields = schema.get("fields") if isinstance(schema, Mapping) else None
    out = []
    for f in fields if isinstance(fields, list) else []:
        if not isinstance(f, Mapping):
            continue
        kind = f.get("type")
        metadata = f.get("metadata") if isinstance(f.get("metadata"), Mapping) else {}
        out.append(
            {
                "name": _text(f.get("name")),
                "type": _text(kind) if isinstance(kind, str) else _plain(kind),
                "nullable": f.get("nullable") if isinstance(f.get("nullable"), bool) else None,
                "comment": _text(metadata.get("comment")),
            }
        )
    return out


def _shape(table) -> dict[str, Any]:
    metadata, protocol = table.metadata, table.protocol
    configuration = metadata.configuration if isinstance(metadata.configuration, Mapping) else {}
    return {
        "schema": _schema(metadata.schema_string),
        "partition_columns": [_text(c) for c in metadata.partition_columns or []],
        "properties": {
            _text(str(k)): _text(v) if isinstance(v, str) else _plain(v) for k, v in configuration.items()
        },
        "description": _text(metadata.description),
        "created_time": _count(metadata.created_time),
        "protocol": {
            "min_reader_version": _count(protocol.min_reader_version),
            "min_writer_version": _count(protocol.min_writer_version),
            "reader_features": [_text(f) for f in protocol.reader_features or []],
            "writer_features": [_text(f) for f in protocol.writer_features or []],
        },
    }


HEALTH_HISTORY = 100  # commits drawn in the health-over-time charts


def maintenance_effects(points: list[dict], commits: list[dict]) -> list[dict[str, Any]]:
    """What each maintenance run in ``points`` (``health_history``) bought: files, small files,
    rows hidden by deletion vectors and checkpoint lag just before and just after it, the bytes it
    wrote, and the DAG run that made it (from the commit rows, newest first)."""
    by_version = {c["version"]: c for c in commits}
    out = []
    for before, after in itertools.pairwise(points):
        if not after["maintenance"]:
            continue
        row = by_version.get(after["version"]) or {}
        out.append(
            {
                "version": after["version"],
                "timestamp": after["timestamp"],
                "operation": _text(after["operation"]),
                "files": [before["num_files"], after["num_files"]],
                "small_files": [before["num_small_files"], after["num_small_files"]],
                "deleted_rows_ratio": [before["deleted_rows_ratio"], after["deleted_rows_ratio"]],
                "bytes_written": row.get("bytes_added"),
                "dag_run": row.get("dag_run"),
            }
        )
    return list(reversed(out))  # newest first, as the commits


def table_detail(entry: Entry, runs: Mapping[str, dict] | None = None) -> dict[str, Any]:
    from deltaplane.engine import health_history

    try:
        table = _open(entry.config)
        seen = _look(entry, table)
        health = seen.health
        history = table.history(RECENT_COMMITS)
        points = health_history(
            table.snapshot.store,
            commits=HEALTH_HISTORY,
            until=table.version,
            small_file_size=health.small_file_size,
        )
        files = table.snapshot.files
        sizes = files.column("size").to_pylist() if files.num_rows else []
        shape = _shape(table)
    except Exception as e:
        return _error_row(entry, e)
    detail = _summary(entry, table, seen, runs)
    detail["health_history"] = points
    detail["gate_history"] = gate_history(entry, table.storage_options)["history"]
    detail.update(shape)
    detail["partitions"] = [
        {
            "partition": p.partition or "(table)",
            "files": p.num_files,
            "bytes": p.size_bytes,
            "small_files": p.num_small_files,
            "rows": p.num_rows,
            "dv_hidden_rows": p.num_deleted_rows,
            "deleted_rows_ratio": p.deleted_rows_ratio,
        }
        for p in health.partitions
    ]
    detail["waiting_batches"] = waiting_batches(table)
    detail["file_size_histogram"] = health.file_size_histogram
    detail["file_size_buckets"] = log_size_buckets(sizes)
    detail["commits"] = [commit_row(info) for info in history]
    detail["maintenance_runs"] = maintenance_effects(points, detail["commits"])
    return detail


# --- the pages ---------------------------------------------------------------------------------


def _when(ms: Any) -> str:
    """A commit's or an event's time (ms since the epoch) as people read it, in UTC."""
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms < 253402300800000:
        return "?"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _human(n: float | None) -> str:
    return "?" if n is None else size_label(n)


def _shown(value: Any) -> str:
    """A JSON value as a reader sees it: strings as they are, the rest as compact JSON."""
    return _cut(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))


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
        count=lambda n: "?" if n is None else f"{n:,}",
        pct=lambda ratio: "?" if ratio is None else f"{ratio:.1%}",
        when=_when,
        short_when=lambda ms: _when(ms)[:16],  # to the minute ("?" stays); a title holds the rest
        urlpart=lambda value: quote(str(value), safe=""),  # one path segment; HTML-escaped after
        shown=_shown,
    )
    return env


TEMPLATES = _templates()


def _render(template: str, root: str = "/deltaplane", **context: Any) -> HTMLResponse:
    """``root``: where the app is mounted (``/deltaplane`` under Airflow's base path);
    ``airflow``: Airflow's own base path, for links to its pages."""
    airflow = root.removesuffix("/deltaplane")
    return HTMLResponse(TEMPLATES.get_template(template).render(root=root, airflow=airflow, **context))


def list_page(
    rows: list[dict], root: str = "/deltaplane", *, heading: str = "Delta tables", notices: list[str] = ()
) -> HTMLResponse:
    return _render("tables.html", root, rows=rows, heading=heading, notices=list(notices))


def _commit_charts(commits: list[dict], colors: dict[str, str]) -> list[dict]:
    oldest_first = list(reversed(commits))
    every = max(1, -(-len(oldest_first) // 12))  # at most about 12 x tick labels

    def bars(value, fmt) -> list[Bar]:
        out = []
        for i, c in enumerate(oldest_first):
            op = c["operation"]
            labelled = i % every == 0 or i == len(oldest_first) - 1
            out.append(
                Bar(
                    value=value(c),
                    color=colors.get(op, OTHER_COLOR) if op is not None else OTHER_COLOR,
                    tip=f"v{c['version']} {op or '?'} at {_when(c['timestamp'])}: {fmt(value(c))}",
                    label=f"v{c['version']}" if labelled else None,
                    sublabel=_when(c["timestamp"])[11:16] if labelled else None,
                )
            )
        return out

    x_label = "commit version (time of day, UTC), oldest to newest"
    return [
        bar_chart(
            bars(lambda c: c["rows_added"], lambda n: f"{n:,} rows"),
            title="Rows added per commit",
            x_label=x_label,
            y_label="rows added",
        ),
        bar_chart(
            bars(lambda c: c["bytes_added"], size_label),
            title="Data added per commit",
            x_label=x_label,
            y_label="bytes added",
            unit="bytes",
        ),
    ]


def _histogram_chart(buckets: list[dict]) -> dict:
    return bar_chart(
        [
            Bar(
                value=b["num_files"],
                color="#0072b2",
                tip=f"{b['num_files']:,} files of {size_label(b['min_bytes'])} "
                f"to {size_label(b['max_bytes'] + 1)}",
                label=size_label(b["min_bytes"]),
            )
            for b in buckets
        ],
        title="File sizes of the live files",
        x_label="file size (log scale: each bar is a doubling, from its label to the next)",
        y_label="files",
    )


def _short(text: str | None, limit: int = 40) -> str:
    """An operation's name in a tooltip: a foreign writer's may be any length."""
    return _cut(text or "?", limit)


def _health_charts(points: list[dict]) -> list[dict]:
    """Small files, the share of rows hidden by deletion vectors and the checkpoint lag after
    each of the last commits, maintenance runs marked."""
    points = [{**p, "operation": _short(p["operation"])} for p in points]
    every = max(1, -(-len(points) // 12))
    ticks = [
        (i, f"v{p['version']}", _when(p["timestamp"])[11:16])
        for i, p in enumerate(points)
        if i % every == 0 or i == len(points) - 1
    ]
    markers = [
        Marker(i, f"v{p['version']} {p['operation']} at {_when(p['timestamp'])}")
        for i, p in enumerate(points)
        if p["maintenance"]
    ]
    x_label = "commit version (time of day, UTC), oldest to newest; dashed: maintenance runs"

    def chart(key, title, y_label, unit, fmt, color):
        return line_chart(
            [p[key] for p in points],
            title=title,
            x_label=x_label,
            y_label=y_label,
            unit=unit,
            x_ticks=ticks,
            markers=markers,
            tips=[
                f"v{p['version']} {p['operation'] or ''} at {_when(p['timestamp'])}: {fmt(p[key])}"
                for p in points
            ],
            color=color,
        )

    return [
        chart(
            "num_small_files",
            "Small files",
            "small files",
            "count",
            lambda n: f"{n:,} small files",
            "#d55e00",
        ),
        chart(
            "deleted_rows_ratio",
            "Rows hidden by deletion vectors",
            "share of rows",
            "percent",
            lambda r: f"{r:.1%} of rows hidden",
            "#cc79a7",
        ),
        chart(
            "versions_since_checkpoint",
            "Checkpoint lag",
            "versions since checkpoint",
            "count",
            lambda n: f"{n:,} versions since the checkpoint",
            "#0072b2",
        ),
    ]


def detail_page(d: dict, root: str = "/deltaplane") -> HTMLResponse:
    if "error" in d:
        return _render("table.html", root, d=d, charts=[], histogram=None, legend=[], health_charts=[])
    colors = operation_colors(c["operation"] for c in reversed(d["commits"]))
    return _render(
        "table.html",
        root,
        d=d,
        health_charts=_health_charts(d["health_history"]),
        charts=_commit_charts(d["commits"], colors),
        histogram=_histogram_chart(d["file_size_buckets"]),
        legend=sorted(colors.items()),
        colors=colors,
        other_color=OTHER_COLOR,
    )


STATIC = {"ops.js": "text/javascript; charset=utf-8", "icon.svg": "image/svg+xml"}


def _root(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/") or "/deltaplane"


def _rows(entries, runs: Mapping[str, dict] | None = None) -> list[dict[str, Any]]:
    return urgency_order([table_summary(entry, runs) for entry in entries])


def create_app(*, authenticated: bool = True) -> FastAPI:
    """The app; ``authenticated=False`` only for unit tests that run it outside Airflow."""
    app = FastAPI(title="deltaplane ops view", dependencies=_auth() if authenticated else [])

    def listing() -> tuple[list[dict[str, Any]], list[str]]:
        found = catalog.load()
        rows = _rows(found.entries.values(), found.latest_runs)
        rows = urgency_order(rows + [_invalid(name, lines) for name, lines in found.errors.items()])
        return rows, found.notices

    def named(name: str) -> dict[str, Any]:
        found = catalog.load()
        if name in found.errors:
            return _invalid(name, found.errors[name])
        entry = found.configured(name)
        if entry is None:
            known = ", ".join(n for n, e in found.entries.items() if e.configured)
            raise HTTPException(404, f"no table {name!r} in the configuration (tables: {known})")
        return table_detail(entry, found.latest_runs)

    def at(uri: str) -> Entry:
        entry = catalog.load().by_uri(uri)
        if entry is None:
            raise HTTPException(404, "no table at that URI in the configuration, DAGs or Asset events")
        return entry

    @app.get("/api/tables")
    def api_tables() -> list[dict[str, Any]]:
        return listing()[0]

    @app.get("/api/tables/{name}")
    def api_table(name: str) -> dict[str, Any]:
        return named(name)

    @app.get("/api/table")
    def api_table_at(uri: str) -> dict[str, Any]:
        return table_detail(at(uri))

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        rows, notices = listing()
        return list_page(rows, _root(request), notices=notices)

    @app.get("/tables/{name}", response_class=HTMLResponse)
    def table_page(name: str, request: Request) -> HTMLResponse:
        return detail_page(named(name), _root(request))

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    def dag_page(dag_id: str, request: Request) -> Response:
        """The "Delta table" tab of a DAG: the page of the table a factory DAG is built for, or
        of the one table the DAG's tasks name; the list of them when they name several."""
        found = catalog.load()
        tables = found.for_dag(dag_id)
        if len(tables) == 1:
            return RedirectResponse(_root(request) + tables[0].link, status_code=303)
        if tables:
            rows = _rows(tables, found.latest_runs)
            return list_page(rows, _root(request), heading=f"Delta tables of DAG {dag_id}")
        return _render("no_table.html", _root(request), dag_id=dag_id, entries=list(found.entries.values()))

    @app.get("/table", response_class=HTMLResponse)
    def by_uri(uri: str, request: Request) -> Response:
        """The link in an Asset event's extra: the page of the table at ``uri`` (a configured
        table's named page; a table only Airflow knows of has this page)."""
        entry = at(uri)
        if entry.configured:
            return RedirectResponse(_root(request) + entry.link, status_code=303)
        return detail_page(table_detail(entry), _root(request))

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC:
            raise HTTPException(404, "no such file")
        body = (Path(__file__).parent / "static" / name).read_bytes()
        return Response(body, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})

    return app
