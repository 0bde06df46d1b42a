"""Statistics are addressed by field path, never by a dotted string.

A top-level column named ``a.b`` beside a struct ``a`` with a field ``b`` (and names with
backticks, spaces and unicode at every nesting level) must each get their own min/max/nullCount
in the log, in the checkpoint's ``stats_parsed``, in file skipping and in row-group skipping.
Every leaf holds a value range no other leaf overlaps, so statistics read under another leaf's
name skip files that hold matching rows: the expected rows come from how the data was built.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table

# Leaf paths; "a.b" beside a.b and "a.in.ner.b" beside a -> in.ner -> b collide when dotted.
LEAVES: tuple[tuple[str, ...], ...] = (
    ("a.b",),
    ("a", "b"),
    ("a", "c.d"),
    ("a", "e`f"),
    ("a", "g h"),
    ("a", "ß"),
    ("a", "in.ner", "b"),
    ("a", "in.ner", "ü v"),
    ("a.in.ner.b",),
    ("sp ace",),
    ("back`tick",),
    ("ünï.cödé",),
)
ROWS = 3


def base(k: int) -> int:
    """Earlier leaves hold larger values (whichever leaf a dotted key would pick, some filter
    then skips files it needs)."""
    return (len(LEAVES) - k) * 1000


def quoted(path: tuple[str, ...]) -> str:
    """Spark SQL's spelling of a field path: each part back-quoted, back-quotes doubled."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in path)


def row(i: int) -> dict:
    """Row ``i`` (1-based): leaf ``k`` holds ``base(k) + i``."""
    out: dict = {"id": i}
    for k, path in enumerate(LEAVES):
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = base(k) + i
    return out


def schema() -> pa.Schema:
    def struct_of(prefix: tuple[str, ...]) -> pa.DataType:
        names: list[str] = []
        for path in LEAVES:
            if path[: len(prefix)] == prefix and len(path) > len(prefix) and path[len(prefix)] not in names:
                names.append(path[len(prefix)])
        fields = []
        for name in names:
            child = (*prefix, name)
            fields.append((name, pa.int64() if child in LEAVES else struct_of(child)))
        return pa.struct(fields)

    return pa.schema([("id", pa.int64()), *[(f.name, f.type) for f in struct_of(())]])


def table_of(rows: list[int]) -> pa.Table:
    return pa.Table.from_pylist([row(i) for i in rows], schema=schema())


def _dig(stats: dict, path: tuple[str, ...]):
    for part in path:
        stats = stats[part]
    return stats


@pytest.fixture
def three_files(tmp_path: Path) -> str:
    """One row per file: rows 1, 2 and 3 in three appends."""
    uri = str(tmp_path / "t")
    for i in range(1, ROWS + 1):
        write_table(uri, table_of([i]), mode="append")
    return uri


