"""Table health: the numbers an operator (and the auto-optimize policy) decides maintenance on.

A table degrades in a few measurable ways: many small files (streaming appends), rows hidden by
deletion vectors that every read still decodes, a long tail of commits since the last
checkpoint (slow snapshot loads), and maintenance that stopped running. ``table_health`` computes
all of it from one snapshot, in Arrow over the live-file table (no per-file Python), plus a look
at recent history for the last OPTIMIZE and VACUUM.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.clustering import clustering_column_names
from deltaplane.engine.commands.history import load_history
from deltaplane.engine.log.files import LOG_DIR, LogFileKind, parse_log_file_name
from deltaplane.engine.log.segment import build_log_segment
from deltaplane.engine.partitions import partition_directory
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.stats import parse_file_stats

MiB = 1 << 20
DEFAULT_SMALL_FILE_SIZE = 128 * MiB  # Delta Spark's autoCompact maxFileSize: smaller is "small"
# File-size histogram bucket lower bounds: 0, then powers of two from 64 KiB to 1 GiB.
HISTOGRAM_BOUNDS = (0, *(1 << k for k in range(16, 31)))
# Size tiers of a partition's files that are not small: tier k holds the files from 2**k up to
# 2**(k + 1) times the small size. Compacting only the small files leaves its outputs, once they
# grow past the small size, out of every later compaction: these tiers let the planner merge
# them a band at a time (size-tiered), each byte rewritten once per band on its way to the target.
SIZE_TIERS = 8
HISTORY_PAGES = (50, 1000)  # commits looked at (newest first) to find the last OPTIMIZE/VACUUM
DAY_MS = 86_400_000


@dataclass(frozen=True)
class PartitionHealth:
    """One partition (the whole table when it is not partitioned)."""

    partition: str  # Hive-style directory name, "" for an unpartitioned table
    values: dict[str, str | None]  # physical column name -> serialized value, as in the log
    num_files: int
    size_bytes: int
    num_small_files: int
    small_files_bytes: int
    num_rows: int | None  # after deletion vectors; None when some file has no statistics
    num_deleted_rows: int  # hidden by deletion vectors
    # files and bytes per size tier (``SIZE_TIERS``: from 2**k to 2**(k + 1) small sizes)
    tier_files: tuple[int, ...] = (0,) * SIZE_TIERS
    tier_bytes: tuple[int, ...] = (0,) * SIZE_TIERS

    @property
    def deleted_rows_ratio(self) -> float:
        total = (self.num_rows or 0) + self.num_deleted_rows
        return self.num_deleted_rows / total if total else 0.0


@dataclass(frozen=True)
class MaintenanceEvent:
    version: int
    timestamp: int  # ms
    operation: str


@dataclass(frozen=True)
class TableHealth:
    uri: str
    version: int
    timestamp: int
    num_files: int
    size_bytes: int
    num_rows: int | None
    num_deleted_rows: int
    num_files_with_deletion_vectors: int
    small_file_size: int
    num_small_files: int
    num_partitions: int
    file_size_histogram: list[dict[str, int]]  # {"min_bytes", "num_files", "bytes"} per bucket
    last_checkpoint_version: int | None
    versions_since_checkpoint: int
    last_optimize: MaintenanceEvent | None
    last_vacuum: MaintenanceEvent | None
    partitions: tuple[PartitionHealth, ...] = field(repr=False)
    # liquid clustering: whether the table is clustered, and its files no OPTIMIZE clustered yet
    clustered: bool = False
    num_unclustered_files: int = 0
    unclustered_bytes: int = 0
    # the log: its oldest commit (version, file time) and how long the table keeps it
    oldest_log_version: int | None = None
    oldest_log_timestamp: int | None = None
    log_retention_ms: int = 30 * DAY_MS

    @property
    def deleted_rows_ratio(self) -> float:
        total = (self.num_rows or 0) + self.num_deleted_rows
        return self.num_deleted_rows / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["deleted_rows_ratio"] = self.deleted_rows_ratio
        for p, health in zip(out["partitions"], self.partitions, strict=True):
            p["deleted_rows_ratio"] = health.deleted_rows_ratio
        return out


def removed_files(
    snapshot: Snapshot, *, now_ms: int | None = None, retention_ms: int | None = None
) -> dict[str, int | None]:
    """The removed files ``snapshot`` still lists (its tombstones), as
    ``HealthTracker.removed_files`` counts them for a tracker started from this snapshot: count,
    bytes, the oldest removal's age at ``now_ms`` (default: the snapshot's time), and with
    ``retention_ms`` those a VACUUM would delete now (``expired_files``, ``expired_bytes``)."""
    tomb = snapshot.tombstones
    now = int(now_ms) if now_ms is not None else snapshot.timestamp
    sizes = pc.fill_null(tomb.column("size"), 0) if tomb.num_rows else pa.array([], pa.int64())
    stamps = pc.fill_null(tomb.column("deletion_timestamp"), 0) if tomb.num_rows else pa.array([], pa.int64())
    out: dict[str, int | None] = {
        "num_files": tomb.num_rows,
        "bytes": int(pc.sum(sizes).as_py() or 0),
        "oldest_age_ms": max(0, now - int(pc.min(stamps).as_py())) if tomb.num_rows else None,
    }
    if retention_ms is not None:
        expired = pc.less(stamps, now - retention_ms)
        out["expired_files"] = int(pc.sum(expired.cast(pa.int64())).as_py() or 0)
        out["expired_bytes"] = int(pc.sum(pc.filter(sizes, expired)).as_py() or 0)
    return out


def oldest_commit(store) -> tuple[int, int] | None:
    """The log's oldest commit file: (version, file time in ms). One LIST request on an object
    store (names come back in order; the first page holds it), so a poller can afford it."""
    for meta in store.list(f"{LOG_DIR}/"):
        f = parse_log_file_name(meta.key, meta.size, meta.last_modified)
        if f is not None and f.kind is LogFileKind.COMMIT:
            return f.version, int(meta.last_modified)
    return None


def table_health(
    snapshot: Snapshot, *, small_file_size: int = DEFAULT_SMALL_FILE_SIZE, include_history: bool = True
) -> TableHealth:
    """Health of ``snapshot``; ``include_history=False`` skips reading commit history."""
    files = snapshot.files
    n = files.num_rows
    sizes = files.column("size").to_numpy() if n else np.zeros(0, dtype=np.int64)
    records = (
        parse_file_stats(files, {}).num_records if n else pa.array([], pa.int64())
    )  # null where a file has no stats
    dv = files.column("deletion_vector") if n else pa.nulls(0)
    deleted = (
        pc.fill_null(pc.struct_field(dv, "cardinality"), 0).to_numpy(zero_copy_only=False)
        if n and dv.null_count < n
        else np.zeros(n, dtype=np.int64)
    )
    small = sizes < small_file_size
    unclustered = (
        pc.is_null(files.column("clustering_provider")).to_numpy(zero_copy_only=False)
        if n and "clustering_provider" in files.column_names
        else np.ones(n, dtype=bool)
    )
    partitions = _partitions(snapshot, files, sizes, small_file_size, records, deleted)
    # The log now, not as it was when the snapshot was loaded: a checkpoint may have been
    # written since (listing from the _last_checkpoint hint is one cheap request).
    segment = build_log_segment(snapshot.store, snapshot.version)
    checkpoint = segment.checkpoint.version if segment.checkpoint else None
    oldest = oldest_commit(snapshot.store)
    last_optimize = last_vacuum = None
    if include_history:
        last_optimize, last_vacuum = _last_maintenance(snapshot)
    rows_known = n == 0 or records.null_count == 0
    return TableHealth(
        uri=snapshot.store.root,
        version=snapshot.version,
        timestamp=snapshot.timestamp,
        num_files=n,
        size_bytes=int(sizes.sum()),
        num_rows=int(pc.sum(records).as_py() or 0) - int(deleted.sum()) if rows_known else None,
        num_deleted_rows=int(deleted.sum()),
        num_files_with_deletion_vectors=int((deleted > 0).sum()) if n else 0,
        small_file_size=small_file_size,
        num_small_files=int(small.sum()),
        num_partitions=len(partitions),
        file_size_histogram=_histogram(sizes),
        last_checkpoint_version=checkpoint,
        versions_since_checkpoint=snapshot.version - (checkpoint if checkpoint is not None else -1),
        last_optimize=last_optimize,
        last_vacuum=last_vacuum,
        partitions=tuple(partitions),
        clustered=bool(clustering_column_names(snapshot)),
        num_unclustered_files=int(unclustered.sum()),
        unclustered_bytes=int(sizes[unclustered].sum()),
        oldest_log_version=oldest[0] if oldest else None,
        oldest_log_timestamp=oldest[1] if oldest else None,
        log_retention_ms=snapshot.properties.log_retention_ms,
    )


def _histogram(sizes: np.ndarray) -> list[dict[str, int]]:
    bucket = np.searchsorted(np.array(HISTOGRAM_BOUNDS[1:]), sizes, side="right")
    out = []
    for i, lower in enumerate(HISTOGRAM_BOUNDS):
        chosen = bucket == i
        out.append({"min_bytes": lower, "num_files": int(chosen.sum()), "bytes": int(sizes[chosen].sum())})
    return out


def size_tier(size: int, small_file_size: int) -> int | None:
    """The size tier of a file (``SIZE_TIERS``), None for a small file or one above the tiers."""
    if size < small_file_size:
        return None
    k = (size // small_file_size).bit_length() - 1
    return k if k < SIZE_TIERS else None


def _partitions(snapshot, files, sizes, small_file_size, records, deleted) -> list[PartitionHealth]:
    n = files.num_rows
    if n == 0:
        return []
    small = sizes < small_file_size
    tiers = {}
    for k in range(SIZE_TIERS):
        chosen = (sizes >= small_file_size << k) & (sizes < small_file_size << (k + 1))
        tiers[f"t{k}"], tiers[f"tb{k}"] = chosen.astype(np.int64), np.where(chosen, sizes, 0)
    names = [f.physical_name for f in snapshot.partition_fields]
    values = files.column("partition_values")
    columns = {
        "size": sizes,
        "small": small.astype(np.int64),
        "small_bytes": np.where(small, sizes, 0),
        **tiers,
    }
    table = pa.table(
        {
            **{f"p{i}": pc.struct_field(values, name) for i, name in enumerate(names)},
            **columns,
            "records": records,
            "records_missing": pc.is_null(records),
            "deleted": deleted,
        }
    )
    keys = [f"p{i}" for i in range(len(names))]
    grouped = (
        table.group_by(keys, use_threads=False).aggregate(
            [
                ("size", "count"),
                *[(name, "sum") for name in columns],
                ("records", "sum"),
                ("records_missing", "any"),
                ("deleted", "sum"),
            ]
        )
        if keys
        else pa.table(
            {
                "size_count": [n],
                **{f"{name}_sum": [int(column.sum())] for name, column in columns.items()},
                "records_sum": [pc.sum(records).as_py()],
                "records_missing_any": [bool(pc.any(pc.is_null(records)).as_py())],
                "deleted_sum": [int(deleted.sum())],
            }
        )
    )
    out = []
    for row in grouped.to_pylist():
        pv = {name: row[f"p{i}"] for i, name in enumerate(names)}
        rows = None if row["records_missing_any"] else int(row["records_sum"] or 0) - int(row["deleted_sum"])
        out.append(
            PartitionHealth(
                partition=partition_directory(names, [pv[k] for k in names]) if names else "",
                values=pv,
                num_files=int(row["size_count"]),
                size_bytes=int(row["size_sum"]),
                num_small_files=int(row["small_sum"]),
                small_files_bytes=int(row["small_bytes_sum"]),
                num_rows=rows,
                num_deleted_rows=int(row["deleted_sum"]),
                tier_files=tuple(int(row[f"t{k}_sum"]) for k in range(SIZE_TIERS)),
                tier_bytes=tuple(int(row[f"tb{k}_sum"]) for k in range(SIZE_TIERS)),
            )
        )
    out.sort(key=lambda p: p.partition)
    return out


def partition_names(snapshot: Snapshot, files: pa.Table) -> set[str]:
    """Hive-style names of the partitions ``files`` (live-file rows) belong to."""
    names = [f.physical_name for f in snapshot.partition_fields]
    if not names:
        return {""}
    values = files.column("partition_values")
    columns = [pc.struct_field(values, name).to_pylist() for name in names]
    return {partition_directory(names, list(row)) for row in zip(*columns, strict=True)}


def _last_maintenance(snapshot: Snapshot) -> tuple[MaintenanceEvent | None, MaintenanceEvent | None]:
    found: dict[str, MaintenanceEvent] = {}
    for page in HISTORY_PAGES:
        for entry in load_history(snapshot.store, limit=page, up_to=snapshot.version):
            op = str(entry.get("operation", ""))
            kind = "optimize" if op == "OPTIMIZE" else "vacuum" if op.startswith("VACUUM") else None
            if kind and kind not in found:
                found[kind] = MaintenanceEvent(entry["version"], int(entry["timestamp"]), op)
        if len(found) == 2:
            break
    return found.get("optimize"), found.get("vacuum")


REWRITES = ("OPTIMIZE", "REORG")  # the commits that spend a table's daily maintenance budget
# CPU seconds to rewrite one GiB when a table has no rewrite of its own that recorded its CPU
# (``cpuTimeMs``): Delta Spark's OPTIMIZE, or none yet. Measured for deltaplane's in-process
# compaction on this project's 2-core reference machine: 80 files of 40,000 rows (int64, double,
# string, int32; 55 MiB) into one took 1.19 CPU-s, 22 CPU-s per GiB written.
DEFAULT_CPU_SECONDS_PER_GIB = 22.0


@dataclass(frozen=True)
class Spending:
    """What a table's rewrites (OPTIMIZE, REORG) cost since ``since_ms``, from the log: the bytes
    they wrote (``numAddedBytes``) and the CPU seconds they used (``cpuTimeMs``, which deltaplane
    records; a rewrite that did not record it, Delta Spark's, is estimated from its bytes at
    ``cpu_seconds_per_gib``). ``cpu_seconds_per_gib`` is the table's own rate over the rewrites that
    recorded both, else ``DEFAULT_CPU_SECONDS_PER_GIB``: the planner estimates the CPU of the next
    rewrite with it."""

    since_ms: int
    bytes_rewritten: int = 0
    cpu_seconds: float = 0.0
    rewrites: int = 0
    estimated: int = 0  # rewrites whose CPU was estimated from their bytes
    cpu_seconds_per_gib: float = DEFAULT_CPU_SECONDS_PER_GIB

    def cpu_for(self, nbytes: int) -> float:
        """The CPU seconds a rewrite of ``nbytes`` is expected to take."""
        return nbytes / (1 << 30) * self.cpu_seconds_per_gib

    def to_dict(self) -> dict[str, Any]:
        return {
            "since_ms": self.since_ms,
            "bytes_rewritten": self.bytes_rewritten,
            "cpu_seconds": round(self.cpu_seconds, 3),
            "rewrites": self.rewrites,
            "estimated": self.estimated,
            "cpu_seconds_per_gib": round(self.cpu_seconds_per_gib, 3),
        }


def _metric(metrics: dict, key: str) -> int | None:
    with contextlib.suppress(TypeError, ValueError, OverflowError):  # a foreign shape: not counted
        value = metrics.get(key)
        return None if value is None else max(0, int(value))
    return None


def maintenance_spending(
    store, version: int, since_ms: int, *, max_commits: int = HISTORY_PAGES[-1]
) -> Spending:
    """The bytes and CPU seconds the OPTIMIZE and REORG commits at or after ``since_ms`` (up to
    ``version``) spent, among the newest ``max_commits``: what a daily budget has used
    (``maintenance_plan.rank``)."""
    rewrites = []  # (bytes, cpu seconds or None)
    for entry in load_history(store, limit=max_commits, up_to=version):
        stamp = entry.get("timestamp")
        if isinstance(stamp, int | float) and not isinstance(stamp, bool) and stamp < since_ms:
            break
        operation = entry.get("operation")
        metrics = entry.get("operationMetrics")
        if isinstance(operation, str) and operation.startswith(REWRITES) and isinstance(metrics, dict):
            cpu = _metric(metrics, "cpuTimeMs")
            rewrites.append((_metric(metrics, "numAddedBytes") or 0, None if cpu is None else cpu / 1000))
    measured = [(b, c) for b, c in rewrites if c is not None and b > 0]
    rate = DEFAULT_CPU_SECONDS_PER_GIB
    if measured:
        rate = sum(c for _, c in measured) / (sum(b for b, _ in measured) / (1 << 30))
    return Spending(
        since_ms,
        bytes_rewritten=sum(b for b, _ in rewrites),
        cpu_seconds=sum(b / (1 << 30) * rate if c is None else c for b, c in rewrites),
        rewrites=len(rewrites),
        estimated=sum(c is None for _, c in rewrites),
        cpu_seconds_per_gib=rate,
    )
