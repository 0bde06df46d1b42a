"""Rows of partitions too small for a file of their own yet, kept as whole grouped batches.

A partitioned write into many partitions brings each of them a few rows per input batch. Held
partition by partition, those rows cost Python objects per partition and batch (300,000 of them
for 10M rows into 30,000 partitions, in 1M-row batches) and each object's bookkeeping. Here the
small partitions of one batch stay together as one *segment*: the batch's rows grouped by
partition, with the partition ids and their row offsets as NumPy arrays. Nothing is done per
partition while the input arrives; a partition's rows are found by a binary search in each
segment when they are needed (promoted to a file of their own, or written when the write ends).

Over the writer's budget the segments go to disk together, as one uncompressed Arrow IPC run
memory-mapped back (the page cache holds them, not the heap). :meth:`SmallPartitions.drain`
hands out every partition still held, in id order and in groups, each group as a
:class:`Gathering` that copies its partitions' rows out of the segments with one ``take`` per
segment (not a slice per partition and segment), so each partition gets one file however
unsorted the input was.

Also here: the grouping of a batch's rows by partition (one stable sort of their combined value
codes), the buffers of the partitions large enough to be written as they come (``PartitionBuffer``,
slices of the input batches they keep alive, ``SourceBatch``), and the spill directory of a write
(named for the host and the process, so that a write that spills removes what a killed write on
this host left behind).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

SPILL_PREFIX = "deltaplane-spill-"
_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
# Memory of the Arrow and Python objects of one held segment beyond its data.
SEGMENT_OVERHEAD = 4096


@dataclass(eq=False)
class SourceBatch:
    """An input batch (sorted by partition) that buffered pieces are zero-copy slices of: its
    memory stays allocated until the last of them is written or copied out."""

    nbytes: int
    pieces: int = 0


@dataclass
class PartitionBuffer:
    """Rows of one partition not yet written (physical layout): pieces that are slices of an
    input batch (``sources``) or copies owning their memory (source ``None``)."""

    tables: list[pa.Table] = field(default_factory=list)
    sources: list[SourceBatch | None] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # each piece's bytes, measured once (``nbytes``
    # walks every buffer of a table: about 8 us, paid per piece and partition)
    nbytes: int = 0
    num_rows: int = 0


def remove_stale_spills(base: str) -> None:
    """Delete the spill directories under ``base`` of writes whose process is gone (killed
    before it could delete its runs): named for this host and a process id that no longer runs.
    Another host's, or a live process's, are left alone; each removal is logged."""
    pattern = re.compile(re.escape(f"{SPILL_PREFIX}{_HOST}-") + r"(\d+)-[^/]+")
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and entry.is_dir(follow_symlinks=False) and not _running(int(match.group(1))):
            shutil.rmtree(entry.path, ignore_errors=True)
            log.info("removed the spilled runs of a write that did not finish: %s", entry.path)


def new_spill_directory(base: str | None) -> str:
    """A private directory for one write's runs under ``base`` (the temporary directory by
    default), after removing those of killed writes on this host."""
    base = base or tempfile.gettempdir()
    remove_stale_spills(base)
    return tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{_HOST}-{os.getpid()}-", dir=base)


def write_run(path: str, schema: pa.Schema, tables: Iterator[pa.Table]) -> pa.Table:
    """``tables`` appended to a new Arrow IPC file at ``path``, mapped back as one table (its
    descriptor closed at once: the mapping lives as long as the table's slices)."""
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as out:
        for table in tables:
            out.write_table(table)
    with pa.memory_map(path) as mapped:
        return pa.ipc.open_file(mapped).read_all()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def stable_order(codes: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(codes, kind="stable")`` for non-negative codes below ``bound``: NumPy sorts
    16-bit keys by radix (12 ms for a million rows, against 87 ms for int64 keys), so codes are
    sorted 16 bits at a time, low half first."""
    if bound <= 1 << 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    if bound <= 1 << 32:
        low = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
        return low[np.argsort((codes[low] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(codes, kind="stable")


_DENSE_CODES = 1 << 32


def group_rows(table: pa.Table, columns: list[str]) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    """The rows of ``table`` grouped by their values of ``columns`` (one stable sort, however
    many groups): the row order, each group's row count, and each group's values."""
    codes = np.zeros(table.num_rows, dtype=np.int64)
    bound = 1  # codes are below this
    for name in columns:
        encoded = pc.dictionary_encode(table.column(name).combine_chunks())
        size = len(encoded.dictionary) + 1  # the extra code is null
        indices = pc.fill_null(encoded.indices, size - 1).to_numpy().astype(np.int64)
        codes, bound = codes * size + indices, bound * size
        if bound > _DENSE_CODES:  # re-densified before the combined code could overflow
            codes = np.unique(codes, return_inverse=True)[1].astype(np.int64)
            bound = int(codes.max()) + 1
    order = stable_order(codes, bound)
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_codes[1:] != sorted_codes[:-1])))
    counts = np.diff(np.append(starts, len(order)))
    firsts = pa.array(order[starts])
    values = []
    for c in columns:
        column = table.column(c).take(firsts).to_pylist()
        if pa.types.is_floating(table.schema.field(c).type):
            # One NaN object for all: NaN is not equal to itself, but a tuple holding the same
            # object is equal to another, so NaN keys of every batch name one partition.
            column = [math.nan if v is not None and v != v else v for v in column]
        values.append(column)
    return order, counts, list(zip(*values, strict=True))


def part_bytes(table: pa.Table, offsets: np.ndarray) -> np.ndarray:
    """Bytes of each run of rows ``offsets[i]:offsets[i + 1]`` of ``table``, without a slice per
    run: exact for fixed-width columns and for strings and binaries (from their value offsets),
    the column's average row size for the rest."""
    counts = np.diff(offsets)
    total = np.zeros(len(counts), dtype=np.int64)
    for column in table.columns:
        typ = column.type
        chunk = column.chunks[0] if column.num_chunks == 1 else None
        wide = pa.types.is_large_string(typ) or pa.types.is_large_binary(typ)
        if chunk is not None and (wide or pa.types.is_string(typ) or pa.types.is_binary(typ)):
            width = 8 if wide else 4
            dtype = np.int64 if wide else np.int32
            values = np.frombuffer(chunk.buffers()[1], dtype=dtype, count=chunk.offset + len(chunk) + 1)
            values = values[chunk.offset :]
            total += np.diff(values[offsets]).astype(np.int64) + width * counts
        elif pa.types.is_primitive(typ) and not pa.types.is_boolean(typ):
            total += counts * (typ.bit_width // 8)
        else:
            total += counts * (column.nbytes // max(1, len(column)))
    return total


@dataclass(eq=False)
class _Segment:
    table: pa.Table  # rows grouped by partition: in memory, or a slice of a mapped run
    ids: np.ndarray  # the partition ids it holds rows of, in the order of their rows
    by_id: np.ndarray  # ``ids`` sorted, as positions in ``ids``
    offsets: np.ndarray  # ids[i]'s rows are offsets[i]:offsets[i + 1]
    nbytes: int  # heap bytes of its rows; 0 once spilled
    index_bytes: int  # of its NumPy arrays and objects, which stay in memory
    live: int  # rows of partitions not taken out


class SmallPartitions:
    """The rows of small partitions, segment by segment, with each partition's rows and bytes
    held (``rows``, ``bytes_of``) indexed by partition id."""

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self.nbytes = 0  # heap bytes held: segments' rows in memory, and every segment's index
        self.rows = np.zeros(0, dtype=np.int64)  # rows held, by partition id
        self._bytes = np.zeros(0, dtype=np.int64)
        self.taken = np.zeros(0, dtype=bool)  # partitions that went to a file of their own
        self.partitions = 0  # partitions with rows held

    def grow(self, count: int) -> None:
        """Make room for partition ids below ``count``."""
        if count <= len(self.rows):
            return
        size = max(count, 2 * len(self.rows), 64)
        self.rows = np.concatenate((self.rows, np.zeros(size - len(self.rows), dtype=np.int64)))
        self._bytes = np.concatenate((self._bytes, np.zeros(size - len(self._bytes), dtype=np.int64)))
        self.taken = np.concatenate((self.taken, np.zeros(size - len(self.taken), dtype=bool)))

    def too_large(
        self, ids: np.ndarray, counts: np.ndarray, sizes: np.ndarray, row_group_rows: int, limit: int
    ) -> np.ndarray:
        """Which of a batch's parts (``counts[i]`` rows, ``sizes[i]`` bytes of partition
        ``ids[i]``) go to their partition's own buffer instead: those of partitions taken
        already, those bringing a quarter of a row group (or of ``limit`` bytes) at once, and
        those that would make a row group, or ``limit`` bytes, with the rows held."""
        return (
            self.taken[ids]
            | (counts >= max(1, row_group_rows // 4))
            | (sizes >= limit // 4)
            | (self.rows[ids] + counts >= row_group_rows)
            | (self._bytes[ids] + sizes >= limit)
        )

    def add(self, table: pa.Table, ids: np.ndarray, counts: np.ndarray, sizes: np.ndarray) -> None:
        """Hold ``table``, whose rows are grouped by partition: ``counts[i]`` rows (``sizes[i]``
        bytes) of partition ``ids[i]`` (distinct), one partition after the other."""
        if table.num_rows == 0:
            return
        self.partitions += int(np.count_nonzero(self.rows[ids] == 0))
        self.rows[ids] += counts
        self._bytes[ids] += sizes
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        by_id = np.argsort(ids)
        index_bytes = ids.nbytes + by_id.nbytes + offsets.nbytes + SEGMENT_OVERHEAD
        self._segments.append(_Segment(table, ids, by_id, offsets, table.nbytes, index_bytes, table.num_rows))
        self.nbytes += table.nbytes + index_bytes

    def take(self, pid: int) -> list[pa.Table]:
        """Every row held of partition ``pid``, in input order (slices of the segments); the
        partition is marked taken and its rows are no longer held. Segments left holding no row
        of any partition are dropped."""
        pieces = []
        for segment in self._segments:
            k = int(np.searchsorted(segment.ids, pid, sorter=segment.by_id))
            i = int(segment.by_id[k]) if k < len(segment.ids) else -1
            if i >= 0 and segment.ids[i] == pid:
                start, end = int(segment.offsets[i]), int(segment.offsets[i + 1])
                pieces.append(segment.table.slice(start, end - start))
                segment.live -= end - start
        self.taken[pid] = True
        if self.rows[pid]:
            self.partitions -= 1
        self.rows[pid] = self._bytes[pid] = 0
        if any(s.live == 0 for s in self._segments):
            for s in self._segments:
                if s.live == 0:
                    self.nbytes -= s.nbytes + s.index_bytes
            self._segments = [s for s in self._segments if s.live]
        return pieces

    def spill(self, path: str, schema: pa.Schema) -> int:
        """Write the segments held in memory to one run at ``path`` and hold them from there
        (memory-mapped); the run's size, 0 if nothing was in memory."""
        resident = [s for s in self._segments if s.nbytes]
        if not resident:
            return 0
        run = write_run(path, schema, (s.table for s in resident))
        offset = 0
        for s in resident:
            rows = s.table.num_rows
            s.table = run.slice(offset, rows)
            offset += rows
            self.nbytes -= s.nbytes
            s.nbytes = 0
        return os.path.getsize(path)

    def drain(self, files: int, rows: int) -> Iterator[tuple[list[int], np.ndarray, Gathering]]:
        """Every partition held and not taken, in id order, in groups of at most ``files``
        partitions (a group closes once it holds ``rows`` rows): each group's partition ids,
        the row offsets of each partition in the group's table, and the :class:`Gathering`
        that makes that table, partition after partition and each partition's rows in input
        order. The per-partition work is NumPy's here; the copying is the caller's, on any
        thread. Nothing is held afterwards."""
        if self._segments:
            ids = np.concatenate([s.ids for s in self._segments])
            which = np.concatenate([np.full(len(s.ids), k) for k, s in enumerate(self._segments)])
            starts = np.concatenate([s.offsets[:-1] for s in self._segments])
            counts = np.concatenate([np.diff(s.offsets) for s in self._segments])
            keep = ~self.taken[ids]
            order = np.argsort(ids[keep], kind="stable")  # segments stay in input order within an id
            ids, which = ids[keep][order], which[keep][order]
            starts, counts = starts[keep][order], counts[keep][order]
            tables = [s.table for s in self._segments]
            first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, np.int64)
            held = np.add.reduceat(counts, first) if len(first) else np.zeros(0, np.int64)
            for a, b in _groups(held.tolist(), files, rows):
                lo, hi = int(first[a]), int(first[b]) if b < len(first) else len(ids)
                offsets = np.zeros(b - a + 1, dtype=np.int64)
                np.cumsum(held[a:b], out=offsets[1:])
                gathering = Gathering.of(tables, which[lo:hi], starts[lo:hi], counts[lo:hi])
                yield ids[first[a:b]].tolist(), offsets, gathering
        self.clear()

    def clear(self) -> None:
        self._segments.clear()
        self.nbytes = 0
        self.rows[:] = 0
        self._bytes[:] = 0
        self.partitions = 0


def _groups(rows: list[int], files: int, limit: int) -> Iterator[tuple[int, int]]:
    """Runs ``a:b`` of consecutive partitions (``rows[i]`` rows each) of at most ``files``
    partitions, each closed as soon as it reaches ``limit`` rows."""
    a, held = 0, 0
    for i, n in enumerate(rows):
        held += n
        if i + 1 - a == files or held >= limit:
            yield a, i + 1
            a, held = i + 1, 0
    if a < len(rows):
        yield a, len(rows)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``starts[i]:starts[i] + counts[i]`` for every ``i``, one after the other."""
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(int(ends[-1]) if len(ends) else 0)


@dataclass(eq=False)
class Gathering:
    """Runs of rows of several segments to be copied into one table in a given order: the
    runs taken from each segment (``pieces``: its table, and the runs' starts and lengths in
    the order wanted within it), then, when runs of more than one segment are interleaved, the
    order of the pieces' concatenated rows (``order``)."""

    pieces: list[tuple[pa.Table, np.ndarray, np.ndarray]]
    order: np.ndarray | None

    @classmethod
    def of(
        cls, tables: list[pa.Table], which: np.ndarray, starts: np.ndarray, counts: np.ndarray
    ) -> Gathering:
        """Runs ``starts[i]:starts[i] + counts[i]`` of ``tables[which[i]]``, in the order given."""
        by_segment = np.argsort(which, kind="stable")
        segments, starts_in, counts_in = which[by_segment], starts[by_segment], counts[by_segment]
        cuts = np.r_[np.flatnonzero(np.r_[True, segments[1:] != segments[:-1]]), len(segments)].tolist()
        pieces = [
            (tables[int(segments[a])], starts_in[a:b], counts_in[a:b]) for a, b in itertools.pairwise(cuts)
        ]
        if len(pieces) < 2:
            return cls(pieces, None)
        placed = np.empty(len(which), dtype=np.int64)  # each run's start in the pieces' rows
        placed[by_segment] = np.cumsum(counts_in) - counts_in
        return cls(pieces, _ranges(placed, counts))

    def table(self) -> pa.Table:
        taken = [_gather(table, starts, counts) for table, starts, counts in self.pieces]
        if self.order is None:
            return taken[0]
        return pa.concat_tables(taken).combine_chunks().take(pa.array(self.order))


def _gather(table: pa.Table, starts: np.ndarray, counts: np.ndarray) -> pa.Table:
    """Runs of ``table`` copied into one table: one ``take``, or for a table of several chunks
    (a run mapped back in several batches) a slice per run, since Arrow's ``take`` over chunks
    would first copy the whole table."""
    if all(column.num_chunks == 1 for column in table.columns):
        return table.take(pa.array(_ranges(starts, counts)))
    slices = [table.slice(s, c) for s, c in zip(starts.tolist(), counts.tolist(), strict=True)]
    return pa.concat_tables(slices).combine_chunks()
