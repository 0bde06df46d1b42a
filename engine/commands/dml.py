"""DELETE and UPDATE, by deletion vectors (merge-on-read) or by rewriting files (copy-on-write).

Both commands find the files that may hold matching rows (pruning and skipping), read them with
each row's physical position, and evaluate the predicate with Arrow. Then, per touched file:

* **deletion vectors** (when ``delta.enableDeletionVectors`` is on): the file stays; its new DV is
  the union of the old one and the newly deleted positions, committed as ``remove(path, oldDV)``
  plus ``add(path, newDV)`` with exact ``numRecords`` and ``tightBounds=false``. All DVs of a
  commit share one ``deletion_vector_<uuid>.bin``; small ones are inline.
* **copy-on-write**: the file's surviving rows are written to new files and the file is removed.

A file whose deleted fraction would pass ``rewrite_threshold`` is rewritten even in DV mode (reads
stay fast); a file left with no rows is simply removed. Updated rows always go to new files.
With the change data feed on, every changed row is also written to ``_change_data/`` with its
``_change_type`` (copied rows are not changes and are not written there).

A command that changes no row commits nothing, as Delta Spark's: the ``CommitResult`` has
``committed=False`` and the version read. Inside an ``app_transaction_scope`` it still commits,
to record the work key (``Transaction.commit_if_needed``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine import row_tracking
from deltaplane.engine.actions import Add, AddCDCFile, row_tags
from deltaplane.engine.commands.context import CHANGE_TYPE, WriteContext, remove_action
from deltaplane.engine.deletion_vectors import (
    DeletionVectorWriter,
    deserialize_bitmap,
    serialize_bitmap,
    union_rows,
)
from deltaplane.engine.enforcement import check_constraints, conform_table, table_constraints
from deltaplane.engine.errors import DeltaError, InvalidArgumentError, InvalidPredicateError
from deltaplane.engine.expressions.arrow import evaluate
from deltaplane.engine.expressions.bind import bind, bind_predicate, coerce_literal
from deltaplane.engine.expressions.parser import parse_expression, parse_predicate
from deltaplane.engine.expressions.tree import Expr, Literal, columns
from deltaplane.engine.scan import FileRows, Scan, file_keep_mask
from deltaplane.engine.schema import DecimalType, PrimitiveType, StructType, to_arrow_type
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import reader_features
from deltaplane.engine.transaction import CommitResult

DELETION_VECTORS = "deletion_vectors"
COPY_ON_WRITE = "copy_on_write"
STRATEGY_PROPERTY = "deltaplane.dml.strategy"
THRESHOLD_PROPERTY = "deltaplane.dml.rewriteThreshold"
DEFAULT_REWRITE_THRESHOLD = 0.5


def choose_strategy(snapshot: Snapshot, requested: str | None) -> str:
    """DVs when the table enables them, unless the command or a table property says otherwise."""
    config = snapshot.metadata.configuration
    choice = requested or config.get(STRATEGY_PROPERTY)
    enabled = snapshot.properties.enable_deletion_vectors and "deletionVectors" in reader_features(
        snapshot.protocol
    )
    if choice is None:
        return DELETION_VECTORS if enabled else COPY_ON_WRITE
    if choice not in (DELETION_VECTORS, COPY_ON_WRITE):
        raise InvalidArgumentError(
            f"strategy must be {DELETION_VECTORS!r} or {COPY_ON_WRITE!r}, got {choice!r}"
        )
    if choice == DELETION_VECTORS and not enabled:
        raise DeltaError(
            f"{snapshot.store.root} does not enable deletion vectors (delta.enableDeletionVectors=true "
            "with the deletionVectors feature); use copy_on_write"
        )
    return choice


def rewrite_threshold(snapshot: Snapshot, requested: float | None) -> float:
    value = requested if requested is not None else snapshot.metadata.configuration.get(THRESHOLD_PROPERTY)
    threshold = DEFAULT_REWRITE_THRESHOLD if value is None else float(value)
    if not 0.0 <= threshold <= 1.0:
        raise InvalidArgumentError(f"the rewrite threshold is a fraction of a file's rows, got {threshold}")
    return threshold


@dataclass
class ChangeCounters:
    removed_files: int = 0
    added_files: int = 0
    removed_bytes: int = 0
    added_bytes: int = 0
    copied_rows: int = 0
    dvs_added: int = 0
    dvs_removed: int = 0
    dvs_updated: int = 0
    change_files: int = 0
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class ChangeSet:
    """One task's share of a distributed DELETE/UPDATE (picklable)."""

    removed: list[dict]  # live-file rows removed (a file getting a new DV is removed and re-added)
    deletion_vectors: list[tuple[dict, bytes, int]]  # (file row, serialized new DV, physical rows)
    adds: list[dict]  # new data files (survivors of rewritten files, updated rows), as JSON
    change_files: list[dict]  # _change_data files, as JSON adds
    counters: ChangeCounters
    matched: int  # rows deleted or updated


