"""``read_table``: deltaplane tables through Spark's own Parquet reader (spark_jobs/native.py).

Every read is compared with the engine's ``to_arrow()`` at the same version (rows as multisets,
column names and types), on every table of the conformance corpus, the Delta Spark 4.4 corpus and
tables made here: partition values of every kind (from the paths where they provably agree with
the log, else from the log by a join), deletion vectors, column mapping with renames and drops
(made by Delta Spark), type widening, time travel. The plans are inspected too: columns pruned,
filters pushed into Parquet, files without a deletion vector read with no join.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import (
    DataFileError,
    DeltaError,
    InvalidArgumentError,
    TableNotFoundError,
    UnsupportedOperationError,
    VersionNotFoundError,
)
from deltaplane.spark_jobs import native
from deltaplane.spark_jobs.native import JVM_SETTING, fallback_reasons, plan, read_table
from deltaplane.spark_jobs.types import spark_schema
from tests.conformance.test_golden_tables import _entries, _root
from tests.conftest import conformance_golden
from tests.deltaspark.compare import arrow_rows, sorted_rows
from tests.helpers import assert_same_rows

pytestmark = pytest.mark.xdist_group("spark")

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "delta_spark_44"


def executed(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def is_native(df) -> bool:
    """Read by Spark's Parquet reader, not the deltaplane Python data source."""
    text = executed(df)
    return ("FileScan parquet" in text or "LocalTableScan" in text) and "BatchScan" not in text


@contextlib.contextmanager
def expression_path(spark):
    """Native reads without deltaplane's Spark classes (as under Spark Connect): Spark
    expressions over Spark's Parquet scans of the listed files."""
    spark.conf.set(JVM_SETTING, "false")
    try:
        yield
    finally:
        spark.conf.unset(JVM_SETTING)


@pytest.fixture(params=["jvm", "expressions"])
def read_path(request, spark):
    """Both native paths: deltaplane's Spark classes, and the expressions without them."""
    if request.param == "jvm":
        yield request.param
        return
    with expression_path(spark):
        yield request.param


MISSING = "is missing; it may have been removed by VACUUM"


def assert_reads_as_engine(df, uri: str, version: int | None = None) -> None:
    """The DataFrame holds the engine's rows at ``version``, under the engine's names and types."""
    table = DeltaTable(uri, version=version)
    expected = table.to_arrow()
    want = spark_schema(table.snapshot.schema)
    assert df.schema.names == want.names
    for got_field, want_field in zip(df.schema.fields, want.fields, strict=True):
        assert _without_nullability(got_field.dataType) == _without_nullability(want_field.dataType), (
            got_field.name,
            got_field.dataType,
            want_field.dataType,
        )
    actual = df.toArrow()
    with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        expected = expected.cast(actual.schema)
    assert_same_rows(actual, expected)


def _without_nullability(t):
    from pyspark.sql import types as T

    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _without_nullability(f.dataType), True) for f in t.fields])
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_without_nullability(t.elementType), True)
    if isinstance(t, T.MapType):
        return T.MapType(_without_nullability(t.keyType), _without_nullability(t.valueType), True)
    return t


# --- the corpora -----------------------------------------------------------------------------------


_golden = _entries  # the conformance suite's own listing of the corpus


@pytest.mark.conformance
@pytest.mark.parametrize("entry", _golden())
def test_every_conformance_table_reads_as_the_engine_reads_it(spark, entry, read_path):
    """Refused by the engine means refused here with the engine's error; read by the engine means
    the same rows, through Spark's Parquet reader (no table of the corpus needs the fallback)."""
    conformance_golden()
    uri = _root(entry["name"])
    try:
        table = DeltaTable(uri)
        table.to_arrow()
    except DeltaError as refused:
        if isinstance(refused, DataFileError):  # a file the log names is not there: found by the
            # task that opens it (jvm), or as the engine's error by Spark listing the files
            with pytest.raises(Exception if read_path == "jvm" else DataFileError, match=MISSING):
                read_table(spark, uri).collect()
            return
        with pytest.raises(type(refused)):
            read_table(spark, uri).collect()
        return
    assert entry["kind"] != "must-fail"
    assert fallback_reasons(table.snapshot, spark) == []
    df = read_table(spark, uri)
    assert is_native(df)
    assert_reads_as_engine(df, uri)


@pytest.mark.conformance
def test_the_corpus_exercises_every_mechanism():
    """Partition values from Hive paths and from the lookup join, deletion vectors, column
    mapping: the parametrized test above covers each on Delta Spark's own tables."""
    conformance_golden()
    seen = set()
    names = (
        "dv-with-columnmapping",
        "data-reader-partition-values",
        "basic-decimal-table",
        "data-reader-escaped-chars",
        "dv-partitioned-with-checkpoint",
        "table-with-columnmapping-mode-id",
    )
    for name in names:
        p = plan(DeltaTable(_root(name)).snapshot)
        if p.hive_root is not None:
            seen.add("hive")
        groups = [g for g in (p.plain, p.with_dv) if g is not None and g.lookup is not None]
        if any(f.name in g.lookup.column_names for g in groups for f in p.partition_fields):
            seen.add("lookup")
        if p.with_dv is not None:
            seen.add("dv")
        if p.mode != "none":
            seen.add("mapping")
    assert seen == {"hive", "lookup", "dv", "mapping"}


