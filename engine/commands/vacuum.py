"""VACUUM: delete data files no version inside the retention window can need.

Removing rows never deletes a file: DELETE, UPDATE, MERGE, OPTIMIZE and overwrites commit a
``remove`` and leave the bytes, because older versions (time travel, readers still scanning an
old snapshot, a writer about to commit) may need them. The bytes stay until VACUUM. Deleting a file
is the one irreversible step in Delta, so VACUUM keeps anything that may still be needed:

* **live files** of the latest version, and every **deletion-vector file** they use;
* files (and DV files) of **unexpired tombstones**, removes newer than the retention
  (``delta.deletedFileRetentionDuration``, 7 days): a version inside the window still reads them;
* in full mode, every file a **commit inside the window** mentions (adds, removes, ``cdc``): this
  protects change-data files whose commit is recent even if the file is old, and versions whose
  tombstones a checkpoint no longer carries;
* anything **modified within the window**, tracked or not: an untracked fresh file may be a
  writer's output about to be committed;
* ``_delta_log/`` and every other **hidden** entry (a name starting with ``_`` or ``.``, at any
  depth), except ``_change_data/`` (Delta-managed change files) and partition directories named
  ``<partitionColumn>=...`` whose column starts with ``_``; with Iceberg UniForm, ``metadata/``.

Two ways to find candidates, as Delta Spark has them:

* **full** lists every object under the table root: it also reclaims files that no commit ever
  referenced (failed writes) and the temporary files (``.<name>.<uuid>.tmp``) of data writes
  killed before they published, once older than the retention (``_delta_log/``'s own temporary
  files are log cleanup's);
* **lite** reads only the log: files of tombstones that expired, from the snapshot and from the
  commits since the last VACUUM (recorded in ``_delta_log/_last_vacuum_info``, Delta Spark's file).
  It needs those commits: when log cleanup removed them, it refuses and asks for full mode.

Planning (``plan_vacuum``) only lists and reads, so a dry run is the plan. Execution records Delta
Spark's ``VACUUM START`` commit (commitInfo only, so it runs at snapshot isolation and never
conflicts with appends), deletes in a thread pool, then records ``VACUUM END`` with the outcome.
A table whose protocol lists ``vacuumProtocolCheck`` is only vacuumed when deltaplane can write
it (the feature exists to stop clients that check just the reader protocol).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.commands.log_cleanup import latest_commit_at_or_before
from deltaplane.engine.deletion_vectors import dv_file_key
from deltaplane.engine.errors import (
    CommitConflictError,
    CorruptDeletionVectorError,
    DeltaError,
    InvalidArgumentError,
    ObjectNotFoundError,
    ProtocolError,
    RetentionTooShortError,
    StorageError,
    UnsupportedOperationError,
)
from deltaplane.engine.holds import held, hold_is_live, list_holds, release_hold
from deltaplane.engine.log.commits import parse_log_json
from deltaplane.engine.log.files import LOG_DIR, LogFile, LogFileKind, parse_log_file_name
from deltaplane.engine.log.replay import canonical_paths
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.snapshot import Snapshot, update_snapshot
from deltaplane.engine.storage.base import ObjectMeta, ObjectStore
from deltaplane.engine.table_features import check_write_supported, reader_features, writer_features
from deltaplane.engine.transaction import CommitResult, Transaction
from deltaplane.engine.work import WorkKey

log = logging.getLogger(__name__)

FULL = "full"
LITE = "lite"
VACUUM_MODES = (FULL, LITE)
HOUR_MS = 3_600_000
LAST_VACUUM_INFO = f"{LOG_DIR}/_last_vacuum_info"
CHANGE_DATA_DIR = "_change_data"
VACUUM_PROTOCOL_CHECK = "vacuumProtocolCheck"
DEFAULT_WORKERS = 16
_PROGRESS_EVERY = 1000
_END_ATTEMPTS = 3


class VacuumLiteUnavailableError(UnsupportedOperationError):
    """VACUUM lite cannot see every removed file: the commits it needs were cleaned up."""


@dataclass(frozen=True)
class VacuumPlan:
    """What VACUUM would delete; a dry run returns just this."""

    table_root: str
    read_version: int
    mode: str
    now_ms: int
    cutoff_ms: int  # files modified, and tombstones created, before this are expired
    retention_ms: int
    specified_retention_ms: int | None  # the caller's retention, if any
    default_retention_ms: int  # delta.deletedFileRetentionDuration
    retention_check_enabled: bool
    files: tuple[str, ...]  # keys relative to the table root, sorted
    sizes: tuple[int, ...]  # bytes of each file, in the same order
    num_objects_considered: int  # full: objects listed outside hidden paths; lite: log candidates
    latest_version_outside_window: int | None  # newest commit at or before the cutoff
    vacuumed_through_version: int | None  # recorded in _last_vacuum_info after a real run
    eligible_start_version: int | None = None  # lite: the commits read, inclusive
    eligible_end_version: int | None = None
    record_commits: bool = True  # VACUUM START/END can be committed (deltaplane can write the table)
    # full: old unreferenced files kept because a pending writer's hold protects them
    held_files: tuple[str, ...] = ()
    stale_holds: tuple[str, ...] = ()  # tokens of holds that expired or whose work landed
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def size_of_data_to_delete(self) -> int:
        return sum(self.sizes)

    def describe(self) -> dict:
        """A JSON-able summary (for dry runs, logs and the CLI)."""
        return {
            "table": self.table_root,
            "readVersion": self.read_version,
            "mode": self.mode,
            "retentionMillis": self.retention_ms,
            "specifiedRetentionMillis": self.specified_retention_ms,
            "defaultRetentionMillis": self.default_retention_ms,
            "deleteBeforeTimestamp": self.cutoff_ms,
            "numFilesToDelete": self.num_files,
            "sizeOfDataToDelete": self.size_of_data_to_delete,
            "numObjectsConsidered": self.num_objects_considered,
            "latestCommitVersionOutsideOfRetentionWindow": self.latest_version_outside_window,
            "eligibleStartCommitVersion": self.eligible_start_version,
            "eligibleEndCommitVersion": self.eligible_end_version,
            "numFilesHeld": len(self.held_files),
        }


@dataclass
class VacuumMetrics:
    """The outcome of one VACUUM (Delta Spark's metric names in ``operation_metrics``)."""

    files: list[str]  # deleted keys, sorted
    num_deleted_files: int = 0
    num_failed_files: int = 0
    num_vacuumed_directories: int = 0  # empty directories removed (local tables only)
    size_of_deleted_data: int = 0
    start_version: int | None = None  # the VACUUM START commit
    end_version: int | None = None  # the VACUUM END commit
    status: str = "COMPLETED"
    seconds: float = 0.0
    commit: CommitResult | None = field(default=None, repr=False, compare=False)

    @property
    def operation_metrics(self) -> dict[str, int]:
        return {
            "numDeletedFiles": self.num_deleted_files,
            "numVacuumedDirectories": self.num_vacuumed_directories,
        }

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "commit"}
        out["files"] = list(self.files)
        return out


