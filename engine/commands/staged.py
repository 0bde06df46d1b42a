"""Staged writes: plan once, write data files anywhere, commit them later in one transaction.

A write split in three steps, for writers that are not one process (Spark executors write the
files, the driver commits) and for writers that must look at the data before it becomes visible
(a quality gate validates the staged files, then commits or quarantines them):

1. ``plan_write`` (one place, usually the driver): reads the table once and decides what every
   file must look like: the table's protocol and metadata (with the incoming schema merged when
   ``schema_mode="merge"``; a new table's when there is none yet), the mode (append, overwrite,
   replaceWhere, dynamic partition overwrite), the idempotency key. The result, ``WriteSpec``, is
   a frozen value that pickles and round-trips through JSON.
2. ``write_files(spec, data, task=n)`` (anywhere, any number of times in parallel): conforms the
   rows to the table schema, fills generated, default and identity columns, checks constraints
   (and the replaceWhere predicate), writes Parquet through the engine's writer and returns
   ``add`` actions with statistics. Nothing is committed. Identity values (when the data lacks
   an identity column) come from the block of task ``n`` (``column_values.IDENTITY_BLOCK``), so
   parallel tasks never hand out the same value and a retried task repeats only its own.
3. ``commit_write(spec, adds)`` (once): one transaction based on the version the spec was
   planned at (so conflicts with anything committed since are detected as for any write), with
   the removals the mode implies, the metadata change, ``txn(app_id, app_version)``, and the
   identity high-water marks moved to the largest values the committed files hold (a concurrent
   identity write makes it fail with ``MetadataChangedError``).

``StagedWrite`` bundles a spec with its adds: what ``deltaplane`` writes as a staged-commit
manifest, what a quality gate reads (``read()``) before it commits (``commit()``).

Files written by a write that is never committed are unreferenced; VACUUM removes them after the
retention period. A spec whose ``(app_id, app_version)`` has already committed is marked
``skip``: its ``write_files`` writes nothing and its commit returns the skip.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Add, Metadata, Protocol
from deltaplane.engine.clustering import domain_metadata as clustering_domain
from deltaplane.engine.clustering import resolve_columns
from deltaplane.engine.column_values import (
    IDENTITY_HIGH_WATER_MARK,
    ColumnValues,
    assigned_identity_columns,
    schema_from_arrow,
    with_high_water_marks,
    written_high_water_marks,
)
from deltaplane.engine.commands.context import WriteContext, check_app_version, writer_config
from deltaplane.engine.commands.write import (
    check_creation_settings,
    check_declared_schema,
    new_table_actions,
    replace_where_check,
    stage_overwrite,
)
from deltaplane.engine.enforcement import check_constraints, table_constraints
from deltaplane.engine.errors import (
    ConcurrentTransactionError,
    ConstraintViolationError,
    InvalidArgumentError,
    SchemaMismatchError,
    StagedSchemaConflictError,
    TableExistsError,
    TableNotFoundError,
)
from deltaplane.engine.expressions.bind import bind_predicate
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.holds import check_token, new_token, place_hold, release_hold
from deltaplane.engine.inputs import as_reader
from deltaplane.engine.log.replay import canonical_path, reconcile_rows
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.scan import Scan
from deltaplane.engine.schema import StructType, parse_schema, partition_physical_names
from deltaplane.engine.snapshot import files_snapshot, load_snapshot
from deltaplane.engine.storage import missing_objects, open_store, table_location
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import writer_features
from deltaplane.engine.transaction import CommitResult, Transaction, check_commit_metadata
from deltaplane.engine.work import WorkKey
from deltaplane.engine.writer import DataFileWriter

MODES = ("append", "overwrite")
_MANIFEST_FORMAT = 1
_LANDING = "landing"  # a manifest's record of the landing files its batch was staged from


@dataclass(frozen=True)
class WriteSpec:
    """Everything a staged write's files and its commit depend on, decided by ``plan_write``."""

    uri: str
    read_version: int | None  # the version planned against; None: the commit creates the table
    mode: str  # "append" or "overwrite"
    protocol_json: str  # the protocol the commit will have (upgraded if the schema needs it)
    metadata_json: str  # the metadata files are written under (evolved schema, new table's)
    metadata_changed: bool  # the commit must record metadata_json (new table, merged schema)
    replace_where: str | None = None
    dynamic_partitions: bool = False
    app_id: str | None = None
    app_version: int | None = None
    skip: bool = False  # (app_id, app_version) already committed: write and commit nothing
    target_file_size: int | None = None
    user_metadata: str | None = None
    # identity columns the data lacks: the tasks assign them, the commit moves their marks
    identity_columns: tuple[str, ...] = ()
    # the token of the hold placed for this write's files (engine/holds.py): VACUUM keeps them
    # until the commit releases it; None: no hold (a write committed right after its files)
    hold: str | None = None
    cluster_by: tuple[str, ...] | None = None  # a new table's clustering columns
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def protocol(self) -> Protocol:
        return Protocol.from_json(json.loads(self.protocol_json))

    @property
    def metadata(self) -> Metadata:
        return Metadata.from_json(json.loads(self.metadata_json))

    @property
    def schema(self) -> StructType:
        return parse_schema(self.metadata.schema_string)

    def store(self) -> ObjectStore:
        return open_store(self.uri, self.storage_options)

    def to_json(self) -> dict[str, Any]:
        """JSON form, without the storage options (credentials are not written to manifests)."""
        return {
            "uri": self.uri,
            "readVersion": self.read_version,
            "mode": self.mode,
            "protocol": json.loads(self.protocol_json),
            "metadata": json.loads(self.metadata_json),
            "metadataChanged": self.metadata_changed,
            "replaceWhere": self.replace_where,
            "dynamicPartitions": self.dynamic_partitions,
            "appId": self.app_id,
            "appVersion": self.app_version,
            "skip": self.skip,
            "targetFileSize": self.target_file_size,
            "userMetadata": self.user_metadata,
            "assignsIdentity": list(self.identity_columns),
            "hold": self.hold,
            "clusterBy": list(self.cluster_by) if self.cluster_by else None,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], storage_options: Mapping[str, str] | None = None) -> WriteSpec:
        try:
            return cls(
                uri=obj["uri"],
                read_version=obj["readVersion"],
                mode=obj["mode"],
                protocol_json=json.dumps(obj["protocol"]),
                metadata_json=json.dumps(obj["metadata"]),
                metadata_changed=bool(obj["metadataChanged"]),
                replace_where=obj.get("replaceWhere"),
                dynamic_partitions=bool(obj.get("dynamicPartitions", False)),
                app_id=obj.get("appId"),
                app_version=obj.get("appVersion"),
                skip=bool(obj.get("skip", False)),
                target_file_size=obj.get("targetFileSize"),
                user_metadata=obj.get("userMetadata"),
                identity_columns=tuple(obj.get("assignsIdentity") or ()),
                hold=check_token(obj["hold"]) if obj.get("hold") is not None else None,
                cluster_by=tuple(obj["clusterBy"]) if obj.get("clusterBy") else None,
                storage_options=dict(storage_options or {}),
            )
        except (KeyError, TypeError) as e:
            raise InvalidArgumentError(f"not a staged write spec: missing or bad field {e}") from None


