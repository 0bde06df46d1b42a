"""The object-store contract every layer above ``storage`` works through.

Keys are ``/``-separated paths relative to the store's root (a table root, usually). The shape is
that of an object store, not a filesystem, so that S3 fits without emulation: whole and ranged
reads, put with an explicit create-or-overwrite mode (create is the put-if-absent that commits
rely on), listing in lexicographic key order from a start key, and delete.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import pyarrow as pa

if TYPE_CHECKING:
    import pyarrow.fs as pafs

PutMode = Literal["create", "overwrite"]


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a listing or head returns for one object."""

    key: str
    size: int
    last_modified: int  # milliseconds since the epoch


class PendingObject(Protocol):
    """An object being written: write through ``sink``, then ``commit()`` or ``abort()``."""

    @property
    def sink(self) -> pa.NativeFile: ...

    def commit(self) -> int:
        """Publish the object atomically; returns its size."""
        ...

    def abort(self) -> None: ...


class BufferedPendingObject:
    """A pending object held in memory and published with one create-mode put."""

    def __init__(self, store: ObjectStore, key: str):
        self._store, self._key = store, key
        self._buffer = pa.BufferOutputStream()

    @property
    def sink(self) -> pa.NativeFile:
        return self._buffer

    def commit(self) -> int:
        data = self._buffer.getvalue()
        self._store.put(self._key, data.to_pybytes(), mode="create")
        return data.size

    def abort(self) -> None:
        self._buffer = pa.BufferOutputStream()


class WholeObjects:
    """What stores that publish each object whole with one durable put (S3, memory) share: no
    temporary files, no directories, outputs buffered and put at ``commit()``, nothing left to
    sync."""

    def list_temporary(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return iter(())

    def remove_empty_directories(self, keys: list[str]) -> int:
        return 0

    def open_output(self, key: str, *, durable: bool = True) -> BufferedPendingObject:
        return BufferedPendingObject(self, key)

    def sync(self, keys: list[str]) -> None:
        return None


@runtime_checkable
class ObjectStore(Protocol):
    """Storage for one table root. All methods raise ``deltaplane.engine.errors`` storage errors."""

    # ``remote``: whether each request is a network round trip (S3), so that reading many small
    # objects pays off in parallel; local and in-memory stores say False.
    remote: bool

    @property
    def root(self) -> str:
        """The URI of the store's root, without a trailing slash."""
        ...

    def get(self, key: str) -> bytes:
        """The whole object; ``ObjectNotFoundError`` when absent."""
        ...

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``; fewer only at the end of the object."""
        ...

    def head(self, key: str) -> ObjectMeta:
        """Size and modification time; ``ObjectNotFoundError`` when absent."""
        ...

    def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> None:
        """Write atomically: readers see the old object or the new one, never a torn one.

        With ``mode="create"`` the put fails with ``ObjectExistsError`` if the key exists, and
        of several concurrent creators exactly one succeeds.
        """
        ...

    def list(
        self, prefix: str, *, start_after: str | None = None, recursive: bool = False
    ) -> Iterator[ObjectMeta]:
        """Objects whose key starts with ``prefix``, in lexicographic key order.

        ``start_after`` skips keys less than or equal to it. Without ``recursive`` only objects
        directly under the prefix's directory are listed (no keys with a further ``/``).
        """
        ...

    def delete(self, key: str) -> None:
        """Remove the object; deleting an absent key is not an error."""
        ...

    def list_temporary(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Temporary files of unfinished writes under ``prefix`` (recursively), which ``list``
        never shows: left behind by writers killed mid-write, they are reclaimed by VACUUM and
        log cleanup once older than the retention. Stores that publish objects atomically
        without temporaries (S3, memory) have none."""
        ...

    def remove_empty_directories(self, keys: list[str]) -> int:
        """After deleting ``keys``, remove the directories that left empty (deepest first; a
        directory a writer has just put a file in stays); returns how many. Object stores have
        no directories and return 0."""
        ...

    def open_input(self, key: str, *, size: int | None = None) -> pa.NativeFile:
        """A random-access file for readers such as Parquet that seek. ``size`` is the object's
        size when the caller knows it (from the log): a remote store may then fetch a small
        object whole in one request (S3: up to 8 MiB; larger ones are opened as without it)."""
        ...

    def arrow_files(self) -> tuple[pafs.FileSystem, str, str] | None:
        """Where Arrow's own readers (the dataset scanner) open this store's objects: Arrow's
        filesystem, the prefix of ``uri(key)`` and the path prefix that replaces it there;
        ``None`` when only this store can read them."""
        ...

    def open_output(self, key: str, *, durable: bool = True) -> PendingObject:
        """A new object written as a stream; it appears at ``key`` only on ``commit()``.

        ``commit`` has create semantics (the key must not exist yet); ``abort`` discards.
        ``durable=False`` publishes without waiting for the disk (a local store skips the
        object's fsync and its directory's): the caller makes a group of such objects durable
        with one ``sync`` before anything refers to them, as a write does for its data files
        before they can be committed. Until then an operating-system crash may leave such an
        object torn; a process crash never does.
        """
        ...

    def sync(self, keys: list[str]) -> None:
        """Make objects published with ``durable=False`` (and their directory entries) durable.
        A local store does it with one filesystem sync; S3 and memory have nothing to do (an
        upload is durable when it returns)."""
        ...

    def uri(self, key: str) -> str:
        """The absolute URI of ``key``."""
        ...


def split_prefix(prefix: str) -> tuple[str, str]:
    """Split a listing prefix into its directory part and the leading part of a name."""
    if "/" in prefix:
        directory, _, name = prefix.rpartition("/")
        return directory, name
    return "", prefix
