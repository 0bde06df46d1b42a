"""A summary of a table for people and scripts: what ``deltaplane describe`` prints."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow.compute as pc

from deltaplane.engine.clustering import clustering_column_names
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.stats import parse_file_stats


def describe_snapshot(snapshot: Snapshot) -> dict[str, Any]:
    files = snapshot.files
    num_records = parse_file_stats(files, {}).num_records if files.num_rows else None
    rows_known = num_records is not None and num_records.null_count == 0
    deleted = 0
    if files.num_rows and files.column("deletion_vector").null_count < files.num_rows:
        deleted = pc.sum(pc.struct_field(files.column("deletion_vector"), "cardinality")).as_py() or 0
    protocol = snapshot.protocol
    return {
        "uri": snapshot.store.root,
        "version": snapshot.version,
        "timestamp": snapshot.timestamp,
        "timestamp_iso": dt.datetime.fromtimestamp(snapshot.timestamp / 1000, dt.UTC).isoformat(),
        "id": snapshot.metadata.id,
        "name": snapshot.metadata.name,
        "description": snapshot.metadata.description,
        "schema": snapshot.schema.to_json(),
        "partition_columns": snapshot.partition_columns,
        "clustering_columns": clustering_column_names(snapshot),  # None: not clustered
        "protocol": {
            "min_reader_version": protocol.min_reader_version,
            "min_writer_version": protocol.min_writer_version,
            "reader_features": protocol.reader_features,
            "writer_features": protocol.writer_features,
        },
        "properties": dict(snapshot.metadata.configuration),
        "num_files": files.num_rows,
        "size_bytes": int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0,
        "num_rows": (int(pc.sum(num_records).as_py() or 0) - int(deleted)) if rows_known else None,
        "num_deleted_rows_in_dvs": int(deleted),
        "num_files_with_dvs": files.num_rows - files.column("deletion_vector").null_count
        if files.num_rows
        else 0,
        "num_tombstones": snapshot.tombstones.num_rows,
        "checkpoint_version": snapshot.segment.checkpoint.version
        if snapshot.segment and snapshot.segment.checkpoint
        else None,
        "app_transactions": {k: t.version for k, t in snapshot.txns.items()},
    }
