"""Hand-built Delta logs for tests: exact control over every action and file name.

Only what a test needs to state explicitly; the engine under test is never used to build them.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltaplane.engine.storage.base import ObjectStore


def struct_schema(*columns: tuple[str, str | dict] | tuple[str, str | dict, bool]) -> dict:
    """A table schema as the log writes it: ``(name, type)`` or ``(name, type, nullable)`` per
    column (nullable unless said), no column metadata; a type is its log form (a string, or a dict
    for nested types)."""
    fields = [
        {"name": c[0], "type": c[1], "nullable": c[2] if len(c) > 2 else True, "metadata": {}}
        for c in columns
    ]
    return {"type": "struct", "fields": fields}


SIMPLE_SCHEMA = struct_schema(("id", "long"), ("part", "string"))


def protocol(reader: int = 1, writer: int = 2, reader_features=None, writer_features=None) -> dict:
    body: dict[str, Any] = {"minReaderVersion": reader, "minWriterVersion": writer}
    if reader_features is not None:
        body["readerFeatures"] = reader_features
    if writer_features is not None:
        body["writerFeatures"] = writer_features
    return {"protocol": body}


def metadata(schema: dict | None = None, partition_columns=(), configuration=None, **extra) -> dict:
    return {
        "metaData": {
            "id": "test-table",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema or SIMPLE_SCHEMA),
            "partitionColumns": list(partition_columns),
            "configuration": configuration or {},
            "createdTime": 1_700_000_000_000,
            **extra,
        }
    }


def add(
    path: str, partition_values=None, size: int = 100, stats: dict | None = None, dv=None, **extra
) -> dict:
    body: dict[str, Any] = {
        "path": path,
        "partitionValues": partition_values or {},
        "size": size,
        "modificationTime": 1_700_000_000_000,
        "dataChange": True,
    }
    if stats is not None:
        body["stats"] = json.dumps(stats)
    if dv is not None:
        body["deletionVector"] = dv
    body.update(extra)
    return {"add": body}


def remove(path: str, dv=None, deletion_timestamp: int = 1_700_000_000_001, **extra) -> dict:
    body: dict[str, Any] = {"path": path, "deletionTimestamp": deletion_timestamp, "dataChange": True}
    if dv is not None:
        body["deletionVector"] = dv
    body.update(extra)
    return {"remove": body}


def commit_info(**values) -> dict:
    return {"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE", **values}}


def write_commit(store: ObjectStore, version: int, actions: list[dict], *, raw: str | None = None) -> str:
    key = f"_delta_log/{version:020d}.json"
    body = raw if raw is not None else "\n".join(json.dumps(a) for a in actions) + "\n"
    store.put(key, body.encode(), mode="create")
    return key


def write_parquet(store: ObjectStore, key: str, table: pa.Table) -> int:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    store.put(key, buf.getvalue(), mode="create")
    return len(buf.getvalue())


def partitioned_file(store: ObjectStore, path: str, ids: list[int], **extra) -> dict:
    """Write a Parquet file of ``ids`` at ``path`` (under ``part=<x>/``) and return its add action,
    with the file's stats written out here."""
    size = write_parquet(store, path, pa.table({"id": pa.array(ids, pa.int64())}))
    part = path.split("/", 1)[0].split("=", 1)[1]
    stats = {
        "numRecords": len(ids),
        "minValues": {"id": min(ids)},
        "maxValues": {"id": max(ids)},
        "nullCount": {"id": 0},
    }
    return add(path, {"part": part}, size=size, stats=stats, **extra)


def id_part_rows(table: pa.Table) -> list[tuple[int, str]]:
    """The ``(id, part)`` rows of a table of ``partitioned_file`` files, sorted."""
    return sorted(zip(table.column("id").to_pylist(), table.column("part").to_pylist(), strict=True))


def simple_table(store: ObjectStore, versions: int = 1, rows_per_file: int = 3) -> None:
    """Versions 0..n-1, each adding one data file with ids [v*rows, (v+1)*rows)."""
    for v in range(versions):
        ids = list(range(v * rows_per_file, (v + 1) * rows_per_file))
        key = f"part-{v:05d}.parquet"
        size = write_parquet(store, key, pa.table({"id": pa.array(ids, pa.int64())}))
        stats = {
            "numRecords": len(ids),
            "minValues": {"id": ids[0]},
            "maxValues": {"id": ids[-1]},
            "nullCount": {"id": 0},
        }
        head = [protocol(), metadata()] if v == 0 else []
        write_commit(store, v, [commit_info(), *head, add(key, size=size, stats=stats)])


_MAP = pa.map_(pa.string(), pa.string())
CHECKPOINT_TYPES = {
    "protocol": pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())]),
    "metaData": pa.struct(
        [
            ("id", pa.string()),
            ("schemaString", pa.string()),
            ("partitionColumns", pa.list_(pa.string())),
            ("configuration", _MAP),
            ("format", pa.struct([("provider", pa.string()), ("options", _MAP)])),
        ]
    ),
    "add": pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", _MAP),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats", pa.string()),
        ]
    ),
    "remove": pa.struct(
        [("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_())]
    ),
}
# Checkpoint column types of actions a checkpoint has no column for unless a test adds them.
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
DOMAIN_METADATA_TYPE = pa.struct(
    [("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]
)


def _as_checkpoint_value(value, typ: pa.DataType):
    """JSON-shaped action values in the shape pyarrow wants (maps as key/value pairs)."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return list(value.items())
    if pa.types.is_struct(typ):
        return {
            typ.field(i).name: _as_checkpoint_value(value.get(typ.field(i).name), typ.field(i).type)
            for i in range(typ.num_fields)
        }
    return value


def checkpoint_parquet(actions: list[dict], types: dict | None = None, **write_options) -> bytes:
    """The Parquet bytes of a checkpoint holding ``actions``, one row each (as Delta Spark lays it
    out): a column per action type, of ``CHECKPOINT_TYPES`` with ``types`` over them, written with
    ``write_options`` (``pyarrow.parquet.write_table``'s)."""
    types = {**CHECKPOINT_TYPES, **(types or {})}
    columns = {
        name: pa.array([_as_checkpoint_value(a.get(name), typ) for a in actions], typ)
        for name, typ in types.items()
    }
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf, **write_options)
    return buf.getvalue()


def write_checkpoint(
    store: ObjectStore,
    version: int,
    actions: list[dict],
    types: dict | None = None,
    *,
    last_checkpoint: bool = False,
    **write_options,
) -> str:
    """A classic single-file checkpoint holding ``actions`` (see ``checkpoint_parquet``), and with
    ``last_checkpoint`` a ``_last_checkpoint`` naming it."""
    key = f"_delta_log/{version:020d}.checkpoint.parquet"
    store.put(key, checkpoint_parquet(actions, types, **write_options))
    if last_checkpoint:
        pointer = {"version": version, "size": len(actions)}
        store.put("_delta_log/_last_checkpoint", json.dumps(pointer).encode())
    return key


DV_FEATURES = ["deletionVectors"]  # reader and writer features of a table with deletion vectors


def inline_dv(rows: list[int]) -> dict:
    """An inline deletion-vector descriptor deleting ``rows``."""
    from deltaplane.engine.deletion_vectors import serialize_bitmap, z85_encode

    bitmap = serialize_bitmap(rows)
    return {
        "storageType": "i",
        "pathOrInlineDv": z85_encode(bitmap),
        "sizeInBytes": len(bitmap),
        "cardinality": len(rows),
    }
