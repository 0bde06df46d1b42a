"""Reading checkpoints: classic, multi-part, and V2 (UUID-named JSON or Parquet, with sidecars).

Checkpoint Parquet files are read with column projection: only the add/remove fields replay
needs, plus the small non-file action columns. File actions come out as the same flat Arrow
table that commit parsing produces (``partition_values`` still a map here), so replay treats
every source alike. A checkpoint that cannot be read raises ``CorruptLogError`` naming the
file; the snapshot loader decides whether an older checkpoint can stand in.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaplane.engine.actions import (
    CheckpointMetadata,
    DomainMetadata,
    Metadata,
    Protocol,
    Sidecar,
    Txn,
)
from deltaplane.engine.errors import CorruptCheckpointError, CorruptLogError, ObjectNotFoundError
from deltaplane.engine.log.commits import (
    FILE_ACTION_FIELDS,
    LogActions,
    empty_file_actions,
    flat_file_actions,
    parse_log_json,
)
from deltaplane.engine.log.files import SIDECAR_DIR, LogFile, LogFileKind
from deltaplane.engine.log.replay import normalize_partition_values
from deltaplane.engine.schema import parse_schema, partition_physical_names
from deltaplane.engine.storage.base import ObjectStore

_ADD_FIELDS = [
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
    "tags",
]
_REMOVE_FIELDS = [
    "path",
    "deletionTimestamp",
    "dataChange",
    "extendedFileMetadata",
    "partitionValues",
    "size",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
]
_NON_FILE = {
    "protocol": Protocol,
    "metaData": Metadata,
    "txn": Txn,
    "domainMetadata": DomainMetadata,
    "sidecar": Sidecar,
    "checkpointMetadata": CheckpointMetadata,
}


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint at one version: a single file or every part of a multi-part one."""

    version: int
    files: tuple[LogFile, ...]

    @property
    def kind(self) -> LogFileKind:
        return self.files[0].kind

    @property
    def name(self) -> str:
        return (
            self.files[0].name
            if len(self.files) == 1
            else f"{self.files[0].name} (+{len(self.files) - 1} parts)"
        )


def read_checkpoint(
    store: ObjectStore, checkpoint: Checkpoint, *, with_stats_parsed: bool = True
) -> LogActions:
    """All actions of a checkpoint; file actions as one Arrow table."""
    out, tables = _read_own_files(store, checkpoint, file_actions=True, with_stats_parsed=with_stats_parsed)
    for sidecar in out.sidecars:
        key = f"{SIDECAR_DIR}/{sidecar.path}" if "/" not in sidecar.path else sidecar.path
        part = _read_parquet(
            store,
            key,
            checkpoint.version,
            non_file=False,
            with_stats_parsed=with_stats_parsed,
            size=sidecar.size_in_bytes,
        )
        if part.file_actions is not None:
            tables.append(part.file_actions)
    if checkpoint.kind is LogFileKind.V2_CHECKPOINT and out.checkpoint_metadata is None:
        raise CorruptLogError(f"V2 checkpoint {out.source} has no checkpointMetadata", out.source)
    if out.protocol is None:
        raise CorruptLogError(f"checkpoint {checkpoint.name} has no protocol action", out.source)
    if out.metadata is None:
        raise CorruptLogError(f"checkpoint {checkpoint.name} has no metaData action", out.source)
    # Parts can disagree on the shape of partitionValues (a map in Parquet, an object in a JSON
    # manifest): give them all the checkpoint's own partition columns before stacking them.
    physical = partition_physical_names(
        parse_schema(out.metadata.schema_string), out.metadata.partition_columns
    )
    out.file_actions = concat_file_actions([normalize_partition_values(t, physical) for t in tables])
    return out


def read_checkpoint_config(store: ObjectStore, checkpoint: Checkpoint) -> LogActions:
    """Only the non-file actions of a checkpoint (protocol, metadata, txns, domains)."""
    return _read_own_files(store, checkpoint, file_actions=False, with_stats_parsed=False)[0]