def plan_write(
    uri: str,
    schema: pa.Schema,
    *,
    mode: str = "append",
    partition_by: list[str] | None = None,
    schema_mode: str | None = None,
    replace_where: str | None = None,
    dynamic_partitions: bool = False,
    app_id: str | None = None,
    app_version: int | None = None,
    target_file_size: int | None = None,
    user_metadata: str | None = None,
    properties: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    hold: bool | float | None = None,
    hold_note: str | None = None,
    table_schema: Any = None,
    cluster_by: list[str] | None = None,
) -> WriteSpec:
    """Decide a write of data with ``schema`` (the incoming data's Arrow schema) to ``uri``.

    A missing table is created by the commit (``partition_by`` and ``properties`` apply then;
    ``partition_by`` on an existing table must match its partitioning). Errors about the
    schema, the mode or the predicate are raised here, before any file is written.

    ``table_schema`` (a pyarrow schema, a Delta ``StructType`` or a DDL column list such as
    ``"id BIGINT NOT NULL, zip STRING"``) is the schema the author declares: a missing table is
    created with it (not with the data's), and an existing table's columns must match it.
    ``partition_by``, ``properties`` and ``cluster_by`` create a missing table and must agree
    with an existing one (``check_creation_settings``).

    ``hold``: the files will wait for their commit (a staged batch): a hold is placed on the
    table before any file is written (``True``: for ``holds.DEFAULT_LIFETIME_HOURS``; a number:
    for that many hours), so VACUUM keeps them whatever its retention, until ``commit_write``
    releases it (``engine/holds.py``). ``hold_note`` says who holds (a batch's name).

    Long because of its 18 keyword arguments and their documentation: the
    body (about 50 lines) checks the arguments, then plans a new table or a write to this one.
    """
    _check_mode(mode, replace_where, dynamic_partitions, schema_mode)
    if app_id is not None or app_version is not None:
        check_app_version(app_id, app_version)
    uri = table_location(uri)
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(
            f"plan_write takes the incoming data's pyarrow.Schema, not {type(schema).__name__}"
        )
    options = dict(storage_options or {})
    store = open_store(uri, options)
    common = {
        "uri": uri,
        "mode": mode,
        "replace_where": replace_where,
        "dynamic_partitions": dynamic_partitions,
        "app_id": app_id,
        "app_version": app_version,
        "target_file_size": target_file_size,
        "user_metadata": user_metadata,
        "storage_options": options,
    }
    declared = declared_schema(table_schema)
    if list_log(store, 0).max_version is None:
        if replace_where is not None or dynamic_partitions:
            raise TableNotFoundError(f"no Delta table at {uri} to overwrite selectively")
        creation = {"partition_by": partition_by, "properties": properties, "cluster_by": cluster_by}
        return _plan_create(
            store, declared if declared is not None else schema, schema, creation, hold, hold_note, common
        )
    snapshot = load_snapshot(store)
    check_creation_settings(snapshot, partition_by=partition_by, properties=properties, cluster_by=cluster_by)
    if declared is not None:
        check_declared_schema(snapshot, declared)
    write = WriteContext(store, snapshot, {}, target_file_size=target_file_size, schema_mode=schema_mode)
    write.evolve(schema)
    _check_predicate(replace_where, write.schema)
    if dynamic_partitions and not snapshot.partition_columns:
        raise InvalidArgumentError("dynamic partition overwrite needs a partitioned table")
    skip = app_id is not None and WorkKey(app_id, app_version).done_in(snapshot)
    return _held(
        store,
        hold if not skip else None,  # nothing will be written
        hold_note,
        read_version=snapshot.version,
        protocol_json=json.dumps(write.protocol.to_json()),
        metadata_json=json.dumps(write.metadata.to_json()),
        metadata_changed=write.metadata != snapshot.metadata,
        identity_columns=assigned_identity_columns(write.schema, schema.names),
        skip=skip,
        **common,
    )


