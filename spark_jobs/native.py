"""Spark reads of deltaplane tables at Spark's native Parquet floor.

``read_table(spark, uri)`` plans on the driver with the engine (snapshot, live files, partition
values, deletion vectors) and has Spark's own Parquet reader read exactly the live files: Spark
never lists the table, infers a schema or opens the log, and Catalyst prunes columns, pushes
filters into Parquet and counts from footers as for any Parquet scan.

Where the session's JVM has deltaplane's Spark classes (``jar``; ``get_spark`` puts them on the
classpath), ``native_jvm`` gives Spark the log as its file index and a Parquet format that leaves
out deleted rows as it decodes. Without them (Spark Connect, no ``javac``, ``JVM_SETTING`` false) this
module expresses the same read in Spark expressions over Spark's reader, given the files by
explicit list and with an explicit schema. Everything the engine applies when it reads, the plan
applies:

* **column mapping** (``name`` and ``id``): Spark reads the physical names and a cast renames
  them, at every nesting level, to the logical ones; a file without a column reads it as nulls.
  Under ``id`` the columns are matched by physical name (Delta writers write both).
* **type widening**: Spark's reader widens older files' values to the table's type (every
  widening the protocol allows; checked in the tests).
* **partition values** come from the log, never from the paths as such. Where every file sits at
  ``<column>=<value>/...`` and the path's value, read as Spark reads it, is exactly the log's
  (string, integer, date and boolean columns; checked file by file on the driver), Spark's own
  partition discovery supplies them: no join, and Spark prunes files by partition filters.
  Otherwise a small broadcast lookup of the planned files (their typed partition values) is
  joined on ``_metadata.file_size`` when the sizes are distinct, else on ``_metadata.file_path``;
  a row whose file the lookup does not know stops the query (never silently dropped).
* **deletion vectors**: files without one are read plainly (no join, no per-row work); files with
  one are a second scan whose rows are tested against their file's bitmap of deleted positions.
  The bitmaps travel as one scalar subquery (a list of int64 words per file); a row finds its
  file's by the ordinal a CASE over ``_metadata.file_size`` gives (up to ``_CASE_FILES`` files)
  or the lookup join carries. The position comes from Spark's reader itself: a column named
  ``_tmp_metadata_row_index`` in the read schema is what Spark's Parquet reader fills with each
  row's index in its file (both its vectorized and its row-based reader); asking for it
  directly spares a per-row ``_metadata`` struct field, and a null in it (a Spark that stopped
  filling it) stops the query rather than dropping the row.

The DataFrame is pinned to the version planned at the call: the file list, partition values and
deleted positions are fixed then, so every action on it (and each side of a self-join) reads that
version whatever is committed later.

Where Spark's reader cannot do what the engine does (``fallback_reasons``), the read goes through
the ``deltaplane`` data source at the same version (``versionAsOf``) and the reason is logged.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import unicodedata
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine import (
    HIVE_NULL,
    ArrayType,
    DataFileError,
    DataType,
    DeltaTable,
    GeoType,
    MapType,
    PrimitiveType,
    Snapshot,
    StructField,
    StructType,
    UnsupportedOperationError,
    canonical_paths,
    iter_fields,
    iter_types,
    read_file_deletion_vector,
    typed_partition_column,
)

log = logging.getLogger(__name__)

# Columns the plan adds while it joins; never in the result.
_PREFIX = "__deltaplane_"
KEY = _PREFIX + "file"
MATCHED = _PREFIX + "matched"
ORDINAL = _PREFIX + "dv_file"  # a DV file's place in the plan's bitmaps
# The column Spark's Parquet reader fills with each row's position in its file when the read
# schema asks for it (``FileFormat.ROW_INDEX_TEMPORARY_COLUMN_NAME``, what ``_metadata.row_index``
# reads through).
ROW_INDEX = "_tmp_metadata_row_index"
# Top-level names (in any case) a table's columns cannot have on this path.
_RESERVED = {
    ROW_INDEX: "which Spark's Parquet reader reserves for row indexes",
    "_metadata": "which hides the file metadata (size, path) Spark gives the plan",
}

_DV_READERS = 16
# The deleted-row bitmap of one read lives in a scalar subquery (every task gets it with its
# stage): 1 bit per row up to each file's last deleted row. Beyond this, the data source reads.
MAX_BITMAP_WORDS = 32 * 1024 * 1024  # 256 MiB, a 2-billion-row table deleted throughout
# Partition values Spark's partition discovery reads exactly as the log does.
_HIVE_TYPES = frozenset({"string", "byte", "short", "integer", "long", "date", "boolean", "timestamp"})
# A timestamp partition value Spark reads as the same instant in any session time zone.
_ZONED_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$")


# --- paths as Hadoop and Spark spell them -------------------------------------------------------

# Characters java.net.URI leaves as they are in a path (RFC 2396 unreserved and punctuation).
_URI_PATH_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'();:@&=+$,/")
# Characters Hadoop's glob syntax gives a meaning to: escaped so that a path names one file.
_GLOB_CHARACTER = re.compile(r"[{}\[\]*?\\]")


def spark_file_path(location: str) -> str:
    """A Hadoop location (``scheme:`` + unescaped path) as Spark's ``_metadata.file_path``
    spells it: Hadoop's ``Path.toUri().toString()``, i.e. java.net.URI's quoting of the path
    (ASCII outside the URI path characters, and non-ASCII spaces and controls, percent-encoded as
    UTF-8; other non-ASCII characters kept)."""
    scheme, rest = location.split(":", 1)
    authority = ""
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        authority, rest = "//" + host, slash + path
    return f"{scheme}:{authority}{_quote_path(rest)}"


def _quote_path(path: str) -> str:
    if path.isascii() and all(ch in _URI_PATH_SAFE for ch in path):
        return path
    out = []
    for ch in path:
        if ch in _URI_PATH_SAFE:
            out.append(ch)
        elif ord(ch) < 0x80 or unicodedata.category(ch) in ("Zs", "Zl", "Zp", "Cc"):
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return "".join(out)


def _glob_escaped(location: str) -> str:
    """A path string that Spark's reader globs to exactly this one file.

    Spark's reader globs every path with a glob character; its option to turn globbing off
    (``__globPaths__``) lists every path once per such path (Spark 4.3), so escaping is the way."""
    if _GLOB_CHARACTER.search(location) is None:
        return location
    return _GLOB_CHARACTER.sub(r"\\\g<0>", location)


def hadoop_location(root: str, location: str) -> str:
    """The Hadoop location (``scheme:`` + unescaped path) of a canonical log location."""
    if location.startswith("/"):
        return "file:" + _normalized(location)
    if "://" in location:
        parts = urlsplit(location)
        if parts.scheme.lower() == "s3":
            return "s3a" + location[len(parts.scheme) :]
        return location
    if root.startswith(("s3://", "s3a://")):
        bucket_path = root.split("://", 1)[1].rstrip("/")
        return f"s3a://{bucket_path}/{location}"
    return "file:" + _normalized(posixpath.join(root, location))


def hadoop_root(root: str) -> str:
    """The Hadoop location of a table's root directory."""
    if root.startswith(("s3://", "s3a://")):
        return "s3a://" + root.split("://", 1)[1].rstrip("/")
    return "file:" + _normalized(root)


