"""Landing batches: files landed by someone else (CSV, JSON lines, Parquet), read in bounded
memory, conformed to a table's columns and types, and staged as a held write
(``commands/staged.py``) for a quality gate and a commit.

A file the table cannot take is a ``LandingRefused`` naming the file, and the line (or row) and
column where known: empty, header-only, unparseable, a column the table lacks or lacks a value
for, a value that does not fit its type. ``StageRecipe`` records how a batch was read, in its
manifest, so the batch can be staged again exactly the same way from its landing files.

The in-process stage (the Airflow provider's ``DeltaStageOperator``) runs this; what a batch is
called, where it is claimed from and where it is quarantined to are ``engine/quarantine.py``'s.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LANDING_FORMATS = {"csv": (".csv",), "json": (".json", ".jsonl", ".ndjson"), "parquet": (".parquet",)}

READ_BLOCK = 1 << 20  # bytes of a landing file parsed at a time: memory does not grow with files


@dataclass(frozen=True)
class StageRecipe:
    """How a batch's landing files are read and written: recorded in its manifest, so the batch
    can be staged again from them exactly the same way (``stage_landing_files``)."""

    format: str
    partition_by: tuple[str, ...] | None = None
    schema_mode: str | None = None
    target_file_size: int | None = None
    schema: str | None = None  # the declared schema, as Delta's schema JSON
    cluster_by: tuple[str, ...] | None = None
    properties: tuple[tuple[str, str], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "partitionBy": list(self.partition_by) if self.partition_by is not None else None,
            "schemaMode": self.schema_mode,
            "targetFileSize": self.target_file_size,
            "schema": json.loads(self.schema) if self.schema is not None else None,
            "clusterBy": list(self.cluster_by) if self.cluster_by else None,
            "properties": dict(self.properties) if self.properties else None,
        }

    def declared(self):
        """The declared schema as a Delta ``StructType`` (``None``: none declared)."""
        from deltaplane.engine.schema import parse_schema

        return parse_schema(self.schema) if self.schema is not None else None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> StageRecipe:
        fmt = obj.get("format")
        if fmt not in LANDING_FORMATS:
            raise ValueError(f"a staged manifest's recipe names no readable format: {fmt!r}")
        partition_by = obj.get("partitionBy")
        return cls(
            format=fmt,
            partition_by=tuple(partition_by) if partition_by is not None else None,
            schema_mode=obj.get("schemaMode"),
            target_file_size=obj.get("targetFileSize"),
            schema=json.dumps(obj["schema"]) if obj.get("schema") is not None else None,
            cluster_by=tuple(obj["clusterBy"]) if obj.get("clusterBy") else None,
            properties=tuple(sorted(obj["properties"].items())) if obj.get("properties") else None,
        )


class LandingRefused(Exception):
    """Why a landing file cannot become rows of the table: the file (its name), the line (or the
    row, where lines mean nothing) and the column where known, and what is wrong."""

    def __init__(
        self,
        file: str | None,
        detail: str,
        *,
        line: int | None = None,
        row: int | None = None,
        column: str | None = None,
        at_column: bool = False,
    ):
        self.file, self.detail, self.line, self.row, self.column = file, detail, line, row, column
        where = file or "the batch"
        if line is not None:
            where += f" line {line}"
        elif row is not None:
            where += f" row {row}"
        if at_column and column is not None:
            where += f", column {column!r}"
        self.text = f"{where}: {detail}"
        self.staged: list[str] = []  # data files staged before the refusal, moved with the batch
        super().__init__(self.text)


def landing_key(files: list[Path]):
    """The work key of a batch of landing files: their identities (path in the landing folder,
    size, modification time), wherever the batch's claim has moved them since."""
    import os

    from deltaplane.engine.quarantine import home_path
    from deltaplane.engine.work import WorkKey, file_identities

    identities = []
    for f in files:
        stat = os.stat(f)
        identities.append((os.path.abspath(home_path(Path(f))), stat.st_size, stat.st_mtime_ns))
    return WorkKey.named("files", {"files": file_identities(identities)})