def _check_mode(
    mode: str, replace_where: str | None, dynamic_partitions: bool, schema_mode: str | None
) -> None:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "append" and (replace_where is not None or dynamic_partitions or schema_mode == "overwrite"):
        raise InvalidArgumentError(
            "replace_where, dynamic_partitions and schema_mode='overwrite' need mode='overwrite'"
        )
    if replace_where is not None and dynamic_partitions:
        raise InvalidArgumentError("give replace_where or dynamic_partitions, not both")
    if schema_mode == "overwrite" and (replace_where is not None or dynamic_partitions):
        raise InvalidArgumentError("schema_mode='overwrite' replaces the whole table: no replace_where")


def _plan_create(
    store: ObjectStore,
    table_schema: Any,
    data_schema: pa.Schema,
    creation: dict,
    hold,
    hold_note,
    common: dict,
) -> WriteSpec:
    """The spec of a write whose commit creates the table (``table_schema``: the declared schema or
    the data's; ``creation``: partitioning, properties, clustering)."""
    protocol, metadata = new_table_actions(store, table_schema, **creation)
    schema = parse_schema(metadata.schema_string)
    _check_predicate(common["replace_where"], schema)
    cluster_by = creation["cluster_by"]
    return _held(
        store,
        hold,
        hold_note,
        read_version=None,
        identity_columns=assigned_identity_columns(schema, data_schema.names),
        protocol_json=json.dumps(protocol.to_json()),
        metadata_json=json.dumps(metadata.to_json()),
        metadata_changed=True,
        cluster_by=tuple(cluster_by) if cluster_by else None,
        **common,
    )