def _read_own_files(
    store: ObjectStore, checkpoint: Checkpoint, *, file_actions: bool, with_stats_parsed: bool
) -> tuple[LogActions, list[pa.Table]]:
    """The checkpoint's own files (its parts or its V2 manifest, not the sidecars): their
    non-file actions merged into one ``LogActions``, and with ``file_actions`` their file-action
    tables (without, a Parquet part's file actions are not read at all)."""
    out = LogActions(source=checkpoint.files[0].key, version=checkpoint.version)
    tables = []
    for f in checkpoint.files:
        if f.fmt == "json":
            part = _read_json_manifest(store, f, checkpoint.version)
        else:
            part = _read_parquet(
                store,
                f.key,
                checkpoint.version,
                non_file=True,
                with_stats_parsed=with_stats_parsed,
                file_actions=file_actions,
                size=f.size,
            )
        _merge_non_file(out, part)
        if file_actions and part.file_actions is not None:
            tables.append(part.file_actions)
    return out, tables


def concat_file_actions(tables: list[pa.Table]) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return empty_file_actions()
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def _merge_non_file(into: LogActions, part: LogActions) -> None:
    for attr in ("protocol", "metadata", "checkpoint_metadata"):
        value = getattr(part, attr)
        if value is not None:
            if getattr(into, attr) is not None and attr != "checkpoint_metadata":
                raise CorruptLogError(f"checkpoint {into.source} holds several {attr} actions", into.source)
            setattr(into, attr, value)
    into.txns.extend(part.txns)
    into.domains.extend(part.domains)
    into.sidecars.extend(part.sidecars)


def _read_json_manifest(store: ObjectStore, f: LogFile, version: int) -> LogActions:
    try:
        data = store.get(f.key)
    except ObjectNotFoundError as e:
        raise CorruptCheckpointError(f"checkpoint {f.key} disappeared while loading", f.key) from e
    try:
        return parse_log_json(data, version=version, source=f.key)
    except CorruptLogError as e:
        raise CorruptCheckpointError(str(e), f.key) from e


# A leaf that is non-null exactly when its action is present: row-group statistics on it tell
# which row groups hold that action at all.
_KEY_LEAF = {
    "add": "add.path",
    "remove": "remove.path",
    "protocol": "protocol.minReaderVersion",
    "metaData": "metaData.id",
    "txn": "txn.appId",
    "domainMetadata": "domainMetadata.domain",
    "sidecar": "sidecar.path",
    "checkpointMetadata": "checkpointMetadata.version",
}
_BATCH_ROWS = 64 * 1024
_READ_BUFFER = 1 << 20  # stream column chunks instead of loading each whole


def _row_groups_holding(pf: pq.ParquetFile, action: str) -> list[int]:
    """Row groups where ``action`` may be present (all of them when statistics are missing).

    A checkpoint is one row per action, so a column like ``metaData`` is null in all but one of
    a million rows; skipping all-null row groups, and decoding the rest in batches, keeps such
    columns from costing memory in proportion to the file.
    """
    md = pf.metadata
    leaf = _KEY_LEAF[action]
    index = next((i for i in range(md.num_columns) if md.schema.column(i).path == leaf), None)
    groups = []
    for rg in range(md.num_row_groups):
        rows = md.row_group(rg).num_rows
        if rows == 0:
            continue
        stats = md.row_group(rg).column(index).statistics if index is not None else None
        if stats is not None and stats.has_null_count and stats.null_count == rows:
            continue
        groups.append(rg)
    return groups


