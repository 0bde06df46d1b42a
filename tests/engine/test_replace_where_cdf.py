"""The change data feed of overwrites: replaceWhere on a data column feeds only its real changes.

replaceWhere on a data column rewrites (or, with deletion vectors, marks) files that also hold
rows outside its predicate. With ``delta.enableChangeDataFeed`` on, such a commit writes
``_change_data`` files holding exactly the replaced rows (``delete``) and the new rows
(``insert``), because a reader takes a commit's cdc files, when it has any, as its whole change
set; the surviving rows of a rewritten file are not changes. Overwrites that only remove whole
files (full overwrite, dynamic partitions, a partition-column predicate, a predicate matching
nothing) write no cdc files: the reader's add/remove fallback is already exact for them, and Delta
Spark writes none either.

The expected feeds are written out literally; the Delta Spark tests at the end check that Delta
Spark reads the same feed from deltaplane's table, and that Delta Spark's own replaceWhere (on its
own copy of the table) feeds the same rows.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.staged import commit_write, plan_write, write_files

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
CDF = {"delta.enableChangeDataFeed": "true"}
DV = {**CDF, "delta.enableDeletionVectors": "true"}


def data(*rows) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "region": r, "v": v} for i, r, v in rows], schema=SCHEMA)


def feed(table: DeltaTable, start: int, end: int | None = None) -> list[tuple]:
    """The feed of versions ``start..end`` as sorted (version, change type, id, region, v)."""
    changes = table.changes(start, end if end is not None else start)
    return sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["region"], r["v"]) for r in changes.to_pylist()
    )


def rows_of(table: DeltaTable) -> list[tuple]:
    return sorted((r["id"], r["region"], r["v"]) for r in DeltaTable(table.uri).to_arrow().to_pylist())


def commit_actions(table: DeltaTable, version: int) -> list[dict]:
    log = Path(table.uri) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def cdc_paths(table: DeltaTable, version: int) -> list[str]:
    return [a["cdc"]["path"] for a in commit_actions(table, version) if "cdc" in a]


@pytest.fixture
def one_file(tmp_path):
    """Version 1 holds ids 1-3 in one file."""

    def make(properties=CDF, partition_by=None):
        t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, properties=properties, partition_by=partition_by)
        t.append(data((1, "eu", "a"), (2, "eu", "b"), (3, "eu", "c")))
        return t

    return make


def test_partial_rewrite_feeds_only_the_replaced_rows(one_file):
    t = one_file()
    t.overwrite(data((4, "eu", "d"), (5, "eu", "e")), predicate="id >= 2")
    assert rows_of(t) == [(1, "eu", "a"), (4, "eu", "d"), (5, "eu", "e")]
    assert feed(t, 2) == [
        (2, "delete", 2, "eu", "b"),
        (2, "delete", 3, "eu", "c"),
        (2, "insert", 4, "eu", "d"),
        (2, "insert", 5, "eu", "e"),
    ]
    paths = cdc_paths(t, 2)
    assert paths and all(p.startswith("_change_data/") for p in paths)
    for path in paths:  # the protocol: cdc files are not data changes of the table
        assert (Path(t.uri) / path).exists()
    assert all(a["cdc"]["dataChange"] is False for a in commit_actions(t, 2) if "cdc" in a)


def test_replaced_rows_only_even_when_the_new_rows_reuse_their_ids(one_file):
    t = one_file()
    t.overwrite(data((2, "eu", "B"), (3, "eu", "C")), predicate="id >= 2")
    assert feed(t, 2) == [
        (2, "delete", 2, "eu", "b"),
        (2, "delete", 3, "eu", "c"),
        (2, "insert", 2, "eu", "B"),
        (2, "insert", 3, "eu", "C"),
    ]


def test_fully_and_partly_matching_files_in_one_commit(one_file):
    t = one_file()
    t.append(data((10, "us", "x"), (11, "us", "y")))  # a second file, wholly replaced
    t.append(data((0, "ap", "z")))  # a third, untouched
    t.overwrite(data((20, "eu", "n")), predicate="id >= 3")
    assert rows_of(t) == [(0, "ap", "z"), (1, "eu", "a"), (2, "eu", "b"), (20, "eu", "n")]
    assert feed(t, 4) == [
        (4, "delete", 3, "eu", "c"),
        (4, "delete", 10, "us", "x"),
        (4, "delete", 11, "us", "y"),
        (4, "insert", 20, "eu", "n"),
    ]


@pytest.mark.parametrize("properties", [CDF, DV], ids=["copy-on-write", "deletion-vectors"])
def test_partitioned_table_with_a_data_predicate(one_file, properties):
    t = one_file(properties, partition_by=["region"])
    t.append(data((4, "us", "d"), (5, "us", "e"), (6, "us", "f"), (7, "us", "g")))
    t.overwrite(data((30, "us", "n"), (31, None, "m")), predicate="id >= 7 OR region IS NULL")
    assert rows_of(t) == [
        (1, "eu", "a"), (2, "eu", "b"), (3, "eu", "c"),
        (4, "us", "d"), (5, "us", "e"), (6, "us", "f"),
        (30, "us", "n"), (31, None, "m"),
    ]  # fmt: skip
    assert feed(t, 3) == [
        (3, "delete", 7, "us", "g"),
        (3, "insert", 30, "us", "n"),
        (3, "insert", 31, None, "m"),
    ]


def test_deletion_vectors_mark_the_replaced_rows(one_file):
    t = one_file(DV)
    t.append(data((4, "eu", "d"), (5, "eu", "e"), (6, "eu", "f"), (7, "eu", "g")))
    before = {a["add"]["path"] for a in commit_actions(t, 2) if "add" in a}
    t.overwrite(data((8, "eu", "h")), predicate="id >= 7")
    actions = commit_actions(t, 3)
    # the file stays, with a deletion vector (1 of its 4 rows), as Delta Spark's replaceWhere does
    readded = [a["add"] for a in actions if "add" in a and a["add"]["path"] in before]
    assert len(readded) == 1 and readded[0]["deletionVector"]["cardinality"] == 1
    assert rows_of(t)[-2:] == [(6, "eu", "f"), (8, "eu", "h")]
    assert feed(t, 3) == [(3, "delete", 7, "eu", "g"), (3, "insert", 8, "eu", "h")]


def test_deletion_vectors_then_a_rewrite_of_the_same_file(one_file):
    """A file that already has a DV, replaced past the rewrite threshold: copied, not marked."""
    t = one_file(DV)
    t.append(data((4, "eu", "d"), (5, "eu", "e"), (6, "eu", "f"), (7, "eu", "g")))
    t.overwrite(data((8, "eu", "h")), predicate="id >= 7")  # version 3: a DV on the 4-row file
    t.overwrite(data((9, "eu", "i")), predicate="id >= 5")  # version 4: 3 of its 4 rows gone
    assert rows_of(t) == [(1, "eu", "a"), (2, "eu", "b"), (3, "eu", "c"), (4, "eu", "d"), (9, "eu", "i")]
    assert feed(t, 4) == [
        (4, "delete", 5, "eu", "e"),
        (4, "delete", 6, "eu", "f"),
        (4, "delete", 8, "eu", "h"),
        (4, "insert", 9, "eu", "i"),
    ]


def test_without_the_change_data_feed_nothing_goes_to_change_data(one_file):
    t = one_file({})
    t.overwrite(data((4, "eu", "d")), predicate="id >= 2")
    assert rows_of(t) == [(1, "eu", "a"), (4, "eu", "d")]
    assert cdc_paths(t, 2) == []
    assert not (Path(t.uri) / "_change_data").exists()


def test_a_predicate_matching_nothing_only_inserts(one_file):
    t = one_file()
    t.overwrite(data((100, "eu", "x"), (101, "eu", "y")), predicate="id >= 100")
    assert rows_of(t) == [(1, "eu", "a"), (2, "eu", "b"), (3, "eu", "c"), (100, "eu", "x"), (101, "eu", "y")]
    assert feed(t, 2) == [(2, "insert", 100, "eu", "x"), (2, "insert", 101, "eu", "y")]


def test_replacing_rows_with_nothing_only_deletes(one_file):
    t = one_file()
    t.overwrite(data(), predicate="id = 2")
    assert rows_of(t) == [(1, "eu", "a"), (3, "eu", "c")]
    assert feed(t, 2) == [(2, "delete", 2, "eu", "b")]


def test_partition_predicate_removes_whole_files_without_cdc(one_file):
    t = one_file(partition_by=["region"])
    t.append(data((4, "us", "d")))
    t.overwrite(data((5, "eu", "e")), predicate="region = 'eu'")
    assert cdc_paths(t, 3) == []
    assert feed(t, 3) == [
        (3, "delete", 1, "eu", "a"),
        (3, "delete", 2, "eu", "b"),
        (3, "delete", 3, "eu", "c"),
        (3, "insert", 5, "eu", "e"),
    ]


def test_full_and_dynamic_partition_overwrites_feed_removed_and_new_rows(one_file):
    t = one_file(partition_by=["region"])
    t.append(data((4, "us", "d")))
    t.overwrite(data((5, "us", "e"), (6, "ap", "f")), dynamic_partitions=True)  # version 3
    t.overwrite(data((7, "eu", "g")))  # version 4
    assert cdc_paths(t, 3) == [] and cdc_paths(t, 4) == []
    assert feed(t, 3, 4) == [
        (3, "delete", 4, "us", "d"),
        (3, "insert", 5, "us", "e"),
        (3, "insert", 6, "ap", "f"),
        (4, "delete", 1, "eu", "a"),
        (4, "delete", 2, "eu", "b"),
        (4, "delete", 3, "eu", "c"),
        (4, "delete", 5, "us", "e"),
        (4, "delete", 6, "ap", "f"),
        (4, "insert", 7, "eu", "g"),
    ]


def test_full_overwrite_of_a_table_with_deletion_vectors(one_file):
    t = one_file(DV)
    t.append(data((4, "eu", "d"), (5, "eu", "e"), (6, "eu", "f"), (7, "eu", "g")))
    t.delete("id = 5")  # version 3: a DV
    t.overwrite(data((8, "eu", "h")))  # version 4
    assert feed(t, 4) == [
        (4, "delete", 1, "eu", "a"),
        (4, "delete", 2, "eu", "b"),
        (4, "delete", 3, "eu", "c"),
        (4, "delete", 4, "eu", "d"),
        (4, "delete", 6, "eu", "f"),
        (4, "delete", 7, "eu", "g"),
        (4, "insert", 8, "eu", "h"),
    ]


def test_one_table_object_reused_and_the_feed_read_across_versions(one_file):
    t = one_file()
    t.overwrite(data((4, "eu", "d")), predicate="id >= 3")  # version 2
    t.append(data((5, "us", "e")))  # version 3
    t.overwrite(data((6, "us", "f")), predicate="v >= 'd'")  # version 4: removes two whole files
    t.overwrite(data((7, "eu", "g")), predicate="id >= 7")  # version 5: matches nothing
    t.delete("id = 1")  # version 6
    assert rows_of(t) == [(2, "eu", "b"), (6, "us", "f"), (7, "eu", "g")]
    assert t.version == 6
    streamed = t.load_cdf(starting_version=2).read_all().to_pylist()
    got = sorted((r["_commit_version"], r["_change_type"], r["id"], r["region"], r["v"]) for r in streamed)
    assert got == [
        (2, "delete", 3, "eu", "c"),
        (2, "insert", 4, "eu", "d"),
        (3, "insert", 5, "us", "e"),
        (4, "delete", 4, "eu", "d"),
        (4, "delete", 5, "us", "e"),
        (4, "insert", 6, "us", "f"),
        (5, "insert", 7, "eu", "g"),
        (6, "delete", 1, "eu", "a"),
    ]
    assert feed(t, 2, 6) == got


def test_a_failed_replace_where_commits_nothing_and_the_table_still_works(one_file):
    from deltaplane.engine.errors import ConstraintViolationError

    t = one_file()
    with pytest.raises(ConstraintViolationError, match="do not match"):
        t.overwrite(data((1, "eu", "x")), predicate="id >= 2")
    assert t.version == 1
    t.overwrite(data((2, "eu", "y")), predicate="id >= 2")
    assert feed(t, 2) == [
        (2, "delete", 2, "eu", "b"),
        (2, "delete", 3, "eu", "c"),
        (2, "insert", 2, "eu", "y"),
    ]


def test_column_mapping_and_a_merged_schema(one_file):
    t = one_file({**CDF, "delta.columnMapping.mode": "name"}, partition_by=["region"])
    new = pa.table({"id": [9], "region": ["eu"], "v": ["z"], "w": [1.5]})
    t.overwrite(new, predicate="id >= 3", schema_mode="merge")
    changes = t.changes(2, 2).to_pylist()
    got = sorted((r["_change_type"], r["id"], r["region"], r["v"], r["w"]) for r in changes)
    assert got == [("delete", 3, "eu", "c", None), ("insert", 9, "eu", "z", 1.5)]


def test_staged_replace_where_feeds_only_the_replaced_rows(one_file):
    t = one_file()
    spec = plan_write(t.uri, SCHEMA, mode="overwrite", replace_where="id >= 2")
    commit_write(spec, write_files(spec, data((4, "eu", "d"))))
    assert feed(t, 2) == [
        (2, "delete", 2, "eu", "b"),
        (2, "delete", 3, "eu", "c"),
        (2, "insert", 4, "eu", "d"),
    ]


# --- Delta Spark -----------------------------------------------------------------------------------


def spark_feed(delta_spark, path: str, version: int) -> list[tuple]:
    rows = delta_spark.sql(f"SELECT * FROM table_changes_by_path('{path}', {version}, {version})")
    return sorted((r["_change_type"], r["id"], r["region"], r["v"]) for r in rows)


def engine_feed(path: str, version: int) -> list[tuple]:
    changes = DeltaTable(path).changes(version, version).to_pylist()
    return sorted((r["_change_type"], r["id"], r["region"], r["v"]) for r in changes)


def spark_table(delta_spark, path: str, properties: dict, partitioned: bool) -> None:
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    part = " PARTITIONED BY (region)" if partitioned else ""
    delta_spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, region STRING, v STRING) USING delta{part} "
        f"TBLPROPERTIES ({props})"
    )


def values_sql(rows) -> str:
    def lit(x):
        return "NULL" if x is None else (str(x) if isinstance(x, int) else f"'{x}'")

    return ", ".join(f"(CAST({lit(i)} AS BIGINT), CAST({lit(r)} AS STRING), {lit(v)})" for i, r, v in rows)


FIRST = ((1, "eu", "a"), (2, "eu", "b"), (3, "eu", "c"), (4, "eu", "d"))
SECOND = ((5, "us", "e"), (6, "us", "f"))


@pytest.mark.parametrize(
    ("properties", "partitioned", "predicate", "new", "deleted"),
    [
        (CDF, False, "id >= 2", ((7, "eu", "g"), (8, "us", "h")), (2, 3, 4, 5, 6)),
        (CDF, True, "id >= 4", ((7, "us", "g"),), (4, 5, 6)),
        (DV, False, "id = 2 OR id = 6", ((6, "ap", "i"),), (2, 6)),
        (DV, True, "id >= 4", ((7, "eu", "g"),), (4, 5, 6)),
        (CDF, False, "id >= 100", ((100, "eu", "x"),), ()),
    ],
    ids=["plain", "partitioned", "deletion-vectors", "deletion-vectors-partitioned", "matching-nothing"],
)
def test_delta_spark_reads_the_same_feed_and_writes_the_same_changes(
    delta_spark, properties, partitioned, predicate, new, deleted
):
    expected = sorted(
        [("delete", *r) for r in (*FIRST, *SECOND) if r[0] in deleted] + [("insert", *r) for r in new]
    )
    with tempfile.TemporaryDirectory(prefix="replace-where-cdf-") as root:
        ours, theirs = f"{root}/ours", f"{root}/theirs"
        t = DeltaTable.create(
            ours, SCHEMA, properties=properties, partition_by=["region"] if partitioned else None
        )
        t.append(data(*FIRST))
        t.append(data(*SECOND))
        t.overwrite(data(*new), predicate=predicate)
        spark_table(delta_spark, theirs, properties, partitioned)
        for rows in (FIRST, SECOND):
            delta_spark.sql(f"INSERT INTO delta.`{theirs}` VALUES {values_sql(rows)}")
        delta_spark.sql(
            f"INSERT INTO delta.`{theirs}` REPLACE WHERE {predicate} SELECT * FROM VALUES {values_sql(new)}"
        )
        assert engine_feed(ours, 3) == expected
        assert spark_feed(delta_spark, ours, 3) == expected  # Delta Spark reads our commit so
        assert spark_feed(delta_spark, theirs, 3) == expected  # and its own replaceWhere agrees
        assert engine_feed(theirs, 3) == expected


def test_delta_spark_agrees_on_full_and_dynamic_partition_overwrites(delta_spark):
    with tempfile.TemporaryDirectory(prefix="overwrite-cdf-") as root:
        ours, theirs = f"{root}/ours", f"{root}/theirs"
        t = DeltaTable.create(ours, SCHEMA, properties=DV, partition_by=["region"])
        t.append(data(*FIRST))
        t.append(data(*SECOND))
        t.delete("id = 2")  # version 3: a deletion vector in the eu file
        t.overwrite(data((7, "us", "g"), (8, "ap", "h")), dynamic_partitions=True)  # version 4
        t.overwrite(data((9, "eu", "i")))  # version 5
        spark_table(delta_spark, theirs, DV, True)
        for rows in (FIRST, SECOND):
            delta_spark.sql(f"INSERT INTO delta.`{theirs}` VALUES {values_sql(rows)}")
        delta_spark.sql(f"DELETE FROM delta.`{theirs}` WHERE id = 2")
        delta_spark.write(
            theirs,
            [],
            "",
            mode="overwrite",
            options={"partitionOverwriteMode": "dynamic"},
            query=f"SELECT * FROM VALUES {values_sql(((7, 'us', 'g'), (8, 'ap', 'h')))} AS t(id, region, v)",
        )
        delta_spark.sql(
            f"INSERT OVERWRITE delta.`{theirs}` SELECT * FROM VALUES {values_sql(((9, 'eu', 'i'),))}"
        )
        assert engine_feed(ours, 4) == [
            ("delete", 5, "us", "e"),
            ("delete", 6, "us", "f"),
            ("insert", 7, "us", "g"),
            ("insert", 8, "ap", "h"),
        ]
        assert engine_feed(ours, 5) == [
            ("delete", 1, "eu", "a"),
            ("delete", 3, "eu", "c"),
            ("delete", 4, "eu", "d"),
            ("delete", 7, "us", "g"),
            ("delete", 8, "ap", "h"),
            ("insert", 9, "eu", "i"),
        ]
        for version in (4, 5):
            assert spark_feed(delta_spark, ours, version) == engine_feed(ours, version)
            assert spark_feed(delta_spark, theirs, version) == engine_feed(ours, version)
