"""CREATE, append and overwrite: the write commands behind ``DeltaTable``.

Each command builds one transaction. Data is streamed: batches are conformed to the table schema,
checked against constraints, and handed to the data-file writer as they arrive, so an input of
any size runs in bounded memory. Nothing is committed until every file is written; on any error
the transaction is abandoned and finished files stay unreferenced until VACUUM removes them.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata, Protocol
from deltaplane.engine.clustering import FEATURE_PROPERTY as CLUSTERING_FEATURE_PROPERTY
from deltaplane.engine.clustering import ClusteringError, clustering_column_names, resolve_columns
from deltaplane.engine.clustering import domain_metadata as clustering_domain
from deltaplane.engine.column_values import (
    check_declarations,
    normalize_declarations,
    schema_from_arrow,
)
from deltaplane.engine.commands import dml  # replaceWhere on data columns deletes as DELETE does
from deltaplane.engine.commands.context import (
    WriteContext,
    assign_column_mapping,
    check_app_version,
    writer_metrics,
)
from deltaplane.engine.commands.manifest import check_manifest_compatible
from deltaplane.engine.enforcement import (
    table_constraints,
)
from deltaplane.engine.errors import (
    ConstraintViolationError,
    InvalidArgumentError,
    SchemaError,
    TableExistsError,
    TableSettingsMismatchError,
)
from deltaplane.engine.expressions.arrow import evaluate
from deltaplane.engine.expressions.bind import bind_predicate
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.expressions.tree import And, Column, Comparison, Expr, IsNull, Literal, Or, columns
from deltaplane.engine.inputs import as_reader
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.partitions import parse_partition_values
from deltaplane.engine.row_tracking import with_column_names
from deltaplane.engine.scan import Scan, file_keep_mask
from deltaplane.engine.schema import (
    DecimalType,
    PrimitiveType,
    StructField,
    StructType,
    parse_schema,
)
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import (
    minimal_protocol,
    table_configuration,
)
from deltaplane.engine.table_properties import TableProperties, check_property_names
from deltaplane.engine.transaction import CommitResult, Transaction

# --- CREATE -----------------------------------------------------------------------------------


def execute_create(
    store: ObjectStore,
    schema: pa.Schema | StructType | None,
    *,
    partition_by: list[str] | None = None,
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    data: Any = None,
    app_id: str | None = None,
    app_version: int | None = None,
    target_file_size: int | None = None,
    cluster_by: list[str] | None = None,
) -> CommitResult:
    """Commit version 0 of a new table; ``TableExistsError`` if there is one already.

    With ``data`` (anything ``as_reader`` takes) its rows are written in the same commit
    (``CREATE TABLE AS SELECT``), so a table never exists half-made; ``schema`` then defaults to
    the data's.
    """
    reader = None
    if data is not None:
        reader = as_reader(data, _table_schema(schema) if schema is not None else None)
        schema = reader.schema if schema is None else schema
    if list_log(store, 0).max_version is not None:
        raise TableExistsError(f"a Delta table already exists at {store.root}")
    protocol, metadata = new_table_actions(
        store,
        schema,
        partition_by=partition_by,
        properties=properties,
        name=name,
        description=description,
        cluster_by=cluster_by,
    )
    configuration = metadata.configuration
    params = {"partitionBy": metadata.partition_columns, "properties": configuration}
    domains = []
    if cluster_by:
        columns = resolve_columns(parse_schema(metadata.schema_string), cluster_by, configuration)
        params["clusterBy"] = [c.name for c in columns]
        domains.append(clustering_domain(columns))
    if reader is None:
        txn = Transaction(store, None, operation="CREATE TABLE", operation_parameters=params)
        txn.update_protocol(protocol)
        txn.update_metadata(metadata)
        for domain in domains:
            txn.set_domain_metadata(domain)
        if app_id is not None or app_version is not None:
            check_app_version(app_id, app_version)
            txn.set_app_transaction(app_id, app_version)
        return txn.commit()
    write = WriteContext(
        store,
        None,
        params,
        target_file_size=target_file_size,
        schema_mode=None,
        operation="CREATE TABLE AS SELECT",
        new_table=(protocol, metadata),
    )
    write.txn.update_protocol(protocol)
    write.txn.update_metadata(metadata)
    for domain in domains:
        write.txn.set_domain_metadata(domain)
    write.idempotent_skip(app_id, app_version)
    write.evolve(reader.schema)  # only checks the data's column names: the schema is new
    writer = write.write_data(reader)
    return write.txn.commit(writer_metrics(writer))


def new_table_actions(
    store: ObjectStore,
    schema: Any,
    *,
    partition_by: list[str] | None = None,
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    cluster_by: list[str] | None = None,
) -> tuple[Protocol, Metadata]:
    """Protocol and metadata of a new table (checked: names, partition columns, properties,
    constraints, clustering columns), without writing anything."""
    delta_schema = normalize_declarations(_table_schema(schema))
    requested = {str(k): str(v) for k, v in (properties or {}).items()}
    check_property_names(requested, store.root)
    configuration = table_configuration(requested)
    if not delta_schema.fields:
        raise SchemaError("a table needs at least one column")
    _check_unique_names(delta_schema)
    partition_by = list(partition_by or [])
    _check_partition_columns(delta_schema, partition_by)
    props = TableProperties(configuration)
    _validate_properties(props)
    if props.column_mapping_mode != "none":
        delta_schema, max_id = assign_column_mapping(delta_schema, 0)
        configuration["delta.columnMapping.maxColumnId"] = str(max_id)
    if CLUSTERING_FEATURE_PROPERTY in requested:
        raise ClusteringError(f"{CLUSTERING_FEATURE_PROPERTY} is set by cluster_by=[...], not as a property")
    if cluster_by:
        resolve_columns(
            delta_schema, cluster_by, configuration, partition_columns=partition_by, where=store.root
        )
        requested[CLUSTERING_FEATURE_PROPERTY] = "supported"
    protocol = minimal_protocol(delta_schema, {**requested, **configuration})
    configuration = with_column_names(protocol, configuration, delta_schema.names)
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schema_string=delta_schema.to_json_string(),
        partition_columns=[delta_schema[c].name for c in partition_by],
        configuration=configuration,
        name=name,
        description=description,
        created_time=int(time.time() * 1000),
    )
    table_constraints(delta_schema, configuration)  # refuse constraints we cannot evaluate, now
    check_declarations(  # generated, default and identity columns
        delta_schema,
        partition_columns=partition_by,
        defaults_allowed="delta.feature.allowColumnDefaults" in requested,
        table=store.root,
    )
    check_manifest_compatible(metadata, None, store.root)  # no manifest property with DVs/mapping
    return protocol, metadata


def _table_schema(schema: Any) -> StructType:
    """A table's schema from a pyarrow schema or a Delta ``StructType``, or an error that says
    what was expected (a DataFrame passed where the schema belongs is the usual mistake)."""
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, pa.Schema):
        return schema_from_arrow(schema)  # keeps generated/default/identity declarations
    what = type(schema).__name__
    if hasattr(schema, "__arrow_c_stream__") or type(schema).__module__.split(".")[0] in ("pandas", "polars"):
        raise SchemaError(
            f"create() takes a schema (a pyarrow.Schema), not data ({what}); to create a table from "
            "data, use deltaplane.engine.write_table(uri, data) or pass it as create(uri, data=...)"
        )
    raise SchemaError(
        f"a table schema must be a pyarrow.Schema or an deltaplane.engine.schema.StructType, not {what}"
    )


def _check_unique_names(schema: StructType) -> None:
    seen: dict[str, str] = {}
    for f in schema.fields:
        if f.name.lower() in seen:
            raise SchemaError(
                f"column names must be unique ignoring case: {seen[f.name.lower()]!r} and {f.name!r}"
            )
        seen[f.name.lower()] = f.name


def _check_partition_columns(schema: StructType, partition_by: list[str]) -> None:
    for name in partition_by:
        f = schema.find(name)
        if f is None:
            raise SchemaError(f"partition column {name!r} is not in the schema ({', '.join(schema.names)})")
        if not isinstance(f.type, PrimitiveType | DecimalType):
            raise SchemaError(f"partition column {name!r} must have a primitive type, not {f.type.to_json()}")
    if partition_by and len(partition_by) == len(schema.fields):
        raise SchemaError("a table cannot be partitioned by all of its columns")


def _validate_properties(props: TableProperties) -> None:
    """Touch every typed property so a malformed value fails at create time."""
    for attr in (
        "checkpoint_interval",
        "log_retention_ms",
        "deleted_file_retention_ms",
        "append_only",
        "enable_deletion_vectors",
        "enable_change_data_feed",
        "enable_in_commit_timestamps",
        "column_mapping_mode",
        "data_skipping_num_indexed_cols",
        "target_file_size",
    ):
        getattr(props, attr)
    if props.isolation_level not in ("Serializable", "WriteSerializable"):
        raise SchemaError(
            f"delta.isolationLevel must be Serializable or WriteSerializable: {props.isolation_level!r}"
        )


# --- append and overwrite ---------------------------------------------------------------------


def check_creation_settings(
    snapshot: Snapshot,
    *,
    partition_by: list[str] | None = None,
    properties: Mapping[str, str] | None = None,
    cluster_by: list[str] | None = None,
    name: str | None = None,
    description: str | None = None,
) -> None:
    """Settings a write gives for creating its table must agree with the table that exists, rather
    than be dropped silently: partitioning, properties, clustering columns (Delta Spark's
    DELTA_CLUSTERING_COLUMNS_MISMATCH), name, description. Change them with ALTER."""
    uri = snapshot.store.root
    current = [c.lower() for c in snapshot.partition_columns]
    if partition_by and [c.lower() for c in partition_by] != current:
        raise TableSettingsMismatchError(
            f"{uri} is partitioned by {snapshot.partition_columns or 'nothing'}, not {list(partition_by)}; "
            "the partitioning of an existing table cannot change with a write"
        )
    configuration = snapshot.metadata.configuration
    differing = {k: v for k, v in (properties or {}).items() if configuration.get(k) != str(v)}
    if differing:
        raise TableSettingsMismatchError(
            f"properties {sorted(differing)} differ from those of the existing table {uri}; "
            "properties are set when a table is created: change them with dt.alter.set_table_properties()"
        )
    if cluster_by:
        clustered = clustering_column_names(snapshot) or []
        if [c.lower() for c in cluster_by] != [c.lower() for c in clustered]:
            raise TableSettingsMismatchError(
                f"the clustering columns of {uri} are {clustered or 'none'}, not {list(cluster_by)}; "
                "change them with dt.alter.cluster_by([...])"
            )
    for what, wanted, actual in (
        ("name", name, snapshot.metadata.name),
        ("description", description, snapshot.metadata.description),
    ):
        if wanted is not None and wanted != actual:
            raise TableSettingsMismatchError(
                f"the {what} of the existing table {uri} is {actual!r}, not {wanted!r}; "
                f"change it with dt.alter.set_table_{what}()"
            )


def check_declared_schema(snapshot: Snapshot, declared: StructType) -> None:
    """A schema a write declares for its table must be the table's own for every column it names
    (same type, same nullability); a column the table lacks is an error too (add it with ALTER or
    a write with schema merging)."""
    table = {f.name.lower(): f for f in snapshot.schema.fields}
    problems = []
    for f in declared.fields:
        current = table.get(f.name.lower())
        if current is None:
            problems.append(f"{f.name} (not in the table)")
        elif current.type != f.type or current.nullable != f.nullable:
            problems.append(f"{f.name}: {_declared_text(f)} declared, {_declared_text(current)} in the table")
    if problems:
        raise TableSettingsMismatchError(
            f"the schema declared for {snapshot.store.root} does not match the table's: "
            f"{'; '.join(problems)}. The table's schema changes with dt.alter (or a write with "
            "schema_mode='merge' for new columns), not with a declared schema"
        )


def _declared_text(f: StructField) -> str:
    name = getattr(f.type, "name", None)
    text = name if isinstance(name, str) else json.dumps(f.type.to_json())
    return text + ("" if f.nullable else " NOT NULL")


def execute_append(
    store: ObjectStore,
    snapshot: Snapshot,
    data: Any,
    *,
    app_id: str | None = None,
    app_version: int | None = None,
    schema_mode: str | None = None,
    target_file_size: int | None = None,
) -> CommitResult:
    reader = as_reader(data, snapshot.schema)
    params = {"mode": "Append", "partitionBy": snapshot.partition_columns}
    if schema_mode == "overwrite":
        raise InvalidArgumentError("schema_mode='overwrite' needs overwrite(), not append()")
    write = WriteContext(store, snapshot, params, target_file_size=target_file_size, schema_mode=schema_mode)
    skipped = write.idempotent_skip(app_id, app_version)
    if skipped is not None:
        return skipped
    write.evolve(reader.schema)
    writer = write.write_data(reader)
    return write.txn.commit(writer_metrics(writer))


def execute_overwrite(
    store: ObjectStore,
    snapshot: Snapshot,
    data: Any,
    *,
    predicate: str | Expr | None = None,
    dynamic_partitions: bool = False,
    app_id: str | None = None,
    app_version: int | None = None,
    schema_mode: str | None = None,
    target_file_size: int | None = None,
) -> CommitResult:
    """Replace the table's rows (all of them, those matching ``predicate``, or whole partitions)."""
    if predicate is not None and dynamic_partitions:
        raise InvalidArgumentError("give a predicate or dynamic_partitions=True, not both")
    if schema_mode == "overwrite" and (predicate is not None or dynamic_partitions):
        raise InvalidArgumentError(
            "schema_mode='overwrite' replaces the whole table: no predicate or dynamic partitions"
        )
    reader = as_reader(data, snapshot.schema)
    params: dict[str, Any] = {"mode": "Overwrite", "partitionBy": snapshot.partition_columns}
    if predicate is not None:
        params["predicate"] = predicate if isinstance(predicate, str) else str(predicate)
    if dynamic_partitions:
        params["partitionOverwriteMode"] = "DYNAMIC"
    write = WriteContext(store, snapshot, params, target_file_size=target_file_size, schema_mode=schema_mode)
    skipped = write.idempotent_skip(app_id, app_version)
    if skipped is not None:
        return skipped
    write.evolve(reader.schema)

    if dynamic_partitions and not snapshot.partition_columns:
        raise InvalidArgumentError("dynamic partition overwrite needs a partitioned table")
    bound = None
    if predicate is not None:
        bound = bind_predicate(
            parse_predicate(predicate) if isinstance(predicate, str) else predicate, write.schema
        )
    check = replace_where_check(bound, params["predicate"]) if bound is not None else None
    writer = write.write_data(reader, extra_check=check)
    removed = stage_overwrite(
        write, snapshot, writer.adds, predicate=bound, dynamic_partitions=dynamic_partitions
    )
    return write.txn.commit(writer_metrics(writer, **removed))