class RowLevelChange:
    """Accumulates the file-level effect of deleting and adding rows, then stages it."""

    def __init__(
        self,
        context: WriteContext,
        snapshot: Snapshot,
        strategy: str,
        threshold: float,
        *,
        defer_deletion_vectors: bool = False,
    ):
        """``defer_deletion_vectors``: keep new DVs as bitmaps (``change_set``) for another
        process to write and commit, instead of writing them here (a distributed task)."""
        self.context = context
        self.defer_deletion_vectors = defer_deletion_vectors
        self._deferred: list[tuple[dict, bytes, int]] = []
        self._extra_adds: list[Add] = []
        self._extra_cdc: list[Add] = []
        self.snapshot = snapshot
        self.strategy = strategy
        self.threshold = threshold
        self.cdf = snapshot.properties.enable_change_data_feed
        self.counters = ChangeCounters()
        self._now = int(time.time() * 1000)
        self._dv_writer = DeletionVectorWriter(context.store)
        self._data_writer = context.writer()
        self._cdc_writer = context.change_data_writer() if self.cdf else None
        self._removed: list[dict] = []
        self._dv_adds: list[Add] = []

    # --- recording changes ------------------------------------------------------------------

    def delete_rows(self, file_row: dict, rows: FileRows, mask: np.ndarray) -> int:
        """Delete the surviving rows of one file where ``mask`` is true; returns how many."""
        count = int(mask.sum())
        if count == 0:
            return 0
        self.context.check_removals_allowed()
        remaining = len(mask) - count
        old = rows.deleted
        old_count = 0 if old is None else len(old)
        has_old_dv = file_row["deletion_vector"] is not None
        self._removed.append(file_row)
        self.counters.removed_files += 1
        self.counters.removed_bytes += int(file_row["size"])
        if has_old_dv:
            self.counters.dvs_removed += 1
        if remaining == 0:
            return count
        deleted_fraction = (old_count + count) / max(rows.physical_rows, 1)
        if self.strategy == DELETION_VECTORS and deleted_fraction <= self.threshold:
            bitmap = union_rows(old, rows.positions[mask])
            if self.defer_deletion_vectors:
                self._deferred.append((file_row, serialize_bitmap(bitmap), rows.physical_rows))
            else:
                descriptor = self._dv_writer.add(bitmap)
                self._dv_adds.append(self._with_dv(file_row, descriptor, rows.physical_rows))
            self.counters.dvs_added += 1
            if has_old_dv:
                self.counters.dvs_updated += 1
            self.counters.removed_files -= 1  # the file stays, with a new deletion vector
            self.counters.removed_bytes -= int(file_row["size"])
            return count
        kept = rows.table.filter(pa.array(~mask))
        # Copied rows keep their row ids and commit versions (row tracking).
        lineage = row_tracking.take(rows.lineage, ~mask)
        self._data_writer.write(row_tracking.attach(conform_table(kept, self.context.schema), lineage))
        self.counters.copied_rows += kept.num_rows
        return count

    def add_rows(self, table: pa.Table, lineage: pa.Table | None = None) -> None:
        """New rows (updated or inserted), checked against the schema and constraints;
        ``lineage``: updated rows' row ids (``row_tracking.updated``), None for inserted rows."""
        if table.num_rows == 0:
            return
        conformed = conform_table(table, self.context.schema)
        check_constraints(conformed, self.context.schema, self._constraints)
        self._data_writer.write(row_tracking.attach(conformed, lineage))

    def record_change(self, table: pa.Table, change_type: str) -> None:
        if self._cdc_writer is None or table.num_rows == 0:
            return
        conformed = conform_table(table, self.context.schema)
        self._cdc_writer.write(
            conformed.append_column(CHANGE_TYPE, pa.repeat(pa.scalar(change_type), table.num_rows))
        )

    @property
    def _constraints(self):
        if not hasattr(self, "_constraint_list"):
            self._constraint_list = table_constraints(
                self.context.schema, self.context.metadata.configuration
            )
        return self._constraint_list

    # --- staging --------------------------------------------------------------------------------

    def _with_dv(self, row: dict, descriptor, physical_rows: int) -> Add:
        stats = json.loads(row["stats"]) if row.get("stats") else {}
        stats["numRecords"] = stats.get("numRecords", physical_rows)
        stats["tightBounds"] = False  # bounds may now be wider than the surviving rows
        return Add(
            path=row["path"],
            partition_values=row["partition_values"],
            size=row["size"],
            modification_time=row["modification_time"],
            data_change=True,
            stats=json.dumps(stats),
            deletion_vector=descriptor,
            base_row_id=row.get("base_row_id"),
            default_row_commit_version=row.get("default_row_commit_version"),
            clustering_provider=row.get("clustering_provider"),
            tags=row_tags(row.get("tags")),
        )

    def file_metrics(self) -> dict[str, int]:
        """Delta Spark's file-level DML metrics, from what was staged."""
        c = self.counters
        return {
            "numRemovedFiles": c.removed_files,
            "numAddedFiles": c.added_files,
            "numCopiedRows": c.copied_rows,
            "numAddedChangeFiles": c.change_files,
            "numDeletionVectorsAdded": c.dvs_added,
            "numDeletionVectorsRemoved": c.dvs_removed,
            "numDeletionVectorsUpdated": c.dvs_updated,
            "numRemovedBytes": c.removed_bytes,
            "numAddedBytes": c.added_bytes,
        }

    def change_set(self, matched: int) -> ChangeSet:
        """What a task did, for the driver's ``absorb``: its data and change files are written,
        its deletion vectors travel as bitmaps. Nothing is staged on this task's transaction."""
        if not self.defer_deletion_vectors:
            raise DeltaError("change_set() is for a RowLevelChange that defers its deletion vectors")
        try:
            adds = self._data_writer.close()
            cdc = self._cdc_writer.close() if self._cdc_writer is not None else []
        except BaseException:
            self._data_writer.abort()
            if self._cdc_writer is not None:
                self._cdc_writer.abort()
            raise
        return ChangeSet(
            removed=list(self._removed),
            deletion_vectors=list(self._deferred),
            adds=[a.to_json() for a in adds],
            change_files=[a.to_json() for a in cdc],
            counters=self.counters,
            matched=matched,
        )

    def absorb(self, sets: list[ChangeSet]) -> int:
        """Take over the work of tasks: their removes, their files, their bitmaps (written here,
        into this commit's deletion-vector file). Returns the rows they matched."""
        matched = 0
        for change in sets:
            matched += change.matched
            self._removed.extend(change.removed)
            for row, bitmap, physical_rows in change.deletion_vectors:
                descriptor = self._dv_writer.add(deserialize_bitmap(bitmap, row["path"]))
                self._dv_adds.append(self._with_dv(row, descriptor, physical_rows))
            self._extra_adds.extend(Add.from_json(a) for a in change.adds)
            self._extra_cdc.extend(Add.from_json(a) for a in change.change_files)
            for name in (
                "removed_files",
                "removed_bytes",
                "copied_rows",
                "dvs_added",
                "dvs_removed",
                "dvs_updated",
            ):
                setattr(self.counters, name, getattr(self.counters, name) + getattr(change.counters, name))
        return matched

    def stage(self) -> None:
        """Publish DV, data and change files, and stage every action on the transaction."""
        txn = self.context.txn
        try:
            adds = self._data_writer.close()
            cdc = self._cdc_writer.close() if self._cdc_writer is not None else []
            self._dv_writer.close()
        except BaseException:
            self._data_writer.abort()
            if self._cdc_writer is not None:
                self._cdc_writer.abort()
            raise
        adds = adds + self._extra_adds
        cdc = cdc + self._extra_cdc
        txn.remove_files([remove_action(row, self._now) for row in self._removed])
        txn.add_files(self._dv_adds + adds)
        txn.add_change_files([AddCDCFile(a.path, a.partition_values, a.size, data_change=False) for a in cdc])
        self.counters.added_files += len(adds)
        self.counters.added_bytes += sum(a.size for a in adds)
        self.counters.change_files += len(cdc)


