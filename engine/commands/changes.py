"""Reading the change data feed: the rows each commit inserted, deleted or updated.

Per version, as the protocol says: if the commit has ``cdc`` actions, its changes are exactly the
rows of those ``_change_data/`` files (with their ``_change_type``); otherwise rows of the files it
added (with ``dataChange``) are inserts and rows of the files it removed are deletes, deletion
vectors applied. Every row gets ``_commit_version`` and ``_commit_timestamp`` (the in-commit
timestamp when enabled, otherwise the commit file's monotonized modification time). Rows are
read with the latest requested version's schema, so older files gain columns added since as nulls.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import DeletionVectorDescriptor, Metadata
from deltaplane.engine.commands.context import CHANGE_TYPE
from deltaplane.engine.commands.write import files_table
from deltaplane.engine.deletion_vectors import keep_mask, read_deletion_vector
from deltaplane.engine.errors import (
    ChangeDataNotRecordedError,
    ChangeDataSchemaError,
    InvalidArgumentError,
    TimestampOutOfRangeError,
    VersionNotFoundError,
)
from deltaplane.engine.expressions.tree import Expr
from deltaplane.engine.log.commits import LogActions
from deltaplane.engine.log.replay import canonical_paths, normalize_partition_values
from deltaplane.engine.log.segment import earliest_available_version, list_log
from deltaplane.engine.log.timestamps import (
    commit_timestamp,
    file_timestamps,
    to_millis,
    version_at_timestamp,
)
from deltaplane.engine.scan import Scan
from deltaplane.engine.schema import PrimitiveType, StructField, StructType, partition_physical_names
from deltaplane.engine.schema_changes import read_incompatibility
from deltaplane.engine.snapshot import Snapshot, load_snapshot, load_table_config, read_commit
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_properties import TableProperties

COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"


def read_changes(store: ObjectStore, *args, **kwargs) -> pa.Table:
    """The change data feed as one table (the arguments of ``iter_changes``)."""
    return iter_changes(store, *args, **kwargs).read_all()


def change_feed(
    store: ObjectStore,
    start_version: int | None,
    end_version: int | None,
    *,
    starting_timestamp: str | int | dt.datetime | None = None,
    ending_timestamp: str | int | dt.datetime | None = None,
    columns: list[str] | None = None,
    predicate: str | Expr | None = None,
    allow_out_of_range: bool = False,
    read_schema: str = "default",
) -> pa.RecordBatchReader:
    """``DeltaTable.changes``/``load_cdf``: ``iter_changes`` from version 0 when no start is given,
    ``allow_out_of_range`` clamping the range to the log (a start after the latest version is no
    rows), and ``predicate`` (SQL) filtering the change rows before ``columns`` projects them."""
    start, end = start_version, end_version
    if start is None and starting_timestamp is None:
        start = 0
    if allow_out_of_range:
        latest = list_log(store, 0).max_version
        if end is not None and latest is not None and end > latest:
            end = latest
        if start is not None and latest is not None and start > latest:
            schema = iter_changes(store, latest, latest, columns=columns).schema
            return pa.RecordBatchReader.from_batches(schema, iter(()))
    reader = iter_changes(
        store,
        start,
        end,
        starting_timestamp=starting_timestamp,
        ending_timestamp=ending_timestamp,
        columns=None if predicate is not None else columns,
        read_schema=read_schema,
    )
    if predicate is None:
        return reader
    return _filtered_changes(reader, predicate, columns)


def _filtered_changes(reader: pa.RecordBatchReader, predicate: str | Expr, columns: list[str] | None):
    """The change rows matching ``predicate`` (bound to the change feed's own schema), then
    projected to ``columns`` and the change columns."""
    from deltaplane.engine.expressions.arrow import filter_rows
    from deltaplane.engine.expressions.bind import bind_predicate
    from deltaplane.engine.expressions.parser import parse_predicate
    from deltaplane.engine.schema import from_arrow_schema

    expr = parse_predicate(predicate) if isinstance(predicate, str) else predicate
    bound = bind_predicate(expr, from_arrow_schema(reader.schema))
    schema = reader.schema
    if columns is not None:
        change = ["_change_type", "_commit_version", "_commit_timestamp"]
        unknown = [c for c in columns if c not in schema.names or c in change]
        if unknown:
            raise InvalidArgumentError(f"unknown column {unknown[0]!r} (columns: {', '.join(schema.names)})")
        schema = pa.schema([schema.field(n) for n in [*dict.fromkeys(columns), *change]])

    def batches():
        for batch in reader:
            rows = filter_rows(pa.Table.from_batches([batch]), bound, "the change feed")
            yield from rows.select(schema.names).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def iter_changes(
    store: ObjectStore,
    start_version: int | None = None,
    end_version: int | None = None,
    *,
    starting_timestamp=None,
    ending_timestamp=None,
    columns: list[str] | None = None,
    read_schema: str = "default",
) -> pa.RecordBatchReader:
    """The change data feed as a stream, one commit's changes (file by file) at a time.

    The range is given by versions or by timestamps (each end independently): a starting
    timestamp begins at the first commit at or after it, an ending timestamp stops at the last
    commit at or before it (or the latest commit, for a time after it), as Delta Spark reads
    ``startingTimestamp``/``endingTimestamp``. ``columns`` selects table columns; the change
    type, commit version and commit timestamp always come along.

    Rows are read under one schema, Delta Spark's (``read_schema="default"``): the end version's
    on a column-mapped table, otherwise the latest version's (older rows gain later columns as
    nulls); ``read_schema="end"`` always takes the end version's. A range that schema cannot
    read (a column renamed or dropped, a type widened, a column made NOT NULL in between) is
    refused with ``ChangeDataSchemaError`` naming the version and the pieces that can be read;
    one where the feed was off at some version with ``ChangeDataNotRecordedError``.

    Long because of this docstring, Delta Spark's reading rules written down;
    the body (about 60 lines) plans the range, then streams it.
    """
    if start_version is not None and starting_timestamp is not None:
        raise InvalidArgumentError("give a starting version or a starting timestamp, not both")
    if end_version is not None and ending_timestamp is not None:
        raise InvalidArgumentError("give an ending version or an ending timestamp, not both")
    listing = list_log(store, 0)
    latest = listing.max_version
    if latest is None:
        raise VersionNotFoundError(f"no commits at {store.root}")
    if starting_timestamp is not None or ending_timestamp is not None:
        _, metadata = load_table_config(store)
        properties = TableProperties(metadata.configuration)
        if starting_timestamp is not None:
            start_version = _first_version_at_or_after(store, starting_timestamp, properties, latest)
        if ending_timestamp is not None:
            end_version = _last_version_at_or_before(store, ending_timestamp, properties, latest)
    if start_version is None:
        raise InvalidArgumentError("the change data feed needs a starting version or timestamp")
    end = latest if end_version is None else end_version
    if start_version < 0 or start_version > end or end > latest:
        raise VersionNotFoundError(
            f"cannot read changes {start_version}..{end_version} of {store.root}: versions run 0..{latest}"
        )
    missing = [v for v in range(start_version, end + 1) if v not in listing.commits]
    if missing:
        raise VersionNotFoundError(
            f"changes of version {missing[0]} of {store.root} are gone (its commit was cleaned up)"
        )
    commits = {v: read_commit(store, listing.commits[v].key, v) for v in range(start_version, end + 1)}
    _, start_metadata = load_table_config(store, start_version)
    _check_recorded(store.root, start_version, end, start_metadata, commits)
    snapshot = load_snapshot(store, end)
    read_version = end
    if read_schema == "default" and not _column_mapped(start_metadata, snapshot.metadata):
        latest_metadata = snapshot.metadata if end == latest else load_table_config(store)[1]
        if not _column_mapped(latest_metadata):  # Delta Spark's "legacy" mode: the latest schema
            read_version = latest
            snapshot = dataclasses.replace(snapshot, metadata=latest_metadata)
    elif read_schema not in ("default", "end"):
        raise InvalidArgumentError(f"read_schema must be 'default' or 'end', got {read_schema!r}")
    _check_schemas(store.root, start_version, end, start_metadata, snapshot.metadata, read_version, commits)
    all_versions = sorted(listing.commits)
    stamps = dict(zip(all_versions, file_timestamps(listing, all_versions).tolist(), strict=True))
    schema = snapshot.schema
    change_schema = StructType((*schema.fields, StructField(CHANGE_TYPE, PrimitiveType("string"))))
    physical = partition_physical_names(schema, snapshot.metadata.partition_columns)
    out_schema = _output_schema(snapshot, change_schema)
    if columns is not None:
        names = [_column_name(schema, c, store.root) for c in columns]
        keep = [*dict.fromkeys(names), CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP]
        out_schema = pa.schema([out_schema.field(n) for n in keep])

    def batches():
        for version in range(start_version, end + 1):
            actions = commits.pop(version)
            when = stamps[version]
            if actions.commit_info is not None and actions.commit_info.in_commit_timestamp is not None:
                when = actions.commit_info.in_commit_timestamp
            for table in _changes_of(snapshot, actions, change_schema, physical):
                yield from _stamp(table, version, when).select(out_schema.names).cast(out_schema).to_batches()

    return pa.RecordBatchReader.from_batches(out_schema, batches())


def _column_name(schema: StructType, name: str, root: str) -> str:
    field = schema.find(name)
    if field is None:
        raise InvalidArgumentError(
            f"the change data feed of {root} has no column {name!r} (columns: {', '.join(schema.names)})"
        )
    return field.name


def _first_version_at_or_after(store: ObjectStore, when, properties: TableProperties, latest: int) -> int:
    target = to_millis(when)
    try:
        version = version_at_timestamp(store, target, properties)
    except TimestampOutOfRangeError:
        earliest = earliest_available_version(store)
        if target <= commit_timestamp(store, earliest, properties):
            return earliest  # before the first commit: the feed starts at the beginning
        raise
    if commit_timestamp(store, version, properties) == target:
        return version
    if version + 1 > latest:
        raise TimestampOutOfRangeError(
            f"no commit of {store.root} at or after {when}: the latest is version {latest}"
        )
    return version + 1


def _last_version_at_or_before(store: ObjectStore, when, properties: TableProperties, latest: int) -> int:
    target = to_millis(when)
    try:
        return version_at_timestamp(store, target, properties)
    except TimestampOutOfRangeError:
        if target >= commit_timestamp(store, latest, properties):
            return latest  # after the latest commit: up to the latest
        raise


def _cdf_on(metadata: Metadata) -> bool:
    return TableProperties(metadata.configuration).enable_change_data_feed


def _column_mapped(*metadata: Metadata) -> bool:
    return any(TableProperties(m.configuration).column_mapping_mode != "none" for m in metadata)


def _check_recorded(root: str, start: int, end: int, start_metadata: Metadata, commits: dict) -> None:
    """The feed is on at ``start`` and no commit in between turned it off (Delta Spark's check)."""
    off = start if not _cdf_on(start_metadata) else None
    if off is None:
        off = next(
            (
                v
                for v in range(start + 1, end + 1)
                if commits[v].metadata and not _cdf_on(commits[v].metadata)
            ),
            None,
        )
    if off is not None:
        raise ChangeDataNotRecordedError(
            f"cannot read changes {start}..{end} of {root}: the change data feed was not enabled at "
            f"version {off}, so its changes were not recorded (set delta.enableChangeDataFeed=true; "
            "only versions committed after that have a change feed)",
            off,
        )


def _check_schemas(
    root: str,
    start: int,
    end: int,
    start_metadata: Metadata,
    read_metadata: Metadata,
    read_version: int,
    commits: dict,
) -> None:
    """Refuse a range the read schema cannot read (Delta Spark's ``changesToDF`` checks): every
    schema committed after ``start`` and the schema at ``start`` must be readable under it."""
    changed = next(
        (
            (v, problem)
            for v in range(start + 1, end + 1)
            if commits[v].metadata and (problem := read_incompatibility(commits[v].metadata, read_metadata))
        ),
        None,
    )
    error_class = "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE"
    if changed is None:
        problem = read_incompatibility(start_metadata, read_metadata)
        if not problem:
            return
        changed, error_class = (start, problem), "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA"
    version, problem = changed
    pieces = _readable_pieces(start, end, start_metadata, commits)
    if version == start and len(pieces) > 1:
        version = pieces[1][0]  # the start's schema differs from the read schema: where it changed
    where = f"at version {version}" if version > start else f"since version {start}"
    listed = ", ".join(f"{a}..{b}" for a, b in pieces)
    raise ChangeDataSchemaError(
        f"cannot read changes {start}..{end} of {root} under the schema of version {read_version}: "
        f"{where}, {problem}, so rows would be mislabelled or mistyped. Read {listed} separately, "
        "each with read_schema='end'.",
        start=start,
        end=end,
        read_version=read_version,
        change_version=version,
        error_class=error_class,
        ranges=pieces,
    )


def _readable_pieces(start: int, end: int, start_metadata: Metadata, commits: dict) -> list[tuple[int, int]]:
    """``start..end`` cut at every commit whose schema the schema before it cannot be read
    under: each piece reads under its end version's schema."""
    cuts, previous = [], start_metadata
    for v in range(start + 1, end + 1):
        metadata = commits[v].metadata
        if metadata is not None:
            if read_incompatibility(previous, metadata):
                cuts.append(v)
            previous = metadata
    bounds = [start, *cuts, end + 1]
    return [(a, b - 1) for a, b in itertools.pairwise(bounds)]


def _output_schema(snapshot: Snapshot, change_schema: StructType) -> pa.Schema:
    from deltaplane.engine.schema import to_arrow_schema

    base = to_arrow_schema(change_schema)
    return pa.schema(
        [
            *base,
            pa.field(COMMIT_VERSION, pa.int64()),
            pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")),
        ]
    )


def _changes_of(snapshot: Snapshot, actions: LogActions, change_schema: StructType, physical: list[str]):
    if actions.cdc:
        files = files_table(
            [c.path for c in actions.cdc],
            [c.partition_values for c in actions.cdc],
            [c.size for c in actions.cdc],
        )
        yield _read(snapshot, files, change_schema)
        return
    table = actions.file_actions
    if table is None or table.num_rows == 0:
        return
    table = normalize_partition_values(table, physical)
    table = table.filter(pc.fill_null(table.column("data_change"), True))
    is_add = table.column("is_add")
    keys = canonical_paths(table.column("path"), snapshot.store.root)
    added_keys = pc.filter(keys, is_add)
    removed_keys = pc.filter(keys, pc.invert(is_add))
    # A file removed and re-added in one commit (a new deletion vector) changed only the rows
    # between its two deletion vectors; its other rows are neither inserted nor deleted.
    paired = pc.and_(
        pc.is_in(keys, value_set=pc.unique(added_keys.combine_chunks())),
        pc.is_in(keys, value_set=pc.unique(removed_keys.combine_chunks())),
    )
    for add_side, change_type in ((True, "insert"), (False, "delete")):
        selected = table.filter(pc.and_(pc.equal(is_add, add_side), pc.invert(paired)))
        if selected.num_rows:
            rows = _read(snapshot, selected, snapshot.schema)
            yield rows.append_column(CHANGE_TYPE, pa.repeat(pa.scalar(change_type), rows.num_rows))
    if pc.any(paired).as_py():
        yield from _deletion_vector_changes(snapshot, table.filter(paired), keys.filter(paired))


def _deletion_vector_changes(snapshot: Snapshot, pairs: pa.Table, keys: pa.ChunkedArray):
    """Rows deleted (or restored) between a file's removed and re-added deletion vectors."""
    by_key: dict[str, dict[bool, int]] = {}
    for i, (key, is_add) in enumerate(zip(keys.to_pylist(), pairs.column("is_add").to_pylist(), strict=True)):
        by_key.setdefault(key, {})[is_add] = i
    dv_type = pairs.schema.field("deletion_vector").type
    for sides in by_key.values():
        added, removed = pairs.slice(sides[True], 1), pairs.slice(sides[False], 1)
        whole = added.set_column(
            added.schema.get_field_index("deletion_vector"), "deletion_vector", pa.nulls(1, dv_type)
        )
        rows = _read(snapshot, whole, snapshot.schema)
        now_deleted = _deleted_mask(snapshot, added, rows.num_rows)
        was_deleted = _deleted_mask(snapshot, removed, rows.num_rows)
        restored, deleted = was_deleted & ~now_deleted, now_deleted & ~was_deleted
        for mask, change_type in ((restored, "insert"), (deleted, "delete")):
            if mask.any():
                changed = rows.filter(pa.array(mask))
                yield changed.append_column(CHANGE_TYPE, pa.repeat(pa.scalar(change_type), changed.num_rows))


def _deleted_mask(snapshot: Snapshot, file_row: pa.Table, num_rows: int) -> np.ndarray:
    dv = file_row.column("deletion_vector")[0].as_py()
    if dv is None:
        return np.zeros(num_rows, dtype=bool)
    descriptor = DeletionVectorDescriptor.from_json(dv)
    deleted = read_deletion_vector(snapshot.store, descriptor, data_file=file_row.column("path")[0].as_py())
    return ~keep_mask(num_rows, deleted)


def _read(snapshot: Snapshot, files: pa.Table, schema: StructType) -> pa.Table:
    """Rows of these files read as the table would read them, under ``schema``."""
    if schema is not snapshot.schema:
        metadata = dataclasses.replace(snapshot.metadata, schema_string=schema.to_json_string())
        snapshot = dataclasses.replace(snapshot, metadata=metadata)
    return Scan(snapshot, None, None, files=files).to_table()


def _stamp(table: pa.Table, version: int, millis: int) -> pa.Table:
    n = table.num_rows
    when = dt.datetime.fromtimestamp(millis / 1000, dt.UTC)
    table = table.append_column(COMMIT_VERSION, pa.repeat(pa.scalar(version, pa.int64()), n))
    return table.append_column(COMMIT_TIMESTAMP, pa.repeat(pa.scalar(when, pa.timestamp("us", tz="UTC")), n))
