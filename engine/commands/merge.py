"""MERGE: upserts and friends, with Delta Spark's clause semantics, on Arrow joins.

    dt.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
      .when_matched_update({"value": "s.value"}).when_not_matched_insert_all().execute()

How it runs:

1. The merge condition is split into equality conjuncts between a target and a source column (the
   join keys) and a residual; at least one key is required (a merge without one would be a cross
   product, which is refused).
2. Target files that can hold a matching key are chosen by pruning and skipping on the source's
   key values (all files when a "not matched by source" clause needs every target row), and read
   with each row's physical position.
3. An Arrow hash join pairs target and source rows on the keys; the residual, evaluated on the
   pairs, decides the real matches. A target row matched by several source rows is an error, as
   in Delta Spark (unless the only matched clause is an unconditional delete).
4. Clauses are applied in order, first true condition wins: matched rows are updated or deleted,
   unmatched source rows inserted, target rows unmatched by the source updated or deleted.
   Expressions see the target row as ``t.*`` and the source row as ``s.*`` (struct columns), and
   unqualified names resolve to whichever side has them.
5. Changed target rows leave their files through deletion vectors or rewrites (as DELETE and
   UPDATE do); updated and inserted rows go to new files; CDF rows are written when enabled.
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
from deltaplane.engine.commands.context import WriteContext
from deltaplane.engine.commands.dml import (
    RowLevelChange,
    _ms,
    assigned_value,
    choose_strategy,
    rewrite_threshold,
)
from deltaplane.engine.delta_rs import Refused, delta_rs_names
from deltaplane.engine.enforcement import conform_table
from deltaplane.engine.errors import DeltaError, InvalidPredicateError, SchemaMismatchError
from deltaplane.engine.expressions.arrow import evaluate
from deltaplane.engine.expressions.bind import bind, require_condition
from deltaplane.engine.expressions.parser import parse_expression, parse_predicate
from deltaplane.engine.expressions.tree import (
    And,
    Column,
    Comparison,
    Expr,
    In,
    Literal,
    columns,
    conjuncts,
    transform,
)
from deltaplane.engine.inputs import as_reader, delta_schema
from deltaplane.engine.scan import Scan, file_keep_mask
from deltaplane.engine.schema import DataType, StructField, StructType, to_arrow_type
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.transaction import (
    CommitResult,
    check_commit_metadata,
    commit_metadata_scope,
    rerun_past_rearrangements,
)

MAX_IN_LIST = 1000  # above this many distinct source keys, pruning uses their range


class MergeError(DeltaError):
    """A MERGE that cannot be run as written (ambiguous names, duplicate matches, ...)."""


@dataclass
class _Clause:
    kind: str  # "matched", "not_matched", "not_matched_by_source"
    action: str  # "update", "update_all", "delete", "insert", "insert_all"
    predicate: str | Expr | None = None
    updates: dict[str, str] = field(default_factory=dict)


class MergeBuilder:
    """Collects clauses; ``execute()`` runs the merge as one commit."""

    def __init__(
        self,
        table,
        source: Any,
        predicate: str,
        *,
        source_alias: str = "source",
        target_alias: str = "target",
        strategy: str | None = None,
        rewrite_threshold: float | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ):
        self._table = table
        self._commit_metadata = check_commit_metadata(commit_metadata)
        # Any source a write takes, in the same Arrow layout (one normalisation: deltaplane.engine.inputs).
        self._source = as_reader(source, table.snapshot.schema).read_all()
        self._predicate = predicate
        self._source_alias = source_alias
        self._target_alias = target_alias
        self._strategy = strategy
        self._threshold = rewrite_threshold
        self._clauses: list[_Clause] = []

    def _add(self, kind: str, action: str, predicate=None, updates=None) -> MergeBuilder:
        self._clauses.append(_Clause(kind, action, predicate, dict(updates or {})))
        return self

    def when_matched_update(self, updates: dict[str, str], predicate: str | None = None) -> MergeBuilder:
        return self._add("matched", "update", predicate, updates)

    @delta_rs_names(
        except_cols=Refused(
            "name the columns to set instead: when_matched_update({'col': 'source.col', ...})"
        )
    )
    def when_matched_update_all(self, predicate: str | None = None) -> MergeBuilder:
        return self._add("matched", "update_all", predicate)

    def when_matched_delete(self, predicate: str | None = None) -> MergeBuilder:
        return self._add("matched", "delete", predicate)

    def when_not_matched_insert(self, updates: dict[str, str], predicate: str | None = None) -> MergeBuilder:
        return self._add("not_matched", "insert", predicate, updates)

    @delta_rs_names(
        except_cols=Refused(
            "name the columns to insert instead: when_not_matched_insert({'col': 'source.col', ...})"
        )
    )
    def when_not_matched_insert_all(self, predicate: str | None = None) -> MergeBuilder:
        return self._add("not_matched", "insert_all", predicate)

    def when_not_matched_by_source_update(
        self, updates: dict[str, str], predicate: str | None = None
    ) -> MergeBuilder:
        return self._add("not_matched_by_source", "update", predicate, updates)

    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> MergeBuilder:
        return self._add("not_matched_by_source", "delete", predicate)

    def execute(self, *, commit_metadata: Mapping[str, Any] | None = None) -> CommitResult:
        """Run the merge as one commit (none when it changes nothing: ``result.committed`` is
        false); ``commit_metadata`` adds to the one given to ``merge()``."""
        if not self._clauses:
            raise MergeError("MERGE needs at least one WHEN clause")
        with commit_metadata_scope({**self._commit_metadata, **check_commit_metadata(commit_metadata)}):
            result, read = rerun_past_rearrangements(
                lambda read: execute_merge(
                    self._table._store,
                    read,
                    self._source,
                    self._predicate,
                    self._clauses,
                    source_alias=self._source_alias,
                    target_alias=self._target_alias,
                    strategy=self._strategy,
                    threshold=self._threshold,
                ),
                self._table._latest_for_write(),
            )
            self._table._after_commit(result, read=read)
        return result


# --- execution -------------------------------------------------------------------------------------


class _Scope:
    """Name resolution for merge expressions: ``t.x``, ``s.x`` or an unambiguous ``x``."""

    def __init__(self, target: StructType, source: StructType, target_alias: str, source_alias: str):
        if target_alias.lower() == source_alias.lower():
            raise MergeError(f"the source and target aliases must differ (both {target_alias!r})")
        self.target, self.source = target, source
        self.t, self.s = target_alias, source_alias
        self.schema = StructType((StructField(target_alias, target), StructField(source_alias, source)))

    def qualify(self, expr: Expr, what: str) -> Expr:
        def fix(node: Expr) -> Expr:
            if not isinstance(node, Column):
                return node
            head = node.path[0].lower()
            if head in (self.t.lower(), self.s.lower()) and len(node.path) > 1:
                return node
            in_t, in_s = self.target.find(node.path[0]), self.source.find(node.path[0])
            if in_t is not None and in_s is not None:
                raise MergeError(
                    f"column {node.name!r} in {what} is ambiguous: qualify it as {self.t}.{node.name} "
                    f"or {self.s}.{node.name}"
                )
            if in_t is None and in_s is None:
                raise InvalidPredicateError(f"unknown column {node.name!r} in {what}")
            return Column(((self.t if in_t is not None else self.s), *node.path))

        return bind(transform(expr, fix), self.schema)


def _join_keys(condition: Expr, scope: _Scope) -> tuple[list[tuple[str, str]], list[Expr]]:
    keys, residual = [], []
    for part in conjuncts(condition):
        if (
            isinstance(part, Comparison)
            and part.op == "="
            and isinstance(part.left, Column)
            and isinstance(part.right, Column)
            and len(part.left.path) == 2
            and len(part.right.path) == 2
        ):
            sides = {part.left.path[0]: part.left.path[1], part.right.path[0]: part.right.path[1]}
            if set(sides) == {scope.t, scope.s}:
                keys.append((sides[scope.t], sides[scope.s]))
                continue
        residual.append(part)
    return keys, residual


def _target_pruning(keys, residual, scope: _Scope, source: pa.Table) -> Expr | None:
    """A predicate on the target alone that every matching target row satisfies."""
    parts: list[Expr] = []
    for t_name, s_name in keys:
        values = pc.unique(source.column(s_name).drop_null())
        dtype = scope.target[t_name].type
        col = Column((t_name,), dtype)
        if len(values) == 0:
            return Literal(False)
        try:
            values = values.cast(to_arrow_type(dtype))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # Some source keys do not fit the target's narrower type (an int64 pandas column
            # against an int column): they match nothing, but pruning on this key is skipped
            # rather than filtering them out one type at a time.
            continue
        if len(values) <= MAX_IN_LIST:
            literals = tuple(Literal(v, dtype) for v in values.to_pylist())
            parts.append(In(col, literals))
        else:
            bounds = pc.min_max(values).as_py()
            parts.append(Comparison(">=", col, Literal(bounds["min"], dtype)))
            parts.append(Comparison("<=", col, Literal(bounds["max"], dtype)))
    for part in residual:  # residual conjuncts about the target alone prune too
        if all(c.path[0] == scope.t for c in columns(part)):
            parts.append(
                transform(part, lambda n: Column(n.path[1:], n.dtype) if isinstance(n, Column) else n)
            )
    return parts[0] if len(parts) == 1 else And(tuple(parts)) if parts else None


def _struct(table: pa.Table, schema: StructType) -> pa.StructArray:
    arrays = [
        table.column(f.name).combine_chunks() if table.num_rows else pa.array([], to_arrow_type(f.type))
        for f in schema.fields
    ]
    return pa.StructArray.from_arrays(
        arrays, fields=[pa.field(f.name, to_arrow_type(f.type)) for f in schema.fields]
    )


def _pairs(target_rows: pa.Table, source: pa.Table, scope: _Scope) -> pa.Table:
    """A table with struct columns ``t`` and ``s`` (either may be null) for clause evaluation."""
    t = _struct(target_rows, scope.target) if target_rows is not None else None
    s = _struct(source, scope.source) if source is not None else None
    n = len(t) if t is not None else len(s)
    if t is None:
        t = pa.nulls(n, to_arrow_type(scope.target))
    if s is None:
        s = pa.nulls(n, to_arrow_type(scope.source))
    return pa.table({scope.t: t, scope.s: s})


def execute_merge(
    store: ObjectStore,
    snapshot: Snapshot,
    source: pa.Table,
    condition: str,
    clauses: list[_Clause],
    *,
    source_alias: str,
    target_alias: str,
    strategy: str | None,
    threshold: float | None,
) -> CommitResult:
    """MERGE: plan (join keys, compiled clauses, candidate files), join, apply the clauses to the
    matched, unmatched-source and unmatched-target rows, write and commit the changed files."""
    start = time.perf_counter()
    scope = _Scope(snapshot.schema, delta_schema(source.schema), target_alias, source_alias)
    bound_condition = require_condition(scope.qualify(parse_predicate(condition), "the merge condition"))
    keys, residual = _join_keys(bound_condition, scope)
    if not keys:
        raise MergeError(
            f"the merge condition {condition!r} has no equality between a target and a source column; "
            "deltaplane needs one to join on"
        )
    compiled = _compile(clauses, scope, snapshot)
    context = WriteContext(
        store,
        snapshot,
        _merge_parameters(condition, clauses),
        target_file_size=None,
        schema_mode=None,
        operation="MERGE",
    )
    for clause, _, assignments in compiled:
        if clause.action in ("update", "update_all"):
            context.values.check_update(assignments)  # identity columns cannot be updated
    change = RowLevelChange(
        context, snapshot, choose_strategy(snapshot, strategy), rewrite_threshold(snapshot, threshold)
    )
    needs_all_targets = any(c.kind == "not_matched_by_source" for c, _, _ in compiled)
    pruning = None if needs_all_targets else _target_pruning(keys, residual, scope, source)
    files, pruning = _candidate_files(store, snapshot, pruning)
    context.txn.read_files(files, pruning)

    scan_start = time.perf_counter()
    joined = _join(store, snapshot, files, source, keys, residual, scope)
    scan_ms = _ms(scan_start)
    _check_single_match(joined.tid, [c for c in compiled if c[0].kind == "matched"])

    where = f"the MERGE source and the target rows of {store.root}"
    applied = _Clauses(
        compiled, scope, snapshot.schema, context, change, joined.lineage, where, source.num_rows
    )
    tid = joined.tid.to_numpy() if len(joined.tid) else np.empty(0, np.int64)
    applied.apply("matched", joined.pairs, tid)
    unmatched_source = np.ones(source.num_rows, dtype=bool)
    unmatched_source[joined.sid.to_numpy() if len(joined.sid) else []] = False
    if unmatched_source.any():
        applied.apply("not_matched", _pairs(None, source.filter(pa.array(unmatched_source)), scope), None)
    if needs_all_targets:
        unmatched_target = np.ones(joined.target.num_rows, dtype=bool)
        unmatched_target[tid] = False
        ids = np.flatnonzero(unmatched_target)
        if len(ids):
            applied.apply(
                "not_matched_by_source", _pairs(joined.target.take(pa.array(ids)), None, scope), ids
            )

    rewrite_start = time.perf_counter()
    file_list = files.to_pylist()
    touched = applied.touched(joined.target.num_rows)
    for i, rows in enumerate(joined.file_rows):
        mask = touched[joined.offsets[i] : joined.offsets[i + 1]]
        if mask.any():
            change.delete_rows(file_list[i], rows, mask)
    for table, lineage in zip(applied.new_rows, applied.new_lineage, strict=True):
        change.add_rows(table, lineage)
    change.stage()
    metrics = applied.metrics | _change_metrics(change.counters, applied.new_rows)
    metrics |= {"scanTimeMs": scan_ms, "rewriteTimeMs": _ms(rewrite_start), "executionTimeMs": _ms(start)}
    return context.txn.commit_if_needed(metrics)


def _candidate_files(
    store: ObjectStore, snapshot: Snapshot, pruning: Expr | None
) -> tuple[pa.Table, Expr | None]:
    """The target files whose statistics may hold a row the source's keys match (all of them
    when a clause needs the unmatched target rows: ``pruning`` is then ``None``), and the pruning
    predicate bound to the table's schema (what the transaction records it read)."""
    if pruning is None:
        return snapshot.files, None
    bound = bind(pruning, snapshot.schema)
    files = snapshot.files
    if not files.num_rows:
        return files, bound
    return files.filter(file_keep_mask(files, bound, snapshot.schema, snapshot.metadata, store.root)), bound


