"""Optimistic transactions: record what was read, stage actions, commit with put-if-absent.

A commit is one object, ``_delta_log/<version>.json``, created only if absent. Losing the race
is normal: the transaction reads each commit that won, checks it against what this transaction
read and writes (``conflicts.py``), and retries at the next version if they do not conflict,
with bounded, jittered backoff. Blind appends therefore never fail because of other appends.

A create that finds the key taken is checked for being our own earlier attempt (an object store
that lost the response to a successful put): the winning commit's ``txnId`` is compared with
ours, and a match is a success, never a duplicate.

After a successful commit, a checkpoint is written every ``delta.checkpointInterval`` versions;
a failure there is logged and does not undo the commit.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from deltaplane.engine import row_tracking
from deltaplane.engine.actions import (
    Add,
    AddCDCFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    Remove,
    Txn,
    action_to_json_line,
)
from deltaplane.engine.checkpoint_writer import write_checkpoint
from deltaplane.engine.conflicts import (
    ISOLATION_LEVELS,
    SNAPSHOT_ISOLATION,
    WRITE_SERIALIZABLE,
    TransactionSummary,
    check_conflicts,
)
from deltaplane.engine.deletion_vectors import dv_file_key
from deltaplane.engine.errors import (
    CommitConflictError,
    ConcurrentDeleteDeleteError,
    ConcurrentTransactionError,
    ConcurrentVacuumError,
    DeltaError,
    InvalidArgumentError,
    ObjectExistsError,
    ObjectNotFoundError,
    TableExistsError,
)
from deltaplane.engine.expressions.tree import Expr
from deltaplane.engine.log.commits import LogActions, parse_log_json
from deltaplane.engine.log.files import LOG_DIR, LogFile, LogFileKind, commit_key, parse_log_file_name
from deltaplane.engine.log.replay import canonical_paths
from deltaplane.engine.schema import parse_schema
from deltaplane.engine.snapshot import Snapshot, advance_snapshot, update_snapshot
from deltaplane.engine.storage import missing_objects
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_properties import TableProperties
from deltaplane.engine.version import ENGINE_VERSION
from deltaplane.engine.work import WorkKey

log = logging.getLogger(__name__)

ENGINE_INFO = f"deltaplane/{ENGINE_VERSION}"
# Appends cannot conflict, so losing a race only costs a retry; many writers on a slow store can
# lose often. Delta Spark effectively never gives up on them either.
MAX_ATTEMPTS = 500
# A DELETE/UPDATE/MERGE that loses only to OPTIMIZE-like rewrites is planned again this many times.
MAX_RERUNS = 10
# Clocks of the writer and of a VACUUM on another machine may differ by this much.
_CLOCK_SKEW_MS = 5 * 60 * 1000


# commitInfo fields the transaction writes itself; user metadata may not replace them.
RESERVED_COMMIT_INFO_KEYS = frozenset(
    {
        "timestamp",
        "inCommitTimestamp",
        "operation",
        "operationParameters",
        "readVersion",
        "isolationLevel",
        "isBlindAppend",
        "operationMetrics",
        "engineInfo",
        "txnId",
        "version",
    }
)

_COMMIT_METADATA: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "deltaplane_commit_metadata", default=None
)


def check_commit_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """User metadata for commitInfo: string keys, JSON values, none of the reserved fields."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidArgumentError(
            f"commit_metadata must be a dict of JSON values, not {type(metadata).__name__}"
        )
    out = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"commit_metadata keys must be non-empty strings, got {key!r}")
        if key in RESERVED_COMMIT_INFO_KEYS:
            raise InvalidArgumentError(
                f"commit_metadata cannot set {key!r}: the commit writes it itself "
                f"(reserved: {', '.join(sorted(RESERVED_COMMIT_INFO_KEYS))})"
            )
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"commit_metadata[{key!r}] is not a JSON value ({type(value).__name__})"
            ) from None
        out[key] = value
    return out


@contextlib.contextmanager
def commit_metadata_scope(metadata: Mapping[str, Any] | None) -> Iterator[None]:
    """Every transaction begun inside the scope (in this thread or task) stamps ``metadata`` into
    its commitInfo: how the table facade gives ``commit_metadata`` to every command without
    threading it through each one. Nested scopes merge, inner keys winning."""
    checked = check_commit_metadata(metadata)
    outer = _COMMIT_METADATA.get() or {}
    token = _COMMIT_METADATA.set({**outer, **checked})
    try:
        yield
    finally:
        _COMMIT_METADATA.reset(token)


