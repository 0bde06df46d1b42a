"""Shredded variants (the ``variantShredding`` feature) reassembled into the plain variant encoding.

A shredded variant column is a Parquet group ``{metadata, value, typed_value}``: paths of the
value that have a known type are stored as typed columns (``typed_value``), the rest as Variant
binary (``value``), and the reader must put them back together (Parquet's VariantShredding
spec). The result is the unshredded ``{value, metadata}`` struct this engine exposes for every
variant column, so readers cannot tell how a file stored it.

The reassembly is column-wise where it can be (each typed column is encoded as a whole) and
per row where the encoding requires it (objects and arrays are built from their members'
bytes). ``metadata`` is kept as is: every field name of a shredded object is in it by the spec.
"""

from __future__ import annotations

import struct
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import DataFileError

VARIANT_NULL = b"\x00"

# Variant primitive type ids (Parquet VariantEncoding)
_NULL, _TRUE, _FALSE, _INT8, _INT16, _INT32, _INT64, _DOUBLE = 0, 1, 2, 3, 4, 5, 6, 7
_DECIMAL4, _DECIMAL8, _DECIMAL16, _DATE, _TIMESTAMP, _TIMESTAMP_NTZ, _FLOAT = 8, 9, 10, 11, 12, 13, 14
_BINARY, _STRING, _TIME_NTZ, _TIMESTAMP_NANOS, _TIMESTAMP_NTZ_NANOS, _UUID = 15, 16, 17, 18, 19, 20

_OBJECT, _ARRAY = 2, 3


def is_shredded(file_type: pa.DataType) -> bool:
    """Whether a file's variant column is stored shredded (has ``typed_value``)."""
    return pa.types.is_struct(file_type) and file_type.get_field_index("typed_value") >= 0


def unshred(column: pa.Array, where: str = "") -> pa.StructArray:
    """``{metadata, value, typed_value}`` rows as ``{value, metadata}`` variant rows."""
    try:
        return _unshred(column)
    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise DataFileError(f"cannot reassemble the shredded variant column{where}: {e}") from None


def _unshred(column: pa.Array) -> pa.StructArray:
    metadata = column.field(column.type.get_field_index("metadata"))
    dictionaries = _Dictionaries(metadata)
    value = _child(column, "value")
    typed = _child(column, "typed_value")
    encoded = _encode(value, typed, dictionaries, len(column))
    valid = column.is_valid().to_pylist() if column.null_count else [True] * len(column)
    # A variant that is present but has neither part is missing, which reads as Variant null.
    values = [
        (v if v is not None else VARIANT_NULL) if ok else None for v, ok in zip(encoded, valid, strict=True)
    ]
    out_value = pa.array([v if v is not None else b"" for v in values], pa.binary())
    out_metadata = pc.if_else(pc.is_valid(metadata), metadata.cast(pa.binary()), pa.scalar(b"", pa.binary()))
    mask = pa.array([not ok for ok in valid]) if column.null_count else None
    return pa.StructArray.from_arrays(
        [out_value, out_metadata],
        fields=[
            pa.field("value", pa.binary(), nullable=False),
            pa.field("metadata", pa.binary(), nullable=False),
        ],
        mask=mask,
    )


def _child(arr: pa.Array, name: str) -> pa.Array | None:
    index = arr.type.get_field_index(name)
    if index < 0:
        return None
    # ``field`` ignores the parent's nulls; combine them so a null parent means a null child.
    return _under(arr, arr.field(index))


def _under(parent: pa.Array, child: pa.Array) -> pa.Array:
    if not parent.null_count:
        return child
    return pc.if_else(parent.is_valid(), child, pa.scalar(None, child.type))


class _Dictionaries:
    """Each row's metadata dictionary (field name -> id), parsed once per distinct metadata."""

    def __init__(self, metadata: pa.Array):
        self._rows = metadata.to_pylist()
        self._cache: dict[bytes, dict[str, int]] = {}

    def ids(self, row: int) -> dict[str, int]:
        raw = self._rows[row]
        found = self._cache.get(raw)
        if found is None:
            names = metadata_names(raw)
            found = self._cache[raw] = {name: i for i, name in reversed(list(enumerate(names)))}
        return found

    def names(self, row: int) -> list[str]:
        return metadata_names(self._rows[row])