def stage_landing_files(table_uri: str, files: list[Path], recipe: StageRecipe, key, options, *, batch: str):
    """Plan the write against the table, then stream every file into staged data files, held
    (VACUUM keeps them) until the commit. A file the table cannot take raises ``LandingRefused``."""
    import pyarrow as pa

    from deltaplane.engine.commands.staged import StagedWrite, plan_write, release_hold_of
    from deltaplane.engine.errors import SchemaMismatchError, TableSettingsMismatchError
    from deltaplane.engine.log.segment import list_log
    from deltaplane.engine.schema import parse_schema
    from deltaplane.engine.snapshot import load_table_config
    from deltaplane.engine.storage import open_store

    store = open_store(table_uri, options)
    # No table yet: the commit creates it with the declared schema, else the batch's own.
    current = recipe.declared()
    if list_log(store, 0).max_version is not None:  # the schema only: no file list replayed
        current = parse_schema(load_table_config(store)[1].schema_string)
    sources = [LandingFile(f, recipe.format, current) for f in files]
    schemas = [source.probe() for source in sources]
    try:
        incoming = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise LandingRefused(None, f"the files' columns do not agree: {e}") from None
    try:
        spec = plan_write(
            table_uri,
            incoming,
            partition_by=list(recipe.partition_by) if recipe.partition_by is not None else None,
            schema_mode=recipe.schema_mode,
            app_id=key.app_id,
            app_version=key.version,
            target_file_size=recipe.target_file_size,
            storage_options=options,
            hold=True,
            hold_note=f"staged batch {batch}",
            table_schema=recipe.declared(),
            cluster_by=list(recipe.cluster_by) if recipe.cluster_by else None,
            properties=dict(recipe.properties) if recipe.properties else None,
        )
    except TableSettingsMismatchError:
        raise  # the task's arguments are at fault, not the batch: an input error, no quarantine
    except SchemaMismatchError as e:
        raise LandingRefused(None, f"the batch's columns do not fit the table: {e}") from None
    if spec.skip:
        return StagedWrite(spec, ())
    try:
        return StagedWrite(spec, tuple(_write_landing(spec, sources, table_uri)))
    except BaseException:
        release_hold_of(spec)  # refused or failed: these files will never be committed
        raise


def _write_landing(spec, sources: list[LandingFile], table_uri: str) -> list:
    """Stream the landing files into staged data files of ``spec`` (the one writer of the batch)."""
    import pyarrow as pa

    from deltaplane.engine.column_values import ColumnValues
    from deltaplane.engine.commands.staged import write_files
    from deltaplane.engine.enforcement import table_constraints
    from deltaplane.engine.errors import SchemaMismatchError
    from deltaplane.engine.schema import StructType, to_arrow_schema

    # The files' rows are conformed to the table's columns, except those the table fills
    # itself when they are missing (generated, default, identity): write_files fills them.
    supplied = {n.lower() for source in sources for n in source.schema.names}
    values = ColumnValues(spec.schema, table=table_uri)
    target = StructType(
        tuple(f for f in spec.schema.fields if f.name.lower() in supplied or not values.computes(f.name))
    )
    for source in sources:
        source.check(target)
    try:
        constraints = table_constraints(target, spec.metadata.configuration)
    except SchemaMismatchError:  # a constraint reads a filled column: write_files checks it
        constraints = []

    def batches():
        for source in sources:
            yield from source.batches(target, constraints)

    recording = _Recording(spec.store())
    reader = pa.RecordBatchReader.from_batches(to_arrow_schema(target), batches())
    try:
        return write_files(spec, reader, store=recording, task=0)
    except LandingRefused as refused:
        refused.staged = recording.published()
        raise


class _Recording:
    """A table store that remembers the data files written through it, so the files of a write
    refused half-way can be moved to the quarantine (``write_files`` leaves them for VACUUM)."""

    def __init__(self, store):
        self._store = store
        self._keys: list[str] = []

    def open_output(self, key: str, *, durable: bool = True):
        self._keys.append(key)
        return self._store.open_output(key, durable=durable)

    def sync(self, keys: list[str]) -> None:
        self._store.sync(keys)

    def published(self) -> list[str]:
        from deltaplane.engine.errors import ObjectNotFoundError

        out = []
        for key in self._keys:
            try:
                self._store.head(key)
                out.append(key)
            except (ObjectNotFoundError, FileNotFoundError):
                pass  # aborted before it was published
        return out

    def __getattr__(self, name: str):
        return getattr(self._store, name)


def _columns_text(names: list[str]) -> str:
    quoted = ", ".join(repr(n) for n in names)
    return f"column {quoted}" if len(names) == 1 else f"columns {quoted}"


def _squash(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.lower())


