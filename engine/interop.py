"""A snapshot in the shapes other tools read: the file list with typed statistics (as delta-rs's
``get_add_actions``), and a ``pyarrow.dataset`` over the live files for engines that push filters
down themselves (DuckDB, Polars, Acero).

A dataset reads Parquet files as they are, so it cannot honour deletion vectors or column
mapping (the files' column names are physical): such snapshots are refused with
``UnsupportedOperationError`` rather than read wrongly. ``DeltaTable.to_batches`` and the
table's own ``__arrow_c_stream__`` handle both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import UnsupportedOperationError
from deltaplane.engine.log.replay import canonical_paths
from deltaplane.engine.partitions import parse_partition_values
from deltaplane.engine.schema import DataType, StructType, to_arrow_schema, to_arrow_type
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.stats import parse_file_stats, path_tree, stats_supported
from deltaplane.engine.storage import arrow_files
from deltaplane.engine.values_to_arrow import scalar

if TYPE_CHECKING:
    import pyarrow.dataset as ds

Path = tuple[str, ...]


def _stats_leaves(schema: StructType, partitions: set[str]) -> list[tuple[Path, Path, DataType]]:
    """(logical path, physical path, type) of every data-column leaf statistics may describe."""
    out = []

    def walk(fields, logical: Path, physical: Path) -> None:
        for f in fields:
            lp, pp = (*logical, f.name), (*physical, f.physical_name)
            if isinstance(f.type, StructType):
                walk(f.type.fields, lp, pp)
            elif stats_supported(f.type):
                out.append((lp, pp, f.type))

    walk([f for f in schema.fields if f.name not in partitions], (), ())
    return out


def add_actions_table(snapshot: Snapshot, *, flatten: bool = False) -> pa.Table:
    """One row per live file: path, size, modification time, dataChange, typed partition
    values, record and deleted-row counts, and per-column null counts, minima and maxima.

    ``flatten`` gives delta-rs's flat names (``partition.<col>``, ``null_count.<col>``,
    ``min.<col>``, ``max.<col>``, nested columns joined with dots); otherwise those are structs.
    """
    files = snapshot.files
    n = files.num_rows
    schema = snapshot.schema
    partition_fields = snapshot.partition_fields
    leaves = _stats_leaves(schema, {f.name for f in partition_fields})
    stats = parse_file_stats(files, {pp: t for _, pp, t in leaves}, for_skipping=False)
    dv = files.column("deletion_vector")
    zero = scalar(0, pa.int64())
    deleted = (
        pc.fill_null(pc.struct_field(dv, "cardinality"), zero) if dv.null_count < n else pa.repeat(zero, n)
    )
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "path": files.column("path"),
        "size_bytes": files.column("size"),
        "modification_time": pc.cast(files.column("modification_time"), pa.timestamp("ms")),
        "data_change": files.column("data_change"),
        "num_records": stats.num_records,
        "num_deleted_records": pc.cast(deleted, pa.int64()),
    }
    partitions = {}
    for f in partition_fields:
        raw = pc.struct_field(files.column("partition_values"), f.physical_name)
        partitions[(f.name,)] = parse_partition_values(raw, f.type)
    groups = {
        "partition": partitions,
        "null_count": {lp: stats.null_count[pp] for lp, pp, _ in leaves},
        "min": {lp: stats.min_values[pp] for lp, pp, _ in leaves},
        "max": {lp: stats.max_values[pp] for lp, pp, _ in leaves},
    }
    names, arrays = list(columns), list(columns.values())
    for group, values in groups.items():
        if not values:
            continue
        if flatten:
            # delta-rs's names: a top-level `a.b` and struct a's field b are both "min.a.b";
            # both columns are kept (in schema order), as in delta-rs's table.
            for path, array in values.items():
                names.append(".".join((group, *path)))
                arrays.append(array)
        else:
            names.append("partition_values" if group == "partition" else group)
            arrays.append(_nested_struct(values, n))
    return pa.Table.from_arrays([_array(a) for a in arrays], names=names)


def _nested_struct(values: dict[Path, pa.Array], n: int) -> pa.StructArray:
    def build(node: dict) -> pa.StructArray:
        names = list(node)
        arrays = [build(v) if isinstance(v, dict) else _array(v) for v in node.values()]
        return pa.StructArray.from_arrays(arrays, names=names) if arrays else pa.nulls(n, pa.struct([]))

    return build(path_tree(values))


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def pyarrow_dataset(snapshot: Snapshot, files: pa.Table | None = None) -> ds.Dataset:
    """A ``pyarrow.dataset`` of the live files (or of ``files``, some of them: a scan's pruned
    list) with typed partition columns as expressions."""
    import pyarrow.dataset as ds  # on first use: importing it imports pandas (0.2-0.3 s)

    root = snapshot.store.root
    if snapshot.column_mapping_mode != "none":
        raise UnsupportedOperationError(
            f"{root} uses column mapping: its Parquet files name columns by physical name, which a "
            "pyarrow dataset cannot map; read it with to_batches() or the table's Arrow stream"
        )
    files = snapshot.files if files is None else files
    dv = files.column("deletion_vector")
    if dv.null_count < len(dv):
        count = len(dv) - dv.null_count
        raise UnsupportedOperationError(
            f"{count} live file(s) of {root} (version {snapshot.version}) have deletion vectors, which a "
            "pyarrow dataset cannot apply (it would return deleted rows); read it with to_batches() or "
            "the table's Arrow stream, or purge them with optimize(purge=True)"
        )
    filesystem, base = _filesystem(snapshot)
    keys = canonical_paths(files.column("path"), root).to_pylist()
    paths = [key if key.startswith(base) else f"{base}/{key}" for key in keys]
    schema = to_arrow_schema(snapshot.schema)
    partition_fields = snapshot.partition_fields
    typed = {
        f.name: parse_partition_values(
            pc.struct_field(files.column("partition_values"), f.physical_name), f.type
        )
        for f in partition_fields
    }
    expressions = []
    for i in range(len(paths)):
        expression = ds.scalar(True)
        for f in partition_fields:
            value = typed[f.name][i]
            field = ds.field(f.name)
            term = (
                field.is_null()
                if not value.is_valid
                else field == pa.scalar(value.as_py(), to_arrow_type(f.type))
            )
            expression = expression & term
        expressions.append(expression)
    return ds.FileSystemDataset.from_paths(
        paths,
        schema=schema,
        format=ds.ParquetFileFormat(),
        filesystem=filesystem,
        partitions=expressions if partition_fields else None,
    )


def _filesystem(snapshot: Snapshot):
    """The pyarrow filesystem and base path of the snapshot's store (``ObjectStore.arrow_files``)."""
    store = snapshot.store
    root = store.root
    view = arrow_files(store)
    if view is None:
        what = "its S3 support is missing" if root.startswith("s3://") else "only local paths and S3"
        raise UnsupportedOperationError(f"a pyarrow dataset cannot read {root}: {what}")
    filesystem, uri_prefix, path_prefix = view
    return filesystem, path_prefix + root[len(uri_prefix) :] if root.startswith(uri_prefix) else root
