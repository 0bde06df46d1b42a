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
  - ``restore``: rows that were in the table before came back: a ``dataChange=true`` add of a
    file that an earlier commit removed (a RESTORE re-adds the target version's files; so may a
    hand-made or foreign commit), or a file re-added with a smaller deletion vector. A consumer
    that copied those rows when they were first added already has them: they are counted in
    ``rows_restored``, never in ``rows_added``, and are not in ``new_files``;
  - ``none``: no data change (OPTIMIZE and other ``dataChange=false`` rewrites, metadata,
    protocol, VACUUM, commitInfo only).

* all of it for a range: ``IncrementalScan`` (after a version, up to a version, at most N
  versions), which follows the protocol and metadata in effect at each commit and gives the
  rows an append added (``appended_rows``), its new files' URIs (``file_uris``) and a changing
  commit's change data feed rows (``change_rows``). ``changes_between`` and
  ``DeltaTable.changes_between`` are its plain iteration;
* which of those commits a consumer cares about: ``CommitFilter`` (data changes only, kinds,
  operations, a partition predicate) and ``find_new_commits``, the condition of the log-tail
  sensor and of the commit triggers; and where a consumer without a watermark starts
  (``start_after`` for ``start=`` ``"earliest"``, ``"latest"`` or a version).

The file tables come back in the live-file table's shape (``FILE_COLUMNS``), so
``Scan(files=...)`` reads them with their deletion vectors applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata, Protocol
from deltaplane.engine.commit_filter import (  # noqa: F401 - the kinds are part of this API
    APPEND,
    DELETE,
    EARLIEST,
    FILTER_ARGS,
    KINDS,
    LATEST,
    NONE,
    RESTORE,
    UPDATE,
    CommitFilter,
    check_start,
)
from deltaplane.engine.errors import InvalidArgumentError, MissingLogVersionError, TableNotFoundError
from deltaplane.engine.log.commits import DV_TYPE
from deltaplane.engine.log.files import commit_key
from deltaplane.engine.log.replay import canonical_paths, normalize_partition_values
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.schema import parse_schema, partition_physical_names
from deltaplane.engine.snapshot import load_table_config, read_commit
from deltaplane.engine.stats import parse_file_stats
from deltaplane.engine.storage import open_store, table_location
from deltaplane.engine.storage.base import ObjectStore

# The live-file columns a reader of added files needs.
FILE_COLUMNS = ("path", "partition_values", "size", "modification_time", "stats", "deletion_vector")


