"""Table health kept current from the commits since the last look: O(new commits), not a re-read
of the whole snapshot each time.

``table_health`` (``health.py``) computes a table's health from a snapshot; doing that on every
commit of a streaming table (hundreds of thousands of files, a commit every few seconds) would
cost a snapshot load each time. A ``HealthTracker`` does it once (``from_snapshot``), then
``advance`` reads only the commits written since (one listing from its version, one GET per new
commit) and applies their adds and removes to running sums: per partition, files, bytes, small
files and their bytes, rows and rows hidden by deletion vectors; the file-size histogram; files
removed and not yet vacuumed (bytes, count, the oldest); commits since the last checkpoint; the
last OPTIMIZE and VACUUM. It keeps one small record per live file (its partition, size, rows and
deleted rows) so that a remove, which need not carry statistics, is subtracted exactly.

Each applied commit also leaves a ``CommitMetrics`` (the per-commit inputs Delta Spark records for
predictive optimization: files and bytes added and removed, rows written and removed, with their
file-size histogram), the last ``KEPT_COMMITS`` of them kept for a policy to look at.

``health()`` returns the same ``TableHealth`` as ``table_health`` would for that version (the
tests hold the two equal on random commit sequences). What makes the running sums unsafe starts
over from a snapshot instead: the commits it has not seen were cleaned from the log, or a
``metaData`` action changed the partition columns (or their physical names).
``to_json``/``from_json`` carry the state between processes (a triggerer's runs).
"""

from __future__ import annotations

import bisect
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata
from deltaplane.engine.clustering import DOMAIN as CLUSTERING_DOMAIN
from deltaplane.engine.health import (
    DEFAULT_SMALL_FILE_SIZE,
    HISTOGRAM_BOUNDS,
    SIZE_TIERS,
    MaintenanceEvent,
    PartitionHealth,
    TableHealth,
    oldest_commit,
    size_tier,
    table_health,
)
from deltaplane.engine.log.commits import pv_string
from deltaplane.engine.log.files import commit_key
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.partitions import partition_directory
from deltaplane.engine.schema import parse_schema
from deltaplane.engine.snapshot import Snapshot, load_snapshot, partition_fields, read_commit
from deltaplane.engine.stats import parse_file_stats
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_properties import TableProperties

KEPT_COMMITS = 1000
_BOUNDS = HISTOGRAM_BOUNDS[1:]


def _bucket(size: int) -> int:
    """The histogram bucket of one file (``bisect``: a NumPy call per file cost 5x as much)."""
    return bisect.bisect_right(_BOUNDS, size)


@dataclass
class _Sums:
    """Running sums of one partition."""

    files: int = 0
    bytes: int = 0
    small: int = 0
    small_bytes: int = 0
    records: int = 0
    records_missing: int = 0  # files without a row count in their statistics
    deleted: int = 0
    dv_files: int = 0
    tier_files: list[int] = field(default_factory=lambda: [0] * SIZE_TIERS)
    tier_bytes: list[int] = field(default_factory=lambda: [0] * SIZE_TIERS)

    def add(
        self, size: int, records: int | None, deleted: int, small: bool, tier: int | None, sign: int
    ) -> None:
        self.files += sign
        self.bytes += sign * size
        if small:
            self.small += sign
            self.small_bytes += sign * size
        elif tier is not None:
            self.tier_files[tier] += sign
            self.tier_bytes[tier] += sign * size
        if records is None:
            self.records_missing += sign
        else:
            self.records += sign * records
        self.deleted += sign * deleted
        if deleted:
            self.dv_files += sign

    def counts(self) -> dict[str, Any]:
        """The counts a ``PartitionHealth`` and a ``TableHealth`` both report, from these sums."""
        return {
            "num_files": self.files,
            "size_bytes": self.bytes,
            "num_small_files": self.small,
            "num_rows": None if self.records_missing else self.records - self.deleted,
            "num_deleted_rows": self.deleted,
        }


@dataclass(frozen=True)
class CommitMetrics:
    """What one commit did to the table's files (every add and remove, data change or not)."""

    version: int
    timestamp: int
    operation: str | None
    files_added: int
    files_removed: int
    bytes_added: int
    bytes_removed: int
    net_rows: int | None  # live rows after minus before, from statistics (None: a file without)
    rows_inserted: int | None  # the commit's own operation metrics, as its writer recorded them
    rows_updated: int | None
    rows_deleted: int | None
    added_size_histogram: tuple[int, ...]  # files added per HISTOGRAM_BOUNDS bucket


