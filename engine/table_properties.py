"""Typed access to ``delta.*`` table properties, with the protocol's defaults.

Properties live in ``metaData.configuration`` as strings. Parsing happens here once, with clear
errors for malformed values, so the rest of the engine never handles raw strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from deltaplane.engine.errors import DeltaError

_INTERVAL = re.compile(
    r"^\s*(?:interval\s+)?(-?\d+)\s*(nanoseconds?|microseconds?|milliseconds?|seconds?|minutes?|"
    r"hours?|days?|weeks?)\s*$",
    re.IGNORECASE,
)
_UNIT_MS = {
    "nanosecond": 1e-6,
    "microsecond": 1e-3,
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


class InvalidPropertyError(DeltaError):
    """A ``delta.*`` table property has a value that cannot be parsed, or a name no Delta client
    knows (a typo would otherwise silently do nothing)."""


# Every table property the Delta protocol and Delta Spark define (names after ``delta.``), and
# deltaplane's own. Checked when a table is created or altered, never when one is read: tables
# from other writers may carry anything.
KNOWN_DELTA_PROPERTIES = frozenset(
    {
        "appendOnly",
        "autoOptimize",
        "autoOptimize.autoCompact",
        "autoOptimize.optimizeWrite",
        "castIcebergTimeType",
        "checkpoint.writeStatsAsJson",
        "checkpoint.writeStatsAsStruct",
        "checkpointInterval",
        "checkpointPolicy",
        "checkpointRetentionDuration",
        "columnMapping.maxColumnId",
        "columnMapping.mode",
        "compatibility.symlinkFormatManifest.enabled",
        "coordinatedCommits.commitCoordinator-preview",
        "coordinatedCommits.commitCoordinatorConf-preview",
        "coordinatedCommits.tableConf-preview",
        "dataSkippingNumIndexedCols",
        "dataSkippingStatsColumns",
        "dataSkippingStringPrefixLength",
        "deletedFileRetentionDuration",
        "dropFeatureTruncateHistory.retentionDuration",
        "enableChangeDataCapture",
        "enableChangeDataFeed",
        "enableDeletionVectors",
        "enableExpiredLogCleanup",
        "enableFullRetentionRollback",
        "enableIcebergCompatV1",
        "enableIcebergCompatV2",
        "enableIcebergCompatV3",
        "enableInCommitTimestamps",
        "enableMaterializePartitionColumnsFeature",
        "enableRowTracking",
        "enableTypeWidening",
        "enableVariantShredding",
        "ignoreIcebergBucketPartition",
        "ignoreProtocolDefaults",
        "inCommitTimestampEnablementTimestamp",
        "inCommitTimestampEnablementVersion",
        "isolationLevel",
        "lastCommitTimestamp",
        "lastUpdateVersion",
        "logRetentionDuration",
        "minReaderVersion",
        "minWriterVersion",
        "parquet.compression.codec",
        "parquet.format.version",
        "randomPrefixLength",
        "randomizeFilePrefixes",
        "redirectReaderWriter-preview",
        "redirectWriterOnly-preview",
        "requireCheckpointProtectionBeforeVersion",
        "rowTracking.materializedRowCommitVersionColumnName",
        "rowTracking.materializedRowIdColumnName",
        "rowTrackingSuspended",
        "sampleRetentionDuration",
        "setTransactionRetentionDuration",
        "targetFileSize",
        "tuneFileSizesForRewrites",
        "universalFormat.enabledFormats",
        "universalFormat.iceberg.atomicConversion.supported",
        "writePartitionColumnsToParquet",
    }
)
# Families of names: one property per constraint, per table feature, per UniForm setting.
KNOWN_DELTA_PREFIXES = ("constraints.", "feature.", "universalFormat.config.")
KNOWN_DELTAPLANE_PROPERTIES = frozenset(
    {
        "deltaplane.autoCompact.maxFileSize",
        "deltaplane.autoCompact.minNumFiles",
        "deltaplane.dml.rewriteThreshold",
        "deltaplane.dml.strategy",
    }
)


def check_property_names(configuration: Mapping[str, str], table: str) -> None:
    """Refuse ``delta.*`` and ``deltaplane.*`` names that nothing reads (other namespaces are the
    user's own and pass). The error suggests the closest known name."""
    import difflib

    for key in configuration:
        lowered = key.lower()
        if lowered.startswith("delta."):
            name = key[len("delta.") :]
            if name in KNOWN_DELTA_PROPERTIES or name.startswith(KNOWN_DELTA_PREFIXES):
                if name.startswith(KNOWN_DELTA_PREFIXES) and name.endswith("."):
                    raise InvalidPropertyError(
                        f"table property {key!r} of {table} has no name after the prefix"
                    )
                continue
            known = [f"delta.{n}" for n in sorted(KNOWN_DELTA_PROPERTIES)]
        elif lowered.startswith("deltaplane."):
            if key in KNOWN_DELTAPLANE_PROPERTIES:
                continue
            known = sorted(KNOWN_DELTAPLANE_PROPERTIES)
        else:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6) or difflib.get_close_matches(
            key.lower(), [k.lower() for k in known], n=1, cutoff=0.6
        )
        if close:
            close = [k for k in known if k.lower() == close[0].lower()][:1] or close
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidPropertyError(f"unknown table property {key!r} for {table}{hint}")