_DELETE_OPERATIONS = {"DELETE", "TRUNCATE"}
# Operations whose adds are, by what they are, files written by the commit itself (or, for a
# deletion-vector DML, files it removes in the same commit). Any other operation that adds files
# (RESTORE, CLONE, an unknown or missing name) may re-add files an earlier commit removed: its
# adds are checked against the table's tombstones before the commit. RESTORE always re-adds.
_FRESH_FILE_OPERATIONS = {
    "WRITE",
    "STREAMING UPDATE",
    "CREATE TABLE",
    "CREATE TABLE AS SELECT",
    "REPLACE TABLE",
    "REPLACE TABLE AS SELECT",
    "CREATE OR REPLACE TABLE",
    "CREATE OR REPLACE TABLE AS SELECT",
    "MERGE",
    "UPDATE",
    "DELETE",
    "TRUNCATE",
    "OPTIMIZE",
    "COPY INTO",
}
_RESTORE_OPERATIONS = {"RESTORE"}


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
    rows_restored: int | None = 0  # rows that were in the table before and came back (``restore``)
    # The protocol and metadata in effect at this version (set by this commit or before it);
    # ``metadata``/``protocol`` above are only what this commit itself set.
    table_protocol: Protocol | None = field(default=None, repr=False)
    table_metadata: Metadata | None = field(default=None, repr=False)

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
            "rowsRestored": self.rows_restored,
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
    added: pa.Table,
    removed: pa.Table,
    root: str,
    operation: str | None,
    removed_before: Callable[[], pa.Array] | None = None,
) -> Classified:
    """What a commit's data-changing adds and removes did to rows.

    An add whose path the commit also removes re-adds that file (with another deletion vector):
    the rows its new deletion vector hides were deleted in place, the rows it no longer hides
    came back, and none of its rows are new. An add of a file an earlier commit removed (every
    add of a RESTORE; for an operation outside ``_FRESH_FILE_OPERATIONS``, an add whose path is in
    ``removed_before()``, the canonical paths removed before this commit) brings back rows that
    were there before: not new either."""
    if added.num_rows == 0 and removed.num_rows == 0:
        return Classified(NONE, added, 0, 0, 0)
    added_keys = canonical_paths(added.column("path"), root)
    if removed.num_rows:
        removed_keys = canonical_paths(removed.column("path"), root).combine_chunks()
        in_place = pc.is_in(added_keys, value_set=removed_keys)
    else:
        in_place = pa.repeat(False, added.num_rows)
    returning = pa.repeat(False, added.num_rows)
    name = (operation or "").upper()
    if added.num_rows and name not in _FRESH_FILE_OPERATIONS:
        if name in _RESTORE_OPERATIONS:
            returning = pc.invert(in_place)
        elif removed_before is not None:
            earlier = removed_before()
            if len(earlier):
                returning = pc.and_(pc.invert(in_place), pc.is_in(added_keys, value_set=earlier))
    new_files = added.filter(pc.invert(pc.or_(in_place, returning)))
    re_adds, back_files = added.filter(in_place), added.filter(returning)
    new_rows = live_rows(new_files)
    # Rows the removed files showed, minus those their in-place re-adds still show: gone when
    # positive, back (a smaller deletion vector) when negative.
    removed_rows, kept_rows = live_rows(removed), live_rows(re_adds)
    net = None if removed_rows is None or kept_rows is None else removed_rows - kept_rows
    gone = None if net is None else max(net, 0)
    back = live_rows(back_files)
    if back is not None and net is not None and net < 0:
        back -= net
    if back_files.num_rows or (net is not None and net < 0):
        return Classified(RESTORE, new_files, new_rows, gone, back)
    if removed.num_rows == 0:
        return Classified(APPEND, new_files, new_rows, 0, 0)
    if new_files.num_rows == 0:
        return Classified(DELETE, new_files, 0, gone, 0)
    if name in _DELETE_OPERATIONS:
        # A copy-on-write DELETE rewrites the survivors of the files it touched: rows only go.
        survivors_gone = None if gone is None or new_rows is None else gone - new_rows
        return Classified(DELETE, new_files, 0, survivors_gone, 0)
    return Classified(UPDATE, new_files, new_rows, gone, 0)


class Classified(NamedTuple):
    """``classify``'s answer."""

    kind: str
    new_files: pa.Table  # the adds that are new files (not re-added, not returning)
    rows_added: int | None  # rows in new files (None: a file without statistics)
    rows_deleted: int | None  # rows that disappeared
    rows_restored: int | None  # rows that were there before and came back


def describe_change(change: CommitChanges) -> str:
    """What a commit that is not an append did to rows, in words (for errors that refuse it)."""
    parts = [f"{change.rows_deleted} row(s) removed"]
    if change.rows_added:
        parts.append(f"{change.rows_added} written")
    if change.kind == RESTORE:
        parts.append(f"{change.rows_restored} row(s) that were there before came back")
    return ", ".join(parts)


def removed_paths_before(store: ObjectStore, version: int) -> pa.Array:
    """The canonical paths of the files removed before ``version`` (the tombstones of the
    snapshot before it; empty for version 0)."""
    from deltaplane.engine.snapshot import load_snapshot

    if version <= 0:
        return pa.array([], pa.string())
    tombstones = load_snapshot(store, version - 1).tombstones
    if tombstones.num_rows == 0:
        return pa.array([], pa.string())
    return canonical_paths(tombstones.column("path"), store.root).combine_chunks()


