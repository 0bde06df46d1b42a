"""The commit filter arguments of the log-tail sensor and the commit triggers.

One definition: the fields of the engine's ``CommitFilter`` (``FILTER_ARGS``: ``data_change_only``,
``kinds``, ``operations``, ``partition_filter``). The condition itself (which commits after a
watermark match) is the engine's ``deltaplane.engine.tail.find_new_commits``; this module only takes
the arguments out of an operator's or a trigger's keyword arguments and checks them when the DAG
file is parsed (``deltaplane.engine.commit_filter`` imports no Arrow).
"""

from __future__ import annotations

from typing import Any

from deltaplane.engine import FILTER_ARGS, CommitFilter

__all__ = ["FILTER_ARGS", "CommitFilter", "take_filter"]


def take_filter(owner: str, kwargs: dict[str, Any], *, strict: bool = False) -> CommitFilter:
    """The ``CommitFilter`` of ``kwargs``' filter arguments, removed from ``kwargs`` (the rest
    belongs to the operator's base class). ``strict``: nothing else may be left (a trigger's
    ``**filters``). Errors name ``owner``."""
    filters = {name: kwargs.pop(name) for name in FILTER_ARGS if name in kwargs}
    if strict and kwargs:
        filters.update(kwargs)  # CommitFilter.of names the unexpected ones
    return CommitFilter.of(filters, owner=owner)