# --- which paths VACUUM may touch ---------------------------------------------------------------


def vacuumable(key: str, partition_dirs: tuple[str, ...] = (), *, iceberg: bool = False) -> bool:
    """Whether ``key`` (relative to the table root) lies outside every hidden path.

    Delta Spark's ``isHiddenDirectory``, applied to every component: names starting with ``_``
    or ``.`` are hidden (``_delta_log``, ``_checkpoints``, ``.crc`` side files), except the
    top-level ``_change_data`` directory and partition directories (``partition_dirs`` holds
    ``"<column>="`` prefixes); with Iceberg UniForm its ``metadata`` directory is hidden too.
    """
    parts = key.split("/")
    if not parts[-1] or parts[0] == LOG_DIR:
        return False
    for depth, name in enumerate(parts):
        if iceberg and name == "metadata" and depth < len(parts) - 1:
            return False
        if not name.startswith(("_", ".")):
            continue
        if depth == 0 and name == CHANGE_DATA_DIR and len(parts) > 1:
            continue
        if depth < len(parts) - 1 and partition_dirs and name.startswith(partition_dirs):
            continue
        return False
    return True


def _partition_dirs(snapshot: Snapshot) -> tuple[str, ...]:
    names = set(snapshot.partition_columns)
    with contextlib.suppress(DeltaError):
        names |= {f.physical_name for f in snapshot.partition_fields}
    return tuple(sorted(f"{n}=" for n in names))


