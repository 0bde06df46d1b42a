"""Symlink manifests: the live data files of a table as plain text, for engines that cannot read
the Delta log.

Presto and Trino's Hive connector, Athena's Hive tables and Redshift Spectrum read a Delta table
through a "symlink" Hive table (``SymlinkTextInputFormat``) whose location is
``<table>/_symlink_format_manifest/``: each ``manifest`` file there lists the absolute paths of
the Parquet files to read, one per line. The manifest is what makes such a reader see exactly
one version of the table instead of every Parquet file ever written under the table root
(removed, vacuum-pending and uncommitted ones included).

Layout and content are Delta Spark's (``GenerateSymlinkManifest``), because the Hive DDL users
already have was written against it:

* one manifest per partition, at ``_symlink_format_manifest/<k1=v1>/<k2=v2>/manifest``, the
  directory names built from the partition values *as the log holds them* (not from the data
  files' directories), escaped like Hive's ``escapePathName``, null or empty as
  ``__HIVE_DEFAULT_PARTITION__``, in partition-column order; a table without partition columns
  has the single ``_symlink_format_manifest/manifest`` (written even when the table is empty);
* each line a Hadoop-style absolute path, not percent-encoded: ``file:/abs/path`` for local
  tables, ``s3://bucket/key`` on S3, every line ending with a newline.

A manifest cannot express deletion vectors (a reader would return deleted rows) or column
mapping (it would look for the logical column names in files that use physical ones), so both are
refused, as Delta Spark does; turning ``delta.compatibility.symlinkFormatManifest.enabled`` on
together with ``delta.enableDeletionVectors`` is refused too (Delta Spark's
``PERSISTENT_DELETION_VECTORS_WITH_INCREMENTAL_MANIFEST_GENERATION``).

Each manifest is replaced atomically (put overwrite). A regeneration writes every new manifest
first and only then deletes the manifests of partitions that no longer exist, so a reader never
sees a live partition without its manifest; across partitions it may briefly see a mix of the
old and the new version, exactly as with Delta Spark.

With the table property on, ``refresh_manifest_after_commit`` is called after every commit. It
rewrites only the partitions whose files changed (and deletes the manifests of partitions that
became empty), found by diffing the live-file keys of the read snapshot and the committed one:
on a table of 2,000 partitions an append to one partition costs one small put instead of 2,000.
It falls back to a full regeneration when the manifest directory does not exist yet, when the
property was just turned on, or when the partitioning changed. Like Delta Spark's incremental
hook, it trusts the existing manifests of the partitions it does not touch: after a commit by an
engine that does not maintain manifests, or two writers racing on the same partition, run a full
``generate_manifest()`` to repair them.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata
from deltaplane.engine.errors import DeltaError, ObjectNotFoundError, UnsupportedOperationError
from deltaplane.engine.log.replay import canonical_paths, file_keys
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.partitions import escape_partition_path_component
from deltaplane.engine.schema import parse_schema, partition_physical_names
from deltaplane.engine.snapshot import Snapshot, load_snapshot, load_table_config, read_commit
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_properties import TableProperties
from deltaplane.engine.transaction import CommitResult

log = logging.getLogger(__name__)

MANIFEST_DIR = "_symlink_format_manifest"
MANIFEST_NAME = "manifest"
MANIFEST_PROPERTY = "delta.compatibility.symlinkFormatManifest.enabled"
# Manifests are independent small objects; on S3 each put is a round trip.
_WRITE_WORKERS = 8


def manifest_enabled(metadata: Metadata) -> bool:
    """Whether the table asks for its manifest to be kept up to date after every commit."""
    return str(metadata.configuration.get(MANIFEST_PROPERTY, "false")).strip().lower() == "true"


def manifest_key(partition_dir: str) -> str:
    """The object key of one partition's manifest (``""`` for an unpartitioned table)."""
    return (
        f"{MANIFEST_DIR}/{partition_dir}/{MANIFEST_NAME}"
        if partition_dir
        else f"{MANIFEST_DIR}/{MANIFEST_NAME}"
    )


