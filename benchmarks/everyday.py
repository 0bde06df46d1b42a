"""Everyday calls on small tables: deltaplane vs delta-rs, same data, same run.

The calls a scheduled job makes many times a day, where fixed costs (thread pools, listings,
parsing what is already known) dominate:

1. open a table of 5 commits (``DeltaTable(path)``);
2. append 1,000 rows to a small table that is already open;
3. history of a 200-version table: opened and read once, and again on the open table (commit
   files never change, so deltaplane keeps what it read);
4. ``file_uris()`` of a small open table.

Each case alternates the two engines call by call (so drift on a busy machine hits both) and
reports the median over ``--reps`` calls after a warm-up.

    python benchmarks/everyday.py [--reps 200]

Prints a table and writes ``benchmarks/results/everyday.json``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.results_file import command_line  # noqa: E402 (the repository root goes on the path first)

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.float64())])


def batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "value": [i * 0.5 for i in ids]}, schema=SCHEMA
    )


def make_table(path: Path, commits: int, rows: int = 100) -> None:
    from deltalake import write_deltalake

    for i in range(commits):
        write_deltalake(str(path), batch(i * rows, rows), mode="append")


def alternate(calls: dict, reps: int, warmup: int) -> dict[str, list[float]]:
    """Time each engine's call ``reps`` times, alternating engines call by call."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(warmup + reps):
        for name, call in calls.items():
            start = time.perf_counter()
            call(i)
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times[name].append(elapsed)
    return times


def summary(times: dict[str, list[float]]) -> dict:
    ours, theirs = statistics.median(times["deltaplane"]), statistics.median(times["deltalake"])
    return {
        "deltaplane_ms": ours * 1000,
        "deltalake_ms": theirs * 1000,
        "ratio": ours / theirs,
        "deltaplane_mean_ms": statistics.fmean(times["deltaplane"]) * 1000,
        "deltalake_mean_ms": statistics.fmean(times["deltalake"]) * 1000,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = command_line(__doc__.splitlines()[0], "everyday")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--history-versions", type=int, default=200)
    args = parser.parse_args(argv)

    from deltalake import DeltaTable as RsTable
    from deltalake import write_deltalake

    from deltaplane.engine import DeltaTable

    work = Path(tempfile.mkdtemp(prefix="dp-bench-everyday-"))
    results: dict = {"reps": args.reps}
    try:
        small = work / "five"
        make_table(small, 5)
        results["open_5_commits"] = summary(
            alternate(
                {"deltaplane": lambda i: DeltaTable(str(small)), "deltalake": lambda i: RsTable(str(small))},
                args.reps,
                args.warmup,
            )
        )

        ours_path, theirs_path = work / "append-dp", work / "append-rs"
        make_table(ours_path, 5)
        shutil.copytree(ours_path, theirs_path)
        ours, theirs = DeltaTable(str(ours_path)), RsTable(str(theirs_path))
        new = [batch(1_000_000 + i * 1000, 1000) for i in range(args.warmup + args.reps)]
        results["append_1000_rows"] = summary(
            alternate(
                {
                    "deltaplane": lambda i: ours.append(new[i]),
                    "deltalake": lambda i: write_deltalake(theirs, new[i], mode="append"),
                },
                args.reps,
                args.warmup,
            )
        )
        results["append_1000_rows"]["checkpoint_intervals"] = {"deltaplane": 10, "deltalake": 100}

        long = work / "history"
        make_table(long, args.history_versions, rows=10)
        results["open_and_history_200_versions"] = summary(
            alternate(
                {
                    "deltaplane": lambda i: DeltaTable(str(long)).history(),
                    "deltalake": lambda i: RsTable(str(long)).history(),
                },
                max(args.reps // 4, 10),
                args.warmup,
            )
        )
        ours, theirs = DeltaTable(str(long)), RsTable(str(long))
        assert len(ours.history()) == len(theirs.history()) == args.history_versions
        results["history_200_versions"] = summary(
            alternate(
                {"deltaplane": lambda i: ours.history(), "deltalake": lambda i: theirs.history()},
                args.reps,
                args.warmup,
            )
        )

        ours, theirs = DeltaTable(str(small)), RsTable(str(small))
        assert sorted(ours.file_uris()) == sorted(theirs.file_uris())
        results["file_uris_small"] = summary(
            alternate(
                {"deltaplane": lambda i: ours.file_uris(), "deltalake": lambda i: theirs.file_uris()},
                args.reps,
                args.warmup,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'case':<30}{'deltaplane ms':>15}{'delta-rs ms':>13}{'ratio':>8}   (medians of {args.reps})")
    cases = ("open_5_commits", "append_1000_rows", "open_and_history_200_versions", "history_200_versions")
    for case in (*cases, "file_uris_small"):
        r = results[case]
        print(f"{case:<30}{r['deltaplane_ms']:>15.2f}{r['deltalake_ms']:>13.2f}{r['ratio']:>8.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