def _iceberg_enabled(snapshot: Snapshot) -> bool:
    formats = snapshot.metadata.configuration.get("delta.universalFormat.enabledFormats", "")
    features = writer_features(snapshot.protocol)
    return "iceberg" in formats.lower() or any(f.startswith("icebergCompat") for f in features)


def _relative(location: str, root: str) -> str | None:
    """A location under the table root as a key; ``None`` for a file outside the table."""
    prefix = root.rstrip("/") + "/"
    if location.startswith(prefix):
        return location[len(prefix) :]
    if location.startswith("/") or "://" in location:
        return None
    return location


def _dv_keys(dvs: pa.ChunkedArray | pa.Array, root: str) -> set[str]:
    """Keys of the DV files a ``deletion_vector`` column points at (inline DVs have none)."""
    if len(dvs) == 0 or dvs.null_count == len(dvs):
        return set()
    kind = pc.struct_field(dvs, "storageType")
    on_disk = pc.and_(pc.is_valid(dvs), pc.invert(pc.fill_null(pc.equal(kind, "i"), True)))
    if not pc.any(on_disk).as_py():
        return set()
    chosen = dvs.filter(on_disk)
    # Many DVs share one file (one per commit): resolve each distinct (type, path) once.
    pairs = {(d["storageType"], d["pathOrInlineDv"]) for d in chosen.to_pylist()}
    out = set()
    for storage_type, path in pairs:
        descriptor = DeletionVectorDescriptor(storage_type, path, size_in_bytes=0, cardinality=0)
        try:
            key = _relative(dv_file_key(descriptor), root)
        except CorruptDeletionVectorError as e:
            raise DeltaError(f"VACUUM of {root}: cannot locate a deletion vector file: {e}") from e
        if key is not None:
            out.add(key)
    return out


def _file_keys(actions: pa.Table, root: str) -> set[str]:
    """Keys of the data files and DV files some file actions reference."""
    if actions.num_rows == 0:
        return set()
    paths = canonical_paths(actions.column("path"), root).to_pylist()
    keys = {k for p in paths if (k := _relative(p, root)) is not None}
    return keys | _dv_keys(actions.column("deletion_vector"), root)


# --- planning -----------------------------------------------------------------------------------


def plan_vacuum(
    store: ObjectStore,
    snapshot: Snapshot,
    *,
    retention_hours: float | None = None,
    enforce_retention: bool = True,
    mode: str = FULL,
    now_ms: int | None = None,
) -> VacuumPlan:
    """Find the files VACUUM would delete; lists and reads, never deletes or commits.

    The plan is made on the latest version (``snapshot`` is brought up to date first): planning
    on an old snapshot could delete a file a newer commit brought back.
    """
    if mode not in VACUUM_MODES:
        raise InvalidArgumentError(f"VACUUM mode must be {FULL!r} or {LITE!r}, got {mode!r}")
    snapshot = update_snapshot(snapshot)
    root = store.root
    features = reader_features(snapshot.protocol) | writer_features(snapshot.protocol)
    record_commits = True
    try:
        check_write_supported(snapshot.protocol, snapshot.metadata, snapshot.schema, root)
    except ProtocolError as e:
        if VACUUM_PROTOCOL_CHECK in features:
            raise ProtocolError(
                f"VACUUM refused: {root} lists the {VACUUM_PROTOCOL_CHECK} feature, so VACUUM must "
                f"support its writer protocol, and it does not: {e}",
                feature=e.feature,
            ) from e
        # Reader support is enough to vacuum such a table, but not to commit to its log.
        log.warning("VACUUM of %s will not record VACUUM START/END commits: %s", root, e)
        record_commits = False

    now = int(time.time() * 1000) if now_ms is None else int(now_ms)
    default_ms = snapshot.properties.deleted_file_retention_ms
    specified_ms = None
    if retention_hours is not None:
        if retention_hours < 0:
            raise InvalidArgumentError(
                f"the VACUUM retention cannot be negative, got {retention_hours} hours"
            )
        specified_ms = round(retention_hours * HOUR_MS)
        if enforce_retention and specified_ms < default_ms:
            raise RetentionTooShortError(
                f"VACUUM of {root} with a retention of {_hours(specified_ms)} is shorter than the "
                f"table's delta.deletedFileRetentionDuration ({_hours(default_ms)}). Files a "
                "concurrent reader or writer, or time travel within that window, still needs could "
                f"be deleted. Use a retention of at least {_hours(default_ms)}, or pass "
                "enforce_retention=False if you are sure no operation on this table runs longer than "
                f"{_hours(specified_ms)}."
            )
    retention_ms = default_ms if specified_ms is None else specified_ms
    cutoff = now - retention_ms
    base = dict(
        table_root=root,
        read_version=snapshot.version,
        mode=mode,
        now_ms=now,
        cutoff_ms=cutoff,
        retention_ms=retention_ms,
        specified_retention_ms=specified_ms,
        default_retention_ms=default_ms,
        retention_check_enabled=enforce_retention,
        record_commits=record_commits,
        snapshot=snapshot,
    )
    log.info(
        "VACUUM %s (%s, version %d): files older than %s (retention %s)",
        root,
        mode,
        snapshot.version,
        dt.datetime.fromtimestamp(cutoff / 1000, dt.UTC).isoformat(timespec="seconds"),
        _hours(retention_ms),
    )
    if mode == FULL:
        return _plan_full(store, snapshot, cutoff, base)
    return _plan_lite(store, snapshot, cutoff, base)