def _candidates(snapshot: Snapshot, predicate: Expr | None) -> pa.Table:
    files = snapshot.files
    if predicate is None or files.num_rows == 0:
        return files
    return files.filter(
        file_keep_mask(files, predicate, snapshot.schema, snapshot.metadata, snapshot.store.root)
    )


def _partition_only(snapshot: Snapshot, predicate: Expr | None) -> bool:
    names = set(snapshot.partition_columns)
    return predicate is None or all(len(c.path) == 1 and c.path[0] in names for c in columns(predicate))


def _matches(table: pa.Table, predicate: Expr | None, where: str) -> np.ndarray:
    if predicate is None:
        return np.ones(table.num_rows, dtype=bool)
    value = evaluate(table, predicate, where)
    if not pa.types.is_boolean(value.type) and not pa.types.is_null(value.type):
        raise InvalidPredicateError(
            f"the predicate {predicate} is not a condition: its values are {value.type}"
        )
    return pc.fill_null(value, False).to_numpy(zero_copy_only=False).astype(bool)


def _where(store: ObjectStore, row: dict) -> str:
    return f"data file {row['path']} of {store.root}"


def _ms(start: float) -> int:
    return int((time.perf_counter() - start) * 1000)


def execute_delete(
    store: ObjectStore,
    snapshot: Snapshot,
    predicate: str | Expr | None = None,
    *,
    strategy: str | None = None,
    threshold: float | None = None,
) -> CommitResult:
    start = time.perf_counter()
    change, bound, candidates = _begin(store, snapshot, "DELETE", predicate, strategy, threshold)
    scan_start = time.perf_counter()
    if _partition_only(snapshot, bound) and not change.cdf:
        deleted = _delete_whole_files(change, candidates)
    else:
        deleted = delete_matching_rows(change, snapshot, candidates, bound)
    return _finish(change, {"numDeletedRows": deleted}, scan_start, start)


