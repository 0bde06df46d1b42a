"""``DeltaDMLOperator``: DELETE, UPDATE and MERGE (e.g. GDPR deletes with deletion vectors)."""

from __future__ import annotations

from typing import Any

from deltaplane.operators.operators.base import DeltaTableOperator
from deltaplane.operators.utils.arguments import Arguments, location, templated

OPERATIONS = ("delete", "update", "merge")
WHEN_MATCHED = ("update_all", "delete", None)
WHEN_NOT_MATCHED = ("insert_all", None)
STRATEGIES = ("deletion_vectors", "copy_on_write", None)


def whole_table(predicate: str | None) -> str | None:
    """Why ``predicate`` changes every row (a reason for the message), or None when it depends on
    the rows: missing or blank, true for every row once the engine folds its constants
    (``1=1 OR id = 5``, ``NOT false``; ``id = id`` is not: it is null where ``id`` is), or
    naming no column at all (it matches every row or none). A predicate that does not parse is
    None here: running it fails with the parser's error."""
    if predicate is None or not predicate.strip():
        return "is missing"
    from deltaplane.engine import InvalidPredicateError, columns, constant_truth, parse_predicate

    try:
        tree = parse_predicate(predicate)
    except InvalidPredicateError:
        return None
    if constant_truth(tree) is True:
        return "is true for every row"
    if not columns(tree):
        return "names no column, so it matches every row or none"
    return None