# --- what a manifest cannot express -----------------------------------------------------------


def check_manifest_supported(metadata: Metadata, files: pa.Table | None = None, table: str = "") -> None:
    """Raise ``UnsupportedOperationError`` if a manifest of this table would be wrong.

    ``files`` is the live-file table; when given, files carrying deletion vectors are refused too.
    """
    where = f" of {table}" if table else ""
    props = TableProperties(metadata.configuration)
    mode = props.column_mapping_mode
    if mode != "none":
        raise UnsupportedOperationError(
            f"cannot generate a symlink manifest{where}: the table uses column mapping "
            f"(delta.columnMapping.mode={mode}), and readers of the manifest would look for logical "
            "column names in Parquet files that use physical ones"
        )
    if props.enable_deletion_vectors:
        raise UnsupportedOperationError(
            f"cannot generate a symlink manifest{where}: deletion vectors are enabled "
            "(delta.enableDeletionVectors=true), and readers of the manifest do not apply them, so "
            "deleted rows would come back; set delta.enableDeletionVectors=false and rewrite the files "
            "that have them first"
        )
    if files is not None and files.num_rows:
        with_dv = files.column("deletion_vector").is_valid()
        count = pc.sum(with_dv).as_py() or 0
        if count:
            raise UnsupportedOperationError(
                f"cannot generate a symlink manifest{where}: {count} live file(s) have deletion vectors, "
                "whose deleted rows readers of the manifest would return; rewrite those files "
                "(copy-on-write) first"
            )


def check_manifest_compatible(metadata: Metadata, files: pa.Table | None = None, table: str = "") -> None:
    """For the write path: a commit whose metadata turns the manifest property on (or keeps it on)
    must leave a table a manifest can describe. No-op when the property is off."""
    if manifest_enabled(metadata):
        try:
            check_manifest_supported(metadata, files, table)
        except UnsupportedOperationError as e:
            raise UnsupportedOperationError(f"{MANIFEST_PROPERTY}=true is not allowed here: {e}") from None


# --- plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestPlan:
    """What a (re)generation writes: one manifest per entry of ``partitions``, from ``entries``
    (``dir``, ``uri``: the data files, sorted), and which stale manifests it deletes.

    ``full``: every existing manifest not rewritten is deleted (found by listing). Otherwise only
    the manifests of ``emptied`` partitions are deleted.
    """

    table_root: str
    version: int
    partition_columns: tuple[str, ...]
    partitions: tuple[str, ...]
    entries: pa.Table = field(repr=False, compare=False)
    full: bool = True
    emptied: tuple[str, ...] = ()

    @property
    def num_files(self) -> int:
        return self.entries.num_rows

    @property
    def partitioned(self) -> bool:
        return bool(self.partition_columns)


@dataclass(frozen=True)
class ManifestMetrics:
    """What a (re)generation did. ``manifests_written`` and ``manifests_deleted`` are Delta
    Spark's ``filesWritten`` / ``filesDeleted``."""

    version: int
    full: bool
    partitioned: bool
    manifests_written: int
    manifests_deleted: int
    data_files: int  # lines written, over all manifests written

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "full": self.full,
            "partitioned": self.partitioned,
            "filesWritten": self.manifests_written,
            "filesDeleted": self.manifests_deleted,
            "numDataFiles": self.data_files,
        }


