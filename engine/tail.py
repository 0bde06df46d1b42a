"""Tailing the log: what each new commit did to the data, for streams, sensors and triggers.

A consumer that follows a table (a Spark streaming source, an Airflow log-tail sensor, an
event trigger) asks two things: which versions exist after the one it has seen
(``versions_after``), and what one commit changed (``commit_changes``): the files it added and
removed *as a data change* (an OPTIMIZE's rewrites carry ``dataChange=false`` and are not
changes), whether it changed the schema or protocol, and its commitInfo. The added files come
back in the live-file table's shape, so ``Scan(files=...)`` reads them (deletion vectors
included).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from engine.actions import Metadata, Protocol
from engine.errors import MissingLogVersionError
from engine.log.commits import DV_TYPE
from engine.log.files import commit_key
from engine.log.replay import normalize_partition_values
from engine.log.segment import list_log
from engine.schema import parse_schema, partition_physical_names
from engine.snapshot import read_commit
from engine.storage.base import ObjectStore

# The live-file columns a reader of added files needs.
FILE_COLUMNS = ("path", "partition_values", "size", "modification_time", "stats", "deletion_vector")


@dataclass(frozen=True)
class CommitChanges:
    """One commit, as a consumer of data changes sees it."""

    version: int
    timestamp: int  # ms: the in-commit timestamp, else commitInfo's, else the file's
    operation: str | None
    commit_info: dict = field(repr=False)
    added: pa.Table = field(repr=False)  # dataChange=true adds (FILE_COLUMNS)
    removed: pa.Table = field(repr=False)  # dataChange=true removes (FILE_COLUMNS)
    metadata: Metadata | None = field(default=None, repr=False)
    protocol: Protocol | None = field(default=None, repr=False)
    has_change_files: bool = False  # cdc files (an UPDATE/DELETE/MERGE with the change feed)
    files_added: int = 0  # every add, data change or not (an OPTIMIZE's rewrites too)
    files_removed: int = 0  # every remove

    @property
    def data_change(self) -> bool:
        """Whether the commit changed rows (adds or removes with dataChange=true)."""
        return self.added.num_rows > 0 or self.removed.num_rows > 0 or self.has_change_files

    @property
    def appends_only(self) -> bool:
        """Only new rows: no data-changing remove (a DELETE, UPDATE, MERGE or overwrite has one)."""
        return self.removed.num_rows == 0

    @property
    def added_bytes(self) -> int:
        return int(pc.sum(self.added.column("size")).as_py() or 0) if self.added.num_rows else 0

    def added_rows(self) -> int | None:
        """Rows in the added files from their statistics (``None`` if a file has none)."""
        return num_records(self.added)

    def metadata_schema(self):
        """The schema this commit set (``None`` when it did not change metadata)."""
        return parse_schema(self.metadata.schema_string) if self.metadata is not None else None


def num_records(files: pa.Table) -> int | None:
    """Rows in these files from their statistics (``None`` if a file has none)."""
    total = 0
    for stats in files.column("stats").to_pylist():
        if not stats or "numRecords" not in (parsed := json.loads(stats)):
            return None
        total += int(parsed["numRecords"])
    return total


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
    info = actions.commit_info.to_json() if actions.commit_info is not None else {}
    stamp = None
    if actions.commit_info is not None:
        stamp = actions.commit_info.in_commit_timestamp or actions.commit_info.timestamp
    if stamp is None:
        stamp = store.head(key).last_modified
    return CommitChanges(
        version=version,
        timestamp=int(stamp),
        operation=actions.commit_info.operation if actions.commit_info is not None else None,
        commit_info=info,
        added=added,
        removed=removed,
        metadata=actions.metadata,
        protocol=actions.protocol,
        has_change_files=bool(actions.cdc),
        files_added=all_added,
        files_removed=all_removed,
    )


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
