"""The dataset path: whole-file reads through Arrow's dataset scanner (local tables, and object
stores Arrow reaches itself, such as S3), which reads ahead and decodes across files in C++;
files that need conforming are read on the engine's path and spliced back in place."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.deletion_vectors import keep_mask
from deltaplane.engine.log.replay import canonical_path
from deltaplane.engine.scan.conform import match_field
from deltaplane.engine.scan.files import BATCH_ROWS, REMOTE_READ_WORKERS, FilePlan, row_starts
from deltaplane.engine.schema import (
    PrimitiveType,
    to_arrow_type,
)
from deltaplane.engine.storage import arrow_files

# to_batches streams through Arrow's scanner only where every file is small (many small files is
# where reading ahead across files pays); it then holds at most this many files and batches each
# in flight (on an object store, whose round trips need more files in flight, up to 32 files and
# _STREAM_REMOTE_BYTES of them). Larger files stream one at a time on the engine's path, in
# memory bounded by a batch.
_STREAM_FILE_BYTES = 16 << 20

_STREAM_FILE_READAHEAD = 8

_STREAM_REMOTE_BYTES = 128 << 20

_STREAM_BATCH_READAHEAD = 2


@functools.cache
def _dataset_format(remote: bool):
    # As the engine opens a file: INT96 as microseconds, pages written with a CRC checked, and
    # column chunks fetched ahead in coalesced requests on an object store only (``pre_buffer``).
    import pyarrow.dataset as ds  # loaded on first use: it imports pandas (0.3 s) when installed

    return ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"),
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(
            page_checksum_verification=True, pre_buffer=remote
        ),
    )


def _file_dataset(fragments: list, schema: pa.Schema, filesystem, remote: bool):
    """Arrow's dataset over these Parquet files, read with the scan's options. For an object
    store, Arrow's I/O pool (8 threads by default, sized for disks) is raised to
    ``REMOTE_READ_WORKERS``: each of its threads waits a round trip per request."""
    import pyarrow.dataset as ds

    if remote and pa.io_thread_count() < REMOTE_READ_WORKERS:
        pa.set_io_thread_count(REMOTE_READ_WORKERS)
    return ds.FileSystemDataset(fragments, schema, _dataset_format(remote), filesystem)


class DatasetPath:
    """The dataset path of ``Scan`` (a mixin: it reads the scan's plans and state)."""

    def _read_dataset(self) -> pa.Table | None:
        """The scan read by Arrow's dataset scanner (C++ read-ahead and decoding across files, no
        Python work per file), or ``None`` where the engine's per-file path is needed.

        It applies to files read whole (no data-column filter, no row ids), without column mapping
        by id, in a store Arrow opens itself (local, S3). Every file's columns are checked
        against the table's types after the scan (the footers are then cached): a file that
        would need the engine's conformance (a widened type, INT96 or millisecond timestamps, a
        column name in another case, nested physical names) is read again on the engine's path
        and its rows replace the scanner's. Partition values are repeated from the log by each
        file's row count.

        With deletion vectors the rows are taken from the scanner's batch stream instead, each
        batch's deleted rows dropped as it arrives: the decoded batch is freed as its survivors
        are copied, so the memory touched is about the result's, not twice it (on this machine
        touching fresh pages cost as much as the copy itself).
        """
        prepared = self._dataset_fragments()
        if prepared is None:
            return None
        fragments, expected, filesystem = prepared
        dvs = self.files.column("deletion_vector")
        if dvs.null_count < len(dvs):
            return self._concat(list(self._dataset_batch_stream(fragments, expected, filesystem, BATCH_ROWS)))
        try:
            dataset = _file_dataset(fragments, expected, filesystem, self._remote)
            raw = dataset.to_table(
                columns=expected.names, use_threads=True, fragment_readahead=self._file_readahead
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError):
            return None  # the engine's path names the file and the cause
        redo = self._files_to_conform(fragments, expected)
        if redo and self.predicate is not None:
            return None  # filtered rows no longer line up with files: the engine's path reads all
        self._count(files=len(fragments), rows=raw.num_rows)
        counts = None
        if redo or self._partitions_needed:  # the footers are cached by the scan
            counts = np.fromiter((f.metadata.num_rows for f in fragments), np.int64, len(fragments))
        full = self._dataset_columns(raw, counts)
        if self.predicate is not None:  # a filter on partition columns only
            full = self._apply_filter(full)
        out = self._output(full)
        return self._splice(out, counts, redo) if redo else out

    def _dataset_fragments(self) -> tuple[list, pa.Schema, object] | None:
        """The planned files as dataset fragments, the file columns to read and Arrow's
        filesystem, or ``None`` when the engine's per-file path must read them (a store Arrow
        cannot open, a file on another filesystem, row ids, mapping by id, or a first file that
        needs conforming: no scan twice). Each fragment carries the log's file size: on an
        object store no request asks for it."""
        if self._lineage_names is not None or self.mode == "id":
            return None
        view = arrow_files(self.snapshot.store)
        if view is None:
            return None
        filesystem, uri_prefix, path_prefix = view
        uris = self.file_uris()
        if any(not u.startswith(uri_prefix) for u in uris):
            return None  # a location on another filesystem
        cut = len(uri_prefix)
        sizes = self.files.column("size").to_pylist()
        expected = self._physical_read_schema()
        fmt = _dataset_format(self._remote)
        fragments = [
            fmt.make_fragment(path_prefix + u[cut:], filesystem=filesystem, file_size=size)
            for u, size in zip(uris, sizes, strict=True)
        ]
        try:
            if not self._plain_file(fragments[0].physical_schema, expected):
                return None
        except (pa.ArrowInvalid, OSError):
            return None  # the engine's path names the file and the cause
        return fragments, expected, filesystem

    def _physical_read_schema(self) -> pa.Schema:
        """The file columns this scan reads, under their physical names, as the table's types."""
        return pa.schema(
            [
                pa.field(f.physical_name if self.mode == "name" else f.name, to_arrow_type(f.type))
                for f in self._read_fields
            ]
        )

    def _plain_file(self, schema: pa.Schema, expected: pa.Schema) -> bool:
        """Whether a file with ``schema`` reads as the table's columns with no conforming."""
        for f, want in zip(self._read_fields, expected, strict=True):
            match = match_field(schema, f, self.mode)
            if match is not None and (match.name != want.name or match.type != want.type):
                return False
            if match is not None and len(schema.get_all_field_indices(match.name)) > 1:
                return False  # the engine's path refuses the file
            # Nested fields are matched by physical name: a file type equal to the logical one
            # may hold other fields under those names (renamed, dropped and re-added).
            nested = self.mode == "name" and not isinstance(f.type, PrimitiveType)
            if nested and (match is None or to_arrow_type(f.type, physical=True) != want.type):
                return False
        # A file that also holds a partition column: the log's value is the row's.
        return all(name not in schema.names for name in self._partition_fields)

    def _files_to_conform(self, fragments: list, expected: pa.Schema) -> list[int]:
        bad, seen = [], None
        for i, fragment in enumerate(fragments):
            schema = fragment.physical_schema
            if seen is not None and schema.equals(seen):
                continue
            if self._plain_file(schema, expected):
                seen = schema
            else:
                bad.append(i)
        return bad

    def _dataset_columns(self, raw: pa.Table, counts: np.ndarray | None) -> pa.Table:
        """Every needed column by logical name: the files' columns, then partition values."""
        columns_out = {f.name: raw.column(i) for i, f in enumerate(self._read_fields)}
        if self._partitions_needed:
            owner = np.repeat(np.arange(len(counts)), counts)
            for name in self._partitions_needed:
                values = self._typed_partition_column(name, self.files)
                columns_out[name] = values.take(owner)
        return pa.table(columns_out) if columns_out else pa.table({"__rows": pa.nulls(raw.num_rows)})

    def _splice(self, out: pa.Table, kept: np.ndarray, redo: list[int]) -> pa.Table:
        """``out`` with the rows of files ``redo`` replaced by the engine's reading of them."""
        plans = self._plans()
        with ThreadPoolExecutor(min(self._workers, len(redo))) as pool:
            tables = pool.map(lambda i: self._read_whole(plans[i], count=False), redo)
            again = dict(zip(redo, tables, strict=True))
        starts = row_starts(kept)
        pieces, begin = [], 0
        for i in redo:
            if starts[i] > begin:
                pieces.append(out.slice(begin, int(starts[i]) - begin))
            pieces.append(again[i])
            begin = int(starts[i] + kept[i])
        if begin < out.num_rows:
            pieces.append(out.slice(begin))
        return self._concat(pieces)

    def _dataset_batches(self, batch_size: int) -> Iterator[pa.RecordBatch] | None:
        """``to_batches`` through Arrow's dataset scanner (read-ahead across files in C++), under
        the conditions of ``_read_dataset``; ``None`` where the engine's path reads it all."""
        largest = pc.max(self.files.column("size")).as_py()
        if largest is None or largest > _STREAM_FILE_BYTES:
            return None  # large files: one at a time on the engine's path keeps memory bounded
        prepared = self._dataset_fragments()
        if prepared is None:
            return None
        return self._dataset_batch_stream(*prepared, batch_size)

    def _stream_readahead(self) -> int:
        """Files the batch stream reads ahead: more on an object store, within a byte budget."""
        if not self._remote:
            return _STREAM_FILE_READAHEAD
        largest = pc.max(self.files.column("size")).as_py() or 1
        return max(_STREAM_FILE_READAHEAD, min(self._file_readahead, _STREAM_REMOTE_BYTES // largest))

    def _dataset_batch_stream(
        self, fragments: list, expected: pa.Schema, filesystem, batch_size: int
    ) -> Iterator[pa.RecordBatch]:
        dataset = _file_dataset(fragments, expected, filesystem, self._remote)
        index = {f.path: i for i, f in enumerate(fragments)}
        typed = {name: self._typed_partition_column(name, self.files) for name in self._partitions_needed}
        dvs = self.files.column("deletion_vector")
        with_dv = dvs.null_count < len(dvs)
        paths, root = self.files.column("path"), self.snapshot.store.root
        sizes = self.files.column("size")
        current, offset, seen, redo = -1, 0, 0, False
        resume = (0, 0)  # where the engine's path would go on: (file, physical row)
        plan, keep = None, None
        scanner = dataset.scanner(
            columns=expected.names,
            batch_size=batch_size,
            batch_readahead=_STREAM_BATCH_READAHEAD,
            fragment_readahead=self._stream_readahead(),
            use_threads=True,
        )
        batches = iter(scanner.scan_batches())
        while True:
            try:
                tagged = next(batches)
            except StopIteration:
                break
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OSError):
                # The engine's path goes on from where the stream stands: it reads the rows the
                # scanner did not hand over, and names the file and the cause of the failure.
                plans = self._plans()
                first, skip = resume
                for i in range(first, len(plans)):
                    yield from self._whole_file_batches(plans[i], batch_size, skip=skip if i == first else 0)
                return
            i = index[tagged.fragment.path]
            if i != current:
                current, offset, seen = i, 0, seen + 1
                self._count(files=1)
                plan = FilePlan(
                    canonical_path(paths[i].as_py(), root),
                    dvs[i].as_py() if with_dv else None,
                    {name: values[i] for name, values in typed.items()},
                    size=sizes[i].as_py(),
                )
                redo = not self._plain_file(tagged.fragment.physical_schema, expected)
                if redo:  # read on the engine's path; the scanner's batches of it are passed over
                    resume = (i, 0)
                    yield from self._whole_file_batches(plan, batch_size, count_file=False)
                    resume = (i + 1, 0)
                    continue
                deleted = self._deleted_rows(plan, tagged.fragment.metadata.num_rows)
                keep = keep_mask(tagged.fragment.metadata.num_rows, deleted) if deleted is not None else None
            if redo:
                continue
            batch = tagged.record_batch
            n = batch.num_rows
            self._count(rows=n)
            mask = keep[offset : offset + n] if keep is not None else None
            offset += n
            resume = (i, offset)
            for b in self._finish(pa.Table.from_batches([batch]), plan, mask).to_batches():
                if b.num_rows:
                    yield b
        self._count(files=len(fragments) - seen)  # files without rows hand over no batch