def _hours(ms: int) -> str:
    return f"{ms / HOUR_MS:g} hours"


def _valid_keys(snapshot: Snapshot, cutoff: int) -> set[str]:
    """Files the latest version and the unexpired tombstones reference (DV files included)."""
    root = snapshot.store.root
    keys = _file_keys(snapshot.files, root)
    tombstones = snapshot.tombstones
    if tombstones.num_rows:
        deleted_at = pc.fill_null(tombstones.column("deletion_timestamp"), 0)
        keys |= _file_keys(tombstones.filter(pc.greater_equal(deleted_at, cutoff)), root)
    return keys


def _deferred_through(snapshot: Snapshot, cutoff: int, limit: int | None) -> int | None:
    """The last version lite VACUUM may treat as done: tombstones not yet expired in versions
    up to ``limit`` must be looked at again next time."""
    if limit is None:
        return None
    tombstones = snapshot.tombstones
    if tombstones.num_rows == 0:
        return limit
    deleted_at = pc.fill_null(tombstones.column("deletion_timestamp"), 0)
    pending = tombstones.filter(
        pc.and_(pc.greater_equal(deleted_at, cutoff), pc.less_equal(tombstones.column("version"), limit))
    )
    if pending.num_rows == 0:
        return limit
    return min(limit, int(pc.min(pending.column("version")).as_py()) - 1)


def _plan_full(store: ObjectStore, snapshot: Snapshot, cutoff: int, base: dict) -> VacuumPlan:
    partition_dirs = _partition_dirs(snapshot)
    iceberg = _iceberg_enabled(snapshot)
    commits: dict[int, LogFile] = {}
    considered: list[ObjectMeta] = []
    for meta in store.list("", recursive=True):
        if meta.key.startswith(f"{LOG_DIR}/"):
            f = parse_log_file_name(meta.key, meta.size, meta.last_modified)
            if f is not None and f.kind is LogFileKind.COMMIT and "/" not in meta.key[len(LOG_DIR) + 1 :]:
                commits[f.version] = f
            continue
        if vacuumable(meta.key, partition_dirs, iceberg=iceberg):
            considered.append(meta)
    outside = latest_commit_at_or_before(store, commits, cutoff, snapshot.properties)
    old = [m for m in considered if m.last_modified < cutoff]
    if old:
        valid = _valid_keys(snapshot, cutoff)
        old = [m for m in old if m.key not in valid]
    if old:
        # Files a commit inside the window mentions stay, whatever their age or tombstone says.
        window = [commits[v] for v in sorted(commits) if outside is None or v > outside]
        referenced = _referenced_by(store, window)
        old = [m for m in old if m.key not in referenced]
    # Temporary files of data writes killed mid-write (the log's own are log cleanup's).
    old += [
        m
        for m in store.list_temporary("")
        if m.last_modified < cutoff
        and vacuumable(
            m.key.rpartition("/")[0] + "/x" if "/" in m.key else "x", partition_dirs, iceberg=iceberg
        )
    ]
    # Read the holds only now: a file listed above was written after its hold was placed.
    tokens, stale = _holds(store, snapshot, base["now_ms"])
    kept = held((m.key for m in old), tokens)
    if kept:
        log.info("VACUUM %s: keeping %d files of pending staged writes (holds)", store.root, len(kept))
        old = [m for m in old if m.key not in kept]
    old.sort(key=lambda m: m.key)
    return VacuumPlan(
        **base,
        held_files=tuple(sorted(kept)),
        stale_holds=stale,
        files=tuple(m.key for m in old),
        sizes=tuple(m.size for m in old),
        num_objects_considered=len(considered),
        latest_version_outside_window=outside,
        vacuumed_through_version=_deferred_through(snapshot, cutoff, outside),
    )


