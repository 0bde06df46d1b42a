"""Partition values: the log's string form, parsed to typed Arrow columns in one vectorized step.

In the log every partition value is a string (``partitionValues`` is ``map<string,string>``) and
the empty string, like a JSON null, means null, whatever the column's type. Timestamps come in two
forms: the legacy ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (read as UTC) and ISO-8601 with a zone.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import SchemaError
from engine.schema import DataType, DecimalType, PrimitiveType, to_arrow_type

_ZONED = r"(Z|[+-]\d{2}:?\d{2})$"


def parse_partition_values(values: pa.Array | pa.ChunkedArray, dtype: DataType) -> pa.Array:
    """Typed partition values from their serialized strings (``""`` and null become null)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    if pa.types.is_null(values.type):
        return pa.nulls(len(values), to_arrow_type(dtype))
    strings = values.cast(pa.string())
    strings = pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)
    try:
        return _convert(strings, dtype)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"partition values do not parse as {dtype.to_json()}: {e}") from e


def _convert(strings: pa.Array, dtype: DataType) -> pa.Array:
    if isinstance(dtype, DecimalType):
        return pc.cast(strings, pa.decimal128(dtype.precision, dtype.scale))
    if not isinstance(dtype, PrimitiveType):
        raise SchemaError(f"{dtype.to_json()} cannot be a partition column type")
    name = dtype.name
    if name == "string":
        return strings
    if name == "binary":
        return strings.cast(pa.binary())
    if name == "boolean":
        lowered = pc.utf8_lower(strings)
        bad = pc.and_(pc.is_valid(lowered), pc.invert(pc.is_in(lowered, pa.array(["true", "false"]))))
        if pc.any(bad).as_py():
            raise pa.ArrowInvalid("boolean partition values must be 'true' or 'false'")
        return pc.equal(lowered, "true")
    if name == "timestamp":
        return parse_utc_timestamps(strings)
    if name == "timestamp_ntz":
        return pc.cast(strings, pa.timestamp("us"))
    if name == "date":
        # Some writers serialize date partitions with a midnight time ("2021-09-08 00:00:00").
        return pc.cast(pc.utf8_slice_codeunits(strings, 0, 10), pa.date32())
    return pc.cast(strings, to_arrow_type(dtype))


def parse_utc_timestamps(strings: pa.Array) -> pa.Array:
    """Timestamp strings to UTC instants: zoned strings as given, zone-less ones as UTC."""
    target = pa.timestamp("us", tz="UTC")
    zoned = pc.match_substring_regex(strings, _ZONED)
    if pc.all(pc.fill_null(zoned, True)).as_py():
        return pc.cast(strings, target)
    naive = pc.if_else(zoned, pa.scalar(None, pa.string()), strings)
    from_naive = pc.cast(pc.cast(naive, pa.timestamp("us")), target)
    if not pc.any(pc.fill_null(zoned, False)).as_py():
        return from_naive
    with_zone = pc.if_else(zoned, strings, pa.scalar(None, pa.string()))
    return pc.coalesce(pc.cast(with_zone, target), from_naive)