def plan_manifest(
    store: ObjectStore, snapshot: Snapshot, *, previous: Snapshot | None = None
) -> ManifestPlan:
    """The manifests of ``snapshot``: all of them, or, given the ``previous`` snapshot whose
    manifests are on storage, only those of the partitions whose files changed since."""
    check_manifest_supported(snapshot.metadata, snapshot.files, store.root)
    columns = list(snapshot.metadata.partition_columns)
    physical = partition_physical_names(snapshot.schema, columns)
    files = _compact(snapshot.files)
    dirs = _as_array(partition_dirs(files, columns, physical))
    present = set(pc.unique(dirs).to_pylist())
    if previous is not None and list(previous.metadata.partition_columns) != columns:
        previous = None  # re-partitioned (by another engine): every manifest directory changes
    if previous is None:
        partitions = sorted(present) if columns else [""]
        entries = _entries(files, dirs, store)
        return ManifestPlan(
            store.root, snapshot.version, tuple(columns), tuple(partitions), entries, full=True
        )

    old = _compact(previous.files)
    new_keys = file_keys(files, store.root, with_dv=True)
    old_keys = file_keys(old, store.root, with_dv=True)
    added = pc.invert(pc.is_in(new_keys, value_set=_as_array(old_keys)))
    removed = pc.invert(pc.is_in(old_keys, value_set=_as_array(new_keys)))
    touched = set(pc.unique(dirs.filter(_as_array(added))).to_pylist())
    if pc.any(removed).as_py():
        old_physical = partition_physical_names(parse_schema(previous.metadata.schema_string), columns)
        removed_dirs = partition_dirs(old.filter(_as_array(removed)), columns, old_physical)
        touched |= set(pc.unique(_as_array(removed_dirs)).to_pylist())
    if not columns:
        partitions = [""] if touched else []
        emptied: list[str] = []
    else:
        partitions = sorted(touched & present)
        emptied = sorted(touched - present)
    keep = pc.is_in(dirs, value_set=pa.array(partitions, pa.string()))
    entries = _entries(files.filter(keep), dirs.filter(keep), store)
    return ManifestPlan(
        store.root,
        snapshot.version,
        tuple(columns),
        tuple(partitions),
        entries,
        full=False,
        emptied=tuple(emptied),
    )


def partition_dirs(files: pa.Table, columns: list[str], physical: list[str]) -> pa.Array | pa.ChunkedArray:
    """``k1=v1/k2=v2`` per live file, Hive-escaped; Python runs once per distinct value only."""
    n = files.num_rows
    if not columns:
        return pa.repeat(pa.scalar("", pa.string()), n)
    partition_values = files.column("partition_values")
    parts = []
    for name, phys in zip(columns, physical, strict=True):
        values = pc.struct_field(partition_values, phys)
        distinct = pc.unique(values)
        escaped = pa.array([escape_partition_path_component(v) for v in distinct.to_pylist()], pa.string())
        index = pc.index_in(values, value_set=distinct, skip_nulls=False)
        prefix = pa.scalar(f"{escape_partition_path_component(name)}=", pa.string())
        parts.append(pc.binary_join_element_wise(prefix, pc.take(escaped, index), ""))
    return parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "/")


def absolute_uris(paths: pa.Array | pa.ChunkedArray, store: ObjectStore) -> pa.ChunkedArray:
    """The log's (URI-encoded, relative or absolute) paths as the absolute, decoded Hadoop-style
    paths manifest readers expect: ``file:/...`` locally, ``s3://bucket/...`` on S3."""
    canonical = canonical_paths(paths, store.root)
    root = store.root.rstrip("/")
    root_uri = f"file:{root}" if root.startswith("/") else root
    has_scheme = pc.match_substring(canonical, "://")
    local = pc.starts_with(canonical, "/")
    relative = pc.binary_join_element_wise(pa.scalar(f"{root_uri}/"), canonical, "")
    local_uri = pc.binary_join_element_wise(pa.scalar("file:"), canonical, "")
    return pc.if_else(has_scheme, canonical, pc.if_else(local, local_uri, relative))


def _compact(files: pa.Table) -> pa.Table:
    """Just the columns a manifest needs, in one chunk: a snapshot built commit by commit holds
    a chunk per commit, and per-chunk kernel calls would dominate the cost."""
    files = files.select(["path", "partition_values", "deletion_vector"])
    return files.combine_chunks() if files.column("path").num_chunks > 1 else files


def _as_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values


