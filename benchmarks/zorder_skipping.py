"""The Delta Lake paper's Z-order experiment (VLDB 2020, section 6.2, Figure 5).

Network flows with four fields, sourceIP and destIP uniformly random 32-bit addresses, sourcePort
and destPort uniformly random 16-bit ports, stored as 100 Parquet files. For each field, the
percent of files that min/max statistics let a query ``WHERE field = <random value>`` skip,
with the table

* globally sorted by (sourceIP, sourcePort, destIP, destPort) and cut into 100 files,
* Z-ordered by the four fields with deltaplane's OPTIMIZE (100 files),
* Z-ordered by delta-rs's ``optimize.z_order`` (same data, same target size), for reference,
* with ``--spark``: Z-ordered by ``deltaplane.spark_jobs.compact`` on Spark local[2] through the distributed
  sort (the engine's key, ranks computed by Spark, files cut by range partitioning).

Skipping is counted by deltaplane's planner (``file_uris(filter=...)``) for all three tables. The
paper reports, for Z-order, at least 43% skipped in every dimension and 54% on average, against
25% on average for the global sort.

    python benchmarks/zorder_skipping.py [--rows 1000000] [--queries 200]

Prints the table and writes ``benchmarks/results/zorder_skipping.json``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)

COLUMNS = ["sourceIP", "sourcePort", "destIP", "destPort"]
FILES = 100
PAPER_ZORDER = {"min": 43.0, "mean": 54.0}
PAPER_SORT_MEAN = 25.0


def flows(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "sourceIP": rng.integers(0, 2**32, rows, dtype=np.int64),
            "sourcePort": rng.integers(0, 2**16, rows, dtype=np.int32),
            "destIP": rng.integers(0, 2**32, rows, dtype=np.int64),
            "destPort": rng.integers(0, 2**16, rows, dtype=np.int32),
        }
    )


def in_slices(table: pa.Table, count: int):
    step = -(-table.num_rows // count)
    for offset in range(0, table.num_rows, step):
        yield table.slice(offset, step)


def build_sorted(path: Path, data: pa.Table) -> None:
    from deltaplane.engine import DeltaTable

    ordered = data.sort_by([(c, "ascending") for c in COLUMNS])
    table = DeltaTable.create(str(path), data.schema)
    for part in in_slices(ordered, FILES):
        table.append(part, target_file_size=1 << 40)


def build_zorder_ours(path: Path, data: pa.Table) -> float:
    from deltaplane.engine import DeltaTable

    table = DeltaTable.create(str(path), data.schema)
    for part in in_slices(data, FILES):
        table.append(part, target_file_size=1 << 40)
    total = sum(table.snapshot.files.column("size").to_pylist())
    start = time.perf_counter()
    table.optimize(target_file_size=-(-total // FILES), zorder_by=COLUMNS)
    return time.perf_counter() - start


def build_zorder_spark(path: Path, data: pa.Table) -> float:
    """The same Z-order by ``deltaplane.spark_jobs.compact`` with the partition forced onto Spark's
    distributed sort (as a partition larger than one task's memory would be)."""
    from deltaplane.engine import DeltaTable
    from deltaplane.spark_jobs import compact
    from deltaplane.spark_jobs.session import get_spark

    spark = get_spark("local[2]", app_name="deltaplane-bench")
    spark.sparkContext.setLogLevel("ERROR")
    table = DeltaTable.create(str(path), data.schema)
    for part in in_slices(data, FILES):
        table.append(part, target_file_size=1 << 40)
    total = sum(table.snapshot.files.column("size").to_pylist())
    argv = ["--table", str(path), "--zorder", ",".join(COLUMNS), "--target-size", str(-(-total // FILES))]
    start = time.perf_counter()
    compact.main(compact.build_parser().parse_args([*argv, "--max-task-bytes", "1"]))
    return time.perf_counter() - start


def build_zorder_delta_rs(path: Path, data: pa.Table) -> float:
    from deltalake import DeltaTable, write_deltalake

    for part in in_slices(data, FILES):
        write_deltalake(str(path), part, mode="append")
    table = DeltaTable(str(path))
    total = sum(pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
    start = time.perf_counter()
    table.optimize.z_order(COLUMNS, target_size=-(-total // FILES))
    return time.perf_counter() - start


def skipped_percent(path: Path, probes: dict[str, list[int]]) -> tuple[int, dict[str, float]]:
    from deltaplane.engine import DeltaTable

    table = DeltaTable(str(path))
    total = len(table.snapshot.files)
    out = {}
    for column, values in probes.items():
        read = [len(table.file_uris(filter=f"{column} = {v}")) for v in values]
        out[column] = 100.0 * (1 - float(np.mean(read)) / total)
    return total, out


def main(argv: list[str] | None = None) -> dict:
    parser = command_line(__doc__, "zorder_skipping")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200, help="random probe values per column")
    parser.add_argument("--spark", action="store_true", help="also Z-order with Spark's distributed sort")
    args = parser.parse_args(argv)
    data = flows(args.rows)
    rng = np.random.default_rng(99)
    probes = {
        c: rng.integers(0, 2**32 if c.endswith("IP") else 2**16, args.queries).tolist() for c in COLUMNS
    }
    work = Path(tempfile.mkdtemp(prefix="deltaplane-zorder-"))
    results: dict = {"rows": args.rows, "queries_per_column": args.queries}
    try:
        build_sorted(work / "sorted", data)
        results["zorder_seconds"] = {
            "deltaplane": build_zorder_ours(work / "zorder", data),
            "deltalake": build_zorder_delta_rs(work / "zorder-rs", data),
        }
        tables = [("global_sort", "sorted"), ("zorder", "zorder"), ("zorder_delta_rs", "zorder-rs")]
        if args.spark:
            results["zorder_seconds"]["spark"] = build_zorder_spark(work / "zorder-spark", data)
            tables.append(("zorder_spark", "zorder-spark"))
        for name, directory in tables:
            files, skipped = skipped_percent(work / directory, probes)
            results[name] = {
                "files": files,
                "skipped_percent": skipped,
                "mean": float(np.mean(list(skipped.values()))),
                "min": float(min(skipped.values())),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.rows:,} flows, {args.queries} random equality probes per column")
    header = f"{'column':<12}{'global sort':>13}{'Z-order (deltaplane)':>22}{'Z-order (delta-rs)':>20}"
    print(header)
    for c in COLUMNS:
        print(
            f"{c:<12}{results['global_sort']['skipped_percent'][c]:>12.1f}%"
            f"{results['zorder']['skipped_percent'][c]:>21.1f}%"
            f"{results['zorder_delta_rs']['skipped_percent'][c]:>19.1f}%"
        )
    print(
        f"{'mean':<12}{results['global_sort']['mean']:>12.1f}%{results['zorder']['mean']:>21.1f}%"
        f"{results['zorder_delta_rs']['mean']:>19.1f}%"
    )
    print(
        f"files: {results['global_sort']['files']} / {results['zorder']['files']} / "
        f"{results['zorder_delta_rs']['files']}; paper: Z-order >= {PAPER_ZORDER['min']:.0f}% per column, "
        f"{PAPER_ZORDER['mean']:.0f}% mean; sort {PAPER_SORT_MEAN:.0f}% mean"
    )
    if args.spark:
        spark = results["zorder_spark"]
        per_column = ", ".join(f"{c} {spark['skipped_percent'][c]:.1f}%" for c in COLUMNS)
        print(f"Z-order sorted by Spark: {per_column}; mean {spark['mean']:.1f}% ({spark['files']} files)")
    seconds = results["zorder_seconds"]
    print(f"Z-order time: deltaplane {seconds['deltaplane']:.2f}s, delta-rs {seconds['deltalake']:.2f}s")
    write_results(args.out, results)
    return results


if __name__ == "__main__":
    main()
