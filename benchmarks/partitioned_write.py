"""Partitioned appends of unsorted rows, deltaplane vs delta-rs, same data, same run.

``--rows`` rows (10M: an id, a float, a short string and the partition key) in random order, as
a stream of 1M-row batches each of which spreads over every partition, are appended to a new
table partitioned by a key with ``--partitions`` distinct values (1,000 and 30,000), by
``write_table`` and by delta-rs's ``write_deltalake``. Each write runs in its own process (the
data is generated there from the same seed, outside the timed part), so each one's memory is its
own; cases are interleaved and each figure is the median of ``--repeat`` runs. Reported: seconds,
data files written, the write's peak resident memory above the process's before it (the peak is
reset once the data is built), and deltaplane over delta-rs.

A partition whose rows fit the target file size should get one file however unsorted the input:
deltaplane spills small partitions to local runs when its buffer is full and writes each
partition in turn at the end (engine/writer.py).

    python benchmarks/partitioned_write.py [--rows 10000000] [--partitions 1000,30000] [--repeat 1]

Prints the table and writes ``benchmarks/results/partitioned_write.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, sys, time
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
engine, path, rows, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(42)
ids = pa.array(rng.permutation(rows).astype(np.int64))
table = pa.table({
    "id": ids,
    "value": pc.multiply(ids, 0.5),
    "name": pc.binary_join_element_wise("n", pc.cast(pc.remainder(ids, 1000), pa.string()), ""),
    "p": pc.remainder(ids, partitions),
})
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak resident size: only the write's is measured
before = status("VmRSS")
source = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=1_000_000))
if engine == "deltaplane":
    from deltaplane.engine import write_table
    start = time.perf_counter()
    write_table(path, source, partition_by=["p"])
else:
    from deltalake import write_deltalake
    start = time.perf_counter()
    write_deltalake(path, source, partition_by=["p"])
seconds = time.perf_counter() - start
peak = (status("VmHWM") - before) / 1024
print(json.dumps({"seconds": seconds, "peak_rss_mib": peak, "data_bytes": table.nbytes}))
"""


def run(engine: str, root: Path, rows: int, partitions: int) -> dict:
    path = root / f"{engine}-{partitions}"
    shutil.rmtree(path, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, engine, str(path), str(rows), str(partitions)],
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["files"] = sum(1 for f in path.rglob("*.parquet") if "_delta_log" not in f.parts)
    shutil.rmtree(path, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--partitions", default="1000,30000")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="partitioned-write-") as tmp:
        root = Path(tmp)
        for _ in range(args.repeat):
            for partitions in counts:
                for engine in ("deltaplane", "delta-rs"):
                    runs.setdefault(f"{engine} {partitions}", []).append(
                        run(engine, root, args.rows, partitions)
                    )
    results = {}
    print(f"{'partitions':>10}  {'engine':<10} {'seconds':>8} {'files':>7} {'+peak RSS MiB':>13}")
    for partitions in counts:
        row = {}
        for engine in ("deltaplane", "delta-rs"):
            measured = runs[f"{engine} {partitions}"]
            row[engine] = {
                "seconds": statistics.median(m["seconds"] for m in measured),
                "files": statistics.median(m["files"] for m in measured),
                "peak_rss_mib": statistics.median(m["peak_rss_mib"] for m in measured),
            }
            r = row[engine]
            print(
                f"{partitions:>10}  {engine:<10} {r['seconds']:>8.2f} {r['files']:>7.0f}"
                f" {r['peak_rss_mib']:>12.0f}"
            )
        row["ratio_seconds"] = round(row["deltaplane"]["seconds"] / row["delta-rs"]["seconds"], 2)
        print(f"{'':>10}  deltaplane / delta-rs: {row['ratio_seconds']:.2f}x")
        results[str(partitions)] = row
    out = HERE / "results" / "partitioned_write.json"
    out.write_text(
        json.dumps({"rows": args.rows, "repeat": args.repeat, "results": results, "runs": runs}, indent=1)
    )


if __name__ == "__main__":
    main()
