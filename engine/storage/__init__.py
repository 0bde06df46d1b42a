"""Object stores: the only code that touches bytes on disk or in S3."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit

from deltaplane.engine.errors import InvalidArgumentError, ObjectNotFoundError, UnsupportedStorageError
from deltaplane.engine.storage.base import ObjectMeta, ObjectStore, PutMode
from deltaplane.engine.storage.local import LocalStore
from deltaplane.engine.storage.memory import MemoryStore, named_memory_store

__all__ = [
    "LocalStore",
    "MemoryStore",
    "ObjectMeta",
    "ObjectStore",
    "PutMode",
    "arrow_files",
    "missing_objects",
    "open_store",
    "resolve_location",
    "table_location",
]


def arrow_files(store: ObjectStore):
    """``store.arrow_files()``: Arrow's filesystem, URI prefix and path prefix for the store's
    objects, or ``None`` (also for a store written before the protocol had the method)."""
    method = getattr(store, "arrow_files", None)
    return method() if method is not None else None


def table_location(uri: Any) -> str:
    """A table (or object) location as every public call takes it: a string (a path, ``file:``,
    ``s3://``, ``memory://``) or an ``os.PathLike`` (``pathlib.Path``), as a string."""
    location = os.fspath(uri) if isinstance(uri, os.PathLike) else uri
    if not isinstance(location, str) or not location.strip():
        raise InvalidArgumentError(
            f"a table URI is a str or os.PathLike naming a path, file://, s3://... or memory://, got {uri!r}"
        )
    return location


def open_store(uri: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    """Pick a store by the URI's scheme: a plain path or ``file:`` is local, ``memory://``."""
    uri = table_location(uri)
    scheme = urlsplit(uri).scheme.lower() if "://" in uri or uri.startswith("file:") else ""
    if scheme in ("", "file"):
        path = unquote(urlsplit(uri).path) if scheme == "file" else uri
        return LocalStore(path)
    if scheme == "memory":
        return named_memory_store(uri)
    if scheme in ("s3", "s3a"):
        from deltaplane.engine.storage.s3 import S3Store

        return S3Store(uri.replace("s3a://", "s3://", 1), storage_options)
    raise UnsupportedStorageError(
        f"no object store for scheme {scheme!r} in {uri!r} (supported: local paths, file:, memory:, s3:)"
    )


def resolve_location(store: ObjectStore, location: str) -> tuple[ObjectStore, str]:
    """The store and key for a location a log names: a key under ``store``, or an absolute path
    or URI (opened with the same storage options, so credentials carry over)."""
    if not (location.startswith("/") or "://" in location):
        return store, location
    root = store.root.rstrip("/") + "/"
    if location.startswith(root):
        return store, location[len(root) :]
    head, _, name = location.rpartition("/")
    return open_store(head or "/", getattr(store, "options", None)), name


_HEAD_WORKERS = 16


def missing_objects(store: ObjectStore, locations: Iterable[str]) -> list[str]:
    """The locations (keys under ``store`` or absolute URIs) that do not exist, in input order.

    One ``head`` per location, in parallel: what RESTORE and a committing transaction ask
    before they reference files that VACUUM may have deleted.
    """
    targets = list(dict.fromkeys(locations))

    def missing(location: str) -> str | None:
        try:
            owner, key = resolve_location(store, location)
            owner.head(key)
        except ObjectNotFoundError:
            return location
        return None

    if len(targets) <= 1:
        return [m for m in map(missing, targets) if m is not None]
    with ThreadPoolExecutor(min(_HEAD_WORKERS, len(targets))) as pool:
        return [m for m in pool.map(missing, targets) if m is not None]