CORPUS_NAMES = sorted(p.stem for p in CORPUS.glob("*.json"))


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_every_version_of_the_delta_spark_corpus(spark, name, tmp_path):
    """Row tracking, liquid clustering, identity/generated/default columns, and all of them with
    deletion vectors, CDF, column mapping and a v2 checkpoint: every version reads as Delta Spark
    read it when it wrote the table, and as the engine reads it."""
    want = json.loads((CORPUS / f"{name}.json").read_text())
    uri = str(tmp_path / name)
    shutil.copytree(CORPUS / name, uri)  # another test may append to the shared copy
    for version, rows in want["versions"].items():
        df = read_table(spark, uri, version=int(version))
        assert is_native(df), name
        assert sorted_rows(arrow_rows(df.toArrow())) == rows, f"{name} at version {version}"
        assert_reads_as_engine(df, uri, int(version))


# --- partitions -----------------------------------------------------------------------------------

AWKWARD = [
    "plain",
    "with space",
    "100%",
    "a=b",
    "slash/inside",
    "colon:and#hash",
    "ünïcødé 中文",
    "{brace}",
    "[bracket]",
    "star*?",
    "back\\slash",
    "quote'\"",
    "__HIVE_DEFAULT_PARTITION__",
    "01",
    "tab\there",
    "",
    None,
]


@pytest.mark.parametrize("hive", [True, False], ids=["from-paths", "from-the-log"])
def test_string_partition_values_of_every_kind(spark, table_dir, hive, read_path):
    """Spaces, %, =, /, unicode, glob characters, empty strings and nulls: the rows and values are
    the engine's, read through Spark's reader. The Hive null marker as a real value cannot come
    from a path (Spark reads that directory as null): with it the values come from the log."""
    uri = str(table_dir)
    values = [v for v in AWKWARD if v != "__HIVE_DEFAULT_PARTITION__"] if hive else AWKWARD
    data = pa.table({"id": pa.array(range(len(values)), pa.int64()), "p": pa.array(values, pa.string())})
    write_table(uri, data, partition_by=["p"])
    write_table(uri, data, mode="append", partition_by=["p"])
    p = plan(DeltaTable(uri).snapshot)
    assert (p.hive_root is not None) == hive
    df = read_table(spark, uri)
    assert is_native(df)
    assert_reads_as_engine(df, uri)
    assert df.where("p = '100%'").count() == 2
    table = DeltaTable(uri)
    for where in ("p = '__HIVE_DEFAULT_PARTITION__'", "p IS NULL", "p = ''", "p LIKE '%\\%%'"):
        assert df.where(where).count() == table.count(where), where
    assert table.count("p = '__HIVE_DEFAULT_PARTITION__'") == (0 if hive else 2)


def test_typed_partition_values(spark, table_dir, read_path):
    """Dates, timestamps, decimals, booleans, integers and strings, with nulls, several columns."""
    uri = str(table_dir)
    n = 12
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "d": pa.array([dt.date(2024, 1, 1 + i % 3) if i % 4 else None for i in range(n)], pa.date32()),
            "ts": pa.array(
                [
                    dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC) if i % 3 else None
                    for i in range(n)
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "dec": pa.array(
                [decimal.Decimal(f"{i % 2}.25") if i % 5 else None for i in range(n)], pa.decimal128(9, 2)
            ),
            "b": pa.array([i % 2 == 0 if i % 7 else None for i in range(n)], pa.bool_()),
            "i": pa.array([i % 3 - 1 for i in range(n)], pa.int32()),
            "s": pa.array([f"v {i % 2}" for i in range(n)]),
        }
    )
    write_table(uri, data, partition_by=["d", "ts", "dec", "b", "i", "s"])
    p = plan(DeltaTable(uri).snapshot)
    assert p.hive_root is None and p.plain.lookup is not None  # timestamps and decimals: the join
    df = read_table(spark, uri)
    assert is_native(df)
    assert_reads_as_engine(df, uri)
    assert df.where("ts IS NULL").count() == 4
    assert df.where("dec = 1.25").count() == data.to_pandas().query("id % 5 != 0 and id % 2 == 1").shape[0]


def test_hive_partitions_prune_files_and_count_from_footers(spark, table_dir, read_path):
    """Where the paths agree with the log (dates, strings, integers, booleans, nulls), Spark's
    partition discovery supplies the values: a partition filter prunes files, no join."""
    uri = str(table_dir)
    for day in range(3):
        data = pa.table(
            {
                "id": pa.array(range(day * 10, day * 10 + 10), pa.int64()),
                "day": pa.array([dt.date(2024, 1, 1 + day)] * 10, pa.date32()),
                "region": pa.array(["eu west", "us"] * 5),
                "n": pa.array([-(2**40), 7, None, 0, 12] * 2, pa.int64()),
                "small": pa.array([-3, None] * 5, pa.int8()),
                "flag": pa.array([True, False, None, True, True] * 2),
            }
        )
        write_table(uri, data, mode="append", partition_by=["day", "region", "n", "small", "flag"])
    p = plan(DeltaTable(uri).snapshot)
    assert p.hive_root is not None
    df = read_table(spark, uri)
    assert_reads_as_engine(df, uri)
    filtered = df.where("day = DATE'2024-01-02' AND region = 'eu west'")
    text = executed(filtered)
    assert "PartitionFilters: [isnotnull(day" in text and "Join" not in text
    assert filtered.count() == 5
    assert df.where("n IS NULL AND flag IS NULL").count() == DeltaTable(uri).count(
        "n IS NULL AND flag IS NULL"
    )
    assert "Join" not in executed(df.groupBy().count())