@dataclass
class HealthTracker:
    """Health of one table, advanced commit by commit (see the module docstring)."""

    uri: str
    version: int
    timestamp: int
    small_file_size: int
    partition_names: tuple[str, ...]  # physical partition column names
    files: dict[str, tuple[str, int, int | None, int, bool]] = field(
        repr=False
    )  # key -> (partition, size, rows, deleted, clustered)
    partitions: dict[str, _Sums] = field(repr=False)
    partition_values: dict[str, dict[str, str | None]] = field(repr=False)
    histogram_files: list[int] = field(repr=False)
    histogram_bytes: list[int] = field(repr=False)
    tombstones: dict[str, tuple[int, int]] = field(repr=False)  # key -> (size, deletion timestamp)
    last_checkpoint_version: int | None = None
    last_optimize: MaintenanceEvent | None = None
    last_vacuum: MaintenanceEvent | None = None
    commits: deque = field(default_factory=lambda: deque(maxlen=KEPT_COMMITS), repr=False)
    vacuum_cutoff: int | None = None  # a VACUUM START seen, its END not yet: what it deletes
    commits_read: int = 0  # commits applied since the last start from a snapshot
    restarts: int = 0  # starts from a snapshot (the first one included)
    clustered: bool = False  # liquid clustering columns are set
    oldest_log_version: int | None = None  # the log's oldest commit (checked again when cleanup looks due)
    oldest_log_timestamp: int | None = None
    log_retention_ms: int = 30 * 86_400_000
    unclustered_files: int = 0  # live files no OPTIMIZE clustered (no clusteringProvider)
    unclustered_bytes: int = 0

    # --- starting ---------------------------------------------------------------------------

    @classmethod
    def from_snapshot(
        cls, snapshot: Snapshot, *, small_file_size: int = DEFAULT_SMALL_FILE_SIZE, restarts: int = 0
    ) -> HealthTracker:
        """One full pass over ``snapshot`` (the only one while the log allows)."""
        base = table_health(snapshot, small_file_size=small_file_size)
        tracker = cls(
            uri=snapshot.store.root,
            version=snapshot.version,
            timestamp=snapshot.timestamp,
            small_file_size=small_file_size,
            partition_names=tuple(f.physical_name for f in snapshot.partition_fields),
            files={},
            partitions={},
            partition_values={},
            histogram_files=[0] * len(HISTOGRAM_BOUNDS),
            histogram_bytes=[0] * len(HISTOGRAM_BOUNDS),
            tombstones={},
            last_checkpoint_version=base.last_checkpoint_version,
            last_optimize=base.last_optimize,
            last_vacuum=base.last_vacuum,
            restarts=restarts + 1,
            clustered=base.clustered,
            oldest_log_version=base.oldest_log_version,
            oldest_log_timestamp=base.oldest_log_timestamp,
            log_retention_ms=base.log_retention_ms,
        )
        tracker._add(tracker._add_records(snapshot.files))
        tracker._tombstone(_remove_records(tracker._keys(snapshot.tombstones), snapshot.tombstones))
        return tracker

    # --- advancing ----------------------------------------------------------------------------

    def advance(self, store: ObjectStore, *, until: int | None = None) -> list[int]:
        """Apply the commits after ``version`` (up to ``until``); returns the versions applied.
        Starts over from the latest snapshot when the log no longer holds them all."""
        listing = list_log(store, max(self.version, 0))  # (a checkpoint of this very version too)
        checkpoints = [v for v in listing.checkpoints if until is None or v <= until]
        if checkpoints:
            self.last_checkpoint_version = max([*checkpoints, self.last_checkpoint_version or -1])
        versions = sorted(v for v in listing.commits if v > self.version and (until is None or v <= until))
        if versions and versions != list(range(self.version + 1, versions[-1] + 1)):
            return self._restart(store, until)
        if self._cleanup_looks_due():  # the cached oldest commit may be gone: one LIST to know
            oldest = oldest_commit(store)
            self.oldest_log_version, self.oldest_log_timestamp = oldest if oldest else (None, None)
        applied = []
        for v in versions:
            actions = read_commit(store, commit_key(v), v)
            if actions.metadata is not None and self._repartitions(actions.metadata):
                return [*applied, *self._restart(store, until)]
            self._apply_commit(v, actions, listing.commits[v].last_modified)
            applied.append(v)
        return applied

    def _cleanup_looks_due(self, now_ms: int | None = None) -> bool:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        stamp = self.oldest_log_timestamp
        return stamp is not None and stamp < now - self.log_retention_ms - 86_400_000

    def _restart(self, store: ObjectStore, until: int | None) -> list[int]:
        old = self.version
        fresh = HealthTracker.from_snapshot(
            load_snapshot(store, until), small_file_size=self.small_file_size, restarts=self.restarts
        )
        kept = self.commits
        self.__dict__.update(fresh.__dict__)
        self.commits = kept
        return list(range(old + 1, self.version + 1))

    def _repartitions(self, metadata: Metadata) -> bool:
        schema = parse_schema(metadata.schema_string)
        names = tuple(f.physical_name for f in partition_fields(schema, metadata, self.uri))
        return names != self.partition_names

    def _apply_commit(self, version: int, actions, file_time: int) -> None:
        info = actions.commit_info
        operation = info.operation if info is not None else None
        # the commit's time as a snapshot has it: the in-commit timestamp, else the file's
        ict = info.in_commit_timestamp if info is not None else None
        stamp = int(ict) if ict is not None else int(file_time)
        # A small commit's actions are still parsed JSON: read there, no Arrow table is built
        # (most of a streaming table's commits: a few adds). Anything unusual takes the Arrow path.
        rows = actions.pending_rows
        records = self._row_records(rows) if rows else None
        adds, removes = records if records is not None else self._table_records(actions.file_actions)
        # removes first: a file re-added with a new deletion vector replaces its old entry
        removed = self._subtract(key for key, _, _ in removes)
        self._tombstone(removes)
        added = self._add(adds)
        for record in adds:
            self.tombstones.pop(record[0], None)
        metrics = _commit_metrics(version, int(stamp), info, added, removed)
        if actions.metadata is not None:
            self.log_retention_ms = TableProperties(actions.metadata.configuration).log_retention_ms
        for domain in actions.domains or ():
            if domain.domain == CLUSTERING_DOMAIN:  # ALTER TABLE CLUSTER BY (NONE)
                self.clustered = not domain.removed and _clustering_columns_set(domain.configuration)
        if operation == "OPTIMIZE":
            self.last_optimize = MaintenanceEvent(version, int(stamp), operation)
        elif operation is not None and operation.startswith("VACUUM"):
            self.last_vacuum = MaintenanceEvent(version, int(stamp), operation)
            params = info.values.get("operationParameters")
            self._vacuumed(operation, params if isinstance(params, dict) else {}, int(stamp))
        self.commits.append(metrics)
        self.version, self.timestamp = version, int(stamp)
        self.commits_read += 1

    def _vacuumed(self, operation: str, params: dict, stamp: int) -> None:
        """A VACUUM that completed deleted the removed files older than its retention: they no
        longer hold storage (its START says the retention, its END whether it completed)."""
        if operation == "VACUUM START":
            retention = params.get("specifiedRetentionMillis", params.get("defaultRetentionMillis"))
            try:
                self.vacuum_cutoff = stamp - int(retention)
            except (TypeError, ValueError):
                self.vacuum_cutoff = None  # a foreign shape: keep counting them
        elif operation == "VACUUM END" and self.vacuum_cutoff is not None:
            if str(params.get("status", "COMPLETED")).upper() == "COMPLETED":
                cutoff = self.vacuum_cutoff
                self.tombstones = {k: v for k, v in self.tombstones.items() if v[1] >= cutoff}
            self.vacuum_cutoff = None

    # --- the running sums ---------------------------------------------------------------------

    def _keys(self, files: pa.Table) -> list[str]:
        paths = files.column("path").to_pylist()
        dv = files.column("deletion_vector")
        if dv.null_count == len(dv):
            return paths
        ids = []
        for d in dv.to_pylist():
            if not d:
                ids.append("")
                continue
            base = f"{d['storageType']}{d['pathOrInlineDv']}"
            ids.append(base if d.get("offset") is None else f"{base}@{d['offset']}")
        return [f"{p}\x00{i}" if i else p for p, i in zip(paths, ids, strict=True)]

    def _partition_keys(self, files: pa.Table) -> list[str]:
        if not self.partition_names:
            return [""] * files.num_rows
        values = files.column("partition_values")
        columns = [pc.struct_field(values, name).to_pylist() for name in self.partition_names]
        out = []
        for row in zip(*columns, strict=True):
            key = partition_directory(list(self.partition_names), list(row))
            if key not in self.partition_values:
                self.partition_values[key] = dict(zip(self.partition_names, row, strict=True))
            out.append(key)
        return out

    def _table_records(self, table: pa.Table | None) -> tuple[list[_AddRecord], list[_RemoveRecord]]:
        if table is None or table.num_rows == 0:
            return [], []
        is_add = table.column("is_add")
        removes = table.filter(pc.invert(is_add))
        return self._add_records(table.filter(is_add)), _remove_records(self._keys(removes), removes)

    def _row_records(
        self, rows: list[tuple[str, dict]]
    ) -> tuple[list[_AddRecord], list[_RemoveRecord]] | None:
        """``_table_records`` of file actions still in their parsed JSON form, or None when one
        holds something the Arrow path must judge (a field of an unexpected type, statistics
        that do not parse, a partition value missing): that path, not this one, says why."""
        adds, removes = [], []
        try:
            for kind, body in rows:
                key, size = _row_key(body), _int(body.get("size"))
                if kind == "remove":
                    removes.append((key, size, _int(body.get("deletionTimestamp"))))
                    continue
                dv = body.get("deletionVector")
                deleted = 0 if dv is None else _int(dv.get("cardinality"))
                clustered = body.get("clusteringProvider") is not None
                records = _num_records(body.get("stats"))
                adds.append(
                    (key, self._row_partition(body.get("partitionValues")), size, records, deleted, clustered)
                )
        except _NotPlain:
            return None
        return adds, removes

    def _row_partition(self, values) -> str:
        names = self.partition_names
        if not names:
            return ""
        if not isinstance(values, dict) or any(name not in values for name in names):
            raise _NotPlain
        row = [pv_string(values[name]) for name in names]
        part = partition_directory(list(names), row)
        if part not in self.partition_values:
            self.partition_values[part] = dict(zip(names, row, strict=True))
        return part

    def _add_records(self, files: pa.Table) -> list[_AddRecord]:
        """(key, partition, size, rows, deleted rows, clustered) of each add in ``files``."""
        if files.num_rows == 0:
            return []
        clustered = (
            pc.is_valid(files.column("clustering_provider")).to_pylist()
            if "clustering_provider" in files.column_names
            else [False] * files.num_rows
        )
        dv = files.column("deletion_vector")
        deleted = (
            pc.fill_null(pc.struct_field(dv, "cardinality"), 0).to_pylist()
            if dv.null_count < len(dv)
            else [0] * files.num_rows
        )
        return [
            (key, part, int(size or 0), None if rows is None else int(rows), int(gone or 0), bool(done))
            for key, part, size, rows, gone, done in zip(
                self._keys(files),
                self._partition_keys(files),
                files.column("size").to_pylist(),
                parse_file_stats(files, {}).num_records.to_pylist(),
                deleted,
                clustered,
                strict=True,
            )
        ]

    def _add(self, records: list[_AddRecord]) -> list[tuple[int, int | None, int]]:
        """Count each added live file; returns (size, rows, deleted) per file."""
        out = []
        for key, *entry in records:
            if key in self.files:  # the same logical file added twice: the newer one counts
                self._count(key, self.files.pop(key), -1)
            entry = tuple(entry)
            self.files[key] = entry
            self._count(key, entry, 1)
            out.append(entry[1:4])
        return out

    def _tombstone(self, records: list[_RemoveRecord]) -> None:
        for key, size, deleted_at in records:
            self.tombstones[key] = (size, deleted_at)

    def _subtract(self, keys) -> list[tuple[int, int | None, int]]:
        """Uncount each removed live file; returns (size, rows, deleted) per file it knew."""
        out = []
        for key in keys:
            entry = self.files.pop(key, None)
            if entry is not None:
                self._count(key, entry, -1)
                out.append(entry[1:4])
        return out

    def _count(self, key: str, entry: tuple[str, int, int | None, int, bool], sign: int) -> None:
        part, size, rows, deleted, clustered = entry
        if not clustered:
            self.unclustered_files += sign
            self.unclustered_bytes += sign * size
        sums = self.partitions.get(part)
        if sums is None:
            sums = self.partitions[part] = _Sums()
        small = size < self.small_file_size
        sums.add(size, rows, deleted, small, size_tier(size, self.small_file_size), sign)
        if sums.files == 0:
            del self.partitions[part]
        b = _bucket(size)
        self.histogram_files[b] += sign
        self.histogram_bytes[b] += sign * size

    # --- reading ------------------------------------------------------------------------------

    def health(self) -> TableHealth:
        """``TableHealth`` of the version reached (history and checkpoint as last seen)."""
        partitions = []
        for key in sorted(self.partitions):
            s = self.partitions[key]
            partitions.append(
                PartitionHealth(
                    partition=key,
                    values=dict(self.partition_values.get(key, {})),
                    small_files_bytes=s.small_bytes,
                    tier_files=tuple(s.tier_files),
                    tier_bytes=tuple(s.tier_bytes),
                    **s.counts(),
                )
            )
        total = _Sums()
        for s in self.partitions.values():
            for name, value in vars(total).items():
                if isinstance(value, int):
                    setattr(total, name, value + getattr(s, name))
        checkpoint = self.last_checkpoint_version
        return TableHealth(
            uri=self.uri,
            version=self.version,
            timestamp=self.timestamp,
            num_files_with_deletion_vectors=total.dv_files,
            small_file_size=self.small_file_size,
            num_partitions=len(self.partitions),
            file_size_histogram=[
                {"min_bytes": lower, "num_files": n, "bytes": b}
                for lower, n, b in zip(
                    HISTOGRAM_BOUNDS, self.histogram_files, self.histogram_bytes, strict=True
                )
            ],
            last_checkpoint_version=checkpoint,
            versions_since_checkpoint=self.version - (checkpoint if checkpoint is not None else -1),
            last_optimize=self.last_optimize,
            last_vacuum=self.last_vacuum,
            partitions=tuple(partitions),
            clustered=self.clustered,
            num_unclustered_files=self.unclustered_files,
            unclustered_bytes=self.unclustered_bytes,
            oldest_log_version=self.oldest_log_version,
            oldest_log_timestamp=self.oldest_log_timestamp,
            log_retention_ms=self.log_retention_ms,
            **total.counts(),
        )

    def removed_files(
        self, now_ms: int | None = None, retention_ms: int | None = None
    ) -> dict[str, int | None]:
        """Files removed from the table whose storage no VACUUM has freed yet (the log's
        tombstones, less those a completed VACUUM was old enough to delete): count, bytes, the
        oldest removal's age in ms at ``now_ms`` (default: the version reached), and with
        ``retention_ms`` those a VACUUM would delete now (``expired_files``, ``expired_bytes``)."""
        now = int(now_ms) if now_ms is not None else self.timestamp
        out: dict[str, int | None] = {
            "num_files": len(self.tombstones),
            "bytes": sum(size for size, _ in self.tombstones.values()),
            "oldest_age_ms": max(0, now - min(stamp for _, stamp in self.tombstones.values()))
            if self.tombstones
            else None,
        }
        if retention_ms is not None:
            expired = [size for size, stamp in self.tombstones.values() if stamp < now - retention_ms]
            out["expired_files"] = len(expired)
            out["expired_bytes"] = sum(expired)
        return out

    # --- carrying the state -------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "uri": self.uri,
                "version": self.version,
                "timestamp": self.timestamp,
                "small_file_size": self.small_file_size,
                "partition_names": list(self.partition_names),
                "files": self.files,
                "partition_values": self.partition_values,
                "tombstones": self.tombstones,
                "last_checkpoint_version": self.last_checkpoint_version,
                "last_optimize": _event_json(self.last_optimize),
                "last_vacuum": _event_json(self.last_vacuum),
                "vacuum_cutoff": self.vacuum_cutoff,
                "commits": [
                    vars(c) | {"added_size_histogram": list(c.added_size_histogram)} for c in self.commits
                ],
                "restarts": self.restarts,
                "clustered": self.clustered,
                "oldest_log": [self.oldest_log_version, self.oldest_log_timestamp],
                "log_retention_ms": self.log_retention_ms,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> HealthTracker:
        data = json.loads(text)
        tracker = cls(
            uri=data["uri"],
            version=int(data["version"]),
            timestamp=int(data["timestamp"]),
            small_file_size=int(data["small_file_size"]),
            partition_names=tuple(data["partition_names"]),
            files={},
            partitions={},
            partition_values={k: dict(v) for k, v in data["partition_values"].items()},
            histogram_files=[0] * len(HISTOGRAM_BOUNDS),
            histogram_bytes=[0] * len(HISTOGRAM_BOUNDS),
            tombstones={k: (int(v[0]), int(v[1])) for k, v in data["tombstones"].items()},
            last_checkpoint_version=data["last_checkpoint_version"],
            last_optimize=_event(data["last_optimize"]),
            last_vacuum=_event(data["last_vacuum"]),
            vacuum_cutoff=data.get("vacuum_cutoff"),
            restarts=int(data["restarts"]),
            clustered=bool(data.get("clustered", False)),
            oldest_log_version=(data.get("oldest_log") or [None, None])[0],
            oldest_log_timestamp=(data.get("oldest_log") or [None, None])[1],
            log_retention_ms=int(data.get("log_retention_ms", 30 * 86_400_000)),
        )
        for key, (part, size, rows, deleted, *done) in data["files"].items():
            entry = (
                part,
                int(size),
                None if rows is None else int(rows),
                int(deleted),
                bool(done and done[0]),
            )
            tracker.files[key] = entry
            tracker._count(key, entry, 1)
        for c in data["commits"]:
            tracker.commits.append(
                CommitMetrics(**{**c, "added_size_histogram": tuple(c["added_size_histogram"])})
            )
        return tracker


