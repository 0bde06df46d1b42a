"""Conflict detection between a transaction and the commits that won the race before it.

The checks and their order are Delta Spark's (``ConflictChecker``), with its error names:

1. the winner changed the protocol to something we cannot use, or both changed it
   -> ``ProtocolChangedError``;
2. the winner changed the metadata -> ``MetadataChangedError``;
3. both touched the same metadata domain -> ``DomainMetadataConflictError``;
4. the winner wrote a ``txn`` for an application id we read -> ``ConcurrentTransactionError``;
5. the winner added files our reads should have seen -> ``ConcurrentAppendError`` (Serializable:
   any data-changing add matching a read predicate; WriteSerializable: blind appends are
   ignored unless we change the metadata; a transaction without data changes, like OPTIMIZE,
   runs at SnapshotIsolation and skips this check);
6. the winner removed a file we remove -> ``ConcurrentDeleteDeleteError``;
7. the winner removed a file we read (or anything, if we read the whole table)
   -> ``ConcurrentDeleteReadError``.

Checks 6 and 7 are in the opposite order from Delta Spark's: when both apply (two DELETEs of the
same file, each having read it), the more specific error names what really collided, which is
what a user retrying the job needs to know.

Added files are matched against read predicates with the same partition pruning and statistics
skipping a scan uses, so "could this new file hold rows we read" errs on the side of conflict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata, Protocol
from deltaplane.engine.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    DeltaError,
    DomainMetadataConflictError,
    MetadataChangedError,
    ProtocolChangedError,
)
from deltaplane.engine.expressions.tree import Expr
from deltaplane.engine.log.commits import LogActions
from deltaplane.engine.log.replay import canonical_paths, normalize_partition_values
from deltaplane.engine.scan import file_keep_mask
from deltaplane.engine.schema import StructType, parse_schema, partition_physical_names
from deltaplane.engine.table_features import check_write_supported

# commitInfo tag of a commit whose metaData only moves identity high-water marks (Delta Spark's).
IDENTITY_SCHEMA_UPDATE_TAG = "delta.identity.schemaUpdate"
SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"
ISOLATION_LEVELS = (SERIALIZABLE, WRITE_SERIALIZABLE)


@dataclass
class TransactionSummary:
    """What a transaction read and what it writes, as conflict checks need it."""

    isolation_level: str = WRITE_SERIALIZABLE
    read_whole_table: bool = False
    read_predicates: list[Expr] = field(default_factory=list)  # bound to the table schema
    read_file_keys: set[str] = field(default_factory=set)  # canonical paths
    read_app_ids: set[str] = field(default_factory=set)
    removed_file_keys: set[str] = field(default_factory=set)
    changes_metadata: bool = False
    changes_protocol: bool = False
    domains: set[str] = field(default_factory=set)


def check_conflicts(
    ours: TransactionSummary,
    winner: LogActions,
    *,
    metadata: Metadata,
    protocol: Protocol,
    table_root: str,
) -> None:
    """Raise the first conflict between ``ours`` and one winning commit; return if none."""
    where = f"{table_root} version {winner.version}"
    _check_protocol_and_metadata(ours, winner, metadata, where, table_root)
    touched = {d.domain for d in winner.domains} & ours.domains
    if touched:
        raise DomainMetadataConflictError(f"{where} changed metadata domains {sorted(touched)} too")
    apps = {t.app_id for t in winner.txns} & ours.read_app_ids
    if apps:
        raise ConcurrentTransactionError(f"{where} committed application transaction(s) {sorted(apps)}")

    files = winner.file_actions
    if files is None or files.num_rows == 0:
        return
    schema = parse_schema(metadata.schema_string)
    _check_appends(ours, winner, files, schema, metadata, where, table_root)
    _check_removes(ours, files.filter(pc.invert(files.column("is_add"))), where, table_root)


def _check_protocol_and_metadata(
    ours: TransactionSummary, winner: LogActions, metadata: Metadata, where: str, table_root: str
) -> None:
    """A winner that changed the protocol (to one we cannot write, or at all when we change it too)
    or the metadata (an identity-only update passes a write that changes no metadata)."""
    if winner.protocol is not None:
        try:
            check_write_supported(winner.protocol, metadata, parse_schema(metadata.schema_string), table_root)
        except DeltaError as e:
            raise ProtocolChangedError(
                f"{where} changed the protocol to one deltaplane cannot write: {e}"
            ) from e
        if ours.changes_protocol:
            raise ProtocolChangedError(f"{where} changed the protocol concurrently with this transaction")
    if winner.metadata is not None:
        tags = (winner.commit_info.values.get("tags") if winner.commit_info is not None else None) or {}
        identity_only = str(tags.get(IDENTITY_SCHEMA_UPDATE_TAG, "")).lower() == "true"
        if identity_only and ours.changes_metadata:
            raise MetadataChangedError(
                f"{where} assigned identity column values concurrently (it moved their high-water "
                "marks); this write's values could repeat them, so nothing was committed: run it again"
            )
        if not identity_only:  # Delta Spark lets an identity-only update pass a write without one
            raise MetadataChangedError(
                f"{where} changed the table metadata (schema, properties or partitioning)"
            )


def _check_appends(
    ours: TransactionSummary,
    winner: LogActions,
    files: pa.Table,
    schema: StructType,
    metadata: Metadata,
    where: str,
    table_root: str,
) -> None:
    """Data the winner added that this transaction should have read (not under snapshot
    isolation; a blind append passes a write-serializable write that changes no metadata)."""
    if ours.isolation_level == SNAPSHOT_ISOLATION or not (ours.read_whole_table or ours.read_predicates):
        return
    blind = bool(winner.commit_info and winner.commit_info.values.get("isBlindAppend"))
    if blind and ours.isolation_level == WRITE_SERIALIZABLE and not ours.changes_metadata:
        return
    is_add = files.column("is_add")
    added = files.filter(pc.and_(is_add, pc.fill_null(files.column("data_change"), True)))
    # A file re-added with a new deletion vector in the same commit is a deletion, not new data:
    # it is judged by the delete checks.
    replaced = files.filter(pc.invert(is_add)).column("path")
    if added.num_rows and len(replaced):
        added = added.filter(pc.invert(pc.is_in(added.column("path"), value_set=replaced.combine_chunks())))
    if added.num_rows and _matches_reads(added, ours, schema, metadata, table_root):
        raise ConcurrentAppendError(
            f"{where} added data this transaction should have read (isolation {ours.isolation_level})"
        )


def _check_removes(ours: TransactionSummary, removed: pa.Table, where: str, table_root: str) -> None:
    """Files the winner removed that this transaction removes too, or read."""
    if removed.num_rows == 0:
        return
    removed_keys = set(canonical_paths(removed.column("path"), table_root).to_pylist())
    both = removed_keys & ours.removed_file_keys
    if both:
        changed = removed.filter(pc.fill_null(removed.column("data_change"), True))
        rearranged = not (set(canonical_paths(changed.column("path"), table_root).to_pylist()) & both)
        raise ConcurrentDeleteDeleteError(
            f"{where} {'rewrote (without changing their rows)' if rearranged else 'removed'} files "
            f"this transaction also removes: {', '.join(sorted(both)[:3])}",
            rearranged=rearranged,
        )
    removed_data = removed.filter(pc.fill_null(removed.column("data_change"), True))
    if removed_data.num_rows:
        data_keys = set(canonical_paths(removed_data.column("path"), table_root).to_pylist())
        if ours.read_whole_table or data_keys & ours.read_file_keys:
            hit = ", ".join(sorted(data_keys & ours.read_file_keys)[:3]) or "(it read the whole table)"
            raise ConcurrentDeleteReadError(f"{where} removed files this transaction read: {hit}")


def _matches_reads(
    added: pa.Table, ours: TransactionSummary, schema: StructType, metadata: Metadata, table_root: str
) -> bool:
    if ours.read_whole_table:
        return True
    physical = partition_physical_names(schema, metadata.partition_columns)
    added = normalize_partition_values(added, physical)
    for predicate in ours.read_predicates:
        mask = file_keep_mask(added, predicate, schema, metadata, table_root)
        if pc.any(mask).as_py():
            return True
    return False
