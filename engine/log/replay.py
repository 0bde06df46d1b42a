"""Vectorized log replay: from file actions of every source to live files and tombstones.

The rule is the protocol's: a logical file is keyed by (path, deletion-vector unique id), and the
newest action for a key wins; an add that wins is live, a remove that wins is a tombstone. Sources
arrive newest first (commits descending, then the checkpoint), so "newest wins" becomes "first
occurrence wins". Dictionary-encoding the keys numbers them in order of first appearance, so a
row is a first occurrence exactly where the running maximum of the codes increases: one hash pass
and one NumPy scan, no per-file Python.

Paths are compared in canonical form (percent-decoded, ``file:`` scheme and table-root
qualification removed), so an add and a remove that spell the same file differently cancel.
Only paths that need it (containing ``%``, a scheme, or a leading ``/``) go through Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.log.commits import FILE_ACTION_FIELDS, empty_file_actions, pv_string, tags_value
from deltaplane.engine.values_to_arrow import from_numpy, scalar, table_from_columns, to_numpy

_NEEDS_CANONICAL = r"%|^[a-zA-Z][a-zA-Z0-9+.\-]*:|^/"


def canonical_path(path: str, table_root: str) -> str:
    """Decode and de-qualify one path; relative to the table root when it lies under it."""
    if urlsplit(path).scheme and ":" in path.split("/", 1)[0]:
        parts = urlsplit(path)
        if parts.scheme.lower() == "file":
            path = unquote(parts.path)
        else:
            path = f"{parts.scheme}://{parts.netloc}{unquote(parts.path)}"
    else:
        path = unquote(path)
    root = table_root.rstrip("/") + "/"
    if path.startswith(root):
        return path[len(root) :]
    return path


def canonical_paths(paths: pa.Array | pa.ChunkedArray, table_root: str) -> pa.ChunkedArray:
    """``canonical_path`` over a column, touching in Python only the rows that need it."""
    if isinstance(paths, pa.Array):
        paths = pa.chunked_array([paths])
    return pa.chunked_array([_canonical_chunk(chunk, table_root) for chunk in paths.chunks], type=pa.string())


def plain_paths(paths: pa.Array) -> bool:
    """True when no path has ``%`` or ``:`` or starts with ``/``: all are already canonical and
    relative. Checked on the raw bytes with NumPy (string kernels cost ~100 ns a row)."""
    if paths.null_count or not (pa.types.is_string(paths.type) or pa.types.is_large_string(paths.type)):
        return False
    _, offsets_buf, data_buf = paths.buffers()
    if data_buf is None:
        return True  # only empty strings
    width = np.int64 if pa.types.is_large_string(paths.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=width)[paths.offset : paths.offset + len(paths) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
    if np.count_nonzero(data == ord("%")) or np.count_nonzero(data == ord(":")):
        return False
    starts = offsets[:-1] - offsets[0]
    starts = starts[offsets[1:] > offsets[:-1]]  # non-empty strings only
    return not np.count_nonzero(data[starts] == ord("/"))


def _canonical_chunk(paths: pa.Array, table_root: str) -> pa.Array:
    if len(paths) == 0 or plain_paths(paths):
        return paths
    # Cheap substring tests first; a ":" anywhere is a superset of "has a scheme".
    needs = pc.or_(
        pc.or_(pc.match_substring(paths, "%"), pc.match_substring(paths, ":")),
        pc.starts_with(paths, "/"),
    )
    if not pc.any(needs).as_py():
        return paths
    special = paths.filter(needs).to_pylist()
    fixed = pa.array([canonical_path(p, table_root) for p in special], pa.string())
    return pc.replace_with_mask(paths, needs, fixed)


def dv_unique_ids(dv: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``storageType + pathOrInlineDv [+ '@' + offset]`` per row; null where there is no DV."""
    if dv.null_count == len(dv):
        return pa.nulls(len(dv), pa.string())
    base = pc.binary_join_element_wise(
        pc.struct_field(dv, "storageType"), pc.struct_field(dv, "pathOrInlineDv"), ""
    )
    offset = pc.struct_field(dv, "offset")
    with_offset = pc.binary_join_element_wise(base, pc.cast(offset, pa.string()), "@")
    return pc.if_else(pc.is_valid(offset), with_offset, base)


