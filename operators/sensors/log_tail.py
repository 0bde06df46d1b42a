"""``DeltaLogTailSensor``: wait for new commits of a table after a watermark version; and
``DeltaWatermarkOperator``, which moves the watermark once the work downstream succeeded."""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk import conf
from airflow.sdk.bases.sensor import BaseSensorOperator, PokeReturnValue

from deltaplane.engine import DEFAULT_START, LATEST, check_start
from deltaplane.operators.operators.base import DeltaTableOperator
from deltaplane.operators.utils.arguments import LocationArguments
from deltaplane.operators.utils.conditions import CommitFilter, take_filter


def default_watermark_key(dag_id: str, task_id: str) -> str:
    return f"{dag_id}.{task_id}"


@contextmanager
def stop_on_sigterm(what: str) -> Iterator[None]:
    """While a task waits, SIGTERM ends the wait: Airflow's task runner answers SIGTERM only by
    calling ``on_kill`` and lets the task go on, so a poking sensor kept poking (and sleeping)
    until its timeout after being told to stop. Airflow's handler still runs first; then
    ``AirflowTaskTerminated`` (Airflow's own "terminated" exception) ends the task."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
        from airflow.sdk.exceptions import AirflowTaskTerminated

        if callable(previous):
            previous(signum, frame)
        raise AirflowTaskTerminated(f"{what}: SIGTERM while waiting; stopped")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class DeltaLogTailSensor(LocationArguments, BaseSensorOperator):
    """Wait for commits after the watermark that match the filter; return them.

    The watermark is ``after_version`` when given (templated), else the one kept beside the table
    under ``watermark_key`` (``deltaplane.engine.watermarks``; default ``<dag_id>.<task_id>``;
    ``-1``, the whole history, the first time). The filter takes the commit triggers' arguments
    (``deltaplane.engine.commit_filter.FILTER_ARGS``): ``data_change_only`` (default: OPTIMIZE and
    other rewrites do not count), ``kinds`` (``append``, ``delete``, ``update``, ``restore``),
    ``operations`` (``["WRITE", "MERGE"]``) and a ``partition_filter`` (templated). ``start``
    (``"earliest"``, the default, ``"latest"`` or a version ``N``; the event trigger's option
    too) says where a watermark that does not exist yet begins; ``"latest"`` records the version
    it resolved to, so a run that ends before a commit lands does not move the start on.

    The XCom (docs/reference.md documents each key): the operators' one shape
    (``deltaplane.operators.utils.results``: ``operation`` ``LOG TAIL``, ``version`` null,
    ``read_version`` the latest version examined, ``committed`` false, ``engine`` ``in-process``
    or ``triggerer``) plus ``after_version`` (where it started), ``latest_version`` (the newest
    version examined: what ``DeltaWatermarkOperator`` records) and ``commits``, a list with one
    dict per matching commit: ``version``, ``timestamp`` (ms), ``operation``, ``kind``,
    ``dataChange``, ``rowsAdded``, ``rowsDeleted``, ``rowsRestored``, ``filesAdded``,
    ``filesRemoved``, ``newFiles`` (a count) and ``files`` (the URIs of its new files).
    OpenLineage: the table, at the latest version examined, as the task's input.

    The sensor does not move the watermark: the commits it found are not handled until the work
    downstream has succeeded. Put a ``DeltaWatermarkOperator`` after that work (the DAG factory
    does), or move it yourself (``deltaplane.engine.watermarks.write_watermark``); a failed run
    then sees the same commits again. ``advance_watermark=True`` moves it as soon as the sensor
    fires (at most once: a downstream failure loses those commits).

    ``deferrable`` (default: ``[operators] default_deferrable``) waits in the triggerer
    (``DeltaCommitTrigger``) after one check in the worker; the poke and the trigger evaluate the
    same engine function, ``find_new_commits``. The deferred wait keeps the sensor's ``timeout``:
    the trigger reports a timeout event at the deadline (and the deferral itself carries the
    timeout), which fails the task like a poking sensor's timeout (``DeltaTriggerTimeout``, an
    ``AirflowSensorTimeout``: no retries, skipped with ``soft_fail``); a trigger's error event (the
    table unreadable or gone) fails it with ``DeltaTriggerError``, which is retried. SIGTERM ends
    a poking (or checking) sensor at once (``stop_on_sigterm``), instead of the poke loop going on.
    """

    template_fields = ("table_uri", "after_version", "partition_filter", "watermark_key")
    ui_color = "#d4edda"
    operation_name = "LOG TAIL"  # the XCom's operation (a sensor commits nothing)

    @classmethod
    def get_serialized_fields(cls):
        """The connection is kept in Airflow's stored DAG, as the operators' is."""
        return super().get_serialized_fields() | {"deltaplane_conn_id"}

    def __init__(
        self,
        *,
        table_uri: str,
        deltaplane_conn_id: str | None = None,
        after_version: int | str | None = None,
        watermark_key: str | None = None,
        start: str | int = DEFAULT_START,
        advance_watermark: bool = False,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ):
        # The filter is checked here, at parse time: a wrong type fails the DAG file, not the run.
        where = f"{type(self).__name__}(task_id={kwargs.get('task_id')!r})"
        commit_filter = take_filter(where, kwargs)
        start = check_start(start, owner=where)
        super().__init__(**kwargs)
        self.start = start
        self.table_uri = table_uri
        self.deltaplane_conn_id = deltaplane_conn_id
        self.after_version = after_version
        self.watermark_key = watermark_key
        self.advance_watermark = advance_watermark
        self.commit_filter = commit_filter
        self.partition_filter = commit_filter.partition_filter
        self.deferrable = deferrable

    def _options(self) -> dict[str, str]:
        from deltaplane.operators.hooks.delta import DeltaHook

        return DeltaHook(self.deltaplane_conn_id).settings.storage_options

    def _key(self) -> str:
        return self.watermark_key or default_watermark_key(self.dag_id, self.task_id)

    def _filter(self) -> CommitFilter:
        """The filter with the rendered ``partition_filter``."""
        return CommitFilter.of(
            {**self.commit_filter.to_kwargs(), "partition_filter": self.partition_filter}, owner=self.task_id
        )

    def _start(self) -> int:
        if self.after_version not in (None, ""):
            return self._after_version()
        from deltaplane.engine import read_watermark, write_watermark

        options = self._options()
        known = read_watermark(self.table_uri, self._key(), options)
        if known is not None:
            return known
        from deltaplane.engine import open_store, start_after

        after = start_after(open_store(self.table_uri, options), self.start)
        if self.start == LATEST:
            # "latest" is the version current the first time: recorded, so a run that ends
            # before a commit lands (a quiet hour) does not let the next run start later.
            write_watermark(self.table_uri, self._key(), after, options)
        return after

    def _after_version(self) -> int:
        """The rendered ``after_version`` as a version; anything else (a whole XCom, a list of
        commits) is an error naming the argument and what it got."""
        value = self.after_version
        try:
            version = int(str(value).strip()) if not isinstance(value, bool) else None
        except ValueError:
            version = None
        if version is None or version < -1:
            from deltaplane.engine import InvalidArgumentError

            raise InvalidArgumentError(
                f"{self.task_id}: after_version must render to a version (an int >= -1), got "
                f"{str(value)[:200]!r}; to start after what another log-tail sensor saw, use "
                "\"{{ ti.xcom_pull(task_ids='<sensor>')['latest_version'] }}\""
            )
        return version

    def _check(self, after: int) -> dict[str, Any]:
        from deltaplane.engine import find_new_commits

        return find_new_commits(
            self.table_uri, after, storage_options=self._options(), commit_filter=self._filter()
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
        with stop_on_sigterm(f"{self.task_id} ({self.table_uri})"):
            if not self.deferrable:
                result = super().execute(context)
                return self._finish(result, engine="in-process")
            after = self._start()
            result = self._check(after)
        if result["commits"]:
            return self._finish(result, engine="in-process")
        from deltaplane.operators.triggers.commits import DeltaCommitTrigger

        timeout = float(self.timeout)
        self.log.info(
            "%s: nothing after version %d yet; deferring to the triggerer for at most %.0f s",
            self.table_uri,
            after,
            timeout,
        )
        self.defer(
            trigger=DeltaCommitTrigger(
                table_uri=self.table_uri,
                after_version=after,
                deltaplane_conn_id=self.deltaplane_conn_id,
                poke_interval=self.poke_interval,
                deadline=time.time() + timeout,
                **self._filter().to_kwargs(),
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=timeout),
        )

    def execute_complete(self, context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        from deltaplane.operators.exceptions import DeltaTriggerError, DeltaTriggerTimeout

        status = (event or {}).get("status")
        if status == "success":
            return self._finish({k: v for k, v in event.items() if k != "status"}, engine="triggerer")
        message = (event or {}).get("message") or f"the commit trigger ended without a result: {event!r}"
        if status == "timeout":
            raise DeltaTriggerTimeout(f"{self.table_uri}: {message}")
        raise DeltaTriggerError(f"{self.table_uri}: {message}")

    def _finish(self, result: dict[str, Any], *, engine: str) -> dict[str, Any]:
        from deltaplane.operators.utils.results import shape_result

        if self.advance_watermark and result and result.get("commits"):
            from deltaplane.engine import write_watermark

            write_watermark(self.table_uri, self._key(), int(result["latest_version"]), self._options())
        found = len(result.get("commits") or [])
        raw = {
            **result,
            "reason": f"a sensor commits nothing: {found} matching commit(s) after version "
            f"{result.get('after_version')} (latest {result.get('latest_version')})",
        }
        out = shape_result(
            raw,
            table=self.table_uri,
            operation=self.operation_name,
            read_version=result.get("latest_version"),
            engine=engine,
            work=None,
        )
        self._lineage_result = out
        return out

    # --- OpenLineage (Airflow's OpenLineage provider calls these) -------------------------------

    def lineage_datasets(self, result: dict[str, Any] | None, facts: dict[str, Any]):
        """``(inputs, outputs)``: the table, read up to the latest version examined."""
        from deltaplane.operators.utils.lineage import Ref

        ref = Ref(self.table_uri, table=True)
        if result is not None:
            ref.version = result.get("latest_version")
            added = [c.get("rowsAdded") for c in result.get("commits") or []]
            ref.rows = sum(added) if added and None not in added else None
        return [ref], []

    def _lineage(self, result: dict[str, Any] | None):
        try:
            from deltaplane.operators.utils.lineage import operator_lineage
        except ImportError:  # the OpenLineage provider is not installed
            return None
        return operator_lineage(self, result, {})

    def get_openlineage_facets_on_start(self):
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance):
        return self._lineage(getattr(self, "_lineage_result", None))

    def get_openlineage_facets_on_failure(self, task_instance):
        return self._lineage(None)


class DeltaWatermarkOperator(DeltaTableOperator):
    """Move a log-tail sensor's watermark to the version it saw, once the work it started has
    succeeded: put it after that work (default trigger rule: it runs only when everything
    upstream succeeded). ``sensor_task_id`` names the sensor; its XCom's ``latest_version`` is
    written under the sensor's key (or ``watermark_key``). A retry writes the same version."""

    writes = False
    ui_color = "#d4edda"
    template_fields = ("table_uri", "watermark_key")

    def __init__(self, *, table_uri: str, sensor_task_id: str, watermark_key: str | None = None, **kwargs):
        super().__init__(table_uri=table_uri, **kwargs)
        if not isinstance(sensor_task_id, str) or not sensor_task_id:
            raise TypeError(
                f"{self.task_id}: sensor_task_id must be the sensor's task id, got {sensor_task_id!r}"
            )
        self.sensor_task_id = sensor_task_id
        self.watermark_key = watermark_key

    def open_table(self, hook):
        return None  # only the watermark beside the table is written

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from deltaplane.engine import read_watermark, write_watermark

        seen = context["ti"].xcom_pull(task_ids=self.sensor_task_id)
        if not isinstance(seen, dict) or not isinstance(seen.get("latest_version"), int):
            raise ValueError(
                f"{self.task_id}: {self.sensor_task_id!r} left no log-tail result to acknowledge (its XCom "
                f"must be a DeltaLogTailSensor's, a dict with an int 'latest_version'; got "
                f"{type(seen).__name__}{' with keys ' + str(sorted(seen)) if isinstance(seen, dict) else ''})"
            )
        key = self.watermark_key or default_watermark_key(self.dag_id, self.sensor_task_id)
        options = hook.settings.storage_options
        before = read_watermark(self.table_uri, key, options)
        version = int(seen["latest_version"])
        if before is not None and before > version:
            self.log.info("%s: watermark %s is already at %d (past %d)", self.table_uri, key, before, version)
            return {"version": None, "watermark": before, "key": key}
        write_watermark(self.table_uri, key, version, options)
        self.log.info("%s: watermark %s %s -> %d", self.table_uri, key, before, version)
        return {"version": None, "watermark": version, "previous": before, "key": key}