def parse_interval_ms(text: str) -> int:
    """``"interval 7 days"`` (Spark's CalendarInterval form) or ``"7 days"`` to milliseconds."""
    m = _INTERVAL.match(text)
    if not m:
        raise InvalidPropertyError(f"cannot parse interval {text!r}")
    unit = m.group(2).lower().rstrip("s")
    return int(int(m.group(1)) * _UNIT_MS[unit])


def _bool(value: str, key: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise InvalidPropertyError(f"{key} must be true or false, got {value!r}")


def _int(value: str, key: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidPropertyError(f"{key} must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class TableProperties:
    """The configuration map of a table, read through typed properties."""

    raw: Mapping[str, str]

    def _get(self, key: str) -> str | None:
        return self.raw.get(key)

    def _bool(self, key: str, default: bool) -> bool:
        value = self._get(key)
        return default if value is None else _bool(value, key)

    def _int(self, key: str, default: int) -> int:
        value = self._get(key)
        return default if value is None else _int(value, key)

    def _interval(self, key: str, default: str) -> int:
        value = self._get(key)
        return parse_interval_ms(default if value is None else value)

    @property
    def checkpoint_interval(self) -> int:
        value = self._int("delta.checkpointInterval", 10)
        if value <= 0:
            raise InvalidPropertyError("delta.checkpointInterval must be positive")
        return value

    @property
    def log_retention_ms(self) -> int:
        return self._interval("delta.logRetentionDuration", "interval 30 days")

    @property
    def deleted_file_retention_ms(self) -> int:
        return self._interval("delta.deletedFileRetentionDuration", "interval 1 weeks")

    @property
    def enable_expired_log_cleanup(self) -> bool:
        return self._bool("delta.enableExpiredLogCleanup", True)

    @property
    def append_only(self) -> bool:
        return self._bool("delta.appendOnly", False)

    @property
    def enable_deletion_vectors(self) -> bool:
        return self._bool("delta.enableDeletionVectors", False)

    @property
    def enable_type_widening(self) -> bool:
        return self._bool("delta.enableTypeWidening", False)

    @property
    def enable_change_data_feed(self) -> bool:
        return self._bool("delta.enableChangeDataFeed", False)

    @property
    def enable_in_commit_timestamps(self) -> bool:
        return self._bool("delta.enableInCommitTimestamps", False)

    @property
    def in_commit_timestamp_enablement_version(self) -> int | None:
        value = self._get("delta.inCommitTimestampEnablementVersion")
        return None if value is None else _int(value, "delta.inCommitTimestampEnablementVersion")

    @property
    def in_commit_timestamp_enablement_timestamp(self) -> int | None:
        value = self._get("delta.inCommitTimestampEnablementTimestamp")
        return None if value is None else _int(value, "delta.inCommitTimestampEnablementTimestamp")

    @property
    def column_mapping_mode(self) -> str:
        value = (self._get("delta.columnMapping.mode") or "none").strip().lower()
        if value not in ("none", "name", "id"):
            raise InvalidPropertyError(f"delta.columnMapping.mode must be none, name or id: {value!r}")
        return value

    @property
    def data_skipping_num_indexed_cols(self) -> int:
        return self._int("delta.dataSkippingNumIndexedCols", 32)

    @property
    def data_skipping_stats_columns(self) -> list[str] | None:
        value = self._get("delta.dataSkippingStatsColumns")
        if value is None:
            return None
        from deltaplane.engine.schema import split_name_list

        return split_name_list(value)

    @property
    def checkpoint_policy(self) -> str:
        return (self._get("delta.checkpointPolicy") or "classic").strip().lower()

    @property
    def isolation_level(self) -> str:
        return self._get("delta.isolationLevel") or "WriteSerializable"

    @property
    def target_file_size(self) -> int | None:
        value = self._get("delta.targetFileSize")
        return None if value is None else _int(value, "delta.targetFileSize")
