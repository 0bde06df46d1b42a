"""OPTIMIZE: compact small files, purge deletion vectors, and Z-order, without changing any row.

Streaming ingest leaves many small files, and every file costs a request and a footer read;
deletion vectors make reads skip rows they still pay to decode. OPTIMIZE rewrites such files
into few, large ones and commits the swap with ``dataChange=false``: the rows are the same, so log
tailers (and the change data feed) skip the commit, and the transaction runs at snapshot
isolation, so concurrent appends never conflict with it (a concurrent DELETE of a file being
compacted still does, as it must).

Planning (``plan_optimize``, pure) works on the live-file table only:

* **bin-packing**: per partition, candidate files are those smaller than the target size and those
  whose deletion vector hides more than ``max_deleted_rows_ratio`` of their rows; sorted by size,
  they are packed greedily into bins of at most the target size. A bin is worth rewriting when it
  has at least ``min_num_files`` files, or when one of its files carries a deletion vector to
  purge (``purge=True`` rewrites every file with one, as ``REORG ... APPLY (PURGE)`` does).
* **Z-order**: every file of each partition forms one bin, re-sorted along the Z-order curve of
  the chosen columns (``deltaplane.engine.commands.zorder``) and cut into target-sized files with tight
  statistics.

Execution rewrites bins in parallel (``max_concurrent_bins``): compaction streams each bin file by
file through the data-file writer, so memory stays bounded by the writer's buffers, not by the
bin; Z-order holds one partition in memory (larger ones belong to the Spark job). The engine
plans and commits; ``rewrite_bin`` and ``commit_optimize`` are also what a Spark job calls around
its own rewriting.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine import row_tracking
from deltaplane.engine.actions import Add, Remove
from deltaplane.engine.clustering import clustering_column_names, key_column, zcube_adds
from deltaplane.engine.commands.context import WriteContext, remove_action
from deltaplane.engine.commands.hilbert import hilbert_sort
from deltaplane.engine.commands.liquid import DEFAULT_MIN_CUBE_SIZE, MAX_BIN_FACTOR, select_bins
from deltaplane.engine.commands.zorder import cut_points, key_bits, zorder_sort
from deltaplane.engine.enforcement import conform_table
from deltaplane.engine.errors import InvalidArgumentError, InvalidPredicateError
from deltaplane.engine.expressions.bind import bind_predicate
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.expressions.tree import Expr, columns
from deltaplane.engine.packing import next_fit
from deltaplane.engine.portable import PortableSnapshot
from deltaplane.engine.scan import Scan, file_keep_mask
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.stats import parse_file_stats
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.transaction import CommitResult

log = logging.getLogger(__name__)

GiB = 1 << 30
DEFAULT_OPTIMIZE_FILE_SIZE = 1 * GiB  # the paper's and Delta Spark's OPTIMIZE target
DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05  # Delta Spark's optimize.maxDeletedRowsRatio
DEFAULT_MIN_NUM_FILES = 2
NO_SIZE_LIMIT = 1 << 62
# A bin of at most this many bytes is read whole and handed to the writer at once: one write per
# bin instead of one per batch of each file, each costing the writer about as much as reading a
# small file (12 files of 200 rows compacted in 12.4 ms of CPU instead of 15.6; a bin of 13 files
# and 440 KB, 29.5 instead of 29.7: bytes weigh there, not calls). Larger bins stream batch by
# batch, their memory bounded by the writer's row group.
WHOLE_BIN_BYTES = 4 << 20


class OptimizeError(InvalidArgumentError):
    """An OPTIMIZE request that cannot be honoured (bad Z-order column, non-partition filter)."""


@dataclass(frozen=True)
class OptimizeBin:
    """Files of one partition rewritten together into target-sized files."""

    partition_values: tuple[tuple[str, str | None], ...]  # physical name -> serialized value
    paths: tuple[str, ...]  # as in the log
    size: int
    num_records: int  # rows the files hold after their deletion vectors
    deleted_rows: int  # rows their deletion vectors hide (purged by the rewrite)


@dataclass(frozen=True)
class OptimizePlan:
    """What OPTIMIZE would do at ``read_version``: a dry run returns just this."""

    table_root: str
    read_version: int
    target_file_size: int
    zorder_by: tuple[str, ...]
    filter: str | None
    bins: tuple[OptimizeBin, ...]
    total_considered_files: int  # files the filter selected
    total_files_skipped: int  # of those, files left as they are
    auto: bool  # an auto-compaction (recorded in the commit)
    snapshot: Snapshot = field(repr=False, compare=False)
    files: pa.Table = field(repr=False, compare=False)  # live-file rows of every file in a bin
    cluster_by: tuple[str, ...] = ()  # liquid clustering columns: each bin becomes one ZCube
    full: bool = False  # OPTIMIZE FULL: files clustered by older columns reclustered too
    reorg: bool = False  # a REORG: chosen files rewritten whatever their size (Delta Spark's name)

    @property
    def num_files(self) -> int:
        return sum(len(b.paths) for b in self.bins)

    @property
    def num_bytes(self) -> int:
        return sum(b.size for b in self.bins)

    @property
    def partitions(self) -> int:
        return len({b.partition_values for b in self.bins})

    def describe(self) -> dict:
        """A JSON-able summary (for dry runs, logs and the CLI)."""
        return {
            "table": self.table_root,
            "readVersion": self.read_version,
            "targetFileSize": self.target_file_size,
            "zOrderBy": list(self.zorder_by),
            **({"clusterBy": list(self.cluster_by), "isFull": self.full} if self.cluster_by else {}),
            "filter": self.filter,
            "numBins": len(self.bins),
            "numFilesToRewrite": self.num_files,
            "numBytesToRewrite": self.num_bytes,
            "numPartitions": self.partitions,
            "numDeletedRowsToPurge": sum(b.deleted_rows for b in self.bins),
            "totalConsideredFiles": self.total_considered_files,
            "totalFilesSkipped": self.total_files_skipped,
        }


@dataclass
class OptimizeMetrics:
    """The outcome of one OPTIMIZE; ``version`` is ``None`` when there was nothing to do."""

    version: int | None
    num_files_added: int = 0
    num_files_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    partitions_optimized: int = 0
    num_bins: int = 0
    total_considered_files: int = 0
    total_files_skipped: int = 0
    num_deletion_vectors_removed: int = 0
    num_deleted_rows_purged: int = 0
    seconds: float = 0.0
    operation_metrics: dict[str, str] = field(default_factory=dict)
    commit: CommitResult | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "commit"}


# --- planning -----------------------------------------------------------------------------------


def _row_counts(files: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each live file's ``numRecords`` and rows hidden by its deletion vector (0 without one)."""
    records = parse_file_stats(files, {}).num_records.to_numpy(zero_copy_only=False)
    dv = files.column("deletion_vector")
    deleted = (
        pc.fill_null(pc.struct_field(dv, "cardinality"), 0).to_numpy(zero_copy_only=False)
        if dv.null_count < len(dv)
        else np.zeros(files.num_rows, dtype=np.int64)
    )
    return records, deleted


