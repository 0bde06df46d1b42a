"""When to compact: a pure policy over table health, and the opt-in post-commit auto-compaction.

The policy starts from Delta Spark's auto-compaction defaults: a partition is worth compacting
once it holds at least 50 files smaller than 128 MB; it also asks for a rewrite when deletion
vectors hide more than a fifth of a partition's rows (reads decode them for nothing). The
decision names the partitions, so a scheduled job (or the Airflow operator) compacts only those,
and it carries its reasons for the ops view.

``delta.autoOptimize.autoCompact`` (``true``/``auto``/``legacy``) turns on the same policy right
after each write, for the partitions that write touched, as Delta Spark does. An auto-compaction
never fails the write that triggered it: a conflict or error is logged and the next write tries
again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc

from deltaplane.engine.commands.optimize import OptimizeMetrics, execute_optimize, plan_optimize
from deltaplane.engine.errors import DeltaError
from deltaplane.engine.health import DEFAULT_SMALL_FILE_SIZE, TableHealth, partition_names, table_health
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage.base import ObjectStore

log = logging.getLogger(__name__)

AUTO_COMPACT_PROPERTY = "delta.autoOptimize.autoCompact"
AUTO_COMPACT_ON = ("true", "auto", "legacy")
MIN_NUM_FILES_PROPERTY = "deltaplane.autoCompact.minNumFiles"
MAX_FILE_SIZE_PROPERTY = "deltaplane.autoCompact.maxFileSize"


@dataclass(frozen=True)
class AutoOptimizePolicy:
    min_num_small_files: int = 50  # Delta Spark's autoCompact.minNumFiles
    small_file_size: int = DEFAULT_SMALL_FILE_SIZE  # and its autoCompact.maxFileSize
    max_deleted_rows_ratio: float = 0.2

    @classmethod
    def for_table(cls, snapshot: Snapshot) -> AutoOptimizePolicy:
        """Defaults, overridden by the table's ``deltaplane.autoCompact.*`` properties."""
        config = snapshot.metadata.configuration
        try:
            return cls(
                min_num_small_files=int(config.get(MIN_NUM_FILES_PROPERTY, cls.min_num_small_files)),
                small_file_size=int(config.get(MAX_FILE_SIZE_PROPERTY, cls.small_file_size)),
            )
        except ValueError as e:
            raise DeltaError(f"bad auto-compaction property on {snapshot.store.root}: {e}") from e


@dataclass(frozen=True)
class AutoOptimizeDecision:
    compact: bool
    partitions: tuple[dict[str, str | None], ...]  # physical name -> serialized value
    partition_names: tuple[str, ...]  # the same, Hive-style, for people
    reasons: tuple[str, ...]
    target_file_size: int
    min_num_files: int = 2
    purge: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "compact": self.compact,
            "partitions": [dict(p) for p in self.partitions],
            "partition_names": list(self.partition_names),
            "reasons": list(self.reasons),
            "target_file_size": self.target_file_size,
            "purge": self.purge,
        }


def decide_auto_optimize(
    health: TableHealth, policy: AutoOptimizePolicy | None = None, *, only: set[str] | None = None
) -> AutoOptimizeDecision:
    """Which partitions to compact, and why; ``only`` restricts it to these partition names."""
    policy = policy or AutoOptimizePolicy()
    chosen, names, reasons = [], [], []
    purge = False
    for p in health.partitions:
        if only is not None and p.partition not in only:
            continue
        label = p.partition or "(table)"
        why = []
        if p.num_small_files >= policy.min_num_small_files:
            why.append(
                f"{label}: {p.num_small_files} files under {policy.small_file_size >> 20} MiB "
                f"(threshold {policy.min_num_small_files})"
            )
        if p.deleted_rows_ratio > policy.max_deleted_rows_ratio:
            purge = True
            why.append(
                f"{label}: deletion vectors hide {p.deleted_rows_ratio:.0%} of rows "
                f"(threshold {policy.max_deleted_rows_ratio:.0%})"
            )
        if why:
            chosen.append(dict(p.values))
            names.append(p.partition)
            reasons.extend(why)
    return AutoOptimizeDecision(
        compact=bool(chosen),
        partitions=tuple(chosen),
        partition_names=tuple(names),
        reasons=tuple(reasons),
        target_file_size=policy.small_file_size,
        purge=purge,
    )


def auto_compact_enabled(snapshot: Snapshot) -> bool:
    value = snapshot.metadata.configuration.get(AUTO_COMPACT_PROPERTY, "false").strip().lower()
    return value in AUTO_COMPACT_ON


def auto_compact_after_commit(store: ObjectStore, snapshot: Snapshot) -> OptimizeMetrics | None:
    """Compact the partitions the commit at ``snapshot.version`` touched, if the policy says so.

    Returns the OPTIMIZE metrics, or ``None`` when disabled, not needed, or failed (logged).
    """
    if not auto_compact_enabled(snapshot):
        return None
    try:
        files = snapshot.files
        touched = files.filter(pc.equal(files.column("version"), snapshot.version))
        if touched.num_rows == 0:
            return None
        health = table_health(snapshot, include_history=False)
        names = partition_names(snapshot, touched)
        policy = AutoOptimizePolicy.for_table(snapshot)
        decision = decide_auto_optimize(health, policy, only=names)
        if not decision.compact:
            return None
        log.info("auto-compaction of %s: %s", store.root, "; ".join(decision.reasons))
        plan = plan_optimize(
            snapshot,
            target_file_size=decision.target_file_size,
            partitions=list(decision.partitions),
            purge=decision.purge,
            auto=True,
        )
        return execute_optimize(store, plan)
    except DeltaError as e:
        log.warning("auto-compaction of %s skipped: %s", store.root, e)
        return None
