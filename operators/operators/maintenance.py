"""Table maintenance operators: auto-optimize, compaction, checkpoint (+ log cleanup), vacuum,
symlink manifests. Each is one engine call (compaction above a size threshold: one Spark job).

They compose without trigger rules: ``auto_optimize >> compact >> checkpoint >> vacuum`` runs
every task whatever the decision. Auto-optimize never skips anything; it returns its decision,
and the compaction reads it (from ``decision_task_id``, or from the one directly upstream
``DeltaAutoOptimizeOperator`` on the same table) and succeeds with "nothing to do" when there is
nothing to compact.

Arguments are checked when the DAG file is parsed (``deltaplane.operators.utils.arguments``).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from deltaplane.operators.operators.base import DeltaTableOperator
from deltaplane.operators.utils.arguments import Arguments, templated

DEFAULT_SPARK_THRESHOLD = 8 << 30  # rewrite more than this many bytes with Spark
VACUUM_MODES = ("full", "lite")


_REQUIRED: Any = object()  # a required argument that Airflow would otherwise report without naming us


class DeltaAutoOptimizeOperator(DeltaTableOperator):
    """Decide, with the engine's health policy, whether the table needs compaction (and which
    partitions), and say why. The decision is the XCom (``compact``, ``action``
    skip/compact/zorder, ``partitions``, ``purge``, ``reasons``); this task never skips anything:
    a ``DeltaCompactionOperator`` downstream reads the decision and has nothing to do when it
    says ``compact: false``, and the tasks after it run as usual. Lineage: input the table."""

    writes = False
    operation_name = "AUTO OPTIMIZE"
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

        from deltaplane.engine import AutoOptimizePolicy, decide_auto_optimize

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
        # OPTIMIZE clusters a liquid-clustered table (plan_optimize chooses): say so.
        kind = "cluster" if table.clustering_columns else "zorder" if self.zorder_by else "compact"
        out["action"] = kind if decision.compact else "skip"
        out["zorder_by"] = self.zorder_by
        out["version"] = None
        out["reason"] = "; ".join(decision.reasons) if decision.reasons else None
        if decision.compact:
            self.log.info("%s needs %s: %s", self.table_uri, out["action"], "; ".join(decision.reasons))
            return out
        reason = f"nothing to compact: fewer than {policy.min_num_small_files} small files per partition"
        reason += f" and no partition with more than {policy.max_deleted_rows_ratio:.0%} rows deleted"
        out["reasons"] = [reason]
        out["reason"] = reason
        self.log.info(
            "%s: %s (a compaction downstream will have nothing to do; %s run as usual)",
            self.table_uri,
            reason,
            sorted(self.downstream_task_ids) or "no task",
        )
        return out


class DeltaMaintenancePlanOperator(DeltaTableOperator):
    """Decide, with the table's health-driven policy (``deltaplane.engine.maintenance_plan``),
    which maintenance to run now (compaction, DV purge, checkpoint, VACUUM) and why, one reason
    per kind. Partitions a DELETE/UPDATE/MERGE changed in the last ``yield_minutes`` are left out
    of compaction and DV purge (``yield_to_writers``): maintenance works where the writers are not.

    The XCom is the plan: ``decisions`` (one per kind: ``run``, ``reason``, ``partitions``,
    ``engine``...), ``run`` (the kinds to run), ``reasons`` (one line each), and the keys a
    ``DeltaCompactionOperator`` follows (``compact``, ``partitions``, ``purge``). The tasks
    downstream that name this task in ``decision_task_id`` do what it decided and succeed with
    "nothing to do" (and its reason) otherwise; this task never skips anything."""

    writes = False
    operation_name = "MAINTENANCE PLAN"
    ui_color = "#e8f4ff"

    def __init__(
        self,
        *,
        table_uri: str,
        policy: dict[str, Any] | None = None,
        yield_minutes: float = 10.0,
        **kwargs,
    ):
        from deltaplane.engine import MaintenancePolicy

        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        yield_minutes = check.number("yield_minutes", yield_minutes, minimum=0)
        MaintenancePolicy.from_dict(policy, owner=check.where)  # a wrong key fails at parse time
        super().__init__(table_uri=table_uri, **kwargs)
        self.policy = dict(policy or {})
        self.yield_minutes = yield_minutes

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        import time

        from deltaplane.engine import (
            REWRITE_KINDS,
            MaintenancePolicy,
            look,
            partitions_of,
            plan_table,
            recent_row_changes,
        )

        policy = MaintenancePolicy.from_dict(self.policy)
        snapshot = table.snapshot
        now = int(time.time() * 1000)  # one look at the table: Arrow over its files, no tracker
        seen = look(policy, snapshot=snapshot, now_ms=now)
        health, removed = seen.health, seen.removed
        busy = []
        if self.yield_minutes > 0:
            since = now - int(self.yield_minutes * 60_000)
            for change in recent_row_changes(snapshot.store, snapshot, since_ms=since):
                ago = max(0, (now - change.timestamp) // 60_000)
                what = f"{change.operation} v{change.version}, {ago} min ago"
                busy += [(p, what) for p in partitions_of(change)]
        decisions = plan_table(self.table_uri, seen, policy, busy=busy)
        wanted = [d for d in decisions if d.run]
        rewrites = [d for d in wanted if d.kind in REWRITE_KINDS]
        for d in decisions:
            self.log.info("%s", d.line())
        return {
            "version": None,
            "read_version": snapshot.version,
            "decisions": [d.to_dict() for d in decisions],
            "run": [d.kind for d in wanted],
            "reasons": [f"{d.kind}: {'run' if d.run else 'skip'}: {d.reason}" for d in decisions],
            "reason": "; ".join(f"{d.kind}: {d.reason}" for d in wanted) or "nothing needs maintenance",
            "compact": bool(rewrites),
            "partitions": [p for d in rewrites for p in d.partitions],
            "purge": any(d.kind == "dv_purge" for d in rewrites),
            "rewritten_today": seen.spending.bytes_rewritten if seen.spending else None,
            "spent_today": seen.spending.to_dict() if seen.spending else None,
            "manifest": seen.manifest.to_dict() if seen.manifest is not None else None,
            "health": {
                "num_files": health.num_files,
                "num_small_files": health.num_small_files,
                "size_bytes": health.size_bytes,
                "deleted_rows_ratio": round(health.deleted_rows_ratio, 4),
                "versions_since_checkpoint": health.versions_since_checkpoint,
                "removed_bytes": removed.get("bytes") if removed else None,
            },
        }


def planned(operator: BaseOperator, context, kind: str) -> dict[str, Any] | None:
    """What the ``DeltaMaintenancePlanOperator`` named by ``operator.decision_task_id`` decided
    about ``kind``: ``None`` to go ahead (no plan to follow, or it says run), else the task's
    "nothing to do" result with the plan's reason."""
    task_id = getattr(operator, "decision_task_id", None)
    if not task_id:
        return None
    plan = context["ti"].xcom_pull(task_ids=task_id) or {}
    decision = next((d for d in plan.get("decisions") or [] if d.get("kind") == kind), None)
    if decision is None or decision.get("run"):
        return None
    reason = f"{task_id}: {kind} not needed: {decision.get('reason')}"
    operator.log.info("%s: nothing to do, %s", operator.table_uri, reason)
    return {"version": None, "nothing_to_do": True, "decision_task_id": task_id, "reason": reason}


