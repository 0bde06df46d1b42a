"""Row tracking (the ``rowTracking`` writer feature): row ids and row commit versions.

Every row of a row-tracking table has a **row id**, unique in the table and kept for the row's
whole life, and a **row commit version**, the version that last inserted or updated it. Both are
stored cheaply, per file (the protocol's "Row Tracking" section):

* every ``add`` carries ``baseRowId`` and ``defaultRowCommitVersion``; a row's *fresh* id is
  ``baseRowId`` plus its physical position in the file (rows hidden by a deletion vector count),
  its fresh commit version is the file's ``defaultRowCommitVersion``;
* the highest fresh id ever handed out, the high-water mark, is the ``delta.rowTracking``
  metadata domain (``{"rowIdHighWaterMark": N}``), moved in the commit that uses the ids;
* a file that holds rows copied from another file (OPTIMIZE, copy-on-write DML) stores their
  old values in two hidden columns, named by the table's configuration
  (``delta.rowTracking.materializedRowIdColumnName`` and
  ``...materializedRowCommitVersionColumnName``, generated once as Delta Spark does); a non-null
  value there wins over the fresh one. Updated rows keep their id and get a null (that is, new)
  commit version; inserted rows get nulls in both.

What sits where: ids and versions are assigned by the transaction when it writes the commit
(``assign``, at every attempt, so a retry after losing a race takes the winner's high-water
mark and the next version); rewrites read each row's stable values with the scan
(``Scan.read_files_with_positions`` returns them as ``FileRows.lineage``, under the
materialized column names) and hand them to the data-file writer, which writes them into the new
files. A table where the feature is *supported* but not *enabled* gets fresh ids and versions
only (the protocol forbids relying on them there); ``delta.rowTrackingSuspended`` stops both.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import (
    Add,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    row_tags,
)
from deltaplane.engine.errors import DeltaError, InvalidArgumentError, ProtocolError

FEATURE = "rowTracking"
DOMAIN = "delta.rowTracking"
ENABLE_PROPERTY = "delta.enableRowTracking"
SUSPENDED_PROPERTY = "delta.rowTrackingSuspended"
ROW_ID_NAME_PROPERTY = "delta.rowTracking.materializedRowIdColumnName"
COMMIT_VERSION_NAME_PROPERTY = "delta.rowTracking.materializedRowCommitVersionColumnName"
NAME_PROPERTIES = (ROW_ID_NAME_PROPERTY, COMMIT_VERSION_NAME_PROPERTY)
_PREFIXES = ("_row-id-col-", "_row-commit-version-col-")  # Delta Spark's
PRESERVED_TAG = "delta.rowTracking.preserved"  # commitInfo.tags: the commit kept stable values

# The columns a read with row tracking adds (the names of Delta Spark's SQL metadata fields).
ROW_ID = "_metadata.row_id"
ROW_COMMIT_VERSION = "_metadata.row_commit_version"
READ_COLUMNS = (ROW_ID, ROW_COMMIT_VERSION)

MISSING_HIGH_WATER_MARK = -1


class RowTrackingError(DeltaError):
    """Row ids or commit versions cannot be assigned or read as the protocol requires."""


def _flag(configuration: Mapping[str, str], key: str) -> bool:
    return str(configuration.get(key, "false")).strip().lower() == "true"


def is_supported(protocol: Protocol) -> bool:
    """The feature is in the protocol: every new file must get row ids (unless suspended)."""
    return protocol.min_writer_version >= 7 and FEATURE in (protocol.writer_features or [])


def is_enabled(protocol: Protocol, metadata: Metadata) -> bool:
    """``delta.enableRowTracking``: every row has an id and rewrites must keep them."""
    enabled = _flag(metadata.configuration, ENABLE_PROPERTY)
    if enabled and not is_supported(protocol):
        raise ProtocolError(
            f"{ENABLE_PROPERTY} is set but the protocol does not list the {FEATURE!r} feature",
            feature=FEATURE,
        )
    return enabled


def is_suspended(metadata: Metadata) -> bool:
    suspended = _flag(metadata.configuration, SUSPENDED_PROPERTY)
    if suspended and _flag(metadata.configuration, ENABLE_PROPERTY):
        raise RowTrackingError(f"{ENABLE_PROPERTY} and {SUSPENDED_PROPERTY} cannot both be true")
    return suspended


def assigns(protocol: Protocol, metadata: Metadata) -> bool:
    """Whether commits must give new files ``baseRowId`` and ``defaultRowCommitVersion``."""
    return is_supported(protocol) and not is_suspended(metadata)


def materialized_columns(protocol: Protocol, metadata: Metadata) -> tuple[str, str] | None:
    """The hidden (row id, row commit version) columns when row tracking is enabled, else None."""
    if not is_enabled(protocol, metadata):
        return None
    names = tuple(metadata.configuration.get(key) for key in NAME_PROPERTIES)
    if not all(names):
        raise RowTrackingError(
            f"row tracking is enabled but the table's configuration lacks {' and '.join(NAME_PROPERTIES)}"
        )
    return names  # type: ignore[return-value]


def with_column_names(
    protocol: Protocol,
    configuration: Mapping[str, str],
    schema_names: Iterable[str],
    previous: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``configuration`` with the materialized column names a table supporting row tracking
    needs: the ones it already had (``previous``), else new ones (Delta Spark's prefixes and a
    UUID). A name equal to a column's is refused."""
    out = dict(configuration)
    if not is_supported(protocol):
        return out
    previous = previous or {}
    for key, prefix in zip(NAME_PROPERTIES, _PREFIXES, strict=True):
        out[key] = previous.get(key) or f"{prefix}{uuid.uuid4()}"
    taken = {n.lower() for n in schema_names}
    for key in NAME_PROPERTIES:
        if out[key].lower() in taken:
            raise InvalidArgumentError(f"{key}={out[key]!r} is the name of a column of the table")
    return out


