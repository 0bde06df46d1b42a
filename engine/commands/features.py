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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from deltaplane.engine import row_tracking
from deltaplane.engine.actions import Protocol
from deltaplane.engine.checkpoint_writer import write_checkpoint
from deltaplane.engine.commands.feature_removal import (
    Removal,
    cc_remove,
    cm_clean,
    cm_remove,
    cm_uses,
    configuration_of,
    dm_clean,
    dm_remove,
    dv_clean,
    dv_remove,
    dv_uses,
    has_dvs,
    ict_clean,
    ict_remove,
    is_v2_checkpoint,
    record_commit,
    rt_clean,
    rt_remove,
    tw_clean,
    tw_remove,
    tw_uses,
    unset_properties,
    v2_clean,
    v2_remove,
    v2_uses,
)
from deltaplane.engine.commands.log_cleanup import execute_log_cleanup, plan_log_cleanup
from deltaplane.engine.errors import FeatureDropConflictError, FeatureDropError, InvalidArgumentError
from deltaplane.engine.log.files import commit_key
from deltaplane.engine.log.segment import list_log
from deltaplane.engine.snapshot import Snapshot, load_snapshot
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_features import (
    FEATURES,
    check_write_supported,
    reader_features,
    writer_features,
)
from deltaplane.engine.table_properties import KNOWN_DELTA_PROPERTIES, parse_interval_ms
from deltaplane.engine.transaction import CommitResult, Transaction

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


# deletion vectors


# v2 checkpoints


# type widening


# in-commit timestamps


# row tracking


# domain metadata


# check constraints


# column mapping


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
    unset_properties(store, load_snapshot(store), [PROTECTED_BEFORE], done)
    return False


def _protected_version(snapshot: Snapshot) -> int:
    try:
        return int(configuration_of(snapshot).get(PROTECTED_BEFORE, "0"))
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


REMOVABLE: dict[str, Removal] = {
    "deletionVectors": Removal(True, dv_clean, dv_remove, uses=dv_uses),
    "v2Checkpoint": Removal(True, v2_clean, v2_remove, uses=v2_uses),
    "typeWidening": Removal(True, tw_clean, tw_remove, uses=tw_uses),
    "typeWidening-preview": Removal(True, tw_clean, tw_remove, uses=tw_uses),
    "vacuumProtocolCheck": Removal(True, lambda s: True, lambda store, s, done: False),
    "inCommitTimestamp": Removal(False, ict_clean, ict_remove),
    "rowTracking": Removal(
        False,
        rt_clean,
        rt_remove,
        properties_at_downgrade=(
            row_tracking.ENABLE_PROPERTY,
            row_tracking.SUSPENDED_PROPERTY,
            *row_tracking.NAME_PROPERTIES,
        ),
    ),
    "columnMapping": Removal(True, cm_clean, cm_remove, uses=cm_uses),
    "domainMetadata": Removal(False, dm_clean, dm_remove, needed_by=("rowTracking", "clustering")),
    "checkConstraints": Removal(
        False,
        lambda s: not any(k.startswith("delta.constraints.") for k in s.metadata.configuration),
        cc_remove,
    ),
    CHECKPOINT_PROTECTION: Removal(
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


def _removal_for(store: ObjectStore, snapshot: Snapshot, feature: str, truncate_history: bool) -> Removal:
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
    record_commit(done, result)
    checkpoints.append(write_checkpoint(store, result.version).version)


def _downgrade(
    store: ObjectStore,
    snapshot: Snapshot,
    feature: str,
    removal: Removal,
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
    record_commit(done, result)
    return result, protocol


def _truncate_retention_ms(snapshot: Snapshot) -> int:
    return parse_interval_ms(configuration_of(snapshot).get(TRUNCATE_RETENTION, TRUNCATE_RETENTION_DEFAULT))


def _truncate_retention_text(snapshot: Snapshot) -> str:
    return configuration_of(snapshot).get(TRUNCATE_RETENTION, TRUNCATE_RETENTION_DEFAULT)


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


def _history_use(store: ObjectStore, snapshot: Snapshot, removal: Removal) -> int | None:
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
        if removal.uses(metadata) or (removal is REMOVABLE["deletionVectors"] and has_dvs(old)):
            return earliest_checkpoint
        v2 = removal is REMOVABLE["v2Checkpoint"]
        if v2 and any(is_v2_checkpoint(store, c) for c in listing.checkpoints[earliest_checkpoint]):
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
