"""A staged write's manifest: the StagedWrite (spec plus the files written for it) as JSON in one
object beside the table, written once and read back by whoever commits it, with the landing files it
was staged from and how to stage it again."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from deltaplane.engine.commands.staged import _LANDING, StagedWrite
from deltaplane.engine.errors import (
    InvalidArgumentError,
)
from deltaplane.engine.storage import open_store, table_location


def _split_location(uri: str | os.PathLike[str]) -> tuple[str, str]:
    uri = table_location(uri)
    head, _, name = uri.rstrip("/").rpartition("/")
    if not name:
        raise InvalidArgumentError(f"a manifest location needs a file name: {uri!r}")
    return head or "/", name


def write_manifest(
    uri: str,
    staged: StagedWrite,
    storage_options: Mapping[str, str] | None = None,
    *,
    landing: Iterable[str] | None = None,
    recipe: Mapping[str, Any] | None = None,
) -> None:
    """Write a staged-write manifest (a local path or an object-store URI), replacing any.

    ``landing``: the local files the batch was staged from, where they are now; recorded as
    ``{"landing": {"files": [...]}}`` (``manifest_landing`` reads it back), so whoever rejects
    the batch (a quality gate) can move them to the quarantine with its staged files.
    ``recipe``: how they were read (format, schema, partitioning...: JSON), so the batch can be
    staged again from them (``manifest_recipe``) when its staged files are lost."""
    body = staged.to_json()
    if landing is not None:
        body[_LANDING] = {"files": [str(p) for p in landing]}
        if recipe is not None:
            body[_LANDING]["recipe"] = dict(recipe)
    root, name = _split_location(uri)
    open_store(root, storage_options).put(name, json.dumps(body, indent=1).encode(), mode="overwrite")


def manifest_landing(manifest: bytes | str) -> list[str]:
    """The landing files a manifest records (``write_manifest(landing=...)``); ``[]`` when it
    records none or is not JSON."""
    try:
        return [str(p) for p in json.loads(manifest).get(_LANDING, {}).get("files") or []]
    except (ValueError, AttributeError, TypeError):
        return []


def manifest_recipe(manifest: bytes | str) -> dict[str, Any] | None:
    """How a manifest's landing files were read (``write_manifest(recipe=...)``); ``None`` when
    it records none."""
    try:
        recipe = json.loads(manifest).get(_LANDING, {}).get("recipe")
    except (ValueError, AttributeError, TypeError):
        return None
    return recipe if isinstance(recipe, dict) else None


def read_manifest(uri: str, storage_options: Mapping[str, str] | None = None) -> StagedWrite:
    """The staged write recorded at ``uri`` (its spec gets ``storage_options``)."""
    root, name = _split_location(uri)
    return StagedWrite.loads(open_store(root, storage_options).get(name), storage_options)
