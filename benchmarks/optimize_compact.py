"""OPTIMIZE (bin-packing compaction): deltaplane vs delta-rs ``optimize.compact`` on the same table.

Spark local[2] (``deltaplane.spark_jobs.compact``, bins rewritten in tasks, one commit on the driver) runs
on a third copy unless ``--no-spark``.

One table of ``--files`` (1,000) small files of about 1 MB each (6 columns: ids, timestamps,
doubles, ints, a low-cardinality string, a random 30-character string) is built once and copied;
each engine compacts its own copy to the same target size in a fresh process, so peak RSS
(``VmHWM``) belongs to that run alone. Both results are then read back and compared row for row
(as sorted id lists).

    python benchmarks/optimize_compact.py [--files 1000] [--target-mb 128] [--repeat 2]

Prints the table and writes ``benchmarks/results/optimize_compact.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.child_process import best_run, peak_rss, run_measure  # noqa: E402 (the root is on the path first)
from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)

ROWS_PER_FILE = 38_000  # about 1 MB of zstd Parquet with these columns


def batch(start: int, n: int, rng: np.random.Generator) -> pa.RecordBatch:
    ids = np.arange(start, start + n, dtype=np.int64)
    chars = rng.integers(ord("0"), ord("9") + 1, (n, 30), dtype=np.uint8)
    notes = pa.array(chars.reshape(-1).view("S30"), pa.binary(30)).cast(pa.binary()).cast(pa.string())
    categories = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    return pa.RecordBatch.from_pydict(
        {
            "id": ids,
            "ts": pa.array(1_700_000_000_000_000 + ids * 1000, pa.timestamp("us", tz="UTC")),
            "amount": rng.normal(100, 25, n),
            "qty": rng.integers(0, 1000, n, dtype=np.int32),
            "category": pa.array(categories[ids % len(categories)]),
            "note": notes,
        }
    )


def build(path: Path, files: int) -> None:
    """``files`` appends of one small file each (the shape streaming ingest leaves behind)."""
    from deltaplane.engine import DeltaTable

    rng = np.random.default_rng(5)
    first = batch(0, ROWS_PER_FILE, rng)
    table = DeltaTable.create(str(path), first.schema, properties={"delta.checkpointInterval": "100"})
    table.append(first)
    for f in range(1, files):
        table.append(batch(f * ROWS_PER_FILE, ROWS_PER_FILE, rng))


def measure(engine: str, path: str, target: int) -> dict:
    # Imports are not part of the operation (an Airflow worker pays them once).
    if engine == "deltaplane":
        from deltaplane.engine import DeltaTable

        start = time.perf_counter()
        metrics = DeltaTable(path).optimize(target_file_size=target)
        added, removed = metrics.num_files_added, metrics.num_files_removed
    elif engine == "spark":
        # The session (JVM, Python workers) is started and warmed first: a scheduled Spark
        # job pays that once. Peak RSS is the driver's Python process only.
        from deltaplane.spark_jobs import compact
        from deltaplane.spark_jobs.session import get_spark

        spark = get_spark("local[2]", app_name="deltaplane-bench")
        spark.sparkContext.setLogLevel("ERROR")
        spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
        start = time.perf_counter()
        metrics = compact.main(
            compact.build_parser().parse_args(["--table", path, "--target-size", str(target)])
        )
        added, removed = metrics["num_files_added"], metrics["num_files_removed"]
    else:
        from deltalake import DeltaTable

        start = time.perf_counter()
        metrics = DeltaTable(path).optimize.compact(target_size=target)
        added, removed = metrics["numFilesAdded"], metrics["numFilesRemoved"]
    return {
        "seconds": time.perf_counter() - start,
        "peak_bytes": peak_rss(),
        "files_added": added,
        "files_removed": removed,
    }


def run_child(engine: str, path: Path, target: int) -> dict:
    return run_measure(__file__, engine, "--path", str(path), "--target", str(target))


def sorted_ids(path: Path) -> list[int]:
    from deltaplane.engine import DeltaTable

    return sorted(DeltaTable(str(path)).to_arrow(columns=["id"]).column("id").to_pylist())


def main(argv: list[str] | None = None) -> dict:
    parser = command_line(__doc__, "optimize_compact")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--target-mb", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--measure", choices=["deltaplane", "deltalake", "spark"], help=argparse.SUPPRESS)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark local[2] run")
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--target", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.path, args.target)))
        return {}
    target = args.target_mb << 20
    work = Path(tempfile.mkdtemp(prefix="deltaplane-optimize-bench-"))
    results: dict = {"files": args.files, "target_bytes": target}
    try:
        base = work / "base"
        build(base, args.files)
        sizes = [f.stat().st_size for f in base.glob("*.parquet")]
        results["input_mb"] = sum(sizes) / 2**20
        results["input_file_mb"] = float(np.mean(sizes)) / 2**20
        print(
            f"built {len(sizes)} files, {results['input_mb']:.0f} MiB "
            f"({results['input_file_mb']:.2f} MiB each)",
            file=sys.stderr,
        )
        engines = ("deltaplane", "deltalake") if args.no_spark else ("deltaplane", "deltalake", "spark")
        for engine in engines:
            runs = []
            for i in range(args.repeat):
                copy = work / f"{engine}-{i}"
                shutil.copytree(base, copy)
                runs.append(run_child(engine, copy, target))
                if i == args.repeat - 1:
                    results[f"{engine}_ids_match"] = sorted_ids(copy) == sorted_ids(base)
                shutil.rmtree(copy)
            results[engine] = best_run(runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ours, theirs = results["deltaplane"], results["deltalake"]
    results["speed_ratio"] = theirs["seconds"] / ours["seconds"]  # > 1: deltaplane is faster
    results["memory_ratio"] = ours["peak_bytes"] / theirs["peak_bytes"]
    if "spark" in results:
        results["spark_speed_ratio"] = theirs["seconds"] / results["spark"]["seconds"]  # vs delta-rs
        results["spark_vs_engine"] = results["spark"]["seconds"] / ours["seconds"]
    print(f"\nOPTIMIZE of {args.files} files ({results['input_mb']:.0f} MiB) to {args.target_mb} MiB files")
    for name in ("deltaplane", "deltalake", "spark"):
        if name not in results:
            continue
        r = results[name]
        print(
            f"{name:<11}{r['seconds']:>7.2f}s  peak {r['peak_bytes'] / 2**20:>6.0f} MiB  "
            f"{r['files_removed']} -> {r['files_added']} files  rows match: {results[f'{name}_ids_match']}"
        )
    print(f"speed: {results['speed_ratio']:.2f}x delta-rs's; memory: {results['memory_ratio']:.2f}x")
    if "spark" in results:
        print(
            f"Spark local[2]: {results['spark_speed_ratio']:.2f}x delta-rs's speed, "
            f"{results['spark_vs_engine']:.2f}x the in-process engine's time (driver RSS only)"
        )
    write_results(args.out, results)
    return results


if __name__ == "__main__":
    main()