def metadata_names(raw: bytes) -> list[str]:
    header = raw[0]
    if header & 0x0F != 1:
        raise ValueError(f"unsupported variant metadata version {header & 0x0F}")
    size = ((header >> 6) & 3) + 1
    count = int.from_bytes(raw[1 : 1 + size], "little")
    offsets = [
        int.from_bytes(raw[1 + size * (i + 1) : 1 + size * (i + 2)], "little") for i in range(count + 1)
    ]
    start = 1 + size * (count + 2)
    return [raw[start + offsets[i] : start + offsets[i + 1]].decode("utf-8") for i in range(count)]


# --- reassembly ----------------------------------------------------------------------------------


def _encode(value: pa.Array | None, typed: pa.Array | None, dicts: _Dictionaries, n: int, rows=None) -> list:
    """Per row (of ``rows``, the top-level row each position belongs to), the variant bytes of
    ``value``/``typed_value``, or ``None`` where both are missing."""
    rows = rows if rows is not None else range(n)
    plain = value.to_pylist() if value is not None else [None] * n
    if typed is None:
        return plain
    present = typed.is_valid().to_pylist()
    t = typed.type
    if pa.types.is_struct(t):
        fields = {}
        for i in range(t.num_fields):
            name = t.field(i).name
            member = _under(typed, typed.field(i))
            fields[name] = _encode(_child(member, "value"), _child(member, "typed_value"), dicts, n, rows)
        out = []
        for i, row in enumerate(rows):
            if not present[i]:
                out.append(plain[i])
                continue
            members = {name: encoded[i] for name, encoded in fields.items() if encoded[i] is not None}
            if plain[i] is not None:  # partially shredded: the rest of the object is in ``value``
                rest = object_fields(plain[i], dicts.names(row))
                for name, encoded in rest.items():
                    members.setdefault(name, encoded)
            out.append(encode_object(members, dicts.ids(row)))
        return out
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        raw_offsets = typed.offsets.to_pylist()
        first = raw_offsets[0]
        offsets = [o - first for o in raw_offsets]
        flat = typed.values.slice(first, offsets[-1])
        element_rows = [row for i, row in enumerate(rows) for _ in range(offsets[i + 1] - offsets[i])]
        elements = _encode(_child(flat, "value"), _child(flat, "typed_value"), dicts, len(flat), element_rows)
        out = []
        for i in range(n):
            if not present[i]:
                out.append(plain[i])
                continue
            items = elements[offsets[i] : offsets[i + 1]]
            out.append(encode_array([e if e is not None else VARIANT_NULL for e in items]))
        return out
    encoded = encode_primitives(typed)
    return [encoded[i] if present[i] else plain[i] for i in range(n)]


def object_fields(raw: bytes, names: list[str]) -> dict[str, bytes]:
    """The fields of an encoded variant object, name -> encoded value."""
    if raw[0] & 3 != _OBJECT:
        raise ValueError("a partially shredded variant's value is not an object")
    header = raw[0] >> 2
    offset_size = (header & 3) + 1
    id_size = ((header >> 2) & 3) + 1
    large = (header >> 4) & 1
    count_size = 4 if large else 1
    count = int.from_bytes(raw[1 : 1 + count_size], "little")
    pos = 1 + count_size
    ids = [int.from_bytes(raw[pos + id_size * i : pos + id_size * (i + 1)], "little") for i in range(count)]
    pos += id_size * count
    offsets = [
        int.from_bytes(raw[pos + offset_size * i : pos + offset_size * (i + 1)], "little")
        for i in range(count + 1)
    ]
    base = pos + offset_size * (count + 1)
    ends = sorted(offsets)
    out = {}
    for field_id, start in zip(ids, offsets[:-1], strict=True):
        end = next(o for o in ends if o > start) if start < offsets[-1] else start
        out[names[field_id]] = raw[base + start : base + end]
    return out


def _width(value: int) -> int:
    return 1 if value < 1 << 8 else 2 if value < 1 << 16 else 3 if value < 1 << 24 else 4


def encode_object(members: dict[str, bytes], ids: dict[str, int]) -> bytes:
    """An object from encoded member values; field ids and offsets in name order (UTF-8 bytes)."""
    names = sorted(members, key=lambda name: name.encode("utf-8"))
    try:
        field_ids = [ids[name] for name in names]
    except KeyError as e:
        raise ValueError(f"field {e.args[0]!r} is not in the variant metadata") from None
    values = [members[name] for name in names]
    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + len(v))
    id_size = _width(max(field_ids, default=0))
    offset_size = _width(offsets[-1])
    large = len(names) > 255
    header = (offset_size - 1) | ((id_size - 1) << 2) | (int(large) << 4)
    out = bytearray([(header << 2) | _OBJECT])
    out += len(names).to_bytes(4 if large else 1, "little")
    for field_id in field_ids:
        out += field_id.to_bytes(id_size, "little")
    for offset in offsets:
        out += offset.to_bytes(offset_size, "little")
    for v in values:
        out += v
    return bytes(out)


