"""Planning a filter by file statistics over a large log: deltaplane against delta-rs (issue 28).

A synthetic log of N add actions (``snapshot_load.py``'s: a partition column and min/max/null
statistics for three columns, no data files) in 10 commits is checkpointed, then 10 more commits
of N / 100 adds follow. The filter ``id < 0`` is false for every file by its statistics, so each
engine opens the table, plans the scan and prunes every file without reading data: the time is
the planning. deltaplane: ``DeltaTable(path).to_arrow(filter=...)``; delta-rs: ``QueryBuilder``
``select * ... where ...`` (DataFusion prunes by the same statistics). Two checkpoints are
measured: delta-rs's (statistics as JSON text only) and deltaplane's (JSON text and
``stats_parsed``, as Delta Spark writes them by default). Same run, engines alternating, median
of ``--repeat`` (3) after one untimed round.

    python benchmarks/stats_planning.py [--files 100000 1000000] [--repeat 3]

The logs are built once into ``benchmarks/data/stats_planning/`` (about a minute for 1M); prints
the table and, for the default sizes, writes ``benchmarks/results/stats_planning.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks import snapshot_load  # noqa: E402

DATA = HERE / "data" / "stats_planning"
FILTER = "id < 0"
DATA_FORMAT = 1  # bump when the generated logs change


def build(path: Path, files: int, writer: str) -> Path:
    done = path / f"_COMPLETE_{DATA_FORMAT}"
    if done.exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    snapshot_load.synthesize(path, files, 10)
    if writer == "delta-rs":
        import deltalake

        deltalake.DeltaTable(str(path)).create_checkpoint()
    else:
        from deltaplane.engine import DeltaTable

        DeltaTable(str(path)).create_checkpoint()
    snapshot_load.synthesize(path, files // 100, 10, first_version=10, first_file=files)
    done.write_text("")
    return path


def measure(path: Path, repeat: int) -> dict:
    import deltalake
    from deltalake import QueryBuilder

    from deltaplane.engine import DeltaTable

    def ours() -> int:
        return DeltaTable(str(path)).to_arrow(filter=FILTER).num_rows

    def theirs() -> int:
        query = QueryBuilder().register("t", deltalake.DeltaTable(str(path)))
        return query.execute(f"select * from t where {FILTER}").read_all().num_rows

    runs: dict[str, list[float]] = {"deltaplane": [], "delta-rs": []}
    rows = {}
    for i in range(1 + repeat):
        for name, call in (("deltaplane", ours), ("delta-rs", theirs)):
            start = time.perf_counter()
            rows[name] = call()
            if i:
                runs[name].append(time.perf_counter() - start)
    return {
        name: {"seconds": statistics.median(r), "runs": r, "rows": rows[name]} for name, r in runs.items()
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict = {"filter": FILTER, "repeat": args.repeat, "cases": []}
    for files in args.files:
        for writer in ("delta-rs", "deltaplane"):
            path = build(DATA / f"{files}-{writer}", files, writer)
            print(f"measuring {files:,} files, checkpoint by {writer}", file=sys.stderr, flush=True)
            results["cases"].append({"files": files, "checkpoint": writer, **measure(path, args.repeat)})
    print(f"Planning `{FILTER}` (prunes every file), median of {args.repeat}")
    print(f"{'files':>10}  {'checkpoint by':<14}{'deltaplane':>11}{'delta-rs':>10}{'ratio':>8}")
    for case in results["cases"]:
        ours, theirs = case["deltaplane"]["seconds"], case["delta-rs"]["seconds"]
        ratio = ours / theirs
        print(f"{case['files']:>10,}  {case['checkpoint']:<14}{ours:>10.3f}s{theirs:>9.3f}s{ratio:>7.2f}x")
    if args.files == [100_000, 1_000_000]:
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "stats_planning.json").write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