def test_each_leaf_has_its_own_statistics_in_the_log(three_files):
    adds = []
    for commit in sorted(Path(three_files, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                adds.append(json.loads(action["add"]["stats"]))
    assert [s["minValues"]["id"] for s in adds] == [1, 2, 3]
    for stats in adds:
        i = stats["minValues"]["id"]
        for k, path in enumerate(LEAVES):
            assert _dig(stats["minValues"], path) == base(k) + i, path
            assert _dig(stats["maxValues"], path) == base(k) + i, path
            assert _dig(stats["nullCount"], path) == 0, path


def _check_filters(uri: str) -> None:
    table = DeltaTable(uri)
    for k, path in enumerate(LEAVES):
        name = quoted(path)
        got = table.to_arrow(filter=f"{name} >= {base(k) + 2}").column("id").to_pylist()
        assert sorted(got) == [2, 3], name
        assert len(table.file_uris(filter=f"{name} >= {base(k) + 2}")) == 2, name
        assert table.to_arrow(filter=f"{name} = {base(k) + 1}").column("id").to_pylist() == [1], name
        assert table.file_uris(filter=f"{name} < {base(k) + 1}") == [], name


def test_filters_skip_by_each_leafs_own_statistics(three_files):
    _check_filters(three_files)


def test_checkpoint_stats_parsed_is_addressed_by_path(tmp_path):
    """Only ``stats_parsed`` in the checkpoint (no JSON stats): skipping reads it by path."""
    uri = str(tmp_path / "t")
    props = {"delta.checkpoint.writeStatsAsJson": "false"}
    write_table(uri, table_of([1]), properties=props)
    for i in range(2, ROWS + 1):
        write_table(uri, table_of([i]), mode="append")
    DeltaTable(uri).create_checkpoint()
    for commit in Path(uri, "_delta_log").glob("*.json"):
        commit.unlink()  # the checkpoint alone describes the table now
    import pyarrow.parquet as pq

    checkpoint = pq.read_table(next(Path(uri, "_delta_log").glob("*.checkpoint.parquet")))
    adds = [a for a in checkpoint.column("add").to_pylist() if a is not None]
    assert all(a.get("stats") is None for a in adds)
    for add in adds:
        i = add["stats_parsed"]["minValues"]["id"]
        for k, path in enumerate(LEAVES):
            assert _dig(add["stats_parsed"]["minValues"], path) == base(k) + i, path
            assert _dig(add["stats_parsed"]["maxValues"], path) == base(k) + i, path
    _check_filters(uri)


def test_delete_by_a_dotted_top_level_name_deletes_its_rows(three_files):
    table = DeltaTable(three_files)
    result = table.delete(f"`a.b` >= {base(0) + 2}")
    assert int(result.operation_metrics["numDeletedRows"]) == 2
    assert DeltaTable(three_files).to_arrow().column("id").to_pylist() == [1]


def test_delete_by_a_struct_field_deletes_its_rows(three_files):
    k = LEAVES.index(("a", "in.ner", "b"))
    result = DeltaTable(three_files).delete(f"a.`in.ner`.b >= {base(k) + 3}")
    assert int(result.operation_metrics["numDeletedRows"]) == 1
    assert sorted(DeltaTable(three_files).to_arrow().column("id").to_pylist()) == [1, 2]


def test_row_groups_are_skipped_by_each_leafs_own_statistics(tmp_path):
    """One file, one row per row group: the Parquet footer's leaves found by path."""
    from deltalake import WriterProperties, write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(uri, table_of([1, 2, 3]), writer_properties=WriterProperties(max_row_group_size=1))
    table = DeltaTable(uri)
    assert len(table.file_uris()) == 1
    for k, path in enumerate(LEAVES):
        if len(path) != 1:
            continue  # row-group statistics serve top-level columns
        scan = table.scan(filter=f"{quoted(path)} >= {base(k) + 3}")
        got = scan.to_table()
        assert got.column("id").to_pylist() == [3], path
        assert scan.metrics.rows_read == 1, path


def test_stats_columns_property_takes_back_quoted_paths(tmp_path):
    """``delta.dataSkippingStatsColumns`` names columns as Spark SQL does: ```a.b``` is the
    top-level column, ``a.`in.ner`.`ü v``` a nested field (commas inside back-quotes too)."""
    uri = str(tmp_path / "t")
    props = {"delta.dataSkippingStatsColumns": "`a.b`, a.`in.ner`.`ü v`"}
    write_table(uri, table_of([1]), properties=props)
    commit = Path(uri, "_delta_log", "00000000000000000000.json").read_text().splitlines()
    stats = next(json.loads(json.loads(line)["add"]["stats"]) for line in commit if '"add"' in line)
    k_top, k_nested = LEAVES.index(("a.b",)), LEAVES.index(("a", "in.ner", "ü v"))
    assert stats["minValues"] == {"a.b": base(k_top) + 1, "a": {"in.ner": {"ü v": base(k_nested) + 1}}}


def test_add_actions_keep_every_leaf(three_files):
    """``get_add_actions(flatten=True)`` names columns as delta-rs does (names joined with dots),
    so ``a.b`` and struct ``a``'s ``b`` both become ``min.a.b``: both columns are there, in
    schema order, as in delta-rs's table; the nested form keeps them apart."""
    import deltalake

    ours = DeltaTable(three_files).get_add_actions(flatten=True).sort_by("path")
    theirs = pa.table(deltalake.DeltaTable(three_files).get_add_actions(flatten=True)).sort_by("path")
    stats = [n for n in theirs.column_names if n.startswith(("min.", "max.", "null_count."))]
    assert [n for n in ours.column_names if n.startswith(("min.", "max.", "null_count."))] == stats
    for i, name in enumerate(ours.column_names):
        if name.startswith(("min.", "max.", "null_count.")):
            occurrence = ours.column_names[:i].count(name)
            j = [k for k, other in enumerate(theirs.column_names) if other == name][occurrence]
            assert ours.column(i).to_pylist() == theirs.column(j).to_pylist(), name
    nested = DeltaTable(three_files).get_add_actions().sort_by("path").column("min").to_pylist()
    assert sorted(row["id"] for row in nested) == [1, 2, 3]
    for stats_row in nested:
        for k, path in enumerate(LEAVES):
            assert _dig(stats_row, path) == base(k) + stats_row["id"], path


def test_a_leaf_sharing_its_dotted_name_with_a_float_keeps_its_statistics(tmp_path):
    """Float columns get no Parquet footer bounds (they leave NaN out), and the writer can only
    name footer columns by dotted path, so the integer ``a.b`` beside the float field ``b`` of
    struct ``a`` has none either: its statistics come from the rows instead."""
    uri = str(tmp_path / "t")
    data = pa.table(
        {
            "a.b": pa.array([100, 300], pa.int64()),
            "a": pa.array([{"b": 1.5}, {"b": float("nan")}], pa.struct([("b", pa.float64())])),
        }
    )
    write_table(uri, data)
    commit = Path(uri, "_delta_log", "00000000000000000000.json").read_text().splitlines()
    stats = next(json.loads(json.loads(line)["add"]["stats"]) for line in commit if '"add"' in line)
    assert stats["minValues"] == {"a.b": 100, "a": {"b": 1.5}}
    assert stats["maxValues"] == {"a.b": 300, "a": {"b": "NaN"}}
    assert stats["nullCount"] == {"a.b": 0, "a": {"b": 0}}
    assert DeltaTable(uri).file_uris(filter="`a.b` >= 200") != []
