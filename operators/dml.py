"""``DeltaDMLOperator``: DELETE, UPDATE and MERGE (e.g. GDPR deletes with deletion vectors)."""

from __future__ import annotations

from typing import Any

from operators.base import DeltaTableOperator

OPERATIONS = ("delete", "update", "merge")


class DeltaDMLOperator(DeltaTableOperator):
    """One row-level change, retry-safe.

    * ``operation="delete"``: ``predicate`` (SQL); ``update``: ``updates`` (column -> SQL) and
      ``predicate``. Both run in-process, or as ``spark_jobs.dml`` when the files the predicate
      can touch exceed ``spark_threshold_bytes``.
    * ``operation="merge"``: ``source`` (Parquet path(s) read with pyarrow), ``merge_condition``
      (``"t.id = s.id"``), ``when_matched`` ``"update_all"`` / ``"delete"`` / ``None`` and
      ``when_not_matched`` ``"insert_all"`` / ``None``; in-process.
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
        spark_threshold_bytes: int = 8 << 30,
        spark_timeout: float = 6 * 3600,
        **kwargs: Any,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if operation not in OPERATIONS:
            raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
        if operation == "update" and not updates:
            raise ValueError("an update needs updates={'column': 'SQL expression'}")
        if operation == "merge" and (source is None or merge_condition is None):
            raise ValueError("a merge needs source and merge_condition")
        if when_matched not in (None, "update_all", "delete") or when_not_matched not in (None, "insert_all"):
            raise ValueError("when_matched: update_all/delete/None; when_not_matched: insert_all/None")
        self.operation = operation
        self.predicate = predicate
        self.updates = updates
        self.source = source
        self.merge_condition = merge_condition
        self.when_matched = when_matched
        self.when_not_matched = when_not_matched
        self.strategy = strategy
        self.spark_threshold_bytes = spark_threshold_bytes
        self.spark_timeout = spark_timeout

    def work_key(self, context, hook, table):
        """DELETE and UPDATE: the statement as issued by this task of this run (a retry or a
        clear is the same work; a new run issues it again). MERGE: the statement and the
        identity of its source files (the same source is merged once)."""
        from engine.work import WorkKey, local_file_identities
        from operators.runs import run_stamp

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
        if self.operation == "merge":
            return self._merge(table)
        from engine.commands.dml import plan_row_level

        plan = plan_row_level(
            table.snapshot,
            predicate=self.predicate,
            updates=self.updates if self.operation == "update" else None,
            strategy=self.strategy,
        )
        candidate_bytes = (
            int(sum(plan.candidates.column("size").to_pylist())) if plan.candidates.num_rows else 0
        )
        if candidate_bytes > self.spark_threshold_bytes and not plan.partition_only:
            from operators.spark import run_spark_job

            args = ["--table", self.table_uri, f"--{self.operation}", self.predicate or "true"]
            for column, expr in (self.updates or {}).items() if self.operation == "update" else ():
                args += ["--set", f"{column}={expr}"]
            if self.strategy:
                args += ["--strategy", self.strategy]
            metrics = run_spark_job(
                "dml", args, hook=hook, stamp=stamp, timeout=self.spark_timeout, log=self.log
            )
            metrics["engine"] = "spark"
            return metrics
        if self.operation == "delete":
            result = table.delete(self.predicate, strategy=self.strategy)
        else:
            result = table.update(self.updates, self.predicate, strategy=self.strategy)
        self.log.info(
            "%s: %s -> version %s %s",
            self.table_uri,
            self.operation,
            result.version,
            result.operation_metrics,
        )
        return {
            "version": result.version,
            "engine": "in-process",
            "operationMetrics": result.operation_metrics,
        }

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
        result = builder.execute()
        return {
            "version": result.version,
            "engine": "in-process",
            "operationMetrics": result.operation_metrics,
        }
