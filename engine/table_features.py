"""Table features: which protocol versions and features this engine can read (and later write).

The read gate is checked when a snapshot is loaded, before any data is touched: a table that
needs something we cannot honour is refused with a ``ProtocolError`` naming the feature, rather
than read wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltaplane.engine.actions import Metadata, Protocol
from deltaplane.engine.errors import ProtocolError
from deltaplane.engine.schema import PrimitiveType, StructType, iter_fields, iter_types
from deltaplane.engine.table_properties import TableProperties


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
        Feature("geospatial", True, None),
        Feature("geospatial-dev", True, None),
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
        "variantShredding",
        "variantShredding-preview",
        "geospatial",
        "geospatial-dev",
    }
)

_WHY_NOT = {
    "catalogManaged": "commits go through a catalog this engine cannot talk to",
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


# --- writing --------------------------------------------------------------------------------

# Features whose writer-side rules this engine implements (or that impose none on appends and
# overwrites). Anything else active on a table makes it read-only for deltaplane.
WRITABLE_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "allowColumnDefaults",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "domainMetadata",
        "clustering",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "inCommitTimestamp",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "checkpointProtection",
        "materializePartitionColumns",
        "rowTracking",
    }
)
MAX_WRITER_VERSION = 7
_READER_WRITER_V3 = (
    "deletionVectors",
    "timestampNtz",
    "typeWidening",
    "variantType",
    "v2Checkpoint",
    "vacuumProtocolCheck",
)


def active_features(protocol: Protocol, metadata: Metadata, schema: StructType) -> set[str]:
    """Writer features the table actually uses (supported by the protocol and switched on)."""
    props = TableProperties(metadata.configuration)
    features = writer_features(protocol)
    fields = list(iter_fields(schema))
    checks = {
        "appendOnly": props.append_only,
        "invariants": any("delta.invariants" in f.metadata for f in fields),
        "checkConstraints": any(k.startswith("delta.constraints.") for k in metadata.configuration),
        "changeDataFeed": props.enable_change_data_feed,
        "generatedColumns": any("delta.generationExpression" in f.metadata for f in fields),
        "identityColumns": any(any(k.startswith("delta.identity.") for k in f.metadata) for f in fields),
        "columnMapping": props.column_mapping_mode != "none",
    }
    return {name for name in features if checks.get(name, True)}


def check_write_supported(
    protocol: Protocol, metadata: Metadata, schema: StructType, table: str = ""
) -> None:
    """Raise ``ProtocolError`` unless deltaplane can write this table correctly."""
    check_read_supported(protocol, table)
    where = f" {table}" if table else ""
    if protocol.min_writer_version > MAX_WRITER_VERSION:
        raise ProtocolError(
            f"table{where} requires writer version {protocol.min_writer_version}; deltaplane writes up to 7"
        )
    for name in sorted(active_features(protocol, metadata, schema)):
        if name not in WRITABLE_FEATURES:
            raise ProtocolError(
                f"table{where} uses writer feature {name!r}, which deltaplane cannot write yet; "
                "it can still be read",
                feature=name,
            )


# Properties that set the protocol instead of being stored in the table's configuration.
PROTOCOL_PROPERTY_PREFIX = "delta.feature."
PROTOCOL_VERSION_PROPERTIES = ("delta.minReaderVersion", "delta.minWriterVersion")


def requested_features(configuration: dict[str, str]) -> set[str]:
    """Features asked for with ``delta.feature.<name> = supported`` (Delta Spark's syntax)."""
    out = set()
    for key, value in configuration.items():
        if not key.startswith(PROTOCOL_PROPERTY_PREFIX):
            continue
        name = key[len(PROTOCOL_PROPERTY_PREFIX) :]
        if str(value).strip().lower() not in ("supported", "enabled"):
            raise ProtocolError(f"{key} must be 'supported', got {value!r}", feature=name)
        if name not in FEATURES:
            known = ", ".join(sorted(FEATURES))
            raise ProtocolError(f"{key}: no table feature is named {name!r} (known: {known})", feature=name)
        out.add(name)
    return out


def requested_versions(configuration: dict[str, str]) -> tuple[int, int]:
    """``delta.minReaderVersion`` / ``delta.minWriterVersion``: legacy versions only (table
    features are asked for by name)."""
    out = []
    for key, default, highest in zip(PROTOCOL_VERSION_PROPERTIES, (1, 2), (2, 6), strict=True):
        value = configuration.get(key)
        if value is None:
            out.append(default)
            continue
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ProtocolError(f"{key} must be an integer, got {value!r}") from None
        if not 1 <= number <= highest:
            raise ProtocolError(
                f"{key}={number}: deltaplane sets legacy versions up to {highest} this way; ask for "
                "table features by name with delta.feature.<name>=supported"
            )
        out.append(number)
    return out[0], out[1]


def table_configuration(configuration: dict[str, str]) -> dict[str, str]:
    """What is stored in ``metaData.configuration``: without the protocol-setting properties."""
    return {
        k: v
        for k, v in configuration.items()
        if not k.startswith(PROTOCOL_PROPERTY_PREFIX) and k not in PROTOCOL_VERSION_PROPERTIES
    }


def minimal_protocol(schema: StructType, configuration: dict[str, str]) -> Protocol:
    """The lowest protocol that supports what the schema and properties ask for.

    Legacy versions when they suffice (so older readers can read the table); reader 3 / writer 7
    with explicit feature lists when a feature exists only as a table feature.
    """
    props = TableProperties(configuration)
    fields = list(iter_fields(schema))
    types = [t for f in schema.fields for t in iter_types(f.type)]
    wanted: set[str] = set()
    if props.append_only:
        wanted.add("appendOnly")
    if any("delta.invariants" in f.metadata for f in fields):
        wanted.add("invariants")
    if any(k.startswith("delta.constraints.") for k in configuration):
        wanted.add("checkConstraints")
    if props.enable_change_data_feed:
        wanted.add("changeDataFeed")
    if any("delta.generationExpression" in f.metadata for f in schema.fields):
        wanted.add("generatedColumns")
    if any("delta.identity.start" in f.metadata for f in schema.fields):
        wanted.add("identityColumns")
    if any("CURRENT_DEFAULT" in f.metadata for f in schema.fields):
        wanted.add("allowColumnDefaults")  # a table feature only: writer 7
    if props.column_mapping_mode != "none":
        wanted.add("columnMapping")
    if props.enable_deletion_vectors:
        wanted.add("deletionVectors")
    if PrimitiveType("timestamp_ntz") in types:
        wanted.add("timestampNtz")
    if PrimitiveType("variant") in types:
        wanted.add("variantType")
    if props.enable_in_commit_timestamps:
        wanted.add("inCommitTimestamp")
    if configuration.get("delta.enableTypeWidening", "").lower() == "true":
        wanted.add("typeWidening")
    if props.checkpoint_policy == "v2":
        wanted.add("v2Checkpoint")
    explicit = requested_features(configuration)
    for name in sorted(explicit - WRITABLE_FEATURES):
        raise ProtocolError(
            f"deltaplane cannot create or upgrade tables to the {name!r} feature yet (delta.feature.{name})",
            feature=name,
        )
    wanted |= explicit
    if "clustering" in wanted:  # the clustering columns live in a metadata domain
        wanted.add("domainMetadata")
    if configuration.get("delta.enableRowTracking", "").lower() == "true":
        wanted.add("rowTracking")
    if "rowTracking" in wanted:  # the row id high-water mark lives in a metadata domain
        wanted.add("domainMetadata")
    unsupported = {
        "delta.enableIcebergCompatV2": "icebergCompatV2",
    }
    for key, feature in unsupported.items():
        if configuration.get(key, "").lower() == "true":
            message = f"deltaplane cannot create tables with {feature} yet ({key})"
            raise ProtocolError(message, feature=feature)

    legacy_only = not explicit and all(FEATURES[f].legacy_versions is not None for f in wanted)
    at_least = requested_versions(configuration)
    if legacy_only:
        reader = max([1, at_least[0], *(FEATURES[f].legacy_versions[0] for f in wanted)])
        writer = max([2, at_least[1], *(FEATURES[f].legacy_versions[1] for f in wanted)])
        return Protocol(reader, writer)
    needs_reader_3 = any(f in _READER_WRITER_V3 for f in wanted)
    reader_side = sorted(f for f in wanted if FEATURES[f].reader_writer)
    if needs_reader_3:
        return Protocol(3, 7, reader_side, sorted(wanted))
    reader = 2 if "columnMapping" in wanted else 1
    return Protocol(reader, 7, None, sorted(wanted))
