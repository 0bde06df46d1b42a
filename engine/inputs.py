"""What a write or a MERGE accepts as data, turned into one Arrow stream.

pyarrow Tables, RecordBatches and RecordBatchReaders are read as they are; anything that exports
the Arrow C stream interface (``__arrow_c_stream__``: Polars and DuckDB results, nanoarrow, ...)
is imported without a copy; pandas DataFrames are converted (their index dropped).

Whatever the source, the stream comes out in the engine's Arrow layout: each column in the Arrow
type its Delta type maps back to (``large_string``, ``string_view`` and string dictionaries as
``string``; large, view and fixed-size lists as lists; large and view binaries as ``binary``;
timestamps as microseconds, in UTC when zoned). Those casts cannot change a value; one that
would (nanoseconds below a microsecond) is a ``SchemaMismatchError`` naming the column. Columns
Delta has no type for keep their own layout, for the caller to refuse by name
(:func:`delta_schema`). So writes and MERGE see the same data whatever produced it: pandas 3's
Arrow-backed strings, Polars' views or a large-typed pyarrow table.

pandas stores an integer column with missing values as float64 (``NaN`` for the gaps). When the
table's column is an integer, such a column is cast back, but only when every value is a whole
number in range: anything else is a ``SchemaMismatchError`` naming the column, never a silent
truncation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import DeltaError, InvalidArgumentError, SchemaMismatchError
from deltaplane.engine.schema import (
    PrimitiveType,
    StructType,
    from_arrow_field,
    from_arrow_type,
    to_arrow_type,
)

_INTEGER_TYPES = ("byte", "short", "integer", "long")


def is_pandas(data: Any) -> bool:
    return type(data).__module__.split(".")[0] == "pandas" and hasattr(data, "columns")


def as_reader(data: Any, target: StructType | None = None) -> pa.RecordBatchReader:
    """``data`` as a RecordBatchReader in the engine's Arrow layout (see the module docstring);
    ``target`` (the table's schema) guides pandas casts."""
    return _in_engine_layout(_reader(data, target))


def _reader(data: Any, target: StructType | None) -> pa.RecordBatchReader:
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if is_pandas(data):
        return from_pandas(data, target).to_reader()
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if hasattr(data, "__arrow_c_array__"):
        return _reader(pa.record_batch(data), target)
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


def delta_schema(schema: pa.Schema) -> StructType:
    """The Delta schema of data (as ``as_reader`` gives it); a column Delta has no type for is a
    ``SchemaMismatchError`` naming it."""
    fields = []
    for f in schema:
        try:
            fields.append(from_arrow_field(f))
        except DeltaError as e:
            raise SchemaMismatchError(f"column {f.name!r}: {e}") from None
    return StructType(tuple(fields))


def engine_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type the engine uses for ``t``: the one ``t``'s Delta type maps back to. A type
    Delta has no equivalent for keeps its layout (views replaced by the classic layouts)."""
    try:
        return to_arrow_type(from_arrow_type(t))
    except DeltaError:
        return _plain(t)


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


def _in_engine_layout(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    schema = pa.schema(
        [pa.field(f.name, engine_type(f.type), f.nullable, f.metadata) for f in reader.schema],
        metadata=reader.schema.metadata,
    )
    if schema == reader.schema:
        return reader

    def batches():
        for batch in reader:
            yield _cast_batch(batch, schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _cast_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    arrays = []
    for column, field in zip(batch.columns, schema, strict=True):
        if column.type != field.type:
            if _has_list_view(column.type):
                column = _without_list_views(column)
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaMismatchError(
                    f"column {field.name!r}: its {column.type} values cannot be read as {field.type} "
                    f"without loss: {e}"
                ) from None
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _has_list_view(t: pa.DataType) -> bool:
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_list_view(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_list_view(f.type) for f in t)
    return False


def _without_list_views(arr: pa.Array) -> pa.Array:
    """``arr`` with its list views (at the top, or inside lists and structs) rebuilt as lists.

    pyarrow 26 casts ``list_view`` to ``list`` into arrays whose offsets buffer is too short
    (``validate()`` fails), so the lists are rebuilt from the views' values and lengths.
    """
    t = arr.type
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        large = pa.types.is_large_list_view(t)
        values = _without_list_views(pc.list_flatten(arr))
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64 if large else np.int32)
        cls = pa.LargeListArray if large else pa.ListArray
        return cls.from_arrays(pa.array(offsets), values, mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        values = _without_list_views(arr.values)
        return cls.from_arrays(arr.offsets, values, mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_struct(t):
        children = [_without_list_views(arr.field(i)) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(
            children, names=[f.name for f in t], mask=arr.is_null() if arr.null_count else None
        )
    return arr
