"""Landing batches outside the table: set aside once staged, quarantined when rejected.

What every stage (in process or Spark) and the quality gate share about a batch of landing files,
whatever runs them (Airflow operators, the Spark jobs, a user's script):

* its name: the staged manifest's file name without ``.json`` (``batch_name``);
* a stage **claims** its landing files by moving them to ``<their folder>/_staged/<batch>/``
  (``claim_files``: one atomic rename per file, so two runs never take the same file); the next
  run neither blocks on them nor loads them again, and while the batch waits for its gate and
  its commit, they are still there to stage it again from (a staged file lost to a VACUUM that
  knows nothing of holds);
* only once the commit holding their rows has landed do they move on to
  ``<their folder>/_processed/<batch>/`` (``finish_claimed``); a commit that cannot land for good
  (a table created meanwhile with another schema) puts them back into the landing folder
  (``release_claimed``), so the next run stages them again;
* when rejected, everything of it (landing files, staged data files, manifest) moves to
  ``<table>/_quarantine/<batch>/`` with ``rejection.json`` (``move_to_quarantine``,
  ``quarantine_staged``); ``read_rejection`` finds that record again (a rerun stays rejected) and
  ``list_rejections`` lists every rejected batch of a table, newest first.

``_quarantine`` starts with an underscore, so VACUUM and readers never touch it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from deltaplane.engine.errors import ObjectNotFoundError
from deltaplane.engine.holds import release_hold
from deltaplane.engine.storage import open_store, resolve_location, table_location

QUARANTINE_DIR = "_quarantine"
REJECTION = "rejection.json"
PROCESSED = "_processed"
STAGED = "_staged"
_COPY_CHUNK = 8 << 20


def batch_name(manifest_uri: str) -> str:
    """The batch a staged manifest holds: its file name without ``.json``. The gate quarantines
    a batch under this name, and so does a Spark stage that refuses it."""
    return manifest_uri.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")


def quarantine_root(table_uri: str, quarantine_uri: str | None = None) -> str:
    """Where a table's rejected batches go: ``quarantine_uri`` or ``<table>/_quarantine``."""
    if quarantine_uri:
        return table_location(quarantine_uri).rstrip("/")
    return f"{table_location(table_uri).rstrip('/')}/{QUARANTINE_DIR}"


def quarantine_location(table_uri: str, batch: str, quarantine_uri: str | None = None) -> str:
    """``<quarantine root>/<batch>``."""
    return f"{quarantine_root(table_uri, quarantine_uri)}/{batch}"


def read_object(uri: str, options: Mapping[str, str] | None = None) -> bytes:
    """The bytes of one object given by its full URI (a manifest, a record)."""
    head, _, name = table_location(uri).rstrip("/").rpartition("/")
    return open_store(head or "/", options).get(name)


def read_rejection(destination: str, options: Mapping[str, str] | None = None) -> dict | None:
    """The ``rejection.json`` of a batch already quarantined at ``destination``, if any."""
    try:
        return json.loads(open_store(destination, options).get(REJECTION))
    except (ObjectNotFoundError, FileNotFoundError):
        return None


def list_rejections(
    table_uri: str, options: Mapping[str, str] | None = None, *, quarantine_uri: str | None = None
) -> list[dict[str, Any]]:
    """Every batch quarantined for a table, newest first: its ``rejection.json`` plus ``batch``
    and ``location``. A record that cannot be read is listed with an ``error``, not skipped."""
    root = quarantine_root(table_uri, quarantine_uri)
    store = open_store(root, options)
    try:
        keys = [m.key for m in store.list("", recursive=True)]
    except (ObjectNotFoundError, FileNotFoundError):
        return []
    out = []
    batches = {k[: -len(REJECTION) - 1] for k in keys if k.endswith(f"/{REJECTION}")}
    for batch in sorted(b for b in batches if b and "/" not in b):
        location = f"{root}/{batch}"
        try:
            record = json.loads(store.get(f"{batch}/{REJECTION}"))
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except (ValueError, ObjectNotFoundError, FileNotFoundError) as e:
            record = {"error": f"unreadable {REJECTION}: {e}"}
        out.append({**record, "batch": batch, "location": location})
    out.sort(
        key=lambda r: r.get("rejected_at") if isinstance(r.get("rejected_at"), int) else -1, reverse=True
    )
    return out


def _copy_stream(open_source, target, target_key: str) -> None:
    pending = target.open_output(target_key)
    try:
        with open_source() as f:
            while chunk := f.read(_COPY_CHUNK):
                pending.sink.write(chunk)
        pending.commit()
    except BaseException:
        pending.abort()
        raise


def _exists(store, key: str) -> bool:
    try:
        store.head(key)
    except (ObjectNotFoundError, FileNotFoundError):
        return False
    return True


def _replace(store, key: str) -> None:
    """Make room for a copy that a crashed earlier try may have made already."""
    with contextlib.suppress(ObjectNotFoundError, FileNotFoundError):
        store.delete(key)


def move_to_quarantine(
    destination: str,
    options: Mapping[str, str] | None,
    record: dict,
    *,
    table_store=None,
    data_keys: Iterable[str] = (),
    landing: Iterable[str] = (),
    extra: dict[str, bytes] | None = None,
) -> None:
    """Move a rejected batch under ``destination``: staged data files (keys or locations under
    ``table_store``) to ``data/``, local landing files to ``landing/``, ``extra`` objects beside
    them, and ``rejection.json`` (``record``) last of the copies. The originals are deleted only
    after every copy is in place, so a crash leaves at worst two copies (an uncommitted original
    is VACUUM's to reclaim), never none. An existing object is replaced: a move interrupted
    half-way can be run again."""
    target = open_store(destination, options)
    landing = list(landing)
    moved = []
    for key in data_keys:
        owner, name = resolve_location(table_store, key)
        if not _exists(owner, name) and _exists(target, f"data/{name}"):
            continue  # moved by an earlier, interrupted try
        _replace(target, f"data/{name}")
        _copy_stream(lambda owner=owner, name=name: owner.open_input(name), target, f"data/{name}")
        moved.append((owner, name))
    for path in landing:
        if not os.path.exists(path):
            continue  # moved by an earlier, interrupted try
        name = os.path.basename(path)
        _replace(target, f"landing/{name}")
        _copy_stream(lambda path=path: open(path, "rb"), target, f"landing/{name}")  # noqa: SIM115
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