def _clustering_columns_set(configuration: str) -> bool:
    try:
        columns = json.loads(configuration).get("clusteringColumns")
    except (ValueError, AttributeError):
        return False
    return bool(columns)


def _event_json(event: MaintenanceEvent | None) -> dict | None:
    return (
        None
        if event is None
        else {"version": event.version, "timestamp": event.timestamp, "operation": event.operation}
    )


def _event(data: dict | None) -> MaintenanceEvent | None:
    return (
        None
        if data is None
        else MaintenanceEvent(int(data["version"]), int(data["timestamp"]), data["operation"])
    )


# operationMetrics keys, per kind of row change, in the order writers record them
_INSERTED = ("numTargetRowsInserted", "numOutputRows")
_UPDATED = ("numTargetRowsUpdated", "numUpdatedRows")
_DELETED = ("numTargetRowsDeleted", "numDeletedRows")


def _metric(metrics: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = metrics.get(key)
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError, OverflowError):
                return None  # a foreign writer's shape: unknown, not a failure
    return None


_AddRecord = tuple[str, str, int, int | None, int, bool]  # key, partition, size, rows, deleted, clustered
_RemoveRecord = tuple[str, int, int]  # key, size, deletion timestamp


def _remove_records(keys: list[str], removes: pa.Table) -> list[_RemoveRecord]:
    sizes = removes.column("size").to_pylist()
    stamps = removes.column("deletion_timestamp").to_pylist()
    return [(k, int(size or 0), int(stamp or 0)) for k, size, stamp in zip(keys, sizes, stamps, strict=True)]