def _normalized(path: str) -> str:
    # Hadoop's Path collapses repeated slashes and resolves "." and "..".
    return "/" + posixpath.normpath(path).lstrip("/")


def _skipped_by_spark(name: str) -> bool:
    """File names Spark's file index drops without a word (hidden and in-progress files)."""
    return name.startswith(("_", ".")) or name.endswith("._COPYING_")


# --- what the fast path cannot express -------------------------------------------------------


def _type_reasons(t: DataType) -> list[str]:
    reasons = []
    for sub in iter_types(t):
        if isinstance(sub, PrimitiveType) and sub.name == "variant":
            reasons.append("variant columns (the engine rebuilds shredded variants)")
        elif isinstance(sub, PrimitiveType) and sub.name == "void":
            reasons.append("void (null type) columns")
        elif isinstance(sub, GeoType):
            reasons.append(f"{sub.kind} columns (read as WKB by the engine)")
    return reasons


def fallback_reasons(snapshot: Snapshot, spark=None, *, jvm: bool = False) -> list[str]:
    """Why ``read_table`` cannot give ``snapshot`` to Spark's Parquet reader (empty: it can).

    ``spark`` (a classic session) is asked whether its classpath has S3A; without it, S3 tables
    are assumed unreachable. ``jvm``: through deltaplane's Spark classes, which list no
    directory (so hidden file names are read) and need no ``_metadata`` column."""
    reasons: list[str] = []

    def add(why: str) -> None:
        if why not in reasons:
            reasons.append(why)

    for f in snapshot.schema.fields:
        for why in _type_reasons(f.type):
            add(why)
    if any(f.name.startswith(_PREFIX) for f in iter_fields(snapshot.schema)):
        add(f"a column whose name starts with {_PREFIX!r}, which the plan uses itself")
    top = {n.lower() for f in snapshot.schema.fields for n in (f.name, f.physical_name)}
    for name, why in _RESERVED.items():
        if name in top and not (jvm and name == "_metadata"):
            add(f"a column named {name!r}, {why}")
    files = snapshot.files
    if files.num_rows == 0:
        return reasons
    root = snapshot.store.root
    locations = canonical_paths(files.column("path"), root)
    absolute = pc.match_substring(locations, "://")
    schemes = {hadoop_location(root, "x").split(":", 1)[0]}
    if pc.any(absolute).as_py():
        for loc in set(locations.filter(absolute).to_pylist()):
            schemes.add(hadoop_location(root, loc).split(":", 1)[0])
    for scheme in sorted(schemes - {"file"}):
        if scheme == "s3a":
            if spark is None or not has_s3a(spark):
                add("an S3 table, and Spark's classpath has no S3A filesystem (org.apache.hadoop:hadoop-aws)")
        else:
            add(f"files in a {scheme}: location, which Spark's Hadoop cannot open")
    hidden = (
        [] if jvm else [loc for loc in _maybe_hidden(locations) if _skipped_by_spark(loc.rsplit("/", 1)[-1])]
    )
    if hidden:
        add(
            f"data files whose names Spark's reader skips as hidden ({hidden[0]!r}"
            + (f" and {len(hidden) - 1} more" if len(hidden) > 1 else "")
            + ")"
        )
    return reasons


