"""deltaplane's Spark classes (``spark_jobs/java``, ``jar``, ``native_jvm``): the log as Spark's
file index and a Parquet format that marks deleted rows while it decodes.

Every read is compared with the engine at the same version. The plan is inspected (one scan, no
join, partition filters given to the index) and the index is shown to prune by deleting the
files a filter must not open: a read that opened them would fail.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.spark_jobs import jar
from deltaplane.spark_jobs.native import read_table
from deltaplane.spark_jobs.submit import submit_settings
from tests.spark.test_native_read import assert_reads_as_engine, dv_table, executed, is_native

pytestmark = pytest.mark.xdist_group("spark")

ROOT = Path(__file__).resolve().parents[2]


def test_the_sessions_the_project_starts_carry_the_classes(spark):
    """``get_spark`` puts the jar on the classpath: without it every read here would silently
    take the expression path (a machine without javac fails this test rather than skip it)."""
    built = jar.path()
    assert built is not None and built.is_file()
    assert str(built) in spark.conf.get("spark.jars").split(",")
    assert jar.loaded(spark)


def test_the_plan_is_one_scan_of_the_logs_files(spark, table_dir):
    """Partition values from the log (typed, with awkward names) and deletion vectors: one Parquet
    scan, no join, no file metadata column, the log's file index."""
    uri = str(table_dir)
    n = 60
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "p.x `y` ü": pa.array([dt.datetime(2024, 1, 1 + i % 3, tzinfo=dt.UTC) for i in range(n)]),
            "v": pa.array([f"r{i}" for i in range(n)]),
        }
    )
    write_table(uri, data, partition_by=["p.x `y` ü"], properties={"delta.enableDeletionVectors": "true"})
    DeltaTable(uri).delete("id % 4 = 1")
    df = read_table(spark, uri)
    text = executed(df)
    assert text.count("FileScan parquet") == 1 and "LogFileIndex" in text, text
    assert "Parquet (deletion vectors applied)" in text
    assert "Join" not in text and "_metadata" not in text and "Union" not in text
    assert_reads_as_engine(df, uri)
    assert df.count() == 45
    # the same DataFrame again, after other work on the session
    read_table(spark, uri).where("id < 5").collect()
    assert df.count() == 45 and sorted(r.id for r in df.where("id < 6").collect()) == [0, 2, 3, 4]


PARTITION_VALUES = {
    "date": (pa.date32(), [dt.date(2024, 2, 29), dt.date(1900, 1, 1), None]),
    "timestamp": (
        pa.timestamp("us", tz="UTC"),
        [
            dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC),
            dt.datetime(1960, 1, 1, tzinfo=dt.UTC),
            None,
        ],
    ),
    "timestamp_ntz": (
        pa.timestamp("us"),
        [dt.datetime(2024, 5, 6, 7, 8, 9, 1), dt.datetime(1999, 12, 31), None],
    ),
    "decimal": (pa.decimal128(12, 3), [decimal.Decimal("-1.250"), decimal.Decimal("123456789.001"), None]),
    "binary": (pa.binary(), [b"\x01\xc3\xbc", b"plain", None]),
    "double": (pa.float64(), [float("nan"), -0.5, None]),
    "float": (pa.float32(), [float("inf"), 1.5, None]),
    "boolean": (pa.bool_(), [True, False, None]),
    "byte": (pa.int8(), [-128, 127, None]),
    "short": (pa.int16(), [-3, 300, None]),
    "long": (pa.int64(), [-(2**62), 2**40, None]),
    "string": (pa.string(), ["a'b\\c", "", None]),
}


@pytest.mark.parametrize("kind", list(PARTITION_VALUES))
def test_partition_filters_prune_the_logs_files(spark, table_dir, kind):
    """Spark hands partition filters to the file index and does not apply them again: every
    type's values (with nulls, NaN and infinities) select exactly the engine's rows, and the
    files of other partitions are never opened (they are deleted before the filtered read)."""
    arrow_type, values = PARTITION_VALUES[kind]
    uri = str(table_dir)
    n = 30
    data = pa.table(
        {"id": pa.array(range(n), pa.int64()), "p": pa.array([values[i % 3] for i in range(n)], arrow_type)}
    )
    write_table(uri, data, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    DeltaTable(uri).delete("id % 5 = 0")
    df = read_table(spark, uri)
    assert_reads_as_engine(df, uri)
    wanted = [r for r in DeltaTable(uri).to_arrow().to_pylist() if r["p"] is None]
    nulls = df.where("p IS NULL")
    assert "PartitionFilters: [isnull(p" in executed(nulls)
    for path in DeltaTable(uri).file_uris():
        if "__HIVE_DEFAULT_PARTITION__" not in path:
            os.remove(path.removeprefix("file://"))
    assert sorted(r.id for r in nulls.collect()) == sorted(r["id"] for r in wanted)
    with pytest.raises(Exception, match="is missing"):  # the others were really needed
        df.where("p IS NOT NULL").count()


def test_files_split_across_tasks_keep_their_row_positions(spark, table_dir):
    """A file larger than a task's share is read by several tasks: each row's position is still
    its position in the file (Spark's reader counts from the row group), and each task checks
    nothing twice."""
    uri = str(table_dir)
    n = 400_000
    ids = pa.array(range(n), pa.int64())
    write_table(
        uri,
        pa.table({"id": ids, "pad": pa.array([i * 7919 % 100_003 for i in range(n)], pa.int64())}),
        properties={"delta.enableDeletionVectors": "true"},
    )
    DeltaTable(uri).delete("id % 9 = 4 OR id IN (0, 131071, 131072, 399999)")
    keys = {"spark.sql.files.maxPartitionBytes": "262144", "spark.sql.files.openCostInBytes": "0"}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        df = read_table(spark, uri)
        assert df.rdd.getNumPartitions() > 2 * len(DeltaTable(uri).file_uris())
        assert df.count() == DeltaTable(uri).count()
        assert_reads_as_engine(df, uri)
    finally:
        for key in keys:
            spark.conf.unset(key)


def test_a_table_with_no_live_file(spark, table_dir):
    uri = str(table_dir)
    dv_table(uri, files=1, rows=5).delete("id >= 0")
    df = read_table(spark, uri)
    assert df.count() == 0 and df.columns == ["id", "v"]
    assert is_native(df)


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, **env},
    )