# --- assignment at commit time ------------------------------------------------------------------


def high_water_mark(domains: Iterable[DomainMetadata | None]) -> int:
    """The high-water mark after ``domains`` (oldest first; the last ``delta.rowTracking`` one
    counts), or -1 when no id was ever assigned."""
    mark = MISSING_HIGH_WATER_MARK
    for domain in domains:
        if domain is None or domain.domain != DOMAIN or domain.removed:
            continue
        try:
            mark = int(json.loads(domain.configuration)["rowIdHighWaterMark"])
        except (ValueError, KeyError, TypeError) as e:
            raise RowTrackingError(f"unreadable {DOMAIN} domain metadata: {domain.configuration!r}") from e
    return mark


def domain_metadata(mark: int) -> DomainMetadata:
    # Delta Spark writes the domain's name into its configuration too.
    config = {"rowIdHighWaterMark": mark, "domainName": DOMAIN}
    return DomainMetadata(DOMAIN, json.dumps(config, separators=(",", ":")))


def num_records(add: Add) -> int:
    """The file's physical row count, from its statistics (needed to reserve its ids)."""
    try:
        value = json.loads(add.stats)["numRecords"] if add.stats else None
    except (ValueError, TypeError):
        value = None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RowTrackingError(
            f"cannot assign row ids to {add.path}: its add has no numRecords statistic "
            "(row tracking needs every new file's row count)"
        )
    return value


def assign(adds: list[Add], mark: int, version: int) -> tuple[list[Add], DomainMetadata | None]:
    """Fresh ``baseRowId`` (from ``mark`` on) and ``defaultRowCommitVersion`` (``version``) for
    every add that has none; adds that carry them (a file re-added with a new deletion vector)
    keep theirs. Returns the adds and the new high-water mark's domain (None if unchanged)."""
    out = []
    start = mark
    for add in adds:
        changes = {}
        if add.base_row_id is None:
            changes["base_row_id"] = mark + 1
            mark += num_records(add)
        if add.default_row_commit_version is None:
            changes["default_row_commit_version"] = version
        out.append(dataclasses.replace(add, **changes) if changes else add)
    return out, (domain_metadata(mark) if mark != start else None)


def backfill_adds(files: pa.Table) -> list[Add]:
    """Live files without ``baseRowId`` re-added unchanged (``dataChange=false``) so that the
    commit gives them row ids: what enabling row tracking on an existing table commits."""
    if files.num_rows == 0:
        return []
    missing = files.filter(files.column("base_row_id").is_null())
    out = []
    for row in missing.to_pylist():
        if not row.get("stats"):
            raise RowTrackingError(
                f"cannot enable row tracking: data file {row['path']} has no statistics, so its rows "
                "cannot be counted; rewrite it first (OPTIMIZE) or recompute its statistics"
            )
        dv = row.get("deletion_vector")
        out.append(
            Add(
                path=row["path"],
                partition_values=row["partition_values"],
                size=row["size"],
                modification_time=row["modification_time"],
                data_change=False,
                stats=row["stats"],
                deletion_vector=DeletionVectorDescriptor.from_json(
                    {k: v for k, v in dv.items() if v is not None}
                )
                if dv
                else None,
                default_row_commit_version=row.get("default_row_commit_version"),
                clustering_provider=row.get("clustering_provider"),
                tags=row_tags(row.get("tags")),
            )
        )
    return out


