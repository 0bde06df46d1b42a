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
    from engine.snapshot import files_snapshot, load_table_config
    from engine.storage import open_store
    from engine.tail import commit_changes, num_records, versions_after

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
    protocol, metadata = load_table_config(store, versions[0])
    wanted = {o.upper() for o in operations} if operations else None
    predicate = parse_predicate(partition_filter) if partition_filter else None
    bound = schema = None
    for version in versions:
        changes = commit_changes(store, version, metadata)
        if changes.metadata is not None:
            metadata, bound = changes.metadata, None
        if data_change_only and not changes.data_change:
            continue
        if wanted is not None and (changes.operation or "").upper() not in wanted:
            continue
        added, removed = changes.added, changes.removed
        if predicate is not None:
            if bound is None:  # bound again only when a commit changes the schema
                schema = parse_schema(metadata.schema_string)
                bound = bind_predicate(predicate, schema)
            if added.num_rows:
                added = added.filter(file_keep_mask(added, bound, schema, metadata, store.root))
            if removed.num_rows:
                removed = removed.filter(file_keep_mask(removed, bound, schema, metadata, store.root))
            if added.num_rows == 0 and removed.num_rows == 0:
                continue
        files = files_snapshot(store, version, protocol, metadata, added)
        out["commits"].append(
            {
                "version": version,
                "operation": changes.operation,
                "timestamp": changes.timestamp,
                "dataChange": changes.data_change,
                "files": Scan(files, None, None).file_uris() if added.num_rows else [],
                "filesRemoved": int(removed.num_rows),
                "rowsAdded": num_records(added),
            }
        )
    return out
