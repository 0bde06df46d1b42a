"""Deletion vectors: descriptors, Z85, the RoaringBitmapArray format and the DV file framing.

A deletion vector marks rows of one data file as deleted. The bitmap itself is CRoaring's
portable 64-bit serialization behind a 4-byte magic, which ``pyroaring.BitMap64`` reads and writes
directly (checked against the protocol's test vector in the tests). Around it:

* inline DVs (``storageType='i'``) are the bitmap, Z85-encoded, inside the log;
* file DVs (``'u'`` relative from a UUID, ``'p'`` absolute) live in ``deletion_vector_*.bin``
  files: a version byte, then per DV a big-endian size, the bitmap, and a big-endian CRC-32.

Applying a DV is a boolean mask over the file's row positions (NumPy), never a row loop.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from urllib.parse import unquote, urlsplit

import numpy as np
from pyroaring import BitMap64

from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.errors import CorruptDeletionVectorError
from deltaplane.engine.storage.base import ObjectStore

MAGIC = 1681511377
LEGACY_NATIVE_MAGIC = 1681511376
FILE_FORMAT_VERSION = 1

# --- Z85 (ZeroMQ base-85: 4 big-endian bytes <-> 5 characters) ------------------------------

Z85_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_DECODE = np.full(256, 255, dtype=np.uint8)
_Z85_DECODE[np.frombuffer(Z85_ALPHABET, dtype=np.uint8)] = np.arange(85, dtype=np.uint8)
_Z85_ENCODE = np.frombuffer(Z85_ALPHABET, dtype=np.uint8)
_POW85 = np.array([85**4, 85**3, 85**2, 85, 1], dtype=np.uint64)


def z85_encode(data: bytes) -> str:
    """Encode, padding with zero bytes to a multiple of 4 (the caller records the true size)."""
    padded = data + b"\0" * (-len(data) % 4)
    words = np.frombuffer(padded, dtype=">u4").astype(np.uint64)
    digits = (words[:, None] // _POW85[None, :]) % 85
    return _Z85_ENCODE[digits.astype(np.intp)].tobytes().decode("ascii")


def z85_decode(text: str) -> bytes:
    """Decode Z85 text whose length is a multiple of 5; ``ValueError`` on bad input."""
    raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    if len(raw) % 5:
        raise ValueError(f"Z85 text length {len(raw)} is not a multiple of 5")
    digits = _Z85_DECODE[raw]
    if (digits == 255).any():
        raise ValueError("Z85 text holds a character outside the alphabet")
    words = (digits.reshape(-1, 5).astype(np.uint64) * _POW85).sum(axis=1)
    if (words > 0xFFFFFFFF).any():
        raise ValueError("Z85 block overflows 32 bits")
    return words.astype(">u4").tobytes()


def encode_uuid(value: uuid.UUID) -> str:
    """The 20-character Z85 form of a UUID used in ``'u'`` descriptors."""
    return z85_encode(value.bytes)


def decode_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=z85_decode(text))


# --- descriptor -> location -------------------------------------------------------------------


def dv_file_key(descriptor: DeletionVectorDescriptor) -> str:
    """Where a file-stored DV lives: a key relative to the table root, or an absolute URI."""
    kind = descriptor.storage_type
    value = descriptor.path_or_inline_dv
    if kind == "u":
        if len(value) < 20:
            raise CorruptDeletionVectorError(f"deletion vector path {value!r} is too short")
        prefix, encoded = value[:-20], value[-20:]
        try:
            name = f"deletion_vector_{decode_uuid(encoded)}.bin"
        except ValueError as e:
            raise CorruptDeletionVectorError(f"bad deletion vector id {value!r}: {e}") from e
        return f"{prefix}/{name}" if prefix else name
    if kind == "p":
        parts = urlsplit(value)
        if parts.scheme == "file":
            return unquote(parts.path)
        return unquote(value)
    raise CorruptDeletionVectorError(f"deletion vector storage type {kind!r} is not file-based")


# --- bitmap <-> bytes -------------------------------------------------------------------------


def serialize_bitmap(rows: np.ndarray | list[int] | BitMap64) -> bytes:
    """Magic plus portable RoaringBitmapArray for a set of row indices."""
    bitmap = rows if isinstance(rows, BitMap64) else BitMap64(np.asarray(rows, dtype=np.uint64))
    return struct.pack("<I", MAGIC) + bitmap.serialize()


def deserialize_bitmap(data: bytes, where: str = "") -> np.ndarray:
    """Row indices (sorted uint64) from magic plus bitmap bytes."""
    if len(data) < 4:
        raise CorruptDeletionVectorError(f"deletion vector{where} is shorter than its magic", where)
    (magic,) = struct.unpack_from("<I", data)
    if magic == LEGACY_NATIVE_MAGIC:
        return _deserialize_native(data, where)
    if magic != MAGIC:
        raise CorruptDeletionVectorError(f"deletion vector{where} has bad magic {magic}", where)
    try:
        bitmap = BitMap64.deserialize(data[4:])
    except Exception as e:  # pyroaring raises ValueError/OverflowError on malformed input
        raise CorruptDeletionVectorError(f"deletion vector{where} does not decode: {e}", where) from e
    return np.asarray(bitmap.to_array(), dtype=np.uint64)


def _deserialize_native(data: bytes, where: str) -> np.ndarray:
    """The legacy "native" layout: u32 count, then per bitmap a u32 length and 32-bit roaring."""
    from pyroaring import BitMap

    try:
        (count,) = struct.unpack_from("<I", data, 4)
        pos = 8
        parts = []
        for high in range(count):
            (length,) = struct.unpack_from("<I", data, pos)
            pos += 4
            low = np.asarray(BitMap.deserialize(data[pos : pos + length]).to_array(), np.uint64)
            pos += length
            parts.append(low | np.uint64(high << 32))
    except Exception as e:
        raise CorruptDeletionVectorError(f"deletion vector{where} does not decode: {e}", where) from e
    return np.concatenate(parts) if parts else np.empty(0, np.uint64)


def frame_dv(bitmap_bytes: bytes) -> bytes:
    """One DV's framing inside a DV file: big-endian size, bitmap, big-endian CRC-32."""
    return (
        struct.pack(">I", len(bitmap_bytes))
        + bitmap_bytes
        + struct.pack(">I", zlib.crc32(bitmap_bytes) & 0xFFFFFFFF)
    )