def _begin(
    store: ObjectStore,
    snapshot: Snapshot,
    operation: str,
    predicate: str | Expr | None,
    strategy: str | None,
    threshold: float | None,
) -> tuple[RowLevelChange, Expr | None, pa.Table]:
    """A DELETE's or UPDATE's change, its bound predicate and its candidate files, recorded as the
    transaction's read set."""
    params = {"predicate": [predicate if isinstance(predicate, str) else str(predicate)] if predicate else []}
    context = WriteContext(
        store, snapshot, params, target_file_size=None, schema_mode=None, operation=operation
    )
    bound = (
        bind_predicate(parse_predicate(predicate), snapshot.schema)
        if isinstance(predicate, str)
        else (bind_predicate(predicate, snapshot.schema) if predicate is not None else None)
    )
    change = RowLevelChange(
        context, snapshot, choose_strategy(snapshot, strategy), rewrite_threshold(snapshot, threshold)
    )
    candidates = _candidates(snapshot, bound)
    context.txn.read_files(candidates, bound)
    return change, bound, candidates


def _finish(change: RowLevelChange, counts: dict[str, int], scan_start: float, start: float) -> CommitResult:
    """Stage the change's files and commit them with Delta Spark's DML metrics: the scan ran from
    ``scan_start`` until now, the whole command from ``start``."""
    scan_ms = _ms(scan_start)
    rewrite_start = time.perf_counter()
    change.stage()
    metrics = {**counts, **change.file_metrics()}
    metrics |= {"scanTimeMs": scan_ms, "rewriteTimeMs": _ms(rewrite_start), "executionTimeMs": _ms(start)}
    return change.context.txn.commit_if_needed(metrics)


def _delete_whole_files(change: RowLevelChange, candidates: pa.Table) -> int:
    """A partition-only predicate: whole files match or not, no row needs reading."""
    if candidates.num_rows:
        change.context.check_removals_allowed()
    for row in candidates.to_pylist():
        change._removed.append(row)
        change.counters.removed_files += 1
        change.counters.removed_bytes += int(row["size"])
        change.counters.dvs_removed += row["deletion_vector"] is not None
    return _row_count(candidates)


