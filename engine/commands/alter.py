"""ALTER TABLE: constraints, columns, properties and the description, one commit each.

Each change is a new ``metaData`` action (and a ``protocol`` action when it needs a feature the
table lacks: adding a CHECK constraint needs writer version 3, enabling deletion vectors needs
reader 3 / writer 7 with the feature, ...). Protocols only go up. The operation names and
parameters are Delta Spark's (``ADD CONSTRAINT``, ``DROP CONSTRAINT``, ``ADD COLUMNS``,
``SET TBLPROPERTIES``, ``UNSET TBLPROPERTIES``), so ``history()`` reads the same as theirs.

Adding a CHECK constraint validates every existing row first (a scan of the columns it uses)
and marks the whole table read at ``Serializable`` isolation, so a row appended concurrently
cannot slip in unchecked: that append makes this commit conflict, and nothing is committed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from deltaplane.engine import row_tracking
from deltaplane.engine.actions import Metadata
from deltaplane.engine.clustering import FEATURE_PROPERTY as CLUSTERING_FEATURE_PROPERTY
from deltaplane.engine.clustering import clustering_column_names, is_clustered, resolve_columns
from deltaplane.engine.clustering import domain_metadata as clustering_domain
from deltaplane.engine.commands.write import assign_column_mapping, union_protocol
from deltaplane.engine.enforcement import check_constraints, table_constraints
from deltaplane.engine.errors import (
    ConstraintViolationError,
    InvalidArgumentError,
    SchemaError,
    TableReadOnlyError,
)
from deltaplane.engine.expressions.tree import columns as expr_columns
from deltaplane.engine.scan import ScanBuilder
from deltaplane.engine.schema import StructField, StructType, from_arrow_schema, parse_schema
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import (
    check_write_supported,
    minimal_protocol,
    requested_features,
    table_configuration,
)
from deltaplane.engine.table_properties import TableProperties, check_property_names
from deltaplane.engine.transaction import CommitResult, Transaction

CONSTRAINT_PREFIX = "delta.constraints."
# Properties that a table's own machinery maintains; setting them by hand breaks it.
_MANAGED = ("delta.columnMapping.maxColumnId", *row_tracking.NAME_PROPERTIES)


def _commit(
    store: ObjectStore,
    snapshot: Snapshot,
    operation: str,
    parameters: dict[str, Any],
    metadata: Metadata,
    *,
    requested: Mapping[str, str] | None = None,
    isolation_level: str | None = None,
    read_whole_table: bool = False,
) -> CommitResult:
    """Commit ``metadata`` (and the protocol its configuration and ``requested`` need)."""
    check_write_supported(snapshot.protocol, snapshot.metadata, snapshot.schema, store.root)
    schema = parse_schema(metadata.schema_string)
    needed = minimal_protocol(schema, {**metadata.configuration, **(requested or {})})
    protocol = union_protocol(snapshot.protocol, needed)
    metadata, backfill = row_tracking.prepare_metadata(
        snapshot.protocol, snapshot.metadata, protocol, metadata, snapshot.files, schema.names
    )
    txn = Transaction(
        store, snapshot, operation=operation, operation_parameters=parameters, isolation_level=isolation_level
    )
    if read_whole_table or backfill:
        txn.read_whole_table()
    if backfill:  # enabling row tracking: every live file gets row ids in this commit
        txn.add_files(backfill)
        txn.mark_files_verified()  # live files: no VACUUM deletes them
    if protocol != snapshot.protocol:
        txn.update_protocol(protocol)
        check_write_supported(protocol, metadata, schema, store.root)
    txn.update_metadata(metadata)
    return txn.commit()


def _with_configuration(metadata: Metadata, configuration: dict[str, str]) -> Metadata:
    return dataclasses.replace(metadata, configuration=configuration)


# --- constraints --------------------------------------------------------------------------------


def add_constraint(store: ObjectStore, snapshot: Snapshot, constraints: Mapping[str, str]) -> CommitResult:
    """Add CHECK constraints (``{"name": "sql predicate"}``) after checking every existing row."""
    if not constraints:
        raise InvalidArgumentError("add_constraint() needs at least one {name: expression}")
    configuration = dict(snapshot.metadata.configuration)
    added: dict[str, str] = {}
    for name, sql in constraints.items():
        if not isinstance(name, str) or not name.strip() or not isinstance(sql, str) or not sql.strip():
            raise InvalidArgumentError(
                f"a constraint needs a name and a SQL expression, got {name!r}: {sql!r}"
            )
        key = CONSTRAINT_PREFIX + name.lower()
        if key in configuration:
            raise InvalidArgumentError(
                f"{store.root} already has a CHECK constraint named {name!r}: {configuration[key]}"
            )
        added[key] = sql
    configuration.update(added)
    new = table_constraints(snapshot.schema, {k: v for k, v in added.items()})  # binds: bad SQL fails here
    _validate_existing_rows(snapshot, new)
    metadata = _with_configuration(snapshot.metadata, configuration)
    (key, sql), *_ = added.items()
    parameters: dict[str, Any] = {"name": key[len(CONSTRAINT_PREFIX) :], "expr": sql}
    if len(added) > 1:
        parameters = {"constraints": {k[len(CONSTRAINT_PREFIX) :]: v for k, v in added.items()}}
    return _commit(
        store,
        snapshot,
        "ADD CONSTRAINT",
        parameters,
        metadata,
        isolation_level="Serializable",
        read_whole_table=True,
    )


def _validate_existing_rows(snapshot: Snapshot, constraints) -> None:
    needed = sorted({c.path[0] for k in constraints for c in expr_columns(k.expr)})
    scan = ScanBuilder(snapshot).select(needed or None).build()
    schema = StructType(tuple(f for f in snapshot.schema.fields if f.name in set(needed)))
    for batch in scan.to_batches():
        try:
            check_constraints(pa.Table.from_batches([batch]), schema, constraints)
        except ConstraintViolationError as e:
            raise ConstraintViolationError(
                f"cannot add the constraint to {snapshot.store.root}: existing rows violate it: {e}"
            ) from None


def drop_constraint(
    store: ObjectStore, snapshot: Snapshot, name: str, *, raise_if_not_exists: bool = True
) -> CommitResult:
    configuration = dict(snapshot.metadata.configuration)
    key = next((k for k in configuration if k.lower() == CONSTRAINT_PREFIX + name.lower()), None)
    if key is None:
        if raise_if_not_exists:
            known = sorted(
                k[len(CONSTRAINT_PREFIX) :] for k in configuration if k.startswith(CONSTRAINT_PREFIX)
            )
            listed = ", ".join(known) or "none"
            raise InvalidArgumentError(
                f"{store.root} has no CHECK constraint named {name!r} (constraints: {listed})"
            )
        return CommitResult(snapshot.version, "DROP CONSTRAINT", {}, skipped=True)
    expr = configuration.pop(key)
    metadata = _with_configuration(snapshot.metadata, configuration)
    return _commit(store, snapshot, "DROP CONSTRAINT", {"constraint": name, "expr": expr}, metadata)


# --- columns ------------------------------------------------------------------------------------


def add_columns(
    store: ObjectStore, snapshot: Snapshot, fields: pa.Schema | Iterable[pa.Field | StructField]
) -> CommitResult:
    """Add nullable top-level columns at the end (existing files read them as null)."""
    new_fields = _as_struct_fields(fields)
    if not new_fields:
        raise InvalidArgumentError("add_columns() needs at least one field")
    taken = {f.name.lower() for f in snapshot.schema.fields}
    for f in new_fields:
        if f.name.lower() in taken:
            raise SchemaError(f"{store.root} already has a column named {f.name!r}")
        if not f.nullable:
            raise SchemaError(
                f"column {f.name!r} must be nullable: the rows already in {store.root} have no value for it"
            )
        taken.add(f.name.lower())
    configuration = dict(snapshot.metadata.configuration)
    schema = StructType((*snapshot.schema.fields, *new_fields))
    if TableProperties(configuration).column_mapping_mode != "none":
        max_id = int(configuration.get("delta.columnMapping.maxColumnId", "0"))
        schema, max_id = assign_column_mapping(schema, max_id)
        configuration["delta.columnMapping.maxColumnId"] = str(max_id)
    metadata = dataclasses.replace(
        snapshot.metadata, schema_string=schema.to_json_string(), configuration=configuration
    )
    parameters = {
        "columns": [
            {"column": {"name": f.name, "type": f.type.to_json(), "nullable": f.nullable, "metadata": {}}}
            for f in new_fields
        ]
    }
    return _commit(store, snapshot, "ADD COLUMNS", parameters, metadata)


def _as_struct_fields(fields) -> list[StructField]:
    if isinstance(fields, pa.Field):
        fields = [fields]
    if isinstance(fields, StructField):
        fields = [fields]
    out = []
    for f in fields:
        if isinstance(f, StructField):
            out.append(f)
        elif isinstance(f, pa.Field):
            out.extend(from_arrow_schema(pa.schema([f])).fields)
        else:
            raise InvalidArgumentError(
                f"add_columns() takes pyarrow fields or a pyarrow schema, not {type(f).__name__}"
            )
    return out


# --- properties and description ----------------------------------------------------------------


def set_table_properties(
    store: ObjectStore, snapshot: Snapshot, properties: Mapping[str, str], *, raise_if_not_exists: bool = True
) -> CommitResult:
    """Set properties; enabling a feature upgrades the protocol in the same commit."""
    if not properties:
        raise InvalidArgumentError("set_table_properties() needs at least one property")
    requested = {str(k): str(v) for k, v in properties.items()}
    check_property_names(requested, store.root)
    for key in requested:
        if key in _MANAGED or key.startswith(CONSTRAINT_PREFIX):
            how = "add_constraint()" if key.startswith(CONSTRAINT_PREFIX) else "the table itself"
            raise InvalidArgumentError(f"{key} is maintained by {how}; it cannot be set directly")
    if "delta.columnMapping.mode" in requested and requested["delta.columnMapping.mode"] != (
        snapshot.metadata.configuration.get("delta.columnMapping.mode", "none")
    ):
        raise TableReadOnlyError(
            f"changing delta.columnMapping.mode of {store.root} rewrites the schema's physical names; "
            "deltaplane does not do that yet"
        )
    requested_features(requested)  # unknown feature names fail before anything is written
    configuration = {**snapshot.metadata.configuration, **table_configuration(requested)}
    props = TableProperties(configuration)
    for attr in ("checkpoint_interval", "log_retention_ms", "deleted_file_retention_ms", "append_only"):
        getattr(props, attr)  # a malformed value fails now, not at the next write
    _check_clustering_kept(store, snapshot, requested, configuration)
    metadata = _with_configuration(snapshot.metadata, configuration)
    return _commit(
        store,
        snapshot,
        "SET TBLPROPERTIES",
        {"properties": json.dumps(requested)},
        metadata,
        requested=requested,
    )


def unset_table_properties(
    store: ObjectStore, snapshot: Snapshot, keys: Iterable[str], *, raise_if_not_exists: bool = True
) -> CommitResult:
    """Remove properties (the protocol stays: features are never dropped this way)."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not keys:
        raise InvalidArgumentError("unset_table_properties() needs at least one property name")
    configuration = dict(snapshot.metadata.configuration)
    missing = [k for k in keys if k not in configuration]
    if missing and raise_if_not_exists:
        raise InvalidArgumentError(f"{store.root} has no table property {missing[0]!r}")
    for key in keys:
        if key in _MANAGED or key.startswith(CONSTRAINT_PREFIX):
            how = "drop_constraint()" if key.startswith(CONSTRAINT_PREFIX) else "the table itself"
            raise InvalidArgumentError(f"{key} is maintained by {how}; it cannot be unset directly")
        configuration.pop(key, None)
    if len(configuration) == len(snapshot.metadata.configuration):
        return CommitResult(snapshot.version, "UNSET TBLPROPERTIES", {}, skipped=True)
    metadata = _with_configuration(snapshot.metadata, configuration)
    return _commit(
        store, snapshot, "UNSET TBLPROPERTIES", {"properties": json.dumps(keys), "ifExists": "true"}, metadata
    )


