"""RESTORE: make an earlier version the table's current state again, as one new commit.

Undoing a bad load is the everyday use: time travel can read the old version, but readers that
follow the latest version (dashboards, downstream jobs, other engines) need the table itself to
go back. RESTORE rewrites no data. It compares the live files of the target version with those of
the latest one, by logical file (canonical path plus deletion-vector id), and commits:

* ``add`` (``dataChange=true``) for every file live in the target but not now, with the size,
  partition values, statistics, deletion vector and row-tracking fields the target recorded;
* ``remove`` (``dataChange=true``) for every file live now but not in the target;
* the target's metadata (schema, properties, partitioning), so a schema change or a property
  change is undone too;
* the target's clustering columns (none, if it was not clustered), as Delta Spark writes the
  ``delta.clustering`` domain; every other domain stays, the row-tracking high-water mark among
  them;
* the union of the current and the target protocol, never a downgrade (Delta Spark's default):
  a feature that was turned on since may have left state older readers cannot handle, and time
  travel to the versions in between must keep working.

The semantics, metric names (``numRestoredFiles``, ``tableSizeAfterRestore``, ...) and the
``RESTORE`` operation with its ``version``/``timestamp`` parameters are Delta Spark's. Before
committing, every file to re-add (and its deletion-vector file) is checked with a parallel HEAD:
VACUUM may have deleted them, and a commit pointing at missing files would break every reader.
Nothing is committed then.

Concurrency: RESTORE reads the whole table and changes the metadata, so any concurrent commit that
adds or removes data or changes metadata makes it fail with a commit conflict instead of
producing a state that is neither the target nor a sensible merge. (Delta Spark fails on *any*
concurrent commit; a concurrent commit that changes no data, such as a set-transaction, is let
through here.)

Departures from Delta Spark, on purpose:

* restoring to the current version commits nothing and returns ``skipped=True`` (Delta Spark and
  delta-rs raise): a retried "restore to N" job is then harmless;
* a table with ``delta.appendOnly=true`` refuses a restore that would remove files
  (``TableReadOnlyError``), like every other command here; Delta Spark's ``commitLarge`` does not
  check it;
* the in-commit-timestamp properties of the current version are kept (the table's timeline does
  not switch back to file times), and ``delta.columnMapping.maxColumnId`` never goes down (column
  ids are never reused). Identity columns keep their highest high-water mark (the transaction
  does that for every metadata it commits), as Delta Spark's RESTORE does.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import (
    Add,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    row_tags,
)
from deltaplane.engine.clustering import ClusteringColumn, physical_columns
from deltaplane.engine.clustering import domain_metadata as clustering_domain
from deltaplane.engine.commands.context import WriteContext, union_protocol
from deltaplane.engine.commands.manifest import check_manifest_compatible
from deltaplane.engine.deletion_vectors import dv_file_key
from deltaplane.engine.errors import (
    FilesMissingError,
    InvalidArgumentError,
    TableReadOnlyError,
    TimestampOutOfRangeError,
    VersionNotFoundError,
)
from deltaplane.engine.log.replay import canonical_paths, file_keys
from deltaplane.engine.log.timestamps import to_millis, version_at_timestamp
from deltaplane.engine.schema import parse_schema
from deltaplane.engine.snapshot import Snapshot, load_snapshot
from deltaplane.engine.storage import missing_objects
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import check_write_supported
from deltaplane.engine.table_properties import TableProperties
from deltaplane.engine.transaction import CommitResult

log = logging.getLogger(__name__)

OPERATION = "RESTORE"
# Existence checks are one HEAD each; on S3 that is a round trip, so run them concurrently.
# How many missing paths an error message names (the exception carries them all).
_SHOWN_MISSING = 5
_KEEP_FROM_CURRENT = (
    "delta.enableInCommitTimestamps",
    "delta.inCommitTimestampEnablementVersion",
    "delta.inCommitTimestampEnablementTimestamp",
)


@dataclass(frozen=True)
class RestorePlan:
    """What a RESTORE of ``current`` to ``target`` commits (a dry run stops here)."""

    current: Snapshot = field(repr=False, compare=False)
    target: Snapshot = field(repr=False, compare=False)
    files_to_add: pa.Table = field(repr=False, compare=False)  # rows of target.files
    files_to_remove: pa.Table = field(repr=False, compare=False)  # rows of current.files
    metadata: Metadata = field(repr=False)
    protocol: Protocol | None  # None: unchanged
    domains: list[DomainMetadata]  # metadata domains the restore writes (clustering columns)
    operation_parameters: dict[str, Any]
    metrics: dict[str, int]

    @property
    def current_version(self) -> int:
        return self.current.version

    @property
    def target_version(self) -> int:
        return self.target.version

    @property
    def is_noop(self) -> bool:
        """Restoring the version the table is at: nothing to commit."""
        return self.target.version == self.current.version

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (for dry runs and the CLI)."""
        return {
            "currentVersion": self.current_version,
            "targetVersion": self.target_version,
            "noop": self.is_noop,
            "protocolChange": self.protocol is not None,
            **self.metrics,
        }