def _partition_groups(partition_values: list, partitions: list[dict] | None) -> dict[tuple, list[int]]:
    """The files' row numbers by partition (as sorted items of the log's values), only the
    partitions given when ``partitions`` is."""
    wanted = None if partitions is None else {tuple(sorted(p.items())) for p in partitions}
    groups: dict[tuple, list[int]] = {}
    for i, pv in enumerate(partition_values):
        key = tuple(sorted((pv or {}).items()))
        if wanted is None or key in wanted:
            groups.setdefault(key, []).append(i)
    return groups


def _pack(candidates: list[int], sizes: np.ndarray, paths: list[str], target: int) -> list[list[int]]:
    """Bin-pack files smallest first (ties by path, so a plan is reproducible) into bins of at
    most ``target`` bytes; a file larger than the target is a bin of its own."""
    candidates = sorted(candidates, key=lambda i: (sizes[i], paths[i]))
    return next_fit(candidates, sizes, target)


def plan_optimize(
    snapshot: Snapshot,
    *,
    target_file_size: int | None = None,
    zorder_by: list[str] | None = None,
    filter: str | Expr | None = None,
    min_num_files: int = DEFAULT_MIN_NUM_FILES,
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
    purge: bool = False,
    partitions: list[dict[str, str | None]] | None = None,
    auto: bool = False,
    full: bool = False,
    min_cube_size: int | None = None,
    reorg: set[str] | frozenset[str] | None = None,
    min_file_size: int | None = None,
) -> OptimizePlan:
    """Choose the bins to rewrite; reads nothing but the snapshot (and, for a clustered table,
    the commits that added its clustered files).

    ``partitions`` (physical column name -> serialized value, as in the log) restricts the plan
    to those partitions, as the auto-optimize policy chooses them; ``auto`` marks the commit as
    an auto-compaction. On a liquid-clustered table the plan clusters incrementally instead
    (``commands/liquid.py``; ``full``: recluster files clustered by older columns too,
    ``min_cube_size``: the size at which a ZCube is finished).

    ``reorg`` makes it a REORG (Delta Spark's ``REORG TABLE``): the files whose paths it holds
    (and with ``purge``, every file with a deletion vector) are rewritten, whatever their size,
    and nothing else; a bin of one file is rewritten too.

    ``min_file_size`` (Delta Spark's ``optimize.minFileSize``): only files smaller than it are
    compacted (default: the target size), so files already compacted to a useful size are not
    rewritten again and again.

    Long because of its 14 keyword arguments and their documentation: the
    body (about 60 lines) is file selection, then packing (``_pack``) per partition.
    """
    target = target_file_size or snapshot.properties.target_file_size or DEFAULT_OPTIMIZE_FILE_SIZE
    if target <= 0:
        raise OptimizeError(f"target_file_size must be positive, got {target}")
    if min_num_files < 1:
        raise OptimizeError(f"min_num_files must be at least 1, got {min_num_files}")
    cluster = [] if reorg is not None else _clustering_of(snapshot, zorder_by, filter, full)
    if cluster:
        return _plan_clustering(snapshot, cluster, target, full, min_cube_size, auto)
    zorder = tuple(_check_zorder_columns(snapshot, zorder_by or []))
    predicate = _partition_filter(snapshot, filter)
    files = snapshot.files
    if predicate is not None and files.num_rows:
        files = files.filter(
            file_keep_mask(files, predicate, snapshot.schema, snapshot.metadata, snapshot.store.root)
        )
    considered = files.num_rows
    if considered == 0:
        return _plan(snapshot, target, zorder, filter, [], considered, files.slice(0, 0), auto)

    smaller_than = target if min_file_size is None else min(int(min_file_size), target)
    records, deleted = _row_counts(files)
    sizes = files.column("size").to_numpy()
    paths = files.column("path").to_pylist()
    partition_values = files.column("partition_values").to_pylist()
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(np.isnan(records.astype(float)), 0.0, deleted / np.maximum(records, 1))
    has_dv = deleted > 0
    purge_file = has_dv & ((ratio > max_deleted_rows_ratio) | purge)
    if reorg is not None:
        chosen_paths = set(reorg)
        purge_file = (has_dv & purge) | np.array([p in chosen_paths for p in paths], dtype=bool)

    bins: list[list[int]] = []
    bin_keys: list[tuple] = []
    for key, members in _partition_groups(partition_values, partitions).items():
        if zorder:  # the whole partition is re-clustered, whatever its file sizes
            packed = [members]
        else:
            rewrite = [i for i in members if (sizes[i] < smaller_than and reorg is None) or purge_file[i]]
            packed = [
                b
                for b in _pack(rewrite, sizes, paths, target)
                if len(b) >= min_num_files or purge_file[b].any()
            ]
        bins += packed
        bin_keys += [key] * len(packed)

    chosen = sorted(i for b in bins for i in b)
    out_bins = []
    for key, b in zip(bin_keys, bins, strict=True):
        known = records[b]
        out_bins.append(
            OptimizeBin(
                partition_values=key,
                paths=tuple(paths[i] for i in b),
                size=int(sizes[b].sum()),
                num_records=int(np.nansum(known) - deleted[b].sum()),
                deleted_rows=int(deleted[b].sum()),
            )
        )
    selected = files.take(pa.array(chosen, pa.int64())) if chosen else files.slice(0, 0)
    plan = _plan(snapshot, target, zorder, filter, out_bins, considered, selected, auto)
    return dataclasses.replace(plan, reorg=True) if reorg is not None else plan


