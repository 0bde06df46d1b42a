"""Feed a downstream table from a source table's new commits, exactly once.

``consume_appends(source_uri, target_uri)`` reads the source's commits after the last one the
target has consumed (``IncrementalScan``), and appends their rows to the target in one commit
that also records the last source version read as ``txn(appId="consume:<source>", version)``:
the position moves atomically with the rows it covers, so a rerun, a retry or a duplicate
trigger event finds it there and reads on from it (two racing consumers conflict instead of
landing the rows twice).

What a source commit did to rows decides (``deltaplane.engine.tail``'s kinds): an ``append``
gives its new rows (never the rows of files a deletion-vector DELETE re-added); OPTIMIZE and
other commits that change no rows give nothing; a ``delete``, ``update`` or ``restore`` (rows
that were there before came back: a RESTORE, whose rows a consumer already copied when they were
first added) follows ``on_change``: ``"fail"`` (``ChangeNotConsumableError`` naming the version;
nothing written), ``"skip"`` (ignored), or ``"changes"`` (the source's change data feed rows
for that commit; needs ``delta.enableChangeDataFeed``). Rows get ``_source_version``, and with
``"changes"`` also ``_change_type`` (``insert`` for appends). Columns the source adds are added to the target
(``schema_mode="merge"``). A source commit that renames or drops a column, widens a type or makes
a column NOT NULL stops the consumer before it: the commits before it land, and the next call
raises ``ChangeNotConsumableError`` naming that version (appending under the old schema would
mislabel rows). Other schema mismatches fail the write (``SchemaMismatchError``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from deltaplane.engine.errors import DeltaError, InvalidArgumentError, TableNotFoundError
from deltaplane.engine.schema_changes import read_incompatibility
from deltaplane.engine.snapshot import load_table_config
from deltaplane.engine.storage import table_location
from deltaplane.engine.tail import APPEND, IncrementalScan, describe_change
from deltaplane.engine.write_or_create import write_table

ON_CHANGE = ("fail", "skip", "changes")
SOURCE_VERSION, CHANGE_TYPE = "_source_version", "_change_type"


class ChangeNotConsumableError(DeltaError, ValueError):
    """A source commit removed or rewrote rows and the consumer's policy is ``fail``."""

    def __init__(self, message: str, version: int):
        super().__init__(message)
        self.version = version


@dataclass
class ConsumeResult:
    """What one ``consume_appends`` call did (JSON-able through ``to_dict``)."""

    version: int | None  # the target commit made (None: nothing committed)
    watermark: int  # the last source version consumed (recorded in the target's txn)
    source_versions: list[int] = field(default_factory=list)  # versions whose rows were written
    skipped_versions: list[int] = field(default_factory=list)  # changing commits skipped
    rows: int = 0
    skipped: bool = False  # the target already held this range (a concurrent or earlier try)
    reason: str | None = None  # why nothing was written

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.reason is None:
            out.pop("reason")
        return out


def consume_app_id(source_uri: str | os.PathLike[str]) -> str:
    """The ``txn`` appId under which a target records how far it consumed ``source_uri`` (the
    same for a path given as a ``str`` or as a ``pathlib.Path``)."""
    return f"consume:{table_location(source_uri)}"


def consumed_version(
    target_uri: str, source_uri: str, storage_options: Mapping[str, str] | None = None
) -> int | None:
    """The last version of ``source_uri`` the target holds (``None``: none, or no target yet)."""
    from deltaplane.engine.table import DeltaTable

    try:
        table = DeltaTable(target_uri, storage_options=storage_options)
    except TableNotFoundError:
        return None
    return table.snapshot.app_transaction_version(consume_app_id(source_uri))


def _rows_of(scan: IncrementalScan, change, on_change: str, source_uri: str) -> pa.Table | None:
    """The rows one data commit brings to the target, stamped with its version: an append's new
    rows; another commit's change feed with ``on_change="changes"``, nothing with ``"skip"``
    (``None``), an error naming what it did otherwise."""
    if change.kind == APPEND:
        rows = scan.appended_rows(change)
        rows = rows.append_column(SOURCE_VERSION, pa.repeat(pa.scalar(change.version, pa.int64()), len(rows)))
        if on_change == "changes":
            rows = rows.append_column(CHANGE_TYPE, pa.repeat(pa.scalar("insert"), rows.num_rows))
        return rows
    if on_change == "skip":
        return None
    if on_change == "changes":
        return _change_feed(scan.change_rows(change))
    raise ChangeNotConsumableError(
        f"{source_uri} version {change.version} ({change.operation}) is a {change.kind}: "
        f"{describe_change(change)}; set on_change='skip' to ignore such commits "
        "or on_change='changes' to consume the change data feed",
        change.version,
    )


