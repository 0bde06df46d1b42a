"""Units of work, and the one check of whether a table already holds one.

A writer that must never apply the same work twice (an Airflow task retried, cleared or rerun
with a new run id, a backfill out of order, a resubmitted Spark job, a replayed stream batch)
names the work with a ``WorkKey`` and commits it with ``txn(appId=key.app_id,
version=key.version)`` in the same commit as its data: the key lands atomically with the work,
and two writers racing with the same key conflict (``ConcurrentTransactionError``) instead of
both landing.

What the key names decides what "the same work" is, so it must be the work itself, never a
clock: ``WorkKey.named("files", file_identities(...))`` for a batch of source files (path, size
and modification time: the same files land once, different files always land),
``WorkKey.named("staged", ...)`` for a staged batch, and a monotone ``WorkKey(app_id, version)``
for a position in a sequence (a consumer's last source version, a stream's batch id), where a
recorded version at or past the key's means done.

Content-named keys (``named``) get an application id of their own, so their order does not
matter; they stay in the table's transaction state for good (deltaplane does not expire txns).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from deltaplane.engine.errors import DeltaError, InvalidArgumentError
from deltaplane.engine.log.files import commit_key
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.snapshot import Snapshot, read_commit

PREFIX = "deltaplane"
NAMED_VERSION = 1  # content-named keys record this version: present means done
_SEARCH_BATCH = 16


@dataclass(frozen=True)
class WorkKey:
    """``txn(app_id, version)``: done when the table records ``app_id`` at ``version`` or later."""

    app_id: str
    version: int = NAMED_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.app_id, str) or not self.app_id:
            raise InvalidArgumentError(f"a work key needs a non-empty application id, got {self.app_id!r}")
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 0:
            raise InvalidArgumentError(
                f"a work key's version must be a non-negative integer, got {self.version!r}"
            )

    @classmethod
    def named(cls, kind: str, identity: Any) -> WorkKey:
        """The key of the work ``identity`` describes (any JSON value: file identities, a
        statement and the run that issues it...): ``deltaplane:<kind>:<digest>``."""
        if not kind or ":" in kind:
            raise InvalidArgumentError(f"a work kind is a non-empty name without ':', got {kind!r}")
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
        return cls(f"{PREFIX}:{kind}:{hashlib.sha256(text.encode()).hexdigest()[:32]}")

    def done_in(self, snapshot: Snapshot) -> bool:
        recorded = snapshot.app_transaction_version(self.app_id)
        return recorded is not None and recorded >= self.version

    def as_txn(self) -> tuple[str, int]:
        return self.app_id, self.version

    def to_json(self) -> dict[str, Any]:
        return {"appId": self.app_id, "version": self.version}


def file_identities(files: Iterable[tuple[str, int, int]]) -> list[list]:
    """``[path, size, modified]`` per source file, sorted: what names a batch of files (a file
    replaced by another of the same name is a new file when its size or time differ)."""
    return sorted([str(p), int(s), int(m)] for p, s, m in files)


def local_file_identities(paths: Iterable[str]) -> list[list]:
    """``file_identities`` of local files (modification time in nanoseconds)."""
    import os

    out = []
    for path in paths:
        stat = os.stat(path)
        out.append((os.path.abspath(path), stat.st_size, stat.st_mtime_ns))
    return file_identities(out)


@dataclass(frozen=True)
class Applied:
    """A work key the table already holds."""

    key: WorkKey
    recorded: int  # the application version the table records for the key's id
    version: int | None  # the commit that recorded it; None when that commit left the log

    def describe(self) -> str:
        where = f"version {self.version}" if self.version is not None else "a commit no longer in the log"
        return f"{self.key.app_id} was already committed in {where}"


def find_applied(snapshot: Snapshot, key: WorkKey | None, *, max_commits: int = 100_000) -> Applied | None:
    """Whether ``snapshot`` already holds ``key``'s work, and in which commit (the newest commit
    that recorded the key's application id, searched from the snapshot's version down)."""
    if key is None or not key.done_in(snapshot):
        return None
    recorded = snapshot.app_transaction_version(key.app_id)
    assert recorded is not None
    return Applied(key, recorded, _commit_recording(snapshot, key.app_id, max_commits))


def _commit_recording(snapshot: Snapshot, app_id: str, max_commits: int) -> int | None:
    store = snapshot.store
    listed = sorted((v for v in list_log(store, 0).commits if v <= snapshot.version), reverse=True)
    listed = listed[:max_commits]

    def txn_ids(version: int) -> set[str]:
        try:
            actions = read_commit(store, commit_key(version), version, threads=False)
        except DeltaError:  # cleaned up (MissingLogVersionError) or unreadable: not the one we want
            return set()
        return {t.app_id for t in actions.txns}

    with ThreadPoolExecutor(max_workers=8 if store.remote else 2) as pool:
        for start in range(0, len(listed), _SEARCH_BATCH):
            batch: Sequence[int] = listed[start : start + _SEARCH_BATCH]
            for version, ids in zip(batch, pool.map(txn_ids, batch), strict=True):
                if app_id in ids:
                    return version
    return None
