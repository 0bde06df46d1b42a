"""Parsing one commit (or JSON checkpoint) file: file actions into Arrow, the rest into objects.

A commit holds a handful of non-file actions (commitInfo, metaData, protocol, txn, ...) and up
to millions of add/remove lines. The lines are split once; add/remove lines go to
``pyarrow.json`` in one call (C++, multi-threaded) with an explicit schema, the few other lines
go through ``json.loads`` and become :mod:`deltaplane.engine.actions` objects that keep unknown fields.

``partitionValues`` is a JSON object whose keys are the partition columns; ``pyarrow.json``
cannot produce maps, so it infers a struct per commit, and replay later reshapes every source
to the snapshot's partition columns. If the fast parse fails (a writer with odd but valid
JSON), the commit is parsed again line by line so that the error, if real, names the line.

Every path reads a line by the same rule (:func:`deltaplane.engine.actions.known_actions`): a line is the
action(s) whose known key it has. Unknown keys beside an action are ignored, unknown fields inside
it are kept in ``extra`` (non-file actions) or dropped (file actions, which become Arrow rows), a
line with only unknown keys is skipped, and a line with several known actions (not allowed, but
written by some tools) counts as each of them. ``tests/engine/test_log_unknown_keys.py`` holds
every path to that rule.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltaplane.engine.actions import (
    ACTION_TYPES,
    FILE_ACTION_KEYS,
    AddCDCFile,
    CheckpointMetadata,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    Sidecar,
    Txn,
    known_actions,
)
from deltaplane.engine.errors import CorruptLogError
from deltaplane.engine.values_to_arrow import scalar, table_from_columns, to_numpy

DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)


def _file_action_schema(partition_keys: frozenset[str], tag_keys: frozenset[str] = frozenset()) -> pa.Schema:
    """The explicit JSON schema for add/remove lines.

    ``partitionValues`` keys are declared as strings when known: left to inference, pyarrow
    would turn a value like ``"2021-01-01"`` into a timestamp and back into a different string.
    Unknown keys (and ``tags``) are inferred; :func:`parse_log_json` re-parses a file whose
    inferred partition values or tags are not strings, with those keys declared.
    """
    pv = pa.struct([(k, pa.string()) for k in sorted(partition_keys)])
    tags = [("tags", pa.struct([(k, pa.string()) for k in sorted(tag_keys)]))] if tag_keys else []
    add = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", pv),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats", pa.string()),
            ("deletionVector", DV_TYPE),
            ("baseRowId", pa.int64()),
            ("defaultRowCommitVersion", pa.int64()),
            ("clusteringProvider", pa.string()),
            *tags,
        ]
    )
    return pa.schema([("add", add), ("remove", remove_type(pv, tags))])


def remove_type(partition_values: pa.DataType, extra: Sequence[tuple[str, pa.DataType]] = ()) -> pa.DataType:
    """A remove action's Arrow type, with ``partition_values`` as its ``partitionValues`` (a
    struct of strings in a commit's parse, a map in a checkpoint) and ``extra`` fields after."""
    return pa.struct(
        [
            ("path", pa.string()),
            ("deletionTimestamp", pa.int64()),
            ("dataChange", pa.bool_()),
            ("extendedFileMetadata", pa.bool_()),
            ("partitionValues", partition_values),
            ("size", pa.int64()),
            ("deletionVector", DV_TYPE),
            ("baseRowId", pa.int64()),
            ("defaultRowCommitVersion", pa.int64()),
            *extra,
        ]
    )


_THREADED_PARSE_BYTES = 1 << 20


def _parse_options(partition_keys: frozenset[str], tag_keys: frozenset[str] = frozenset()) -> pj.ParseOptions:
    return pj.ParseOptions(
        explicit_schema=_file_action_schema(partition_keys, tag_keys), unexpected_field_behavior="infer"
    )


