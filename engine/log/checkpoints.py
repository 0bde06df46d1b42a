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

from engine.actions import (
    CheckpointMetadata,
    DomainMetadata,
    Metadata,
    Protocol,
    Sidecar,
    Txn,
)
from engine.errors import CorruptCheckpointError, CorruptLogError, ObjectNotFoundError
from engine.log.commits import (
    FILE_ACTION_FIELDS,
    LogActions,
    _flatten,
    empty_file_actions,
    parse_log_json,
)
from engine.log.files import SIDECAR_DIR, LogFile, LogFileKind
from engine.storage.base import ObjectStore

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
    out = LogActions(source=checkpoint.files[0].key, version=checkpoint.version)
    tables = []
    for f in checkpoint.files:
        if f.fmt == "json":
            part = _read_json_manifest(store, f, checkpoint.version)
        else:
            part = _read_parquet(
                store, f.key, checkpoint.version, non_file=True, with_stats_parsed=with_stats_parsed
            )
        _merge_non_file(out, part)
        if part.file_actions is not None:
            tables.append(part.file_actions)
    for sidecar in out.sidecars:
        key = f"{SIDECAR_DIR}/{sidecar.path}" if "/" not in sidecar.path else sidecar.path
        part = _read_parquet(
            store, key, checkpoint.version, non_file=False, with_stats_parsed=with_stats_parsed
        )
        if part.file_actions is not None:
            tables.append(part.file_actions)
    if checkpoint.kind is LogFileKind.V2_CHECKPOINT and out.checkpoint_metadata is None:
        raise CorruptLogError(f"V2 checkpoint {out.source} has no checkpointMetadata", out.source)
    if out.protocol is None:
        raise CorruptLogError(f"checkpoint {checkpoint.name} has no protocol action", out.source)
    if out.metadata is None:
        raise CorruptLogError(f"checkpoint {checkpoint.name} has no metaData action", out.source)
    out.file_actions = concat_file_actions(tables)
    return out


def read_checkpoint_config(store: ObjectStore, checkpoint: Checkpoint) -> LogActions:
    """Only the non-file actions of a checkpoint (protocol, metadata, txns, domains)."""
    out = LogActions(source=checkpoint.files[0].key, version=checkpoint.version)
    for f in checkpoint.files:
        if f.fmt == "json":
            part = _read_json_manifest(store, f, checkpoint.version)
            part.file_actions = None
        else:
            part = _read_parquet(
                store,
                f.key,
                checkpoint.version,
                non_file=True,
                with_stats_parsed=False,
                file_actions=False,
            )
        _merge_non_file(out, part)
    return out


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
                raise CorruptLogError(
                    f"checkpoint {into.source} holds several {attr} actions", into.source
                )
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


def _read_parquet(
    store: ObjectStore,
    key: str,
    version: int,
    *,
    non_file: bool,
    with_stats_parsed: bool,
    file_actions: bool = True,
) -> LogActions:
    out = LogActions(source=key, version=version)
    try:
        pf = pq.ParquetFile(store.open_input(key))
        schema = pf.schema_arrow
        names = set(schema.names)
        columns = []
        for kind, wanted in (("add", _ADD_FIELDS), ("remove", _REMOVE_FIELDS)):
            if kind not in names or not file_actions:
                continue
            present = {
                schema.field(kind).type.field(i).name
                for i in range(schema.field(kind).type.num_fields)
            }
            extra = ["stats_parsed"] if kind == "add" and with_stats_parsed else []
            columns += [f"{kind}.{name}" for name in wanted + extra if name in present]
        if non_file:
            columns += [name for name in _NON_FILE if name in names]
        table = pf.read(columns=columns) if columns else pa.table({})
    except ObjectNotFoundError as e:
        raise CorruptCheckpointError(f"checkpoint file {key} is missing", key) from e
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptCheckpointError(f"checkpoint file {key} is unreadable: {e}", key) from e

    if non_file:
        for name, cls in _NON_FILE.items():
            if name not in table.column_names:
                continue
            column = table.column(name)
            if column.null_count == len(column):
                continue
            for value in column.filter(pc.is_valid(column)).to_pylist():
                out.add_non_file_action(cls.from_json(_to_python(value, column.type)))
    parts = []
    for kind in ("add", "remove"):
        if kind not in table.column_names:
            continue
        column = table.column(kind)
        if column.null_count == len(column):
            continue
        column = column.filter(pc.is_valid(column))
        flat = _flatten(column, kind == "add", key)
        if kind == "add" and "stats_parsed" in {
            column.type.field(i).name for i in range(column.type.num_fields)
        }:
            flat = flat.append_column("stats_parsed", pc.struct_field(column, "stats_parsed"))
        parts.append(flat)
    out.file_actions = concat_file_actions(parts) if parts else None
    return out


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
