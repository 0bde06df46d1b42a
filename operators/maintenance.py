"""Table maintenance operators: auto-optimize, compaction, checkpoint (+ log cleanup), vacuum,
symlink manifests. Each is one engine call (compaction above a size threshold: one Spark job).

They compose without trigger rules: ``auto_optimize >> compact >> checkpoint >> vacuum`` runs
every task whatever the decision. Auto-optimize never skips anything; it returns its decision,
and the compaction reads it (from ``decision_task_id``, or from the one directly upstream
``DeltaAutoOptimizeOperator`` on the same table) and succeeds with "nothing to do" when there is
nothing to compact.

Arguments are checked when the DAG file is parsed (``Arguments``, also used by ``dml.py``): a
wrong type is a ``TypeError``, a wrong value a ``ValueError``, each naming the operator, the task
id and the argument; templated values are checked after rendering.
"""

from __future__ import annotations

from typing import Any

from operators.base import DeltaTableOperator

DEFAULT_SPARK_THRESHOLD = 8 << 30  # rewrite more than this many bytes with Spark
VACUUM_MODES = ("full", "lite")


# --- argument checks (shared with dml.py) -------------------------------------------------------


def templated(value: Any) -> bool:
    """A value Airflow fills in at run time: a Jinja string, or an ``XComArg``."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    from airflow.sdk import XComArg

    return isinstance(value, XComArg)


class Arguments:
    """Checks one operator's arguments in its ``__init__`` (before ``BaseOperator.__init__``, so
    a refused task never joins the DAG); every error names the operator, the task and the
    argument: ``DeltaCompactionOperator(task_id='compact'): zorder_by must be ...``."""

    def __init__(self, operator: type, kwargs: dict[str, Any]):
        self.where = f"{operator.__name__}(task_id={kwargs.get('task_id')!r})"

    def type_error(self, name: str, wanted: str, value: Any) -> TypeError:
        return TypeError(f"{self.where}: {name} must be {wanted}, got {value!r} ({type(value).__name__})")

    def value_error(self, name: str, why: str) -> ValueError:
        return ValueError(f"{self.where}: {name} {why}")

    def boolean(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.type_error(name, "True or False", value)
        return value

    def integer(self, name: str, value: Any, *, minimum: int, optional: bool = False, unit: str = "") -> Any:
        """An int (never a bool, a float or a string such as ``"128m"``) of at least ``minimum``."""
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            hint = " (bytes, e.g. 128 << 20 for 128 MiB)" if unit == "bytes" else ""
            raise self.type_error(name, f"an int{'' if not optional else ' or None'}{hint}", value)
        if value < minimum:
            raise self.value_error(name, f"must be at least {minimum}, got {value}")
        return value

    def number(
        self,
        name: str,
        value: Any,
        *,
        minimum: float,
        maximum: float | None = None,
        above: bool = False,
        optional: bool = False,
    ) -> Any:
        """An int or float in range (``above``: strictly greater than ``minimum``)."""
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.type_error(name, "a number" + (" or None" if optional else ""), value)
        if (value <= minimum if above else value < minimum) or (maximum is not None and value > maximum):
            low = f"greater than {minimum}" if above else f"at least {minimum}"
            high = f" and at most {maximum}" if maximum is not None else ""
            raise self.value_error(name, f"must be {low}{high}, got {value}")
        return value

    def text(self, name: str, value: Any, *, optional: bool = False, template: bool = False) -> Any:
        """A non-empty string (``template``: or an ``XComArg``, resolved at run time)."""
        if value is None and optional:
            return None
        if template and templated(value):
            return value
        if not isinstance(value, str):
            raise self.type_error(name, "a string" + (" or None" if optional else ""), value)
        if not value.strip():
            raise self.value_error(name, "must not be empty")
        return value

    def choice(self, name: str, value: Any, choices: tuple[str | None, ...]) -> Any:
        """One of ``choices``, case-insensitively (``None`` when it is one); returned lower-cased."""
        if value is None and None in choices:
            return None
        allowed = ", ".join(repr(c) for c in choices)
        if not isinstance(value, str):
            raise self.type_error(name, f"one of {allowed}", value)
        normalized = value.strip().lower()
        if normalized not in choices:
            raise self.value_error(name, f"must be one of {allowed} (any case), got {value!r}")
        return normalized

    def columns(self, name: str, value: Any) -> list[str]:
        """Column names: a list (or tuple) of strings, or one string holding one name or several
        separated by commas (``"user_id"``, ``"a, b"``); never a string split into letters."""
        if value is None:
            return []
        if isinstance(value, str):
            names = [part.strip() for part in value.split(",")]
        elif isinstance(value, list | tuple):
            bad = [v for v in value if not isinstance(v, str)]
            if bad:
                raise self.type_error(name, "column names (strings)", bad[0])
            names = [v.strip() for v in value]
        else:
            raise self.type_error(name, "a column name, a comma-separated string or a list of names", value)
        if any(not n for n in names):
            raise self.value_error(name, f"has an empty column name: {value!r}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise self.value_error(name, f"lists {', '.join(twice)} more than once: {value!r}")
        return names

    def table_uri(self, value: Any) -> str:
        if not isinstance(value, str):
            raise self.type_error("table_uri", "a string (a path or URI)", value)
        if not value.strip():
            raise self.value_error("table_uri", "must not be empty")
        return value

    def common(self, kwargs: dict[str, Any]) -> None:
        """The base class's own arguments, when given."""
        if kwargs.get("deltaplane_conn_id") is not None:
            self.text("deltaplane_conn_id", kwargs["deltaplane_conn_id"])
        for name in ("idempotent", "emit_asset"):
            if name in kwargs:
                self.boolean(name, kwargs[name])


