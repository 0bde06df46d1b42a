"""Writing classic checkpoints: one Parquet file with a snapshot's whole state, in batches.

Layout as Delta Spark writes it: one row per action, a struct column per action type (``txn``,
``add``, ``remove``, ``metaData``, ``protocol``, ``domainMetadata``, plus ``checkpointMetadata`` for
tables whose ``delta.checkpointPolicy`` is ``v2``, which get a classic-named V2 checkpoint). Adds
carry ``stats`` as JSON
(``delta.checkpoint.writeStatsAsJson``) and typed ``stats_parsed`` / ``partitionValues_parsed``
(``delta.checkpoint.writeStatsAsStruct``), keyed by physical names. Removes are kept only while
unexpired (``delta.deletedFileRetentionDuration``), for VACUUM.

The live-file table is converted a slice at a time, so memory beyond the snapshot itself is one
batch. The file appears atomically (create-if-absent; an identical checkpoint written by a racing
writer is fine), and ``_last_checkpoint`` is updated afterwards with its checksum, never moved
backwards.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaplane.engine.errors import ObjectExistsError
from deltaplane.engine.log.commits import DV_TYPE, remove_type
from deltaplane.engine.log.files import LAST_CHECKPOINT, checkpoint_key
from deltaplane.engine.log.last_checkpoint import read_last_checkpoint, render_last_checkpoint
from deltaplane.engine.partitions import parse_partition_values
from deltaplane.engine.schema import StructType, to_arrow_type
from deltaplane.engine.snapshot import Snapshot, load_snapshot
from deltaplane.engine.stats import nested_struct_type, parse_file_stats, stats_leaves
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import reader_features

BATCH_ROWS = 64 * 1024
_MAP = pa.map_(pa.string(), pa.string())
TXN = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
PROTOCOL = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)
METADATA = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", _MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", _MAP),
        ("createdTime", pa.int64()),
    ]
)
DOMAIN = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])
CHECKPOINT_METADATA = pa.struct([("version", pa.int64()), ("tags", _MAP)])
REMOVE = remove_type(_MAP)


@dataclass(frozen=True)
class CheckpointInfo:
    version: int
    key: str
    num_actions: int
    num_add_files: int
    size_in_bytes: int
    written: bool  # False when an identical checkpoint already existed


def write_checkpoint(store: ObjectStore, version: int, snapshot: Snapshot | None = None) -> CheckpointInfo:
    """Write the checkpoint of ``version`` and point ``_last_checkpoint`` at it."""
    snapshot = (
        snapshot if snapshot is not None and snapshot.version == version else load_snapshot(store, version)
    )
    plan = _CheckpointLayout(snapshot)
    key = checkpoint_key(version)
    pending = store.open_output(key)
    written = True
    try:
        with pq.ParquetWriter(
            pending.sink, plan.schema, compression="zstd", write_page_checksum=True
        ) as writer:
            for batch in plan.batches():
                writer.write_batch(batch, row_group_size=max(batch.num_rows, 1))
        size = pending.commit()
    except ObjectExistsError:
        written = False  # a concurrent writer produced the same checkpoint
        size = store.head(key).size
    except BaseException:
        pending.abort()
        raise
    info = CheckpointInfo(version, key, plan.num_actions, plan.num_adds, size, written)
    _update_hint(store, info)
    return info


def _update_hint(store: ObjectStore, info: CheckpointInfo) -> None:
    current = read_last_checkpoint(store)
    if current is not None and current.version > info.version:
        return
    hint = {
        "version": info.version,
        "size": info.num_actions,
        "sizeInBytes": info.size_in_bytes,
        "numOfAddFiles": info.num_add_files,
    }
    store.put(LAST_CHECKPOINT, render_last_checkpoint(hint), mode="overwrite")


class _CheckpointLayout:
    """The checkpoint's Arrow schema and its rows, produced batch by batch."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        props = snapshot.properties
        config = snapshot.metadata.configuration
        self.stats_json = config.get("delta.checkpoint.writeStatsAsJson", "true").lower() != "false"
        self.stats_struct = config.get("delta.checkpoint.writeStatsAsStruct", "true").lower() != "false"
        # V2 content when the table asks for it (delta.checkpointPolicy=v2, as Delta Spark decides):
        # a table dropping the feature has set the policy to classic and gets classic checkpoints.
        self.v2 = "v2Checkpoint" in reader_features(snapshot.protocol) and props.checkpoint_policy == "v2"
        schema = snapshot.schema
        self.partition_fields = snapshot.partition_fields
        partition_names = {f.name for f in self.partition_fields}
        data_fields = [f for f in schema.fields if f.name not in partition_names]
        leaves = stats_leaves(
            data_fields,
            num_indexed=props.data_skipping_num_indexed_cols,
            stats_columns=props.data_skipping_stats_columns,
        )
        self.stats_columns = {leaf.path: leaf.dtype for leaf in leaves if leaf.min_max}
        self.null_count_paths = [leaf.path for leaf in leaves]
        cutoff = int(time.time() * 1000) - props.deleted_file_retention_ms
        tombstones = snapshot.tombstones
        if tombstones.num_rows:
            keep = pc.fill_null(pc.greater(tombstones.column("deletion_timestamp"), cutoff), False)
            tombstones = tombstones.filter(keep)
        self.tombstones = tombstones
        self.add_type = self._add_type(schema)
        fields = [
            ("txn", TXN),
            ("add", self.add_type),
            ("remove", REMOVE),
            ("metaData", METADATA),
            ("protocol", PROTOCOL),
            ("domainMetadata", DOMAIN),
        ]
        if self.v2:
            fields.append(("checkpointMetadata", CHECKPOINT_METADATA))
        self.schema = pa.schema(fields)
        self.num_adds = snapshot.files.num_rows
        self.num_actions = (
            2
            + len(snapshot.txns)
            + len(snapshot.domains)
            + self.num_adds
            + self.tombstones.num_rows
            + int(self.v2)
        )

    # --- schema -------------------------------------------------------------------------------

    def _add_type(self, schema: StructType) -> pa.DataType:
        fields = [
            ("path", pa.string()),
            ("partitionValues", _MAP),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("tags", _MAP),
            ("deletionVector", DV_TYPE),
            ("baseRowId", pa.int64()),
            ("defaultRowCommitVersion", pa.int64()),
            ("clusteringProvider", pa.string()),
        ]
        if self.stats_json:
            fields.append(("stats", pa.string()))
        if self.stats_struct and self.partition_fields:
            fields.append(
                (
                    "partitionValues_parsed",
                    pa.struct([(f.physical_name, to_arrow_type(f.type)) for f in self.partition_fields]),
                )
            )
        if self.stats_struct:
            fields.append(("stats_parsed", self._stats_type()))
        return pa.struct(fields)

    def _stats_type(self) -> pa.DataType:
        values = nested_struct_type({p: to_arrow_type(t) for p, t in self.stats_columns.items()})
        counts = nested_struct_type({p: pa.int64() for p in self.null_count_paths if p in self.stats_columns})
        return pa.struct(
            [
                ("numRecords", pa.int64()),
                ("minValues", values),
                ("maxValues", values),
                ("nullCount", counts),
                ("tightBounds", pa.bool_()),
            ]
        )

    # --- rows ---------------------------------------------------------------------------------

    def batches(self):
        s = self.snapshot
        head = [("protocol", _protocol_row(s.protocol)), ("metaData", _metadata_row(s.metadata))]
        head += [
            ("txn", {"appId": t.app_id, "version": t.version, "lastUpdated": t.last_updated})
            for t in s.txns.values()
        ]
        head += [
            ("domainMetadata", {"domain": d.domain, "configuration": d.configuration, "removed": False})
            for d in s.domains.values()
        ]
        if self.v2:
            head.append(("checkpointMetadata", {"version": s.version, "tags": None}))
        yield self._rows(head)
        files = s.files
        slices = [files.slice(start, BATCH_ROWS) for start in range(0, files.num_rows, BATCH_ROWS)]
        # Convert the next slice (stats JSON -> typed stats) while the Parquet writer compresses
        # this one: both run in Arrow's C++ without the GIL, so the two cores overlap.
        with ThreadPoolExecutor(1) as pool:
            upcoming = pool.submit(self._adds, slices[0]) if slices else None
            for i in range(len(slices)):
                batch = upcoming.result()
                upcoming = pool.submit(self._adds, slices[i + 1]) if i + 1 < len(slices) else None
                yield batch
        tombstones = self.tombstones
        for start in range(0, tombstones.num_rows, BATCH_ROWS):
            yield self._removes(tombstones.slice(start, BATCH_ROWS))

    def _rows(self, rows: list[tuple[str, dict]]) -> pa.RecordBatch:
        columns = {name: [None] * len(rows) for name in self.schema.names}
        for i, (name, value) in enumerate(rows):
            columns[name][i] = value
        arrays = [pa.array(columns[f.name], f.type) for f in self.schema]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _batch(self, n: int, name: str, array: pa.Array) -> pa.RecordBatch:
        arrays = [array if f.name == name else pa.nulls(n, f.type) for f in self.schema]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _adds(self, files: pa.Table) -> pa.RecordBatch:
        n = files.num_rows
        children = {
            "path": _plain(files.column("path")),
            "partitionValues": _struct_to_map(files.column("partition_values"), n),
            "size": _plain(files.column("size")),
            "modificationTime": _plain(files.column("modification_time")),
            "dataChange": pa.repeat(False, n),  # a checkpoint states what is, it changes nothing
            "tags": _plain(files.column("tags")).cast(_MAP)
            if "tags" in files.column_names
            else pa.nulls(n, _MAP),
            "deletionVector": _plain(files.column("deletion_vector")).cast(DV_TYPE),
            "baseRowId": _plain(files.column("base_row_id")),
            "defaultRowCommitVersion": _plain(files.column("default_row_commit_version")),
            "clusteringProvider": _plain(files.column("clustering_provider")),
        }
        if self.stats_json:
            children["stats"] = _plain(files.column("stats"))
        if self.stats_struct and self.partition_fields:
            children["partitionValues_parsed"] = self._partition_values_parsed(files)
        if self.stats_struct:
            children["stats_parsed"] = self._stats_parsed(files)
        fields = [self.add_type.field(i) for i in range(self.add_type.num_fields)]
        add = pa.StructArray.from_arrays([children[f.name] for f in fields], fields=fields)
        return self._batch(n, "add", add)

    def _partition_values_parsed(self, files: pa.Table) -> pa.Array:
        pv = files.column("partition_values")
        children = [
            _plain(parse_partition_values(pc.struct_field(pv, f.physical_name), f.type))
            for f in self.partition_fields
        ]
        return pa.StructArray.from_arrays(children, names=[f.physical_name for f in self.partition_fields])

    def _stats_parsed(self, files: pa.Table) -> pa.Array:
        stats = parse_file_stats(files, self.stats_columns, for_skipping=False)
        stats_type = self.add_type.field("stats_parsed").type

        def nested(kind: str, source: dict) -> pa.Array:
            return _build_nested(stats_type.field(kind).type, (), source, files.num_rows)

        children = [
            _plain(stats.num_records),
            nested("minValues", stats.min_values),
            nested("maxValues", stats.max_values),
            nested("nullCount", stats.null_count),
            _plain(stats.tight_bounds)
            if stats.tight_bounds is not None
            else pa.nulls(files.num_rows, pa.bool_()),
        ]
        has_stats = pc.is_valid(files.column("stats"))
        mask = pc.invert(_plain(has_stats))
        return pa.StructArray.from_arrays(
            children, fields=list(stats_type), mask=mask if pc.any(mask).as_py() else None
        )

    def _removes(self, tombstones: pa.Table) -> pa.RecordBatch:
        n = tombstones.num_rows
        children = {
            "path": _plain(tombstones.column("path")),
            "deletionTimestamp": _plain(tombstones.column("deletion_timestamp")),
            "dataChange": pa.repeat(False, n),
            "extendedFileMetadata": _plain(tombstones.column("extended_file_metadata")),
            "partitionValues": _struct_to_map(tombstones.column("partition_values"), n),
            "size": _plain(tombstones.column("size")),
            "deletionVector": _plain(tombstones.column("deletion_vector")).cast(DV_TYPE),
            "baseRowId": _plain(tombstones.column("base_row_id")),
            "defaultRowCommitVersion": _plain(tombstones.column("default_row_commit_version")),
        }
        remove = pa.StructArray.from_arrays([children[f.name] for f in REMOVE], fields=list(REMOVE))
        return self._batch(n, "remove", remove)


