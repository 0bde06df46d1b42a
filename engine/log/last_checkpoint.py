"""``_delta_log/_last_checkpoint``: a hint to the newest checkpoint, never trusted blindly.

The file can be missing, stale (pointing at an older checkpoint), torn, or corrupt. Reading it
returns ``None`` for anything unusable and the caller falls back to listing. When the hint has a
``checksum`` it is verified with the protocol's canonical-JSON MD5.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from deltaplane.engine.errors import ObjectNotFoundError
from deltaplane.engine.log.files import LAST_CHECKPOINT
from deltaplane.engine.storage.base import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LastCheckpointHint:
    version: int
    size: int | None = None
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    v2_checkpoint_path: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


def _encode(text: str) -> str:
    return quote(text, safe="")


def _leaves(value: Any, path: list[str]):
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, [*path, '"' + _encode(key) + '"'])
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _leaves(child, [*path, str(index)])
    else:
        # Strings keep their quotes around URL-encoded content; numbers and literals as they are.
        rendered = '"' + _encode(value) + '"' if isinstance(value, str) else json.dumps(value)
        yield "+".join(path) + "=" + rendered


def checksum(obj: dict[str, Any]) -> str:
    """The protocol's ``_last_checkpoint`` checksum: MD5 of sorted canonical leaves."""
    body = {k: v for k, v in obj.items() if k != "checksum"}
    entries = sorted(_leaves(body, []), key=lambda s: s.encode("utf-8"))
    return hashlib.md5(",".join(entries).encode("utf-8")).hexdigest()


def read_last_checkpoint(store: ObjectStore) -> LastCheckpointHint | None:
    """The hint, or ``None`` when it is missing or unusable (the reason is logged)."""
    try:
        data = store.get(LAST_CHECKPOINT)
    except ObjectNotFoundError:
        return None
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        version = obj["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError(f"bad version {version!r}")
        stored = obj.get("checksum")
        if stored is not None and stored != checksum(obj):
            raise ValueError("checksum mismatch")
        v2 = obj.get("v2Checkpoint")
        return LastCheckpointHint(
            version=version,
            size=obj.get("size"),
            parts=obj.get("parts"),
            size_in_bytes=obj.get("sizeInBytes"),
            num_of_add_files=obj.get("numOfAddFiles"),
            v2_checkpoint_path=v2.get("path") if isinstance(v2, dict) else None,
            raw=obj,
        )
    except (ValueError, KeyError, TypeError) as e:
        log.warning("ignoring unusable %s in %s: %s", LAST_CHECKPOINT, store.root, e)
        return None


def render_last_checkpoint(hint: dict[str, Any]) -> bytes:
    """Serialize a hint with its checksum, ``version``, ``size`` and ``parts`` first."""
    ordered = {k: hint[k] for k in ("version", "size", "parts") if k in hint}
    ordered.update({k: v for k, v in hint.items() if k not in ordered and k != "checksum"})
    ordered["checksum"] = checksum(ordered)
    return json.dumps(ordered, separators=(",", ":")).encode("utf-8")
