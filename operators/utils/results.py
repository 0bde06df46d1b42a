"""The one XCom shape of every deltaplane table operator, built in one place.

``DeltaTableOperator`` passes what an operator's ``run`` returned through ``shape_result``; the
task's XCom (``return_value``) is always::

    {
      "table": "s3://bucket/trips",      # the table the task acted on, as given (rendered)
      "operation": "OPTIMIZE",           # Delta's commitInfo operation of ``version``; else what
                                         # the task did ("CHECKPOINT", "QUALITY GATE", ...)
      "version": 12 | null,              # the version this task committed, or found already
                                         # holding its work; null when nothing was committed
      "read_version": 11 | null,         # the table version the task started from (null: no
                                         # table yet, or an operator that does not read it)
      "committed": true,                 # this try made the commit ``version``; false with
                                         # version null when nothing was committed (a DELETE
                                         # that matched no row: read_version is the table's)
      "already_applied": false,          # the work was found in the table (``version`` holds it)
      "metrics": {"numFiles": "3", ...}, # ``version``'s operationMetrics exactly as the commit
                                         # holds them (Delta writes strings); {} without a commit
      "reason": null | "...",            # why nothing was committed (nothing to do, dry run,
                                         # already applied ...); null for a commit
      "engine": "in-process" | "spark",  # where the work ran
      "work": "deltaplane:files:..." | null,  # the work key's application id (exactly once)
      "event": {...} | null,             # the Asset event published for the commit, if any
      ...                                # operator-specific keys (documented on each operator;
                                         # absent when the work was found applied before running)
      "skipped": false,                  # deprecated alias of already_applied
      "operationMetrics": {...},         # deprecated alias of metrics
    }

``committed`` and ``already_applied`` are never both true; a version with neither is impossible.
Operator-specific keys never reuse a common name. ``operationMetrics``/``operation_metrics``
that an operator or a Spark job returns are dropped: ``metrics`` is read from the commit itself,
so a retry that found the work and a try that made it report the same numbers.
"""

from __future__ import annotations

from typing import Any

IN_PROCESS = "in-process"
SPARK = "spark"

COMMON_KEYS = (
    "table",
    "operation",
    "version",
    "read_version",
    "committed",
    "already_applied",
    "metrics",
    "reason",
    "engine",
    "work",
    "event",
)
ALIASES = {"skipped": "already_applied", "operationMetrics": "metrics"}

# What operators and Spark jobs returned before there was one shape, read here and not kept.
_LEGACY = ("skipped", "operationMetrics", "operation_metrics")


def shape_result(
    raw: dict[str, Any],
    *,
    table: str,
    operation: str,
    read_version: int | None,
    engine: str,
    work: str | None,
    commit=None,
) -> dict[str, Any]:
    """``raw`` (a ``run`` result: ``version``, optionally ``already_applied``/``skipped``,
    ``committed``, ``operation``, ``reason``, ``engine``, plus operator-specific keys) in the one
    shape. ``commit`` is ``deltaplane.engine.tail.CommitChanges`` of ``raw["version"]`` (``None``
    when there is no version): the operation and metrics are taken from it. ``committed: False``
    in ``raw`` (a command that had nothing to commit) reports no version, whatever ``raw`` says."""
    version = raw.get("version")
    version = int(version) if version is not None else None
    applied = bool(raw.get("already_applied") or raw.get("skipped") or raw.get("already_committed"))
    if raw.get("committed") is False and not applied:
        version, commit = None, None  # the version read is not this task's commit
    committed = version is not None and not applied
    if commit is not None and commit.operation:
        operation = commit.operation
    else:
        operation = str(raw.get("operation") or operation)
    metrics = dict((commit.commit_info.get("operationMetrics") or {}) if commit is not None else {})
    reason = raw.get("reason")
    if committed:
        reason = None
    elif reason is None:
        reason = "already applied" if applied else "nothing committed"
    out: dict[str, Any] = {
        "table": table,
        "operation": operation,
        "version": version,
        "read_version": read_version,
        "committed": committed,
        "already_applied": applied,
        "metrics": metrics,
        "reason": reason,
        "engine": raw.get("engine") or engine,
        "work": raw.get("work") or work,
        "event": raw.get("event"),
    }
    for key, value in raw.items():
        if key not in out and key not in _LEGACY:
            out[key] = value
    for alias, name in ALIASES.items():
        out[alias] = out[name]
    return out


__all__ = ["ALIASES", "COMMON_KEYS", "IN_PROCESS", "SPARK", "shape_result"]