def _plain(column) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _struct_to_map(column, n: int) -> pa.Array:
    """``struct<col: string>`` partition values to the checkpoint's ``map<string,string>``."""
    pv = _plain(column)
    names = [pv.type.field(i).name for i in range(pv.type.num_fields)] if pa.types.is_struct(pv.type) else []
    k = len(names)
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * k, pa.int32())
    if not k:
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(offsets, empty, empty, type=_MAP)
    keys = pa.array(np.tile(np.array(names, dtype=object), n), pa.string())
    values = pa.concat_arrays([_plain(pc.struct_field(pv, name)).cast(pa.string()) for name in names])
    order = (np.arange(k)[None, :] * n + np.arange(n)[:, None]).reshape(-1)  # row-major interleave
    return pa.MapArray.from_arrays(offsets, keys, values.take(pa.array(order)), type=_MAP)


def _build_nested(typ: pa.DataType, prefix: tuple[str, ...], source: dict, n: int) -> pa.Array:
    children = []
    for i in range(typ.num_fields):
        f = typ.field(i)
        path = (*prefix, f.name)
        if pa.types.is_struct(f.type) and path not in source:
            children.append(_build_nested(f.type, path, source, n))
        else:
            value = source.get(path)
            children.append(_plain(value).cast(f.type) if value is not None else pa.nulls(n, f.type))
    return pa.StructArray.from_arrays(children, fields=list(typ)) if children else pa.nulls(n, typ)


def _protocol_row(p) -> dict:
    return {
        "minReaderVersion": p.min_reader_version,
        "minWriterVersion": p.min_writer_version,
        "readerFeatures": p.reader_features if p.min_reader_version >= 3 else None,
        "writerFeatures": p.writer_features if p.min_writer_version >= 7 else None,
    }


def _metadata_row(m) -> dict:
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "format": {"provider": m.format.provider, "options": list((m.format.options or {}).items())},
        "schemaString": m.schema_string,
        "partitionColumns": list(m.partition_columns),
        "configuration": list(m.configuration.items()),
        "createdTime": m.created_time,
    }
