"""Z-order values: one sort key that keeps rows close in several columns at once.

Sorting by one column clusters only that column: files end up with narrow min/max ranges for it
and the full range for every other column, so equality queries on the others skip nothing. A
Z-order curve interleaves the bits of every column's value, so each output file covers a small
box in all the columns together and statistics skipping works for each of them.

Raw values cannot be interleaved directly (strings, skewed numbers, timestamps), so each column is
first **rank-normalized**: its dense rank among the rows being clustered, scaled to ``bits``
bits. Equal values get equal codes, nulls sort first, and the code space is used evenly whatever
the distribution, which is what makes the interleaving fair between columns. (Delta Spark gets
the same effect from range-partition ids; an exact rank is affordable here because a Z-order bin
is one partition held in memory.)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import InvalidArgumentError

MAX_KEY_BITS = 64


def bits_per_column(num_columns: int) -> int:
    """Bits each column contributes to a 64-bit key (at most 32: ranks beyond that add nothing)."""
    if num_columns < 1:
        raise InvalidArgumentError("Z-order needs at least one column")
    return min(32, MAX_KEY_BITS // num_columns)


def rank_codes(values: pa.Array | pa.ChunkedArray, bits: int) -> np.ndarray:
    """Each value's dense rank scaled to ``[0, 2**bits)`` as uint64 (nulls first)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    ranks = pc.rank(values, sort_keys=[("", "ascending", "at_start")], tiebreaker="dense")
    ranks = ranks.to_numpy().astype(np.uint64) - np.uint64(1)  # 0 .. distinct-1
    return scale_ranks(ranks, int(ranks.max()) + 1, bits)


def scale_ranks(ranks: np.ndarray, distinct: int, bits: int) -> np.ndarray:
    """Dense ranks (0 .. distinct-1, uint64) scaled to ``[0, 2**bits)``: the normalization
    every Z-order uses, whether the ranks come from Arrow here or from a distributed sort."""
    ranks = ranks.astype(np.uint64, copy=False)
    levels = 1 << bits
    if distinct <= levels:
        # Spread the codes over the whole space so that every column's bits carry equal weight.
        return (ranks * np.uint64(levels)) // np.uint64(distinct)
    return ((ranks.astype(np.float64) * levels) / distinct).astype(np.uint64)


def interleave(codes: list[np.ndarray], bits: int) -> np.ndarray:
    """Morton key: the most significant bit of every column first, then the next, and so on."""
    if not codes:
        raise InvalidArgumentError("Z-order needs at least one column")
    n = len(codes[0])
    key = np.zeros(n, dtype=np.uint64)
    one = np.uint64(1)
    for bit in range(bits - 1, -1, -1):
        shift = np.uint64(bit)
        for column in codes:
            key = (key << one) | ((column >> shift) & one)
    return key


def key_bits(num_columns: int) -> int:
    """Significant bits of a key over ``num_columns`` columns."""
    return bits_per_column(num_columns) * num_columns


def zorder_key(table: pa.Table, columns: list[str]) -> np.ndarray:
    """The Z-order key of every row of ``table`` over ``columns`` (uint64)."""
    bits = bits_per_column(len(columns))
    return interleave([rank_codes(table.column(c), bits) for c in columns], bits)


def zorder_sort(table: pa.Table, columns: list[str]) -> tuple[pa.Table, np.ndarray]:
    """``table`` reordered along the Z-order curve of ``columns`` (stable for equal keys), and
    the sorted keys."""
    keys = zorder_key(table, columns)
    if table.num_rows <= 1:
        return table, keys
    order = np.argsort(keys, kind="stable")
    return table.take(pa.array(order)), keys[order]


def cut_points(sorted_keys: np.ndarray, num_files: int, key_bits: int, tolerance: float = 0.3) -> list[int]:
    """Row offsets at which to start new files, about ``len / num_files`` rows apart.

    A file's statistics span the bounding box of its stretch of the curve; a stretch that
    crosses a high-level cell boundary of the curve has a wide box in some column and skips
    poorly. So each cut is moved to the nearest boundary of the coarsest level of cells that
    has one within ``tolerance`` of a file's rows; files then line up with the curve's cells.
    """
    n = len(sorted_keys)
    if num_files <= 1 or n <= 1:
        return []
    step = n / num_files
    reach = max(1, int(step * tolerance))
    coarsest = max(1, int(np.ceil(np.log2(num_files))))
    levels = []
    for level in range(coarsest, min(coarsest + 4, key_bits) + 1):
        prefix = sorted_keys >> np.uint64(key_bits - level)
        levels.append(np.flatnonzero(prefix[1:] != prefix[:-1]) + 1)
    cuts: list[int] = []
    for i in range(1, num_files):
        ideal = round(i * step)
        chosen = ideal
        for boundaries in levels:
            if len(boundaries) == 0:
                continue
            j = int(np.searchsorted(boundaries, ideal))
            near = [int(boundaries[k]) for k in (j - 1, j) if 0 <= k < len(boundaries)]
            best = min(near, key=lambda b: abs(b - ideal))
            if abs(best - ideal) <= reach:
                chosen = best
                break
        if (not cuts or chosen > cuts[-1]) and 0 < chosen < n:
            cuts.append(chosen)
    return cuts
