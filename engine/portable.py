"""Snapshots that travel: a table's protocol, metadata and some of its live files, picklable.

Distributed work (Spark tasks, worker processes) reads or rewrites a few files of one table
version. Loading the log again in every task would cost a listing and the commits per task, so
the driver sends a ``PortableSnapshot`` instead: the table's location and storage options, the
version, its protocol and metadata as JSON, and the live-file rows (Arrow IPC) of the files the
task handles. ``snapshot()`` rebuilds an engine ``Snapshot`` of just those files without touching
``_delta_log``, so ``Scan``, ``rewrite_bin`` and the row-level readers work on it unchanged.

``split_for_tasks`` groups the files into tasks as Spark's file sources do (``FilePartition``):
each file costs its size plus an open cost, files go largest first into the current task until
it would pass the split size, the split size shrinks so that a small table still spreads over
``min_partitions`` tasks, and more than ``max_partitions`` tasks are packed again into about
that many. Files are never cut: a task reads whole files.

Storage options travel with the work (tasks need credentials). Where that is unwanted, leave
them out and configure the workers' environment (``AWS_*``) instead: an empty mapping makes the
store use boto3's default credential chain.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata, Protocol
from deltaplane.engine.errors import InvalidArgumentError
from deltaplane.engine.packing import next_fit
from deltaplane.engine.snapshot import Snapshot, files_snapshot
from deltaplane.engine.storage import open_store
from deltaplane.engine.storage.base import ObjectStore

MAX_PARTITION_BYTES = 128 * 1024 * 1024  # spark.sql.files.maxPartitionBytes
OPEN_COST_BYTES = 4 * 1024 * 1024  # spark.sql.files.openCostInBytes


def split_bytes(
    total_bytes: int, num_files: int, *, max_partition_bytes: int, open_cost_bytes: int, min_partitions: int
) -> int:
    """The most bytes one task takes, as Spark's ``maxSplitBytes``: ``max_partition_bytes``, or
    less when the files (each counted with ``open_cost_bytes``) spread over ``min_partitions``
    tasks need less; never below ``open_cost_bytes``."""
    if max_partition_bytes <= 0:
        raise InvalidArgumentError(f"max_partition_bytes must be positive, got {max_partition_bytes}")
    if open_cost_bytes < 0:
        raise InvalidArgumentError(f"open_cost_bytes must not be negative, got {open_cost_bytes}")
    if min_partitions < 1:
        raise InvalidArgumentError(f"min_partitions must be at least 1, got {min_partitions}")
    per_core = (total_bytes + num_files * open_cost_bytes) // min_partitions
    return min(max_partition_bytes, max(open_cost_bytes, per_core))


def pack_files(
    sizes: Sequence[int | None],
    *,
    max_partition_bytes: int,
    open_cost_bytes: int,
    min_partitions: int,
    max_partitions: int | None = None,
) -> list[list[int]]:
    """Positions in ``sizes`` grouped into tasks as Spark packs a file scan: largest files first
    (ties keep their order), each task filled until the next file would pass ``split_bytes``,
    every file counted as its size plus ``open_cost_bytes``; a file larger than the split size
    gets a task of its own. More than ``max_partitions`` tasks are packed again with the split
    that makes about that many (Spark's ``spark.sql.files.maxPartitionNum``)."""
    if max_partitions is not None and max_partitions < 1:
        raise InvalidArgumentError(f"max_partitions must be at least 1, got {max_partitions}")
    sizes = [size or 0 for size in sizes]
    limit = split_bytes(
        sum(sizes),
        len(sizes),
        max_partition_bytes=max_partition_bytes,
        open_cost_bytes=open_cost_bytes,
        min_partitions=min_partitions,
    )
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    groups = next_fit(order, sizes, limit, cost=open_cost_bytes)
    if max_partitions is not None and len(groups) > max_partitions:
        counted = sum(sizes) + len(sizes) * open_cost_bytes
        groups = next_fit(order, sizes, -(-counted // max_partitions), cost=open_cost_bytes)
    return groups


def table_to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    return sink.getvalue().to_pybytes()


def table_from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


@dataclass(frozen=True)
class PortableSnapshot:
    """Enough of one table version to read or rewrite some of its files anywhere."""

    uri: str
    version: int
    protocol_json: str
    metadata_json: str
    files_ipc: bytes = field(repr=False)
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    num_files: int = 0
    num_bytes: int = 0

    @classmethod
    def of(
        cls,
        snapshot: Snapshot,
        files: pa.Table | None = None,
        *,
        uri: str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> PortableSnapshot:
        """``files`` (rows of ``snapshot.files``; all of them by default) packed for shipping."""
        files = snapshot.files if files is None else files
        options = storage_options
        if options is None:
            options = getattr(snapshot.store, "options", None) or {}
        return cls(
            uri=uri or snapshot.store.root,
            version=snapshot.version,
            protocol_json=json.dumps(snapshot.protocol.to_json()),
            metadata_json=json.dumps(snapshot.metadata.to_json()),
            files_ipc=table_to_ipc(files),
            storage_options=dict(options),
            num_files=files.num_rows,
            num_bytes=int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0,
        )

    @cached_property
    def files(self) -> pa.Table:
        return table_from_ipc(self.files_ipc)

    def __getstate__(self) -> dict:
        # The files travel once, as IPC bytes: not again as the table ``files`` decoded them into.
        return {k: v for k, v in self.__dict__.items() if k != "files"}

    def store(self) -> ObjectStore:
        return open_store(self.uri, self.storage_options)

    def snapshot(self, store: ObjectStore | None = None) -> Snapshot:
        """An engine snapshot holding only these files (nothing is read from the log)."""
        return files_snapshot(
            store if store is not None else self.store(),
            self.version,
            Protocol.from_json(json.loads(self.protocol_json)),
            Metadata.from_json(json.loads(self.metadata_json)),
            self.files,
        )

    def with_files(self, files: pa.Table) -> PortableSnapshot:
        return PortableSnapshot(
            uri=self.uri,
            version=self.version,
            protocol_json=self.protocol_json,
            metadata_json=self.metadata_json,
            files_ipc=table_to_ipc(files),
            storage_options=self.storage_options,
            num_files=files.num_rows,
            num_bytes=int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0,
        )

    def split_for_tasks(
        self,
        *,
        max_partition_bytes: int = MAX_PARTITION_BYTES,
        open_cost_bytes: int = OPEN_COST_BYTES,
        min_partitions: int = 1,
        max_partitions: int | None = None,
    ) -> list[PortableSnapshot]:
        """The files grouped into tasks as Spark groups a file scan (``pack_files``): one
        snapshot per task, largest files first. No files, no tasks."""
        files = self.files
        if not files.num_rows:
            return []
        groups = pack_files(
            files.column("size").to_pylist(),
            max_partition_bytes=max_partition_bytes,
            open_cost_bytes=open_cost_bytes,
            min_partitions=min_partitions,
            max_partitions=max_partitions,
        )
        # Groups are runs of the size order: one take, then zero-copy slices.
        ordered = files.take(pa.array([i for group in groups for i in group], pa.int64()))
        out, start = [], 0
        for group in groups:
            out.append(self.with_files(ordered.slice(start, len(group))))
            start += len(group)
        return out

    def split(self, target_bytes: int, *, max_files: int | None = None) -> list[PortableSnapshot]:
        """Consecutive groups of files of about ``target_bytes`` each (at least one file per
        group; at most ``max_files`` files per group when given): one group per task."""
        if target_bytes <= 0:
            raise InvalidArgumentError(f"target_bytes must be positive, got {target_bytes}")
        files = self.files
        sizes = files.column("size").to_pylist()
        groups: list[PortableSnapshot] = []
        start, total = 0, 0
        for i, size in enumerate(sizes):
            full = total + (size or 0) > target_bytes or (max_files is not None and i - start >= max_files)
            if i > start and full:
                groups.append(self.with_files(files.slice(start, i - start)))
                start, total = i, 0
            total += size or 0
        if start < len(sizes):
            groups.append(self.with_files(files.slice(start)))
        return groups
