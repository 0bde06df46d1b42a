"""In-process object store for unit tests and throwaway tables.

``memory://name`` URIs name a process-wide store, so a table written through one ``DeltaTable``
can be reopened by URI within the same process, as it could on disk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa

from deltaplane.engine.errors import ObjectExistsError, ObjectNotFoundError
from deltaplane.engine.storage.base import ObjectMeta, PutMode, WholeObjects, split_prefix


class MemoryStore(WholeObjects):
    """A dict of key -> (bytes, modification time in ms), guarded by a lock."""

    remote = False

    def __init__(self, root: str = "memory://"):
        self._root = root.rstrip("/")
        self._objects: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()

    @property
    def root(self) -> str:
        return self._root

    def uri(self, key: str) -> str:
        return f"{self._root}/{key}"

    def _entry(self, key: str) -> tuple[bytes, int]:
        try:
            return self._objects[key]
        except KeyError:
            raise ObjectNotFoundError(f"no such object: {self.uri(key)}") from None

    def get(self, key: str) -> bytes:
        return self._entry(key)[0]

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._entry(key)[0][start : start + length]

    def head(self, key: str) -> ObjectMeta:
        data, mtime = self._entry(key)
        return ObjectMeta(key, len(data), mtime)

    def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> None:
        if mode not in ("create", "overwrite"):
            raise ValueError(f"unknown put mode {mode!r}")
        with self._lock:
            if mode == "create" and key in self._objects:
                raise ObjectExistsError(f"object already exists: {self.uri(key)}")
            self._objects[key] = (bytes(data), int(time.time() * 1000))

    def set_modification_time(self, key: str, millis: int) -> None:
        """Tests use this to build logs with chosen commit timestamps."""
        with self._lock:
            data, _ = self._entry(key)
            self._objects[key] = (data, millis)

    def list(
        self, prefix: str, *, start_after: str | None = None, recursive: bool = False
    ) -> Iterator[ObjectMeta]:
        dir_key, _ = split_prefix(prefix)
        depth = dir_key.count("/") + 1 if dir_key else 0
        with self._lock:
            items = sorted(self._objects.items())
        out = []
        for key, (data, mtime) in items:
            if not key.startswith(prefix):
                continue
            if start_after is not None and key <= start_after:
                continue
            if not recursive and key.count("/") != depth:
                continue
            out.append(ObjectMeta(key, len(data), mtime))
        return iter(out)

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def open_input(self, key: str, *, size: int | None = None) -> pa.NativeFile:
        return pa.BufferReader(self.get(key))

    def arrow_files(self) -> None:
        return None  # objects live in this process's dictionary only


_named: dict[str, MemoryStore] = {}
_named_lock = threading.Lock()


def named_memory_store(uri: str) -> MemoryStore:
    """The process-wide store for a ``memory://name`` URI, created on first use."""
    name = uri.rstrip("/")
    with _named_lock:
        store = _named.get(name)
        if store is None:
            store = _named[name] = MemoryStore(name)
        return store
