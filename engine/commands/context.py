"""The write context: what one writing command's transaction carries beside the log (the table
it read, the metadata and protocol it will commit, the data-file writer and its configuration, the
adds and removes), shared by every command that writes data files (append, overwrite, DML,
OPTIMIZE, RESTORE, feature changes, ALTER) and below all of them, so that none imports another to
reach it. Also the pieces those commands build actions with: ``remove_action`` for a live file,
``union_protocol``, ``writer_config``, column-mapping ids.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata, Protocol, Remove
from deltaplane.engine.column_values import (
    ColumnValues,
    identity_only_tag,
)
from deltaplane.engine.enforcement import (
    check_constraints,
    check_unique_names,
    table_constraints,
)
from deltaplane.engine.errors import (
    ConstraintViolationError,
    InvalidArgumentError,
    SchemaMismatchError,
    TableReadOnlyError,
)
from deltaplane.engine.row_tracking import materialized_columns
from deltaplane.engine.schema import (
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    from_arrow_schema,
    merge_schemas,
    parse_schema,
)
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.stats import stats_leaves
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import (
    check_write_supported,
    minimal_protocol,
    reader_features,
    writer_features,
)
from deltaplane.engine.table_properties import TableProperties
from deltaplane.engine.transaction import CommitResult, Transaction
from deltaplane.engine.work import WorkKey
from deltaplane.engine.writer import DEFAULT_TARGET_FILE_SIZE, DataFileWriter, WriterConfig

CHANGE_TYPE = "_change_type"


def check_app_version(app_id: str | None, app_version: int | None) -> None:
    """An idempotent writer's ``(app_id, app_version)``: both or neither, the version an int >= 0."""
    if (app_id is None) != (app_version is None):
        raise InvalidArgumentError("app_id and app_version go together")
    if not isinstance(app_version, int) or isinstance(app_version, bool) or app_version < 0:
        raise InvalidArgumentError(f"app_version must be a non-negative integer, got {app_version!r}")


def assign_column_mapping(
    schema: StructType, max_id: int, *, keep_names: bool = False
) -> tuple[StructType, int]:
    """Give every field without one a physical name and a field id (column mapping); with
    ``keep_names`` the physical name is the field's name (turning mapping on for existing files)."""
    counter = [max_id]

    def field(f: StructField) -> StructField:
        metadata = dict(f.metadata)
        if "delta.columnMapping.id" not in metadata:
            counter[0] += 1
            metadata["delta.columnMapping.id"] = counter[0]
            metadata["delta.columnMapping.physicalName"] = f.name if keep_names else f"col-{uuid.uuid4()}"
        return StructField(f.name, typ(f.type), f.nullable, metadata)

    def typ(t: DataType) -> DataType:
        if isinstance(t, StructType):
            return StructType(tuple(field(f) for f in t.fields))
        if isinstance(t, ArrayType):
            return ArrayType(typ(t.element_type), t.contains_null)
        if isinstance(t, MapType):
            return MapType(typ(t.key_type), typ(t.value_type), t.value_contains_null)
        return t

    out = typ(schema)
    assert isinstance(out, StructType)
    return out, counter[0]


def writer_config(
    metadata: Metadata, protocol: Protocol, schema: StructType, target_file_size: int | None = None
) -> WriterConfig:
    """How data files of this table are written: partitioning, column mapping, which columns get
    statistics, the target size, random prefixes."""
    props = TableProperties(metadata.configuration)
    partition_names = set(metadata.partition_columns)
    data_fields = [f for f in schema.fields if f.name not in partition_names]
    materialize = "materializePartitionColumns" in writer_features(protocol)
    return WriterConfig(
        schema=schema,
        partition_columns=list(metadata.partition_columns),
        column_mapping=props.column_mapping_mode,
        stats_leaves=stats_leaves(
            data_fields if not materialize else list(schema.fields),
            num_indexed=props.data_skipping_num_indexed_cols,
            stats_columns=props.data_skipping_stats_columns,
        ),
        tight_bounds=True if "deletionVectors" in reader_features(protocol) else None,
        target_file_size=target_file_size or props.target_file_size or DEFAULT_TARGET_FILE_SIZE,
        random_prefix_length=int(metadata.configuration.get("delta.randomPrefixLength", "2"))
        if metadata.configuration.get("delta.randomizeFilePrefixes", "").lower() == "true"
        else None,
        materialize_partitions=materialize,
        row_tracking_columns=materialized_columns(protocol, metadata),
    )


