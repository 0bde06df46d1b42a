"""Next-fit packing: files taken in a given order into groups of bounded size, the one rule
behind OPTIMIZE's bins, liquid clustering's bins and Spark's file-scan tasks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def next_fit(order: Iterable[int], sizes: Sequence[int], limit: int, *, cost: int = 0) -> list[list[int]]:
    """The positions in ``order`` grouped in that order: a group takes files until the next one
    would take it past ``limit`` bytes, each file counting its size plus ``cost`` (Spark's open
    cost; 0 for compaction). A file larger than the limit is a group of its own."""
    groups: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i in order:
        if current and filled + sizes[i] > limit:
            groups.append(current)
            current, filled = [], 0
        current.append(i)
        filled += int(sizes[i]) + cost
    if current:
        groups.append(current)
    return groups