# --- which version ------------------------------------------------------------------------------


def restore_target_version(
    store: ObjectStore,
    current: Snapshot,
    *,
    version: int | None = None,
    timestamp: str | int | float | dt.datetime | None = None,
) -> int:
    """The version to restore: ``version`` as given (checked), or the latest commit at or before
    ``timestamp``. A timestamp after the latest commit means the latest version (Delta Spark's
    ``canReturnLastCommit``); one before the earliest available commit is an error."""
    if (version is None) == (timestamp is None):
        raise InvalidArgumentError("give the version or the timestamp to restore, one of them")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise InvalidArgumentError(
                f"a version to restore must be a non-negative integer, got {version!r}"
            )
        if version > current.version:
            raise VersionNotFoundError(
                f"cannot restore {store.root} to version {version}: its latest version is {current.version}"
            )
        return version
    assert timestamp is not None
    try:
        return version_at_timestamp(store, timestamp, current.properties)
    except TimestampOutOfRangeError:
        if to_millis(timestamp) > current.timestamp:
            return current.version
        raise


def load_restore_target(store: ObjectStore, current: Snapshot, version: int) -> Snapshot:
    return current if version == current.version else load_snapshot(store, version)


# --- plan ---------------------------------------------------------------------------------------


def plan_restore(
    store: ObjectStore,
    current_snapshot: Snapshot,
    target_snapshot: Snapshot,
    *,
    timestamp: str | int | float | dt.datetime | None = None,
) -> RestorePlan:
    """The file diff, metadata and protocol of restoring ``current_snapshot`` to
    ``target_snapshot``. ``timestamp`` is only recorded (the operation parameter)."""
    current, target = current_snapshot, target_snapshot
    if target.version > current.version:
        raise VersionNotFoundError(
            f"cannot restore {store.root} to version {target.version}: it is newer than the "
            f"version being restored ({current.version})"
        )
    parameters: dict[str, Any] = {"version": target.version}
    if timestamp is not None:
        millis = to_millis(timestamp)
        parameters["timestamp"] = dt.datetime.fromtimestamp(millis / 1000, dt.UTC).isoformat()

    if target.version == current.version:
        to_add, to_remove = target.files.slice(0, 0), current.files.slice(0, 0)
    else:
        current_keys = file_keys(current.files, store.root, with_dv=True)
        target_keys = file_keys(target.files, store.root, with_dv=True)
        to_add = target.files.filter(pc.invert(pc.is_in(target_keys, value_set=_array(current_keys))))
        to_remove = current.files.filter(pc.invert(pc.is_in(current_keys, value_set=_array(target_keys))))

    metadata = _restored_metadata(current.metadata, target.metadata)
    merged = union_protocol(current.protocol, target.protocol)
    protocol = merged if merged != current.protocol else None
    if target.version != current.version:
        # What the table becomes must be writable by us and describable by its manifest.
        check_write_supported(merged, metadata, parse_schema(metadata.schema_string), store.root)
        check_manifest_compatible(metadata, target.files, store.root)
        if to_remove.num_rows and TableProperties(current.metadata.configuration).append_only:
            raise TableReadOnlyError(
                f"{store.root} is append-only (delta.appendOnly=true): restoring version {target.version} "
                f"would remove {to_remove.num_rows} file(s) added since"
            )
    metrics = {
        "numRestoredFiles": to_add.num_rows,
        "restoredFilesSize": _total_size(to_add),
        "numRemovedFiles": to_remove.num_rows,
        "removedFilesSize": _total_size(to_remove),
        "numOfFilesAfterRestore": target.files.num_rows,
        "tableSizeAfterRestore": _total_size(target.files),
    }
    return RestorePlan(
        current=current,
        target=target,
        files_to_add=to_add,
        files_to_remove=to_remove,
        metadata=metadata,
        protocol=protocol,
        domains=_restored_domains(current, target),
        operation_parameters=parameters,
        metrics=metrics,
    )


