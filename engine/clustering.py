"""Liquid clustering: which columns a clustered table is clustered by, and how that is recorded.

A table is *clustered* when its protocol lists the ``clustering`` writer feature (which needs
``domainMetadata``). Its clustering columns live in the ``delta.clustering`` metadata domain as
``{"clusteringColumns": [[<physical name parts>], ...]}`` (physical names under column mapping;
one list of parts per column, so nested fields can be clustering columns), never in the table's
configuration. ``CLUSTER BY NONE`` keeps the feature and records an empty list.

Delta Spark's rules for the columns are enforced when they are chosen (create and ALTER): at most
four, each an existing, non-variant column with min/max statistics (writers must keep statistics
for them), no duplicates, and a clustered table is never partitioned.

Files that an OPTIMIZE clustered carry ``clusteringProvider: "liquid"`` and Delta Spark's ZCube
tags (``ZCUBE_ID``: the OPTIMIZE bin they came from, ``ZCUBE_ZORDER_BY``: the logical clustering
columns as a JSON list), which is how an incremental OPTIMIZE (here or in Delta Spark) tells
finished cubes from new data and files clustered by older columns.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Add, DomainMetadata, Protocol
from deltaplane.engine.errors import InvalidArgumentError, SchemaError
from deltaplane.engine.schema import DecimalType, PrimitiveType, StructType, iter_types, split_field_path
from deltaplane.engine.stats import stats_leaves
from deltaplane.engine.table_features import writer_features
from deltaplane.engine.table_properties import TableProperties

if TYPE_CHECKING:
    from deltaplane.engine.snapshot import Snapshot

DOMAIN = "delta.clustering"
FEATURE = "clustering"
PROVIDER = "liquid"  # Delta Spark's ClusteredTableUtils.clusteringProvider
MAX_COLUMNS = 4  # Delta Spark's clusteredTable.numClusteringColumnsLimit
FEATURE_PROPERTY = "delta.feature.clustering"
ZCUBE_ID_TAG = "ZCUBE_ID"
ZCUBE_COLUMNS_TAG = "ZCUBE_ZORDER_BY"


class ClusteringError(SchemaError, InvalidArgumentError):
    """A CLUSTER BY that cannot be honoured (unknown column, no statistics, partitioned table)."""


@dataclass(frozen=True)
class ClusteringColumn:
    logical: tuple[str, ...]  # name parts as the schema spells them
    physical: tuple[str, ...]  # physical name parts (column mapping), as the domain stores them

    @property
    def name(self) -> str:
        return ".".join(f"`{p}`" if "." in p or "`" in p else p for p in self.logical)


def is_clustered(protocol: Protocol) -> bool:
    """Whether the table supports clustering (the feature is in its protocol)."""
    return FEATURE in writer_features(protocol)


def split_name(name: str) -> list[str]:
    """``a.b`` -> ``["a", "b"]``; back-quoted parts keep their dots (```a.b`.c``)."""
    try:
        return split_field_path(name)
    except SchemaError as e:
        raise ClusteringError(f"{e} in clustering column {name!r}") from None


def resolve_columns(
    schema: StructType,
    names: Iterable[str],
    configuration: dict[str, str],
    *,
    partition_columns: list[str] | None = None,
    where: str = "",
) -> list[ClusteringColumn]:
    """Check ``names`` as clustering columns of a table with ``schema`` and ``configuration``."""
    at = f" of {where}" if where else ""
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise ClusteringError(f"cluster_by takes a list of column names, got {names!r}")
    names = list(names)
    if partition_columns:
        raise ClusteringError(
            "clustering and partitioning cannot both be specified: the table"
            f"{at} is partitioned by {', '.join(partition_columns)}"
        )
    if len(names) > MAX_COLUMNS:
        raise ClusteringError(
            f"CLUSTER BY supports up to {MAX_COLUMNS} clustering columns, got {len(names)}: "
            + ", ".join(map(str, names))
        )
    props = TableProperties(configuration)
    eligible = {
        leaf.path
        for leaf in stats_leaves(
            list(schema.fields),
            num_indexed=props.data_skipping_num_indexed_cols,
            stats_columns=props.data_skipping_stats_columns,
        )
        if leaf.min_max
    }
    out: list[ClusteringColumn] = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ClusteringError(f"a clustering column must be a non-empty column name, got {name!r}")
        logical, physical = [], []
        t: object = schema
        for part in split_name(name):
            field = t.find(part) if isinstance(t, StructType) else None
            if field is None:
                known = ", ".join(schema.names)
                raise ClusteringError(f"clustering column {name!r} is not in the schema{at} ({known})")
            logical.append(field.name)
            physical.append(field.physical_name)
            t = field.type
        column = ClusteringColumn(tuple(logical), tuple(physical))
        if any(isinstance(x, PrimitiveType) and x.name == "variant" for x in iter_types(t)):
            raise ClusteringError(
                f"CLUSTER BY is not supported on {column.name} : variant (variant values are not comparable)"
            )
        if column.physical not in eligible:
            type_name = t.name if isinstance(t, PrimitiveType) else json.dumps(t.to_json())
            if isinstance(t, PrimitiveType | DecimalType) and _skipping_eligible(t):
                raise ClusteringError(
                    f"clustering requires statistics for clustering column {column.name}, and the "
                    f"table{at} keeps none for it: see delta.dataSkippingNumIndexedCols / "
                    "delta.dataSkippingStatsColumns"
                )
            raise ClusteringError(
                f"CLUSTER BY is not supported because column {column.name} : {type_name} "
                "does not support data skipping (no min/max statistics for that type)"
            )
        if column.physical in {c.physical for c in out}:
            raise ClusteringError(f"clustering column {column.name} is listed twice")
        out.append(column)
    return out


def _skipping_eligible(t) -> bool:
    if isinstance(t, DecimalType):
        return True
    return t.name in ("byte", "short", "integer", "long", "float", "double", "string", "date",
                      "timestamp", "timestamp_ntz")  # fmt: skip


def domain_metadata(columns: list[ClusteringColumn]) -> DomainMetadata:
    """The ``delta.clustering`` domain recording ``columns``."""
    # Delta Spark's JSON domain also names itself; written the same so the logs match.
    config = {"clusteringColumns": [list(c.physical) for c in columns], "domainName": DOMAIN}
    return DomainMetadata(DOMAIN, json.dumps(config, separators=(",", ":")), False)


def physical_columns(snapshot: Snapshot) -> list[tuple[str, ...]] | None:
    """Physical name parts of the clustering columns; ``None`` for a table that is not
    clustered (an empty list: clustered, by no columns: ``CLUSTER BY NONE``)."""
    if not is_clustered(snapshot.protocol):
        return None
    domain = snapshot.domains.get(DOMAIN)
    if domain is None or domain.removed:
        return []
    try:
        raw = json.loads(domain.configuration).get("clusteringColumns") or []
    except (ValueError, AttributeError) as e:
        raise SchemaError(f"malformed {DOMAIN} domain in {snapshot.store.root}: {e}") from e
    # Early writers stored one string per column; Delta Spark's domain has a list of parts.
    return [tuple(c) if isinstance(c, list) else (str(c),) for c in raw]


def clustering_columns(snapshot: Snapshot) -> list[ClusteringColumn] | None:
    """The table's clustering columns (logical and physical names), ``None`` if not clustered."""
    physical = physical_columns(snapshot)
    if physical is None:
        return None
    out = []
    for parts in physical:
        logical: list[str] = []
        t: object = snapshot.schema
        for part in parts:
            field = None
            if isinstance(t, StructType):
                field = next((f for f in t.fields if f.physical_name == part), None) or next(
                    (f for f in t.fields if f.physical_name.lower() == part.lower()), None
                )
            if field is None:
                raise SchemaError(
                    f"{snapshot.store.root}: clustering column {'.'.join(parts)!r} is not in the schema"
                )
            logical.append(field.name)
            t = field.type
        out.append(ClusteringColumn(tuple(logical), tuple(parts)))
    return out


def clustering_column_names(snapshot: Snapshot) -> list[str] | None:
    """Logical names (``a``, ``s.b``) of the clustering columns; ``None`` if not clustered."""
    columns = clustering_columns(snapshot)
    return None if columns is None else [c.name for c in columns]


def key_column(table: pa.Table, name: str) -> pa.ChunkedArray:
    """The values of clustering column ``name`` (``s.b``: a nested field) in ``table``."""
    parts = split_name(name)
    values = table.column(parts[0])
    for part in parts[1:]:
        values = pc.struct_field(values, part)
    return values


def zcube_adds(adds: list[Add], columns: Sequence[str]) -> list[Add]:
    """``adds`` of one OPTIMIZE bin as one ZCube: no data change, ``clusteringProvider:
    "liquid"``, and Delta Spark's ZCube tags (a new cube id, the clustering columns)."""
    tags = {
        ZCUBE_ID_TAG: str(uuid.uuid4()),
        ZCUBE_COLUMNS_TAG: json.dumps(list(columns), separators=(",", ":")),
    }
    return [
        dataclasses.replace(
            a, data_change=False, clustering_provider=PROVIDER, tags={**(a.tags or {}), **tags}
        )
        for a in adds
    ]
