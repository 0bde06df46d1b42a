"""Delta table schemas as Spark schemas, and Arrow batches shaped exactly as Spark declared them.

A Delta schema string is Spark's own ``StructType`` JSON, so the conversion is a parse, after
two adjustments: field metadata other than ``comment`` is dropped (column-mapping ids and
physical names mean nothing to Spark), and geometry/geography columns, which the engine reads as
WKB, are declared ``binary``. Spark rejects Arrow batches whose column order, types or
nullability differ from the declared schema, so ``conform_batch`` rebuilds every batch that
differs against it (structs matched by field name, at every level); one already in shape passes.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType as SparkStructType

from deltaplane.engine import StructType


def spark_schema(schema: StructType) -> SparkStructType:
    """The Spark schema of a Delta table schema (logical names, exact nullability)."""
    return SparkStructType.fromJson(_clean(json.loads(schema.to_json_string())))


def _clean(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "metadata" and isinstance(value, dict):
                out[key] = {k: v for k, v in value.items() if k == "comment"}
            else:
                out[key] = _clean(value)
        return out
    if isinstance(node, list):
        return [_clean(v) for v in node]
    if isinstance(node, str) and node.startswith(("geometry", "geography")):
        return "binary"
    return node


def arrow_schema(schema: SparkStructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (timestamps in UTC)."""
    return to_arrow_schema(schema, timezone="UTC")


def as_nullable(schema: pa.Schema) -> pa.Schema:
    """Every field nullable, at every level: tables created or widened by Spark writes get
    nullable columns, as Delta Spark makes them (NOT NULL is a constraint set explicitly)."""
    return pa.schema([_nullable_field(f) for f in schema], metadata=schema.metadata)


def _nullable_field(f: pa.Field) -> pa.Field:
    return f.with_type(_nullable_type(f.type)).with_nullable(True)


def _nullable_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_nullable_field(f) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_nullable_field(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(t.key_field, _nullable_field(t.item_field))
    return t


def conform_batch(data: pa.RecordBatch | pa.Table, target: pa.Schema) -> pa.RecordBatch:
    """``data`` with exactly ``target``'s columns, types and nullability (by name)."""
    if isinstance(data, pa.RecordBatch) and data.schema.equals(target, check_metadata=True):
        return data  # already in shape (a scan's usual batch): nothing rebuilt
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    arrays = [_conform(table.column(f.name).combine_chunks(), f.type) for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _conform(arr: pa.Array, target: pa.DataType) -> pa.Array:
    if arr.type.equals(target, check_metadata=True):
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        children = [_conform(arr.field(f.name), f.type) for f in target]
        return pa.StructArray.from_arrays(
            children, fields=list(target), mask=arr.is_null() if arr.null_count else None
        )
    if pa.types.is_list(target) and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        values = _conform(arr.flatten(), target.value_type) if arr.offset == 0 else None
        if values is not None and len(arr.flatten()) == len(arr.values):
            return pa.ListArray.from_arrays(
                arr.offsets.cast(pa.int32()),
                values,
                type=target,
                mask=arr.is_null() if arr.null_count else None,
            )
    if pa.types.is_map(target) and pa.types.is_map(arr.type) and arr.offset == 0:
        keys = _conform(arr.keys, target.key_type)
        items = _conform(arr.items, target.item_type)
        return pa.MapArray.from_arrays(
            arr.offsets, keys, items, type=target, mask=arr.is_null() if arr.null_count else None
        )
    return arr.cast(target)
