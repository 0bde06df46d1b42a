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

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltaplane.engine.errors import SchemaError
from deltaplane.engine.partitions import parse_utc_timestamps
from deltaplane.engine.schema import DataType, DecimalType, PrimitiveType, to_arrow_type
from deltaplane.engine.values_to_arrow import array_from_values, scalar

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
    tight_bounds: pa.Array | None = None
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


def path_tree(leaves: dict[Path, Any]) -> dict:
    """``leaves`` (values at name paths) as nested dicts, one level a path part, in first-seen
    order: the shape of a stats struct, of its type or of its arrays."""
    tree: dict = {}
    for path, leaf in leaves.items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = leaf
    return tree


def nested_struct_type(paths: dict[Path, pa.DataType]) -> pa.DataType:
    """A struct type holding ``paths`` (physical name paths) at their nesting."""

    def struct(node: dict) -> pa.DataType:
        return pa.struct([(k, struct(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return struct(path_tree(paths))


def parse_file_stats(
    files: pa.Table, columns: dict[Path, DataType], *, for_skipping: bool = True
) -> FileStats:
    """Statistics of ``columns`` (physical paths) for every row of the live-file table.

    ``for_skipping`` widens timestamp maxima by the millisecond truncation writers apply; a
    checkpoint writer copying stats verbatim turns it off.
    """
    columns = {p: t for p, t in columns.items() if stats_supported(t)}
    n = files.num_rows
    value_types = {p: _json_type(t) for p, t in columns.items()}
    fields = [("numRecords", pa.int64()), ("tightBounds", pa.bool_())]
    if columns:
        fields += [
            ("minValues", nested_struct_type(value_types)),
            ("maxValues", nested_struct_type(value_types)),
            ("nullCount", nested_struct_type({p: pa.int64() for p in columns})),
        ]
    schema = pa.schema(fields)
    stats = files.column("stats") if "stats" in files.column_names else pa.nulls(n, pa.string())
    parsed = _parse_json_column(stats, schema)

    out = FileStats(
        num_records=_extract(parsed, ("numRecords",), pa.int64(), n),
        tight_bounds=_extract(parsed, ("tightBounds",), pa.bool_(), n),
    )
    for path in columns:
        out.min_values[path] = _extract(parsed, ("minValues", *path), value_types[path], n)
        out.max_values[path] = _extract(parsed, ("maxValues", *path), value_types[path], n)
        out.null_count[path] = _extract(parsed, ("nullCount", *path), pa.int64(), n)

    if "stats_parsed" in files.column_names:
        _fill_from_stats_parsed(out, files.column("stats_parsed"), stats, columns, value_types)

    for path, dtype in columns.items():
        out.min_values[path] = _to_typed(out.min_values[path], dtype, widen=False)
        out.max_values[path] = _to_typed(out.max_values[path], dtype, widen=for_skipping)
    return out


_JSON_BLOCK = 1 << 24
_JSON_THREAD_BLOCK = 1 << 20
_NON_FINITE_TEXT = r':\s*"(NaN|Infinity|-Infinity)"'
# Up to this many files, stats JSON is parsed by json.loads (decimals excepted: json.loads
# reads them as floats, pyarrow.json exactly from the text).
_PYTHON_JSON_FILES = 64


def _has_decimal(typ) -> bool:
    if isinstance(typ, pa.Schema):
        return any(_has_decimal(f.type) for f in typ)
    if pa.types.is_struct(typ):
        return any(_has_decimal(typ.field(i).type) for i in range(typ.num_fields))
    return pa.types.is_decimal(typ)


def _parse_json_column(stats: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table:
    n = len(stats)
    if n == 0 or stats.null_count == n:
        return pa.table({name: pa.nulls(n, schema.field(name).type) for name in schema.names})
    if n <= _PYTHON_JSON_FILES and not _has_decimal(schema):
        # A few files (a commit's adds, a filtered plan): json.loads on this thread, no Arrow
        # compute at all. pyarrow.json hands its input to a thread even when told not to use
        # threads, and each compute call costs tens of microseconds: on a busy machine that is
        # most of the work. Same values: where pyarrow.json fails it comes here too.
        return _parse_json_slowly([t or "{}" for t in stats.to_pylist()], schema)
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks()
    text = pc.fill_null(stats, "{}")
    text = pc.if_else(pc.equal(text, ""), "{}", text)
    # One copy of the text searched with memchr/memmem (40 ms for 21 MB here) where a kernel per
    # question over every file's string costs 3x that.
    raw = _characters(text).to_pybytes()
    if b"\n" in raw:
        text = pc.replace_substring(text, "\n", " ")  # JSON whitespace; keeps one file per line
    fast = text
    maybe_non_finite = b'"NaN"' in raw or b'Infinity"' in raw
    del raw
    if maybe_non_finite and pc.any(pc.match_substring_regex(fast, _NON_FINITE_TEXT)).as_py():
        # Delta Spark writes a float's NaN and infinities as JSON strings, which pyarrow.json
        # refuses for a number column; it reads them bare. (A string column whose bound is
        # "NaN" then fails here and takes the slow path, which keeps it a string.)
        fast = pc.replace_substring_regex(fast, _NON_FINITE_TEXT, r":\1")
    data = _characters(pc.binary_join_element_wise(fast, "", "\n"))
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        # Threads parse blocks side by side: 1 MiB blocks keep every core busy on a large log
        # (19 MB of stats, 100,000 files: 98 ms in 16 MiB blocks, 50 ms in 1 MiB blocks on 2
        # cores). A small input is one block on this thread: start-up would cost ~0.7 ms
        # where ten files' stats parse in 0.08 ms.
        # (A file's statistics longer than a block are still read whole: pyarrow.json joins a
        # line that straddles blocks.)
        threaded = len(data) > 2 * _JSON_THREAD_BLOCK
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(
                block_size=_JSON_THREAD_BLOCK if threaded else _JSON_BLOCK, use_threads=threaded
            ),
            parse_options=options,
        )
        if table.num_rows == n:
            return table
    except pa.ArrowInvalid:
        pass
    return _parse_json_slowly(text.to_pylist(), schema)


def _characters(text: pa.Array) -> pa.Buffer:
    """The characters of a string array without nulls, end to end (a slice, no copy)."""
    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
        text = text.cast(pa.large_string())  # string views: one layout to read
    data = text.buffers()[2]
    if data is None or not len(text):
        return pa.py_buffer(b"")
    width = np.int64 if pa.types.is_large_string(text.type) else np.int32
    offsets = np.frombuffer(text.buffers()[1], dtype=width)[text.offset : text.offset + len(text) + 1]
    return data[int(offsets[0]) : int(offsets[-1])]


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
    if pa.types.is_floating(typ):
        # Delta Spark writes NaN and infinities as the strings "NaN", "Infinity", "-Infinity".
        values = [_FROM_TEXT.get(v, v) if isinstance(v, str) else v for v in values]
    try:
        return array_from_values(values, typ)  # all convertible: what the loop below gives, at once
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    out = []
    for v in values:
        try:
            out.append(pa.scalar(v, typ).as_py() if v is not None else None)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            out.append(None)
    return array_from_values(out, typ)


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


def _to_typed(arr: pa.Array, dtype: DataType, *, widen: bool) -> pa.Array:
    """From JSON-parsed form to the column's Arrow type (unparseable values become null)."""
    try:
        return _convert(arr, dtype, widen)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = []
    for v in arr.to_pylist():  # rare: a writer put something odd in one file's stats
        try:
            values.append(_convert(pa.array([v], arr.type), dtype, widen)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            values.append(None)
    return pa.array(values, to_arrow_type(dtype))


def _convert(arr: pa.Array, dtype: DataType, widen: bool) -> pa.Array:
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
    if widen and name in ("timestamp", "timestamp_ntz"):
        # Writers truncate timestamps to milliseconds: the true maximum can be up to 999us later.
        out = pc.add(out, scalar(999, pa.int64()).cast(pa.duration("us")))
    return out


# --- collecting statistics while writing ------------------------------------------------------

STRING_PREFIX_LENGTH = 32
_MINMAX_TYPES = _JSON_INT | {"float", "double", "string", "date", "timestamp", "timestamp_ntz"}


@dataclass(frozen=True)
class StatsLeaf:
    """One column statistics are kept for: its physical path, type, and whether min/max apply."""

    path: Path
    dtype: DataType
    min_max: bool


def _field_path(name: str) -> list[str]:
    from deltaplane.engine.schema import split_field_path

    try:
        return split_field_path(name)
    except SchemaError:
        return [name]  # not a well-formed path: it names nothing, as a missing column


def stats_leaves(
    data_fields: list, *, num_indexed: int = 32, stats_columns: list[str] | None = None
) -> list[StatsLeaf]:
    """The columns a writer records statistics for, as Delta Spark chooses them.

    ``data_fields`` are the table's non-partition fields. ``stats_columns``
    (``delta.dataSkippingStatsColumns``) names columns explicitly; otherwise the first
    ``num_indexed`` leaves (``delta.dataSkippingNumIndexedCols``, -1 for all) in schema order,
    nested struct fields counted one by one.
    """
    from deltaplane.engine.schema import ArrayType, MapType, StructType

    leaves: list[tuple[tuple[str, ...], StatsLeaf]] = []

    def walk(fields, logical: tuple[str, ...], physical: Path) -> None:
        for f in fields:
            lp, pp = (*logical, f.name), (*physical, f.physical_name)
            if isinstance(f.type, StructType):
                walk(f.type.fields, lp, pp)
            else:
                minmax = isinstance(f.type, DecimalType) or (
                    isinstance(f.type, PrimitiveType) and f.type.name in _MINMAX_TYPES
                )
                if isinstance(f.type, ArrayType | MapType):
                    minmax = False
                leaves.append((lp, StatsLeaf(pp, f.type, minmax)))

    walk(data_fields, (), ())
    if stats_columns is not None:
        wanted = [tuple(_field_path(c)) for c in stats_columns]
        return [
            leaf
            for lp, leaf in leaves
            if any(
                lp[: len(w)] == w or tuple(p.lower() for p in lp[: len(w)]) == tuple(x.lower() for x in w)
                for w in wanted
            )
        ]
    if num_indexed < 0:
        return [leaf for _, leaf in leaves]
    return [leaf for _, leaf in leaves[:num_indexed]]


class StatsCollector:
    """Accumulates one data file's statistics over the batches written to it."""

    def __init__(
        self,
        leaves: list[StatsLeaf],
        *,
        tight_bounds: bool | None = None,
        prefix_length: int = STRING_PREFIX_LENGTH,
        footer_columns: list[str] | bool = True,
        from_footer: list[bool] | None = None,
    ):
        """``footer_columns``: the Parquet columns (dotted paths) the writer gives footer
        statistics, or True for all; the other leaves' statistics are computed from the rows.
        ``from_footer``: ``footer_leaves(leaves, footer_columns)``, when the caller has it (the
        files of one write share it)."""
        self.leaves = leaves
        self._from_footer = footer_leaves(leaves, footer_columns) if from_footer is None else from_footer
        self.tight_bounds = tight_bounds
        self.prefix_length = prefix_length
        self.num_records = 0
        self._nulls = [0] * len(leaves)
        self._min: list = [None] * len(leaves)
        self._max: list = [None] * len(leaves)
        self._no_bounds = [False] * len(leaves)  # bounds unknown
        self._nan = [False] * len(leaves)  # a NaN was written: the maximum is NaN

    def update(self, table: pa.Table | pa.RecordBatch, *, parquet_bounds: bool = False) -> None:
        """Account for rows written to the file.

        With ``parquet_bounds`` the primitive columns' bounds and null counts are left to
        :meth:`update_from_parquet` (the Parquet writer computes them anyway); only what
        Parquet statistics cannot say is computed here: floats (Parquet leaves NaN out of its
        bounds) and nested-type nulls.

        Bounds follow Spark's order, as Delta Spark writes them: NaN is above every other value,
        so a file holding a NaN has NaN as its maximum (and as its minimum when it holds
        nothing else). A bound that hid NaN would make readers skip the file for ``x > 0``.
        """
        self.num_records += table.num_rows
        names = table.column_names
        for i, leaf in enumerate(self.leaves):
            if parquet_bounds and self._from_footer[i]:
                continue  # all of it from the footer
            column = _leaf_column(table, leaf.path, names)
            if column is None:
                self._nulls[i] += table.num_rows
                continue
            self._nulls[i] += column.null_count
            if not leaf.min_max or self._no_bounds[i] or column.null_count == len(column):
                continue
            if pa.types.is_floating(column.type):
                bounds = _float_bounds(column)
                if bounds is None:  # NaN and nulls only
                    self._nan[i] = True
                    continue
                lo, hi, nan = bounds
                self._nan[i] = self._nan[i] or nan
            else:
                found = pc.min_max(column).as_py()
                lo, hi = found["min"], found["max"]
            if lo is not None and (self._min[i] is None or lo < self._min[i]):
                self._min[i] = lo
            if hi is not None and (self._max[i] is None or hi > self._max[i]):
                self._max[i] = hi

    def update_from_parquet(self, metadata, leaf_index: dict[tuple, int] | None = None) -> None:
        """Bounds and null counts of primitive columns from the file's row-group statistics;
        ``leaf_index``: ``parquet_leaf_index(metadata)``, when the caller knows it already (the
        files of one write share a schema)."""
        by_path = parquet_leaf_index(metadata) if leaf_index is None else leaf_index
        for i, leaf in enumerate(self.leaves):
            if not self._from_footer[i]:
                continue
            if not by_path and metadata.num_columns:
                self._no_bounds[i], self._nulls[i] = True, None  # unknown: say nothing
                continue
            j = by_path.get(leaf.path)
            if j is None:
                self._nulls[i] += metadata.num_rows
                continue
            for rg in range(metadata.num_row_groups):
                chunk = metadata.row_group(rg).column(j)
                stats = chunk.statistics
                rows = metadata.row_group(rg).num_rows
                if stats is None or not stats.has_null_count:
                    self._no_bounds[i], self._nulls[i] = True, None  # unknown: say nothing
                    continue
                if self._nulls[i] is not None:
                    self._nulls[i] += stats.null_count
                if not leaf.min_max or self._no_bounds[i] or stats.null_count == rows:
                    continue
                if not stats.has_min_max:
                    self._no_bounds[i] = True  # e.g. values too long for Parquet statistics
                    continue
                lo, hi = stats.min, stats.max
                if self._min[i] is None or lo < self._min[i]:
                    self._min[i] = lo
                if self._max[i] is None or hi > self._max[i]:
                    self._max[i] = hi

    def to_dict(self) -> dict:
        out: dict = {"numRecords": self.num_records, "minValues": {}, "maxValues": {}, "nullCount": {}}
        for i, leaf in enumerate(self.leaves):
            if self._nulls[i] is not None:
                _put(out["nullCount"], leaf.path, self._nulls[i])
            if self._no_bounds[i] or (self._min[i] is None and not self._nan[i]):
                continue
            low, high = self._min[i], self._max[i]
            if self._nan[i]:
                low, high = (low if low is not None else math.nan), math.nan
            lo = _stat_value(low, leaf.dtype, is_max=False, prefix=self.prefix_length)
            hi = _stat_value(high, leaf.dtype, is_max=True, prefix=self.prefix_length)
            if lo is not None:
                _put(out["minValues"], leaf.path, lo)
            if hi is not None:
                _put(out["maxValues"], leaf.path, hi)
        if self.tight_bounds is not None:
            out["tightBounds"] = self.tight_bounds
        return out

    def to_json(self) -> str:
        return stats_json(self.to_dict())


def parquet_leaf_index(metadata) -> dict[tuple, int]:
    """Each Parquet leaf column's field path (a tuple of names) -> its column index.

    Parquet names a leaf by its names joined with dots, so a top-level column ``a.b`` and the
    field ``b`` of a struct ``a`` share one dotted name; the index is taken from the file's
    schema tree instead (leaves are numbered depth-first). Leaves inside lists and maps carry
    a ``None`` part, so no struct path ever names them."""
    paths: list[tuple] = []

    def walk(typ: pa.DataType, prefix: tuple) -> None:
        if isinstance(typ, pa.ExtensionType):
            typ = typ.storage_type
        if pa.types.is_struct(typ):
            for k in range(typ.num_fields):
                walk(typ.field(k).type, (*prefix, typ.field(k).name))
        elif pa.types.is_map(typ):
            walk(typ.key_type, (*prefix, None, "key"))
            walk(typ.item_type, (*prefix, None, "value"))
        elif pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
            walk(typ.value_type, (*prefix, None))
        else:
            paths.append(prefix)

    for f in metadata.schema.to_arrow_schema():
        walk(f.type, (f.name,))
    if len(paths) != metadata.num_columns:  # a layout this walk does not know: no statistics
        return {}
    return {path: j for j, path in enumerate(paths)}


def _parquet_leaf(leaf: StatsLeaf) -> bool:
    """Leaves whose Parquet column-chunk statistics mean what Delta's statistics mean (not
    floats: Parquet's bounds leave NaN out, Delta's put it on top)."""
    return (
        isinstance(leaf.dtype, PrimitiveType | DecimalType)
        and leaf.dtype != PrimitiveType("variant")
        and leaf.dtype not in (PrimitiveType("float"), PrimitiveType("double"))
    )


def _float_bounds(column: pa.ChunkedArray | pa.Array) -> tuple[float, float, bool] | None:
    """A float column's least and greatest values other than NaN, and whether it holds a NaN;
    None when it holds nothing but NaN and nulls. NumPy for a column without nulls (a few
    microseconds for a small file's rows, and no release of the GIL to wait for again); Arrow's
    kernels otherwise."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if column.null_count == 0 and chunks:
        arrays = [c.to_numpy(zero_copy_only=False) for c in chunks]
        values = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        nan = np.isnan(values)
        found = bool(nan.any())
        if found:
            values = values[~nan]
        if not len(values):
            return None
        lo, hi = float(values.min()), float(values.max())
    else:
        nan = pc.is_nan(column)
        found = bool(pc.any(nan).as_py())
        if found:
            column = column.filter(pc.invert(nan))
        if len(column) == column.null_count:
            return None
        bounds = pc.min_max(column).as_py()
        lo, hi = bounds["min"], bounds["max"]
    return lo, hi, found


def footer_leaves(leaves: list[StatsLeaf], footer_columns: list[str] | bool) -> list[bool]:
    """Which ``leaves`` take their bounds and null counts from the Parquet footer: primitive
    leaves (not floats) of the columns given footer statistics (``footer_columns``, or True
    for all)."""
    wanted = footer_columns if footer_columns is True else set(footer_columns)
    return [_parquet_leaf(leaf) and (wanted is True or ".".join(leaf.path) in wanted) for leaf in leaves]


def _leaf_column(table, path: Path, names: list[str] | None = None):
    names = table.schema.names if names is None else names
    if path[0] not in names:
        return None
    column = table.column(path[0])
    for part in path[1:]:
        if not pa.types.is_struct(column.type) or column.type.get_field_index(part) < 0:
            return None
        column = pc.struct_field(column, part)
    return column


def _put(target: dict, path: Path, value) -> None:
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = value


def truncate_min_string(value: str, prefix: int) -> str:
    return value[:prefix]


def truncate_max_string(value: str, prefix: int) -> str | None:
    """A prefix that is still an upper bound: the prefix plus a tie-breaker character."""
    if len(value) <= prefix:
        return value
    head = value[:prefix]
    return head + ("\x7f" if ord(value[prefix]) < 0x7F else "\U0010ffff")


def _stat_value(value, dtype: DataType, *, is_max: bool, prefix: int):
    import datetime as dt

    name = dtype.name if isinstance(dtype, PrimitiveType) else None
    if name == "string":
        return truncate_max_string(value, prefix) if is_max else truncate_min_string(value, prefix)
    if name == "timestamp":
        stamp = value.astimezone(dt.UTC) if value.tzinfo else value
        stamp = stamp.replace(microsecond=stamp.microsecond // 1000 * 1000)  # milliseconds
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"
    if name == "timestamp_ntz":
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    if name == "date":
        return value.isoformat()
    return value


_NON_FINITE = {"NaN": '"NaN"', "Infinity": '"Infinity"', "-Infinity": '"-Infinity"'}
_FROM_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _non_finite_name(value: float) -> str:
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


class _NotPlainJson(Exception):
    """A value ``json`` cannot write as the statistics need it (a decimal)."""


def _not_plain(value):
    raise _NotPlainJson


def stats_json(stats: dict) -> str:
    """Compact JSON with decimals written as exact numbers (``json`` cannot emit them) and
    non-finite floats as the strings Delta Spark writes. One ``json.dumps`` call when neither
    is there (a write of 30,000 files made 720,000 calls, one per key and value)."""
    try:
        text = json.dumps(stats, ensure_ascii=False, separators=(",", ":"), default=_not_plain)
    except _NotPlainJson:
        return _stats_json_by_value(stats)
    if "NaN" in text or "Infinity" in text:  # a bare non-finite float (or the word in a string)
        return _stats_json_by_value(stats)
    return text


def _stats_json_by_value(stats: dict) -> str:
    from decimal import Decimal

    def encode(value) -> str:
        if isinstance(value, dict):
            return "{" + ",".join(f"{json.dumps(k)}:{encode(v)}" for k, v in value.items()) + "}"
        if isinstance(value, Decimal):
            return format(value, "f")
        if isinstance(value, float) and not math.isfinite(value):
            return _NON_FINITE[_non_finite_name(value)]  # a JSON string, as Delta Spark writes
        return json.dumps(value, ensure_ascii=False)

    return encode(stats)
