"""The `deltaplane` Spark data source writes the tables Delta Spark 4.4 makes with its writer
features (tests/fixtures/delta_spark_44): appends and replaceWhere overwrites from real Spark
(local[2], two partitions) into copies of the corpus tables fill generated, default and identity
columns as Delta Spark would; Delta Spark then reads exactly the rows deltaplane reads and keeps
writing (identity values continue above the mark the Spark write committed).

Identity values in a distributed write come from one block per task (engine/column_values.py):
the tests check the blocks, a retried task attempt (a second Spark process whose master allows
task retries), a task that outgrows its block, and a concurrent identity writer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import CapturedException

from deltaplane.engine import DeltaTable
from deltaplane.engine import column_values as cv
from deltaplane.engine.column_values import IDENTITY_BLOCK, IDENTITY_HIGH_WATER_MARK
from deltaplane.engine.commands.staged import commit_write, plan_write, write_files
from deltaplane.engine.errors import ConstraintViolationError, MetadataChangedError
from tests.deltaspark.compare import arrow_rows, sorted_rows

pytestmark = pytest.mark.xdist_group("spark")

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "delta_spark_44"
PROJECT = Path(__file__).resolve().parent.parent.parent

# Per table: what Spark appends (a query: only the columns a writer supplies), the replaceWhere
# overwrite (predicate, query), the rows expected afterwards without the identity column
# (literal: what Delta Spark's own definitions give), the identity column's (start, step), and
# Delta Spark's insert afterwards with the row it adds.
CASES = {
    "generated_columns": dict(
        append="SELECT * FROM VALUES (TIMESTAMP'2027-03-04 12:00:00', 10), "
        "(TIMESTAMP'2028-12-31 06:30:00', 11) AS t(ts, v)",
        replace=("d = '2027-03-04'", "SELECT TIMESTAMP'2027-03-04 18:00:00' AS ts, 20 AS v"),
        expected=[
            {"ts": "2024-02-29 23:59:59", "v": 1, "d": "2024-02-29", "y": 2024, "w": 3},
            {"ts": "2025-01-01 00:00:00", "v": 2, "d": "2025-01-01", "y": 2025, "w": 5},
            {"ts": "2026-11-24 08:00:00", "v": 3, "d": "2026-11-24", "y": 2026, "w": 7},
            {"ts": None, "v": None, "d": None, "y": None, "w": None},
            {"ts": "2028-12-31 06:30:00", "v": 11, "d": "2028-12-31", "y": 2028, "w": 23},
            {"ts": "2027-03-04 18:00:00", "v": 20, "d": "2027-03-04", "y": 2027, "w": 41},
        ],
        spark_insert=(
            "INSERT INTO {t} (ts, v) VALUES (TIMESTAMP'2029-05-06 07:08:09', 30)",
            {"ts": "2029-05-06 07:08:09", "v": 30, "d": "2029-05-06", "y": 2029, "w": 61},
        ),
    ),
    "column_defaults": dict(
        # s's default was dropped (null when missing); n's default is 7 since the ALTER
        append="SELECT * FROM VALUES (5), (6), (7) AS t(id)",
        replace=("id = 6", "SELECT 6 AS id, 'six' AS s"),
        expected=[
            {"id": 1, "s": "none", "n": 42},
            {"id": 2, "s": "given", "n": 0},
            {"id": 3, "s": "none", "n": 7},
            {"id": 4, "s": None, "n": 7},
            {"id": 5, "s": None, "n": 7},
            {"id": 7, "s": None, "n": 7},
            {"id": 6, "s": "six", "n": 7},
        ],
        spark_insert=("INSERT INTO {t} (id) VALUES (8)", {"id": 8, "s": None, "n": 7}),
    ),
    "row_tracking": dict(
        append="SELECT * FROM VALUES (CAST(7 AS BIGINT), 'g'), (CAST(8 AS BIGINT), 'h') AS t(id, v)",
        replace=("id = 8", "SELECT CAST(8 AS BIGINT) AS id, 'H' AS v"),
        expected=[
            {"id": 1, "v": "a"},
            {"id": 3, "v": "C"},
            {"id": 4, "v": "d"},
            {"id": 5, "v": "e"},
            {"id": 6, "v": "f"},
            {"id": 7, "v": "g"},
            {"id": 8, "v": "H"},
        ],
        spark_insert=("INSERT INTO {t} VALUES (9, 'i')", {"id": 9, "v": "i"}),
    ),
    "liquid_clustering": dict(
        append="SELECT * FROM VALUES (6, 60, 'q'), (0, 0, 'r') AS t(a, b, s)",
        replace=("a = 0", "SELECT 0 AS a, 1 AS b, 'R' AS s"),
        expected=[
            {"a": 1, "b": 10, "s": "x"},
            {"a": 2, "b": 20, "s": None},
            {"a": 3, "b": 30, "s": "z"},
            {"a": 4, "b": 40, "s": "w"},
            {"a": 5, "b": 50, "s": "y"},
            {"a": 6, "b": 60, "s": "q"},
            {"a": 0, "b": 1, "s": "R"},
        ],
        spark_insert=("INSERT INTO {t} VALUES (7, 70, 'spark')", {"a": 7, "b": 70, "s": "spark"}),
    ),
    "identity_always": dict(
        append="SELECT * FROM VALUES ('d'), ('e'), ('f'), ('g') AS t(x)",
        replace=("x IN ('g', 'G')", "SELECT 'G' AS x"),
        expected=[{"x": x} for x in ("a", "b", "c", "d", "e", "f", "G")],
        identity=(10, 5),
        spark_insert=("INSERT INTO {t} (x) VALUES ('spark')", {"x": "spark"}),
    ),
    "identity_by_default": dict(
        append="SELECT * FROM VALUES ('d'), ('e'), ('f'), ('g') AS t(x)",
        replace=("x IN ('g', 'G')", "SELECT 'G' AS x"),
        expected=[{"x": x} for x in ("a", "b", "c", "explicit", "d", "e", "f", "G")],
        identity=(-1, -2),
        spark_insert=("INSERT INTO {t} (x) VALUES ('spark')", {"x": "spark"}),
    ),
}


def _copy(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    shutil.copytree(CORPUS / name, path)
    return str(path)


def _write(df, uri: str, replace_where: str | None = None) -> None:
    writer = df.write.format("deltaplane")
    if replace_where is None:
        writer.mode("append").save(uri)
    else:
        writer.mode("overwrite").option("replaceWhere", replace_where).save(uri)


def _ours(uri: str) -> list[dict]:
    return sorted_rows(arrow_rows(DeltaTable(uri).to_arrow()))


def _both_read_the_same(delta_spark, uri: str) -> list[dict]:
    ours = _ours(uri)
    assert ours == sorted_rows(delta_spark.rows(uri))
    return ours


def _mark(uri: str, column: str = "id") -> int | None:
    return DeltaTable(uri).snapshot.schema.find(column).metadata.get(IDENTITY_HIGH_WATER_MARK)


def _last_commit(uri: str) -> list[dict]:
    log = sorted(Path(uri, "_delta_log").glob("*.json"))[-1]
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_spark_appends_and_overwrites_a_delta_spark_table(spark, delta_spark, tmp_path, name):
    case = CASES[name]
    uri = _copy(tmp_path, name)
    before = _both_read_the_same(delta_spark, uri)
    old_ids = {r["id"] for r in before} if "identity" in case else set()
    row_ids_query = f"SELECT id, _metadata.row_id AS row_id FROM delta.`{uri}`"
    row_ids_before = (
        {r["id"]: r["row_id"] for r in delta_spark.sql(row_ids_query)} if name == "row_tracking" else {}
    )

    _write(spark.sql(case["append"]).repartition(2), uri)
    predicate, query = case["replace"]
    _write(spark.sql(query), uri, predicate)  # the same table, written again

    rows = _both_read_the_same(delta_spark, uri)
    if "identity" in case:
        start, step = case["identity"]
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), f"identity values repeat: {sorted(ids)}"
        new = [r["id"] for r in rows if r["id"] not in old_ids]
        assert len(new) == 4  # d, e, f (append) and G (overwrite)
        assert all((i - start) % step == 0 for i in new), new  # on the column's own sequence
        old_mark = max((i for i in old_ids if (i - start) % step == 0), key=lambda v: v * step)
        assert all((i - old_mark) * step > 0 for i in new), new  # past the old mark (not 100, explicit)
        mark = max(new, key=lambda v: v * step)
        assert _mark(uri) == mark  # the mark is the furthest value written, not a whole block
        rows = sorted_rows([{k: v for k, v in r.items() if k != "id"} for r in rows])
    assert rows == sorted_rows(case["expected"])

    if row_ids_before:  # surviving rows keep Delta Spark's row ids; new rows get fresh ones
        after = {r["id"]: r["row_id"] for r in delta_spark.sql(row_ids_query)}
        assert {k: after[k] for k in row_ids_before} == row_ids_before
        assert len(set(after.values())) == len(after)
        assert min(after[7], after[8]) > max(row_ids_before.values())

    # Delta Spark keeps writing: generated/default values, and identity values past our mark
    statement, added = case["spark_insert"]
    delta_spark.sql(statement.format(t=f"delta.`{uri}`"))
    final = _both_read_the_same(delta_spark, uri)
    if "identity" in case:
        spark_row = [r for r in final if r["x"] == "spark"]
        assert [r["id"] for r in spark_row] == [mark + step]
        final = sorted_rows([{k: v for k, v in r.items() if k != "id"} for r in final])
    assert final == sorted_rows([*case["expected"], added])


def test_a_spark_write_supplying_wrong_generated_values_commits_nothing(spark, tmp_path):
    uri = _copy(tmp_path, "generated_columns")
    version = DeltaTable(uri).version
    bad = spark.sql(
        "SELECT TIMESTAMP'2027-03-04 12:00:00' AS ts, 10 AS v, DATE'2027-03-04' AS d, 2027 AS y, 99 AS w"
    )
    with pytest.raises((CapturedException, PySparkException), match=r"v \* 2 \+ 1"):
        _write(bad, uri)
    assert DeltaTable(uri).version == version


def test_each_spark_task_assigns_identity_values_from_its_own_block(spark, delta_spark, tmp_path):
    """Two partitions of three rows (spark.range splits evenly): partition p's values start
    IDENTITY_BLOCK * p steps past the planned mark; the commit records the largest value."""
    uri = _copy(tmp_path, "identity_always")  # start 10, step 5, high-water mark 20
    df = spark.range(0, 6, numPartitions=2).selectExpr("CAST(id AS STRING) AS x")
    _write(df, uri)
    got = {r["x"]: r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()}
    second = 20 + 5 * (IDENTITY_BLOCK + 1)
    assert got == {
        "a": 10, "b": 15, "c": 20,
        "0": 25, "1": 30, "2": 35,
        "3": second, "4": second + 5, "5": second + 10,
    }
    assert _mark(uri) == second + 10
    actions = _last_commit(uri)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["tags"]["delta.identity.schemaUpdate"] == "true"  # Delta Spark's identity-only tag
    assert sum("add" in a for a in actions) == 2 and sum("metaData" in a for a in actions) == 1
    # the same table again, through Delta Spark and then Spark once more: never a repeat
    delta_spark.sql(f"INSERT INTO delta.`{uri}` (x) VALUES ('spark')")
    _write(spark.range(6, 8, numPartitions=2).selectExpr("CAST(id AS STRING) AS x"), uri)
    rows = _both_read_the_same(delta_spark, uri)
    by_x = {r["x"]: r["id"] for r in rows}
    assert by_x["spark"] == second + 15
    assert by_x["6"] == second + 20 and by_x["7"] == second + 20 + 5 * IDENTITY_BLOCK
    assert len(set(by_x.values())) == len(by_x)


RETRY_JOB = """
import sys
from pyspark import TaskContext
from deltaplane.spark_jobs.session import get_spark