def _non_string_partition_keys(table: pa.Table, field: str = "partitionValues") -> set[str]:
    """Keys of ``partitionValues`` (or ``tags``) that inference typed as something other than a
    string."""
    out = set()
    for kind in ("add", "remove"):
        if kind not in table.column_names:
            continue
        t = table.schema.field(kind).type
        index = t.get_field_index(field)
        if index < 0:
            continue
        pv = t.field(index).type
        if pa.types.is_struct(pv):
            for i in range(pv.num_fields):
                child = pv.field(i)
                if not (pa.types.is_string(child.type) or pa.types.is_null(child.type)):
                    out.add(child.name)
    return out


def _reparse_keys(table: pa.Table) -> tuple[set[str], set[str]]:
    """The partition-value and tag keys that a second parse must declare as strings."""
    return _non_string_partition_keys(table), _non_string_partition_keys(table, "tags")


# An action's ``tags`` in a file-action table: a map, as checkpoints store it (null for the
# usual file without tags). JSON commits come in as an inferred struct and are turned into it.
TAGS_TYPE = pa.map_(pa.string(), pa.string())

# The columns of a file-action table, whatever its source (commit, checkpoint, sidecar).
# partition_values stays in its source shape (struct or map) until replay reshapes it.
FILE_ACTION_FIELDS: list[tuple[str, str, pa.DataType]] = [
    # (column, JSON/checkpoint field, type)
    ("path", "path", pa.string()),
    ("size", "size", pa.int64()),
    ("modification_time", "modificationTime", pa.int64()),
    ("data_change", "dataChange", pa.bool_()),
    ("stats", "stats", pa.string()),
    ("deletion_vector", "deletionVector", DV_TYPE),
    ("base_row_id", "baseRowId", pa.int64()),
    ("default_row_commit_version", "defaultRowCommitVersion", pa.int64()),
    ("clustering_provider", "clusteringProvider", pa.string()),
    ("tags", "tags", TAGS_TYPE),
    ("deletion_timestamp", "deletionTimestamp", pa.int64()),
    ("extended_file_metadata", "extendedFileMetadata", pa.bool_()),
]

_FILE_PREFIXES = (b'{"add":', b'{"remove":')


@dataclass
class LogActions:
    """What one log file holds: file actions as Arrow, everything else as objects."""

    source: str
    version: int
    file_actions: pa.Table | None = None
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    commit_info: CommitInfo | None = None
    txns: list[Txn] = field(default_factory=list)
    domains: list[DomainMetadata] = field(default_factory=list)
    cdc: list[AddCDCFile] = field(default_factory=list)
    sidecars: list[Sidecar] = field(default_factory=list)
    checkpoint_metadata: CheckpointMetadata | None = None

    def add_non_file_action(self, action, line_no: int | None = None) -> None:
        where = f"{self.source}" + (f" line {line_no}" if line_no else "")
        if isinstance(action, Protocol):
            if self.protocol is not None:
                raise CorruptLogError(f"{where}: more than one protocol action", self.source)
            self.protocol = action
        elif isinstance(action, Metadata):
            if self.metadata is not None:
                raise CorruptLogError(f"{where}: more than one metaData action", self.source)
            self.metadata = action
        elif isinstance(action, CommitInfo):
            self.commit_info = action
        elif isinstance(action, Txn):
            self.txns.append(action)
        elif isinstance(action, DomainMetadata):
            self.domains.append(action)
        elif isinstance(action, AddCDCFile):
            self.cdc.append(action)
        elif isinstance(action, Sidecar):
            self.sidecars.append(action)
        elif isinstance(action, CheckpointMetadata):
            self.checkpoint_metadata = action

    # File actions of a small commit stay as parsed JSON objects until someone needs Arrow:
    # replaying a few small commits is cheaper in Python than building a table per commit.
    # (stored in ``_table`` / ``_rows``, set through the ``file_actions`` property below)

    def set_file_rows(self, rows: list[tuple[str, dict]]) -> None:
        """File actions as ``(kind, JSON body)`` pairs, adds first (validated by the parser)."""
        self._table, self._rows = None, rows

    @property
    def pending_rows(self) -> list[tuple[str, dict]] | None:
        """The file actions as parsed JSON while no Arrow table was built (``[]``: none)."""
        rows = getattr(self, "_rows", None)
        if rows is not None:
            return rows
        return [] if getattr(self, "_table", None) is None else None


