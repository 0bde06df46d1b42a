"""The engine's path: one file at a time, row groups kept by their statistics, the filter's columns
decoded first and the others only for the row groups holding a match, deletion vectors applied,
columns conformed, partition columns and row lineage added."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltaplane.engine.deletion_vectors import keep_mask
from deltaplane.engine.errors import (
    CorruptDeletionVectorError,
    DataFileError,
    DeltaError,
    ObjectNotFoundError,
    StorageError,
)
from deltaplane.engine.expressions.arrow import filter_rows
from deltaplane.engine.row_tracking import materialized_columns, stable_values
from deltaplane.engine.scan.conform import as_type, conform_chunked, match_field, unused_name
from deltaplane.engine.scan.deleted_rows import read_file_deletion_vector
from deltaplane.engine.scan.files import FilePlan, FileRows
from deltaplane.engine.scan.skipping import row_group_keep_mask
from deltaplane.engine.schema import (
    StructField,
    to_arrow_type,
)
from deltaplane.engine.storage import resolve_location
from deltaplane.engine.values_to_arrow import empty_table

_LATE_ROWS = 1 << 16  # rows of a file's selected row groups from which late columns are read apart

_PREFIX_BATCH_ROWS = 1 << 14  # late columns are decoded this many rows at a time, up to the last match


class FilePath:
    """The engine's path of ``Scan`` (a mixin: it reads the scan's plans and state)."""

    def _whole_file_batches(
        self, plan: FilePlan, batch_size: int, *, skip: int = 0, count_file: bool = True
    ) -> Iterator[pa.RecordBatch]:
        """One file's rows on the engine's path, batch by batch, from physical row ``skip``."""
        pf = self._open(plan)
        deleted = self._deleted_rows(plan, pf.metadata.num_rows)
        # The bitmap is decoded once per file; each batch takes its slice of one mask.
        keep = keep_mask(pf.metadata.num_rows, deleted) if deleted is not None else None
        offset = 0
        names = self._file_columns(pf)
        if count_file:
            self._count(files=1)
        for batch in self._file_batches(pf, names, batch_size, plan):
            n = batch.num_rows
            if offset + n <= skip:
                offset += n
                continue
            if offset < skip:
                batch, offset = batch.slice(skip - offset), skip
                n = batch.num_rows
            self._count(rows=n)
            mask = keep[offset : offset + n] if keep is not None else None
            out = self._finish(pa.Table.from_batches([batch]), plan, mask, offset)
            offset += n
            for b in out.to_batches():
                if b.num_rows:
                    yield b

    def _file_batches(self, pf: pq.ParquetFile, names: list[str], batch_size: int, plan: FilePlan):
        try:
            if names:
                threads = not self._small  # a small file decodes faster than a thread pool wakes
                yield from pf.iter_batches(batch_size=batch_size, columns=names, use_threads=threads)
            else:
                # Only partition columns (or none) wanted: still honour row counts.
                remaining = pf.metadata.num_rows
                while remaining > 0:
                    n = min(batch_size, remaining)
                    yield pa.RecordBatch.from_arrays([pa.nulls(n)], names=["__rows"])
                    remaining -= n
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e

    def read_files_with_positions(self) -> Iterator[tuple[int, FileRows]]:
        """Each planned file's surviving rows with their physical row positions, in order.

        Row-level commands need positions (to extend a deletion vector) and the existing
        deletion vector; files are read in parallel, results come back in plan order.
        """
        plans = self._plans()
        if not plans:
            return
        if self.predicate is not None:
            raise DeltaError("positions are only meaningful for a scan without a row filter")
        if self._lineage_names is None:
            materialized = materialized_columns(self.snapshot.protocol, self.snapshot.metadata)
            if materialized is not None:  # rewrites must keep each row's row id and version
                self._track_rows(materialized)
                plans = self._plans()
        if self._small:
            yield from enumerate(map(self._read_with_positions, plans))
            return
        with ThreadPoolExecutor(min(self._workers, len(plans))) as pool:
            yield from enumerate(pool.map(self._read_with_positions, plans))

    def _read_with_positions(self, plan: FilePlan) -> FileRows:
        pf = self._open(plan)
        physical_rows = pf.metadata.num_rows
        deleted = self._deleted_rows(plan, physical_rows)
        table = self._read_whole(plan, pf=pf, deleted=deleted)
        if deleted is None:
            positions = np.arange(physical_rows)
        else:
            positions = np.flatnonzero(keep_mask(physical_rows, deleted))
        lineage = None
        if self._lineage_names is not None:
            lineage = table.select(list(self._lineage_names))
            table = table.drop_columns(list(self._lineage_names))
        return FileRows(table, positions.astype(np.int64), physical_rows, deleted, lineage)

    def _read_whole(
        self, plan: FilePlan, *, pf: pq.ParquetFile | None = None, deleted=False, count: bool = True
    ) -> pa.Table:
        pf = pf if pf is not None else self._open(plan)
        names = self._file_columns(pf)
        try:
            if names:
                table = pf.read(columns=names, use_threads=self._threads_per_file)
            else:
                table = pa.table({"__rows": pa.nulls(pf.metadata.num_rows)})
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e
        if count:
            self._count(files=1, rows=table.num_rows)
        if deleted is False:
            deleted = self._deleted_rows(plan, pf.metadata.num_rows, count=count)
        mask = keep_mask(table.num_rows, deleted) if deleted is not None else None
        return self._finish(table, plan, mask)

    def _read_filtered(self, plan: FilePlan) -> pa.Table:
        """A file's rows matching the filter, reading only the row groups that can hold them."""
        pf = self._open(plan)
        self._count(files=1)
        groups = self._row_groups(pf, plan)
        if not groups:
            return empty_table(self.arrow_schema)
        deleted = self._deleted_rows(plan, pf.metadata.num_rows)
        return self._read_groups(pf, plan, groups, deleted)

    def _row_groups(self, pf: pq.ParquetFile, plan: FilePlan) -> list[int]:
        """The file's row groups whose statistics admit the predicate (every group when the
        file has one: the file's own statistics already decided that)."""
        count = pf.metadata.num_row_groups
        if count <= 1 or self.predicate is None:
            return list(range(count))
        mask = row_group_keep_mask(pf.metadata, pf.schema_arrow, self.predicate, self, plan)
        return np.flatnonzero(mask).tolist()

    def _read_groups(
        self, pf: pq.ParquetFile, plan: FilePlan, groups: list[int], deleted: np.ndarray | None
    ) -> pa.Table:
        """Rows of ``groups`` matching the filter: the predicate's columns first, the others
        only for the groups that hold a match, and only those rows of them."""
        metadata = pf.metadata
        sizes = np.array([metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)])
        starts = np.concatenate([[0], np.cumsum(sizes)])
        positions = np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups])
        # Late materialization pays off on large groups; a small file's columns are read at once
        # (a second read per file would cost more than decoding a few rows it discards).
        late = bool(self._other_fields) and len(positions) >= _LATE_ROWS
        first = self._predicate_fields if late else self._predicate_fields + self._other_fields
        table = self._read_row_groups(pf, plan, groups, first, len(positions))
        self._count(rows=len(positions))
        if deleted is not None:
            keep = keep_mask(int(starts[-1]), deleted)[positions]
            table, positions = table.filter(pa.array(keep)), positions[keep]
        matched = self._conformed(table, plan, first)
        for name in self._partitions_needed:
            matched[name] = pa.repeat(plan.partition_values[name], table.num_rows)
        position_column = unused_name(matched)
        matched[position_column] = pa.array(positions, pa.int64())
        full = self._apply_filter(pa.table(matched), plan)
        if not full.num_rows:
            return empty_table(self.arrow_schema)
        if late:
            hits = full.column(position_column).to_numpy()
            group_of = np.searchsorted(starts, hits, side="right") - 1
            wanted = np.unique(group_of)  # ascending, as the rows are
            within = hits - starts[group_of]
            # Each wanted group is decoded only up to its last match (the rows after it would
            # be decoded for nothing), and the reads are laid end to end.
            last = np.maximum.reduceat(within, np.searchsorted(group_of, wanted))
            lengths = last + 1
            base = np.concatenate([[0], np.cumsum(lengths)])[:-1]
            index = within + base[np.searchsorted(wanted, group_of)]
            parts = [
                self._read_group_prefix(pf, plan, int(g), self._other_fields, int(n))
                for g, n in zip(wanted, lengths, strict=True)
            ]
            rest = (pa.concat_tables(parts) if len(parts) > 1 else parts[0]).take(pa.array(index))
            for name, column in self._conformed(rest, plan, self._other_fields).items():
                full = full.append_column(name, column)
        return self._output(full)

    def _read_row_groups(
        self, pf: pq.ParquetFile, plan: FilePlan, groups: list[int], fields: list[StructField], rows: int
    ) -> pa.Table:
        names = self._file_columns(pf, fields)
        if not names:  # none of these columns is in the file: rows only
            return pa.table({"__rows": pa.nulls(rows)})
        try:
            return pf.read_row_groups(groups, columns=names, use_threads=self._threads_per_file)
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e

    def _read_group_prefix(
        self, pf: pq.ParquetFile, plan: FilePlan, group: int, fields: list[StructField], rows: int
    ) -> pa.Table:
        """The first ``rows`` rows of row group ``group`` (``fields`` only), decoded batch by
        batch and no further than needed."""
        names = self._file_columns(pf, fields)
        if not names:
            return pa.table({"__rows": pa.nulls(rows)})
        batches, got = [], 0
        try:
            for batch in pf.iter_batches(
                batch_size=_PREFIX_BATCH_ROWS,
                row_groups=[group],
                columns=names,
                use_threads=self._threads_per_file,
            ):
                batches.append(batch)
                got += batch.num_rows
                if got >= rows:
                    break
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e
        return pa.Table.from_batches(batches).slice(0, rows)

    def _count(self, *, files: int = 0, rows: int = 0, deleted: int = 0) -> None:
        with self._metrics_lock:  # files are read from several threads
            self.metrics.files_read += files
            self.metrics.rows_read += rows
            self.metrics.rows_deleted_by_dv += deleted

    def _open(self, plan: FilePlan) -> pq.ParquetFile:
        location = plan.location
        try:
            store, key = resolve_location(self.snapshot.store, location)
            source = store.open_input(key, size=plan.size)
            # Pages written with a CRC are checked: a flipped bit is an error, never wrong rows.
            # Column chunks are fetched ahead in coalesced requests only where a request is a
            # round trip (the file's own store: a table's files may live elsewhere): on a local
            # file that costs a quarter of a small file's read.
            return pq.ParquetFile(
                source,
                coerce_int96_timestamp_unit="us",
                page_checksum_verification=True,
                pre_buffer=bool(getattr(store, "remote", False)),
            )
        except ObjectNotFoundError as e:
            raise DataFileError(
                f"data file {location} of {self.snapshot.store.root} "
                f"(version {self.snapshot.version}) is missing; it may have been removed by VACUUM "
                "(versions older than the VACUUM retention cannot be read) or deleted outside Delta",
                location,
            ) from e
        except StorageError as e:
            if getattr(self.snapshot.store, "remote", False):
                raise  # a request that failed, maybe for a moment: the store's error, not the file's
            raise self._unreadable(plan, e) from e  # a directory, no permission
        except (pa.ArrowInvalid, OSError) as e:
            raise self._unreadable(plan, e) from e

    def _unreadable(self, plan: FilePlan, error: Exception) -> DataFileError:
        """The error for a data file that is present but cannot be decoded."""
        where = f"data file {plan.location} of {self.snapshot.store.root} (version {self.snapshot.version})"
        if "checksum" in str(error).lower() or "crc" in str(error).lower():
            why = (
                "is corrupt: a page failed its CRC check (the bytes changed after they were written); "
                "restore the file from a backup or a replica"
            )
        else:
            why = "is not readable Parquet"
        return DataFileError(f"{where} {why}: {error}", plan.location)

    def _deleted_rows(self, plan: FilePlan, physical_rows: int, *, count: bool = True) -> np.ndarray | None:
        if plan.deletion_vector is None:
            return None
        rows = read_file_deletion_vector(self.snapshot, plan.deletion_vector, plan.location)
        if len(rows) and int(rows[-1]) >= physical_rows:
            raise CorruptDeletionVectorError(
                f"the deletion vector of data file {plan.location} of {self.snapshot.store.root} "
                f"(version {self.snapshot.version}) deletes row {int(rows[-1])}, but the file has "
                f"{physical_rows} rows: the deletion vector does not belong to this file",
                plan.location,
            )
        if count:
            self._count(deleted=len(rows))
        return rows

    def _file_columns(self, pf: pq.ParquetFile, fields: list[StructField] | None = None) -> list[str]:
        """Names of the file's top-level columns that hold ``fields`` (by default every field this
        scan needs, row-tracking columns included)."""
        file_schema = pf.schema_arrow
        names = []
        for f in self._read_fields if fields is None else fields:
            match = match_field(file_schema, f, self.mode)
            if match is not None:
                names.append(match.name)
        if self._materialized is not None and fields is None:
            names += [n for n in self._materialized if n in file_schema.names]
        return names

    def _finish(self, table: pa.Table, plan: FilePlan, mask: np.ndarray | None, offset: int = 0) -> pa.Table:
        lineage = self._lineage(table, plan, offset) if self._lineage_names is not None else None
        if mask is not None and mask.all():
            mask = None  # nothing deleted here: no copy
        if mask is not None:
            table = table.filter(pa.array(mask))
            if lineage is not None:
                lineage = lineage.filter(pa.array(mask))
        n = table.num_rows
        columns_out = self._conformed(table, plan, self._read_fields)
        for name in self._partitions_needed:
            columns_out[name] = pa.repeat(plan.partition_values[name], n)
        if lineage is not None:
            columns_out.update(zip(lineage.column_names, lineage.columns, strict=True))
        full = pa.table(columns_out) if columns_out else pa.table({"__rows": pa.nulls(n)})
        if self.predicate is not None:
            full = self._apply_filter(full, plan)
        return self._output(full)

    def _output(self, full: pa.Table) -> pa.Table:
        """``full`` (every needed column under its logical name) projected to the scan's schema."""
        if not self.arrow_schema:
            return full.select([])  # no columns, but the rows still count
        extra = [full.column(name) for name in self._lineage_names or ()]
        return pa.Table.from_arrays(
            [as_type(full.column(f.name), to_arrow_type(f.type)) for f in self.output_fields] + extra,
            schema=self.arrow_schema,
        )

    def _apply_filter(self, table: pa.Table, plan: FilePlan | None = None) -> pa.Table:
        """The residual filter over ``table``: one file's rows, or (``plan`` None) many files'."""
        root = self.snapshot.store.root
        where = f"data file {plan.location} of {root}" if plan is not None else f"the files of {root}"
        return filter_rows(table, self.predicate, where)

    def _conformed(self, table: pa.Table, plan: FilePlan, fields: list[StructField]) -> dict:
        """``fields`` read from ``table`` (a file's columns) as the table's types, by logical name;
        a field the file lacks is all nulls."""
        n = table.num_rows
        file_schema = table.schema
        out: dict[str, pa.Array | pa.ChunkedArray] = {}
        for f in fields:
            match = match_field(file_schema, f, self.mode)
            if match is None:
                out[f.name] = pa.nulls(n, to_arrow_type(f.type))
                continue
            copies = len(file_schema.get_all_field_indices(match.name))
            if copies > 1:  # Spark refuses such a file too: which one is the column?
                raise DataFileError(
                    f"data file {plan.location} of {self.snapshot.store.root} has {copies} columns "
                    f"named {match.name!r}: it cannot be read as column {f.name!r}",
                    plan.location,
                )
            try:
                out[f.name] = conform_chunked(table.column(match.name), match, f.type, self.mode)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise DataFileError(
                    f"column {f.name!r} of data file {plan.location} has type {match.type}, "
                    f"which cannot be read as {f.type.to_json()}: {e}",
                    plan.location,
                ) from e
        return out

    def _lineage(self, table: pa.Table, plan: FilePlan, offset: int) -> pa.Table:
        """Stable row ids and commit versions of a file's rows (``table``: consecutive physical
        rows from ``offset``, before the deletion vector)."""
        assert self._materialized is not None and self._lineage_names is not None
        ids_name, versions_name = self._materialized
        ids, versions = stable_values(
            table.num_rows,
            offset,
            plan.base_row_id,
            plan.default_row_commit_version,
            table.column(ids_name) if ids_name in table.column_names else None,
            table.column(versions_name) if versions_name in table.column_names else None,
            f"data file {plan.location} of {self.snapshot.store.root}",
        )
        return pa.table(dict(zip(self._lineage_names, (ids, versions), strict=True)))
