"""Where a consumer of a table's commits remembers the last version it has handled.

Watermarks live beside the table, in ``<table>/_deltaplane/watermarks/<key>.json`` (a hidden
directory: readers and VACUUM leave it alone), written through the table's own store. So they
survive scheduler runs, triggerer restarts and metadata-database resets, need no database, and
move with the table. A watermark is only ever written by its consumer, after the work it covers
is safe (``write_watermark`` overwrites; the last writer wins).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping

from deltaplane.engine.errors import CorruptLogError, InvalidArgumentError, ObjectNotFoundError
from deltaplane.engine.storage import open_store, table_location
from deltaplane.engine.storage.base import ObjectStore

WATERMARK_DIR = "_deltaplane/watermarks"


def watermark_file(key: str) -> str:
    """The file name of ``key`` (characters other than letters, digits, ``.``, ``_``, ``-``
    become ``_``)."""
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"a watermark needs a non-empty key, got {key!r}")
    return re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".json"


def watermark_store(table_uri: str, storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    return open_store(f"{table_location(table_uri).rstrip('/')}/{WATERMARK_DIR}", storage_options)


def read_watermark(table_uri: str, key: str, storage_options: Mapping[str, str] | None = None) -> int | None:
    """The version ``key`` has handled (``None``: never written)."""
    name = watermark_file(key)
    store = watermark_store(table_uri, storage_options)
    try:
        data = store.get(name)
    except ObjectNotFoundError:
        return None
    try:
        version = json.loads(data)["version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < -1:
            raise ValueError(f"not a version: {version!r}")
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptLogError(
            f"the watermark {name} of {table_uri} is unreadable ({e}); delete it to start over "
            "or write the version to resume from",
            f"{WATERMARK_DIR}/{name}",
        ) from None
    return version


def write_watermark(
    table_uri: str, key: str, version: int, storage_options: Mapping[str, str] | None = None
) -> None:
    """Record that ``key`` has handled every commit up to ``version``."""
    if isinstance(version, bool) or not isinstance(version, int) or version < -1:
        raise InvalidArgumentError(f"a watermark is a version (or -1), got {version!r}")
    body = json.dumps({"key": key, "version": version, "updated": int(time.time() * 1000)})
    watermark_store(table_uri, storage_options).put(watermark_file(key), body.encode(), mode="overwrite")