def _merge_parameters(condition: str, clauses: list[_Clause]) -> dict[str, Any]:
    """The commit's operationParameters, as Delta Spark writes them for a MERGE."""
    return {
        "predicate": condition,
        "matchedPredicates": [{"actionType": c.action} for c in clauses if c.kind == "matched"],
        "notMatchedPredicates": [{"actionType": c.action} for c in clauses if c.kind == "not_matched"],
        "notMatchedBySourcePredicates": [
            {"actionType": c.action} for c in clauses if c.kind == "not_matched_by_source"
        ],
    }


@dataclass
class _Joined:
    """The candidate target rows (with the file each came from) joined with the source: ``tid`` and
    ``sid`` are the matched pairs' row numbers on each side, ``pairs`` their rows side by side."""

    file_rows: list
    offsets: np.ndarray
    target: pa.Table
    lineage: pa.Table | None
    tid: pa.Array
    sid: pa.Array
    pairs: pa.Table


def _join(
    store, snapshot: Snapshot, files: pa.Table, source: pa.Table, keys, residual, scope: _Scope
) -> _Joined:
    """Read the candidate target rows, remembering where each came from, and hash-join them with
    the source on the condition's equalities; the rest of the condition filters the pairs."""
    file_rows = [rows for _, rows in Scan(snapshot, None, None, files=files).read_files_with_positions()]
    offsets = np.cumsum([0] + [r.table.num_rows for r in file_rows])
    target = (
        pa.concat_tables([r.table for r in file_rows]) if file_rows else target_schema_empty(snapshot.schema)
    )
    tracked = [r.lineage for r in file_rows if r.lineage is not None]  # row tracking: stable ids
    lineage = pa.concat_tables(tracked) if tracked else None
    left_keys, right_keys = _join_columns(keys, target, source, scope)
    left = pa.table(
        {
            **{f"__t{i}": c for i, c in enumerate(left_keys)},
            "__tid": pa.array(np.arange(target.num_rows), pa.int64()),
        }
    )
    right = pa.table(
        {
            **{f"__s{i}": c for i, c in enumerate(right_keys)},
            "__sid": pa.array(np.arange(source.num_rows), pa.int64()),
        }
    )
    joined = left.join(
        right,
        keys=[f"__t{i}" for i in range(len(keys))],
        right_keys=[f"__s{i}" for i in range(len(keys))],
        join_type="inner",
    )
    tid = joined.column("__tid").combine_chunks() if joined.num_rows else pa.array([], pa.int64())
    sid = joined.column("__sid").combine_chunks() if joined.num_rows else pa.array([], pa.int64())
    pairs = _pairs(target.take(tid), source.take(sid), scope)
    if residual and pairs.num_rows:
        where = f"the MERGE source and the target rows of {store.root}"
        keep = pc.fill_null(
            evaluate(pairs, And(tuple(residual)) if len(residual) > 1 else residual[0], where), False
        )
        tid, sid, pairs = tid.filter(keep), sid.filter(keep), pairs.filter(keep)
    return _Joined(file_rows, offsets, target, lineage, tid, sid, pairs)


