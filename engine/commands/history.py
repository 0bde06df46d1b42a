"""Table history: the commitInfo of each version, newest first, as Delta Spark's DESCRIBE HISTORY.

Each entry is the version, its commit timestamp (in-commit timestamp when present, otherwise the
commit file's monotonized modification time) and every field the writer put in commitInfo.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from deltaplane.engine.errors import CorruptLogError, ObjectNotFoundError
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.log.timestamps import file_timestamps
from deltaplane.engine.storage.base import ObjectStore

_HEAD_BYTES = 64 << 10  # commitInfo leads a commit; a million-file commit is not read for it


def _commit_info(store: ObjectStore, key: str) -> dict[str, Any]:
    try:
        data = store.get_range(key, 0, _HEAD_BYTES)
        if len(data) >= _HEAD_BYTES:
            found = _find_commit_info(data[: data.rfind(b"\n") + 1], key)
            if found is not None:
                return found
            data = store.get(key)  # commitInfo further down, or a very long first line
    except ObjectNotFoundError:
        return {}
    if not data.strip():
        raise CorruptLogError(f"{key} is empty ({len(data)} bytes): a torn or truncated write", key)
    return _find_commit_info(data, key) or {}


def _find_commit_info(data: bytes, key: str) -> dict[str, Any] | None:
    for line in data.split(b"\n"):
        if b'"commitInfo"' not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise CorruptLogError(f"{key}: invalid commitInfo line: {e}", key) from e
        if isinstance(obj, dict) and isinstance(obj.get("commitInfo"), dict):
            return obj["commitInfo"]
    return None


def load_history(
    store: ObjectStore,
    *,
    limit: int | None = None,
    up_to: int | None = None,
    cache: dict[tuple[int, int], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """``cache`` (version, file size) -> commitInfo, kept by the caller across calls: commit
    files never change once written, so a table polled for its history reads each once."""
    listing = list_log(store, 0)
    versions = sorted(v for v in listing.commits if up_to is None or v <= up_to)
    times = dict(zip(versions, file_timestamps(listing, versions).tolist(), strict=True))
    chosen = list(reversed(versions))
    if limit is not None:
        chosen = chosen[: max(limit, 0)]
    cache = {} if cache is None else cache

    def info(version: int) -> dict[str, Any]:
        f = listing.commits[version]
        key = (version, f.size)
        found = cache.get(key)
        if found is None:
            found = cache[key] = _commit_info(store, f.key)
        return found

    missing = [v for v in chosen if (v, listing.commits[v].size) not in cache]
    if len(missing) > 1 and getattr(store, "remote", True):
        with ThreadPoolExecutor(min(8, len(missing))) as pool:
            list(pool.map(info, missing))  # round trips in parallel; local reads are faster alone
    infos = [info(v) for v in chosen]
    out = []
    for version, info in zip(chosen, infos, strict=True):
        # Copies: callers may edit what they get, the cache keeps the original.
        entry = {k: dict(v) if isinstance(v, dict) else v for k, v in info.items() if k != "timestamp"}
        entry["version"] = version
        # An in-commit timestamp that is not a number (a foreign writer's) falls back to the file's.
        stamp = info.get("inCommitTimestamp")
        numeric = isinstance(stamp, int) and not isinstance(stamp, bool)
        entry["timestamp"] = stamp if numeric else times[version]
        out.append(entry)
    return out
