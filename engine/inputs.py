"""What a write accepts as data, turned into one Arrow stream.

pyarrow Tables, RecordBatches and RecordBatchReaders pass through; anything that exports the
Arrow C stream interface (``__arrow_c_stream__``: Polars and DuckDB results, nanoarrow, ...) is
imported without a copy; pandas DataFrames are converted (their index dropped).

pandas stores an integer column with missing values as float64 (``NaN`` for the gaps). When the
table's column is an integer, such a column is cast back, but only when every value is a whole
number in range: anything else is a ``SchemaMismatchError`` naming the column, never a silent
truncation.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import InvalidArgumentError, SchemaMismatchError
from engine.schema import PrimitiveType, StructType, to_arrow_type

_INTEGER_TYPES = ("byte", "short", "integer", "long")


def is_pandas(data: Any) -> bool:
    return type(data).__module__.split(".")[0] == "pandas" and hasattr(data, "columns")


def as_reader(data: Any, target: StructType | None = None) -> pa.RecordBatchReader:
    """``data`` as a RecordBatchReader; ``target`` (the table's schema) guides pandas casts."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if is_pandas(data):
        return from_pandas(data, target).to_reader()
    if hasattr(data, "__arrow_c_stream__"):
        return _without_views(pa.RecordBatchReader.from_stream(data))
    if hasattr(data, "__arrow_c_array__"):
        return as_reader(pa.record_batch(data))
    raise InvalidArgumentError(
        f"cannot write data of type {type(data).__name__}: pass a pyarrow Table, RecordBatch or "
        "RecordBatchReader, a pandas DataFrame, or anything with __arrow_c_stream__ (Polars, DuckDB)"
    )


def from_pandas(frame: Any, target: StructType | None = None) -> pa.Table:
    """A pandas DataFrame as Arrow, float columns holding integers cast to the table's types."""
    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatchError(f"cannot convert the pandas DataFrame to Arrow: {e}") from None
    if target is None:
        return table
    wanted = {f.name.lower(): f for f in target.fields}
    columns = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        field = wanted.get(name.lower())
        if (
            field is not None
            and pa.types.is_floating(column.type)
            and isinstance(field.type, PrimitiveType)
            and field.type.name in _INTEGER_TYPES
        ):
            column = _whole_numbers(column, to_arrow_type(field.type), name)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _whole_numbers(column: pa.ChunkedArray, target: pa.DataType, name: str) -> pa.ChunkedArray:
    """A float column as ``target`` integers, NaN as null, if and only if that loses nothing."""
    values = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
    try:
        cast = pc.cast(values, target)  # safe: fails on fractions and out-of-range values
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        present = pc.drop_null(values)
        fractional = pc.filter(present, pc.not_equal(present, pc.floor(present)))
        example = fractional[0].as_py() if len(fractional) else None
        why = f"e.g. {example}" if example is not None else f"out of range for {target}"
        raise SchemaMismatchError(
            f"column {name!r} holds floats the table's {target} column cannot take without loss ({why})"
        ) from None
    return cast


def _plain(t: pa.DataType) -> pa.DataType:
    """``t`` with Arrow's view layouts (string_view, binary_view, list_view: Polars and DuckDB
    export them) replaced by the classic ones every kernel supports."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(pa.field(t.value_field.name, _plain(t.value_type), t.value_field.nullable))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _plain(t.value_type)
        field = pa.field(t.value_field.name, inner, t.value_field.nullable)
        return pa.large_list(field) if pa.types.is_large_list(t) else pa.list_(field)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable, f.metadata) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_plain(t.key_type), _plain(t.item_type))
    return t


def _without_views(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    schema = pa.schema(
        [pa.field(f.name, _plain(f.type), f.nullable, f.metadata) for f in reader.schema],
        metadata=reader.schema.metadata,
    )
    return reader if schema == reader.schema else reader.cast(schema)
