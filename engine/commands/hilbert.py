"""Hilbert curve keys: the space-filling curve liquid clustering sorts by (as Delta Spark does).

A Z-order curve jumps: consecutive cells along it can be far apart (at every high-order bit
flip), so a file cut from a stretch of the curve can span a long, thin box. The Hilbert curve
visits the same cells but moves between neighbours only, so a stretch of it stays compact in
every column, and files cut from it have tighter min/max boxes; that is why Delta Spark's
clustering uses it (``curve = "hilbert"``) where ``ZORDER BY`` uses Morton order.

Columns are rank-normalized exactly as for Z-order (``zorder.rank_codes``); the codes are turned
into the Hilbert index by Skilling's transposition ("Programming the Hilbert curve", AIP 2004):
undo the excess rotations and reflections level by level, Gray-encode, then read the result's
bits interleaved. Every step is a NumPy operation on all rows at once. Like the Morton key, the
index's prefixes name nested boxes, so ``zorder.cut_points`` snaps file boundaries to them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from deltaplane.engine.commands.zorder import bits_per_column, interleave, rank_codes
from deltaplane.engine.errors import InvalidArgumentError


def hilbert_index(codes: list[np.ndarray], bits: int) -> np.ndarray:
    """The Hilbert index (uint64) of points whose coordinates are ``codes`` (one uint64 array
    per dimension, each value below ``2**bits``); ``len(codes) * bits`` must fit in 64 bits."""
    n = len(codes)
    if n == 0:
        raise InvalidArgumentError("a Hilbert key needs at least one column")
    if n * bits > 64:
        raise InvalidArgumentError(f"{n} columns of {bits} bits do not fit a 64-bit Hilbert key")
    x = [np.asarray(c, dtype=np.uint64).copy() for c in codes]
    if n == 1 or bits < 1:
        return x[0]
    zero = np.uint64(0)
    q = 1 << (bits - 1)
    while q > 1:  # from the top level down: undo the curve's rotations and reflections
        bit, low = np.uint64(q), np.uint64(q - 1)
        for i in range(n):
            set_ = (x[i] & bit) != zero
            swap = np.where(set_, zero, (x[0] ^ x[i]) & low)
            x[0] = np.where(set_, x[0] ^ low, x[0] ^ swap)
            if i:
                x[i] = x[i] ^ swap
        q >>= 1
    for i in range(1, n):  # Gray encode
        x[i] = x[i] ^ x[i - 1]
    t = np.zeros_like(x[0])
    q = 1 << (bits - 1)
    while q > 1:
        t = np.where((x[n - 1] & np.uint64(q)) != zero, t ^ np.uint64(q - 1), t)
        q >>= 1
    return interleave([xi ^ t for xi in x], bits)


def hilbert_key(columns: list[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Each row's Hilbert index over ``columns`` (rank-normalized; one column: its rank)."""
    bits = bits_per_column(len(columns))
    return hilbert_index([rank_codes(c, bits) for c in columns], bits)


def hilbert_sort(table: pa.Table, columns: list[pa.Array | pa.ChunkedArray]) -> tuple[pa.Table, np.ndarray]:
    """``table`` reordered along the Hilbert curve of ``columns`` (stable for equal keys), and the
    sorted keys."""
    keys = hilbert_key(columns)
    if table.num_rows <= 1:
        return table, keys
    order = np.argsort(keys, kind="stable")
    return table.take(pa.array(order)), keys[order]