def replace_where_check(bound: Expr, where: str):
    """A batch check: every row written by ``overwrite(where)`` must match it (Delta Spark's
    replaceWhere constraint check)."""

    def must_match(table: pa.Table) -> None:
        ok = evaluate(table, bound)
        bad = pc.sum(pc.invert(pc.fill_null(ok, False))).as_py() or 0
        if bad:
            raise ConstraintViolationError(f"{bad} row(s) written by overwrite({where!r}) do not match it")

    return must_match


def stage_overwrite(
    write: WriteContext,
    snapshot: Snapshot,
    adds: list,
    *,
    predicate: Expr | None = None,
    dynamic_partitions: bool = False,
) -> dict[str, int]:
    """Stage what an overwrite removes, once its new files (``adds``) are written: every file,
    the files (and rows) matching a bound ``predicate`` (replaceWhere; partially matching files
    are rewritten without the matching rows), or the partitions ``adds`` touch (dynamic).
    Returns the removal metrics."""
    if predicate is None and not dynamic_partitions:
        write.txn.read_whole_table()
        removed_bytes = write.remove_files(snapshot.files)
        return {"numRemovedFiles": snapshot.files.num_rows, "numRemovedBytes": removed_bytes}

    if dynamic_partitions:
        if not snapshot.partition_columns:
            raise InvalidArgumentError("dynamic partition overwrite needs a partitioned table")
        touched = _touched_partitions(adds, snapshot)
        files, read_predicate = _files_in_partitions(snapshot, touched)
        write.txn.read_files(files, read_predicate)
        removed_bytes = write.remove_files(files)
        return {"numRemovedFiles": files.num_rows, "numRemovedBytes": removed_bytes}

    partition_only = all(
        c.path[0] in set(snapshot.partition_columns) and len(c.path) == 1 for c in columns(predicate)
    )
    candidates = snapshot.files
    if candidates.num_rows:
        candidates = candidates.filter(
            file_keep_mask(candidates, predicate, snapshot.schema, snapshot.metadata, write.store.root)
        )
    write.txn.read_files(candidates, predicate)
    if partition_only or candidates.num_rows == 0:
        removed_bytes = write.remove_files(candidates)
        return {"numRemovedFiles": candidates.num_rows, "numRemovedBytes": removed_bytes, "numCopiedRows": 0}
    return _delete_replaced_rows(write, snapshot, adds, candidates, predicate)


