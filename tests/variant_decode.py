"""A small, independent decoder of the Variant binary encoding (Parquet VariantEncoding), for
tests: it turns ``(value, metadata)`` bytes into Python values so that variants written in
different byte layouts can be compared by what they mean. It shares no code with the engine."""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from decimal import Decimal

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _names(metadata: bytes) -> list[str]:
    width = ((metadata[0] >> 6) & 3) + 1
    count = int.from_bytes(metadata[1 : 1 + width], "little")
    offsets = [
        int.from_bytes(metadata[1 + width * (k + 1) : 1 + width * (k + 2)], "little")
        for k in range(count + 1)
    ]
    base = 1 + width * (count + 2)
    return [metadata[base + offsets[k] : base + offsets[k + 1]].decode() for k in range(count)]


def decode(value: bytes, metadata: bytes):
    return _value(value, 0, _names(metadata))


def _value(data: bytes, pos: int, names: list[str]):
    head = data[pos]
    basic, info = head & 3, head >> 2
    if basic == 1:  # short string
        return data[pos + 1 : pos + 1 + info].decode()
    if basic in (2, 3):
        return _container(data, pos, basic, info, names)
    body = pos + 1
    fixed = {3: "<b", 4: "<h", 5: "<i", 6: "<q", 7: "<d", 14: "<f"}
    if info == 0:
        return None
    if info in (1, 2):
        return info == 1
    if info in fixed:
        return struct.unpack_from(fixed[info], data, body)[0]
    if info in (8, 9, 10):
        scale = data[body]
        size = {8: 4, 9: 8, 10: 16}[info]
        unscaled = int.from_bytes(data[body + 1 : body + 1 + size], "little", signed=True)
        return Decimal(unscaled).scaleb(-scale)
    if info == 11:
        return dt.date(1970, 1, 1) + dt.timedelta(days=struct.unpack_from("<i", data, body)[0])
    if info in (12, 13):
        micros = struct.unpack_from("<q", data, body)[0]
        when = EPOCH + dt.timedelta(microseconds=micros)
        return when if info == 12 else when.replace(tzinfo=None)
    if info in (18, 19):
        return ("nanos", info, struct.unpack_from("<q", data, body)[0])
    if info == 17:
        return ("time", struct.unpack_from("<q", data, body)[0])
    if info in (15, 16):
        size = struct.unpack_from("<I", data, body)[0]
        raw = data[body + 4 : body + 4 + size]
        return raw.decode() if info == 16 else bytes(raw)
    if info == 20:
        return uuid.UUID(bytes=bytes(data[body : body + 16]))
    raise ValueError(f"unknown variant primitive type {info}")


def _container(data: bytes, pos: int, basic: int, info: int, names: list[str]):
    offset_size = (info & 3) + 1
    if basic == 2:
        id_size = ((info >> 2) & 3) + 1
        large = (info >> 4) & 1
    else:
        id_size, large = 0, (info >> 2) & 1
    count_size = 4 if large else 1
    count = int.from_bytes(data[pos + 1 : pos + 1 + count_size], "little")
    cursor = pos + 1 + count_size
    ids = [
        int.from_bytes(data[cursor + id_size * k : cursor + id_size * (k + 1)], "little")
        for k in range(count)
    ]
    cursor += id_size * count
    offsets = [
        int.from_bytes(data[cursor + offset_size * k : cursor + offset_size * (k + 1)], "little")
        for k in range(count + 1)
    ]
    base = cursor + offset_size * (count + 1)
    items = [_value(data, base + offsets[k], names) for k in range(count)]
    if basic == 3:
        return items
    keys = [names[i] for i in ids]
    assert keys == sorted(keys, key=lambda k: k.encode()), f"object keys out of order: {keys}"
    return dict(zip(keys, items, strict=True))