_REQUIRED: Any = object()  # a required argument that Airflow would otherwise report without naming us


class DeltaAutoOptimizeOperator(DeltaTableOperator):
    """Decide, with the engine's health policy, whether the table needs compaction (and which
    partitions), and say why. The decision is the XCom (``compact``, ``action``
    skip/compact/zorder, ``partitions``, ``purge``, ``reasons``); this task never skips anything:
    a ``DeltaCompactionOperator`` downstream reads the decision and has nothing to do when it
    says ``compact: false``, and the tasks after it run as usual."""

    writes = False
    ui_color = "#e8f4ff"

    def __init__(
        self,
        *,
        table_uri: str,
        min_small_files: int | None = None,
        small_file_size: int | None = None,
        max_deleted_rows_ratio: float | None = None,
        zorder_by: str | list[str] | None = None,
        **kwargs,
    ):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        min_small_files = check.integer("min_small_files", min_small_files, minimum=1, optional=True)
        small_file_size = check.integer(
            "small_file_size", small_file_size, minimum=1, optional=True, unit="bytes"
        )
        max_deleted_rows_ratio = check.number(
            "max_deleted_rows_ratio", max_deleted_rows_ratio, minimum=0.0, maximum=1.0, optional=True
        )
        zorder = check.columns("zorder_by", zorder_by)
        super().__init__(table_uri=table_uri, **kwargs)
        self.min_small_files = min_small_files
        self.small_file_size = small_file_size
        self.max_deleted_rows_ratio = max_deleted_rows_ratio
        self.zorder_by = zorder

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from dataclasses import replace

        from engine.auto_optimize import AutoOptimizePolicy, decide_auto_optimize

        policy = AutoOptimizePolicy.for_table(table.snapshot)
        changes = {
            k: v
            for k, v in (
                ("min_num_small_files", self.min_small_files),
                ("small_file_size", self.small_file_size),
                ("max_deleted_rows_ratio", self.max_deleted_rows_ratio),
            )
            if v is not None
        }
        policy = replace(policy, **changes)
        decision = decide_auto_optimize(table.health(small_file_size=policy.small_file_size), policy)
        out = decision.to_dict()
        out["action"] = ("zorder" if self.zorder_by else "compact") if decision.compact else "skip"
        out["zorder_by"] = self.zorder_by
        out["version"] = None
        if decision.compact:
            self.log.info("%s needs %s: %s", self.table_uri, out["action"], "; ".join(decision.reasons))
            return out
        reason = f"nothing to compact: fewer than {policy.min_num_small_files} small files per partition"
        reason += f" and no partition with more than {policy.max_deleted_rows_ratio:.0%} rows deleted"
        out["reasons"] = [reason]
        self.log.info(
            "%s: %s (a compaction downstream will have nothing to do; %s run as usual)",
            self.table_uri,
            reason,
            sorted(self.downstream_task_ids) or "no task",
        )
        return out


