"""What every deltaplane operator shares: the table, the run's stamp, exactly-once, Asset events.

Subclasses implement ``run(context, hook, table, stamp)`` (one engine call or one Spark job) and
return a JSON-able dict: ``"version"`` names the commit made (``None``: nothing committed),
``"already_applied"`` (or the older ``"skipped"``) says the work was found already in the table,
``"reason"`` says why nothing was committed; any other key is the operator's own. A writing
operator names the work it commits with ``work_key`` (the identity of its source files, its
staged batch, or its statement and run; ``None`` for work that is idempotent by nature, such as
OPTIMIZE, VACUUM or a checkpoint). The base class:

1. opens the table through ``DeltaHook``;
2. asks the engine whether the table already holds that work (``deltaplane.engine.work.find_applied``: one
   check for every operator and Spark job); if so the task succeeds without writing, reports the
   version that holds the work and publishes its Asset event (a retry, a clear, a rerun with a
   new run id, a backfill out of order, a mapped task given the same batch);
3. otherwise runs the work inside ``commit_metadata_scope`` (the run's stamp in commitInfo) and
   ``app_transaction_scope`` (the first commit records ``txn(work key)``, atomically with the
   data; a concurrent duplicate conflicts instead of landing twice);
4. shapes what ``run`` returned into the one XCom shape (``deltaplane.operators.utils.results``:
   ``table``, ``operation``, ``version``, ``read_version``, ``committed``, ``already_applied``,
   ``metrics`` read from the commit itself, ``reason``, ``engine``, ``work``, ``event``, then the
   operator's own keys), pushes it to XCom (the return value) and, for a commit, adds an event
   to the table's Asset (through the operator's ``AssetAlias`` outlet, so only a real commit
   makes one) whose ``extra`` holds version, operation, the kind of change, files and rows;
5. answers Airflow's OpenLineage provider (``get_openlineage_facets_on_start/complete/failure``)
   from the datasets the operator names (``lineage_datasets``) and what the run learnt of the
   table (``deltaplane.operators.utils.lineage``); lineage never fails a task.

An input error raised by the work (a bad predicate, a schema mismatch, a constraint violation,
an invalid argument or configuration: ``input_error``), and a Spark job that exited with the
jobs' input-error code, fails the task with ``AirflowFailException`` and the original message:
no retries, since the same input fails the same way every time.

``__init__`` does nothing but store arguments: DAG files stay fast to import.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from deltaplane.operators.utils.arguments import LocationArguments, location
from deltaplane.operators.utils.runs import asset_uri


def table_asset(table_uri: str, **asset_kwargs: Any) -> Asset:
    """The table's Asset (the one the writing operators publish events on), e.g.
    ``table_asset(uri, watchers=[AssetWatcher(...)])`` as a consumer DAG's schedule."""
    uri = asset_uri(table_uri)
    return Asset(name=uri, uri=uri, **asset_kwargs)


def maintenance_asset(table_uri: str, **asset_kwargs: Any) -> Asset:
    """The Asset of a table's maintenance commits (``dataChange=false``: OPTIMIZE, VACUUM): the
    writing operators announce those here, never on the table's Asset, so a DAG scheduled on the
    table runs for data and a DAG that wants to follow maintenance schedules on this one."""
    uri = f"{asset_uri(table_uri)}/_deltaplane/maintenance"
    return Asset(name=uri, uri=uri, **asset_kwargs)


def health_asset(table_uri: str, **asset_kwargs: Any) -> Asset:
    """The Asset a ``DeltaHealthEventTrigger`` announces a table's maintenance needs on: a
    maintenance DAG scheduled on it (``health_asset(uri, watchers=[AssetWatcher(...)])``) runs
    when the table's health says so."""
    uri = f"{asset_uri(table_uri)}/_deltaplane/health"
    return Asset(name=uri, uri=uri, **asset_kwargs)


def commit_alias(table_uri: str) -> AssetAlias:
    """The outlet a writing operator declares: events reach the table's Asset through it only
    when the task really committed (a declared Asset outlet gets an event on every success,
    also for a dry run or a retry with nothing to do, which would wake consumers for nothing)."""
    return AssetAlias(name=f"deltaplane-commits:{asset_uri(table_uri)}")


def input_error(error: BaseException) -> bool:
    """Whether ``error`` is the input's fault, so retrying cannot help: one of the engine's
    ``INPUT_ERRORS`` (the same grouping the Spark jobs exit with code 3 for), or a Spark job that
    exited with that code."""
    from deltaplane.engine import INPUT_ERRORS
    from deltaplane.spark_jobs.job import EXIT_INPUT

    if isinstance(error, INPUT_ERRORS):
        return True
    from deltaplane.operators.exceptions import SparkJobError

    return isinstance(error, SparkJobError) and getattr(error, "returncode", None) == EXIT_INPUT