def set_column_default(
    store: ObjectStore, snapshot: Snapshot, column: str, default: str | None
) -> CommitResult:
    """``ALTER TABLE ... ALTER COLUMN column SET DEFAULT default`` (SQL text), or ``DROP DEFAULT``
    for ``None``. Setting one needs the allowColumnDefaults feature, as in Delta Spark."""
    from deltaplane.engine.column_values import CURRENT_DEFAULT, check_declarations
    from deltaplane.engine.table_features import writer_features

    f = snapshot.schema.find(column) if isinstance(column, str) else None
    if f is None:
        known = ", ".join(snapshot.schema.names)
        raise InvalidArgumentError(f"{store.root} has no column {column!r} ({known})")
    if default is not None and "allowColumnDefaults" not in writer_features(snapshot.protocol):
        raise SchemaError(
            f"{store.root} does not support column defaults: set delta.feature.allowColumnDefaults="
            "supported first (alter.set_table_properties)"
        )
    if default is not None and (not isinstance(default, str) or not default.strip()):
        raise InvalidArgumentError(f"a column default is SQL text, got {default!r}")
    metadata = {k: v for k, v in f.metadata.items() if k != CURRENT_DEFAULT}
    if default is not None:
        metadata[CURRENT_DEFAULT] = default
    new_field = StructField(f.name, f.type, f.nullable, metadata)
    schema = StructType(tuple(new_field if g is f else g for g in snapshot.schema.fields))
    check_declarations(schema, defaults_allowed=True, table=store.root)  # the SQL must evaluate
    new = dataclasses.replace(snapshot.metadata, schema_string=schema.to_json_string())
    return _commit(store, snapshot, "CHANGE COLUMN", {"column": json.dumps(new_field.to_json())}, new)