class DeltaCompactionOperator(DeltaTableOperator):
    """OPTIMIZE with ``dataChange=false``: bin-packing, or Z-order with ``zorder_by``.

    In-process when the bytes to rewrite are under ``spark_threshold_bytes``, otherwise
    ``spark_jobs.compact`` through ``spark-submit`` (the connection's Spark master), which is
    handed the plan made here (``--plan``) and rewrites exactly that.

    It follows an auto-optimize decision: the one of ``decision_task_id``, or, without it, the
    one of the ``DeltaAutoOptimizeOperator`` directly upstream on the same table. Only the
    partitions the decision chose are compacted (with its deletion-vector purge); when it says
    there is nothing to compact the task succeeds with ``nothing_to_do`` and commits nothing."""

    template_fields = ("table_uri", "partition_filter")

    def __init__(
        self,
        *,
        table_uri: str,
        target_file_size: int | None = None,
        zorder_by: str | list[str] | None = None,
        partition_filter: str | None = None,
        decision_task_id: str | None = None,
        spark_threshold_bytes: int = DEFAULT_SPARK_THRESHOLD,
        spark_timeout: float = 6 * 3600,
        **kwargs,
    ):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        target_file_size = check.integer(
            "target_file_size", target_file_size, minimum=1, optional=True, unit="bytes"
        )
        zorder = check.columns("zorder_by", zorder_by)
        partition_filter = check.text("partition_filter", partition_filter, optional=True, template=True)
        decision_task_id = check.text("decision_task_id", decision_task_id, optional=True)
        spark_threshold_bytes = check.integer(
            "spark_threshold_bytes", spark_threshold_bytes, minimum=0, unit="bytes"
        )
        spark_timeout = check.number("spark_timeout", spark_timeout, minimum=0, above=True)
        super().__init__(table_uri=table_uri, **kwargs)
        self.target_file_size = target_file_size
        self.zorder_by = zorder
        self.partition_filter = partition_filter
        self.decision_task_id = decision_task_id
        self.spark_threshold_bytes = spark_threshold_bytes
        self.spark_timeout = spark_timeout

    def decision_task(self) -> str | None:
        """``decision_task_id``, else the directly upstream ``DeltaAutoOptimizeOperator`` on the
        same table (a templated URI counts as the same); ``None`` when there is none."""
        if self.decision_task_id:
            return self.decision_task_id
        found = sorted(
            t.task_id
            for t in self.upstream_list
            if isinstance(t, DeltaAutoOptimizeOperator)
            and (t.table_uri == self.table_uri or templated(t.table_uri))
        )
        if len(found) > 1:
            from engine.errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"{type(self).__name__}(task_id={self.task_id!r}): several auto-optimize tasks "
                f"upstream ({', '.join(found)}); say which decision to follow with decision_task_id"
            )
        return found[0] if found else None

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from engine.commands.optimize import execute_optimize, plan_optimize

        partitions, purge, target = None, False, self.target_file_size
        decision_task = self.decision_task()
        if decision_task:
            decision = context["ti"].xcom_pull(task_ids=decision_task)
            if not decision or not decision.get("compact"):
                why = "; ".join((decision or {}).get("reasons") or ["it returned no decision"])
                self.log.info("%s: nothing to do, as %s decided: %s", self.table_uri, decision_task, why)
                return {
                    "version": None,
                    "nothing_to_do": True,
                    "decision_task_id": decision_task,
                    "reason": f"{decision_task}: {why}",
                }
            partitions = decision.get("partitions") or None
            purge = bool(decision.get("purge"))
            reasons = "; ".join(decision.get("reasons") or [])
            self.log.info("%s: following %s: %s", self.table_uri, decision_task, reasons)
        snapshot = table.snapshot
        plan = plan_optimize(
            snapshot,
            target_file_size=target,
            zorder_by=self.zorder_by or None,
            filter=self.partition_filter,
            partitions=partitions,
            purge=purge,
        )
        follows = {"decision_task_id": decision_task} if decision_task else {}
        if not plan.bins:
            self.log.info(
                "%s: nothing to rewrite (%d files considered)", self.table_uri, plan.total_considered_files
            )
            return {"version": None, "numBins": 0, **plan.describe(), **follows}
        if plan.num_bytes > self.spark_threshold_bytes:
            return {**self._with_spark(plan, hook, stamp), **follows}
        metrics = execute_optimize(snapshot.store, plan)
        out = metrics.to_dict()
        out["engine"] = "in-process"
        self.log.info(
            "%s: %d files -> %d files", self.table_uri, out["num_files_removed"], out["num_files_added"]
        )
        return {**out, **follows}

    def _with_spark(self, plan, hook, stamp) -> dict[str, Any]:
        """Hand ``plan`` itself to ``spark_jobs.compact`` (a file beside the table, under
        ``_deltaplane/optimize-plans/``, which any driver can read with the table's storage
        options), so the job rewrites exactly these bins and never plans again."""
        from operators.spark import run_spark_job
        from spark_jobs.compact import save_plan

        store = plan.snapshot.store
        key = save_plan(plan, store)
        self.log.info(
            "%s: %d bytes to rewrite (> %d): compacting with Spark, plan %s",
            self.table_uri,
            plan.num_bytes,
            self.spark_threshold_bytes,
            store.uri(key),
        )
        try:
            metrics = run_spark_job(
                "compact",
                ["--table", self.table_uri, "--plan", store.uri(key)],
                hook=hook,
                stamp=stamp,
                timeout=self.spark_timeout,
                log=self.log,
            )
        finally:
            store.delete(key)
        metrics["engine"] = "spark"
        return metrics