def declared_schema(schema: Any) -> StructType | None:
    """A declared table schema as a ``StructType``: from pyarrow, a ``StructType``, a DDL column
    list, or a mapping of column name to Delta type name (``{"id": "long"}``)."""
    if schema is None:
        return None
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, pa.Schema):
        return schema_from_arrow(schema)
    if isinstance(schema, str):
        from deltaplane.engine.expressions.ddl import parse_ddl

        return parse_ddl(schema)
    if isinstance(schema, Mapping):
        fields = [{"name": str(k), "type": v, "nullable": True, "metadata": {}} for k, v in schema.items()]
        return parse_schema(json.dumps({"type": "struct", "fields": fields}))
    raise InvalidArgumentError(
        "a declared schema is a pyarrow.Schema, a Delta StructType, a DDL column list "
        f"('id BIGINT, name STRING') or a mapping of column names to Delta types, not {type(schema).__name__}"
    )


def _held(store: ObjectStore, hold: bool | float | None, note: str | None, **fields: Any) -> WriteSpec:
    """The spec, with a hold placed for its files when asked (before any of them exists)."""
    if hold is None or hold is False:
        return WriteSpec(**fields)
    token = new_token()
    place_hold(
        store,
        token,
        lifetime_hours=hold,
        app_id=fields.get("app_id"),
        app_version=fields.get("app_version"),
        note=note,
    )
    return WriteSpec(hold=token, **fields)


def _check_predicate(predicate: str | None, schema: StructType):
    if predicate is None:
        return None
    return bind_predicate(parse_predicate(predicate), schema)