# --- reading ----------------------------------------------------------------------------------


def read_deletion_vector(
    store: ObjectStore, descriptor: DeletionVectorDescriptor, *, data_file: str = ""
) -> np.ndarray:
    """Deleted row indices of one data file, with every check the protocol asks for."""
    if descriptor.storage_type == "i":
        where = f" (inline, for {data_file})" if data_file else " (inline)"
        try:
            raw = z85_decode(descriptor.path_or_inline_dv)[: descriptor.size_in_bytes]
        except ValueError as e:
            raise CorruptDeletionVectorError(f"deletion vector{where}: {e}") from e
        rows = deserialize_bitmap(raw, where)
    else:
        key = dv_file_key(descriptor)
        rows = _read_from_file(store, key, descriptor)
    if len(rows) != descriptor.cardinality:
        raise CorruptDeletionVectorError(
            f"deletion vector for {data_file or 'a data file'} holds {len(rows)} rows but its "
            f"descriptor says cardinality {descriptor.cardinality}",
            None if descriptor.storage_type == "i" else dv_file_key(descriptor),
        )
    return rows


def _read_from_file(store: ObjectStore, key: str, descriptor: DeletionVectorDescriptor) -> np.ndarray:
    from deltaplane.engine.errors import ObjectNotFoundError

    offset = 1 if descriptor.offset is None else descriptor.offset
    size = descriptor.size_in_bytes
    from deltaplane.engine.storage import resolve_location

    try:
        target, relative = resolve_location(store, key)
        chunk = target.get_range(relative, offset, size + 8)
    except ObjectNotFoundError as e:
        raise CorruptDeletionVectorError(f"deletion vector file {key} is missing", key) from e
    if len(chunk) < size + 8:
        raise CorruptDeletionVectorError(f"deletion vector file {key} is truncated at offset {offset}", key)
    (stored_size,) = struct.unpack_from(">I", chunk)
    if stored_size != size:
        raise CorruptDeletionVectorError(
            f"deletion vector in {key} at offset {offset} has size {stored_size}, descriptor says {size}",
            key,
        )
    bitmap_bytes = chunk[4 : 4 + size]
    (stored_crc,) = struct.unpack_from(">I", chunk, 4 + size)
    actual_crc = zlib.crc32(bitmap_bytes) & 0xFFFFFFFF
    if stored_crc != actual_crc:
        raise CorruptDeletionVectorError(
            f"deletion vector checksum mismatch in {key} at offset {offset}: "
            f"stored {stored_crc:#010x}, computed {actual_crc:#010x}",
            key,
        )
    return deserialize_bitmap(bitmap_bytes, f" in {key}")