def _get_file_actions(self: LogActions) -> pa.Table | None:
    rows = getattr(self, "_rows", None)
    if rows:
        self._table = _file_actions_from_bodies(rows, self.source)
    self._rows = None
    return getattr(self, "_table", None)


def _set_file_actions(self: LogActions, value: pa.Table | None) -> None:
    self._table, self._rows = value, None


# The flat Arrow table of the file actions (built on first use for small commits).
LogActions.file_actions = property(_get_file_actions, _set_file_actions)  # type: ignore[assignment]


def parse_log_json(
    data: bytes,
    *,
    version: int,
    source: str,
    partition_keys: set[str] | None = None,
    threads: bool = True,
) -> LogActions:
    """Parse newline-delimited JSON actions (a commit, compaction or V2 JSON checkpoint).

    Fast path: one ``pyarrow.json`` call over the whole file. The rows that are not add/remove
    (commitInfo, protocol, metaData, txn, ...) are located by row number and their lines decoded
    with ``json``, so non-file actions keep every field exactly. If the file is unusual (a
    commitInfo Arrow cannot type, whitespace-only lines), it is parsed line by line instead,
    which is slower but exact and names a bad line.

    ``partition_keys`` is the set of partitionValues keys known to be strings; it is shared by
    the commits of one load and grows when a file reveals new ones.
    """
    if not data.strip():
        # A commit always holds commitInfo or an action. An empty file is the torn write of a
        # writer that did not fsync; reading it as an empty commit would silently undo the
        # commit it should have been (deleted rows would come back).
        raise CorruptLogError(
            f"{source} is empty ({len(data)} bytes): a torn or truncated write; the log cannot be "
            "read past it until the file is restored",
            source,
        )
    keys = partition_keys if partition_keys is not None else set()
    if len(data) <= _SMALL_COMMIT_BYTES:
        return _parse_small(data, version=version, source=source)
    # Threads pay off on big commits; on small ones their start-up is most of the cost.
    # (``threads=False`` when the caller already parses several files at once.)
    read_options = pj.ReadOptions(use_threads=threads and len(data) > _THREADED_PARSE_BYTES)
    try:
        table = pj.read_json(
            io.BytesIO(data), read_options=read_options, parse_options=_parse_options(frozenset(keys))
        )
        typed, tag_keys = _reparse_keys(table)
        if typed or tag_keys:
            keys |= typed
            table = pj.read_json(
                io.BytesIO(data),
                read_options=read_options,
                parse_options=_parse_options(frozenset(keys), frozenset(tag_keys)),
            )
    except pa.ArrowInvalid:
        return _parse_line_by_line(data, version=version, source=source, partition_keys=keys)
    is_file = _valid_rows(table, FILE_ACTION_KEYS)
    other_rows = np.flatnonzero(~is_file | _valid_rows(table, _NON_FILE_KEYS))
    other_lines = _lines_at(data, other_rows, table.num_rows)
    if other_lines is None:
        return _parse_line_by_line(data, version=version, source=source, partition_keys=keys)
    out = LogActions(source=source, version=version)
    missed: list[tuple[str, dict]] = []
    for row, line in zip(other_rows.tolist(), other_lines, strict=True):
        # The file actions of a row are in the Arrow columns already; take the rest from JSON.
        _add_decoded_line(out, line, row + 1, file_rows=None if is_file[row] else missed)
    if missed:  # a file action Arrow did not see: trust the careful parser
        return _parse_line_by_line(data, version=version, source=source, partition_keys=keys)
    if is_file.any():
        out.file_actions = file_actions_from_structs(table, source)
    return out


# Top-level keys of the known actions that are not add/remove.
_NON_FILE_KEYS = tuple(k for k in ACTION_TYPES if k not in FILE_ACTION_KEYS)


def _valid_rows(table: pa.Table, keys) -> np.ndarray:
    """Rows where any of the top-level ``keys`` holds a (non-null) value."""
    mask = np.zeros(table.num_rows, dtype=bool)
    for key in keys:
        if key in table.column_names:
            mask |= to_numpy(table.column(key).is_valid())
    return mask