def write_files(
    spec: WriteSpec,
    data: Any,
    *,
    store: ObjectStore | None = None,
    on_file=None,
    task: int | None = None,
) -> list[Add]:
    """Write ``data`` (anything a write accepts, or an iterable of record batches) as data files
    of the table ``spec`` describes; returns their ``add`` actions. Commits nothing.

    Rows are conformed to the table schema (lossless casts only), NOT NULL and CHECK constraints
    and the replaceWhere predicate are checked per batch; on any error the files written so far
    are left for VACUUM and the error is raised.

    ``task``: which task of the write this is (a Spark partition id; 0 for a write done in one
    piece). It is needed when the write assigns identity values (``spec.identity_columns``):
    each task number owns a block of them, and two calls with the same number hand out the
    same values, so only one of them may be committed (a retried task attempt).
    """
    if spec.skip:
        return []
    store = store if store is not None else spec.store()
    schema = spec.schema
    metadata = spec.metadata
    constraints = table_constraints(schema, metadata.configuration)
    values = ColumnValues(schema, table=spec.uri, task=task if spec.identity_columns else None)
    planned = {n.lower() for n in spec.identity_columns}
    unplanned = [n for n in values.identity if n.lower() not in planned]
    check = None
    if spec.replace_where is not None:
        check = replace_where_check(_check_predicate(spec.replace_where, schema), spec.replace_where)
    config = writer_config(metadata, spec.protocol, schema, spec.target_file_size)
    if spec.hold is not None:
        config = replace(config, name_tag=spec.hold)
    writer = DataFileWriter(store, config)
    try:
        for batch in _batches(data, schema):
            names = {n.lower() for n in batch.schema.names}
            lacking = [n for n in unplanned if n.lower() not in names]
            if lacking:  # its values would be assigned, but the commit would not move its mark
                raise SchemaMismatchError(
                    f"cannot write to {spec.uri}: the data lacks identity column(s) {lacking}, which "
                    "the write was planned to receive; plan it with the data's schema"
                )
            try:
                table = values.insert(batch)  # generated, default and identity columns
            except SchemaMismatchError as e:
                raise SchemaMismatchError(f"cannot write to {spec.uri}: {e}") from None
            try:
                check_constraints(table, schema, constraints)
            except ConstraintViolationError as e:
                raise ConstraintViolationError(f"cannot write to {spec.uri}: {e}") from None
            if check is not None:
                check(table)
            writer.write(table)
            if on_file is not None:
                on_file(table.num_rows)
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def _batches(data: Any, schema: StructType) -> Iterable[pa.RecordBatch | pa.Table]:
    if isinstance(data, pa.RecordBatch | pa.Table):
        return [data]
    if isinstance(data, list | tuple) or (
        hasattr(data, "__next__") and not hasattr(data, "__arrow_c_stream__")
    ):
        return data  # record batches from Spark, a generator, a list
    return as_reader(data, schema)


def commit_write(
    spec: WriteSpec,
    adds: Iterable[Add | Mapping[str, Any]],
    *,
    commit_metadata: Mapping[str, Any] | None = None,
    store: ObjectStore | None = None,
    operation: str | None = None,
    operation_parameters: Mapping[str, Any] | None = None,
    release_hold: bool = True,
) -> CommitResult:
    """Commit the files of a staged write (``add`` actions or their JSON) in one transaction.

    ``operation`` and ``operation_parameters`` replace the recorded ``WRITE`` and its mode
    (a streaming sink records ``STREAMING UPDATE`` with its query and epoch, as Delta Spark).

    A write planned to create the table whose table was created by someone else meanwhile is
    appended to it when its files fit the winner (same columns and types, partitioning and
    file layout: Delta Spark's create-or-append); otherwise ``StagedSchemaConflictError``
    names both schemas. Once the commit landed (or found its work already in the table) the
    spec's hold is released (``release_hold=False`` keeps it)."""
    adds = [a if isinstance(a, Add) else Add.from_json(dict(a)) for a in adds]
    store = store if store is not None else spec.store()
    result = _commit(spec, adds, store, commit_metadata, operation, operation_parameters)
    if spec.hold is not None and release_hold:
        release_hold_of(spec, store)
    return result


def release_hold_of(spec: WriteSpec, store: ObjectStore | None = None) -> None:
    """Stop protecting a staged write's files (committed, quarantined or abandoned)."""
    if spec.hold is not None:
        release_hold(store if store is not None else spec.store(), spec.hold)


