"""Expired log cleanup: delete old commits and checkpoints without making a kept version unreadable.

Every commit stays in ``_delta_log`` forever unless someone removes it, and a long-lived streaming
table accumulates hundreds of thousands of them: listing gets slower and the bucket fills with
objects nobody will read. ``delta.logRetentionDuration`` (30 days) says how long time travel must
keep working; older log files may go, but only in a way that leaves every remaining version
reconstructable. The rule is Delta Spark's (``MetadataCleanup``), as the protocol notes state it:

1. the cutoff is midnight UTC of the day ``now - logRetentionDuration`` falls in (cleaning a day
   at a time means a checkpoint is not needed every few minutes just to let cleanup progress);
2. the *cutoff commit* is the newest commit whose timestamp (in-commit timestamp where enabled,
   otherwise the monotonized file time) is at or before the cutoff;
3. the *kept checkpoint* is the newest complete, readable checkpoint at or before the cutoff
   commit: it, its commit and everything after it stay; older commits, checkpoints (every part,
   complete or not), ``.crc`` files and compactions starting at or before it go, commits first;
4. V2 sidecars no kept checkpoint references go once they are more than a day old (an in-flight
   checkpoint writes its sidecars before the checkpoint that names them).

Nothing is deleted without a qualifying checkpoint: deleting commits with no checkpoint to start
from would make every kept version unreadable. ``delta.enableExpiredLogCleanup=false`` turns
cleanup off, and with ``checkpointProtection`` history before
``delta.requireCheckpointProtectionBeforeVersion`` may only be removed all at once.

Planning (``plan_log_cleanup``) lists and reads; ``execute_log_cleanup`` deletes. No commit is
recorded (Delta Spark records none either: the log is not table data).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from deltaplane.engine.errors import (
    CorruptLogError,
    InvalidArgumentError,
    ObjectNotFoundError,
    RetentionTooShortError,
)
from deltaplane.engine.log.checkpoints import Checkpoint, read_checkpoint_config
from deltaplane.engine.log.files import LOG_DIR, SIDECAR_DIR, LogFile, LogFileKind, parse_log_file_name
from deltaplane.engine.log.timestamps import monotonize, read_in_commit_timestamp
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage.base import ObjectMeta, ObjectStore
from deltaplane.engine.table_features import writer_features
from deltaplane.engine.table_properties import TableProperties

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
CHECKPOINT_PROTECTION = "checkpointProtection"
PROTECTED_BEFORE_PROPERTY = "delta.requireCheckpointProtectionBeforeVersion"
SIDECAR_MIN_AGE_MS = DAY_MS
_DELETE_WORKERS = 16
_PROGRESS_EVERY = 1000
_CHECKPOINT_KINDS = (LogFileKind.CHECKPOINT, LogFileKind.MULTIPART_CHECKPOINT, LogFileKind.V2_CHECKPOINT)
# Among complete checkpoints of one version, try the cheapest to validate first.
_PREFERENCE = {LogFileKind.CHECKPOINT: 0, LogFileKind.V2_CHECKPOINT: 1, LogFileKind.MULTIPART_CHECKPOINT: 2}


# --- commit timestamps (shared with VACUUM) -----------------------------------------------------


def latest_commit_at_or_before(
    store: ObjectStore, commits: Mapping[int, LogFile], when_ms: int, properties: TableProperties
) -> int | None:
    """The newest listed commit whose timestamp is at or before ``when_ms`` (``None``: none is).

    Timestamps are the in-commit timestamps where ICT is enabled (found by binary search, a
    read per probe), otherwise the commit files' modification times, monotonized as time travel
    does. Unlike time travel this never raises: "no commit is old enough" is an answer.
    """
    versions = sorted(commits)
    if not versions:
        return None
    ict_start = None
    if properties.enable_in_commit_timestamps:
        ict_start = properties.in_commit_timestamp_enablement_version or 0
    ict_versions = [v for v in versions if ict_start is not None and v >= ict_start]
    file_versions = [v for v in versions if ict_start is None or v < ict_start]

    def ict(v: int) -> int:
        value = read_in_commit_timestamp(store, commits[v])
        return commits[v].last_modified if value is None else value

    if ict_versions and ict(ict_versions[0]) <= when_ms:
        lo, hi = 0, len(ict_versions) - 1
        while lo < hi:  # ICTs strictly increase, so the versions at or before when_ms are a prefix
            mid = (lo + hi + 1) // 2
            if ict(ict_versions[mid]) <= when_ms:
                lo = mid
            else:
                hi = mid - 1
        return ict_versions[lo]
    if not file_versions:
        return None
    times = monotonize(np.array([commits[v].last_modified for v in file_versions], dtype=np.int64))
    index = int(np.searchsorted(times, when_ms, side="right")) - 1
    return file_versions[index] if index >= 0 else None


# --- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogCleanupPlan:
    """Which log files cleanup would delete; a dry run returns just this."""

    table_root: str
    read_version: int
    now_ms: int
    retention_ms: int
    cutoff_ms: int  # midnight UTC: commits at or before it are expired
    cutoff_version: int | None  # the newest expired commit
    checkpoint_version: int | None  # the kept checkpoint: the earliest version left readable
    commits: tuple[str, ...] = ()  # keys, ascending; deleted first
    checksums: tuple[str, ...] = ()  # .crc files and compactions
    checkpoints: tuple[str, ...] = ()  # every part of every older checkpoint; deleted after commits
    sidecars: tuple[str, ...] = ()  # unreferenced V2 sidecars; deleted last
    side_files: tuple[str, ...] = ()  # Hadoop ``.<name>.crc`` companions of the files above
    # Temporary files of log writes that never finished (writers killed mid-write), expired.
    temporaries: tuple[str, ...] = ()
    skipped_reason: str | None = None  # why nothing may be deleted, when that is the case

    @property
    def files(self) -> tuple[str, ...]:
        """Every key to delete, in deletion order."""
        return (
            self.commits
            + self.checksums
            + self.checkpoints
            + self.sidecars
            + self.side_files
            + self.temporaries
        )

    @property
    def num_files(self) -> int:
        return len(self.files)

    def describe(self) -> dict:
        """A JSON-able summary (for dry runs, logs and the CLI)."""
        return {
            "table": self.table_root,
            "readVersion": self.read_version,
            "retentionMillis": self.retention_ms,
            "cutoffTimestamp": self.cutoff_ms,
            "cutoffVersion": self.cutoff_version,
            "checkpointVersion": self.checkpoint_version,
            "numCommitsToDelete": len(self.commits),
            "numCheckpointFilesToDelete": len(self.checkpoints),
            "numChecksumsToDelete": len(self.checksums),
            "numSidecarsToDelete": len(self.sidecars),
            "numTemporaryFilesToDelete": len(self.temporaries),
            "numFilesToDelete": self.num_files,
            "skippedReason": self.skipped_reason,
        }


@dataclass
class LogCleanupMetrics:
    """The outcome of one cleanup."""

    num_deleted_files: int = 0
    num_deleted_commits: int = 0
    num_deleted_checkpoint_files: int = 0
    num_deleted_checksums: int = 0
    num_deleted_sidecars: int = 0
    num_deleted_temporary_files: int = 0
    earliest_version: int | None = None  # the earliest version still readable afterwards
    skipped_reason: str | None = None
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def plan_log_cleanup(
    store: ObjectStore,
    snapshot: Snapshot,
    *,
    now_ms: int | None = None,
    retention_ms: int | None = None,
    enforce_retention: bool = True,
    granularity_ms: int | None = None,
) -> LogCleanupPlan:
    """Choose the log files to delete (reads the log listing and the kept checkpoint only).

    ``snapshot`` should be the latest version: its properties decide the retention, whether
    cleanup is enabled, and the checkpoint-protection boundary. A ``retention_ms`` shorter than
    ``delta.logRetentionDuration`` raises ``RetentionTooShortError`` unless
    ``enforce_retention=False``. The cutoff is cut to the start of its UTC day (``granularity_ms``
    to cut finer: DROP FEATURE's history truncation cuts at the minute, as Delta Spark does).
    """
    props = snapshot.properties
    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    retention, cutoff = _retention_and_cutoff(
        store, props, now, retention_ms, enforce_retention, granularity_ms
    )
    plan = LogCleanupPlan(
        table_root=store.root,
        read_version=snapshot.version,
        now_ms=now,
        retention_ms=retention,
        cutoff_ms=cutoff,
        cutoff_version=None,
        checkpoint_version=None,
    )
    if not props.enable_expired_log_cleanup:
        return dataclasses.replace(
            plan, skipped_reason="delta.enableExpiredLogCleanup is false: the table keeps its whole log"
        )

    # Left by log writers killed mid-write; not part of the log, so expired ones always go.
    temporaries = tuple(m.key for m in store.list_temporary(f"{LOG_DIR}/") if m.last_modified < cutoff)
    plan = dataclasses.replace(plan, temporaries=temporaries)

    listed = list(store.list(f"{LOG_DIR}/"))
    files = [f for m in listed if (f := parse_log_file_name(m.key, m.size, m.last_modified)) is not None]
    commits = {f.version: f for f in files if f.kind is LogFileKind.COMMIT}
    cutoff_version = latest_commit_at_or_before(store, commits, cutoff, props)
    plan = dataclasses.replace(plan, cutoff_version=cutoff_version)
    if cutoff_version is None:
        return plan  # no commit is old enough: nothing expired

    kept = _kept_checkpoint(store, _complete_checkpoints(files), cutoff_version)
    if kept is None:
        return dataclasses.replace(
            plan,
            skipped_reason=(
                f"no complete, readable checkpoint at or before version {cutoff_version} (the newest "
                "commit older than the cutoff): deleting commits would leave the kept versions "
                "without a starting point. Write a checkpoint and run cleanup again."
            ),
        )
    keep_from = kept.version
    plan = dataclasses.replace(plan, checkpoint_version=keep_from)

    if CHECKPOINT_PROTECTION in writer_features(snapshot.protocol):
        protected = _protected_before(snapshot)
        if keep_from < protected:
            return dataclasses.replace(
                plan,
                skipped_reason=(
                    f"checkpointProtection: history before version {protected} "
                    f"({PROTECTED_BEFORE_PROPERTY}) may only be removed all at once, and the newest "
                    f"expired checkpoint is at version {keep_from}"
                ),
            )

    return dataclasses.replace(
        plan, **_expired_files(store, files, listed, keep_from, min(cutoff, now - SIDECAR_MIN_AGE_MS))
    )


def _retention_and_cutoff(
    store: ObjectStore,
    props,
    now: int,
    retention_ms: int | None,
    enforce_retention: bool,
    granularity_ms: int | None,
) -> tuple[int, int]:
    """The retention in force (the table's unless given; shorter only without enforcement) and the
    cutoff it gives, cut to the start of its UTC day (or of ``granularity_ms``)."""
    table_retention = props.log_retention_ms
    retention = table_retention if retention_ms is None else int(retention_ms)
    if retention < 0:
        raise InvalidArgumentError(f"the log retention cannot be negative, got {retention} ms")
    if enforce_retention and retention < table_retention:
        raise RetentionTooShortError(
            f"log cleanup of {store.root} with a retention of {_duration(retention)} is shorter than "
            f"the table's delta.logRetentionDuration ({_duration(table_retention)}): time travel, "
            "the change data feed and VACUUM lite rely on the commits it would delete. Use at least "
            f"{_duration(table_retention)}, or pass enforce_retention=False if you are sure."
        )
    step = DAY_MS if granularity_ms is None else int(granularity_ms)
    if step <= 0:
        raise InvalidArgumentError(f"granularity_ms must be positive, got {step}")
    return retention, (now - retention) - (now - retention) % step


def _expired_files(
    store: ObjectStore, files: list, listed: list, keep_from: int, sidecar_cutoff: int
) -> dict:
    """What goes once version ``keep_from``'s checkpoint is the oldest kept: the commits,
    checksums, compactions and checkpoints before it, sidecars no kept checkpoint references, and
    the Hadoop ``.crc`` companions of all of those."""
    old_commits = sorted(
        (f for f in files if f.kind is LogFileKind.COMMIT and f.version < keep_from), key=_order
    )
    old_checks = sorted(
        (
            f
            for f in files
            if (f.kind is LogFileKind.CHECKSUM and f.version < keep_from)
            or (f.kind is LogFileKind.COMPACTION and f.version <= keep_from)
        ),
        key=_order,
    )
    old_checkpoints = sorted(
        (f for f in files if f.kind in _CHECKPOINT_KINDS and f.version < keep_from), key=_order
    )
    deleted = {f.key for f in (*old_commits, *old_checks, *old_checkpoints)}
    sidecars = _unreferenced_sidecars(store, files, keep_from, sidecar_cutoff)
    names = {m.key for m in listed}
    side_files = sorted(
        companion
        for key in deleted
        if (companion := _hadoop_checksum(key)) in names and companion not in deleted
    )
    return {
        "commits": tuple(f.key for f in old_commits),
        "checksums": tuple(f.key for f in old_checks),
        "checkpoints": tuple(f.key for f in old_checkpoints),
        "sidecars": tuple(sidecars),
        "side_files": tuple(side_files),
    }


def _order(f: LogFile) -> tuple[int, str]:
    return (f.version, f.key)


def _duration(ms: int) -> str:
    days = ms / DAY_MS
    return f"{days:g} days" if ms >= DAY_MS else f"{ms / 3_600_000:g} hours"


def _protected_before(snapshot: Snapshot) -> int:
    value = snapshot.metadata.configuration.get(PROTECTED_BEFORE_PROPERTY)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        # An unreadable boundary protects everything: refuse rather than guess.
        return snapshot.version + 1


def _complete_checkpoints(files: list[LogFile]) -> dict[int, list[Checkpoint]]:
    out: dict[int, list[Checkpoint]] = defaultdict(list)
    parts: dict[tuple[int, int], dict[int, LogFile]] = defaultdict(dict)
    for f in files:
        if f.kind in (LogFileKind.CHECKPOINT, LogFileKind.V2_CHECKPOINT):
            out[f.version].append(Checkpoint(f.version, (f,)))
        elif f.kind is LogFileKind.MULTIPART_CHECKPOINT:
            assert f.num_parts is not None and f.part is not None
            parts[(f.version, f.num_parts)][f.part] = f
    for (version, num_parts), found in parts.items():
        if len(found) == num_parts:
            out[version].append(Checkpoint(version, tuple(found[i] for i in range(1, num_parts + 1))))
    for version in out:
        out[version].sort(key=lambda c: _PREFERENCE[c.kind])
    return out


def _kept_checkpoint(
    store: ObjectStore, checkpoints: dict[int, list[Checkpoint]], cutoff_version: int
) -> Checkpoint | None:
    """The newest checkpoint at or before ``cutoff_version`` that actually reads.

    Once older commits are gone nothing can stand in for it, so a torn or truncated file (which
    the loader would otherwise skip in favour of an older checkpoint) must not be chosen.
    """
    for version in sorted((v for v in checkpoints if v <= cutoff_version), reverse=True):
        for checkpoint in checkpoints[version]:
            try:
                config = read_checkpoint_config(store, checkpoint)
                for sidecar in config.sidecars:
                    store.head(_sidecar_key(sidecar.path))
            except (CorruptLogError, ObjectNotFoundError) as e:
                log.warning(
                    "log cleanup of %s: checkpoint %s is unusable (%s)", store.root, checkpoint.name, e
                )
                continue
            return checkpoint
    return None


def _sidecar_key(path: str) -> str:
    return f"{SIDECAR_DIR}/{path}" if "/" not in path else path


def _unreferenced_sidecars(
    store: ObjectStore, files: list[LogFile], keep_from: int, older_than: int
) -> list[str]:
    """Sidecars no kept checkpoint names, written before ``older_than``."""
    listed: list[ObjectMeta] = list(store.list(f"{SIDECAR_DIR}/"))
    old = [m for m in listed if m.last_modified < older_than]
    if not old:
        return []
    referenced: set[str] = set()
    for checkpoint in _complete_checkpoints([f for f in files if f.version >= keep_from]).values():
        for c in checkpoint:
            try:
                config = read_checkpoint_config(store, c)
            except CorruptLogError:
                # A kept checkpoint we cannot read may name any sidecar: keep them all.
                log.warning("log cleanup of %s: cannot read %s; keeping every sidecar", store.root, c.name)
                return []
            referenced |= {s.path.rsplit("/", 1)[-1] for s in config.sidecars}
    return sorted(m.key for m in old if m.key.rsplit("/", 1)[-1] not in referenced)


def _hadoop_checksum(key: str) -> str:
    """Hadoop's local filesystem writes ``.<name>.crc`` beside each file (Delta Spark tables have them)."""
    directory, _, name = key.rpartition("/")
    return f"{directory}/.{name}.crc"


# --- execution ----------------------------------------------------------------------------------


def execute_log_cleanup(store: ObjectStore, plan: LogCleanupPlan) -> LogCleanupMetrics:
    """Delete the planned files: commits (and .crc, compactions) first, then checkpoints, then
    sidecars, so the log never holds a checkpoint whose older commits are gone while being newer
    than one that was kept; each phase in parallel."""
    start = time.perf_counter()
    metrics = LogCleanupMetrics(earliest_version=plan.checkpoint_version, skipped_reason=plan.skipped_reason)
    if plan.skipped_reason is not None or not plan.files:
        if plan.temporaries:
            metrics.files = _delete_all(store, plan.temporaries)
            metrics.num_deleted_temporary_files = metrics.num_deleted_files = len(metrics.files)
        if plan.skipped_reason:
            log.info("log cleanup of %s skipped: %s", plan.table_root, plan.skipped_reason)
        else:
            log.info("log cleanup of %s: nothing older than %s to delete", plan.table_root, plan.cutoff_ms)
        metrics.seconds = time.perf_counter() - start
        return metrics
    log.info(
        "log cleanup of %s: deleting %d files before version %s (cutoff version %s)",
        plan.table_root,
        plan.num_files,
        plan.checkpoint_version,
        plan.cutoff_version,
    )
    done = 0
    total = plan.num_files
    for phase, attr in (
        (plan.commits, "num_deleted_commits"),
        (plan.checksums, "num_deleted_checksums"),
        (plan.checkpoints, "num_deleted_checkpoint_files"),
        (plan.sidecars, "num_deleted_sidecars"),
        (plan.side_files, None),
        (plan.temporaries, "num_deleted_temporary_files"),
    ):
        if not phase:
            continue
        deleted = _delete_all(store, phase)
        if attr is not None:
            setattr(metrics, attr, len(deleted))
        metrics.files.extend(deleted)
        done += len(phase)
        log.info("log cleanup of %s: %d/%d files deleted", plan.table_root, done, total)
    metrics.num_deleted_files = len(metrics.files)
    metrics.seconds = time.perf_counter() - start
    return metrics


def _delete_all(store: ObjectStore, keys: tuple[str, ...]) -> list[str]:
    def delete(key: str) -> str:
        with contextlib.suppress(ObjectNotFoundError):  # deleted concurrently: what we wanted
            store.delete(key)
        return key

    if len(keys) == 1:
        return [delete(keys[0])]
    out = []
    with ThreadPoolExecutor(
        min(_DELETE_WORKERS, len(keys)), thread_name_prefix="deltaplane-logclean"
    ) as pool:
        for i, key in enumerate(pool.map(delete, keys), 1):
            out.append(key)
            if i % _PROGRESS_EVERY == 0:
                log.info("log cleanup of %s: %d/%d deleted in this phase", store.root, i, len(keys))
    return out
