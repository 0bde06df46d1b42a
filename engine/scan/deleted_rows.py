"""Deletion vectors: the deleted row positions of one live file."""

from __future__ import annotations

import numpy as np

from deltaplane.engine.actions import DeletionVectorDescriptor
from deltaplane.engine.deletion_vectors import read_deletion_vector
from deltaplane.engine.errors import (
    CorruptDeletionVectorError,
    DataFileError,
    ObjectNotFoundError,
)
from deltaplane.engine.snapshot import Snapshot


def read_file_deletion_vector(snapshot: Snapshot, dv: dict, location: str) -> np.ndarray:
    """The deleted row positions of one live file (``dv``: its ``deletion_vector`` entry of the
    live-file table); a deletion-vector file that is gone is a ``DataFileError`` naming both."""
    descriptor = DeletionVectorDescriptor(
        storage_type=dv["storageType"],
        path_or_inline_dv=dv["pathOrInlineDv"],
        size_in_bytes=dv["sizeInBytes"],
        cardinality=dv["cardinality"],
        offset=dv.get("offset"),
    )
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