def test_zoned_timestamp_partitions_come_from_the_paths(spark, table_dir, read_path):
    """The engine writes timestamp partition values with their zone (``...Z``): Spark's discovery
    reads the same instants whatever the session's time zone, so no join is needed."""
    uri = str(table_dir)
    stamps = [dt.datetime(2024, 3, 10, h, 30, 15, 250000, tzinfo=dt.UTC) for h in (1, 2, 3)] + [None]
    data = pa.table(
        {"id": pa.array(range(4), pa.int64()), "ts": pa.array(stamps, pa.timestamp("us", tz="UTC"))}
    )
    write_table(uri, data, partition_by=["ts"])
    assert plan(DeltaTable(uri).snapshot).hive_root is not None
    previous = spark.conf.get("spark.sql.session.timeZone")
    try:
        spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
        df = read_table(spark, uri)
        assert "Join" not in executed(df)
        assert_reads_as_engine(df, uri)
        assert df.where("ts = TIMESTAMP'2024-03-10 02:30:15.25 UTC'").count() == 1
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


def test_a_path_that_disagrees_with_the_log_is_read_from_the_log(spark, table_dir, read_path):
    """A file whose directory says one value and whose log entry another (a writer that escapes
    differently, a file moved by hand): the log wins, through the lookup join."""
    uri = str(table_dir)
    write_table(uri, pa.table({"id": [1, 2], "p": ["x", "y"]}), partition_by=["p"])
    table = DeltaTable(uri)
    # Re-point the log at a copy of the x file under a directory named for another value.
    source = next(f for f in table.files() if f.startswith("p=x/"))
    os.makedirs(os.path.join(uri, "p=z"))
    shutil.copy(os.path.join(uri, source), os.path.join(uri, "p=z", "copy.parquet"))
    log_dir = os.path.join(uri, "_delta_log")
    version = table.version + 1
    remove = {"remove": {"path": source, "deletionTimestamp": 1, "dataChange": True}}
    add = {
        "add": {
            "path": "p=z/copy.parquet",
            "partitionValues": {"p": "x"},
            "size": os.path.getsize(os.path.join(uri, source)),
            "modificationTime": 1,
            "dataChange": True,
        }
    }
    with open(os.path.join(log_dir, f"{version:020d}.json"), "w") as f:
        f.write(json.dumps(remove) + "\n" + json.dumps(add) + "\n")
    assert plan(DeltaTable(uri).snapshot).hive_root is None
    df = read_table(spark, uri)
    assert_reads_as_engine(df, uri)
    assert sorted(r.p for r in df.collect()) == ["x", "y"]


def test_partition_lookup_by_path_when_sizes_repeat(spark, table_dir, read_path):
    """Files of equal size cannot be told apart by size: the lookup is keyed by path then."""
    uri = str(table_dir)
    for i in range(4):
        data = pa.table(
            {
                "id": pa.array([7], pa.int64()),
                "dec": pa.array([decimal.Decimal(f"{i}.5")], pa.decimal128(5, 1)),
            }
        )
        write_table(uri, data, mode="append", partition_by=["dec"])
    p = plan(DeltaTable(uri).snapshot)
    sizes = DeltaTable(uri).snapshot.files.column("size").to_pylist()
    assert len(set(sizes)) < len(sizes)
    assert p.hive_root is None and not p.plain.key_is_size
    assert_reads_as_engine(read_table(spark, uri), uri)


def read_counting_calls(spark, uri: str, monkeypatch):
    """``read_table(spark, uri)`` and the py4j calls it made."""
    client = spark._sc._gateway._gateway_client
    calls = []
    send = client.send_command
    monkeypatch.setattr(client, "send_command", lambda *a, **k: calls.append(1) or send(*a, **k))
    try:
        return read_table(spark, uri), len(calls)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("mode", ["none", "name"])