def _holds(store: ObjectStore, snapshot: Snapshot, now_ms: int) -> tuple[set[str], tuple[str, ...]]:
    """The tokens of the live holds on the table, and those of stale ones (expired, or whose
    work the table already holds)."""

    def done(app_id: str, version: int | None) -> bool:
        return WorkKey(app_id, version if version is not None else 0).done_in(snapshot)

    live, stale = set(), []
    for hold in list_holds(store):
        if hold_is_live(hold, done, now_ms):
            live.add(hold.token)
        else:
            stale.append(hold.token)
    return live, tuple(stale)


def _read_commits(store: ObjectStore, commits: list[LogFile]):
    """Parsed commits, read in parallel; a commit that vanished (log cleanup) is skipped."""

    def read(f: LogFile):
        try:
            return parse_log_json(store.get(f.key), version=f.version, source=f.key)
        except ObjectNotFoundError:
            return None

    if not commits:
        return []
    with ThreadPoolExecutor(
        min(DEFAULT_WORKERS, len(commits)), thread_name_prefix="deltaplane-vacuum"
    ) as pool:
        return [c for c in pool.map(read, commits) if c is not None]


def _referenced_by(store: ObjectStore, commits: list[LogFile]) -> set[str]:
    """Every data, DV and change-data file the given commits mention."""
    root = store.root
    keys: set[str] = set()
    cdc_paths: list[str] = []
    for actions in _read_commits(store, commits):
        if actions.file_actions is not None:
            keys |= _file_keys(actions.file_actions, root)
        cdc_paths += [c.path for c in actions.cdc]
    return keys | _cdc_keys(cdc_paths, root)


def _cdc_keys(paths: list[str], root: str) -> set[str]:
    if not paths:
        return set()
    canonical = canonical_paths(pa.array(paths, pa.string()), root).to_pylist()
    return {k for p in canonical if (k := _relative(p, root)) is not None}


def read_last_vacuum_info(store: ObjectStore) -> int | None:
    """``latestCommitVersionOutsideOfRetentionWindow`` from ``_delta_log/_last_vacuum_info``."""
    try:
        data = json.loads(store.get(LAST_VACUUM_INFO))
    except ObjectNotFoundError:
        return None
    except ValueError:
        log.warning("%s/%s is not valid JSON; ignoring it", store.root, LAST_VACUUM_INFO)
        return None
    value = data.get("latestCommitVersionOutsideOfRetentionWindow") if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _plan_lite(store: ObjectStore, snapshot: Snapshot, cutoff: int, base: dict) -> VacuumPlan:
    root = store.root
    listing = list_log(store, 0)
    outside = latest_commit_at_or_before(store, listing.commits, cutoff, snapshot.properties)
    last = read_last_vacuum_info(store)
    earliest = min(listing.commits) if listing.commits else 0
    start = 0 if last is None else last + 1
    if outside is not None and start < earliest:
        done = "no VACUUM recorded" if last is None else f"the last VACUUM covered versions up to {last}"
        raise VacuumLiteUnavailableError(
            f"VACUUM lite of {root} cannot find every removed file: {done}, and the log now starts "
            f"at version {earliest} (older commits were cleaned up). Run VACUUM in full mode "
            "(mode='full') once; lite mode works again after it."
        )
    end = outside
    removed: list[pa.Table] = []
    cdc_paths: list[str] = []
    deferred: int | None = None  # the first commit holding a remove that has not expired yet
    read_any = end is not None and start <= end
    commits = [listing.commits[v] for v in range(start, end + 1) if v in listing.commits] if read_any else []
    for actions in _read_commits(store, commits):
        cdc_paths += [c.path for c in actions.cdc]
        files = actions.file_actions
        if files is None or files.num_rows == 0:
            continue
        removes = files.filter(pc.invert(files.column("is_add")))
        if removes.num_rows == 0:
            continue
        deleted_at = pc.fill_null(removes.column("deletion_timestamp"), 0)
        expired = pc.less(deleted_at, cutoff)
        if not pc.all(expired).as_py():
            deferred = actions.version if deferred is None else min(deferred, actions.version)
        removed.append(removes.filter(expired))
    tombstones = snapshot.tombstones
    if tombstones.num_rows:
        deleted_at = pc.fill_null(tombstones.column("deletion_timestamp"), 0)
        removed.append(tombstones.filter(pc.less(deleted_at, cutoff)))
    candidates = _cdc_keys(cdc_paths, root)
    for table in removed:
        candidates |= _file_keys(table, root)
    partition_dirs = _partition_dirs(snapshot)
    iceberg = _iceberg_enabled(snapshot)
    candidates = {k for k in candidates if vacuumable(k, partition_dirs, iceberg=iceberg)}
    candidates -= _valid_keys(snapshot, cutoff)
    existing = _existing(store, sorted(candidates))
    fresh = [m for m in existing if m.last_modified >= cutoff]
    old = [m for m in existing if m.last_modified < cutoff]
    # How far the next lite VACUUM may skip: not past a commit whose removes were deferred.
    through = last
    if read_any:
        through = _deferred_through(snapshot, cutoff, end)
        if deferred is not None and through is not None:
            through = min(through, deferred - 1)
        if fresh:
            log.info("VACUUM lite of %s: %d removed files are not old enough yet", root, len(fresh))
            through = start - 1  # look at the same commits again next time
    return VacuumPlan(
        **base,
        files=tuple(m.key for m in old),
        sizes=tuple(m.size for m in old),
        num_objects_considered=len(candidates),
        latest_version_outside_window=outside,
        vacuumed_through_version=through,
        eligible_start_version=start if read_any else None,
        eligible_end_version=end if read_any else None,
    )


