"""Python values as Arrow arrays, without importing pandas.

pyarrow imports pandas (when it is installed) the first time it converts Python objects: ``pa.array``
of a list or of a NumPy array, ``pa.scalar``, ``pa.repeat`` of a Python value all ask whether the
input is a pandas object first. That import costs 0.2-0.3 s, and every process that only opens a
table and reads it (a CLI call, a sensor's poke, an Airflow task, a Spark Python worker) would pay
it once more than it needs. pyarrow's JSON reader converts the same values without asking, so until
pandas is in the process the engine's conversions on those paths go through it: each column's values
are written as one JSON array and read back with an explicit schema. Once pandas is imported (by
the user, by a write, by Great Expectations) there is nothing left to save, and ``pa.array``, 2-3x
faster on a thousand values, converts them.

The route is taken only where JSON says exactly what ``pa.array`` would make of the value:
booleans, integers, float64 (and integers a double holds exactly), strings, decimals (as their
text), dates and microsecond timestamps (as the integers Arrow stores, then cast), and the lists,
structs and maps of them (a map travels as a list of key/value structs and is rebuilt). Anything
else (bytes, float32, NumPy values, other time units, a value JSON cannot encode such as a lone
surrogate) and any value the reader refuses goes to ``pa.array`` itself, so every result and
every error is still ``pa.array``'s.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

_LEAF_TYPES = (
    pa.types.is_boolean,
    pa.types.is_integer,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_null,
)
_REFUSED = (TypeError, ValueError, UnicodeEncodeError, pa.ArrowInvalid, pa.ArrowNotImplementedError)
_COLUMN = "v"
_NUMPY_TYPES = {
    t: np.dtype(t.to_pandas_dtype())
    for t in (
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint16(),
        pa.uint32(),
        pa.uint64(),
        pa.float32(),
        pa.float64(),
    )
}
_ARROW_TYPES = {**{dtype: t for t, dtype in _NUMPY_TYPES.items()}, np.dtype(np.bool_): pa.bool_()}
_EPOCH_DATE = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_EXACT = 2**53  # integers a double holds exactly


def array_from_values(values: Iterable, type: pa.DataType) -> pa.Array:
    """``pa.array(values, type=type)``, without importing pandas where JSON can carry the values."""
    values = values if isinstance(values, list) else list(values)
    if not values:
        return pa.nulls(0, type)
    if "pandas" not in sys.modules and _json_type(type) is not None:
        try:
            return (
                columns_via_json({_COLUMN: values}, pa.schema([(_COLUMN, type)])).column(0).combine_chunks()
            )
        except _REFUSED:
            pass
    return pa.array(values, type=type)


def scalar(value, type: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type=type)``, by the same route as :func:`array_from_values`."""
    return array_from_values([value], type)[0]


def table_from_columns(columns: dict[str, list], schema: pa.Schema) -> pa.Table:
    """``pa.table`` of each of ``schema``'s fields from ``columns[name]`` (equal lengths), without
    importing pandas where JSON can carry the values."""
    if "pandas" not in sys.modules and all(_json_type(field.type) is not None for field in schema):
        try:
            return columns_via_json(columns, schema)
        except _REFUSED:
            pass
    return pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in schema}, schema=schema)