def versions_after(store: ObjectStore, version: int, *, until: int | None = None) -> list[int]:
    """Commit versions after ``version`` (up to ``until``), ascending; they must be contiguous.

    A consumer that has seen version ``version >= 0`` knows the table existed: when nothing at
    all is left at or after it (no commit, no checkpoint: cleanup always keeps the newest
    commit), the table is gone, and that is a ``TableNotFoundError``, not "nothing new"."""
    listing = list_log(store, max(version, 0))
    versions = sorted(v for v in listing.commits if v > version and (until is None or v <= until))
    for expected, found in enumerate(versions, start=version + 1):
        if found != expected:
            raise MissingLogVersionError(
                f"commit {expected} of {store.root} is missing (found {found}); the log was cleaned up "
                "past this consumer's position",
                commit_key(expected),
            )
    if not versions and version >= 0 and listing.max_version is None:
        raise TableNotFoundError(
            f"no Delta table at {store.root} any more (this consumer had read version {version}): "
            f"{_why_gone(store)}"
        )
    return versions


def _why_gone(store: ObjectStore) -> str:
    from deltaplane.engine.log.segment import _why_no_commits

    return _why_no_commits(store)


def commit_changes(
    store: ObjectStore, version: int, metadata: Metadata, protocol: Protocol | None = None
) -> CommitChanges:
    """What commit ``version`` changed; ``metadata`` (the table's, at or before it) names the
    partition columns; ``protocol`` (the table's before it, when known) is passed on as the one
    in effect unless the commit sets its own."""
    key = commit_key(version)
    actions = read_commit(store, key, version)
    if actions.metadata is not None:
        metadata = actions.metadata  # a commit's files are written under the metadata it sets
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
    kind, new_files, rows_added, rows_deleted, rows_restored = classify(
        added, removed, store.root, operation, lambda: removed_paths_before(store, version)
    )
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
        rows_restored=rows_restored,
        table_protocol=actions.protocol or protocol,
        table_metadata=metadata,
    )