def consume_appends(
    source_uri: str,
    target_uri: str,
    *,
    on_change: str = "fail",
    storage_options: Mapping[str, str] | None = None,
    source_storage_options: Mapping[str, str] | None = None,
    max_versions: int | None = None,
    after_version: int | None = None,
) -> ConsumeResult:
    """Append the rows of ``source_uri``'s commits after the target's recorded position (or
    ``after_version``, when it has none) to ``target_uri`` (created by the first write), at most
    ``max_versions`` commits per call; ``source_storage_options`` default to ``storage_options``."""
    if not isinstance(on_change, str) or on_change.lower() not in ON_CHANGE:
        raise InvalidArgumentError(f"on_change must be one of {', '.join(ON_CHANGE)}, got {on_change!r}")
    on_change = on_change.lower()
    source_uri, target_uri = table_location(source_uri), table_location(target_uri)
    source_storage_options = storage_options if source_storage_options is None else source_storage_options
    done = consumed_version(target_uri, source_uri, storage_options)
    watermark = done if done is not None else (-1 if after_version is None else int(after_version))
    scan = IncrementalScan.of(
        source_uri, watermark, storage_options=source_storage_options, max_versions=max_versions
    )
    pieces, consumed, skipped = [], [], []
    stop = None  # a commit whose schema change the target cannot follow
    before = None  # the source's metadata before the commit being looked at
    for change in scan:
        if change.metadata is not None and change.version > 0:
            if before is None:
                before = load_table_config(scan.store, change.version - 1)[1]
            problem = read_incompatibility(before, change.metadata)
            # A target that consumed nothing yet has no rows under the old schema to clash with.
            if problem and (done is not None or pieces):
                stop = (change, problem)
                break
        before = change.table_metadata
        if not change.data_change:
            continue
        rows = _rows_of(scan, change, on_change, source_uri)
        if rows is None:  # on_change="skip": a commit that is not an append
            skipped.append(change.version)
            continue
        if rows.num_rows:
            pieces.append(rows)
            consumed.append(change.version)
    last = scan.last_version
    if stop is not None:
        change, problem = stop
        if not pieces:
            raise ChangeNotConsumableError(
                f"{source_uri} version {change.version} ({change.operation}) changed its schema: "
                f"{problem}. Rows after it cannot be appended to {target_uri} under the old schema "
                "without being mislabelled or mistyped; change the target to match (or consume into "
                f"a new target with after_version={change.version}), then consume again",
                change.version,
            )
        last = change.version - 1  # what came before the change lands; the next run stops there
    if not pieces:
        reason = (
            "no new commits" if last == watermark else f"versions {watermark + 1}..{last} hold no new rows"
        )
        return ConsumeResult(version=None, watermark=watermark, skipped_versions=skipped, reason=reason)
    data = pa.concat_tables(pieces, promote_options="permissive")
    result = write_table(
        target_uri,
        data,
        mode="append",
        app_id=consume_app_id(source_uri),
        app_version=last,
        storage_options=storage_options,
        schema_mode="merge",  # columns the source added (an ALTER between runs) are added here too
    )
    return ConsumeResult(
        version=None if result.skipped else result.version,
        watermark=last,
        source_versions=consumed,
        skipped_versions=skipped,
        rows=data.num_rows,
        skipped=result.skipped,
    )


def _change_feed(rows: pa.Table) -> pa.Table:
    from deltaplane.engine.commands.changes import COMMIT_TIMESTAMP, COMMIT_VERSION

    rows = rows.drop_columns([COMMIT_TIMESTAMP])
    rows = rows.rename_columns([SOURCE_VERSION if n == COMMIT_VERSION else n for n in rows.column_names])
    order = [n for n in rows.column_names if n not in (SOURCE_VERSION, CHANGE_TYPE)]
    return rows.select([*order, SOURCE_VERSION, CHANGE_TYPE])