class _Clauses:
    """The compiled WHEN clauses applied to rows: each row takes the first clause whose condition
    holds, in order; deleted and updated target rows are marked to leave their files, updated and
    inserted rows collected with their lineage, Delta Spark's row counters kept."""

    def __init__(
        self, compiled, scope: _Scope, schema, context, change, target_lineage, where: str, source_rows: int
    ):
        self.compiled, self.scope, self.schema, self.context, self.change = (
            compiled,
            scope,
            schema,
            context,
            change,
        )
        self.target_lineage, self.where = target_lineage, where
        self.touched_ids: list[np.ndarray] = []  # target rows that leave their file
        self.new_rows: list[pa.Table] = []
        self.new_lineage: list[pa.Table | None] = []  # updated rows keep their row ids
        self.metrics = {
            "numSourceRows": source_rows,
            "numTargetRowsInserted": 0,
            "numTargetRowsUpdated": 0,
            "numTargetRowsMatchedUpdated": 0,
            "numTargetRowsNotMatchedBySourceUpdated": 0,
            "numTargetRowsDeleted": 0,
            "numTargetRowsMatchedDeleted": 0,
            "numTargetRowsNotMatchedBySourceDeleted": 0,
        }

    def touched(self, target_rows: int) -> np.ndarray:
        mask = np.zeros(target_rows, dtype=bool)
        for ids in self.touched_ids:
            mask[ids] = True
        return mask

    def apply(self, kind: str, rows: pa.Table, ids: np.ndarray | None) -> None:
        pending = np.ones(rows.num_rows, dtype=bool)
        for clause, cond, assignments in self.compiled:
            if clause.kind != kind or not pending.any():
                continue
            hit = pending.copy()
            if cond is not None:
                hit &= pc.fill_null(evaluate(rows, cond, self.where), False).to_numpy(zero_copy_only=False)
            if not hit.any():
                continue
            pending &= ~hit
            chosen = rows.filter(pa.array(hit))
            which = "Matched" if kind == "matched" else "NotMatchedBySource"
            if clause.action == "delete":
                self._delete(chosen, ids[hit], which)
            elif clause.action in ("update", "update_all"):
                self._update(chosen, ids[hit], assignments, which)
            else:  # insert / insert_all
                self._insert(chosen, assignments)

    def _delete(self, chosen: pa.Table, ids: np.ndarray, which: str) -> None:
        self.touched_ids.append(ids)
        self.change.record_change(_side(chosen, self.scope.t), "delete")
        self.metrics["numTargetRowsDeleted"] += chosen.num_rows
        self.metrics[f"numTargetRows{which}Deleted"] += chosen.num_rows

    def _update(self, chosen: pa.Table, ids: np.ndarray, assignments, which: str) -> None:
        self.touched_ids.append(ids)
        before = _side(chosen, self.scope.t)
        after = _assign(chosen, before, assignments, self.schema, self.where)
        after = self.context.values.update(after, assignments)  # generated columns follow
        self.new_rows.append(after)
        self.new_lineage.append(row_tracking.updated(row_tracking.take(self.target_lineage, ids)))
        self.change.record_change(before, "update_preimage")
        self.change.record_change(after, "update_postimage")
        self.metrics["numTargetRowsUpdated"] += chosen.num_rows
        self.metrics[f"numTargetRows{which}Updated"] += chosen.num_rows

    def _insert(self, chosen: pa.Table, assignments) -> None:
        inserted = _assign(chosen, None, assignments, self.schema, self.where)
        # Columns the clause does not set get the table's values (generated, default, identity)
        # rather than nulls.
        values = self.context.values
        keep = [n for n in inserted.column_names if n in assignments or not values.computes(n)]
        inserted = values.insert(inserted.select(keep))
        self.new_rows.append(inserted)
        self.new_lineage.append(None)
        self.change.record_change(inserted, "insert")
        self.metrics["numTargetRowsInserted"] += chosen.num_rows