class IncrementalScan:
    """The commits of a table after ``after_version`` (up to ``until_version``, at most
    ``max_versions`` of them), read in order, each exactly once: the one incremental reader of
    the sensor, the triggers, the consume API and the Spark streaming source.

    * ``versions``: the versions in range, listed once (contiguity checked; a table gone from
      under a consumer that had seen a version is a ``TableNotFoundError``);
    * iterating gives each version's ``CommitChanges`` with ``table_protocol`` and
      ``table_metadata``, the protocol and metadata in effect at that commit (read once for the
      first, then followed through the commits that change them);
    * ``appended_rows(change)``: the rows an ``append`` added (its new files, deletion vectors
      applied; never the rows of files a deletion-vector DELETE re-added); ``file_uris(change)``:
      the new files' locations; ``change_rows(change)``: the change data feed of that commit.

    ``config`` (``(protocol, metadata)`` as of ``after_version``) and ``known`` (commits
    already read, by version; filled as the scan reads) let a long-lived consumer (a streaming
    query planning the same range twice) avoid reading anything twice."""

    def __init__(
        self,
        store: ObjectStore,
        after_version: int,
        *,
        until_version: int | None = None,
        max_versions: int | None = None,
        config: tuple[Protocol, Metadata] | None = None,
        known: dict[int, CommitChanges] | None = None,
    ):
        if isinstance(after_version, bool) or not isinstance(after_version, int) or after_version < -1:
            raise InvalidArgumentError(f"after_version must be a version or -1, got {after_version!r}")
        if max_versions is not None and (not isinstance(max_versions, int) or max_versions < 1):
            raise InvalidArgumentError(f"max_versions must be a positive number, got {max_versions!r}")
        self.store = store
        self.after_version = after_version
        self.until_version = until_version
        self.max_versions = max_versions
        self.config = config  # (protocol, metadata) in effect after the last commit read
        self.known = {} if known is None else known
        self._versions: list[int] | None = None

    @classmethod
    def of(
        cls, table_uri: str, after_version: int, *, storage_options: Mapping[str, str] | None = None, **kwargs
    ) -> IncrementalScan:
        return cls(open_store(table_uri, storage_options), after_version, **kwargs)

    @property
    def versions(self) -> list[int]:
        if self._versions is None:
            versions = versions_after(self.store, self.after_version, until=self.until_version)
            self._versions = versions[: self.max_versions] if self.max_versions is not None else versions
        return self._versions

    @property
    def last_version(self) -> int:
        """The newest version in range (``after_version`` when there is none): where a consumer
        that handled every commit of this scan stands."""
        return self.versions[-1] if self.versions else self.after_version

    def __iter__(self) -> Iterator[CommitChanges]:
        for version in self.versions:
            change = self.known.get(version)
            if change is None:
                if self.config is None:
                    self.config = load_table_config(self.store, version)
                protocol, metadata = self.config
                change = commit_changes(self.store, version, metadata, protocol)
                self.known[version] = change
            self.config = (change.table_protocol or self.config[0], change.table_metadata)
            yield change

    def _files(self, change: CommitChanges, files: pa.Table):
        from deltaplane.engine.scan import Scan
        from deltaplane.engine.snapshot import files_snapshot

        if change.table_protocol is None:  # read by someone who did not follow the protocol
            protocol, _ = load_table_config(self.store, change.version)
        else:
            protocol = change.table_protocol
        snapshot = files_snapshot(self.store, change.version, protocol, change.table_metadata, files)
        return Scan(snapshot, None, None)

    def appended_rows(self, change: CommitChanges, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows ``change`` (an ``append``, or a commit that changed no rows: none) added."""
        if change.kind not in (APPEND, NONE):
            raise InvalidArgumentError(
                f"version {change.version} of {self.store.root} ({change.operation}) is a {change.kind}, "
                "not an append: its rows are the change data feed's (change_rows)"
            )
        files = change.new_files if change.kind == APPEND else change.new_files.slice(0, 0)
        rows = self._files(change, files).to_table()
        return rows.select(list(columns)) if columns is not None else rows

    def file_uris(self, change: CommitChanges) -> list[str]:
        """Locations of the files ``change`` added (not the files it re-added with a new DV)."""
        return self._files(change, change.new_files).file_uris() if change.new_files.num_rows else []

    def change_rows(self, change: CommitChanges) -> pa.Table:
        """The change data feed rows of ``change`` (``_change_type``, ``_commit_version``,
        ``_commit_timestamp``); needs ``delta.enableChangeDataFeed`` on the table."""
        from deltaplane.engine.commands.changes import read_changes

        return read_changes(self.store, change.version, change.version, read_schema="end")


def changes_between(
    store: ObjectStore,
    after_version: int,
    *,
    until: int | None = None,
    metadata: Metadata | None = None,
    max_versions: int | None = None,
) -> Iterator[CommitChanges]:
    """The changes of every commit after ``after_version`` (up to ``until``), in order: the one
    answer to "what happened since I last looked" (``IncrementalScan``'s iteration).
    ``metadata`` is the table's at or before the first of them (read from the log when not
    given)."""
    config = None
    if metadata is not None:
        config = (None, metadata)
    scan = IncrementalScan(
        store, after_version, until_version=until, max_versions=max_versions, config=config
    )
    yield from scan


# --- which commits a consumer cares about ----------------------------------------------------

DEFAULT_MAX_VERSIONS = 1000


def matching(scan: IncrementalScan, commit_filter: CommitFilter) -> Iterator[tuple[CommitChanges, bool]]:
    """Every commit of ``scan`` with whether it matches ``commit_filter`` (non-matching ones too,
    so that a consumer can move past them once it is safe)."""
    from deltaplane.engine.expressions.bind import bind_predicate
    from deltaplane.engine.expressions.parser import parse_predicate
    from deltaplane.engine.scan import file_keep_mask

    wanted = {o.upper() for o in commit_filter.operations} if commit_filter.operations else None
    predicate = parse_predicate(commit_filter.partition_filter) if commit_filter.partition_filter else None
    bound = bound_for = schema = None
    for change in scan:
        matched = (
            (change.data_change or not commit_filter.data_change_only)
            and (commit_filter.kinds is None or change.kind in commit_filter.kinds)
            and (wanted is None or (change.operation or "").upper() in wanted)
        )
        if matched and predicate is not None:
            metadata = change.table_metadata
            if bound_for is not metadata:  # bound again only when a commit changes the schema
                schema = parse_schema(metadata.schema_string)
                bound, bound_for = bind_predicate(predicate, schema), metadata
            matched = any(
                pc.any(file_keep_mask(t, bound, schema, metadata, scan.store.root)).as_py()
                for t in (change.added, change.removed)
                if t.num_rows
            )
        yield change, matched


def commit_summary(scan: IncrementalScan, change: CommitChanges) -> dict[str, Any]:
    """``CommitChanges.summary()`` plus ``files``, the URIs of the commit's new files."""
    return {**change.summary(), "files": scan.file_uris(change)}


def start_after(store: ObjectStore, start: str | int) -> int:
    """The version a consumer with no watermark starts after, for ``start`` (``check_start``):
    ``-1`` for ``"earliest"``, the table's latest version for ``"latest"`` (``-1`` when it has no
    commit yet), ``N - 1`` for version ``N``."""
    start = check_start(start)
    if start == EARLIEST:
        return -1
    if start == LATEST:
        latest = list_log(store, 0).max_version
        return -1 if latest is None else latest
    return start - 1


def find_new_commits(
    table_uri: str,
    after_version: int,
    *,
    storage_options: Mapping[str, str] | None = None,
    max_versions: int = DEFAULT_MAX_VERSIONS,
    commit_filter: CommitFilter | None = None,
    **filters: Any,
) -> dict[str, Any]:
    """Commits after ``after_version`` (at most ``max_versions`` of them) matching the filter
    (``commit_filter``, or its arguments). Each commit is its ``commit_summary`` (``version``,
    ``operation``, ``kind``, ``rowsAdded``, ``rowsDeleted``, ``files``, ...).

    ``latest_version`` is the newest version examined (matching or not): the watermark a consumer
    moves to once it has handled ``commits``. Pure: it reads the log and changes nothing."""
    commit_filter = commit_filter or CommitFilter.of(filters, owner="find_new_commits")
    table_uri = table_location(table_uri)
    scan = IncrementalScan.of(
        table_uri, int(after_version), storage_options=storage_options, max_versions=max_versions
    )
    commits = [commit_summary(scan, c) for c, matched in matching(scan, commit_filter) if matched]
    return {
        "table": table_uri,
        "after_version": int(after_version),
        "latest_version": scan.last_version,
        "commits": commits,
    }


def recent_row_changes(
    store: ObjectStore, snapshot, *, since_ms: int, max_commits: int = 200
) -> list[CommitChanges]:
    """The commits of the last moments that changed rows in place (``delete`` and ``update``:
    DELETE, UPDATE, MERGE, replaceWhere), newest first: those at or after ``since_ms``, among the
    ``max_commits`` latest of ``snapshot``. Table maintenance plans around the partitions they
    removed files from (``maintenance_plan.yield_to_writers``): a DML working there now is
    likely to commit again soon."""
    out: list[CommitChanges] = []
    for version in range(snapshot.version, max(-1, snapshot.version - max_commits), -1):
        change = commit_changes(store, version, snapshot.metadata)
        if change.timestamp < since_ms:
            break
        if change.kind in (DELETE, UPDATE):
            out.append(change)
    return out


def partitions_of(change: CommitChanges) -> list[dict[str, str | None]]:
    """The partitions (physical names, serialized values) ``change`` removed files from."""
    removed = change.removed
    if removed.num_rows == 0 or removed.column("partition_values").type.num_fields == 0:
        return [{}] if removed.num_rows else []
    seen = {}
    for values in removed.column("partition_values").to_pylist():
        seen.setdefault(tuple(sorted(values.items())), dict(values))
    return list(seen.values())


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
