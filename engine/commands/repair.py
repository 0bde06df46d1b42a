"""REPAIR (Delta Spark's ``FSCK REPAIR TABLE``): drop log entries for data files that are gone.

A data file deleted outside Delta (by hand, a lifecycle rule, a bad sync) makes every read of the
latest version fail. Repair finds the live files whose bytes are missing (one ``head`` each, in
parallel) and commits ``remove`` actions for them, so the table reads again without those rows.
It never deletes anything. A file whose deletion vector file is missing is unreadable too, but
removing it would also drop its rows that were never deleted, so it is reported and removed only
when asked (``include_missing_deletion_vectors``).

``plan_repair`` (list only; a dry run returns its plan) then ``execute_repair`` (one ``FSCK``
commit with Delta Spark's ``numMissingFiles``-style metrics).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.commands.context import WriteContext
from deltaplane.engine.deletion_vectors import dv_file_key
from deltaplane.engine.log.replay import canonical_paths
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage import missing_objects
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.transaction import CommitResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepairPlan:
    """Live files whose data file (or deletion-vector file) is missing."""

    table_root: str
    read_version: int
    missing_files: tuple[str, ...]  # log paths of live files whose data file is gone
    missing_deletion_vectors: tuple[str, ...]  # log paths of live files whose DV file is gone
    include_missing_deletion_vectors: bool = False
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)

    @property
    def files_to_remove(self) -> tuple[str, ...]:
        extra = self.missing_deletion_vectors if self.include_missing_deletion_vectors else ()
        return tuple(dict.fromkeys((*self.missing_files, *extra)))

    def describe(self) -> dict[str, Any]:
        return {
            "table": self.table_root,
            "readVersion": self.read_version,
            "numMissingFiles": len(self.missing_files),
            "numMissingDeletionVectors": len(self.missing_deletion_vectors),
            "numFilesToRemove": len(self.files_to_remove),
            "missingFiles": list(self.missing_files),
            "missingDeletionVectors": list(self.missing_deletion_vectors),
        }


def plan_repair(
    store: ObjectStore, snapshot: Snapshot, *, include_missing_deletion_vectors: bool = False
) -> RepairPlan:
    files = snapshot.files
    started = time.monotonic()
    root = store.root
    paths = files.column("path").to_pylist()
    keys = canonical_paths(files.column("path"), root).to_pylist()
    gone_keys = set(missing_objects(store, keys))
    missing = tuple(p for p, k in zip(paths, keys, strict=True) if k in gone_keys)
    dv_of: dict[str, list[str]] = {}
    for path, dv in zip(paths, files.column("deletion_vector").to_pylist(), strict=True):
        if dv and dv.get("storageType") in ("u", "p"):
            descriptor = DeletionVectorDescriptor.from_json({k: v for k, v in dv.items() if v is not None})
            dv_of.setdefault(dv_file_key(descriptor), []).append(path)
    gone_dvs = set(missing_objects(store, list(dv_of))) if dv_of else set()
    missing_dvs = tuple(sorted(p for key in gone_dvs for p in dv_of[key] if p not in set(missing)))
    log.info(
        "repair of %s: checked %d files and %d deletion vector files in %.1fs; %d and %d missing",
        root,
        len(keys),
        len(dv_of),
        time.monotonic() - started,
        len(missing),
        len(missing_dvs),
    )
    return RepairPlan(
        table_root=root,
        read_version=snapshot.version,
        missing_files=missing,
        missing_deletion_vectors=missing_dvs,
        include_missing_deletion_vectors=include_missing_deletion_vectors,
        snapshot=snapshot,
    )


def execute_repair(store: ObjectStore, plan: RepairPlan) -> CommitResult:
    """One FSCK commit removing the planned files; nothing to do commits nothing (``skipped``)."""
    snapshot = plan.snapshot
    assert snapshot is not None
    targets = plan.files_to_remove
    if not targets:
        return CommitResult(snapshot.version, "FSCK", {"numMissingFiles": "0"}, skipped=True)
    params = {"numMissingFiles": len(plan.missing_files)}
    write = WriteContext(store, snapshot, params, target_file_size=None, schema_mode=None, operation="FSCK")
    files = snapshot.files.filter(pc.is_in(snapshot.files.column("path"), value_set=pa.array(targets)))
    write.txn.read_exact_files(files)
    removed_bytes = write.remove_files(files)
    return write.txn.commit(
        {
            "numMissingFiles": len(plan.missing_files),
            "numMissingDeletionVectors": len(plan.missing_deletion_vectors),
            "numRemovedFiles": files.num_rows,
            "numRemovedBytes": removed_bytes,
        }
    )
