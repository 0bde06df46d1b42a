"""Deletion vectors: the protocol's test vectors, and every check a reader must make."""

from __future__ import annotations

import struct
import uuid

import numpy as np
import pytest

from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.deletion_vectors import (
    decode_uuid,
    deserialize_bitmap,
    dv_file_key,
    encode_uuid,
    frame_dv,
    keep_mask,
    read_deletion_vector,
    serialize_bitmap,
    z85_decode,
    z85_encode,
)
from deltaplane.engine.errors import CorruptDeletionVectorError
from deltaplane.engine.storage import MemoryStore

VECTOR_ROWS = [3, 4, 7, 11, 18, 29]
VECTOR_BITMAP = bytes.fromhex(
    "d1d339640100000000000000000000003a3000000100000000000500100000000300040007000b0012001d00"
)
VECTOR_INLINE = "^Bg9^0rr910000000000iXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"


def test_bitmap_serialization_matches_protocol_vector():
    assert serialize_bitmap(VECTOR_ROWS) == VECTOR_BITMAP
    assert deserialize_bitmap(VECTOR_BITMAP).tolist() == VECTOR_ROWS


def test_inline_vector():
    assert z85_encode(VECTOR_BITMAP) == VECTOR_INLINE
    dv = DeletionVectorDescriptor("i", VECTOR_INLINE, size_in_bytes=44, cardinality=6)
    assert read_deletion_vector(MemoryStore(), dv).tolist() == VECTOR_ROWS


def test_file_framing_and_crc_vector():
    framed = frame_dv(VECTOR_BITMAP)
    assert framed == bytes.fromhex("0000002c") + VECTOR_BITMAP + bytes.fromhex("acd74a79")


def test_uuid_path_from_spec_example():
    value = "ab^-aqEH.-t@S}K{vb[*k^"
    assert decode_uuid(value[2:]) == uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    dv = DeletionVectorDescriptor("u", value, 10, 1, offset=1)
    assert dv_file_key(dv) == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    u = uuid.uuid4()
    assert decode_uuid(encode_uuid(u)) == u and len(encode_uuid(u)) == 20


def test_z85_round_trip_and_errors():
    for data in [b"", b"\x00\x00\x00\x00", bytes(range(256))]:
        assert z85_decode(z85_encode(data))[: len(data)] == data
    with pytest.raises(ValueError):
        z85_decode("abcd")  # not a multiple of 5
    with pytest.raises(ValueError):
        z85_decode("abc d")  # space is not in the alphabet


def _dv_file(store: MemoryStore, bitmaps: list[bytes]) -> tuple[str, list[int]]:
    u = uuid.uuid4()
    data, offsets = bytearray(b"\x01"), []
    for b in bitmaps:
        offsets.append(len(data))
        data += frame_dv(b)
    store.put(f"deletion_vector_{u}.bin", bytes(data))
    return encode_uuid(u), offsets


def test_reads_each_dv_of_a_shared_file():
    store = MemoryStore()
    second = serialize_bitmap([0, 1, 2**32 + 5])  # a row index in the second 32-bit bucket
    name, offsets = _dv_file(store, [VECTOR_BITMAP, second])
    first = DeletionVectorDescriptor("u", name, 44, 6, offset=offsets[0])
    other = DeletionVectorDescriptor("u", name, len(second), 3, offset=offsets[1])
    assert read_deletion_vector(store, first).tolist() == VECTOR_ROWS
    assert read_deletion_vector(store, other).tolist() == [0, 1, 2**32 + 5]


def test_bad_checksum_names_the_file():
    store = MemoryStore()
    name, _ = _dv_file(store, [VECTOR_BITMAP])
    key = next(m.key for m in store.list(""))
    data = bytearray(store.get(key))
    data[-1] ^= 0xFF  # flip the CRC
    store.put(key, bytes(data))
    dv = DeletionVectorDescriptor("u", name, 44, 6, offset=1)
    with pytest.raises(CorruptDeletionVectorError, match="checksum mismatch") as info:
        read_deletion_vector(store, dv)
    assert info.value.path == key


def test_size_magic_cardinality_and_missing_file_checks():
    store = MemoryStore()
    name, _ = _dv_file(store, [VECTOR_BITMAP])
    with pytest.raises(CorruptDeletionVectorError, match="size"):
        read_deletion_vector(store, DeletionVectorDescriptor("u", name, 40, 6, offset=1))
    with pytest.raises(CorruptDeletionVectorError, match="cardinality"):
        read_deletion_vector(store, DeletionVectorDescriptor("u", name, 44, 7, offset=1))
    with pytest.raises(CorruptDeletionVectorError, match="missing"):
        read_deletion_vector(store, DeletionVectorDescriptor("u", encode_uuid(uuid.uuid4()), 44, 6, offset=1))
    bad_magic = struct.pack("<I", 12345) + VECTOR_BITMAP[4:]
    with pytest.raises(CorruptDeletionVectorError, match="magic"):
        deserialize_bitmap(bad_magic)


def test_empty_buckets_are_accepted():
    # Delta Spark writes a bucket for every key up to the max, empty ones included.
    empty_bucket = struct.pack("<I", 0) + struct.pack("<II", 12346, 0)
    one = serialize_bitmap([5])[16:]  # magic, bucket count and key skipped: the bucket data
    data = struct.pack("<IQ", 1681511377, 2) + empty_bucket + struct.pack("<I", 1) + one
    assert deserialize_bitmap(data).tolist() == [2**32 + 5]


def test_keep_mask():
    assert keep_mask(5, np.array([1, 3], np.uint64)).tolist() == [True, False, True, False, True]
    with pytest.raises(CorruptDeletionVectorError):
        keep_mask(3, np.array([3], np.uint64))
