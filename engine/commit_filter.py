"""Which commits a consumer of a table cares about: the kinds of commits (what a commit did to
rows) and ``CommitFilter``, the filter arguments shared by the log-tail sensor, both commit
triggers and ``deltaplane.engine.tail.find_new_commits``.

Light on purpose (no Arrow): operators check these arguments when a DAG file is parsed. The
matching itself, which reads commits, is ``deltaplane.engine.tail.matching``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from deltaplane.engine.errors import InvalidArgumentError

APPEND, DELETE, UPDATE, RESTORE, NONE = "append", "delete", "update", "restore", "none"
KINDS = (APPEND, DELETE, UPDATE, RESTORE, NONE)


@dataclass(frozen=True)
class CommitFilter:
    """Which commits a consumer cares about (its fields are the filter arguments of the log-tail
    sensor and of both commit triggers: one definition, ``FILTER_ARGS``).

    * ``data_change_only``: skip commits that change no rows (OPTIMIZE, metadata): kind ``none``;
    * ``kinds``: what the commit did to rows: ``append``, ``delete``, ``update``, ``restore``
      (rows that existed before came back), ``none``;
    * ``operations``: commitInfo operations (``WRITE``, ``MERGE``...), case-insensitive;
    * ``partition_filter``: a SQL predicate on partition columns that the commit's new or
      removed files must match.

    A list argument given as one string means that one name (``kinds="append"``).
    """

    data_change_only: bool = True
    kinds: tuple[str, ...] | None = None
    operations: tuple[str, ...] | None = None
    partition_filter: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.data_change_only, bool):
            raise InvalidArgumentError(
                f"data_change_only must be True or False, got {self.data_change_only!r}"
            )
        for name in ("kinds", "operations"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str):
                value = (value,)
            if isinstance(value, Mapping) or not all(isinstance(v, str) and v for v in value):
                raise InvalidArgumentError(f"{name} must be a list of names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        unknown = set(self.kinds or ()) - set(KINDS)
        if unknown:
            raise InvalidArgumentError(f"unknown commit kind(s) {sorted(unknown)}: use {', '.join(KINDS)}")
        if self.partition_filter is not None and not isinstance(self.partition_filter, str):
            raise InvalidArgumentError(
                f"partition_filter must be a SQL string, got {self.partition_filter!r}"
            )

    @classmethod
    def of(cls, kwargs: Mapping[str, Any], *, owner: str = "CommitFilter") -> CommitFilter:
        """From keyword arguments (``None`` values mean the default); every error names
        ``owner``, and a name that is not a filter argument is an error listing them."""
        unknown = set(kwargs) - set(FILTER_ARGS)
        if unknown:
            raise InvalidArgumentError(
                f"{owner} got unexpected argument(s) {sorted(unknown)} (filters: {', '.join(FILTER_ARGS)})"
            )
        given = {k: v for k, v in kwargs.items() if not (k == "data_change_only" and v is None)}
        try:
            return cls(**given)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{owner}: {e}") from None

    def to_kwargs(self) -> dict[str, Any]:
        """JSON-able, for a trigger's serialized kwargs."""
        return {
            "data_change_only": self.data_change_only,
            "kinds": list(self.kinds) if self.kinds is not None else None,
            "operations": list(self.operations) if self.operations is not None else None,
            "partition_filter": self.partition_filter,
        }


FILTER_ARGS = tuple(f.name for f in fields(CommitFilter))

EARLIEST = "earliest"
LATEST = "latest"
DEFAULT_START = EARLIEST


def check_start(start: Any, *, owner: str = "start") -> str | int:
    """Where a consumer with no watermark yet starts (``start=``, shared by the log-tail sensor
    and the event trigger): ``"earliest"`` (the default: every commit, version 0 included),
    ``"latest"`` (only commits after the version current when it first looks) or a version
    ``N >= 0`` (commits from ``N`` on, ``N`` included). Checked when a DAG file is parsed."""
    if isinstance(start, str) and start.lower() in (EARLIEST, LATEST):
        return start.lower()
    if isinstance(start, int) and not isinstance(start, bool) and start >= 0:
        return start
    raise InvalidArgumentError(
        f"{owner}: start must be 'earliest', 'latest' or a version (an int >= 0), got {start!r}"
    )
