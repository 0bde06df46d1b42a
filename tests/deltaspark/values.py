"""One JSON normalization for both sides of a comparison (standard library only: the Delta Spark
server imports it in the reference virtualenv, compare.py in the project's): dates and timestamps
as ISO text in UTC, decimals as text, binary as hex, maps and structs as objects, non-finite
floats as text."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any


def normalize(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if hasattr(value, "asDict"):  # a Spark Row (a tuple: checked first)
        return {k: normalize(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(k): normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 and not hasattr(v, "asDict") for v in value):
            return {str(k): normalize(v) for k, v in value}  # an Arrow map: (key, value) pairs
        return [normalize(v) for v in value]
    return str(value)