class LandingFile:
    """One landing file, read in record batches, its columns in the table's types and spelling.

    ``probe()`` reads the header / schema (and for CSV and JSON the first block), ``check()``
    compares the columns with the table's, ``batches()`` streams the rows conformed to the
    table. Every problem is a ``LandingRefused`` naming the file, and the line and column when known."""

    def __init__(self, path: Path, fmt: str, table):
        self.path, self.name, self.fmt = path, path.name, fmt
        self.table = table  # the table's StructType, None when there is no table yet
        self.names: list[str] = []  # as the file spells them
        self.schema = None  # pyarrow schema as read, names as the table spells them
        self.rows = 0

    # --- schema ---------------------------------------------------------------------------------

    def probe(self):
        import pyarrow as pa

        if self.path.stat().st_size == 0:
            raise LandingRefused(self.name, "the file is empty (0 bytes)")
        probes = {"csv": self._probe_csv, "json": self._probe_json, "parquet": self._probe_parquet}
        schema = probes[self.fmt]()
        self.names = list(schema.names)
        self._check_duplicates(self.names)
        spelled = {f.name.lower(): f.name for f in self.table.fields} if self.table is not None else {}
        self.schema = pa.schema(
            [f.with_name(spelled.get(f.name.lower(), f.name)) for f in schema], metadata=schema.metadata
        )
        return self.schema

    def _check_duplicates(self, names: list[str]) -> None:
        seen: dict[str, int] = {}
        where = "the header" if self.fmt == "csv" else "the file's columns"
        for i, name in enumerate(names, 1):
            first = seen.setdefault(name.lower(), i)
            if first == i:
                continue
            if names[first - 1] == name:
                detail = f"column {name!r} appears twice in {where} (columns {first} and {i})"
            else:
                detail = (
                    f"columns {names[first - 1]!r} and {name!r} ({first} and {i} in {where}) are one "
                    "column to Delta, whose column names are case-insensitive"
                )
            raise LandingRefused(self.name, detail, line=1 if self.fmt == "csv" else None, column=name)

    def _field(self, name: str):
        if self.table is None:
            return None
        for f in self.table.fields:
            if f.name == name or f.name.lower() == name.lower():
                return f
        return None

    def _read_types(self, names: list[str]) -> dict:
        """Arrow types to parse the table's columns straight into (primitive ones)."""
        from deltaplane.engine.errors import DeltaError
        from deltaplane.engine.schema import DecimalType, PrimitiveType, to_arrow_type

        types = {}
        for name in names:
            f = self._field(name)
            if f is not None and isinstance(f.type, PrimitiveType | DecimalType):
                try:
                    types[name] = to_arrow_type(f.type)
                except DeltaError:  # no Arrow form to parse into: inferred, then conformed
                    continue
        return types

    def check(self, target) -> None:
        """The file's columns against the table's: names (new columns are refused unless the plan
        merged them in, NOT NULL columns must be there), then types (lossless casts only)."""
        import pyarrow as pa

        from deltaplane.engine.enforcement import conform_table
        from deltaplane.engine.errors import SchemaMismatchError
        from deltaplane.engine.schema import StructType

        present = {n.lower() for n in self.schema.names}
        known = {f.name.lower() for f in target.fields}
        extra = [n for n in self.names if n.lower() not in known]
        required = [f.name for f in target.fields if not f.nullable and f.name.lower() not in present]
        missing = [f.name for f in target.fields if f.name.lower() not in present]
        parts = []
        if extra:
            parts.append(
                f"{_columns_text(extra)} {'is' if len(extra) == 1 else 'are'} not in the table "
                f"(its columns: {', '.join(target.names)})"
            )
        if required:
            parts.append(
                f"{_columns_text(required)} {'is' if len(required) == 1 else 'are'} NOT NULL in the table "
                "and missing from the file"
            )
        if extra and missing:
            squashed = {_squash(m): m for m in missing}
            guesses = [f"{e!r} for {squashed[_squash(e)]!r}" for e in extra if _squash(e) in squashed]
            hint = f" ({', '.join(guesses)}?)" if guesses else ""
            parts.append(
                f"renamed? the table's {_columns_text(missing)} {'is' if len(missing) == 1 else 'are'} "
                f"missing from the file{hint}"
            )
        if extra:
            parts.append("new columns are added only by a stage with schema_mode='merge'")
        if parts:
            raise LandingRefused(self.name, "; ".join(parts), column=(extra or required)[0])
        for f in target.fields:
            if f.name.lower() not in present:
                continue
            column = self.schema.field(self.schema.get_field_index(f.name))
            empty = pa.table({f.name: pa.array([], column.type)})
            try:
                conform_table(empty, StructType((f,)))
            except SchemaMismatchError as e:
                raise LandingRefused(
                    self.name,
                    f"{e}; only lossless casts are made (e.g. int into long, float into double)",
                    column=f.name,
                ) from None

    # --- rows -----------------------------------------------------------------------------------

    def batches(self, target, constraints) -> Iterator:
        """The file's rows conformed to ``target``, record batch by record batch."""
        import pyarrow.compute as pc

        from deltaplane.engine.enforcement import check_constraints, conform_table
        from deltaplane.engine.errors import ConstraintViolationError, SchemaMismatchError

        read = {"csv": self._csv_batches, "json": self._json_batches, "parquet": self._parquet_batches}
        for batch in read[self.fmt](target):
            if not batch.num_rows:
                continue
            batch = batch.rename_columns(self.schema.names)
            try:
                table = conform_table(batch, target)
            except SchemaMismatchError as e:
                raise LandingRefused(self.name, str(e), **self._position(None)) from None
            for f in target.fields:
                column = table.column(f.name)
                if not f.nullable and column.null_count:
                    first = pc.index(pc.is_null(column), True).as_py()
                    raise LandingRefused(
                        self.name,
                        "no value, but the column is NOT NULL in the table",
                        column=f.name,
                        at_column=True,
                        **self._position(self.rows + first),
                    )
            try:
                check_constraints(table, target, constraints)
            except ConstraintViolationError as e:
                raise LandingRefused(self.name, str(e)) from None
            self.rows += table.num_rows
            yield from table.to_batches()
        if not self.rows:
            empty = "the file has a header but no rows" if self.fmt == "csv" else "the file has no rows"
            raise LandingRefused(self.name, empty)

    def _position(self, index: int | None) -> dict:
        """Where the data row ``index`` (0-based) is: a line for text formats, a row for Parquet."""
        if index is None:
            return {}
        if self.fmt == "parquet":
            return {"row": index + 1}
        header = 1 if self.fmt == "csv" else 0
        return {"line": self._physical_line(index + 1 + header)}

    def _physical_line(self, number: int) -> int | None:
        """The line number of the ``number``-th non-empty line (pyarrow skips empty lines)."""
        count = 0
        with open(self.path, "rb") as f:
            for line_number, line in enumerate(f, 1):
                if line.strip(b"\r\n"):
                    count += 1
                    if count == number:
                        return line_number
        return None

    # --- CSV ------------------------------------------------------------------------------------

    def _csv_reader(self, types: dict, **read: Any):
        import pyarrow.csv as pcsv

        return pcsv.open_csv(
            str(self.path),
            read_options=pcsv.ReadOptions(block_size=READ_BLOCK, **read.pop("read_options", {})),
            convert_options=pcsv.ConvertOptions(column_types=types, **read.pop("convert_options", {})),
            parse_options=pcsv.ParseOptions(**read.pop("parse_options", {})),
        )

    def _probe_csv(self):
        import pyarrow as pa

        with open(self.path, "rb") as f:
            header = f.readline(READ_BLOCK)
        try:
            text = header.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise self._utf8_error() from None
        names = next(csv.reader([text.rstrip("\r\n")]), [])
        self.names = names  # for errors found while reading the first block
        self._check_duplicates(names)
        try:
            reader = self._csv_reader(self._read_types(names))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise self._csv_error(e, names) from None
        schema = reader.schema
        reader.close()
        return schema

    def _csv_batches(self, target) -> Iterator:
        import pyarrow as pa

        names = self.names
        try:
            reader = self._csv_reader(self._read_types(names))
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                yield batch
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise self._csv_error(e, names) from None

    def _csv_error(self, error: Exception, names: list[str]) -> LandingRefused:
        """pyarrow's CSV error as a ``LandingRefused`` with the line (and column) it is about: pyarrow
        names neither, so the file is scanned again for the first offending line."""
        from deltaplane.engine.schema import type_text

        message = str(error)
        ragged = re.search(r"Expected (\d+) columns, got (\d+): ?(.*)", message, re.S)
        if ragged:
            row = ragged.group(3).strip()
            return LandingRefused(
                self.name,
                f"expected {ragged.group(1)} columns, got {ragged.group(2)}: {row[:200]!r}",
                line=self._ragged_line(names),
            )
        if "UTF8" in message or "UTF-8" in message.upper():
            return self._utf8_error()
        bad = re.search(
            r"In CSV column #(\d+): (?:CSV conversion error to ([^:]+): invalid value '(.*)'"
            r"|The string '(.*)' is not a valid (\w+) number)$",
            message,
            re.S,
        )
        if bad and int(bad.group(1)) < len(names):
            name = names[int(bad.group(1))]
            value = bad.group(3) if bad.group(3) is not None else bad.group(4)
            f = self._field(name)
            wanted = type_text(f.type) if f is not None else bad.group(2) or bad.group(5)
            return LandingRefused(
                self.name,
                f"{value!r} is not a {wanted} (the column's type in the table)",
                line=self._value_line(name, value),
                column=name,
                at_column=True,
            )
        if "Empty CSV file" in message:
            return LandingRefused(self.name, "the file has no header and no rows")
        return LandingRefused(self.name, f"cannot be read as CSV: {message}")

    def _ragged_line(self, names: list[str]) -> int | None:
        import pyarrow as pa

        found: list[int | None] = []

        def first(row) -> str:
            found.append(row.number)
            return "error"

        try:
            for _ in self._csv_reader(
                dict.fromkeys(names, pa.binary()),
                read_options={"use_threads": False},  # row numbers are only known single-threaded
                parse_options={"invalid_row_handler": first},
            ):
                pass
        except pa.ArrowInvalid:
            pass
        return self._physical_line(found[0]) if found and found[0] else None

    def _value_line(self, name: str, value: str) -> int | None:
        import pyarrow as pa
        import pyarrow.compute as pc

        wanted = pa.scalar(value.encode(), pa.binary())
        seen = 0
        try:
            reader = self._csv_reader({name: pa.binary()}, convert_options={"include_columns": [name]})
            for batch in reader:
                at = pc.index(batch.column(0), wanted).as_py()
                if at >= 0:
                    return self._physical_line(seen + at + 2)
                seen += batch.num_rows
        except pa.ArrowInvalid:
            pass
        return None

    def _utf8_error(self) -> LandingRefused:
        """The first line with bytes that are not UTF-8, and the column they are in."""
        with open(self.path, "rb") as f:
            for number, line in enumerate(f, 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as e:
                    column = None
                    if self.fmt == "csv":
                        fields = next(csv.reader([line[: e.start].decode("latin-1")]), [""])
                        header = self.names or []
                        if number > 1 and len(fields) - 1 < len(header):
                            column = header[len(fields) - 1]
                    snippet = line[max(0, e.start - 10) : e.end + 10]
                    return LandingRefused(
                        self.name,
                        f"bytes that are not UTF-8 ({snippet!r}, byte {e.start + 1} of the line); "
                        "landing files must be UTF-8 text",
                        line=number,
                        column=column,
                        at_column=column is not None,
                    )
        return LandingRefused(self.name, "bytes that are not UTF-8; landing files must be UTF-8 text")

    # --- JSON (one object per line) -------------------------------------------------------------

    def _json_reader(self, names: list[str] | None):
        import pyarrow as pa
        import pyarrow.json as pjson

        parse = {}
        if names:
            types = self._read_types(names)
            parse = {
                "explicit_schema": pa.schema([(n, t) for n, t in types.items()]),
                "unexpected_field_behavior": "infer",
            }
        return pjson.open_json(
            str(self.path),
            read_options=pjson.ReadOptions(block_size=READ_BLOCK),
            parse_options=pjson.ParseOptions(**parse),
        )

    def _json_error(self, error: Exception) -> LandingRefused:
        message = str(error)
        if "UTF8" in message or "UTF-8" in message.upper():
            return self._utf8_error()
        if "Empty JSON" in message:
            return LandingRefused(self.name, "the file has no rows")
        row = re.search(r"in row (\d+)", message)
        position = self._position(int(row.group(1))) if row else {}
        return LandingRefused(self.name, f"cannot be read as JSON lines: {message}", **position)

    def _probe_json(self):
        import pyarrow as pa

        try:
            reader = self._json_reader(None)
            names = list(reader.schema.names)
            reader.close()
            reader = self._json_reader(names)
            schema = reader.schema
            reader.close()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise self._json_error(e) from None
        return schema

    def _json_batches(self, target) -> Iterator:
        import pyarrow as pa

        try:
            reader = self._json_reader(self.names)
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                if batch.schema.names != self.names:
                    raise LandingRefused(
                        self.name,
                        f"the objects' keys change within the file (first {self.names}, "
                        f"later {batch.schema.names})",
                    )
                yield batch
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise self._json_error(e) from None

    # --- Parquet --------------------------------------------------------------------------------

    def _probe_parquet(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(str(self.path)).schema_arrow
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
            raise LandingRefused(self.name, f"not a readable Parquet file: {e}") from None

    def _parquet_batches(self, target) -> Iterator:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            with pq.ParquetFile(str(self.path)) as f:
                yield from f.iter_batches(batch_size=64 * 1024)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
            raise LandingRefused(self.name, f"cannot be read as Parquet: {e}") from None