def delete_matching_rows(
    change: RowLevelChange, snapshot: Snapshot, candidates: pa.Table, bound: Expr | None
) -> int:
    """Delete the rows of ``candidates`` that match ``bound``; returns how many."""
    store = snapshot.store
    deleted = 0
    needed = None if change.cdf or change.strategy == COPY_ON_WRITE else _columns_for(bound, snapshot)
    scan = Scan(snapshot, needed, None, files=candidates)
    rows_of = candidates.to_pylist()
    for i, rows in scan.read_files_with_positions():
        mask = _matches(rows.table, bound, _where(store, rows_of[i]))
        if (
            needed is not None
            and mask.any()
            and not mask.all()
            and (change.strategy == COPY_ON_WRITE or _would_rewrite(change, rows, mask))
        ):
            rows = _full_rows(snapshot, candidates.slice(i, 1))
        deleted += change.delete_rows(rows_of[i], rows, mask)
        change.record_change(rows.table.filter(pa.array(mask)), "delete")
    return deleted


def update_matching_rows(
    change: RowLevelChange, snapshot: Snapshot, candidates: pa.Table, bound: Expr | None, assignments: dict
) -> int:
    """Update the rows of ``candidates`` that match ``bound``; returns how many."""
    store = snapshot.store
    updated = 0
    rows_of = candidates.to_pylist()
    for i, rows in Scan(snapshot, None, None, files=candidates).read_files_with_positions():
        where = _where(store, rows_of[i])
        mask = _matches(rows.table, bound, where)
        if not mask.any():
            continue
        before = rows.table.filter(pa.array(mask))
        after = apply_assignments(before, assignments, snapshot.schema, where)
        after = change.context.values.update(after, assignments)  # generated columns follow
        updated += change.delete_rows(rows_of[i], rows, mask)
        change.add_rows(after, row_tracking.updated(row_tracking.take(rows.lineage, mask)))
        change.record_change(before, "update_preimage")
        change.record_change(after, "update_postimage")
    return updated


def _row_count(files: pa.Table) -> int:
    """Surviving rows of whole files, from their statistics and deletion vectors."""
    from deltaplane.engine.stats import parse_file_stats

    if files.num_rows == 0:
        return 0
    records = parse_file_stats(files, {}).num_records
    total = int(pc.sum(records).as_py() or 0)
    dv = files.column("deletion_vector")
    if dv.null_count < len(dv):
        total -= int(pc.sum(pc.struct_field(dv, "cardinality")).as_py() or 0)
    return total


def _columns_for(predicate: Expr | None, snapshot: Snapshot) -> list[str]:
    names = {c.path[0] for c in columns(predicate)} if predicate is not None else set()
    return [f.name for f in snapshot.schema.fields if f.name in names] or [snapshot.schema.fields[0].name]


def _would_rewrite(change: RowLevelChange, rows: FileRows, mask: np.ndarray) -> bool:
    old = 0 if rows.deleted is None else len(rows.deleted)
    return (old + int(mask.sum())) / max(rows.physical_rows, 1) > change.threshold


def _full_rows(snapshot: Snapshot, one_file: pa.Table) -> FileRows:
    scan = Scan(snapshot, None, None, files=one_file)
    return next(scan.read_files_with_positions())[1]


def execute_update(
    store: ObjectStore,
    snapshot: Snapshot,
    updates: dict[str, str | Any],
    predicate: str | Expr | None = None,
    *,
    strategy: str | None = None,
    threshold: float | None = None,
) -> CommitResult:
    start = time.perf_counter()
    if not updates:
        raise InvalidArgumentError("update() needs at least one column to set")
    assignments = bind_assignments(snapshot, updates)
    change, bound, candidates = _begin(store, snapshot, "UPDATE", predicate, strategy, threshold)
    change.context.values.check_update(assignments)  # identity columns cannot be updated
    scan_start = time.perf_counter()
    updated = update_matching_rows(change, snapshot, candidates, bound, assignments)
    return _finish(change, {"numUpdatedRows": updated}, scan_start, start)


def apply_assignments(
    rows: pa.Table, assignments: dict[str, Expr], schema, where: str | None = None
) -> pa.Table:
    """``rows`` with each assigned column replaced by its expression's value (SET semantics:
    every expression sees the row as it was before the update)."""
    columns_out = []
    for f in schema.fields:
        if f.name in assignments:
            value = evaluate(rows, assignments[f.name], where)
            columns_out.append(assigned_value(value, f, where, assignments[f.name]))
        else:
            columns_out.append(rows.column(f.name))
    return pa.Table.from_arrays(columns_out, names=[f.name for f in schema.fields])