def _clustering_of(snapshot: Snapshot, zorder_by, filter, full: bool) -> list[str]:
    """The clustering columns OPTIMIZE clusters by (Delta Spark refuses Z-order and partition
    filters on a clustered table, and FULL on any other)."""
    names = clustering_column_names(snapshot)
    if names is not None and zorder_by:
        raise OptimizeError(
            "OPTIMIZE command for Delta table with clustering cannot specify ZORDER BY. Please remove "
            f"ZORDER BY ({', '.join(map(str, zorder_by))}): {snapshot.store.root} is clustered by "
            f"{', '.join(names) or 'no columns'} (change that with alter().cluster_by([...]))"
        )
    if names is not None and filter is not None:
        raise OptimizeError(
            "OPTIMIZE command for Delta table with clustering doesn't support partition predicates. "
            f"Please remove the predicates: {filter}"
        )
    if full and not names:
        raise OptimizeError(
            "OPTIMIZE FULL is only supported for clustered tables with non-empty clustering columns "
            f"({snapshot.store.root} is {'clustered by none' if names is not None else 'not clustered'})"
        )
    return names or []


def _plan_clustering(snapshot, columns, target, full, min_cube_size, auto) -> OptimizePlan:
    min_cube = DEFAULT_MIN_CUBE_SIZE if min_cube_size is None else min_cube_size
    if min_cube <= 0:
        raise OptimizeError(f"min_cube_size must be positive, got {min_cube}")
    files = snapshot.files
    chosen = select_bins(
        files, columns, min_cube_size=min_cube, max_bin_size=int(min_cube * MAX_BIN_FACTOR), full=full
    )
    bins = []
    if chosen:
        records, deleted = _row_counts(files)
        sizes = files.column("size").to_numpy()
        paths = files.column("path").to_pylist()
        for b in chosen:
            bins.append(
                OptimizeBin(
                    partition_values=(),
                    paths=tuple(paths[i] for i in b),
                    size=int(sizes[b].sum()),
                    num_records=int(np.nansum(records[b]) - deleted[b].sum()),
                    deleted_rows=int(deleted[b].sum()),
                )
            )
    indices = sorted(i for b in chosen for i in b)
    selected = files.take(pa.array(indices, pa.int64())) if indices else files.slice(0, 0)
    plan = _plan(snapshot, target, (), None, bins, files.num_rows, selected, auto)
    return dataclasses.replace(plan, cluster_by=tuple(columns), full=full)