def _add_decoded_line(
    out: LogActions, line: bytes, line_no: int | None, file_rows: list[tuple[str, dict]] | None
) -> None:
    """Decode one line and take its actions: non-file ones into ``out``, add/remove bodies
    (checked) into ``file_rows``; ``file_rows=None`` when the caller has them already."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise CorruptLogError(f"{_where(out, line, line_no)}: invalid action: {e}", out.source) from e
    _take_actions(out, obj, line, line_no, file_rows)


def _take_actions(
    out: LogActions, obj, line: bytes, line_no: int | None, file_rows: list[tuple[str, dict]] | None
) -> None:
    """The actions of one decoded line, by the rule of :func:`deltaplane.engine.actions.known_actions`."""
    try:
        actions = known_actions(obj)
    except ValueError as e:
        raise CorruptLogError(f"{_where(out, line, line_no)}: invalid action: {e}", out.source) from e
    for key, body in actions:
        if key in FILE_ACTION_KEYS:
            if file_rows is not None:
                file_rows.append((key, _checked_file_action(key, body, out.source, line)))
            continue
        try:
            action = ACTION_TYPES[key].from_json(body)
        except (ValueError, TypeError) as e:
            raise CorruptLogError(f"{_where(out, line, line_no)}: invalid action: {e}", out.source) from e
        out.add_non_file_action(action, line_no)


def _where(out: LogActions, line: bytes, line_no: int | None) -> str:
    return f"{out.source} line {line_no}" if line_no else f"{out.source} ({line[:200]!r})"


def _lines_at(data: bytes, rows: np.ndarray, num_rows: int) -> list[bytes] | None:
    """The text of the given (0-based, blank lines not counted) rows; None if unsure."""
    if len(rows) == 0:
        return []
    if rows[-1] < 64:  # the usual case: commitInfo/protocol/metaData lead the file
        lines, start, index = [], 0, 0
        wanted = set(rows.tolist())
        while start <= len(data) and len(lines) < len(wanted):
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end
            line = data[start:end]
            if line.strip():
                if index in wanted:
                    lines.append(line)
                index += 1
            elif line:
                return None  # whitespace-only line: let the careful parser decide
            start = end + 1
        return lines if len(lines) == len(rows) else None
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(data)]))
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) != num_rows:
        return None
    return [data[a:b] for a, b in zip(starts[rows].tolist(), ends[rows].tolist(), strict=True)]


def _parse_line_by_line(data: bytes, *, version: int, source: str, partition_keys: set[str]) -> LogActions:
    out = LogActions(source=source, version=version)
    file_lines: list[bytes] = []
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        if line.startswith(_FILE_PREFIXES):
            file_lines.append(line)  # decoded in bulk below, keys beside the action included
            continue
        if not line.strip():
            continue
        rows: list[tuple[str, dict]] = []
        _add_decoded_line(out, line.strip(), line_no, rows)
        # A file action written with unusual spacing, or after another key: give each one to
        # the columnar parser on a line of its own.
        file_lines.extend(json.dumps({kind: body}, separators=(",", ":")).encode() for kind, body in rows)
    if file_lines:
        out.file_actions = _parse_file_lines(file_lines, out, partition_keys)
    return out


def _parse_file_lines(lines: list[bytes], out: LogActions, partition_keys: set[str]) -> pa.Table:
    """The file actions of lines that start with one; any other known action beside one of
    them (a line with several actions) goes into ``out``."""
    source = out.source
    try:
        body = b"\n".join(lines)
        table = pj.read_json(io.BytesIO(body), parse_options=_parse_options(frozenset(partition_keys)))
        typed, tag_keys = _reparse_keys(table)
        if typed or tag_keys:
            partition_keys |= typed
            options = _parse_options(frozenset(partition_keys), frozenset(tag_keys))
            table = pj.read_json(io.BytesIO(body), parse_options=options)
    except pa.ArrowInvalid:
        return _parse_file_lines_slowly(lines, out)
    if table.num_rows != len(lines) or not _valid_rows(table, FILE_ACTION_KEYS).all():
        return _parse_file_lines_slowly(lines, out)
    for row in np.flatnonzero(_valid_rows(table, _NON_FILE_KEYS)).tolist():
        _add_decoded_line(out, lines[row], None, None)
    return file_actions_from_structs(table, source)


# Below this size a commit is parsed with ``json`` line by line: pyarrow.json's fixed cost
# (about half a millisecond) is most of the time for the handful of lines a small append writes.
_SMALL_COMMIT_BYTES = 16 << 10


def _parse_small(data: bytes, *, version: int, source: str) -> LogActions:
    """A small commit, line by line: the same result as the columnar path, exactly."""
    out = LogActions(source=source, version=version)
    rows: list[tuple[str, dict]] = []
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise CorruptLogError(f"{source} line {line_no}: invalid action: {e}", source) from e
        if isinstance(obj, dict) and len(obj) == 1:
            # The usual line: one add or remove and nothing else.
            kind = "add" if "add" in obj else "remove" if "remove" in obj else None
            if kind is not None and obj[kind] is not None:
                rows.append((kind, _checked_file_action(kind, obj[kind], source, line)))
                continue
        _take_actions(out, obj, line, line_no, rows)
    if rows:
        out.set_file_rows(_adds_first(rows))
    return out


def _checked_file_action(kind: str, body, source: str, line: bytes) -> dict:
    try:
        if not isinstance(body, dict) or not isinstance(body.get("path"), str):
            raise ValueError(f"{kind} action without a path")
        pv = body.get("partitionValues")
        if pv is not None and not isinstance(pv, dict):
            raise ValueError("partitionValues must be an object")
        if body.get("stats") is not None and not isinstance(body["stats"], str):
            raise ValueError("stats must be a JSON string")
        tags = body.get("tags")
        if tags is not None and (
            not isinstance(tags, dict) or any(isinstance(v, dict | list) for v in tags.values())
        ):
            raise ValueError("tags must be an object of strings")
    except ValueError as e:
        raise CorruptLogError(f"{source}: invalid file action ({e}): {line[:200]!r}", source) from e
    return body


def _parse_file_lines_slowly(lines: list[bytes], out: LogActions) -> pa.Table:
    """Line-by-line parse: slower, but it names the bad line when there is one."""
    rows: list[tuple[str, dict]] = []
    for line in lines:
        _add_decoded_line(out, line, None, rows)
    return _file_actions_from_bodies(_adds_first(rows), out.source)


def _adds_first(rows: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """Adds before removes, as the columnar path stacks them."""
    return [r for r in rows if r[0] == "add"] + [r for r in rows if r[0] == "remove"]


def _file_actions_from_bodies(rows: list[tuple[str, dict]], source: str) -> pa.Table:
    pv_keys: dict[str, None] = {}
    for _, body in rows:
        for k in body.get("partitionValues") or {}:
            pv_keys[k] = None
    pv_type = pa.struct([(k, pa.string()) for k in pv_keys])
    columns: dict[str, list] = {"is_add": [kind == "add" for kind, _ in rows]}
    for column, key, _ in FILE_ACTION_FIELDS:
        columns[column] = [body.get(key) for _, body in rows]
    columns["tags"] = [tags_value(v) for v in columns["tags"]]
    columns["partition_values"] = [
        None
        if body.get("partitionValues") is None
        else {k: pv_string(body["partitionValues"].get(k)) for k in pv_keys}
        for _, body in rows
    ]
    types = {c: t for c, _, t in FILE_ACTION_FIELDS} | {
        "is_add": pa.bool_(),
        "partition_values": pv_type,
    }
    try:
        return table_from_columns(columns, pa.schema([(c, types[c]) for c in columns]))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise CorruptLogError(f"{source}: file action with a field of the wrong type: {e}", source) from e


def pv_string(value):
    """Partition values are strings; tolerate a writer that wrote a bare JSON scalar."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def tags_value(value):
    """An action's parsed JSON ``tags`` as the map column takes it: values are strings (a writer
    that wrote a bare JSON scalar gets it as a string, as Delta Spark reads it)."""
    if not value or all(v is None or isinstance(v, str) for v in value.values()):
        return value
    return {str(k): pv_string(v) for k, v in value.items()}


