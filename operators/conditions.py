"""The one condition the log-tail sensor pokes and its triggers await: which commits after a
watermark version match the consumer's filters. Pure: it reads the log and returns a JSON-able
result; it changes nothing (advancing watermarks is the caller's business)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_MAX_VERSIONS = 1000


def find_new_commits(
    table_uri: str,
    after_version: int,
    *,
    storage_options: Mapping[str, str] | None = None,
    data_change_only: bool = True,
    operations: Sequence[str] | None = None,
    partition_filter: str | None = None,
    max_versions: int = DEFAULT_MAX_VERSIONS,
) -> dict[str, Any]:
    """Commits after ``after_version`` (at most ``max_versions`` of them) that changed data
    (unless ``data_change_only=False``), whose operation is one of ``operations`` (if given), and
    that added or removed files in partitions matching ``partition_filter`` (if given).

    ``latest_version`` is the newest version examined (matching or not): the watermark a consumer
    moves to once it has handled ``commits``."""
    from engine.expressions.bind import bind_predicate
    from engine.expressions.parser import parse_predicate
    from engine.scan import Scan, file_keep_mask
    from engine.schema import parse_schema
    from engine.snapshot import load_table_config
    from engine.storage import open_store
    from engine.tail import commit_changes, versions_after

    store = open_store(table_uri, storage_options)
    versions = versions_after(store, after_version)[:max_versions]
    out: dict[str, Any] = {
        "table": table_uri,
        "after_version": after_version,
        "latest_version": versions[-1] if versions else after_version,
        "commits": [],
    }
    if not versions:
        return out
    _, metadata = load_table_config(store, versions[0])
    wanted = {o.upper() for o in operations} if operations else None
    for version in versions:
        changes = commit_changes(store, version, metadata)
        if changes.metadata is not None:
            metadata = changes.metadata
        if data_change_only and not changes.data_change:
            continue
        if wanted is not None and (changes.operation or "").upper() not in wanted:
            continue
        added, removed = changes.added, changes.removed
        if partition_filter:
            schema = parse_schema(metadata.schema_string)
            predicate = bind_predicate(parse_predicate(partition_filter), schema)
            if added.num_rows:
                added = added.filter(file_keep_mask(added, predicate, schema, metadata, store.root))
            if removed.num_rows:
                removed = removed.filter(file_keep_mask(removed, predicate, schema, metadata, store.root))
            if added.num_rows == 0 and removed.num_rows == 0:
                continue
        snapshot_like = _files_snapshot(store, version, metadata, added) if added.num_rows else None
        out["commits"].append(
            {
                "version": version,
                "operation": changes.operation,
                "timestamp": changes.timestamp,
                "dataChange": changes.data_change,
                "files": Scan(snapshot_like, None, None).file_uris() if snapshot_like is not None else [],
                "filesRemoved": int(removed.num_rows),
                "rowsAdded": _rows(added),
            }
        )
    return out


def _files_snapshot(store, version, metadata, files):
    import pyarrow as pa

    from engine.actions import Protocol
    from engine.snapshot import Snapshot

    return Snapshot(
        store=store,
        version=version,
        protocol=Protocol(1, 2),
        metadata=metadata,
        files=files,
        tombstones=pa.table({}),
        txns={},
        domains={},
        commit_info=None,
    )


def _rows(files) -> int | None:
    import json

    total = 0
    for stats in files.column("stats").to_pylist():
        parsed = json.loads(stats) if stats else {}
        if "numRecords" not in parsed:
            return None
        total += int(parsed["numRecords"])
    return total