def assigned_value(value, f, where: str | None = None, expr: Expr | None = None):
    """A SET value as its column's type, by Spark's (ANSI) store assignment for numbers, as in
    Delta Spark's UPDATE and MERGE: ``amount = amount * 2`` on a decimal(12,2) is rounded half
    away from zero to 2 digits, ``i = d / 2`` on an INT truncates toward zero, and a value that
    does not fit the column is an error. Other types, and bare literals (``new_values={"id":
    1.5}`` is refused, not truncated), go through the write path's lossless checks."""
    if isinstance(expr, Literal):
        return value
    target = to_arrow_type(f.type) if isinstance(f.type, PrimitiveType | DecimalType) else None
    source = value.type

    def number(t) -> bool:
        return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)

    if target is None or source == target or not (number(source) and number(target)):
        return value
    try:
        if pa.types.is_floating(target):
            return value.cast(target, safe=False)  # Spark never fails a cast to a float
        if pa.types.is_integer(target):
            if pa.types.is_floating(source):
                value = pc.trunc(value)
            return pc.cast(value, options=pc.CastOptions(target, allow_decimal_truncate=True))
        if pa.types.is_decimal(source):
            value = value.cast(pa.decimal128(min(source.precision + 1, 38), source.scale))
        if pa.types.is_integer(source):  # pyarrow checks an int64's width, not its values
            value = value.cast(pa.decimal128(20, 0))
        else:
            value = pc.round(value, ndigits=target.scale, round_mode="half_towards_infinity")
        return value.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise InvalidPredicateError(
            f"the value assigned to column {f.name!r} does not fit its type {f.type.to_json()}"
            + (f" ({where})" if where else "")
            + f": {e}"
        ) from None


def bind_assignments(snapshot: Snapshot, updates: dict[str, str | Any]) -> dict[str, Expr]:
    """``SET`` clauses (column -> SQL expression or expression tree) bound to the table.
    Updating a partition column is allowed: the row moves to another partition."""
    schema = snapshot.schema
    assignments: dict[str, Expr] = {}
    for name, value in updates.items():
        f = schema.find(name)
        if f is None:
            raise DeltaError(f"update(): unknown column {name!r} (columns: {', '.join(schema.names)})")
        expr = parse_expression(value) if isinstance(value, str) else value
        assignments[f.name] = bind(expr, schema)
    return assignments


# --- distributed DELETE/UPDATE: plan on a driver, change files in tasks, commit once -------------


@dataclass(frozen=True)
class RowLevelPlan:
    """A DELETE or UPDATE decided on the driver (candidate files, strategy), carried out by
    tasks (``change_files``, each on a ``PortableSnapshot`` of some candidates) and committed
    once (``commit_row_level``) with the same conflict checks as ``execute_delete``/``update``."""

    operation: str  # "DELETE" or "UPDATE"
    predicate: str | None
    updates: dict[str, str] | None
    strategy: str
    threshold: float
    read_version: int
    partition_only: bool  # a DELETE whose predicate reads only partition columns: no task needed
    candidates: pa.Table | None = field(default=None, repr=False, compare=False)

    def for_tasks(self) -> RowLevelPlan:
        """The plan without its candidate table (each task carries its own files)."""
        return RowLevelPlan(
            self.operation,
            self.predicate,
            self.updates,
            self.strategy,
            self.threshold,
            self.read_version,
            self.partition_only,
        )


def plan_row_level(
    snapshot: Snapshot,
    *,
    predicate: str | None,
    updates: dict[str, str] | None = None,
    strategy: str | None = None,
    threshold: float | None = None,
) -> RowLevelPlan:
    """Plan a DELETE (``updates`` None) or an UPDATE: everything is checked here, before any task
    runs (unknown columns, non-boolean predicates, strategies the table cannot use)."""
    if predicate is not None and not isinstance(predicate, str):
        raise InvalidArgumentError("a distributed DELETE/UPDATE takes its predicate as SQL text")
    if updates is not None:
        if not updates or not all(isinstance(v, str) for v in updates.values()):
            raise InvalidArgumentError("UPDATE needs at least one column = SQL expression")
        bind_assignments(snapshot, updates)
    bound = bind_predicate(parse_predicate(predicate), snapshot.schema) if predicate else None
    strategy = choose_strategy(snapshot, strategy)
    operation = "DELETE" if updates is None else "UPDATE"
    return RowLevelPlan(
        operation=operation,
        predicate=predicate,
        updates=dict(updates) if updates is not None else None,
        strategy=strategy,
        threshold=rewrite_threshold(snapshot, threshold),
        read_version=snapshot.version,
        partition_only=operation == "DELETE"
        and _partition_only(snapshot, bound)
        and not snapshot.properties.enable_change_data_feed,
        candidates=_candidates(snapshot, bound),
    )