class _AppTransaction:
    """The application transaction a scope stamps on its first commit."""

    def __init__(self, app_id: str, version: int):
        self.app_id = app_id
        self.version = version
        self.committed = False


_APP_TRANSACTION: contextvars.ContextVar[_AppTransaction | None] = contextvars.ContextVar(
    "deltaplane_app_transaction", default=None
)


@contextlib.contextmanager
def app_transaction_scope(app_id: str | None, version: int | None) -> Iterator[None]:
    """The first commit made inside the scope also records ``txn(app_id, version)`` (and
    conflicts with a concurrent commit of the same application), whatever command makes it:
    how a scheduler makes DELETE, OPTIMIZE or VACUUM retry-safe without each command taking
    ``app_id``. Check ``snapshot.app_transaction_version(app_id)`` before starting the work;
    ``None`` for both arguments is a no-op scope."""
    if app_id is None and version is None:
        yield
        return
    if not isinstance(app_id, str) or not app_id:
        raise InvalidArgumentError(f"app_id must be a non-empty string, got {app_id!r}")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidArgumentError(f"the application version must be a non-negative integer, got {version!r}")
    token = _APP_TRANSACTION.set(_AppTransaction(app_id, version))
    try:
        yield
    finally:
        _APP_TRANSACTION.reset(token)


def current_app_transaction() -> tuple[str, int] | None:
    """The scope's ``(app_id, version)`` while its first commit has not happened, else ``None``
    (for code that hands the commit to another process, e.g. a Spark job)."""
    scope = _APP_TRANSACTION.get()
    return None if scope is None or scope.committed else (scope.app_id, scope.version)


def rerun_past_rearrangements(
    run: Callable[[Snapshot], CommitResult], read: Snapshot, *, reruns: int = MAX_RERUNS
) -> tuple[CommitResult, Snapshot]:
    """Run a change planned on ``read`` (``run(snapshot)`` plans and commits it); when it loses
    only because a concurrent commit rewrote files it also rewrites *without changing their rows*
    (OPTIMIZE, a deletion-vector purge, auto-compaction: ``dataChange=false``), plan it again on
    the latest version, up to ``reruns`` times. The rows the change sees are the same, so the
    outcome is the one it would have had a moment later: table maintenance never fails a user's
    DELETE, UPDATE or MERGE. A conflict with a commit that changed data is raised as before.
    Returns the result and the snapshot the committed plan was made on."""
    for attempt in range(reruns + 1):
        try:
            return run(read), read
        except ConcurrentDeleteDeleteError as e:
            if not e.rearranged or attempt == reruns:
                raise
            log.info("%s: lost to a rewrite that changed no rows (%s); planning again", read.store.root, e)
            read = update_snapshot(read)
    raise AssertionError("unreachable")


@dataclass
class CommitResult:
    """What a commit did: the version it created (or found) and Delta Spark-style metrics.

    ``committed`` says whether this call wrote the commit ``version``. It is false for a
    ``skipped`` write (an idempotent (appId, version) write found already committed: ``version``
    is the table's) and for a command that had nothing to commit (``Transaction.commit_if_needed``:
    a DELETE/UPDATE that matched no row, a MERGE that changed nothing; ``version`` is the version
    read, ``skipped`` is false)."""

    version: int
    operation: str
    operation_metrics: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False  # an idempotent (appId, version) write that was already committed
    attempts: int = 1
    checkpoint_written: bool = False
    txn_id: str | None = None
    # The table state right after this commit, built in memory (no log read-back).
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)
    # Set by the table facade when delta.autoOptimize.autoCompact compacted after this commit.
    auto_compaction: Any = field(default=None, repr=False, compare=False)
    # Set by the table facade when it refreshed the symlink manifest after this commit.
    manifest: Any = field(default=None, repr=False, compare=False)
    committed: bool | None = None  # None: true unless ``skipped``

    def __post_init__(self) -> None:
        if self.committed is None:
            self.committed = not self.skipped