class DeltaCheckpointOperator(DeltaTableOperator):
    """Write a checkpoint of the latest version, then (``cleanup_log``) delete expired log files."""

    def __init__(self, *, table_uri: str, cleanup_log: bool = True, **kwargs):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        check.boolean("cleanup_log", cleanup_log)
        super().__init__(table_uri=table_uri, emit_asset=False, idempotent=False, **kwargs)
        self.cleanup_log = cleanup_log

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        import dataclasses

        info = table.checkpoint()
        out: dict[str, Any] = {"version": None, "checkpoint": dataclasses.asdict(info)}
        if self.cleanup_log:
            cleanup = dataclasses.asdict(table.cleanup_log())
            cleanup["files"] = cleanup["files"][:20]
            out["log_cleanup"] = cleanup
        self.log.info("%s: checkpoint at version %d", self.table_uri, table.version)
        return out


class DeltaVacuumOperator(DeltaTableOperator):
    """VACUUM with the engine's retention checks. ``dry_run`` is explicit: ``True`` lists what
    would be deleted; ``False`` deletes."""

    def __init__(
        self,
        *,
        table_uri: str,
        dry_run: bool = _REQUIRED,
        retention_hours: float | None = None,
        enforce_retention: bool = True,
        mode: str = "full",
        **kwargs,
    ):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        if dry_run is _REQUIRED:
            raise TypeError(f"{check.where}: dry_run is required: dry_run=True lists, dry_run=False deletes")
        check.boolean("dry_run", dry_run)
        retention_hours = check.number("retention_hours", retention_hours, minimum=0, optional=True)
        check.boolean("enforce_retention", enforce_retention)
        mode = check.choice("mode", mode, VACUUM_MODES)
        super().__init__(table_uri=table_uri, **kwargs)
        self.dry_run = dry_run
        self.retention_hours = retention_hours
        self.enforce_retention = enforce_retention
        self.mode = mode

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        files = table.vacuum(
            self.retention_hours,
            dry_run=self.dry_run,
            enforce_retention=self.enforce_retention,
            mode=self.mode,
        )
        out: dict[str, Any] = {"dry_run": self.dry_run, "files": len(files), "sample": list(files[:20])}
        out["version"] = files.metrics.end_version if files.metrics is not None else None
        if files.metrics is not None:
            metrics = files.metrics.to_dict()
            metrics.pop("files", None)
            out["metrics"] = metrics
        self.log.info(
            "%s: %s %d files", self.table_uri, "would delete" if self.dry_run else "deleted", len(files)
        )
        return out


class DeltaManifestOperator(DeltaTableOperator):
    """Regenerate the symlink manifests (``_symlink_format_manifest/``) for Presto/Trino/Athena."""

    def __init__(self, *, table_uri: str, **kwargs):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        super().__init__(table_uri=table_uri, emit_asset=False, idempotent=False, **kwargs)

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        manifest = table.generate_manifest().as_dict()
        self.log.info(
            "%s: %d manifests written for version %s",
            self.table_uri,
            manifest["filesWritten"],
            manifest["version"],
        )
        return {"version": None, "manifest": manifest}