def columns_via_json(columns: dict[str, list], schema: pa.Schema) -> pa.Table:
    """The JSON route itself: each column's values as one JSON array (one C-speed ``json.dumps``
    per column), all of them one JSON object read with ``schema``'s stand-in types as lists: one
    row whose lists are the columns. Raises (TypeError, ValueError, an Arrow error) where JSON
    cannot carry a value; the callers above then ask ``pa.array``."""
    if any(_json_type(f.type) is None for f in schema):
        raise TypeError(f"JSON cannot carry every type of {schema}")
    if not len(schema) or not columns[schema[0].name]:
        return empty_table(schema)
    parts = []
    for field in schema:
        encode = _encoder(field.type)
        values = columns[field.name]
        parts.append(
            f"{_dumps(field.name)}:{_dumps(values if encode is _same else [encode(v) for v in values])}"
        )
    data = ("{" + ",".join(parts) + "}").encode()
    wire = pa.schema([pa.field(f.name, pa.list_(pa.field("item", _json_type(f.type)))) for f in schema])
    table = pa_json.read_json(
        pa.BufferReader(data),
        read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
        parse_options=pa_json.ParseOptions(explicit_schema=wire, unexpected_field_behavior="ignore"),
    )
    arrays = []
    for i, field in enumerate(schema):
        (listed,) = table.column(i).chunks
        values = listed.values
        if len(values) != len(columns[field.name]):
            raise ValueError("the JSON reader returned a different number of values")
        arrays.append(_restore(values, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``array.to_numpy(zero_copy_only=False)``; a null-free array of numbers or booleans is viewed
    (or, for booleans, unpacked) from its buffers directly, which ``to_numpy`` would do after
    importing pandas. A view is read-only, as ``to_numpy``'s zero-copy result is."""
    if "pandas" not in sys.modules and not array.null_count:
        if isinstance(array, pa.ChunkedArray):
            if array.num_chunks == 1:
                return to_numpy(array.chunk(0))
            if all(_viewable(chunk.type) for chunk in array.chunks):
                parts = [to_numpy(chunk) for chunk in array.chunks]
                return np.concatenate(parts) if parts else np.empty(0, _numpy_dtype(array.type))
        elif _viewable(array.type):
            data = array.buffers()[1]
            if pa.types.is_boolean(array.type):
                bits = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
                unpacked = np.unpackbits(bits, count=array.offset + len(array), bitorder="little")
                return unpacked[array.offset :].view(np.bool_)
            dtype = _NUMPY_TYPES[array.type]
            if data is None:
                return np.empty(0, dtype)
            return np.frombuffer(data, dtype, len(array), array.offset * dtype.itemsize)
    return array.to_numpy(zero_copy_only=False)


def _viewable(type: pa.DataType) -> bool:
    return type in _NUMPY_TYPES or pa.types.is_boolean(type)


def _numpy_dtype(type: pa.DataType) -> np.dtype:
    return np.dtype(np.bool_) if pa.types.is_boolean(type) else _NUMPY_TYPES[type]


def from_numpy(values: np.ndarray, type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, type=type)`` of a one-dimensional NumPy array; numbers and booleans of
    the type asked for (or of the array's own) are wrapped as buffers, without pandas."""
    if "pandas" not in sys.modules and values.ndim == 1:
        target = type if type is not None else _ARROW_TYPES.get(values.dtype)
        if target is not None and _NUMPY_TYPES.get(target) == values.dtype:
            data = np.ascontiguousarray(values)
            return pa.Array.from_buffers(target, len(data), [None, pa.py_buffer(data)])
        if target == pa.bool_() and values.dtype == np.bool_:
            bits = np.packbits(values, bitorder="little")
            return pa.Array.from_buffers(target, len(values), [None, pa.py_buffer(bits)])
    return pa.array(values, type=type)


def empty_table(schema: pa.Schema) -> pa.Table:
    """``schema.empty_table()``, which converts an empty Python list per column (and so imports
    pandas)."""
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False)


def _json_type(type: pa.DataType) -> pa.DataType | None:
    """The type the JSON reader reads for ``type`` (maps as lists of key/value structs, dates and
    timestamps as integers), or None when JSON cannot carry it exactly."""
    leaf = _leaf(type)
    if leaf is not None:
        return leaf[0]
    if pa.types.is_map(type):
        key, item = _json_type(type.key_type), _json_type(type.item_type)
        if key is None or item is None:
            return None
        entry = pa.struct([pa.field("key", key, False), pa.field("value", item, type.item_field.nullable)])
        return pa.list_(entry)
    if pa.types.is_list(type) or pa.types.is_large_list(type):
        inner = _json_type(type.value_type)
        if inner is None:
            return None
        field = pa.field(type.value_field.name, inner, type.value_field.nullable)
        return pa.list_(field) if pa.types.is_list(type) else pa.large_list(field)
    if pa.types.is_struct(type):
        fields = list(type)
        inner = [_json_type(f.type) for f in fields]
        if any(t is None for t in inner) or len({f.name for f in fields}) != len(fields):
            return None
        return pa.struct([pa.field(f.name, t, f.nullable) for f, t in zip(fields, inner, strict=True)])
    return None


def _leaf(type: pa.DataType) -> tuple[pa.DataType, Callable | None] | None:
    """For a type JSON carries as a scalar: the type read and the encoding of a non-null value
    (``None``: the value as it is)."""
    if any(test(type) for test in _LEAF_TYPES):
        return type, None
    if pa.types.is_float64(type):
        return type, _float_value
    if pa.types.is_decimal(type):
        return type, _decimal_text(type)
    if pa.types.is_date32(type):
        return pa.int32(), _date_days
    if pa.types.is_timestamp(type) and type.unit == "us" and type.tz in (None, "UTC"):
        return pa.int64(), _timestamp_micros
    return None


def _decimal_text(type: pa.Decimal128Type | pa.Decimal256Type) -> Callable:
    """A decimal's text, for a value that fits ``type`` as it is: the reader checks the digits it
    reads, not the digits a rescale adds, so what needs rescaling up or rounding is refused."""
    whole_digits = type.precision - type.scale

    def encode(value) -> str:
        if not isinstance(value, Decimal) or not value.is_finite():
            raise TypeError(value)
        exponent = value.as_tuple().exponent
        if exponent < -type.scale or (value and value.adjusted() + 1 > whole_digits):
            raise TypeError(value)
        return str(value)

    return encode


def _float_value(value):
    """A float as it is; an integer only where a double holds it exactly (pa.array refuses the
    others, the reader would round them)."""
    if type(value) is float or (
        isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _EXACT
    ):
        return value
    raise TypeError(value)


def _date_days(value) -> int:
    if isinstance(value, date) and not isinstance(value, datetime):
        return (value - _EPOCH_DATE).days
    raise TypeError(value)


def _timestamp_micros(value) -> int:
    """Microseconds since the epoch as pa.array counts them: an aware datetime in UTC, a naive one
    read as UTC."""
    if isinstance(value, datetime):
        offset = value.utcoffset()
        if offset is None:
            return (value - _EPOCH) // _MICROSECOND
        if not offset.microseconds:  # pyarrow drops an offset's fraction of a second
            return (value - _EPOCH_UTC) // _MICROSECOND
    raise TypeError(value)


def _encoder(type: pa.DataType) -> Callable:
    """A function from a Python value to what its JSON carries: :func:`_same` when that is the
    value itself; otherwise maps' entries become ``{"key": ..., "value": ...}`` objects and dates,
    timestamps and decimals their stand-ins."""
    leaf = _leaf(type)
    if leaf is not None:
        encode = leaf[1]
        return _same if encode is None else (lambda value: None if value is None else encode(value))
    if pa.types.is_map(type):
        key, item = _encoder(type.key_type), _encoder(type.item_type)

        def encode_map(value):
            if value is None:
                return None
            pairs = value.items() if isinstance(value, dict) else value
            return [{"key": key(k), "value": item(v)} for k, v in pairs]

        return encode_map
    if pa.types.is_struct(type):
        children = [(f.name, _encoder(f.type)) for f in type]
        if all(encode is _same for _, encode in children):
            return _same

        def encode_struct(value):
            if not isinstance(value, dict):
                return value
            return {name: encode(value.get(name)) for name, encode in children}

        return encode_struct
    inner = _encoder(type.value_type)
    if inner is _same:
        return _same

    def encode_list(value):
        return None if value is None else [inner(v) for v in value]

    return encode_list


def _same(value):
    return value


def _restore(array: pa.Array, type: pa.DataType) -> pa.Array:
    """Rebuild the maps inside an array read with :func:`_json_type`'s stand-ins."""
    if array.type == type:
        return array
    if pa.types.is_date32(type) or pa.types.is_timestamp(type):
        return array.cast(type)
    mask = array.is_null() if array.null_count else None
    if pa.types.is_map(type):
        entries = array.values
        keys = _restore(entries.field("key"), type.key_type)
        items = _restore(entries.field("value"), type.item_type)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=type, mask=mask)
    if pa.types.is_struct(type):
        children = [_restore(array.field(i), type.field(i).type) for i in range(type.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(type), mask=mask)
    values = _restore(array.values, type.value_type)
    list_class = pa.ListArray if pa.types.is_list(type) else pa.LargeListArray
    return list_class.from_arrays(array.offsets, values, type=type, mask=mask)