class WriteContext:
    """Shared mechanics of one write: the transaction, the schema, the data-file writer."""

    def __init__(
        self,
        store: ObjectStore,
        snapshot: Snapshot,
        operation_parameters: dict[str, Any],
        *,
        target_file_size: int | None,
        schema_mode: str | None,
        operation: str = "WRITE",
        new_table: tuple[Protocol, Metadata] | None = None,
    ):
        """``snapshot`` is the version written on; ``None`` with ``new_table`` (its protocol and
        metadata) for a table being created by this write."""
        if schema_mode not in (None, "merge", "overwrite"):
            raise InvalidArgumentError(
                f"schema_mode must be None, 'merge' or 'overwrite', got {schema_mode!r}"
            )
        self.store = store
        self.snapshot = snapshot
        self.schema_mode = schema_mode
        self.target_file_size = target_file_size
        if snapshot is not None:
            protocol, metadata = snapshot.protocol, snapshot.metadata
        elif new_table is not None:
            protocol, metadata = new_table
        else:
            raise InvalidArgumentError("a write needs the snapshot it is based on, or a new table")
        self.metadata = metadata
        self.protocol = protocol
        self.schema = snapshot.schema if snapshot is not None else parse_schema(metadata.schema_string)
        check_write_supported(protocol, metadata, self.schema, store.root)
        self.txn = Transaction(
            store, snapshot, operation=operation, operation_parameters=operation_parameters
        )
        self._values: ColumnValues | None = None
        self._identity_only: bool | None = None

    @property
    def values(self) -> ColumnValues:
        """The table's generated, default and identity columns (column_values.py), for this write."""
        if self._values is None:
            self._values = ColumnValues(
                self.schema, table=self.store.root, on_high_water_marks=self._high_water_marks_moved
            )
        return self._values

    def _high_water_marks_moved(self, schema: StructType) -> None:
        """Identity values were assigned: the new high-water marks go in this commit's metaData,
        tagged as Delta Spark tags an identity-only metadata update."""
        if self._identity_only is None:
            self._identity_only = not self.txn.summary.changes_metadata
            if self._identity_only:
                self.txn.commit_metadata = identity_only_tag(self.txn.commit_metadata)
        self.schema = schema
        self.metadata = dataclasses.replace(self.metadata, schema_string=schema.to_json_string())
        self.txn.update_metadata(self.metadata)

    def idempotent_skip(self, app_id: str | None, app_version: int | None) -> CommitResult | None:
        if app_id is None and app_version is None:
            return None
        check_app_version(app_id, app_version)
        self.txn.read_app_transaction(app_id)  # a concurrent commit of the same work conflicts
        if self.snapshot is not None and WorkKey(app_id, app_version).done_in(self.snapshot):
            return CommitResult(self.snapshot.version, self.txn.operation, {}, skipped=True)
        self.txn.set_app_transaction(app_id, app_version)
        return None

    def evolve(self, incoming: pa.Schema) -> None:
        """Apply ``schema_mode`` to the incoming data's schema (new metadata if it changes)."""
        try:
            check_unique_names(incoming)
        except SchemaMismatchError as e:
            raise SchemaMismatchError(f"cannot write to {self.store.root}: {e}") from None
        if self.schema_mode is None:
            return
        data_schema = from_arrow_schema(incoming)
        props = TableProperties(self.metadata.configuration)
        if self.schema_mode == "overwrite":
            new_schema = data_schema
            for name in self.metadata.partition_columns:
                if new_schema.find(name) is None:
                    raise SchemaMismatchError(f"the new schema drops partition column {name!r}")
        else:
            widening = "typeWidening" in writer_features(
                self.protocol
            ) or "typeWidening-preview" in writer_features(self.protocol)
            new_schema = merge_schemas(self.schema, data_schema, allow_widening=widening)
        if new_schema == self.schema:
            return
        configuration = dict(self.metadata.configuration)
        if props.column_mapping_mode != "none":
            max_id = int(configuration.get("delta.columnMapping.maxColumnId", "0"))
            new_schema, max_id = assign_column_mapping(new_schema, max_id)
            configuration["delta.columnMapping.maxColumnId"] = str(max_id)
        self.schema = new_schema
        self._values = None
        self.metadata = Metadata(
            id=self.metadata.id,
            schema_string=new_schema.to_json_string(),
            partition_columns=self.metadata.partition_columns,
            configuration=configuration,
            format=self.metadata.format,
            name=self.metadata.name,
            description=self.metadata.description,
            created_time=self.metadata.created_time,
            extra=self.metadata.extra,
        )
        self.txn.update_metadata(self.metadata)
        needed = minimal_protocol(new_schema, configuration)
        upgraded = union_protocol(self.protocol, needed)
        if upgraded != self.protocol:
            self.protocol = upgraded
            self.txn.update_protocol(upgraded)

    def writer(self) -> DataFileWriter:
        return DataFileWriter(
            self.store, writer_config(self.metadata, self.protocol, self.schema, self.target_file_size)
        )

    def change_data_writer(self) -> DataFileWriter:
        """Writer for ``_change_data/`` files: the table's columns plus ``_change_type``."""
        from dataclasses import replace

        base = self.writer().config
        schema = StructType((*self.schema.fields, StructField(CHANGE_TYPE, PrimitiveType("string"))))
        return DataFileWriter(
            self.store,
            replace(base, schema=schema, stats_leaves=[], prefix="_change_data", row_tracking_columns=None),
        )

    def write_data(self, reader: pa.RecordBatchReader, extra_check=None) -> DataFileWriter:
        constraints = table_constraints(self.schema, self.metadata.configuration)
        writer = self.writer()
        try:
            for batch in reader:
                try:
                    table = self.values.insert(batch)
                except SchemaMismatchError as e:
                    raise SchemaMismatchError(f"cannot write to {self.store.root}: {e}") from None
                try:
                    check_constraints(table, self.schema, constraints)
                except ConstraintViolationError as e:
                    raise ConstraintViolationError(f"cannot write to {self.store.root}: {e}") from None
                if extra_check is not None:
                    extra_check(table)
                writer.write(table)
            self.txn.add_files(writer.close())
        except BaseException:
            writer.abort()
            raise
        return writer

    def check_removals_allowed(self) -> None:
        if TableProperties(self.metadata.configuration).append_only:
            raise TableReadOnlyError(
                f"{self.store.root} is append-only (delta.appendOnly=true): existing data cannot be removed"
            )

    def remove_files(self, files: pa.Table) -> int:
        """Stage removes for these live files (dataChange=true); returns their total size."""
        if files.num_rows == 0:
            return 0
        self.check_removals_allowed()
        now = int(time.time() * 1000)
        removes = [remove_action(row, now) for row in files.select(list(_REMOVE_COLUMNS)).to_pylist()]
        self.txn.remove_files(removes)
        return int(pc.sum(files.column("size")).as_py() or 0)


