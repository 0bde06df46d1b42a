"""ADD FEATURE and DROP FEATURE. DROP FEATURE takes a table feature out of the protocol, so that
readers and writers that do not know it can use the table again (ADD FEATURE is one ``SET
TBLPROPERTIES``). As Delta Spark 4.4 does it, commit for commit (``ALTER TABLE ... DROP FEATURE f
[TRUNCATE HISTORY]``):

1. **Traces removed** from the latest version, each step its own commit under Delta Spark's
   operation name: the property that turns the feature on is unset first, so no concurrent
   writer adds new traces (``UNSET TBLPROPERTIES`` / ``SET TBLPROPERTIES``), then the data that
   uses it is rewritten (``REORG`` purging deletion vectors or rewriting files whose Parquet types
   predate a type change, ``REMOVE COLUMN MAPPING`` rewriting every file under its logical names,
   ``ROW TRACKING UNBACKFILL``) and the metadata cleaned (``DROP FEATURE`` of the
   ``delta.typeChanges`` metadata, ``DOMAIN METADATA CLEANUP``, ``Deletion Vector
   Tombstones``: removes naming the deletion-vector files of files removed within the retention,
   so that a VACUUM by a client that ignores deletion vectors keeps them until they expire).
2. For a feature whose traces can remain in older versions (the reader-writer features: deletion
   vectors, v2 checkpoints, type widening, column mapping, vacuumProtocolCheck), **three barrier
   checkpoints**, each on an ``Empty Commit``: a reader never replays older commits than those.
3. **The downgrade commit** (``DROP FEATURE {featureName, truncateHistory}``): the protocol
   without the feature (in its weakest form: legacy versions when the remaining features allow
   it), and for the features of (2) the ``checkpointProtection`` writer feature with
   ``delta.requireCheckpointProtectionBeforeVersion`` = this version, so that log cleanup only
   ever removes the history before it all at once. Then a checkpoint of it.

``truncate_history=True`` is the other route for those features: no barrier, no protection, but
the history must hold no trace of the feature once the log is cleaned with the short
``delta.dropFeatureTruncateHistory.retentionDuration`` (24 hours): a first call removes the traces
and stops (``DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD``); a call after that period drops it.
``checkpointProtection`` itself is dropped only this way, once the history before its version is
gone.

Every refusal is a ``FeatureDropError`` carrying Delta Spark's error class (an input error: a task
fails without retries), except a concurrent commit that used the feature again after its traces
were removed (``FeatureDropConflictError``, worth retrying); the commits made before either stay
(they are valid on their own), and running the drop again continues.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltaplane.engine import row_tracking
from deltaplane.engine.actions import DeletionVectorDescriptor, Metadata, Protocol, Remove
from deltaplane.engine.checkpoint_writer import write_checkpoint
from deltaplane.engine.commands.context import WriteContext, remove_action
from deltaplane.engine.commands.log_cleanup import execute_log_cleanup, plan_log_cleanup
from deltaplane.engine.commands.optimize import NO_SIZE_LIMIT, execute_optimize, plan_optimize
from deltaplane.engine.commands.restore import add_action
from deltaplane.engine.deletion_vectors import dv_file_key
from deltaplane.engine.errors import FeatureDropConflictError, FeatureDropError, InvalidArgumentError
from deltaplane.engine.log.files import LogFileKind, commit_key
from deltaplane.engine.log.replay import canonical_path
from deltaplane.engine.log.segment import build_log_segment, list_log
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
from deltaplane.engine.table_features import (
    FEATURES,
    check_write_supported,
    reader_features,
    writer_features,
)
from deltaplane.engine.table_properties import KNOWN_DELTA_PROPERTIES, parse_interval_ms
from deltaplane.engine.transaction import CommitResult, Transaction
from deltaplane.engine.writer import physical_arrow_field

log = logging.getLogger(__name__)

BARRIER_CHECKPOINTS = 3  # Delta Spark's: more than the earlier checkpoints a reader falls back to
CHECKPOINT_PROTECTION = "checkpointProtection"
PROTECTED_BEFORE = "delta.requireCheckpointProtectionBeforeVersion"
TRUNCATE_RETENTION = "delta.dropFeatureTruncateHistory.retentionDuration"
TRUNCATE_RETENTION_DEFAULT = "interval 24 hours"
MINUTE_MS = 60_000


@dataclass(frozen=True)
class DropFeatureResult:
    """What DROP FEATURE committed: ``commits`` is every commit it made, in order, as
    ``(version, operation)``; ``version`` is the last (the downgrade); ``checkpoints`` the versions
    it checkpointed."""

    feature: str
    version: int
    protocol: Protocol
    truncate_history: bool
    commits: tuple[tuple[int, str], ...]
    checkpoints: tuple[int, ...]
    commit: CommitResult = field(repr=False, compare=False)
    operation: str = "DROP FEATURE"
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "version": self.version,
            "truncate_history": self.truncate_history,
            "commits": [list(c) for c in self.commits],
            "checkpoints": list(self.checkpoints),
            "protocol": {
                "minReaderVersion": self.protocol.min_reader_version,
                "minWriterVersion": self.protocol.min_writer_version,
                "readerFeatures": self.protocol.reader_features,
                "writerFeatures": self.protocol.writer_features,
            },
        }


# --- the protocol without a feature -----------------------------------------------------------


def _features_in(protocol: Protocol) -> set[str]:
    return set(reader_features(protocol)) | set(writer_features(protocol))


def protocol_without(protocol: Protocol, feature: str) -> Protocol:
    """``protocol`` with ``feature`` removed, in its weakest form: legacy versions when the remaining
    features are exactly what a legacy protocol implies, else writer 7 (reader 3 only for
    reader-writer table features, 2 for column mapping alone)."""
    remaining = _features_in(protocol) - {feature}
    return normalized_protocol(remaining)


def normalized_protocol(features: Iterable[str]) -> Protocol:
    features = set(features)
    reader = max([1, *(_min_reader(f) for f in features)])
    writer = max([1, *(_min_writer(f) for f in features)])
    legacy = Protocol(reader, writer) if writer < 7 else None
    if legacy is not None and _features_in(legacy) == features:
        return legacy
    if reader >= 3:
        readers = sorted(f for f in features if FEATURES[f].reader_writer)
        return Protocol(3, 7, readers, sorted(features))
    return Protocol(reader, 7, None, sorted(features))


def _min_reader(name: str) -> int:
    f = FEATURES[name]
    if f.legacy_versions is not None:
        return f.legacy_versions[0]
    return 3 if f.reader_writer else 1


def _min_writer(name: str) -> int:
    f = FEATURES[name]
    return f.legacy_versions[1] if f.legacy_versions is not None else 7


# --- what each removable feature needs ----------------------------------------------------------


@dataclass(frozen=True)
class _Removal:
    """How one feature is taken out (Delta Spark's ``RemovableFeature``)."""

    history: bool  # traces may remain in older versions: barrier checkpoints (or truncation)
    clean: Callable[[Snapshot], bool]  # no trace left in this version
    remove_traces: Callable[[ObjectStore, Snapshot, list], bool]  # commits; True if it changed anything
    properties_at_downgrade: tuple[str, ...] = ()
    uses: Callable[[dict], bool] = lambda action: False  # an action (log JSON) that uses the feature
    needed_by: tuple[str, ...] = ()  # features that require this one


def _config(snapshot: Snapshot) -> dict[str, str]:
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
    _record(done, txn.commit())
    return load_snapshot(store)


def _record(done: list, result: CommitResult) -> None:
    done.append((result.version, result.operation))
    log.info("DROP FEATURE %s: version %d %s", result.version, result.version, result.operation)


def _unset(store, snapshot, keys: list[str], done: list) -> Snapshot:
    configuration = _config(snapshot)
    present = [k for k in keys if k in configuration]
    if not present:
        return snapshot
    for key in present:
        configuration.pop(key)
    metadata = dataclasses.replace(snapshot.metadata, configuration=configuration)
    params = {"properties": json.dumps(keys, separators=(",", ":")), "ifExists": "true"}
    return _commit_metadata(store, snapshot, "UNSET TBLPROPERTIES", params, metadata, done)


def _set(store, snapshot, values: dict[str, str], done: list) -> Snapshot:
    configuration = {**_config(snapshot), **values}
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
        _record(done, metrics.commit)
    return True


# deletion vectors


def _has_dvs(snapshot: Snapshot) -> bool:
    dv = snapshot.files.column("deletion_vector")
    return dv.null_count < len(dv)


def _dv_clean(snapshot: Snapshot) -> bool:
    return not snapshot.properties.enable_deletion_vectors and not _has_dvs(snapshot)


def _dv_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    traces = not _dv_clean(snapshot)
    if traces:
        snapshot = _unset(store, snapshot, ["delta.enableDeletionVectors"], done)
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
    _record(done, txn.commit())


def _dv_uses(action: dict) -> bool:
    if "metaData" in action:
        return _true(action["metaData"].get("configuration") or {}, "delta.enableDeletionVectors")
    for kind in ("add", "remove", "cdc"):
        if kind in action:
            return bool(action[kind].get("deletionVector"))
    return False


# v2 checkpoints


def _v2_policy(configuration: dict[str, str]) -> bool:
    return str(configuration.get("delta.checkpointPolicy", "classic")).strip().lower() == "v2"


def _v2_clean(snapshot: Snapshot) -> bool:
    if _v2_policy(_config(snapshot)):
        return False
    segment = build_log_segment(snapshot.store, snapshot.version)
    checkpoint = segment.checkpoint
    return checkpoint is None or not _is_v2_checkpoint(snapshot.store, checkpoint)


def _is_v2_checkpoint(store: ObjectStore, checkpoint) -> bool:
    """A UUID-named checkpoint, or a classic-named one with V2 content (``checkpointMetadata``)."""
    first = checkpoint.files[0]
    if first.kind is LogFileKind.V2_CHECKPOINT:
        return True
    if first.kind is not LogFileKind.CHECKPOINT:
        return False  # multi-part checkpoints are classic only
    with store.open_input(first.key) as f:
        return "checkpointMetadata" in pq.read_schema(f).names


def _v2_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if _v2_clean(snapshot):
        return False
    _set(store, snapshot, {"delta.checkpointPolicy": "classic"}, done)
    return True


def _v2_uses(action: dict) -> bool:
    if "metaData" in action:
        return _v2_policy(action["metaData"].get("configuration") or {})
    return "checkpointMetadata" in action or "sidecar" in action


# type widening


def _has_type_changes(schema: StructType) -> bool:
    return any(TYPE_CHANGES in f.metadata for f in iter_fields(schema))


def _tw_clean(snapshot: Snapshot) -> bool:
    return not _true(_config(snapshot), "delta.enableTypeWidening") and not _has_type_changes(snapshot.schema)


def _tw_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if _tw_clean(snapshot):
        return False
    snapshot = _unset(store, snapshot, ["delta.enableTypeWidening"], done)
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


def _tw_uses(action: dict) -> bool:
    return "metaData" in action and TYPE_CHANGES in (action["metaData"].get("schemaString") or "")


# in-commit timestamps

_ICT_ENABLED = "delta.enableInCommitTimestamps"
_ICT_PROVENANCE = ("delta.inCommitTimestampEnablementVersion", "delta.inCommitTimestampEnablementTimestamp")


def _ict_clean(snapshot: Snapshot) -> bool:
    config = _config(snapshot)
    return not _true(config, _ICT_ENABLED) and not any(k in config for k in _ICT_PROVENANCE)


def _ict_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if _ict_clean(snapshot):
        return False
    config = _config(snapshot)
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


# row tracking


def _rt_clean(snapshot: Snapshot) -> bool:
    config = _config(snapshot)
    if _true(config, row_tracking.ENABLE_PROPERTY) or not _true(config, row_tracking.SUSPENDED_PROPERTY):
        return False
    files = snapshot.files
    return files.column("base_row_id").null_count == len(files) and files.column(
        "default_row_commit_version"
    ).null_count == len(files)


def _rt_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if _rt_clean(snapshot):
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
        _record(done, txn.commit())
    return True


# domain metadata


def _dm_clean(snapshot: Snapshot) -> bool:
    return not any(not d.removed for d in snapshot.domains.values())


def _dm_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
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
    _record(done, txn.commit())
    return True


# check constraints


def _cc_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    names = sorted(
        k[len("delta.constraints.") :] for k in _config(snapshot) if k.startswith("delta.constraints.")
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


# column mapping

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


def _cm_uses(action: dict) -> bool:
    if "metaData" not in action:
        return False
    mode = (action["metaData"].get("configuration") or {}).get("delta.columnMapping.mode", "none")
    return str(mode).strip().lower() != "none"


def _cm_clean(snapshot: Snapshot) -> bool:
    if snapshot.column_mapping_mode != "none":
        return False
    return not any(k in f.metadata for f in iter_fields(snapshot.schema) for k in _MAPPING_KEYS)


def _cm_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    """REMOVE COLUMN MAPPING: one commit rewriting every file under the logical names (Parquet
    columns, partition values and statistics keyed by them) with the schema and properties
    stripped of column mapping; refused where a name needs mapping to be stored."""
    if _cm_clean(snapshot):
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
    _record(done, txn.commit())
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


# checkpoint protection


def _cp_remove(store: ObjectStore, snapshot: Snapshot, done: list) -> bool:
    if not _history_truncated_before(store, snapshot):
        _empty_commit_and_checkpoint(store, done, [])
        _clean_log(store, load_snapshot(store))
        if not _history_truncated_before(store, snapshot):
            raise FeatureDropError(
                f"cannot drop checkpointProtection from {store.root} yet: the history before version "
                f"{_protected_version(snapshot)} still holds traces of dropped features. It can be "
                f"dropped once that history is older than {TRUNCATE_RETENTION} "
                f"({_truncate_retention_text(snapshot)}); run this again then.",
                error_class="DELTA_FEATURE_DROP_CHECKPOINT_PROTECTION_WAIT_FOR_RETENTION_PERIOD",
                feature=CHECKPOINT_PROTECTION,
            )
    _unset(store, load_snapshot(store), [PROTECTED_BEFORE], done)
    return False


def _protected_version(snapshot: Snapshot) -> int:
    try:
        return int(_config(snapshot).get(PROTECTED_BEFORE, "0"))
    except ValueError:
        return snapshot.version + 1


def _history_truncated_before(store: ObjectStore, snapshot: Snapshot) -> bool:
    boundary = _protected_version(snapshot)
    if boundary <= 0:
        return True
    listing = list_log(store)  # one listing: the earliest commit and the earliest checkpoint
    earliest_commit = min(listing.commits, default=None)
    earliest_checkpoint = min(listing.checkpoints, default=None)
    return (
        earliest_checkpoint is not None
        and earliest_checkpoint >= boundary
        and (earliest_commit is None or earliest_commit >= boundary)
    )


REMOVABLE: dict[str, _Removal] = {
    "deletionVectors": _Removal(True, _dv_clean, _dv_remove, uses=_dv_uses),
    "v2Checkpoint": _Removal(True, _v2_clean, _v2_remove, uses=_v2_uses),
    "typeWidening": _Removal(True, _tw_clean, _tw_remove, uses=_tw_uses),
    "typeWidening-preview": _Removal(True, _tw_clean, _tw_remove, uses=_tw_uses),
    "vacuumProtocolCheck": _Removal(True, lambda s: True, lambda store, s, done: False),
    "inCommitTimestamp": _Removal(False, _ict_clean, _ict_remove),
    "rowTracking": _Removal(
        False,
        _rt_clean,
        _rt_remove,
        properties_at_downgrade=(
            row_tracking.ENABLE_PROPERTY,
            row_tracking.SUSPENDED_PROPERTY,
            *row_tracking.NAME_PROPERTIES,
        ),
    ),
    "columnMapping": _Removal(True, _cm_clean, _cm_remove, uses=_cm_uses),
    "domainMetadata": _Removal(False, _dm_clean, _dm_remove, needed_by=("rowTracking", "clustering")),
    "checkConstraints": _Removal(
        False,
        lambda s: not any(k.startswith("delta.constraints.") for k in s.metadata.configuration),
        _cc_remove,
    ),
    CHECKPOINT_PROTECTION: _Removal(
        False, lambda s: PROTECTED_BEFORE not in s.metadata.configuration, _cp_remove
    ),
}

# Features Delta Spark can drop that deltaplane cannot yet, and why.
_NOT_YET: dict[str, str] = {}


# --- the command --------------------------------------------------------------------------------


def drop_feature(
    store: ObjectStore, snapshot: Snapshot, feature: str, *, truncate_history: bool = False
) -> DropFeatureResult:
    """Remove ``feature`` from the protocol of the table ``snapshot`` is the latest version of
    (see the module docstring for the commits it makes)."""
    if not isinstance(feature, str) or not feature.strip():
        raise InvalidArgumentError(f"drop_feature() needs a feature name, got {feature!r}")
    feature = feature.strip()
    check_write_supported(snapshot.protocol, snapshot.metadata, snapshot.schema, store.root)
    removal = _removal_for(store, snapshot, feature, truncate_history)
    done: list[tuple[int, str]] = []
    checkpoints: list[int] = []
    changed = removal.remove_traces(store, snapshot, done)
    if truncate_history and removal.history:
        _empty_commit_and_checkpoint(store, done, checkpoints)
        if changed:
            raise FeatureDropError(
                f"dropping {feature} from {store.root} was partially successful: the latest version "
                f"no longer uses it, but older versions still do. Run this again once they are older "
                f"than {TRUNCATE_RETENTION} ({_truncate_retention_text(snapshot)}), or drop it now "
                "without truncate_history (older versions are then protected by checkpoints)",
                error_class="DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD",
                feature=feature,
            )
    elif removal.history:
        for _ in range(BARRIER_CHECKPOINTS):
            _empty_commit_and_checkpoint(store, done, checkpoints)
    latest = load_snapshot(store)
    if not removal.clean(latest):
        raise FeatureDropConflictError(
            f"cannot drop {feature} from {store.root}: a concurrent commit used it again after its "
            "traces were removed; run the drop again",
            feature=feature,
        )
    if truncate_history and removal.history:
        _clean_log(store, latest)
        version = _history_use(store, latest, removal)
        if version is not None:
            raise FeatureDropError(
                f"cannot drop {feature} from {store.root}: version {version} of its history still uses "
                f"it. Wait until the history is older than the log retention "
                f"(delta.logRetentionDuration={latest.properties.log_retention_ms // 3_600_000} hours), "
                f"or than {TRUNCATE_RETENTION} ({_truncate_retention_text(latest)}) and run this again",
                error_class="DELTA_FEATURE_DROP_HISTORICAL_VERSIONS_EXIST",
                feature=feature,
            )
    result, protocol = _downgrade(store, latest, feature, removal, truncate_history, done)
    if removal.history and not truncate_history:
        checkpoints.append(write_checkpoint(store, result.version, result.snapshot).version)
    return DropFeatureResult(
        feature=feature,
        version=result.version,
        protocol=protocol,
        truncate_history=truncate_history,
        commits=tuple(done),
        checkpoints=tuple(checkpoints),
        commit=result,
    )


def _removal_for(store: ObjectStore, snapshot: Snapshot, feature: str, truncate_history: bool) -> _Removal:
    present = _features_in(snapshot.protocol)
    lowered = feature.lower()
    if (
        feature not in present
        and lowered.startswith("delta.")
        and lowered[len("delta.") :] in {k.lower() for k in KNOWN_DELTA_PROPERTIES}
    ):
        raise FeatureDropError(
            f"cannot drop `{feature}` from {store.root}: it is a table property, not a table feature "
            "(unset it with dt.alter.unset_table_properties)",
            error_class="DELTA_FEATURE_DROP_FEATURE_IS_DELTA_PROPERTY",
            feature=feature,
        )
    if feature not in FEATURES:
        raise FeatureDropError(
            f"cannot drop {feature} from {store.root}: no table feature has that name "
            f"(known: {', '.join(sorted(FEATURES))})",
            error_class="DELTA_FEATURE_DROP_UNSUPPORTED_CLIENT_FEATURE",
            feature=feature,
        )
    if feature not in present:
        raise FeatureDropError(
            f"cannot drop {feature} from {store.root}: it is not in the table's protocol "
            f"({', '.join(sorted(present)) or 'no features'})",
            error_class="DELTA_FEATURE_DROP_FEATURE_NOT_PRESENT",
            feature=feature,
        )
    if feature in _NOT_YET:
        raise FeatureDropError(
            f"cannot drop {feature} from {store.root} with deltaplane: {_NOT_YET[feature]}",
            error_class="DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE",
            feature=feature,
        )
    removal = REMOVABLE.get(feature)
    if removal is None:
        raise FeatureDropError(
            f"cannot drop {feature} from {store.root}: dropping this feature is not supported "
            f"(removable: {', '.join(sorted(REMOVABLE))})",
            error_class="DELTA_FEATURE_DROP_NONREMOVABLE_FEATURE",
            feature=feature,
        )
    if truncate_history and not (removal.history or feature == CHECKPOINT_PROTECTION):
        raise FeatureDropError(
            f"{feature} does not need its history truncated to be dropped: drop it without truncate_history",
            error_class="DELTA_FEATURE_DROP_HISTORY_TRUNCATION_NOT_ALLOWED",
            feature=feature,
        )
    if feature == CHECKPOINT_PROTECTION and not truncate_history:
        raise FeatureDropError(
            "checkpointProtection can only be dropped by truncating the history before "
            f"{PROTECTED_BEFORE}: run it with truncate_history=True",
            error_class="DELTA_FEATURE_CAN_ONLY_DROP_CHECKPOINT_PROTECTION_WITH_HISTORY_TRUNCATION",
            feature=feature,
        )
    dependents = sorted(f for f in removal.needed_by if f in present)
    if dependents:
        raise FeatureDropError(
            f"cannot drop {feature} from {store.root}: {', '.join(dependents)} in this table depend on "
            "it; drop them first",
            error_class="DELTA_FEATURE_DROP_DEPENDENT_FEATURE",
            feature=feature,
        )
    return removal


def _empty_commit_and_checkpoint(store: ObjectStore, done: list, checkpoints: list) -> None:
    latest = load_snapshot(store)
    result = Transaction(store, latest, operation="Empty Commit", operation_parameters={}).commit()
    _record(done, result)
    checkpoints.append(write_checkpoint(store, result.version).version)


def _downgrade(
    store: ObjectStore,
    snapshot: Snapshot,
    feature: str,
    removal: _Removal,
    truncate_history: bool,
    done: list,
) -> tuple[CommitResult, Protocol]:
    protocol = protocol_without(snapshot.protocol, feature)
    configuration = {
        k: v for k, v in snapshot.metadata.configuration.items() if k not in removal.properties_at_downgrade
    }
    if removal.history and not truncate_history:
        protocol = normalized_protocol(_features_in(protocol) | {CHECKPOINT_PROTECTION})
        configuration[PROTECTED_BEFORE] = str(snapshot.version + 1)
    txn = Transaction(
        store,
        snapshot,
        operation="DROP FEATURE",
        operation_parameters={
            "featureName": feature,
            "truncateHistory": "true" if truncate_history else "false",
        },
        isolation_level="Serializable",
    )
    txn.read_whole_table()  # a concurrent write could bring the feature back: it must conflict
    txn.update_protocol(protocol)
    txn.update_metadata(dataclasses.replace(snapshot.metadata, configuration=configuration))
    if feature == "rowTracking" and row_tracking.DOMAIN in snapshot.domains:
        txn.set_domain_metadata(dataclasses.replace(snapshot.domains[row_tracking.DOMAIN], removed=True))
    result = txn.commit()
    _record(done, result)
    return result, protocol


def _truncate_retention_ms(snapshot: Snapshot) -> int:
    return parse_interval_ms(_config(snapshot).get(TRUNCATE_RETENTION, TRUNCATE_RETENTION_DEFAULT))


def _truncate_retention_text(snapshot: Snapshot) -> str:
    return _config(snapshot).get(TRUNCATE_RETENTION, TRUNCATE_RETENTION_DEFAULT)


def _clean_log(store: ObjectStore, snapshot: Snapshot) -> None:
    """Log cleanup with the short truncation retention, cut at the minute (Delta Spark's)."""
    plan = plan_log_cleanup(
        store,
        snapshot,
        retention_ms=min(_truncate_retention_ms(snapshot), snapshot.properties.log_retention_ms),
        enforce_retention=False,
        granularity_ms=MINUTE_MS,
    )
    execute_log_cleanup(store, plan)


def _history_use(store: ObjectStore, snapshot: Snapshot, removal: _Removal) -> int | None:
    """The first version left in the log whose commit (or the earliest checkpoint's state) uses
    the feature, or None."""
    listing = list_log(store)
    earliest_checkpoint = min(listing.checkpoints, default=None)
    if earliest_checkpoint is not None:
        old = load_snapshot(store, earliest_checkpoint)
        metadata = {
            "metaData": {
                "configuration": old.metadata.configuration,
                "schemaString": old.metadata.schema_string,
            }
        }
        if removal.uses(metadata) or (removal is REMOVABLE["deletionVectors"] and _has_dvs(old)):
            return earliest_checkpoint
        v2 = removal is REMOVABLE["v2Checkpoint"]
        if v2 and any(_is_v2_checkpoint(store, c) for c in listing.checkpoints[earliest_checkpoint]):
            return earliest_checkpoint
    for version in sorted(listing.commits):
        if version > snapshot.version:
            break
        for line in store.get(commit_key(version)).splitlines():
            if line.strip() and removal.uses(json.loads(line)):
                return version
    return None


# --- ADD FEATURE ----------------------------------------------------------------------------------

_ALIASES = {  # delta-rs's TableFeatures names that are not ours in another case
    "timestampwithouttimezone": "timestampNtz",
    "varianttypepreview": "variantType-preview",
}


def feature_names(features: Any) -> list[str]:
    """Protocol feature names from names (any case) or delta-rs ``TableFeatures`` members."""
    items = [features] if isinstance(features, str) or not isinstance(features, Iterable) else list(features)
    if not items:
        raise InvalidArgumentError("add_feature() needs at least one feature name")
    by_lower = {name.lower(): name for name in FEATURES}
    out = []
    for item in items:
        text = str(getattr(item, "value", item)).strip()
        if type(item).__name__ == "TableFeatures":  # delta-rs's enum: "TableFeatures.DeletionVectors"
            text = text.rsplit(".", 1)[-1]
        name = _ALIASES.get(text.lower()) or by_lower.get(text.lower())
        if name is None:
            raise InvalidArgumentError(
                f"no table feature is named {text!r} (known: {', '.join(sorted(FEATURES))})"
            )
        if name not in out:
            out.append(name)
    return out


def add_feature(
    store: ObjectStore, snapshot: Snapshot, features: Any, *, allow_protocol_versions_increase: bool = False
) -> CommitResult:
    """Add table features to the protocol (Delta Spark's ``delta.feature.<name> = supported``, one
    ``SET TBLPROPERTIES`` commit). Nothing is committed when the protocol has them all. A change
    that raises the protocol's versions (a legacy protocol becoming writer 7) needs
    ``allow_protocol_versions_increase`` (delta-rs's rule): older clients stop writing it."""
    from deltaplane.engine.commands.alter import set_table_properties
    from deltaplane.engine.commands.context import union_protocol

    names = feature_names(features)
    if set(names) <= _features_in(snapshot.protocol):
        return CommitResult(snapshot.version, "SET TBLPROPERTIES", {}, skipped=True)
    wanted = normalized_protocol(_features_in(snapshot.protocol) | set(names))
    after = union_protocol(snapshot.protocol, wanted)
    current = snapshot.protocol
    raised = (
        after.min_reader_version > current.min_reader_version
        or after.min_writer_version > current.min_writer_version
    )
    if raised and not allow_protocol_versions_increase:
        raise InvalidArgumentError(
            f"adding {', '.join(names)} to {store.root} raises its protocol from reader "
            f"{current.min_reader_version} / writer {current.min_writer_version} to reader "
            f"{after.min_reader_version} / writer {after.min_writer_version}, which older clients "
            "cannot read or write; pass allow_protocol_versions_increase=True to do it"
        )
    return set_table_properties(store, snapshot, {f"delta.feature.{n}": "supported" for n in names})


__all__ = [
    "BARRIER_CHECKPOINTS",
    "REMOVABLE",
    "DropFeatureResult",
    "add_feature",
    "drop_feature",
    "feature_names",
    "normalized_protocol",
    "protocol_without",
]
