"""Table history: the commitInfo of each version, newest first, as Delta Spark's DESCRIBE HISTORY.

Each entry is the version, its commit timestamp (in-commit timestamp when present, otherwise the
commit file's monotonized modification time) and every field the writer put in commitInfo.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.errors import CorruptLogError, ObjectNotFoundError
from engine.log.segment import list_log
from engine.log.timestamps import file_timestamps
from engine.storage.base import ObjectStore


def _commit_info(store: ObjectStore, key: str) -> dict[str, Any]:
    try:
        data = store.get(key)
    except ObjectNotFoundError:
        return {}
    if not data.strip():
        raise CorruptLogError(f"{key} is empty ({len(data)} bytes): a torn or truncated write", key)
    for line in data.split(b"\n"):
        if b'"commitInfo"' not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise CorruptLogError(f"{key}: invalid commitInfo line: {e}", key) from e
        if isinstance(obj, dict) and isinstance(obj.get("commitInfo"), dict):
            return obj["commitInfo"]
    return {}


def load_history(
    store: ObjectStore, *, limit: int | None = None, up_to: int | None = None
) -> list[dict[str, Any]]:
    listing = list_log(store, 0)
    versions = sorted(v for v in listing.commits if up_to is None or v <= up_to)
    times = dict(zip(versions, file_timestamps(listing, versions).tolist(), strict=True))
    chosen = list(reversed(versions))
    if limit is not None:
        chosen = chosen[: max(limit, 0)]
    with ThreadPoolExecutor(8) as pool:
        infos = list(pool.map(lambda v: _commit_info(store, listing.commits[v].key), chosen))
    out = []
    for version, info in zip(chosen, infos, strict=True):
        entry = {k: v for k, v in info.items() if k != "timestamp"}
        entry["version"] = version
        entry["timestamp"] = info.get("inCommitTimestamp", times[version])
        out.append(entry)
    return out