def _existing(store: ObjectStore, keys: list[str]) -> list[ObjectMeta]:
    """``head`` of each key, in parallel; keys already gone are dropped."""

    def head(key: str) -> ObjectMeta | None:
        try:
            return store.head(key)
        except ObjectNotFoundError:
            return None

    if not keys:
        return []
    with ThreadPoolExecutor(min(DEFAULT_WORKERS, len(keys)), thread_name_prefix="deltaplane-vacuum") as pool:
        found = [m for m in pool.map(head, keys) if m is not None]
    return sorted(found, key=lambda m: m.key)


# --- execution ----------------------------------------------------------------------------------


def execute_vacuum(
    store: ObjectStore,
    plan: VacuumPlan,
    *,
    snapshot: Snapshot | None = None,
    max_workers: int | None = None,
) -> VacuumMetrics:
    """Delete the planned files between a ``VACUUM START`` and a ``VACUUM END`` commit.

    ``snapshot`` is the version the commits are based on (the plan's own when omitted or older);
    commitInfo-only commits run at snapshot isolation, so concurrent appends never conflict.
    On failure the END commit records ``FAILED`` and the error is raised.
    """
    start = time.perf_counter()
    base = plan.snapshot
    if base is None or (snapshot is not None and snapshot.version > base.version):
        base = snapshot
    if base is None:
        raise InvalidArgumentError("execute_vacuum needs the snapshot the plan was made on")
    metrics = VacuumMetrics(files=[])
    for token in plan.stale_holds:  # expired or committed: they protect nothing any more
        release_hold(store, token)
    if not plan.files:
        log.info("VACUUM %s: nothing to delete", plan.table_root)
        _write_last_vacuum_info(store, plan)
        metrics.seconds = time.perf_counter() - start
        return metrics

    if plan.record_commits:
        started = _commit_start(store, base, plan)
        metrics.start_version = started.version
        metrics.commit = started
        base = started.snapshot or update_snapshot(base)
    log.info(
        "VACUUM %s: deleting %d files (%.1f MiB)",
        plan.table_root,
        plan.num_files,
        plan.size_of_data_to_delete / 2**20,
    )
    try:
        deleted, failures = _delete(store, plan.files, max_workers or DEFAULT_WORKERS, plan.table_root)
    except BaseException:
        if plan.record_commits:
            _commit_end(store, base, plan, None)
        raise
    sizes = dict(zip(plan.files, plan.sizes, strict=True))
    metrics.files = sorted(deleted)
    metrics.num_deleted_files = len(deleted)
    metrics.num_failed_files = len(failures)
    metrics.size_of_deleted_data = sum(sizes[k] for k in deleted)
    metrics.num_vacuumed_directories = store.remove_empty_directories(deleted)
    metrics.status = "FAILED" if failures else "COMPLETED"
    if plan.record_commits:
        ended = _commit_end(store, base, plan, None if failures else metrics)
        if ended is not None:
            metrics.end_version = ended.version
            metrics.commit = ended
    if failures:
        first = ", ".join(f"{k} ({e})" for k, e in failures[:3])
        raise StorageError(
            f"VACUUM of {plan.table_root} deleted {len(deleted)} of {plan.num_files} files; "
            f"{len(failures)} could not be deleted, e.g. {first}. Run VACUUM again."
        )
    _write_last_vacuum_info(store, plan)
    metrics.seconds = time.perf_counter() - start
    log.info(
        "VACUUM %s: deleted %d files (%.1f MiB), %d empty directories, in %.1f s",
        plan.table_root,
        metrics.num_deleted_files,
        metrics.size_of_deleted_data / 2**20,
        metrics.num_vacuumed_directories,
        metrics.seconds,
    )
    return metrics