class Transaction:
    """One atomic change to a table, read at ``snapshot`` (``None`` to create the table)."""

    def __init__(
        self,
        store: ObjectStore,
        snapshot: Snapshot | None,
        *,
        operation: str,
        operation_parameters: dict[str, Any] | None = None,
        isolation_level: str | None = None,
        checkpoint: bool = True,
        commit_metadata: Mapping[str, Any] | None = None,
    ):
        self.store = store
        # User metadata for commitInfo (an Airflow run id, say): the scope's, then the caller's.
        self.commit_metadata = {**(_COMMIT_METADATA.get() or {}), **check_commit_metadata(commit_metadata)}
        scope = _APP_TRANSACTION.get()
        self._scope_txn = scope if scope is not None and not scope.committed else None
        self.snapshot = snapshot
        self.operation = operation
        self.operation_parameters = dict(operation_parameters or {})
        self.txn_id = str(uuid.uuid4())
        self.checkpoint = checkpoint
        self._protocol: Protocol | None = None
        self._metadata: Metadata | None = None
        self._given_metadata: Metadata | None = None  # as the command gave it
        self._adds: list[Add] = []
        self._removes: list[Remove] = []
        self._cdc: list[AddCDCFile] = []
        self._txns: list[Txn] = []
        self._domains: list[DomainMetadata] = []
        self.summary = TransactionSummary()
        self._winners: list[LogActions] = []
        self._committed_body: bytes | None = None
        self._started = time.time()
        # VACUUM commits among the winners that may have deleted files this transaction wrote:
        # the version of one still running (START without END), and whether one has finished.
        self._vacuum_running: int | None = None
        self._vacuum_done = False
        self._verified_ms: int | None = None
        level = isolation_level
        if level is None and snapshot is not None:
            level = snapshot.properties.isolation_level
        self.summary.isolation_level = level or WRITE_SERIALIZABLE
        if self._scope_txn is not None:  # a concurrent commit of the same application conflicts
            self.summary.read_app_ids.add(self._scope_txn.app_id)
            key = WorkKey(self._scope_txn.app_id, self._scope_txn.version)
            if snapshot is not None and key.done_in(snapshot):
                # The work landed after the caller checked (a command that reads the latest
                # version, racing another try of the same work): never apply it twice.
                raise ConcurrentTransactionError(
                    f"{store.root}: application transaction {key.app_id} is already recorded at "
                    f"version {key.version} or later as of version {snapshot.version}"
                )
        if self.summary.isolation_level not in ISOLATION_LEVELS:
            raise DeltaError(
                f"unknown isolation level {self.summary.isolation_level!r} (use one of {ISOLATION_LEVELS})"
            )

    # --- what the transaction read ------------------------------------------------------------

    @property
    def read_version(self) -> int:
        return self.snapshot.version if self.snapshot is not None else -1

    def read_whole_table(self) -> None:
        self.summary.read_whole_table = True

    def read_files(self, files: pa.Table, predicate: Expr | None) -> None:
        """Record files read because of ``predicate`` (bound); ``None`` means the whole table."""
        if predicate is None:
            self.summary.read_whole_table = True
        else:
            self.summary.read_predicates.append(predicate)
        if files.num_rows:
            root = self.store.root
            self.summary.read_file_keys |= set(canonical_paths(files.column("path"), root).to_pylist())

    def read_exact_files(self, files: pa.Table) -> None:
        """Record files read as such (no predicate): only their removal by another writer
        conflicts, as for OPTIMIZE, which reads exactly the files it rewrites."""
        if files.num_rows:
            root = self.store.root
            self.summary.read_file_keys |= set(canonical_paths(files.column("path"), root).to_pylist())

    def read_app_transaction(self, app_id: str) -> int | None:
        self.summary.read_app_ids.add(app_id)
        return self.snapshot.app_transaction_version(app_id) if self.snapshot else None

    # --- what it writes -----------------------------------------------------------------------

    def update_protocol(self, protocol: Protocol) -> None:
        self._protocol = protocol
        self.summary.changes_protocol = True
        if self._given_metadata is not None:  # the history a schema keeps depends on the features
            self.update_metadata(self._given_metadata)

    def update_metadata(self, metadata: Metadata) -> None:
        """Commit ``metadata`` as the table's new metadata, with what its schema must carry over
        (``_schema_history_kept``): identity columns keep the most advanced high-water mark the
        table had, so no command hands out an identity value twice by writing an older or a
        re-built schema, and widened types are recorded in ``delta.typeChanges``."""
        self._given_metadata = metadata
        self._metadata = _schema_history_kept(
            metadata,
            self.snapshot.metadata if self.snapshot else None,
            self._protocol or (self.snapshot.protocol if self.snapshot else None),
        )
        self.summary.changes_metadata = True

    def add_files(self, adds: list[Add]) -> None:
        self._adds.extend(adds)

    def remove_files(self, removes: list[Remove]) -> None:
        self._removes.extend(removes)
        if removes:
            paths = pa.array([r.path for r in removes], pa.string())
            self.summary.removed_file_keys |= set(canonical_paths(paths, self.store.root).to_pylist())

    def add_change_files(self, cdc: list[AddCDCFile]) -> None:
        self._cdc.extend(cdc)

    def set_app_transaction(self, app_id: str, version: int) -> None:
        self._txns.append(Txn(app_id, version, int(time.time() * 1000)))
        self.summary.read_app_ids.add(app_id)

    def set_domain_metadata(self, domain: DomainMetadata) -> None:
        dropping = (
            domain.removed and self._protocol is not None and not row_tracking.is_supported(self._protocol)
        )
        if domain.domain == row_tracking.DOMAIN and not dropping:  # (removed with the feature only)
            raise InvalidArgumentError(f"the {domain.domain} domain is maintained by the commits themselves")
        self._domains.append(domain)
        self.summary.domains.add(domain.domain)

    @property
    def metadata(self) -> Metadata:
        if self._metadata is not None:
            return self._metadata
        assert self.snapshot is not None
        return self.snapshot.metadata

    @property
    def protocol(self) -> Protocol:
        if self._protocol is not None:
            return self._protocol
        assert self.snapshot is not None
        return self.snapshot.protocol

    @property
    def is_blind_append(self) -> bool:
        s = self.summary
        return not (s.read_whole_table or s.read_predicates or self._removes or s.changes_metadata) and all(
            a.data_change for a in self._adds
        )

    def _effective_isolation(self) -> str:
        data_change = any(a.data_change for a in self._adds) or any(r.data_change for r in self._removes)
        non_file = self._protocol or self._metadata or self._txns or self._domains
        if not data_change and not non_file:
            return SNAPSHOT_ISOLATION  # e.g. OPTIMIZE: never conflicts with appends
        return self.summary.isolation_level

    # --- committing ---------------------------------------------------------------------------

    @property
    def has_actions(self) -> bool:
        """Whether committing would record anything besides commitInfo: files, change-data
        files, protocol, metadata, domains, or a txn (one set here, or the pending one of an
        ``app_transaction_scope``: a work key is recorded even when the work changed nothing)."""
        return bool(
            self._adds
            or self._removes
            or self._cdc
            or self._protocol is not None
            or self._metadata is not None
            or self._txns
            or self._domains
            or self._scope_txn is not None
        )

    def commit_if_needed(self, operation_metrics: dict[str, Any] | None = None) -> CommitResult:
        """``commit()``, unless the transaction has no action to record (``has_actions``): then
        nothing is written and the result says so (``committed=False``, ``version`` = the version
        read, the metrics as computed), as Delta Spark's ``commitIfNeeded`` does for
        DELETE/UPDATE/MERGE. Commands whose commitInfo alone is the record (VACUUM START/END)
        call ``commit()``."""
        if self.snapshot is None or self.has_actions:
            return self.commit(operation_metrics)
        metrics = {k: str(v) for k, v in (operation_metrics or {}).items()}
        return CommitResult(
            self.read_version, self.operation, metrics, committed=False, attempts=0, snapshot=self.snapshot
        )

    def commit(self, operation_metrics: dict[str, Any] | None = None) -> CommitResult:
        metrics = {k: str(v) for k, v in (operation_metrics or {}).items()}
        self.summary.isolation_level = self._effective_isolation()
        version = self.read_version + 1
        for attempt in range(1, MAX_ATTEMPTS + 1):
            self._check_files_survived_vacuum()
            body = self._render(version, metrics)
            self._committed_body = body
            try:
                self.store.put(commit_key(version), body, mode="create")
            except ObjectExistsError:
                if self._is_our_commit(version):
                    return self._committed(version, metrics, attempt)
                if self.snapshot is None:
                    raise TableExistsError(f"a Delta table already exists at {self.store.root}") from None
                version = self._rebase(version)
                # Full jitter, growing with consecutive losses: spreads out writers that keep
                # colliding without slowing down the usual single retry.
                time.sleep(random.uniform(0, min(0.002 * 2 ** min(attempt, 7), 0.25)))
                continue
            return self._committed(version, metrics, attempt)
        raise CommitConflictError(
            f"gave up committing to {self.store.root} after {MAX_ATTEMPTS} attempts: "
            "too many concurrent writers"
        )

    def _committed(self, version: int, metrics: dict[str, str], attempts: int) -> CommitResult:
        if self._scope_txn is not None:
            self._scope_txn.committed = True  # later commits in the scope carry no txn
        result = CommitResult(version, self.operation, metrics, attempts=attempts, txn_id=self.txn_id)
        result.snapshot = self._state_after(version)
        if self.checkpoint and version > 0:
            interval = TableProperties(self.metadata.configuration).checkpoint_interval
            if version % interval == 0:
                try:
                    write_checkpoint(self.store, version, result.snapshot)
                    result.checkpoint_written = True
                except DeltaError as e:
                    log.warning(
                        "commit %d of %s succeeded but its checkpoint failed: %s", version, self.store.root, e
                    )
        return result

    def _state_after(self, version: int) -> Snapshot | None:
        """The snapshot at ``version``: the read snapshot plus the winners (already parsed
        while rebasing) plus this commit, parsed from the bytes just written."""
        if self.snapshot is None or self._committed_body is None:
            return None
        try:
            ours = parse_log_json(self._committed_body, version=version, source=commit_key(version))
            commits = [*self._winners, ours]
            if [c.version for c in commits] != list(range(self.snapshot.version + 1, version + 1)):
                return update_snapshot(self.snapshot, version)
            now = int(time.time() * 1000)
            files = [
                LogFile(commit_key(c.version), LogFileKind.COMMIT, c.version, 0, now, fmt="json")
                for c in commits
            ]
            return advance_snapshot(self.snapshot, files, commits)
        except DeltaError as e:
            log.warning("could not build the state after commit %d of %s: %s", version, self.store.root, e)
            return None

    def _is_our_commit(self, version: int) -> bool:
        try:
            winner = self._read_commit(version)
        except ObjectNotFoundError:
            return False
        return bool(winner.commit_info and winner.commit_info.txn_id == self.txn_id)

    def _read_commit(self, version: int) -> LogActions:
        key = commit_key(version)
        return parse_log_json(self.store.get(key), version=version, source=key)

    def _rebase(self, lost_version: int) -> int:
        """Check every commit from ``lost_version`` on against this transaction; next version."""
        latest = self._latest_version(lost_version)
        for version in range(lost_version, latest + 1):
            winner = self._read_commit(version)
            self._winners.append(winner)
            check_conflicts(
                self.summary,
                winner,
                metadata=self.metadata,
                protocol=self.protocol,
                table_root=self.store.root,
            )
            if winner.protocol is not None:
                self._winner_protocol = winner.protocol
            if winner.commit_info is not None:
                self._last_winner_ict = winner.commit_info.in_commit_timestamp
                self._note_vacuum(winner)
        return latest + 1

    def _note_vacuum(self, winner: LogActions) -> None:
        """Remember a winning VACUUM START/END that could have deleted our files: one whose
        cut-off (its time minus its retention) is after this transaction started writing."""
        info = winner.commit_info
        operation = str(info.operation or "").upper() if info is not None else ""
        if operation == "VACUUM END":
            if self._vacuum_running is not None:
                self._vacuum_running, self._vacuum_done = None, True
            return
        if operation != "VACUUM START":
            return
        params = info.values.get("operationParameters") or {}
        retention = params.get("specifiedRetentionMillis", params.get("defaultRetentionMillis"))
        try:
            cutoff = int(info.values.get("timestamp")) - int(json.loads(str(retention)))
        except (TypeError, ValueError):
            cutoff = None  # a writer that does not say: assume the worst
        if cutoff is None or self._oldest_write_ms() - _CLOCK_SKEW_MS < cutoff:
            self._vacuum_running = winner.version

    def _check_files_survived_vacuum(self) -> None:
        """Before committing, make sure VACUUM has not deleted the files this transaction wrote.

        A writer paused between writing its data files and committing for longer than the
        retention period has files that look untracked and old to a concurrent VACUUM, which
        deletes them; committing them would make the latest version unreadable. Checked when
        such a VACUUM is among the winners this transaction rebased over (one still running is a
        conflict: its deletes cannot be checked yet), and when the transaction has been open
        longer than half the table's retention (a VACUUM that records no commits leaves nothing
        to see).
        """
        written = None
        if self._vacuum_running is not None:
            written = self._written_locations()
            if written:
                raise ConcurrentVacuumError(
                    f"a VACUUM of {self.store.root} started at version {self._vacuum_running} while "
                    f"this {self.operation} was open longer than the retention period, and has not "
                    f"finished: it may delete the {len(written)} file(s) this {self.operation} wrote. "
                    f"Nothing was committed; run the {self.operation} again.",
                    written,
                )
            self._vacuum_running = None
        retention_ms = TableProperties(self.metadata.configuration).deleted_file_retention_ms
        if not self._vacuum_done and time.time() * 1000 - self._oldest_write_ms() < retention_ms / 2:
            return
        self._vacuum_done = False
        written = self._written_locations() if written is None else written
        gone = missing_objects(self.store, written) if written else []
        if gone:
            shown = ", ".join(gone[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
            raise ConcurrentVacuumError(
                f"a concurrent VACUUM of {self.store.root} deleted {len(gone)} file(s) this "
                f"{self.operation} wrote before it could commit (it was open longer than the "
                f"retention period): {shown}. Nothing was committed; run the {self.operation} again.",
                gone,
            )

    def _new_files(self) -> list[tuple[Add, str]]:
        """Adds of files this transaction wrote, with their keys (not a file re-added with a
        new deletion vector, which was already live)."""
        if not self._adds:
            return []
        keys = canonical_paths(pa.array([a.path for a in self._adds], pa.string()), self.store.root)
        removed = self.summary.removed_file_keys
        return [(a, k) for a, k in zip(self._adds, keys.to_pylist(), strict=True) if k not in removed]

    def _oldest_write_ms(self) -> int:
        """When the oldest file this transaction wrote was written: adds carry their files'
        modification times (files may be written long before the transaction exists, by Spark
        tasks or an OPTIMIZE rewrite); change-data files were written after it began."""
        oldest = int(self._started * 1000)
        for add, _ in self._new_files():
            oldest = min(oldest, int(add.modification_time or oldest))
        return oldest if self._verified_ms is None else max(oldest, self._verified_ms)

    def mark_files_verified(self) -> None:
        """The caller has just checked that the files it adds exist (RESTORE re-adding old
        files): they count as written now for the VACUUM check."""
        self._verified_ms = int(time.time() * 1000)

    def _written_locations(self) -> list[str]:
        """Files this transaction wrote and references: new data files, new deletion-vector
        files and change-data files."""
        out = [key for _, key in self._new_files()]
        for add in self._adds:
            dv = add.deletion_vector
            if dv is not None and dv.storage_type in ("u", "p"):
                out.append(dv_file_key(dv))
        if self._cdc:
            paths = pa.array([c.path for c in self._cdc], pa.string())
            out += canonical_paths(paths, self.store.root).to_pylist()
        return out

    def _latest_version(self, at_least: int) -> int:
        latest = at_least
        start_after = f"{LOG_DIR}/{at_least:020d}"
        for meta in self.store.list(f"{LOG_DIR}/", start_after=start_after):
            f = parse_log_file_name(meta.key)
            if f is not None and f.kind is LogFileKind.COMMIT:
                latest = max(latest, f.version)
        return latest

    _last_winner_ict: int | None = None
    _winner_protocol: Protocol | None = None

    def _with_row_ids(self, version: int) -> tuple[list[Add], list[DomainMetadata], bool]:
        """Adds with row ids and commit versions assigned for ``version`` (row tracking), the
        domains to commit (the new high-water mark among them), and whether row tracking is
        enabled. Done at every attempt: a retry takes the winners' high-water mark."""
        protocol = self._protocol or self._winner_protocol or self.protocol
        metadata = self.metadata
        if not row_tracking.assigns(protocol, metadata):
            return self._adds, self._domains, False
        domains = [self.snapshot.domains.get(row_tracking.DOMAIN)] if self.snapshot is not None else []
        for winner in self._winners:
            domains += winner.domains
        adds, mark = row_tracking.assign(self._adds, row_tracking.high_water_mark(domains), version)
        new_domains = self._domains + ([mark] if mark is not None else [])
        return adds, new_domains, row_tracking.is_enabled(protocol, metadata)

    def _render(self, version: int, metrics: dict[str, str]) -> bytes:
        now = int(time.time() * 1000)
        info: dict[str, Any] = {
            "timestamp": now,
            "operation": self.operation,
            "operationParameters": {k: _param(v) for k, v in self.operation_parameters.items()},
        }
        if self.read_version >= 0:
            info["readVersion"] = self.read_version
        info.update(
            {
                "isolationLevel": self.summary.isolation_level,
                "isBlindAppend": self.is_blind_append,
                "operationMetrics": metrics,
                "engineInfo": ENGINE_INFO,
                "txnId": self.txn_id,
            }
        )
        info.update(self.commit_metadata)  # reserved keys were refused when it was set
        adds, domains, tracked = self._with_row_ids(version)
        if tracked:  # every deltaplane command keeps the rows' ids and commit versions
            info["tags"] = {**(info.get("tags") or {}), row_tracking.PRESERVED_TAG: "true"}
        metadata = self._metadata
        if TableProperties(self.metadata.configuration).enable_in_commit_timestamps:
            previous = self._last_winner_ict
            if previous is None and self.snapshot is not None and version == self.read_version + 1:
                previous = self.snapshot.timestamp
            info = {"inCommitTimestamp": max(now, (previous or 0) + 1), **info}
            if metadata is not None:
                metadata = _with_ict_enablement(metadata, self.snapshot, version, info["inCommitTimestamp"])
        actions: list = [CommitInfo(info)]
        if self._protocol is not None:
            actions.append(self._protocol)
        if metadata is not None:
            actions.append(metadata)
        txns = list(self._txns)
        scope = self._scope_txn
        if scope is not None and all(t.app_id != scope.app_id for t in txns):
            txns.append(Txn(scope.app_id, scope.version, now))
        actions += txns + domains + self._removes + adds + self._cdc
        return ("\n".join(action_to_json_line(a) for a in actions) + "\n").encode("utf-8")


IDENTITY_MARK_KEY = "delta.identity.highWaterMark"  # column_values' key, without importing it


def _schema_history_kept(
    metadata: Metadata, previous: Metadata | None, protocol: Protocol | None
) -> Metadata:
    """``metadata`` with what a new schema must carry over from the one it replaces: identity
    high-water marks never go back (``keep_high_water_marks``), and a widened type is recorded in
    ``delta.typeChanges`` (``record_type_changes``) on tables with the typeWidening feature."""
    if previous is None or metadata.schema_string == previous.schema_string:
        return metadata  # the common case, without parsing a schema
    from deltaplane.engine.column_values import keep_high_water_marks
    from deltaplane.engine.schema_changes import record_type_changes
    from deltaplane.engine.table_features import writer_features

    schema = parse_schema(metadata.schema_string)
    old = parse_schema(previous.schema_string)
    kept = schema
    if IDENTITY_MARK_KEY in (previous.schema_string or ""):
        kept = keep_high_water_marks(kept, old)
    if protocol is not None and writer_features(protocol) & {"typeWidening", "typeWidening-preview"}:
        kept = record_type_changes(kept, old)
    return metadata if kept is schema else dataclasses.replace(metadata, schema_string=kept.to_json_string())


def _with_ict_enablement(metadata: Metadata, read: Snapshot | None, version: int, ict: int) -> Metadata:
    """The commit that turns in-commit timestamps on for a table that already has commits records
    where its timeline switches from file times (``delta.inCommitTimestampEnablementVersion`` and
    ``...Timestamp``, the protocol's rule), known only now: the version this attempt commits."""
    enabled_before = (
        read is not None and TableProperties(read.metadata.configuration).enable_in_commit_timestamps
    )
    configuration = metadata.configuration
    if version == 0 or enabled_before:
        return metadata  # (a value left from an earlier enablement is replaced: this one counts)
    return dataclasses.replace(
        metadata,
        configuration={
            **configuration,
            "delta.inCommitTimestampEnablementVersion": str(version),
            "delta.inCommitTimestampEnablementTimestamp": str(ict),
        },
    )


def _param(value: Any) -> str:
    """Delta Spark stores operation parameters as strings (JSON for lists and maps)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)
