"""Who is committing (the Airflow run) and what a commit tells Airflow.

Every commit a task makes is stamped ``{"airflow": {dag_id, run_id, task_id, try_number[,
map_index]}}`` in its commitInfo, so the table's history names the run that made each version.
The stamp is for people and the ops view: whether a task's work is already in the table is
decided by the work's own key (``deltaplane.engine.work``; see ``operators.base``), never by
the run's time.
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


def commit_event(table, version: int) -> dict[str, Any]:
    """The Asset event ``extra`` for one commit: what a consumer decides on (``deltaplane.engine.tail``'s
    summary: ``kind`` append/delete/update/none, ``rowsAdded``, ``rowsDeleted``, files), and
    ``ops_view``: the table's page in Airflow's UI (Airflow has no plugin tab on assets), a path
    under Airflow's ``[api] base_url`` that opens the ops view inside Airflow's frame."""
    from urllib.parse import quote, urlsplit

    from deltaplane.engine.tail import commit_changes

    changes = commit_changes(table.snapshot.store, version, table.snapshot.metadata)
    try:
        from airflow.configuration import conf

        base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    except Exception:  # no Airflow configuration here: the UI at the server's root
        base = ""
    link = f"{base}/plugin/deltaplane/deltaplane/table?uri={quote(table.uri, safe='')}"
    return {"table": table.uri, **changes.summary(), "ops_view": link}