uri = sys.argv[1]
spark = get_spark("local[2,2]", app_name="identity-retry")  # local mode with one task retry

def flaky(batches):
    context = TaskContext.get()
    for batch in batches:
        yield batch
        if context.partitionId() == 1 and context.attemptNumber() == 0:
            raise RuntimeError("executor lost after writing")

df = spark.range(0, 6000, numPartitions=2).selectExpr("CAST(id AS STRING) AS x")
df = df.mapInArrow(flaky, "x string")
df.write.format("deltaplane").mode("append").save(uri)
spark.stop()
"""


def test_a_retried_task_attempt_repeats_only_its_own_values_and_is_committed_once(tmp_path):
    """A Spark process whose master allows one retry per task: partition 1's first attempt dies
    mid-write; the retry assigns the same block's values again; only the attempt Spark reports
    is committed, so no value repeats and none is missing."""
    uri = _copy(tmp_path, "identity_always")
    script = tmp_path / "retry_job.py"
    script.write_text(textwrap.dedent(RETRY_JOB))
    done = subprocess.run(
        [sys.executable, str(script), uri], cwd=PROJECT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "executor lost after writing" in done.stderr  # the first attempt really failed
    table = DeltaTable(uri)
    ids = table.to_arrow().column("id").to_pylist()
    assert len(ids) == 3 + 6000 and len(set(ids)) == len(ids)
    second = 20 + 5 * (IDENTITY_BLOCK + 1)
    written = sorted(ids)[3:]
    assert written == [20 + 5 * (i + 1) for i in range(3000)] + [second + 5 * i for i in range(3000)]
    assert _mark(uri) == second + 5 * 2999
    # the commit lists the reported attempts' files only (the failed attempt's, if it got as far
    # as publishing one, stay unreferenced for VACUUM)
    assert {Path(f).name for f in table.files()} <= {p.name for p in Path(uri).glob("*.parquet")}
    assert table.history()[0]["operation"] == "WRITE"


# --- the mechanism under the data source: staged writes (plan, task files, commit) ------------


def test_staged_task_writes_assign_disjoint_blocks_and_a_retry_is_committed_once(tmp_path):
    uri = _copy(tmp_path, "identity_by_default")  # start -1, step -2, high-water mark -5
    spec = plan_write(uri, pa.schema([("x", pa.string())]))
    assert spec.identity_columns == ("id",)
    first_try = write_files(spec, pa.table({"x": ["p1"]}), task=1)
    zero = write_files(spec, pa.table({"x": ["p0a", "p0b"]}), task=0)
    retry = write_files(spec, pa.table({"x": ["p1"]}), task=1)  # the same values as first_try
    commit_write(spec, zero + retry)  # the commit lists the retry's files only
    rows = {r["x"]: r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()}
    block = -2 * IDENTITY_BLOCK
    assert rows == {"a": -1, "b": -3, "c": -5, "explicit": 100, "p0a": -7, "p0b": -9, "p1": -7 + block}
    assert _mark(uri) == -7 + block  # a negative step: the smallest value written
    assert first_try and first_try[0].path not in {a.path for a in retry}
    # a write after it (the engine's own) continues past the mark
    DeltaTable(uri).append(pa.table({"x": ["next"]}))
    assert {r["x"]: r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()}["next"] == -9 + block


def test_a_task_that_outgrows_its_block_is_refused(tmp_path, monkeypatch):
    uri = _copy(tmp_path, "identity_always")
    monkeypatch.setattr(cv, "IDENTITY_BLOCK", 3)  # 2**28 rows would take minutes
    spec = plan_write(uri, pa.schema([("x", pa.string())]))
    write_files(spec, pa.table({"x": ["1", "2", "3"]}), task=0)  # exactly a block: fine
    with pytest.raises(ConstraintViolationError, match=r"task 1 .* more than the 3 one task may assign"):
        write_files(spec, [pa.record_batch({"x": ["1", "2"]}), pa.record_batch({"x": ["3", "4"]})], task=1)


def test_a_concurrent_identity_writer_makes_the_staged_commit_fail_typed(tmp_path):
    uri = _copy(tmp_path, "identity_always")
    spec = plan_write(uri, pa.schema([("x", pa.string())]))
    adds = write_files(spec, pa.table({"x": ["staged"]}), task=0)
    DeltaTable(uri).append(pa.table({"x": ["engine"]}))  # takes 25, the value the task wrote
    with pytest.raises(MetadataChangedError, match="identity"):
        commit_write(spec, adds)
    rows = {r["x"]: r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()}
    assert rows == {"a": 10, "b": 15, "c": 20, "engine": 25}
    again = plan_write(uri, pa.schema([("x", pa.string())]))  # planned again: past the new mark
    commit_write(again, write_files(again, pa.table({"x": ["staged"]}), task=0))
    assert {r["x"]: r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()}["staged"] == 30


def test_a_concurrent_delta_spark_insert_makes_the_staged_commit_fail_typed(delta_spark, tmp_path):
    uri = _copy(tmp_path, "identity_always")
    spec = plan_write(uri, pa.schema([("x", pa.string())]))
    adds = write_files(spec, pa.table({"x": ["staged"]}), task=0)
    delta_spark.sql(f"INSERT INTO delta.`{uri}` (x) VALUES ('spark')")
    with pytest.raises(MetadataChangedError, match="identity"):
        commit_write(spec, adds)
    assert _both_read_the_same(delta_spark, uri) == sorted_rows(
        [{"id": 10, "x": "a"}, {"id": 15, "x": "b"}, {"id": 20, "x": "c"}, {"id": 25, "x": "spark"}]
    )