def quarantine_staged(
    staged,
    manifest_uri: str,
    destination: str,
    record: Mapping[str, Any],
    options: Mapping[str, str] | None = None,
    *,
    manifest_bytes: bytes | None = None,
    landing: Iterable[str] = (),
    extra: dict[str, bytes] | None = None,
) -> dict[str, Any]:
    """Quarantine a staged write (``StagedWrite``) that must not be committed: its data files, its
    manifest (``manifest.json``), its landing files and ``extra`` objects move under
    ``destination``, the staged manifest is deleted last. Returns the ``rejection.json`` written:
    ``record`` plus ``rejected_at`` (ms), ``staged_files`` and ``landing_files``."""
    from deltaplane.engine.log.replay import canonical_path

    table_store = staged.spec.store()
    landing = [str(p) for p in landing]
    full = {
        "rejected_at": int(time.time() * 1000),
        **record,
        "staged_files": [a.path for a in staged.adds],
        "landing_files": landing,
    }
    move_to_quarantine(
        destination,
        options,
        full,
        table_store=table_store,
        data_keys=[canonical_path(a.path, table_store.root) for a in staged.adds],
        landing=landing,
        extra={"manifest.json": manifest_bytes or staged.dumps(), **(extra or {})},
    )
    release_staged_hold(staged)  # its files left the table: nothing to protect any more
    head, _, name = manifest_uri.rstrip("/").rpartition("/")
    with contextlib.suppress(ObjectNotFoundError, FileNotFoundError):
        open_store(head or "/", options).delete(name)
    return full


def processed_path(path: Path, batch: str) -> Path:
    """Where a staged landing file goes: ``<its folder>/_processed/<batch>/<its name>``."""
    return path.parent / PROCESSED / batch / path.name


def move_files(moves: Iterable[tuple[Path, Path]]) -> None:
    """Rename each (source, target) pair; a source already gone was moved by an earlier try."""
    for source, target in moves:
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)


# --- claimed landing files --------------------------------------------------------------------


def claimed_path(path: Path, batch: str) -> Path:
    """Where a stage puts a landing file it claims: ``<its folder>/_staged/<batch>/<its name>``."""
    return path.parent / STAGED / batch / path.name


def _claimed_parts(path: Path) -> tuple[Path, str] | None:
    """``(landing folder, batch)`` of a claimed file; ``None`` for any other path."""
    if path.parent.parent.name != STAGED:
        return None
    return path.parent.parent.parent, path.parent.name


def home_path(path: Path) -> Path:
    """The landing path a claimed (or processed) file came from; other paths are their own."""
    if path.parent.parent.name in (STAGED, PROCESSED):
        return path.parent.parent.parent / path.name
    return path


def claim_files(files: Iterable[Path], batch: str) -> list[Path]:
    """Claim landing files for ``batch``: each is renamed into ``_staged/<batch>/`` (atomic: of
    two runs renaming one file, one wins and the other goes without it). Returns the batch's
    claimed files, sorted, including those an earlier, interrupted try of the batch claimed."""
    files = list(files)
    folders = {Path(f).parent for f in files}
    for f in files:
        target = claimed_path(Path(f), batch)
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # another run claimed it first
            os.rename(f, target)
    out = []
    for folder in folders:
        claimed = folder / STAGED / batch
        if claimed.is_dir():
            out += [p for p in claimed.iterdir() if p.is_file()]
    return sorted(out)


def finish_claimed(paths: Iterable[str], batch: str) -> list[str]:
    """The batch's rows are in the table: move its claimed files on to ``_processed/<batch>/``.
    Paths that are not claimed files (an older manifest's ``_processed`` paths) are left; a
    file already moved (a retry) is skipped. Returns where the files are now."""
    out = []
    for raw in paths:
        path = Path(raw)
        parts = _claimed_parts(path)
        if parts is None:
            out.append(str(path))
            continue
        target = processed_path(home_path(path), batch)
        if path.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        out.append(str(target))
        _remove_empty(path.parent)
    return out


def release_claimed(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """A commit that cannot land for good: put the batch's claimed files back into their landing
    folder, so the next run stages them again. A landing file of the same name that arrived
    meanwhile is not overwritten: the claimed file stays where it is. Returns ``(returned,
    kept)`` paths."""
    returned, kept = [], []
    for raw in paths:
        path = Path(raw)
        if _claimed_parts(path) is None or not path.exists():
            continue
        home = home_path(path)
        try:
            os.link(path, home)  # never replaces a newer file of the same name
        except FileExistsError:
            kept.append(str(path))
            continue
        os.unlink(path)
        returned.append(str(home))
        _remove_empty(path.parent)
    return returned, kept


def release_staged_hold(staged) -> None:
    """A staged write that will not be committed (quarantined, given back to landing): its files
    are no longer protected from VACUUM."""
    token = getattr(staged.spec, "hold", None)
    if token is not None:
        release_hold(staged.spec.store(), token)


def _remove_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty, or gone
        folder.rmdir()
