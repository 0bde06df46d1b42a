"""The one condition the log-tail sensor pokes and its triggers await: which commits after a
watermark version match a consumer's filter. Pure: it reads the log (through the engine's one
answer to "what changed since version N", ``deltaplane.engine.tail``) and returns JSON-able results; it
changes nothing (moving watermarks is the caller's business, and only after the work is safe).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_VERSIONS = 1000
KINDS = ("append", "delete", "update", "none")  # deltaplane.engine.tail's kinds (not imported at parse time)


@dataclass(frozen=True)
class CommitFilter:
    """Which commits a consumer cares about; the same arguments on the sensor and both triggers.

    * ``data_change_only``: skip commits that change no rows (OPTIMIZE, metadata): kind ``none``;
    * ``kinds``: what the commit did to rows: ``append``, ``delete``, ``update`` (``none``);
    * ``operations``: commitInfo operations (``WRITE``, ``MERGE``...), case-insensitive;
    * ``partition_filter``: a SQL predicate on partition columns that the commit's new or
      removed files must match.
    """

    data_change_only: bool = True
    kinds: tuple[str, ...] | None = None
    operations: tuple[str, ...] | None = None
    partition_filter: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data_change_only, bool):
            raise TypeError(f"data_change_only must be True or False, got {self.data_change_only!r}")
        for name in ("kinds", "operations"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise TypeError(f"{name} must be a list of names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        unknown = set(self.kinds or ()) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown commit kind(s) {sorted(unknown)}: use {', '.join(KINDS)}")
        if self.partition_filter is not None and not isinstance(self.partition_filter, str):
            raise TypeError(f"partition_filter must be a SQL string, got {self.partition_filter!r}")

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> CommitFilter:
        return cls(
            data_change_only=kwargs.get("data_change_only", True),
            kinds=as_list(kwargs.get("kinds")),
            operations=as_list(kwargs.get("operations")),
            partition_filter=kwargs.get("partition_filter"),
        )

    def to_kwargs(self) -> dict[str, Any]:
        """JSON-able, for a trigger's serialized kwargs."""
        return {
            "data_change_only": self.data_change_only,
            "kinds": list(self.kinds) if self.kinds is not None else None,
            "operations": list(self.operations) if self.operations is not None else None,
            "partition_filter": self.partition_filter,
        }


def scan_commits(
    table_uri: str,
    after_version: int,
    commit_filter: CommitFilter,
    *,
    storage_options: Mapping[str, str] | None = None,
    max_versions: int = DEFAULT_MAX_VERSIONS,
) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """``(version, summary or None)`` for every commit after ``after_version`` (at most
    ``max_versions``): the summary when the commit matches the filter. Non-matching versions
    are reported too, so a consumer can move past them once it is safe."""
    from deltaplane.engine.expressions.bind import bind_predicate
    from deltaplane.engine.expressions.parser import parse_predicate
    from deltaplane.engine.scan import Scan, file_keep_mask
    from deltaplane.engine.schema import parse_schema
    from deltaplane.engine.snapshot import files_snapshot, load_table_config
    from deltaplane.engine.storage import open_store
    from deltaplane.engine.tail import changes_of, versions_after

    store = open_store(table_uri, storage_options)
    versions = versions_after(store, after_version)[:max_versions]
    if not versions:
        return
    protocol, metadata = load_table_config(store, versions[0])
    wanted = {o.upper() for o in commit_filter.operations} if commit_filter.operations else None
    predicate = parse_predicate(commit_filter.partition_filter) if commit_filter.partition_filter else None
    bound = schema = None
    for change in changes_of(store, versions, metadata):
        if change.metadata is not None:
            metadata, bound = change.metadata, None
        if change.protocol is not None:
            protocol = change.protocol
        if commit_filter.data_change_only and not change.data_change:
            yield change.version, None
            continue
        if commit_filter.kinds is not None and change.kind not in commit_filter.kinds:
            yield change.version, None
            continue
        if wanted is not None and (change.operation or "").upper() not in wanted:
            yield change.version, None
            continue
        new_files, removed = change.new_files, change.removed
        if predicate is not None:
            if bound is None:  # bound again only when a commit changes the schema
                schema = parse_schema(metadata.schema_string)
                bound = bind_predicate(predicate, schema)
            touched = [
                t.filter(file_keep_mask(t, bound, schema, metadata, store.root))
                for t in (change.added, removed)
                if t.num_rows
            ]
            if not any(t.num_rows for t in touched):
                yield change.version, None
                continue
        files = files_snapshot(store, change.version, protocol, metadata, new_files)
        summary = change.summary()
        summary["files"] = Scan(files, None, None).file_uris() if new_files.num_rows else []
        yield change.version, summary


def find_new_commits(
    table_uri: str,
    after_version: int,
    *,
    storage_options: Mapping[str, str] | None = None,
    max_versions: int = DEFAULT_MAX_VERSIONS,
    commit_filter: CommitFilter | None = None,
    **filters: Any,
) -> dict[str, Any]:
    """Commits after ``after_version`` (at most ``max_versions`` of them) matching the filter
    (``commit_filter``, or its arguments: ``data_change_only``, ``kinds``, ``operations``,
    ``partition_filter``). Each commit is ``deltaplane.engine.tail``'s summary (``version``, ``operation``,
    ``kind``, ``rowsAdded``, ``rowsDeleted``, ...) plus ``files``, the URIs of its new files.

    ``latest_version`` is the newest version examined (matching or not): the watermark a consumer
    moves to once it has handled ``commits``."""
    commit_filter = commit_filter or CommitFilter.of(filters)
    out: dict[str, Any] = {
        "table": table_uri,
        "after_version": after_version,
        "latest_version": after_version,
        "commits": [],
    }
    for version, summary in scan_commits(
        table_uri, after_version, commit_filter, storage_options=storage_options, max_versions=max_versions
    ):
        out["latest_version"] = version
        if summary is not None:
            out["commits"].append(summary)
    return out


def as_list(value: Sequence[str] | str | None) -> list[str] | None:
    """A list argument given as one string means that one name (not its characters)."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)
