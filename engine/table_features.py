"""Table features: which protocol versions and features this engine can read (and later write).

The read gate is checked when a snapshot is loaded, before any data is touched: a table that
needs something we cannot honour is refused with a ``ProtocolError`` naming the feature, rather
than read wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.actions import Protocol
from engine.errors import ProtocolError


@dataclass(frozen=True)
class Feature:
    name: str
    reader_writer: bool  # False: writer-only
    legacy_versions: tuple[int, int] | None  # (reader, writer) that implies it before features


FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("appendOnly", False, (1, 2)),
        Feature("invariants", False, (1, 2)),
        Feature("checkConstraints", False, (1, 3)),
        Feature("changeDataFeed", False, (1, 4)),
        Feature("generatedColumns", False, (1, 4)),
        Feature("columnMapping", True, (2, 5)),
        Feature("identityColumns", False, (1, 6)),
        Feature("allowColumnDefaults", False, None),
        Feature("deletionVectors", True, None),
        Feature("rowTracking", False, None),
        Feature("timestampNtz", True, None),
        Feature("domainMetadata", False, None),
        Feature("v2Checkpoint", True, None),
        Feature("catalogManaged", True, None),
        Feature("icebergCompatV1", False, None),
        Feature("icebergCompatV2", False, None),
        Feature("icebergCompatV3", False, None),
        Feature("clustering", False, None),
        Feature("vacuumProtocolCheck", True, None),
        Feature("inCommitTimestamp", False, None),
        Feature("typeWidening", True, None),
        Feature("typeWidening-preview", True, None),
        Feature("variantType", True, None),
        Feature("variantType-preview", True, None),
        Feature("variantShredding", True, None),
        Feature("variantShredding-preview", True, None),
        Feature("checkpointProtection", False, None),
        Feature("materializePartitionColumns", False, None),
    )
}

MAX_READER_VERSION = 3

# Reader features whose read-side rules this engine implements.
READABLE_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
    }
)

_WHY_NOT = {
    "catalogManaged": "commits go through a catalog this engine cannot talk to",
    "variantShredding": "shredded variant columns are not reassembled by this reader",
    "variantShredding-preview": "shredded variant columns are not reassembled by this reader",
}


def check_read_supported(protocol: Protocol, table: str = "") -> None:
    """Raise ``ProtocolError`` unless every reader requirement of ``protocol`` is honoured."""
    where = f" {table}" if table else ""
    reader = protocol.min_reader_version
    if not isinstance(reader, int) or reader < 1:
        raise ProtocolError(f"invalid minReaderVersion {reader!r}{where}")
    if reader > MAX_READER_VERSION:
        raise ProtocolError(
            f"table{where} requires reader version {reader}; deltaplane reads up to {MAX_READER_VERSION}"
        )
    if reader < 3:
        return
    for name in protocol.reader_features or []:
        if name not in READABLE_FEATURES:
            reason = _WHY_NOT.get(name, "unknown or unsupported reader feature")
            raise ProtocolError(f"table{where} requires reader feature {name!r}: {reason}", feature=name)


def reader_features(protocol: Protocol) -> set[str]:
    """The reader-side features in effect, legacy protocol versions included."""
    if protocol.min_reader_version >= 3:
        return set(protocol.reader_features or [])
    return {"columnMapping"} if protocol.min_reader_version == 2 else set()


def writer_features(protocol: Protocol) -> set[str]:
    """The writer-side features in effect, legacy protocol versions included."""
    if protocol.min_writer_version >= 7:
        return set(protocol.writer_features or [])
    return {
        f.name
        for f in FEATURES.values()
        if f.legacy_versions is not None and f.legacy_versions[1] <= protocol.min_writer_version
    }