def _change_metrics(c, new_rows: list[pa.Table]) -> dict[str, int]:
    """Delta Spark's file and byte counters of a MERGE, from what the change wrote."""
    return {
        "numTargetRowsCopied": c.copied_rows,
        "numOutputRows": c.copied_rows + sum(t.num_rows for t in new_rows),
        "numTargetFilesAdded": c.added_files,
        "numTargetFilesRemoved": c.removed_files,
        "numTargetChangeFilesAdded": c.change_files,
        "numTargetDeletionVectorsAdded": c.dvs_added,
        "numTargetDeletionVectorsRemoved": c.dvs_removed,
        "numTargetDeletionVectorsUpdated": c.dvs_updated,
        "numTargetBytesAdded": c.added_bytes,
        "numTargetBytesRemoved": c.removed_bytes,
    }


def _join_columns(keys, target: pa.Table, source: pa.Table, scope: _Scope):
    """The key columns of both sides in one type per key, so the hash join can compare them.

    Both sides are already in the engine's Arrow layout; keys of different Delta types are
    compared in the wider one when one side widens to the other without loss (by the rules
    writes use: an int source key against a long target key, or the reverse). Anything else
    cannot be compared and is a ``SchemaMismatchError`` naming both columns.
    """
    left, right = [], []
    for t_name, s_name in keys:
        t_col, s_col = target.column(t_name), source.column(s_name)
        t_type, s_type = scope.target[t_name].type, scope.source[s_name].type
        if t_type != s_type:
            widened = _widen(s_col, s_name, t_type)
            if widened is not None:
                s_col = widened
            else:
                t_col = _widen(t_col, t_name, s_type)
                if t_col is None:
                    raise SchemaMismatchError(
                        f"the merge condition compares {scope.t}.{t_name} ({_type_name(t_type)}) with "
                        f"{scope.s}.{s_name} ({_type_name(s_type)}): column {s_name!r} of the source "
                        "cannot be compared with the target's column"
                    )
        left.append(t_col)
        right.append(s_col)
    return left, right