def normalize_partition_values(table: pa.Table, physical_columns: list[str]) -> pa.Table:
    """Reshape ``partition_values`` (an inferred struct or a map) to ``struct<col: string>``."""
    n = table.num_rows
    pv = table.column("partition_values")
    target = pa.struct([(c, pa.string()) for c in physical_columns])
    if pv.type == target:
        return table
    if not physical_columns:
        column = pa.repeat(scalar({}, target), n)
    else:
        children = []
        for name in physical_columns:
            if pa.types.is_map(pv.type):
                child = pc.map_lookup(pv, scalar(name, pa.string()), "first")
            elif pa.types.is_struct(pv.type) and pv.type.get_field_index(name) >= 0:
                child = pc.struct_field(pv, name)
            else:
                child = pa.nulls(n, pa.string())
            if isinstance(child, pa.ChunkedArray):
                child = child.combine_chunks()
            if child.type != pa.string():
                child = child.cast(pa.string())
            children.append(child)
        # A row without partition values (a remove may leave them out) stays null, as the
        # replay of parsed JSON leaves it, not a struct of nulls.
        missing = pv.is_null()
        missing = missing.combine_chunks() if isinstance(missing, pa.ChunkedArray) else missing
        column = pa.StructArray.from_arrays(
            children, fields=list(target), mask=missing if pv.null_count else None
        )
    index = table.schema.get_field_index("partition_values")
    return table.set_column(index, pa.field("partition_values", target), column)


@dataclass(frozen=True)
class ReplayResult:
    live: pa.Table  # one row per live logical file
    tombstones: pa.Table  # removes that are the newest action for their key


_TOMBSTONE_ONLY = ("is_add",)
_MAX_CHUNKS = 256
# Past this many chunks, a table whose chunks average fewer rows than _SMALL_CHUNK_ROWS is
# combined too: each chunk costs every later replay a few NumPy and Arrow calls (about 20 us a
# chunk: 6 ms of each append on a 300-file table that had kept 300 one-row chunks), while
# combining it copies few rows.
_FEW_CHUNKS = 8
_SMALL_CHUNK_ROWS = 4096
_LIVE_DROP = ("is_add", "deletion_timestamp", "extended_file_metadata")


def reconcile(
    commits_newest_first: list[pa.Table], checkpoint: pa.Table | None, table_root: str
) -> ReplayResult:
    """Newest action per (canonical path, DV id) wins; split into live adds and tombstones.

    A checkpoint is already reconciled (each key once), so only the commits after it need
    deduplicating among themselves; a checkpoint row survives unless a commit mentions its key.
    That membership test hashes the (small) commit keys, never the checkpoint's million paths.
    The input list is emptied as it is consumed, so the caller does not keep sources alive.
    """
    tables = [t for t in commits_newest_first if t.num_rows]
    commits_newest_first.clear()
    if checkpoint is not None and checkpoint.num_rows == 0:
        checkpoint = None
    if not tables and checkpoint is None:
        empty = empty_file_actions()
        return ReplayResult(empty.drop_columns(list(_LIVE_DROP)), empty.drop_columns(list(_TOMBSTONE_ONLY)))
    masks = []
    commit_keys = None
    # Keys carry the DV id only if some action has a DV; both sides must use the same form.
    with_dv = any(_has_dv(t) for t in [*tables, *([checkpoint] if checkpoint is not None else [])])
    if tables:
        commits = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
        commit_keys = file_keys(commits, table_root, with_dv=with_dv)
        masks.append(_first_occurrences(commit_keys))
        tables = [commits]
        del commits  # ``tables`` holds it; one owner, so combining chunks below can free as it goes
    if checkpoint is not None:
        keep = np.ones(checkpoint.num_rows, dtype=bool)
        if commit_keys is not None:
            checkpoint_keys = file_keys(checkpoint, table_root, with_dv=with_dv)
            keep = ~to_numpy(pc.is_in(checkpoint_keys, value_set=pc.unique(commit_keys)))
            del checkpoint_keys
        masks.append(keep)
        tables.append(checkpoint)
    del commit_keys
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
    del tables
    table = _in_few_chunks(table)
    first = masks[0] if len(masks) == 1 else np.concatenate(masks)
    is_add = to_numpy(table.column("is_add"))
    if first.all() and is_add.all():
        # Nothing was ever removed or replaced (an append-only log): no copy needed.
        live = table.drop_columns(list(_LIVE_DROP))
        tombstones = table.slice(0, 0).drop_columns(list(_TOMBSTONE_ONLY))
        return ReplayResult(live, tombstones)
    live = table.filter(from_numpy(first & is_add)).drop_columns(list(_LIVE_DROP))
    tombstones = table.filter(from_numpy(first & ~is_add)).drop_columns(list(_TOMBSTONE_ONLY))
    return ReplayResult(live, tombstones)