def _plan(snapshot, target, zorder, filter, bins, considered, files, auto) -> OptimizePlan:
    return OptimizePlan(
        table_root=snapshot.store.root,
        read_version=snapshot.version,
        target_file_size=int(target),
        zorder_by=zorder,
        filter=filter if isinstance(filter, str) or filter is None else str(filter),
        bins=tuple(bins),
        total_considered_files=considered,
        total_files_skipped=considered - sum(len(b.paths) for b in bins),
        snapshot=snapshot,
        files=files,
        auto=auto,
    )


def _partition_filter(snapshot: Snapshot, filter: str | Expr | None) -> Expr | None:
    if filter is None:
        return None
    predicate = bind_predicate(
        parse_predicate(filter) if isinstance(filter, str) else filter, snapshot.schema
    )
    names = {n.lower() for n in snapshot.partition_columns}
    others = sorted({c.path[0] for c in columns(predicate) if c.path[0].lower() not in names})
    if others:
        raise InvalidPredicateError(
            "OPTIMIZE filters may only use partition columns "
            f"({', '.join(snapshot.partition_columns) or 'none'} in {snapshot.store.root}), "
            f"not {', '.join(others)}"
        )
    return predicate


def _check_zorder_columns(snapshot: Snapshot, names: list[str]) -> list[str]:
    if not names:
        return []
    schema = snapshot.schema
    partition = {n.lower() for n in snapshot.partition_columns}
    out = []
    context = None
    for name in names:
        f = schema.find(name)
        if f is None:
            raise OptimizeError(f"cannot Z-order by {name!r}: no such column in {snapshot.store.root}")
        if f.name.lower() in partition:
            raise OptimizeError(
                f"cannot Z-order by partition column {f.name!r}: files are already split by it"
            )
        if f.name in out:
            raise OptimizeError(f"column {f.name!r} is listed twice in zorder_by")
        if context is None:
            context = _stats_paths(snapshot)
        if (f.physical_name,) not in context:
            raise OptimizeError(
                f"Z-ordering by {f.name!r} would not help: {snapshot.store.root} keeps no min/max "
                "statistics for it (see delta.dataSkippingNumIndexedCols / delta.dataSkippingStatsColumns)"
            )
        out.append(f.name)
    return out


