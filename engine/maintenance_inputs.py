"""What the maintenance planner decides one table on, read from the table in one place.

The plan task, the ops view, the health trigger and ``deltaplane maintenance plan`` all decide
with ``maintenance_plan.decide`` on the same inputs: the table's health, its removed files not yet
vacuumed, how far its symlink manifests are behind, and what its rewrites of the day spent. Each
used to gather them on its own; ``look`` reads them once, from a snapshot (one look at the
table, Arrow over its files) or from a ``HealthTracker`` kept current commit by commit, reading
only what the policy needs (the manifests only when it plans them, the day's history only when it
has a budget), and ``plan_table`` turns them into the table's decisions in the kinds' order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltaplane.engine.commands.manifest import ManifestLag, manifest_lag
from deltaplane.engine.health import (
    DAY_MS,
    Spending,
    TableHealth,
    maintenance_spending,
    removed_files,
    table_health,
)
from deltaplane.engine.maintenance_plan import (
    KINDS,
    Decision,
    MaintenancePolicy,
    decide,
    rank,
    yield_to_writers,
)

if TYPE_CHECKING:
    from deltaplane.engine.health_tracker import HealthTracker
    from deltaplane.engine.snapshot import Snapshot
    from deltaplane.engine.storage.base import ObjectStore


@dataclass(frozen=True)
class TableLook:
    """One table as the planner sees it at ``now_ms``."""

    health: TableHealth
    removed: dict[str, Any] | None
    manifest: ManifestLag | None  # None: the policy does not plan manifests
    spending: Spending | None  # the day's rewrites; None: the policy has no budget to read it for
    now_ms: int


def _has_budget(policy: MaintenancePolicy) -> bool:
    return policy.max_bytes_rewritten_per_day is not None or policy.max_cpu_seconds_per_day is not None


def look(
    policy: MaintenancePolicy,
    *,
    snapshot: Snapshot | None = None,
    tracker: HealthTracker | None = None,
    store: ObjectStore | None = None,
    now_ms: int | None = None,
) -> TableLook:
    """The inputs of ``decide`` for one table: from ``snapshot``, or from ``tracker`` (already
    advanced; ``store`` is the table's, for the manifests and the day's history)."""
    if (snapshot is None) == (tracker is None):
        raise ValueError("look at a table through a snapshot or a health tracker, one of them")
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    retention = int(policy.retention_hours * 3_600_000)
    if snapshot is not None:
        store, version = snapshot.store, snapshot.version
        health = table_health(snapshot, small_file_size=policy.small_file_size)
        removed = removed_files(snapshot, now_ms=now, retention_ms=retention)
    else:
        if store is None:
            raise ValueError("a tracker's look needs the table's store")
        version = tracker.version
        health = tracker.health()
        removed = tracker.removed_files(now, retention_ms=retention)
    manifest = manifest_lag(store, version) if "manifest" in policy.enabled else None
    spending = maintenance_spending(store, version, now - DAY_MS) if _has_budget(policy) else None
    return TableLook(health, removed, manifest, spending, now)


def decide_table(name: str, seen: TableLook, policy: MaintenancePolicy) -> list[Decision]:
    """``maintenance_plan.decide`` on what ``look`` read: one decision per kind."""
    return decide(
        name,
        seen.health,
        policy,
        removed=seen.removed,
        now_ms=seen.now_ms,
        manifest=seen.manifest,
        spending=seen.spending,
    )


def plan_table(
    name: str,
    seen: TableLook,
    policy: MaintenancePolicy,
    *,
    busy: Iterable[tuple[Mapping[str, str | None], str]] = (),
) -> list[Decision]:
    """The table's decisions, one per kind in ``KINDS`` order: decided on ``seen``, with the
    partitions in ``busy`` left to concurrent writers (``yield_to_writers``) and the daily budgets
    kept (what does not fit becomes a skip that says so)."""
    decisions = yield_to_writers(decide_table(name, seen, policy), busy)
    if seen.spending is not None:
        ranked = rank(decisions, {name: policy}, spent_today={name: seen.spending})
        order = {d.kind: d for d in ranked}
        decisions = [order[k] for k in KINDS if k in order]
    return decisions


__all__ = ["TableLook", "decide_table", "look", "plan_table"]
