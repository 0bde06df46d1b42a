"""Deletion vectors: the deleted row positions of one live file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.deletion_vectors import dv_file_key, read_deletion_vector, z85_decode
from deltaplane.engine.errors import (
    CorruptDeletionVectorError,
    DataFileError,
    ObjectNotFoundError,
)
from deltaplane.engine.snapshot import Snapshot


@dataclass(frozen=True)
class StoredDeletionVector:
    """Where one live file's deletion vector is, for a reader that decodes it itself.

    Stored in a file: at ``offset`` in ``location`` (canonical: a key relative to the table root,
    or an absolute path or URI) a frame of a 4-byte big-endian size (``size``), the bitmap (the
    magic number, then a portable 64-bit roaring bitmap), and its big-endian CRC-32. Inline:
    ``inline`` holds the bitmap. Either way it holds ``cardinality`` positions."""

    cardinality: int
    size: int
    location: str | None = None
    offset: int = 1
    inline: bytes | None = None


def _descriptor(dv: dict) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor(
        storage_type=dv["storageType"],
        path_or_inline_dv=dv["pathOrInlineDv"],
        size_in_bytes=dv["sizeInBytes"],
        cardinality=dv["cardinality"],
        offset=dv.get("offset"),
    )


def stored_deletion_vector(dv: dict) -> StoredDeletionVector:
    """Where the deletion vector ``dv`` (a ``deletion_vector`` entry of the live-file table) is
    stored; nothing is read (inline bitmaps are decoded from the log's text)."""
    descriptor = _descriptor(dv)
    if descriptor.storage_type == "i":
        try:
            raw = z85_decode(descriptor.path_or_inline_dv)[: descriptor.size_in_bytes]
        except ValueError as e:
            raise CorruptDeletionVectorError(f"inline deletion vector: {e}") from e
        return StoredDeletionVector(descriptor.cardinality, descriptor.size_in_bytes, inline=raw)
    offset = 1 if descriptor.offset is None else descriptor.offset
    return StoredDeletionVector(
        descriptor.cardinality, descriptor.size_in_bytes, location=dv_file_key(descriptor), offset=offset
    )


def read_file_deletion_vector(snapshot: Snapshot, dv: dict, location: str) -> np.ndarray:
    """The deleted row positions of one live file (``dv``: its ``deletion_vector`` entry of the
    live-file table); a deletion-vector file that is gone is a ``DataFileError`` naming both."""
    descriptor = _descriptor(dv)
    try:
        return read_deletion_vector(snapshot.store, descriptor, data_file=location)
    except CorruptDeletionVectorError as e:
        if not isinstance(e.__cause__, ObjectNotFoundError):
            raise
        raise DataFileError(
            f"deletion vector file {e.path} of data file {location} of "
            f"{snapshot.store.root} (version {snapshot.version}) is missing; it may have "
            "been removed by VACUUM (versions older than the VACUUM retention cannot be read) "
            "or deleted outside Delta",
            e.path,
        ) from e
