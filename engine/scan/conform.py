"""A file's columns conformed to the table's types: fields matched by name, physical name or Parquet
field id; widened types, INT96 and millisecond timestamps, missing columns as nulls."""

from __future__ import annotations

import pyarrow as pa

from deltaplane.engine.schema import (
    PARQUET_FIELD_ID,
    ArrayType,
    DataType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    to_arrow_type,
)
from deltaplane.engine.variant import is_shredded, unshred


def unused_name(columns_: dict) -> str:
    name = "__deltaplane_row"
    while name in columns_:
        name += "_"
    return name


def as_type(column, typ: pa.DataType):
    return column if column.type == typ else column.cast(typ)


def _field_id(f: pa.Field) -> int | None:
    if f.metadata and PARQUET_FIELD_ID in f.metadata:
        return int(f.metadata[PARQUET_FIELD_ID])
    return None


def match_field(fields, target: StructField, mode: str) -> pa.Field | None:
    """The file field holding ``target``: by field id (mode id), physical name, or name."""
    candidates = list(fields)
    if mode == "id" and target.field_id is not None:
        for f in candidates:
            if _field_id(f) == target.field_id:
                return f
    name = target.physical_name if mode != "none" else target.name
    for f in candidates:
        if f.name == name:
            return f
    lowered = name.lower()
    for f in candidates:
        if f.name.lower() == lowered:
            return f
    return None


def conform_chunked(column: pa.ChunkedArray, file_field: pa.Field, target: DataType, mode: str):
    chunks = [_conform(chunk, file_field.type, target, mode) for chunk in column.chunks]
    return pa.chunked_array(chunks, type=to_arrow_type(target))


def _conform(arr: pa.Array, file_type: pa.DataType, target: DataType, mode: str) -> pa.Array:
    """Reshape one file column to the table's type, recursively."""
    target_type = to_arrow_type(target)
    if isinstance(target, StructType):
        if not pa.types.is_struct(file_type):
            raise pa.ArrowInvalid(f"expected a struct, found {file_type}")
        file_fields = [file_type.field(i) for i in range(file_type.num_fields)]
        children = []
        for child in target.fields:
            match = match_field(file_fields, child, mode)
            if match is None:
                children.append(pa.nulls(len(arr), to_arrow_type(child.type)))
            else:
                index = file_type.get_field_index(match.name)
                children.append(_conform(arr.field(index), match.type, child.type, mode))
        return pa.StructArray.from_arrays(
            children, fields=list(target_type), mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(target, ArrayType):
        if not (pa.types.is_list(file_type) or pa.types.is_large_list(file_type)):
            raise pa.ArrowInvalid(f"expected a list, found {file_type}")
        values = _conform(arr.values, file_type.value_type, target.element_type, mode)
        offsets = arr.offsets.cast(pa.int32()) if pa.types.is_large_list(file_type) else arr.offsets
        return pa.ListArray.from_arrays(
            offsets, values, type=target_type, mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(target, MapType):
        if not pa.types.is_map(file_type):
            raise pa.ArrowInvalid(f"expected a map, found {file_type}")
        keys = _conform(arr.keys, file_type.key_type, target.key_type, mode)
        items = _conform(arr.items, file_type.item_type, target.value_type, mode)
        return pa.MapArray.from_arrays(
            arr.offsets,
            keys,
            items,
            type=target_type,
            mask=arr.is_null() if arr.null_count else None,
        )
    if arr.type == target_type:
        return arr
    if isinstance(target, PrimitiveType) and target.name == "variant" and is_shredded(file_type):
        return unshred(arr)
    if pa.types.is_timestamp(arr.type) and pa.types.is_timestamp(target_type):
        # Units differ (INT96 as ns, TIMESTAMP_MILLIS); a zone-less INT96 value is a UTC instant.
        return arr.cast(pa.timestamp("us", tz=arr.type.tz)).cast(target_type)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr.cast(target_type)
