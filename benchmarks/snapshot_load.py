"""Snapshot load time and peak memory: deltaplane vs delta-rs (``deltalake``) on the same log.

A synthetic log of 1,000,000 add actions over 100 commits (no data files: only the log is read)
is loaded and its file URIs listed (``file_uris()``, as a query planner would) twice per engine:
from JSON commits only, and, after delta-rs writes a checkpoint, from
the checkpoint plus a tail of commits. Each measurement runs in a fresh subprocess so that peak
RSS (``ru_maxrss``) belongs to that load alone; the best of ``--repeat`` runs is reported.

    python benchmarks/snapshot_load.py [--files 1000000] [--commits 100] [--repeat 3]

Prints a table and writes ``benchmarks/results/snapshot_load.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.child_process import best_run, peak_rss, run_measure  # noqa: E402 (the root is on the path first)
from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "user", "type": "string", "nullable": True, "metadata": {}},
        {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
        {"name": "region", "type": "string", "nullable": True, "metadata": {}},
    ],
}
REGIONS = ["emea", "amer", "apac", "latam"]


def _commit_info(version: int) -> str:
    return json.dumps(
        {
            "commitInfo": {
                "timestamp": 1_700_000_000_000 + version,
                "operation": "WRITE",
                "operationParameters": {"mode": "Append"},
                "engineInfo": "bench",
            }
        }
    )


def _header() -> list[str]:
    metadata = {
        "id": str(uuid.UUID(int=7)),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": ["region"],
        "configuration": {},
        "createdTime": 1_700_000_000_000,
    }
    return [
        json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}),
        json.dumps({"metaData": metadata}),
    ]


def _add_line(n: int, rng: random.Random) -> str:
    """One add action shaped like a real writer's: a partition value and stats for 3 columns."""
    region = REGIONS[n % 4]
    lo = rng.randrange(1_000_000_000)
    stats = {
        "numRecords": 1000,
        "minValues": {"id": lo, "user": f"user{lo % 9973:05d}", "amount": 0.5},
        "maxValues": {"id": lo + 999, "user": f"user{(lo + 77) % 9973:05d}", "amount": 999.5},
        "nullCount": {"id": 0, "user": 0, "amount": 3},
    }
    add = {
        "path": f"region={region}/part-{n:08d}-{uuid.UUID(int=n)}.c000.snappy.parquet",
        "partitionValues": {"region": region},
        "size": 1_048_576 + n % 1000,
        "modificationTime": 1_700_000_000_000 + n,
        "dataChange": True,
        "stats": json.dumps(stats, separators=(",", ":")),
    }
    return json.dumps({"add": add}, separators=(",", ":"))


def synthesize(path: Path, files: int, commits: int, first_version: int = 0, first_file: int = 0) -> None:
    """Write commits ``first_version..`` holding ``files`` adds in total (no data files)."""
    log = path / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    per_commit = max(files // commits, 1)
    rng = random.Random(42 + first_version)
    for c in range(commits):
        version = first_version + c
        lines = [_commit_info(version), *(_header() if version == 0 else [])]
        start = first_file + c * per_commit
        lines += [_add_line(n, rng) for n in range(start, start + per_commit)]
        (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


# --- measurements (each in its own process) -------------------------------------------------


def measure(engine: str, path: str) -> dict:
    # Imports happen before the clock starts: the load is what is measured.
    if engine == "deltaplane":
        from deltaplane.engine import DeltaTable
    else:
        from deltalake import DeltaTable as RsTable
    start = time.perf_counter()
    if engine == "deltaplane":
        table = DeltaTable(path)
        version, files = table.version, len(table.file_uris())  # load + list, as delta-rs below
    else:
        table = RsTable(path)
        version, files = table.version(), len(table.file_uris())
    elapsed = time.perf_counter() - start
    return {
        "engine": engine,
        "seconds": elapsed,
        "peak_bytes": peak_rss(),
        "version": version,
        "files": files,
    }


def best_of(engine: str, path: Path, repeat: int) -> dict:
    return best_run([run_measure(__file__, engine, "--path", str(path)) for _ in range(repeat)])


def main(argv: list[str] | None = None) -> None:
    parser = command_line(__doc__, "snapshot_load")
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--tail", type=int, default=10, help="commits after the checkpoint")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--measure", choices=["deltaplane", "deltalake"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.path)))
        return

    workdir = Path(tempfile.mkdtemp(prefix="deltaplane-bench-"))
    try:
        table = workdir / "table"
        t0 = time.perf_counter()
        synthesize(table, args.files, args.commits)
        print(
            f"synthesized {args.files:,} adds in {args.commits} commits in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
        )
        results = {"files": args.files, "commits": args.commits}
        results["json_only"] = {e: best_of(e, table, args.repeat) for e in ("deltaplane", "deltalake")}

        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from deltalake import DeltaTable; DeltaTable(sys.argv[1]).create_checkpoint()",
                str(table),
            ],
            check=True,
        )
        print(f"delta-rs checkpoint written in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        # The tail: appends after the checkpoint, a tenth of a commit's worth of files each.
        tail_files = args.files // args.commits * args.tail // 10
        synthesize(table, tail_files, args.tail, first_version=args.commits, first_file=args.files)
        results["checkpoint_plus_tail"] = {
            e: best_of(e, table, args.repeat) for e in ("deltaplane", "deltalake")
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{'scenario':<24}{'engine':<12}{'seconds':>9}{'peak MB':>10}{'files':>10}")
    for scenario in ("json_only", "checkpoint_plus_tail"):
        for engine, r in results[scenario].items():
            mb = r["peak_bytes"] / 2**20
            print(f"{scenario:<24}{engine:<12}{r['seconds']:>9.2f}{mb:>10.0f}{r['files']:>10,}")
        ours, theirs = results[scenario]["deltaplane"], results[scenario]["deltalake"]
        results[scenario]["time_ratio"] = ours["seconds"] / theirs["seconds"]
        results[scenario]["memory_ratio"] = ours["peak_bytes"] / theirs["peak_bytes"]
        print(
            f"{'':<24}{'ratio':<12}{results[scenario]['time_ratio']:>9.2f}"
            f"{results[scenario]['memory_ratio']:>10.2f}  (deltaplane / delta-rs)"
        )
    write_results(args.out, results)


if __name__ == "__main__":
    main()