def _stats_paths(snapshot: Snapshot) -> set[tuple[str, ...]]:
    from deltaplane.engine.stats import stats_leaves

    props = snapshot.properties
    partition = set(snapshot.partition_columns)
    data_fields = [f for f in snapshot.schema.fields if f.name not in partition]
    leaves = stats_leaves(
        data_fields,
        num_indexed=props.data_skipping_num_indexed_cols,
        stats_columns=props.data_skipping_stats_columns,
    )
    return {tuple(leaf.path) for leaf in leaves if leaf.min_max}


# --- execution ----------------------------------------------------------------------------------


def rewrite_bin(store: ObjectStore, plan: OptimizePlan, index: int) -> list[Add]:
    """Rewrite bin ``index`` into new files; their adds carry ``dataChange=false``.

    Nothing is committed: on failure the files already written stay unreferenced (for VACUUM).
    """
    b = plan.bins[index]
    snapshot = plan.snapshot
    files = plan.files.filter(pc.is_in(plan.files.column("path"), value_set=pa.array(b.paths, pa.string())))
    # Z-order chooses its own file boundaries (``cut_points``); compaction rolls files by size.
    size = NO_SIZE_LIMIT if plan.zorder_by or plan.cluster_by else plan.target_file_size
    context = WriteContext(store, snapshot, {}, target_file_size=size, schema_mode=None)
    writer = context.writer()
    # Row tracking: the rows' ids and commit versions travel with them into the new files.
    kept = row_tracking.materialized_columns(snapshot.protocol, snapshot.metadata)
    scan = Scan(snapshot, None, None, files=_in_order(files), row_tracking=kept)
    try:
        if plan.zorder_by or plan.cluster_by:
            if plan.cluster_by:  # Hilbert curve, as Delta Spark clusters
                table = scan.to_table()
                rows, keys = hilbert_sort(table, [key_column(table, c) for c in plan.cluster_by])
            else:
                rows, keys = zorder_sort(scan.to_table(), list(plan.zorder_by))
            live_fraction = b.num_records / max(b.num_records + b.deleted_rows, 1)
            num_files = max(1, round(b.size * live_fraction / plan.target_file_size))
            curve_bits = key_bits(len(plan.zorder_by or plan.cluster_by))
            bounds = [0, *cut_points(keys, num_files, curve_bits), rows.num_rows]
            for lo, hi in itertools.pairwise(bounds):
                writer.write(rows.slice(lo, hi - lo))
                writer.roll()
        elif b.size <= WHOLE_BIN_BYTES:
            writer.write(scan.to_table())
        else:
            for batch in scan.to_batches():
                writer.write(pa.Table.from_batches([batch]))
        adds = writer.close()
    except BaseException:
        writer.abort()
        raise
    if plan.cluster_by:
        return zcube_adds(adds, plan.cluster_by)
    return [dataclasses.replace(a, data_change=False) for a in adds]


@dataclass(frozen=True)
class BinTask:
    """One bin of a plan packed for a worker process (picklable: no store, no whole snapshot)."""

    files: PortableSnapshot
    bin: OptimizeBin
    target_file_size: int
    zorder_by: tuple[str, ...]
    cluster_by: tuple[str, ...] = ()