def _commit_start(store: ObjectStore, snapshot: Snapshot, plan: VacuumPlan) -> CommitResult:
    params: dict = {
        "retentionCheckEnabled": plan.retention_check_enabled,
        "defaultRetentionMillis": plan.default_retention_ms,
    }
    if plan.specified_retention_ms is not None:
        params["specifiedRetentionMillis"] = plan.specified_retention_ms
    txn = Transaction(store, snapshot, operation="VACUUM START", operation_parameters=params)
    return txn.commit({"numFilesToDelete": plan.num_files, "sizeOfDataToDelete": plan.size_of_data_to_delete})


def _commit_end(
    store: ObjectStore, snapshot: Snapshot, plan: VacuumPlan, metrics: VacuumMetrics | None
) -> CommitResult | None:
    """Record the outcome; the files are already gone, so a conflict is retried on a fresh
    snapshot and, failing that, only logged."""
    status = "FAILED" if metrics is None else "COMPLETED"
    values = {} if metrics is None else metrics.operation_metrics
    for attempt in range(1, _END_ATTEMPTS + 1):
        try:
            txn = Transaction(
                store, snapshot, operation="VACUUM END", operation_parameters={"status": status}
            )
            return txn.commit(values)
        except CommitConflictError as e:
            log.warning("VACUUM END of %s conflicted (attempt %d): %s", plan.table_root, attempt, e)
            snapshot = update_snapshot(snapshot)
    log.error(
        "VACUUM of %s finished (%s) but its VACUUM END commit could not be recorded", plan.table_root, status
    )
    return None


def _delete(
    store: ObjectStore, keys: Iterable[str], workers: int, root: str
) -> tuple[list[str], list[tuple[str, Exception]]]:
    keys = list(keys)
    deleted: list[str] = []
    failures: list[tuple[str, Exception]] = []

    def delete(key: str) -> tuple[str, Exception | None]:
        try:
            store.delete(key)
        except ObjectNotFoundError:
            pass
        except (DeltaError, OSError) as e:
            return key, e
        return key, None

    with ThreadPoolExecutor(max(1, min(workers, len(keys))), thread_name_prefix="deltaplane-vacuum") as pool:
        for i, (key, error) in enumerate(pool.map(delete, keys), 1):
            if error is None:
                deleted.append(key)
            else:
                failures.append((key, error))
            if i % _PROGRESS_EVERY == 0:
                log.info("VACUUM %s: %d/%d files deleted", root, i, len(keys))
    return deleted, failures


def _write_last_vacuum_info(store: ObjectStore, plan: VacuumPlan) -> None:
    """Record how far the log has been vacuumed, in Delta Spark's ``_last_vacuum_info`` format,
    so the next lite VACUUM reads only newer commits. Best effort: without it lite mode reads
    from the start of the log (or asks for a full VACUUM)."""
    version = plan.vacuumed_through_version
    if version is None or version < 0:
        return
    body = json.dumps({"latestCommitVersionOutsideOfRetentionWindow": version}).encode()
    try:
        store.put(LAST_VACUUM_INFO, body, mode="overwrite")
    except DeltaError as e:
        log.warning("could not record %s/%s: %s", store.root, LAST_VACUUM_INFO, e)