def _read_parquet(
    store: ObjectStore,
    key: str,
    version: int,
    *,
    non_file: bool,
    with_stats_parsed: bool,
    file_actions: bool = True,
    size: int | None = None,
) -> LogActions:
    out = LogActions(source=key, version=version)
    parts = []
    try:
        # pre_buffer would cache whole column chunks for the life of the reader: with a
        # million-row row group that is hundreds of MB held for nothing.
        pf = pq.ParquetFile(
            _open(store, key, size, whole=file_actions),
            pre_buffer=False,
            buffer_size=_READ_BUFFER,
            page_checksum_verification=True,
        )
        schema = pf.schema_arrow
        names = set(schema.names)
        if _is_small(pf):
            _read_small(
                pf,
                schema,
                out,
                non_file=non_file,
                with_stats_parsed=with_stats_parsed,
                file_actions=file_actions,
            )
            return out
        if non_file:
            for name, cls in _NON_FILE.items():
                if name not in names:
                    continue
                column_type = schema.field(name).type
                for batch in _valid_batches(pf, name, [name]):
                    for value in batch.column(0).to_pylist():
                        out.add_non_file_action(cls.from_json(_to_python(value, column_type)))
        all_null = _all_null_leaves(pf.metadata) if file_actions else set()
        for kind in ("add", "remove"):
            if kind not in names or not file_actions:
                continue
            fields = _file_fields(schema, kind, with_stats_parsed, all_null)
            for rg in _row_groups_holding(pf, kind):
                part = _read_fields(pf, rg, kind, fields, key)
                if part is not None:
                    parts.append(part)
    except ObjectNotFoundError as e:
        raise CorruptCheckpointError(f"checkpoint file {key} is missing", key) from e
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptCheckpointError(f"checkpoint file {key} is unreadable: {e}", key) from e
    out.file_actions = concat_file_actions(parts) if parts else None
    return out


# A remote checkpoint file up to this size (as listed) is fetched in one request when its file
# actions are read: a replay reads nearly all of it, and through a random-access file it costs a
# round trip for the footer and one per column chunk decoded (50 for a 100,000-file checkpoint of
# 29 MB: 2 s at 20 ms a trip). The bytes are held while the file is parsed, which the parse's own
# arrays outweigh. A read of the protocol and metadata alone leaves it to the store (which fetches
# small objects whole).
_WHOLE_FETCH_BYTES = 128 << 20


def _open(store: ObjectStore, key: str, size: int | None, *, whole: bool) -> pa.NativeFile:
    if whole and getattr(store, "remote", True) and size and 0 < size <= _WHOLE_FETCH_BYTES:
        return pa.BufferReader(store.get(key))
    return store.open_input(key, size=size)


# A checkpoint this small (uncompressed) is read in one call: per-field, per-batch decoding
# bounds the memory of million-file checkpoints but costs milliseconds of fixed overhead.
_SMALL_CHECKPOINT_BYTES = 16 << 20


def _is_small(pf: pq.ParquetFile) -> bool:
    md = pf.metadata
    return sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)) <= _SMALL_CHECKPOINT_BYTES


_ASKED = (*_KEY_LEAF.values(), "add.", "remove.")


def _null_leaves_by_group(md: pq.FileMetaData) -> list[tuple[int, set[str]]]:
    """Each non-empty row group with the leaf columns its statistics show to be null in every
    row (none without statistics). A leaf's null count is at most the row count unless the leaf
    is repeated, so only non-repeated leaves and map keys (never null themselves) are asked
    about. Only action keys and add/remove fields are looked at (statistics objects cost
    microseconds each)."""
    groups = [(rg, md.row_group(rg)) for rg in range(md.num_row_groups)]
    groups = [(rg, g) for rg, g in groups if g.num_rows]
    out: list[tuple[int, set[str]]] = [(rg, set()) for rg, _ in groups]
    for i in range(md.num_columns):
        path = md.schema.column(i).path
        if not path.startswith(_ASKED) or path.startswith("add.stats_parsed."):
            continue
        for (_, g), (_, nulls) in zip(groups, out, strict=True):
            stats = g.column(i).statistics
            if stats is not None and stats.has_null_count and stats.null_count == g.num_rows:
                nulls.add(path)
    return out


def _all_null_leaves(md: pq.FileMetaData) -> set[str]:
    """Leaf columns null in every row of the file, as far as row-group statistics tell."""
    return _all_null(_null_leaves_by_group(md))