class _NotPlain(Exception):
    """A parsed file action the Arrow path must read (and judge) instead."""


def _int(value) -> int:
    """A JSON integer field (absent: 0), as the Arrow path reads it (a 64-bit integer)."""
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
        raise _NotPlain
    return value


def _row_key(body: dict) -> str:
    """``HealthTracker._keys`` of one parsed action: its path, and its deletion vector's id."""
    dv = body.get("deletionVector")
    if dv is None:
        return body["path"]
    if not isinstance(dv, dict):
        raise _NotPlain
    storage, where, offset = dv.get("storageType"), dv.get("pathOrInlineDv"), dv.get("offset")
    if not (isinstance(storage, str) and isinstance(where, str)):
        raise _NotPlain
    return f"{body['path']}\x00{storage}{where}" + ("" if offset is None else f"@{_int(offset)}")


def _num_records(stats) -> int | None:
    """``numRecords`` of a statistics string (None: none recorded)."""
    if stats is None:
        return None
    try:
        parsed = json.loads(stats) if isinstance(stats, str) else None
    except ValueError:
        raise _NotPlain from None
    if not isinstance(parsed, dict):
        raise _NotPlain
    records = parsed.get("numRecords")
    return None if records is None else _int(records)


def _commit_metrics(version: int, stamp: int, info, added: list, removed: list) -> CommitMetrics:
    operation = info.operation if info is not None else None
    metrics = {}
    if info is not None and isinstance(info.values.get("operationMetrics"), dict):
        metrics = info.values["operationMetrics"]
    histogram = [0] * len(HISTOGRAM_BOUNDS)
    for size, _, _ in added:
        histogram[_bucket(size)] += 1
    rows = [*((r, d, 1) for _, r, d in added), *((r, d, -1) for _, r, d in removed)]
    net = None if any(r is None for r, _, _ in rows) else sum(sign * (r - d) for r, d, sign in rows)
    updated = _metric(metrics, _UPDATED)
    inserted = _metric(metrics, _INSERTED)
    if operation in ("UPDATE",) and updated is not None:
        inserted = 0  # an UPDATE's output rows are the updated ones
    return CommitMetrics(
        version=version,
        timestamp=stamp,
        operation=operation,
        files_added=len(added),
        files_removed=len(removed),
        bytes_added=sum(size for size, _, _ in added),
        bytes_removed=sum(size for size, _, _ in removed),
        net_rows=net,
        rows_inserted=inserted,
        rows_updated=updated,
        rows_deleted=_metric(metrics, _DELETED),
        added_size_histogram=tuple(histogram),
    )