def _widen(column: pa.ChunkedArray, name: str, to: DataType) -> pa.ChunkedArray | None:
    """``column`` as Delta type ``to`` if the write path would take it without loss, else None."""
    try:
        one = conform_table(pa.table({name: column}), StructType((StructField(name, to),)))
    except SchemaMismatchError:
        return None
    return one.column(0)


def _type_name(t: DataType) -> str:
    text = t.to_json()
    return text if isinstance(text, str) else json.dumps(text)


def target_schema_empty(schema: StructType) -> pa.Table:
    from deltaplane.engine.schema import to_arrow_schema

    return to_arrow_schema(schema).empty_table()


def _side(pairs: pa.Table, alias: str) -> pa.Table:
    """The rows of one side of ``pairs`` as a flat table."""
    column = pairs.column(alias).combine_chunks()
    return pa.Table.from_arrays(
        column.flatten(), names=[column.type.field(i).name for i in range(column.type.num_fields)]
    )


def _assign(
    pairs: pa.Table, base: pa.Table | None, assignments: dict[str, Expr], schema: StructType, where: str
) -> pa.Table:
    """Target rows: each assigned column from its expression, the others from ``base`` (or null)."""
    out = []
    n = pairs.num_rows
    for f in schema.fields:
        if f.name in assignments:
            value = evaluate(pairs, assignments[f.name], where)
            out.append(assigned_value(value, f, where, assignments[f.name]))
        elif base is not None:
            out.append(base.column(f.name))
        else:
            out.append(pa.nulls(n, to_arrow_type(f.type)))
    return pa.Table.from_arrays(out, names=[f.name for f in schema.fields])