def _delete_replaced_rows(
    write: WriteContext, snapshot: Snapshot, adds: list, candidates: pa.Table, predicate: Expr
) -> dict[str, int]:
    """replaceWhere on data columns: delete the matching rows as DELETE does (deletion vectors
    when the table uses them, else the files' other rows are copied), change data included.
    A commit with change data files is read by its change data alone, so when the deletes wrote
    some, the new rows (``adds``) are written there as inserts too, as Delta Spark does."""
    change = dml.RowLevelChange(
        write, snapshot, dml.choose_strategy(snapshot, None), dml.rewrite_threshold(snapshot, None)
    )
    deleted = dml.delete_matching_rows(change, snapshot, candidates, predicate)
    if change.cdf and deleted:
        written = dataclasses.replace(snapshot, metadata=write.metadata, protocol=write.protocol)
        for add in adds:
            files = files_table([add.path], [add.partition_values], [add.size])
            change.record_change(Scan(written, None, None, files=files).to_table(), "insert")
    change.stage()
    metrics = change.file_metrics()
    return {
        "numRemovedFiles": metrics["numRemovedFiles"],
        "numRemovedBytes": metrics["numRemovedBytes"],
        "numCopiedRows": metrics["numCopiedRows"],
        "numDeletedRows": deleted,
        "numAddedChangeFiles": metrics["numAddedChangeFiles"],
        "numDeletionVectorsAdded": metrics["numDeletionVectorsAdded"],
    }