class DeltaCompactionOperator(DeltaTableOperator):
    """OPTIMIZE with ``dataChange=false``: bin-packing, or Z-order with ``zorder_by``.

    In-process when the bytes to rewrite are under ``spark_threshold_bytes``, otherwise
    ``deltaplane.spark_jobs.compact`` through ``spark-submit`` (the connection's Spark master), which is
    handed the plan made here (``--plan``) and rewrites exactly that.

    It follows an auto-optimize decision: the one of ``decision_task_id``, or, without it, the
    one of the ``DeltaAutoOptimizeOperator`` directly upstream on the same table. Only the
    partitions the decision chose are compacted (with its deletion-vector purge); when it says
    there is nothing to compact the task succeeds with ``nothing_to_do`` and commits nothing.

    XCom (beside the common keys, ``metrics`` being OPTIMIZE's ``numAddedFiles``,
    ``numRemovedFiles``...): ``nothing_to_do``, ``decision_task_id``; after a rewrite the
    engine's counts (``num_files_added``, ``num_files_removed``, ``bytes_added``,
    ``bytes_removed``, ``partitions_optimized``, ``num_bins``, ...); with nothing to rewrite the
    plan's summary (``numBins``, ``totalConsideredFiles``, ...)."""

    template_fields = ("table_uri", "partition_filter")
    operation_name = "OPTIMIZE"

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
        spark_threshold_bytes, spark_timeout = check.spark_routing(spark_threshold_bytes, spark_timeout)
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
            if isinstance(t, (DeltaAutoOptimizeOperator, DeltaMaintenancePlanOperator))
            and (t.table_uri == self.table_uri or templated(t.table_uri))
        )
        if len(found) > 1:
            from deltaplane.engine import InvalidArgumentError

            raise InvalidArgumentError(
                f"{type(self).__name__}(task_id={self.task_id!r}): several auto-optimize tasks "
                f"upstream ({', '.join(found)}); say which decision to follow with decision_task_id"
            )
        return found[0] if found else None

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from deltaplane.engine import REWRITE_KINDS

        jobs: list[dict[str, Any]] = [{"partitions": None, "purge": False, "min_file_size": None}]
        decision_task = self.decision_task()
        follows = {"decision_task_id": decision_task} if decision_task else {}
        if decision_task:
            decision = context["ti"].xcom_pull(task_ids=decision_task)
            if not decision or not decision.get("compact"):
                why = "; ".join((decision or {}).get("reasons") or ["it returned no decision"])
                self.log.info("%s: nothing to do, as %s decided: %s", self.table_uri, decision_task, why)
                reason = f"{decision_task}: {why}"
                return {"version": None, "nothing_to_do": True, **follows, "reason": reason}
            if decision.get("decisions") is not None:  # a DeltaMaintenancePlanOperator's plan
                jobs = [
                    {
                        "kind": d["kind"],
                        "partitions": d.get("partitions") or None,
                        "purge": d["kind"] == "dv_purge",
                        "min_file_size": (d.get("details") or {}).get("min_file_size"),
                    }
                    for d in decision["decisions"]
                    if d.get("run") and d["kind"] in REWRITE_KINDS
                ]
            else:  # a DeltaAutoOptimizeOperator's decision
                jobs = [
                    {
                        "partitions": decision.get("partitions") or None,
                        "purge": bool(decision.get("purge")),
                        "min_file_size": None,
                    }
                ]
            reasons = "; ".join(decision.get("reasons") or [])
            self.log.info("%s: following %s: %s", self.table_uri, decision_task, reasons)
        results = [self._rewrite(table, job, hook, stamp, fresh=i > 0) for i, job in enumerate(jobs)]
        done = [r for r in results if not r.get("nothing_to_do")]
        if not done:
            return {**results[-1], **follows}
        out = dict(done[-1])
        if len(done) > 1:  # compaction, then DV purge: the counts of both
            for key in ("num_files_added", "num_files_removed", "bytes_added", "bytes_removed"):
                if all(isinstance(r.get(key), int) for r in done):
                    out[key] = sum(r[key] for r in done)
            out["runs"] = done
        return {**out, **follows}

    def _rewrite(self, table, job: dict[str, Any], hook, stamp, *, fresh: bool) -> dict[str, Any]:
        from deltaplane.engine import execute_optimize, plan_optimize

        snapshot = table.refresh().snapshot if fresh else table.snapshot  # after the job before it
        plan = plan_optimize(
            snapshot,
            target_file_size=self.target_file_size,
            zorder_by=self.zorder_by or None,
            filter=self.partition_filter,
            partitions=job["partitions"],
            purge=job["purge"],
            min_file_size=job["min_file_size"],
        )
        kind = {"kind": job["kind"]} if job.get("kind") else {}
        if not plan.bins:
            self.log.info(
                "%s: nothing to rewrite (%d files considered)", self.table_uri, plan.total_considered_files
            )
            out = {**plan.describe(), "version": None, "nothing_to_do": True, **kind}
            out["reason"] = f"nothing to rewrite ({plan.total_considered_files} files considered)"
            return out
        if plan.num_bytes > self.spark_threshold_bytes:
            return {**self._with_spark(plan, hook, stamp), "nothing_to_do": False, **kind}
        metrics = execute_optimize(snapshot.store, plan)
        out = metrics.to_dict()
        out["engine"] = "in-process"
        out["nothing_to_do"] = False
        self.log.info(
            "%s: %d files -> %d files", self.table_uri, out["num_files_removed"], out["num_files_added"]
        )
        return {**out, **kind}

    def _with_spark(self, plan, hook, stamp) -> dict[str, Any]:
        """Hand ``plan`` itself to ``deltaplane.spark_jobs.compact`` (a file beside the table, under
        ``_deltaplane/optimize-plans/``, which any driver can read with the table's storage
        options), so the job rewrites exactly these bins and never plans again."""
        from deltaplane.engine import save_plan
        from deltaplane.operators.operators.spark import run_spark_job

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
    """Write a checkpoint of the latest version, then (``cleanup_log``) delete expired log files.
    Commits nothing: ``version`` is null, ``read_version`` and ``checkpoint.version`` name the
    version checkpointed; ``log_cleanup`` says what was deleted. With ``decision_task_id`` (a
    ``DeltaMaintenancePlanOperator``), only what that plan says: a checkpoint when one is needed,
    the expired log files' cleanup when they are due (on its own if no checkpoint is)."""

    operation_name = "CHECKPOINT"

    def __init__(
        self, *, table_uri: str, cleanup_log: bool = True, decision_task_id: str | None = None, **kwargs
    ):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        check.boolean("cleanup_log", cleanup_log)
        decision_task_id = check.text("decision_task_id", decision_task_id, optional=True)
        super().__init__(table_uri=table_uri, emit_asset=False, idempotent=False, **kwargs)
        self.cleanup_log = cleanup_log
        self.decision_task_id = decision_task_id

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        import dataclasses

        skip = planned(self, context, "checkpoint")
        skip_cleanup = planned(self, context, "log_cleanup") if self.decision_task_id else None
        if skip is not None and skip_cleanup is not None:
            skip["reason"] += "; " + skip_cleanup["reason"]
            return skip
        if skip is not None:  # the plan wants only the expired log files gone
            cleanup = dataclasses.asdict(table.cleanup_log())
            cleanup["files"] = cleanup["files"][:20]
            self.log.info("%s: log cleanup (no checkpoint needed: %s)", self.table_uri, skip["reason"])
            return {"version": None, "log_cleanup": cleanup, "reason": f"log cleanup only; {skip['reason']}"}
        info = table.checkpoint()
        out: dict[str, Any] = {"version": None, "checkpoint": dataclasses.asdict(info)}
        out["reason"] = f"a checkpoint commits nothing (written at version {info.version})"
        if self.cleanup_log or (self.decision_task_id and skip_cleanup is None):
            cleanup = dataclasses.asdict(table.cleanup_log())
            cleanup["files"] = cleanup["files"][:20]
            out["log_cleanup"] = cleanup
        self.log.info("%s: checkpoint at version %d", self.table_uri, table.version)
        return out