def set_table_description(store: ObjectStore, snapshot: Snapshot, description: str | None) -> CommitResult:
    if description is not None and not isinstance(description, str):
        raise InvalidArgumentError(f"a description is a string, not {type(description).__name__}")
    metadata = dataclasses.replace(snapshot.metadata, description=description)
    return _commit(
        store, snapshot, "SET TBLPROPERTIES", {"properties": json.dumps({"comment": description})}, metadata
    )


def set_table_name(store: ObjectStore, snapshot: Snapshot, name: str | None) -> CommitResult:
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError(f"a table name is a string, not {type(name).__name__}")
    metadata = dataclasses.replace(snapshot.metadata, name=name)
    return _commit(store, snapshot, "SET TBLPROPERTIES", {"properties": json.dumps({"name": name})}, metadata)


# --- liquid clustering --------------------------------------------------------------------------


def cluster_by(store: ObjectStore, snapshot: Snapshot, columns: Iterable[str] | None) -> CommitResult:
    """``ALTER TABLE ... CLUSTER BY (columns)``, or ``CLUSTER BY NONE`` for ``None``/``[]``:
    the ``delta.clustering`` domain is rewritten (a table that was not clustered gets the
    ``clustering`` feature first). Files already clustered keep their layout until an OPTIMIZE
    reclusters them."""
    names = [] if columns is None else ([columns] if isinstance(columns, str) else list(columns))
    check_write_supported(snapshot.protocol, snapshot.metadata, snapshot.schema, store.root)
    clustered = is_clustered(snapshot.protocol)
    if not names and not clustered:  # Delta Spark skips CLUSTER BY NONE on an unclustered table
        return CommitResult(snapshot.version, "CLUSTER BY", {}, skipped=True)
    new = resolve_columns(
        snapshot.schema,
        names,
        snapshot.metadata.configuration,
        partition_columns=snapshot.partition_columns,
        where=store.root,
    )
    old = clustering_column_names(snapshot) or []
    parameters = {
        "oldClusteringColumns": ",".join(old),
        "newClusteringColumns": ",".join(c.name for c in new),
    }
    txn = Transaction(store, snapshot, operation="CLUSTER BY", operation_parameters=parameters)
    if not clustered:
        needed = minimal_protocol(
            snapshot.schema, {**snapshot.metadata.configuration, CLUSTERING_FEATURE_PROPERTY: "supported"}
        )
        protocol = union_protocol(snapshot.protocol, needed)
        check_write_supported(protocol, snapshot.metadata, snapshot.schema, store.root)
        txn.update_protocol(protocol)
    txn.set_domain_metadata(clustering_domain(new))
    return txn.commit()


def _check_clustering_kept(
    store: ObjectStore, snapshot: Snapshot, requested: Mapping[str, str], configuration: dict[str, str]
) -> None:
    """Clustering is changed by ``cluster_by`` only, and its columns must keep statistics."""
    if CLUSTERING_FEATURE_PROPERTY in requested:
        raise InvalidArgumentError(
            f"{CLUSTERING_FEATURE_PROPERTY} is set by alter.cluster_by([...]), not as a property"
        )
    names = clustering_column_names(snapshot)
    if names:
        resolve_columns(snapshot.schema, names, configuration, where=store.root)