MAINTENANCE_OPERATIONS = ("OPTIMIZE", "REORG", "VACUUM END")  # what the health-over-time marks


def health_history(
    store: ObjectStore,
    *,
    commits: int = 100,
    until: int | None = None,
    small_file_size: int = DEFAULT_SMALL_FILE_SIZE,
) -> list[dict]:
    """The table's health after each of its last ``commits`` commits (oldest first): version,
    time, operation, files, small files, bytes, the share of rows hidden by deletion vectors and
    the versions since the checkpoint then, and ``maintenance`` for OPTIMIZE, REORG and a
    completed VACUUM. One full pass at the first version, then one GET per commit (the tracker's
    own arithmetic), so an ops page can draw it without a store of its own. When the log no
    longer reaches that far back it starts at the oldest version it can still load."""
    latest = load_snapshot(store, until)
    first = max(0, latest.version - commits)
    try:
        start = load_snapshot(store, first) if first < latest.version else latest
    except Exception:  # cleaned up: the oldest version left with a checkpoint
        start = latest
        listing = list_log(store, 0)
        for v in sorted(listing.checkpoints):
            if v >= first:
                start = load_snapshot(store, v)
                break
    tracker = HealthTracker.from_snapshot(start, small_file_size=small_file_size)
    listing = list_log(store, start.version)
    checkpoints = sorted(listing.checkpoints)

    def point(operation: str | None) -> dict:
        h = tracker.health()
        done = [c for c in checkpoints if c <= tracker.version]
        maintenance = operation is not None and any(operation.startswith(op) for op in MAINTENANCE_OPERATIONS)
        return {
            "version": tracker.version,
            "timestamp": tracker.timestamp,
            "operation": operation,
            "maintenance": maintenance,
            "num_files": h.num_files,
            "num_small_files": h.num_small_files,
            "size_bytes": h.size_bytes,
            "deleted_rows_ratio": h.deleted_rows_ratio,
            "versions_since_checkpoint": tracker.version - (done[-1] if done else -1),
        }

    out = [point(None)]
    for v in sorted(k for k in listing.commits if start.version < k <= latest.version):
        actions = read_commit(store, commit_key(v), v)
        if actions.metadata is not None and tracker._repartitions(actions.metadata):
            tracker = HealthTracker.from_snapshot(load_snapshot(store, v), small_file_size=small_file_size)
        else:
            tracker._apply_commit(v, actions, listing.commits[v].last_modified)
        out.append(point(actions.commit_info.operation if actions.commit_info is not None else None))
    return out


__all__ = ["KEPT_COMMITS", "CommitMetrics", "HealthTracker", "health_history"]