class DeltaVacuumOperator(DeltaTableOperator):
    """VACUUM with the engine's retention checks. ``dry_run`` is explicit: ``True`` lists what
    would be deleted; ``False`` deletes. ``version`` is the ``VACUUM END`` commit (null for a dry
    run, or when there was nothing to delete); XCom keys ``dry_run``, ``files`` (how many),
    ``sample`` (up to 20 of them), ``vacuum`` (the engine's counts: ``num_deleted_files``,
    ``size_of_deleted_data``, ``start_version``, ``end_version`` ...). With ``decision_task_id``
    (a ``DeltaMaintenancePlanOperator``), only when that plan says a VACUUM is worth it."""

    operation_name = "VACUUM"

    def __init__(
        self,
        *,
        table_uri: str,
        dry_run: bool = _REQUIRED,
        retention_hours: float | None = None,
        enforce_retention: bool = True,
        mode: str = "full",
        decision_task_id: str | None = None,
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
        decision_task_id = check.text("decision_task_id", decision_task_id, optional=True)
        super().__init__(table_uri=table_uri, **kwargs)
        self.decision_task_id = decision_task_id
        self.dry_run = dry_run
        self.retention_hours = retention_hours
        self.enforce_retention = enforce_retention
        self.mode = mode

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        skip = planned(self, context, "vacuum")
        if skip is not None:
            return skip
        files = table.vacuum(
            self.retention_hours,
            dry_run=self.dry_run,
            enforce_retention=self.enforce_retention,
            mode=self.mode,
        )
        out: dict[str, Any] = {"dry_run": self.dry_run, "files": len(files), "sample": list(files[:20])}
        out["version"] = files.metrics.end_version if files.metrics is not None else None
        if files.metrics is not None:
            counts = files.metrics.to_dict()
            counts.pop("files", None)
            out["vacuum"] = counts
        if out["version"] is None:
            out["reason"] = "dry run" if self.dry_run else "nothing to delete"
        self.log.info(
            "%s: %s %d files", self.table_uri, "would delete" if self.dry_run else "deleted", len(files)
        )
        return out


class DeltaManifestOperator(DeltaTableOperator):
    """Regenerate the symlink manifests (``_symlink_format_manifest/``) for Presto/Trino/Athena.
    Commits nothing; XCom ``manifest`` (``version``, ``filesWritten``, ...).

    With ``decision_task_id`` (a ``DeltaMaintenancePlanOperator``) it regenerates only when the
    manifests are behind the table when it runs (``commands.manifest.manifest_lag``), which is
    what the plan's ``manifest`` kind decides on, looked at again because a compaction upstream in
    the same run moves files; otherwise it succeeds with ``nothing_to_do`` and why."""

    operation_name = "GENERATE MANIFEST"

    def __init__(self, *, table_uri: str, decision_task_id: str | None = None, **kwargs):
        check = Arguments(type(self), kwargs)
        check.table_uri(table_uri)
        check.common(kwargs)
        decision_task_id = check.text("decision_task_id", decision_task_id, optional=True)
        super().__init__(table_uri=table_uri, emit_asset=False, idempotent=False, **kwargs)
        self.decision_task_id = decision_task_id

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        if self.decision_task_id:
            from deltaplane.engine import manifest_lag

            lag = manifest_lag(table.snapshot.store, table.version)
            if lag.manifests and not lag.commits_behind:
                reason = f"{self.decision_task_id}: manifest not needed: the manifests show v{lag.version}"
                self.log.info("%s: nothing to do, %s", self.table_uri, reason)
                return {
                    "version": None,
                    "nothing_to_do": True,
                    "decision_task_id": self.decision_task_id,
                    "reason": reason,
                }
        manifest = table.generate_manifest().as_dict()
        self.log.info(
            "%s: %d manifests written for version %s",
            self.table_uri,
            manifest["filesWritten"],
            manifest["version"],
        )
        reason = f"manifests are not commits (written for version {manifest['version']})"
        return {"version": None, "manifest": manifest, "reason": reason}
