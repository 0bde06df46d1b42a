"""``DeltaLogTailSensor``: wait for new commits of a table after a watermark version."""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.sensor import BaseSensorOperator, PokeReturnValue

from operators.conditions import find_new_commits


class DeltaLogTailSensor(BaseSensorOperator):
    """Wait for commits after the watermark that match the filters; return them.

    The watermark is ``after_version`` when given (templated), else the one this task keeps
    beside the table (``operators.watermarks``, key ``<dag_id>.<task_id>`` or ``watermark_key``;
    ``-1``, the whole history, the first time). Filters: ``data_change_only`` (default: OPTIMIZE
    and other rewrites do not count), ``operations`` (``["WRITE", "MERGE"]``), and a
    ``partition_filter`` on partition columns. The XCom is ``{"after_version", "latest_version",
    "commits": [{"version", "operation", "files", "rowsAdded", ...}]}``; with ``advance_watermark``
    the kept watermark moves to ``latest_version`` when the sensor succeeds (turn it off to move
    it only after the consumer has committed, with ``operators.watermarks.write_watermark``).

    ``deferrable=True`` waits in the triggerer (``DeltaCommitTrigger``); the poke and the trigger
    evaluate the same function, ``find_new_commits``.
    """

    template_fields = ("table_uri", "after_version", "partition_filter")
    ui_color = "#d4edda"

    def __init__(
        self,
        *,
        table_uri: str,
        deltaplane_conn_id: str | None = None,
        after_version: int | str | None = None,
        watermark_key: str | None = None,
        advance_watermark: bool = True,
        data_change_only: bool = True,
        operations: list[str] | None = None,
        partition_filter: str | None = None,
        deferrable: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.deltaplane_conn_id = deltaplane_conn_id
        self.after_version = after_version
        self.watermark_key = watermark_key
        self.advance_watermark = advance_watermark
        self.data_change_only = data_change_only
        self.operations = operations
        self.partition_filter = partition_filter
        self.deferrable = deferrable

    def _options(self) -> dict[str, str]:
        from operators.hooks import DeltaHook

        return DeltaHook(self.deltaplane_conn_id).settings.storage_options

    def _key(self) -> str:
        return self.watermark_key or f"{self.dag_id}.{self.task_id}"

    def _start(self) -> int:
        if self.after_version not in (None, ""):
            return int(self.after_version)
        from operators.watermarks import read_watermark

        known = read_watermark(self.table_uri, self._key(), self._options())
        return -1 if known is None else known

    def _check(self, after: int) -> dict[str, Any]:
        return find_new_commits(
            self.table_uri,
            after,
            storage_options=self._options(),
            data_change_only=self.data_change_only,
            operations=self.operations,
            partition_filter=self.partition_filter,
        )

    def poke(self, context) -> PokeReturnValue:
        result = self._check(self._start())
        self.log.info(
            "%s: %d matching commit(s) after version %s (latest %s)",
            self.table_uri,
            len(result["commits"]),
            result["after_version"],
            result["latest_version"],
        )
        return PokeReturnValue(is_done=bool(result["commits"]), xcom_value=result)

    def execute(self, context) -> Any:
        if not self.deferrable:
            result = super().execute(context)
            return self._finish(result)
        after = self._start()
        result = self._check(after)
        if result["commits"]:
            return self._finish(result)
        from operators.triggers import DeltaCommitTrigger

        self.log.info("%s: nothing after version %d yet; deferring to the triggerer", self.table_uri, after)
        self.defer(
            trigger=DeltaCommitTrigger(
                table_uri=self.table_uri,
                after_version=after,
                deltaplane_conn_id=self.deltaplane_conn_id,
                data_change_only=self.data_change_only,
                operations=self.operations,
                partition_filter=self.partition_filter,
                poke_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout,
        )

    def execute_complete(self, context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        if not event or event.get("status") != "success":
            raise RuntimeError(f"{self.table_uri}: the commit trigger ended without a result: {event!r}")
        result = {k: v for k, v in event.items() if k != "status"}
        return self._finish(result)

    def _finish(self, result: dict[str, Any]) -> dict[str, Any]:
        if self.advance_watermark and result and result.get("commits"):
            from operators.watermarks import write_watermark

            write_watermark(self.table_uri, self._key(), int(result["latest_version"]), self._options())
        return result
