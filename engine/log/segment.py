"""Choosing the log files that reconstruct a version: a checkpoint plus the commits after it.

``_last_checkpoint`` only says where to start listing. The listing decides: the newest complete
checkpoint at or before the target version (incomplete multi-part sets are ignored), then every
commit after it, which must be contiguous up to the target. A gap is an error that names the
missing file, never a silently shorter history.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from deltaplane.engine.errors import (
    DeltaError,
    MissingLogVersionError,
    TableNotFoundError,
    VersionNotFoundError,
)
from deltaplane.engine.log.checkpoints import Checkpoint
from deltaplane.engine.log.files import (
    LOG_DIR,
    LogFile,
    LogFileKind,
    commit_key,
    parse_log_file_name,
    version_prefix,
)
from deltaplane.engine.log.last_checkpoint import read_last_checkpoint
from deltaplane.engine.storage.base import ObjectStore

# Among complete checkpoints of the same version, prefer the cheapest to read.
_CHECKPOINT_PREFERENCE = {
    LogFileKind.CHECKPOINT: 0,
    LogFileKind.V2_CHECKPOINT: 1,
    LogFileKind.MULTIPART_CHECKPOINT: 2,
}


@dataclass(frozen=True)
class LogListing:
    """The parsed log files of a table (from some start version), grouped by kind."""

    commits: dict[int, LogFile]
    checkpoints: dict[int, list[Checkpoint]]
    complete_from_zero: bool  # listed from the start of the log, not from a hint
    # Multi-part checkpoints missing parts: version -> (number of parts, the parts found).
    incomplete_checkpoints: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)

    @property
    def max_version(self) -> int | None:
        versions = list(self.commits) + list(self.checkpoints)
        return max(versions) if versions else None


@dataclass(frozen=True)
class LogSegment:
    """The files that reconstruct ``version``."""

    version: int
    checkpoint: Checkpoint | None
    commits: tuple[LogFile, ...]  # ascending, checkpoint.version + 1 .. version
    listing: LogListing = field(repr=False, compare=False)


def list_log(store: ObjectStore, start_version: int = 0) -> LogListing:
    """List ``_delta_log`` from ``start_version`` and parse names; complete checkpoints only."""
    start_after = version_prefix(start_version) if start_version > 0 else None
    commits: dict[int, LogFile] = {}
    singles: dict[int, list[LogFile]] = defaultdict(list)
    parts: dict[tuple[int, int], dict[int, LogFile]] = defaultdict(dict)
    for meta in store.list(f"{LOG_DIR}/", start_after=start_after):
        f = parse_log_file_name(meta.key, meta.size, meta.last_modified)
        if f is None:
            continue
        if f.kind is LogFileKind.COMMIT:
            commits[f.version] = f
        elif f.kind in (LogFileKind.CHECKPOINT, LogFileKind.V2_CHECKPOINT):
            singles[f.version].append(f)
        elif f.kind is LogFileKind.MULTIPART_CHECKPOINT:
            assert f.num_parts is not None and f.part is not None
            parts[(f.version, f.num_parts)][f.part] = f
    checkpoints: dict[int, list[Checkpoint]] = defaultdict(list)
    incomplete: dict[int, tuple[int, tuple[int, ...]]] = {}
    for version, files in singles.items():
        checkpoints[version].extend(Checkpoint(version, (f,)) for f in files)
    for (version, num_parts), found in parts.items():
        if len(found) == num_parts:  # an incomplete set is not a checkpoint
            checkpoints[version].append(Checkpoint(version, tuple(found[i] for i in range(1, num_parts + 1))))
        else:
            incomplete[version] = (num_parts, tuple(sorted(found)))
    for version in checkpoints:
        checkpoints[version].sort(key=lambda c: _CHECKPOINT_PREFERENCE[c.kind])
    return LogListing(
        commits, dict(checkpoints), complete_from_zero=start_version == 0, incomplete_checkpoints=incomplete
    )


def build_log_segment(
    store: ObjectStore,
    version: int | None = None,
    *,
    checkpoint_before: int | None = None,
    listing: LogListing | None = None,
) -> LogSegment:
    """The segment for ``version`` (latest when ``None``).

    ``checkpoint_before`` restricts the choice to checkpoints older than that version; the
    loader uses it to fall back when a checkpoint turns out to be unreadable.
    """
    if listing is None:
        listing = _list_with_hint(store, version)
    latest = listing.max_version
    if latest is None:
        raise TableNotFoundError(f"no Delta table at {store.root}: {_why_no_commits(store)}")
    target = latest if version is None else version
    if version is not None and version > latest:
        raise VersionNotFoundError(
            f"version {version} of {store.root} does not exist; the latest version is {latest}"
        )
    if version is not None and version < 0:
        raise VersionNotFoundError(f"version must be non-negative, got {version}")

    limit = target if checkpoint_before is None else min(target, checkpoint_before - 1)
    candidates = [v for v in listing.checkpoints if v <= limit]
    checkpoint = listing.checkpoints[max(candidates)][0] if candidates else None
    start = checkpoint.version + 1 if checkpoint else 0

    if checkpoint is None:
        if not listing.complete_from_zero:
            # The hint pointed past every usable checkpoint: list the whole log.
            return build_log_segment(
                store, version, checkpoint_before=checkpoint_before, listing=list_log(store, 0)
            )
        if 0 not in listing.commits:
            earliest = _earliest_recreatable(listing)
            if earliest is None:
                raise MissingLogVersionError(
                    f"{store.root}: the log has neither version 0 nor a checkpoint to start from "
                    f"(missing {commit_key(0)}){_incomplete_note(listing, target)}",
                    commit_key(0),
                )
            raise VersionNotFoundError(
                f"version {target} of {store.root} is no longer reconstructable; the earliest "
                f"available version is {earliest}"
            )
    commits = []
    for v in range(start, target + 1):
        f = listing.commits.get(v)
        if f is None:
            raise MissingLogVersionError(
                f"{store.root}: commit {commit_key(v)} is missing; versions {start}..{target} "
                f"must all be present to read version {target}{_incomplete_note(listing, target, v)}",
                commit_key(v),
            )
        commits.append(f)
    return LogSegment(target, checkpoint, tuple(commits), listing)


def _why_no_commits(store: ObjectStore) -> str:
    """What is at the location instead of a log, in the words a person would look for."""
    for key, what in (
        ("", "it is a file, not a directory"),
        (LOG_DIR, f"{LOG_DIR} is a file, not a directory"),
    ):
        try:
            store.head(key)
            return what
        except DeltaError:
            continue  # absent (the usual case), or a store that cannot say: fall through
    try:
        if next(iter(store.list(f"{LOG_DIR}/")), None) is None:
            return f"there is no {LOG_DIR} directory"
    except DeltaError:
        pass
    return f"{LOG_DIR} has no commits"


def _incomplete_note(listing: LogListing, target: int, missing: int | None = None) -> str:
    """Why no checkpoint covered the gap, when an incomplete multi-part checkpoint is the reason."""
    versions = [
        v for v in listing.incomplete_checkpoints if v <= target and (missing is None or v >= missing - 1)
    ]
    if not versions:
        return ""
    version = max(versions)
    num_parts, found = listing.incomplete_checkpoints[version]
    lost = [p for p in range(1, num_parts + 1) if p not in found]
    return (
        f". It cannot be skipped because the multi-part checkpoint at version {version} is incomplete: "
        f"{len(found)} of its {num_parts} parts are present (missing part "
        f"{', '.join(str(p) for p in lost)}, e.g. "
        f"{version:020d}.checkpoint.{lost[0]:010d}.{num_parts:010d}.parquet)"
    )


def _list_with_hint(store: ObjectStore, version: int | None) -> LogListing:
    hint = read_last_checkpoint(store)
    if hint is not None and (version is None or version >= hint.version):
        listing = list_log(store, hint.version)
        if hint.version in listing.checkpoints:
            return listing
    return list_log(store, 0)


def _earliest_recreatable(listing: LogListing) -> int | None:
    """The oldest version with a checkpoint and every later commit (None: nothing usable)."""
    for v in sorted(listing.checkpoints):
        latest = listing.max_version or v
        if all(c in listing.commits for c in range(v + 1, latest + 1)):
            return v
    return None


def earliest_available_version(store: ObjectStore, listing: LogListing | None = None) -> int:
    """The oldest version that can still be reconstructed (time-travel floor)."""
    listing = listing or list_log(store, 0)
    if 0 in listing.commits:
        return 0
    earliest = _earliest_recreatable(listing)
    if earliest is None:
        raise MissingLogVersionError(f"{store.root}: no reconstructable version in the log")
    return earliest