def keep_mask(num_rows: int, deleted: np.ndarray) -> np.ndarray:
    """Boolean mask of surviving rows; deleted indices beyond the file are a corrupt DV."""
    mask = np.ones(num_rows, dtype=bool)
    if len(deleted):
        if int(deleted[-1]) >= num_rows:
            raise CorruptDeletionVectorError(
                f"deletion vector deletes row {int(deleted[-1])} of a {num_rows}-row file"
            )
        mask[deleted.astype(np.intp)] = False
    return mask


# --- writing ----------------------------------------------------------------------------------

INLINE_MAX_BYTES = 64  # a serialized bitmap up to this size goes inline in the log (Z85)


class DeletionVectorWriter:
    """Collects one commit's deletion vectors into a single ``deletion_vector_<uuid>.bin``.

    Each DV is framed (size, bitmap, CRC) at its own offset, so one file serves many data files;
    small ones are kept inline in the log instead. ``close()`` publishes the file atomically
    (create-if-absent) and must happen before the commit that references it.
    """

    def __init__(self, store: ObjectStore, *, inline_max_bytes: int = INLINE_MAX_BYTES, prefix: str = ""):
        self.store = store
        self.inline_max_bytes = inline_max_bytes
        self.prefix = prefix
        self._id = uuid.uuid4()
        self._chunks: list[bytes] = [bytes([FILE_FORMAT_VERSION])]
        self._size = 1
        self.count = 0

    @property
    def key(self) -> str:
        name = f"deletion_vector_{self._id}.bin"
        return f"{self.prefix}/{name}" if self.prefix else name

    def add(self, rows: np.ndarray | BitMap64) -> DeletionVectorDescriptor:
        bitmap = rows if isinstance(rows, BitMap64) else BitMap64(np.asarray(rows, dtype=np.uint64))
        data = serialize_bitmap(bitmap)
        self.count += 1
        if len(data) <= self.inline_max_bytes:
            return DeletionVectorDescriptor(
                "i", z85_encode(data), size_in_bytes=len(data), cardinality=len(bitmap)
            )
        offset = self._size
        framed = frame_dv(data)
        self._chunks.append(framed)
        self._size += len(framed)
        return DeletionVectorDescriptor(
            "u",
            self.prefix + encode_uuid(self._id),
            size_in_bytes=len(data),
            cardinality=len(bitmap),
            offset=offset,
        )

    def close(self) -> str | None:
        """Write the file if any DV went to it; its key, or ``None``."""
        if len(self._chunks) == 1:
            return None
        self.store.put(self.key, b"".join(self._chunks), mode="create")
        return self.key


def union_rows(existing: np.ndarray | None, new: np.ndarray) -> BitMap64:
    """The rows of an existing deletion vector plus newly deleted ones."""
    bitmap = BitMap64(np.asarray(new, dtype=np.uint64))
    if existing is not None and len(existing):
        bitmap |= BitMap64(np.asarray(existing, dtype=np.uint64))
    return bitmap