def _commit(
    spec: WriteSpec,
    adds: list[Add],
    store: ObjectStore,
    commit_metadata: Mapping[str, Any] | None,
    operation: str | None,
    operation_parameters: Mapping[str, Any] | None,
) -> CommitResult:
    metadata = dict(commit_metadata or {})
    if spec.user_metadata is not None and "userMetadata" not in metadata:
        metadata["userMetadata"] = spec.user_metadata
    operation_metrics = _write_metrics(adds)
    if spec.read_version is None:
        return _commit_create(
            spec,
            adds,
            store,
            metadata,
            operation_metrics,
            operation=operation,
            parameters=operation_parameters,
        )
    snapshot = load_snapshot(store, spec.read_version)
    params: dict[str, Any] = {"mode": spec.mode.capitalize(), "partitionBy": snapshot.partition_columns}
    if spec.replace_where is not None:
        params["predicate"] = spec.replace_where
    if spec.dynamic_partitions:
        params["partitionOverwriteMode"] = "DYNAMIC"
    if operation_parameters is not None:
        params = {**params, **operation_parameters}
    write = WriteContext(
        store,
        snapshot,
        params,
        target_file_size=spec.target_file_size,
        schema_mode=None,
        operation=operation or "WRITE",
    )
    write.txn.commit_metadata = {**write.txn.commit_metadata, **check_commit_metadata(metadata)}
    skipped = write.idempotent_skip(spec.app_id, spec.app_version)
    if skipped is not None:
        return skipped
    if spec.metadata_changed:
        new_metadata, new_protocol = spec.metadata, spec.protocol
        write.schema = parse_schema(new_metadata.schema_string)
        write.metadata = new_metadata
        write.txn.update_metadata(new_metadata)
        if new_protocol != snapshot.protocol:
            write.protocol = new_protocol
            write.txn.update_protocol(new_protocol)
    if spec.identity_columns:
        marks = _written_marks(spec, write.schema, adds)
        if marks:  # the same commit records them, tagged identity-only unless metadata changed
            write._high_water_marks_moved(with_high_water_marks(write.schema, marks))
    write.txn.add_files(adds)
    if spec.mode == "overwrite":
        predicate = _check_predicate(spec.replace_where, write.schema)
        operation_metrics.update(
            stage_overwrite(
                write, snapshot, adds, predicate=predicate, dynamic_partitions=spec.dynamic_partitions
            )
        )
    try:
        return write.txn.commit(operation_metrics)
    except ConcurrentTransactionError:
        # The same application committed since the plan: a rerun whose first try landed.
        latest = load_snapshot(store)
        if spec.app_id is not None and WorkKey(spec.app_id, spec.app_version).done_in(latest):
            return CommitResult(latest.version, write.txn.operation, {}, skipped=True)
        raise


