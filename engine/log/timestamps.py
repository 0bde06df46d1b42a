"""Commit timestamps and time travel by timestamp, with Delta Spark's semantics.

A commit's timestamp is its in-commit timestamp (ICT) where ICT is enabled, otherwise the commit
file's modification time. File times are made strictly increasing ("monotonized": a time not
after its predecessor becomes predecessor + 1 ms), because clocks and copies reorder them. The
version for a timestamp T is the latest commit with timestamp <= T; T before the earliest
reconstructable commit or after the latest commit is an error, not a silent clamp.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np

from deltaplane.engine.errors import InvalidTimestampError, TimestampOutOfRangeError
from deltaplane.engine.log.files import LogFile
from deltaplane.engine.log.segment import LogListing, earliest_available_version, list_log
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_properties import TableProperties


def to_millis(value: str | int | float | dt.datetime | dt.date) -> int:
    """Milliseconds since the epoch: ints are milliseconds, zone-less datetimes are UTC."""
    if isinstance(value, bool):
        raise InvalidTimestampError("a timestamp cannot be a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            raise InvalidTimestampError(
                f"cannot parse timestamp {value!r}: use ISO-8601 (2026-01-02T10:00:00Z, 2026-01-02), "
                "a datetime, or milliseconds since the epoch"
            ) from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return int(dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp() * 1000)
    raise InvalidTimestampError(
        f"unsupported timestamp {value!r} of type {type(value).__name__}: use an ISO-8601 string, a "
        "datetime, or milliseconds since the epoch"
    )


def monotonize(times: np.ndarray) -> np.ndarray:
    """Make times strictly increasing by bumping each to at least its predecessor + 1."""
    if len(times) == 0:
        return times
    steps = np.arange(len(times), dtype=np.int64)
    return np.maximum.accumulate(times.astype(np.int64) - steps) + steps


def read_in_commit_timestamp(store: ObjectStore, f: LogFile) -> int | None:
    """The ICT of a commit: commitInfo is its first action when ICT is on."""
    data = store.get(f.key)
    first = data.split(b"\n", 1)[0]
    try:
        info = json.loads(first).get("commitInfo")
    except ValueError:
        return None
    if isinstance(info, dict) and isinstance(info.get("inCommitTimestamp"), int):
        return info["inCommitTimestamp"]
    return None


def file_timestamps(listing: LogListing, versions: list[int]) -> np.ndarray:
    raw = np.array([listing.commits[v].last_modified for v in versions], dtype=np.int64)
    return monotonize(raw)


def version_at_timestamp(store: ObjectStore, when, properties: TableProperties) -> int:
    """The latest version whose commit timestamp is at or before ``when``.

    ``properties`` are the latest table properties: they say whether, and since which version,
    in-commit timestamps are on.
    """
    target = to_millis(when)
    listing = list_log(store, 0)
    earliest = earliest_available_version(store, listing)
    latest = listing.max_version
    assert latest is not None
    versions = [v for v in sorted(listing.commits) if v >= earliest]
    ict_start = None
    if properties.enable_in_commit_timestamps:
        ict_start = properties.in_commit_timestamp_enablement_version or 0
        ict_since = properties.in_commit_timestamp_enablement_timestamp
    if ict_start is not None and (ict_since is None or target >= ict_since):
        ict_versions = [v for v in versions if v >= ict_start]
        found = _search_ict(store, listing, ict_versions, target)
        if found is not None:
            return found
        older = [v for v in versions if v < ict_start]
        if not older:
            _raise_before(store, target, ict_versions[0] if ict_versions else latest)
        versions = older
    elif ict_start is not None:
        versions = [v for v in versions if v < ict_start] or versions

    times = file_timestamps(listing, versions)
    index = int(np.searchsorted(times, target, side="right")) - 1
    if index < 0:
        _raise_before(store, target, versions[0], int(times[0]))
    if versions[-1] == latest and target > times[-1]:
        _check_not_after_latest(store, target, latest, int(times[-1]))
    return versions[index]


def _search_ict(store: ObjectStore, listing: LogListing, versions: list[int], target: int) -> int | None:
    """Binary search over ICT versions (ICTs are strictly increasing by the protocol)."""
    if not versions:
        return None
    lo, hi = 0, len(versions) - 1
    first = read_in_commit_timestamp(store, listing.commits[versions[0]])
    if first is None or target < first:
        return None
    last = read_in_commit_timestamp(store, listing.commits[versions[-1]])
    if last is not None and target > last:
        _check_not_after_latest(store, target, versions[-1], last)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ts = read_in_commit_timestamp(store, listing.commits[versions[mid]])
        if ts is not None and ts <= target:
            lo = mid
        else:
            hi = mid - 1
    return versions[lo]


def _fmt(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat()


def _raise_before(store: ObjectStore, target: int, version: int, ts: int | None = None) -> None:
    when = f" ({_fmt(ts)})" if ts is not None else ""
    raise TimestampOutOfRangeError(
        f"timestamp {_fmt(target)} is before the earliest available commit of {store.root}: "
        f"version {version}{when}"
    )


def _check_not_after_latest(store: ObjectStore, target: int, latest: int, ts: int) -> None:
    raise TimestampOutOfRangeError(
        f"timestamp {_fmt(target)} is after the latest commit of {store.root} "
        f"(version {latest} at {_fmt(ts)})"
    )


def commit_timestamp(store: ObjectStore, version: int, properties: TableProperties) -> int:
    """The timestamp time travel gives ``version``: its in-commit timestamp where enabled,
    otherwise its file time monotonized over the reconstructable commits."""
    listing = list_log(store, 0)
    if version not in listing.commits:
        raise TimestampOutOfRangeError(f"version {version} of {store.root} has no commit file")
    if properties.enable_in_commit_timestamps and version >= (
        properties.in_commit_timestamp_enablement_version or 0
    ):
        ict = read_in_commit_timestamp(store, listing.commits[version])
        if ict is not None:
            return ict
    earliest = earliest_available_version(store, listing)
    versions = [v for v in sorted(listing.commits) if v >= earliest]
    return int(file_timestamps(listing, versions)[versions.index(version)])
