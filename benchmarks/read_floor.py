"""Reads at the physical floor (issue 18): every read case against its reference, same run.

Each case times deltaplane and its references alternately, round by round (so drift on a busy
machine hits all of them), and reports the median of ``--repeat`` (3) rounds after ``--warmup``
(1) untimed ones, printed as ratios (deltaplane / reference; below 1.00x is faster):

* ``filter``: a selective filter on the clustering column: ``--rows`` (10M) rows x 8 columns
  (``benchmarks/dml.py``'s rows, ``id`` ascending, 10 files written by deltaplane), filter
  ``id BETWEEN x AND y`` selecting 0.1% (inside one file). deltaplane
  ``DeltaTable(uri).to_arrow(filter=...)`` against delta-rs's ``QueryBuilder`` (``select * ...
  where ...``) and DuckDB's ``read_parquet`` over the same files; each opens the table (or the
  files) inside its timing.
* ``fig4``: the Delta paper's Figure 4, scaled (VLDB 2020, section 6.1): ``sum(value)`` over a
  table of N one-file partitions, N in ``--fig4`` (1,000, 10,000, 30,000), ``--fig4-rows`` (100)
  rows per file. Planning (open the table, list its files) and scan (read ``value``, sum it) are
  timed separately: deltaplane (``DeltaTable(uri)`` + ``file_uris()``, then
  ``to_arrow(columns=["value"])`` on the open table), delta-rs (``DeltaTable(uri)`` +
  ``file_uris()``, then ``QueryBuilder`` ``select sum(value)``), ``pyarrow.dataset`` over the
  file list deltaplane planned (``ds.dataset(files)``, then ``to_table(columns=["value"])``).
* ``dv``: deltaplane's full scan (``to_arrow()``, every column) of the ``filter`` table after
  ``delete("id % 20 = 3")`` (5% of the rows, deletion vectors, on a copy) against the same scan
  of the table before the delete.
* ``spark_aggregate``, ``spark_count``, ``spark_dv``: Spark local[2] (the session set up as
  ``benchmarks/spark.py`` does, started and warmed before anything is timed): ``sum(amount)``
  and ``count()`` over the ``filter`` table, and the ``dv`` table scanned into the no-op sink,
  each through ``deltaplane.spark_jobs.native.read_table(spark, uri)`` ("n/a" when that module
  is not there) and ``spark.read.format("deltaplane").load(uri)``, against
  ``spark.read.parquet(*files)`` over the same files (for ``spark_dv``: every row, deleted ones
  included, as Spark's reader would read them). The DataFrame is built inside the timing.
* ``streaming``: ``trigger(availableNow=True)`` over a table of ``--stream-commits`` (200)
  single-file commits of ``--stream-rows`` (20,000) rows, ``maxFilesPerTrigger``
  ``--max-files`` (20), into the no-op sink: ``spark.readStream.format("deltaplane")`` against
  Spark's file source (``spark.readStream.schema(...).parquet(dir)``) over the same files.

Data is written by deltaplane once into ``--data`` (``benchmarks/data/read_floor/``, kept across
runs: about 10 minutes to build on 2 cores); ``--rebuild`` writes it again (after a change to the
engine's writer, whose row groups and page indexes the reads depend on). The Figure 4 tables are
written ``--chunk`` (1,000) partition values per append, so each is built in N / 1,000 commits.

    python benchmarks/read_floor.py [--quick] [--only CASE ...] [--rows 10000000] [--repeat 3]

Prints the table; a full run (no ``--quick``, no ``--only``) writes
``benchmarks/results/read_floor.json`` (any run writes ``--out`` when it is given; until the run
ends, ``<out>.tmp`` holds the cases finished so far, so a failing case loses only itself).
About 10 minutes on 2 cores with the data cached (``--quick``: about 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks import results_file  # noqa: E402 (the repository root goes on the path first)

DATA_FORMAT = 1  # bump when the generated data changes
DV = {"delta.enableDeletionVectors": "true"}
DELETE = "id % 20 = 3"  # 5% of the rows, spread over every file
SPARK_DV_CASES = ("spark_dv_sum", "spark_dv_count", "spark_dv_filter")
CASES = ("filter", "fig4", "dv", "spark_aggregate", "spark_count", "spark_dv", *SPARK_DV_CASES, "streaming")
SPARK_CASES = ("spark_aggregate", "spark_count", "spark_dv", *SPARK_DV_CASES, "streaming")
GOALS = {  # issue 18's goals on this machine, deltaplane / reference
    "filter": 1.0,
    "fig4": 1.0,
    "dv": 1.1,
    "spark_aggregate": 1.2,
    "spark_count": 1.2,
    "spark_dv": 1.2,
    "spark_dv_sum": 1.5,  # issue 28: every DV read <= 1.5x Spark's reader on the same files
    "spark_dv_count": 1.5,
    "spark_dv_filter": 1.5,
    "streaming": 1.1,
}


def clock(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def rounds(calls: dict[str, Callable[[], tuple[dict[str, float], object]]], repeat: int, warmup: int) -> dict:
    """Run every call once per round, alternating, ``warmup + repeat`` rounds. A call returns
    ``({phase: seconds}, value)``; the result holds each phase's median and runs, and the value
    of the last run."""
    runs: dict[str, dict[str, list[float]]] = {name: {} for name in calls}
    values: dict[str, object] = {}
    for i in range(warmup + repeat):
        for name, call in calls.items():
            seconds, values[name] = call()
            if i >= warmup:
                for phase, s in seconds.items():
                    runs[name].setdefault(phase, []).append(s)
    return {
        name: {
            **{phase: statistics.median(times) for phase, times in runs[name].items()},
            "runs": runs[name],
            "value": values[name],
        }
        for name in calls
    }


def one(fn: Callable[[], object]) -> Callable[[], tuple[dict[str, float], object]]:
    """A call timed as a whole (phase ``seconds``)."""

    def call():
        seconds, value = clock(fn)
        return {"seconds": seconds}, value

    return call


# --- data, generated once ------------------------------------------------------------------------


def once(path: Path, build: Callable[[Path], None], rebuild: bool) -> Path:
    """``build(path / "table")`` unless a finished build is there; returns the table's path."""
    table = path / "table"
    if (path / "_COMPLETE").exists() and not rebuild:
        return table
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    started = time.perf_counter()
    build(table)
    (path / "_COMPLETE").write_text("")
    print(f"generated {path.name} in {time.perf_counter() - started:.1f}s", file=sys.stderr, flush=True)
    return table