def _restored_metadata(current: Metadata, target: Metadata) -> Metadata:
    configuration = dict(target.configuration)
    if TableProperties(current.configuration).enable_in_commit_timestamps:
        for key in _KEEP_FROM_CURRENT:
            if key in current.configuration:
                configuration[key] = current.configuration[key]
    max_ids = [
        int(c["delta.columnMapping.maxColumnId"])
        for c in (current.configuration, target.configuration)
        if "delta.columnMapping.maxColumnId" in c
    ]
    if max_ids:
        configuration["delta.columnMapping.maxColumnId"] = str(max(max_ids))
    if configuration == target.configuration:
        return target
    return Metadata(
        id=target.id,
        schema_string=target.schema_string,
        partition_columns=list(target.partition_columns),
        configuration=configuration,
        format=target.format,
        name=target.name,
        description=target.description,
        created_time=target.created_time,
        extra=target.extra,
    )


def _restored_domains(current: Snapshot, target: Snapshot) -> list[DomainMetadata]:
    """The clustering columns go back with the schema (Delta Spark's RESTORE writes the target's
    columns, or none when the target was not clustered); every other domain is kept, the row
    tracking high-water mark among them (row ids are never handed out twice)."""
    now = physical_columns(current)
    if now is None:
        return []
    then = physical_columns(target) or []
    if then == now:
        return []
    return [clustering_domain([ClusteringColumn(parts, parts) for parts in then])]


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _total_size(files: pa.Table) -> int:
    return int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0


# --- execute ------------------------------------------------------------------------------------


def execute_restore(store: ObjectStore, plan: RestorePlan) -> CommitResult:
    """Check that the files to re-add exist, then commit the restore (or nothing, for a no-op)."""
    if plan.is_noop:
        log.info("%s is already at version %d: nothing to restore", store.root, plan.current.version)
        return CommitResult(
            plan.current.version, OPERATION, dict(plan.metrics), skipped=True, snapshot=plan.current
        )
    write = WriteContext(
        store,
        plan.current,
        plan.operation_parameters,
        target_file_size=None,
        schema_mode=None,
        operation=OPERATION,
    )
    if plan.files_to_remove.num_rows:
        write.check_removals_allowed()
    check_files_exist(store, plan.files_to_add, plan.target.version)

    write.txn.read_whole_table()
    write.remove_files(plan.files_to_remove)
    write.txn.update_metadata(plan.metadata)
    if plan.protocol is not None:
        write.txn.update_protocol(plan.protocol)
    for domain in plan.domains:
        write.txn.set_domain_metadata(domain)
    write.txn.add_files([add_action(row) for row in plan.files_to_add.to_pylist()])
    write.txn.mark_files_verified()  # old files, just checked: not "written long ago" by us
    result = write.txn.commit(plan.metrics)
    log.info(
        "restored %s to version %d as version %d: %d file(s) re-added, %d removed",
        store.root,
        plan.target.version,
        result.version,
        plan.metrics["numRestoredFiles"],
        plan.metrics["numRemovedFiles"],
    )
    return result


def add_action(row: dict[str, Any]) -> Add:
    """Re-add one live-file row of the target version, as the target recorded it."""
    dv = row.get("deletion_vector")
    return Add(
        path=row["path"],
        partition_values=dict(row.get("partition_values") or {}),
        size=row["size"],
        modification_time=row["modification_time"],
        data_change=True,
        stats=row.get("stats"),
        deletion_vector=DeletionVectorDescriptor.from_json({k: v for k, v in dv.items() if v is not None})
        if dv
        else None,
        base_row_id=row.get("base_row_id"),
        default_row_commit_version=row.get("default_row_commit_version"),
        clustering_provider=row.get("clustering_provider"),
        tags=row_tags(row.get("tags")),
    )


def check_files_exist(store: ObjectStore, files: pa.Table, version: int) -> None:
    """HEAD every data file (and deletion-vector file) of ``files``; ``FilesMissingError`` naming
    the missing ones."""
    if files.num_rows == 0:
        return
    root = store.root
    locations = canonical_paths(files.column("path"), root).to_pylist()
    dv_keys = set()
    for dv in files.column("deletion_vector").to_pylist():
        if dv and dv.get("storageType") in ("u", "p"):
            descriptor = DeletionVectorDescriptor.from_json({k: v for k, v in dv.items() if v is not None})
            dv_keys.add(dv_file_key(descriptor))
    targets = [*locations, *sorted(dv_keys)]
    started = time.monotonic()
    gone = missing_objects(store, targets)
    log.debug("checked %d file(s) of %s in %.3fs", len(targets), root, time.monotonic() - started)
    if gone:
        shown = ", ".join(gone[:_SHOWN_MISSING]) + (
            f" and {len(gone) - _SHOWN_MISSING} more" if len(gone) > _SHOWN_MISSING else ""
        )
        raise FilesMissingError(
            f"cannot restore {root} to version {version}: {len(gone)} file(s) it needs are missing, "
            f"probably removed by VACUUM: {shown}. Nothing was committed.",
            gone,
        )
