"""Spark planning: how long ``read_table`` takes to turn an N-file table into Spark tasks.

Issue 28 asks for 10,000 files planned into tasks in well under a second. For each N (one file
per partition, the Figure 4 tables of ``read_floor.py``, cached in the same data directory) a
round times, on a warm session, each of the two native paths:

* ``engine``: opening the table and planning its live files (``DeltaTable``, then
  ``native_jvm.manifest`` for deltaplane's Spark classes, ``native.plan`` for the expressions);
* ``dataframe``: building the DataFrame (``native_jvm.build``: the log's file index, one call; or
  ``native.build``: Spark's reader over the explicit file list, which checks and lists every file
  on the driver);
* ``tasks``: splitting the scan into tasks (the physical plan's RDD partitions);

and ``total`` is their sum, the median of ``--repeat`` rounds after ``--warmup`` (the two paths
alternate within a round). The top-level figures are deltaplane's Spark classes (what
``read_table`` uses in a session ``get_spark`` started), ``expressions`` the path without them.

    python benchmarks/spark_planning.py [--files 1000,10000,30000] [--repeat 3]

Prints a table; a full run writes ``benchmarks/results/spark_planning.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks import read_floor, results_file  # noqa: E402 (the repository root goes on the path first)

PHASES = ("engine", "dataframe", "tasks")


PATHS = ("jvm", "expressions")


def one_round(spark, uri: str, path: str) -> tuple[dict[str, float], tuple[int, int]]:
    from deltaplane.engine import DeltaTable
    from deltaplane.spark_jobs import native, native_jvm

    started = time.perf_counter()
    snapshot = DeltaTable(uri).snapshot
    if path == "jvm":
        planned = native_jvm.manifest(snapshot, uri)
        engine = time.perf_counter()
        df = native_jvm.build(spark, planned)
    else:
        planned = native.plan(snapshot, uri)
        engine = time.perf_counter()
        df = native.build(spark, planned)
    dataframe = time.perf_counter()
    tasks = df._jdf.rdd().getNumPartitions()
    done = time.perf_counter()
    files = len(df.inputFiles())
    phases = {"engine": engine - started, "dataframe": dataframe - engine, "tasks": done - dataframe}
    return phases, (files, tasks)


def measure(spark, uri: str, repeat: int, warmup: int) -> dict:
    from deltaplane.spark_jobs import jar

    if not jar.loaded(spark):
        raise SystemExit(
            "deltaplane's Spark classes are not on the session's classpath (is javac installed?)"
        )
    for _ in range(warmup):
        for path in PATHS:
            one_round(spark, uri, path)
    rounds: dict[str, list] = {path: [] for path in PATHS}
    for _ in range(repeat):
        for path in PATHS:
            rounds[path].append(one_round(spark, uri, path))
    out: dict = {}
    for path in PATHS:
        summary = {phase: statistics.median(r[phase] for r, _ in rounds[path]) for phase in PHASES}
        summary["total"] = statistics.median(sum(r.values()) for r, _ in rounds[path])
        summary["files_planned"], summary["tasks_planned"] = rounds[path][0][1]
        if path == "jvm":
            out.update(summary)
        else:
            out[path] = summary
    return out


def parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one round: to try things")
    parser.add_argument("--files", type=results_file.int_list, help="1000,10000,30000 (--quick 50,250)")
    parser.add_argument("--repeat", type=int, help="timed rounds, the median reported (3; --quick 1)")
    parser.add_argument("--warmup", type=int, help="untimed rounds first (1; --quick 0)")
    parser.add_argument("--data", default=str(HERE / "data" / "read_floor"), help="generated tables, reused")
    parser.add_argument("--out", help="result JSON (a full run: benchmarks/results/spark_planning.json)")
    args = parser.parse_args(argv)
    args.only = None
    quick = {"files": [50, 250], "repeat": 1, "warmup": 0}
    results_file.sized(args, quick, {"files": [1000, 10_000, 30_000], "repeat": 3, "warmup": 1})
    args.out = results_file.full_run_out(args, "spark_planning")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    root = Path(args.data)
    tables = {
        n: read_floor.once(
            root / f"v{read_floor.DATA_FORMAT}-fig4-{n}-100-1000",
            read_floor.build_fig4(n, 100, 1000),
            rebuild=False,
        )
        for n in args.files
    }
    spark, owned, _ = read_floor.start_spark()
    results: dict = {"machine": results_file.machine(), "files": {}}
    try:
        for n, path in tables.items():
            results["files"][str(n)] = measure(spark, str(path), args.repeat, args.warmup)
    finally:
        if owned:
            spark.stop()
    print(f"\nread_table planning: median of {args.repeat} round(s) after {args.warmup} warm-up")
    print(
        f"{'files':>8} {'path':<12}{'engine':>9}{'DataFrame':>11}{'tasks':>9}{'total':>9}{'Spark tasks':>13}"
    )
    for n, r in results["files"].items():
        for path, x in (("jvm", r), ("expressions", r["expressions"])):
            print(
                f"{int(n):>8,} {path:<12}{x['engine']:>8.3f}s{x['dataframe']:>10.3f}s{x['tasks']:>8.3f}s"
                f"{x['total']:>8.3f}s{x['tasks_planned']:>13,}"
            )
    if args.out:
        results_file.write_results(args.out, results)
    return results


if __name__ == "__main__":
    main()