def tags_array(child: pa.Array | pa.ChunkedArray, source: str) -> pa.Array | pa.ChunkedArray:
    """A source's ``tags`` column as :data:`TAGS_TYPE`: a checkpoint's map as it is (cast when its
    field names or string types differ), a JSON commit's inferred struct turned into a map."""
    if child.type == TAGS_TYPE:
        return child
    if isinstance(child, pa.ChunkedArray):
        return pa.chunked_array([_tags_chunk(c, source) for c in child.chunks], TAGS_TYPE)
    return _tags_chunk(child, source)


def _tags_chunk(chunk: pa.Array, source: str) -> pa.Array:
    typ = chunk.type
    try:
        if pa.types.is_null(typ):
            return pa.nulls(len(chunk), TAGS_TYPE)
        if pa.types.is_map(typ):
            return chunk.cast(TAGS_TYPE)
        if pa.types.is_struct(typ):
            return _struct_tags(chunk)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise CorruptLogError(f"{source}: field tags has type {typ}: {e}", source) from e
    raise CorruptLogError(f"{source}: field tags has type {typ}, not an object of strings", source)


def _struct_tags(chunk: pa.StructArray) -> pa.Array:
    """Inferred ``struct<key: value, ...>`` tags to a map holding each row's present keys."""
    n = len(chunk)
    names = [chunk.type.field(i).name for i in range(chunk.type.num_fields)]
    mask = chunk.is_null() if chunk.null_count else None
    children = [c.cast(pa.string()) for c in chunk.flatten()]  # parent nulls folded in
    if children:
        present = np.column_stack([to_numpy(c.is_valid()) for c in children])
        rows, fields = np.nonzero(present)  # row-major: each row's keys together, in order
        keys = pa.array(names, pa.string()).take(pa.array(fields))
        values = pa.concat_arrays(children).take(pa.array(fields * n + rows))
        counts = present.sum(axis=1)
    else:
        keys = values = pa.array([], pa.string())
        counts = np.zeros(n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values, type=TAGS_TYPE, mask=mask)