def _maybe_hidden(locations: pa.ChunkedArray) -> list[str]:
    """Locations whose file name may be one Spark skips (a cheap superset, then exact in Python)."""
    suspect = pc.or_(
        pc.or_(pc.match_substring(locations, "/_"), pc.match_substring(locations, "/.")),
        pc.or_(
            pc.or_(pc.starts_with(locations, "_"), pc.starts_with(locations, ".")),
            pc.ends_with(locations, "._COPYING_"),
        ),
    )
    return locations.filter(suspect).to_pylist() if pc.any(suspect).as_py() else []


def has_s3a(spark) -> bool:
    """Whether a classic session's JVM can load Hadoop's S3A filesystem (False under Spark
    Connect, whose server's classpath a client cannot inspect)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem", False, loader)
        return True
    except Exception:
        return False


# --- the plan (driver-side, no Spark) --------------------------------------------------------------


@dataclass
class FileGroup:
    """Files that one Parquet scan reads."""

    paths: list[str]  # as given to Spark's reader, one per file (glob-escaped)
    lookup: pa.Table | None = None  # KEY, MATCHED, [partition values], [ORDINAL]
    key_is_size: bool = True  # lookup keyed by _metadata.file_size, else _metadata.file_path


@dataclass
class NativePlan:
    """One version's live files as Spark's Parquet reader is to read them."""

    uri: str
    version: int
    schema: StructType  # logical
    mode: str  # column mapping mode
    partition_fields: list[StructField]
    hive_root: str | None  # partition values from Spark's discovery under this basePath
    plain: FileGroup | None  # files without a deletion vector
    with_dv: FileGroup | None
    bitmap: pa.ListArray | None = field(default=None, repr=False)  # int64 words per DV file, by ORDINAL
    deleted_rows: int = 0
    reasons: list[str] = field(default_factory=list)  # why it cannot be read natively
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)


def plan(
    snapshot: Snapshot, uri: str | None = None, storage_options: Mapping[str, str] | None = None
) -> NativePlan:
    """Everything Spark needs to read ``snapshot``'s live files, computed from the log."""
    files = snapshot.files
    root = snapshot.store.root
    n = files.num_rows
    locations = canonical_paths(files.column("path"), root).to_pylist() if n else []
    hadoop = [hadoop_location(root, loc) for loc in locations]
    partition_fields = list(snapshot.partition_fields)
    mode = snapshot.column_mapping_mode
    typed = {f.name: typed_partition_column(f, files, root) for f in partition_fields} if n else {}
    hive_root = None
    if partition_fields and n and _hive_consistent(root, locations, partition_fields, typed, mode, files):
        hive_root = hadoop_root(root)
    has_dv = (
        np.asarray(files.column("deletion_vector").is_valid().to_numpy(zero_copy_only=False), bool)
        if n
        else np.zeros(0, bool)
    )
    sizes = files.column("size").to_numpy(zero_copy_only=False) if n else np.zeros(0, np.int64)
    result = NativePlan(
        uri=uri or root,
        version=snapshot.version,
        schema=snapshot.schema,
        mode=mode,
        partition_fields=partition_fields,
        hive_root=hive_root,
        plain=None,
        with_dv=None,
        storage_options=dict(storage_options or {}),
    )
    join_partitions = bool(partition_fields) and hive_root is None
    plain = np.flatnonzero(~has_dv)
    if len(plain):
        group = FileGroup([_glob_escaped(hadoop[i]) for i in plain])
        if join_partitions:
            group.lookup, group.key_is_size = _lookup(plain, hadoop, sizes, typed)
        result.plain = group
    dv_rows = np.flatnonzero(has_dv)
    if len(dv_rows):
        bitmaps, words = _bitmaps(snapshot, locations, dv_rows)
        if bitmaps is None:
            result.reasons.append(
                f"deletion vectors spanning {words * 64:,} row positions (more than the "
                f"{MAX_BITMAP_WORDS * 64:,} a native read ships to its tasks)"
            )
            return result
        group = FileGroup([_glob_escaped(hadoop[i]) for i in dv_rows])
        lookup, group.key_is_size = _lookup(dv_rows, hadoop, sizes, typed if join_partitions else {})
        group.lookup = lookup.append_column(ORDINAL, pa.array(np.arange(len(dv_rows)), pa.int32()))
        result.with_dv = group
        result.bitmap = bitmaps
        cardinality = pc.struct_field(files.column("deletion_vector").take(pa.array(dv_rows)), "cardinality")
        result.deleted_rows = int(pc.sum(cardinality).as_py() or 0)
    return result


