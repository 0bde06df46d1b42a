"""A landing batch outside the table: set aside once staged, quarantined when rejected.

What the in-process stage (``operators.ingest``), the Spark stage (``operators.spark``) and the
quality gate (``operators.quality``) share about a batch of landing files:

* its name: the staged manifest's file name without ``.json`` (``batch_name``);
* once staged, its files move to ``<their folder>/_processed/<batch>/`` (``processed_path``,
  ``move_files``), so the next run neither blocks on them nor loads them again;
* when rejected, everything of it (landing files, staged data files, manifest) moves to
  ``<table>/_quarantine/<batch>/`` with ``rejection.json`` (``move_to_quarantine``); the task
  that rejected it fails without retries (``reject``), and a clear or rerun of that task fails
  again with the recorded reason (``raise_if_rejected``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from deltaplane.operators.exceptions import BatchRejected

QUARANTINE_DIR = "_quarantine"  # hidden from VACUUM and readers, like every "_" directory
REJECTION = "rejection.json"
PROCESSED = "_processed"


def batch_name(manifest_uri: str) -> str:
    """The batch a staged manifest holds: its file name without ``.json``. The gate quarantines
    a batch under this name, and so does a Spark stage that refuses it."""
    return manifest_uri.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")


def quarantine_location(table_uri: str, batch: str, quarantine_uri: str | None = None) -> str:
    """``<quarantine_uri or <table>/_quarantine>/<batch>``."""
    root = quarantine_uri or f"{table_uri.rstrip('/')}/{QUARANTINE_DIR}"
    return f"{root.rstrip('/')}/{batch}"


def read_object(uri: str, options) -> bytes:
    from deltaplane.engine.storage import open_store

    head, _, name = uri.rstrip("/").rpartition("/")
    return open_store(head or "/", options).get(name)


def recorded_rejection(destination: str, options) -> dict | None:
    """The ``rejection.json`` of a batch already quarantined at ``destination``, if any."""
    from deltaplane.engine.errors import ObjectNotFoundError
    from deltaplane.engine.storage import open_store

    try:
        return json.loads(open_store(destination, options).get(REJECTION))
    except (ObjectNotFoundError, FileNotFoundError):
        return None


def copy_object(source, key: str, target, target_key: str) -> None:
    """Stream one object from a store to another (no whole file in memory on local stores)."""
    _copy_stream(lambda: source.open_input(key), target, target_key)


def copy_local_file(path: str, target, target_key: str) -> None:
    _copy_stream(lambda: open(path, "rb"), target, target_key)  # noqa: SIM115 (closed by _copy_stream)


def _copy_stream(open_source, target, target_key: str) -> None:
    pending = target.open_output(target_key)
    try:
        with open_source() as f:
            while chunk := f.read(8 << 20):
                pending.sink.write(chunk)
        pending.commit()
    except BaseException:
        pending.abort()
        raise


def move_to_quarantine(
    destination: str,
    options,
    record: dict,
    *,
    table_store=None,
    data_keys: list[str] = (),
    landing: list[str] = (),
    extra: dict[str, bytes] | None = None,
) -> None:
    """Move a rejected batch under ``destination``: staged data files (keys or locations under
    ``table_store``) to ``data/``, local landing files to ``landing/``, ``extra`` objects beside
    them, and ``rejection.json`` (``record``) last of the copies. The originals are deleted only
    after every copy is in place, so a crash leaves at worst two copies (an uncommitted original
    is VACUUM's to reclaim), never none. An existing object is replaced: a move interrupted
    half-way can be run again."""

    from deltaplane.engine.errors import ObjectNotFoundError
    from deltaplane.engine.storage import open_store, resolve_location

    target = open_store(destination, options)
    moved = []
    for key in data_keys:
        owner, name = resolve_location(table_store, key)
        _replace(target, f"data/{name}")
        copy_object(owner, name, target, f"data/{name}")
        moved.append((owner, name))
    for path in landing:
        if not os.path.exists(path):
            continue  # moved by an earlier, interrupted try
        name = os.path.basename(path)
        _replace(target, f"landing/{name}")
        copy_local_file(path, target, f"landing/{name}")
    for name, data in (extra or {}).items():
        target.put(name, data, mode="overwrite")
    target.put(REJECTION, json.dumps(record, indent=1, default=str).encode(), mode="overwrite")
    for owner, name in moved:
        with contextlib.suppress(ObjectNotFoundError):
            owner.delete(name)
    for owner in {id(owner): owner for owner, _ in moved}.values():
        tidy = getattr(owner, "remove_empty_directories", None)  # partition folders the batch made
        if tidy is not None:
            tidy([name for o, name in moved if o is owner])
    for path in landing:
        if os.path.exists(path):
            os.unlink(path)


def _replace(store, key: str) -> None:
    """Make room for a copy that a crashed earlier try may have made already."""
    from deltaplane.engine.errors import ObjectNotFoundError

    with contextlib.suppress(ObjectNotFoundError, FileNotFoundError):
        store.delete(key)


def raise_if_rejected(
    destination: str, options, log, error: type[AirflowFailException] = BatchRejected
) -> None:
    """A clear or rerun of a task whose batch was rejected: it stays rejected, with the reason
    recorded in the quarantine."""
    earlier = recorded_rejection(destination, options)
    if earlier is not None:
        log.error("%s", earlier.get("message"))
        raise error(f"{earlier.get('message')} (rejected earlier; recorded in {destination})")


def reject(
    operator, context, report: dict[str, Any], destination: str, options, *, recorded=None, **moved
) -> BatchRejected:
    """Quarantine a batch a stage refused and say why: the task log, the XCom (``report``) and
    ``rejection.json`` (``report``, ``recorded`` and when); ``moved`` is what
    ``move_to_quarantine`` moves. The exception to fail with."""
    record = {**report, "rejected_at": int(time.time() * 1000), **(recorded or {})}
    move_to_quarantine(destination, options, record, **moved)
    context["ti"].xcom_push(key="return_value", value=report)
    operator.log.error("%s", report["message"])
    return BatchRejected(report["message"])


def skip_downstream(operator, context, out: dict[str, Any], why: str) -> dict[str, Any]:
    """Nothing landed: the operator's XCom is ``out`` and its direct downstream tasks skip."""
    operator.log.info("%s; skipping %s", why, sorted(operator.downstream_task_ids))
    context["ti"].xcom_push(key="return_value", value=out)
    operator.skip(context["ti"], operator.get_direct_relatives(upstream=False))
    return out


def processed_path(path: Path, batch: str) -> Path:
    """Where a staged landing file goes: ``<its folder>/_processed/<batch>/<its name>``."""
    return path.parent / PROCESSED / batch / path.name


def move_files(moves) -> None:
    """Rename each (source, target) pair; a source already gone was moved by an earlier try."""
    for source, target in moves:
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)