def _commit_create(
    spec: WriteSpec,
    adds: list[Add],
    store: ObjectStore,
    metadata,
    operation_metrics,
    *,
    operation: str | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> CommitResult:
    table_metadata = spec.metadata
    params = {"partitionBy": table_metadata.partition_columns, "properties": table_metadata.configuration}
    params.update(parameters or {})
    txn = Transaction(
        store,
        None,
        operation=operation or "CREATE TABLE AS SELECT",
        operation_parameters=params,
        commit_metadata=metadata,
    )
    if spec.identity_columns:
        schema = parse_schema(table_metadata.schema_string)
        marks = _written_marks(spec, schema, adds)
        if marks:
            schema_string = with_high_water_marks(schema, marks).to_json_string()
            table_metadata = replace(table_metadata, schema_string=schema_string)
    txn.update_protocol(spec.protocol)
    txn.update_metadata(table_metadata)
    if spec.cluster_by:
        schema = parse_schema(table_metadata.schema_string)
        columns = resolve_columns(schema, list(spec.cluster_by), table_metadata.configuration)
        params["clusterBy"] = [c.name for c in columns]
        txn.set_domain_metadata(clustering_domain(columns))
    if spec.app_id is not None:
        txn.set_app_transaction(spec.app_id, spec.app_version)
    txn.add_files(adds)
    try:
        return txn.commit(operation_metrics)
    except TableExistsError:
        pass
    # Another writer created the table since the plan: append to it when the files fit.
    winner = load_snapshot(store)
    _check_fits_winner(spec, winner)
    appended = replace(
        spec,
        read_version=winner.version,
        protocol_json=json.dumps(winner.protocol.to_json()),
        metadata_json=json.dumps(winner.metadata.to_json()),
        metadata_changed=False,
    )
    return _commit(appended, adds, store, metadata, operation, parameters)


def _schema_text(schema: StructType, partition_columns: list[str]) -> str:
    columns = ", ".join(
        f"{f.name}: {_type_name(f.type)}{'' if f.nullable else ' NOT NULL'}" for f in schema.fields
    )
    parted = f"; partitioned by {', '.join(partition_columns)}" if partition_columns else "; not partitioned"
    return f"({columns}){parted}"


def _type_name(t) -> str:
    name = getattr(t, "name", None)
    return name if isinstance(name, str) else json.dumps(t.to_json())


def _comparable(schema: StructType) -> dict[str, str]:
    """Each column (by lower-cased name) as JSON, without what moves on its own (the identity
    high-water mark, comments)."""
    out = {}
    for f in schema.fields:
        body = f.to_json()
        body["metadata"] = {
            k: v
            for k, v in (body.get("metadata") or {}).items()
            if k not in (IDENTITY_HIGH_WATER_MARK, "comment")
        }
        out[f.name.lower()] = json.dumps(body, sort_keys=True)
    return out


def _check_fits_winner(spec: WriteSpec, winner) -> None:
    """The files of a create that lost the race can be appended to the winner only when they are
    exactly what a write planned against the winner would have written."""
    ours, theirs = spec.metadata, winner.metadata
    mine, table = parse_schema(ours.schema_string), winner.schema
    problems = []
    if [c.lower() for c in ours.partition_columns] != [c.lower() for c in theirs.partition_columns]:
        problems.append("another partitioning")
    if _comparable(mine) != _comparable(table):
        problems.append("other columns or types")
    layout = ("delta.columnMapping.mode",)
    config_mine, config_theirs = ours.configuration, theirs.configuration
    if any(config_mine.get(k, "none") != config_theirs.get(k, "none") for k in layout):
        problems.append("another column mapping")
    constraints = {k: v for k, v in config_theirs.items() if k.startswith("delta.constraints.")}
    if constraints != {k: v for k, v in config_mine.items() if k.startswith("delta.constraints.")}:
        problems.append("other CHECK constraints")
    materialized = "materializePartitionColumns"
    if materialized in writer_features(winner.protocol) - writer_features(spec.protocol):
        problems.append("partition columns materialized in files")
    if spec.identity_columns:
        problems.append("identity values assigned from the same first block")
    if problems:
        raise StagedSchemaConflictError(
            f"{spec.uri} was created by another writer while this write was staged, with "
            f"{' and '.join(problems)}: the table is {_schema_text(table, theirs.partition_columns)}, "
            f"this write's files are {_schema_text(mine, ours.partition_columns)}. Its files cannot be "
            "appended; stage the batch again against the table (a DeltaStageOperator run reads the "
            "landing files in the table's types). The files written are left for VACUUM."
        )


def _written_marks(spec: WriteSpec, schema: StructType, adds: list[Add]) -> dict[str, int]:
    """The identity high-water marks after committing ``adds``: the extreme values they hold,
    from their statistics (or, for a file without them, from the column itself)."""
    extremes: dict[str, tuple[int | None, int | None]] = {}
    for name in spec.identity_columns:
        f = schema.find(name)
        physical = f.physical_name if f is not None else name
        low = high = None
        for add in adds:
            stats = json.loads(add.stats) if add.stats else {}
            if stats.get("numRecords") == 0:
                continue
            lo = (stats.get("minValues") or {}).get(physical)
            hi = (stats.get("maxValues") or {}).get(physical)
            if lo is None or hi is None:  # no statistics for this column: read it
                column = StagedWrite(spec, (add,)).read().column(name)
                lo, hi = pc.min(column).as_py(), pc.max(column).as_py()
                if lo is None:
                    continue
            low = lo if low is None else min(low, lo)
            high = hi if high is None else max(high, hi)
        extremes[name] = (low, high)
    return written_high_water_marks(schema, spec.identity_columns, extremes)


def _write_metrics(adds: list[Add]) -> dict[str, int]:
    rows = 0
    for a in adds:
        if a.stats:
            rows += int(json.loads(a.stats).get("numRecords", 0))
    return {"numFiles": len(adds), "numOutputRows": rows, "numOutputBytes": sum(a.size for a in adds)}


@dataclass(frozen=True)
class StagedWrite:
    """A planned write and the files written for it, not yet committed."""

    spec: WriteSpec
    adds: tuple[Add, ...]
    created_at: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def num_rows(self) -> int:
        return _write_metrics(list(self.adds))["numOutputRows"]

    @property
    def num_bytes(self) -> int:
        return sum(a.size for a in self.adds)

    def data_uris(self) -> list[str]:
        """Absolute locations of the staged files."""
        return self._scan().file_uris()

    def read(self) -> pa.Table:
        """The staged rows as readers will see them once committed."""
        return self._scan().to_table()

    def to_batches(self, columns: list[str] | None = None) -> pa.RecordBatchReader:
        """The staged rows, streamed (only ``columns`` of them, by logical name, when given)."""
        return self._scan(columns).to_batches()

    def _scan(self, columns: list[str] | None = None) -> Scan:
        metadata = self.spec.metadata
        schema = parse_schema(metadata.schema_string)
        store = self.spec.store()
        physical = partition_physical_names(schema, metadata.partition_columns)
        version = self.spec.read_version if self.spec.read_version is not None else -1
        files = reconcile_rows(
            [(version, [("add", a.to_json()) for a in self.adds])], store.root, physical
        ).live
        return Scan(files_snapshot(store, version, self.spec.protocol, metadata, files), columns, None)

    def missing_files(self) -> list[str]:
        """The staged data files that are gone (deleted by a VACUUM that knows nothing of holds,
        or by hand): a commit of them would fail."""
        store = self.spec.store()
        return missing_objects(store, [canonical_path(a.path, store.root) for a in self.adds])

    def commit(self, *, commit_metadata: Mapping[str, Any] | None = None) -> CommitResult:
        return commit_write(self.spec, self.adds, commit_metadata=commit_metadata)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _MANIFEST_FORMAT,
            "createdAt": self.created_at,
            "spec": self.spec.to_json(),
            "adds": [a.to_json() for a in self.adds],
        }

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), indent=1).encode()

    @classmethod
    def from_json(
        cls, obj: Mapping[str, Any], storage_options: Mapping[str, str] | None = None
    ) -> StagedWrite:
        if not isinstance(obj, Mapping) or obj.get("format") != _MANIFEST_FORMAT:
            raise InvalidArgumentError(
                f"not a deltaplane staged-write manifest (format {_MANIFEST_FORMAT} expected)"
            )
        spec = WriteSpec.from_json(obj["spec"], storage_options)
        return cls(spec, tuple(Add.from_json(a) for a in obj["adds"]), int(obj.get("createdAt", 0)))

    @classmethod
    def loads(cls, data: bytes | str, storage_options: Mapping[str, str] | None = None) -> StagedWrite:
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise InvalidArgumentError(f"a staged-write manifest must be JSON: {e}") from None
        return cls.from_json(obj, storage_options)


def stage_write(
    uri: str,
    data: Any,
    *,
    mode: str = "append",
    storage_options: Mapping[str, str] | None = None,
    **plan_options: Any,
) -> StagedWrite:
    """Plan and write ``data`` in this process; commit later with ``.commit()``. The files are
    held (``plan_write(hold=True)``: VACUUM keeps them) until the commit, unless ``hold=False``."""
    reader = as_reader(data, None)
    plan_options.setdefault("hold", True)
    spec = plan_write(uri, reader.schema, mode=mode, storage_options=storage_options, **plan_options)
    return StagedWrite(spec, tuple(write_files(spec, reader, task=0)))
