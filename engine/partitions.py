"""Partition values: the log's string form, parsed to typed Arrow columns in one vectorized step.

In the log every partition value is a string (``partitionValues`` is ``map<string,string>``) and
the empty string, like a JSON null, means null, whatever the column's type. Timestamps come in two
forms: the legacy ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (read as UTC) and ISO-8601 with a zone.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import SchemaError
from deltaplane.engine.schema import DataType, DecimalType, PrimitiveType, to_arrow_type
from deltaplane.engine.values_to_arrow import array_from_values, scalar

_ZONED = r"(Z|[+-]\d{2}:?\d{2})$"


def parse_partition_values(values: pa.Array | pa.ChunkedArray, dtype: DataType) -> pa.Array:
    """Typed partition values from their serialized strings (``""`` and null become null)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.nulls(0, pa.string())
    if pa.types.is_null(values.type):
        return pa.nulls(len(values), to_arrow_type(dtype))
    strings = values.cast(pa.string())
    strings = pc.if_else(pc.equal(strings, scalar("", pa.string())), scalar(None, pa.string()), strings)
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
        bad = pc.and_(
            pc.is_valid(lowered),
            pc.invert(pc.is_in(lowered, array_from_values(["true", "false"], pa.string()))),
        )
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
    naive = pc.if_else(zoned, scalar(None, pa.string()), strings)
    from_naive = pc.cast(pc.cast(naive, pa.timestamp("us")), target)
    if not pc.any(pc.fill_null(zoned, False)).as_py():
        return from_naive
    with_zone = pc.if_else(zoned, strings, scalar(None, pa.string()))
    return pc.coalesce(pc.cast(with_zone, target), from_naive)


# --- writing ------------------------------------------------------------------------------------

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Characters Hive (and Spark's escapePathName) percent-escape in partition directory names.
_HIVE_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 32))


def serialize_partition_value(value, dtype: DataType) -> str | None:
    """A typed value as the log's partition string (``None`` for null, as writers emit it)."""
    import datetime as dt
    from decimal import Decimal

    import numpy as np

    if value is None:
        return None
    name = dtype.name if isinstance(dtype, PrimitiveType) else None
    if isinstance(dtype, DecimalType) or isinstance(value, Decimal):
        return format(Decimal(value), "f")
    if name == "string":
        return value if value != "" else None  # an empty partition string is a null partition
    if name == "boolean":
        return "true" if value else "false"
    if name in ("float", "double") and not math.isfinite(value):
        # As Delta Spark writes them (Java's Double.toString), which every reader parses.
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if name == "float":
        return str(np.float32(value))
    if name == "binary":
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError("binary partition values must be valid UTF-8") from None
    if name == "timestamp":
        stamp = value.astimezone(dt.UTC) if value.tzinfo else value
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if name == "timestamp_ntz":
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if name == "date":
        return value.isoformat()
    return str(value)


def escape_partition_path_component(text: str | None) -> str:
    """Hive-style directory name part: escape reserved characters; null is the Hive sentinel."""
    if text is None or text == "":
        return HIVE_NULL
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in text)


def partition_directory(columns: list[str], values: list[str | None]) -> str:
    """``col=value/col2=value2`` with both names and values escaped."""
    return "/".join(
        f"{escape_partition_path_component(c)}={escape_partition_path_component(v)}"
        for c, v in zip(columns, values, strict=True)
    )