BUILD = "from deltaplane.spark_jobs import jar; print(jar.path())"


def test_the_jar_is_built_once_by_whoever_asks_first(tmp_path):
    """Two processes building at once into an empty cache both get the same whole jar, and
    nothing of either build is left behind."""
    cache = tmp_path / "cache"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "DELTAPLANE_CACHE_DIR": str(cache)},
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    built = Path(paths.pop())
    assert built.parent == cache and sorted(p.name for p in cache.iterdir()) == [built.name]
    with zipfile.ZipFile(built) as z:
        names = set(z.namelist())
    assert {"io/deltaplane/spark/NativeScan.class", "io/deltaplane/spark/LogFileIndex.class"} <= names
    assert "PySpark" not in outputs[0][1]  # built quietly


def test_without_javac_reads_take_the_expression_path(tmp_path):
    """No compiler: no jar, one warning saying why, and sessions start without it."""
    code = (
        "from deltaplane.spark_jobs import jar, session; print(jar.path());"
        "print(repr(session.with_deltaplane_jar('/x/user.jar')))"
    )
    done = _python(code, DELTAPLANE_CACHE_DIR=str(tmp_path / "c"), PATH="/nonexistent", JAVA_HOME="")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "'/x/user.jar'"]
    assert "no javac" in done.stderr and "native reads use Spark expressions" in done.stderr


def test_a_cache_folder_that_cannot_be_written_is_a_warning_not_a_failure(tmp_path):
    """A read-only or broken cache location must not stop a session from starting."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code = (
        "from deltaplane.spark_jobs import jar, session; print(jar.path());"
        "print(session.with_deltaplane_jar(None))"
    )
    done = _python(code, DELTAPLANE_CACHE_DIR=str(blocker / "cache"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["None", ""]
    assert "building it failed" in done.stderr and "native reads use Spark expressions" in done.stderr


def test_submitted_jobs_get_the_jar_next_to_the_users(tmp_path):
    built = str(jar.path())
    assert submit_settings()["spark.jars"] == built
    settings = submit_settings({"spark.jars": "/opt/a.jar,/opt/b.jar"})
    assert settings["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{built}"


def test_a_corrupt_or_missing_deletion_vector_stops_the_read(spark, table_dir):
    """The task that reads a file loads its deletion vector: a flipped byte fails its checksum, a
    missing file is named; no row is decided without it."""
    uri = str(table_dir)
    dv_table(uri, files=2, rows=5000).delete("id % 3 = 0")  # large enough for a DV file
    stored = [p for p in Path(uri).glob("deletion_vector_*.bin")]
    assert len(stored) == 1
    df = read_table(spark, uri)
    assert df.count() == DeltaTable(uri).count()
    original = stored[0].read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0xFF
    stored[0].write_bytes(bytes(damaged))
    with pytest.raises(Exception, match="fails its checksum"):
        df.count()
    stored[0].unlink()
    with pytest.raises(
        Exception, match=r"the deletion vector in .*deletion_vector_.*\.bin of .* is corrupt or unreadable"
    ):
        read_table(spark, uri).count()
    stored[0].write_bytes(original)
    assert df.count() == DeltaTable(uri).count()


def test_inline_and_stored_deletion_vectors(spark, table_dir):
    """Small deletion vectors are inline in the log, larger ones in a file: both apply."""
    uri = str(table_dir)
    table = dv_table(uri, files=3, rows=5000)
    table.delete("id = 7")  # inline
    table.delete("id >= 5000 AND id % 2 = 0")  # stored
    kinds = {
        dv["storageType"] for dv in DeltaTable(uri).snapshot.files.column("deletion_vector").to_pylist() if dv
    }
    assert kinds == {"i", "u"}
    df = read_table(spark, uri)
    assert_reads_as_engine(df, uri)
    assert df.count() == 15000 - 1 - 5000


@pytest.mark.parametrize("root", ["/tmp/a b/t", "s3://bucket/t/", "/", "/tmp//x/./t/"])
def test_file_locations_in_one_step_are_hadoops(spark, root):
    """The manifest's locations, made in one step for plain keys, are what Hadoop's ``Path``
    makes of the root and each key (unusual keys take the file-by-file way)."""
    import pyarrow as pa

    from deltaplane.spark_jobs.native import hadoop_location
    from deltaplane.spark_jobs.native_jvm import _hadoop_locations

    jvm = spark._jvm
    for keys in (
        ["x/y.parquet", "p=%20/a b.parquet", "ü.parquet", "a..b/c.parquet"],
        ["x/../y.parquet", "a//b"],
    ):
        made = _hadoop_locations(root, pa.chunked_array([pa.array(keys)]))
        assert made == [hadoop_location(root, key) for key in keys]
        if root.startswith("/"):  # Hadoop's own reading of root + key
            hadoop = [
                str(jvm.org.apache.hadoop.fs.Path("file:" + root.rstrip("/") + "/" + key)) for key in keys
            ]
            assert made == hadoop, (made, hadoop)
