"""Triggers that wait for a table's commits in the triggerer (no worker slot held).

* ``DeltaCommitTrigger``: what ``DeltaLogTailSensor`` defers to: polls
  ``find_new_commits`` and fires once, with the result, when commits after its watermark match.
* ``DeltaCommitEventTrigger``: a ``BaseEventTrigger`` for ``AssetWatcher``: a DAG scheduled on
  the table's Asset runs once per new data commit (one ``TriggerEvent`` per matching commit;
  none for OPTIMIZE). Its watermark lives beside the table (``operators.watermarks``) and moves
  when the triggerer resumes the trigger after taking an event, so a restarted triggerer
  continues after the last commit it announced. A crash between handing over an event and
  recording it announces that commit again (at least once, never lost).

Both resolve storage options from the connection id in the triggerer (credentials are never
part of the serialized trigger) and run the blocking log reads in a thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from operators.conditions import find_new_commits


def _serialize(trigger, names: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """Classpath and kwargs: each constructor argument is kept under its own name, so the
    triggerer rebuilds the same trigger from them."""
    return f"{type(trigger).__module__}.{type(trigger).__qualname__}", {n: getattr(trigger, n) for n in names}


def _storage_options(conn_id: str | None) -> dict[str, str]:
    from operators.hooks import DeltaHook

    return DeltaHook(conn_id).settings.storage_options


class DeltaCommitTrigger(BaseTrigger):
    def __init__(
        self,
        *,
        table_uri: str,
        after_version: int,
        deltaplane_conn_id: str | None = None,
        data_change_only: bool = True,
        operations: list[str] | None = None,
        partition_filter: str | None = None,
        poke_interval: float = 30.0,
    ):
        super().__init__()
        self.table_uri = table_uri
        self.after_version = int(after_version)
        self.deltaplane_conn_id = deltaplane_conn_id
        self.data_change_only = data_change_only
        self.operations = list(operations) if operations else None
        self.partition_filter = partition_filter
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return _serialize(
            self,
            (
                "table_uri",
                "after_version",
                "deltaplane_conn_id",
                "data_change_only",
                "operations",
                "partition_filter",
                "poke_interval",
            ),
        )

    def check(self) -> dict[str, Any]:
        return find_new_commits(
            self.table_uri,
            self.after_version,
            storage_options=_storage_options(self.deltaplane_conn_id),
            data_change_only=self.data_change_only,
            operations=self.operations,
            partition_filter=self.partition_filter,
        )

    async def run(self):
        while True:
            result = await asyncio.to_thread(self.check)
            if result["commits"]:
                yield TriggerEvent({"status": "success", **result})
                return
            await asyncio.sleep(self.poke_interval)


class DeltaCommitEventTrigger(BaseEventTrigger):
    """One event per new data commit of a table, for ``AssetWatcher``::

    table = Asset("s3://lake/trips", watchers=[AssetWatcher(name="trips_commits",
                  trigger=DeltaCommitEventTrigger(table_uri="s3://lake/trips", deltaplane_conn_id="lake"))])
    """

    def __init__(
        self,
        *,
        table_uri: str,
        deltaplane_conn_id: str | None = None,
        watermark_key: str | None = None,
        start_after: int | None = None,
        data_change_only: bool = True,
        operations: list[str] | None = None,
        partition_filter: str | None = None,
        poke_interval: float = 30.0,
    ):
        super().__init__()
        self.table_uri = table_uri
        self.deltaplane_conn_id = deltaplane_conn_id
        self.watermark_key = watermark_key or "asset-watcher"
        self.start_after = start_after
        self.data_change_only = data_change_only
        self.operations = list(operations) if operations else None
        self.partition_filter = partition_filter
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return _serialize(
            self,
            (
                "table_uri",
                "deltaplane_conn_id",
                "watermark_key",
                "start_after",
                "data_change_only",
                "operations",
                "partition_filter",
                "poke_interval",
            ),
        )

    def _watermark(self, options) -> int:
        from engine.log.segment import list_log
        from engine.storage import open_store
        from operators.watermarks import read_watermark, write_watermark

        known = read_watermark(self.table_uri, self.watermark_key, options)
        if known is not None:
            return known
        if self.start_after is not None:
            start = int(self.start_after)
        else:  # first start: announce commits from now on
            latest = list_log(open_store(self.table_uri, options), 0).max_version
            start = -1 if latest is None else latest
        write_watermark(self.table_uri, self.watermark_key, start, options)
        return start

    async def run(self):
        from operators.watermarks import write_watermark

        options = await asyncio.to_thread(_storage_options, self.deltaplane_conn_id)
        watermark = await asyncio.to_thread(self._watermark, options)
        while True:
            result = await asyncio.to_thread(
                find_new_commits,
                self.table_uri,
                watermark,
                storage_options=options,
                data_change_only=self.data_change_only,
                operations=self.operations,
                partition_filter=self.partition_filter,
            )
            for commit in result["commits"]:
                yield TriggerEvent({"table": self.table_uri, **commit})
                watermark = commit["version"]
                await asyncio.to_thread(
                    write_watermark, self.table_uri, self.watermark_key, watermark, options
                )
            if result["latest_version"] > watermark:
                watermark = result["latest_version"]  # past commits that matched nothing (OPTIMIZE)
                await asyncio.to_thread(
                    write_watermark, self.table_uri, self.watermark_key, watermark, options
                )
            if not result["commits"]:
                await asyncio.sleep(self.poke_interval)