# --- stable values of rows being rewritten -------------------------------------------------------


def stable_values(
    physical_rows: int,
    offset: int,
    base_row_id: int | None,
    default_version: int | None,
    materialized_ids: pa.ChunkedArray | pa.Array | None,
    materialized_versions: pa.ChunkedArray | pa.Array | None,
    where: str,
) -> tuple[pa.Array, pa.Array]:
    """Row ids and commit versions of ``physical_rows`` consecutive rows of one file starting at
    physical position ``offset``: the materialized value where there is one, else the fresh one."""
    if base_row_id is None or default_version is None:
        raise RowTrackingError(
            f"{where} has no baseRowId/defaultRowCommitVersion although row tracking is enabled"
        )
    ids = pa.array(np.arange(offset, offset + physical_rows, dtype=np.int64) + base_row_id, pa.int64())
    versions = pa.array(np.full(physical_rows, default_version, dtype=np.int64), pa.int64())
    if materialized_ids is not None and materialized_ids.null_count < len(materialized_ids):
        ids = _coalesce(materialized_ids, ids)
    if materialized_versions is not None and materialized_versions.null_count < len(materialized_versions):
        versions = _coalesce(materialized_versions, versions)
    return ids, versions


def _coalesce(preferred, fallback: pa.Array) -> pa.Array:
    if isinstance(preferred, pa.ChunkedArray):
        preferred = preferred.combine_chunks()
    return pc.coalesce(preferred.cast(pa.int64()), fallback)


def attach(table: pa.Table, lineage: pa.Table | None) -> pa.Table:
    """``table`` (rows conformed to the table schema) with their stable values beside them, as
    the data-file writer takes them; ``None`` for rows that are new."""
    if lineage is None:
        return table
    if lineage.num_rows != table.num_rows:
        raise DeltaError(f"internal: {lineage.num_rows} row-tracking values for {table.num_rows} rows")
    for name in lineage.column_names:
        table = table.append_column(name, lineage.column(name))
    return table


def updated(lineage: pa.Table | None) -> pa.Table | None:
    """The stable values of updated rows: the same ids, a null (that is, this commit's) version."""
    if lineage is None:
        return None
    ids, versions = lineage.column_names
    return pa.table({ids: lineage.column(ids), versions: pa.nulls(lineage.num_rows, pa.int64())})


def take(lineage: pa.Table | None, selection) -> pa.Table | None:
    """The stable values of some rows (a boolean mask or indices), ``None`` stays ``None``."""
    if lineage is None:
        return None
    selection = np.asarray(selection)
    if selection.dtype == bool:
        return lineage.filter(pa.array(selection))
    return lineage.take(pa.array(selection, pa.int64()))


def prepare_metadata(
    old_protocol: Protocol,
    old_metadata: Metadata,
    protocol: Protocol,
    metadata: Metadata,
    files: pa.Table,
    schema_names: Iterable[str],
) -> tuple[Metadata, list[Add]]:
    """A metadata change (ALTER) on an existing table: ``metadata`` with the materialized column
    names the new protocol needs, and, when the change enables row tracking, the live files
    without row ids re-added so that the same commit gives them ids (Delta Spark's backfill,
    in one commit: the protocol allows it in the commit that sets ``delta.enableRowTracking``)."""
    configuration = with_column_names(
        protocol, metadata.configuration, schema_names, old_metadata.configuration
    )
    if configuration != metadata.configuration:
        metadata = dataclasses.replace(metadata, configuration=configuration)
    enabling = is_enabled(protocol, metadata) and not (
        is_supported(old_protocol) and is_enabled(old_protocol, old_metadata)
    )
    if enabling and is_suspended(metadata):
        raise RowTrackingError(f"{SUSPENDED_PROPERTY} must be false to enable row tracking")
    return metadata, (backfill_adds(files) if enabling else [])
