"""How a table's rows are laid out in a Parquet data file: the physical names and field ids
column mapping gives fields (nested ones too), which columns are worth dictionary encoding, and
which get footer statistics."""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.schema import ArrayType, DataType, MapType, StructField, StructType, to_arrow_type


def physical_arrow_field(f: StructField, mode: str) -> pa.Field:
    """The Parquet field for a table field: physical names and field ids under column mapping."""
    name = f.physical_name if mode != "none" else f.name
    metadata = (
        {b"PARQUET:field_id": str(f.field_id).encode()} if mode != "none" and f.field_id is not None else None
    )
    return pa.field(name, _physical_type(f.type, mode), nullable=f.nullable, metadata=metadata)


def _physical_type(t: DataType, mode: str) -> pa.DataType:
    if isinstance(t, StructType):
        return pa.struct([physical_arrow_field(f, mode) for f in t.fields])
    if isinstance(t, ArrayType):
        return pa.list_(pa.field("element", _physical_type(t.element_type, mode), t.contains_null))
    if isinstance(t, MapType):
        return pa.map_(
            _physical_type(t.key_type, mode),
            pa.field("value", _physical_type(t.value_type, mode), t.value_contains_null),
        )
    return to_arrow_type(t)


def to_physical(arr: pa.Array, t: DataType, mode: str) -> pa.Array:
    """Rename (nested) struct fields to physical names; values untouched."""
    if mode == "none":
        return arr
    if isinstance(t, StructType):
        children = [to_physical(arr.field(i), f.type, mode) for i, f in enumerate(t.fields)]
        fields = [physical_arrow_field(f, mode) for f in t.fields]
        return pa.StructArray.from_arrays(
            children, fields=fields, mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(t, ArrayType):
        values = to_physical(arr.values, t.element_type, mode)
        return pa.ListArray.from_arrays(
            arr.offsets, values, type=_physical_type(t, mode), mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(t, MapType):
        keys = to_physical(arr.keys, t.key_type, mode)
        items = to_physical(arr.items, t.value_type, mode)
        return pa.MapArray.from_arrays(
            arr.offsets,
            keys,
            items,
            type=_physical_type(t, mode),
            mask=arr.is_null() if arr.null_count else None,
        )
    return arr


DICTIONARY_SAMPLE_ROWS = 65_536
DICTIONARY_MAX_DISTINCT = 0.5
# A column whose first rows are nearly all distinct is judged on them alone: counting the distinct
# values of 65,536 distinct int64s takes 5 ms (its hash table outgrows the caches), of the first
# 8,192 0.15 ms, and in random order a column that distinct so early is never repetitive enough
# over the whole sample (20,000 values in random order: 82% of the first 8,192 rows distinct,
# judged on the whole sample, chosen).
DICTIONARY_FIRST_ROWS = 8192
DICTIONARY_SURELY_DISTINCT = 0.95


def dictionary_columns(sample: pa.Table) -> list[str] | bool:
    """Columns worth dictionary encoding, judged on the first rows a writer sees.

    Parquet writers try a dictionary for every column and fall back to plain encoding once it
    grows too big; for columns of mostly distinct values (ids, timestamps, measurements, free
    text) that attempt costs a fifth of the write time and saves nothing. Nested columns keep the
    default (all), as do samples too small to judge.
    """
    rows = min(sample.num_rows, DICTIONARY_SAMPLE_ROWS)
    if rows < 1000 or any(pa.types.is_nested(f.type) for f in sample.schema):
        return True
    head = sample.slice(0, rows)
    first = min(rows, DICTIONARY_FIRST_ROWS)
    chosen = []
    for name in sample.column_names:
        column = head.column(name)
        if first < rows:
            early = pc.count_distinct(column.slice(0, first), mode="all").as_py()
            if early >= DICTIONARY_SURELY_DISTINCT * first:
                continue
        distinct = pc.count_distinct(column, mode="all").as_py()
        if distinct <= DICTIONARY_MAX_DISTINCT * rows:
            chosen.append(name)
    return chosen


def statistics_columns(schema: pa.Schema) -> list[str] | bool:
    """The Parquet columns whose footer statistics are written (``_statistics_columns``; worked
    out once per file schema: each writer of a table asks for the same)."""
    found = _statistics_columns(schema)
    return found if isinstance(found, bool) else list(found)


@functools.lru_cache(maxsize=64)
def _statistics_columns(schema: pa.Schema) -> tuple[str, ...] | bool:
    """The Parquet columns whose footer statistics are written: all but floats.

    Parquet writers leave NaN out of a float column's min/max, and readers that prune row groups
    on them (Delta Spark's Parquet reader) then drop NaN rows that ``x = NaN`` or ``x > 1e308``
    select in Spark's order, where NaN is the largest value. The log's statistics carry NaN as
    Delta Spark writes it, and deltaplane's own row-group pruning never used float bounds. The
    column names are Parquet's dotted paths (what the writer takes), read from an empty file of
    the same schema; a dotted path shared with a float column (a top-level ``a.b`` beside the
    field ``b`` of a struct ``a``) gets no statistics either."""
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    columns = pq.read_metadata(sink.getvalue()).schema
    leaves = [columns.column(i) for i in range(len(columns))]
    floats = {
        c.path for c in leaves if c.physical_type in ("FLOAT", "DOUBLE") or "Float16" in str(c.logical_type)
    }
    if not floats:
        return True
    return tuple(c.path for c in leaves if c.path not in floats)
