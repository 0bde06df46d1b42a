"""Who is committing (the Airflow run) and what a commit tells Airflow.

Every commit a task makes is stamped ``{"airflow": {dag_id, run_id, task_id, try_number[,
map_index][, asset_event]}}`` in its commitInfo, so the table's history names the run that made
each version. The stamp is for people and the ops view: whether a task's work is already in the
table is decided by the work's own key (``deltaplane.engine.work``; see ``operators.base``), never
by the run's time. ``asset_event: true`` says the task announces the commit on the table's Asset
itself, so the ``AssetWatcher`` does not announce it a second time.

Every Asset event of a commit has one shape, whoever announces it: ``extra = {"from_trigger":
bool, "payload": event_payload(...)}``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunStamp:
    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    map_index: int = -1
    asset_event: bool = False  # the task announces its data commits through its outlet

    def commit_metadata(self) -> dict[str, Any]:
        return {
            "airflow": {
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "task_id": self.task_id,
                "try_number": self.try_number,
                **({"map_index": self.map_index} if self.map_index >= 0 else {}),
                **({"asset_event": True} if self.asset_event else {}),
            }
        }

    def identity(self) -> list:
        """The run and task, for work keys that name "this statement, issued by this task of this
        run" (a DELETE or UPDATE): a retry or clear of the task is the same work, a new run is not."""
        return [self.dag_id, self.task_id, self.map_index, self.run_id]


def run_stamp(context) -> RunStamp:
    run = context["dag_run"]
    ti = context["ti"]
    map_index = getattr(ti, "map_index", None)
    return RunStamp(
        dag_id=run.dag_id,
        task_id=ti.task_id,
        run_id=run.run_id,
        try_number=int(getattr(ti, "try_number", 1) or 1),
        map_index=int(map_index) if map_index is not None else -1,
    )


def asset_uri(table_uri: str) -> str:
    """The Asset URI of a table: object-store URIs as they are, local paths as ``file://``."""
    if "://" in table_uri:
        return table_uri.rstrip("/")
    if table_uri.startswith("file:"):
        return "file:///" + table_uri[len("file:") :].lstrip("/")
    return "file://" + str(Path(table_uri).resolve())


def ops_view_link(table_uri: str) -> str:
    """The table's page in Airflow's UI (Airflow has no plugin tab on assets): a path under
    Airflow's ``[api] base_url`` that opens the ops view inside Airflow's frame."""
    from urllib.parse import quote, urlsplit

    try:
        from airflow.configuration import conf

        base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    except Exception:  # no Airflow configuration here: the UI at the server's root
        base = ""
    return f"{base}/plugin/deltaplane/deltaplane/table?uri={quote(table_uri, safe='')}"


def event_payload(table_uri: str, summary: dict[str, Any]) -> dict[str, Any]:
    """What every Asset event of a commit says, whoever announces it (a task's outlet or the
    ``AssetWatcher``'s trigger): ``status`` ``success``, ``table``, the engine's commit summary
    (``deltaplane.engine.tail.CommitChanges.summary``: ``version``, ``timestamp``, ``operation``,
    ``kind``, ``dataChange``, ``rowsAdded``, ``rowsDeleted``, ``rowsRestored``, ``filesAdded``,
    ``filesRemoved``, ``newFiles``) and ``ops_view``, the table page's link."""
    return {"status": "success", "table": table_uri, **summary, "ops_view": ops_view_link(table_uri)}


def outlet_extra(payload: dict[str, Any]) -> dict[str, Any]:
    """An outlet event's ``extra`` in the shape Airflow gives a watcher's event (``{"from_trigger":
    true, "payload": ...}``): consumers read ``extra["payload"]`` whoever announced the commit."""
    return {"from_trigger": False, "payload": payload}


def commit_event(table, version: int, table_uri: str | None = None) -> dict[str, Any]:
    """The Asset event ``extra`` a task publishes for commit ``version`` of ``table``:
    ``{"from_trigger": false, "payload": event_payload(...)}``."""
    from deltaplane.engine import commit_changes

    changes = commit_changes(table.snapshot.store, version, table.snapshot.metadata)
    return outlet_extra(event_payload(table_uri or table.uri, changes.summary()))


def announced_by_a_task(commit_info: dict[str, Any]) -> bool:
    """Whether the commit was made by a deltaplane task that announces its commits through its
    outlet (``RunStamp.asset_event`` in commitInfo): the ``AssetWatcher`` leaves those to it."""
    stamp = commit_info.get("airflow") if isinstance(commit_info, dict) else None
    return isinstance(stamp, dict) and stamp.get("asset_event") is True