def _lookup(rows: np.ndarray, hadoop: list[str], sizes: np.ndarray, typed: dict[str, pa.Array]):
    """The lookup table of some files (by position in the snapshot's file table)."""
    group_sizes = sizes[rows]
    by_size = len(np.unique(group_sizes)) == len(group_sizes)
    if by_size:
        key = pa.array(group_sizes, pa.int64())
    else:
        key = pa.array([spark_file_path(hadoop[i]) for i in rows], pa.string())
    index = pa.array(rows)
    columns = {KEY: key, MATCHED: pa.repeat(pa.scalar(True), len(rows))}
    for name, values in typed.items():
        columns[name] = values.take(index)
    return pa.table(columns), by_size


def _bitmaps(snapshot: Snapshot, locations: list[str], rows: np.ndarray) -> tuple[pa.ListArray | None, int]:
    """Each file's deleted rows as int64 words (bit ``p % 64`` of word ``p // 64`` set for deleted
    row ``p``, up to its last deleted row), one list per file of ``rows``; and the words in all.
    The lists are ``None`` when the words would exceed ``MAX_BITMAP_WORDS``."""
    dvs = snapshot.files.column("deletion_vector").take(pa.array(rows)).to_pylist()

    def read(i: int) -> np.ndarray:
        return read_file_deletion_vector(snapshot, dvs[i], locations[rows[i]])

    if len(rows) > 1 and getattr(snapshot.store, "remote", True):
        with ThreadPoolExecutor(min(_DV_READERS, len(rows))) as pool:
            deleted = list(pool.map(read, range(len(rows))))
    else:
        deleted = [read(i) for i in range(len(rows))]
    counts = np.array([int(d[-1]) // 64 + 1 if len(d) else 0 for d in deleted], np.int64)
    total = int(counts.sum())
    if total > MAX_BITMAP_WORDS:
        return None, total
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    words = np.zeros(total, np.uint64)
    for d, offset in zip(deleted, offsets[:-1], strict=True):
        if len(d):
            positions = d.astype(np.uint64)
            np.bitwise_or.at(
                words,
                int(offset) + (positions >> np.uint64(6)).astype(np.int64),
                np.left_shift(np.uint64(1), positions & np.uint64(63)),
            )
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(words.view(np.int64))), total


# --- Hive-style partition directories --------------------------------------------------------------

_ESCAPE = re.compile(r"%([0-9a-fA-F]{2})")


def _unescape(text: str) -> str:
    """Spark's ``unescapePathName``: each ``%XX`` is the character with that code."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text) if "%" in text else text


def _hive_consistent(
    root: str,
    locations: list[str],
    fields: list[StructField],
    typed: dict[str, pa.Array],
    mode: str,
    files: pa.Table,
) -> bool:
    """Whether Spark's partition discovery under ``root`` gives every file exactly the log's
    partition values: each file at ``<column>=<value>/.../<file>`` (relative to the root, one
    directory per partition column, in order), each value as Spark parses it equal to the log's.
    Timestamps qualify when the path holds the log's own string with an explicit zone (Spark
    reads a zone-less one in the session's time zone, the log means UTC)."""
    if mode != "none":
        return False
    if not all(isinstance(f.type, PrimitiveType) and f.type.name in _HIVE_TYPES for f in fields):
        return False
    depth = len(fields)
    names = [f.name for f in fields]
    values = {}
    for f in fields:
        if f.type.name == "timestamp":  # compared as the log spells them
            raw = pc.struct_field(files.column("partition_values"), f.physical_name)
            values[f.name] = raw.cast(pa.string()).to_pylist()
            nulls = typed[f.name].is_null().to_pylist()
            values[f.name] = [None if null else v for v, null in zip(values[f.name], nulls, strict=True)]
        else:
            values[f.name] = typed[f.name].to_pylist()
    for i, location in enumerate(locations):
        if location.startswith("/") or "://" in location:
            return False
        parts = location.split("/")
        if len(parts) != depth + 1:
            return False
        for (name, part), f in zip(zip(names, parts, strict=False), fields, strict=True):
            column, eq, raw = part.partition("=")
            if not eq or _unescape(column) != name:
                return False
            if not _same_value(raw, values[name][i], f.type.name):
                return False
    return True


def _same_value(raw: str, value, type_name: str) -> bool:
    if value is None:
        return raw == HIVE_NULL
    if raw == HIVE_NULL:
        return False
    if type_name == "string":
        return _unescape(raw) == value
    if type_name == "timestamp":
        text = _unescape(raw)
        return text == value and _ZONED_TIMESTAMP.match(text) is not None
    if type_name == "boolean":
        return raw == ("true" if value else "false")
    if type_name == "date":
        return raw == value.isoformat() and len(raw) == 10
    return raw == str(value)  # integers: canonical decimal digits only


# --- Spark types ---------------------------------------------------------------------------------


def _spark_type(t: DataType, physical: bool):
    from pyspark.sql import types as T

    if isinstance(t, StructType):
        return T.StructType(
            [
                T.StructField(f.physical_name if physical else f.name, _spark_type(f.type, physical), True)
                for f in t.fields
            ]
        )
    if isinstance(t, ArrayType):
        return T.ArrayType(_spark_type(t.element_type, physical), True)
    if isinstance(t, MapType):
        return T.MapType(_spark_type(t.key_type, physical), _spark_type(t.value_type, physical), True)
    return T._parse_datatype_json_value(t.to_json())


def _renames(t: DataType) -> bool:
    """Whether a nested field's physical name differs from its logical one."""
    if isinstance(t, StructType):
        return any(f.physical_name != f.name or _renames(f.type) for f in t.fields)
    if isinstance(t, ArrayType):
        return _renames(t.element_type)
    if isinstance(t, MapType):
        return _renames(t.key_type) or _renames(t.value_type)
    return False


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# --- the DataFrame ------------------------------------------------------------------------------------


def build(spark, p: NativePlan):
    """The DataFrame of a plan: Spark's Parquet scans of its files, joined as the module says."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    partition_names = {f.name for f in p.partition_fields}
    data_fields = [f for f in p.schema.fields if f.name not in partition_names]
    physical = p.mode != "none"
    read_fields = [
        T.StructField(f.physical_name if physical else f.name, _spark_type(f.type, physical), True)
        for f in data_fields
    ]
    if p.hive_root is not None:
        read_fields += [T.StructField(f.name, _spark_type(f.type, False), True) for f in p.partition_fields]
    read_schema = T.StructType(read_fields)
    with_row_index = T.StructType([*read_fields, T.StructField(ROW_INDEX, T.LongType(), True)])
    carried = [_quoted(f.name) for f in p.partition_fields] if p.hive_root is not None else []

    def columns() -> list:
        """The scan's columns under their logical names: SQL text, or a Column where a cast
        renames nested fields."""
        out: list = []
        for f in data_fields:
            name = _quoted(f.physical_name if physical else f.name)
            if physical and _renames(f.type):
                out.append(F.col(name).cast(_spark_type(f.type, False)).alias(f.name))
            else:
                out.append(f"{name} AS {_quoted(f.name)}" if physical else name)
        return out + carried

    def scan(group: FileGroup, row_index: bool = False):
        reader = (
            spark.read.format("parquet")
            .schema(with_row_index if row_index else read_schema)
            .option("datetimeRebaseMode", "CORRECTED")
            .option("int96RebaseMode", "CORRECTED")
        )
        if p.hive_root is not None:
            reader = reader.option("basePath", p.hive_root)
        if any(path.startswith("s3a:") for path in group.paths):
            for key, value in s3a_options(p.storage_options).items():
                reader = reader.option(key, value)
        try:
            with _driver_listing(spark, group.paths):
                return _load(spark, reader, group.paths)
        except Exception as e:  # Spark's error for a missing file, in the engine's words
            if "PATH_NOT_FOUND" in str(e) or "Path does not exist" in str(e):
                missing = str(e).split("Path does not exist:", 1)[-1].split(". SQLSTATE")[0].strip()
                raise DataFileError(
                    f"data file {missing} of {p.uri} (version {p.version}) is missing; it may have "
                    "been removed by VACUUM (versions older than the VACUUM retention cannot be "
                    "read) or deleted outside Delta",
                    missing,
                ) from None
            raise

    def joined(df, group: FileGroup, keep=None):
        """``df`` with each row's file looked up; ``keep`` (a condition on the file's ordinal in
        the plan's bitmaps) filters. A row whose file the lookup does not know stops the query:
        the guard and the condition are one expression, so no other filter can drop the row
        first."""
        unknown = F.raise_error(
            F.lit(
                f"{p.uri} (version {p.version}): Spark read a data file that is not the one the log "
                "names (its size or location differs); the file changed after it was committed"
            )
        )
        if keep is not None and _by_cases(group):  # one CASE over the sizes, built in one call
            sizes = " ".join(
                f"WHEN {int(k)} THEN {i}" for i, k in enumerate(group.lookup.column(KEY).to_pylist())
            )
            ordinal = F.coalesce(F.expr(f"CASE _metadata.file_size {sizes} END"), unknown.cast("int"))
            return df.where(keep(ordinal))
        key = F.col("_metadata.file_size") if group.key_is_size else F.col("_metadata.file_path")
        lookup = spark.createDataFrame(group.lookup, schema=_lookup_schema(group, p))
        df = df.withColumn(KEY, key).join(F.broadcast(lookup), on=KEY, how="left")
        known = F.lit(True) if keep is None else keep(F.col(ORDINAL))
        return df.where(F.when(F.col(MATCHED).isNull(), unknown).otherwise(known))

    pieces = []
    if p.plain is not None:
        df, lookup = scan(p.plain), p.plain.lookup is not None
        if physical:  # renamed to the logical names first, keeping what the lookup reads
            df = _select(spark, df, [*columns(), "_metadata"] if lookup else columns())
        pieces.append(joined(df, p.plain) if lookup else df)
    if p.with_dv is not None:
        bitmaps = spark.createDataFrame(
            pa.table({"w": pa.ListArray.from_arrays(pa.array([0, len(p.bitmap)], pa.int32()), p.bitmap)}),
            schema=T.StructType(
                [T.StructField("w", T.ArrayType(T.ArrayType(T.LongType(), False), False), False)]
            ),
        ).scalar()
        row = F.col(ROW_INDEX)
        no_index = F.raise_error(
            F.lit(
                f"{p.uri} (version {p.version}): Spark's Parquet reader gave no row index "
                f"({ROW_INDEX}), so deletion vectors cannot be applied"
            )
        )

        def live(ordinal):
            """Whether the row at ``row`` of the file at ``ordinal`` is not deleted (a row past
            its file's last word is not)."""
            words = F.get(bitmaps, ordinal)
            word = F.coalesce(F.get(words, F.shiftright(row, 6).cast("int")), F.lit(0).cast("long"))
            bit = F.call_function("shiftright", word, row.bitwiseAND(F.lit(63)).cast("int"))
            bit = bit.bitwiseAND(F.lit(1))
            return F.when(row.isNull(), no_index).otherwise(bit == 0)

        scanned = scan(p.with_dv, row_index=True)
        if physical:
            scanned = _select(spark, scanned, [*columns(), "_metadata", ROW_INDEX])
        pieces.append(joined(scanned, p.with_dv, live))
    names = [_quoted(f.name) for f in p.schema.fields]
    if not pieces:  # no live file: an empty local relation of the table's schema
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = _spark_type(p.schema, False)
        return spark.createDataFrame(to_arrow_schema(schema, timezone="UTC").empty_table(), schema=schema)
    out = _select(spark, pieces[0], names)
    for other in pieces[1:]:
        out = out.unionByName(_select(spark, other, names))
    return out


def s3a_options(storage_options: Mapping[str, str]) -> dict[str, str]:
    """The engine's S3 storage options as Hadoop S3A settings (Spark's file reader puts its
    options into the Hadoop configuration of the scan)."""
    options = {str(k).lower(): str(v) for k, v in storage_options.items()}

    def first(*names: str) -> str | None:
        return next((options[n] for n in names if options.get(n)), None)

    out = {}
    endpoint = first("endpoint_url", "aws_endpoint_url", "endpoint")
    if endpoint:
        out["fs.s3a.endpoint"] = endpoint
        out["fs.s3a.path.style.access"] = "true"
        out["fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https:")).lower()
    for setting, names in {
        "fs.s3a.access.key": ("aws_access_key_id", "access_key_id"),
        "fs.s3a.secret.key": ("aws_secret_access_key", "secret_access_key"),
        "fs.s3a.session.token": ("aws_session_token", "session_token"),
        "fs.s3a.endpoint.region": ("aws_region", "region"),
    }.items():
        value = first(*names)
        if value:
            out[setting] = value
    return out


# py4j turns a Python list into a Java one with a call per element (each call about 0.1-0.3 ms,
# and a column name costs several): a 10,000-file list took 1 s of 2 to plan, a 200-column table's
# projections 4,000 calls. A classic session's JVM gets such lists as one JSON string instead,
# parsed by Spark's own Jackson; under Spark Connect they travel in the plan anyway.


def _java_strings(spark, strings: list[str]):
    """``strings`` as a Scala ``Seq[String]`` in a classic session's JVM, in three calls."""
    jvm = spark._jvm
    array_class = jvm.java.lang.Class.forName("[Ljava.lang.String;")
    array = jvm.com.fasterxml.jackson.databind.ObjectMapper().readValue(json.dumps(strings), array_class)
    return jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(array)


def _classic(spark, wrapper, java_attribute: str) -> bool:
    """Whether ``wrapper`` (a reader, a DataFrame) wraps a JVM object of a classic session."""
    return getattr(spark, "_jvm", None) is not None and getattr(wrapper, java_attribute, None) is not None


def _load(spark, reader, paths: list[str]):
    """``reader.load(paths)``, the paths in one call."""
    if not _classic(spark, reader, "_jreader"):
        return reader.load(paths)
    return reader._df(reader._jreader.load(_java_strings(spark, paths)))


def _select(spark, df, columns: list):
    """``df`` projected to ``columns`` (SQL text, or Columns): nothing to do when they are its
    columns already; the text in one call; Columns as PySpark sends them."""
    if all(isinstance(c, str) for c in columns):
        if [_quoted(name) for name in df.columns] == columns:
            return df
        if _classic(spark, df, "_jdf"):
            from pyspark.sql.classic.dataframe import DataFrame

            return DataFrame(df._jdf.selectExpr(_java_strings(spark, columns)), spark)
        return df.selectExpr(*columns)
    from pyspark.sql import functions as F

    return df.select(*[F.expr(c) if isinstance(c, str) else c for c in columns])


# Spark lists more than this many paths with a distributed job, which for files it is told about
# one by one costs far more than listing them on the driver (30,000 local files: 54 s against 3.6 s).
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"


@contextmanager
def _driver_listing(spark, paths: list[str]):
    """Local files are stat'ed on the driver, however many (object stores keep Spark's own
    parallel listing: there each file is a round trip)."""
    previous = spark.conf.get(_LISTING_THRESHOLD, None)
    local = all(path.startswith("file:") for path in paths)
    if not local or (previous is not None and int(previous) >= len(paths)):
        yield
        return
    spark.conf.set(_LISTING_THRESHOLD, str(len(paths)))
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(_LISTING_THRESHOLD)
        else:
            spark.conf.set(_LISTING_THRESHOLD, previous)


# Deletion-vector files up to this many find their bitmap by a CASE over the file key instead of
# a broadcast join: a row then costs a few comparisons, not a hash probe and a wider row.
_CASE_FILES = 32


def _by_cases(group: FileGroup) -> bool:
    lookup = group.lookup
    return (
        group.key_is_size
        and lookup.num_rows <= _CASE_FILES
        and set(lookup.column_names) <= {KEY, MATCHED, ORDINAL}
    )


def _lookup_schema(group: FileGroup, p: NativePlan):
    from pyspark.sql import types as T

    fields = [
        T.StructField(KEY, T.LongType() if group.key_is_size else T.StringType(), False),
        T.StructField(MATCHED, T.BooleanType(), False),
    ]
    names = set(group.lookup.column_names)
    fields += [
        T.StructField(f.name, _spark_type(f.type, False), True) for f in p.partition_fields if f.name in names
    ]
    if ORDINAL in names:
        fields.append(T.StructField(ORDINAL, T.IntegerType(), False))
    return T.StructType(fields)


# --- the entry point -------------------------------------------------------------------------------


def read_table(
    spark,
    uri: str,
    *,
    version: int | None = None,
    timestamp=None,
    storage_options: Mapping[str, str] | None = None,
    native: bool | None = None,
):
    """The table at ``version`` or ``timestamp`` (latest by default) as a DataFrame pinned to it.

    ``native=None`` (default) reads through Spark's Parquet reader where it can express the table
    and through the ``deltaplane`` data source otherwise (logging why); ``native=True`` insists
    (``UnsupportedOperationError`` names what it cannot do); ``native=False`` uses the data
    source. Bad input raises the engine's errors (``TableNotFoundError``,
    ``VersionNotFoundError``...)."""
    table = DeltaTable(uri, version=version, timestamp=timestamp, storage_options=storage_options)
    snapshot = table.snapshot
    if native is False:
        return _data_source(spark, uri, snapshot.version, storage_options)
    if _jvm_enabled(spark) and not fallback_reasons(snapshot, spark, jvm=True):
        from deltaplane.spark_jobs import native_jvm  # it builds on this module's helpers

        return native_jvm.build(spark, native_jvm.manifest(snapshot, uri, storage_options))
    reasons = fallback_reasons(snapshot, spark)
    planned = None
    if not reasons:
        planned = plan(snapshot, uri, storage_options)
        reasons = planned.reasons
    if reasons:
        if native:
            raise UnsupportedOperationError(
                f"Spark's Parquet reader cannot read {uri} (version {snapshot.version}) as the "
                f"engine does: {'; '.join(reasons)}. Read it with native=False"
            )
        log.info(
            "reading %s version %d through the deltaplane data source: %s",
            uri,
            snapshot.version,
            "; ".join(reasons),
        )
        return _data_source(spark, uri, snapshot.version, storage_options)
    return build(spark, planned)


# A session setting that turns deltaplane's Spark classes off for reads (the expression path).
JVM_SETTING = "spark.deltaplane.read.jvm"


def _jvm_enabled(spark) -> bool:
    from deltaplane.spark_jobs import jar

    if not jar.loaded(spark):
        return False
    return str(spark.conf.get(JVM_SETTING, "true")).strip().lower() != "false"


def _data_source(spark, uri: str, version: int, storage_options: Mapping[str, str] | None):
    reader = spark.read.format("deltaplane").option("versionAsOf", str(version))
    for key, value in (storage_options or {}).items():
        reader = reader.option(f"storage.{key}", value)
    return reader.load(uri)


__all__ = ["NativePlan", "build", "fallback_reasons", "plan", "read_table", "spark_file_path"]