def _all_null(by_group: list[tuple[int, set[str]]]) -> set[str]:
    return set.intersection(*(nulls for _, nulls in by_group)) if by_group else set()


def _field_all_null(schema: pa.Schema, kind: str, name: str, all_null: set[str]) -> bool:
    """Whether ``kind.name`` is null (or, for a map, empty) in every row: then the flat table's
    null column stands for it exactly, and its leaves need not be decoded. ``path`` (the key)
    and ``tags`` (an empty map is not a null one) are always read."""
    if name in ("path", "tags"):
        return False
    typ = schema.field(kind).type.field(name).type
    if pa.types.is_map(typ):
        return f"{kind}.{name}.key_value.key" in all_null
    if pa.types.is_struct(typ):
        leaves = [f"{kind}.{name}.{typ.field(i).name}" for i in range(typ.num_fields)]
        scalar = not any(pa.types.is_nested(typ.field(i).type) for i in range(typ.num_fields))
        return scalar and all(leaf in all_null for leaf in leaves)
    return not pa.types.is_nested(typ) and f"{kind}.{name}" in all_null


def _file_fields(schema: pa.Schema, kind: str, with_stats_parsed: bool, all_null: set[str]) -> list[str]:
    """The fields of ``kind`` (add or remove) that replay needs and that may hold a value."""
    kind_type = schema.field(kind).type
    present = {kind_type.field(i).name for i in range(kind_type.num_fields)}
    wanted = _ADD_FIELDS if kind == "add" else _REMOVE_FIELDS
    if "path" not in present:
        all_null = set()  # a broken action: read what there is, for replay to reject
    fields = [n for n in wanted if n in present and not _field_all_null(schema, kind, n, all_null)]
    # Typed stats are only needed where the JSON form was not written.
    if kind == "add" and with_stats_parsed and "stats" not in present and "stats_parsed" in present:
        fields.append("stats_parsed")
    return fields


def _small_reads(
    pf: pq.ParquetFile, schema: pa.Schema, *, non_file: bool, with_stats_parsed: bool, file_actions: bool
) -> tuple[list[tuple[list[int], list[str]]], dict[str, list[str]]]:
    """Runs of row groups with the leaf paths to decode in them, and the add/remove fields.

    Decoding costs per column chunk even for a dozen rows, so only what replay uses is read:
    not ``stats_parsed`` when the JSON stats are there, no field null throughout (no deletion
    vectors, no row tracking), and in each row group only the actions its statistics show
    present (a checkpoint whose protocol and metadata have a row group of their own reads the
    file actions' leaves in the other row groups only; one without removes reads none).
    """
    by_group = _null_leaves_by_group(pf.metadata)
    all_null = _all_null(by_group)
    fields: dict[str, list[str]] = {}
    projection: dict[str, list[str]] = {}
    for name in schema.names:
        if _KEY_LEAF.get(name) in all_null:
            continue  # no row group holds this action
        if non_file and name in _NON_FILE:
            projection[name] = [name]
        elif file_actions and name in ("add", "remove"):
            fields[name] = _file_fields(schema, name, with_stats_parsed, all_null)
            # (an action without even a path is read whole, for replay to reject)
            projection[name] = [f"{name}.{field}" for field in fields[name]] or [name]
    reads: list[tuple[list[int], list[str]]] = []
    for rg, nulls in by_group:
        columns = [c for name, cs in projection.items() if _KEY_LEAF[name] not in nulls for c in cs]
        if not columns:
            continue
        if reads and reads[-1][1] == columns and reads[-1][0][-1] == rg - 1:
            reads[-1][0].append(rg)  # the same columns in the next row group: one read
        else:
            reads.append(([rg], columns))
    return reads, fields


