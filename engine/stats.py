"""Per-file statistics: parsing the log's ``stats`` JSON (and ``stats_parsed``) into typed columns.

Stats are a JSON string per file. Only the columns a predicate needs are parsed, all files at
once: the strings are joined into one newline-delimited buffer and read by ``pyarrow.json`` with
an explicit schema for just those columns. Checkpoints may carry ``stats_parsed`` instead, used
where the string is absent.

What comes out is conservative by construction: a value that cannot be parsed is null, and null
means "unknown, keep the file". Timestamp maxima are widened by 999 microseconds because writers
truncate them to milliseconds.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from engine.partitions import parse_utc_timestamps
from engine.schema import DataType, DecimalType, PrimitiveType, to_arrow_type

Path = tuple[str, ...]

_JSON_INT = {"byte", "short", "integer", "long"}
_SKIPPABLE = _JSON_INT | {
    "float",
    "double",
    "string",
    "date",
    "timestamp",
    "timestamp_ntz",
    "boolean",
}


def stats_supported(dtype: DataType) -> bool:
    """Whether min/max statistics of this type can be used for skipping."""
    return isinstance(dtype, DecimalType) or (isinstance(dtype, PrimitiveType) and dtype.name in _SKIPPABLE)


@dataclass
class FileStats:
    """Typed statistics, one row per file; ``None`` for a column with no usable stats."""

    num_records: pa.Array
    min_values: dict[Path, pa.Array] = field(default_factory=dict)
    max_values: dict[Path, pa.Array] = field(default_factory=dict)
    null_count: dict[Path, pa.Array] = field(default_factory=dict)


def _json_type(dtype: DataType) -> pa.DataType:
    if isinstance(dtype, DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    name = dtype.name  # type: ignore[union-attr]
    if name in _JSON_INT:
        return pa.int64()
    if name in ("float", "double"):
        return pa.float64()
    if name == "boolean":
        return pa.bool_()
    return pa.string()  # strings, dates and timestamps arrive as strings


def _nest(paths: dict[Path, pa.DataType]) -> pa.DataType:
    """A struct type holding ``paths`` (physical name paths) at their nesting."""
    tree: dict = {}
    for path, typ in paths.items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = typ
    return _to_struct(tree)


def _to_struct(node: dict) -> pa.DataType:
    return pa.struct([(k, _to_struct(v) if isinstance(v, dict) else v) for k, v in node.items()])


def parse_file_stats(files: pa.Table, columns: dict[Path, DataType]) -> FileStats:
    """Statistics of ``columns`` (physical paths) for every row of the live-file table."""
    columns = {p: t for p, t in columns.items() if stats_supported(t)}
    n = files.num_rows
    value_types = {p: _json_type(t) for p, t in columns.items()}
    fields = [("numRecords", pa.int64())]
    if columns:
        fields += [
            ("minValues", _nest(value_types)),
            ("maxValues", _nest(value_types)),
            ("nullCount", _nest({p: pa.int64() for p in columns})),
        ]
    schema = pa.schema(fields)
    stats = files.column("stats") if "stats" in files.column_names else pa.nulls(n, pa.string())
    parsed = _parse_json_column(stats, schema)

    out = FileStats(num_records=_extract(parsed, ("numRecords",), pa.int64(), n))
    for path in columns:
        out.min_values[path] = _extract(parsed, ("minValues", *path), value_types[path], n)
        out.max_values[path] = _extract(parsed, ("maxValues", *path), value_types[path], n)
        out.null_count[path] = _extract(parsed, ("nullCount", *path), pa.int64(), n)

    if "stats_parsed" in files.column_names:
        _fill_from_stats_parsed(out, files.column("stats_parsed"), stats, columns, value_types)

    for path, dtype in columns.items():
        out.min_values[path] = _to_typed(out.min_values[path], dtype, is_max=False)
        out.max_values[path] = _to_typed(out.max_values[path], dtype, is_max=True)
    return out


def _parse_json_column(stats: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table:
    n = len(stats)
    if n == 0 or stats.null_count == n:
        return pa.table({name: pa.nulls(n, schema.field(name).type) for name in schema.names})
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks()
    text = pc.fill_null(stats, "{}")
    text = pc.if_else(pc.equal(text, ""), "{}", text)
    if pc.any(pc.match_substring(text, "\n")).as_py():
        text = pc.replace_substring(text, "\n", " ")  # JSON whitespace; keeps one file per line
    lines = pc.binary_join_element_wise(text, "", "\n").cast(pa.large_string())
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset : lines.offset + n + 1]
    data = lines.buffers()[2][int(offsets[0]) : int(offsets[-1])]
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(
            io.BytesIO(data.to_pybytes()),
            read_options=pj.ReadOptions(block_size=1 << 24),
            parse_options=options,
        )
        if table.num_rows == n:
            return table
    except pa.ArrowInvalid:
        pass
    return _parse_json_slowly(text.to_pylist(), schema)


def _parse_json_slowly(texts: list[str], schema: pa.Schema) -> pa.Table:
    """Row by row, each leaf on its own: a value of the wrong type becomes null (unknown)."""
    objs = []
    for text in texts:
        try:
            obj = json.loads(text)
        except ValueError:
            obj = {}
        objs.append(obj if isinstance(obj, dict) else {})
    columns = {}
    for f in schema:
        columns[f.name] = _column_from_objs([o.get(f.name) for o in objs], f.type)
    return pa.table(columns)


def _column_from_objs(values: list, typ: pa.DataType) -> pa.Array:
    if pa.types.is_struct(typ):
        children = []
        for i in range(typ.num_fields):
            child = typ.field(i)
            children.append(
                _column_from_objs(
                    [v.get(child.name) if isinstance(v, dict) else None for v in values], child.type
                )
            )
        return pa.StructArray.from_arrays(children, fields=list(typ))
    out = []
    for v in values:
        try:
            out.append(pa.scalar(v, typ).as_py() if v is not None else None)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            out.append(None)
    return pa.array(out, typ)


def _extract(table: pa.Table, path: tuple[str, ...], typ: pa.DataType, n: int) -> pa.Array:
    if path[0] not in table.column_names:
        return pa.nulls(n, typ)
    arr = table.column(path[0])
    for part in path[1:]:
        if not pa.types.is_struct(arr.type) or arr.type.get_field_index(part) < 0:
            return pa.nulls(n, typ)
        arr = pc.struct_field(arr, part)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.type != typ:
        try:
            arr = arr.cast(typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return pa.nulls(n, typ)
    return arr


def _fill_from_stats_parsed(out: FileStats, parsed: pa.ChunkedArray, stats, columns, value_types) -> None:
    use = pc.and_(pc.is_null(stats), pc.is_valid(parsed))
    if not pc.any(use).as_py():
        return
    table = pa.table({"sp": parsed})
    n = len(parsed)

    def fill(current: pa.Array, path: tuple[str, ...], typ: pa.DataType) -> pa.Array:
        extracted = _extract(table, ("sp", *path), typ, n)
        return pc.if_else(use, extracted, current)

    out.num_records = fill(out.num_records, ("numRecords",), pa.int64())
    for path in columns:
        typ = value_types[path]
        if typ == pa.string() and columns[path] != PrimitiveType("string"):
            # stats_parsed holds dates and timestamps typed; bring them to the string form.
            typ_parsed = to_arrow_type(columns[path])
            for target, key in ((out.min_values, "minValues"), (out.max_values, "maxValues")):
                extracted = _extract(table, ("sp", key, *path), typ_parsed, n)
                as_text = _typed_to_text(extracted, columns[path])
                target[path] = pc.if_else(use, as_text, target[path])
        else:
            out.min_values[path] = fill(out.min_values[path], ("minValues", *path), typ)
            out.max_values[path] = fill(out.max_values[path], ("maxValues", *path), typ)
        # Older checkpoints spell it nullCounts (the spec's example); accept both.
        counts = fill(out.null_count[path], ("nullCount", *path), pa.int64())
        out.null_count[path] = pc.coalesce(
            counts, _extract(table, ("sp", "nullCounts", *path), pa.int64(), n)
        )


def _typed_to_text(arr: pa.Array, dtype: DataType) -> pa.Array:
    """Typed stats_parsed values in the text form the JSON path produces (parsed back later)."""
    return arr.cast(pa.string())


def _to_typed(arr: pa.Array, dtype: DataType, *, is_max: bool) -> pa.Array:
    """From JSON-parsed form to the column's Arrow type (unparseable values become null)."""
    try:
        return _convert(arr, dtype, is_max)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = []
    for v in arr.to_pylist():  # rare: a writer put something odd in one file's stats
        try:
            values.append(_convert(pa.array([v], arr.type), dtype, is_max)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            values.append(None)
    return pa.array(values, to_arrow_type(dtype))


def _convert(arr: pa.Array, dtype: DataType, is_max: bool) -> pa.Array:
    target = to_arrow_type(dtype)
    if arr.type == target:
        return arr
    name = dtype.name if isinstance(dtype, PrimitiveType) else None
    if name == "timestamp":
        out = parse_utc_timestamps(arr)
    elif name == "timestamp_ntz":
        out = pc.cast(pc.replace_substring_regex(arr, r"(Z|[+-]\d{2}:?\d{2})$", ""), pa.timestamp("us"))
    elif name == "date":
        out = pc.cast(pc.utf8_slice_codeunits(arr, 0, 10), pa.date32())
    else:
        out = pc.cast(arr, target)
    if is_max and name in ("timestamp", "timestamp_ntz"):
        # Writers truncate timestamps to milliseconds: the true maximum can be up to 999us later.
        out = pc.add(out, pa.scalar(999, pa.duration("us")))
    return out
