"""Spark on deltaplane tables vs the in-process engine, same data, same run.

* **read**: a ``--rows`` (10M) x 8-column table (the DML benchmark's data, 10 files) read whole
  by the engine (``to_arrow()``), and by Spark local[2] through the ``deltaplane`` source: once
  into a no-op sink (every row decoded in the tasks, nothing collected) and once collected to the
  driver as Arrow (``toArrow()``, the closest to ``to_arrow()``);
* **DV delete** of 0.01% of the rows (``id % 10000 = 7``): the engine's ``delete`` vs the
  ``deltaplane.spark_jobs.dml`` job (tasks find the rows, the driver writes the deletion vectors), each on
  its own copy; both must leave the same rows.

The Spark session is started (and warmed with one small read) before anything is timed: a
scheduled job pays the JVM start once, not per operation.

    python benchmarks/spark.py [--rows 10000000]

Prints the table and writes ``benchmarks/results/spark.json``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)

DELETE = "id % 10000 = 7"


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main(argv: list[str] | None = None) -> dict:
    parser = command_line(__doc__, "spark")
    parser.add_argument("--rows", type=int, default=10_000_000)
    args = parser.parse_args(argv)

    from benchmarks.dml import build
    from deltaplane.engine import DeltaTable
    from deltaplane.spark_jobs import dml, job
    from deltaplane.spark_jobs.session import get_spark

    # Collecting the whole table to the driver (toArrow) needs a driver heap of its size.
    spark = get_spark("local[2]", app_name="deltaplane-bench", conf={"spark.driver.memory": "8g"})
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="deltaplane-spark-bench-"))
    results: dict = {"rows": args.rows}
    try:
        base = work / "base"
        build(base, "deltaplane", args.rows, {"delta.enableDeletionVectors": "true"})
        uri = str(base)
        spark.read.format("deltaplane").load(uri).limit(10).collect()  # warm the Python workers
        engine_read, table = timed(lambda: DeltaTable(uri).to_arrow())
        results["engine_to_arrow_s"] = engine_read
        df = spark.read.format("deltaplane").load(uri)
        results["spark_noop_s"], _ = timed(lambda: df.write.format("noop").mode("overwrite").save())
        results["spark_to_arrow_s"], collected = timed(lambda: df.toArrow())
        results["read_rows_match"] = collected.num_rows == table.num_rows == args.rows
        del table, collected

        ours, theirs = work / "engine", work / "spark"
        shutil.copytree(base, ours)
        shutil.copytree(base, theirs)
        results["engine_delete_s"], _ = timed(lambda: DeltaTable(str(ours)).delete(DELETE))
        argv_job = ["--table", str(theirs), "--delete", DELETE]
        results["spark_delete_s"], code = timed(
            lambda: job.run("dml", dml.build_parser(), dml.main, argv_job)
        )
        a = DeltaTable(str(ours)).count()
        b = DeltaTable(str(theirs)).count()
        results["delete_rows_match"] = code == 0 and a == b == args.rows - args.rows // 10000
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["spark_noop_vs_engine"] = results["spark_noop_s"] / results["engine_to_arrow_s"]
    results["spark_to_arrow_vs_engine"] = results["spark_to_arrow_s"] / results["engine_to_arrow_s"]
    results["spark_delete_vs_engine"] = results["spark_delete_s"] / results["engine_delete_s"]
    print(f"\nSpark local[2] vs the engine, {args.rows:,} rows x 8 columns", file=sys.stderr)
    print(
        f"read: engine to_arrow {results['engine_to_arrow_s']:.2f}s; Spark noop sink "
        f"{results['spark_noop_s']:.2f}s ({results['spark_noop_vs_engine']:.2f}x), Spark toArrow "
        f"{results['spark_to_arrow_s']:.2f}s ({results['spark_to_arrow_vs_engine']:.2f}x); rows match "
        f"{results['read_rows_match']}",
        file=sys.stderr,
    )
    print(
        f"DV delete 0.01%: engine {results['engine_delete_s']:.2f}s, Spark dml job "
        f"{results['spark_delete_s']:.2f}s ({results['spark_delete_vs_engine']:.2f}x); rows match "
        f"{results['delete_rows_match']}",
        file=sys.stderr,
    )
    write_results(args.out, results)
    return results


if __name__ == "__main__":
    main()
