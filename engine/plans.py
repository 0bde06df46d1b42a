"""Plans as files: one envelope and one pair of calls for every plan made in one place and carried
out in another (an Airflow operator plans, a Spark job executes).

A plan file is JSON::

    {"format": "deltaplane.optimize-plan", "formatVersion": 1,
     "table": "<the table's root>", "readVersion": 5, ...the plan's own fields}

``save_plan(plan, store)`` writes any plan (``OptimizePlan``: OPTIMIZE's bins;
``RowLevelPlan``: a DELETE/UPDATE's candidate files, strategy and threshold) under the table's
``_deltaplane/<kind>-plans/`` (or at a given location); ``load_plan(kind, uri, location)`` reads
it back bound to the table *at the plan's version*, so commits that land in between change
nothing the executor does: they are rebased over or conflict. A plan for another table, of
another kind or format version, malformed, or naming files that version does not hold is a
``PlanError`` (bad input: retrying will not help).

The files a plan names are taken by path (as the log names them) from that version's live files
(``files_at``): what a plan carries is what to do, never the table's state.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.commands.dml import RowLevelPlan
from deltaplane.engine.commands.optimize import OptimizeBin, OptimizePlan
from deltaplane.engine.errors import InvalidArgumentError, ObjectNotFoundError
from deltaplane.engine.snapshot import Snapshot, load_snapshot
from deltaplane.engine.storage import open_store, resolve_location
from deltaplane.engine.storage.base import ObjectStore


class PlanError(InvalidArgumentError):
    """A plan file that cannot be carried out as it is: not a plan of this kind, for another
    table, malformed, or naming files its version does not hold."""


@dataclass(frozen=True)
class PlanKind:
    """One kind of plan file: its ``format`` name and version, where plans of the table go, what
    to call it in a message, and how its own fields are written and read back."""

    format: str
    version: int
    directory: str  # under the table: an "_" path, hidden from readers and VACUUM
    what: str  # "OPTIMIZE plan"
    article: str  # "an"
    fields: Callable[[Any], dict]
    bind: Callable[[Mapping, Snapshot], Any]


def _optimize_fields(plan: OptimizePlan) -> dict:
    return {
        "targetFileSize": plan.target_file_size,
        "zOrderBy": list(plan.zorder_by),
        **({"clusterBy": list(plan.cluster_by), "isFull": plan.full} if plan.cluster_by else {}),
        "filter": plan.filter,
        "auto": plan.auto,
        "totalConsideredFiles": plan.total_considered_files,
        "totalFilesSkipped": plan.total_files_skipped,
        "bins": [
            {
                "partitionValues": [list(pair) for pair in b.partition_values],
                "paths": list(b.paths),
                "size": b.size,
                "numRecords": b.num_records,
                "deletedRows": b.deleted_rows,
            }
            for b in plan.bins
        ],
    }


def _optimize_bind(doc: Mapping, snapshot: Snapshot) -> OptimizePlan:
    bins = tuple(
        OptimizeBin(
            partition_values=tuple((str(k), v) for k, v in b["partitionValues"]),
            paths=tuple(b["paths"]),
            size=int(b["size"]),
            num_records=int(b["numRecords"]),
            deleted_rows=int(b["deletedRows"]),
        )
        for b in doc["bins"]
    )
    paths = sorted({p for b in bins for p in b.paths})
    return OptimizePlan(
        table_root=snapshot.store.root,
        read_version=snapshot.version,
        target_file_size=int(doc["targetFileSize"]),
        zorder_by=tuple(doc.get("zOrderBy") or ()),
        filter=doc.get("filter"),
        bins=bins,
        total_considered_files=int(doc.get("totalConsideredFiles", len(paths))),
        total_files_skipped=int(doc.get("totalFilesSkipped", 0)),
        auto=bool(doc.get("auto", False)),
        snapshot=snapshot,
        files=files_at(snapshot, paths),
        cluster_by=tuple(doc.get("clusterBy") or ()),
        full=bool(doc.get("isFull", False)),
    )


def _row_level_fields(plan: RowLevelPlan) -> dict:
    paths = plan.candidates.column("path").to_pylist() if plan.candidates is not None else None
    return {
        "operation": plan.operation,
        "predicate": plan.predicate,
        "updates": plan.updates,
        "strategy": plan.strategy,
        "threshold": plan.threshold,
        "partitionOnly": plan.partition_only,
        "candidates": paths,
    }


def _row_level_bind(doc: Mapping, snapshot: Snapshot) -> RowLevelPlan:
    candidates = doc["candidates"]
    return RowLevelPlan(
        operation=doc["operation"],
        predicate=doc["predicate"],
        updates=doc["updates"],
        strategy=str(doc["strategy"]),
        threshold=float(doc["threshold"]),
        read_version=snapshot.version,
        partition_only=bool(doc["partitionOnly"]),
        candidates=None if candidates is None else files_at(snapshot, list(candidates)),
    )


OPTIMIZE_PLAN = PlanKind(
    "deltaplane.optimize-plan",
    1,
    "_deltaplane/optimize-plans",
    "OPTIMIZE plan",
    "an",
    _optimize_fields,
    _optimize_bind,
)
ROW_LEVEL_PLAN = PlanKind(
    "deltaplane.row-level-plan",
    1,
    "_deltaplane/dml-plans",
    "DELETE/UPDATE plan",
    "a",
    _row_level_fields,
    _row_level_bind,
)
_KINDS = {OptimizePlan: OPTIMIZE_PLAN, RowLevelPlan: ROW_LEVEL_PLAN}


def plan_kind(plan: OptimizePlan | RowLevelPlan) -> PlanKind:
    try:
        return _KINDS[type(plan)]
    except KeyError:
        raise InvalidArgumentError(f"not a plan deltaplane writes: {type(plan).__name__}") from None


def plan_to_json(plan: OptimizePlan | RowLevelPlan, table_root: str) -> dict:
    """The plan without its snapshot: the envelope (format, table, version read) and its fields."""
    kind = plan_kind(plan)
    envelope = {"format": kind.format, "formatVersion": kind.version, "table": table_root}
    return {**envelope, "readVersion": plan.read_version, **kind.fields(plan)}


def plan_from_json(
    kind: PlanKind, doc: Any, uri: str, storage_options: Mapping[str, str] | None = None
) -> tuple[Snapshot, Any]:
    """The snapshot at the plan's version and the plan ``doc`` describes, bound to it."""
    if not isinstance(doc, Mapping) or doc.get("format") != kind.format:
        raise PlanError(f'not {kind.article} {kind.what} (no "format": "{kind.format}")')
    if doc.get("formatVersion") != kind.version:
        raise PlanError(f"{kind.what} format version {doc.get('formatVersion')!r} is not supported")
    try:
        snapshot = load_snapshot(open_store(uri, storage_options), int(doc["readVersion"]))
        if snapshot.store.root != doc["table"]:
            raise PlanError(f"the plan was made for {doc['table']}, not {snapshot.store.root}")
        return snapshot, kind.bind(doc, snapshot)
    except (KeyError, TypeError, ValueError) as e:
        raise PlanError(f"malformed {kind.what}: {type(e).__name__}: {e}") from None