def bin_tasks(
    plan: OptimizePlan, *, uri: str | None = None, storage_options: Mapping[str, str] | None = None
) -> list[BinTask]:
    """Every bin of ``plan`` as a ``BinTask``; ``run_bin_task`` rewrites one anywhere, and
    ``commit_optimize(store, plan, adds)`` commits all of their adds on the driver."""
    tasks = []
    paths = plan.files.column("path")
    for b in plan.bins:
        files = plan.files.filter(pc.is_in(paths, value_set=pa.array(b.paths, pa.string())))
        portable = PortableSnapshot.of(plan.snapshot, files, uri=uri, storage_options=storage_options)
        tasks.append(BinTask(portable, b, plan.target_file_size, plan.zorder_by, plan.cluster_by))
    return tasks


def run_bin_task(task: BinTask) -> list[Add]:
    """Rewrite one bin (as ``rewrite_bin``), from what the task carries."""
    snapshot = task.files.snapshot()
    plan = OptimizePlan(
        table_root=snapshot.store.root,
        read_version=snapshot.version,
        target_file_size=task.target_file_size,
        zorder_by=task.zorder_by,
        filter=None,
        bins=(task.bin,),
        total_considered_files=snapshot.num_files,
        total_files_skipped=0,
        auto=False,
        snapshot=snapshot,
        files=snapshot.files,
        cluster_by=task.cluster_by,
    )
    return rewrite_bin(snapshot.store, plan, 0)


def write_rows_for_bin(task: BinTask, batches) -> list[Add]:
    """Write rows of ``task``'s bin (already in their final order, e.g. sorted by a distributed
    Z-order) into one file per call; the adds carry ``dataChange=false``."""
    snapshot = task.files.snapshot()
    context = WriteContext(snapshot.store, snapshot, {}, target_file_size=NO_SIZE_LIMIT, schema_mode=None)
    writer = context.writer()
    names = [f.name for f in snapshot.schema.fields]
    kept = row_tracking.materialized_columns(snapshot.protocol, snapshot.metadata)
    try:
        for batch in batches:
            if batch.num_rows:
                table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
                lineage = [n for n in kept or () if n in table.column_names]  # row ids, if sent
                rows = conform_table(table.select(names), snapshot.schema)
                writer.write(row_tracking.attach(rows, table.select(lineage) if lineage else None))
        adds = writer.close()
    except BaseException:
        writer.abort()
        raise
    return [dataclasses.replace(a, data_change=False) for a in adds]


def _in_order(files: pa.Table) -> pa.Table:
    """Oldest files first, so compacted rows keep roughly their insertion order."""
    if files.num_rows <= 1:
        return files
    order = pc.sort_indices(files, sort_keys=[("modification_time", "ascending"), ("path", "ascending")])
    return files.take(order)


def execute_optimize(
    store: ObjectStore, plan: OptimizePlan, *, max_concurrent_bins: int | None = None
) -> OptimizeMetrics:
    """Rewrite every bin of ``plan`` (in parallel) and commit the swap in one transaction."""
    start, cpu = time.perf_counter(), time.process_time()
    if not plan.bins:
        log.info(
            "OPTIMIZE %s: nothing to do (%d files considered)", plan.table_root, plan.total_considered_files
        )
        return OptimizeMetrics(
            None,
            total_considered_files=plan.total_considered_files,
            total_files_skipped=plan.total_files_skipped,
            seconds=time.perf_counter() - start,
        )
    workers = max(1, min(max_concurrent_bins or os.cpu_count() or 1, len(plan.bins)))
    log.info(
        "OPTIMIZE %s: rewriting %d files (%.1f MiB) in %d bins, %d at a time",
        plan.table_root,
        plan.num_files,
        plan.num_bytes / 2**20,
        len(plan.bins),
        workers,
    )
    adds = _rewrite_bins(store, plan, workers)
    result = commit_optimize(
        store, plan, adds, seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu
    )
    return optimize_metrics(plan, adds, result, time.perf_counter() - start)


def _rewrite_bins(store: ObjectStore, plan: OptimizePlan, workers: int) -> list[Add]:
    """Every bin rewritten, ``workers`` at a time; one bin on the calling thread (nothing to
    overlap it with: a streaming table's small compactions start no thread)."""
    if len(plan.bins) == 1:
        return rewrite_bin(store, plan, 0)
    adds: list[Add] = []
    with ThreadPoolExecutor(workers, thread_name_prefix="deltaplane-optimize") as pool:
        futures = [pool.submit(rewrite_bin, store, plan, i) for i in range(len(plan.bins))]
        try:
            for done, future in enumerate(futures, start=1):
                adds.extend(future.result())
                if done % 10 == 0 or done == len(futures):
                    log.info("OPTIMIZE %s: %d/%d bins rewritten", plan.table_root, done, len(futures))
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return adds


