"""What every deltaplane operator shares: the table, the run's stamp, exactly-once, Asset events.

Subclasses implement ``run(context, hook, table, stamp)`` (one engine call or one Spark job) and
return a JSON-able dict of metrics; a ``"version"`` key names the commit made (``None``: nothing
committed). A writing operator names the work it commits with ``work_key`` (the identity of its
source files, its staged batch, or its statement and run; ``None`` for work that is idempotent
by nature, such as OPTIMIZE, VACUUM or a checkpoint). The base class:

1. opens the table through ``DeltaHook``;
2. asks the engine whether the table already holds that work (``deltaplane.engine.work.find_applied``: one
   check for every operator and Spark job); if so the task succeeds without writing, reports the
   version that holds the work and publishes its Asset event (a retry, a clear, a rerun with a
   new run id, a backfill out of order, a mapped task given the same batch);
3. otherwise runs the work inside ``commit_metadata_scope`` (the run's stamp in commitInfo) and
   ``app_transaction_scope`` (the first commit records ``txn(work key)``, atomically with the
   data; a concurrent duplicate conflicts instead of landing twice);
4. pushes the metrics to XCom (the return value) and, for a commit, adds an event to the table's
   Asset (through the operator's ``AssetAlias`` outlet, so only a real commit makes one) whose
   ``extra`` holds version, operation, the kind of change, files and rows.

An input error raised by the work (a bad predicate, a schema mismatch, a constraint violation,
an invalid argument or configuration: ``input_error``), and a Spark job that exited with the
jobs' input-error code, fails the task with ``AirflowFailException`` and the original message:
no retries, since the same input fails the same way every time.

``__init__`` does nothing but store arguments: DAG files stay fast to import.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from deltaplane.operators.utils.runs import asset_uri


def table_asset(table_uri: str) -> Asset:
    uri = asset_uri(table_uri)
    return Asset(name=uri, uri=uri)


def commit_alias(table_uri: str) -> AssetAlias:
    """The outlet a writing operator declares: events reach the table's Asset through it only
    when the task really committed (a declared Asset outlet gets an event on every success,
    also for a dry run or a retry with nothing to do, which would wake consumers for nothing)."""
    return AssetAlias(name=f"deltaplane-commits:{asset_uri(table_uri)}")


def input_error(error: BaseException) -> bool:
    """Whether ``error`` is the input's fault, so retrying cannot help: one of the engine's
    ``INPUT_ERRORS`` (the same grouping the Spark jobs exit with code 3 for), or a Spark job that
    exited with that code."""
    from deltaplane.engine.errors import INPUT_ERRORS
    from deltaplane.spark_jobs.job import EXIT_INPUT

    if isinstance(error, INPUT_ERRORS):
        return True
    from deltaplane.operators.exceptions import SparkJobError

    return isinstance(error, SparkJobError) and getattr(error, "returncode", None) == EXIT_INPUT


class DeltaTableOperator(BaseOperator):
    """Base of the operators that act on one Delta table."""

    template_fields: tuple[str, ...] = ("table_uri",)
    writes = True  # whether the operator may commit (and so emits Asset events)
    creates_table = False  # whether a missing table is created by the operator (else an error)
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
        if self.writes and emit_asset and "outlets" not in kwargs and "{{" not in table_uri:
            kwargs["outlets"] = [commit_alias(table_uri)]
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.deltaplane_conn_id = deltaplane_conn_id
        self.idempotent = idempotent
        self.emit_asset = emit_asset

    # --- the shared flow ----------------------------------------------------------------------

    def execute(self, context) -> dict[str, Any]:
        from deltaplane.engine.errors import ConcurrentTransactionError
        from deltaplane.engine.transaction import app_transaction_scope, commit_metadata_scope
        from deltaplane.engine.work import find_applied
        from deltaplane.operators.hooks.delta import DeltaHook
        from deltaplane.operators.utils.runs import run_stamp

        hook = DeltaHook(self.deltaplane_conn_id)
        stamp = run_stamp(context)
        table = self.open_table(hook)
        key = self.work_key(context, hook, table) if self.writes and self.idempotent else None
        if key is not None and table is not None:
            applied = find_applied(table.snapshot, key)
            if applied is not None:
                self.log.info("%s: %s; nothing to do", self.table_uri, applied.describe())
                result = {"version": applied.version, "skipped": True, "reason": applied.describe()}
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
            result = {"version": applied.version, "skipped": True, "reason": applied.describe()}
        except Exception as e:
            if isinstance(e, AirflowFailException) or not input_error(e):
                raise  # already final (e.g. a Spark job's input error), or worth retrying
            self.log.error("%s: input error, failing without retries: %s", self.table_uri, e)
            raise AirflowFailException(f"{type(e).__name__}: {e}") from e
        if key is not None and result.get("skipped") and result.get("version") is None:
            # The commit found the key already there: a first try landed while this one worked.
            applied = find_applied(hook.get_table(self.table_uri).snapshot, key)
            if applied is not None:
                result.update(version=applied.version, reason=applied.describe())
        return self._report(context, hook, result, key)

    def _report(self, context, hook, result: dict[str, Any], key) -> dict[str, Any]:
        if key is not None:
            result["work"] = key.app_id
        self.publish(context, hook, result)
        return result

    def work_key(self, context, hook, table):
        """The ``deltaplane.engine.work.WorkKey`` of what this task commits (``None``: idempotent by nature).
        Called once per try, before ``run``; may keep what it read for ``run``."""
        return None

    def on_kill(self) -> None:
        """Stop any ``spark-submit`` this task started (compaction and DML above their Spark
        threshold run one), with everything it started."""
        from deltaplane.operators.operators.spark import stop_spark_jobs

        if stop_spark_jobs():
            self.log.info("%s: stopped the running Spark job", self.table_uri)

    def open_table(self, hook):
        """The table (``None`` when it does not exist yet and the operator may create it)."""
        from deltaplane.engine.errors import TableNotFoundError

        try:
            return hook.get_table(self.table_uri)
        except TableNotFoundError:
            if self.creates_table:
                return None
            raise

    def run(self, context, hook, table, stamp) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def publish(self, context, hook, result: dict[str, Any]) -> None:
        """Tell the Asset what the commit did (nothing for a run that committed nothing)."""
        version = result.get("version")
        if not (self.writes and self.emit_asset) or version is None or "{{" in self.table_uri:
            return
        from deltaplane.operators.utils.runs import commit_event

        extra = commit_event(hook.get_table(self.table_uri), int(version))
        result["event"] = extra
        context["outlet_events"][commit_alias(self.table_uri)].add(table_asset(self.table_uri), extra=extra)
        self.log.info(
            "%s: version %s (%s) -> Asset event %s", self.table_uri, version, extra["operation"], extra
        )