def _entries(files: pa.Table, dirs: pa.Array, store: ObjectStore) -> pa.Table:
    """(dir, uri) of ``files``, sorted: the lines of the manifests, grouped by manifest."""
    entries = pa.table({"dir": dirs, "uri": _as_array(absolute_uris(files.column("path"), store))})
    return entries.sort_by([("dir", "ascending"), ("uri", "ascending")]) if entries.num_rows else entries


# --- execute ------------------------------------------------------------------------------------


def execute_manifest(store: ObjectStore, plan: ManifestPlan) -> ManifestMetrics:
    """Write the planned manifests (each atomically), then delete the stale ones."""
    bodies = _manifest_bodies(plan)
    keys = [manifest_key(d) for d in bodies]
    if len(bodies) > 1:
        with ThreadPoolExecutor(min(_WRITE_WORKERS, len(bodies))) as pool:
            list(pool.map(lambda d: store.put(manifest_key(d), bodies[d], mode="overwrite"), bodies))
    elif bodies:
        store.put(keys[0], next(iter(bodies.values())), mode="overwrite")

    if plan.full:
        written = set(keys)
        stale = [
            m.key
            for m in store.list(f"{MANIFEST_DIR}/", recursive=True)
            if m.key.rsplit("/", 1)[-1] == MANIFEST_NAME and m.key not in written
        ]
    else:
        stale = [manifest_key(d) for d in plan.emptied]
    for key in stale:
        store.delete(key)
    log.info(
        "%s manifest of %s at version %d: %d written, %d deleted",
        "full" if plan.full else "incremental",
        plan.table_root,
        plan.version,
        len(keys),
        len(stale),
    )
    return ManifestMetrics(
        version=plan.version,
        full=plan.full,
        partitioned=plan.partitioned,
        manifests_written=len(keys),
        manifests_deleted=len(stale),
        data_files=plan.num_files,
    )


def _manifest_bodies(plan: ManifestPlan) -> dict[str, bytes]:
    """Partition directory -> manifest content, one line (and newline) per data file."""
    bodies = {d: b"" for d in plan.partitions}
    entries = plan.entries
    if entries.num_rows == 0:
        return bodies
    dirs = _as_array(entries.column("dir"))
    uris = entries.column("uri").to_pylist()
    encoded = pc.dictionary_encode(dirs)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])  # entries are sorted by dir
    ends = np.r_[starts[1:], len(codes)]
    names = encoded.dictionary.to_pylist()
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        lines = uris[start:end]
        bodies[names[codes[start]]] = ("\n".join(lines) + "\n").encode("utf-8")
    return bodies


# --- how far behind the manifests are -----------------------------------------------------------


@dataclass(frozen=True)
class ManifestLag:
    """How far a table's symlink manifests are behind its log (``manifest_lag``)."""

    written_ms: int | None  # the newest manifest's time on storage (None: no manifest at all)
    manifests: int  # manifest files found
    commits_behind: int  # commits at or after that time that added or removed files
    first_behind: int | None  # the oldest of them
    version: int  # the table version looked at
    capped: bool = False  # more commits came after it than were read (commits_behind is a floor)

    def to_dict(self) -> dict[str, Any]:
        return {
            "written_ms": self.written_ms,
            "manifests": self.manifests,
            "commits_behind": self.commits_behind,
            "first_behind": self.first_behind,
            "version": self.version,
            "capped": self.capped,
        }