def _combine_columnwise(table: pa.Table) -> pa.Table:
    """``table.combine_chunks()``, one column at a time, so that only one column is ever held
    twice (a whole-table combine doubles a million-file state for a moment)."""
    schema = table.schema
    columns = list(table.columns)
    del table
    for i in range(len(columns)):
        columns[i] = columns[i].combine_chunks()  # the chunked original goes as it is replaced
    return pa.Table.from_arrays(columns, schema=schema)


def _has_dv(table: pa.Table) -> bool:
    dv = table.column("deletion_vector")
    return dv.null_count != len(dv)


def file_keys(table: pa.Table, table_root: str, *, with_dv: bool | None = None) -> pa.ChunkedArray:
    """The logical-file key of each row: canonical path, plus the DV id (``with_dv``)."""
    keys = canonical_paths(table.column("path"), table_root)
    if with_dv is None:
        with_dv = _has_dv(table)
    if with_dv:
        dv_ids = dv_unique_ids(table.column("deletion_vector"))
        keys = pc.binary_join_element_wise(keys, pc.fill_null(dv_ids, ""), "\x00")
    return keys


def _first_occurrences(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    encoded = pc.dictionary_encode(keys)
    if isinstance(encoded, pa.ChunkedArray):
        chunks = [to_numpy(c.indices) for c in encoded.chunks]
        codes = np.concatenate(chunks) if chunks else np.empty(0, np.int32)
    else:
        codes = to_numpy(encoded.indices)
    del encoded
    first = np.empty(len(codes), dtype=bool)
    if len(codes):
        running = np.maximum.accumulate(codes)
        first[0] = True
        np.greater(running[1:], running[:-1], out=first[1:])
    return first


# --- small logs: replay in Python --------------------------------------------------------------

# Up to this many file actions, replaying parsed JSON in Python beats building, concatenating
# and hashing Arrow tables (the fixed costs of a few kernels per commit).
SMALL_REPLAY_ACTIONS = 2000


def reconcile_rows(
    commits_newest_first: list[tuple[int, list[tuple[str, dict]]]], table_root: str, physical: list[str]
) -> ReplayResult:
    """``reconcile`` for file actions still in their parsed JSON form: the same winners, in the
    same order, and tables of exactly the same shape as the Arrow path produces."""
    rows = [(version, kind, body) for version, actions in commits_newest_first for kind, body in actions]
    with_dv = any(body.get("deletionVector") is not None for _, _, body in rows)
    seen: set[str] = set()
    live, tombstones = [], []
    for version, kind, body in rows:
        path = body["path"]
        key = _canonical(path, table_root)
        if with_dv:
            key += "\x00" + _dv_id(body.get("deletionVector"))
        if key in seen:
            continue
        seen.add(key)
        (live if kind == "add" else tombstones).append((version, body))
    return ReplayResult(
        _rows_table(live, physical, tombstone=False), _rows_table(tombstones, physical, tombstone=True)
    )


def advance_rows(
    live: pa.Table,
    tombstones: pa.Table,
    commits_newest_first: list[tuple[int, list[tuple[str, dict]]]],
    table_root: str,
    physical: list[str],
) -> ReplayResult | None:
    """A replayed state (``live`` and ``tombstones`` as a replay left them) carried over a few
    small commits still in parsed JSON: the commits' own winners first, then the earlier rows
    whose key no commit mentions, as ``reconcile`` with the state as its checkpoint orders them.
    Only the earlier rows whose path a commit names are looked at in Python, so a writer's next
    state costs its own actions, not a re-keying of every file it knows. ``None`` when the shapes
    differ (a state read from a checkpoint with other columns): ``reconcile`` then does it."""
    new = reconcile_rows(commits_newest_first, table_root, physical)
    if not (new.live.schema.equals(live.schema) and new.tombstones.schema.equals(tombstones.schema)):
        return None
    mentioned = {
        (_canonical(body["path"], table_root), _dv_id(body.get("deletionVector")))
        for _, actions in commits_newest_first
        for _, body in actions
    }
    paths = pa.array(sorted({path for path, _ in mentioned}), pa.string())
    return ReplayResult(
        _stacked(new.live, _unmentioned(live, paths, mentioned, table_root)),
        _stacked(new.tombstones, _unmentioned(tombstones, paths, mentioned, table_root)),
    )


def _canonical(path: str, table_root: str) -> str:
    return canonical_path(path, table_root) if ("%" in path or ":" in path or path.startswith("/")) else path


def _unmentioned(table: pa.Table, paths: pa.Array, mentioned: set, table_root: str) -> pa.Table:
    """``table`` less the rows whose (canonical path, DV id) is in ``mentioned``."""
    if not table.num_rows or not len(paths):
        return table
    same_path = pc.is_in(canonical_paths(table.column("path"), table_root), value_set=paths)
    hits = np.flatnonzero(to_numpy(same_path.combine_chunks()))
    if not len(hits):
        return table
    candidates = table.take(pa.array(hits)).select(["path", "deletion_vector"]).to_pylist()
    keep = np.ones(table.num_rows, dtype=bool)
    for row, candidate in zip(hits.tolist(), candidates, strict=True):
        key = (_canonical(candidate["path"], table_root), _dv_id(candidate["deletion_vector"]))
        keep[row] = key not in mentioned
    return table if keep.all() else table.filter(from_numpy(keep))


def _stacked(new: pa.Table, earlier: pa.Table) -> pa.Table:
    """The commits' rows, then the earlier ones; chunks of few rows combined as ``reconcile``
    combines them (each commit would otherwise add one that every later step pays for)."""
    if not new.num_rows:
        return earlier
    return _in_few_chunks(pa.concat_tables([new, earlier]) if earlier.num_rows else new)


def _in_few_chunks(table: pa.Table) -> pa.Table:
    """``table``, combined when it has too many chunks, or many of few rows: incremental updates
    add a chunk per commit, and per-chunk kernels would multiply with them."""
    chunks = max((column.num_chunks for column in table.columns), default=0)  # a whole column: 1
    if chunks > _MAX_CHUNKS or (chunks > _FEW_CHUNKS and table.num_rows < chunks * _SMALL_CHUNK_ROWS):
        return _combine_columnwise(table)
    return table


def _dv_id(dv: dict | None) -> str:
    if not dv:
        return ""
    base = f"{dv.get('storageType', '')}{dv.get('pathOrInlineDv', '')}"
    return base if dv.get("offset") is None else f"{base}@{dv['offset']}"


def _rows_table(rows: list[tuple[int, dict]], physical: list[str], *, tombstone: bool) -> pa.Table:
    columns: dict[str, list] = {}
    types: list[tuple[str, pa.DataType]] = []
    for column, key, typ in FILE_ACTION_FIELDS:
        if not tombstone and column in _LIVE_DROP:
            continue
        values = [body.get(key) for _, body in rows]
        columns[column] = [tags_value(v) for v in values] if column == "tags" else values
        types.append((column, typ))
    columns["partition_values"] = [
        None if (pv := body.get("partitionValues")) is None else {c: pv_string(pv.get(c)) for c in physical}
        for _, body in rows
    ]
    columns["version"] = [version for version, _ in rows]
    types += [("partition_values", pa.struct([(c, pa.string()) for c in physical])), ("version", pa.int64())]
    return table_from_columns(columns, pa.schema(types))
