"""The ``DeltaTable`` facade: the public API over snapshots, scans and (later) commands."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from engine.actions import Metadata, Protocol
from engine.auto_optimize import auto_compact_after_commit, auto_compact_enabled
from engine.checkpoint_writer import CheckpointInfo, write_checkpoint
from engine.commands.changes import read_changes
from engine.commands.dml import execute_delete, execute_update
from engine.commands.history import load_history
from engine.commands.log_cleanup import (
    LogCleanupMetrics,
    LogCleanupPlan,
    execute_log_cleanup,
    plan_log_cleanup,
)
from engine.commands.manifest import (
    ManifestMetrics,
    execute_manifest,
    plan_manifest,
    refresh_manifest_after_commit,
)
from engine.commands.merge import MergeBuilder
from engine.commands.optimize import (
    DEFAULT_MAX_DELETED_ROWS_RATIO,
    DEFAULT_MIN_NUM_FILES,
    OptimizeMetrics,
    OptimizePlan,
    execute_optimize,
    plan_optimize,
)
from engine.commands.restore import (
    RestorePlan,
    execute_restore,
    load_restore_target,
    plan_restore,
    restore_target_version,
)
from engine.commands.vacuum import FULL, VacuumMetrics, VacuumPlan, execute_vacuum, plan_vacuum
from engine.commands.write import execute_append, execute_create, execute_overwrite
from engine.errors import DeltaError
from engine.expressions.tree import Expr
from engine.health import DEFAULT_SMALL_FILE_SIZE, TableHealth, table_health
from engine.log.timestamps import version_at_timestamp
from engine.scan import Scan, ScanBuilder
from engine.schema import StructType
from engine.snapshot import Snapshot, load_snapshot, load_table_config, update_snapshot
from engine.storage import ObjectStore, open_store
from engine.table_properties import TableProperties
from engine.transaction import CommitResult


class VacuumFiles(list):
    """The files a VACUUM deleted (or would delete), with its ``plan`` and, when it ran, its
    ``metrics`` (Delta Spark's numbers, the START/END commit versions)."""

    def __init__(self, files, *, plan: VacuumPlan, metrics: VacuumMetrics | None = None):
        super().__init__(files)
        self.plan = plan
        self.metrics = metrics


class DeltaTable:
    """A Delta table at one version (the latest unless ``version`` or ``timestamp`` is given)."""

    def __init__(
        self,
        uri: str,
        version: int | None = None,
        timestamp: str | int | float | dt.datetime | None = None,
        storage_options: Mapping[str, str] | None = None,
    ):
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self._store: ObjectStore = open_store(uri, self.storage_options)
        if timestamp is not None:
            _, metadata = load_table_config(self._store)
            properties = TableProperties(metadata.configuration)
            version = version_at_timestamp(self._store, timestamp, properties)
        self._snapshot = load_snapshot(self._store, version)
        self._version_pinned = version is not None
        self._stale = False

    # --- state ---------------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        if self._stale:  # this object committed since: catch up with its own writes
            self._snapshot = update_snapshot(self._snapshot)
            self._stale = False
        return self._snapshot

    @property
    def version(self) -> int:
        return self.snapshot.version

    @property
    def schema(self) -> pa.Schema:
        from engine.schema import to_arrow_schema

        return to_arrow_schema(self.snapshot.schema)

    @property
    def delta_schema(self):
        return self.snapshot.schema

    @property
    def protocol(self) -> Protocol:
        return self.snapshot.protocol

    @property
    def metadata(self) -> Metadata:
        return self.snapshot.metadata

    @property
    def properties(self) -> TableProperties:
        return self.snapshot.properties

    @property
    def partition_columns(self) -> list[str]:
        return self.snapshot.partition_columns

    def refresh(self) -> DeltaTable:
        """Move to the latest version, replaying only the commits made since."""
        self._snapshot = update_snapshot(self._snapshot)
        self._stale = False
        self._version_pinned = False
        return self

    def load_version(self, version: int) -> DeltaTable:
        """Time travel this object to ``version`` (read-only until ``refresh()``)."""
        self._snapshot = load_snapshot(self._store, version)
        self._stale = False
        self._version_pinned = True
        return self

    # --- reading -------------------------------------------------------------------------------

    def scan(self, columns: list[str] | None = None, filter: str | Expr | None = None) -> Scan:
        return ScanBuilder(self.snapshot).select(columns).where(filter).build()

    def to_arrow(self, columns: list[str] | None = None, filter: str | Expr | None = None) -> pa.Table:
        """All rows (projected and filtered) as one Arrow table."""
        return self.scan(columns, filter).to_table()

    def to_batches(
        self, columns: list[str] | None = None, filter: str | Expr | None = None
    ) -> pa.RecordBatchReader:
        """A stream of record batches, read file by file in bounded memory."""
        return self.scan(columns, filter).to_batches()

    def file_uris(self, filter: str | Expr | None = None) -> list[str]:
        """Live data files after partition pruning and statistics skipping."""
        return self.scan(None, filter).file_uris()

    # --- writing -------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        uri: str,
        schema: pa.Schema | StructType,
        *,
        partition_by: list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        name: str | None = None,
        description: str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> DeltaTable:
        """Create an empty table (version 0) with the smallest protocol its properties need.

        ``TableExistsError`` if a table is already there (checked, and enforced atomically by
        the put-if-absent of version 0).
        """
        store = open_store(uri, storage_options)
        result = execute_create(
            store,
            schema,
            partition_by=partition_by,
            properties=properties,
            name=name,
            description=description,
        )
        refresh_manifest_after_commit(store, None, result)  # an (empty) manifest from version 0
        return cls(uri, storage_options=storage_options)

    def _latest_for_write(self) -> Snapshot:
        """The latest version: writes are planned against it (and retried past newer ones)."""
        if self._version_pinned:
            raise DeltaError(
                f"{self.uri} was opened at a fixed version or timestamp; open it at the latest "
                "version to write"
            )
        self._snapshot = update_snapshot(self._snapshot)
        self._stale = False
        return self._snapshot

    def append(
        self,
        data: Any,
        *,
        app_id: str | None = None,
        app_version: int | None = None,
        schema_mode: str | None = None,
        target_file_size: int | None = None,
    ) -> CommitResult:
        """Add rows. With ``app_id``/``app_version``, a version already recorded for that
        application commits nothing (``result.skipped``): retries of the same job are safe."""
        read = self._latest_for_write()
        result = execute_append(
            self._store,
            read,
            data,
            app_id=app_id,
            app_version=app_version,
            schema_mode=schema_mode,
            target_file_size=target_file_size,
        )
        self._after_commit(result, read=read)
        return result

    def overwrite(
        self,
        data: Any,
        predicate: str | Expr | None = None,
        *,
        dynamic_partitions: bool = False,
        app_id: str | None = None,
        app_version: int | None = None,
        schema_mode: str | None = None,
        target_file_size: int | None = None,
    ) -> CommitResult:
        """Replace all rows, the rows matching ``predicate`` (replaceWhere), or, with
        ``dynamic_partitions``, the partitions the new data touches."""
        read = self._latest_for_write()
        result = execute_overwrite(
            self._store,
            read,
            data,
            predicate=predicate,
            dynamic_partitions=dynamic_partitions,
            app_id=app_id,
            app_version=app_version,
            schema_mode=schema_mode,
            target_file_size=target_file_size,
        )
        self._after_commit(result, read=read)
        return result

    def _after_commit(self, result: CommitResult, *, read: Snapshot | None, data_write: bool = True) -> None:
        """Post-commit hooks: adopt the new snapshot, keep symlink manifests current (when
        enabled), and auto-compact (when enabled) after data writes. ``read`` is the snapshot
        the commit was planned on."""
        if result.snapshot is not None:
            self._snapshot, self._stale = result.snapshot, False
        else:
            self._stale = True  # read the new version only when it is next needed
        result.manifest = refresh_manifest_after_commit(self._store, read, result)  # None unless enabled
        if data_write and not result.skipped and auto_compact_enabled(self.snapshot):
            before = self.snapshot
            compaction = auto_compact_after_commit(self._store, before)
            if compaction is not None and compaction.commit is not None:
                result.auto_compaction = compaction
                self._after_commit(compaction.commit, read=before, data_write=False)

    def delete(
        self,
        predicate: str | Expr | None = None,
        *,
        strategy: str | None = None,
        rewrite_threshold: float | None = None,
    ) -> CommitResult:
        """Delete the rows matching ``predicate`` (all rows when ``None``).

        ``strategy`` is ``"deletion_vectors"`` (the default when the table enables them) or
        ``"copy_on_write"``; files whose deleted fraction passes ``rewrite_threshold`` are
        rewritten either way. Metrics use Delta Spark's names (``numDeletedRows``, ...).
        """
        read = self._latest_for_write()
        result = execute_delete(self._store, read, predicate, strategy=strategy, threshold=rewrite_threshold)
        self._after_commit(result, read=read)
        return result

    def update(
        self,
        updates: dict[str, str],
        predicate: str | Expr | None = None,
        *,
        strategy: str | None = None,
        rewrite_threshold: float | None = None,
    ) -> CommitResult:
        """Set columns to SQL expressions (``{"price": "price * 1.1"}``) on matching rows."""
        read = self._latest_for_write()
        result = execute_update(
            self._store, read, updates, predicate, strategy=strategy, threshold=rewrite_threshold
        )
        self._after_commit(result, read=read)
        return result

    def merge(
        self,
        source: Any,
        predicate: str,
        *,
        source_alias: str = "source",
        target_alias: str = "target",
        strategy: str | None = None,
        rewrite_threshold: float | None = None,
    ) -> MergeBuilder:
        """Start a MERGE of ``source`` (a Table or RecordBatchReader) on ``predicate``; add
        ``when_*`` clauses and call ``execute()``."""
        return MergeBuilder(
            self,
            source,
            predicate,
            source_alias=source_alias,
            target_alias=target_alias,
            strategy=strategy,
            rewrite_threshold=rewrite_threshold,
        )

    def optimize(
        self,
        target_file_size: int | None = None,
        zorder_by: list[str] | None = None,
        filter: str | Expr | None = None,
        *,
        dry_run: bool = False,
        min_num_files: int = DEFAULT_MIN_NUM_FILES,
        max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
        purge: bool = False,
        max_concurrent_bins: int | None = None,
    ) -> OptimizeMetrics | OptimizePlan:
        """Compact small files (or Z-order by ``zorder_by``) with ``dataChange=false``.

        ``filter`` may use partition columns only. Files whose deletion vectors hide more than
        ``max_deleted_rows_ratio`` of their rows are rewritten to purge them (all such files
        with ``purge=True``). ``dry_run`` returns the plan and changes nothing.
        """
        read = self._latest_for_write()
        plan = plan_optimize(
            read,
            target_file_size=target_file_size,
            zorder_by=zorder_by,
            filter=filter,
            min_num_files=min_num_files,
            max_deleted_rows_ratio=max_deleted_rows_ratio,
            purge=purge,
        )
        if dry_run:
            return plan
        metrics = execute_optimize(self._store, plan, max_concurrent_bins=max_concurrent_bins)
        if metrics.commit is not None:
            self._after_commit(metrics.commit, read=read, data_write=False)
        return metrics

    def generate_manifest(self) -> ManifestMetrics:
        """Write ``_symlink_format_manifest/`` (one Hive-style manifest per partition listing the
        live Parquet files) for Presto/Trino/Athena; a full regeneration that also deletes stale
        manifests. Refused (``UnsupportedOperationError``) with deletion vectors or column mapping."""
        snapshot = self._latest_for_write()
        return execute_manifest(self._store, plan_manifest(self._store, snapshot))

    def restore(
        self,
        version: int | None = None,
        timestamp: str | int | dt.datetime | None = None,
        *,
        dry_run: bool = False,
    ) -> CommitResult | RestorePlan:
        """Make ``version`` (or the version current at ``timestamp``) the current state again,
        as a new RESTORE commit that rewrites no data. Restoring the current version commits
        nothing (``skipped``); ``FilesMissingError`` (nothing committed) if VACUUM removed files
        it needs. ``dry_run`` returns the plan."""
        current = self._latest_for_write()
        target_version = restore_target_version(self._store, current, version=version, timestamp=timestamp)
        target = load_restore_target(self._store, current, target_version)
        plan = plan_restore(self._store, current, target, timestamp=timestamp)
        if dry_run:
            return plan
        result = execute_restore(self._store, plan)
        self._after_commit(result, read=current, data_write=False)
        return result

    def vacuum(
        self,
        retention_hours: float | None = None,
        dry_run: bool = True,
        enforce_retention: bool = True,
        *,
        mode: str = FULL,
        max_workers: int | None = None,
    ) -> VacuumFiles:
        """Delete files no version inside the retention window needs; returns the sorted
        table-relative paths deleted (with ``dry_run``, the default: that would be deleted), as a
        list that also carries ``.plan`` and ``.metrics``.

        ``retention_hours`` defaults to ``delta.deletedFileRetentionDuration`` (7 days); a shorter
        one raises ``RetentionTooShortError`` unless ``enforce_retention=False``. ``mode="full"``
        lists the table (also reclaiming files no commit referenced); ``"lite"`` reads only the log.
        """
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
        plan = plan_log_cleanup(
            self._store,
            self._latest_for_write(),
            retention_ms=retention_ms,
            enforce_retention=enforce_retention,
        )
        return plan if dry_run else execute_log_cleanup(self._store, plan)

    def changes(self, start_version: int, end_version: int | None = None) -> pa.Table:
        """The change data feed: changed rows with ``_change_type``, ``_commit_version`` and
        ``_commit_timestamp`` (``delta.enableChangeDataFeed`` must be on)."""
        return read_changes(self._store, start_version, end_version)

    def health(self, *, small_file_size: int | None = None) -> TableHealth:
        """Files, sizes, small files and deletion-vector ratio per partition, checkpoint lag, and
        the last OPTIMIZE and VACUUM: what the ops view and the auto-optimize policy read."""
        return table_health(self.snapshot, small_file_size=small_file_size or DEFAULT_SMALL_FILE_SIZE)

    def checkpoint(self) -> CheckpointInfo:
        """Write a checkpoint of the current version (and update ``_last_checkpoint``)."""
        snapshot = self.snapshot
        return write_checkpoint(self._store, snapshot.version, snapshot)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit information, newest first."""
        return load_history(self._store, limit=limit, up_to=self.snapshot.version)

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r}, version={self.version})"