def encode_array(elements: list[bytes]) -> bytes:
    offsets = [0]
    for e in elements:
        offsets.append(offsets[-1] + len(e))
    offset_size = _width(offsets[-1])
    large = len(elements) > 255
    header = (offset_size - 1) | (int(large) << 2)
    out = bytearray([(header << 2) | _ARRAY])
    out += len(elements).to_bytes(4 if large else 1, "little")
    for offset in offsets:
        out += offset.to_bytes(offset_size, "little")
    for e in elements:
        out += e
    return bytes(out)


def _primitive(type_id: int, data: bytes = b"") -> bytes:
    return bytes([type_id << 2]) + data


def encode_primitives(arr: pa.Array) -> list[bytes | None]:
    """Each value of a typed column as a variant primitive (``None`` where null)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return encode_primitives(arr.dictionary_decode())
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return _encode_temporal(arr)
    values = arr.to_pylist()
    if pa.types.is_boolean(t):
        return [None if v is None else _primitive(_TRUE if v else _FALSE) for v in values]
    if pa.types.is_integer(t):
        type_id, fmt = {1: (_INT8, "<b"), 2: (_INT16, "<h"), 4: (_INT32, "<i"), 8: (_INT64, "<q")}[
            t.bit_width // 8
        ]
        return [None if v is None else _primitive(type_id, struct.pack(fmt, v)) for v in values]
    if pa.types.is_float32(t):
        return [None if v is None else _primitive(_FLOAT, struct.pack("<f", v)) for v in values]
    if pa.types.is_float64(t):
        return [None if v is None else _primitive(_DOUBLE, struct.pack("<d", v)) for v in values]
    if pa.types.is_decimal(t):
        return [None if v is None else _decimal(v, t.precision, t.scale) for v in values]
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return [None if v is None else encode_string(v) for v in values]
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        return [None if v is None else _primitive(_UUID, v) for v in values]  # UUID, big-endian
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return [None if v is None else _primitive(_BINARY, struct.pack("<I", len(v)) + v) for v in values]
    if isinstance(t, pa.ExtensionType):
        return encode_primitives(arr.storage)
    raise ValueError(f"a shredded value of type {t} has no variant encoding")


def encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) < 64:
        return bytes([(len(data) << 2) | 1]) + data
    return _primitive(_STRING, struct.pack("<I", len(data)) + data)


def _decimal(value: Decimal, precision: int, scale: int) -> bytes:
    unscaled = int(value.scaleb(scale))
    if precision <= 9:
        return _primitive(_DECIMAL4, bytes([scale]) + unscaled.to_bytes(4, "little", signed=True))
    if precision <= 18:
        return _primitive(_DECIMAL8, bytes([scale]) + unscaled.to_bytes(8, "little", signed=True))
    return _primitive(_DECIMAL16, bytes([scale]) + unscaled.to_bytes(16, "little", signed=True))


def _encode_temporal(arr: pa.Array) -> list[bytes | None]:
    t = arr.type
    if pa.types.is_date(t):
        days = arr.cast(pa.date32()).cast(pa.int32()).to_pylist()
        return [None if d is None else _primitive(_DATE, struct.pack("<i", d)) for d in days]
    if pa.types.is_time(t):
        micros = arr.cast(pa.time64("us")).cast(pa.int64()).to_pylist()
        return [None if m is None else _primitive(_TIME_NTZ, struct.pack("<q", m)) for m in micros]
    if t.unit == "ns":
        type_id = _TIMESTAMP_NANOS if t.tz is not None else _TIMESTAMP_NTZ_NANOS
        raw = arr.cast(pa.int64()).to_pylist()
    else:
        type_id = _TIMESTAMP if t.tz is not None else _TIMESTAMP_NTZ
        raw = arr.cast(pa.timestamp("us", t.tz)).cast(pa.int64()).to_pylist()
    return [None if v is None else _primitive(type_id, struct.pack("<q", v)) for v in raw]
