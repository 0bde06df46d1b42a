"""Holds: a pending writer's claim on the data files it has written but not committed yet.

A staged write (a landing batch waiting for its quality gate, a Spark job whose tasks are
writing) has files under the table root that no commit references. Delta Spark protects such
in-flight files only by VACUUM's retention, so a VACUUM with a short retention (or
``enforce_retention=False``) deletes them and the commit then fails for good. A hold makes the
pending writer visible to VACUUM instead:

* the writer places the hold **before** it writes its first file:
  ``<table>/_deltaplane/holds/<token>.json`` (a hidden directory: readers and VACUUM never touch
  it), recording the token, when, until when, and the work key the commit will record;
* every data file the writer writes carries the token in its name
  (``part-00001-<uuid>-<token>-c000.zstd.parquet``), also its temporary file while streaming;
* VACUUM reads the holds **after** listing the table (so any file it listed was written after
  its hold could be seen) and keeps every file whose name carries a live token;
* the commit releases the hold (deletes its record) once it landed.

A hold stops protecting when its work is in the table (the txn of its ``app_id`` reached its
``app_version``: a writer that committed and died before releasing) or when it expires
(``expires_at``; the default lifetime is ``DEFAULT_LIFETIME_HOURS``). VACUUM deletes such stale
records, so a hold never keeps files for ever.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from deltaplane.engine.errors import InvalidArgumentError, ObjectNotFoundError
from deltaplane.engine.storage.base import ObjectStore

HOLDS_DIR = "_deltaplane/holds"
DEFAULT_LIFETIME_HOURS = 7 * 24.0
_HOUR_MS = 3_600_000
_TOKEN = re.compile(r"^h[0-9a-f]{16}$")


@dataclass(frozen=True)
class Hold:
    token: str
    created_at: int  # ms since the epoch
    expires_at: int
    app_id: str | None = None
    app_version: int | None = None
    note: str | None = None  # who holds it, for people (a batch, a job)

    def to_json(self) -> dict:
        return {
            "token": self.token,
            "createdAt": self.created_at,
            "expiresAt": self.expires_at,
            "appId": self.app_id,
            "appVersion": self.app_version,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, obj: dict) -> Hold:
        return cls(
            token=str(obj["token"]),
            created_at=int(obj["createdAt"]),
            expires_at=int(obj["expiresAt"]),
            app_id=obj.get("appId"),
            app_version=obj.get("appVersion"),
            note=obj.get("note"),
        )


def new_token() -> str:
    """A hold's token: short, and distinct from anything else in a data file's name."""
    return "h" + uuid.uuid4().hex[:16]


def check_token(token: str) -> str:
    if not isinstance(token, str) or not _TOKEN.match(token):
        raise InvalidArgumentError(f"not a hold token: {token!r}")
    return token


def lifetime_ms(hours: float | bool | None) -> int:
    """``True``/``None`` -> the default lifetime; a number of hours (> 0) otherwise."""
    if hours is None or hours is True:
        hours = DEFAULT_LIFETIME_HOURS
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not hours > 0:
        raise InvalidArgumentError(f"a hold's lifetime is a positive number of hours, got {hours!r}")
    return max(1, round(hours * _HOUR_MS))


def _key(token: str) -> str:
    return f"{HOLDS_DIR}/{check_token(token)}.json"


def place_hold(
    store: ObjectStore,
    token: str,
    *,
    lifetime_hours: float | bool | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    note: str | None = None,
) -> Hold:
    """Record the hold ``token`` on ``store``'s table (before any file carrying it is written)."""
    now = int(time.time() * 1000)
    hold = Hold(token, now, now + lifetime_ms(lifetime_hours), app_id, app_version, note)
    store.put(_key(token), json.dumps(hold.to_json()).encode(), mode="overwrite")
    return hold


def release_hold(store: ObjectStore, token: str) -> None:
    """Delete the hold's record; releasing twice (a retry) is fine."""
    with contextlib.suppress(ObjectNotFoundError, FileNotFoundError):
        store.delete(_key(token))


def list_holds(store: ObjectStore) -> list[Hold]:
    """Every hold recorded on the table, oldest first (unreadable records are skipped: a torn
    record protects nothing, and VACUUM's own retention still applies to its files)."""
    out = []
    for meta in store.list(f"{HOLDS_DIR}/"):
        if not meta.key.endswith(".json"):
            continue
        try:
            out.append(Hold.from_json(json.loads(store.get(meta.key))))
        except (ObjectNotFoundError, FileNotFoundError):
            continue  # released while listing
        except (ValueError, KeyError, TypeError):
            continue
    return sorted(out, key=lambda h: (h.created_at, h.token))


def hold_is_live(hold: Hold, done, now_ms: int) -> bool:
    """Whether ``hold`` still protects: not expired, and its work (``done(app_id, version)``)
    not in the table yet."""
    if hold.expires_at <= now_ms:
        return False
    return not (hold.app_id is not None and done(hold.app_id, hold.app_version))


def token_in_name(key: str) -> str | None:
    """The hold token a data file's name carries (``None`` for files written without a hold)."""
    name = key.rsplit("/", 1)[-1]
    for part in name.split("-"):
        if len(part) == 17 and _TOKEN.match(part):
            return part
    return None


def held(keys: Iterable[str], tokens: set[str]) -> set[str]:
    """The ``keys`` whose names carry one of ``tokens``."""
    if not tokens:
        return set()
    return {k for k in keys if token_in_name(k) in tokens}