def _location(store: ObjectStore, location: str) -> tuple[ObjectStore, str]:
    """The store and key of a plan file: a URI or an absolute path (the table's storage options
    apply under the table), or a path relative to the working directory."""
    if "://" not in location and not location.startswith("/"):
        location = os.path.abspath(location)
    return resolve_location(store, location)


def save_plan(plan: OptimizePlan | RowLevelPlan, store: ObjectStore, location: str | None = None) -> str:
    """Write ``plan`` as JSON: at ``location``, or under the table's plan folder for its kind
    (``store`` is the table's); returns the key written, relative to the store it went to."""
    data = json.dumps(plan_to_json(plan, store.root), indent=1).encode()
    if location is None:
        key = f"{plan_kind(plan).directory}/{plan.read_version:020d}-{uuid.uuid4().hex}.json"
        store.put(key, data, mode="create")
        return key
    target, key = _location(store, location)
    target.put(key, data)
    return key


def load_plan(
    kind: PlanKind, uri: str, location: str, storage_options: Mapping[str, str] | None = None
) -> tuple[Snapshot, Any]:
    """The plan file at ``location`` (as ``save_plan`` wrote it), bound to the table at ``uri``
    at the plan's version: ``(snapshot, plan)``."""
    store, key = _location(open_store(uri, storage_options), location)
    try:
        doc = json.loads(store.get(key))
    except ObjectNotFoundError:
        raise PlanError(f"no {kind.what} at {location}") from None
    except ValueError as e:
        raise PlanError(f"{location} is not JSON: {e}") from None
    return plan_from_json(kind, doc, uri, storage_options)


def files_at(snapshot: Snapshot, paths: list[str]) -> pa.Table:
    """The live files of ``snapshot`` with these paths (as the log names them); a ``PlanError``
    naming one that version does not hold."""
    files = snapshot.files
    chosen = files.filter(pc.is_in(files.column("path"), value_set=pa.array(paths, pa.string())))
    if chosen.num_rows != len(set(paths)):
        held = set(chosen.column("path").to_pylist())
        missing = [p for p in paths if p not in held]
        raise PlanError(
            f"the plan names {len(missing)} file(s) that version {snapshot.version} of "
            f"{snapshot.store.root} does not hold, e.g. {missing[0]}"
        )
    return chosen