class DeltaDMLOperator(DeltaTableOperator):
    """One row-level change, retry-safe.

    * ``operation="delete"``: ``predicate`` (SQL); ``update``: ``updates`` (column -> SQL) and
      ``predicate``. Both run in-process, or as ``deltaplane.spark_jobs.dml`` when the files the predicate
      can touch exceed ``spark_threshold_bytes``.
    * A DELETE or UPDATE of every row needs ``allow_full_table=True``: without it, a missing,
      empty or always-true predicate (true once the engine folds its constants: ``"true"``,
      ``"1=1 OR id = 5"``, ``"NOT false"``; or naming no column) is refused,
      when the DAG is parsed and again after templates are rendered (a templated predicate that
      rendered empty fails the task, without retries, and commits nothing).
    * ``operation="merge"``: ``source`` (Parquet path(s) read with pyarrow), ``merge_condition``
      (``"t.id = s.id"``), ``when_matched`` ``"update_all"`` / ``"delete"`` / ``None`` and
      ``when_not_matched`` ``"insert_all"`` / ``None``; in-process.

    Operation, clause and strategy names are case-insensitive (``"DELETE"``, ``"Delete"``).

    XCom: the common keys (``metrics``: Delta's DELETE/UPDATE/MERGE operationMetrics, e.g.
    ``numDeletedRows``, ``numDeletionVectorsAdded``), ``engine`` ``in-process`` or ``spark``, and
    from a Spark job its ``strategy``, ``candidateFiles``, ``tasks``. Lineage: output the table
    (rows added and deleted by the commit), input the MERGE source files.
    """

    template_fields = ("table_uri", "predicate", "updates", "source")

    def __init__(
        self,
        *,
        table_uri: str,
        operation: str,
        predicate: str | None = None,
        updates: dict[str, str] | None = None,
        source: str | list[str] | None = None,
        merge_condition: str | None = None,
        when_matched: str | None = "update_all",
        when_not_matched: str | None = "insert_all",
        strategy: str | None = None,
        allow_full_table: bool = False,
        spark_threshold_bytes: int = 8 << 30,
        spark_timeout: float = 6 * 3600,
        **kwargs: Any,
    ):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        operation = check.choice("operation", operation, OPERATIONS)
        check.boolean("allow_full_table", allow_full_table)
        if predicate is not None and not isinstance(predicate, str) and not templated(predicate):
            raise check.type_error("predicate", "a SQL string or None", predicate)
        why = None if templated(predicate) else whole_table(predicate)
        if operation in ("delete", "update") and not allow_full_table and why is not None:
            raise check.value_error(
                "allow_full_table",
                f"must be True for a{'n' if operation == 'update' else ''} {operation.upper()} "
                f"of every row (predicate={predicate!r} {why}); give a predicate that selects "
                "rows, or allow_full_table=True to mean the whole table",
            )
        if operation == "update":
            updates = self._check_updates(check, updates)
        if operation == "merge":
            source = self._check_source(check, source)
            if merge_condition is None:
                raise check.value_error("merge_condition", "is required for a MERGE, e.g. 't.id = s.id'")
            merge_condition = check.text("merge_condition", merge_condition)
        when_matched = check.choice("when_matched", when_matched, WHEN_MATCHED)
        when_not_matched = check.choice("when_not_matched", when_not_matched, WHEN_NOT_MATCHED)
        strategy = check.choice("strategy", strategy, STRATEGIES)
        spark_threshold_bytes, spark_timeout = check.spark_routing(spark_threshold_bytes, spark_timeout)
        super().__init__(table_uri=table_uri, **kwargs)
        self.operation = operation
        self.predicate = predicate
        self.updates = updates
        self.source = source
        self.merge_condition = merge_condition
        self.when_matched = when_matched
        self.when_not_matched = when_not_matched
        self.strategy = strategy
        self.allow_full_table = allow_full_table
        self.spark_threshold_bytes = spark_threshold_bytes
        self.spark_timeout = spark_timeout

    @staticmethod
    def _check_updates(check: Arguments, updates: Any) -> Any:
        if templated(updates):
            return updates
        if updates is None:
            raise check.value_error("updates", "is required for an UPDATE: {'column': 'SQL expression'}")
        if not isinstance(updates, dict):
            raise check.type_error("updates", "a dict of column -> SQL expression", updates)
        if not updates:
            raise check.value_error("updates", "must set at least one column")
        for column, expression in updates.items():
            if not isinstance(column, str) or not column.strip():
                raise check.type_error("updates", "column names (non-empty strings) as keys", column)
            if not isinstance(expression, str):
                raise check.type_error(f"updates[{column!r}]", "a SQL expression (a string)", expression)
        return updates

    @staticmethod
    def _check_source(check: Arguments, source: Any) -> Any:
        source = location(source)  # pathlib.Path(s) as strings
        if source is None:
            raise check.value_error("source", "is required for a MERGE: Parquet path(s)")
        if templated(source) or isinstance(source, str):
            return check.text("source", source, template=True)
        if not isinstance(source, list | tuple):
            raise check.type_error("source", "a Parquet path or a list of paths", source)
        if not source:
            raise check.value_error("source", "must name at least one path")
        for item in source:
            if not isinstance(item, str) and not templated(item):
                raise check.type_error("source", "paths (strings)", item)
        return list(source)

    def check_rendered(self) -> None:
        """After rendering: the guard against whole-table changes, on what will really run.
        Raises ``InvalidArgumentError`` (an input error: the task fails without retries)."""
        from deltaplane.engine import InvalidArgumentError, parse_predicate

        where = f"{type(self).__name__}(task_id={self.task_id!r})"
        if self.predicate is not None and not isinstance(self.predicate, str):
            raise InvalidArgumentError(
                f"{where}: predicate must render to a SQL string, got {self.predicate!r}"
            )
        if self.operation == "update" and not (
            isinstance(self.updates, dict)
            and self.updates
            and all(isinstance(k, str) and isinstance(v, str) for k, v in self.updates.items())
        ):
            raise InvalidArgumentError(
                f"{where}: updates must render to a dict of column -> SQL expression, got {self.updates!r}"
            )
        if self.operation == "merge" or self.allow_full_table:
            return
        statement = self.operation.upper()
        if self.predicate is None or not self.predicate.strip():
            raise InvalidArgumentError(
                f"{where}: the predicate rendered to {self.predicate!r}: a {statement} without a "
                "predicate changes every row; nothing was changed (allow_full_table=True means it)"
            )
        parse_predicate(self.predicate)  # an unparseable predicate fails here, with its reason
        why = whole_table(self.predicate)
        if why is not None:
            raise InvalidArgumentError(
                f"{where}: the predicate {self.predicate!r} {why}; nothing was changed (a "
                f"{statement} of the whole table needs allow_full_table=True)"
            )

    def work_key(self, context, hook, table):
        """DELETE and UPDATE: the statement as issued by this task of this run (a retry or a
        clear is the same work; a new run issues it again). MERGE: the statement and the
        identity of its source files (the same source is merged once)."""
        from deltaplane.engine import WorkKey, local_file_identities
        from deltaplane.operators.utils.runs import run_stamp

        statement = {
            "operation": self.operation,
            "predicate": self.predicate,
            "updates": self.updates if self.operation == "update" else None,
        }
        if self.operation == "merge":
            import pyarrow.dataset as ds

            self._source = ds.dataset(self.source, format="parquet")
            statement |= {
                "source": local_file_identities(self._source.files),
                "condition": self.merge_condition,
                "whenMatched": self.when_matched,
                "whenNotMatched": self.when_not_matched,
            }
            return WorkKey.named("merge", statement)
        return WorkKey.named("dml", {**statement, "run": run_stamp(context).identity()})

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        self.check_rendered()
        if self.operation == "merge":
            return self._merge(table)
        from deltaplane.engine import plan_row_level

        predicate = self.predicate if self.predicate and self.predicate.strip() else None
        plan = plan_row_level(
            table.snapshot,
            predicate=predicate,
            updates=self.updates if self.operation == "update" else None,
            strategy=self.strategy,
        )
        candidate_bytes = (
            int(sum(plan.candidates.column("size").to_pylist())) if plan.candidates.num_rows else 0
        )
        if candidate_bytes > self.spark_threshold_bytes and not plan.partition_only:
            from deltaplane.operators.operators.spark import run_row_level_plan

            # the plan itself goes to the job (its version, candidates, strategy): never re-derived
            metrics = run_row_level_plan(
                plan,
                self.table_uri,
                table.snapshot.store,
                hook=hook,
                stamp=stamp,
                timeout=self.spark_timeout,
                log=self.log,
            )
            metrics["engine"] = "spark"
            return metrics
        if self.operation == "delete":
            result = table.delete(predicate, strategy=self.strategy)
        else:
            result = table.update(self.updates, predicate, strategy=self.strategy)
        self.log.info(
            "%s: %s -> version %s %s",
            self.table_uri,
            self.operation,
            result.version,
            result.operation_metrics,
        )
        return _report(result)

    def _merge(self, table) -> dict[str, Any]:
        import pyarrow.dataset as ds

        source = (getattr(self, "_source", None) or ds.dataset(self.source, format="parquet")).to_table()
        builder = table.merge(
            source, self.merge_condition, source_alias="s", target_alias="t", strategy=self.strategy
        )
        if self.when_matched == "update_all":
            builder = builder.when_matched_update_all()
        elif self.when_matched == "delete":
            builder = builder.when_matched_delete()
        if self.when_not_matched == "insert_all":
            builder = builder.when_not_matched_insert_all()
        return _report(builder.execute())

    def default_operation(self) -> str:
        return self.operation.upper()

    def lineage_datasets(self, result, facts):
        from deltaplane.operators.utils.lineage import Ref, table_ref

        output = table_ref(self.table_uri, result, facts, output=True)
        if self.operation != "merge" or not self.source:
            return [], [output]
        sources = [self.source] if isinstance(self.source, str) else list(self.source)
        return [Ref(s, table=False) for s in sources], [output]


def _report(result) -> dict[str, Any]:
    """A commit's version; a command that changed nothing (``committed`` false) commits nothing."""
    if result.committed or result.skipped:
        return {"version": result.version, "engine": "in-process"}
    reason = f"nothing to commit: the {result.operation} changed no row (table at version {result.version})"
    return {"version": None, "committed": False, "reason": reason, "engine": "in-process"}