def files_table(paths: list[str], partition_values: list[dict], sizes: list[int]) -> pa.Table:
    """Live-file rows (what ``Scan(files=...)`` reads) for files known by path, partition values
    (physical names) and size, without deletion vectors."""
    keys = sorted({k for pv in partition_values for k in (pv or {})})
    pv_type = pa.struct([(k, pa.string()) for k in keys])
    n = len(paths)
    return pa.table(
        {
            "path": pa.array(paths, pa.string()),
            "partition_values": pa.array(
                [{k: (pv or {}).get(k) for k in keys} for pv in partition_values], pv_type
            )
            if keys
            else pa.repeat(pa.scalar({}, pv_type), n),
            "size": pa.array(sizes, pa.int64()),
            "deletion_vector": pa.nulls(
                n,
                pa.struct(
                    [
                        ("storageType", pa.string()),
                        ("pathOrInlineDv", pa.string()),
                        ("offset", pa.int32()),
                        ("sizeInBytes", pa.int32()),
                        ("cardinality", pa.int64()),
                    ]
                ),
            ),
        }
    )


def _touched_partitions(adds: list, snapshot: Snapshot) -> set[tuple]:
    fields = snapshot.partition_fields
    out = set()
    for add in adds:
        values = []
        for f in fields:
            raw = add.partition_values.get(f.physical_name)
            values.append(parse_partition_values(pa.array([raw], pa.string()), f.type)[0].as_py())
        out.add(tuple(values))
    return out


def _files_in_partitions(snapshot: Snapshot, touched: set[tuple]) -> tuple[pa.Table, Expr]:
    fields = snapshot.partition_fields
    clauses: list[Expr] = []
    for values in sorted(touched, key=repr):
        parts: list[Expr] = []
        for f, v in zip(fields, values, strict=True):
            col = Column((f.name,), f.type)
            parts.append(IsNull(col) if v is None else Comparison("=", col, Literal(v, f.type)))
        clauses.append(parts[0] if len(parts) == 1 else And(tuple(parts)))
    predicate: Expr = clauses[0] if len(clauses) == 1 else Or(tuple(clauses)) if clauses else Literal(False)
    files = snapshot.files
    if files.num_rows:
        files = files.filter(
            file_keep_mask(files, predicate, snapshot.schema, snapshot.metadata, snapshot.store.root)
        )
    return files, predicate