def _compile(clauses: list[_Clause], scope: _Scope, snapshot: Snapshot):
    compiled = []
    for clause in clauses:
        where = f"the {clause.kind.replace('_', ' ')} {clause.action} clause"
        cond = None
        if clause.predicate is not None:
            expr = (
                parse_predicate(clause.predicate) if isinstance(clause.predicate, str) else clause.predicate
            )
            cond = require_condition(scope.qualify(expr, where))
        assignments: dict[str, Expr] = {}
        if clause.action in ("update_all", "insert_all"):
            for f in scope.target.fields:
                s = scope.source.find(f.name)
                if s is None:
                    if clause.action == "update_all":
                        raise MergeError(f"{where}: the source has no column {f.name!r} to set it from")
                    continue
                assignments[f.name] = bind(Column((scope.s, s.name)), scope.schema)
        for name, value in clause.updates.items():
            f = scope.target.find(
                name.split(".", 1)[-1] if name.lower().startswith(scope.t.lower() + ".") else name
            )
            if f is None:
                raise InvalidPredicateError(f"{where}: unknown target column {name!r}")
            expr = parse_expression(value) if isinstance(value, str) else value
            assignments[f.name] = scope.qualify(expr, where)
        missing_side = {"not_matched": scope.t, "not_matched_by_source": scope.s}.get(clause.kind)
        used = {c.path[0] for e in [cond, *assignments.values()] if e is not None for c in columns(e)}
        if missing_side in used:
            what = "target" if missing_side == scope.t else "source"
            raise MergeError(f"{where} cannot use {what} columns: there is no {what} row")
        compiled.append((clause, cond, assignments))
    return compiled


def _check_single_match(tid: pa.Array, matched_clauses) -> None:
    if len(tid) == 0 or not matched_clauses:
        return
    unique = pc.count_distinct(tid).as_py()
    if unique == len(tid):
        return
    only_unconditional_delete = (
        len(matched_clauses) == 1
        and matched_clauses[0][0].action == "delete"
        and (matched_clauses[0][1] is None)
    )
    if not only_unconditional_delete:
        raise MergeError(
            f"MERGE matched {len(tid) - unique} target row(s) with more than one source row; a target "
            "row may be updated or deleted by at most one source row (deduplicate the source)"
        )