def file_actions_from_structs(table: pa.Table, source: str) -> pa.Table:
    """Stack the ``add`` and ``remove`` struct columns of a parsed file into one flat table."""
    parts = []
    for kind in ("add", "remove"):
        if kind not in table.column_names:
            continue
        column = table.column(kind)
        valid = pc.is_valid(column)
        if column.null_count == len(column):
            continue
        if column.null_count:
            column = column.filter(valid)
        parts.append(_flatten(column, kind == "add", source))
    if not parts:
        return empty_file_actions()
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="permissive")


def _flatten(column: pa.ChunkedArray, is_add: bool, source: str) -> pa.Table:
    struct_type = column.type
    children = {
        struct_type.field(i).name: pc.struct_field(column, struct_type.field(i).name)
        for i in range(struct_type.num_fields)
    }
    return flat_file_actions(children, len(column), is_add, source)


def flat_file_actions(children: dict, n: int, is_add: bool, source: str) -> pa.Table:
    """The flat file-action table from an action's fields (JSON/checkpoint names)."""
    arrays: dict[str, pa.ChunkedArray | pa.Array] = {"is_add": pa.repeat(scalar(is_add, pa.bool_()), n)}
    for col, key, typ in FILE_ACTION_FIELDS:
        child = children.get(key)
        if child is None:
            arrays[col] = pa.nulls(n, typ)
            continue
        if col == "tags":
            arrays[col] = tags_array(child, source)
            continue
        if child.type != typ:
            try:
                child = child.cast(typ)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise CorruptLogError(f"{source}: field {key} has type {child.type}: {e}", source) from e
        arrays[col] = child
    pv = children.get("partitionValues")
    arrays["partition_values"] = (
        pv if pv is not None else pa.nulls(n)
    )  # null type: unifies with map or struct
    if arrays["path"].null_count:
        raise CorruptLogError(f"{source}: file action without a path", source)
    return pa.table(arrays)


def empty_file_actions() -> pa.Table:
    columns = {"is_add": pa.array([], pa.bool_())}
    for col, _, typ in FILE_ACTION_FIELDS:
        columns[col] = pa.array([], typ)
    columns["partition_values"] = pa.array([], pa.struct([]))
    return pa.table(columns)
