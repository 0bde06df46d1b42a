"""What every deltaplane operator shares: the table, the run's identity, retry safety, Asset events.

Subclasses implement ``run(context, hook, table, ident)`` (one engine call or one Spark job) and
return a JSON-able dict of metrics; a ``"version"`` key names the commit made (``None``: nothing
committed). The base class opens the table through ``DeltaHook``, skips the work when this
task's run already committed (see ``operators.runs``), runs it inside
``commit_metadata_scope`` and ``app_transaction_scope`` (so whatever the engine commits carries
the run's stamp and its txn), pushes the metrics to XCom (the return value) and, for a commit,
adds an event to the table's Asset (through the operator's ``AssetAlias`` outlet, so only a
real commit makes one) whose ``extra`` holds version, operation, dataChange, files and rows.
``__init__`` does nothing but store arguments: DAG files stay fast to import.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator

from operators.runs import asset_uri


def table_asset(table_uri: str) -> Asset:
    uri = asset_uri(table_uri)
    return Asset(name=uri, uri=uri)


def commit_alias(table_uri: str) -> AssetAlias:
    """The outlet a writing operator declares: events reach the table's Asset through it only
    when the task really committed (a declared Asset outlet gets an event on every success,
    also for a dry run or a retry with nothing to do, which would wake consumers for nothing)."""
    return AssetAlias(name=f"deltaplane-commits:{asset_uri(table_uri)}")


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
        from engine.transaction import app_transaction_scope, commit_metadata_scope
        from operators.hooks import DeltaHook
        from operators.runs import identity, prior_commit

        hook = DeltaHook(self.deltaplane_conn_id)
        ident = identity(context)
        table = self.open_table(hook)
        txn: tuple[str | None, int | None] = (None, None)
        if self.writes and self.idempotent and table is None:
            txn = (ident.app_id, ident.app_version)  # the table is created by this commit
        elif self.writes and self.idempotent:
            prior = prior_commit(table, ident)
            if prior.done:
                self.log.info(
                    "%s: run %s already committed this task's work (version %s, txn %s=%d); nothing to do",
                    self.table_uri,
                    ident.run_id,
                    prior.version,
                    ident.app_id,
                    ident.app_version,
                )
                result = {
                    "version": prior.version,
                    "skipped": True,
                    "reason": "already committed by this run",
                }
                self.publish(context, hook, result)
                return result
            if prior.out_of_order:
                self.log.warning(
                    "%s: a later run recorded %s past this run's version %d; committing without a txn",
                    self.table_uri,
                    ident.app_id,
                    ident.app_version,
                )
            else:
                txn = (ident.app_id, ident.app_version)
        with commit_metadata_scope(ident.commit_metadata()), app_transaction_scope(*txn):
            result = self.run(context, hook, table, ident)
        self.publish(context, hook, result)
        return result

    def open_table(self, hook):
        """The table (``None`` when it does not exist yet and the operator may create it)."""
        from engine.errors import TableNotFoundError

        try:
            return hook.get_table(self.table_uri)
        except TableNotFoundError:
            if self.creates_table:
                return None
            raise

    def run(self, context, hook, table, ident) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def publish(self, context, hook, result: dict[str, Any]) -> None:
        """Tell the Asset what the commit did (nothing for a run that committed nothing)."""
        version = result.get("version")
        if not (self.writes and self.emit_asset) or version is None or "{{" in self.table_uri:
            return
        from operators.runs import commit_event

        extra = commit_event(hook.get_table(self.table_uri), int(version))
        result["event"] = extra
        context["outlet_events"][commit_alias(self.table_uri)].add(table_asset(self.table_uri), extra=extra)
        self.log.info(
            "%s: version %s (%s) -> Asset event %s", self.table_uri, version, extra["operation"], extra
        )