def change_files(files, plan: RowLevelPlan) -> ChangeSet:
    """A task's work on its files (a ``PortableSnapshot``): matching rows found, survivors of
    rewritten files and updated rows written, new deletion vectors returned as bitmaps."""
    snapshot = files.snapshot()
    context = WriteContext(
        snapshot.store, snapshot, {}, target_file_size=None, schema_mode=None, operation=plan.operation
    )
    change = RowLevelChange(context, snapshot, plan.strategy, plan.threshold, defer_deletion_vectors=True)
    bound = bind_predicate(parse_predicate(plan.predicate), snapshot.schema) if plan.predicate else None
    if plan.operation == "DELETE":
        matched = delete_matching_rows(change, snapshot, snapshot.files, bound)
    else:
        assignments = bind_assignments(snapshot, plan.updates or {})
        matched = update_matching_rows(change, snapshot, snapshot.files, bound, assignments)
    return change.change_set(matched)


def commit_row_level(
    store: ObjectStore, snapshot: Snapshot, plan: RowLevelPlan, sets: list[ChangeSet], *, seconds: float = 0.0
) -> CommitResult:
    """Commit the tasks' work: one deletion-vector file for every new DV, one transaction read at
    ``snapshot`` (the plan's version) with the candidates and the predicate as its read set."""
    if snapshot.version != plan.read_version:
        raise InvalidArgumentError(
            f"commit_row_level needs the snapshot the plan was made at (version {plan.read_version})"
        )
    start = time.perf_counter()
    params = {"predicate": [plan.predicate] if plan.predicate else []}
    context = WriteContext(
        store, snapshot, params, target_file_size=None, schema_mode=None, operation=plan.operation
    )
    change = RowLevelChange(context, snapshot, plan.strategy, plan.threshold)
    bound = bind_predicate(parse_predicate(plan.predicate), snapshot.schema) if plan.predicate else None
    candidates = plan.candidates if plan.candidates is not None else _candidates(snapshot, bound)
    context.txn.read_files(candidates, bound)
    matched = _delete_whole_files(change, candidates) if plan.partition_only else change.absorb(sets)
    change.stage()
    name = "numDeletedRows" if plan.operation == "DELETE" else "numUpdatedRows"
    metrics = {name: matched, **change.file_metrics()}
    metrics |= {"rewriteTimeMs": _ms(start), "executionTimeMs": int(seconds * 1000) + _ms(start)}
    return context.txn.commit_if_needed(metrics)


def update_assignments(
    updates: Mapping[str, str] | None, new_values: Mapping[str, Any] | None, schema: StructType
) -> dict:
    """UPDATE's assignments from ``updates`` (column -> SQL expression) or ``new_values`` (column ->
    Python value, typed as the column), exactly one of them."""
    if updates is not None and new_values is not None:
        raise InvalidArgumentError("pass updates (SQL expressions) or new_values (Python values), not both")
    if updates is None and new_values is None:
        raise InvalidArgumentError("update() needs updates (SQL expressions) or new_values (Python values)")
    given = updates if updates is not None else new_values
    if not isinstance(given, Mapping):
        which = "updates" if updates is not None else "new_values"
        raise InvalidArgumentError(f"{which} must be a mapping of column name to value, got {given!r}")
    if updates is not None:
        bad = {k: v for k, v in updates.items() if not isinstance(v, str | Expr)}
        if bad:
            raise InvalidArgumentError(
                f"updates are SQL expressions (strings); for Python values use new_values: {bad!r}"
            )
        return dict(updates)

    out: dict[str, Any] = {}
    for name, value in new_values.items():
        f = schema.find(name) if isinstance(name, str) else None
        # typed as the column (a value that does not fit stays wider and is refused on write)
        out[name] = Literal(value) if f is None else coerce_literal(value, f.type, f"column {name!r}")
    return out
