"""Write-path benchmarks: deltaplane vs delta-rs (and vs plain pyarrow) in the same run.

1. Small-append latency on a table that already has 1,000 versions (the same table, copied, for
   both engines): median, p90 and mean over ``--appends`` appends of 100 rows.
2. Bulk write throughput: about 1 GB of zstd Parquet from the same pre-generated batches, written
   by pyarrow alone (the physical floor: same files, no log), by deltaplane and by delta-rs.
3. Checkpoint write for a log of 1,000,000 files (100 commits): load + write checkpoint, each
   engine in a fresh process.

    python benchmarks/write_commit.py [--versions 1000] [--appends 30] [--bulk-gb 1.0] [--files 1000000]

Prints a table and writes ``benchmarks/results/write_commit.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)

SMALL_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.float64())])


def small_batch(i: int) -> pa.Table:
    ids = np.arange(i * 100, (i + 1) * 100, dtype=np.int64)
    return pa.table({"id": ids, "name": [f"n{x}" for x in ids], "value": ids * 0.5}, schema=SMALL_SCHEMA)


# --- 1. small appends -------------------------------------------------------------------------


def build_versioned_table(path: Path, versions: int) -> None:
    from deltalake import write_deltalake

    for i in range(versions):
        write_deltalake(str(path), small_batch(i), mode="append")


def append_latencies(engine: str, path: Path, appends: int, offset: int) -> list[float]:
    times = []
    if engine == "deltaplane":
        from deltaplane.engine import DeltaTable

        table = DeltaTable(str(path))
        for i in range(appends):
            start = time.perf_counter()
            table.append(small_batch(offset + i))
            times.append(time.perf_counter() - start)
    else:
        from deltalake import DeltaTable as RsTable
        from deltalake import write_deltalake

        table = RsTable(str(path))  # kept open, as ours is: each write updates it incrementally
        for i in range(appends):
            start = time.perf_counter()
            write_deltalake(table, small_batch(offset + i), mode="append")
            times.append(time.perf_counter() - start)
    return times


# --- 2. bulk throughput -----------------------------------------------------------------------


def bulk_batches(total_bytes: int) -> list[pa.RecordBatch]:
    """Deterministic, poorly compressible data (so Parquet bytes track Arrow bytes)."""
    rng = np.random.default_rng(7)
    rows = 1 << 20
    batches, size = [], 0
    while size < total_bytes:
        n = rows
        ids = rng.integers(0, 2**62, n)
        batch = pa.record_batch(
            {
                "id": ids,
                "ts": pa.array(
                    rng.integers(1_600_000_000_000_000, 1_700_000_000_000_000, n), pa.timestamp("us", "UTC")
                ),
                "amount": rng.normal(100, 30, n),
                "qty": rng.integers(0, 1000, n).astype(np.int32),
                "code": pa.array(rng.integers(0, 2**40, n)).cast(pa.string()),
                "flag": rng.integers(0, 2, n).astype(bool),
            }
        )
        batches.append(batch)
        size += batch.nbytes
    return batches


def pyarrow_only(path: Path, batches: list[pa.RecordBatch], target: int) -> int:
    """The floor: the same data into zstd Parquet files of the target size, no Delta log."""
    path.mkdir(parents=True, exist_ok=True)
    written, index, writer, sink, pending = 0, 0, None, None, []
    schema = batches[0].schema

    def open_next():
        nonlocal index
        index += 1
        s = pa.OSFile(str(path / f"part-{index:05d}.zstd.parquet"), "wb")
        return s, pq.ParquetWriter(s, schema, compression="zstd")

    for batch in batches:
        if writer is None:
            sink, writer = open_next()
        pending.append(batch)
        if sum(b.nbytes for b in pending) >= 64 << 20:
            table = pa.Table.from_batches(pending)
            writer.write_table(table, row_group_size=table.num_rows)
            pending = []
            if sink.tell() >= target:
                writer.close()
                written += sink.tell()
                sink.close()
                writer = None
    if pending:
        if writer is None:
            sink, writer = open_next()
        table = pa.Table.from_batches(pending)
        writer.write_table(table, row_group_size=table.num_rows)
    if writer is not None:
        writer.close()
        written += sink.tell()
        sink.close()
    return written


def bulk(engine: str, path: Path, batches: list[pa.RecordBatch]) -> tuple[float, int]:
    reader = pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches))
    start = time.perf_counter()
    if engine == "pyarrow":
        written = pyarrow_only(path, batches, 128 << 20)
    elif engine == "deltaplane":
        from deltaplane.engine import DeltaTable

        table = DeltaTable.create(str(path), batches[0].schema)
        result = table.append(reader)
        written = int(result.operation_metrics["numOutputBytes"])
    else:
        from deltalake import write_deltalake

        write_deltalake(str(path), reader, mode="append")
        written = sum(f.stat().st_size for f in path.glob("*.parquet"))
    return time.perf_counter() - start, written


# --- 3. checkpoint of a 1M-file log ---------------------------------------------------------------


def checkpoint_child(engine: str, path: str) -> dict:
    if engine == "deltaplane":
        from deltaplane.engine.checkpoint_writer import write_checkpoint
        from deltaplane.engine.storage import open_store
    else:
        from deltalake import DeltaTable
    start = time.perf_counter()
    if engine == "deltaplane":
        store = open_store(path)
        from deltaplane.engine.snapshot import load_snapshot

        snapshot = load_snapshot(store)
        write_checkpoint(store, snapshot.version, snapshot)
    else:
        DeltaTable(path).create_checkpoint()
    seconds = time.perf_counter() - start
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    return {"engine": engine, "seconds": seconds, "peak_bytes": peak}


def run_checkpoint(engine: str, template: Path, work: Path) -> dict:
    table = work / f"ckpt-{engine}"
    shutil.copytree(template, table)
    out = subprocess.run(
        [sys.executable, __file__, "--checkpoint-child", engine, str(table)],
        check=True,
        capture_output=True,
        text=True,
        cwd=HERE.parent,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    checkpoint = sorted((table / "_delta_log").glob("*.checkpoint.parquet"))
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["checkpoint_bytes"] = checkpoint[-1].stat().st_size if checkpoint else 0
    shutil.rmtree(table)
    return result


# --- driver -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = command_line(__doc__, "write_commit")
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--appends", type=int, default=30)
    parser.add_argument("--bulk-gb", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--checkpoint-child", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.checkpoint_child:
        print(json.dumps(checkpoint_child(*args.checkpoint_child)))
        return

    work = Path(tempfile.mkdtemp(prefix="deltaplane-write-bench-"))
    results: dict = {}
    try:
        # 1. small appends on a long table
        base = work / "versioned"
        t0 = time.perf_counter()
        build_versioned_table(base, args.versions)
        print(f"built a {args.versions}-version table in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
        copies = {e: work / f"append-{e}" for e in ("deltaplane", "deltalake")}
        for copy in copies.values():
            shutil.copytree(base, copy)
        latencies = {}
        for engine, copy in copies.items():
            latencies[engine] = append_latencies(engine, copy, args.appends, offset=args.versions)
        results["small_append"] = {
            e: {
                "median_s": statistics.median(v),
                "p90_s": float(np.percentile(v, 90)),
                "mean_s": statistics.mean(v),
            }
            for e, v in latencies.items()
        }
        results["small_append"]["median_ratio"] = (
            results["small_append"]["deltaplane"]["median_s"]
            / results["small_append"]["deltalake"]["median_s"]
        )
        results["small_append"]["mean_ratio"] = (
            results["small_append"]["deltaplane"]["mean_s"] / results["small_append"]["deltalake"]["mean_s"]
        )
        shutil.rmtree(base)
        for copy in copies.values():
            shutil.rmtree(copy)

        # 2. bulk throughput
        batches = bulk_batches(int(args.bulk_gb * (1 << 30)))
        arrow_bytes = sum(b.nbytes for b in batches)
        bulk_results: dict = {}
        for _round in range(2):  # interleaved rounds, best kept: disk and page-cache noise is large
            for engine in ("pyarrow", "deltaplane", "deltalake"):
                target = work / f"bulk-{engine}"
                seconds, written = bulk(engine, target, batches)
                shutil.rmtree(target)
                if engine in bulk_results and bulk_results[engine]["seconds"] <= seconds:
                    continue
                bulk_results[engine] = {
                    "seconds": seconds,
                    "parquet_bytes": written,
                    "mb_per_s": arrow_bytes / seconds / 2**20,
                }
        bulk_results["arrow_bytes"] = arrow_bytes
        bulk_results["deltaplane_vs_pyarrow_throughput"] = (
            bulk_results["pyarrow"]["seconds"] / bulk_results["deltaplane"]["seconds"]
        )
        bulk_results["deltaplane_vs_deltalake_throughput"] = (
            bulk_results["deltalake"]["seconds"] / bulk_results["deltaplane"]["seconds"]
        )
        results["bulk"] = bulk_results
        del batches

        # 3. checkpoint of a big log
        from benchmarks.snapshot_load import synthesize

        template = work / "big-log"
        synthesize(template, args.files, args.commits)
        results["checkpoint"] = {e: run_checkpoint(e, template, work) for e in ("deltaplane", "deltalake")}
        results["checkpoint"]["time_ratio"] = (
            results["checkpoint"]["deltaplane"]["seconds"] / results["checkpoint"]["deltalake"]["seconds"]
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    sa, bk, ck = results["small_append"], results["bulk"], results["checkpoint"]
    print(f"\nsmall append on a {args.versions}-version table ({args.appends} appends of 100 rows)")
    for e in ("deltaplane", "deltalake"):
        print(
            f"  {e:<11} median {sa[e]['median_s'] * 1000:7.1f} ms   p90 {sa[e]['p90_s'] * 1000:7.1f} ms"
            f"   mean {sa[e]['mean_s'] * 1000:7.1f} ms"
        )
    print(f"  ratio (deltaplane / delta-rs): median {sa['median_ratio']:.2f}, mean {sa['mean_ratio']:.2f}")
    print(f"\nbulk write of {bk['arrow_bytes'] / 2**30:.2f} GiB of Arrow data")
    for e in ("pyarrow", "deltaplane", "deltalake"):
        mib = bk[e]["parquet_bytes"] / 2**20
        print(f"  {e:<11} {bk[e]['seconds']:6.2f} s  {bk[e]['mb_per_s']:7.1f} MiB/s  {mib:8.0f} MiB")
    print(
        f"  deltaplane throughput: {bk['deltaplane_vs_pyarrow_throughput']:.2f}x pyarrow alone, "
        f"{bk['deltaplane_vs_deltalake_throughput']:.2f}x delta-rs"
    )
    print(f"\ncheckpoint of a {args.files:,}-file log (load + write, fresh process)")
    for e in ("deltaplane", "deltalake"):
        print(
            f"  {e:<11} {ck[e]['seconds']:6.2f} s  peak {ck[e]['peak_bytes'] / 2**20:6.0f} MB"
            f"  file {ck[e]['checkpoint_bytes'] / 2**20:5.0f} MiB"
        )
    print(f"  time ratio (deltaplane / delta-rs): {ck['time_ratio']:.2f}")
    write_results(args.out, results)


if __name__ == "__main__":
    main()