class DeltaTableOperator(LocationArguments, BaseOperator):
    """Base of the operators that act on one Delta table."""

    template_fields: tuple[str, ...] = ("table_uri",)
    writes = True  # whether the operator may commit (and so emits Asset events)
    creates_table = False  # whether a missing table is created by the operator (else an error)
    operation_name: str | None = None  # the XCom's operation when no commit names one
    default_engine = "in-process"  # where the work runs, unless run() says otherwise
    ui_color = "#cfe8ff"

    def __init__(
        self,
        *,
        table_uri: str,
        deltaplane_conn_id: str | None = None,
        idempotent: bool = True,
        emit_asset: bool = True,
        **kwargs: Any,
    ):
        table_uri = location(table_uri)  # a pathlib.Path is its string from here on
        if self.writes and emit_asset and "outlets" not in kwargs and "{{" not in table_uri:
            kwargs["outlets"] = [commit_alias(table_uri)]
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.deltaplane_conn_id = deltaplane_conn_id
        self.idempotent = idempotent
        self.emit_asset = emit_asset

    @classmethod
    def get_serialized_fields(cls):
        """Airflow's stored DAG keeps the connection too: the ops view opens the table the way
        the task does (``deltaplane.operators.plugins.catalog``)."""
        return super().get_serialized_fields() | {"deltaplane_conn_id"}

    # --- the shared flow ----------------------------------------------------------------------

    def execute(self, context) -> dict[str, Any]:
        from deltaplane.engine import (
            ConcurrentTransactionError,
            app_transaction_scope,
            commit_metadata_scope,
            find_applied,
        )
        from deltaplane.operators.hooks.delta import DeltaHook
        from deltaplane.operators.utils.runs import run_stamp

        self._lineage_result = self._lineage_facts = None
        hook = DeltaHook(self.deltaplane_conn_id)
        stamp = dataclasses.replace(run_stamp(context), asset_event=self.announces_commits())
        table = self.open_table(hook)
        read_version = table.version if table is not None else None  # the facade moves on as it commits
        self._flow = {"hook": hook, "table": table, "key": None, "read_version": read_version}
        key = self.work_key(context, hook, table) if self.writes and self.idempotent else None
        self._flow["key"] = key
        if key is not None and table is not None:
            applied = find_applied(table.snapshot, key)
            if applied is not None:
                self.log.info("%s: %s; nothing to do", self.table_uri, applied.describe())
                result = {"version": applied.version, "already_applied": True, "reason": applied.describe()}
                self.settle(context, hook, result)
                return self._report(context, hook, result, key)
        try:
            with (
                commit_metadata_scope(stamp.commit_metadata()),
                app_transaction_scope(*(key.as_txn() if key is not None else (None, None))),
            ):
                result = self.run(context, hook, table, stamp)
        except ConcurrentTransactionError:
            # Another try of the same work landed while this one worked: report it, or re-raise
            # when the conflict was about something else.
            applied = find_applied(hook.get_table(self.table_uri).snapshot, key) if key else None
            if applied is None:
                raise
            self.log.info("%s: %s while this try ran", self.table_uri, applied.describe())
            result = {"version": applied.version, "already_applied": True, "reason": applied.describe()}
        except Exception as e:
            if isinstance(e, AirflowFailException) or not input_error(e):
                raise  # already final (e.g. a Spark job's input error), or worth retrying
            self.log.error("%s: input error, failing without retries: %s", self.table_uri, e)
            raise AirflowFailException(f"{type(e).__name__}: {e}") from e
        applied_already = result.get("already_applied") or result.get("skipped")
        if key is not None and applied_already and result.get("version") is None:
            # The commit found the key already there: a first try landed while this one worked.
            applied = find_applied(hook.get_table(self.table_uri).snapshot, key)
            if applied is not None:
                result.update(version=applied.version, reason=applied.describe())
        self.settle(context, hook, result)
        return self._report(context, hook, result, key)

    def _report(self, context, hook, result: dict[str, Any], key) -> dict[str, Any]:
        out = self.shape(result)
        self.publish(context, hook, out)
        return out

    def default_operation(self) -> str:
        """The XCom's ``operation`` when there is no commit to name it: ``operation_name``, a
        Spark job operator's job, else ``WRITE``."""
        return self.operation_name or str(getattr(self, "job", None) or "write").upper()

    def shape(self, raw: dict[str, Any]) -> dict[str, Any]:
        """``raw`` (what ``run`` returned, or a report pushed before failing) in the one XCom
        shape (``deltaplane.operators.utils.results``); the commit of its ``version`` is read
        once, for the metrics, the operation and lineage. Also kept for lineage."""
        from deltaplane.operators.utils.results import shape_result

        flow = getattr(self, "_flow", None) or {}
        table, key = flow.get("table"), flow.get("key")
        commit = None
        if raw.get("version") is not None:
            from deltaplane.engine import commit_changes

            fresh = flow["hook"].get_table(self.table_uri)
            flow["fresh"] = fresh
            commit = commit_changes(fresh.snapshot.store, int(raw["version"]), fresh.snapshot.metadata)
        out = shape_result(
            raw,
            table=self.table_uri,
            operation=self.default_operation(),
            read_version=flow.get("read_version"),
            engine=self.default_engine,
            work=key.app_id if key is not None else None,
            commit=commit,
        )
        self._lineage_result = out
        try:
            from deltaplane.operators.utils.lineage import table_facts

            metadata = table.snapshot.metadata if table is not None else None
            self._lineage_facts = table_facts(commit, metadata)
        except Exception:  # lineage never fails a task
            self.log.warning("%s: no lineage facts", self.table_uri, exc_info=True)
        return out

    def settle(self, context, hook, result: dict[str, Any]) -> None:
        """What follows once the table holds this task's work, whichever try committed it (this
        one, an earlier one, a concurrent one): the commit operator moves the batch's landing
        files to ``_processed``. Runs before the XCom is pushed; must be safe to repeat."""

    def work_key(self, context, hook, table):
        """The ``deltaplane.engine.work.WorkKey`` of what this task commits (``None``: idempotent by nature).
        Called once per try, before ``run``; may keep what it read for ``run``."""
        return None

    def on_kill(self) -> None:
        """Stop any ``spark-submit`` this task started (compaction and DML above their Spark
        threshold run one), with everything it started."""
        from deltaplane.operators.hooks.spark import DeltaSparkSubmitHook  # a hook: below every operator

        if DeltaSparkSubmitHook.kill_all():
            self.log.info("%s: stopped the running Spark job", self.table_uri)

    def open_table(self, hook):
        """The table (``None`` when it does not exist yet and the operator may create it)."""
        from deltaplane.engine import TableNotFoundError

        try:
            return hook.get_table(self.table_uri)
        except TableNotFoundError:
            if self.creates_table:
                return None
            raise

    def run(self, context, hook, table, stamp) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def announces_commits(self) -> bool:
        """Whether this task announces its commits through its ``AssetAlias`` outlet (a writing
        operator with ``emit_asset``, its alias declared: not for a templated ``table_uri``)."""
        if not (self.writes and self.emit_asset) or "{{" in self.table_uri:
            return False
        alias = commit_alias(self.table_uri)
        return any(isinstance(o, AssetAlias) and o.name == alias.name for o in self.outlets or ())

    def publish(self, context, hook, result: dict[str, Any]) -> None:
        """Announce the commit (nothing for a run that committed nothing): a data-changing commit
        on the table's Asset, a ``dataChange=false`` one (OPTIMIZE, VACUUM) on the table's
        ``maintenance_asset``. The ``extra`` is ``{"from_trigger": false, "payload": {...}}``,
        the shape of the ``AssetWatcher``'s events."""
        version = result.get("version")
        if version is None or not self.announces_commits():
            return
        from deltaplane.operators.utils.runs import commit_event

        fresh = (getattr(self, "_flow", None) or {}).get("fresh") or hook.get_table(self.table_uri)
        extra = commit_event(fresh, int(version), self.table_uri)
        result["event"] = extra
        payload = extra["payload"]
        asset = table_asset(self.table_uri) if payload["dataChange"] else maintenance_asset(self.table_uri)
        context["outlet_events"][commit_alias(self.table_uri)].add(asset, extra=extra)
        self.log.info(
            "%s: version %s (%s, %s) -> Asset event on %s: %s",
            self.table_uri,
            version,
            payload["operation"],
            payload["kind"],
            asset.uri,
            payload,
        )

    # --- OpenLineage (Airflow's OpenLineage provider calls these) -------------------------------

    def lineage_datasets(self, result: dict[str, Any] | None, facts: dict[str, Any]):
        """``(inputs, outputs)``: ``deltaplane.operators.utils.lineage.Ref`` values. ``result`` is
        the XCom (``None`` before the run), ``facts`` what the run learnt of the table. By
        default a writing operator outputs its table and any other reads it."""
        from deltaplane.operators.utils.lineage import table_ref

        ref = table_ref(self.table_uri, result, facts, output=self.writes)
        return ([], [ref]) if self.writes else ([ref], [])

    def _lineage(self, ran: bool):
        try:
            from deltaplane.operators.utils.lineage import operator_lineage
        except ImportError:  # the OpenLineage provider is not installed
            return None
        if not ran:
            return operator_lineage(self, None, None)
        return operator_lineage(
            self, getattr(self, "_lineage_result", None), getattr(self, "_lineage_facts", None)
        )

    def get_openlineage_facets_on_start(self):
        """The datasets, by name only: nothing has run yet."""
        return self._lineage(ran=False)

    def get_openlineage_facets_on_complete(self, task_instance):
        """The datasets with their schema, version and what the commit changed."""
        return self._lineage(ran=True)

    def get_openlineage_facets_on_failure(self, task_instance):
        """The datasets, with whatever the task reported before failing (a rejected batch)."""
        return self._lineage(ran=True)
