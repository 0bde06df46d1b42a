"""Liquid clustering against Z-order on the Delta Lake paper's Figure 5 workload.

The data and the probes are those of ``zorder_skipping.py`` (network flows: sourceIP and destIP
uniformly random 32-bit addresses, sourcePort and destPort random 16-bit ports, written as 100
appends; 200 random ``WHERE field = value`` probes per field). Each table ends with about 100
files, and the percent of files min/max statistics skip is counted by deltaplane's planner
(``file_uris(filter=...)``) for every table, so all are measured with the same yardstick:

* **Z-order (deltaplane)**: ``optimize(zorder_by=[4 columns])``, Morton curve;
* **clustering (deltaplane)**: ``create(cluster_by=[4 columns])`` then ``optimize()``: Hilbert
  curve, one ZCube;
* **clustering (Delta Spark 4.4)**: the same deltaplane-created clustered table, OPTIMIZEd by
  Delta Spark itself (``spark.databricks.delta.optimize.maxFileSize`` set for 100 files), through
  the reference harness (``tests/deltaspark/client.py``); ``--spark-probes`` of its probes are also
  counted by Delta Spark's own planner (files its scan opened), as a cross-check of the yardstick.

    python benchmarks/clustering_skipping.py [--rows 1000000] [--queries 200] [--no-spark]

Prints the table and writes ``benchmarks/results/clustering_skipping.json``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)
from benchmarks.zorder_skipping import (  # noqa: E402 (the repository root goes on the path first)
    COLUMNS,
    FILES,
    build_zorder_ours,
    flows,
    in_slices,
    skipped_percent,
)


def appended(path: Path, data, **create) -> int:
    """A table of ``data`` written as ``FILES`` appends; its bytes."""
    from deltaplane.engine import DeltaTable

    table = DeltaTable.create(str(path), data.schema, **create)
    for part in in_slices(data, FILES):
        table.append(part, target_file_size=1 << 40)
    return sum(table.snapshot.files.column("size").to_pylist())


def build_clustered_ours(path: Path, data) -> float:
    from deltaplane.engine import DeltaTable

    total = appended(path, data, cluster_by=COLUMNS)
    start = time.perf_counter()
    DeltaTable(str(path)).optimize(target_file_size=-(-total // FILES))
    return time.perf_counter() - start


def build_clustered_spark(spark, path: Path, data) -> float:
    total = appended(path, data, cluster_by=COLUMNS)
    spark.sql(f"SET spark.databricks.delta.optimize.maxFileSize = {total // FILES}")
    start = time.perf_counter()
    spark.sql(f"OPTIMIZE delta.`{path}`")
    return time.perf_counter() - start


def spark_skipped_percent(spark, path: Path, probes: dict[str, list[int]], count: int) -> dict[str, float]:
    """Delta Spark's own count: files its scan opened for the first ``count`` probes."""
    from deltaplane.engine import DeltaTable

    total = DeltaTable(str(path)).snapshot.num_files
    out = {}
    for column, values in probes.items():
        read = [
            spark.timed_files_read(f"SELECT count(*) FROM delta.`{path}` WHERE {column} = {v}")[1]
            for v in values[:count]
        ]
        out[column] = 100.0 * (1 - float(np.mean(read)) / total)
    return out


def summary(files: int, skipped: dict[str, float]) -> dict:
    values = list(skipped.values())
    return {
        "files": files,
        "skipped_percent": skipped,
        "mean": float(np.mean(values)),
        "min": float(min(values)),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = command_line(__doc__, "clustering_skipping")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200, help="random probe values per column")
    parser.add_argument(
        "--spark-probes", type=int, default=25, help="probes per column Delta Spark counts itself"
    )
    parser.add_argument("--no-spark", action="store_true", help="skip Delta Spark's clustering")
    args = parser.parse_args(argv)
    data = flows(args.rows)
    rng = np.random.default_rng(99)  # the probes of zorder_skipping.py
    probes = {
        c: rng.integers(0, 2**32 if c.endswith("IP") else 2**16, args.queries).tolist() for c in COLUMNS
    }
    work = Path(tempfile.mkdtemp(prefix="deltaplane-clustering-"))
    results: dict = {"rows": args.rows, "queries_per_column": args.queries, "seconds": {}}
    try:
        results["seconds"]["zorder_deltaplane"] = build_zorder_ours(work / "zorder", data)
        results["seconds"]["clustering_deltaplane"] = build_clustered_ours(work / "clustered", data)
        tables = [("zorder_deltaplane", "zorder"), ("clustering_deltaplane", "clustered")]
        spark = None
        if not args.no_spark:
            from tests.deltaspark.client import DeltaSpark

            spark = DeltaSpark.start()
            results["seconds"]["clustering_delta_spark"] = build_clustered_spark(spark, work / "spark", data)
            tables.append(("clustering_delta_spark", "spark"))
        try:
            for name, directory in tables:
                results[name] = summary(*skipped_percent(work / directory, probes))
            if spark is not None and args.spark_probes:
                own = spark_skipped_percent(spark, work / "spark", probes, args.spark_probes)
                results["clustering_delta_spark"]["counted_by_delta_spark"] = {
                    "probes_per_column": min(args.spark_probes, args.queries),
                    "skipped_percent": own,
                }
                mine = {c: v[: args.spark_probes] for c, v in probes.items()}
                results["clustering_delta_spark"]["counted_by_deltaplane_same_probes"] = skipped_percent(
                    work / "spark", mine
                )[1]
        finally:
            if spark is not None:
                spark.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    names = [n for n, _ in tables]
    titles = {
        "zorder_deltaplane": "Z-order (dp)",
        "clustering_deltaplane": "Hilbert (dp)",
        "clustering_delta_spark": "Delta Spark",
    }
    print(f"\n{args.rows:,} flows, {args.queries} random equality probes per column: % of files skipped")
    print(f"{'column':<12}" + "".join(f"{titles[n]:>16}" for n in names))
    for c in COLUMNS:
        print(f"{c:<12}" + "".join(f"{results[n]['skipped_percent'][c]:>15.1f}%" for n in names))
    print(f"{'mean':<12}" + "".join(f"{results[n]['mean']:>15.1f}%" for n in names))
    print(f"{'min':<12}" + "".join(f"{results[n]['min']:>15.1f}%" for n in names))
    print(f"{'files':<12}" + "".join(f"{results[n]['files']:>16}" for n in names))
    print(f"{'seconds':<12}" + "".join(f"{results['seconds'][n]:>15.2f}s" for n in names))
    own = results.get("clustering_delta_spark", {}).get("counted_by_delta_spark")
    if own:
        same = results["clustering_delta_spark"]["counted_by_deltaplane_same_probes"]
        pairs = ", ".join(f"{c} {own['skipped_percent'][c]:.1f}% / {same[c]:.1f}%" for c in COLUMNS)
        print(
            f"Delta Spark's table, its own planner / deltaplane's, {own['probes_per_column']} probes: {pairs}"
        )
    write_results(args.out, results)
    return results


if __name__ == "__main__":
    main()
