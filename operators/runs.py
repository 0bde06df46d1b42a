"""Who is committing (the Airflow run), whether it already did, and what it tells Airflow.

Retry safety: a writing task commits with ``txn(appId="<dag_id>.<task_id>", version=<the run's
time in microseconds>)`` (the data interval's end, else the logical date, else ``run_after``),
and stamps ``{"airflow": {dag_id, run_id, task_id, try_number}}`` into commitInfo. Before it
works, it asks the table: a recorded version equal to its own means this run's commit already
landed (a retry after a crash, or a cleared task): it succeeds without writing. A recorded version
*greater* than its own means a later run committed first (a backfill, a catch-up run): then the
commit history decides (a commit stamped with this run and task means done), and the task
commits without a txn, so the newer version stays recorded.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HISTORY_SEARCH = 1000  # commits searched for this run's own commit when runs arrive out of order


@dataclass(frozen=True)
class RunIdentity:
    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    app_version: int
    map_index: int = -1

    @property
    def app_id(self) -> str:
        base = f"{self.dag_id}.{self.task_id}"
        return base if self.map_index < 0 else f"{base}.{self.map_index}"

    def commit_metadata(self) -> dict[str, Any]:
        return {
            "airflow": {
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "task_id": self.task_id,
                "try_number": self.try_number,
                **({"map_index": self.map_index} if self.map_index >= 0 else {}),
            }
        }

    def made(self, commit_info: dict) -> bool:
        stamp = commit_info.get("airflow")
        return (
            isinstance(stamp, dict)
            and stamp.get("dag_id") == self.dag_id
            and stamp.get("run_id") == self.run_id
            and stamp.get("task_id") == self.task_id
            and stamp.get("map_index", -1) == self.map_index
        )


def _micros(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp() * 1_000_000)


def identity(context) -> RunIdentity:
    run = context["dag_run"]
    ti = context["ti"]
    when = None
    for name in ("data_interval_end", "logical_date", "run_after"):
        when = _micros(getattr(run, name, None))
        if when is not None:
            break
    if when is None:
        raise ValueError(f"run {run.run_id} has no data interval, logical date or run_after")
    return RunIdentity(
        dag_id=run.dag_id,
        task_id=ti.task_id,
        run_id=run.run_id,
        try_number=int(getattr(ti, "try_number", 1) or 1),
        app_version=when,
        map_index=int(getattr(ti, "map_index", -1) if getattr(ti, "map_index", None) is not None else -1),
    )


@dataclass(frozen=True)
class PriorCommit:
    """What the table says about this task's run before it does anything."""

    done: bool
    version: int | None = None  # the commit this run made, when found
    out_of_order: bool = False  # a later run already recorded a newer version


def prior_commit(table, ident: RunIdentity) -> PriorCommit:
    recorded = table.snapshot.app_transaction_version(ident.app_id)
    if recorded is None or recorded < ident.app_version:
        return PriorCommit(False)
    found = next((info for info in table.history(HISTORY_SEARCH) if ident.made(info)), None)
    if recorded == ident.app_version:
        return PriorCommit(True, found["version"] if found else None)
    if found is not None:
        return PriorCommit(True, found["version"], out_of_order=True)
    return PriorCommit(False, out_of_order=True)


def asset_uri(table_uri: str) -> str:
    """The Asset URI of a table: object-store URIs as they are, local paths as ``file://``."""
    if "://" in table_uri:
        return table_uri.rstrip("/")
    if table_uri.startswith("file:"):
        return "file:///" + table_uri[len("file:") :].lstrip("/")
    return "file://" + str(Path(table_uri).resolve())


def commit_event(table, version: int) -> dict[str, Any]:
    """The Asset event ``extra`` for one commit: what a consumer decides on."""
    from engine.tail import commit_changes

    changes = commit_changes(table.snapshot.store, version, table.snapshot.metadata)
    metrics = changes.commit_info.get("operationMetrics", {}) or {}
    removed_rows = sum(
        int(metrics.get(name, 0) or 0)
        for name in ("numDeletedRows", "numUpdatedRows", "numTargetRowsDeleted")
    )
    return {
        "table": table.uri,
        "version": version,
        "operation": changes.operation,
        "dataChange": changes.data_change,
        "filesAdded": changes.files_added,
        "filesRemoved": changes.files_removed,
        "rowsAdded": changes.added_rows(),
        "rowsRemoved": removed_rows,
        "timestamp": changes.timestamp,
    }
