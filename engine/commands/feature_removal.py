"""How each table feature's traces are found and taken out of the latest version, for DROP FEATURE
(engine/commands/features.py): one clean check, one remover and one log-action test per feature, as
Delta Spark's RemovableFeature."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaplane.engine import row_tracking
from deltaplane.engine.actions import DeletionVectorDescriptor, Metadata, Remove
from deltaplane.engine.commands.context import WriteContext, remove_action
from deltaplane.engine.commands.optimize import NO_SIZE_LIMIT, execute_optimize, plan_optimize
from deltaplane.engine.commands.restore import add_action
from deltaplane.engine.deletion_vectors import dv_file_key
from deltaplane.engine.errors import FeatureDropError
from deltaplane.engine.file_layout import physical_arrow_field
from deltaplane.engine.log.files import LogFileKind
from deltaplane.engine.log.replay import canonical_path
from deltaplane.engine.log.segment import build_log_segment
from deltaplane.engine.scan import Scan
from deltaplane.engine.schema import (
    FIELD_ID_KEY,
    PHYSICAL_NAME_KEY,
    ArrayType,
    MapType,
    StructField,
    StructType,
    iter_fields,
)
from deltaplane.engine.schema_changes import TYPE_CHANGES
from deltaplane.engine.snapshot import Snapshot, load_snapshot
from deltaplane.engine.storage import resolve_location
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.transaction import CommitResult, Transaction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Removal:
    """How one feature is taken out (Delta Spark's ``RemovableFeature``)."""

    history: bool  # traces may remain in older versions: barrier checkpoints (or truncation)
    clean: Callable[[Snapshot], bool]  # no trace left in this version
    remove_traces: Callable[[ObjectStore, Snapshot, list], bool]  # commits; True if it changed anything
    properties_at_downgrade: tuple[str, ...] = ()
    uses: Callable[[dict], bool] = lambda action: False  # an action (log JSON) that uses the feature
    needed_by: tuple[str, ...] = ()  # features that require this one


def configuration_of(snapshot: Snapshot) -> dict[str, str]:
    return dict(snapshot.metadata.configuration)


def _true(configuration: dict[str, str], key: str) -> bool:
    return str(configuration.get(key, "")).strip().lower() == "true"


def _commit_metadata(
    store: ObjectStore,
    snapshot: Snapshot,
    operation: str,
    parameters: dict[str, Any],
    metadata: Metadata,
    done: list,
) -> Snapshot:
    txn = Transaction(store, snapshot, operation=operation, operation_parameters=parameters)
    txn.update_metadata(metadata)
    record_commit(done, txn.commit())
    return load_snapshot(store)


def record_commit(done: list, result: CommitResult) -> None:
    done.append((result.version, result.operation))
    log.info("DROP FEATURE %s: version %d %s", result.version, result.version, result.operation)


def unset_properties(store, snapshot, keys: list[str], done: list) -> Snapshot:
    configuration = configuration_of(snapshot)
    present = [k for k in keys if k in configuration]
    if not present:
        return snapshot
    for key in present:
        configuration.pop(key)
    metadata = dataclasses.replace(snapshot.metadata, configuration=configuration)
    params = {"properties": json.dumps(keys, separators=(",", ":")), "ifExists": "true"}
    return _commit_metadata(store, snapshot, "UNSET TBLPROPERTIES", params, metadata, done)


def _set(store, snapshot, values: dict[str, str], done: list) -> Snapshot:
    configuration = {**configuration_of(snapshot), **values}
    metadata = dataclasses.replace(snapshot.metadata, configuration=configuration)
    params = {"properties": json.dumps(values, separators=(",", ":"))}
    return _commit_metadata(store, snapshot, "SET TBLPROPERTIES", params, metadata, done)


def _reorg(store: ObjectStore, snapshot: Snapshot, rewrite: set[str] | None, done: list) -> bool:
    """REORG: rewrite the files with deletion vectors (``rewrite is None``) or the given files."""
    plan = plan_optimize(snapshot, purge=rewrite is None, reorg=rewrite if rewrite is not None else set())
    if not plan.bins:
        return False
    metrics = execute_optimize(store, plan)
    if metrics.commit is not None:
        record_commit(done, metrics.commit)
    return True


def has_dvs(snapshot: Snapshot) -> bool:
    dv = snapshot.files.column("deletion_vector")
    return dv.null_count < len(dv)


def dv_clean(snapshot: Snapshot) -> bool:
    return not snapshot.properties.enable_deletion_vectors and not has_dvs(snapshot)


def dv_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    traces = not dv_clean(snapshot)
    if traces:
        snapshot = unset_properties(store, snapshot, ["delta.enableDeletionVectors"], done)
        _reorg(store, snapshot, None, done)
        snapshot = load_snapshot(store)
    _dv_tombstones(store, snapshot, done)
    return traces


def _dv_tombstones(store: ObjectStore, snapshot: Snapshot, done: list) -> None:
    """Removes naming, by path, the deletion-vector files of the files removed within the
    tombstone retention, unless such a remove is there already: a client that does not know
    deletion vectors then keeps those files until the retention ends. Committed even when there
    is none to add, as Delta Spark does."""
    tombstones = snapshot.tombstones
    have = set(tombstones.filter(tombstones.column("deletion_vector").is_null()).column("path").to_pylist())
    wanted: list[str] = []
    for dv in tombstones.column("deletion_vector").to_pylist():
        if not dv or dv.get("storageType") not in ("u", "p"):
            continue
        key = dv_file_key(DeletionVectorDescriptor.from_json({k: v for k, v in dv.items() if v is not None}))
        path = key if dv["storageType"] == "p" else quote(key, safe="/=")
        if path not in have and path not in wanted:
            wanted.append(path)
    now = int(time.time() * 1000)
    txn = Transaction(store, snapshot, operation="Deletion Vector Tombstones", operation_parameters={})
    txn.remove_files([Remove(path=p, data_change=False, deletion_timestamp=now) for p in wanted])
    record_commit(done, txn.commit())


def dv_uses(action: dict) -> bool:
    if "metaData" in action:
        return _true(action["metaData"].get("configuration") or {}, "delta.enableDeletionVectors")
    for kind in ("add", "remove", "cdc"):
        if kind in action:
            return bool(action[kind].get("deletionVector"))
    return False


def _v2_policy(configuration: dict[str, str]) -> bool:
    return str(configuration.get("delta.checkpointPolicy", "classic")).strip().lower() == "v2"


def v2_clean(snapshot: Snapshot) -> bool:
    if _v2_policy(configuration_of(snapshot)):
        return False
    segment = build_log_segment(snapshot.store, snapshot.version)
    checkpoint = segment.checkpoint
    return checkpoint is None or not is_v2_checkpoint(snapshot.store, checkpoint)


def is_v2_checkpoint(store: ObjectStore, checkpoint) -> bool:
    """A UUID-named checkpoint, or a classic-named one with V2 content (``checkpointMetadata``)."""
    first = checkpoint.files[0]
    if first.kind is LogFileKind.V2_CHECKPOINT:
        return True
    if first.kind is not LogFileKind.CHECKPOINT:
        return False  # multi-part checkpoints are classic only
    with store.open_input(first.key) as f:
        return "checkpointMetadata" in pq.read_schema(f).names


def v2_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if v2_clean(snapshot):
        return False
    _set(store, snapshot, {"delta.checkpointPolicy": "classic"}, done)
    return True


def v2_uses(action: dict) -> bool:
    if "metaData" in action:
        return _v2_policy(action["metaData"].get("configuration") or {})
    return "checkpointMetadata" in action or "sidecar" in action


def _has_type_changes(schema: StructType) -> bool:
    return any(TYPE_CHANGES in f.metadata for f in iter_fields(schema))


def tw_clean(snapshot: Snapshot) -> bool:
    return not _true(configuration_of(snapshot), "delta.enableTypeWidening") and not _has_type_changes(
        snapshot.schema
    )


def tw_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if tw_clean(snapshot):
        return False
    snapshot = unset_properties(store, snapshot, ["delta.enableTypeWidening"], done)
    if _has_type_changes(snapshot.schema):
        stale = _files_with_older_types(store, snapshot)
        if stale:
            _reorg(store, snapshot, stale, done)
            snapshot = load_snapshot(store)
        cleaned, changed = _without_type_changes(snapshot.schema, [])
        params = {"columns": json.dumps(changed, separators=(",", ":"))}
        metadata = dataclasses.replace(snapshot.metadata, schema_string=cleaned.to_json_string())
        _commit_metadata(store, snapshot, "DROP FEATURE", params, metadata, done)
    return True


def _without_type_changes(t: Any, path: list[str]) -> tuple[Any, list[dict]]:
    """The type without ``delta.typeChanges`` anywhere, and the fields that had it (as Delta Spark
    records them in the commit: dotted name, type, nullability, metadata before)."""
    changed: list[dict] = []
    if isinstance(t, StructType):
        fields = []
        for f in t.fields:
            inner, below = _without_type_changes(f.type, [*path, f.name])
            changed += below
            metadata = f.metadata
            if TYPE_CHANGES in metadata:
                changed.append(
                    {
                        "name": ".".join(_quoted_part(p) for p in [*path, f.name]),
                        "type": _type_name(f.type),
                        "nullable": f.nullable,
                        "metadata": metadata,
                    }
                )
                metadata = {k: v for k, v in metadata.items() if k != TYPE_CHANGES}
            fields.append(StructField(f.name, inner, f.nullable, metadata))
        return StructType(tuple(fields)), changed
    if isinstance(t, ArrayType):
        element, below = _without_type_changes(t.element_type, [*path, "element"])
        return ArrayType(element, t.contains_null), below
    if isinstance(t, MapType):
        key, below_k = _without_type_changes(t.key_type, [*path, "key"])
        value, below_v = _without_type_changes(t.value_type, [*path, "value"])
        return MapType(key, value, t.value_contains_null), below_k + below_v
    return t, changed


def _quoted_part(name: str) -> str:
    return name if name.replace("_", "").isalnum() else "`" + name.replace("`", "``") + "`"


def _type_name(t: Any) -> str:
    j = t.to_json()
    return j if isinstance(j, str) else str(j.get("type"))


def _files_with_older_types(store: ObjectStore, snapshot: Snapshot) -> set[str]:
    """Live files whose Parquet types differ, in a column whose type was changed, from the ones the
    current schema gives it (written before the change): only their footers are read."""
    mode = snapshot.column_mapping_mode
    changed = [f for f in snapshot.schema.fields if _has_type_changes(StructType((f,)))]
    if not changed:
        return set()
    expected = {physical_arrow_field(f, mode).name: physical_arrow_field(f, mode).type for f in changed}
    out = set()
    for path in snapshot.files.column("path").to_pylist():
        file_store, key = resolve_location(store, canonical_path(path, store.root))
        with file_store.open_input(key) as f:
            schema = pq.read_schema(f)
        for name, want in expected.items():
            idx = schema.get_field_index(name)
            if idx >= 0 and not _same_types(schema.field(idx).type, want):
                out.add(path)
                break
    return out


def _same_types(have: pa.DataType, want: pa.DataType) -> bool:
    """Equal leaf types, ignoring names of list and map children and nullability; a struct field
    missing from the file (added later) is fine."""
    if pa.types.is_struct(want):
        if not pa.types.is_struct(have):
            return False
        names = [have.field(i).name for i in range(have.num_fields)]
        for i in range(want.num_fields):
            w = want.field(i)
            if w.name in names and not _same_types(have.field(names.index(w.name)).type, w.type):
                return False
        return True
    if pa.types.is_map(want):
        return (
            pa.types.is_map(have)
            and _same_types(have.key_type, want.key_type)
            and _same_types(have.item_type, want.item_type)
        )
    if pa.types.is_list(want) or pa.types.is_large_list(want):
        return (pa.types.is_list(have) or pa.types.is_large_list(have)) and _same_types(
            have.value_type, want.value_type
        )
    if pa.types.is_timestamp(want) and pa.types.is_timestamp(have):
        return (want.tz is None) == (have.tz is None)  # the unit is the file's business
    return have == want


def tw_uses(action: dict) -> bool:
    return "metaData" in action and TYPE_CHANGES in (action["metaData"].get("schemaString") or "")


_ICT_ENABLED = "delta.enableInCommitTimestamps"

_ICT_PROVENANCE = ("delta.inCommitTimestampEnablementVersion", "delta.inCommitTimestampEnablementTimestamp")


def ict_clean(snapshot: Snapshot) -> bool:
    config = configuration_of(snapshot)
    return not _true(config, _ICT_ENABLED) and not any(k in config for k in _ICT_PROVENANCE)


def ict_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if ict_clean(snapshot):
        return False
    config = configuration_of(snapshot)
    removed = [k for k in _ICT_PROVENANCE if k in config]
    for k in removed:
        config.pop(k)
    disabled = [_ICT_ENABLED] if _true(config, _ICT_ENABLED) else []
    if disabled:
        config[_ICT_ENABLED] = "false"
    metadata = dataclasses.replace(snapshot.metadata, configuration=config)
    params = {"properties": json.dumps(removed + disabled, separators=(",", ":")), "ifExists": "true"}
    _commit_metadata(store, snapshot, "UNSET TBLPROPERTIES", params, metadata, done)
    return True


def rt_clean(snapshot: Snapshot) -> bool:
    config = configuration_of(snapshot)
    if _true(config, row_tracking.ENABLE_PROPERTY) or not _true(config, row_tracking.SUSPENDED_PROPERTY):
        return False
    files = snapshot.files
    return files.column("base_row_id").null_count == len(files) and files.column(
        "default_row_commit_version"
    ).null_count == len(files)


def rt_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if rt_clean(snapshot):
        return False
    values = {row_tracking.ENABLE_PROPERTY: "false", row_tracking.SUSPENDED_PROPERTY: "true"}
    snapshot = _set(store, snapshot, values, done)
    files = snapshot.files
    tracked = files.filter(
        pc.or_(
            pc.is_valid(files.column("base_row_id")), pc.is_valid(files.column("default_row_commit_version"))
        )
    )
    if tracked.num_rows:
        adds = [
            dataclasses.replace(
                add_action(row), data_change=False, base_row_id=None, default_row_commit_version=None
            )
            for row in tracked.to_pylist()
        ]
        txn = Transaction(
            store, snapshot, operation="ROW TRACKING UNBACKFILL", operation_parameters={"batchId": "0"}
        )
        txn.read_exact_files(tracked)
        txn.add_files(adds)
        txn.mark_files_verified()
        record_commit(done, txn.commit())
    return True


def dm_clean(snapshot: Snapshot) -> bool:
    return not any(not d.removed for d in snapshot.domains.values())


def dm_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    live = [d for d in snapshot.domains.values() if not d.removed]
    if not live:
        return False
    txn = Transaction(
        store,
        snapshot,
        operation="DOMAIN METADATA CLEANUP",
        operation_parameters={"domainMetadataRemovedCount": str(len(live))},
    )
    for d in live:
        txn.set_domain_metadata(dataclasses.replace(d, removed=True))
    record_commit(done, txn.commit())
    return True


def cc_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    names = sorted(
        k[len("delta.constraints.") :]
        for k in configuration_of(snapshot)
        if k.startswith("delta.constraints.")
    )
    if names:
        listed = ", ".join(f"`{n}`" for n in names)
        raise FeatureDropError(
            f"cannot drop checkConstraints from {store.root}: drop its CHECK constraints first "
            f"(dt.alter.drop_constraint): {listed}",
            error_class="DELTA_CANNOT_DROP_CHECK_CONSTRAINT_FEATURE",
            feature="checkConstraints",
        )
    return False


_MAPPING_KEYS = (FIELD_ID_KEY, PHYSICAL_NAME_KEY, "delta.columnMapping.nested.ids")

_INVALID_CHARACTERS = " ,;{}()\n\t="


def _without_mapping(t: Any) -> Any:
    if isinstance(t, StructType):
        return StructType(
            tuple(
                StructField(
                    f.name,
                    _without_mapping(f.type),
                    f.nullable,
                    {k: v for k, v in f.metadata.items() if k not in _MAPPING_KEYS},
                )
                for f in t.fields
            )
        )
    if isinstance(t, ArrayType):
        return ArrayType(_without_mapping(t.element_type), t.contains_null)
    if isinstance(t, MapType):
        return MapType(_without_mapping(t.key_type), _without_mapping(t.value_type), t.value_contains_null)
    return t


def cm_uses(action: dict) -> bool:
    if "metaData" not in action:
        return False
    mode = (action["metaData"].get("configuration") or {}).get("delta.columnMapping.mode", "none")
    return str(mode).strip().lower() != "none"


def cm_clean(snapshot: Snapshot) -> bool:
    if snapshot.column_mapping_mode != "none":
        return False
    return not any(k in f.metadata for f in iter_fields(snapshot.schema) for k in _MAPPING_KEYS)


def cm_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    """REMOVE COLUMN MAPPING: one commit rewriting every file under the logical names (Parquet
    columns, partition values and statistics keyed by them) with the schema and properties
    stripped of column mapping; refused where a name needs mapping to be stored."""
    if cm_clean(snapshot):
        return False
    invalid = [f.name for f in iter_fields(snapshot.schema) if any(c in f.name for c in _INVALID_CHARACTERS)]
    if invalid:
        raise FeatureDropError(
            f"cannot drop columnMapping from {store.root}: column names {invalid} contain characters "
            f"among {_INVALID_CHARACTERS!r} that only column mapping can store; rename them first",
            error_class="DELTA_INVALID_COLUMN_NAMES_WHEN_REMOVING_COLUMN_MAPPING",
            feature="columnMapping",
        )
    configuration = {
        k: v
        for k, v in snapshot.metadata.configuration.items()
        if k not in ("delta.columnMapping.mode", "delta.columnMapping.maxColumnId")
    }
    schema = _without_mapping(snapshot.schema)
    metadata = dataclasses.replace(
        snapshot.metadata, configuration=configuration, schema_string=schema.to_json_string()
    )
    unmapped = dataclasses.replace(snapshot, metadata=metadata)  # what the new files are written under
    now = int(time.time() * 1000)
    txn = Transaction(store, snapshot, operation="REMOVE COLUMN MAPPING", operation_parameters={})
    txn.read_whole_table()
    files = snapshot.files
    adds = _rewrite(store, snapshot, unmapped) if files.num_rows else []
    txn.update_metadata(metadata)
    txn.remove_files(
        [dataclasses.replace(remove_action(row, now), data_change=False) for row in files.to_pylist()]
    )
    txn.add_files(adds)
    record_commit(done, txn.commit())
    return True


def _rewrite(store: ObjectStore, snapshot: Snapshot, target: Snapshot) -> list:
    """Every live row of ``snapshot`` written again as ``target`` lays files out (deletion
    vectors applied, row ids kept), one output file per input file."""
    kept = row_tracking.materialized_columns(snapshot.protocol, snapshot.metadata)
    adds = []
    for i in range(snapshot.files.num_rows):
        writer = WriteContext(store, target, {}, target_file_size=NO_SIZE_LIMIT, schema_mode=None).writer()
        try:
            scan = Scan(snapshot, None, None, files=snapshot.files.slice(i, 1), row_tracking=kept)
            for batch in scan.to_batches():
                writer.write(pa.Table.from_batches([batch]))
            adds += writer.close()
        except BaseException:
            writer.abort()
            raise
    return [dataclasses.replace(a, data_change=False) for a in adds]