def build_base(path: Path, rows: int) -> None:
    """``dml.py``'s 10M rows x 8 columns, ``id`` ascending, 10 appends of one file each."""
    from benchmarks import dml

    dml.build(path, "deltaplane", rows, DV)


def build_dv(base: Path) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        from deltaplane.engine import DeltaTable

        shutil.copytree(base, path)
        DeltaTable(str(path)).delete(DELETE)

    return build


def fig4_rows(first: int, partitions: int, per_file: int) -> pa.Table:
    n = partitions * per_file
    ids = np.arange(first * per_file, first * per_file + n, dtype=np.int64)
    return pa.table(
        {
            "part": pa.array(ids // per_file, pa.int32()),
            "id": ids,
            "value": ids % 1000,
        }
    )


def build_fig4(partitions: int, per_file: int, chunk: int) -> Callable[[Path], None]:
    """One file per partition value, ``chunk`` partition values per append (a commit each): this
    works whether or not one write can hold every partition's file open at once."""

    def build(path: Path) -> None:
        from deltaplane.engine import write_table

        for first in range(0, partitions, chunk):
            data = fig4_rows(first, min(chunk, partitions - first), per_file)
            write_table(str(path), data, mode="append", partition_by=["part"])

    return build


def build_stream(commits: int, per_commit: int) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        from benchmarks import dml
        from deltaplane.engine import DeltaTable

        rng = np.random.default_rng(7)
        table = DeltaTable.create(str(path), dml.batch(0, 1, rng).schema)
        for c in range(commits):
            table.append(dml.batch(c * per_commit, per_commit, rng), target_file_size=1 << 40)

    return build


def prepare(args, cases: list[str]) -> dict[str, object]:
    root = Path(args.data)
    paths: dict[str, object] = {}
    if {"filter", "dv", "spark_aggregate", "spark_count", "spark_dv", *SPARK_DV_CASES} & set(cases):
        paths["base"] = once(
            root / f"v{DATA_FORMAT}-base-{args.rows}", lambda p: build_base(p, args.rows), args.rebuild
        )
    if {"dv", "spark_dv", *SPARK_DV_CASES} & set(cases):
        paths["dv"] = once(root / f"v{DATA_FORMAT}-dv-{args.rows}", build_dv(paths["base"]), args.rebuild)
    if "fig4" in cases:
        paths["fig4"] = {
            n: once(
                root / f"v{DATA_FORMAT}-fig4-{n}-{args.fig4_rows}-{args.chunk}",
                build_fig4(n, args.fig4_rows, args.chunk),
                args.rebuild,
            )
            for n in args.fig4
        }
    if "streaming" in cases:
        paths["stream"] = once(
            root / f"v{DATA_FORMAT}-stream-{args.stream_commits}-{args.stream_rows}",
            build_stream(args.stream_commits, args.stream_rows),
            args.rebuild,
        )
    return paths


def layout(path: Path) -> dict:
    """What the reads depend on: files, row groups, page indexes (of the first file)."""
    from deltaplane.engine import DeltaTable

    table = DeltaTable(str(path))
    uris = table.file_uris()
    meta = pq.ParquetFile(uris[0]).metadata
    column = meta.row_group(0).column(0)
    dvs = table.snapshot.files.column("deletion_vector")
    return {
        "files": len(uris),
        "commits": table.version + 1,
        "bytes": sum(table.snapshot.files.column("size").to_pylist()),
        "row_groups_first_file": meta.num_row_groups,
        "rows_first_file": meta.num_rows,
        "page_index_first_file": bool(column.has_column_index or column.has_offset_index),
        "files_with_dv": len(dvs) - dvs.null_count,
    }


# --- in process ----------------------------------------------------------------------------------


def case_filter(paths: dict, args) -> dict:
    import duckdb
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    from deltaplane.engine import DeltaTable

    uri = str(paths["base"])
    per_file = args.rows // 10
    low = per_file * 5 + 12_345 % per_file  # inside the sixth file, not on a boundary
    predicate = f"id BETWEEN {low} AND {low + max(args.rows // 1000, 1) - 1}"
    files = DeltaTable(uri).file_uris()

    def summary(table) -> dict:
        table = pa.table(table)  # delta-rs answers with arro3 tables: through the C stream
        return {"rows": table.num_rows, "id_sum": pc.sum(table["id"]).as_py()}

    def duck():
        con = duckdb.connect()
        try:
            return summary(
                con.sql(f"select * from read_parquet({files!r}) where {predicate}").to_arrow_table()
            )
        finally:
            con.close()

    calls = {
        "deltaplane": one(lambda: summary(DeltaTable(uri).to_arrow(filter=predicate))),
        "delta-rs": one(
            lambda: summary(
                QueryBuilder()
                .register("t", RsTable(uri))
                .execute(f"select * from t where {predicate}")
                .read_all()
            )
        ),
        "duckdb": one(duck),
    }
    out = rounds(calls, args.repeat, args.warmup)
    out["predicate"] = predicate
    out["files_after_skipping"] = len(DeltaTable(uri).file_uris(filter=predicate))
    out["same_rows"] = len({json.dumps(out[n]["value"]) for n in calls}) == 1
    return out


def case_fig4(paths: dict, args) -> dict:
    import pyarrow.dataset as ds
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    from deltaplane.engine import DeltaTable

    out: dict = {}
    for n, path in paths["fig4"].items():
        uri = str(path)
        files = DeltaTable(uri).file_uris()

        def ours(uri=uri):
            plan, table = clock(lambda: (t := DeltaTable(uri), t.file_uris())[0])
            scan, total = clock(lambda: pc.sum(table.to_arrow(columns=["value"])["value"]).as_py())
            return {"plan": plan, "scan": scan, "total": plan + scan}, total

        def theirs(uri=uri):
            plan, table = clock(lambda: (t := RsTable(uri), t.file_uris())[0])
            query = "select sum(value) as s from t"
            scan, total = clock(
                lambda: pa.table(QueryBuilder().register("t", table).execute(query).read_all())["s"][
                    0
                ].as_py()
            )
            return {"plan": plan, "scan": scan, "total": plan + scan}, total

        def dataset(files=files):
            plan, data = clock(lambda: ds.dataset(files, format="parquet"))
            scan, total = clock(lambda: pc.sum(data.to_table(columns=["value"])["value"]).as_py())
            return {"plan": plan, "scan": scan, "total": plan + scan}, total

        calls = {"deltaplane": ours, "delta-rs": theirs, "pyarrow.dataset": dataset}
        result = rounds(calls, args.repeat, args.warmup)
        result["layout"] = layout(path)
        result["same_sum"] = len({result[name]["value"] for name in calls}) == 1
        out[str(n)] = result
        progress(f"fig4 {n:,} partitions")
    return out


def case_dv(paths: dict, args) -> dict:
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    from deltaplane.engine import DeltaTable

    before, after = str(paths["base"]), str(paths["dv"])
    calls = {
        "after_delete": one(lambda: DeltaTable(after).to_arrow().num_rows),
        "before_delete": one(lambda: DeltaTable(before).to_arrow().num_rows),
        # A peer on the same DV table (delta-rs applies DVs only through its query engine).
        "delta-rs_after": one(
            lambda: (
                pa.table(
                    QueryBuilder().register("t", RsTable(after)).execute("select * from t").read_all()
                ).num_rows
            )
        ),
    }
    out = rounds(calls, args.repeat, args.warmup)
    deleted = args.rows // 20 + (args.rows % 20 > 3)  # ids 0..rows-1 with id % 20 = 3
    out["rows_right"] = (
        out["before_delete"]["value"] == args.rows
        and out["after_delete"]["value"] == out["delta-rs_after"]["value"] == args.rows - deleted
    )
    out["layout"] = layout(paths["dv"])
    return out


# --- Spark ---------------------------------------------------------------------------------------


def native_reader():
    """``read_table`` of the native Spark read path, or None while it does not exist."""
    try:
        from deltaplane.spark_jobs.native import read_table
    except ImportError:
        return None
    return read_table


def spark_calls(spark, uri: str, action: Callable, built: bool = False, source: bool = True) -> dict:
    """The timed calls of one Spark case: ``read_table`` planned in each call ("native"), its
    DataFrame planned once and reused ("native_built": the query alone), ``read_table`` without
    deltaplane's Spark classes ("native_expressions", where the session has them), the Python data source
    and Spark's reader over the same live files (DVs not applied)."""
    from deltaplane.engine import DeltaTable

    files = DeltaTable(uri).file_uris()
    read_table = native_reader()
    calls = {}
    if read_table is not None:
        calls["native"] = one(lambda: action(read_table(spark, uri)))
        if built:
            df = read_table(spark, uri)
            calls["native_built"] = one(lambda: action(df))
            if _has_jvm_path(spark):
                calls["native_expressions"] = one(lambda: action(_expressions(spark, read_table, uri)))
    if source:
        calls["source"] = one(lambda: action(spark.read.format("deltaplane").load(uri)))
    calls["parquet"] = one(lambda: action(spark.read.parquet(*files)))
    return calls


def _has_jvm_path(spark) -> bool:
    try:
        from deltaplane.spark_jobs import jar
    except ImportError:
        return False
    return jar.loaded(spark)


def _expressions(spark, read_table, uri: str):
    """``read_table`` without deltaplane's Spark classes (as under Spark Connect)."""
    from deltaplane.spark_jobs.native import JVM_SETTING

    spark.conf.set(JVM_SETTING, "false")
    try:
        return read_table(spark, uri)
    finally:
        spark.conf.unset(JVM_SETTING)


def noop(df) -> None:
    df.write.format("noop").mode("overwrite").save()


def case_spark(name: str, spark, paths: dict, args) -> dict:
    from pyspark.sql import functions as F

    if name in SPARK_DV_CASES:
        return case_spark_dv(name, spark, paths, args)
    if name == "spark_aggregate":
        calls = spark_calls(spark, str(paths["base"]), lambda df: df.agg(F.sum("amount")).collect()[0][0])
    elif name == "spark_count":
        calls = spark_calls(spark, str(paths["base"]), lambda df: df.count())
    else:
        calls = spark_calls(spark, str(paths["dv"]), noop, built=True)
    out = rounds(calls, args.repeat, args.warmup)
    if name == "spark_aggregate":
        values = [out[n]["value"] for n in calls]
        out["same_sum"] = all(abs(v - values[0]) <= 1e-6 * abs(values[0]) for v in values)
    elif name == "spark_count":
        out["same_count"] = all(out[n]["value"] == args.rows for n in calls)
    return out


def case_spark_dv(name: str, spark, paths: dict, args) -> dict:
    """A one-column sum, a count and a 0.1% filter over the table with 5% of rows deleted by
    DVs, against Spark's reader over the same files (which returns the deleted rows too)."""
    from pyspark.sql import functions as F

    uri = str(paths["dv"])
    cut = args.rows // 1000
    action = {
        "spark_dv_sum": lambda df: df.agg(F.sum("amount")).collect()[0][0],
        "spark_dv_count": lambda df: df.count(),
        "spark_dv_filter": lambda df: df.where(F.col("id") < cut).count(),
    }[name]
    out = rounds(spark_calls(spark, uri, action, built=True, source=False), args.repeat, args.warmup)
    if name == "spark_dv_sum":  # the engine's sum of the live rows
        from deltaplane.engine import DeltaTable

        expected = pc.sum(DeltaTable(uri).to_arrow(columns=["amount"]).column("amount")).as_py()
        sums = [out[n]["value"] for n in ("native", "native_built", "native_expressions") if n in out]
        out["right"] = all(abs(v - expected) <= 1e-6 * abs(expected) for v in sums)
    else:  # ids are 0..rows-1 and every id % 20 == 3 is deleted
        n = args.rows if name == "spark_dv_count" else cut
        expected = n - len(range(3, n, 20))
        out["right"] = all(
            out[k]["value"] == expected for k in ("native", "native_built", "native_expressions") if k in out
        )
    return out


def case_streaming(spark, paths: dict, args, work: Path) -> dict:
    from deltaplane.engine import DeltaTable

    uri = str(paths["stream"])
    files = DeltaTable(uri).file_uris()
    schema = spark.read.parquet(files[0]).schema
    runs = iter(range(10**6))

    def run(reader) -> Callable[[], tuple[dict[str, float], object]]:
        def call():
            checkpoint = work / f"checkpoint-{next(runs)}"
            try:
                seconds, query = clock(lambda: _available_now(reader(), checkpoint))
            finally:
                shutil.rmtree(checkpoint, ignore_errors=True)
            batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
            phases = {"seconds": seconds}  # and Spark's durationMs, summed over the batches
            for p in query.recentProgress:
                for key, ms in p["durationMs"].items():
                    phases[key] = phases.get(key, 0) + ms / 1000
            phases["outside_triggers"] = seconds - phases.get("triggerExecution", 0)  # start, stop
            return phases, {"batches": len(batches), "rows": sum(batches)}

        return call

    def ours():
        return spark.readStream.format("deltaplane").option("maxFilesPerTrigger", args.max_files).load(uri)

    def spark_files():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", args.max_files).parquet(uri)

    out = rounds({"source": run(ours), "file_source": run(spark_files)}, args.repeat, args.warmup)
    expected = {
        "batches": -(-args.stream_commits // args.max_files),
        "rows": args.stream_commits * args.stream_rows,
    }
    out["expected"] = expected
    out["same_batches_and_rows"] = out["source"]["value"] == out["file_source"]["value"] == expected
    out["layout"] = layout(paths["stream"])
    return out


def _available_now(df, checkpoint: Path):
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return query


def start_spark():
    """The session as ``benchmarks/spark.py`` starts it; ``owned`` is False when one was already
    running in this process (a test's), which is then reused and left running."""
    from pyspark.sql import SparkSession

    from deltaplane.spark_jobs.session import get_spark

    owned = SparkSession.getActiveSession() is None
    conf = {"spark.driver.memory": "4g", "spark.ui.showConsoleProgress": "false"}
    seconds, spark = clock(lambda: get_spark("local[2]", app_name="deltaplane-read-floor", conf=conf))
    spark.sparkContext.setLogLevel("ERROR")
    return spark, owned, seconds


# --- the run -------------------------------------------------------------------------------------

_STARTED = time.perf_counter()


def progress(what: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {what}", file=sys.stderr, flush=True)


def machine() -> dict:
    import deltalake
    import duckdb

    return {
        **results_file.machine(deltalake=deltalake.__version__, duckdb=duckdb.__version__),
        **source_tree(),
    }


def source_tree() -> dict:
    """The commit measured and the engine files changed on top of it (a shared working tree)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=HERE.parent, capture_output=True, text=True, check=True
            ).stdout.rstrip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    changed = git("status", "--porcelain", "--", "engine", "spark_jobs").splitlines()
    return {"commit": git("rev-parse", "--short", "HEAD"), "uncommitted": [line[3:] for line in changed]}


def parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each: to try things")
    parser.add_argument(
        "--only", action="append", choices=CASES, help="run this case (repeat for several); default: all"
    )
    parser.add_argument(
        "--rows", type=int, help="rows of the filter/DV/Spark table (10,000,000; --quick 200,000)"
    )
    parser.add_argument(
        "--fig4",
        type=results_file.int_list,
        help="partition counts of the Figure 4 sweep (1000,10000,30000; --quick 50,250)",
    )
    parser.add_argument("--fig4-rows", type=int, help="rows per Figure 4 file (100; --quick 100)")
    parser.add_argument("--chunk", type=int, help="partition values per Figure 4 append (1,000; --quick 100)")
    parser.add_argument("--stream-commits", type=int, help="single-file commits streamed (200; --quick 20)")
    parser.add_argument("--stream-rows", type=int, help="rows per streamed commit (20,000; --quick 1,000)")
    parser.add_argument("--max-files", type=int, help="maxFilesPerTrigger (20; --quick 5)")
    parser.add_argument("--repeat", type=int, help="timed rounds, the median reported (3; --quick 1)")
    parser.add_argument("--warmup", type=int, help="untimed rounds first (1; --quick 0)")
    parser.add_argument("--data", default=str(HERE / "data" / "read_floor"), help="generated tables, reused")
    parser.add_argument("--rebuild", action="store_true", help="write the generated tables again")
    parser.add_argument("--out", help="result JSON (a full run: benchmarks/results/read_floor.json)")
    args = parser.parse_args(argv)
    quick = {
        "rows": 200_000, "fig4": [50, 250], "fig4_rows": 100, "chunk": 100, "stream_commits": 20,
        "stream_rows": 1000, "max_files": 5, "repeat": 1, "warmup": 0,
    }  # fmt: skip
    full = {
        "rows": 10_000_000, "fig4": [1000, 10_000, 30_000], "fig4_rows": 100, "chunk": 1000,
        "stream_commits": 200, "stream_rows": 20_000, "max_files": 20, "repeat": 3, "warmup": 1,
    }  # fmt: skip
    results_file.sized(args, quick, full)
    args.out = results_file.full_run_out(args, "read_floor")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    cases = [c for c in CASES if not args.only or c in args.only]
    sizes = (
        "rows",
        "fig4",
        "fig4_rows",
        "chunk",
        "stream_commits",
        "stream_rows",
        "max_files",
        "repeat",
        "warmup",
    )
    results: dict = {"sizes": {k: getattr(args, k) for k in sizes}, "machine": machine(), "cases": {}}
    progress("data")
    paths = prepare(args, cases)
    if "base" in paths:
        results["layout"] = layout(paths["base"])
    out = results["cases"]
    partial = Path(f"{args.out}.tmp") if args.out else None  # what finished, should a later case fail

    def keep() -> None:
        if partial is not None:
            results_file.write_results(partial, results)

    for case in ("filter", "fig4", "dv"):
        if case in cases:
            progress(case)
            out[case] = {"filter": case_filter, "fig4": case_fig4, "dv": case_dv}[case](paths, args)
            keep()
    spark_cases = [c for c in cases if c in SPARK_CASES]
    if spark_cases:
        progress("Spark session")
        spark, owned, seconds = start_spark()
        results["spark_startup_seconds"] = seconds
        results["native_read_path"] = native_reader() is not None
        work = Path(tempfile.mkdtemp(prefix="dp-read-floor-"))
        try:
            warm = str(paths.get("base") or paths["stream"])
            spark.read.format("deltaplane").load(warm).limit(10).collect()  # start the Python workers
            spark.read.parquet(live_files(warm)[0]).limit(10).collect()
            for case in spark_cases:
                progress(case)
                if case == "streaming":
                    out[case] = case_streaming(spark, paths, args, work)
                else:
                    out[case] = case_spark(case, spark, paths, args)
                keep()
        finally:
            shutil.rmtree(work, ignore_errors=True)
            if owned:
                spark.stop()
    results["machine"]["load_average_at_end"] = os.getloadavg()
    results["ratios"] = ratios(results)
    results["checks"] = checks(results)
    report(results, args)
    if args.out:
        results_file.write_results(args.out, results)
        partial.unlink(missing_ok=True)
    return results


def live_files(uri: str) -> list[str]:
    from deltaplane.engine import DeltaTable

    return DeltaTable(uri).file_uris()


# --- the table -----------------------------------------------------------------------------------

# (case, phase) -> deltaplane's measurement, its references; phase "seconds" unless given.
LINES = {
    "filter": ("selective filter 0.1%", "deltaplane", ["delta-rs", "duckdb"]),
    "dv": ("full scan, 5% deleted by DVs", "after_delete", ["before_delete", "delta-rs_after"]),
    "spark_aggregate": ("Spark sum(amount)", ["native", "source"], ["parquet"]),
    "spark_count": ("Spark count()", ["native", "source"], ["parquet"]),
    "spark_dv": (
        "Spark noop scan, 5% DVs",
        ["native", "native_built", "native_expressions", "source"],
        ["parquet"],
    ),
    "spark_dv_sum": (
        "Spark sum(amount), 5% DVs",
        ["native", "native_built", "native_expressions"],
        ["parquet"],
    ),
    "spark_dv_count": (
        "Spark count(), 5% DVs",
        ["native", "native_built", "native_expressions"],
        ["parquet"],
    ),
    "spark_dv_filter": (
        "Spark 0.1% filter count, 5% DVs",
        ["native", "native_built", "native_expressions"],
        ["parquet"],
    ),
    "streaming": ("Spark availableNow stream", "source", ["file_source"]),
}
LABELS = {
    "deltaplane": "deltaplane",
    "delta-rs": "delta-rs QueryBuilder",
    "duckdb": "DuckDB read_parquet",
    "pyarrow.dataset": "pyarrow.dataset",
    "after_delete": "after DV delete",
    "before_delete": "before delete",
    "delta-rs_after": "delta-rs after delete",
    "native": "native read_table",
    "native_built": "its DataFrame, reused",
    "native_expressions": "read_table, expressions",
    "source": 'format("deltaplane")',
    "parquet": "spark.read.parquet",
    "file_source": "Spark file source",
}

FIG4_LABELS = {
    "plan": {
        "deltaplane": "open + file_uris()",
        "delta-rs": "delta-rs open + file_uris",
        "pyarrow.dataset": "ds.dataset(files)",
    },
    "scan": {
        "deltaplane": 'to_arrow(["value"])',
        "delta-rs": "delta-rs QueryBuilder",
        "pyarrow.dataset": "pyarrow.dataset",
    },
    "total": {"deltaplane": "plan + scan", "delta-rs": "delta-rs", "pyarrow.dataset": "pyarrow.dataset"},
}


def lines(results: dict) -> list[tuple[str, str, float | None, str, float, float | None, float]]:
    """(case, ours, seconds, reference, seconds, ratio, goal) for every printed line."""
    out = []
    cases = results["cases"]
    native = results.get("native_read_path", False)
    for case, (label, ours, refs) in LINES.items():
        if case not in cases:
            continue
        r = cases[case]
        for name in [ours] if isinstance(ours, str) else ours:
            for ref in refs:
                if ref not in r:
                    continue  # a result file from before this reference was measured
                mine = r[name]["seconds"] if name in r else None
                if name == "native" and not native:
                    mine = None
                theirs = r[ref]["seconds"]
                ratio = mine / theirs if mine is not None else None
                goal = GOALS[case] if ref == refs[0] else None  # the goal is against the first
                out.append((label, LABELS[name], mine, LABELS[ref], theirs, ratio, goal))
        if case == "filter" and "fig4" in cases:  # Figure 4 prints right after the filter
            out.extend(fig4_lines(cases["fig4"]))
    if "fig4" in cases and "filter" not in cases:
        out.extend(fig4_lines(cases["fig4"]))
    return out


def fig4_lines(fig4: dict) -> list:
    out = []
    for n, r in fig4.items():
        for phase in ("plan", "scan", "total"):
            for ref in ("delta-rs", "pyarrow.dataset"):
                mine, theirs = r["deltaplane"][phase], r[ref][phase]
                goal = GOALS["fig4"] if phase == "scan" and ref == "pyarrow.dataset" else None
                label = f"Fig. 4, {int(n):,} partitions: {phase}"
                ours, theirs_label = FIG4_LABELS[phase]["deltaplane"], FIG4_LABELS[phase][ref]
                out.append((label, ours, mine, theirs_label, theirs, mine / theirs, goal))
    return out


def ratios(results: dict) -> list[dict]:
    return [
        {
            "case": c,
            "deltaplane": o,
            "seconds": s,
            "reference": ref,
            "reference_seconds": rs,
            "ratio": q,
            "goal": g,
        }
        for c, o, s, ref, rs, q, g in lines(results)
    ]


def report(results: dict, args) -> None:
    m = results["machine"]
    print(
        f"\nReads at the physical floor: median of {args.repeat} round(s) after {args.warmup} warm-up; "
        f"{m['cpus']} CPUs ({m['cpu_model']}); load average {m['load_average_at_start'][0]:.1f} "
        f"at start, {m['load_average_at_end'][0]:.1f} at end"
    )
    header = f"{'case':<38}{'deltaplane':<22}{'time':>9}  {'reference':<26}{'time':>9}{'ratio':>8}{'goal':>7}"
    print(header)
    print("-" * len(header))
    previous = None
    for case, ours, mine, ref, theirs, ratio, goal in lines(results):
        shown = case if case != previous else ""
        previous = case
        mine_s = f"{mine:.3f}s" if mine is not None else "n/a"
        ratio_s = f"{ratio:.2f}x" if ratio is not None else "n/a"
        goal_s = f"<={goal:.1f}" if goal is not None else ""
        print(f"{shown:<38}{ours:<22}{mine_s:>9}  {ref:<26}{theirs:>8.3f}s{ratio_s:>8}{goal_s:>7}")
    ran = results["checks"]
    bad = [k for k, ok in ran.items() if not ok]
    if ran:
        print("same results everywhere: " + ("yes" if not bad else f"NO: {', '.join(bad)}"))
    if "native_read_path" in results and not results["native_read_path"]:
        print("native read_table: n/a (deltaplane.spark_jobs.native is not importable yet)")


def checks(results: dict) -> dict:
    """Did every reader return the same thing? (Recorded and printed, never asserted here.)"""
    cases = results["cases"]
    checks = {
        "filter rows": cases.get("filter", {}).get("same_rows"),
        "Fig. 4 sums": all(r["same_sum"] for r in cases["fig4"].values()) if "fig4" in cases else None,
        "DV rows": cases.get("dv", {}).get("rows_right"),
        "Spark sums": cases.get("spark_aggregate", {}).get("same_sum"),
        "Spark counts": cases.get("spark_count", {}).get("same_count"),
        **{f"{c} rows": cases[c]["right"] for c in SPARK_DV_CASES if c in cases},
        "stream batches and rows": cases.get("streaming", {}).get("same_batches_and_rows"),
    }
    return {k: v for k, v in checks.items() if v is not None}


if __name__ == "__main__":
    main()
