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
from deltaplane.engine.commands.column_paths import (
    data_type_of,
    dropped_stats_columns,
    field_at,
    field_path,
    map_field,
    renamed_stats_columns,
    replace_inside,
    resolve_path,
    sibling_fields,
    type_inside,
)
from deltaplane.engine.commands.context import assign_column_mapping, union_protocol
from deltaplane.engine.enforcement import check_constraints, table_constraints
from deltaplane.engine.errors import (
    ConstraintViolationError,
    InvalidArgumentError,
    SchemaError,
    TableReadOnlyError,
)
from deltaplane.engine.expressions.tree import columns as expr_columns
from deltaplane.engine.scan import ScanBuilder
from deltaplane.engine.schema import (
    StructField,
    StructType,
    from_arrow_schema,
    iter_fields,
    parse_schema,
    type_text,
)
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


def _params_json(value: Any) -> str:
    """Operation parameters as Delta Spark writes them: compact JSON."""
    return json.dumps(value, separators=(",", ":"))


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
    store: ObjectStore,
    snapshot: Snapshot,
    fields: pa.Schema | Iterable[pa.Field | StructField],
    *,
    first: bool = False,
    after: str | None = None,
) -> CommitResult:
    """Add nullable top-level columns, at the end or (``first``, ``after="col"``) where asked
    (``ADD COLUMNS (... FIRST | AFTER col)``); existing files read them as null."""
    if first and after is not None:
        raise InvalidArgumentError("give first=True or after=<column>, not both")
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
    existing = list(snapshot.schema.fields)
    at, position = len(existing), None
    if first:
        at, position = 0, "FIRST"
    elif after is not None:
        anchor = snapshot.schema.find(after) if isinstance(after, str) else None
        if anchor is None:
            raise InvalidArgumentError(f"cannot add columns after {after!r}: {store.root} has no such column")
        at, position = existing.index(anchor) + 1, f"AFTER {anchor.name}"
    schema = StructType((*existing[:at], *new_fields, *existing[at:]))
    if TableProperties(configuration).column_mapping_mode != "none":
        max_id = int(configuration.get("delta.columnMapping.maxColumnId", "0"))
        schema, max_id = assign_column_mapping(schema, max_id)
        configuration["delta.columnMapping.maxColumnId"] = str(max_id)
    metadata = dataclasses.replace(
        snapshot.metadata, schema_string=schema.to_json_string(), configuration=configuration
    )
    parameters = {
        "columns": [
            {
                "column": {"name": f.name, "type": f.type.to_json(), "nullable": f.nullable, "metadata": {}},
                **({"position": position} if position else {}),
            }
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
    schema_string = _mapping_change(store, snapshot, requested)
    requested_features(requested)  # unknown feature names fail before anything is written
    configuration = {**snapshot.metadata.configuration, **table_configuration(requested)}
    if schema_string is not None:  # column mapping turned on: ids and physical names assigned
        schema_string, configuration["delta.columnMapping.maxColumnId"] = schema_string
    props = TableProperties(configuration)
    for attr in ("checkpoint_interval", "log_retention_ms", "deleted_file_retention_ms", "append_only"):
        getattr(props, attr)  # a malformed value fails now, not at the next write
    _check_clustering_kept(store, snapshot, requested, configuration)
    metadata = _with_configuration(snapshot.metadata, configuration)
    if schema_string is not None:
        metadata = dataclasses.replace(metadata, schema_string=schema_string)
    return _commit(
        store,
        snapshot,
        "SET TBLPROPERTIES",
        {"properties": _params_json(requested)},
        metadata,
        requested=requested,
    )


def _mapping_change(
    store: ObjectStore, snapshot: Snapshot, requested: Mapping[str, str]
) -> tuple[str, str] | None:
    """Turning column mapping on (``none`` -> ``name``), as Delta Spark does on an existing table:
    every field (nested ones too) gets an id and its current name as its physical name, so the
    files already written read as they are. Returns the new schema string and maxColumnId, or
    None when the mode does not change. Other changes are refused: ``id`` cannot be turned on
    for existing files (Delta Spark refuses it too), and turning mapping off would rewrite
    every file."""
    if "delta.columnMapping.mode" not in requested:
        return None
    wanted = requested["delta.columnMapping.mode"].strip().lower()
    current = TableProperties(dict(snapshot.metadata.configuration)).column_mapping_mode
    if wanted == current:
        return None
    if current == "none" and wanted == "name":
        schema, max_id = assign_column_mapping(snapshot.schema, 0, keep_names=True)
        return schema.to_json_string(), str(max_id)
    if current == "none":
        raise TableReadOnlyError(
            f"cannot turn on column mapping mode {wanted!r} for the existing files of {store.root}: "
            "only 'name' can be enabled on a table that has data (as in Delta Spark)"
        )
    raise TableReadOnlyError(
        f"cannot change delta.columnMapping.mode of {store.root} from {current!r} to {wanted!r}: that "
        "rewrites every data file under new column names, which deltaplane does not do"
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
        store,
        snapshot,
        "UNSET TBLPROPERTIES",
        {"properties": _params_json(keys), "ifExists": "true"},
        metadata,
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
    return _commit(store, snapshot, "CHANGE COLUMN", {"column": _params_json(new_field.to_json())}, new)


def set_table_description(store: ObjectStore, snapshot: Snapshot, description: str | None) -> CommitResult:
    return _set_text(store, snapshot, "description", description, "comment", "a description")


def set_table_name(store: ObjectStore, snapshot: Snapshot, name: str | None) -> CommitResult:
    return _set_text(store, snapshot, "name", name, "name", "a table name")


def _set_text(
    store: ObjectStore, snapshot: Snapshot, field: str, value: str | None, property_name: str, what: str
) -> CommitResult:
    """Set (or clear, with None) one text field of the metadata, committed as Delta Spark's SET
    TBLPROPERTIES of ``property_name``."""
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"{what} is a string, not {type(value).__name__}")
    metadata = dataclasses.replace(snapshot.metadata, **{field: value})
    params = {"properties": _params_json({property_name: value})}
    return _commit(store, snapshot, "SET TBLPROPERTIES", params, metadata)


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


# --- renaming and dropping columns (column mapping) ----------------------------------------------


def rename_column(store: ObjectStore, snapshot: Snapshot, column: str, new_name: str) -> CommitResult:
    """``ALTER TABLE ... RENAME COLUMN column TO new_name``: a new logical name, the same physical
    name, so no file is rewritten. Needs column mapping (files name columns by their physical
    names); ``column`` may be nested (``s.x``; the new name is the last part's). Refused, as Delta
    Spark refuses it, when a CHECK constraint or a generation expression reads the column."""
    path = field_path(store, snapshot, column, "rename")
    if not isinstance(new_name, str) or not new_name:
        raise InvalidArgumentError(f"a new column name is a non-empty string, got {new_name!r}")
    siblings = sibling_fields(snapshot.schema, path)
    if any(s.name.lower() == new_name.lower() for s in siblings if s.name != path[-1]):
        raise SchemaError(f"{store.root} already has a column named {'.'.join([*path[:-1], new_name])!r}")
    _check_not_referenced(store, snapshot, path, "rename")
    schema = map_field(snapshot.schema, path, lambda f: StructField(new_name, f.type, f.nullable, f.metadata))
    metadata = dataclasses.replace(
        snapshot.metadata,
        schema_string=schema.to_json_string(),
        partition_columns=[
            new_name if len(path) == 1 and c.lower() == path[0].lower() else c
            for c in snapshot.metadata.partition_columns
        ],
        configuration=renamed_stats_columns(snapshot.metadata.configuration, path, new_name),
    )
    parameters = {"oldColumnPath": ".".join(path), "newColumnPath": ".".join([*path[:-1], new_name])}
    return _commit(store, snapshot, "RENAME COLUMN", parameters, metadata)


def drop_columns(store: ObjectStore, snapshot: Snapshot, columns: Iterable[str]) -> CommitResult:
    """``ALTER TABLE ... DROP COLUMNS``: the columns leave the schema; their data stays in the
    files, unread (a column added later gets a new physical name, never the old values). Needs
    column mapping. Refused for partition and clustering columns, the last column, and columns a
    CHECK constraint or a generation expression reads."""
    columns = [columns] if isinstance(columns, str) else list(columns)
    if not columns:
        raise InvalidArgumentError("drop_columns() needs at least one column")
    schema = snapshot.schema
    paths = []
    for column in columns:
        path = field_path(store, snapshot, column, "drop")
        if len(path) == 1 and path[0].lower() in {c.lower() for c in snapshot.metadata.partition_columns}:
            raise SchemaError(f"cannot drop partition column {path[0]!r} of {store.root}")
        clustering = clustering_column_names(snapshot) or []
        if any(c.split(".")[: len(path)] == path or c == ".".join(path) for c in clustering):
            raise SchemaError(
                f"cannot drop clustering column {'.'.join(path)!r} of {store.root}: change the clustering "
                "columns first (alter.cluster_by)"
            )
        _check_not_referenced(store, snapshot, path, "drop")
        paths.append(path)
    for path in paths:
        schema = map_field(schema, path, lambda f: None)
    if not schema.fields:
        raise SchemaError(f"cannot drop every column of {store.root}")
    metadata = dataclasses.replace(
        snapshot.metadata,
        schema_string=schema.to_json_string(),
        configuration=dropped_stats_columns(snapshot.metadata.configuration, paths),
    )
    return _commit(
        store, snapshot, "DROP COLUMNS", {"columns": _params_json([".".join(p) for p in paths])}, metadata
    )


def _check_not_referenced(store: ObjectStore, snapshot: Snapshot, path: list[str], verb: str) -> None:
    """Refuse when a CHECK constraint or a generation expression reads the column (or a field in
    it): renaming or dropping it would leave them naming a column that is not there."""
    from deltaplane.engine.column_values import GENERATION_EXPRESSION
    from deltaplane.engine.expressions.parser import parse_expression

    lowered = [p.lower() for p in path]

    def reads(sql: str) -> bool:
        for c in expr_columns(parse_expression(sql)):
            named = [p.lower() for p in c.path]
            if named[: len(lowered)] == lowered or lowered[: len(named)] == named:
                return True
        return False

    for key, sql in snapshot.metadata.configuration.items():
        if key.startswith(CONSTRAINT_PREFIX) and reads(sql):
            raise SchemaError(
                f"cannot {verb} column {'.'.join(path)!r} of {store.root}: CHECK constraint "
                f"{key[len(CONSTRAINT_PREFIX) :]!r} reads it ({sql}); drop the constraint first"
            )
    for f in iter_fields(snapshot.schema):
        sql = f.metadata.get(GENERATION_EXPRESSION)
        if sql and reads(sql):
            raise SchemaError(
                f"cannot {verb} column {'.'.join(path)!r} of {store.root}: generated column {f.name!r} "
                f"is computed from it ({sql})"
            )


# --- changing a column: type, nullability, comment, position ------------------------------------


def change_column(
    store: ObjectStore,
    snapshot: Snapshot,
    column: str,
    *,
    new_type: Any = None,
    nullable: bool | None = None,
    comment: str | None = None,
    first: bool = False,
    after: str | None = None,
) -> CommitResult:
    """``ALTER TABLE ... ALTER COLUMN`` / ``CHANGE COLUMN``: one commit (``CHANGE COLUMN``) that
    widens the type (``delta.enableTypeWidening`` must be on; only the widenings the feature
    allows, and no file is rewritten: readers cast, the change is recorded in
    ``delta.typeChanges``), drops NOT NULL (``nullable=True``; making a nullable column NOT
    NULL is refused, as in Delta Spark), sets the comment, or moves the column (``first`` or
    ``after`` a sibling). Works on nested struct fields (``s.x``) without column mapping.

    Long because of its signature and this docstring: the body is one
    CHANGE COLUMN commit built step by step (type, nullability, comment, position).
    """
    from deltaplane.engine.schema import is_widening

    path, inside = resolve_path(store, snapshot.schema, column)
    field = field_at(snapshot.schema, path)
    assert field is not None
    if inside and (nullable is not None or comment is not None or first or after is not None):
        raise InvalidArgumentError(
            f"{column!r} is an array element or a map key or value: only its type can be changed"
        )
    changes = {}
    new_field = field
    if new_type is not None:
        target = data_type_of(new_type)
        current = type_inside(field.type, inside)
        if target != current:
            if not TableProperties(dict(snapshot.metadata.configuration)).enable_type_widening:
                raise SchemaError(
                    f"cannot change the type of {column!r} in {store.root}: type widening is not enabled "
                    "(set delta.enableTypeWidening=true first)"
                )
            if not is_widening(current, target):
                raise SchemaError(
                    f"cannot change the type of {column!r} in {store.root} from {type_text(current)} to "
                    f"{type_text(target)}: only widenings are allowed (byte->short->int->long, "
                    "float->double, integers->double or a wide enough decimal, date->timestamp_ntz, "
                    "decimal to a larger precision and scale)"
                )
            if len(path) == 1 and path[0].lower() in {c.lower() for c in snapshot.metadata.partition_columns}:
                raise SchemaError(f"cannot change the type of partition column {path[0]!r} of {store.root}")
            widened = replace_inside(field.type, inside, target)
            new_field = StructField(new_field.name, widened, new_field.nullable, new_field.metadata)
            changes["type"] = True
    if nullable is not None and nullable != field.nullable:
        if not nullable:
            raise SchemaError(
                f"cannot make {column!r} of {store.root} NOT NULL: rows already written may hold nulls "
                "(add a CHECK constraint `{column} IS NOT NULL` instead)"
            )
        new_field = StructField(new_field.name, new_field.type, True, new_field.metadata)
        changes["nullable"] = True
    if comment is not None:
        if not isinstance(comment, str):
            raise InvalidArgumentError(f"a column comment is a string, got {comment!r}")
        new_field = StructField(
            new_field.name, new_field.type, new_field.nullable, {**new_field.metadata, "comment": comment}
        )
    if first and after is not None:
        raise InvalidArgumentError("give first=True or after=<column>, not both")
    schema = map_field(snapshot.schema, path, lambda f: new_field)
    position = None
    if first or after is not None:
        schema, position = _moved(store, schema, path, first, after)
    if schema == snapshot.schema:
        return CommitResult(snapshot.version, "CHANGE COLUMN", {}, skipped=True)
    metadata = dataclasses.replace(snapshot.metadata, schema_string=schema.to_json_string())
    # Delta Spark names the column by its dotted path and gives the field as the command built it
    # (a change being recorded is not in its typeChanges yet); an array element or a map value
    # has no metadata of its own.
    named = new_field.to_json()
    if inside:
        named = {
            "name": None,
            "type": type_inside(new_field.type, inside).to_json(),
            "nullable": True,
            "metadata": {},
        }
    named["name"] = ".".join([*path, *inside])
    parameters: dict[str, Any] = {"column": _params_json(named)}
    if position is not None:
        parameters["position"] = position
    return _commit(store, snapshot, "CHANGE COLUMN", parameters, metadata)


def _moved(
    store: ObjectStore, schema: StructType, path: list[str], first: bool, after: str | None
) -> tuple[StructType, str]:
    parent_path = path[:-1]
    parent = schema if not parent_path else field_at(schema, parent_path).type  # type: ignore[union-attr]
    assert isinstance(parent, StructType)
    moving = parent[path[-1]]
    rest = [f for f in parent.fields if f is not moving]
    if first:
        fields, position = [moving, *rest], "FIRST"
    else:
        anchor = next((f for f in rest if f.name.lower() == str(after).lower()), None)
        if anchor is None:
            raise InvalidArgumentError(
                f"cannot move {'.'.join(path)!r} after {after!r}: no such column beside it in {store.root}"
            )
        i = rest.index(anchor) + 1
        fields, position = [*rest[:i], moving, *rest[i:]], f"AFTER {anchor.name}"
    moved = StructType(tuple(fields))
    if not parent_path:
        return moved, position
    parent_field = field_at(schema, parent_path)
    assert parent_field is not None
    return map_field(
        schema, parent_path, lambda f: StructField(f.name, moved, f.nullable, f.metadata)
    ), position