_REMOVE_COLUMNS = (
    "path",
    "partition_values",
    "size",
    "stats",
    "deletion_vector",
    "base_row_id",
    "default_row_commit_version",
)


def remove_action(row: dict, now: int) -> Remove:
    """The remove for one live-file row (its deletion vector included: that is its identity)."""
    return Remove(
        path=row["path"],
        data_change=True,
        deletion_timestamp=now,
        extended_file_metadata=True,
        partition_values=row["partition_values"],
        size=row["size"],
        stats=row.get("stats"),
        deletion_vector=_dv(row["deletion_vector"]),
        base_row_id=row.get("base_row_id"),
        default_row_commit_version=row.get("default_row_commit_version"),
    )


def _dv(value):
    from deltaplane.engine.actions import DeletionVectorDescriptor

    return (
        DeletionVectorDescriptor.from_json({k: v for k, v in value.items() if v is not None})
        if value
        else None
    )


def union_protocol(current: Protocol, needed: Protocol) -> Protocol:
    """The smallest protocol that has everything ``current`` has and ``needed`` asks for."""
    readers = set(reader_features(current)) | set(reader_features(needed))
    writers = set(writer_features(current)) | set(writer_features(needed))
    if writers <= set(writer_features(current)) and readers <= set(reader_features(current)):
        return current
    if max(current.min_writer_version, needed.min_writer_version) < 7:
        return Protocol(
            max(current.min_reader_version, needed.min_reader_version),
            max(current.min_writer_version, needed.min_writer_version),
        )
    if max(current.min_reader_version, needed.min_reader_version) >= 3:
        return Protocol(3, 7, sorted(readers), sorted(writers))
    return Protocol(max(current.min_reader_version, needed.min_reader_version), 7, None, sorted(writers))


def writer_metrics(writer: DataFileWriter, **extra: int) -> dict[str, int]:
    """A write's operation metrics as Delta Spark names them (files, rows, bytes written)."""
    return {
        "numFiles": len(writer.adds),
        "numOutputRows": writer.rows_written,
        "numOutputBytes": writer.bytes_written,
        **extra,
    }