def commit_optimize(
    store: ObjectStore,
    plan: OptimizePlan,
    adds: list[Add],
    *,
    seconds: float | None = None,
    cpu_seconds: float | None = None,
) -> CommitResult:
    """Commit the rewritten files of ``plan``: its files removed, ``adds`` added, no data change.

    ``seconds`` and ``cpu_seconds``, what the rewrite cost (wall time; CPU of the processes that
    rewrote the files), are recorded as ``executionTimeMs`` and ``cpuTimeMs``: a maintenance
    budget in CPU-seconds a day is kept from them (``health.maintenance_spending``)."""
    snapshot = plan.snapshot
    params: dict = {"predicate": [plan.filter] if plan.filter else [], "zOrderBy": list(plan.zorder_by)}
    if plan.reorg:  # Delta Spark's REORG TABLE parameters
        params = {"predicate": params["predicate"], "applyPurge": "true"}
    elif not plan.zorder_by:
        params["auto"] = plan.auto
    if plan.cluster_by:  # Delta Spark's parameters of a clustering OPTIMIZE
        params.update(clusterBy=list(plan.cluster_by), isFull=plan.full)
    context = WriteContext(
        store,
        snapshot,
        params,
        target_file_size=None,
        schema_mode=None,
        operation="REORG" if plan.reorg else "OPTIMIZE",
    )
    txn = context.txn
    txn.read_exact_files(plan.files)
    now = int(time.time() * 1000)
    removes: list[Remove] = [
        dataclasses.replace(remove_action(row, now), data_change=False) for row in plan.files.to_pylist()
    ]
    if any(a.data_change for a in adds):
        raise OptimizeError("OPTIMIZE may only add files with dataChange=false")
    txn.remove_files(removes)
    txn.add_files(adds)
    sizes = sorted(a.size for a in adds)
    metrics = {
        "numRemovedFiles": len(removes),
        "numAddedFiles": len(adds),
        "numRemovedBytes": int(pc.sum(plan.files.column("size")).as_py() or 0),
        "numAddedBytes": sum(sizes),
        "numDeletionVectorsRemoved": sum(r.deletion_vector is not None for r in removes),
        **_size_percentiles(sizes),
    }
    if seconds is not None:
        metrics["executionTimeMs"] = max(0, round(seconds * 1000))
    if cpu_seconds is not None:
        metrics["cpuTimeMs"] = max(0, round(cpu_seconds * 1000))
    return txn.commit(metrics)


def _size_percentiles(sizes: list[int]) -> dict[str, int]:
    if not sizes:
        return {}
    arr = np.array(sizes)
    return {
        "minFileSize": int(arr.min()),
        "p25FileSize": int(np.percentile(arr, 25, method="lower")),
        "p50FileSize": int(np.percentile(arr, 50, method="lower")),
        "p75FileSize": int(np.percentile(arr, 75, method="lower")),
        "maxFileSize": int(arr.max()),
    }


def optimize_metrics(
    plan: OptimizePlan, adds: list[Add], result: CommitResult, seconds: float
) -> OptimizeMetrics:
    dvs = plan.files.column("deletion_vector")
    return OptimizeMetrics(
        result.version,
        num_files_added=len(adds),
        num_files_removed=plan.files.num_rows,
        bytes_added=sum(a.size for a in adds),
        bytes_removed=plan.num_bytes,
        partitions_optimized=plan.partitions,
        num_bins=len(plan.bins),
        total_considered_files=plan.total_considered_files,
        total_files_skipped=plan.total_files_skipped,
        num_deletion_vectors_removed=len(dvs) - dvs.null_count,
        num_deleted_rows_purged=sum(b.deleted_rows for b in plan.bins),
        seconds=seconds,
        operation_metrics=dict(result.operation_metrics),
        commit=result,
    )