def _read_small(
    pf: pq.ParquetFile,
    schema: pa.Schema,
    out: LogActions,
    *,
    non_file: bool,
    with_stats_parsed: bool,
    file_actions: bool,
) -> None:
    """The whole checkpoint in a call or two: the same actions, in the same order, as the
    streaming path."""
    reads, file_fields = _small_reads(
        pf, schema, non_file=non_file, with_stats_parsed=with_stats_parsed, file_actions=file_actions
    )
    pieces = [pf.read_row_groups(rgs, columns=columns, use_threads=False) for rgs, columns in reads]
    if non_file:
        for name, cls in _NON_FILE.items():
            column_type = schema.field(name).type if name in schema.names else None
            for column in _present(pieces, name, keep_nulls=_FEW_ROWS):
                for value in column.to_pylist():
                    if value is not None:
                        out.add_non_file_action(cls.from_json(_to_python(value, column_type)))
    parts = []
    for kind, names in file_fields.items():
        for column in _present(pieces, kind):
            children = {name: pc.struct_field(column, name) for name in names}
            part = flat_file_actions(children, len(column), kind == "add", out.source)
            if "stats_parsed" in children:
                part = part.append_column("stats_parsed", children["stats_parsed"])
            parts.append(part)
    out.file_actions = concat_file_actions(parts) if parts else None


# Filtering a nested column costs ~50 us; below this many rows its nulls are skipped in Python.
_FEW_ROWS = 64


def _present(pieces: list[pa.Table], name: str, keep_nulls: int = 0):
    """Column ``name`` of each piece that has a value in it, nulls dropped (or kept, in pieces
    of at most ``keep_nulls`` rows)."""
    for table in pieces:
        if name not in table.column_names:
            continue
        column = table.column(name)
        if column.null_count == len(column):
            continue
        drop = column.null_count and len(column) > keep_nulls
        yield column.filter(column.is_valid()) if drop else column


def _read_fields(pf: pq.ParquetFile, rg: int, kind: str, fields: list[str], source: str) -> pa.Table | None:
    """One row group's add (or remove) actions, decoded one field and one batch at a time.

    Field by field and batch by batch, with buffered reads of the column chunks, the transient
    memory is a batch of one field, not the row group's columns (a million-file checkpoint has
    a single row group of ~300 MB). Each field is filtered by its own parent validity, which is
    the same for every field of the action.
    """
    children = {}
    for name in fields:
        chunks = []
        for batch in pf.iter_batches(
            batch_size=_BATCH_ROWS, row_groups=[rg], columns=[f"{kind}.{name}"], use_threads=False
        ):
            parent = batch.column(0)
            child = pc.struct_field(parent, name)
            if parent.null_count:
                child = child.filter(parent.is_valid())
            if len(child):
                chunks.append(child)
        if not chunks:
            return None
        children[name] = pa.chunked_array(chunks)
    n = len(children[fields[0]])
    table = flat_file_actions(children, n, kind == "add", source)
    if "stats_parsed" in children:
        table = table.append_column("stats_parsed", children["stats_parsed"])
    return table


def _valid_batches(pf: pq.ParquetFile, action: str, columns: list[str]):
    """Batches of the rows where ``action`` is present, decoded a bounded batch at a time."""
    groups = _row_groups_holding(pf, action)
    if not groups:
        return
    for batch in pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=groups, columns=columns):
        column = batch.column(0)
        if column.null_count == len(column):
            continue
        yield batch.filter(column.is_valid()) if column.null_count else batch


def _to_python(value, typ: pa.DataType):
    """A checkpoint struct value as the JSON shape the action classes parse (maps as dicts)."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return {k: _to_python(v, typ.item_type) for k, v in value}
    if pa.types.is_struct(typ):
        return {
            typ.field(i).name: _to_python(value.get(typ.field(i).name), typ.field(i).type)
            for i in range(typ.num_fields)
            if value.get(typ.field(i).name) is not None
        }
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return [_to_python(v, typ.value_type) for v in value]
    return value


__all__ = [
    "FILE_ACTION_FIELDS",
    "Checkpoint",
    "concat_file_actions",
    "read_checkpoint",
    "read_checkpoint_config",
]