def manifest_lag(store: ObjectStore, version: int, *, max_commits: int = 200) -> ManifestLag:
    """Whether a reader of the manifests sees ``version``: the commits since the newest manifest
    was written that changed the file list (adds or removes, data change or not: after an
    OPTIMIZE and a VACUUM a stale manifest names files that are gone).

    Times are compared on storage's clock only (a commit file's and a manifest's modification
    times), never against a writer's. A commit in the same clock tick as the newest manifest counts
    as behind: one regeneration too many is harmless, a stale manifest is not. Cost: one listing of
    the manifests, one of the newest ``max_commits`` log entries, and a read of each commit written
    after the manifests (at most ``max_commits``; ``capped`` says when more were not read)."""
    metas = [
        m for m in store.list(f"{MANIFEST_DIR}/", recursive=True) if m.key.rsplit("/", 1)[-1] == MANIFEST_NAME
    ]
    written = max((m.last_modified for m in metas), default=None)
    start = max(0, version - max_commits + 1)
    listing = list_log(store, start)
    commits = sorted(
        (f for v, f in listing.commits.items() if start <= v <= version),
        key=lambda f: f.version,
    )
    newer = [f for f in commits if written is None or f.last_modified >= written]
    behind = [f.version for f in newer if _moves_files(read_commit(store, f.key, f.version, threads=False))]
    capped = bool(newer) and newer[0].version == start and start > 0
    return ManifestLag(
        written_ms=written,
        manifests=len(metas),
        commits_behind=len(behind),
        first_behind=behind[0] if behind else None,
        version=version,
        capped=capped,
    )


def _moves_files(actions) -> bool:
    """Whether a commit adds or removes files (read from its parsed JSON while no Arrow table
    was built for it: a small commit's file actions stay as JSON until someone asks)."""
    rows = actions.pending_rows
    if rows is not None:
        return bool(rows)
    return actions.file_actions is not None and actions.file_actions.num_rows > 0


# --- automatic regeneration ---------------------------------------------------------------------


def refresh_manifest_if_enabled(
    store: ObjectStore, snapshot: Snapshot, *, previous: Snapshot | None = None
) -> ManifestMetrics | None:
    """Bring the manifest up to date with ``snapshot`` if the table enables it (else ``None``).

    ``previous`` is the snapshot the manifests on storage describe (the commit's read snapshot):
    with it only the changed partitions are rewritten.
    """
    if not manifest_enabled(snapshot.metadata):
        return None
    incremental = (
        previous is not None
        and previous.version < snapshot.version
        and manifest_enabled(previous.metadata)
        and _previous_manifest_present(store, previous)
    )
    plan = plan_manifest(store, snapshot, previous=previous if incremental else None)
    if not plan.full and not plan.partitions and not plan.emptied:
        return ManifestMetrics(snapshot.version, False, plan.partitioned, 0, 0, 0)
    return execute_manifest(store, plan)


def refresh_manifest_after_commit(
    store: ObjectStore, read_snapshot: Snapshot | None, result: CommitResult
) -> ManifestMetrics | None:
    """The post-commit hook: regenerate what ``result``'s commit changed, if the table asks for it.

    The commit itself has succeeded whatever happens here; a failure is raised with a message
    that says so and how to repair (``generate_manifest()``).
    """
    if result.skipped:
        return None
    snapshot = result.snapshot
    try:
        if snapshot is None:
            _, metadata = load_table_config(store, result.version)
            if not manifest_enabled(metadata):
                return None
            snapshot = load_snapshot(store, result.version)
        return refresh_manifest_if_enabled(store, snapshot, previous=read_snapshot)
    except UnsupportedOperationError as e:
        raise UnsupportedOperationError(
            f"commit {result.version} of {store.root} succeeded, but its symlink manifest cannot be "
            f"updated: {e}"
        ) from e
    except DeltaError as e:
        raise DeltaError(
            f"commit {result.version} of {store.root} succeeded, but updating its symlink manifest "
            f"failed ({e}); run generate_manifest() to rebuild it"
        ) from e


def _previous_manifest_present(store: ObjectStore, previous: Snapshot) -> bool:
    """One HEAD: does a manifest ``previous`` should have produced exist? If not (never
    generated, or deleted), the incremental path has nothing to build on."""
    columns = list(previous.metadata.partition_columns)
    if columns and previous.files.num_rows == 0:
        return False  # nothing to probe; a full pass also clears any leftovers
    one = previous.files.slice(0, 1)
    physical = partition_physical_names(previous.schema, columns)
    directory = _as_array(partition_dirs(one, columns, physical))[0].as_py() if columns else ""
    try:
        store.head(manifest_key(directory))
    except ObjectNotFoundError:
        return False
    return True