def test_a_wide_table_is_projected_in_a_few_calls(spark, tmp_path, monkeypatch, mode):
    """Each column name cost PySpark several py4j calls, twice: 4,000 calls for 200 columns. A
    table of 300 columns with awkward names (files with and without DVs) must take less than a
    call a column more than one with 3."""

    def table(columns: int) -> str:
        uri = str(tmp_path / f"t{columns}")
        names = [f"c{i}" if i % 3 else f"c.{i} `x` ü {i}" for i in range(columns)]
        properties = {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": mode}
        created = DeltaTable.create(uri, pa.schema([(n, pa.int64()) for n in names]), properties=properties)
        for start in (0, 10):
            created.append(pa.table({n: pa.array(range(start, start + 10), pa.int64()) for n in names}))
        DeltaTable(uri).delete("c1 = 3")
        return uri

    narrow, wide = table(3), table(300)
    read_counting_calls(spark, narrow, monkeypatch)  # the first read of a shape warms PySpark up
    _, few = read_counting_calls(spark, narrow, monkeypatch)
    df, calls = read_counting_calls(spark, wide, monkeypatch)
    assert calls < few + 300, (few, calls)  # under one call a column (py4j's own clean-up varies)
    assert is_native(df)
    assert_reads_as_engine(df, wide)


def test_the_file_list_reaches_spark_in_a_few_calls(spark, table_dir, monkeypatch):
    """py4j makes a call per element of a Python list it converts: a table's file list must not
    cost a round trip per file (1 s of a 10,000-file read's 2 s of planning)."""
    uri = str(table_dir)
    n = 1500
    names = [f"k {i}'\\,\" 😀" for i in range(n)]
    data = pa.table({"id": pa.array(range(n), pa.int64()), "p": pa.array(names)})
    write_table(uri, data, partition_by=["p"])
    df, calls = read_counting_calls(spark, uri, monkeypatch)
    assert calls < 300, calls
    assert is_native(df) and df.count() == n
    assert sorted(r.p for r in df.where("id < 3").collect()) == names[:3]


def test_a_table_root_with_awkward_characters(spark, tmp_path, read_path):
    uri = str(tmp_path / "a dir % = ü [x]" / "t{1}")
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": ["a b", "c%d", None]})
    write_table(uri, data, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    DeltaTable(uri).delete("id = 2")
    df = read_table(spark, uri)
    assert is_native(df)
    assert_reads_as_engine(df, uri)
    assert sorted(df.toArrow().column("id").to_pylist()) == [1, 3]


def test_spark_file_path_is_hadoops_spelling(spark):
    """The lookup's path keys are computed in Python; Hadoop's own Path must spell them alike."""
    jvm = spark._jvm
    samples = [
        "".join(chr(c) for c in range(32, 127)),
        "\t\x01\x7f",
        "ünï 中文 é",
        "\u00a0nbsp\u2028ls",
        "emoji 😀",
    ]
    for text in samples:
        location = "file:/tmp/" + text.replace("/", "_")
        assert native.spark_file_path(location) == jvm.org.apache.hadoop.fs.Path(location).toUri().toString()
    s3 = "s3a://bucket/dir with space/p=a%b/x.parquet"
    assert native.spark_file_path(s3) == jvm.org.apache.hadoop.fs.Path(s3).toUri().toString()


# --- deletion vectors ---------------------------------------------------------------------------------


def dv_table(uri: str, files: int = 4, rows: int = 1000) -> DeltaTable:
    for f in range(files):
        ids = pa.array(range(f * rows, (f + 1) * rows), pa.int64())
        write_table(
            uri,
            pa.table({"id": ids, "v": pa.array([f"r{i}" for i in ids.to_pylist()])}),
            mode="append",
            properties={"delta.enableDeletionVectors": "true"} if f == 0 else None,
        )
    return DeltaTable(uri)


@pytest.fixture(params=["jvm", "cases", "join"])
def dv_lookup(request, spark, monkeypatch):
    """Every way a file's deleted rows are found: deltaplane's Parquet format marks them as it
    decodes; without it, a CASE over a few files' sizes or a broadcast join over more gives each
    row its file's bitmap."""
    if request.param == "jvm":
        yield request.param
        return
    monkeypatch.setattr(native, "_CASE_FILES", 32 if request.param == "cases" else -1)
    with expression_path(spark):
        yield request.param


@pytest.fixture(params=["cases", "join"])
def expression_lookup(request, spark, monkeypatch):
    """The two expression paths of ``dv_lookup`` alone."""
    monkeypatch.setattr(native, "_CASE_FILES", 32 if request.param == "cases" else -1)
    with expression_path(spark):
        yield request.param


def test_deletion_vectors_several_deletes_on_one_file(spark, table_dir, dv_lookup):
    uri = str(table_dir)
    table = dv_table(uri)
    table.delete("id % 7 = 0 AND id < 1000")  # file 0
    table.delete("id % 11 = 0 AND id < 2000")  # files 0 and 1: file 0's DV grows
    table.delete("id = 999 OR id = 0")  # the last row of file 0 (the bitmap's last word)
    table.delete("id BETWEEN 1500 AND 1999")
    df = read_table(spark, uri)
    assert is_native(df)
    assert_reads_as_engine(df, uri)
    assert df.count() == DeltaTable(uri).count()
    assert df.where("id >= 1000 AND id < 2000").count() == DeltaTable(uri).count("id >= 1000 AND id < 2000")


def test_every_file_with_its_own_deletion_vector(spark, table_dir, dv_lookup):
    """Each DV file's rows are tested against its own slice of the shared bitmap."""
    uri = str(table_dir)
    dv_table(uri, files=4, rows=1000).delete("id % 13 = 5 OR id IN (999, 1000, 2047, 3999)")
    p = plan(DeltaTable(uri).snapshot)
    assert len(p.with_dv.paths) == 4 and p.with_dv.lookup.column(native.ORDINAL).to_pylist() == [0, 1, 2, 3]
    assert [len(words) for words in p.bitmap.to_pylist()] == [16, 16, 16, 16]  # rows 999, 1999...
    df = read_table(spark, uri)
    assert is_native(df)
    expected = [i for i in range(4000) if i % 13 != 5 and i not in (999, 1000, 2047, 3999)]
    assert sorted(df.toArrow().column("id").to_pylist()) == expected
    assert df.count() == len(expected)


def test_deletion_vectors_beyond_the_bitmap_limit_fall_back(spark, table_dir, monkeypatch):
    uri = str(table_dir)
    table = dv_table(uri, files=2, rows=1000)
    table.delete("id = 999 OR id = 1500")
    monkeypatch.setattr(native, "MAX_BITMAP_WORDS", 20)  # 16 + 8 words needed
    reasons = plan(DeltaTable(uri).snapshot).reasons
    assert len(reasons) == 1 and "1,536 row positions" in reasons[0]
    with expression_path(spark):
        df = read_table(spark, uri)
        assert not is_native(df)
        assert_reads_as_engine(df, uri)
    df = read_table(spark, uri)  # the JVM's bitmaps are per file, compressed, and have no limit
    assert is_native(df)
    assert_reads_as_engine(df, uri)


def test_files_without_a_deletion_vector_get_no_join(spark, table_dir, expression_lookup):
    uri = str(table_dir)
    table = dv_table(uri)
    table.delete("id < 10")  # only the first file gets a DV
    p = plan(DeltaTable(uri).snapshot)
    assert len(p.plain.paths) == 3 and len(p.with_dv.paths) == 1 and p.plain.lookup is None
    text = executed(read_table(spark, uri).select("id"))
    scans = [line for line in text.splitlines() if "FileScan parquet" in line]
    assert len(scans) == 2 and text.count("BroadcastHashJoin") == (1 if expression_lookup == "join" else 0)
    plain = next(s for s in scans if "InMemoryFileIndex(3 paths)" in s)
    assert "row_index" not in plain and "file_size" not in plain
    dv = next(s for s in scans if "InMemoryFileIndex(1 paths)" in s)
    assert "row_index" in dv
    # no DV at all: no join anywhere
    other = str(table_dir) + "-plain"
    dv_table(other, files=2)
    assert "Join" not in executed(read_table(spark, other).select("id"))


def test_a_file_deleted_entirely_and_a_table_deleted_entirely(spark, table_dir, dv_lookup):
    uri = str(table_dir)
    table = dv_table(uri, files=2, rows=10)
    table.delete("id < 10")
    table.delete("id = 15")
    assert_reads_as_engine(read_table(spark, uri), uri)
    table.delete("id >= 0")
    df = read_table(spark, uri)
    assert df.count() == 0
    assert_reads_as_engine(df, uri)


READERS = {
    "vectorized": {},
    # whole-stage code generation off: the vectorized reader hands over rows of its batches
    "batch-rows": {"spark.sql.codegen.wholeStage": "false"},
    "row-based": {"spark.sql.parquet.enableVectorizedReader": "false"},
}


@pytest.mark.parametrize("reader", list(READERS))
def test_both_of_sparks_parquet_readers_give_the_row_index(spark, table_dir, dv_lookup, reader):
    """The position of each row comes from Spark's reader filling ``_tmp_metadata_row_index``:
    its vectorized reader (as batches, or as rows of them) and its row-based one (used for wide
    or some nested schemas) all do, with a nested column and files of several row groups."""
    uri = str(table_dir)
    n = 300_000  # three row groups of the writer's 131,072 rows
    ids = pa.array(range(n), pa.int64())
    nested = pa.StructArray.from_arrays([ids, pc.cast(ids, pa.string())], ["x", "y"])
    write_table(uri, pa.table({"id": ids, "n": nested}), properties={"delta.enableDeletionVectors": "true"})
    write_table(uri, pa.table({"id": ids[:10], "n": nested[:10]}), mode="append")
    edges = (0, 131071, 131072, 262143, 262144, n - 1)
    DeltaTable(uri).delete(f"id % 7 = 3 OR id IN {edges}")
    files = DeltaTable(uri).file_uris()
    assert max(pq.ParquetFile(f.removeprefix("file://")).num_row_groups for f in files) == 3
    previous = {key: spark.conf.get(key, None) for key in READERS[reader]}
    for key, value in READERS[reader].items():
        spark.conf.set(key, value)
    try:
        df = read_table(spark, uri)
        assert is_native(df)
        assert_reads_as_engine(df, uri)
        assert df.count() == DeltaTable(uri).count()
        window = "id >= 131000 AND id < 131200"
        assert df.where(window.replace("id", "n.x")).count() == DeltaTable(uri).count(window)
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def test_a_reader_that_gives_no_row_index_stops_the_query(spark, table_dir, expression_lookup, monkeypatch):
    """Should a Spark stop filling the row-index column, its rows read as null: the query fails
    instead of deciding on a null position (which would drop every row of a DV file)."""
    uri = str(table_dir)
    dv_table(uri, files=2, rows=100).delete("id = 5")
    monkeypatch.setattr(native, "ROW_INDEX", "_a_column_no_reader_fills")
    df = read_table(spark, uri)
    with pytest.raises(Exception, match="gave no row index"):
        df.count()


@pytest.mark.parametrize(
    "name, why",
    [
        ("_tmp_metadata_row_index", "reserves for row indexes"),
        ("_TMP_metadata_ROW_index", "reserves for row indexes"),
        ("_metadata", "hides the file metadata"),
        ("_Metadata", "hides the file metadata"),
    ],
)
def test_a_column_named_like_sparks_own_is_read_by_the_data_source(spark, table_dir, name, why):
    """Spark's reader fills the row-index column itself, and a ``_metadata`` column hides the
    file metadata the expression path reads (Spark's error, or a wrong lookup, on a table with
    DVs). deltaplane's Spark classes need no ``_metadata``, so read such a table natively."""
    uri = str(table_dir)
    data = pa.table({"id": pa.array(range(10), pa.int64()), name: pa.array(range(10, 20), pa.int64())})
    write_table(uri, data, properties={"delta.enableDeletionVectors": "true"})
    write_table(uri, data, mode="append")
    DeltaTable(uri).delete("id % 3 = 0")
    reasons = fallback_reasons(DeltaTable(uri).snapshot)
    assert any(why in r for r in reasons), reasons
    expected = sorted(2 * [v for v in range(10, 20) if v % 3 != 1])
    with expression_path(spark):
        df = read_table(spark, uri)
        assert not is_native(df)
        assert sorted(r[name] for r in df.collect()) == expected
    on_jvm = name.lower() == "_metadata"
    assert (fallback_reasons(DeltaTable(uri).snapshot, jvm=True) == []) == on_jvm
    df = read_table(spark, uri)
    assert is_native(df) == on_jvm
    assert sorted(r[name] for r in df.collect()) == expected


def test_filters_reach_the_parquet_reader_of_deletion_vector_files(spark, table_dir, dv_lookup):
    """The deleted-row test must not stand between a user's filter and Spark's Parquet reader: the
    filter is pushed into the scan of the files with DVs too (row groups skipped)."""
    uri = str(table_dir)
    dv_table(uri, files=2, rows=100).delete("id % 10 = 0")
    text = executed(read_table(spark, uri).where("id = 15").select("v"))
    scans = [line for line in text.splitlines() if "FileScan parquet" in line]
    assert len(scans) == 1 and "EqualTo(id,15)" in scans[0], scans
    assert read_table(spark, uri).where("id = 15").select("v").collect()[0].v == "r15"


def test_deletion_vectors_with_partitions_from_the_log(spark, table_dir, read_path):
    uri = str(table_dir)
    data = pa.table(
        {
            "id": pa.array(range(40), pa.int64()),
            "dec": pa.array([decimal.Decimal(i % 2) / 4 for i in range(40)], pa.decimal128(6, 2)),
        }
    )
    write_table(uri, data, partition_by=["dec"], properties={"delta.enableDeletionVectors": "true"})
    DeltaTable(uri).delete("id % 3 = 0")
    p = plan(DeltaTable(uri).snapshot)
    assert p.with_dv is not None and p.hive_root is None and "dec" in p.with_dv.lookup.column_names
    assert_reads_as_engine(read_table(spark, uri), uri)


# --- column mapping, type widening (Delta Spark makes the tables) -------------------------------------


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_with_renamed_and_dropped_columns(spark, delta_spark, tmp_path, mode):
    """Renames (top level and nested), a drop, a re-added name: Spark reads physical names and the
    plan renames them; the old column's data stays hidden; old files lack the new column."""
    uri = str(tmp_path / f"cm_{mode}")
    t = f"delta.`{uri}`"
    delta_spark.sql(
        f"CREATE TABLE {t} (id BIGINT, a STRING, s STRUCT<x: INT, y: STRING>, part STRING) USING delta "
        f"PARTITIONED BY (part) TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}', "
        "'delta.enableDeletionVectors' = 'true')"
    )
    delta_spark.sql(
        f"INSERT INTO {t} VALUES (1, 'a1', named_struct('x', 1, 'y', 'y1'), 'p 1'), "
        "(2, 'a2', named_struct('x', 2, 'y', 'y2'), 'p 2')"
    )
    delta_spark.sql(f"ALTER TABLE {t} RENAME COLUMN a TO b")
    delta_spark.sql(f"ALTER TABLE {t} RENAME COLUMN s.x TO z")
    delta_spark.sql(f"ALTER TABLE {t} DROP COLUMN s.y")
    delta_spark.sql(f"ALTER TABLE {t} ADD COLUMNS (a STRING, s.w STRING)")
    delta_spark.sql(f"INSERT INTO {t} VALUES (3, 'b3', named_struct('z', 3, 'w', 'w3'), 'p 1', 'new a')")
    delta_spark.sql(f"DELETE FROM {t} WHERE id = 2")
    df = read_table(spark, uri)
    assert is_native(df)
    assert_reads_as_engine(df, uri)
    assert sorted_rows(arrow_rows(df.toArrow())) == sorted_rows(delta_spark.rows(uri))
    assert {r.a for r in df.collect()} == {None, "new a"}


def test_type_widening(spark, delta_spark, tmp_path):
    """Files written before a widening (int -> long, float -> double, decimal, date -> timestamp_ntz)
    are read at the table's types."""
    uri = str(tmp_path / "widened")
    t = f"delta.`{uri}`"
    delta_spark.sql(
        f"CREATE TABLE {t} (i INT, f FLOAT, d DECIMAL(5, 2), day DATE, s STRUCT<n: SHORT>) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.feature.timestampNtz' = 'supported')"
    )
    delta_spark.sql(f"INSERT INTO {t} VALUES (1, 1.5, 1.25, DATE'2024-01-02', named_struct('n', 3))")
    delta_spark.sql(f"ALTER TABLE {t} CHANGE COLUMN i TYPE BIGINT")
    delta_spark.sql(f"ALTER TABLE {t} CHANGE COLUMN f TYPE DOUBLE")
    delta_spark.sql(f"ALTER TABLE {t} CHANGE COLUMN d TYPE DECIMAL(10, 4)")
    delta_spark.sql(f"ALTER TABLE {t} CHANGE COLUMN day TYPE TIMESTAMP_NTZ")
    delta_spark.sql(f"ALTER TABLE {t} CHANGE COLUMN s.n TYPE INT")
    delta_spark.sql(
        f"INSERT INTO {t} VALUES (4294967296, 2.5, 123456.1234, TIMESTAMP_NTZ'2024-01-03 04:05:06', "
        "named_struct('n', 70000))"
    )
    df = read_table(spark, uri)
    assert is_native(df)
    assert_reads_as_engine(df, uri)
    assert sorted_rows(arrow_rows(df.toArrow())) == sorted_rows(delta_spark.rows(uri))


def test_type_widening_written_by_the_engine(spark, table_dir):
    uri = str(table_dir)
    table = DeltaTable.create(
        uri, pa.schema([("n", pa.int32())]), properties={"delta.enableTypeWidening": "true"}
    )
    table.append(pa.table({"n": pa.array([1], pa.int32())}))
    table.append(pa.table({"n": pa.array([2**40], pa.int64())}), schema_mode="merge")
    df = read_table(spark, uri)
    assert_reads_as_engine(df, uri)
    assert sorted(df.toArrow().column("n").to_pylist()) == [1, 2**40]


# --- versions, pinning, reuse -------------------------------------------------------------------------


def test_time_travel_by_version_and_timestamp(spark, table_dir):
    uri = str(table_dir)
    table = dv_table(uri, files=2, rows=10)
    table.delete("id < 5")
    stamp = table.history(1)[0]["timestamp"]
    table.append(pa.table({"id": pa.array([100], pa.int64()), "v": ["new"]}))
    assert_reads_as_engine(read_table(spark, uri, version=1), uri, 1)
    assert read_table(spark, uri, version=1).count() == 20
    when = dt.datetime.fromtimestamp(stamp / 1000, dt.UTC)
    assert read_table(spark, uri, timestamp=when).count() == 15
    assert read_table(spark, uri).count() == 16


def test_the_dataframe_is_pinned_to_the_version_it_was_planned_at(spark, table_dir):
    """Two actions with commits in between, a self-join, a filtered then unfiltered action: all
    read the version planned at the call, not what was committed since."""
    uri = str(table_dir)
    table = dv_table(uri, files=2, rows=100)
    df = read_table(spark, uri)
    first = sorted(df.toArrow().column("id").to_pylist())
    assert len(first) == 200
    table.append(pa.table({"id": pa.array([1000], pa.int64()), "v": ["late"]}))
    table.delete("id < 50")  # new deletion vector on an old file
    table.optimize.compact()  # rewrites every file
    assert DeltaTable(uri).count() == 151
    assert df.where("id < 10").count() == 10
    assert sorted(df.toArrow().column("id").to_pylist()) == first
    assert df.count() == 200
    pairs = df.alias("l").join(df.alias("r"), F.col("l.id") == F.col("r.id"))
    assert pairs.count() == 200
    assert read_table(spark, uri).count() == 151  # a new call plans the new version


def test_a_data_file_replaced_behind_the_logs_back_stops_the_read(spark, table_dir, dv_lookup):
    """The lookup finds each row's file by its size: a file rewritten outside Delta (now of
    another size) is an error, never rows silently lost."""
    import pyarrow.parquet as pq

    uri = str(table_dir)
    table = dv_table(uri, files=2, rows=10)
    table.delete("id = 3")
    assert plan(DeltaTable(uri).snapshot).with_dv.key_is_size
    for path in DeltaTable(uri).file_uris():
        original = pq.read_table(path)
        pq.write_table(original.append_column("extra", pa.array([1] * original.num_rows)), path)
    df = read_table(spark, uri)
    with pytest.raises(Exception, match="the file changed after it was committed"):
        df.collect()


def test_a_vacuumed_file_is_the_engines_error(spark, table_dir):
    uri = str(table_dir)
    dv_table(uri, files=2, rows=10)
    victim = DeltaTable(uri).file_uris()[0]
    os.remove(victim)
    with pytest.raises(DataFileError, match="is missing"):
        DeltaTable(uri).to_arrow()
    with expression_path(spark), pytest.raises(DataFileError, match=MISSING) as caught:
        read_table(spark, uri)  # Spark lists the files it is given
    assert "version 1" in str(caught.value)
    df = read_table(spark, uri)  # the log's file index lists nothing: the task that opens it
    with pytest.raises(Exception, match=MISSING) as caught:
        df.collect()
    assert "(version 1)" in str(caught.value) and os.path.basename(victim) in str(caught.value)
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")  # a committed file is never skipped
    try:
        with pytest.raises(Exception, match=MISSING):
            df.collect()
    finally:
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")


# --- the plan Spark runs ----------------------------------------------------------------------------------


def test_columns_are_pruned_and_filters_pushed(spark, table_dir):
    uri = str(table_dir)
    data = pa.table(
        {"a": pa.array(range(100), pa.int64()), "b": pa.array(["x"] * 100), "c": pa.array([1.5] * 100)}
    )
    write_table(uri, data)
    df = read_table(spark, uri)
    text = executed(df.select("a"))
    assert "ReadSchema: struct<a:bigint>" in text
    text = executed(df.where("a = 5").select("b"))
    assert "PushedFilters: [IsNotNull(a), EqualTo(a,5)]" in text
    assert "ReadSchema: struct<a:bigint,b:string>" in text
    assert df.where("a = 5").select("b").collect()[0].b == "x"


def test_column_mapping_prunes_by_physical_name(spark, table_dir):
    uri = str(table_dir)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    table = DeltaTable.create(uri, schema, properties={"delta.columnMapping.mode": "name"})
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    physical = table.snapshot.schema["name"].physical_name
    assert physical != "name"
    df = read_table(spark, uri)
    text = executed(df.where("name = 'b'").select("name"))
    assert (
        f"ReadSchema: struct<`{physical}`:string>" in text or f"ReadSchema: struct<{physical}:string>" in text
    )
    assert f"EqualTo(`{physical[:20]}" in text  # the plan string cuts long names
    assert [r.name for r in df.where("name = 'b'").collect()] == ["b"]


# --- errors and the fallback -------------------------------------------------------------------------------


def test_bad_input_raises_the_engines_errors(spark, table_dir, tmp_path):
    uri = str(table_dir)
    dv_table(uri, files=1, rows=5)
    with pytest.raises(TableNotFoundError):
        read_table(spark, str(tmp_path / "nothing here"))
    with pytest.raises(VersionNotFoundError):
        read_table(spark, uri, version=99)
    with pytest.raises(InvalidArgumentError):
        read_table(spark, uri, version=0, timestamp="2024-01-01")
    with pytest.raises(InvalidArgumentError):
        read_table(spark, uri, version=-1)


def test_native_false_forces_the_data_source(spark, table_dir):
    uri = str(table_dir)
    table = dv_table(uri, files=2, rows=10)
    table.delete("id < 3")
    df = read_table(spark, uri, native=False)
    assert not is_native(df)
    table.append(pa.table({"id": pa.array([99], pa.int64()), "v": ["late"]}))
    assert df.count() == 17  # the data source is pinned to the same version too
    assert_reads_as_engine(df, uri, 2)


def test_variant_tables_fall_back_to_the_data_source(spark, tmp_path, caplog):
    """Shredded variants are rebuilt by the engine's reader, which Spark's cannot do: the data
    source reads them, pinned to the same version, and the log says why."""
    from tests.engine.test_variant_shredding import FIXTURES, table_around

    uri = str(table_around(tmp_path, FIXTURES / "longs.shredded.parquet"))
    reasons = fallback_reasons(DeltaTable(uri).snapshot, spark)
    assert len(reasons) == 1 and "variant" in reasons[0]
    with caplog.at_level("INFO", logger="deltaplane.spark_jobs.native"):
        df = read_table(spark, uri)
    assert "through the deltaplane data source" in caplog.text and "variant" in caplog.text
    assert not is_native(df)
    assert df.count() == DeltaTable(uri).to_arrow().num_rows
    with pytest.raises(UnsupportedOperationError, match="variant"):
        read_table(spark, uri, native=True)


def test_files_spark_would_skip_as_hidden_fall_back(spark, tmp_path):
    """Spark's file index silently drops files named ``_...`` or ``.``...: without deltaplane's
    Spark classes such a table is read by the data source instead, with every row; with them
    (whose file index is the log) natively."""
    from deltaplane.engine.storage import LocalStore
    from tests.logbuilder import add, commit_info, metadata, protocol, write_commit, write_parquet

    root = tmp_path / "hidden"
    root.mkdir()
    store = LocalStore(str(root))
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    sizes = {
        name: write_parquet(store, name, pa.table({"id": pa.array([i], pa.int64())}))
        for i, name in enumerate(["_underscore.parquet", "visible.parquet"])
    }
    write_commit(
        store,
        0,
        [
            commit_info(),
            protocol(),
            metadata(schema),
            *(add(name, size=size) for name, size in sizes.items()),
        ],
    )
    reasons = fallback_reasons(DeltaTable(str(root)).snapshot, spark)
    assert len(reasons) == 1 and "_underscore.parquet" in reasons[0]
    with expression_path(spark):
        df = read_table(spark, str(root))
        assert not is_native(df)
        assert sorted(r.id for r in df.collect()) == [0, 1]
    df = read_table(spark, str(root))
    assert is_native(df)
    assert sorted(r.id for r in df.collect()) == [0, 1]


def test_s3_without_s3a_reads_through_the_data_source(spark, s3_server):
    """Spark's wheel has no S3A filesystem (hadoop-aws and its 686 MB AWS SDK bundle are not
    installed): an S3 table is read by the data source, through the engine's own S3 store, at the
    planned version."""
    uri = s3_server.uri()
    options = s3_server.options()
    write_table(uri, pa.table({"id": pa.array(range(10), pa.int64())}), storage_options=options)
    table = DeltaTable(uri, storage_options=options)
    reasons = fallback_reasons(table.snapshot, spark)
    assert len(reasons) == 1 and "S3A" in reasons[0] and "hadoop-aws" in reasons[0]
    df = read_table(spark, uri, storage_options=options)
    assert not is_native(df)
    write_table(uri, pa.table({"id": pa.array([99], pa.int64())}), mode="append", storage_options=options)
    assert sorted(r.id for r in df.collect()) == list(range(10))
    with pytest.raises(UnsupportedOperationError, match="hadoop-aws"):
        read_table(spark, uri, storage_options=options, native=True)


def test_s3_storage_options_become_s3a_settings():
    settings = native.s3a_options(
        {"endpoint_url": "http://127.0.0.1:8333", "AWS_ACCESS_KEY_ID": "k", "aws_secret_access_key": "s"}
    )
    assert settings == {
        "fs.s3a.endpoint": "http://127.0.0.1:8333",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": "k",
        "fs.s3a.secret.key": "s",
    }
    assert native.hadoop_location("s3://bucket/t", "p=1/a b.parquet") == "s3a://bucket/t/p=1/a b.parquet"
