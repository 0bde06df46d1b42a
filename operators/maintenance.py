"""Table maintenance operators: auto-optimize, compaction, checkpoint (+ log cleanup), vacuum,
symlink manifests. Each is one engine call (compaction above a size threshold: one Spark job)."""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.skipmixin import SkipMixin

from operators.base import DeltaTableOperator

DEFAULT_SPARK_THRESHOLD = 8 << 30  # rewrite more than this many bytes with Spark


class DeltaAutoOptimizeOperator(DeltaTableOperator, SkipMixin):
    """Decide, with the engine's health policy, whether the table needs compaction (and which
    partitions), and say why. Nothing to do: the directly downstream tasks (the compaction) are
    skipped; later tasks run per their trigger rules. The decision is the XCom
    (``compact``, ``action`` skip/compact/zorder, ``partitions``, ``reasons``)."""

    writes = False
    ui_color = "#e8f4ff"

    def __init__(
        self,
        *,
        table_uri: str,
        min_small_files: int | None = None,
        small_file_size: int | None = None,
        max_deleted_rows_ratio: float | None = None,
        zorder_by: list[str] | None = None,
        **kwargs,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        self.min_small_files = min_small_files
        self.small_file_size = small_file_size
        self.max_deleted_rows_ratio = max_deleted_rows_ratio
        self.zorder_by = list(zorder_by or [])

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
        self.log.info("%s: %s; skipping %s", self.table_uri, reason, sorted(self.downstream_task_ids))
        context["ti"].xcom_push(key="return_value", value=out)
        self.skip(context["ti"], self.get_direct_relatives(upstream=False))
        return out


class DeltaCompactionOperator(DeltaTableOperator):
    """OPTIMIZE with ``dataChange=false``: bin-packing, or Z-order with ``zorder_by``.

    In-process when the bytes to rewrite are under ``spark_threshold_bytes``, otherwise
    ``spark_jobs.compact`` through ``spark-submit`` (the connection's Spark master). With
    ``decision_task_id`` (a ``DeltaAutoOptimizeOperator``), only the partitions it chose."""

    template_fields = ("table_uri", "partition_filter")

    def __init__(
        self,
        *,
        table_uri: str,
        target_file_size: int | None = None,
        zorder_by: list[str] | None = None,
        partition_filter: str | None = None,
        decision_task_id: str | None = None,
        spark_threshold_bytes: int = DEFAULT_SPARK_THRESHOLD,
        spark_timeout: float = 6 * 3600,
        **kwargs,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        self.target_file_size = target_file_size
        self.zorder_by = list(zorder_by or [])
        self.partition_filter = partition_filter
        self.decision_task_id = decision_task_id
        self.spark_threshold_bytes = spark_threshold_bytes
        self.spark_timeout = spark_timeout

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from engine.commands.optimize import execute_optimize, plan_optimize

        partitions, purge, target = None, False, self.target_file_size
        if self.decision_task_id:
            decision = context["ti"].xcom_pull(task_ids=self.decision_task_id) or {}
            if not decision.get("compact"):
                return {
                    "version": None,
                    "skipped": True,
                    "reason": "the auto-optimize decision was: nothing to do",
                }
            partitions = decision.get("partitions") or None
            purge = bool(decision.get("purge"))
        snapshot = table.snapshot
        plan = plan_optimize(
            snapshot,
            target_file_size=target,
            zorder_by=self.zorder_by or None,
            filter=self.partition_filter,
            partitions=partitions,
            purge=purge,
        )
        if not plan.bins:
            self.log.info(
                "%s: nothing to rewrite (%d files considered)", self.table_uri, plan.total_considered_files
            )
            return {"version": None, "numBins": 0, **plan.describe()}
        if plan.num_bytes > self.spark_threshold_bytes:
            from operators.spark import run_spark_job

            args = ["--table", self.table_uri]
            if target:
                args += ["--target-size", str(target)]
            if self.zorder_by:
                args += ["--zorder", ",".join(self.zorder_by)]
            if self.partition_filter:
                args += ["--filter", self.partition_filter]
            self.log.info(
                "%s: %d bytes to rewrite (> %d): compacting with Spark",
                self.table_uri,
                plan.num_bytes,
                self.spark_threshold_bytes,
            )
            metrics = run_spark_job(
                "compact", args, hook=hook, stamp=stamp, timeout=self.spark_timeout, log=self.log
            )
            metrics["engine"] = "spark"
            return metrics
        metrics = execute_optimize(snapshot.store, plan)
        out = metrics.to_dict()
        out["engine"] = "in-process"
        self.log.info(
            "%s: %d files -> %d files", self.table_uri, out["num_files_removed"], out["num_files_added"]
        )
        return out


class DeltaCheckpointOperator(DeltaTableOperator):
    """Write a checkpoint of the latest version, then (``cleanup_log``) delete expired log files."""

    def __init__(self, *, table_uri: str, cleanup_log: bool = True, **kwargs):
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
        dry_run: bool,
        retention_hours: float | None = None,
        enforce_retention: bool = True,
        mode: str = "full",
        **kwargs,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if not isinstance(dry_run, bool):
            raise ValueError("DeltaVacuumOperator needs dry_run=True or dry_run=False")
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
