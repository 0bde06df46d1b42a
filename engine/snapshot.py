"""An immutable snapshot of a table at one version, and loading it.

Loading reads the checkpoint and the commits after it (commits in parallel, since on object
stores each is a round trip), picks the newest protocol and metadata, checks that this engine can
read the table, and replays file actions into a columnar live-file table. Nothing here builds a
Python object per data file.

A checkpoint that cannot be read (missing, truncated) is not fatal if an older checkpoint or the
JSON commits can rebuild the same version: the loader falls back, logging which file it skipped.
A checkpoint that reads but is wrong (no protocol, no metadata) is an error.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from deltaplane.engine.actions import CommitInfo, DomainMetadata, Metadata, Protocol, Txn
from deltaplane.engine.errors import (
    CorruptCheckpointError,
    CorruptLogError,
    MissingLogVersionError,
    ObjectNotFoundError,
    SchemaError,
    VersionNotFoundError,
)
from deltaplane.engine.log.checkpoints import read_checkpoint, read_checkpoint_config
from deltaplane.engine.log.commits import LogActions, parse_log_json
from deltaplane.engine.log.files import LogFile
from deltaplane.engine.log.replay import (
    SMALL_REPLAY_ACTIONS,
    ReplayResult,
    advance_rows,
    normalize_partition_values,
    reconcile,
    reconcile_rows,
)
from deltaplane.engine.log.segment import LogListing, LogSegment, build_log_segment, list_log
from deltaplane.engine.schema import StructField, StructType, parse_schema, partition_physical_names
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import check_read_supported
from deltaplane.engine.table_properties import TableProperties
from deltaplane.engine.values_to_arrow import scalar

log = logging.getLogger(__name__)

# Commit files are small and independent: fetch and parse them concurrently. pyarrow.json
# releases the GIL, and on object stores each file is a network round trip.
_READ_WORKERS = 8
_LOCAL_WORKERS = max(2, min(8, 2 * (os.cpu_count() or 1)))


@dataclass(frozen=True)
class Snapshot:
    """The state of a table at ``version``. ``files`` holds one row per live data file."""

    store: ObjectStore
    version: int
    protocol: Protocol
    metadata: Metadata
    files: pa.Table = field(repr=False)
    tombstones: pa.Table = field(repr=False)
    txns: dict[str, Txn] = field(repr=False)
    domains: dict[str, DomainMetadata] = field(repr=False)
    commit_info: CommitInfo | None = field(repr=False)
    timestamp: int = 0  # commit timestamp of ``version``, ms (in-commit timestamp when enabled)
    segment: LogSegment | None = field(default=None, repr=False, compare=False)
    # commitInfo of the commits replayed to build this snapshot, by version (history reads them
    # from here instead of opening those commits again).
    commit_infos: dict[int, dict] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def schema(self) -> StructType:
        return parse_schema(self.metadata.schema_string)

    @cached_property
    def properties(self) -> TableProperties:
        return TableProperties(self.metadata.configuration)

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @cached_property
    def column_mapping_mode(self) -> str:
        return self.properties.column_mapping_mode

    @cached_property
    def partition_fields(self) -> list[StructField]:
        return partition_fields(self.schema, self.metadata, self.store.root)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    def app_transaction_version(self, app_id: str) -> int | None:
        txn = self.txns.get(app_id)
        return txn.version if txn else None


def files_snapshot(
    store: ObjectStore, version: int, protocol: Protocol, metadata: Metadata, files: pa.Table
) -> Snapshot:
    """A snapshot holding only ``files`` (live-file rows) under this protocol and metadata, built
    without reading the log: what a task, a staged batch or a log consumer scans."""
    return Snapshot(
        store=store,
        version=version,
        protocol=protocol,
        metadata=metadata,
        files=files,
        tombstones=pa.table({}),
        txns={},
        domains={},
        commit_info=None,
    )


def partition_fields(schema: StructType, metadata: Metadata, root: str = "") -> list[StructField]:
    out = []
    for name in metadata.partition_columns:
        f = schema.find(name)
        if f is None:
            raise SchemaError(f"partition column {name!r} of {root} is not in the table schema")
        out.append(f)
    return out


def load_snapshot(store: ObjectStore, version: int | None = None) -> Snapshot:
    """Load the snapshot at ``version`` (latest when ``None``)."""
    segment = build_log_segment(store, version)
    while True:
        try:
            return _load(store, segment)
        except CorruptCheckpointError as e:
            if segment.checkpoint is None:
                raise
            try:
                fallback = build_log_segment(
                    store,
                    segment.version,
                    checkpoint_before=segment.checkpoint.version,
                    listing=segment.listing,
                )
            except (MissingLogVersionError, VersionNotFoundError):
                raise e from None
            log.warning(
                "checkpoint %s of %s is unreadable (%s); rebuilding version %d from %s",
                segment.checkpoint.name,
                store.root,
                e,
                segment.version,
                fallback.checkpoint.name if fallback.checkpoint else "the JSON commits",
            )
            segment = fallback


def load_table_config(store: ObjectStore, version: int | None = None) -> tuple[Protocol, Metadata]:
    """Protocol and metadata at ``version`` without replaying file actions.

    Commits are read newest first and only their protocol/metaData lines are decoded; the
    checkpoint is consulted (non-file columns only) when the tail does not hold both.
    """
    segment = build_log_segment(store, version)
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    for f in reversed(segment.commits):
        data = store.get(f.key)
        if b'"metaData"' not in data and b'"protocol"' not in data:
            continue
        lines = [line for line in data.split(b"\n") if b'"metaData"' in line or b'"protocol"' in line]
        actions = parse_log_json(b"\n".join(lines), version=f.version, source=f.key)
        protocol = protocol or actions.protocol
        metadata = metadata or actions.metadata
        if protocol and metadata:
            break
    if (protocol is None or metadata is None) and segment.checkpoint is not None:
        actions = read_checkpoint_config(store, segment.checkpoint)
        protocol = protocol or actions.protocol
        metadata = metadata or actions.metadata
    if protocol is None or metadata is None:
        missing = "protocol" if protocol is None else "metaData"
        raise CorruptLogError(f"{store.root}: no {missing} action up to version {segment.version}")
    return protocol, metadata


def read_commit(
    store: ObjectStore,
    key: str,
    version: int,
    partition_keys: set[str] | None = None,
    *,
    threads: bool = True,
) -> LogActions:
    try:
        data = store.get(key)
    except ObjectNotFoundError as e:
        raise MissingLogVersionError(f"commit {key} of {store.root} disappeared", key) from e
    return parse_log_json(data, version=version, source=key, partition_keys=partition_keys, threads=threads)


_RELEASE_AFTER_ROWS = 100_000
_KEPT_COMMIT_INFOS = 1000
# Below this many bytes of local commits, starting threads costs more than it saves.
_SEQUENTIAL_LOCAL_BYTES = 4 << 20


def _read_commits(store: ObjectStore, commits) -> list[LogActions]:
    keys: set[str] = set()  # partitionValues keys, learnt once and shared by every commit
    remote = getattr(store, "remote", True)  # a store that does not say is treated as remote
    small = sum(f.size or 0 for f in commits) < _SEQUENTIAL_LOCAL_BYTES
    if len(commits) > 1 and (remote or not small):
        # Round trips overlap well beyond the cores; local parsing is CPU work: a few workers,
        # each parsing single-threaded, beat nested thread pools on a small machine.
        workers = _READ_WORKERS if remote else _LOCAL_WORKERS
        with ThreadPoolExecutor(min(workers, len(commits))) as pool:
            return list(
                pool.map(lambda f: read_commit(store, f.key, f.version, keys, threads=False), commits)
            )
    return [read_commit(store, f.key, f.version, keys) for f in commits]


def _load(store: ObjectStore, segment: LogSegment) -> Snapshot:
    parsed = _read_commits(store, segment.commits)
    checkpoint = read_checkpoint(store, segment.checkpoint) if segment.checkpoint else None
    return _assemble(store, segment, parsed, checkpoint)


def update_snapshot(snapshot: Snapshot, version: int | None = None) -> Snapshot:
    """The snapshot moved forward to ``version`` (latest when ``None``) by replaying only the
    commits after it on top of its state: no checkpoint or old commit is read again."""
    store = snapshot.store
    listing = list_log(store, snapshot.version + 1)
    available = sorted(
        v for v in listing.commits if v > snapshot.version and (version is None or v <= version)
    )
    if version is not None and version < snapshot.version:
        return load_snapshot(store, version)
    if not available:
        if version is not None and version != snapshot.version:
            raise VersionNotFoundError(f"version {version} of {store.root} does not exist")
        return snapshot
    if available != list(range(snapshot.version + 1, available[-1] + 1)):
        return load_snapshot(store, version)  # a gap or a rewrite: start over, with full checks
    new_files = [listing.commits[v] for v in available]
    return advance_snapshot(snapshot, new_files, _read_commits(store, new_files), listing.checkpoints)


def advance_snapshot(
    snapshot: Snapshot,
    files: list[LogFile],
    parsed: list[LogActions],
    checkpoints: dict | None = None,
) -> Snapshot:
    """``snapshot`` with the given commits (the next versions, ascending, already parsed)
    replayed on top. A writer uses it to know the state its commit produced without reading
    the log back."""
    previous = snapshot.segment
    merged = LogListing(
        {**(previous.listing.commits if previous else {}), **{f.version: f for f in files}},
        {**(previous.listing.checkpoints if previous else {}), **(checkpoints or {})},
        complete_from_zero=bool(previous and previous.listing.complete_from_zero),
    )
    segment = LogSegment(
        files[-1].version,
        previous.checkpoint if previous else None,
        (*(previous.commits if previous else ()), *files),
        merged,
    )
    replayed = _advanced_files(snapshot, parsed)
    if replayed is None:
        return _assemble(snapshot.store, segment, parsed, _as_base(snapshot), snapshot.commit_infos)
    return _assemble(
        snapshot.store, segment, parsed, _as_base(snapshot, files=False), snapshot.commit_infos, replayed
    )


def _advanced_files(snapshot: Snapshot, parsed: list[LogActions]) -> ReplayResult | None:
    """The snapshot's files and tombstones carried over commits still in parsed JSON (a writer's
    own commit, most often), without re-keying every file it knows; ``None`` when that does not
    apply (a large commit, a metadata change, other column shapes)."""
    pending = [a.pending_rows for a in parsed]
    if any(p is None for p in pending) or sum(len(p) for p in pending) > SMALL_REPLAY_ACTIONS:
        return None
    if any(a.metadata is not None for a in parsed):
        return None  # the partition columns or their physical names may change: the full path
    physical = [f.physical_name for f in snapshot.partition_fields]
    rows = [(a.version, rows) for a, rows in zip(reversed(parsed), reversed(pending), strict=True)]
    try:
        return advance_rows(snapshot.files, snapshot.tombstones, rows, snapshot.store.root, physical)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None  # the full path names the file and the field


def _as_base(snapshot: Snapshot, *, files: bool = True) -> LogActions:
    """A snapshot's state in the shape of a checkpoint's actions, to replay commits onto
    (``files=False``: its protocol, metadata, transactions and domains only)."""
    if not files:
        return LogActions(
            source=f"snapshot {snapshot.version}",
            version=snapshot.version,
            protocol=snapshot.protocol,
            metadata=snapshot.metadata,
            txns=list(snapshot.txns.values()),
            domains=list(snapshot.domains.values()),
        )
    files = snapshot.files
    n = files.num_rows
    live = files.append_column("is_add", pa.repeat(True, n))
    live = live.append_column("deletion_timestamp", pa.nulls(n, pa.int64()))
    live = live.append_column("extended_file_metadata", pa.nulls(n, pa.bool_()))
    tombstones = snapshot.tombstones
    tombstones = tombstones.append_column("is_add", pa.repeat(False, tombstones.num_rows))
    if tombstones.num_rows:
        table = pa.concat_tables([live, tombstones.select(live.column_names)], promote_options="permissive")
    else:
        table = live
    return LogActions(
        source=f"snapshot {snapshot.version}",
        version=snapshot.version,
        file_actions=table,
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        txns=list(snapshot.txns.values()),
        domains=list(snapshot.domains.values()),
    )


def _table_config(store: ObjectStore, segment: LogSegment, newest_first: list[LogActions]):
    """The newest protocol and metadata (both must exist; the protocol must be readable) and the
    physical names of the partition columns."""
    protocol = next((a.protocol for a in newest_first if a.protocol is not None), None)
    metadata = next((a.metadata for a in newest_first if a.metadata is not None), None)
    if protocol is None:
        raise CorruptLogError(f"{store.root}: no protocol action up to version {segment.version}")
    if metadata is None:
        raise CorruptLogError(f"{store.root}: no metaData action up to version {segment.version}")
    check_read_supported(protocol, store.root)
    schema = parse_schema(metadata.schema_string)
    try:
        physical = partition_physical_names(schema, metadata.partition_columns)
    except SchemaError as e:
        raise SchemaError(f"{store.root}: {e}") from None
    return protocol, metadata, physical


def _commit_infos(parsed: list[LogActions], base_infos: dict[int, dict] | None) -> dict[int, dict]:
    """commitInfo by version: the base snapshot's and the new commits', at most the newest
    ``_KEPT_COMMIT_INFOS`` (a writer that lives for many commits)."""
    infos = dict(base_infos or {})
    infos.update({a.version: a.commit_info.values for a in parsed if a.commit_info is not None})
    if len(infos) > _KEPT_COMMIT_INFOS:
        infos = dict(sorted(infos.items())[-_KEPT_COMMIT_INFOS:])
    return infos


def _assemble(
    store: ObjectStore,
    segment: LogSegment,
    parsed: list[LogActions],
    checkpoint: LogActions | None,
    base_infos: dict[int, dict] | None = None,
    replayed: ReplayResult | None = None,
) -> Snapshot:
    """Protocol, metadata and replayed state from commits (ascending) over a checkpoint or base
    (``replayed``: the files and tombstones, already worked out)."""
    newest_first = [*reversed(parsed), *([checkpoint] if checkpoint else [])]
    protocol, metadata, physical = _table_config(store, segment, newest_first)
    txns: dict[str, Txn] = {}
    domains: dict[str, DomainMetadata] = {}
    for actions in newest_first:
        for txn in actions.txns:
            txns.setdefault(txn.app_id, txn)
        for domain in actions.domains:
            domains.setdefault(domain.domain, domain)
    domains = {k: d for k, d in domains.items() if not d.removed}
    del newest_first
    if replayed is None:
        replayed = _replay(store, parsed, checkpoint, physical)
    del checkpoint

    commit_info = parsed[-1].commit_info if parsed and parsed[-1].version == segment.version else None
    infos = _commit_infos(parsed, base_infos)
    return Snapshot(
        store=store,
        version=segment.version,
        protocol=protocol,
        metadata=metadata,
        # (an empty replay has no source to take the partition columns' shape from)
        files=normalize_partition_values(replayed.live, physical),
        tombstones=normalize_partition_values(replayed.tombstones, physical),
        txns=txns,
        domains=domains,
        commit_info=commit_info,
        timestamp=_commit_timestamp(segment, commit_info, TableProperties(metadata.configuration)),
        segment=segment,
        commit_infos=infos,
    )


def _replay(
    store: ObjectStore, parsed: list[LogActions], checkpoint: LogActions | None, physical: list[str]
) -> ReplayResult:
    """Live files and tombstones from commits (ascending) over a checkpoint or base."""
    pending = [a.pending_rows for a in parsed]
    if (
        checkpoint is None
        and all(p is not None for p in pending)
        and sum(len(p) for p in pending) <= SMALL_REPLAY_ACTIONS
    ):
        # A few small commits and nothing under them: replay the parsed JSON directly.
        rows = [(a.version, a.pending_rows) for a in reversed(parsed)]
        try:
            return reconcile_rows(rows, store.root, physical)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            for actions in parsed:
                _ = actions.file_actions  # the commit's own parse names the file and the field
            raise
    commit_tables: list[pa.Table] = []
    checkpoint_table: pa.Table | None = None
    for actions in [*reversed(parsed), *([checkpoint] if checkpoint else [])]:
        if actions.file_actions is not None and actions.file_actions.num_rows:
            table = normalize_partition_values(actions.file_actions, physical)
            actions.file_actions = None  # replay owns the data now; let it free sources early
            if "version" not in table.column_names:
                table = table.append_column(
                    "version", pa.repeat(scalar(actions.version, pa.int64()), table.num_rows)
                )
            if actions is checkpoint:
                checkpoint_table = table
            else:
                commit_tables.append(table)
    del checkpoint
    replayed = reconcile(commit_tables, checkpoint_table, store.root)
    if replayed.live.num_rows + replayed.tombstones.num_rows > _RELEASE_AFTER_ROWS:
        # Replay of a big log frees hundreds of MB of transient buffers that the allocator
        # would otherwise keep: hand them back so the process does not stay at its peak.
        pa.default_memory_pool().release_unused()
    return replayed


def _commit_timestamp(segment: LogSegment, commit_info: CommitInfo | None, props: TableProperties) -> int:
    if props.enable_in_commit_timestamps and commit_info and commit_info.in_commit_timestamp is not None:
        return int(commit_info.in_commit_timestamp)
    f = segment.listing.commits.get(segment.version)
    if f is not None:
        return f.last_modified
    if segment.checkpoint is not None:
        return segment.checkpoint.files[0].last_modified
    return 0
