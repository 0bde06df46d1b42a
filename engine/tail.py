"""The changes between versions: what each commit after a consumer's position did to the rows.

A consumer that follows a table (a Spark streaming source, an Airflow log-tail sensor, an event
trigger, the consume operator, the Asset event an operator publishes) asks the same questions,
and this module is the one place that answers them:

* which versions exist after the one it has seen (``versions_after``, contiguity checked);
* what one commit changed (``commit_changes``), classified by what it did to rows, never by
  its operation's name alone:

  - ``append``: only new files (a WRITE, an INSERT-only MERGE, a streaming batch): every row
    of ``new_files`` is a new row, and ``rows_added`` counts them;
  - ``delete``: rows removed and none written: removed files, and files re-added with a larger
    deletion vector (a deletion-vector DELETE re-adds the same file: its rows are *not* new);
    ``rows_deleted`` counts only the rows that disappeared. A copy-on-write DELETE, which
    rewrites the survivors, is a ``delete`` too (by its operation);
  - ``update``: rows removed and rows written (UPDATE, MERGE, overwrite, replaceWhere):
    ``rows_added``/``rows_deleted`` count the rows written and removed; the exact row changes
    are the change data feed's (``DeltaTable.changes``);
  - ``none``: no data change (OPTIMIZE and other ``dataChange=false`` rewrites, metadata,
    protocol, VACUUM, commitInfo only).

* all of it for a range (``changes_between``; ``DeltaTable.changes_between``).

The file tables come back in the live-file table's shape (``FILE_COLUMNS``), so
``Scan(files=...)`` reads them with their deletion vectors applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata, Protocol
from deltaplane.engine.errors import MissingLogVersionError
from deltaplane.engine.log.commits import DV_TYPE
from deltaplane.engine.log.files import commit_key
from deltaplane.engine.log.replay import canonical_paths, normalize_partition_values
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.schema import parse_schema, partition_physical_names
from deltaplane.engine.snapshot import load_table_config, read_commit
from deltaplane.engine.stats import parse_file_stats
from deltaplane.engine.storage.base import ObjectStore

# The live-file columns a reader of added files needs.
FILE_COLUMNS = ("path", "partition_values", "size", "modification_time", "stats", "deletion_vector")


APPEND, DELETE, UPDATE, NONE = "append", "delete", "update", "none"
KINDS = (APPEND, DELETE, UPDATE, NONE)
_DELETE_OPERATIONS = {"DELETE", "TRUNCATE"}


@dataclass(frozen=True)
class CommitChanges:
    """One commit, as a consumer of data changes sees it."""

    version: int
    timestamp: int  # ms: the in-commit timestamp, else commitInfo's, else the file's
    operation: str | None
    commit_info: dict = field(repr=False)
    added: pa.Table = field(repr=False)  # dataChange=true adds (FILE_COLUMNS), re-added files included
    removed: pa.Table = field(repr=False)  # dataChange=true removes (FILE_COLUMNS)
    metadata: Metadata | None = field(default=None, repr=False)
    protocol: Protocol | None = field(default=None, repr=False)
    has_change_files: bool = False  # cdc files (an UPDATE/DELETE/MERGE with the change feed)
    files_added: int = 0  # every add, data change or not (an OPTIMIZE's rewrites too)
    files_removed: int = 0  # every remove
    new_files: pa.Table = field(default=None, repr=False)  # adds of paths this commit did not remove
    kind: str = NONE
    rows_added: int | None = 0  # rows written (None: a file without statistics)
    rows_deleted: int | None = 0  # rows removed (in place by deletion vectors or with their files)

    @property
    def data_change(self) -> bool:
        """Whether the commit changed rows (adds or removes with dataChange=true)."""
        return self.kind != NONE

    @property
    def appends_only(self) -> bool:
        """Only new rows: nothing removed, in place or otherwise."""
        return self.kind in (APPEND, NONE)

    @property
    def added_bytes(self) -> int:
        return int(pc.sum(self.new_files.column("size")).as_py() or 0) if self.new_files.num_rows else 0

    def added_rows(self) -> int | None:
        """Rows in the new files (``None`` if a file has no statistics)."""
        return self.rows_added

    def metadata_schema(self):
        """The schema this commit set (``None`` when it did not change metadata)."""
        return parse_schema(self.metadata.schema_string) if self.metadata is not None else None

    def summary(self) -> dict:
        """The JSON-able facts a consumer decides on (an Asset event, a sensor's XCom)."""
        return {
            "version": self.version,
            "timestamp": self.timestamp,
            "operation": self.operation,
            "kind": self.kind,
            "dataChange": self.data_change,
            "rowsAdded": self.rows_added,
            "rowsDeleted": self.rows_deleted,
            "filesAdded": self.files_added,
            "filesRemoved": self.files_removed,
            "newFiles": int(self.new_files.num_rows),
        }


def num_records(files: pa.Table) -> int | None:
    """Rows in these files from their statistics (``None`` if a file has none)."""
    if files.num_rows == 0:
        return 0
    counts = parse_file_stats(files, {}).num_records
    return None if counts.null_count else int(pc.sum(counts).as_py())


def live_rows(files: pa.Table) -> int | None:
    """Rows of these files that their deletion vectors leave visible (``None``: no statistics)."""
    records = num_records(files)
    if records is None:
        return None
    return records - _dv_rows(files)


def _dv_rows(files: pa.Table) -> int:
    if files.num_rows == 0:
        return 0
    cardinality = pc.struct_field(files.column("deletion_vector"), "cardinality")
    return int(pc.sum(pc.fill_null(cardinality, 0)).as_py() or 0)


def classify(
    added: pa.Table, removed: pa.Table, root: str, operation: str | None
) -> tuple[str, pa.Table, int | None, int | None]:
    """``(kind, new_files, rows_added, rows_deleted)`` of a commit's data-changing adds and removes.

    An add whose path the commit also removes re-adds that file (with another deletion vector):
    the rows its new deletion vector hides were deleted in place, and none of its rows are new."""
    if added.num_rows == 0 and removed.num_rows == 0:
        return NONE, added, 0, 0
    if added.num_rows and removed.num_rows:
        removed_keys = canonical_paths(removed.column("path"), root).combine_chunks()
        readded = pc.is_in(canonical_paths(added.column("path"), root), value_set=removed_keys)
        new_files, re_adds = added.filter(pc.invert(readded)), added.filter(readded)
    else:
        new_files, re_adds = added, added.slice(0, 0)
    new_rows = live_rows(new_files)
    if removed.num_rows == 0:
        return APPEND, new_files, new_rows, 0
    # Rows gone: the removed files' visible rows, minus those still visible in their re-adds.
    removed_rows, kept_rows = live_rows(removed), live_rows(re_adds)
    gone = None if removed_rows is None or kept_rows is None else removed_rows - kept_rows
    if new_files.num_rows == 0:
        return DELETE, new_files, 0, gone
    if (operation or "").upper() in _DELETE_OPERATIONS:
        # A copy-on-write DELETE rewrites the survivors of the files it touched: rows only go.
        return DELETE, new_files, 0, None if gone is None or new_rows is None else gone - new_rows
    return UPDATE, new_files, new_rows, gone


def versions_after(store: ObjectStore, version: int, *, until: int | None = None) -> list[int]:
    """Commit versions after ``version`` (up to ``until``), ascending; they must be contiguous."""
    listing = list_log(store, version + 1)
    versions = sorted(v for v in listing.commits if v > version and (until is None or v <= until))
    for expected, found in enumerate(versions, start=version + 1):
        if found != expected:
            raise MissingLogVersionError(
                f"commit {expected} of {store.root} is missing (found {found}); the log was cleaned up "
                "past this consumer's position",
                commit_key(expected),
            )
    return versions


def commit_changes(store: ObjectStore, version: int, metadata: Metadata) -> CommitChanges:
    """What commit ``version`` changed; ``metadata`` (the table's, at or before it) names the
    partition columns."""
    key = commit_key(version)
    actions = read_commit(store, key, version)
    physical = partition_physical_names(parse_schema(metadata.schema_string), metadata.partition_columns)
    table = actions.file_actions
    all_added = all_removed = 0
    if table is None or table.num_rows == 0:
        added = removed = _empty(physical)
    else:
        all_added = int(pc.sum(table.column("is_add").cast(pa.int64())).as_py() or 0)
        all_removed = table.num_rows - all_added
        table = normalize_partition_values(table, physical)
        changing = table.filter(pc.fill_null(table.column("data_change"), True))
        is_add = changing.column("is_add")
        added = _files(changing.filter(is_add))
        removed = _files(changing.filter(pc.invert(is_add)))
    operation = actions.commit_info.operation if actions.commit_info is not None else None
    kind, new_files, rows_added, rows_deleted = classify(added, removed, store.root, operation)
    if kind == NONE and actions.cdc:
        kind = UPDATE  # change data files without file actions: rows changed, counted by the feed
        rows_added = rows_deleted = None
    info = actions.commit_info.to_json() if actions.commit_info is not None else {}
    stamp = None
    if actions.commit_info is not None:
        stamp = actions.commit_info.in_commit_timestamp or actions.commit_info.timestamp
    if stamp is None:
        stamp = store.head(key).last_modified
    return CommitChanges(
        version=version,
        timestamp=int(stamp),
        operation=operation,
        commit_info=info,
        added=added,
        removed=removed,
        metadata=actions.metadata,
        protocol=actions.protocol,
        has_change_files=bool(actions.cdc),
        files_added=all_added,
        files_removed=all_removed,
        new_files=new_files,
        kind=kind,
        rows_added=rows_added,
        rows_deleted=rows_deleted,
    )


def changes_between(
    store: ObjectStore,
    after_version: int,
    *,
    until: int | None = None,
    metadata: Metadata | None = None,
    max_versions: int | None = None,
) -> Iterator[CommitChanges]:
    """The changes of every commit after ``after_version`` (up to ``until``), in order: the one
    answer to "what happened since I last looked". ``metadata`` is the table's at or before the
    first of them (read from the log when not given); a commit that changes it is read with the
    new one from then on."""
    versions = versions_after(store, after_version, until=until)
    if max_versions is not None:
        versions = versions[:max_versions]
    yield from changes_of(store, versions, metadata)


def changes_of(
    store: ObjectStore, versions: list[int], metadata: Metadata | None = None
) -> Iterator[CommitChanges]:
    """``changes_between`` for versions already listed (ascending, contiguous)."""
    if not versions:
        return
    if metadata is None:
        metadata = load_table_config(store, versions[0])[1]
    for version in versions:
        changes = commit_changes(store, version, metadata)
        if changes.metadata is not None:
            metadata = changes.metadata
        yield changes


def _files(table: pa.Table) -> pa.Table:
    return table.select(list(FILE_COLUMNS))


def _empty(physical: list[str]) -> pa.Table:
    return pa.table(
        {
            "path": pa.array([], pa.string()),
            "partition_values": pa.array([], pa.struct([(c, pa.string()) for c in physical])),
            "size": pa.array([], pa.int64()),
            "modification_time": pa.array([], pa.int64()),
            "stats": pa.array([], pa.string()),
            "deletion_vector": pa.array([], DV_TYPE),
        }
    )
