"""A table's maintenance operations, mixed into ``DeltaTable``: OPTIMIZE (compaction, Z-order,
clustering, deletion-vector purge), RESTORE, VACUUM, log cleanup, REPAIR, checkpoints, symlink
manifests and the health report.

Each is a thin call over its command (``engine/commands/``), planned on the latest version
(``_latest_for_write``) and adopted by the table after it commits (``_after_commit``), as the
writes in ``engine/table.py`` are; the commands load when first called, so opening a table does not
pay for them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deltaplane.engine.delta_rs import (
    COMMIT_OPTIONS,
    Refused,
    Renamed,
    delta_rs_names,
    only,
)
from deltaplane.engine.deltalake_compat import TableOptimizer
from deltaplane.engine.errors import InvalidArgumentError
from deltaplane.engine.expressions.tree import Expr

if TYPE_CHECKING:
    from deltaplane.engine.checkpoint_writer import CheckpointInfo
    from deltaplane.engine.commands.log_cleanup import LogCleanupMetrics, LogCleanupPlan
    from deltaplane.engine.commands.manifest import ManifestMetrics
    from deltaplane.engine.commands.optimize import OptimizeMetrics, OptimizePlan
    from deltaplane.engine.commands.repair import RepairPlan
    from deltaplane.engine.commands.restore import RestorePlan
    from deltaplane.engine.commands.vacuum import VacuumMetrics, VacuumPlan
    from deltaplane.engine.health import TableHealth
    from deltaplane.engine.transaction import CommitResult


class VacuumFiles(list):
    """The files a VACUUM deleted (or would delete), with its ``plan`` and, when it ran, its
    ``metrics`` (Delta Spark's numbers, the START/END commit versions)."""

    def __init__(self, files, *, plan: VacuumPlan, metrics: VacuumMetrics | None = None):
        super().__init__(files)
        self.plan = plan
        self.metrics = metrics


class TableMaintenance:
    """OPTIMIZE, RESTORE, VACUUM, log cleanup, REPAIR, checkpoints, manifests, health: on ``DeltaTable``."""

    @property
    def optimize(self) -> TableOptimizer:
        """``dt.optimize(...)`` compacts (or Z-orders with ``zorder_by``); delta-rs's
        ``dt.optimize.compact(...)`` and ``dt.optimize.z_order([...])`` work too."""
        return TableOptimizer(self)

    def _optimize(
        self,
        target_file_size: int | None = None,
        zorder_by: list[str] | None = None,
        filter: str | Expr | None = None,
        *,
        dry_run: bool = False,
        min_num_files: int | None = None,
        max_deleted_rows_ratio: float | None = None,
        purge: bool = False,
        max_concurrent_bins: int | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
        full: bool = False,
        min_cube_size: int | None = None,
    ) -> OptimizeMetrics | OptimizePlan:
        """Compact small files (or Z-order by ``zorder_by``) with ``dataChange=false``; on a
        liquid-clustered table, cluster the files not yet clustered instead (``full``: also
        those clustered by older columns; ``min_cube_size``: when a cluster is finished).

        ``filter`` may use partition columns only. Files whose deletion vectors hide more than
        ``max_deleted_rows_ratio`` (default 0.05, Delta Spark's) of their rows are rewritten to
        purge them (all such files with ``purge=True``); a bin needs ``min_num_files`` (default
        2). ``dry_run`` returns the plan and changes nothing.
        """
        from deltaplane.engine.commands.optimize import (
            DEFAULT_MAX_DELETED_ROWS_RATIO,
            DEFAULT_MIN_NUM_FILES,
            execute_optimize,
            plan_optimize,
        )
        from deltaplane.engine.transaction import commit_metadata_scope

        if min_num_files is None:
            min_num_files = DEFAULT_MIN_NUM_FILES
        if max_deleted_rows_ratio is None:
            max_deleted_rows_ratio = DEFAULT_MAX_DELETED_ROWS_RATIO
        read = self._latest_for_write()
        plan = plan_optimize(
            read,
            target_file_size=target_file_size,
            zorder_by=zorder_by,
            filter=filter,
            min_num_files=min_num_files,
            max_deleted_rows_ratio=max_deleted_rows_ratio,
            purge=purge,
            full=full,
            min_cube_size=min_cube_size,
        )
        if dry_run:
            return plan
        with commit_metadata_scope(commit_metadata):
            metrics = execute_optimize(self._store, plan, max_concurrent_bins=max_concurrent_bins)
            if metrics.commit is not None:
                self._after_commit(metrics.commit, read=read, data_write=False)
        return metrics

    def generate_manifest(self) -> ManifestMetrics:
        """Write ``_symlink_format_manifest/`` (one Hive-style manifest per partition listing the
        live Parquet files) for Presto/Trino/Athena; a full regeneration that also deletes stale
        manifests. Refused (``UnsupportedOperationError``) with deletion vectors or column mapping."""
        from deltaplane.engine.commands.manifest import execute_manifest, plan_manifest

        snapshot = self._latest_for_write()
        return execute_manifest(self._store, plan_manifest(self._store, snapshot))

    @delta_rs_names(
        target="version",
        ignore_missing_files=Refused(
            "deltaplane refuses a restore whose files are gone (FilesMissingError, nothing committed); "
            "dt.repair() removes missing files from the current version",
            only(False),
        ),
        protocol_downgrade_allowed=Refused(
            "deltaplane's RESTORE never downgrades the protocol (as Delta Spark's)", only(False)
        ),
        **COMMIT_OPTIONS,
    )
    def restore(
        self,
        version: int | None = None,
        timestamp: str | int | dt.datetime | None = None,
        *,
        dry_run: bool = False,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult | RestorePlan:
        """Make ``version`` (or the version current at ``timestamp``) the current state again,
        as a new RESTORE commit that rewrites no data. Restoring the current version commits
        nothing (``skipped``); ``FilesMissingError`` (nothing committed) if VACUUM removed files
        it needs. ``dry_run`` returns the plan.

        As delta-rs's ``restore(target)``, the first argument may also be a point in time (an
        ISO-8601 string or a datetime)."""
        from deltaplane.engine.commands.restore import (
            execute_restore,
            load_restore_target,
            plan_restore,
            restore_target_version,
        )
        from deltaplane.engine.transaction import commit_metadata_scope

        if isinstance(version, str | dt.datetime):
            if timestamp is not None:
                raise InvalidArgumentError("restore to a version or to a timestamp, not both")
            version, timestamp = None, version
        current = self._latest_for_write()
        target_version = restore_target_version(self._store, current, version=version, timestamp=timestamp)
        target = load_restore_target(self._store, current, target_version)
        plan = plan_restore(self._store, current, target, timestamp=timestamp)
        if dry_run:
            return plan
        with commit_metadata_scope(commit_metadata):
            result = execute_restore(self._store, plan)
            self._after_commit(result, read=current, data_write=False)
        return result

    @delta_rs_names(
        keep_versions=Refused(
            "deltaplane's VACUUM keeps what every version inside the retention window needs: "
            "set retention_hours= (or the table's delta.deletedFileRetentionDuration) to keep more"
        ),
        enforce_retention_duration="enforce_retention",
        full=Renamed("mode", lambda full: "full" if full else "lite"),
        **COMMIT_OPTIONS,
    )
    def vacuum(
        self,
        retention_hours: float | None = None,
        dry_run: bool = True,
        enforce_retention: bool = True,
        *,
        mode: str | None = None,
        max_workers: int | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> VacuumFiles:
        """Delete files no version inside the retention window needs; returns the sorted
        table-relative paths deleted (with ``dry_run``, the default: that would be deleted), as a
        list that also carries ``.plan`` and ``.metrics``.

        ``retention_hours`` defaults to ``delta.deletedFileRetentionDuration`` (7 days); a shorter
        one raises ``RetentionTooShortError`` unless ``enforce_retention=False``. ``mode="full"``
        lists the table (also reclaiming files no commit referenced); ``"lite"`` reads only the log.
        The default is ``"full"`` (delta-rs defaults to lite).

        delta-rs's keywords work too: ``enforce_retention_duration`` is ``enforce_retention``, and
        ``full=True``/``False`` is ``mode="full"``/``"lite"``.
        """
        from deltaplane.engine.commands.vacuum import FULL, execute_vacuum, plan_vacuum
        from deltaplane.engine.transaction import commit_metadata_scope

        mode = FULL if mode is None else mode
        if retention_hours is not None and (
            isinstance(retention_hours, bool) or not isinstance(retention_hours, int | float)
        ):
            raise InvalidArgumentError(f"retention_hours must be a number, got {retention_hours!r}")
        snapshot = self._latest_for_write()
        plan = plan_vacuum(
            self._store,
            snapshot,
            retention_hours=retention_hours,
            enforce_retention=enforce_retention,
            mode=mode,
        )
        if dry_run:
            return VacuumFiles(plan.files, plan=plan)
        with commit_metadata_scope(commit_metadata):
            metrics = execute_vacuum(self._store, plan, snapshot=snapshot, max_workers=max_workers)
            if metrics.commit is not None:
                self._after_commit(metrics.commit, read=snapshot, data_write=False)
        return VacuumFiles(metrics.files, plan=plan, metrics=metrics)

    def cleanup_log(
        self, *, dry_run: bool = False, retention_ms: int | None = None, enforce_retention: bool = True
    ) -> LogCleanupMetrics | LogCleanupPlan:
        """Delete log files older than ``delta.logRetentionDuration`` (30 days) up to the newest
        expired checkpoint; every version from that checkpoint on stays readable. ``dry_run``
        returns the plan."""
        from deltaplane.engine.commands.log_cleanup import execute_log_cleanup, plan_log_cleanup

        plan = plan_log_cleanup(
            self._store,
            self._latest_for_write(),
            retention_ms=retention_ms,
            enforce_retention=enforce_retention,
        )
        return plan if dry_run else execute_log_cleanup(self._store, plan)

    @delta_rs_names(**COMMIT_OPTIONS)
    def repair(
        self,
        dry_run: bool = True,
        *,
        include_missing_deletion_vectors: bool = False,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> RepairPlan | CommitResult:
        """Delta Spark's FSCK REPAIR TABLE: find live files whose data file is gone and, unless
        ``dry_run`` (the default, returning the ``RepairPlan``), commit their removal so the
        table reads again. Files whose deletion-vector file is gone are listed, and removed only
        with ``include_missing_deletion_vectors`` (that also drops their undeleted rows)."""
        from deltaplane.engine.commands.repair import execute_repair, plan_repair
        from deltaplane.engine.transaction import commit_metadata_scope

        snapshot = self._latest_for_write()
        plan = plan_repair(
            self._store, snapshot, include_missing_deletion_vectors=include_missing_deletion_vectors
        )
        if dry_run:
            return plan
        with commit_metadata_scope(commit_metadata):
            result = execute_repair(self._store, plan)
            if not result.skipped:
                self._after_commit(result, read=snapshot, data_write=False)
        return result

    def health(self, *, small_file_size: int | None = None) -> TableHealth:
        """Files, sizes, small files and deletion-vector ratio per partition, checkpoint lag, and
        the last OPTIMIZE and VACUUM: what the ops view and the auto-optimize policy read."""
        from deltaplane.engine.health import DEFAULT_SMALL_FILE_SIZE, table_health

        return table_health(self.snapshot, small_file_size=small_file_size or DEFAULT_SMALL_FILE_SIZE)

    def checkpoint(self) -> CheckpointInfo:
        """Write a checkpoint of the current version (and update ``_last_checkpoint``)."""
        from deltaplane.engine.checkpoint_writer import write_checkpoint

        snapshot = self.snapshot
        return write_checkpoint(self._store, snapshot.version, snapshot)
