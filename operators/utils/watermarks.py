"""Where a consumer remembers the last table version it has handled.

Watermarks live beside the table, in ``<table>/_deltaplane/watermarks/<key>.json`` (a hidden
directory: readers and VACUUM leave it alone), written through the engine's store. So they
survive DAG runs, triggerer restarts and Airflow metadata resets, need no database access from
the triggerer, and move with the table.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping

WATERMARK_DIR = "_deltaplane/watermarks"


def _key(key: str) -> str:
    if not key:
        raise ValueError("a watermark needs a key")
    return re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".json"


def _store(table_uri: str, storage_options: Mapping[str, str] | None):
    from deltaplane.engine.storage import open_store

    return open_store(f"{table_uri.rstrip('/')}/{WATERMARK_DIR}", storage_options)


def read_watermark(table_uri: str, key: str, storage_options: Mapping[str, str] | None = None) -> int | None:
    from deltaplane.engine.errors import ObjectNotFoundError

    try:
        data = _store(table_uri, storage_options).get(_key(key))
    except ObjectNotFoundError:
        return None
    return int(json.loads(data)["version"])


def write_watermark(
    table_uri: str, key: str, version: int, storage_options: Mapping[str, str] | None = None
) -> None:
    body = json.dumps({"key": key, "version": int(version), "updated": int(time.time() * 1000)})
    _store(table_uri, storage_options).put(_key(key), body.encode(), mode="overwrite")
